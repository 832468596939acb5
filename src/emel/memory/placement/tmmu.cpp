// tmmu on bare buffers, for place(strategy="tmmu") and auto's first pass
// (auto_search.cpp): the slot colouring of core/slots.cpp on Buffers.
#include <algorithm>
#include <functional>
#include <queue>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/graph.hpp"
#include "emel/memory/placement/placement.hpp"

namespace emel::memory {

// tmmu on bare buffers (place(strategy="tmmu")): the same sweep without the
// in-place rule, then the aligned prefix sums of layout.cpp.
Placement place_slots(const Buffers& b) {
    const size_t n = b.count();
    std::vector<uint32_t> order(n);
    for (uint32_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
        if (b.lower[x] != b.lower[y]) return b.lower[x] < b.lower[y];
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        return b.rank[x] < b.rank[y];
    });
    std::vector<uint32_t> slot(n, kNone), holder, first_holder;  // first_holder: per slot
    std::vector<uint64_t> slot_size, slot_align;
    std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> free_slots;
    using Active = std::pair<uint64_t, uint32_t>;  // (upper, buffer)
    std::priority_queue<Active, std::vector<Active>, std::greater<>> active;
    Placement out;
    std::vector<uint32_t> skipped;
    for (uint32_t x : order) {
        while (!active.empty() && active.top().first <= b.lower[x]) {
            free_slots.push(slot[active.top().second]);
            active.pop();
        }
        uint32_t chosen = kNone;
        skipped.clear();
        while (!free_slots.empty()) {
            const uint32_t s = free_slots.top();
            free_slots.pop();
            bool bad = false;
            if (b.has_partners())
                for (uint32_t q : b.partners[x]) bad = bad || slot[q] == s;
            if (bad) {
                skipped.push_back(s);
                continue;
            }
            chosen = s;
            break;
        }
        for (uint32_t s : skipped) free_slots.push(s);
        if (chosen == kNone) {
            chosen = static_cast<uint32_t>(slot_size.size());
            slot_size.push_back(0);
            slot_align.push_back(1);
            first_holder.push_back(x);
        }
        slot[x] = chosen;
        slot_size[chosen] = std::max(slot_size[chosen], b.size[x]);
        slot_align[chosen] = std::max(slot_align[chosen], b.alignment[x]);
        if (b.lower[x] < b.upper[x]) active.emplace(b.upper[x], x);
        else free_slots.push(chosen);
        out.work += kGreedyUnitsPerStep;
    }
    std::vector<uint64_t> slot_offset(slot_size.size(), 0);
    uint64_t end = 0;
    for (size_t k = 0; k < slot_size.size(); ++k) {
        auto off = checked_align_up(end, slot_align[k]);
        auto e = off ? checked_add(*off, slot_size[k]) : std::nullopt;
        if (!e) throw PlacementOverflow(first_holder[k]);  // as layout.cpp: the slot's first holder
        slot_offset[k] = *off;
        end = *e;
    }
    out.offset.resize(n);
    for (size_t x = 0; x < n; ++x) out.offset[x] = slot_offset[slot[x]];
    out.end = end;
    out.method = "tmmu";
    return out;
}

}  // namespace emel::memory
