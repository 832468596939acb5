// The orders the greedy passes place buffers in (docs/strategies.md §2, §4):
// by size (greedy_by_size's own), and auto's by lifetime, by conflict degree
// x size and by the peak of live bytes over each lifetime.
#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

namespace {

unsigned bits_of(uint64_t v) { return v ? 64 - static_cast<unsigned>(__builtin_clzll(v)) : 0; }

// greedy_by_size's order by a radix sort, where it can be had as one: the
// ranks rise with the buffers' numbering (rows, as place() numbers them),
// so a stable sort breaks the last ties by rank, and (largest size first,
// earliest lower, longest lifetime) packs into one 64-bit key. Eight bits
// a pass, least significant first, skipping the digits all keys share: a
// million buffers in a few passes over 16-byte records, where a comparison
// sort makes twenty. Empty where it cannot (the caller sorts by comparing).
std::vector<uint32_t> order_by_size_in_passes(const Buffers& b) {
    const size_t n = b.count();
    for (size_t x = 1; x < n; ++x)
        if (b.rank[x] <= b.rank[x - 1]) return {};
    uint64_t size_lo = UINT64_MAX, size_hi = 0, lower_lo = UINT64_MAX, lower_hi = 0, length_lo = UINT64_MAX,
             length_hi = 0;
    for (size_t x = 0; x < n; ++x) {
        const uint64_t length = b.upper[x] - b.lower[x];  // as the comparison below takes it
        size_lo = std::min(size_lo, b.size[x]);
        size_hi = std::max(size_hi, b.size[x]);
        lower_lo = std::min(lower_lo, b.lower[x]);
        lower_hi = std::max(lower_hi, b.lower[x]);
        length_lo = std::min(length_lo, length);
        length_hi = std::max(length_hi, length);
    }
    const unsigned length_bits = bits_of(length_hi - length_lo), lower_bits = bits_of(lower_hi - lower_lo);
    if (length_bits + lower_bits + bits_of(size_hi - size_lo) > 64) return {};
    struct Record { uint64_t key; uint32_t x; };
    std::vector<Record> in(n), out(n);
    constexpr unsigned kDigits = 8;
    std::vector<std::array<uint32_t, 256>> count(kDigits);
    for (auto& c : count) c.fill(0);
    for (uint32_t x = 0; x < n; ++x) {
        const uint64_t length = b.upper[x] - b.lower[x];
        uint64_t key = length_hi - length;
        if (lower_bits) key |= (b.lower[x] - lower_lo) << length_bits;
        if (length_bits + lower_bits < 64) key |= (size_hi - b.size[x]) << (length_bits + lower_bits);
        in[x] = Record{key, x};
        for (unsigned d = 0; d < kDigits; ++d) ++count[d][(key >> (8 * d)) & 255];
    }
    for (unsigned d = 0; d < kDigits; ++d) {
        auto& c = count[d];
        if (*std::max_element(c.begin(), c.end()) == n) continue;  // every key has this digit
        uint32_t at = 0;
        for (uint32_t& k : c) at += std::exchange(k, at);
        for (const Record& r : in) out[c[(r.key >> (8 * d)) & 255]++] = r;
        in.swap(out);
    }
    std::vector<uint32_t> order(n);
    for (size_t k = 0; k < n; ++k) order[k] = in[k].x;
    return order;
}

}  // namespace

std::vector<uint32_t> order_by_size(const Buffers& b) {
    if (b.count() >= kSortOnThreadsFrom) {
        std::vector<uint32_t> order = order_by_size_in_passes(b);
        if (!order.empty()) return order;
    }
    // The keys sit beside each buffer's index, so a million-buffer sort
    // compares contiguous records, not four scattered arrays.
    struct Key { uint64_t size, lower, length; uint32_t rank, x; };
    std::vector<Key> keys(b.count());
    for (uint32_t x = 0; x < b.count(); ++x)
        keys[x] = Key{b.size[x], b.lower[x], b.upper[x] - b.lower[x], b.rank[x], x};
    sort_on_threads(keys.begin(), keys.end(), [](const Key& p, const Key& q) {
        // Among equal sizes, earlier first: equal-size buffers then stack in
        // time order and leave fewer holes (measured on the idealloc traces:
        // +0.76% over the bound on pangu_2.6B where longest-first gave +3.3%).
        if (p.size != q.size) return p.size > q.size;
        if (p.lower != q.lower) return p.lower < q.lower;
        if (p.length != q.length) return p.length > q.length;
        return p.rank < q.rank;
    });
    std::vector<uint32_t> order(b.count());
    for (size_t k = 0; k < keys.size(); ++k) order[k] = keys[k].x;
    return order;
}

