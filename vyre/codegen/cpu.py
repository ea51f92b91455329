"""CPU target: numba ``njit`` kernels that emulate the GPU execution model.

Three shapes, chosen from the program:
- *independent* (no barriers, no subgroup ops): one function per invocation, called for every lane
  of every workgroup; workgroups run in parallel (``prange``) unless the program uses atomics, in which
  case they run serially so that plain read-modify-writes are atomic (flat programs whose atomics
  are reductions run in parallel on private copies instead: cpu_private.py);
- *lockstep* (barriers or subgroup ops): the lockstep pass (vyre/codegen/lockstep.py) splits the
  body at the synchronisation points, which validation only allows at uniform points; this module
  prints its steps. Each segment becomes a function run for every lane before the next starts
  (that is the barrier); locals bound at a segment's top level live in per-lane arrays; subgroup
  exchanges are computed across the lane arrays between segments; uniform loops containing
  synchronisation become loops around segments.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import CodegenError
from typing import assert_never

from ..ir import (
    Atomic, AtomicOp, BufferDecl, DataType, Expr, Let, Node, Program, SubgroupBallot, SubgroupReduce, SubgroupShuffle,
    Var,
)
from .emit import CODEGEN_VERSION, AtomicSite, Binding, Emitter, SubgroupCode, has_return, uses
from .flat import is_tunable
from .cpu_narrow import NARROW_PRELUDE, OPAQUE_IMPORT, CpuEmitter, id_lines
from .cpu_private import private_atomics, private_parallel_entry
from .lockstep import (
    Exchange, Segment, Step, SubgroupOp, UniformLoop, UniformScope,
)
from .pipeline import lockstep_form, lower_cpu
from .ops import BINOP_EMIT, CTOR
from .prelude import PRELUDE

# f32 exp / exp2 / log / log2 / tanh / sinh / cosh / sin / cos / tan without libm calls, so that
# LLVM vectorises loops that use them (numba calls scalar libm per element, and numpy's SIMD ufuncs
# would otherwise beat fused kernels). Computed in f64 and rounded once: within 0.5 ulp of the
# float64 result plus the final rounding (tested over the whole f32 range in
# tests/test_codegen_cpu_math.py). sin/cos reduce |x| < 120 by Cody-Waite with a 33-bit pi/2,
# larger |x| by Payne-Hanek on the f32 bit pattern with 192 bits of 4/pi (the method of ARM's
# optimized-routines sinf); both are computed and selected arithmetically, since a branch or a
# nested conditional expression keeps LLVM from vectorising.
CPU_MATH = '''
_VY_INV_PIO4 = np.array([
    0xa2, 0xa2f9, 0xa2f983, 0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
    0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
    0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041,
], dtype=np.uint32)


@_dev
def _vy_exp64(c):
    # e**c for c in [-104, 90] (callers clamp), relative error below 3e-13: 2**n * Taylor(r)
    n = math.floor(c * 1.4426950408889634 + 0.5)
    r = (c - n * 0.6931471803691238) - n * 1.9082149292705877e-10
    p = 1.0 + r * (1.0 + r * (0.5 + r * (0.16666666666666666 + r * (0.041666666666666664 + r * (
        0.008333333333333333 + r * (0.001388888888888889 + r * (0.0001984126984126984 + r * (
            2.48015873015873e-05 + r * 2.7557319223985893e-06))))))))
    return p * np.int64((int64(n) + 1023) << 52).view(np.float64)


@_dev
def _vy_f32_exp(a):
    d = float64(a)
    res = float32(_vy_exp64(min(max(d, -104.0), 89.0)))
    return res if d == d else float32(d)


@_dev
def _vy_f32_exp2(a):
    d = float64(a)
    res = float32(_vy_exp64(min(max(d, -151.0), 128.5) * 0.6931471805599453))
    return res if d == d else float32(d)


@_dev
def _vy_log64(d):
    # (e, log(m)) with d = 2**e * m, m in (sqrt(1/2), sqrt(2)], for positive finite d (every positive
    # f32 is a normal f64); log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.1716: error < 2e-13
    bits = np.float64(d).view(np.int64)
    m = np.int64((bits & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000).view(np.float64)
    big = m > 1.4142135623730951
    e = float64((bits >> 52) - 1023) + (1.0 if big else 0.0)
    m = m * 0.5 if big else m
    f = m - 1.0
    s = f / (2.0 + f)
    s2 = s * s
    lm = 2.0 * s * (1.0 + s2 * (0.3333333333333333 + s2 * (0.2 + s2 * (0.14285714285714285 + s2 * (
        0.1111111111111111 + s2 * (0.09090909090909091 + s2 * (0.07692307692307693 + s2 * (
            0.06666666666666667))))))))
    return e, lm


@_dev
def _vy_log_special(d, r):
    # log of 0 is -inf, of +inf is +inf, of anything negative or NaN is NaN (one select each)
    r = r if d > 0.0 else float32(math.nan)
    r = float32(-math.inf) if d == 0.0 else r
    return float32(math.inf) if d == math.inf else r


@_dev
def _vy_f32_log(a):
    d = float64(a)
    e, lm = _vy_log64(d)
    return _vy_log_special(d, float32(e * 0.6931471805599453 + lm))


@_dev
def _vy_f32_log2(a):
    d = float64(a)
    e, lm = _vy_log64(d)
    return _vy_log_special(d, float32(e + lm * 1.4426950408889634))


@_dev
def _vy_f32_tanh(a):
    d = float64(a)
    c = min(max(d, -20.0), 20.0)
    e2 = _vy_exp64(2.0 * c)
    c2 = c * c
    # Taylor below 1/8, where (e2 - 1) would cancel; written as c * (...) so that tanh(-0) = -0
    small = c * (1.0 + c2 * (-0.3333333333333333 + c2 * (0.13333333333333333 + c2 * (
        -0.05396825396825397 + c2 * (0.021869488536155203 + c2 * -0.008863235529902197)))))
    r = small if abs(c) < 0.125 else (e2 - 1.0) / (e2 + 1.0)
    return float32(r) if d == d else float32(d)


@_dev
def _vy_sincos_core(a):
    # (sin r, cos r, q) with |a| = q pi/2 + r, |r| <= pi/4
    ad = abs(float64(a))
    nf = math.floor(ad * 0.6366197723675814 + 0.5)
    rs = (ad - nf * 1.5707963267341256) - nf * 6.077100506506192e-11
    xi = np.uint64(np.float32(ad).view(np.uint32))
    idx = (xi >> np.uint64(26)) & np.uint64(15)
    m = ((xi & np.uint64(0xffffff)) | np.uint64(0x800000)) << ((xi >> np.uint64(23)) & np.uint64(7))
    # 32-bit table entries widened here: LLVM then knows both factors fit 32 bits (cheap multiplies)
    res0 = (m * np.uint64(_VY_INV_PIO4[idx])) & np.uint64(0xffffffff)
    res1 = m * np.uint64(_VY_INV_PIO4[idx + np.uint64(4)])
    res2 = m * np.uint64(_VY_INV_PIO4[idx + np.uint64(8)])
    res0 = ((res2 >> np.uint64(32)) | (res0 << np.uint64(32))) + res1
    nl = (res0 + (np.uint64(1) << np.uint64(61))) >> np.uint64(62)
    rl = float64(np.int64(res0 - (nl << np.uint64(62)))) * 3.4061215800865545e-19
    large = ad >= 120.0
    r = rl if large else rs
    q = int64(nl) if large else int64(nf)
    r2 = r * r
    s = r * (1.0 + r2 * (-0.16666666666666666 + r2 * (0.008333333333333333 + r2 * (
        -0.0001984126984126984 + r2 * (2.7557319223985893e-06 + r2 * (-2.505210838544172e-08
                                                                     + r2 * 1.6059043836821613e-10))))))
    c = 1.0 + r2 * (-0.5 + r2 * (0.041666666666666664 + r2 * (-0.001388888888888889 + r2 * (
        2.48015873015873e-05 + r2 * (-2.755731922398589e-07 + r2 * (2.08767569878681e-09
                                                                    + r2 * -1.1470745597729725e-11))))))
    return s, c, q


@_dev
def _vy_sincos64(a, quarter):
    s, c, q = _vy_sincos_core(a)
    q = q + quarter
    sgn = 1.0 - 2.0 * float64((q >> 1) & 1)
    return (c if (q & 1) == 1 else s) * sgn


@_dev
def _vy_f32_sin(a):
    d = float64(a)
    v = _vy_sincos64(a, 0) * math.copysign(1.0, d)
    return float32(v) if math.isfinite(d) else float32(math.nan)


@_dev
def _vy_f32_cos(a):
    d = float64(a)
    v = _vy_sincos64(a, 1)
    return float32(v) if math.isfinite(d) else float32(math.nan)


@_dev
def _vy_f32_tan(a):
    # from one reduction: tan |a| = sin r / cos r in even quadrants, -cos r / sin r in odd ones (each
    # polynomial is accurate relative to itself, so the quotient stays accurate next to the poles)
    d = float64(a)
    s, c, q = _vy_sincos_core(a)
    odd = (q & 1) == 1
    v = (-c if odd else s) / (s if odd else c) * math.copysign(1.0, d)
    return float32(v) if math.isfinite(d) else float32(math.nan)


@_dev
def _vy_f32_sinh(a):
    d = float64(a)
    c = min(max(d, -95.0), 95.0)
    e = _vy_exp64(c)
    c2 = c * c
    # Taylor below 1/8, where e - 1/e would cancel; c * (...) keeps sinh(-0) = -0
    small = c * (1.0 + c2 * (0.16666666666666666 + c2 * (0.008333333333333333 + c2 * (
        0.0001984126984126984 + c2 * 2.7557319223985893e-06))))
    r = small if abs(c) < 0.125 else 0.5 * (e - 1.0 / e)
    return float32(r) if d == d else float32(d)


@_dev
def _vy_f32_cosh(a):
    d = float64(a)
    e = _vy_exp64(min(max(d, -95.0), 95.0))
    r = 0.5 * (e + 1.0 / e)
    return float32(r) if d == d else float32(d)
'''

_ATOMIC_RMW: dict[AtomicOp, str] = {
    AtomicOp.ADD: "old + v",
    AtomicOp.MIN: "min(old, v)",
    AtomicOp.MAX: "max(old, v)",
    AtomicOp.AND: "old & v",
    AtomicOp.OR: "old | v",
    AtomicOp.XOR: "old ^ v",
    AtomicOp.EXCHANGE: "v",
}

CPU_PRELUDE = "\n".join(
    f'''
@_dev
def _vy_at_{op.name.lower()}(b, i, v, zero):
    if i < b.shape[0]:
        old = b[i]
        b[i] = {rmw}
        return old
    return zero
''' for op, rmw in _ATOMIC_RMW.items()
) + '''
@_dev
def _vy_at_compare_exchange(b, i, expected, v, zero):
    if i < b.shape[0]:
        old = b[i]
        if old == expected:
            b[i] = v
        return old
    return zero


@_dev
def _vy_fmod(a, b):
    return np.fmod(a, b)


@_dev
def _vy_iabs(a):
    return int32(abs(int64(a)))
''' + CPU_MATH


@dataclass
class CpuTarget:
    name: str = "cpu"

    def id_src(self, kind: str, axis: int) -> str:
        return "_lane" if kind == "lane" else f"_{kind}{axis}"

    def atomic(self, site: AtomicSite, buf: str, idx: str, val: str, expected: str | None, zero: str) -> str:
        if site.op is AtomicOp.COMPARE_EXCHANGE:
            return f"_vy_at_compare_exchange({buf}, {idx}, {expected}, {val}, {zero})"
        return f"_vy_at_{site.op.name.lower()}({buf}, {idx}, {val}, {zero})"

    def barrier(self) -> list[str]:
        raise CodegenError("Barrier reached the per-invocation CPU emitter (internal). Fix: report this bug")

    # The body of an invocation is emitted inline in the loop over invocations (a call per
    # invocation would cost numba a reference-count round trip per array argument: measured 200x
    # slower for 8 arrays). ``Return`` then leaves the invocation through a one-trip loop.
    flag_returns: bool = True

    def ret(self) -> list[str]:
        return ["_ret = True", "break"]

    def subgroup(self, e: Expr, operand: Callable[[Expr], str], operand_type: DataType,
                 fresh: Callable[[str], str]) -> SubgroupCode:
        raise CodegenError("subgroup op reached the per-invocation CPU emitter (internal). Fix: report this bug")


def _sig(program: Program, scalars: tuple[str, ...]) -> str:
    """Source of the kernel's numba signature: read-only buffers are typed read-only, so arrays
    the caller marked non-writeable are accepted (a writable array converts to that type too)."""
    args = [f"_t.Array({CTOR[b.element]}, 1, 'C', readonly={not b.access.writable})"
            for b in program.buffers if not b.is_workgroup]
    return "_t.void(" + ", ".join([*args, *(f"_t.{s}" for s in scalars)]) + ")"


def _ids(em: Emitter, indent: int, wg: tuple[int, int, int]) -> None:
    for line in id_lines(wg):
        em.emit(indent, line)


@dataclass
class _Lockstep:
    """Prints the lockstep form (vyre/codegen/lockstep.py): a segment function per Segment, the
    workgroup function calling them in order around the exchanges and uniform loops."""

    program: Program
    em: Emitter
    names: list[str]  # every buffer's name in the generated code (storage, then workgroup)
    segments: list[tuple[list[str], bool]] = field(default_factory=list)  # body, has a Return
    #: per segment, the buffers and lane arrays its body names (the tuple its call passes)
    seg_arrays: list[list[str]] = field(default_factory=list)
    lane_arrays: list[tuple[str, DataType]] = field(default_factory=list)
    loop_vars: list[str] = field(default_factory=list)
    seg_loops: list[list[str]] = field(default_factory=list)

    def lane_array(self, name: str, t: DataType, scope: dict[str, Binding]) -> str:
        arr = self.em.fresh("la") + "_" + name
        self.lane_arrays.append((arr, t))
        scope[name] = Binding(f"{arr}[_l]", t, arr)
        return arr

    def segment(self, stmts: tuple[Node, ...], scope: dict[str, Binding], indent: int) -> None:
        """Emit a call running ``stmts`` for every lane (a segment function holds the body)."""
        em = self.em
        outer_lines = em.lines
        k = len(self.segments)
        em.lines = []
        for n in stmts:
            if isinstance(n, Let):
                t = em.type_of(n.value, scope)
                rhs = em.atomic(n.value, scope) if isinstance(n.value, Atomic) else em.expr(n.value, scope)
                const = None if isinstance(n.value, Atomic) else em.const_let(n.name, n.value, scope)
                arr = self.lane_array(n.name, t, scope)
                if const is not None:
                    em.consts[scope[n.name].src] = const
                em.emit(0, f"{arr}[_l] = {rhs}")
            else:
                em.stmt(n, scope, 0)
        body = em.lines
        em.lines = outer_lines
        self.segments.append((body, has_return(stmts)))
        self.seg_loops.append(list(self.loop_vars))
        # only the arrays the body names: unpacking every lane array in every segment was most of
        # numba's compile time (a reduction's backward program on the CPU: 17.2 -> 8.0 s)
        text = "\n".join(body)
        used = [a for a in [*self.names, *(a for a, _ in self.lane_arrays)]
                if re.search(rf"\b{re.escape(a)}\b", text)]
        self.seg_arrays.append(used)
        em.emit(indent, f"if _vy_seg{k}(_wg0, _wg1, _wg2, {_tuple(used)}{self.loop_args()}):")
        em.emit(indent + 1, "return")

    def loop_args(self) -> str:
        return "".join(f", {v}" for v in self.loop_vars)

    def lanes_of(self, e: Expr, scope: dict[str, Binding]) -> str:
        """The lane array holding operand ``e`` (a variable the segment before bound)."""
        b = scope[e.name] if isinstance(e, Var) else None
        if b is None or b.lane_array is None:
            raise CodegenError(f"exchange operand {e!r} is not a lane array (internal). Fix: report this bug")
        return b.lane_array

    def exchange(self, name: str, v: SubgroupOp, scope: dict[str, Binding], indent: int) -> None:
        em = self.em
        operand: Expr = v.cond if isinstance(v, SubgroupBallot) else v.value
        t = em.type_of(v, scope)
        ot = em.type_of(operand, scope)
        src = self.lanes_of(operand, scope)
        dest = self.lane_array(name, t, scope)
        wg = self.program.workgroup_invocations
        em.emit(indent, f"for _s in range({wg // 32}):")
        em.emit(indent + 1, "_b = _s * 32")
        match v:
            case SubgroupReduce(op, _):
                em.emit(indent + 1, f"_acc = {src}[_b]")
                em.emit(indent + 1, "for _k in range(1, 32):")
                em.emit(indent + 2, f"_acc = {BINOP_EMIT[op](ot, '_acc', f'{src}[_b + _k]')}")
                em.emit(indent + 1, "for _k in range(32):")
                em.emit(indent + 2, f"{dest}[_b + _k] = _acc")
            case SubgroupBallot():
                em.emit(indent + 1, "_acc = int64(0)")
                em.emit(indent + 1, "for _k in range(32):")
                em.emit(indent + 2, f"if {src}[_b + _k]:")
                em.emit(indent + 3, "_acc |= int64(1) << _k")
                em.emit(indent + 1, "for _k in range(32):")
                em.emit(indent + 2, f"{dest}[_b + _k] = uint32(_acc)")
            case SubgroupShuffle(_, lane):
                lanes = self.lanes_of(lane, scope)
                em.emit(indent + 1, "for _k in range(32):")
                em.emit(indent + 2, f"{dest}[_b + _k] = {src}[_b + (int64({lanes}[_b + _k]) & 31)]")
            case _:
                assert_never(v)

    def steps(self, steps: tuple[Step, ...], scope: dict[str, Binding], indent: int) -> None:
        for s in steps:
            match s:
                case Segment(body):
                    self.segment(body, scope, indent)
                case Exchange(name, op):
                    self.exchange(name, op, scope, indent)
                case UniformLoop(var, start, end, lbody):
                    lane0 = {k: b.at_lane("0") for k, b in scope.items()}  # uniform: lane 0's value
                    s0, e0 = self.em.expr(start, lane0), self.em.expr(end, lane0)
                    it = self.em.fresh("_it")
                    inner = dict(scope)
                    src = self.em.fresh("v") + "_" + var
                    inner[var] = Binding(src, DataType.U32)
                    self.em.emit(indent, f"for {it} in range(int64({s0}), int64({e0})):")
                    self.em.emit(indent + 1, f"{src} = uint32({it})")
                    self.loop_vars.append(src)
                    self.steps(lbody, inner, indent + 1)
                    self.loop_vars.pop()
                case UniformScope(body):
                    self.steps(body, dict(scope), indent)
                case _:
                    assert_never(s)


def _tuple(names: list[str]) -> str:
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def _unpack(names: list[str], packed: str) -> list[str]:
    """Lines unpacking ``packed`` into ``names`` (buffers and lane arrays reach the segment
    functions as tuples: CPython compiles calls of more than 30 arguments into a form numba rejects)."""
    if not names:
        return []
    return ["    " + ", ".join(names) + ("," if len(names) == 1 else "") + f" = {packed}"]


def _indented(lines: list[str], depth: int) -> list[str]:
    return ["    " * depth + line for line in lines]


def _invocation(body_lines: list[str], has_return: bool, depth: int) -> list[str]:
    """One invocation's statements at ``depth``; a ``Return`` breaks out of a one-trip loop."""
    if not has_return:
        return _indented(body_lines or ["pass"], depth)
    return _indented(["_ret = False", "for _once in range(1):"], depth) + _indented(body_lines or ["pass"],
                                                                                    depth + 1)


