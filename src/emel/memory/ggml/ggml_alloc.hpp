// A model of llama.cpp's ggml-alloc (docs: ggml-alloc-behaviour in the shared
// specification): the dynamic allocator with chunks, and the graph
// allocator's planning pass. Same sizes, same offsets, written from the
// behaviour description, not from ggml's code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace emel::memory::ggml {

constexpr int kMaxSrc = 10;
constexpr int kMaxFreeBlocks = 256;
constexpr int kMaxChunks = 16;
constexpr uint64_t kSizeMax = UINT64_MAX;

enum Flags : uint8_t { kInput = 1, kOutput = 2, kHasData = 4 };

struct Tensor {
    std::string name;
    uint64_t size = 0;         // ggml_backend_buft_get_alloc_size (before alignment)
    uint64_t layout = 0;       // equal layouts <=> ggml_are_same_layout
    int32_t view_src = -1;     // ROOT tensor index (ggml flattens views), -1 if none
    uint64_t view_offs = 0;
    uint8_t flags = 0;
    bool op_none = false;      // GGML_OP_NONE (leafs, and views made without an op)
    bool op_inplace = false;   // ggml_op_can_inplace(op)
    int32_t src[kMaxSrc] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
};

struct Graph {
    std::vector<Tensor> tensors;
    std::vector<int32_t> nodes;  // tensor indices, execution order
    std::vector<int32_t> leafs;
};

struct Address {
    int32_t buffer_id = -1;
    int32_t chunk = -1;
    uint64_t offset = 0;
    // Set by GraphAllocator::alloc_graph on what it binds (0 elsewhere, e.g.
    // alloc_ctx_tensors or a hand-set place): the allocator, its plan at the
    // time and the bytes that plan reserved there, so a later call can tell
    // a place it still vouches for from one a replan gave away.
    uint64_t owner = 0;
    uint64_t plan = 0;
    uint64_t reserved = 0;
};

// ggml_dyn_tallocr: best fit over chunks of free blocks.
class DynAllocator {
  public:
    DynAllocator(uint64_t alignment, uint64_t max_size);
    void reset();
    Address alloc(uint64_t size, const std::string& who);  // chunk + offset (buffer_id unset)
    void free(const Address& a, uint64_t size, const std::string& who);
    std::vector<uint64_t> chunk_sizes() const;  // each chunk's high-water mark
    uint64_t alignment() const { return alignment_; }
    uint64_t aligned(uint64_t x) const;  // every size is rounded up to the alignment

  private:
    struct Block { uint64_t offset, size; };
    struct Chunk { std::vector<Block> free; uint64_t max_size = 0; };
    int new_chunk(uint64_t min_size, const std::string& who);
    uint64_t alignment_, max_chunk_size_;
    std::vector<Chunk> chunks_;
};

// The planning pass of ggml_gallocr (alloc_graph_impl) over one graph.
// `allocator_of[b]` maps buffer id b to its allocator (ids that share a
// buffer type share one). Fills `addr` (per tensor; buffer_id -1 when the
// tensor is a view, pre-allocated or never placed) and `inplace_of`.
struct PlanResult {
    std::vector<Address> addr;
    std::vector<int32_t> inplace_of;
    // When ggml places and frees each tensor: step 0 for leafs and inputs,
    // step i + 1 for node i; -1 when it never happens (the planner strategies
    // turn these into lifetimes). alloc_step is its first placement;
    // free_step is where its last placement ended, freed or handed over in
    // place (ggml places a tensor again when it meets it after freeing it,
    // e.g. a node read before its own entry: inplace_of and addr are then
    // the last placement's).
    std::vector<int32_t> alloc_step, free_step;
    std::vector<std::vector<uint64_t>> chunk_sizes;  // per allocator
};
PlanResult plan_graph(const Graph& g, const std::vector<int32_t>& node_buffer_ids,
                      const std::vector<int32_t>& leaf_buffer_ids,
                      std::vector<DynAllocator>& allocators,
                      const std::vector<int32_t>& allocator_of);

// ggml_tallocr: a linear allocator in one buffer (no free).
class TensorAllocator {
  public:
    TensorAllocator(uint64_t buffer_size, uint64_t alignment);
    uint64_t alloc(uint64_t size, const std::string& who);  // the tensor's offset
    uint64_t offset() const { return offset_; }

  private:
    uint64_t size_, alignment_, offset_ = 0;
};

// ggml_backend_alloc_ctx_tensors_from_buft: tensors in creation order into
// buffers of at most max_size bytes (a tensor larger than that gets its own).
// `skip[i]`: the tensor already has data or is a view (takes no space).
struct CtxPlacement {
    std::vector<uint64_t> buffer_sizes;
    std::vector<int32_t> buffer_of;   // per tensor, -1 when skipped
    std::vector<uint64_t> offset;     // per tensor, within its buffer
};
CtxPlacement alloc_ctx_tensors(const std::vector<uint64_t>& sizes, const std::vector<uint8_t>& skip,
                               uint64_t alignment, uint64_t max_size);

}  // namespace emel::memory::ggml
