"""CUDA target printed as C++ for NVRTC: the cold-start route that needs no numba.

The same lowered IR the numba emitter prints (vyre/codegen/pipeline.py ``lower``), printed as one
``extern "C" __global__ void vyre_kernel`` that takes exactly the parameters numba's kernel takes
after flattening (per storage buffer, in declaration order: ``void* meminfo, void* parent,
long long nitems, long long itemsize, T* data, long long shape0, long long stride0``; then a flat
kernel's ``long long n, long long ipt``), so the cubin NVRTC makes is launched by every path that
launches numba's (vyre/driver/cuda_binary.py ``CubinKernel``). Bounds proofs, constants and the
warp-aggregated atomics are the shared emitter's decisions (vyre/codegen/emit.py, cuda.py); only
the syntax differs, and the per-op rules are vyre/codegen/c_ops.py's tables.

A flat kernel worth it carries the interleave lowering too (``vy_interleaved``: K invocations
statement by statement, vyre/codegen/interleave.py; printed by vyre/codegen/cuda_interleave.py),
launched as numba's kernel launches it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import CodegenError
from ..ir import (
    AtomicOp, BinOpKind, BufferDecl, DataType, Expr, LitBool, LitF32, LitF64, LitI32, LitU32, Node, Program,
    SubgroupBallot, SubgroupReduce, SubgroupShuffle, UnOpKind,
)
from .c_ops import C_BINOP, C_ELEM, C_PRELUDE, C_TYPE, C_UNOP, C_WARP_ADD, c_cast
from .cuda import aggregation
from .cuda_interleave import InterleavedPrinter
from .emit import CUDA_C_VERSION, AtomicSite, Binding, Emitter, SubgroupCode
from .flat import is_tunable
from .pipeline import interleaved_form, lower

ENTRY = "vyre_kernel"
_AXES = "xyz"
_FULL = "0xFFFFFFFFu"

_ATOMIC_FN = {
    AtomicOp.ADD: "atomicAdd", AtomicOp.MIN: "atomicMin", AtomicOp.MAX: "atomicMax", AtomicOp.AND: "atomicAnd",
    AtomicOp.OR: "atomicOr", AtomicOp.XOR: "atomicXor", AtomicOp.EXCHANGE: "vy_exch",
    AtomicOp.COMPARE_EXCHANGE: "atomicCAS",
}


@dataclass(frozen=True)
class CKernel:
    """A printed kernel: its C++ ``source``, the ``entry`` symbol and whether it is flat (launched
    with ``n, ipt`` after the buffers)."""

    source: str
    entry: str
    flat: bool


def c_literal(e: Expr) -> str:
    match e:
        case LitBool(v):
            return "true" if v else "false"
        case LitI32(v):
            return "(-2147483647 - 1)" if v == -(2 ** 31) else f"({v})"
        case LitU32(v):
            return f"{v}u"
        case LitF32():
            f = e.value  # the pattern's field is the bit pattern
            if math.isnan(f):
                return "__int_as_float(0x7fc00000)"
            if math.isinf(f):
                return f"__int_as_float({'0xff800000' if f < 0 else '0x7f800000'})"
            return f"((float){f.hex()})"  # exact: the value is an f32
        case LitF64():
            d = e.value
            if math.isnan(d):
                return "__longlong_as_double(0x7ff8000000000000LL)"
            if math.isinf(d):
                bits = "(long long)0xfff0000000000000ULL" if d < 0 else "0x7ff0000000000000LL"
                return f"__longlong_as_double({bits})"
            return f"({d.hex()})"
        case _:
            raise TypeError(f"not a literal: {e!r}")


def c_zero(t: DataType) -> str:
    return "false" if t is DataType.BOOL else f"(({C_TYPE[t]})0)"


@dataclass
class CudaCTarget:
    """Target hooks for :class:`CEmitter` (see vyre/codegen/emit.py ``Target``)."""

    name: str = "cuda-c"
    flag_returns: bool = False
    lane_k: int | None = None
    warp_add_sites: int = 0
    #: each buffer's length source, keyed by the buffer's source name (what ``atomic`` is given)
    lengths: dict[str, str] = field(default_factory=dict)

    def id_src(self, kind: str, axis: int) -> str:
        if kind == "lane":
            return "_lane"
        if kind == "gid" and axis == 0 and self.lane_k is not None:
            return f"_gid0_{self.lane_k}"  # the invocation being emitted in an interleaved body
        return f"_{kind}{axis}"

    def barrier(self) -> list[str]:
        return ["__syncthreads();"]

    def ret(self) -> list[str]:
        # flag_returns: inside an interleaved body's one-trip loop (CInterleavedPrinter.one_trip)
        return ["_ret = true;", "break;"] if self.flag_returns else ["return;"]

    def atomic(self, site: AtomicSite, buf: str, idx: str, val: str, expected: str | None, zero: str) -> str:
        # ``zero`` is the numba spelling; C++ has its own (c_zero)
        n = self.lengths[buf]
        helper = aggregation(site)
        if helper is not None:
            self.warp_add_sites += 1
            return f"vy_warp_{helper}({buf}, {n}, {idx}, {val}, {self.warp_add_sites}LL)"
        args = f"&{buf}[{idx}], {val}" if expected is None else f"&{buf}[{idx}], {expected}, {val}"
        return f"((long long)({idx}) < {n} ? {_ATOMIC_FN[site.op]}({args}) : {c_zero(site.element)})"

    def subgroup(self, e: Expr, operand: Callable[[Expr], str], operand_type: DataType,
                 fresh: Callable[[str], str]) -> SubgroupCode:
        match e:
            case SubgroupBallot(c):
                return SubgroupCode((), f"((unsigned)__ballot_sync({_FULL}, {operand(c)}))")
            case SubgroupShuffle(v, lane):
                src = f"(int)((unsigned)({operand(lane)}) & 31u)"
                if operand_type is DataType.BOOL:
                    return SubgroupCode((), f"(__shfl_sync({_FULL}, {operand(v)} ? 1 : 0, {src}) != 0)")
                return SubgroupCode((), f"__shfl_sync({_FULL}, {operand(v)}, {src})")
            case SubgroupReduce(op, v):
                acc = fresh("_sg")
                lines = [f"{C_TYPE[operand_type]} {acc} = {operand(v)};"]
                for off in (16, 8, 4, 2, 1):
                    other = f"__shfl_sync({_FULL}, {acc}, (int)(_lane ^ {off}u))"
                    lines.append(f"{acc} = {C_BINOP[op](operand_type, acc, other)};")
                return SubgroupCode(tuple(lines), acc)
        raise CodegenError(f"not a subgroup op: {e!r}")


@dataclass
class CEmitter(Emitter):
    """The shared emitter's decisions (bounds facts, constants, lane kinds) printed as C++.
    ``lengths``: the length source of every buffer (a ``long long`` parameter, or a workgroup
    buffer's static count)."""

    lengths: dict[str, str] = field(default_factory=dict)

    # ---- expression syntax (vyre/codegen/emit.py's hooks) ----
    def literal(self, e: Expr) -> str:
        return c_literal(e)

    def load(self, buf: str, idx: str, proven: bool) -> str:
        b = self.buffer_src[buf]
        got = f"{b}[{idx}]" if proven else f"vy_ld({b}, {self.lengths[buf]}, {idx})"
        return f"({got} != 0)" if self.decl(buf).element is DataType.BOOL else got  # bool buffers hold bytes

    def buf_len(self, buf: str) -> str:
        return f"((unsigned){self.lengths[buf]})"

    def unop(self, op: UnOpKind, t: DataType, a: str) -> str:
        return C_UNOP[op](t, a)

    def select(self, cond: str, a: str, b: str) -> str:
        return f"({cond} ? {a} : {b})"

    def cast(self, target: DataType, source: DataType, a: str) -> str:
        return c_cast(target, source, a)

    def binop(self, op: BinOpKind, left: Expr, right: Expr, scope: dict[str, Binding]) -> str:
        return C_BINOP[op](self.type_of(left, scope), self.expr(left, scope), self.expr(right, scope))

    # ---- statement syntax (emit.py's hooks: the statement walk there decides, these spell it) ----
    def declare(self, t: DataType, name: str, value: str, const: bool = False) -> str:
        return f"{'const ' if const else ''}{C_TYPE[t]} {name} = {value};"

    def assign(self, name: str, value: str) -> str:
        return f"{name} = {value};"

    def store(self, buf_src: str, idx: str, value: str) -> str:
        return f"{buf_src}[{idx}] = {value};"

    def store_value(self, buf: str, value: str) -> str:
        return f"(unsigned char)({value})" if self.decl(buf).element is DataType.BOOL else value

    def _guarded(self, buf: str, idx: str, value: str) -> str:
        return f"if ((long long){idx} < {self.lengths[buf]}) {self.store(self.buffer_src[buf], idx, value)}"

    def guarded_store(self, indent: int, buf: str, idx: str, value: str) -> None:
        self.emit(indent, self._guarded(buf, idx, value))

    def unproven_store(self, indent: int, buf: str, idx: str, value: str) -> None:
        tmp = self.fresh("_i")  # a block of its own holds the index's declaration
        self.emit(indent, "{ " + self.declare(DataType.U32, tmp, idx))
        self.emit(indent + 1, self._guarded(buf, tmp, value) + " }")

    def if_open(self, cond: str) -> str:
        return f"if ({cond}) {{"

    def elif_open(self, cond: str) -> str:
        return f"}} else if ({cond}) {{"

    def else_open(self) -> str:
        return "} else {"

    def close(self, indent: int) -> None:
        self.emit(indent, "}")

    def open_scope(self, indent: int) -> int:
        self.emit(indent, "{")
        return indent + 1

    def empty_block(self, indent: int) -> None:
        pass

    def all_of(self, conds: list[str]) -> str:
        return " && ".join(conds)

    def none_of(self, conds: list[str]) -> str:
        return f"!({' || '.join(conds)})"

    def loop_open(self, indent: int, start: str, end: str) -> str:
        it, hi = self.fresh("_it"), self.fresh("_hi")
        self.emit(indent, f"for (long long {it} = (long long)({start}), {hi} = (long long)({end}); "
                          f"{it} < {hi}; ++{it}) {{")
        return f"(unsigned){it}"

    def break_if_returned(self, indent: int) -> None:
        self.emit(indent, "if (_ret) break;")


@dataclass
class CInterleavedPrinter(InterleavedPrinter):
    """The interleave lowering's steps as C++ (vyre/codegen/cuda_interleave.py walks them through
    :class:`CEmitter`'s syntax); ``solo_call``: a statement, with ``_q`` the invocation's index in
    the group."""

    def solo(self, indent: int) -> None:
        self.em.emit(indent, f"for (int _q = 0; _q < {self.k}; ++_q) {self.solo_call}")
        self.em.emit(indent, "return;")

    def one_trip(self, body: tuple[Node, ...], scope: dict[str, Binding], indent: int) -> None:
        self.em.emit(indent, "{ bool _ret = false; do {")
        self.em.block(body, scope, indent + 1)
        self.em.emit(indent, "} while (0); (void)_ret; }")


def _params(storage: list[BufferDecl], src: dict[str, str], lengths: dict[str, str]) -> list[str]:
    """numba's flattened array ABI, one 7-tuple per storage buffer."""
    out = []
    for b in storage:
        p = src[b.name]
        out += [f"void* {p}_meminfo", f"void* {p}_parent", f"long long {p}_nitems", f"long long {p}_itemsize",
                f"{C_ELEM[b.element]}* {p}", f"long long {lengths[b.name]}", f"long long {p}_stride"]
    return out


def emit_cuda_c(program: Program) -> CKernel:
    """The C++ kernel of ``program`` (valid) for NVRTC. Launch it as numba's: blocks = grid and
    threads = workgroup size, or a flat kernel with ``n, ipt`` after the buffers (vyre/codegen/cuda.py)."""
    program = lower(program)
    storage = [b for b in program.buffers if not b.is_workgroup]
    shared = [b for b in program.buffers if b.is_workgroup]
    src = {b.name: f"b{i}_{b.name}" for i, b in enumerate(storage)}
    src.update({b.name: f"s{i}_{b.name}" for i, b in enumerate(shared)})
    lengths = {b.name: f"n{i}_{b.name}" for i, b in enumerate(storage)}
    lengths.update({b.name: f"{b.count}LL" for b in shared})
    target = CudaCTarget(lengths={src[n]: length for n, length in lengths.items()})
    em = CEmitter(program, target, src, lengths=lengths)
    params = _params(storage, src, lengths)
    flat = is_tunable(program)
    if flat:
        buf_params = "".join(f", {C_ELEM[b.element]}* {src[b.name]}, long long {lengths[b.name]}" for b in storage)
        inv_params = "unsigned _gid0" + buf_params
        bufs = "".join(f", {src[b.name]}, {lengths[b.name]}" for b in storage)
        em.emit(0, f"static __device__ void vy_invocation({inv_params}) {{")
        em.emit(1, "const unsigned _gid1 = 0u, _gid2 = 0u;")
        em.block(program.entry, {}, 1)
        em.emit(0, "}")
        em.emit(0, "")
        plan = interleaved_form(program)  # the interleave lowering (vyre/codegen/interleave.py), or None
        k = 1 if plan is None else plan.k
        if plan is not None:
            em.emit(0, f"static __device__ void vy_interleaved(long long _g, long long _stride{buf_params}) {{")
            em.emit(1, "const unsigned _gid1 = 0u, _gid2 = 0u;")
            for j in range(k):
                em.emit(1, f"const unsigned _gid0_{j} = (unsigned)(_g + {j}LL * _stride);")
            CInterleavedPrinter(em, target, plan, f"vy_invocation((unsigned)(_g + _q * _stride){bufs});"
                                ).function_body(1)
            em.emit(0, "}")
            em.emit(0, "")
        em.emit(0, f'extern "C" __global__ void {ENTRY}({", ".join([*params, "long long _n", "long long _ipt"])}) {{')
        em.emit(1, "const long long _t = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;")
        em.emit(1, "const long long _stride = (long long)gridDim.x * (long long)blockDim.x;")
        em.emit(1, "long long _j = 0;")
        if k > 1:
            em.emit(1, f"while (_j + {k} <= _ipt && _t + (_j + {k - 1}) * _stride < _n) {{")
            em.emit(2, f"vy_interleaved(_t + _j * _stride, _stride{bufs});")
            em.emit(2, f"_j += {k};")
            em.emit(1, "}")
        em.emit(1, "for (; _j < _ipt; ++_j) {")
        em.emit(2, "const long long _g = _t + _j * _stride;")
        em.emit(2, f"if (_g < _n) vy_invocation((unsigned)_g{bufs});")
        em.emit(1, "}")
        em.emit(0, "}")
    else:
        wx, wy, _ = program.workgroup_size
        em.emit(0, f'extern "C" __global__ void {ENTRY}({", ".join(params)}) {{')
        for a in range(3):
            em.emit(1, f"const unsigned _lid{a} = threadIdx.{_AXES[a]}, _wg{a} = blockIdx.{_AXES[a]}, "
                       f"_gid{a} = _wg{a} * {program.workgroup_size[a]}u + _lid{a};")
        em.emit(1, f"const unsigned _lin = _lid0 + _lid1 * {wx}u + _lid2 * {wx * wy}u;")
        em.emit(1, "const unsigned _lane = _lin & 31u;")
        for b in shared:
            em.emit(1, f"__shared__ {C_ELEM[b.element]} {src[b.name]}[{b.count}];")
        em.block(program.entry, {}, 1)
        em.emit(0, "}")
    header = [f"// vyre generated kernel: target cuda (NVRTC C++), cuda-c v{CUDA_C_VERSION}. Do not edit.", C_PRELUDE]
    if target.warp_add_sites:
        header.append(C_WARP_ADD)
    return CKernel("\n".join(header) + "\n" + "\n".join(em.lines) + "\n", ENTRY, flat)
