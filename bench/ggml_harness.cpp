// The real ggml-alloc on a graph read from stdin: bench/ggml_differential.py's llama.cpp side.
//
// It runs llama.cpp's own allocator (libggml-base: ggml_gallocr_*, ggml_tallocr_*,
// ggml_backend_alloc_ctx_tensors_from_buft*) on graphs described line by line, and prints
// what ggml decided: the node and leaf order of ggml_build_forward_expand, the buffer sizes,
// the chunk sizes of every buffer, and each tensor's (buffer type, chunk, offset). The
// driver runs emel.memory.ggml on the same description and compares the two.
//
// No memory is allocated: the buffer type is a dummy, as in llama.cpp's tests/test-alloc.cpp
// (configurable alignment and max size); every buffer reports the base address 0x10000 (aligned
// to 64 KiB, so any alignment up to that gives offset 0 first), and offsets are data - base.
//
// Two things ggml does not expose, and how they are read:
//  * the chunk of a tensor. A gallocr buffer is a `struct vbuffer` of up to 16 backend buffers
//    (chunks), private to ggml-alloc.c. Matching t->buffer against the buffers the dummy type
//    handed out is not enough: a 0-byte chunk never reaches the type's alloc_buffer
//    (ggml_backend_buft_alloc_buffer makes a 0-byte buffer itself), and the order buffers were
//    handed out in is not the chunk index. So the harness mirrors the leading fields of
//    `struct ggml_gallocr` and `struct vbuffer` (ggml-alloc.c, same tree) and looks t->buffer up
//    in galloc->buffers[i]->chunks[c]. The mirror is checked at every alloc_graph: its chunk sizes
//    must add up to ggml_gallocr_get_buffer_size (else exit 4, the struct layout changed).
//  * needs_realloc (static in ggml-alloc.c). A twin gallocr gets the same calls with one extra
//    buffer id sharing buffer type 0: with more than one id, ggml_gallocr_alloc_graph does not
//    re-reserve but returns false exactly when ggml_gallocr_needs_realloc is true.
//
// Built by the driver (bench/ggml_differential.py, build_harness):
//   g++ -std=c++17 -O1 -I TREE/ggml/include -I TREE/ggml/src bench/ggml_harness.cpp
//       -o TREE/build/emel_ggml_harness -L TREE/build/bin -lggml-base -Wl,-rpath,TREE/build/bin
//
// Input (one command a line; sizes in elements of the type, names without spaces, "-" = none):
//   buft ALIGNMENT MAX_SIZE                       a buffer type (index = order of appearance)
//   galloc N BUFT...                              ggml_gallocr_new_n over these buffer types
//   graph ID                                      start a graph description; then:
//     t NAME TYPE NE0 NE1 OP FLAGS VIEW_SRC VIEW_OFFS BUFFER_ID N_SRC SRC...
//         FLAGS: 1 input, 2 output (raw: ggml_set_output's view-root rule is the driver's), 4 data
//         set outside the allocator (a pre-allocated weight); BUFFER_ID: for reserve_n's ids
//     expand NAME                                 ggml_build_forward_expand, in order
//     nodes NAME... / leafs NAME...               or a hand-built cgraph (as the scheduler makes)
//   order ID                                      print ggml's node and leaf order of graph ID
//   reserve ID USE_IDS | reserve_size ID USE_IDS  ggml_gallocr_reserve_n / _reserve_n_size
//   alloc ID                                      ggml_gallocr_alloc_graph on a fresh copy of ID
//   tallocr ALIGNMENT BUFFER_SIZE, then ta NAME TYPE NE0 NE1 ..., then end
//   ctx ALIGNMENT MAX_SIZE                        ggml_backend_alloc_ctx_tensors_from_buft on graph
//                                                 "ctx" (FLAGS 4: bound at VIEW_OFFS in another buffer)
// Every graph step builds its tensors anew (data NULL), as llama.cpp rebuilds its graph per batch.
// Each result is printed whole after the calls, so a ggml abort leaves no partial record.

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-backend-impl.h"
#include "ggml-impl.h"
#include "ggml.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

