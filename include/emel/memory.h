/*
 * emel/memory.h - the C API of the emel tensor memory planner.
 *
 * Pure C99; usable from C and C++ with only this header and the shared
 * library emel_memory_c (libemel_memory_c.so). See docs/c_api.md.
 *
 * Conventions
 * - Every function except the *_destroy functions and the emel_last_error_*
 *   / emel_status_name accessors returns an emel_status: EMEL_OK (0) on
 *   success, a failure code otherwise. No C++ exception ever leaves the
 *   library.
 * - A failing call records its details for the calling thread:
 *   emel_last_error_status(), emel_last_error_message() and the offending
 *   tensor / node / arena id where known. Successful calls leave them as they
 *   were (like errno), so read them only after a call has failed.
 * - Ownership: handles (emel_graph*, emel_plan*, emel_ggml_*) are created by the API and
 *   owned by the caller, who releases each exactly once with its *_destroy
 *   function (NULL is accepted and ignored). Every string and array passed
 *   in is copied before the call returns; the caller keeps ownership of its
 *   memory. Strings handed out (const char*) belong to the library: a
 *   plan's strings live as long as the plan, error strings until the next
 *   failing call on the same thread. Never free them.
 * - A plan does not refer to the graph it was made from: the graph may be
 *   destroyed or changed once emel_plan_create has returned.
 * - Threads: a handle must not be used by two threads at once while one of
 *   them changes it (emel_graph_add_* / set_*; for the ggml-style handles,
 *   every call taking a non-const pointer). Reading calls (plan queries,
 *   emel_plan_create on a graph nobody is changing) may run concurrently.
 * - On failure, a function's out-parameters are left unchanged, except that
 *   the *out handle of a create function is set to NULL.
 */
#ifndef EMEL_MEMORY_H
#define EMEL_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) || defined(__CYGWIN__)
#  if defined(EMEL_MEMORY_C_BUILD)
#    define EMEL_API __declspec(dllexport)
#  else
#    define EMEL_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define EMEL_API __attribute__((visibility("default")))
#else
#  define EMEL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this C interface (bumped on incompatible changes). */
#define EMEL_C_API_VERSION 1

/* "No index": returned where a tensor has no view root or in-place partner. */
#define EMEL_NO_INDEX ((size_t)-1)

/* Result of every call. The failure codes 1..6 are the planner's
 * (docs/algorithm.md), in the order of emel.memory.FAILURE_CODES. */
typedef enum emel_status {
    EMEL_OK = 0,
    EMEL_INVALID_IR_SHAPES = 1,     /* malformed graph: unknown or duplicate id, bad view, ... */
    EMEL_LIVENESS_CYCLE = 2,        /* a tensor is read before it is produced */
    EMEL_ALLOCATION_OVERFLOW = 3,   /* a size or offset exceeds 2^64-1 */
    EMEL_ARENA_TOO_SMALL = 4,       /* an arena needs more than its capacity */
    EMEL_ALIGNMENT_VIOLATION = 5,   /* an alignment that is not a power of two, a misaligned view */
    EMEL_ADDRESS_COLLISION = 6,     /* the self-check found live tensors sharing bytes */
    EMEL_INVALID_ARGUMENT = 7,      /* NULL pointer, bad enum value, index out of range, unknown id */
    EMEL_OUT_OF_MEMORY = 8,         /* the library could not allocate memory */
    EMEL_INTERNAL = 9,              /* any other failure (a bug: please report it) */
    EMEL_STATUS_MAX_ENUM_ = 0x7FFFFFFF
} emel_status;

/* Tensor roles (the order of emel.memory.graph.ROLES). */
typedef enum emel_role {
    EMEL_ROLE_INPUT = 0,
    EMEL_ROLE_PARAMETER = 1,        /* persistent: arena "parameters" */
    EMEL_ROLE_ACTIVATION = 2,       /* the usual intermediate tensor: arena "activations" */
    EMEL_ROLE_GRADIENT = 3,         /* arena "gradients" */
    EMEL_ROLE_OPTIMIZER_STATE = 4,  /* persistent: arena "parameters" */
    EMEL_ROLE_OUTPUT = 5,
    EMEL_ROLE_MAX_ENUM_ = 0x7FFFFFFF
} emel_role;
#define EMEL_NUM_ROLES 6

/* Node phases (used by the forward / backward modes). */
typedef enum emel_phase {
    EMEL_PHASE_UNSPECIFIED = 0,
    EMEL_PHASE_FORWARD = 1,
    EMEL_PHASE_BACKWARD = 2,
    EMEL_PHASE_MAX_ENUM_ = 0x7FFFFFFF
} emel_phase;

/* Planning modes (docs/algorithm.md section 2). */
typedef enum emel_mode {
    EMEL_MODE_INFERENCE = 0,
    EMEL_MODE_FORWARD = 1,
    EMEL_MODE_BACKWARD = 2,
    EMEL_MODE_MAX_ENUM_ = 0x7FFFFFFF
} emel_mode;

