"""A few ggml operations, shapes and strides only: enough to build llama.cpp's
compute graphs as ggml does, tensor for tensor, without any data.

Each function mirrors the ggml.c function of the same name: the result's
type, ne (sizes), nb (strides in bytes), op, sources in slot order, and for
views the root tensor and byte offset. The graph is expanded by
`emel.memory.ggml.build_forward`, which visits sources in slot order as
ggml_visit_parents does, so node order matches llama.cpp's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import PlanError

#: ggml type -> (block size in elements, bytes per block).
TYPES = {
    "f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "i32": (1, 4), "i64": (1, 8),
    "q4_0": (32, 18), "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24), "q8_0": (32, 34),
    "iq4_nl": (32, 18),
}


@dataclass(eq=False)
class T:
    """A ggml_tensor without data: what the graph allocator looks at."""
    type: str
    ne: tuple
    nb: tuple
    op: str = "NONE"
    src: list = field(default_factory=list)
    view_src: "T | None" = None
    view_offs: int = 0
    name: str = ""
    flags: int = 0          # ggml's INPUT = 1, OUTPUT = 2
    has_data: bool = False  # weights and the KV cache: allocated outside the compute buffer

    @property
    def nbytes(self) -> int:
        """ggml_nbytes."""
        blck, size = TYPES[self.type]
        if blck == 1:
            n = size
            for i in range(4):
                n += (self.ne[i] - 1) * self.nb[i]
            return n
        n = self.ne[0] * self.nb[0] // blck
        for i in range(1, 4):
            n += (self.ne[i] - 1) * self.nb[i]
        return n


def _strides(type_: str, ne) -> tuple:
    blck, size = TYPES[type_]
    nb = [size, size * (ne[0] // blck)]
    for i in range(2, 4):
        nb.append(nb[i - 1] * ne[i - 1])
    return tuple(nb)


def _require(ok: bool, what: str, *tensors: "T | None") -> None:
    """ggml's GGML_ASSERT on shapes, as a PlanError: a file whose tensors do not
    fit the graph its architecture builds (llama.cpp would abort) is refused,
    naming the tensors. A missing source is refused the same way."""
    if ok:
        return
    named = [t.name or f"({t.op} result)" for t in tensors if t is not None]
    shapes = ", ".join(f"{t.name or t.op} {list(t.ne)}" for t in tensors if t is not None)
    raise PlanError("INVALID_IR_SHAPES", f"{what}: {shapes}; the model's tensors do not match its "
                                         f"architecture's graph", tensor=named[0] if named else None)


def _nelements(t: "T") -> int:
    return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]


def _can_repeat(small: "T", big: "T") -> bool:
    """ggml_can_repeat: `small` broadcasts to `big` along every dimension."""
    return all(s > 0 and b % s == 0 for s, b in zip(small.ne, big.ne))


def _ne4(ne) -> tuple:
    ne = tuple(int(x) for x in ne)
    return ne + (1,) * (4 - len(ne))


def new_tensor(type_: str, *ne, name: str = "", has_data: bool = False) -> T:
    ne = _ne4(ne)
    return T(type_, ne, _strides(type_, ne), name=name, has_data=has_data)


def set_input(t: T) -> T:
    t.flags |= 1
    return t


def _result(type_, ne, op, src) -> T:
    ne = _ne4(ne)
    return T(type_, ne, _strides(type_, ne), op=op, src=list(src))


def _view(a: T, ne, nb, offset: int, op: str, src) -> T:
    """ggml_new_tensor_impl with a view source: views of views point at the root."""
    root, offs = a, offset
    if a.view_src is not None:
        root, offs = a.view_src, offset + a.view_offs
    return T(a.type, _ne4(ne), tuple(nb), op=op, src=list(src), view_src=root, view_offs=offs,
             has_data=root.has_data)  # ggml_view points a view of a buffer's tensor into that buffer


def dup_tensor(a: T, op: str, src) -> T:
    return _result(a.type, a.ne, op, src)


def view_tensor(a: T) -> T:
    """ggml_view_tensor: same sizes and strides, op left to the caller."""
    return _view(a, a.ne, a.nb, 0, "NONE", [])


def view(a: T, ne, nb_rest, offset: int) -> T:
    """ggml_view_1d/2d/3d/4d: ne has 1-4 sizes, nb_rest the strides after nb[0]."""
    ne = _ne4(ne)
    nb = [TYPES[a.type][1]] + list(nb_rest)
    while len(nb) < 4:
        nb.append(nb[-1] * ne[len(nb) - 1])
    v = _view(a, ne, nb, offset, "VIEW", [a])
    root = v.view_src
    _require(min(ne) > 0 and v.view_offs + v.nbytes <= root.nbytes, "a view outside its tensor", a)
    return v


def reshape(a: T, *ne) -> T:
    ne = _ne4(ne)
    _require(min(ne) > 0 and ne[0] * ne[1] * ne[2] * ne[3] == _nelements(a), "a reshape that changes the "
             "number of elements", a)
    return _view(a, ne, _strides(a.type, ne), 0, "RESHAPE", [a])


def permute(a: T, ax0: int, ax1: int, ax2: int, ax3: int) -> T:
    ne, nb = [0] * 4, [0] * 4
    for i, ax in enumerate((ax0, ax1, ax2, ax3)):
        ne[ax], nb[ax] = a.ne[i], a.nb[i]
    return _view(a, ne, nb, 0, "PERMUTE", [a])


def transpose(a: T) -> T:
    ne = (a.ne[1], a.ne[0], a.ne[2], a.ne[3])
    nb = (a.nb[1], a.nb[0], a.nb[2], a.nb[3])
    return _view(a, ne, nb, 0, "TRANSPOSE", [a])


def cont(a: T, *ne) -> T:
    return _result(a.type, ne or a.ne, "CONT", [a])


def mul_mat(a: T, b: T) -> T:
    # ggml_can_mul_mat: a's rows as long as b's, b's batches a multiple of a's
    _require(a is not None and b is not None and a.ne[0] == b.ne[0] and b.ne[2] % a.ne[2] == 0
             and b.ne[3] % a.ne[3] == 0, "a matrix product whose shapes do not match", a, b)
    return _result("f32", (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), "MUL_MAT", [a, b])


def unary_like(op: str, a: T, *more: T) -> T:
    """ggml_rms_norm, ggml_mul, ggml_add, ggml_scale, ggml_rope_ext, ggml_soft_max_ext:
    a new tensor shaped and typed like `a`, sources in slot order (None keeps a slot)."""
    if op in ("MUL", "ADD"):  # binary ops: the second broadcasts to the first (ggml_can_repeat)
        _require(a is not None and more[0] is not None and _can_repeat(more[0], a),
                 f"an element-wise {op} whose shapes do not broadcast", a, more[0])
    return dup_tensor(a, op, [a, *more])


def get_rows(a: T, b: T) -> T:
    _require(a is not None and a.ne[2] == b.ne[1] and b.ne[3] == 1, "rows taken from a table of another "
             "shape", a, b)
    type_ = "i32" if a.type == "i32" else "f32"
    return _result(type_, (a.ne[0], b.ne[0], b.ne[1], b.ne[2]), "GET_ROWS", [a, b])


def set_rows(a: T, b: T, c: T) -> T:
    """Rows of b written into a at indices c: a view of a (the KV cache)."""
    r = _view(a, a.ne, a.nb, 0, "SET_ROWS", [b, c, a])
    return r


def glu_split(a: T, b: T) -> T:
    return _result(a.type, a.ne, "GLU", [a, b])


def glu(a: T) -> T:
    """ggml_swiglu of one tensor: its two halves along ne[0]."""
    return _result(a.type, (a.ne[0] // 2,) + tuple(a.ne[1:]), "GLU", [a])


def is_contiguous(t: T) -> bool:
    """ggml_is_contiguous: rows packed one after another (dimensions of size 1 skipped)."""
    blck, size = TYPES[t.type]
    if t.ne[0] != blck and t.nb[0] != size:
        return False
    nxt = size * t.ne[0] // blck
    for i in range(1, 4):
        if t.ne[i] != 1:
            if t.nb[i] != nxt:
                return False
            nxt *= t.ne[i]
    return True


def flash_attn_ext(q: T, k: T, v: T, mask: T | None) -> T:
    return _result("f32", (v.ne[0], q.ne[2], q.ne[1], q.ne[3]), "FLASH_ATTN_EXT", [q, k, v, mask])


def cast(a: T, type_: str) -> T:
    r = _result(type_, a.ne, "CPY", [a])
    r.src.append(r)  # ggml_cast points src[1] at the result itself
    return r

