// The pooling allocator (pooling_allocator.hpp): exact-size pools and a
// smallest-block pool (Python's "best_fit" policy) that splits and coalesces, over real host memory.
#include "emel/memory/runtime/pooling_allocator.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include "emel/memory/core/checked_math.hpp"

namespace emel::memory {

PoolingAllocator::PoolingAllocator(PoolPolicy policy, uint64_t max_per_size, uint64_t alignment)
    : policy_(policy), max_per_size_(max_per_size), alignment_(std::max<uint64_t>(alignment, 16)) {
    if (!is_power_of_two(alignment)) throw std::invalid_argument("alignment must be a power of two");
}

PoolingAllocator::~PoolingAllocator() {
    if (policy_ == PoolPolicy::ExactSize) {
        for (auto& [size, list] : exact_free_)
            for (void* p : list) std::free(p);
        for (auto& [p, info] : live_) std::free(p);
    } else {
        for (auto& c : chunks_) std::free(c.base);
    }
}

uint64_t PoolingAllocator::round(uint64_t size) const {
    auto r = checked_align_up(std::max<uint64_t>(size, 1), alignment_);
    if (!r) throw std::bad_alloc();
    return *r;
}

void* PoolingAllocator::host_alloc(uint64_t size) {
    void* p = nullptr;
    if (size > SIZE_MAX || posix_memalign(&p, static_cast<size_t>(alignment_), static_cast<size_t>(size)) != 0 ||
        p == nullptr)
        throw std::bad_alloc();
    ++stats_.allocated;
    host_bytes_ += size;
    note_host();
    return p;
}

void PoolingAllocator::note_host() { stats_.peak_bytes = std::max(stats_.peak_bytes, host_bytes_); }

void* PoolingAllocator::allocate(uint64_t size) {
    ++stats_.requests;
    const uint64_t rounded = round(size);
    void* p = policy_ == PoolPolicy::ExactSize ? exact_allocate(rounded) : block_allocate(rounded);
    stats_.bytes_in_use += rounded;
    return p;
}

bool PoolingAllocator::free(void* p) {
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const Live info = it->second;
    live_.erase(it);
    stats_.bytes_in_use -= info.size;
    if (policy_ == PoolPolicy::ExactSize)
        exact_free(p, info.size);
    else
        block_free(info.chunk, info.offset);
    return true;
}

// ---- exact size --------------------------------------------------------------
void* PoolingAllocator::exact_allocate(uint64_t size) {
    auto it = exact_free_.find(size);
    void* p;
    if (it != exact_free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        --stats_.pooled;
        stats_.bytes_pooled -= size;
        ++stats_.reused;
    } else {
        p = host_alloc(size);
    }
    live_[p] = Live{size, 0, 0};
    return p;
}

void PoolingAllocator::exact_free(void* p, uint64_t size) {
    auto& list = exact_free_[size];
    if (list.size() < max_per_size_) {
        list.push_back(p);
        ++stats_.pooled;
        stats_.bytes_pooled += size;
    } else {
        std::free(p);
        host_bytes_ -= size;
        ++stats_.released;
    }
}

// ---- smallest block (Python's "best_fit") -------------------------------------
void* PoolingAllocator::block_allocate(uint64_t size) {
    auto it = free_blocks_.lower_bound({size, 0, 0});
    uint32_t chunk;
    uint64_t offset;
    if (it != free_blocks_.end()) {
        const auto [block_size, c, off] = *it;
        free_blocks_.erase(it);
        --stats_.pooled;
        stats_.bytes_pooled -= block_size;
        ++stats_.reused;
        chunk = c;
        offset = off;
        auto& blocks = chunks_[c].blocks;
        blocks[off] = {size, false};
        // Split: the rest stays free when it can hold an aligned request.
        if (block_size > size) {
            const uint64_t rest = block_size - size;
            blocks[off + size] = {rest, true};
            free_blocks_.insert({rest, c, off + size});
            ++stats_.pooled;
            stats_.bytes_pooled += rest;
        }
    } else {
        Chunk c;
        c.base = static_cast<uint8_t*>(host_alloc(size));
        c.size = size;
        c.blocks[0] = {size, false};
        chunk = static_cast<uint32_t>(chunks_.size());
        offset = 0;
        chunks_.push_back(std::move(c));
    }
    void* p = chunks_[chunk].base + offset;
    live_[p] = Live{size, chunk, offset};
    return p;
}

void PoolingAllocator::block_free(uint32_t chunk, uint64_t offset) {
    auto& blocks = chunks_[chunk].blocks;
    auto it = blocks.find(offset);
    uint64_t start = offset, size = it->second.first;
    auto drop_free = [&](std::map<uint64_t, std::pair<uint64_t, bool>>::iterator b) {
        free_blocks_.erase({b->second.first, chunk, b->first});
        --stats_.pooled;
        stats_.bytes_pooled -= b->second.first;
    };
    // Coalesce with the free neighbours on both sides.
    auto next = std::next(it);
    if (next != blocks.end() && next->second.second) {
        size += next->second.first;
        drop_free(next);
        blocks.erase(next);
    }
    if (it != blocks.begin()) {
        auto prev = std::prev(it);
        if (prev->second.second) {
            start = prev->first;
            size += prev->second.first;
            drop_free(prev);
            blocks.erase(it);
            it = prev;
        }
    }
    it->second = {size, true};
    free_blocks_.insert({size, chunk, start});
    ++stats_.pooled;
    stats_.bytes_pooled += size;
}

void PoolingAllocator::trim() {
    if (policy_ == PoolPolicy::ExactSize) {
        for (auto& [size, list] : exact_free_) {
            for (void* p : list) {
                std::free(p);
                host_bytes_ -= size;
                ++stats_.released;
            }
            stats_.pooled -= list.size();
            stats_.bytes_pooled -= size * list.size();
            list.clear();
        }
        return;
    }
    // A chunk is fully free when its one block is free; its index stays
    // reserved (empty) so live block handles keep their chunk numbers.
    for (uint32_t c = 0; c < chunks_.size(); ++c) {
        auto& ch = chunks_[c];
        if (ch.base == nullptr || ch.blocks.size() != 1 || !ch.blocks.begin()->second.second) continue;
        free_blocks_.erase({ch.size, c, 0});
        --stats_.pooled;
        stats_.bytes_pooled -= ch.size;
        std::free(ch.base);
        host_bytes_ -= ch.size;
        ++stats_.released;
        ch.base = nullptr;
        ch.blocks.clear();
        ch.size = 0;
    }
}

PoolStats replay_trace(PoolPolicy policy, uint64_t max_per_size, uint64_t alignment,
                       const std::vector<uint64_t>& size, const std::vector<uint8_t>& is_alloc,
                       const std::vector<uint32_t>& id) {
    if (is_alloc.size() != id.size()) throw std::invalid_argument("is_alloc and id differ in length");
    PoolingAllocator pool(policy, max_per_size, alignment);
    std::vector<void*> ptr(size.size(), nullptr);
    for (size_t k = 0; k < id.size(); ++k) {
        const uint32_t b = id[k];
        if (b >= size.size()) throw std::invalid_argument("trace names an unknown buffer");
        if (is_alloc[k]) {
            if (ptr[b] != nullptr) throw std::invalid_argument("buffer allocated twice without a free");
            ptr[b] = pool.allocate(size[b]);
        } else {
            if (ptr[b] == nullptr) throw std::invalid_argument("buffer freed before it was allocated");
            pool.free(ptr[b]);
            ptr[b] = nullptr;
        }
    }
    return pool.stats();
}

}  // namespace emel::memory
