"""Per-op emission rules: how each op becomes numba source, keyed by the op enums.

Every rule takes the operand type and the operand source strings, and returns an expression that
evaluates to a value of the result type with docs/semantics.md's meaning. Integer results are wrapped
back to 32 bits with ``uint32()``/``int32()`` (numba widens 32-bit arithmetic to 64 bits). Targets
override a few entries (``Target.binop_overrides``) where numba's CPU and CUDA libraries differ.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import BinOpKind, DataType, UnOpKind

BinRule = Callable[[DataType, str, str], str]
UnRule = Callable[[DataType, str], str]

CTOR = {DataType.BOOL: "boolean", DataType.I32: "int32", DataType.U32: "uint32",
        DataType.F32: "float32", DataType.F64: "float64"}


def wrap(t: DataType, src: str) -> str:
    """Cast ``src`` to ``t`` (truncating for ints, rounding for floats)."""
    return f"{CTOR[t]}({src})"


def _arith(sym: str) -> BinRule:
    def rule(t: DataType, a: str, b: str) -> str:
        return wrap(t, f"{a} {sym} {b}") if t.is_int else f"({a} {sym} {b})"
    return rule


def _cmp(sym: str) -> BinRule:
    return lambda t, a, b: f"({a} {sym} {b})"


def _div(t: DataType, a: str, b: str) -> str:
    if t is DataType.U32:
        return f"_vy_udiv({a}, {b})"
    if t is DataType.I32:
        return f"_vy_sdiv({a}, {b})"
    return f"({a} / {b})"


def _mod(t: DataType, a: str, b: str) -> str:
    if t is DataType.U32:
        return f"_vy_umod({a}, {b})"
    if t is DataType.I32:
        return f"_vy_smod({a}, {b})"
    return f"_vy_fmod({a}, {b})"  # target-specific helper


def _bit(sym: str) -> BinRule:
    return lambda t, a, b: wrap(t, f"int64({a}) {sym} int64({b})")


def _shl(t: DataType, a: str, b: str) -> str:
    return wrap(t, f"int64({a}) << (int64({b}) & 31)")


def _shr(t: DataType, a: str, b: str) -> str:
    # int64 >> is arithmetic: correct for i32; a u32 widened to int64 is non-negative: logical.
    return wrap(t, f"int64({a}) >> (int64({b}) & 31)")


def _minmax(fn: str, ffn: str) -> BinRule:
    def rule(t: DataType, a: str, b: str) -> str:
        return f"{fn}({a}, {b})" if t.is_int else f"_vy_{ffn}({a}, {b})"
    return rule


def _absdiff(t: DataType, a: str, b: str) -> str:
    if t.is_int:
        return f"uint32(abs(int64({a}) - int64({b})))"
    return f"abs({a} - {b})"


def _fixed(t: DataType, a: str, b: str) -> str:
    return f"_vy_fmul_u32({a}, {b})" if t is DataType.U32 else f"_vy_fmul_i32({a}, {b})"


BINOP_EMIT: dict[BinOpKind, BinRule] = {
    BinOpKind.ADD: _arith("+"),
    BinOpKind.SUB: _arith("-"),
    BinOpKind.MUL: _arith("*"),
    BinOpKind.DIV: _div,
    BinOpKind.MOD: _mod,
    BinOpKind.BIT_AND: _bit("&"),
    BinOpKind.BIT_OR: _bit("|"),
    BinOpKind.BIT_XOR: _bit("^"),
    BinOpKind.SHL: _shl,
    BinOpKind.SHR: _shr,
    BinOpKind.EQ: _cmp("=="),
    BinOpKind.NE: _cmp("!="),
    BinOpKind.LT: _cmp("<"),
    BinOpKind.GT: _cmp(">"),
    BinOpKind.LE: _cmp("<="),
    BinOpKind.GE: _cmp(">="),
    BinOpKind.AND: lambda t, a, b: f"({a} and {b})",
    BinOpKind.OR: lambda t, a, b: f"({a} or {b})",
    BinOpKind.MIN: _minmax("min", "fmin"),
    BinOpKind.MAX: _minmax("max", "fmax"),
    BinOpKind.ABS_DIFF: _absdiff,
    BinOpKind.FIXED_MUL_Q16: _fixed,
    BinOpKind.POW: lambda t, a, b: f"math.pow({a}, {b})",  # numba: pow/powf, libdevice on CUDA
}


def _math(fn: str) -> UnRule:
    return lambda t, a: f"math.{fn}({a})"


#: Functions whose f32 form goes through a helper ``_vy_f32_<fn>`` that every target defines: the
#: CPU's are branch-free (LLVM vectorises them), CUDA's are libdevice's ``math.<fn>``.
F32_HELPERS = ("exp", "exp2", "log", "log2", "tanh", "sinh", "cosh", "sin", "cos", "tan")


def _f32_helper(fn: str) -> UnRule:
    """``math.<fn>``, except on f32, where the target's ``_vy_f32_<fn>`` helper runs."""
    assert fn in F32_HELPERS
    return lambda t, a: f"_vy_f32_{fn}({a})" if t is DataType.F32 else f"math.{fn}({a})"