/* Placement strategies (docs/strategies.md). */
typedef enum emel_strategy {
    EMEL_STRATEGY_TMMU = 0,
    EMEL_STRATEGY_GREEDY_BY_SIZE = 1,
    EMEL_STRATEGY_BEST_FIT = 2,
    EMEL_STRATEGY_AUTO = 3,
    EMEL_STRATEGY_OPTIMAL = 4,
    EMEL_STRATEGY_MAX_ENUM_ = 0x7FFFFFFF
} emel_strategy;

/* Gap choice of greedy_by_size. */
typedef enum emel_fit {
    EMEL_FIT_BEST = 0,
    EMEL_FIT_FIRST = 1,
    EMEL_FIT_MAX_ENUM_ = 0x7FFFFFFF
} emel_fit;

/* Opaque handles, created and destroyed by the API. */
typedef struct emel_graph emel_graph;
typedef struct emel_plan emel_plan;

/* ------------------------------------------------------------------ errors */

/* The spelling of a status, e.g. "INVALID_IR_SHAPES", "OK"; never NULL. */
EMEL_API const char* emel_status_name(emel_status status);
/* Status of this thread's last failing call (EMEL_OK if none failed yet). */
EMEL_API emel_status emel_last_error_status(void);
/* Message of this thread's last failing call, "[CODE] text"; "" if none. Never NULL. */
EMEL_API const char* emel_last_error_message(void);
/* Offending tensor id of the last failure, "" when none or unknown. Never NULL. */
EMEL_API const char* emel_last_error_tensor(void);
/* Offending node id of the last failure, "" when none or unknown. Never NULL. */
EMEL_API const char* emel_last_error_node(void);
/* Offending arena name of the last failure, "" when none or unknown. Never NULL. */
EMEL_API const char* emel_last_error_arena(void);

/* ------------------------------------------------------------------ graphs */

/* New empty graph named `name` (NULL = ""); *out receives it. Free with emel_graph_destroy. */
EMEL_API emel_status emel_graph_create(const char* name, emel_graph** out);

/* Release a graph (NULL is ignored). Plans made from it stay valid. */
EMEL_API void emel_graph_destroy(emel_graph* graph);

/* Append a tensor of `nbytes` bytes. `id` must be non-empty (ids are checked
 * for uniqueness when planned). `alignment`: 0 = none, else a power of two.
 * `can_inplace`: nonzero lets it reuse the bytes of an input of its producer.
 * `view_base_id`: NULL for a storage tensor, else the id of the tensor it is
 * a view of, starting `view_offset` bytes into it (view_offset is ignored
 * for storage tensors). */
EMEL_API emel_status emel_graph_add_tensor(emel_graph* graph, const char* id, uint64_t nbytes,
                                           emel_role role, uint64_t alignment, int can_inplace,
                                           const char* view_base_id, uint64_t view_offset);

/* emel_graph_add_tensor with the tensor's shape and dtype, as an emel.graph/1
 * document states them (docs/formats.md): `dtype` non-empty (e.g. "f32");
 * `shape` has ndim dimensions (may be NULL when ndim is 0). `has_nbytes`
 * nonzero: `nbytes` is given (required for dtypes without a known element
 * size, and for views), else the size is the shape times the element size.
 * Planning is the same as with emel_graph_add_tensor and the same byte size;
 * what differs is the ir_hash, which covers shape and dtype: a graph built
 * with this function hashes exactly like the document it mirrors (a tensor
 * added by emel_graph_add_tensor hashes as shape [], dtype "bytes" and its
 * nbytes). */
EMEL_API emel_status emel_graph_add_tensor_shaped(emel_graph* graph, const char* id,
                                                  const char* dtype, const uint64_t* shape,
                                                  size_t ndim, int has_nbytes, uint64_t nbytes,
                                                  emel_role role, uint64_t alignment,
                                                  int can_inplace, const char* view_base_id,
                                                  uint64_t view_offset);

/* Append a node; nodes run in the order added (unless an execution order is
 * set). `inputs` / `outputs` are arrays of n_in / n_out tensor ids (may be
 * NULL when the count is 0). Unknown ids are reported by emel_plan_create. */
EMEL_API emel_status emel_graph_add_node(emel_graph* graph, const char* id,
                                         const char* const* inputs, size_t n_in,
                                         const char* const* outputs, size_t n_out);

/* Mark tensor `id` as a graph output (it lives to the last step). */
EMEL_API emel_status emel_graph_add_output(emel_graph* graph, const char* id);

/* Optional: put tensor `tensor_id` (already added) into arena `arena` instead of its role's default. */
EMEL_API emel_status emel_graph_set_tensor_arena(emel_graph* graph, const char* tensor_id,
                                                 const char* arena);

/* Optional: mark tensor `tensor_id` (already added) as saved for the backward pass (nonzero = yes). */
EMEL_API emel_status emel_graph_set_saved_for_backward(emel_graph* graph, const char* tensor_id,
                                                       int saved);

