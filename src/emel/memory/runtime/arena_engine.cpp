// ApplyPlan_v1, ZeroTensor_v1, DebugFillTensor_v1, CommitExecution_v1 and the
// resource ledger (docs/arenas.md). Everything that can refuse a plan is
// checked before the first byte is allocated, and a failed host allocation
// frees what this call took, so a refusal never leaves anything behind.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/runtime/arena_engine.hpp"

namespace emel::memory {

namespace {

// Base of an empty arena: a valid, aligned address that is never read.
alignas(64) uint8_t g_empty_arena[64];

constexpr uint64_t kMinBaseAlignment = 64;
constexpr uint64_t kHugePage = 2ull << 20;

// Large arenas start on a huge-page boundary and ask for huge pages: touching
// hundreds of MiB then costs hundreds of page faults, not hundreds of thousands.
uint64_t allocation_alignment(uint64_t base_align, uint64_t size) {
    return size >= 2 * kHugePage ? std::max(base_align, kHugePage) : base_align;
}

void advise_huge_pages(void* p, uint64_t size) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (size >= 2 * kHugePage) madvise(p, static_cast<size_t>(size), MADV_HUGEPAGE);
#else
    (void)p;
    (void)size;
#endif
}

// A tensor may ask for more than its arena's alignment (its own `alignment`,
// or a view's): the plan aligns its offset, the base must carry the rest.
std::vector<uint64_t> base_alignments(const Graph& g, const Plan& plan) {
    std::vector<uint64_t> align(plan.arenas.size(), kMinBaseAlignment);
    for (size_t a = 0; a < plan.arenas.size(); ++a) align[a] = std::max(align[a], plan.arenas[a].alignment);
    for (uint32_t t = 0; t < g.num_tensors; ++t) {
        const uint64_t need = g.is_view(t) ? g.alignment[t] : plan.effective_alignment[t];
        align[plan.arena_of[t]] = std::max(align[plan.arena_of[t]], need);
    }
    return align;
}

// Fixed-width big-endian appends for the state hash layout.
void put_u8(std::vector<uint8_t>& out, uint8_t v) { out.push_back(v); }
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
    for (int i = 3; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
    for (int i = 7; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_str(std::vector<uint8_t>& out, const std::string& s) {
    put_u32(out, static_cast<uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
}

// Zeroes memory about to be freed; the barrier keeps the compiler from
// dropping the stores as dead (portable fallback: a volatile loop).
void wipe(uint8_t* p, uint64_t n) {
#if defined(__GNUC__) || defined(__clang__)
    std::memset(p, 0, static_cast<size_t>(n));
    __asm__ __volatile__("" : : "r"(p) : "memory");
#else
    volatile uint8_t* v = p;
    for (uint64_t i = 0; i < n; ++i) v[i] = 0;
#endif
}

// A zero-filled buffer of `size` bytes aligned to `align`, or nullptr. Large
// ones are anonymous mappings: the kernel hands out zero pages as they are
// touched, so a huge arena costs nothing until used. Small ones come from the
// heap and are cleared: earlier owners' bytes must not reach buffer() or the
// data digest of commit().
uint8_t* zeroed_buffer(uint64_t size, uint64_t align, uint64_t& mapped) {
    mapped = 0;
    if (align > SIZE_MAX || size > SIZE_MAX) return nullptr;
#if defined(__linux__)
    const uint64_t page = 4096;
    if (size >= 2 * kHugePage && align % page == 0 && size <= SIZE_MAX - align - page) {
        const uint64_t length = (size + page - 1) / page * page;
        void* raw = mmap(nullptr, length + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) return nullptr;
        const auto start = reinterpret_cast<uintptr_t>(raw);
        const uintptr_t aligned = (start + align - 1) / align * align;
        if (aligned > start) munmap(raw, aligned - start);  // trim to the alignment
        const uintptr_t tail = aligned + length, end = start + length + align;
        if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
        mapped = length;
        return reinterpret_cast<uint8_t*>(aligned);
    }
#endif
    void* p = nullptr;
    if (posix_memalign(&p, static_cast<size_t>(align), static_cast<size_t>(size)) != 0) return nullptr;
    std::memset(p, 0, static_cast<size_t>(size));
    return static_cast<uint8_t*>(p);
}

}  // namespace

void release_buffer(ArenaBuffer& b) {
#if defined(__linux__)
    if (b.mapped) {
        munmap(b.base, static_cast<size_t>(b.mapped));
        return;
    }
#endif
    std::free(b.base);
}

EngineError::EngineError(std::string code_, std::string message_, std::string tensor_,
                         std::string node_, std::string arena_)
    : code(std::move(code_)),
      message(std::move(message_)),
      tensor(std::move(tensor_)),
      node(std::move(node_)),
      arena(std::move(arena_)),
      what_text("[" + code + "] " + message) {}

const char* execution_mode_name(ExecutionMode m) {
    switch (m) {
        case ExecutionMode::Standard: return "standard";
        case ExecutionMode::Confidential: return "confidential";
        case ExecutionMode::Regulated: return "regulated";
    }
    return "?";
}

ArenaMemory::~ArenaMemory() {
    for (auto& a : arenas) {
        if (!a.owned) continue;
        if (wipe_on_release) wipe(a.base, a.size);
        release_buffer(a);
    }
}

uint64_t ArenaEngine::bytes_needed(const Plan& plan) {
    uint64_t total = 0;
    for (const auto& a : plan.arenas) {
        auto sum = checked_add(total, a.size);
        total = sum ? *sum : UINT64_MAX;
    }
    return total;
}

ArenaEngine::ArenaEngine(std::shared_ptr<const Graph> graph, Plan plan, ApplyOptions options)
    : options_(options) {
    if (!options_.zero_tensors && options_.execution_mode != ExecutionMode::Standard)
        throw EngineError("ZEROING_REQUIRED",
                          std::string("tensors must be zeroed on apply in ") +
                              execution_mode_name(options_.execution_mode) +
                              " mode: skipping it would expose the buffers' previous bytes");
    apply(std::move(graph), std::move(plan), options_.zero_tensors);
}

void ArenaEngine::apply(std::shared_ptr<const Graph> graph, Plan plan, bool zero_tensors) {
    if (!zero_tensors && options_.execution_mode != ExecutionMode::Standard)
        throw EngineError("ZEROING_REQUIRED", std::string("tensors must be zeroed on apply in ") +
                                                  execution_mode_name(options_.execution_mode) +
                                                  " mode");
    const Graph& g = *graph;
    const uint32_t T = g.num_tensors;
    if (plan.offset.size() != T || plan.arena_of.size() != T)
        throw EngineError("INVALID_ARGUMENT", "the plan does not belong to this graph");

    // 1. Every tensor inside its arena and aligned: pointers must stay in bounds.
    for (uint32_t t = 0; t < T; ++t) {
        if (plan.arena_of[t] >= plan.arenas.size())
            throw EngineError("INVALID_ARGUMENT", "tensor '" + g.tensor_id[t] + "' has no arena",
                              g.tensor_id[t]);
        const ArenaPlan& a = plan.arenas[plan.arena_of[t]];
        if (plan.offset[t] > a.size || g.size[t] > a.size - plan.offset[t])
            throw EngineError("ADDRESS_COLLISION",
                              "tensor '" + g.tensor_id[t] + "' at offset " +
                                  std::to_string(plan.offset[t]) + " (" + std::to_string(g.size[t]) +
                                  " bytes) runs past the end of arena '" + a.name + "' (" +
                                  std::to_string(a.size) + " bytes)",
                              g.tensor_id[t], {}, a.name);
        const uint64_t align = g.is_view(t) ? g.alignment[t] : plan.effective_alignment[t];
        if (align > 1 && plan.offset[t] % align != 0)
            throw EngineError("ALIGNMENT_VIOLATION",
                              "tensor '" + g.tensor_id[t] + "' at offset " +
                                  std::to_string(plan.offset[t]) + " of arena '" + a.name +
                                  "' is not aligned to " + std::to_string(align),
                              g.tensor_id[t], {}, a.name);
    }
    // 2. Capacities, then the budget, in arena (name) order.
    for (const auto& a : plan.arenas)
        if (a.has_capacity && a.size > a.capacity)
            throw EngineError("ARENA_TOO_SMALL",
                              "arena '" + a.name + "' needs " + std::to_string(a.size) +
                                  " bytes, above its capacity_bytes " + std::to_string(a.capacity),
                              {}, {}, a.name);
    if (options_.has_budget) {
        uint64_t running = 0;
        for (const auto& a : plan.arenas) {
            auto sum = checked_add(running, a.size);
            if (!sum || *sum > options_.memory_bytes_budget)
                throw EngineError("QUOTA_EXCEEDED",
                                  "the plan needs " + std::to_string(bytes_needed(plan)) +
                                      " bytes of arenas, above memory_bytes_budget " +
                                      std::to_string(options_.memory_bytes_budget) + " (arena '" +
                                      a.name + "' passes it); nothing was allocated",
                                  {}, {}, a.name);
            running = *sum;
        }
    }

    // 3. Allocate. A failure frees what was taken (ArenaMemory's destructor).
    auto memory = std::make_shared<ArenaMemory>();
    memory->wipe_on_release = options_.execution_mode != ExecutionMode::Standard;
    memory->arenas.reserve(plan.arenas.size());
    const std::vector<uint64_t> alignments = base_alignments(g, plan);
    for (const auto& a : plan.arenas) {
        ArenaBuffer b;
        b.name = a.name;
        b.size = a.size;
        b.alignment = alignments[memory->arenas.size()];
        if (a.size == 0) {
            b.base = g_empty_arena;
        } else {
            const uint64_t align = allocation_alignment(b.alignment, a.size);
            uint8_t* p = zeroed_buffer(a.size, align, b.mapped);
            if (p == nullptr) {
                ++ledger_.allocation_failures;
                throw EngineError("ALLOCATION_FAILED",
                                  "the host could not allocate " + std::to_string(a.size) +
                                      " bytes aligned to " + std::to_string(b.alignment) +
                                      " for arena '" + a.name + "'; nothing was kept",
                                  {}, {}, a.name);
            }
            advise_huge_pages(p, a.size);
            b.base = p;
            b.owned = true;
        }
        memory->arenas.push_back(std::move(b));
    }

    // 4. Swap in. Old buffers live on while NumPy arrays still hold them.
    const uint64_t old_bytes = memory_ ? ledger_.bytes_allocated : 0;
    graph_ = std::move(graph);
    plan_ = std::move(plan);
    memory_ = std::move(memory);
    visibility_.assign(plan_.arenas.size(), Visibility::Pending);
    changed_step_.assign(plan_.arenas.size(), step_);
    refresh_ledger();
    ledger_.peak_bytes = std::max(ledger_.peak_bytes, old_bytes + ledger_.bytes_allocated);

    // 5. Zero (ZeroTensor_v1): already done, as every new buffer is zero-filled
    // whole (zeroed_buffer), whatever zero_tensors says.
    history_.push_back(ledger_);
}

void ArenaEngine::refresh_ledger() {
    uint64_t allocated = 0, busiest = 0;
    for (const auto& b : memory_->arenas) allocated += b.owned ? b.size : 0;
    for (const auto& a : plan_.arenas) busiest += a.inplace_aware_bound;
    ledger_.step = step_;
    ledger_.bytes_allocated = allocated;
    ledger_.peak_bytes = std::max(ledger_.peak_bytes, allocated);
    ledger_.internal_fragmentation_ratio =
        allocated == 0 ? 0.0
                       : 1.0 - std::min(1.0, static_cast<double>(busiest) / static_cast<double>(allocated));
}

uint8_t* ArenaEngine::address(uint32_t t) const {
    return memory_->arenas[plan_.arena_of[t]].base + plan_.offset[t];
}

void ArenaEngine::mark_written(uint32_t arena) {
    if (arena < visibility_.size()) visibility_[arena] = Visibility::Pending;
}

void ArenaEngine::mark_all_written() {
    std::fill(visibility_.begin(), visibility_.end(), Visibility::Pending);
}

void ArenaEngine::zero_tensor(uint32_t t) {
    if (t >= graph_->num_tensors) throw EngineError("INVALID_ARGUMENT", "tensor index out of range");
    if (graph_->size[t] == 0) return;
    std::memset(address(t), 0, graph_->size[t]);
    mark_written(plan_.arena_of[t]);
}

void ArenaEngine::zero_all() {
    // Storage tensors in id order; a view's bytes are its root's.
    const Graph& g = *graph_;
    std::vector<uint32_t> order;
    for (uint32_t t = 0; t < g.num_tensors; ++t)
        if (!g.is_view(t)) order.push_back(t);
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return g.id_rank[a] < g.id_rank[b]; });
    for (uint32_t t : order) zero_tensor(t);
}

void ArenaEngine::check_debug_allowed(const char* what) const {
    if (options_.execution_mode != ExecutionMode::Standard)
        throw EngineError("DEBUG_FILL_FORBIDDEN",
                          std::string(what) + " writes a known pattern over tensor memory, which " +
                              execution_mode_name(options_.execution_mode) +
                              " mode forbids; use execution_mode='standard'");
}

void ArenaEngine::debug_fill_tensor(uint32_t t) {
    check_debug_allowed("DebugFillTensor_v1");
    const Graph& g = *graph_;
    if (t >= g.num_tensors) throw EngineError("INVALID_ARGUMENT", "tensor index out of range");
    const uint32_t r = g.root[t];
    pattern_fill(address(t), pattern_key(options_.pattern_seed, g.tensor_id[r]), g.root_offset[t],
                 g.size[t]);
    mark_written(plan_.arena_of[t]);
}

const CommitRecord& ArenaEngine::commit(bool include_data) {
    if (options_.execution_mode == ExecutionMode::Regulated) include_data = true;  // audit trail
    const bool pending = std::any_of(visibility_.begin(), visibility_.end(),
                                     [](Visibility v) { return v == Visibility::Pending; });
    if (has_commit_ && !pending && last_commit_.includes_data == include_data) return last_commit_;

    CommitRecord rec;
    rec.visibility = visibility_;
    const bool advance = pending || !has_commit_;
    if (advance) {
        ++step_;
        for (size_t i = 0; i < visibility_.size(); ++i)
            if (visibility_[i] == Visibility::Pending) changed_step_[i] = step_;
    }
    rec.step = step_;
    rec.includes_data = include_data;
    rec.committed_step = changed_step_;

    // The state layout (docs/arenas.md), fixed-width big-endian.
    const Graph& g = *graph_;
    std::vector<uint8_t> bytes;
    const std::string magic = "emel.arena-state/1";
    bytes.insert(bytes.end(), magic.begin(), magic.end());
    put_u64(bytes, step_);
    put_u8(bytes, static_cast<uint8_t>(options_.execution_mode));
    put_u32(bytes, static_cast<uint32_t>(plan_.arenas.size()));
    for (size_t i = 0; i < plan_.arenas.size(); ++i) {
        put_str(bytes, plan_.arenas[i].name);
        put_u64(bytes, plan_.arenas[i].size);
        put_u64(bytes, memory_->arenas[i].alignment);
        put_u64(bytes, changed_step_[i]);
    }
    put_u32(bytes, g.num_tensors);
    for (uint32_t t = 0; t < g.num_tensors; ++t) {
        put_str(bytes, g.tensor_id[t]);
        put_u32(bytes, plan_.arena_of[t]);
        put_u64(bytes, plan_.offset[t]);
        put_u64(bytes, g.size[t]);
    }
    put_u8(bytes, include_data ? 1 : 0);
    Sha256 h;
    h.update(bytes);
    if (include_data)
        for (const auto& b : memory_->arenas) {
            const Digest d = sha256(b.base, b.owned ? b.size : 0);
            h.update(d.data(), d.size());
        }
    rec.state_hash = h.finish();

    std::fill(visibility_.begin(), visibility_.end(), Visibility::Committed);
    has_commit_ = true;
    last_commit_ = std::move(rec);
    refresh_ledger();
    if (advance) history_.push_back(ledger_);
    return last_commit_;
}

}  // namespace emel::memory