def _via_f64(helper: str) -> UnRule:
    # helpers compute in float64 (exact for these ops) and the result is narrowed back
    return lambda t, a: wrap(t, f"{helper}({a})")


def _one(t: DataType) -> str:
    return f"{CTOR[t]}(1.0)"


def _neg(t: DataType, a: str) -> str:
    return wrap(t, f"0 - int64({a})") if t.is_int else f"(-{a})"


def _abs(t: DataType, a: str) -> str:
    if t is DataType.U32:
        return a
    if t is DataType.I32:
        return f"_vy_iabs({a})"  # each target defines it (vyre/codegen/cuda_runtime.py says why)
    return f"abs({a})"


def _sign(t: DataType, a: str) -> str:
    return f"_vy_isign({a})" if t is DataType.I32 else wrap(t, f"_vy_fsign({a})")


UNOP_EMIT: dict[UnOpKind, UnRule] = {
    UnOpKind.NEGATE: _neg,
    UnOpKind.BIT_NOT: lambda t, a: wrap(t, f"~int64({a})"),
    UnOpKind.LOGICAL_NOT: lambda t, a: f"(not {a})",
    UnOpKind.ABS: _abs,
    UnOpKind.SQRT: _math("sqrt"),
    UnOpKind.INVERSE_SQRT: lambda t, a: f"({_one(t)} / math.sqrt({a}))",
    UnOpKind.EXP: _f32_helper("exp"),
    UnOpKind.EXP2: _f32_helper("exp2"),
    UnOpKind.LOG: _f32_helper("log"),
    UnOpKind.LOG2: _f32_helper("log2"),
    UnOpKind.SIN: _f32_helper("sin"),
    UnOpKind.COS: _f32_helper("cos"),
    UnOpKind.TAN: _f32_helper("tan"),
    UnOpKind.ASIN: _math("asin"),
    UnOpKind.ACOS: _math("acos"),
    UnOpKind.ATAN: _math("atan"),
    UnOpKind.SINH: _f32_helper("sinh"),
    UnOpKind.COSH: _f32_helper("cosh"),
    UnOpKind.TANH: _f32_helper("tanh"),
    UnOpKind.FLOOR: _via_f64("_vy_floor"),
    UnOpKind.CEIL: _via_f64("_vy_ceil"),
    UnOpKind.ROUND: _via_f64("_vy_round"),
    UnOpKind.TRUNC: _via_f64("_vy_trunc"),
    UnOpKind.SIGN: _sign,
    UnOpKind.RECIPROCAL: lambda t, a: f"({_one(t)} / {a})",
    UnOpKind.POPCOUNT: lambda t, a: f"_vy_popc({a})",
    UnOpKind.CLZ: lambda t, a: f"_vy_clz({a})",
    UnOpKind.CTZ: lambda t, a: f"_vy_ctz({a})",
    UnOpKind.IS_NAN: _math("isnan"),
    UnOpKind.IS_INF: _math("isinf"),
    UnOpKind.IS_FINITE: _math("isfinite"),
    UnOpKind.STOP_GRADIENT: lambda t, a: f"({a})",  # the identity: it only matters to autodiff
}


def emit_cast(target: DataType, source: DataType, a: str) -> str:
    """docs/semantics.md "Casts"."""
    if target is source:
        return a
    if target is DataType.BOOL:
        return f"({a} != 0)"
    if source is DataType.BOOL:
        return f"({CTOR[target]}(1) if {a} else {CTOR[target]}(0))"
    if target.is_int and source.is_float:
        return f"_vy_f2u({a})" if target is DataType.U32 else f"_vy_f2i({a})"
    return wrap(target, a)