/* Optional: tensor `tensor_id` (already added) must never share bytes with `other_id`. */
EMEL_API emel_status emel_graph_add_must_not_alias(emel_graph* graph, const char* tensor_id,
                                                   const char* other_id);

/* Optional: set the phase of node `node_id` (already added). */
EMEL_API emel_status emel_graph_set_node_phase(emel_graph* graph, const char* node_id,
                                               emel_phase phase);

/* Optional: run the nodes in this order (n node ids, each node exactly once) instead of the order added. */
EMEL_API emel_status emel_graph_set_execution_order(emel_graph* graph,
                                                    const char* const* node_ids, size_t n);

/* Run the full graph validation (what emel_plan_create does first). */
EMEL_API emel_status emel_graph_validate(const emel_graph* graph);

/* Bulk input, mirroring emel.memory.Graph.from_arrays. Tensor i gets the id
 * "t<i>", node j the id "n<j>" (zero-padded, so id order is index order);
 * nodes run in index order. Node j reads in_index[in_start[j] .. in_start[j+1])
 * and writes out_index[out_start[j] .. out_start[j+1]). Optional per-tensor
 * arrays may be NULL (defaults in brackets). All arrays are copied. */
typedef struct emel_graph_arrays {
    size_t num_tensors;
    size_t num_nodes;
    const uint64_t* size;         /* num_tensors: bytes per tensor */
    const uint64_t* in_start;     /* num_nodes + 1, starts at 0, non-decreasing */
    const uint64_t* in_index;     /* in_start[num_nodes] tensor indices (NULL if none) */
    const uint64_t* out_start;    /* num_nodes + 1 */
    const uint64_t* out_index;    /* out_start[num_nodes] tensor indices (NULL if none) */
    const uint8_t* role;          /* optional: emel_role per tensor [EMEL_ROLE_ACTIVATION] */
    const uint8_t* can_inplace;   /* optional: nonzero = may be computed in place [0] */
    const uint64_t* alignment;    /* optional: 0 = none, else a power of two [0] */
    const int64_t* view_base;     /* optional: base tensor index, -1 = storage tensor [-1] */
    const uint64_t* view_offset;  /* optional: byte offset of a view in its base [0] */
    const uint64_t* outputs;      /* num_outputs tensor indices (NULL if none) */
    size_t num_outputs;
} emel_graph_arrays;

/* A graph from index arrays (read-only: emel_graph_add_* and set_* on it fail
 * with EMEL_INVALID_ARGUMENT). `name` may be NULL. Free with emel_graph_destroy. */
EMEL_API emel_status emel_graph_from_arrays(const emel_graph_arrays* arrays, const char* name,
                                            emel_graph** out);

/* Number of tensors / nodes added so far. */
EMEL_API emel_status emel_graph_num_tensors(const emel_graph* graph, size_t* out);
EMEL_API emel_status emel_graph_num_nodes(const emel_graph* graph, size_t* out);

/* ---------------------------------------------------------------- planning */

/* Per-arena configuration (the `arenas=` of emel.memory.plan); arenas not
 * listed get the defaults. A zeroed entry with a name means "all defaults". */
typedef struct emel_arena_config {
    const char* name;          /* arena name, non-empty, e.g. "activations" */
    uint64_t alignment_bytes;  /* power of two; 0 = the plan's default_alignment */
    int has_capacity;          /* nonzero: capacity_bytes applies */
    uint64_t capacity_bytes;   /* a plan needing more fails with EMEL_ARENA_TOO_SMALL */
    int has_page_size;         /* nonzero: page_size applies */
    uint64_t page_size;        /* recorded in the plan only [4096] */
    int has_persistent;        /* nonzero: persistent applies */
    int persistent;            /* nonzero: laid out sequentially, no reuse [only "parameters"] */
} emel_arena_config;

/* Options of emel_plan_create; fill with emel_plan_options_default first. */
typedef struct emel_plan_options {
    emel_mode mode;                 /* [EMEL_MODE_INFERENCE] */
    emel_strategy strategy;         /* [EMEL_STRATEGY_TMMU] */
    emel_fit fit;                   /* greedy_by_size only [EMEL_FIT_BEST] */
    uint64_t time_budget_ms;        /* auto / optimal, in deterministic work units [200] */
    uint64_t default_alignment;     /* every arena's alignment unless configured [128] */
    const emel_arena_config* arenas;  /* num_arenas entries, distinct names [NULL] */
    size_t num_arenas;              /* [0] */
    /* Default arena per role, indexed by emel_role; NULL = built-in default.
     * E.g. role_arenas[EMEL_ROLE_GRADIENT] = "activations". [all NULL] */
    const char* role_arenas[EMEL_NUM_ROLES];
} emel_plan_options;

/* Fill *options with the defaults shown in brackets above. */
EMEL_API emel_status emel_plan_options_default(emel_plan_options* options);

