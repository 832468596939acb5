// Tiny probe for bench/llamacpp_ground_truth.py: loads a GGUF on the CPU
// backend, creates a context with the given configuration and prints, as one
// JSON object on stdout, the exact byte sizes llama.cpp allocated (model,
// KV cache, output buffer, compute buffer) and every tensor of the reserved
// pp and tg graphs. Built against llama.cpp's source tree by the script.
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"
#define private public  // read llama_context::buf_output (the output buffer's exact size)
#include "llama-context.h"
#undef private
#include "llama-ext.h"
#include "ggml-impl.h"  // struct ggml_cgraph: the leafs

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

static void quiet(enum ggml_log_level, const char *, void *) {}

static ggml_type type_of(const char * s) {
    if (!strcmp(s, "f32")) return GGML_TYPE_F32;
    if (!strcmp(s, "f16")) return GGML_TYPE_F16;
    if (!strcmp(s, "bf16")) return GGML_TYPE_BF16;
    if (!strcmp(s, "q8_0")) return GGML_TYPE_Q8_0;
    if (!strcmp(s, "q4_0")) return GGML_TYPE_Q4_0;
    if (!strcmp(s, "q4_1")) return GGML_TYPE_Q4_1;
    if (!strcmp(s, "q5_0")) return GGML_TYPE_Q5_0;
    if (!strcmp(s, "q5_1")) return GGML_TYPE_Q5_1;
    if (!strcmp(s, "iq4_nl")) return GGML_TYPE_IQ4_NL;
    fprintf(stderr, "unknown type %s\n", s);
    exit(2);
}

static void dump_graph(const char * key, ggml_cgraph * gf) {
    std::map<const ggml_tensor *, int> id;
    auto idof = [&](const ggml_tensor * t) {
        auto it = id.find(t);
        if (it != id.end()) return it->second;
        int k = (int) id.size();
        id[t] = k;
        return k;
    };
    const int n_leafs = gf->n_leafs, n_nodes = gf->n_nodes;
    printf("\"%s\": {\"leafs\": [", key);
    for (int i = 0; i < n_leafs + n_nodes; i++) {
        ggml_tensor * t = i < n_leafs ? gf->leafs[i] : gf->nodes[i - n_leafs];
        if (i == n_leafs) printf("], \"nodes\": [");
        else if (i) printf(",");
        printf("\n{\"id\": %d, \"name\": \"%s\", \"op\": \"%s\", \"type\": \"%s\", \"ne\": [%lld,%lld,%lld,%lld], "
               "\"nb\": [%zu,%zu,%zu,%zu], \"nbytes\": %zu, \"flags\": %d, \"has_data\": %d, ",
               idof(t), t->name, ggml_op_name(t->op), ggml_type_name(t->type),
               (long long) t->ne[0], (long long) t->ne[1], (long long) t->ne[2], (long long) t->ne[3],
               t->nb[0], t->nb[1], t->nb[2], t->nb[3], ggml_nbytes(t), (int) t->flags,
               t->data != nullptr || t->buffer != nullptr);
        printf("\"view_src\": %d, \"view_offs\": %zu, \"src\": [", t->view_src ? idof(t->view_src) : -1, t->view_offs);
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            if (!t->src[j]) { // keep slot positions: trailing nulls dropped
                bool more = false;
                for (int k = j + 1; k < GGML_MAX_SRC; k++) more |= t->src[k] != nullptr;
                if (!more) break;
                printf("%s-1", j ? "," : "");
                continue;
            }
            printf("%s%d", j ? "," : "", idof(t->src[j]));
        }
        printf("]}");
    }
    printf("]}");
}

int main(int argc, char ** argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: %s model.gguf n_ctx n_batch n_ubatch n_seq flash_attn(0/1) type_k type_v [mmap] [dump] [kv_unified]\n", argv[0]);
        return 2;
    }
    const bool use_mmap = argc > 9 ? atoi(argv[9]) != 0 : false;
    const bool dump = argc > 10 ? atoi(argv[10]) != 0 : false;
    const bool kv_unified = argc > 11 ? atoi(argv[11]) != 0 : false;
    if (!getenv("PROBE_LOG")) llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mode = use_mmap ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = atoi(argv[2]);
    cp.n_batch = atoi(argv[3]);
    cp.n_ubatch = atoi(argv[4]);
    cp.n_seq_max = atoi(argv[5]);
    cp.flash_attn_type = atoi(argv[6]) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = type_of(argv[7]);
    cp.type_v = type_of(argv[8]);
    cp.kv_unified = kv_unified;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    printf("{\"n_ctx\": %u, \"n_batch\": %u, \"n_ubatch\": %u, \"n_seq_max\": %u, ",
           llama_n_ctx(ctx), llama_n_batch(ctx), llama_n_ubatch(ctx), llama_n_seq_max(ctx));
    printf("\"output\": %zu, \"buffers\": [", ctx->buf_output ? ggml_backend_buffer_get_size(ctx->buf_output.get()) : (size_t) 0);
    bool first = true;
    for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
        printf("%s{\"buft\": \"%s\", \"model\": %zu, \"context\": %zu, \"compute\": %zu}",
               first ? "" : ", ", ggml_backend_buft_name(buft), mb.model, mb.context, mb.compute);
        first = false;
    }
    printf("]");
    if (dump) {
        const uint32_t n_tokens = std::min(llama_n_ctx(ctx), llama_n_ubatch(ctx));
        printf(", ");
        dump_graph("pp", llama_graph_reserve(ctx, n_tokens, cp.n_seq_max, n_tokens));
        printf(", ");
        dump_graph("tg", llama_graph_reserve(ctx, cp.n_seq_max, cp.n_seq_max, cp.n_seq_max));
    }
    printf("}\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
