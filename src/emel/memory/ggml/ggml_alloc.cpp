// ggml-alloc's dynamic allocator and graph planning pass, modelled exactly
// (see ggml_alloc.hpp). Failures ggml would abort on become PlanError.
#include "emel/memory/ggml/ggml_alloc.hpp"

#include <algorithm>

#include "emel/memory/core/errors.hpp"

namespace emel::memory::ggml {

DynAllocator::DynAllocator(uint64_t alignment, uint64_t max_size)
    : alignment_(alignment), max_chunk_size_(std::min<uint64_t>(max_size, kSizeMax / 2)) {}

void DynAllocator::reset() { chunks_.clear(); }

uint64_t DynAllocator::aligned(uint64_t x) const {
    // ggml's aligned_offset: x + (a - x % a) % a; a wrap is an error, not a small size
    const uint64_t up = x + (alignment_ - x % alignment_) % alignment_;
    if (up < x)
        throw PlanError(ErrorCode::AllocationOverflow,
                        "a tensor of " + std::to_string(x) + " bytes overflows when aligned to " +
                            std::to_string(alignment_));
    return up;
}

int DynAllocator::new_chunk(uint64_t min_size, const std::string& who) {
    if (chunks_.size() >= kMaxChunks)
        throw PlanError(ErrorCode::ArenaTooSmall,
                        "ggml allocator: out of chunks placing '" + who + "'", who);
    Chunk c;
    uint64_t size = std::max(min_size, max_chunk_size_);
    if (chunks_.size() == kMaxChunks - 1) size = kSizeMax / 2;  // the last chunk is unbounded
    c.free.push_back({0, size});
    chunks_.push_back(std::move(c));
    return static_cast<int>(chunks_.size()) - 1;
}

Address DynAllocator::alloc(uint64_t size, const std::string& who) {
    size = aligned(size);
    int best_chunk = -1, best_block = -1;
    // 1. Best fit among every chunk's blocks but its last; a later chunk with
    //    any fit replaces an earlier one; ties go to the later block.
    for (size_t c = 0; c < chunks_.size(); ++c) {
        uint64_t best_size = kSizeMax;
        const auto& blocks = chunks_[c].free;
        for (size_t i = 0; i + 1 < blocks.size(); ++i)
            if (blocks[i].size >= size && blocks[i].size <= best_size) {
                best_chunk = static_cast<int>(c);
                best_block = static_cast<int>(i);
                best_size = blocks[i].size;
            }
    }
    // 2. Each chunk's last block: prefer one that needs no growth (the tightest),
    //    else the one that grows the chunk least.
    if (best_block == -1) {
        int64_t best_reuse = INT64_MIN;
        for (size_t c = 0; c < chunks_.size(); ++c) {
            const auto& blocks = chunks_[c].free;
            if (blocks.empty()) continue;
            const Block& b = blocks.back();
            if (b.size < size) continue;
            const int64_t reuse = static_cast<int64_t>(chunks_[c].max_size - b.offset - size);
            if ((best_reuse < 0 && reuse > best_reuse) || (reuse >= 0 && reuse < best_reuse)) {
                best_reuse = reuse;
                best_chunk = static_cast<int>(c);
                best_block = static_cast<int>(blocks.size()) - 1;
            }
        }
    }
    // 3. A new chunk.
    if (best_block == -1) {
        best_chunk = new_chunk(size, who);
        best_block = 0;
    }
    Chunk& chunk = chunks_[best_chunk];
    Block& block = chunk.free[best_block];
    Address a;
    a.chunk = best_chunk;
    a.offset = block.offset;
    block.offset += size;
    block.size -= size;
    if (block.size == 0) chunk.free.erase(chunk.free.begin() + best_block);
    chunk.max_size = std::max(chunk.max_size, a.offset + size);
    return a;
}

void DynAllocator::free(const Address& a, uint64_t size, const std::string& who) {
    size = aligned(size);
    Chunk& chunk = chunks_.at(a.chunk);
    auto& blocks = chunk.free;
    for (size_t i = 0; i < blocks.size(); ++i) {
        Block& b = blocks[i];
        if (b.offset + b.size == a.offset) {  // ends where the freed range starts
            b.size += size;
            if (i + 1 < blocks.size() && b.offset + b.size == blocks[i + 1].offset) {
                b.size += blocks[i + 1].size;
                blocks.erase(blocks.begin() + i + 1);
            }
            return;
        }
        if (a.offset + size == b.offset) {  // starts where the freed range ends
            b.offset = a.offset;
            b.size += size;
            if (i > 0 && blocks[i - 1].offset + blocks[i - 1].size == b.offset) {
                blocks[i - 1].size += b.size;
                blocks.erase(blocks.begin() + i);
            }
            return;
        }
    }
    if (blocks.size() >= kMaxFreeBlocks)
        throw PlanError(ErrorCode::ArenaTooSmall,
                        "ggml allocator: out of free blocks freeing '" + who + "'", who);
    auto at = std::find_if(blocks.begin(), blocks.end(),
                           [&](const Block& b) { return b.offset > a.offset; });
    blocks.insert(at, Block{a.offset, size});
}

std::vector<uint64_t> DynAllocator::chunk_sizes() const {
    std::vector<uint64_t> out;
    for (const auto& c : chunks_) out.push_back(c.max_size);
    return out;
}

namespace {

struct HashInfo {
    int n_children = 0;
    int n_views = 0;
    Address addr;
    bool allocated = false;
};

}  // namespace

PlanResult plan_graph(const Graph& g, const std::vector<int32_t>& node_buffer_ids,
                      const std::vector<int32_t>& leaf_buffer_ids,
                      std::vector<DynAllocator>& allocators,
                      const std::vector<int32_t>& allocator_of) {
    const size_t T = g.tensors.size();
    std::vector<HashInfo> info(T);
    PlanResult out;
    out.inplace_of.assign(T, -1);
    out.alloc_step.assign(T, -1);
    out.free_step.assign(T, -1);
    int32_t step = 0;
    for (auto& a : allocators) a.reset();

    auto is_view = [&](int32_t t) { return g.tensors[t].view_src >= 0; };
    auto has_data = [&](int32_t t) { return (g.tensors[t].flags & kHasData) != 0; };
    auto is_allocated = [&](int32_t t) { return has_data(t) || info[t].allocated; };
    auto allocator = [&](int32_t buffer_id) -> DynAllocator& {
        if (buffer_id < 0 || static_cast<size_t>(buffer_id) >= allocator_of.size())
            throw PlanError(ErrorCode::InvalidIrShapes,
                            "buffer id " + std::to_string(buffer_id) + " out of range");
        return allocators[allocator_of[buffer_id]];
    };

    auto allocate_node = [&](int32_t t, int32_t buffer_id) {
        if (is_allocated(t) || is_view(t)) return;
        const Tensor& node = g.tensors[t];
        HashInfo& hn = info[t];
        hn.allocated = true;
        // Placed again after a free (see PlanResult): keep the first step.
        if (out.alloc_step[t] < 0) out.alloc_step[t] = step;
        out.free_step[t] = -1;
        out.inplace_of[t] = -1;
        if (node.op_inplace) {
            for (int s = 0; s < kMaxSrc; ++s) {
                const int32_t p = node.src[s];
                if (p < 0 || !info[p].allocated || has_data(p)) continue;  // not own
                const Tensor& parent = g.tensors[p];
                if (parent.flags & kOutput) continue;
                if (parent.view_src >= 0 && (g.tensors[parent.view_src].flags & kOutput)) continue;
                if (parent.layout != node.layout) continue;
                if (info[p].n_children != 1 || info[p].n_views != 0) continue;
                hn.addr = info[p].addr;  // take the parent's place and buffer
                info[p].allocated = false;
                out.inplace_of[t] = p;
                out.free_step[p] = step;  // handed over: t holds the bytes from here
                DynAllocator& dyn = allocator(hn.addr.buffer_id);
                const uint64_t mine = dyn.aligned(node.size), theirs = dyn.aligned(parent.size);
                if (theirs > mine) {  // free the tail the smaller node leaves
                    Address tail = hn.addr;
                    tail.offset += mine;
                    dyn.free(tail, theirs - mine, parent.name);
                }
                return;
            }
        }
        Address a = allocator(buffer_id).alloc(node.size, node.name);
        a.buffer_id = buffer_id;
        hn.addr = a;
    };
    auto free_node = [&](int32_t t) {
        if (g.tensors[t].flags & kOutput) return;  // graph outputs are never freed
        HashInfo& hn = info[t];
        allocator(hn.addr.buffer_id).free(hn.addr, g.tensors[t].size, g.tensors[t].name);
        hn.allocated = false;
        out.free_step[t] = step;
    };
    auto node_buffer = [&](size_t i) { return node_buffer_ids.empty() ? 0 : node_buffer_ids[i]; };

    // 1. Leafs first, in leaf order.
    for (size_t i = 0; i < g.leafs.size(); ++i)
        allocate_node(g.leafs[i], leaf_buffer_ids.empty() ? 0 : leaf_buffer_ids[i]);
    // 2. Count children and views; place INPUT-flagged tensors now.
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const int32_t n = g.nodes[i];
        const Tensor& node = g.tensors[n];
        if (node.view_src >= 0 && !node.op_none) info[node.view_src].n_views += 1;
        if (node.flags & kInput) allocate_node(n, node_buffer(i));
        for (int s = 0; s < kMaxSrc; ++s) {
            const int32_t p = node.src[s];
            if (p < 0) continue;
            info[p].n_children += 1;
            if (g.tensors[p].flags & kInput) allocate_node(p, node_buffer(i));
        }
    }
    // 3. Allocate each node, then free what it was the last to read.
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const int32_t n = g.nodes[i];
        const Tensor& node = g.tensors[n];
        const int32_t b = node_buffer(i);
        step = static_cast<int32_t>(i) + 1;
        for (int s = 0; s < kMaxSrc; ++s)
            if (node.src[s] >= 0) allocate_node(node.src[s], b);
        allocate_node(n, b);
        for (int s = 0; s < kMaxSrc; ++s) {
            const int32_t p = node.src[s];
            if (p < 0) continue;
            HashInfo& hp = info[p];
            hp.n_children -= 1;
            if (hp.n_children != 0 || hp.n_views != 0) continue;
            if (is_view(p)) {
                const int32_t r = g.tensors[p].view_src;
                info[r].n_views -= 1;
                if (info[r].n_views == 0 && info[r].n_children == 0 && info[r].allocated) free_node(r);
            } else if (hp.allocated) {
                free_node(p);
            }
        }
    }
    out.addr.resize(T);
    for (size_t t = 0; t < T; ++t)
        if (!is_view(static_cast<int32_t>(t)) && !has_data(static_cast<int32_t>(t)) &&
            info[t].addr.buffer_id >= 0)
            out.addr[t] = info[t].addr;
    for (const auto& a : allocators) out.chunk_sizes.push_back(a.chunk_sizes());
    return out;
}