static uint8_t * const BASE = (uint8_t *) 0x10000;
static const int MAX_CHUNKS = 16;  // GGML_VBUFFER_MAX_CHUNKS in ggml-alloc.c

// ------------------------------------------------------------------ dummy buffer type

struct DummyType {
    int index;  // buffer type index of the description (printed in addresses)
    size_t alignment, max_size;
    ggml_backend_buffer_i buffer_iface{};
    ggml_backend_device device{};
    ggml_backend_buffer_type buft{};
    std::vector<ggml_backend_buffer_t> live;  // buffers handed out and not freed, oldest first
};

static ggml_backend_buffer_t type_alloc(ggml_backend_buffer_type_t buft, size_t size) {
    DummyType * d = (DummyType *) buft->context;
    ggml_backend_buffer_t b = ggml_backend_buffer_init(buft, d->buffer_iface, d, size);
    d->live.push_back(b);
    return b;
}
static void buffer_free(ggml_backend_buffer_t buffer) {
    DummyType * d = (DummyType *) buffer->context;
    d->live.erase(std::remove(d->live.begin(), d->live.end(), buffer), d->live.end());
}
static const char * type_name(ggml_backend_buffer_type_t) { return "dummy"; }
static size_t type_alignment(ggml_backend_buffer_type_t b) { return ((DummyType *) b->context)->alignment; }
static size_t type_max_size(ggml_backend_buffer_type_t b) { return ((DummyType *) b->context)->max_size; }
static bool type_is_host(ggml_backend_buffer_type_t) { return true; }
static void * buffer_base(ggml_backend_buffer_t) { return BASE; }
static ggml_status buffer_init_tensor(ggml_backend_buffer_t, ggml_tensor *) { return GGML_STATUS_SUCCESS; }
static void buffer_memset(ggml_backend_buffer_t, ggml_tensor *, uint8_t, size_t, size_t) {}
static void buffer_set(ggml_backend_buffer_t, ggml_tensor *, const void *, size_t, size_t) {}
static void buffer_get(ggml_backend_buffer_t, const ggml_tensor *, void *, size_t, size_t) {}
static void buffer_clear(ggml_backend_buffer_t, uint8_t) {}
static enum ggml_backend_dev_type device_type(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_CPU; }

static DummyType * new_type(int index, size_t alignment, size_t max_size) {
    DummyType * d = new DummyType();  // never freed: the process is short-lived
    d->index = index;
    d->alignment = alignment;
    d->max_size = max_size;
    d->buffer_iface.free_buffer = buffer_free;
    d->buffer_iface.get_base = buffer_base;
    d->buffer_iface.init_tensor = buffer_init_tensor;
    d->buffer_iface.memset_tensor = buffer_memset;
    d->buffer_iface.set_tensor = buffer_set;
    d->buffer_iface.get_tensor = buffer_get;
    d->buffer_iface.clear = buffer_clear;
    d->device.context = d;
    d->device.iface.get_type = device_type;
    d->buft.device = &d->device;
    d->buft.context = d;
    d->buft.iface.get_name = type_name;
    d->buft.iface.alloc_buffer = type_alloc;
    d->buft.iface.get_alignment = type_alignment;
    d->buft.iface.get_max_size = type_max_size;
    d->buft.iface.is_host = type_is_host;
    return d;
}

// ------------------------------------------------------------------ graph descriptions

struct TensorDesc {
    std::string name, type, op, view_src;
    int64_t ne0 = 0, ne1 = 1;
    int flags = 0;
    size_t view_offs = 0;
    int buffer_id = 0;
    std::vector<std::string> srcs;
};

struct GraphDesc {
    std::vector<TensorDesc> tensors;
    std::vector<std::string> expand;
    bool hand_built = false;
    std::vector<std::string> nodes, leafs;
};

static ggml_type parse_type(const std::string & s) {
    if (s == "i8") return GGML_TYPE_I8;
    if (s == "i16") return GGML_TYPE_I16;
    if (s == "f16") return GGML_TYPE_F16;
    if (s == "f32") return GGML_TYPE_F32;
    fprintf(stderr, "unknown type %s\n", s.c_str());
    exit(3);
}