/* Validate and plan `graph`; `options` NULL = defaults. *out receives the plan
 * (NULL on failure). The plan is independent of the graph. Free with emel_plan_destroy. */
EMEL_API emel_status emel_plan_create(const emel_graph* graph, const emel_plan_options* options,
                                      emel_plan** out);

/* Release a plan (NULL is ignored); every string it handed out dies with it. */
EMEL_API void emel_plan_destroy(emel_plan* plan);

/* ------------------------------------------------------------ determinism */
/*
 * The determinism contract (docs/determinism.md, docs/c_api.md): every plan
 * carries SHA-256 hashes of its inputs and of itself, equal to
 * emel.memory.plan(...).hashes for the same graph and options. A plan made
 * by emel_plan_create has the default replay token, rank 0, world size 1
 * and an empty shard spec.
 */

/* Bytes of a replay token and of every hash; characters of a hash in hex
 * including the terminating NUL (64 lowercase hex digits + NUL). */
#define EMEL_HASH_SIZE 32
#define EMEL_HASH_HEX_SIZE 65

/* One entry of a shard spec: tensor `tensor_id` is split along `axis`. */
typedef struct emel_shard_entry {
    const char* tensor_id;  /* non-empty; ids must be distinct */
    uint64_t axis;
} emel_shard_entry;

/* Determinism inputs of emel_plan_create_ex; fill with
 * emel_determinism_options_default first. The shard spec is a HASH INPUT
 * ONLY: the C API does not shard. Pass the graph of this rank's share (the
 * graph emel.memory.sharding.shard_graph(document, rank, world_size, spec)
 * returns) together with the spec, and the plan and its hashes equal
 * emel.memory.plan(document, rank=..., world_size=..., shard_spec=spec). */
typedef struct emel_determinism_options {
    int has_replay_token;                  /* nonzero: replay_token applies [0] */
    uint8_t replay_token[EMEL_HASH_SIZE];  /* [derived from the graph and the mode] */
    uint64_t rank;                         /* 0 <= rank < world_size [0] */
    uint64_t world_size;                   /* >= 1 [1] */
    const emel_shard_entry* shard_spec;    /* num_shard_entries entries [NULL] */
    size_t num_shard_entries;              /* [0] */
} emel_determinism_options;

/* Fill *options with the defaults shown in brackets above. */
EMEL_API emel_status emel_determinism_options_default(emel_determinism_options* options);

/* emel_plan_create with determinism inputs (`determinism` NULL = defaults).
 * Checked after the plan options, in Python's order: world_size (0 is
 * EMEL_INVALID_IR_SHAPES), rank (>= world_size: EMEL_INVALID_IR_SHAPES),
 * shard entries (NULL id or a repeated id: EMEL_INVALID_ARGUMENT; "" :
 * EMEL_INVALID_IR_SHAPES); then the graph. */
EMEL_API emel_status emel_plan_create_ex(const emel_graph* graph,
                                         const emel_plan_options* options,
                                         const emel_determinism_options* determinism,
                                         emel_plan** out);

/* The hashes a plan carries (the keys of emel.memory.Plan.hashes). */
typedef enum emel_hash_kind {
    EMEL_HASH_IR = 0,               /* "ir_hash": the graph in canonical form */
    EMEL_HASH_EXECUTION_ORDER = 1,  /* "execution_order_hash" */
    EMEL_HASH_ARENA_CONFIG = 2,     /* "arena_config_hash" */
    EMEL_HASH_SHARD_SPEC = 3,       /* "shard_spec_hash" */
    EMEL_HASH_PLAN = 4,             /* "plan_hash": the plan and all its inputs */
    EMEL_HASH_MAX_ENUM_ = 0x7FFFFFFF
} emel_hash_kind;

/* Hash `kind` of the plan: 32 raw bytes into out[0..31]. */
EMEL_API emel_status emel_plan_hash(const emel_plan* plan, emel_hash_kind kind, uint8_t* out);
/* Hash `kind` as 64 lowercase hex digits + NUL into buf; `size` is buf's
 * size and must be at least EMEL_HASH_HEX_SIZE (else EMEL_INVALID_ARGUMENT,
 * buf untouched). */
EMEL_API emel_status emel_plan_hash_hex(const emel_plan* plan, emel_hash_kind kind, char* buf,
                                        size_t size);
/* The plan's replay token (the one given, or the default one): 32 raw bytes
 * into out[0..31], or as hex like emel_plan_hash_hex. */
EMEL_API emel_status emel_plan_replay_token(const emel_plan* plan, uint8_t* out);
EMEL_API emel_status emel_plan_replay_token_hex(const emel_plan* plan, char* buf, size_t size);
/* The plan's rank and world size. */
EMEL_API emel_status emel_plan_rank(const emel_plan* plan, uint64_t* out);
EMEL_API emel_status emel_plan_world_size(const emel_plan* plan, uint64_t* out);