#: A parallel kernel with workgroup buffers runs its workgroups in this many contiguous chunks at
#: most (each chunk allocates the buffers once): enough for any core count's static share.
PARALLEL_CHUNKS = 256


def emit_cpu(program: Program, *, parallel: bool = True, cache: bool = False, vectorize: bool = True) -> str:
    """Python source of a module defining ``vyre_kernel`` for ``program``: ``(*buffers, gx, gy, gz)``,
    or ``(*buffers, n_invocations, chunk)`` for a flat kernel (``VYRE_FLAT``); and, when the
    program is race free, ``vyre_kernel_parallel`` with the same arguments (``VYRE_PARALLEL``).
    ``vectorize=False`` is the safe mode (vyre/driver/cpu_selfcheck.py): every kernel is compiled
    when the module is imported, with numba's loop vectoriser off."""
    program = lower_cpu(program)  # the pass pipeline and the CPU's passes (vyre/codegen/pipeline.py)
    storage = [b for b in program.buffers if not b.is_workgroup]
    shared = [b for b in program.buffers if b.is_workgroup]
    src = {b.name: f"b{i}_{b.name}" for i, b in enumerate(storage)}
    src.update({b.name: f"s{i}_{b.name}" for i, b in enumerate(shared)})
    storage_names = [src[b.name] for b in storage]
    all_names = storage_names + [src[b.name] for b in shared]
    has_atomics = uses(program, (Atomic,))
    steps = lockstep_form(program)  # the lockstep lowering (vyre/codegen/lockstep.py), or None
    par = parallel and not has_atomics
    em = CpuEmitter(program, CpuTarget(), src)
    wg = program.workgroup_size
    njit = f"numba.njit(cache={cache}, error_model='numpy')"
    storage_params = "".join(f"{n}, " for n in storage_names)
    # Two entry points: ``vyre_kernel`` (serial, compiled eagerly) and, when the program is race
    # free, ``vyre_kernel_parallel`` (prange over chunks / workgroups), compiled lazily on the first
    # dispatch large enough to use it: most dispatches of small problems never pay for numba's
    # (slower) parallel compilation.
    serial_decl = f"@numba.njit(_SIG, cache={cache}, error_model='numpy')"
    # safe mode compiles it now, inside the module's loop_vectorizer_off() block
    eager = "" if vectorize else "_SIG, "
    parallel_decl = f"@numba.njit({eager}parallel=True, cache={cache}, error_model='numpy')"
    shared_allocs = [f"{src[b.name]} = np.zeros({b.count}, np.{_np_name(b.element)})" for b in shared]  # lockstep form
    wg_ids = ["_wg0 = uint32(_w % _gx)", "_wg1 = uint32((_w // _gx) % _gy)", "_wg2 = uint32(_w // (_gx * _gy))"]
    out: list[str] = []
    if is_tunable(program):
        # Flat form (vyre.codegen.flat): vyre_kernel(*bufs, n_invocations, chunk). The invocations
        # are a function of their range, ``_vy_run``, that both entries call: numba compiles the
        # work once, and the parallel entry's prange body is one call, which its parfor passes
        # (typing and outlining the body a second time) get through in a fraction of the time.
        em.block(program.entry, {}, 0)
        ids = ["_gid0 = uint32(_g)", "_gid1 = uint32(0)", "_gid2 = uint32(0)"]
        inv = [*ids, *_invocation(em.lines, has_return(program.entry), 0)]
        out = ["", "", f"@{njit}", f"def _vy_run({storage_params}_lo, _hi):",
               "    for _g in range(_lo, _hi):", *_indented(inv, 2),
               "", "", f"_SIG = {_sig(program, ('int64', 'int64'))}", serial_decl,
               f"def vyre_kernel({storage_params}_n, _chunk):",
               f"    _vy_run({storage_params}int64(0), _n)"]
        private = private_atomics(program) if has_atomics and parallel else None
        if private:
            # atomics that are reductions: each parallel chunk gets private copies (cpu_private.py)
            psrc = {**src, **{b: f"_q{i}" for i, b in enumerate(sorted(private))}}
            pem = CpuEmitter(program, CpuTarget(), psrc)
            pem.block(program.entry, {}, 0)
            body = [*ids, *_invocation(pem.lines, has_return(program.entry), 0)]
            private_params = "".join(f"{psrc[b.name]}, " for b in storage)
            out += ["", "", *private_parallel_entry(program, private, src, psrc, storage_params, private_params,
                                                    body, njit, parallel_decl)]
            par = True
        elif par:
            out += ["", "", parallel_decl,
                    f"def vyre_kernel_parallel({storage_params}_n, _chunk):",
                    "    _nc = (_n + _chunk - 1) // _chunk",
                    "    for _c in numba.prange(_nc):",
                    "        _lo = _c * _chunk",
                    f"        _vy_run({storage_params}int64(_lo), int64(min(_lo + _chunk, _n)))"]
        out += ["", "", "VYRE_FLAT = True", f"VYRE_PARALLEL = {par}"]
        return _module(cache, out, vectorize)
    if steps is None:
        # independent invocations: workgroups in order (or in parallel), lanes in order, inline
        lid_em = Emitter(program, CpuTarget(), src)
        _ids(lid_em, 0, wg)
        em.block(program.entry, {}, 0)
        # workgroup buffers: allocated once per call (serial) or per chunk of workgroups (parallel)
        # and zeroed per workgroup, as the interpreter's are (an allocation per workgroup cost
        # about 55 ns: most of a row op's time on short rows)
        hoisted = _workgroup_allocs(src, shared)
        zeroed = [f"{src[b.name]}[:] = 0" for b in shared]
        # a workgroup's statements once its ids _wg0.._wg2 are set
        work = [*zeroed, f"for _l in range({program.workgroup_invocations}):",
                *_indented(lid_em.lines, 1), *_invocation(em.lines, has_return(program.entry), 1)]
        # the same, its ids from the counters _w0, _w1, _w2
        group = ["_wg0 = uint32(_w0)", "_wg1 = uint32(_w1)", "_wg2 = uint32(_w2)", *work]
        sig = _sig(program, ("int64", "int64", "int64"))
        # ``_vy_groups`` runs the workgroups [_lo, _hi) in order, the first one's ids divided out
        # (only past 0) and the rest counted with carries (dividing a flat index, three int64
        # divisions, cost a row op about 6 ns a row). Both entries call it, as ``_vy_run`` above.
        out = ["", "", f"@{njit}", f"def _vy_groups({storage_params}_gx, _gy, _gz, _lo, _hi):",
               *_indented(hoisted, 1),
               "    _w0 = 0", "    _w1 = 0", "    _w2 = 0",
               "    if _lo != 0:",
               "        _w0 = _lo % _gx",
               "        _w1 = (_lo // _gx) % _gy",
               "        _w2 = _lo // (_gx * _gy)",
               "    for _w in range(_lo, _hi):", *_indented(group, 2),
               "        _w0 += 1",
               "        if _w0 == _gx:",
               "            _w0 = 0",
               "            _w1 += 1",
               "            if _w1 == _gy:",
               "                _w1 = 0",
               "                _w2 += 1",
               "", "", f"_SIG = {sig}", serial_decl, f"def vyre_kernel({storage_params}_gx, _gy, _gz):",
               f"    _vy_groups({storage_params}_gx, _gy, _gz, int64(0), _gx * _gy * _gz)"]
        if par:
            # contiguous chunks of workgroups (each allocates the workgroup buffers once)
            out += ["", "", parallel_decl, f"def vyre_kernel_parallel({storage_params}_gx, _gy, _gz):",
                    "    _nw = _gx * _gy * _gz",
                    f"    _nc = min(_nw, {PARALLEL_CHUNKS})",
                    "    for _c in numba.prange(_nc):",
                    f"        _vy_groups({storage_params}_gx, _gy, _gz, int64(_c * _nw // _nc), "
                    "int64((_c + 1) * _nw // _nc))"]
        out += ["", "", "VYRE_FLAT = False", f"VYRE_PARALLEL = {par}"]
        return _module(cache, out, vectorize)
    ls = _Lockstep(program, em, all_names)
    ls.steps(steps.steps, {}, 1)
    body = em.lines
    for k, (seg, seg_returns) in enumerate(ls.segments):
        out.append(f"@{njit}")
        loop_params = "".join(f", {v}" for v in ls.seg_loops[k])
        out.append(f"def _vy_seg{k}(_wg0, _wg1, _wg2, _arrays{loop_params}):")
        out += _unpack(ls.seg_arrays[k], "_arrays")
        ids_em = Emitter(program, CpuTarget(), src)
        _ids(ids_em, 0, wg)
        out.append("    _any = False")
        out.append(f"    for _l in range({program.workgroup_invocations}):")
        out += _indented(ids_em.lines, 2) + _invocation(seg, seg_returns, 2)
        if seg_returns:
            out.append("        _any = _any or _ret")
        out += ["    return _any", "", ""]
    out.append(f"@{njit}")
    out.append("def _vy_workgroup(_w, _gx, _gy, _sbufs):")
    out += _unpack(storage_names, "_sbufs")
    out += _indented([*wg_ids, *shared_allocs], 1)
    out += [f"    {a} = np.zeros({program.workgroup_invocations}, np.{_np_name(t)})" for a, t in ls.lane_arrays]
    out += body
    out += ["", "", f"_SIG = {_sig(program, ('int64', 'int64', 'int64'))}", serial_decl,
            f"def vyre_kernel({storage_params}_gx, _gy, _gz):",
            f"    _sbufs = {_tuple(storage_names)}",
            "    for _w in range(_gx * _gy * _gz):",
            "        _vy_workgroup(_w, _gx, _gy, _sbufs)"]
    if par:
        out += ["", "", parallel_decl,
                f"def vyre_kernel_parallel({storage_params}_gx, _gy, _gz):",
                f"    _sbufs = {_tuple(storage_names)}",
                "    for _w in numba.prange(_gx * _gy * _gz):",
                "        _vy_workgroup(_w, _gx, _gy, _sbufs)"]
    out += ["", "", "VYRE_FLAT = False", f"VYRE_PARALLEL = {par}"]
    return _module(cache, out, vectorize, "\n\n")