static ggml_op parse_op(const std::string & s) {
    for (int i = 0; i < GGML_OP_COUNT; i++) {
        if (s == ggml_op_name((ggml_op) i)) return (ggml_op) i;
    }
    fprintf(stderr, "unknown op %s\n", s.c_str());
    exit(3);
}

static ggml_context * new_context(size_t n_tensors, size_t graph_size) {
    ggml_init_params p{};
    p.mem_size = (n_tensors + 16) * ggml_tensor_overhead() + ggml_graph_overhead_custom(graph_size, false) + 4096;
    p.no_alloc = true;
    return ggml_init(p);
}

// The tensors of a description, in a context of their own, in description order.
struct Tensors {
    ggml_context * ctx = nullptr;
    std::map<std::string, ggml_tensor *> by_name;
    std::vector<ggml_tensor *> order;
};

static int n_external = 0;

// pre_allocated: how a FLAGS-4 tensor gets its data (graphs: an address outside any buffer;
// ctx: bound in a separate buffer).
template <class PreAllocate>
static void make_tensors(Tensors & ts, const GraphDesc & g, PreAllocate pre_allocate) {
    for (const TensorDesc & d : g.tensors) {
        ggml_tensor * t = ggml_new_tensor_2d(ts.ctx, parse_type(d.type), d.ne0, d.ne1);
        ggml_set_name(t, d.name.c_str());
        t->op = parse_op(d.op);
        for (size_t i = 0; i < d.srcs.size(); i++) t->src[i] = d.srcs[i] == "-" ? nullptr : ts.by_name.at(d.srcs[i]);
        if (d.view_src != "-") {
            ggml_tensor * root = ts.by_name.at(d.view_src);
            t->view_src = root;
            t->view_offs = d.view_offs;
            if (root->data) t->data = (char *) root->data + d.view_offs;  // as ggml_new_tensor_impl
        }
        t->flags |= d.flags & (GGML_TENSOR_FLAG_INPUT | GGML_TENSOR_FLAG_OUTPUT);
        if (d.flags & 4) pre_allocate(t, d);
        ts.by_name[d.name] = t;
        ts.order.push_back(t);
    }
}

struct Instance : Tensors {
    ggml_cgraph * graph = nullptr;
    std::vector<int> node_ids, leaf_ids;  // buffer ids for reserve_n, in the graph's order
};

static Instance build(const GraphDesc & g) {
    Instance in;
    size_t graph_size = std::max<size_t>(64, 2 * (g.tensors.size() + 16));
    in.ctx = new_context(g.tensors.size(), graph_size);
    make_tensors(in, g, [](ggml_tensor * t, const TensorDesc &) {
        // data set outside ggml-alloc, in no backend buffer: a distinct fake address
        t->data = (void *) (uintptr_t) (0x100000000ull * (uint64_t) ++n_external);
    });
    in.graph = ggml_new_graph_custom(in.ctx, graph_size, false);
    if (g.hand_built) {
        for (const std::string & n : g.nodes) in.graph->nodes[in.graph->n_nodes++] = in.by_name.at(n);
        for (const std::string & n : g.leafs) in.graph->leafs[in.graph->n_leafs++] = in.by_name.at(n);
    } else {
        for (const std::string & n : g.expand) ggml_build_forward_expand(in.graph, in.by_name.at(n));
    }
    std::map<std::string, int> buffer_id;
    for (const TensorDesc & d : g.tensors) buffer_id[d.name] = d.buffer_id;
    for (int i = 0; i < in.graph->n_nodes; i++) in.node_ids.push_back(buffer_id[in.graph->nodes[i]->name]);
    for (int i = 0; i < in.graph->n_leafs; i++) in.leaf_ids.push_back(buffer_id[in.graph->leafs[i]->name]);
    return in;
}

// ------------------------------------------------------------------ ggml-alloc internals (mirror)