/* Number of steps (nodes) of the planned graph. */
EMEL_API emel_status emel_plan_num_steps(const emel_plan* plan, size_t* out);

/* Number of arenas; arenas are indexed 0 .. n-1 in name order. */
EMEL_API emel_status emel_plan_num_arenas(const emel_plan* plan, size_t* out);
/* Index of the arena named `name` (EMEL_INVALID_ARGUMENT if there is none). */
EMEL_API emel_status emel_plan_arena_index(const emel_plan* plan, const char* name, size_t* out);
/* Name of arena `arena` (valid while the plan lives). */
EMEL_API emel_status emel_plan_arena_name(const emel_plan* plan, size_t arena, const char** out);
/* Size in bytes of arena `arena`: the buffer to allocate for it. */
EMEL_API emel_status emel_plan_arena_size(const emel_plan* plan, size_t arena, uint64_t* out);
/* Lower bound of arena `arena`: no plan can be smaller (peak of live bytes). */
EMEL_API emel_status emel_plan_arena_lower_bound(const emel_plan* plan, size_t arena,
                                                 uint64_t* out);
/* Alignment in bytes of arena `arena` (its base address must be aligned to it). */
EMEL_API emel_status emel_plan_arena_alignment(const emel_plan* plan, size_t arena,
                                               uint64_t* out);
/* Sum of all arena sizes. */
EMEL_API emel_status emel_plan_total_bytes(const emel_plan* plan, uint64_t* out);

/* Number of tensors; tensors are indexed in the order they were added. */
EMEL_API emel_status emel_plan_num_tensors(const emel_plan* plan, size_t* out);
/* Index of tensor `id` (EMEL_INVALID_ARGUMENT if there is none). */
EMEL_API emel_status emel_plan_tensor_index(const emel_plan* plan, const char* id, size_t* out);
/* Id of tensor `tensor` (valid while the plan lives). */
EMEL_API emel_status emel_plan_tensor_id(const emel_plan* plan, size_t tensor, const char** out);

/* Everything the plan says about one tensor. */
typedef struct emel_tensor_placement {
    uint64_t offset;    /* byte offset in its arena */
    uint64_t size;      /* bytes */
    size_t arena;       /* arena index */
    uint32_t birth;     /* first step it is live (a view: its root's) */
    uint32_t death;     /* last step it is live, inclusive (a view: its root's) */
    int is_view;        /* nonzero for a view */
    size_t view_of;     /* a view: the index of its storage root; else EMEL_NO_INDEX */
    size_t inplace_of;  /* index of the tensor whose bytes it reuses in place, or EMEL_NO_INDEX */
} emel_tensor_placement;

/* Placement of tensor `tensor` (by index) / of tensor `id`. */
EMEL_API emel_status emel_plan_tensor(const emel_plan* plan, size_t tensor,
                                      emel_tensor_placement* out);
EMEL_API emel_status emel_plan_tensor_by_id(const emel_plan* plan, const char* id,
                                            emel_tensor_placement* out);

/* Single fields by index: offset in its arena, arena index, size, birth and
 * death step (inclusive; a view reports its root's lifetime). */
EMEL_API emel_status emel_plan_tensor_offset(const emel_plan* plan, size_t tensor, uint64_t* out);
EMEL_API emel_status emel_plan_tensor_arena(const emel_plan* plan, size_t tensor, size_t* out);
EMEL_API emel_status emel_plan_tensor_size(const emel_plan* plan, size_t tensor, uint64_t* out);
EMEL_API emel_status emel_plan_tensor_birth(const emel_plan* plan, size_t tensor, uint32_t* out);
EMEL_API emel_status emel_plan_tensor_death(const emel_plan* plan, size_t tensor, uint32_t* out);

/* The same fields by tensor id. */
EMEL_API emel_status emel_plan_tensor_offset_by_id(const emel_plan* plan, const char* id,
                                                   uint64_t* out);
EMEL_API emel_status emel_plan_tensor_arena_by_id(const emel_plan* plan, const char* id,
                                                  size_t* out);
EMEL_API emel_status emel_plan_tensor_size_by_id(const emel_plan* plan, const char* id,
                                                 uint64_t* out);
EMEL_API emel_status emel_plan_tensor_birth_by_id(const emel_plan* plan, const char* id,
                                                  uint32_t* out);
EMEL_API emel_status emel_plan_tensor_death_by_id(const emel_plan* plan, const char* id,
                                                  uint32_t* out);

/* --------------------------------------------------- placement, no graph */

/* Place n buffers, buffer i live over the half-open step interval
 * [lower[i], upper[i]) with size[i] bytes, like emel.memory.place()
 * (docs/strategies.md section 6; fit = best, no capacity target).
 * Sizes are rounded up to `alignment` (a power of two); offsets_out (n
 * entries, caller-allocated) receives offsets that are multiples of it and
 * *arena_size_out the arena size rounded up to it (arena_size_out may be
 * NULL). Arrays may be NULL when n is 0. Row index breaks ties. */
