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
statement by statement, vyre/codegen/interleave.py; printed by vyre/codegen/cuda_c_interleave.py),
launched as numba's kernel launches it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import CodegenError
from ..ir import (
    Assign, Atomic, AtomicOp, Barrier, BinOp, BinOpKind, Block, BufferDecl, BufLen, Call, Cast, DataType, Expr,
    Fma, If, InvocationId, Let, LitBool, LitF32, LitF64, LitI32, LitU32, Load, LocalId, Loop, Node, Program, Region,
    Return, Select, Store, SubgroupBallot, SubgroupLocalId, SubgroupReduce, SubgroupShuffle, SubgroupSize, UnOp,
    Var, WorkgroupId,
)
from .c_ops import C_BINOP, C_ELEM, C_PRELUDE, C_TYPE, C_UNOP, C_WARP_ADD, c_cast
from .cuda import aggregation
from .emit import CUDA_C_VERSION, AtomicSite, Binding, Emitter, SubgroupCode, has_return
from .flat import is_tunable
from .lanes import LaneKind
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

    def id_src(self, kind: str, axis: int) -> str:
        if kind == "lane":
            return "_lane"
        if kind == "gid" and axis == 0 and self.lane_k is not None:
            return f"_gid0_{self.lane_k}"  # the invocation being emitted in an interleaved body
        return f"_{kind}{axis}"

    def barrier(self) -> list[str]:
        return ["__syncthreads();"]

    def ret(self) -> list[str]:
        # flag_returns: inside an interleaved body's one-trip loop (cuda_c_interleave.py ``Finish``)
        return ["_ret = true;", "break;"] if self.flag_returns else ["return;"]

    def atomic(self, site: AtomicSite, buf: str, idx: str, val: str, expected: str | None, zero: str) -> str:
        raise CodegenError("the C printer emits atomics itself (CEmitter.c_atomic)")

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
    ctarget: CudaCTarget = field(default_factory=CudaCTarget)

    def expr(self, e: Expr, scope: dict[str, Binding]) -> str:
        def sub(x: Expr) -> str:
            return self.expr(x, scope)

        match e:
            case LitBool() | LitI32() | LitU32() | LitF32() | LitF64():
                return c_literal(e)
            case Var(name):
                return scope[name].src
            case Load(buf, index):
                d = self.decl(buf)
                i = sub(index)
                b = self.buffer_src[buf]
                got = f"{b}[{i}]" if self.in_bounds(i, index, d) else f"vy_ld({b}, {self.lengths[buf]}, {i})"
                return f"({got} != 0)" if d.element is DataType.BOOL else got
            case BufLen(buf):
                return f"((unsigned){self.lengths[buf]})"
            case InvocationId(axis):
                return self.target.id_src("gid", axis)
            case WorkgroupId(axis):
                return self.target.id_src("wg", axis)
            case LocalId(axis):
                return self.target.id_src("lid", axis)
            case SubgroupLocalId():
                return self.target.id_src("lane", 0)
            case SubgroupSize():
                return "32u"
            case BinOp(op, left, right):
                return self.binop(op, left, right, scope)
            case UnOp(op, operand):
                return C_UNOP[op](self.type_of(operand, scope), sub(operand))
            case Select(c, a, b):
                return f"({sub(c)} ? {sub(a)} : {sub(b)})"
            case Cast(target, value):
                return c_cast(target, self.type_of(value, scope), sub(value))
            case Fma(a, b, c):
                return f"({sub(a)} * {sub(b)} + {sub(c)})"  # contracted or not, as numba's (--fmad=true)
            case Atomic() | SubgroupBallot() | SubgroupShuffle() | SubgroupReduce():
                raise CodegenError(f"{type(e).__name__} nested inside an expression. "
                                   "Fix: bind it as the whole value of a Let (validation enforces this)")
            case Call(op_id, _):
                raise CodegenError(f"call of {op_id!r} was not inlined. Fix: run inline_calls first")
            case _:
                raise TypeError(f"not a vyre expression: {e!r}")

    def binop(self, op: BinOpKind, left: Expr, right: Expr, scope: dict[str, Binding]) -> str:
        return C_BINOP[op](self.type_of(left, scope), self.expr(left, scope), self.expr(right, scope))

    def block(self, body: tuple[Node, ...], scope: dict[str, Binding], indent: int) -> None:
        saved = self.facts
        for n in body:
            self.stmt(n, scope, indent)
        self.facts = saved

    def c_store(self, buf: str, value: str) -> str:
        return f"(unsigned char)({value})" if self.decl(buf).element is DataType.BOOL else value

    def stmt(self, n: Node, scope: dict[str, Binding], indent: int) -> None:
        match n:
            case Let(name, value):
                t = self.type_of(value, scope)
                if isinstance(value, Atomic):
                    rhs = self.c_atomic(value, scope, result_used=name in self.read)
                    self.emit(indent, f"{C_TYPE[t]} {self.let_target(name, t, scope)} = {rhs};")
                elif isinstance(value, (SubgroupBallot, SubgroupShuffle, SubgroupReduce)):
                    operand = value.cond if isinstance(value, SubgroupBallot) else value.value
                    ot = self.type_of(operand, scope)
                    inner = dict(scope)
                    code = self.ctarget.subgroup(value, lambda x: self.expr(x, inner), ot, self.fresh)
                    for line in code.lines:
                        self.emit(indent, line)
                    self.emit(indent, f"{C_TYPE[t]} {self.let_target(name, t, scope)} = {code.value};")
                else:
                    rhs = self.expr(value, scope)
                    const = self.const_let(name, value, scope)
                    dest = self.let_target(name, t, scope)
                    if isinstance(value, BufLen) and name not in self.mutable:
                        self.len_alias[dest] = value.buffer
                    if const is not None:
                        self.consts[dest] = const
                    if name not in self.mutable:
                        self.lanes.record(dest, self.lane_kind(value, scope))
                    self.emit(indent, f"{C_TYPE[t]} {dest} = {rhs};")
            case Assign(name, value):
                self.emit(indent, f"{scope[name].src} = {self.expr(value, scope)};")
            case Store(buf, index, value):
                d = self.decl(buf)
                i = self.expr(index, scope)
                v = self.c_store(buf, self.expr(value, scope))
                b = self.buffer_src[buf]
                if self.in_bounds(i, index, d):
                    self.emit(indent, f"{b}[{i}] = {v};")
                else:
                    tmp = self.fresh("_i")
                    self.emit(indent, f"{{ unsigned {tmp} = {i};")
                    self.emit(indent + 1, f"if ((long long){tmp} < {self.lengths[buf]}) {b}[{tmp}] = {v}; }}")
            case If(cond, then, otherwise):
                self.emit(indent, f"if ({self.expr(cond, scope)}) {{")
                saved = self.facts
                self.facts = saved | self.bound_facts(cond, scope)
                self.block(then, dict(scope), indent + 1)
                self.facts = saved
                if otherwise:
                    self.emit(indent, "} else {")
                    self.block(otherwise, dict(scope), indent + 1)
                self.emit(indent, "}")
            case Loop(var, start, end, body):
                s, e = self.expr(start, scope), self.expr(end, scope)
                it, hi = self.fresh("_it"), self.fresh("_hi")
                inner = dict(scope)
                self.emit(indent, f"for (long long {it} = (long long)({s}), {hi} = (long long)({e}); "
                                  f"{it} < {hi}; ++{it}) {{")
                src = self.bind_local(var, DataType.U32, inner)
                if var not in self.mutable and all(
                        self.lane_kind(x, scope) is LaneKind.UNIFORM for x in (start, end)):
                    self.lanes.record(src, LaneKind.UNIFORM)
                self.emit(indent + 1, f"unsigned {src} = (unsigned){it};")
                saved = self.facts
                bound = self.len_of(end, scope)
                if bound is not None:
                    self.facts = saved | {(src, bound)}
                self.block(body, inner, indent + 1)
                self.facts = saved
                self.emit(indent, "}")
                if self.ctarget.flag_returns and has_return(body):
                    self.emit(indent, "if (_ret) break;")  # a Return inside: leave the enclosing loop too
            case Block(body) | Region(_, body):
                self.emit(indent, "{")
                self.block(body, dict(scope), indent + 1)
                self.emit(indent, "}")
            case Barrier():
                for line in self.ctarget.barrier():
                    self.emit(indent, line)
            case Return():
                for line in self.ctarget.ret():
                    self.emit(indent, line)
            case _:
                raise TypeError(f"not a vyre node: {n!r}")

    def c_atomic(self, a: Atomic, scope: dict[str, Binding], result_used: bool) -> str:
        d = self.decl(a.buffer)
        b, n = self.buffer_src[a.buffer], self.lengths[a.buffer]
        idx, val = self.expr(a.index, scope), self.expr(a.value, scope)
        site = AtomicSite(a.op, d.element, d.count, result_used, isinstance(a.value, (LitI32, LitU32)),
                          self.lane_kind(a.index, scope) is LaneKind.DISTINCT)
        helper = aggregation(site)
        if helper is not None:
            self.ctarget.warp_add_sites += 1
            return f"vy_warp_{helper}({b}, {n}, {idx}, {val}, {self.ctarget.warp_add_sites}LL)"
        args = f"&{b}[{idx}], {val}" if a.expected is None else f"&{b}[{idx}], {self.expr(a.expected, scope)}, {val}"
        return f"((long long)({idx}) < {n} ? {_ATOMIC_FN[a.op]}({args}) : {c_zero(d.element)})"


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
    target = CudaCTarget()
    em = CEmitter(program, target, src, lengths=lengths, ctarget=target)
    params = _params(storage, src, lengths)
    flat = is_tunable(program)
    if flat:
        inv_params = ", ".join(["unsigned _gid0", *(f"{C_ELEM[b.element]}* {src[b.name]}, long long {lengths[b.name]}"
                                                     for b in storage)])
        bufs = "".join(f", {src[b.name]}, {lengths[b.name]}" for b in storage)
        em.emit(0, f"static __device__ void vy_invocation({inv_params}) {{")
        em.emit(1, "const unsigned _gid1 = 0u, _gid2 = 0u;")
        em.block(program.entry, {}, 1)
        em.emit(0, "}")
        em.emit(0, "")
        plan = interleaved_form(program)  # the interleave lowering (vyre/codegen/interleave.py), or None
        k = 1 if plan is None else plan.k
        if plan is not None:
            from .cuda_c_interleave import CInterleavedPrinter

            buf_params = inv_params[len("unsigned _gid0"):]
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