// The leading fields of ggml-alloc.c's private structs, in the same order (see the header).
struct MirrorVBuffer {
    ggml_backend_buffer_t chunks[MAX_CHUNKS];
};
struct MirrorGallocr {
    ggml_backend_buffer_type_t * bufts;
    MirrorVBuffer ** buffers;
    void ** buf_tallocs;
    int n_buffers;
};

static const MirrorGallocr * mirror(ggml_gallocr_t galloc) { return (const MirrorGallocr *) galloc; }

static std::vector<size_t> chunk_sizes(ggml_gallocr_t galloc, int id) {
    std::vector<size_t> sizes;
    const MirrorVBuffer * vb = mirror(galloc)->buffers[id];
    for (int c = 0; vb && c < MAX_CHUNKS; c++) {
        if (vb->chunks[c]) sizes.push_back(ggml_backend_buffer_get_size(vb->chunks[c]));
    }
    return sizes;
}

// "addr NAME BUFT CHUNK OFFSET", "addr NAME -" (unbound) or "addr NAME ext" (data set outside
// the allocator, no buffer).
static void print_graph_address(std::ostringstream & out, ggml_gallocr_t galloc, const ggml_tensor * t) {
    out << "addr " << t->name << " ";
    if (t->buffer) {
        const MirrorGallocr * m = mirror(galloc);
        for (int i = 0; i < m->n_buffers; i++) {
            for (int c = 0; m->buffers[i] && c < MAX_CHUNKS; c++) {
                if (m->buffers[i]->chunks[c] == t->buffer) {
                    const DummyType * d = (const DummyType *) m->bufts[i]->context;
                    uint8_t * base = (uint8_t *) ggml_backend_buffer_get_base(t->buffer);
                    out << d->index << " " << c << " " << (size_t) ((uint8_t *) t->data - base) << "\n";
                    return;
                }
            }
        }
        out << "?\n";  // a buffer the allocator does not own: the driver reports it
    } else {
        out << (t->data ? "ext" : "-") << "\n";
    }
}

// ------------------------------------------------------------------ commands

struct Session {
    std::vector<DummyType *> types, twin_types;
    std::vector<int> galloc_types;
    ggml_gallocr_t galloc = nullptr;
    ggml_gallocr_t twin = nullptr;  // same calls, one extra id: alloc_graph tells needs_realloc
    std::map<std::string, GraphDesc> graphs;
};

static void cmd_galloc(Session & s, std::istringstream & in) {
    int n;
    in >> n;
    std::vector<ggml_backend_buffer_type_t> types, twin_types;
    for (int i = 0; i < n; i++) {
        int j;
        in >> j;
        s.galloc_types.push_back(j);
        types.push_back(&s.types[j]->buft);
        twin_types.push_back(&s.twin_types[j]->buft);
    }
    twin_types.push_back(twin_types[0]);  // shares type 0's buffer: the twin holds > 1 id
    s.galloc = ggml_gallocr_new_n(types.data(), n);
    s.twin = ggml_gallocr_new_n(twin_types.data(), n + 1);
}

static void cmd_order(Session & s, const std::string & id) {
    Instance in = build(s.graphs.at(id));
    std::ostringstream out;
    out << "order " << id << "\nnodes";
    for (int i = 0; i < in.graph->n_nodes; i++) out << " " << in.graph->nodes[i]->name;
    out << "\nleafs";
    for (int i = 0; i < in.graph->n_leafs; i++) out << " " << in.graph->leafs[i]->name;
    out << "\n";
    fputs(out.str().c_str(), stdout);
    ggml_free(in.ctx);
}

