/*
 * Test of the C API (include/emel/memory.h), in C99. Built and run by
 * tests/test_c_api.py; by hand:
 *   cc -std=c99 -Wall -Wextra -I<include dir> tests/c/test_c_api.c \
 *      -L<lib dir> -lemel_memory_c -Wl,-rpath,<lib dir> -o test_c_api && ./test_c_api
 * Exits 0 when every check passes; prints one line per result and
 * "FAIL ..." for each failed check.
 *
 * The graph (arena alignment 128, so sizes round to 128):
 *   x (input, 256 B) -scale-> a (1000 B) -relu-> h (1000 B, can_inplace)
 *   h, w (parameter, 4096 B) -matmul-> y (1500 B, a graph output)
 *   hv: a 256 B view of h at byte 512 (used by no node)
 * Steps: scale 0, relu 1, matmul 2. Lifetimes [birth, death]:
 *   x [0,0], a [0,1], h [1,2], y [2,2]; w is persistent [0,2].
 * Arena "activations" (index 0): lower bound = max live bytes = h + y = 2500.
 *   tmmu: slots swept by birth, size, id: a -> slot 0, x -> slot 1; at step 1
 *   x's slot is free and h takes a's slot in place (a dies at relu); y takes
 *   the free slot 1. Slot 0 = 1024 B at 0, slot 1 = max(256, 1536) at 1024:
 *   a = h = 0, x = y = 1024, hv = 0 + 512, arena 1024 + 1536 = 2560.
 *   greedy_by_size: buffers {a,h} [0,3) 1024 B, {x} [0,1) 256 B, {y} [2,3)
 *   1536 B, placed biggest first: y at 0; {a,h} conflicts with y -> on top
 *   at 1536; x conflicts with {a,h} only and fits the gap [0, 1536) -> 0.
 *   Offsets y = x = 0, a = h = 1536, hv = 2048; arena 1536 + 1024 = 2560.
 * Arena "parameters" (index 1): w at 0, 4096 B.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emel/memory.h"

static int failures = 0;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);             \
            ++failures;                                                        \
        }                                                                      \
    } while (0)

/* A call that must succeed; prints the library's error when it does not. */
#define OK(call)                                                               \
    do {                                                                       \
        emel_status st_ = (call);                                              \
        if (st_ != EMEL_OK) {                                                  \
            printf("FAIL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,    \
                   emel_status_name(st_), emel_last_error_message());          \
            ++failures;                                                        \
        }                                                                      \
    } while (0)

static emel_graph* build_tiny(void) {
    static const char* const scale_in[] = {"x"};
    static const char* const scale_out[] = {"a"};
    static const char* const relu_in[] = {"a"};
    static const char* const relu_out[] = {"h"};
    static const char* const matmul_in[] = {"h", "w"};
    static const char* const matmul_out[] = {"y"};
    emel_graph* g = NULL;
    OK(emel_graph_create("tiny", &g));
    if (g == NULL) return NULL;
    OK(emel_graph_add_tensor(g, "x", 256, EMEL_ROLE_INPUT, 0, 0, NULL, 0));
    OK(emel_graph_add_tensor(g, "w", 4096, EMEL_ROLE_PARAMETER, 0, 0, NULL, 0));
    OK(emel_graph_add_tensor(g, "a", 1000, EMEL_ROLE_ACTIVATION, 0, 0, NULL, 0));
    OK(emel_graph_add_tensor(g, "h", 1000, EMEL_ROLE_ACTIVATION, 0, 1, NULL, 0));
    OK(emel_graph_add_tensor(g, "hv", 256, EMEL_ROLE_ACTIVATION, 0, 0, "h", 512));
    OK(emel_graph_add_tensor(g, "y", 1500, EMEL_ROLE_ACTIVATION, 0, 0, NULL, 0));
    OK(emel_graph_add_node(g, "scale", scale_in, 1, scale_out, 1));
    OK(emel_graph_add_node(g, "relu", relu_in, 1, relu_out, 1));
    OK(emel_graph_add_node(g, "matmul", matmul_in, 2, matmul_out, 1));
    OK(emel_graph_add_output(g, "y"));
    OK(emel_graph_validate(g));
    return g;
}

/* Expected offsets of x, w, a, h, hv, y. */
static void check_plan(const emel_graph* g, emel_strategy strategy, const char* name,
                       const uint64_t expected_offset[6]) {
    static const char* const ids[] = {"x", "w", "a", "h", "hv", "y"};
    static const size_t expected_arena[] = {0, 1, 0, 0, 0, 0};
    static const uint32_t expected_birth[] = {0, 0, 0, 1, 1, 2};
    static const uint32_t expected_death[] = {0, 2, 1, 2, 2, 2};
    emel_plan_options opt;
    emel_plan* p = NULL;
    size_t n_arenas = 0, n_tensors = 0, k, i, act = 99, par = 99;
    uint64_t total = 0;

    OK(emel_plan_options_default(&opt));
    CHECK(opt.default_alignment == 128 && opt.time_budget_ms == 200);
    opt.strategy = strategy;
    OK(emel_plan_create(g, &opt, &p));
    if (p == NULL) return;

    OK(emel_plan_num_arenas(p, &n_arenas));
    CHECK(n_arenas == 2);
    for (k = 0; k < n_arenas; ++k) {
        const char* arena = NULL;
        uint64_t size = 0, lower_bound = 0, alignment = 0;
        OK(emel_plan_arena_name(p, k, &arena));
        OK(emel_plan_arena_size(p, k, &size));
        OK(emel_plan_arena_lower_bound(p, k, &lower_bound));
        OK(emel_plan_arena_alignment(p, k, &alignment));
        printf("%s arena %s size=%" PRIu64 " lower_bound=%" PRIu64 "\n", name,
               arena ? arena : "?", size, lower_bound);
        CHECK(alignment == 128);
        if (k == 0) CHECK(arena && strcmp(arena, "activations") == 0 && size == 2560 &&
                          lower_bound == 2500);
        if (k == 1) CHECK(arena && strcmp(arena, "parameters") == 0 && size == 4096 &&
                          lower_bound == 4096);
    }
    OK(emel_plan_arena_index(p, "activations", &act));
    OK(emel_plan_arena_index(p, "parameters", &par));
    CHECK(act == 0 && par == 1);
    OK(emel_plan_total_bytes(p, &total));
    CHECK(total == 2560 + 4096);

    OK(emel_plan_num_tensors(p, &n_tensors));
    CHECK(n_tensors == 6);
    for (i = 0; i < 6 && i < n_tensors; ++i) {
        const char* id = NULL;
        size_t index = 99, arena = 99, arena_by_id = 99;
        uint64_t offset = 1, offset_by_id = 1, size = 0;
        uint32_t birth = 9, death = 9, birth_by_id = 9, death_by_id = 9;
        emel_tensor_placement tp, tp_by_id;
        OK(emel_plan_tensor_id(p, i, &id));
        CHECK(id && strcmp(id, ids[i]) == 0);
        OK(emel_plan_tensor_index(p, ids[i], &index));
        CHECK(index == i);
        OK(emel_plan_tensor_offset(p, i, &offset));
        OK(emel_plan_tensor_arena(p, i, &arena));
        OK(emel_plan_tensor_size(p, i, &size));
        OK(emel_plan_tensor_birth(p, i, &birth));
        OK(emel_plan_tensor_death(p, i, &death));
        OK(emel_plan_tensor_offset_by_id(p, ids[i], &offset_by_id));
        OK(emel_plan_tensor_arena_by_id(p, ids[i], &arena_by_id));
        OK(emel_plan_tensor_birth_by_id(p, ids[i], &birth_by_id));
        OK(emel_plan_tensor_death_by_id(p, ids[i], &death_by_id));
        OK(emel_plan_tensor(p, i, &tp));
        OK(emel_plan_tensor_by_id(p, ids[i], &tp_by_id));
        printf("%s tensor %s offset=%" PRIu64 " arena=%u birth=%u death=%u\n", name, ids[i],
               offset, (unsigned)arena, (unsigned)birth, (unsigned)death);
        CHECK(offset == expected_offset[i] && offset_by_id == offset);
        CHECK(arena == expected_arena[i] && arena_by_id == arena);
        CHECK(birth == expected_birth[i] && birth_by_id == birth);
        CHECK(death == expected_death[i] && death_by_id == death);
        CHECK(tp.offset == offset && tp.arena == arena && tp.size == size &&
              tp.birth == birth && tp.death == death);
        CHECK(tp_by_id.offset == tp.offset && tp_by_id.size == tp.size &&
              tp_by_id.arena == tp.arena && tp_by_id.birth == tp.birth &&
              tp_by_id.death == tp.death && tp_by_id.is_view == tp.is_view &&
              tp_by_id.view_of == tp.view_of && tp_by_id.inplace_of == tp.inplace_of);
        /* h reuses a's bytes in place; hv is a view of h (index 3). */
        CHECK(tp.inplace_of == (i == 3 ? (size_t)2 : EMEL_NO_INDEX));
        CHECK(tp.is_view == (i == 4) && tp.view_of == (i == 4 ? (size_t)3 : EMEL_NO_INDEX));
    }
    emel_plan_destroy(p);
}

/* The same graph from index arrays: ids t0..t5 in the order x w a h hv y. */
static void check_from_arrays(void) {
    static const uint64_t size[] = {256, 4096, 1000, 1000, 256, 1500};
    static const uint8_t role[] = {EMEL_ROLE_INPUT, EMEL_ROLE_PARAMETER, EMEL_ROLE_ACTIVATION,
                                   EMEL_ROLE_ACTIVATION, EMEL_ROLE_ACTIVATION,
                                   EMEL_ROLE_ACTIVATION};
    static const uint8_t can_inplace[] = {0, 0, 0, 1, 0, 0};
    static const int64_t view_base[] = {-1, -1, -1, -1, 3, -1};
    static const uint64_t view_offset[] = {0, 0, 0, 0, 512, 0};
    static const uint64_t in_start[] = {0, 1, 2, 4}, in_index[] = {0, 2, 3, 1};
    static const uint64_t out_start[] = {0, 1, 2, 3}, out_index[] = {2, 3, 5};
    static const uint64_t outputs[] = {5};
    emel_graph_arrays a;
    emel_graph* g = NULL;
    emel_plan* p = NULL;
    uint64_t arena_size = 0, offset = 1;
    size_t n = 0;

    memset(&a, 0, sizeof a);
    a.num_tensors = 6;
    a.num_nodes = 3;
    a.size = size;
    a.in_start = in_start;
    a.in_index = in_index;
    a.out_start = out_start;
    a.out_index = out_index;
    a.role = role;
    a.can_inplace = can_inplace;
    a.view_base = view_base;
    a.view_offset = view_offset;
    a.outputs = outputs;
    a.num_outputs = 1;
    OK(emel_graph_from_arrays(&a, "tiny-arrays", &g));
    if (g == NULL) return;
    OK(emel_graph_num_tensors(g, &n));
    CHECK(n == 6);
    CHECK(emel_graph_add_output(g, "t0") == EMEL_INVALID_ARGUMENT); /* read-only */
    OK(emel_plan_create(g, NULL, &p)); /* NULL options: tmmu, inference, 128 */
    emel_graph_destroy(g);             /* the plan does not need the graph */
    if (p == NULL) return;
    OK(emel_plan_arena_size(p, 0, &arena_size));
    OK(emel_plan_tensor_offset_by_id(p, "t5", &offset));
    printf("arrays arena activations size=%" PRIu64 " t5 offset=%" PRIu64 "\n", arena_size,
           offset);
    CHECK(arena_size == 2560 && offset == 1024);
    emel_plan_destroy(p);
}

/* Three buffers, alignment 32 (sizes 128, 224, 128):
 *   0: [0,2) 100 B, 1: [1,3) 200 B, 2: [2,4) 100 B.
 * greedy_by_size places 1 first at 0; 0 overlaps it in time -> on top at 224;
 * 2 overlaps 1 but not 0 -> also on top of 1, at 224. Arena 224 + 128 = 352. */
static void check_place(void) {
    static const uint64_t lower[] = {0, 1, 2}, upper[] = {2, 3, 4}, size[] = {100, 200, 100};
    uint64_t offsets[3] = {1, 1, 1}, arena = 0;
    OK(emel_place(lower, upper, size, 3, EMEL_STRATEGY_GREEDY_BY_SIZE, 32, 200, offsets, &arena));
    printf("place greedy_by_size offsets=%" PRIu64 ",%" PRIu64 ",%" PRIu64 " size=%" PRIu64 "\n",
           offsets[0], offsets[1], offsets[2], arena);
    CHECK(offsets[0] == 224 && offsets[1] == 0 && offsets[2] == 224 && arena == 352);
    /* no buffers: NULL arrays are fine */
    arena = 7;
    OK(emel_place(NULL, NULL, NULL, 0, EMEL_STRATEGY_TMMU, 1, 0, NULL, &arena));
    CHECK(arena == 0);
    /* alignment 3 */
    CHECK(emel_place(lower, upper, size, 3, EMEL_STRATEGY_GREEDY_BY_SIZE, 3, 200, offsets,
                     &arena) == EMEL_ALIGNMENT_VIOLATION);
}

static void check_errors(const emel_graph* tiny) {
    static const char* const in[] = {"ghost"};
    static const char* const out[] = {"z"};
    emel_graph* g = NULL;
    emel_plan* p = (emel_plan*)&failures; /* must be reset to NULL on failure */
    emel_plan_options opt;
    emel_arena_config cfg;
    emel_status st;
    size_t n = 0;

    /* A node reading an unknown tensor. */
    OK(emel_graph_create(NULL, &g));
    if (g == NULL) return;
    OK(emel_graph_add_tensor(g, "z", 64, EMEL_ROLE_ACTIVATION, 0, 0, NULL, 0));
    OK(emel_graph_add_node(g, "bad", in, 1, out, 1));
    st = emel_plan_create(g, NULL, &p);
    printf("error %s tensor=%s node=%s message=%s\n", emel_status_name(st),
           emel_last_error_tensor(), emel_last_error_node(), emel_last_error_message());
    CHECK(st == EMEL_INVALID_IR_SHAPES && p == NULL);
    CHECK(emel_last_error_status() == EMEL_INVALID_IR_SHAPES);
    CHECK(strstr(emel_last_error_message(), "ghost") != NULL);
    CHECK(strcmp(emel_last_error_tensor(), "ghost") == 0);
    CHECK(strcmp(emel_last_error_node(), "bad") == 0);
    CHECK(emel_graph_validate(g) == EMEL_INVALID_IR_SHAPES);
    emel_graph_destroy(g);

    /* NULL handles and bad enum values. */
    st = emel_plan_num_arenas(NULL, &n);
    printf("error %s message=%s\n", emel_status_name(st), emel_last_error_message());
    CHECK(st == EMEL_INVALID_ARGUMENT);
    CHECK(emel_graph_add_tensor(NULL, "t", 1, EMEL_ROLE_ACTIVATION, 0, 0, NULL, 0) ==
          EMEL_INVALID_ARGUMENT);
    CHECK(emel_plan_create(NULL, NULL, &p) == EMEL_INVALID_ARGUMENT && p == NULL);
    OK(emel_plan_options_default(&opt));
    opt.strategy = (emel_strategy)42;
    CHECK(emel_plan_create(tiny, &opt, &p) == EMEL_INVALID_ARGUMENT && p == NULL);
    emel_graph_destroy(NULL);
    emel_plan_destroy(NULL);

    /* A capacity the plan does not fit in. */
    OK(emel_plan_options_default(&opt));
    memset(&cfg, 0, sizeof cfg);
    cfg.name = "activations";
    cfg.has_capacity = 1;
    cfg.capacity_bytes = 2048;
    opt.arenas = &cfg;
    opt.num_arenas = 1;
    st = emel_plan_create(tiny, &opt, &p);
    printf("error %s arena=%s\n", emel_status_name(st), emel_last_error_arena());
    CHECK(st == EMEL_ARENA_TOO_SMALL && p == NULL);
    CHECK(strcmp(emel_last_error_arena(), "activations") == 0);
}


/* ------------------------------------------------ ggml-style allocators
 * llama.cpp's tests/test-alloc.cpp cases with the exact sizes ggml gives
 * (shared ggml-alloc behaviour document, section 5). Tensors are 1-D byte
 * tensors, so "same layout" = same size; inputs are INPUT leafs; the last
 * tensor is OUTPUT; the graph is ggml_build_forward_expand(out). */
#define NONE_ EMEL_NO_INDEX

static size_t ggml_add(emel_ggml_graph* g, const char* name, uint64_t nbytes, emel_ggml_op op,
                       uint32_t flags, size_t s0, size_t s1) {
    size_t srcs[2], n = 0, index = NONE_;
    if (s0 != NONE_) srcs[n++] = s0;
    if (s1 != NONE_) srcs[n++] = s1;
    OK(emel_ggml_graph_add_tensor(g, name, nbytes, op, flags, srcs, n, NONE_, 0, &index));
    return index;
}

static size_t ggml_input(emel_ggml_graph* g, const char* name, uint64_t nbytes) {
    return ggml_add(g, name, nbytes, EMEL_GGML_OP_NONE, EMEL_GGML_FLAG_INPUT, NONE_, NONE_);
}

/* A view of `parent` (whose root is `root`, the parent itself when it is no view). */
static size_t ggml_view(emel_ggml_graph* g, const char* name, size_t parent, size_t root,
                        uint64_t nbytes, uint64_t offs) {
    size_t index = NONE_;
    OK(emel_ggml_graph_add_tensor(g, name, nbytes, EMEL_GGML_OP_OTHER, 0, &parent, 1, root, offs,
                                  &index));
    return index;
}

static void ggml_finish(emel_ggml_graph* g, size_t out) {
    OK(emel_ggml_graph_set_flags(g, out, EMEL_GGML_FLAG_OUTPUT));
    OK(emel_ggml_graph_build_forward_expand(g, out));
}

/* A fresh one-buffer graph allocator reserving g; prints "<name> size=... chunks=a,b,...". */
static emel_ggml_gallocr* ggml_reserve(const char* name, emel_ggml_graph* g, uint64_t alignment,
                                       uint64_t max_size, uint64_t expected_size) {
    emel_ggml_buffer_type* bt = NULL;
    emel_ggml_gallocr* ga = NULL;
    uint64_t size = 0, chunk = 0;
    size_t n = 0, c;
    OK(emel_ggml_buffer_type_create(alignment, max_size, &bt));
    OK(emel_ggml_gallocr_create((const emel_ggml_buffer_type* const*)&bt, 1, "ggml", 0, &ga));
    emel_ggml_buffer_type_destroy(bt); /* the allocator copied it */
    if (ga == NULL) return NULL;
    OK(emel_ggml_gallocr_reserve(ga, g));
    OK(emel_ggml_gallocr_get_buffer_size(ga, 0, &size));
    OK(emel_ggml_gallocr_num_chunks(ga, 0, &n));
    printf("ggml %s size=%" PRIu64 " chunks=", name, size);
    for (c = 0; c < n; ++c) {
        OK(emel_ggml_gallocr_chunk_size(ga, 0, c, &chunk));
        printf("%s%" PRIu64, c ? "," : "", chunk);
    }
    printf("\n");
    CHECK(size == expected_size);
    return ga;
}

static size_t inplace_of(const emel_ggml_gallocr* ga, size_t tensor) {
    size_t p = 12345;
    OK(emel_ggml_gallocr_tensor_inplace_of(ga, tensor, &p));
    return p;
}

static emel_ggml_address planned(const emel_ggml_gallocr* ga, size_t tensor) {
    emel_ggml_address a;
    memset(&a, 0x55, sizeof a);
    OK(emel_ggml_gallocr_tensor_address(ga, tensor, &a));
    return a;
}

static emel_ggml_address bound(const emel_ggml_graph* g, size_t tensor) {
    emel_ggml_address a;
    memset(&a, 0x55, sizeof a);
    OK(emel_ggml_graph_tensor_address(g, tensor, &a));
    return a;
}

/* max 16: x3 = mul(x0,x1), x4 = add(x1,x2), x5 = add(x3,x0), x6 = add(x4,x5).
 * Nodes run x4 x3 x5 x6. Leafs x1 x2 x0 take 8 + 8 of chunk 0 and 8 of
 * chunk 1; x4 runs in place of x2 (x1 is still read by x3), then x3 of x1,
 * x5 of x3, x6 of x4: chunks 16 + 8 = 24, x6 at chunk 0, offset 8. */
static void ggml_max_size_too_many_tensors(void) {
    emel_ggml_graph* g = NULL;
    emel_ggml_gallocr* ga;
    size_t x0, x1, x2, x3, x4, x5, x6, chunks = 0;
    OK(emel_ggml_graph_create(&g));
    if (g == NULL) return;
    x0 = ggml_input(g, "x0", 8);
    x1 = ggml_input(g, "x1", 8);
    x2 = ggml_input(g, "x2", 8);
    x3 = ggml_add(g, "x3", 8, EMEL_GGML_OP_INPLACE, 0, x0, x1);
    x4 = ggml_add(g, "x4", 8, EMEL_GGML_OP_INPLACE, 0, x1, x2);
    x5 = ggml_add(g, "x5", 8, EMEL_GGML_OP_INPLACE, 0, x3, x0);
    x6 = ggml_add(g, "x6", 8, EMEL_GGML_OP_INPLACE, 0, x4, x5);
    ggml_finish(g, x6);
    ga = ggml_reserve("max_size_too_many_tensors", g, 8, 16, 24);
    if (ga) {
        OK(emel_ggml_gallocr_num_chunks(ga, 0, &chunks));
        CHECK(chunks == 2);
        CHECK(inplace_of(ga, x4) == x2 && inplace_of(ga, x3) == x1);
        CHECK(inplace_of(ga, x5) == x3 && inplace_of(ga, x6) == x4 && inplace_of(ga, x0) == NONE_);
        CHECK(planned(ga, x0).chunk == 1 && planned(ga, x6).chunk == 0 &&
              planned(ga, x6).offset == 8);
    }
    emel_ggml_gallocr_destroy(ga);
    emel_ggml_graph_destroy(g);
}

/* max 16: x0 24 B, x1 = scale(x0): one oversize chunk of 24, x1 in place. */
static void ggml_tensor_larger_than_max_size(void) {
    emel_ggml_graph* g = NULL;
    emel_ggml_gallocr* ga;
    size_t x0, x1;
    OK(emel_ggml_graph_create(&g));
    if (g == NULL) return;
    x0 = ggml_input(g, "x0", 24);
    x1 = ggml_add(g, "x1", 24, EMEL_GGML_OP_INPLACE, 0, x0, NONE_);
    ggml_finish(g, x1);
    ga = ggml_reserve("tensor_larger_than_max_size", g, 8, 16, 24);
    if (ga) CHECK(inplace_of(ga, x1) == x0);
    emel_ggml_gallocr_destroy(ga);
    /* Another layout (say, another type of the same byte size): never in
     * place, so x1 gets a second oversize chunk: 24 + 24. Equal explicit
     * layouts are the same layout again. */
    OK(emel_ggml_graph_set_layout(g, x1, 7));
    ga = ggml_reserve("tensor_larger_than_max_size other layout", g, 8, 16, 48);
    if (ga) CHECK(inplace_of(ga, x1) == NONE_);
    emel_ggml_gallocr_destroy(ga);
    OK(emel_ggml_graph_set_layout(g, x0, 7));
    ga = ggml_reserve("tensor_larger_than_max_size same layout", g, 8, 16, 24);
    if (ga) CHECK(inplace_of(ga, x1) == x0);
    emel_ggml_gallocr_destroy(ga);
    emel_ggml_graph_destroy(g);
}

/* max 8: 17 inputs of 8 B and an add chain: 15 chunks of 8, the 16th
 * (unbounded) holds 2 tensors: 136. */
static void ggml_not_enough_chunks(void) {
    emel_ggml_graph* g = NULL;
    emel_ggml_gallocr* ga;
    size_t x[17], acc, i, chunks = 0;
    uint64_t last = 0;
    char name[16];
    OK(emel_ggml_graph_create(&g));
    if (g == NULL) return;
    for (i = 0; i < 17; ++i) {
        sprintf(name, "x%u", (unsigned)i);
        x[i] = ggml_input(g, name, 8);
    }
    acc = x[0];
    for (i = 1; i < 17; ++i) {
        sprintf(name, "acc%u", (unsigned)i);
        acc = ggml_add(g, name, 8, EMEL_GGML_OP_INPLACE, 0, acc, x[i]);
    }
    ggml_finish(g, acc);
    ga = ggml_reserve("not_enough_chunks", g, 8, 8, 136);
    if (ga) {
        OK(emel_ggml_gallocr_num_chunks(ga, 0, &chunks));
        OK(emel_ggml_gallocr_chunk_size(ga, 0, 15, &last));
        CHECK(chunks == 16 && last == 16);
        CHECK(emel_ggml_gallocr_chunk_size(ga, 0, 16, &last) == EMEL_INVALID_ARGUMENT);
    }
    emel_ggml_gallocr_destroy(ga);
    emel_ggml_graph_destroy(g);
}

/* align 4, max 32: x0 24 B, x1 = mean(x0) 4 B, x2 = mean(x1) 4 B: x2 goes
 * into x0's freed 24 B hole at 0, not the tail: 28. */
static void ggml_prefer_already_allocated_memory(void) {
    emel_ggml_graph* g = NULL;
    emel_ggml_gallocr* ga;
    size_t x0, x1, x2;
    OK(emel_ggml_graph_create(&g));
    if (g == NULL) return;
    x0 = ggml_input(g, "x0", 24);
    x1 = ggml_add(g, "x1", 4, EMEL_GGML_OP_OTHER, 0, x0, NONE_);
    x2 = ggml_add(g, "x2", 4, EMEL_GGML_OP_OTHER, 0, x1, NONE_);
    ggml_finish(g, x2);
    ga = ggml_reserve("prefer_already_allocated_memory", g, 4, 32, 28);
    if (ga) {
        emel_ggml_address a = planned(ga, x2), b = planned(ga, x1);
        printf("ggml prefer_already_allocated_memory x2=%d/%d/%" PRIu64 "\n", a.buffer_id,
               a.chunk, a.offset);
        CHECK(a.buffer_id == 0 && a.chunk == 0 && a.offset == 0);
        CHECK(b.buffer_id == 0 && b.chunk == 0 && b.offset == 24);
    }
    emel_ggml_gallocr_destroy(ga);
    emel_ggml_graph_destroy(g);
}

/* Weights of two contexts placed by alloc_ctx_tensors (A: max 32, B:
 * unbounded, align 8), then a graph split over the two buffer types:
 * nodes x1 x2 x7 x8 -> buffer 0, x3..x6 -> 1; leafs a*, x0 -> 0, b* -> 1.
 * ggml: A 16 + 24 = 40, B 24; x7 and x8 run in place of x6, in buffer 1. */
static void ggml_multiple_buffer_types(void) {
    emel_ggml_graph* g = NULL;
    emel_ggml_buffer_type *a_bt = NULL, *b_bt = NULL;
    const emel_ggml_buffer_type* types[2];
    emel_ggml_gallocr* ga = NULL;
    size_t a0, a1, b0, b1, x0, x1, x2, x3, x4, x5, x6, x7, x8, i, t, n_nodes = 0, n_leafs = 0;
    size_t ctx_a[2], ctx_b[2], n_buffers = 0;
    uint64_t sizes[2] = {0, 0}, total = 0, size_a = 0, size_b = 0;
    int32_t node_ids[16], leaf_ids[16];
    uint32_t flags = 0;
    int allocated = 0;
    emel_ggml_address a;

    OK(emel_ggml_graph_create(&g));
    OK(emel_ggml_buffer_type_create(8, 32, &a_bt));
    OK(emel_ggml_buffer_type_create(8, UINT64_MAX, &b_bt));
    if (g == NULL || a_bt == NULL || b_bt == NULL) goto done;
    a0 = ggml_add(g, "a0", 16, EMEL_GGML_OP_NONE, 0, NONE_, NONE_);
    a1 = ggml_add(g, "a1", 16, EMEL_GGML_OP_NONE, 0, NONE_, NONE_);
    b0 = ggml_add(g, "b0", 24, EMEL_GGML_OP_NONE, 0, NONE_, NONE_);
    b1 = ggml_add(g, "b1", 4, EMEL_GGML_OP_NONE, 0, NONE_, NONE_);
    ctx_a[0] = a0, ctx_a[1] = a1, ctx_b[0] = b0, ctx_b[1] = b1;
    OK(emel_ggml_alloc_ctx_tensors_size(g, ctx_a, 2, a_bt, &total));
    CHECK(total == 32);
    OK(emel_ggml_alloc_ctx_tensors(g, ctx_a, 2, a_bt, sizes, 2, &n_buffers));
    CHECK(n_buffers == 1 && sizes[0] == 32);
    OK(emel_ggml_alloc_ctx_tensors(g, ctx_b, 2, b_bt, sizes, 2, &n_buffers));
    CHECK(n_buffers == 1 && sizes[0] == 32);
    OK(emel_ggml_graph_flags(g, b1, &flags));
    a = bound(g, b1);
    CHECK(flags == EMEL_GGML_FLAG_HAS_DATA && a.buffer_id == 0 && a.offset == 24);

    x0 = ggml_input(g, "x0", 16);
    x1 = ggml_add(g, "x1", 16, EMEL_GGML_OP_INPLACE, 0, x0, a0);
    x2 = ggml_add(g, "x2", 24, EMEL_GGML_OP_OTHER, 0, x1, NONE_);
    x3 = ggml_add(g, "x3", 24, EMEL_GGML_OP_INPLACE, 0, x2, b0);
    x4 = ggml_add(g, "x4", 4, EMEL_GGML_OP_OTHER, 0, x3, NONE_);
    x5 = ggml_add(g, "x5", 4, EMEL_GGML_OP_INPLACE, 0, x4, b1);
    x6 = ggml_add(g, "x6", 16, EMEL_GGML_OP_OTHER, 0, x5, NONE_);
    x7 = ggml_add(g, "x7", 16, EMEL_GGML_OP_INPLACE, 0, x6, a1);
    x8 = ggml_add(g, "x8", 16, EMEL_GGML_OP_INPLACE, 0, x7, NONE_);
    ggml_finish(g, x8);
    OK(emel_ggml_graph_num_nodes(g, &n_nodes));
    OK(emel_ggml_graph_num_leafs(g, &n_leafs));
    CHECK(n_nodes == 8 && n_leafs == 5);
    if (n_nodes != 8 || n_leafs != 5) goto done;
    for (i = 0; i < n_nodes; ++i) {
        OK(emel_ggml_graph_node(g, i, &t));
        node_ids[i] = (t >= x3 && t <= x6) ? 1 : 0;
    }
    for (i = 0; i < n_leafs; ++i) {
        OK(emel_ggml_graph_leaf(g, i, &t));
        leaf_ids[i] = (t == b0 || t == b1) ? 1 : 0;
    }
    types[0] = a_bt;
    types[1] = b_bt;
    OK(emel_ggml_gallocr_create(types, 2, NULL, 0, &ga));
    if (ga == NULL) goto done;
    OK(emel_ggml_gallocr_reserve_n(ga, g, node_ids, leaf_ids));
    OK(emel_ggml_gallocr_get_buffer_size(ga, 0, &size_a));
    OK(emel_ggml_gallocr_get_buffer_size(ga, 1, &size_b));
    printf("ggml multiple_buffer_types A=%" PRIu64 " B=%" PRIu64 "\n", size_a, size_b);
    CHECK(size_a == 40 && size_b == 24);
    CHECK(planned(ga, x7).buffer_id == 1 && planned(ga, x8).buffer_id == 1);
    CHECK(inplace_of(ga, x7) == x6 && inplace_of(ga, x8) == x7);
    OK(emel_ggml_gallocr_alloc_graph(ga, g, &allocated));
    CHECK(allocated == 1);
    a = bound(g, x8);
    CHECK(a.buffer_id == planned(ga, x8).buffer_id && a.offset == planned(ga, x8).offset);
    a = bound(g, a0); /* pre-allocated: left where alloc_ctx_tensors put it */
    CHECK(a.buffer_id == 0 && a.offset == 0);
done:
    emel_ggml_gallocr_destroy(ga);
    emel_ggml_buffer_type_destroy(a_bt);
    emel_ggml_buffer_type_destroy(b_bt);
    emel_ggml_graph_destroy(g);
}

/* align 4, max 32. g1: x0 24 B, x1 16 B, x2 = view(x0, 16 B), x3 = add(x2, x1):
 * x0 takes chunk 0 at 0, x1 does not fit the 8 B left -> chunk 1 at 0; x3
 * runs in place of x1 (never of the view): chunks 24 + 16 = 40.
 * g2: y0, y1 20 B, y2 = add(y0, y1): chunks 20 + 20, y2 in place of y0;
 * other counts than g1 -> needs_realloc; with one buffer alloc_graph
 * reserves again (chunk 1 grows to 20: 40), with two it refuses. */
static void ggml_reallocation(void) {
    emel_ggml_graph *g1 = NULL, *g2 = NULL;
    emel_ggml_buffer_type *bt = NULL, *bt2 = NULL;
    const emel_ggml_buffer_type* types[2];
    emel_ggml_gallocr *ga = NULL, *two = NULL;
    size_t x0, x1, x2, x3, y0, y1, y2;
    uint64_t size = 0;
    int needs = -1, allocated = -1;
    emel_ggml_address a;

    OK(emel_ggml_graph_create(&g1));
    OK(emel_ggml_graph_create(&g2));
    OK(emel_ggml_buffer_type_create(4, 32, &bt));
    OK(emel_ggml_buffer_type_create(4, 32, &bt2));
    if (!g1 || !g2 || !bt || !bt2) goto done;
    x0 = ggml_input(g1, "x0", 24);
    x1 = ggml_input(g1, "x1", 16);
    x2 = ggml_view(g1, "x2", x0, x0, 16, 0);
    x3 = ggml_add(g1, "x3", 16, EMEL_GGML_OP_INPLACE, 0, x2, x1);
    ggml_finish(g1, x3);
    y0 = ggml_input(g2, "y0", 20);
    y1 = ggml_input(g2, "y1", 20);
    y2 = ggml_add(g2, "y2", 20, EMEL_GGML_OP_INPLACE, 0, y0, y1);
    ggml_finish(g2, y2);

    OK(emel_ggml_gallocr_create((const emel_ggml_buffer_type* const*)&bt, 1, "ggml", 0, &ga));
    if (ga == NULL) goto done;
    OK(emel_ggml_gallocr_needs_realloc(ga, g1, &needs));
    CHECK(needs == 1); /* nothing reserved yet */
    OK(emel_ggml_gallocr_reserve(ga, g1));
    OK(emel_ggml_gallocr_needs_realloc(ga, g1, &needs));
    CHECK(needs == 0);
    OK(emel_ggml_gallocr_alloc_graph(ga, g1, &allocated));
    OK(emel_ggml_gallocr_get_buffer_size(ga, 0, &size));
    a = bound(g1, x3);
    printf("ggml reallocation g1 size=%" PRIu64 " x3=%d/%d/%" PRIu64 "\n", size, a.buffer_id,
           a.chunk, a.offset);
    CHECK(allocated == 1 && size == 40);
    CHECK(a.buffer_id == 0 && a.chunk == 1 && a.offset == 0 && inplace_of(ga, x3) == x1);
    a = bound(g1, x2); /* the view: its root's place */
    CHECK(a.buffer_id == 0 && a.chunk == 0 && a.offset == 0);

    OK(emel_ggml_gallocr_needs_realloc(ga, g2, &needs));
    CHECK(needs == 1);
    OK(emel_ggml_gallocr_alloc_graph(ga, g2, &allocated));
    OK(emel_ggml_gallocr_get_buffer_size(ga, 0, &size));
    a = bound(g2, y2);
    printf("ggml reallocation g2 size=%" PRIu64 " y2=%d/%d/%" PRIu64 "\n", size, a.buffer_id,
           a.chunk, a.offset);
    CHECK(allocated == 1 && size == 40 && inplace_of(ga, y2) == y0);
    CHECK(a.buffer_id == 0 && a.chunk == 0 && a.offset == 0);
    OK(emel_ggml_gallocr_needs_realloc(ga, g2, &needs));
    CHECK(needs == 0);

    types[0] = bt;
    types[1] = bt2;
    OK(emel_ggml_gallocr_create(types, 2, "ggml", 0, &two));
    if (two == NULL) goto done;
    OK(emel_ggml_gallocr_reserve_n(two, g1, NULL, NULL));
    a = bound(g2, y1);
    OK(emel_ggml_gallocr_alloc_graph(two, g2, &allocated));
    CHECK(allocated == 0); /* several buffers: the caller must reserve again */
    CHECK(bound(g2, y1).offset == a.offset);
done:
    emel_ggml_gallocr_destroy(ga);
    emel_ggml_gallocr_destroy(two);
    emel_ggml_buffer_type_destroy(bt);
    emel_ggml_buffer_type_destroy(bt2);
    emel_ggml_graph_destroy(g1);
    emel_ggml_graph_destroy(g2);
}

/* A 64 B buffer, align 32: 1 B at 0, 31 B at 32, then out of space. */
static void ggml_tallocr(void) {
    emel_ggml_buffer_type* bt = NULL;
    emel_ggml_tallocr* ta = NULL;
    uint64_t a = 1, b = 1, c = 7, offset = 0;
    emel_status st;
    OK(emel_ggml_buffer_type_create(32, UINT64_MAX, &bt));
    OK(emel_ggml_tallocr_create(64, bt, &ta));
    emel_ggml_buffer_type_destroy(bt);
    if (ta == NULL) return;
    OK(emel_ggml_tallocr_alloc(ta, 1, "a", &a));
    OK(emel_ggml_tallocr_alloc(ta, 31, "b", &b));
    st = emel_ggml_tallocr_alloc(ta, 1, "c", &c);
    OK(emel_ggml_tallocr_offset(ta, &offset));
    printf("ggml tallocr a=%" PRIu64 " b=%" PRIu64 " then %s tensor=%s\n", a, b,
           emel_status_name(st), emel_last_error_tensor());
    CHECK(a == 0 && b == 32 && offset == 64 && c == 7);
    CHECK(st == EMEL_ARENA_TOO_SMALL && strcmp(emel_last_error_tensor(), "c") == 0);
    emel_ggml_tallocr_destroy(ta);
}

static void ggml_errors(void) {
    emel_ggml_graph* g = NULL;
    emel_ggml_buffer_type* bt = (emel_ggml_buffer_type*)&failures;
    emel_ggml_gallocr* ga = NULL;
    size_t x, bad = 7, v, vv;
    emel_status st;

    CHECK(emel_ggml_buffer_type_create(3, 64, &bt) == EMEL_ALIGNMENT_VIOLATION && bt == NULL);
    OK(emel_ggml_buffer_type_create(8, 64, &bt));
    st = emel_ggml_gallocr_create((const emel_ggml_buffer_type* const*)&bt, 1, "fastest", 0, &ga);
    printf("ggml error %s\n", emel_last_error_message());
    CHECK(st == EMEL_INVALID_ARGUMENT && ga == NULL);
    OK(emel_ggml_gallocr_create((const emel_ggml_buffer_type* const*)&bt, 1, "ggml", 0, &ga));
    OK(emel_ggml_graph_create(&g));
    if (g == NULL || ga == NULL) goto done;
    /* a source that was never added */
    x = ggml_input(g, "x", 8);
    OK(emel_ggml_graph_add_tensor(g, "y", 8, EMEL_GGML_OP_OTHER, 0, &bad, 1, NONE_, 0, NULL));
    OK(emel_ggml_graph_add_node(g, 1));
    OK(emel_ggml_graph_add_leaf(g, x));
    st = emel_ggml_gallocr_reserve(ga, g);
    printf("ggml error %s tensor=%s\n", emel_status_name(st), emel_last_error_tensor());
    CHECK(st == EMEL_INVALID_IR_SHAPES && strcmp(emel_last_error_tensor(), "y") == 0);
    CHECK(emel_ggml_gallocr_tensor_address(ga, 0, NULL) == EMEL_INVALID_ARGUMENT);
    emel_ggml_graph_destroy(g);
    /* a view of a view: view_src must be the root */
    g = NULL;
    OK(emel_ggml_graph_create(&g));
    if (g == NULL) goto done;
    x = ggml_input(g, "x", 16);
    v = ggml_view(g, "v", x, x, 8, 0);
    vv = ggml_view(g, "vv", v, v, 4, 0);
    ggml_finish(g, vv);
    CHECK(emel_ggml_gallocr_reserve(ga, g) == EMEL_INVALID_IR_SHAPES &&
          strcmp(emel_last_error_tensor(), "vv") == 0);
    CHECK(emel_ggml_graph_add_tensor(g, "z", 8, (emel_ggml_op)9, 0, NULL, 0, NONE_, 0, NULL) ==
          EMEL_INVALID_ARGUMENT);
    CHECK(emel_ggml_graph_add_node(g, 99) == EMEL_INVALID_ARGUMENT);
    emel_ggml_graph_destroy(g);
    /* a size that wraps when rounded up to the alignment; a buffer id out of range */
    g = NULL;
    OK(emel_ggml_graph_create(&g));
    if (g == NULL) goto done;
    x = ggml_input(g, "huge", UINT64_MAX);
    ggml_finish(g, ggml_add(g, "m", 4, EMEL_GGML_OP_OTHER, 0, x, NONE_));
    CHECK(emel_ggml_gallocr_reserve(ga, g) == EMEL_ALLOCATION_OVERFLOW);
    {
        static const int32_t node_ids[] = {1}, leaf_ids[] = {0};
        CHECK(emel_ggml_gallocr_reserve_n(ga, g, node_ids, leaf_ids) == EMEL_INVALID_IR_SHAPES);
        CHECK(strstr(emel_last_error_message(), "node_buffer_ids[0]") != NULL);
    }
    CHECK(emel_ggml_gallocr_get_buffer_size(ga, 1, NULL) == EMEL_INVALID_ARGUMENT);
done:
    emel_ggml_gallocr_destroy(ga);
    emel_ggml_buffer_type_destroy(bt);
    emel_ggml_graph_destroy(g);
    emel_ggml_graph_destroy(NULL);
    emel_ggml_gallocr_destroy(NULL);
    emel_ggml_tallocr_destroy(NULL);
}

/* SHA-256 of the CBOR empty map (a0): the shard_spec_hash of no spec. */
static const char* const EMPTY_SPEC_HASH =
    "c19a797fa1fd590cd2e5b42d1cf5f246e29b91684e2f87404b81dc345c7a56a0";

static int is_lower_hex64(const char* s) {
    size_t i;
    for (i = 0; i < 64; ++i)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return s[64] == '\0';
}

/* Prints "hashes <label> plan=.. ir=.. execution_order=.. arena_config=..
 * shard_spec=.. token=.. rank=.. world_size=.."; tests/test_c_api.py
 * compares them with emel.memory.plan(...).hashes. Checks raw == hex. */
static void print_hashes(const emel_plan* p, const char* label) {
    static const char* const names[] = {"ir", "execution_order", "arena_config", "shard_spec",
                                        "plan"};
    char hex[5][EMEL_HASH_HEX_SIZE], token_hex[EMEL_HASH_HEX_SIZE];
    uint8_t raw[EMEL_HASH_SIZE];
    uint64_t rank = 99, world_size = 99;
    int k;
    size_t i;
    for (k = 0; k < 5; ++k) {
        memset(hex[k], 'X', sizeof hex[k]);
        OK(emel_plan_hash_hex(p, (emel_hash_kind)k, hex[k], sizeof hex[k]));
        CHECK(is_lower_hex64(hex[k]));
        OK(emel_plan_hash(p, (emel_hash_kind)k, raw));
        for (i = 0; i < EMEL_HASH_SIZE; ++i) {
            unsigned byte = 0;
            sscanf(hex[k] + 2 * i, "%2x", &byte);
            CHECK(byte == raw[i]);
        }
    }
    OK(emel_plan_replay_token_hex(p, token_hex, sizeof token_hex));
    CHECK(is_lower_hex64(token_hex));
    OK(emel_plan_rank(p, &rank));
    OK(emel_plan_world_size(p, &world_size));
    printf("hashes %s", label);
    for (k = 4; k >= 0; --k) printf(" %s=%s", names[k], hex[k]);
    printf(" token=%s rank=%" PRIu64 " world_size=%" PRIu64 "\n", token_hex, rank, world_size);
}

/* The determinism contract: hashes, replay token, rank / world size / shard spec. */
static void check_hashes(const emel_graph* g) {
    static const emel_shard_entry spec[] = {{"w", 0}, {"a", 1}};
    emel_determinism_options det;
    emel_plan *p = NULL, *q = NULL, *bad = NULL;
    char plan_hex[EMEL_HASH_HEX_SIZE], spec_hex[EMEL_HASH_HEX_SIZE], short_buf[64];
    char other_hex[EMEL_HASH_HEX_SIZE];
    uint8_t token[EMEL_HASH_SIZE], a[EMEL_HASH_SIZE], b[EMEL_HASH_SIZE];
    uint64_t rank = 99;
    size_t i;
    emel_status st;

    OK(emel_determinism_options_default(&det));
    CHECK(det.has_replay_token == 0 && det.rank == 0 && det.world_size == 1 &&
          det.shard_spec == NULL && det.num_shard_entries == 0);
    /* Defaults: emel_plan_create and emel_plan_create_ex(NULL) agree. */
    OK(emel_plan_create(g, NULL, &p));
    OK(emel_plan_create_ex(g, NULL, &det, &q));
    if (p == NULL || q == NULL) goto done;
    print_hashes(p, "default");
    OK(emel_plan_hash_hex(p, EMEL_HASH_PLAN, plan_hex, sizeof plan_hex));
    OK(emel_plan_hash_hex(q, EMEL_HASH_PLAN, other_hex, sizeof other_hex));
    CHECK(strcmp(plan_hex, other_hex) == 0);
    OK(emel_plan_hash_hex(p, EMEL_HASH_SHARD_SPEC, spec_hex, sizeof spec_hex));
    CHECK(strcmp(spec_hex, EMPTY_SPEC_HASH) == 0);
    emel_plan_destroy(q);
    q = NULL;

    /* A custom token, rank 1 of 4 and a spec: same graph hash and offsets,
     * another plan hash. */
    for (i = 0; i < EMEL_HASH_SIZE; ++i) det.replay_token[i] = (uint8_t)(i * 7 + 1);
    det.has_replay_token = 1;
    det.rank = 1;
    det.world_size = 4;
    det.shard_spec = spec;
    det.num_shard_entries = 2;
    OK(emel_plan_create_ex(g, NULL, &det, &q));
    if (q == NULL) goto done;
    print_hashes(q, "custom");
    OK(emel_plan_replay_token(q, token));
    CHECK(memcmp(token, det.replay_token, EMEL_HASH_SIZE) == 0);
    OK(emel_plan_rank(q, &rank));
    CHECK(rank == 1);
    OK(emel_plan_hash(p, EMEL_HASH_IR, a));
    OK(emel_plan_hash(q, EMEL_HASH_IR, b));
    CHECK(memcmp(a, b, EMEL_HASH_SIZE) == 0);
    OK(emel_plan_hash(p, EMEL_HASH_PLAN, a));
    OK(emel_plan_hash(q, EMEL_HASH_PLAN, b));
    CHECK(memcmp(a, b, EMEL_HASH_SIZE) != 0);
    OK(emel_plan_hash(q, EMEL_HASH_SHARD_SPEC, b));
    OK(emel_plan_hash_hex(q, EMEL_HASH_SHARD_SPEC, other_hex, sizeof other_hex));
    CHECK(strcmp(other_hex, EMPTY_SPEC_HASH) != 0);
    for (i = 0; i < 6; ++i) {
        uint64_t off_p = 1, off_q = 2;
        OK(emel_plan_tensor_offset(p, i, &off_p));
        OK(emel_plan_tensor_offset(q, i, &off_q));
        CHECK(off_p == off_q);
    }

    /* Bad arguments: statuses, outputs untouched. */
    memset(short_buf, 'X', sizeof short_buf);
    st = emel_plan_hash_hex(q, EMEL_HASH_PLAN, short_buf, sizeof short_buf);
    CHECK(st == EMEL_INVALID_ARGUMENT && short_buf[0] == 'X');
    CHECK(emel_plan_hash(q, (emel_hash_kind)5, a) == EMEL_INVALID_ARGUMENT);
    CHECK(emel_plan_hash(q, EMEL_HASH_PLAN, NULL) == EMEL_INVALID_ARGUMENT);
    CHECK(emel_plan_hash_hex(NULL, EMEL_HASH_PLAN, plan_hex, sizeof plan_hex) ==
          EMEL_INVALID_ARGUMENT);
    CHECK(emel_plan_replay_token_hex(q, NULL, 65) == EMEL_INVALID_ARGUMENT);
    CHECK(emel_plan_world_size(q, NULL) == EMEL_INVALID_ARGUMENT);
    det.rank = 4;
    CHECK(emel_plan_create_ex(g, NULL, &det, &bad) == EMEL_INVALID_IR_SHAPES && bad == NULL);
    printf("determinism error %s\n", emel_last_error_message());
    det.rank = 0;
    det.world_size = 0;
    CHECK(emel_plan_create_ex(g, NULL, &det, &bad) == EMEL_INVALID_IR_SHAPES && bad == NULL);
    det.world_size = 1;
    {
        static const emel_shard_entry twice[] = {{"w", 0}, {"w", 1}};
        static const emel_shard_entry empty_id[] = {{"", 0}};
        det.shard_spec = twice;
        CHECK(emel_plan_create_ex(g, NULL, &det, &bad) == EMEL_INVALID_ARGUMENT &&
              strcmp(emel_last_error_tensor(), "w") == 0);
        det.shard_spec = empty_id;
        det.num_shard_entries = 1;
        CHECK(emel_plan_create_ex(g, NULL, &det, &bad) == EMEL_INVALID_IR_SHAPES);
        det.shard_spec = NULL;
        CHECK(emel_plan_create_ex(g, NULL, &det, &bad) == EMEL_INVALID_ARGUMENT);
    }
    CHECK(bad == NULL);
done:
    emel_plan_destroy(p);
    emel_plan_destroy(q);
}

int main(void) {
    static const uint64_t tmmu_offsets[] = {1024, 0, 0, 0, 512, 1024};
    static const uint64_t greedy_offsets[] = {0, 0, 1536, 1536, 2048, 0};
    emel_graph* g = build_tiny();
    if (g != NULL) {
        check_plan(g, EMEL_STRATEGY_TMMU, "tmmu", tmmu_offsets);
        check_plan(g, EMEL_STRATEGY_GREEDY_BY_SIZE, "greedy_by_size", greedy_offsets);
        check_errors(g);
        check_hashes(g);
        emel_graph_destroy(g);
    }
    check_from_arrays();
    check_place();
    ggml_max_size_too_many_tensors();
    ggml_tensor_larger_than_max_size();
    ggml_not_enough_chunks();
    ggml_prefer_already_allocated_memory();
    ggml_multiple_buffer_types();
    ggml_reallocation();
    ggml_tallocr();
    ggml_errors();
    if (failures) {
        printf("FAILED %d check(s)\n", failures);
        return 1;
    }
    printf("ALL OK\n");
    return 0;
}