EMEL_API emel_status emel_place(const uint64_t* lower, const uint64_t* upper,
                                const uint64_t* size, size_t n, emel_strategy strategy,
                                uint64_t alignment, uint64_t time_budget_ms,
                                uint64_t* offsets_out, uint64_t* arena_size_out);

/* emel_place with the gap choice of greedy_by_size and, for auto / optimal,
 * a `capacity` to try first (0 = none). */
EMEL_API emel_status emel_place_ex(const uint64_t* lower, const uint64_t* upper,
                                   const uint64_t* size, size_t n, emel_strategy strategy,
                                   emel_fit fit, uint64_t alignment, uint64_t time_budget_ms,
                                   uint64_t capacity, uint64_t* offsets_out,
                                   uint64_t* arena_size_out);

/* ------------------------------------------------- ggml-style allocators */
/*
 * A model of llama.cpp's ggml-alloc (docs/ggml.md): the same sizes and the
 * same offsets as ggml_tallocr, ggml_gallocr and
 * ggml_backend_alloc_ctx_tensors_from_buft, or, with another strategy, ggml's
 * lifetimes and in-place decisions placed by one of the planner's
 * strategies. No memory is allocated: tensors get addresses
 * (buffer id, chunk, offset) that the runtime maps onto its own buffers.
 *
 * An emel_ggml_graph holds tensors (like a ggml context) and a cgraph's
 * nodes and leafs, plus each tensor's address once allocated (like
 * tensor->buffer / tensor->data). Tensors are indexed 0, 1, ... in the
 * order added. Same conventions as above: caller-owned handles freed by
 * their *_destroy function, status codes, this thread's last error.
 */

/* At most this many sources per tensor (GGML_MAX_SRC). */
#define EMEL_GGML_MAX_SRC 10

/* Tensor flags (emel_ggml_graph_add_tensor / emel_ggml_graph_set_flags). */
#define EMEL_GGML_FLAG_INPUT 1u     /* ggml_set_input: placed before the nodes */
#define EMEL_GGML_FLAG_OUTPUT 2u    /* ggml_set_output: never freed, never overwritten in place;
                                       set it on the view root too, as ggml does */
#define EMEL_GGML_FLAG_HAS_DATA 4u  /* pre-allocated (e.g. weights): the graph allocator skips it */

/* What the graph allocator needs to know of a tensor's op. */
typedef enum emel_ggml_op {
    EMEL_GGML_OP_NONE = 0,     /* GGML_OP_NONE: leafs, and views made without an op */
    EMEL_GGML_OP_OTHER = 1,    /* any op ggml never runs in place (MUL_MAT, CPY, VIEW, ...) */
    EMEL_GGML_OP_INPLACE = 2,  /* ggml_op_can_inplace(op): ADD, MUL, SCALE, SOFT_MAX, ROPE, ... */
    EMEL_GGML_OP_MAX_ENUM_ = 0x7FFFFFFF
} emel_ggml_op;

/* Where a tensor lives: chunk `chunk` of buffer id `buffer_id`, at `offset`.
 * buffer_id -1 (and chunk -1): nowhere (not allocated, or pre-allocated). */
typedef struct emel_ggml_address {
    int32_t buffer_id;
    int32_t chunk;
    uint64_t offset;
} emel_ggml_address;

typedef struct emel_ggml_graph emel_ggml_graph;
typedef struct emel_ggml_buffer_type emel_ggml_buffer_type;
typedef struct emel_ggml_gallocr emel_ggml_gallocr;
typedef struct emel_ggml_tallocr emel_ggml_tallocr;

/* New empty graph. Free with emel_ggml_graph_destroy. */
EMEL_API emel_status emel_ggml_graph_create(emel_ggml_graph** out);
/* Release a graph (NULL is ignored). */
EMEL_API void emel_ggml_graph_destroy(emel_ggml_graph* graph);

/* Append a tensor; *index_out (may be NULL) receives its index.
 * `name`: for error messages (NULL = "#<index>"). `nbytes`: its allocation
 * size (ggml_backend_buft_get_alloc_size). `srcs`: n_srcs (<= 10) tensor
 * indices, EMEL_NO_INDEX for an empty slot; NULL when n_srcs is 0.
 * `view_src`: EMEL_NO_INDEX, or the index of the ROOT tensor this one is a
 * view of (ggml flattens views of views), `view_offs` bytes into it.
 * Indices may name tensors added later; they are checked when the graph
 * is used. Two tensors have the same layout (ggml_are_same_layout, needed
 * to run in place) when their nbytes are equal, unless set otherwise with
 * emel_ggml_graph_set_layout. */
EMEL_API emel_status emel_ggml_graph_add_tensor(emel_ggml_graph* graph, const char* name,
                                                uint64_t nbytes, emel_ggml_op op, uint32_t flags,
                                                const size_t* srcs, size_t n_srcs,
                                                size_t view_src, uint64_t view_offs,
                                                size_t* index_out);