static void cmd_reserve(Session & s, const std::string & cmd, const std::string & id, bool use_ids) {
    Instance in = build(s.graphs.at(id)), twin_in = build(s.graphs.at(id));
    const int * node_ids = use_ids ? in.node_ids.data() : nullptr;
    const int * leaf_ids = use_ids ? in.leaf_ids.data() : nullptr;
    std::ostringstream out;
    if (cmd == "reserve") {
        bool ok = ggml_gallocr_reserve_n(s.galloc, in.graph, node_ids, leaf_ids);
        ggml_gallocr_reserve_n(s.twin, twin_in.graph, node_ids, leaf_ids);
        out << "reserve " << (ok ? 1 : 0) << "\n";
    } else {
        std::vector<size_t> sizes(s.galloc_types.size()), twin_sizes(s.galloc_types.size() + 1);
        ggml_gallocr_reserve_n_size(s.galloc, in.graph, node_ids, leaf_ids, sizes.data());
        ggml_gallocr_reserve_n_size(s.twin, twin_in.graph, node_ids, leaf_ids, twin_sizes.data());
        out << "reserve_size";
        for (size_t x : sizes) out << " " << x;
        out << "\n";
    }
    fputs(out.str().c_str(), stdout);
    ggml_free(in.ctx);
    ggml_free(twin_in.ctx);
}

static void cmd_alloc(Session & s, const std::string & id) {
    Instance in = build(s.graphs.at(id)), twin_in = build(s.graphs.at(id));
    bool twin_ok = ggml_gallocr_alloc_graph(s.twin, twin_in.graph);  // false iff needs_realloc
    bool ok = ggml_gallocr_alloc_graph(s.galloc, in.graph);
    if (!twin_ok && s.galloc_types.size() == 1 && ok) {
        // the one-buffer galloc re-reserved itself; keep the twin's plan in step
        Instance again = build(s.graphs.at(id));
        ggml_gallocr_reserve_n(s.twin, again.graph, nullptr, nullptr);
        ggml_free(again.ctx);
    }
    std::ostringstream out;
    out << "alloc " << id << "\nneeds_realloc " << (twin_ok ? 0 : 1) << "\nok " << (ok ? 1 : 0) << "\n";
    for (size_t i = 0; i < s.galloc_types.size(); i++) {
        size_t size = ggml_gallocr_get_buffer_size(s.galloc, (int) i);
        std::vector<size_t> chunks = chunk_sizes(s.galloc, (int) i);
        size_t sum = 0;  // wraps as ggml's size_t sum does
        for (size_t c : chunks) sum += c;
        bool shared = false;  // an id sharing an earlier id's buffer reports 0
        for (size_t j = 0; j < i; j++) shared |= mirror(s.galloc)->buffers[j] == mirror(s.galloc)->buffers[i];
        if (!shared && sum != size) {
            fprintf(stderr, "mirror of struct ggml_gallocr out of step with ggml-alloc.c: buffer %zu has size %zu, "
                            "its chunks add up to %zu\n", i, size, sum);
            exit(4);
        }
        out << "size " << i << " " << size << "\nchunks " << i;
        for (size_t c : chunks) out << " " << c;
        out << "\n";
    }
    if (ok) {
        for (ggml_tensor * t : in.order) print_graph_address(out, s.galloc, t);
    }
    out << "end\n";
    fputs(out.str().c_str(), stdout);
    ggml_free(in.ctx);
    ggml_free(twin_in.ctx);
}

static void cmd_tallocr(size_t alignment, size_t buffer_size) {
    DummyType * d = new_type(0, alignment, (size_t) -1);
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(&d->buft, buffer_size);
    ggml_context * ctx = new_context(4096, 0);
    ggml_tallocr ta = ggml_tallocr_new(buffer);
    printf("start %zu\n", ta.offset);
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd, name, type;
        int64_t ne0 = 0, ne1 = 1;
        if (!(in >> cmd)) continue;
        if (cmd == "end") break;
        in >> name >> type >> ne0 >> ne1;
        ggml_tensor * t = ggml_new_tensor_2d(ctx, parse_type(type), ne0, ne1);
        ggml_set_name(t, name.c_str());
        ggml_tallocr_alloc(&ta, t);  // aborts when the tensor does not fit
        printf("ta %s %zu\n", name.c_str(), (size_t) ((uint8_t *) t->data - BASE));
    }
    printf("offset %zu\n", ta.offset);
}

