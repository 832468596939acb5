// A pooling allocator for runtimes with dynamic shapes, where no static plan
// exists: freed buffers are kept and handed out again instead of going back to
// the host. Two policies (docs/arenas.md, "Pooling allocator"):
//  - ExactSize: one free list per byte size, at most `max_per_size` buffers
//    each; a request is served only by a buffer of exactly its size.
//  - SmallestBlock (Python's policy "best_fit"; not the best_fit placement
//    strategy): freed blocks are kept in chunks; a request takes the smallest
//    free block that fits (ties: lowest chunk, then lowest offset), split when
//    the rest is worth keeping, and neighbouring free blocks coalesce.
// Deterministic: ordered containers only; addresses never decide an order.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace emel::memory {

enum class PoolPolicy : uint8_t { ExactSize, SmallestBlock };

struct PoolStats {
    uint64_t allocated = 0;     // fresh host allocations (chunks for smallest-block)
    uint64_t reused = 0;        // requests served from pooled memory
    uint64_t pooled = 0;        // buffers (exact) or free blocks (smallest-block) held now
    uint64_t released = 0;      // buffers given back to the host (pool full)
    uint64_t bytes_in_use = 0;  // bytes of the live allocations
    uint64_t bytes_pooled = 0;  // bytes held for reuse
    uint64_t peak_bytes = 0;    // most bytes ever taken from the host at once
    uint64_t requests = 0;
};

class PoolingAllocator {
public:
    PoolingAllocator(PoolPolicy policy, uint64_t max_per_size = 16, uint64_t alignment = 64);
    ~PoolingAllocator();
    PoolingAllocator(const PoolingAllocator&) = delete;
    PoolingAllocator& operator=(const PoolingAllocator&) = delete;

    // A buffer of at least `size` bytes (a zero-size request gets a 1-byte
    // buffer, so every allocation has its own address). Throws std::bad_alloc
    // when the host refuses.
    void* allocate(uint64_t size);
    // Returns a buffer to the pool; false when `p` is not a live allocation.
    bool free(void* p);
    // Gives every pooled buffer (and, smallest-block, every fully free chunk) back.
    void trim();

    const PoolStats& stats() const { return stats_; }
    PoolPolicy policy() const { return policy_; }
    uint64_t host_bytes() const { return host_bytes_; }

private:
    uint64_t round(uint64_t size) const;
    void* host_alloc(uint64_t size);
    void note_host();

    // exact size
    void* exact_allocate(uint64_t size);
    void exact_free(void* p, uint64_t size);
    // smallest-block
    void* block_allocate(uint64_t size);
    void block_free(uint32_t chunk, uint64_t offset);

    PoolPolicy policy_;
    uint64_t max_per_size_;
    uint64_t alignment_;
    PoolStats stats_;
    uint64_t host_bytes_ = 0;  // bytes currently taken from the host

    struct Live { uint64_t size; uint32_t chunk; uint64_t offset; };
    std::unordered_map<void*, Live> live_;  // lookup only, never iterated for output

    std::map<uint64_t, std::vector<void*>> exact_free_;  // size -> buffers (LIFO)

    struct Chunk { uint8_t* base; uint64_t size; std::map<uint64_t, std::pair<uint64_t, bool>> blocks; };
    std::vector<Chunk> chunks_;  // blocks: offset -> (size, free)
    std::set<std::tuple<uint64_t, uint32_t, uint64_t>> free_blocks_;  // (size, chunk, offset)
};

// Replays an allocate/free trace: event k allocates buffer `id[k]` of
// `size[id[k]]` bytes when `is_alloc[k]`, else frees it. Returns the stats.
PoolStats replay_trace(PoolPolicy policy, uint64_t max_per_size, uint64_t alignment,
                       const std::vector<uint64_t>& size, const std::vector<uint8_t>& is_alloc,
                       const std::vector<uint32_t>& id);

}  // namespace emel::memory
