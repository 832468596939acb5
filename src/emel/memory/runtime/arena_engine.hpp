// The arena engine: the stateful half of the spec. A plan is backed by one
// aligned host buffer per arena (ApplyPlan_v1), tensors are zeroed or filled
// with a debug pattern (ZeroTensor_v1, DebugFillTensor_v1), steps are sealed
// with a state hash (CommitExecution_v1), a resource ledger counts the bytes,
// and the execution check walks the graph over the real bytes to prove that no
// tensor is clobbered while it is live. docs/arenas.md describes all of it.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/determinism/sha256.hpp"

namespace emel::memory {

constexpr uint64_t kNoStep = UINT64_MAX;

// Errors of the engine. Their codes are not planner failure codes (those stay
// the six of algorithm.md): QUOTA_EXCEEDED, DEBUG_FILL_FORBIDDEN,
// ALLOCATION_FAILED, ZEROING_REQUIRED, INVALID_ARGUMENT, and the planner's
// ADDRESS_COLLISION / ALIGNMENT_VIOLATION / ARENA_TOO_SMALL for a plan that
// cannot be applied or that clobbers a live tensor when executed.
struct EngineError : std::exception {
    std::string code;
    std::string message;
    std::string tensor, node, arena;
    uint64_t step = kNoStep;        // the execution step, for a clobber
    uint64_t byte_offset = kNoStep; // first wrong byte, relative to the tensor
    std::string overwritten_by;     // the tensor whose pattern was found there
    std::string what_text;
    EngineError(std::string code_, std::string message_, std::string tensor_ = {},
                std::string node_ = {}, std::string arena_ = {});
    const char* what() const noexcept override { return what_text.c_str(); }
};

enum class ExecutionMode : uint8_t { Standard, Confidential, Regulated };
const char* execution_mode_name(ExecutionMode m);

struct ApplyOptions {
    ExecutionMode execution_mode = ExecutionMode::Standard;
    bool zero_tensors = true;            // the spec's step 5 (refused off outside standard)
    bool has_budget = false;
    uint64_t memory_bytes_budget = 0;    // total bytes of all arena buffers
    uint64_t pattern_seed = 0;           // DebugFillTensor_v1 and the execution check
};

// One arena's host buffer. Owned by an ArenaMemory; freed (wiped first outside
// standard mode) when the last owner — the engine or a NumPy array — lets go.
struct ArenaBuffer {
    std::string name;
    uint64_t size = 0;        // bytes the plan uses (the arena size)
    uint64_t alignment = 64;  // of the base address: max(arena alignment, 64)
    uint8_t* base = nullptr;  // never null, even for an empty arena
    bool owned = false;       // false for an empty arena (static placeholder)
    uint64_t mapped = 0;      // bytes of an anonymous mapping at base (0: from the heap)
};

// Gives an owned buffer back (munmap or free, as it was taken).
void release_buffer(ArenaBuffer& b);

struct ArenaMemory {
    std::vector<ArenaBuffer> arenas;   // plan order (arena name order)
    bool wipe_on_release = false;
    ArenaMemory() = default;
    ArenaMemory(const ArenaMemory&) = delete;
    ArenaMemory& operator=(const ArenaMemory&) = delete;
    ~ArenaMemory();
};

// Per-arena visibility after a commit.
enum class Visibility : uint8_t { Committed = 0, Pending = 1 };

struct LedgerEntry {
    uint64_t step = 0;                  // the commit counter when recorded
    uint64_t bytes_allocated = 0;       // bytes held by the arena buffers now
    uint64_t peak_bytes = 0;            // most bytes ever held by this engine
    uint64_t allocation_failures = 0;   // host allocations refused (all rolled back)
    double internal_fragmentation_ratio = 0.0;  // 1 - busiest-step bytes / allocated
};

struct CommitRecord {
    uint64_t step = 0;
    Digest state_hash{};
    bool includes_data = false;
    std::vector<Visibility> visibility;     // per arena, before the commit
    std::vector<uint64_t> committed_step;   // per arena: the step its bytes last changed
};

// What the execution check did (all counts over the whole walk).
struct ExecutionReport {
    uint64_t steps = 0;
    uint64_t tensors_written = 0;
    uint64_t bytes_written = 0;
    uint64_t tensors_checked = 0;
    uint64_t bytes_checked = 0;
};

class ArenaEngine {
public:
    // ApplyPlan_v1: allocate every arena, resolve every tensor, zero it (unless
    // told not to). Refuses, before taking any memory, a plan that is out of
    // bounds, misaligned, over capacity or over the budget.
    ArenaEngine(std::shared_ptr<const Graph> graph, Plan plan, ApplyOptions options);

    // Re-apply another plan of the same engine. On any refusal the engine —
    // buffers, ledger, commits — is exactly as it was.
    void apply(std::shared_ptr<const Graph> graph, Plan plan, bool zero_tensors);

    void zero_tensor(uint32_t t);                     // ZeroTensor_v1
    void zero_all();                                  // every tensor, id order
    void debug_fill_tensor(uint32_t t);               // DebugFillTensor_v1
    const CommitRecord& commit(bool include_data);    // CommitExecution_v1
    ExecutionReport verify_execution();               // execution_check.cpp

    // Marks an arena as written outside the engine (a caller holding an array).
    void mark_written(uint32_t arena);
    void mark_all_written();

    uint8_t* address(uint32_t t) const;
    const Graph& graph() const { return *graph_; }
    const Plan& plan() const { return plan_; }
    const ApplyOptions& options() const { return options_; }
    const std::shared_ptr<ArenaMemory>& memory() const { return memory_; }
    const LedgerEntry& ledger() const { return ledger_; }
    const std::vector<LedgerEntry>& ledger_history() const { return history_; }
    const std::vector<Visibility>& visibility() const { return visibility_; }
    uint64_t step() const { return step_; }
    bool has_commit() const { return has_commit_; }
    const CommitRecord& last_commit() const { return last_commit_; }
    // Bytes the arena buffers would take for `plan` (the budget's measure).
    static uint64_t bytes_needed(const Plan& plan);

private:
    void check_debug_allowed(const char* what) const;
    void refresh_ledger();

    std::shared_ptr<const Graph> graph_;
    Plan plan_;
    ApplyOptions options_;
    std::shared_ptr<ArenaMemory> memory_;
    LedgerEntry ledger_;
    std::vector<LedgerEntry> history_;
    std::vector<Visibility> visibility_;
    std::vector<uint64_t> changed_step_;
    uint64_t step_ = 0;
    bool has_commit_ = false;
    CommitRecord last_commit_;
};

// The debug pattern (debug_pattern.cpp): byte k of a root tensor `r` is byte
// (k mod 8) of the little-endian word key(r) XOR ((k div 8 + 1) * 0x9E3779B97F4A7C15),
// key(r) = the first 8 bytes, big-endian, of SHA-256(seed as u64 big-endian || id).
uint64_t pattern_key(uint64_t seed, const std::string& tensor_id);
// Writes bytes [from, from + len) of the pattern `key` to dst.
void pattern_fill(uint8_t* dst, uint64_t key, uint64_t from, uint64_t len);
// The first index i < len where src[i] differs from pattern byte from + i, or len.
uint64_t pattern_mismatch(const uint8_t* src, uint64_t key, uint64_t from, uint64_t len);
uint8_t pattern_byte(uint64_t key, uint64_t position);

}  // namespace emel::memory