static void cmd_ctx(Session & s, size_t alignment, size_t max_size) {
    DummyType * d = new_type(0, alignment, max_size);
    DummyType * pre = new_type(77, 1, (size_t) -1);  // where the pre-allocated tensors live
    ggml_backend_buffer_t pre_buffer = ggml_backend_buft_alloc_buffer(&pre->buft, 1ull << 40);
    const GraphDesc & g = s.graphs.at("ctx");
    Tensors ts;
    ts.ctx = new_context(g.tensors.size(), 0);
    make_tensors(ts, g, [&](ggml_tensor * t, const TensorDesc & desc) {
        ggml_backend_tensor_alloc(pre_buffer, t, (char *) BASE + desc.view_offs);
    });
    size_t total = ggml_backend_alloc_ctx_tensors_from_buft_size(ts.ctx, &d->buft);
    ggml_backend_alloc_ctx_tensors_from_buft(ts.ctx, &d->buft);
    std::ostringstream out;
    out << "ctx_size " << total << "\nctx_buffers";
    for (ggml_backend_buffer_t b : d->live) out << " " << ggml_backend_buffer_get_size(b);
    out << "\n";
    // a ctx tensor's "chunk" is the index of its buffer among the ones allocated, in order
    for (ggml_tensor * t : ts.order) {
        out << "addr " << t->name << " ";
        if (!t->buffer) {
            out << (t->data ? "ext" : "-") << "\n";
            continue;
        }
        const DummyType * owner = (const DummyType *) ggml_backend_buffer_get_type(t->buffer)->context;
        auto at = std::find(owner->live.begin(), owner->live.end(), t->buffer);
        out << owner->index << " " << (at - owner->live.begin()) << " " << (size_t) ((uint8_t *) t->data - BASE) << "\n";
    }
    out << "end\n";
    fputs(out.str().c_str(), stdout);
}

int main() {
    std::ios::sync_with_stdio(false);
    setvbuf(stdout, nullptr, _IOLBF, 0);  // what was printed before an abort reaches the driver
    Session s;
    GraphDesc * current = nullptr;
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd;
        if (!(in >> cmd)) continue;
        if (cmd == "buft") {
            size_t alignment, max_size;
            in >> alignment >> max_size;
            s.types.push_back(new_type((int) s.types.size(), alignment, max_size));
            s.twin_types.push_back(new_type(1000 + (int) s.twin_types.size(), alignment, max_size));
        } else if (cmd == "galloc") {
            cmd_galloc(s, in);
        } else if (cmd == "graph") {
            std::string id;
            in >> id;
            current = &(s.graphs[id] = GraphDesc());
        } else if (cmd == "t") {
            TensorDesc d;
            int n_src;
            in >> d.name >> d.type >> d.ne0 >> d.ne1 >> d.op >> d.flags >> d.view_src >> d.view_offs >> d.buffer_id >> n_src;
            for (int i = 0; i < n_src; i++) {
                std::string src;
                in >> src;
                d.srcs.push_back(src);
            }
            if (!in || !current) {  // e.g. a size past int64_t
                fprintf(stderr, "cannot read: %s\n", line.c_str());
                return 3;
            }
            current->tensors.push_back(d);
        } else if (cmd == "expand") {
            std::string name;
            in >> name;
            current->expand.push_back(name);
        } else if (cmd == "nodes" || cmd == "leafs") {
            current->hand_built = true;
            std::string name;
            while (in >> name) (cmd == "nodes" ? current->nodes : current->leafs).push_back(name);
        } else if (cmd == "order") {
            std::string id;
            in >> id;
            cmd_order(s, id);
        } else if (cmd == "reserve" || cmd == "reserve_size") {
            std::string id;
            int use_ids;
            in >> id >> use_ids;
            cmd_reserve(s, cmd, id, use_ids != 0);
        } else if (cmd == "alloc") {
            std::string id;
            in >> id;
            cmd_alloc(s, id);
        } else if (cmd == "tallocr") {
            size_t alignment, buffer_size;
            in >> alignment >> buffer_size;
            cmd_tallocr(alignment, buffer_size);
        } else if (cmd == "ctx") {
            size_t alignment, max_size;
            in >> alignment >> max_size;
            cmd_ctx(s, alignment, max_size);
        } else {
            fprintf(stderr, "unknown command %s\n", cmd.c_str());
            return 3;
        }
    }
    return 0;
}