/* Give tensor `tensor` an explicit layout: tensors with equal explicit
 * layouts have the same layout (e.g. a hash of type, ne[] and nb[]). */
EMEL_API emel_status emel_ggml_graph_set_layout(emel_ggml_graph* graph, size_t tensor,
                                                uint64_t layout);
/* Replace tensor `tensor`'s flags (EMEL_GGML_FLAG_*). */
EMEL_API emel_status emel_ggml_graph_set_flags(emel_ggml_graph* graph, size_t tensor,
                                               uint32_t flags);
/* Its flags (allocation by emel_ggml_alloc_ctx_tensors adds HAS_DATA). */
EMEL_API emel_status emel_ggml_graph_flags(const emel_ggml_graph* graph, size_t tensor,
                                           uint32_t* out);
/* Append tensor `tensor` to the nodes (execution order) / to the leafs. */
EMEL_API emel_status emel_ggml_graph_add_node(emel_ggml_graph* graph, size_t tensor);
EMEL_API emel_status emel_ggml_graph_add_leaf(emel_ggml_graph* graph, size_t tensor);
/* ggml_build_forward_expand: append `tensor` and, depth-first over sources
 * in slot order, every tensor it depends on that is not in the graph yet;
 * tensors with EMEL_GGML_OP_NONE become leafs, the rest nodes. */
EMEL_API emel_status emel_ggml_graph_build_forward_expand(emel_ggml_graph* graph, size_t tensor);
/* Counts of tensors, nodes, leafs. */
EMEL_API emel_status emel_ggml_graph_num_tensors(const emel_ggml_graph* graph, size_t* out);
EMEL_API emel_status emel_ggml_graph_num_nodes(const emel_ggml_graph* graph, size_t* out);
EMEL_API emel_status emel_ggml_graph_num_leafs(const emel_ggml_graph* graph, size_t* out);
/* Tensor index of node i / leaf i. */
EMEL_API emel_status emel_ggml_graph_node(const emel_ggml_graph* graph, size_t i, size_t* out);
EMEL_API emel_status emel_ggml_graph_leaf(const emel_ggml_graph* graph, size_t i, size_t* out);
/* Where tensor `tensor` lives, once bound by emel_ggml_gallocr_alloc_graph
 * or emel_ggml_alloc_ctx_tensors (buffer_id -1 before). */
EMEL_API emel_status emel_ggml_graph_tensor_address(const emel_ggml_graph* graph, size_t tensor,
                                                    emel_ggml_address* out);

/* A backend buffer type: allocations aligned to `alignment` (a power of
 * two); one buffer (chunk) holds at most `max_size` bytes (UINT64_MAX =
 * unbounded). Passing the same handle twice to emel_ggml_gallocr_create
 * means one shared buffer, as in ggml. Allocators copy what they need:
 * the handle may be destroyed once they are created. */
EMEL_API emel_status emel_ggml_buffer_type_create(uint64_t alignment, uint64_t max_size,
                                                  emel_ggml_buffer_type** out);
EMEL_API void emel_ggml_buffer_type_destroy(emel_ggml_buffer_type* type);

/* ggml_gallocr_new_n: a graph allocator with n buffer ids, id i of type
 * types[i]. `strategy`: "ggml" (or NULL) for ggml's exact placement, or a
 * planner strategy ("tmmu", "greedy_by_size", "best_fit", "auto",
 * "optimal") placing ggml's lifetimes within `time_budget_ms` work units.
 * Free with emel_ggml_gallocr_destroy. */
EMEL_API emel_status emel_ggml_gallocr_create(const emel_ggml_buffer_type* const* types,
                                              size_t n, const char* strategy,
                                              uint64_t time_budget_ms, emel_ggml_gallocr** out);
EMEL_API void emel_ggml_gallocr_destroy(emel_ggml_gallocr* galloc);

/* ggml_gallocr_reserve: plan `graph` with every node and leaf in buffer 0,
 * and grow the buffers the plan outgrows (buffers never shrink). */
EMEL_API emel_status emel_ggml_gallocr_reserve(emel_ggml_gallocr* galloc,
                                               const emel_ggml_graph* graph);
/* ggml_gallocr_reserve_n: node i in buffer node_buffer_ids[i], leaf i in
 * leaf_buffer_ids[i] (one entry per node / leaf; NULL = all 0). */
EMEL_API emel_status emel_ggml_gallocr_reserve_n(emel_ggml_gallocr* galloc,
                                                 const emel_ggml_graph* graph,
                                                 const int32_t* node_buffer_ids,
                                                 const int32_t* leaf_buffer_ids);
/* ggml_gallocr_reserve_n_size: plan without allocating (a buffer the plan
 * outgrows is freed, as ggml does); sizes_out (one per buffer id,
 * caller-allocated) receives the bytes each buffer id needs (an id sharing
 * another id's buffer repeats that size). */
