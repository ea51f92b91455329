"""Integer masks, remainders, quotients and shifts by constants in CPU kernels, kept away from a
miscompile of LLVM's loop vectoriser.

The miscompile (LLVM 20 and later; numba 0.68.1 / llvmlite 0.50 / LLVM 22.1 among them; README
"Known limits"): in a loop over ``g``, an access ``x[g & 3]`` (or ``g % 4``, ``(g << 30) >> 30``,
``g - g / 4 * 4``: anything that scalar evolution reads as the low bits of the induction variable)
next to an access whose index is the induction variable wrapped to 32 bits with the same start and
step (``out[gid]``: vyre computes ``gid`` as ``uint32(g)``) is vectorised as if ``g & 3`` were
``g``: lane ``k`` of a vector starting at ``g0`` reads ``x[(g0 & 3) + k]``, past the end of ``x``;
stores write past the end of their buffer. Scalar evolution describes ``g & 3`` as a 2-bit
recurrence that does not wrap *if* a runtime check says so; the vectoriser drops that check because
it takes the 32-bit recurrence's check to imply it (wrap predicates are compared by start and step,
not by width).

Scalar evolution builds such narrow recurrences only from an operation with a *constant* operand:
``and`` with a run of ones, ``urem``/``udiv`` by a power of two, ``shl``/``ashr``/``lshr`` by a
constant amount (and what instcombine folds into those, e.g. ``x - x / 4 * 4``). So the CPU
emitter hands those constants to LLVM through ``opaque`` (vyre/codegen/cpu_runtime.py), an empty
inline-assembly statement LLVM cannot fold and hoists out of the loop: scalar evolution sees an
unknown operand and the access becomes a gather, which is what it is. Loops still vectorise; a mask
or shift by a register costs what one by an immediate does. Division and remainder by a power of
two become a shift and a mask (by an opaque amount) rather than a division by an opaque divisor;
other constant divisors stay as they are (LLVM multiplies by a reciprocal, which builds no
recurrence). ``tests/test_cpu_index_family.py`` checks the whole index family against the
interpreter on every CPU kernel form, and vyre/codegen/cpu_selfcheck.py checks the running
toolchain once.
"""

from __future__ import annotations

from ..ir import BinOp, BinOpKind, DataType, Expr, LitI32, LitU32, Select, Var
from .emit import Binding, Emitter
from .ranges import RangeCtx
from .ops import BINOP_EMIT

#: Helpers for signed division and remainder by a power of two (``docs/semantics.md``: truncating,
#: the remainder takes the dividend's sign), with the shift amount or mask passed in opaque.
NARROW_PRELUDE = '''
@_dev
def _vy_sdiv_p2(a, k, negative_divisor):
    x = int64(a)
    q = abs(x) >> k
    if (x < 0) != negative_divisor:
        q = -q
    return int32(q)


@_dev
def _vy_smod_p2(a, mask):
    x = int64(a)
    r = abs(x) & mask
    if x < 0:
        r = -r
    return int32(r)
'''

#: The import every generated CPU module carries.
OPAQUE_IMPORT = ("from vyre.codegen.cpu_runtime import both as _vy_and, either as _vy_or, fmuladd as _vy_fma, "
                 "opaque as _vy_k, select as _vy_sel, stack_array as _vy_stack")


def opaque(src: str) -> str:
    return f"_vy_k({src})"


def _pow2(c: int) -> int | None:
    """log2 of ``|c|`` when it is a power of two."""
    m = abs(c)
    return m.bit_length() - 1 if m and m & (m - 1) == 0 else None


