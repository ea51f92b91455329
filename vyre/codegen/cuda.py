"""CUDA target: a ``@cuda.jit`` kernel per program."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..errors import CodegenError
from ..ir import (
    AtomicOp, BinOpKind, BufferDecl, DataType, Expr, Program, SubgroupBallot, SubgroupReduce,
    SubgroupShuffle,
)
from .emit import AtomicSite, CODEGEN_VERSION, Binding, Emitter, SubgroupCode
from .flat import is_tunable
from .pipeline import interleaved_form, lower
from .cuda_interleave import InterleavedPrinter
from .ops import BINOP_EMIT, CTOR, F32_HELPERS
from .prelude import PRELUDE

_MAX_ARGS = 24

_ATOMIC_FN = {
    AtomicOp.ADD: "add", AtomicOp.MIN: "min", AtomicOp.MAX: "max", AtomicOp.AND: "and_",
    AtomicOp.OR: "or_", AtomicOp.XOR: "xor", AtomicOp.EXCHANGE: "exch",
}
_AXES = "xyz"

# A float atomic add whose old value nobody reads (autodiff's scatters into gradients): when the
# whole warp is converged and adds to one address, as every row of a matrix-vector product does
# to grad_v[j], the 32 values are summed by shuffles and one lane issues the atomic, instead of 32
# atomics serialised on one address. The order of a float atomic sum is unspecified either way.
# An integer add of a constant whose old value nobody reads (a histogram's count) groups the lanes
# adding to one index with match_any_sync; the lowest of each group adds the constant times the
# group's size.
# ``site`` numbers the call sites of a kernel: lanes converged inside a shared (not inlined) copy
# of the helper but come from different call sites, hence maybe different buffers, never combine.
WARP_ADD = """


def _vy_warp_add(buf, idx, val, zero, site):
    mask = cuda.activemask()
    if mask == 0xFFFFFFFF:
        key = int64(idx) | (site << 32)
        if cuda.all_sync(mask, cuda.shfl_sync(mask, key, 0) == key):
            v = val
            v += cuda.shfl_down_sync(mask, v, 16)
            v += cuda.shfl_down_sync(mask, v, 8)
            v += cuda.shfl_down_sync(mask, v, 4)
            v += cuda.shfl_down_sync(mask, v, 2)
            v += cuda.shfl_down_sync(mask, v, 1)
            if cuda.laneid == 0 and idx < buf.shape[0]:
                cuda.atomic.add(buf, idx, v)
            return zero
    if idx < buf.shape[0]:
        cuda.atomic.add(buf, idx, val)
    return zero


_vy_warp_add = _dev(_vy_warp_add)


def _vy_warp_count(buf, idx, val, zero, site):
    mask = cuda.activemask()
    key = int64(idx) | (site << 32)
    peers = cuda.match_any_sync(mask, key)
    if (peers & cuda.lanemask_lt()) == 0 and idx < buf.shape[0]:
        cuda.atomic.add(buf, idx, val * cuda.popc(peers))  # wraps to the element type, as n adds would
    return zero