TensorAllocator::TensorAllocator(uint64_t buffer_size, uint64_t alignment)
    : size_(buffer_size), alignment_(alignment) {
    // alloc() divides by the alignment: 0 would be SIGFPE, not an error
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        throw PlanError(ErrorCode::AlignmentViolation,
                        "buffer type alignment must be a power of two, got " + std::to_string(alignment));
}

uint64_t TensorAllocator::alloc(uint64_t size, const std::string& who) {
    const uint64_t padded = size + (alignment_ - size % alignment_) % alignment_;
    if (padded < size || offset_ > size_ || padded > size_ - offset_)
        throw PlanError(ErrorCode::ArenaTooSmall,
                        "not enough space in the buffer for '" + who + "': needs " +
                            std::to_string(padded) + " bytes at offset " + std::to_string(offset_) +
                            " of " + std::to_string(size_),
                        who);
    const uint64_t at = offset_;
    offset_ += padded;
    return at;
}

CtxPlacement alloc_ctx_tensors(const std::vector<uint64_t>& sizes, const std::vector<uint8_t>& skip,
                               uint64_t alignment, uint64_t max_size) {
    CtxPlacement out;
    out.buffer_of.assign(sizes.size(), -1);
    out.offset.assign(sizes.size(), 0);
    uint64_t cur = 0;
    auto close = [&]() { out.buffer_sizes.push_back(cur); };
    for (size_t i = 0; i < sizes.size(); ++i) {
        if (skip[i]) continue;
        const uint64_t size = sizes[i] + (alignment - sizes[i] % alignment) % alignment;
        if (size < sizes[i])
            throw PlanError(ErrorCode::AllocationOverflow, "tensor size overflows when aligned");
        if (cur > 0 && (cur > max_size || size > max_size - cur)) {
            close();
            cur = 0;
        }
        out.buffer_of[i] = static_cast<int32_t>(out.buffer_sizes.size());
        out.offset[i] = cur;
        cur += size;
    }
    if (cur > 0) close();
    return out;
}

}  // namespace emel::memory::ggml