EMEL_API emel_status emel_ggml_gallocr_reserve_n_size(emel_ggml_gallocr* galloc,
                                                      const emel_ggml_graph* graph,
                                                      const int32_t* node_buffer_ids,
                                                      const int32_t* leaf_buffer_ids,
                                                      uint64_t* sizes_out);
/* *out = nonzero when `graph` does not fit the last plan: different node or
 * leaf counts, or a node (or a source of one) without data that was not
 * placed or has grown. */
EMEL_API emel_status emel_ggml_gallocr_needs_realloc(const emel_ggml_gallocr* galloc,
                                                     const emel_ggml_graph* graph, int* out);
/* ggml_gallocr_alloc_graph: when the graph does not fit, reserve it again
 * (one buffer id) or set *allocated = 0 and change nothing (several: call
 * emel_ggml_gallocr_reserve_n first). Else bind every tensor of the graph
 * to its address (emel_ggml_graph_tensor_address) and set *allocated = 1. */
EMEL_API emel_status emel_ggml_gallocr_alloc_graph(emel_ggml_gallocr* galloc,
                                                   emel_ggml_graph* graph, int* allocated);
/* ggml_gallocr_get_buffer_size: the bytes of buffer id `buffer_id` (the sum
 * of its chunks); 0 before any reserve and for an id sharing an earlier
 * id's buffer. */
EMEL_API emel_status emel_ggml_gallocr_get_buffer_size(const emel_ggml_gallocr* galloc,
                                                       int32_t buffer_id, uint64_t* out);
/* Number of chunks of buffer id `buffer_id`'s buffer (0 before any reserve),
 * and the size of chunk `chunk`. */
EMEL_API emel_status emel_ggml_gallocr_num_chunks(const emel_ggml_gallocr* galloc,
                                                  int32_t buffer_id, size_t* out);
EMEL_API emel_status emel_ggml_gallocr_chunk_size(const emel_ggml_gallocr* galloc,
                                                  int32_t buffer_id, size_t chunk, uint64_t* out);
/* Of the last plan, for tensor `tensor` of the graph planned: its address
 * (buffer_id -1 for views, pre-allocated and unplaced tensors) and the
 * tensor whose bytes it took in place (EMEL_NO_INDEX if none). */
EMEL_API emel_status emel_ggml_gallocr_tensor_address(const emel_ggml_gallocr* galloc,
                                                      size_t tensor, emel_ggml_address* out);
EMEL_API emel_status emel_ggml_gallocr_tensor_inplace_of(const emel_ggml_gallocr* galloc,
                                                         size_t tensor, size_t* out);

/* ggml_tallocr_new over a buffer of `buffer_size` bytes of type `type`:
 * tensors one after another, never freed. Free with emel_ggml_tallocr_destroy. */
EMEL_API emel_status emel_ggml_tallocr_create(uint64_t buffer_size,
                                              const emel_ggml_buffer_type* type,
                                              emel_ggml_tallocr** out);
EMEL_API void emel_ggml_tallocr_destroy(emel_ggml_tallocr* talloc);
/* ggml_tallocr_alloc: *offset_out receives the offset of `nbytes` bytes
 * (rounded up to the alignment); EMEL_ARENA_TOO_SMALL when they do not fit
 * (nothing changes). `name` (may be NULL) is for the error message. */
EMEL_API emel_status emel_ggml_tallocr_alloc(emel_ggml_tallocr* talloc, uint64_t nbytes,
                                             const char* name, uint64_t* offset_out);
/* The next free offset. */
EMEL_API emel_status emel_ggml_tallocr_offset(const emel_ggml_tallocr* talloc, uint64_t* out);

/* ggml_backend_alloc_ctx_tensors_from_buft over the n tensors `tensors` of
 * `graph` (its context), in that order (tensors NULL: all, in index order).
 * Tensors without data that are not views go into buffers of at most the
 * type's max_size (a larger tensor gets a buffer of its own); each gets
 * EMEL_GGML_FLAG_HAS_DATA and the address (buffer index, 0, offset); views
 * among them of an allocated tensor are bound too. *num_buffers_out
 * receives the number of buffers; their sizes go to sizes_out, at most
 * `capacity` of them (sizes_out may be NULL when capacity is 0). */
EMEL_API emel_status emel_ggml_alloc_ctx_tensors(emel_ggml_graph* graph, const size_t* tensors,
                                                 size_t n, const emel_ggml_buffer_type* type,
                                                 uint64_t* sizes_out, size_t capacity,
                                                 size_t* num_buffers_out);
/* ggml_backend_alloc_ctx_tensors_from_buft_size: the bytes the above would
 * allocate, summed over its buffers; changes nothing. */
EMEL_API emel_status emel_ggml_alloc_ctx_tensors_size(const emel_ggml_graph* graph,
                                                      const size_t* tensors, size_t n,
                                                      const emel_ggml_buffer_type* type,
                                                      uint64_t* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* EMEL_MEMORY_H */
