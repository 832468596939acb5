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

int main(void) {
    static const uint64_t tmmu_offsets[] = {1024, 0, 0, 0, 512, 1024};
    static const uint64_t greedy_offsets[] = {0, 0, 1536, 1536, 2048, 0};
    emel_graph* g = build_tiny();
    if (g != NULL) {
        check_plan(g, EMEL_STRATEGY_TMMU, "tmmu", tmmu_offsets);
        check_plan(g, EMEL_STRATEGY_GREEDY_BY_SIZE, "greedy_by_size", greedy_offsets);
        check_errors(g);
        emel_graph_destroy(g);
    }
    check_from_arrays();
    check_place();
    if (failures) {
        printf("FAILED %d check(s)\n", failures);
        return 1;
    }
    printf("ALL OK\n");
    return 0;
}