_vy_warp_count = _dev(_vy_warp_count)"""
FULL_MASK = "0xFFFFFFFF"
#: Grouped counts only pay where lanes of a warp often share a bin. Measured on an H200 (2^26 random
#: keys): 16 bins 12.5 -> 3.1 ms, 256 bins 8.3 -> 7.6 ms, but 65 536 bins 0.81 -> 1.10 ms. So only
#: buffers of a static count up to this many elements get them.
WARP_COUNT_MAX_BINS = 1024


def aggregation(site: AtomicSite) -> Literal["add", "count"] | None:
    """Whether an atomic becomes a warp-aggregated add (``"add"``: ``_vy_warp_add``), a grouped
    count (``"count"``: ``_vy_warp_count``) or stays a plain atomic (None); both CUDA printers ask.
    Only adds whose old value nobody reads: a gradient scatter (whole warps often add to one
    address), or a count into few bins (lanes adding a constant to one bin add once for all):
    docs/codegen.md. Not where the lanes add to different elements (gid-indexed): the check would
    be pure latency."""
    if site.op is not AtomicOp.ADD or site.result_used or site.lanes_distinct:
        return None
    if site.element.is_float:
        return "add"
    if site.constant_value and 0 < site.count <= WARP_COUNT_MAX_BINS:
        return "count"
    return None


@dataclass
class CudaTarget:
    """``emulate_subgroups``: numba's simulator has no warp intrinsics, so subgroup operations go
    through a workgroup-memory scratch array between two barriers instead (valid because they only
    occur at uniform points, where every live invocation of the workgroup arrives)."""

    name: str = "cuda"
    flag_returns: bool = False
    emulate_subgroups: bool = False
    scratch_types: set[DataType] = field(default_factory=set)
    # the invocation being emitted in an interleaved body (vyre.codegen.interleave), else None
    lane_k: int | None = None
    warp_add_sites: int = 0  # call sites of _vy_warp_add / _vy_warp_count emitted so far

    def id_src(self, kind: str, axis: int) -> str:
        if kind == "lane":
            return "_lane"
        if kind == "gid" and axis == 0 and self.lane_k is not None:
            return f"_gid0_{self.lane_k}"
        return f"_{kind}{axis}"

    def atomic(self, site: AtomicSite, buf: str, idx: str, val: str, expected: str | None, zero: str) -> str:
        op = site.op
        kind = None if self.emulate_subgroups else aggregation(site)
        if kind is not None:
            self.warp_add_sites += 1
            return f"_vy_warp_{kind}({buf}, {idx}, {val}, {zero}, int64({self.warp_add_sites}))"
        if op is AtomicOp.COMPARE_EXCHANGE:
            call = f"cuda.atomic.cas({buf}, {idx}, {expected}, {val})"
        else:
            call = f"cuda.atomic.{_ATOMIC_FN[op]}({buf}, {idx}, {val})"
        return f"({call} if {idx} < {buf}.shape[0] else {zero})"

    def barrier(self) -> list[str]:
        return ["cuda.syncthreads()"]

    def ret(self) -> list[str]:
        return ["_ret = True", "break"] if self.flag_returns else ["return"]

    def subgroup(self, e: Expr, operand: Callable[[Expr], str], operand_type: DataType,
                 fresh: Callable[[str], str]) -> SubgroupCode:
        if self.emulate_subgroups:
            return self._emulated(e, operand, operand_type, fresh)
        match e:
            case SubgroupBallot(c):
                return SubgroupCode((), f"uint32(cuda.ballot_sync({FULL_MASK}, {operand(c)}))")
            case SubgroupShuffle(v, lane):
                src = f"int32({operand(lane)} & uint32(31))"
                if operand_type is DataType.BOOL:
                    return SubgroupCode((), f"cuda.shfl_sync({FULL_MASK}, int32(1) if {operand(v)} else int32(0), "
                                            f"{src}) != 0")
                return SubgroupCode((), _shfl(operand_type, operand(v), src))
            case SubgroupReduce(op, v):
                acc = fresh("_sg")
                lines = [f"{acc} = {operand(v)}"]
                for off in (16, 8, 4, 2, 1):
                    other = _shfl(operand_type, acc, f"int32(_lane ^ uint32({off}))")
                    lines.append(f"{acc} = {_combine(op, operand_type, acc, other)}")
                return SubgroupCode(tuple(lines), acc)
        raise CodegenError(f"not a subgroup op: {e!r}")


    def _emulated(self, e: Expr, operand: Callable[[Expr], str], operand_type: DataType,
                  fresh: Callable[[str], str]) -> SubgroupCode:
        st = DataType.U32 if operand_type is DataType.BOOL else operand_type
        self.scratch_types.add(st)
        scratch = f"_sgs_{st.short}"
        acc = fresh("_sg")
        match e:
            case SubgroupBallot(c):
                lines = [f"{scratch}[_lin] = uint32(1) if {operand(c)} else uint32(0)", "cuda.syncthreads()",
                         f"{acc} = int64(0)", "for _k in range(32):",
                         f"    if {scratch}[_lin - _lane + _k] != 0:", f"        {acc} |= int64(1) << _k",
                         f"{acc} = uint32({acc})"]
            case SubgroupShuffle(v, lane):
                val = f"(uint32(1) if {operand(v)} else uint32(0))" if operand_type is DataType.BOOL else operand(v)
                lines = [f"{scratch}[_lin] = {val}", "cuda.syncthreads()",
                         f"{acc} = {scratch}[_lin - _lane + ({operand(lane)} & uint32(31))]"]
                if operand_type is DataType.BOOL:
                    lines.append(f"{acc} = {acc} != 0")
            case SubgroupReduce(op, v):
                lines = [f"{scratch}[_lin] = {operand(v)}", "cuda.syncthreads()",
                         f"{acc} = {scratch}[_lin - _lane]", "for _k in range(1, 32):",
                         f"    {acc} = {_combine(op, operand_type, acc, f'{scratch}[_lin - _lane + _k]')}"]
            case _:
                raise CodegenError(f"not a subgroup op: {e!r}")
        return SubgroupCode((*lines, "cuda.syncthreads()"), acc)


# The simulator runs kernels as Python, where math.log(-1) raises; the GPU returns NaN. Route the
# math calls through numpy, which gives the IEEE results, and keep its warnings quiet.
_SIM_MATH = [
    "import types",
    "import math as _m",
    "import numpy as _np",
    "_np.seterr(all='ignore')",
    "def _sim_pow(a, b):",  # C pow: numpy's float32 power gives NaN for pow(-inf, 0.5)
    "    try:",
    "        return type(a)(_m.pow(a, b))",
    "    except (ValueError, OverflowError, ZeroDivisionError):",
    "        return _np.power(a, b)",
    "math = types.SimpleNamespace(",
    "    sqrt=_np.sqrt, exp=_np.exp, exp2=_np.exp2, log=_np.log, log2=_np.log2, sin=_np.sin, cos=_np.cos,",
    "    tan=_np.tan, asin=_np.arcsin, acos=_np.arccos, atan=_np.arctan, sinh=_np.sinh, cosh=_np.cosh,",
    "    tanh=_np.tanh, isnan=_np.isnan, isinf=_np.isinf, isfinite=_np.isfinite, copysign=_np.copysign,",
    "    fmod=_np.fmod, pow=_sim_pow, nan=_np.nan, inf=_np.inf,",
    ")",
]


def _shfl(t: DataType, value: str, lane: str) -> str:
    # numba's shfl_sync takes signed ints and floats only: move u32 through its i32 bit pattern
    if t is DataType.U32:
        return f"uint32(cuda.shfl_sync({FULL_MASK}, int32({value}), {lane}))"
    return f"cuda.shfl_sync({FULL_MASK}, {value}, {lane})"


def _combine(op: BinOpKind, t: DataType, a: str, b: str) -> str:
    return BINOP_EMIT[op](t, a, b)


def _sig(program: Program) -> str:
    args = [f"{CTOR[b.element] if b.element is not DataType.BOOL else 'boolean'}[::1]"
            for b in program.buffers if not b.is_workgroup]
    return "void(" + ", ".join(args) + ")"


def emit_cuda(program: Program, *, cache: bool = False, simulator: bool = False) -> str:
    """Python source of a module defining ``vyre_kernel``, a ``@cuda.jit`` kernel for ``program``,
    ``vyre_kernel_py`` (the undecorated function, for ``cuda.compile_ptx``) and ``VYRE_SIGNATURE``.

    The program must be valid. Launch it with blocks = grid and threads = program.workgroup_size,
    passing one 1-D contiguous array per storage buffer in declaration order."""
    program = lower(program)  # the pass pipeline (vyre/codegen/pipeline.py)
    storage = [b for b in program.buffers if not b.is_workgroup]
    shared = [b for b in program.buffers if b.is_workgroup]
    buffer_src = {b.name: f"b{i}_{b.name}" for i, b in enumerate(storage)}
    buffer_src.update({b.name: f"s{i}_{b.name}" for i, b in enumerate(shared)})
    target = CudaTarget(emulate_subgroups=simulator)
    em = Emitter(program, target, buffer_src)
    header = [
        f"# vyre generated kernel: target cuda{' (simulator)' if simulator else ''}, codegen v{CODEGEN_VERSION}."
        " Do not edit.",
        *(_SIM_MATH if simulator else ["import math"]),
        "from numba import cuda, boolean, int32, int64, uint32, float32, float64",
        "",
        "_dev = cuda.jit(device=True)",
        "",
        "",
        "def _vy_fmod(a, b):",
        "    return math.fmod(a, b)",
        "",
        "",
        "_vy_fmod = _dev(_vy_fmod)",
        "",
        "",
        *(["def _vy_iabs(a):", "    return int32(abs(int64(a)))"] if simulator else [
            "from vyre.codegen.cuda_runtime import opaque as _vy_k", "",
            "",
            "def _vy_iabs(a):",
            "    return int32(_vy_k(abs(int64(a))))  # not abs.s32: vyre/codegen/cuda_runtime.py"]),
        "",
        "",
        "_vy_iabs = _dev(_vy_iabs)",
        *(line for fn in F32_HELPERS for line in (
            "", "", f"def _vy_f32_{fn}(a):", f"    return math.{fn}(a)", "", "", f"_vy_f32_{fn} = _dev(_vy_f32_{fn})")),
    ]
    params = ", ".join(buffer_src[b.name] for b in storage)
    if is_tunable(program):
        return _emit_flat(program, em, target, storage, buffer_src, header, cache)
    wx, wy, _ = program.workgroup_size
    lines = em.lines
    em.emit(0, "def vyre_kernel_py(" + params + "):")
    for a in range(3):
        em.emit(1, f"_lid{a} = uint32(cuda.threadIdx.{_AXES[a]})")
        em.emit(1, f"_wg{a} = uint32(cuda.blockIdx.{_AXES[a]})")
        em.emit(1, f"_gid{a} = uint32(_wg{a} * uint32({program.workgroup_size[a]}) + _lid{a})")
    em.emit(1, f"_lane = uint32((_lid0 + _lid1 * uint32({wx}) + _lid2 * uint32({wx * wy})) & uint32(31))")
    em.emit(1, f"_lin = uint32(_lid0 + _lid1 * uint32({wx}) + _lid2 * uint32({wx * wy}))")
    for b in shared:
        em.emit(1, f"{buffer_src[b.name]} = cuda.shared.array({b.count}, {CTOR[b.element]})")
    decl_at = len(em.lines)
    scope: dict[str, Binding] = {}
    em.block(program.entry, scope, 1)
    wg = program.workgroup_invocations
    for st in sorted(target.scratch_types):
        em.lines.insert(decl_at, f"    _sgs_{st.short} = cuda.shared.array({wg}, {CTOR[st]})")
    footer = [
        "",
        "",
        "VYRE_FLAT = False",
        f"VYRE_SIGNATURE = {_sig(program)!r}",
        f"vyre_kernel = cuda.jit(cache={cache})(vyre_kernel_py)",
    ]
    return _module(header, target, lines + footer)


def _module(header: list[str], target: CudaTarget, body: list[str]) -> str:
    helpers = WARP_ADD if target.warp_add_sites else ""
    return "\n".join(header) + helpers + "\n" + PRELUDE + "\n\n" + "\n".join(body) + "\n"


def _emit_flat(program: Program, em: Emitter, target: CudaTarget, storage: list[BufferDecl],
               buffer_src: dict[str, str], header: list[str], cache: bool) -> str:
    """Flat form (see vyre.codegen.flat). Launch: vyre_kernel[blocks, threads](*bufs, n, ipt); thread
    t runs invocations t + j * stride for j < ipt, INTERLEAVE of them at a time while all exist
    (vyre.codegen.interleave); the rest, and groups whose invocations disagree, one by one."""
    params = ", ".join(buffer_src[b.name] for b in storage)
    packed = len(storage) > _MAX_ARGS  # see vyre.codegen.cpu: >30-argument calls break numba
    inv_args = "_bufs" if packed else params
    sep = ", " if inv_args else ""

    def head(signature: str) -> None:
        em.emit(0, f"def {signature}:")
        if packed:
            em.emit(1, f"{params}, = _bufs")
        em.emit(1, "_gid1 = uint32(0)")
        em.emit(1, "_gid2 = uint32(0)")

    head(f"_vy_invocation_py(_gid0{sep}{inv_args})")
    em.block(program.entry, {}, 1)
    em.emit(0, "")
    em.emit(0, "")
    em.emit(0, "_vy_invocation = _dev(_vy_invocation_py)")
    em.emit(0, "")
    em.emit(0, "")
    plan = interleaved_form(program)  # the interleave lowering (vyre/codegen/interleave.py), or None
    k = 1 if plan is None else plan.k
    if plan is not None:
        head(f"_vy_interleaved_py(_g, _stride{sep}{inv_args})")
        for j in range(k):
            em.emit(1, f"_gid0_{j} = uint32(_g + {j} * _stride)")
        solo = f"_vy_invocation(uint32(_g + _q * _stride){sep}{inv_args})"
        InterleavedPrinter(em, target, plan, solo).function_body(1)
        em.emit(0, "")
        em.emit(0, "")
        em.emit(0, "_vy_interleaved = _dev(_vy_interleaved_py)")
        em.emit(0, "")
        em.emit(0, "")
    em.emit(0, f"def vyre_kernel_py({params}{', ' if params else ''}_n, _ipt):")
    if packed:
        em.emit(1, f"_bufs = ({params},)")
    em.emit(1, "_t = int64(cuda.blockIdx.x) * int64(cuda.blockDim.x) + int64(cuda.threadIdx.x)")
    em.emit(1, "_stride = int64(cuda.gridDim.x) * int64(cuda.blockDim.x)")
    em.emit(1, "_j = int64(0)")
    if k > 1:
        em.emit(1, f"while _j + {k} <= _ipt and _t + (_j + {k - 1}) * _stride < _n:")
        em.emit(2, f"_vy_interleaved(_t + _j * _stride, _stride{sep}{inv_args})")
        em.emit(2, f"_j += {k}")
    em.emit(1, "while _j < _ipt:")
    em.emit(2, "_g = _t + _j * _stride")
    em.emit(2, "if _g < _n:")
    em.emit(3, f"_vy_invocation(uint32(_g){sep}{inv_args})")
    em.emit(2, "_j += 1")
    sig = _sig(program)[:-1] + (", " if storage else "") + "int64, int64)"
    footer = ["", "", "VYRE_FLAT = True", f"VYRE_SIGNATURE = {sig!r}",
              f"vyre_kernel = cuda.jit(cache={cache})(vyre_kernel_py)"]
    return _module(header, target, em.lines + footer)