def _module(cache: bool, out: list[str], vectorize: bool, sep: str = "\n") -> str:
    body = PRELUDE + CPU_PRELUDE + NARROW_PRELUDE + sep + "\n".join(out) + "\n"
    if not vectorize:  # the source has no multi-line strings: indenting every line is safe
        body = "with _vy_novec():\n" + "".join(f"    {line}" if line.strip() else line
                                                  for line in body.splitlines(keepends=True))
        return "\n".join([*_cpu_header(cache), _NOVEC_IMPORT]) + "\n" + body
    return "\n".join(_cpu_header(cache)) + "\n" + body


_NOVEC_IMPORT = "from vyre.codegen.cpu_runtime import loop_vectorizer_off as _vy_novec"


def _cpu_header(cache: bool) -> list[str]:
    return [
        f"# vyre generated kernel: target cpu, codegen v{CODEGEN_VERSION}. Do not edit.",
        "import math",
        "import numba",
        "import numpy as np",
        "from numba import boolean, int32, int64, uint32, float32, float64",
        "from numba import types as _t",
        OPAQUE_IMPORT,
        "",
        f"_dev = numba.njit(cache={cache}, error_model='numpy', inline='always')",
    ]


#: workgroup buffers of at most this many bytes live in the kernel's stack frame (``_vy_stack``),
#: up to STACK_TOTAL bytes per kernel in declaration order (a thread pool's stacks are small)
STACK_BYTES = 4096
STACK_TOTAL = 16384


def _workgroup_allocs(src: dict[str, str], shared: list[BufferDecl]) -> list[str]:
    """The statements that allocate the workgroup buffers ``shared`` (contents undefined): small
    ones on the stack, where LLVM can keep them in registers (they alias no argument), the rest
    (and any past STACK_TOTAL) on the heap."""
    out, used = [], 0
    for b in shared:
        t, size = _np_name(b.element), b.count * b.element.size_bytes
        if size <= STACK_BYTES and used + size <= STACK_TOTAL:
            used += size
            out.append(f"{src[b.name]} = _vy_stack({b.count}, np.{t})")
        else:
            out.append(f"{src[b.name]} = np.empty({b.count}, np.{t})")
    return out


def _np_name(t: DataType) -> str:
    return "bool_" if t is DataType.BOOL else CTOR[t]