class CpuEmitter(Emitter):
    """The shared emitter with the CPU's handling of constant masks, shifts and divisors, and the
    value-range prover (vyre/codegen/ranges.py) deciding which accesses need no guard."""

    wide_indices = True  # proven indices in int64 arithmetic (Emitter.proven_index)

    def fma(self, a: str, b: str, c: str) -> str:
        return f"_vy_fma({a}, {b}, {c})"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"_vy_sel({cond}, {a}, {b})"

    def assigned(self, name: str, value: Expr, scope: dict[str, Binding]) -> str:
        """A running minimum or maximum over selected values (``best = min(best, select(c, i,
        NONE))``: argmax's lowest index) keeps Python's conditional for the select. As an LLVM
        select the update is a min-reduction LLVM vectorises, and argmax's 16-slot merge loops ran
        1.45x slower so over rows of 64 (BENCHMARKS.md, "Compile time"). Everywhere else a select
        is one LLVM select (cpu_runtime.select)."""
        match value:
            case BinOp(BinOpKind.MIN | BinOpKind.MAX, Var(v), Select(c, a, b)) if v == name:
                picked = super().select(self.expr(c, scope), self.expr(a, scope), self.expr(b, scope))
                return BINOP_EMIT[value.op](self.type_of(value.left, scope), scope[name].src, picked)
        return self.expr(value, scope)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ranges = RangeCtx(self.program)

    def constant_int(self, e: Expr, scope: dict[str, Binding]) -> int | None:
        """The value of ``e`` when it is an integer literal or a local bound to one."""
        if isinstance(e, Var):
            e = self.consts.get(scope[e.name].src, e)  # never a Var: const_let resolves copies
        return e.value if isinstance(e, (LitU32, LitI32)) else None

    def binop(self, op: BinOpKind, left: Expr, right: Expr, scope: dict[str, Binding]) -> str:
        if op is BinOpKind.AND or op is BinOpKind.OR:  # no short-circuit: no blocks (cpu_runtime.select)
            fn = "_vy_and" if op is BinOpKind.AND else "_vy_or"
            return f"{fn}({self.expr(left, scope)}, {self.expr(right, scope)})"
        t = self.type_of(left, scope)
        if not t.is_int or op not in (BinOpKind.BIT_AND, BinOpKind.SHL, BinOpKind.SHR, BinOpKind.DIV,
                                      BinOpKind.MOD):
            return super().binop(op, left, right, scope)
        a, b = self.expr(left, scope), self.expr(right, scope)
        if op is BinOpKind.BIT_AND:
            a = opaque(a) if self.is_const(left, scope) else a
            b = opaque(b) if self.is_const(right, scope) else b
            return BINOP_EMIT[op](t, a, b)
        if not self.is_const(right, scope):
            return BINOP_EMIT[op](t, a, b)
        if op in (BinOpKind.SHL, BinOpKind.SHR):
            return BINOP_EMIT[op](t, a, opaque(b))
        c = self.constant_int(right, scope)
        k = None if c is None else _pow2(c)
        if c is None:  # a constant we cannot name here: divide by it at run time
            return BINOP_EMIT[op](t, a, opaque(b))
        if k is None:
            return BINOP_EMIT[op](t, a, b)  # LLVM multiplies by a reciprocal: no recurrence
        signed = t is DataType.I32
        if op is BinOpKind.MOD:
            mask = opaque(f"int64({abs(c) - 1})")
            return f"_vy_smod_p2({a}, {mask})" if signed else f"uint32(int64({a}) & {mask})"
        if signed:
            return f"_vy_sdiv_p2({a}, {opaque(f'int64({k})')}, {c < 0})"
        return f"uint32(int64({a}) >> {opaque(f'int64({k})')})"


def id_lines(wg: tuple[int, int, int]) -> list[str]:
    """Local ids and the lane of invocation ``_l`` of a workgroup (no-op divisions left out, the
    others by opaque powers of two)."""
    wx, wy, wz = wg
    total = wx * wy * wz

    def div(x: str, d: int) -> str:
        k = _pow2(d)
        return f"({x} >> {opaque(f'int64({k})')})" if k is not None else f"({x} // {d})"

    def mod(x: str, d: int) -> str:
        k = _pow2(d)
        return f"({x} & {opaque(f'int64({d - 1})')})" if k is not None else f"({x} % {d})"

    lid0 = "_l" if wx == total else mod("_l", wx)
    lid1 = "0" if wy == 1 else (div("_l", wx) if wx * wy == total else mod(div("_l", wx), wy))
    lid2 = "0" if wz == 1 else div("_l", wx * wy)
    lane = "_l" if total <= 32 else mod("_l", 32)
    lines = [f"_lid0 = uint32({lid0})", f"_lid1 = uint32({lid1})", f"_lid2 = uint32({lid2})"]
    lines += [f"_gid{a} = uint32(_wg{a} * uint32({wg[a]}) + _lid{a})" for a in range(3)]
    return [*lines, f"_lane = uint32({lane})"]