std::vector<uint32_t> order_by_lifetime(const Buffers& b) {
    std::vector<uint32_t> order(b.count());
    std::iota(order.begin(), order.end(), 0u);
    sort_on_threads(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
        const uint64_t lx = b.upper[x] - b.lower[x], ly = b.upper[y] - b.lower[y];
        if (lx != ly) return lx > ly;
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        if (b.lower[x] != b.lower[y]) return b.lower[x] < b.lower[y];
        return b.rank[x] < b.rank[y];
    });
    return order;
}

std::vector<uint32_t> order_by_conflict_size(const Buffers& b) {
    // A buffer's conflict degree: the buffers live with it at some step,
    // counted with two sorted arrays (those that start before it ends, less
    // those that end before it starts, less itself).
    const size_t n = b.count();
    std::vector<uint64_t> lowers, uppers;
    lowers.reserve(n);
    uppers.reserve(n);
    for (size_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        lowers.push_back(b.lower[x]);
        uppers.push_back(b.upper[x]);
    }
    sort_on_threads(lowers.begin(), lowers.end(), std::less<uint64_t>());
    sort_on_threads(uppers.begin(), uppers.end(), std::less<uint64_t>());
    std::vector<unsigned __int128> key(n, 0);  // degree x size; never-live rows 0
    for (size_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        const size_t started = std::lower_bound(lowers.begin(), lowers.end(), b.upper[x]) - lowers.begin();
        const size_t ended = std::upper_bound(uppers.begin(), uppers.end(), b.lower[x]) - uppers.begin();
        key[x] = static_cast<unsigned __int128>(started - ended - 1) * b.size[x];
    }
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    sort_on_threads(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
        if (key[x] != key[y]) return key[x] > key[y];
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        if (b.lower[x] != b.lower[y]) return b.lower[x] < b.lower[y];
        return b.rank[x] < b.rank[y];
    });
    return order;
}

std::vector<uint32_t> order_by_live_peak(const Buffers& b) {
    // Live bytes rise only where a buffer starts, so the peak over a
    // buffer's lifetime is the largest of the totals at the starts inside it:
    // the totals at the distinct starts, by a sweep, then a range maximum
    // per buffer (a bottom-up segment tree: 2 words per start, not the
    // sparse table's log n).
    const size_t n = b.count();
    std::vector<uint64_t> starts;
    starts.reserve(n);
    for (size_t x = 0; x < n; ++x)
        if (b.lower[x] < b.upper[x]) starts.push_back(b.lower[x]);
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    const size_t m = starts.size();
    // Each live buffer's starts [first, after): its own, up to the first
    // start at or after its end (where it is live no more).
    std::vector<uint32_t> first(n, 0), after(n, 0);
    for (size_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        first[x] = static_cast<uint32_t>(std::lower_bound(starts.begin(), starts.end(), b.lower[x]) - starts.begin());
        after[x] = static_cast<uint32_t>(std::lower_bound(starts.begin(), starts.end(), b.upper[x]) - starts.begin());
    }
    // Bytes starting at, and ending at or before, each distinct start.
    std::vector<uint64_t> tree(2 * std::max<size_t>(m, 1), 0);
    {
        std::vector<unsigned __int128> delta(m + 1, 0), gone(m + 1, 0);
        for (size_t x = 0; x < n; ++x) {
            if (b.lower[x] >= b.upper[x]) continue;
            delta[first[x]] += b.size[x];
            gone[after[x]] += b.size[x];
        }
        unsigned __int128 live = 0;
        for (size_t i = 0; i < m; ++i) {
            live += delta[i];
            live -= gone[i];
            tree[m + i] = live > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(live);
        }
    }
    for (size_t i = m; i-- > 1;) tree[i] = std::max(tree[2 * i], tree[2 * i + 1]);
    std::vector<uint64_t> key(n, 0);  // never-live rows 0
    for (size_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        size_t l = first[x] + m, r = after[x] + m;
        uint64_t best = 0;
        for (; l < r; l >>= 1, r >>= 1) {
            if (l & 1) best = std::max(best, tree[l++]);
            if (r & 1) best = std::max(best, tree[--r]);
        }
        key[x] = best;
    }
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    sort_on_threads(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
        if (key[x] != key[y]) return key[x] > key[y];
        const uint64_t lx = b.upper[x] - b.lower[x], ly = b.upper[y] - b.lower[y];
        if (lx != ly) return lx > ly;
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        return b.rank[x] < b.rank[y];
    });
    return order;
}

}  // namespace emel::memory
