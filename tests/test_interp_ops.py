"""Per-op semantics of the reference interpreter, against values written out by hand.

Every (op, operand type) pair the type rules accept has rows here (checked by
``test_every_accepted_pair_has_cases``); each row is (op, type, operands..., expected).
Expected floats are compared bit for bit (NaN matches any NaN, -0.0 differs from 0.0).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre.errors import InterpError
from vyre.interp import (
    ATOMIC_EVAL, BINOP_EVAL, CAST_EVAL, UNOP_EVAL, eval_atomic, eval_binop, eval_cast, eval_unop, run,
)
from vyre.ir import (
    ATOMIC_RULES, BINOP_RULES, UNOP_RULES, AtomicOp, BinOp, BinOpKind, Cast, DataType, LitU32, Node,
    Program, UnOp, UnOpKind, let, output, read, store, var,
)

BOOL, I32, U32, F32, F64 = DataType.BOOL, DataType.I32, DataType.U32, DataType.F32, DataType.F64
B, U = BinOpKind, UnOpKind
IMIN, IMAX, M = -(2**31), 2**31 - 1, 0xFFFFFFFF
INF, NAN = math.inf, math.nan
F32_MAX = 3.4028234663852886e38
F32_TINY = 2.0**-149  # smallest f32 subnormal
F32_MIN_NORMAL = 2.0**-126
F64_TINY = 5e-324


def same(t: DataType, got: Any, want: Any) -> bool:
    """Equality by representation: exact ints/bools, float bit patterns (any NaN equals NaN)."""
    if t is F32:
        if not isinstance(got, np.float32):
            return False
        w = np.float32(want)
        return bool(np.isnan(got) and np.isnan(w)) or struct.pack("<f", got) == struct.pack("<f", w)
    if t is F64:
        if type(got) is not float:
            return False
        return (math.isnan(got) and math.isnan(want)) or struct.pack("<d", got) == struct.pack("<d", want)
    return type(got) is type(want) and got == want


# --- binary ops ------------------------------------------------------------------------------

BIN_CASES: list[tuple[BinOpKind, DataType, Any, Any, Any]] = [
    # u32: wrapping, division by zero, shifts mod 32, unsigned order
    (B.ADD, U32, 1, 2, 3), (B.ADD, U32, M, 1, 0), (B.ADD, U32, 0x80000000, 0x80000000, 0),
    (B.SUB, U32, 0, 1, M), (B.SUB, U32, 5, 3, 2),
    (B.MUL, U32, 0x10000, 0x10000, 0), (B.MUL, U32, M, M, 1), (B.MUL, U32, 3, 7, 21),
    (B.DIV, U32, 7, 2, 3), (B.DIV, U32, 7, 0, M), (B.DIV, U32, 0, 0, M), (B.DIV, U32, M, 1, M),
    (B.DIV, U32, M, 0x80000000, 1),
    (B.MOD, U32, 7, 3, 1), (B.MOD, U32, 7, 0, 0), (B.MOD, U32, M, 10, 5),
    (B.BIT_AND, U32, 0xF0F0, 0xFF00, 0xF000), (B.BIT_OR, U32, 0xF0, 0x0F, 0xFF),
    (B.BIT_XOR, U32, M, 0x0F0F0F0F, 0xF0F0F0F0),
    (B.SHL, U32, 1, 31, 0x80000000), (B.SHL, U32, 1, 32, 1), (B.SHL, U32, 1, 33, 2),
    (B.SHL, U32, M, 4, 0xFFFFFFF0), (B.SHL, U32, 3, 31, 0x80000000),
    (B.SHR, U32, 0x80000000, 31, 1), (B.SHR, U32, 0x80000000, 32, 0x80000000),
    (B.SHR, U32, M, 28, 0xF), (B.SHR, U32, 16, 36, 1),
    (B.EQ, U32, M, M, True), (B.NE, U32, 0, M, True),
    (B.LT, U32, M, 0, False), (B.LT, U32, 0, M, True), (B.GT, U32, 0x80000000, 1, True),
    (B.LE, U32, 3, 3, True), (B.GE, U32, 2, 3, False),
    (B.MIN, U32, M, 0, 0), (B.MAX, U32, M, 0, M),
    (B.ABS_DIFF, U32, 0, M, M), (B.ABS_DIFF, U32, 5, 3, 2), (B.ABS_DIFF, U32, 3, 5, 2),
    (B.FIXED_MUL_Q16, U32, 0x10000, 0x10000, 0x10000),  # 1.0 * 1.0
    (B.FIXED_MUL_Q16, U32, 0x8000, 0x8000, 0x4000),  # 0.5 * 0.5 = 0.25
    (B.FIXED_MUL_Q16, U32, 0xFFFF0000, 0x20000, 0xFFFE0000),  # -1.0 * 2.0 = -2.0
    (B.FIXED_MUL_Q16, U32, M, 1, M),  # -2^-16 * 2^-16 = -2^-32: arithmetic shift rounds down
    (B.FIXED_MUL_Q16, U32, 0x7FFFFFFF, 0x7FFFFFFF, 0xFFFF0000),  # overflow wraps
    # i32: two's complement wrapping, truncating division, the total INT_MIN / -1
    (B.ADD, I32, IMAX, 1, IMIN), (B.ADD, I32, -1, 1, 0), (B.SUB, I32, IMIN, 1, IMAX),
    (B.MUL, I32, IMIN, -1, IMIN), (B.MUL, I32, 65536, 65536, 0), (B.MUL, I32, -3, 7, -21),
    (B.DIV, I32, 7, 2, 3), (B.DIV, I32, -7, 2, -3), (B.DIV, I32, 7, -2, -3), (B.DIV, I32, -7, -2, 3),
    (B.DIV, I32, IMIN, -1, IMIN), (B.DIV, I32, 5, 0, -1), (B.DIV, I32, -5, 0, -1),
    (B.DIV, I32, 0, 0, -1), (B.DIV, I32, IMIN, 1, IMIN), (B.DIV, I32, IMIN, 2, -(2**30)),
    (B.MOD, I32, 7, 2, 1), (B.MOD, I32, -7, 2, -1), (B.MOD, I32, 7, -2, 1), (B.MOD, I32, -7, -2, -1),
    (B.MOD, I32, IMIN, -1, 0), (B.MOD, I32, 5, 0, 0), (B.MOD, I32, IMIN, 3, -2),
    (B.BIT_AND, I32, -1, 0x0F, 15), (B.BIT_OR, I32, IMIN, 1, IMIN + 1), (B.BIT_XOR, I32, -1, IMAX, IMIN),
    (B.SHL, I32, 1, 31, IMIN), (B.SHL, I32, 1, 32, 1), (B.SHL, I32, 1, -1, IMIN), (B.SHL, I32, 3, 31, IMIN),
    (B.SHL, I32, -1, 4, -16),
    (B.SHR, I32, -8, 1, -4), (B.SHR, I32, IMIN, 31, -1), (B.SHR, I32, -1, 32, -1), (B.SHR, I32, 16, 36, 1),
    (B.SHR, I32, IMAX, -1, 0),
    (B.EQ, I32, -1, -1, True), (B.NE, I32, -1, 1, True),
    (B.LT, I32, -1, 0, True), (B.GT, I32, IMIN, IMAX, False), (B.LE, I32, IMIN, IMIN, True),
    (B.GE, I32, 0, -1, True),
    (B.MIN, I32, -1, 0, -1), (B.MAX, I32, IMIN, IMAX, IMAX),
    (B.ABS_DIFF, I32, IMIN, IMAX, M), (B.ABS_DIFF, I32, -1, 1, 2), (B.ABS_DIFF, I32, IMAX, IMIN, M),
    (B.FIXED_MUL_Q16, I32, -65536, 131072, -131072), (B.FIXED_MUL_Q16, I32, IMIN, IMIN, 0),
    (B.FIXED_MUL_Q16, I32, IMAX, IMAX, -65536), (B.FIXED_MUL_Q16, I32, -1, 1, -1),
    (B.FIXED_MUL_Q16, I32, 0x18000, 0x18000, 0x24000),  # 1.5 * 1.5 = 2.25
    # f32: arithmetic in f32 (round to nearest even), IEEE specials
    (B.ADD, F32, 1.0, 2.0**-24, 1.0),  # exact halfway: ties to even
    (B.ADD, F32, 1.0, 3 * 2.0**-25, 1.0 + 2.0**-23),
    (B.ADD, F32, 16777216.0, 1.0, 16777216.0),  # f64 would give 16777217
    (B.ADD, F32, F32_MAX, F32_MAX, INF), (B.ADD, F32, INF, -INF, NAN),
    (B.ADD, F32, -0.0, 0.0, 0.0), (B.ADD, F32, -0.0, -0.0, -0.0),
    (B.SUB, F32, 1.0, 1.0, 0.0), (B.SUB, F32, INF, INF, NAN), (B.SUB, F32, 0.1, 0.1, 0.0),
    (B.MUL, F32, F32_TINY, 0.5, 0.0),  # halfway between 0 and the smallest subnormal: even is 0
    (B.MUL, F32, F32_TINY, 1.5, 2 * F32_TINY),  # halfway between 1 and 2 ulps: even is 2
    (B.MUL, F32, -0.0, 5.0, -0.0), (B.MUL, F32, INF, 0.0, NAN), (B.MUL, F32, 3.0e38, 10.0, INF),
    (B.DIV, F32, 1.0, 0.0, INF), (B.DIV, F32, -1.0, 0.0, -INF), (B.DIV, F32, 1.0, -0.0, -INF),
    (B.DIV, F32, 0.0, 0.0, NAN), (B.DIV, F32, 1.0, 3.0, struct.unpack("<f", bytes.fromhex("abaaaa3e"))[0]),
    (B.DIV, F32, F32_MIN_NORMAL, 4.0, F32_MIN_NORMAL / 4),  # into the subnormals, exact
    (B.MOD, F32, 5.5, 2.0, 1.5), (B.MOD, F32, -5.5, 2.0, -1.5), (B.MOD, F32, 5.5, -2.0, 1.5),
    (B.MOD, F32, 1.0, 0.0, NAN), (B.MOD, F32, INF, 1.0, NAN), (B.MOD, F32, 1.0, INF, 1.0),
    (B.MOD, F32, -0.0, 1.0, -0.0), (B.MOD, F32, NAN, 1.0, NAN), (B.MOD, F32, 0.75, 0.25, 0.0),
    (B.EQ, F32, NAN, NAN, False), (B.NE, F32, NAN, NAN, True), (B.EQ, F32, 0.0, -0.0, True),
    (B.LT, F32, NAN, 1.0, False), (B.GT, F32, 1.0, NAN, False), (B.LE, F32, NAN, NAN, False),
    (B.GE, F32, INF, INF, True), (B.LT, F32, -INF, F32_TINY, True),
    (B.MIN, F32, NAN, 1.0, 1.0), (B.MIN, F32, 1.0, NAN, 1.0), (B.MIN, F32, NAN, NAN, NAN),
    (B.MIN, F32, -1.0, 1.0, -1.0), (B.MIN, F32, -INF, 0.0, -INF),
    (B.MAX, F32, NAN, 1.0, 1.0), (B.MAX, F32, 1.0, NAN, 1.0), (B.MAX, F32, -1.0, 1.0, 1.0),
    (B.MAX, F32, INF, NAN, INF),
    (B.ABS_DIFF, F32, 1.0, 3.0, 2.0), (B.ABS_DIFF, F32, -INF, INF, INF), (B.ABS_DIFF, F32, NAN, 0.0, NAN),
    # f64: the same rules in binary64
    (B.ADD, F64, 0.1, 0.2, 0.30000000000000004), (B.ADD, F64, 1.0, 2.0**-53, 1.0),
    (B.ADD, F64, 16777216.0, 1.0, 16777217.0), (B.ADD, F64, INF, -INF, NAN),
    (B.ADD, F64, -0.0, -0.0, -0.0),
    (B.SUB, F64, 1e308, -1e308, INF), (B.SUB, F64, 0.3, 0.1, 0.19999999999999998),
    (B.MUL, F64, F64_TINY, 0.5, 0.0), (B.MUL, F64, 1e308, 10.0, INF), (B.MUL, F64, -0.0, 2.0, -0.0),
    (B.DIV, F64, 1.0, 0.0, INF), (B.DIV, F64, 1.0, -0.0, -INF), (B.DIV, F64, -1.0, -0.0, INF),
    (B.DIV, F64, 0.0, 0.0, NAN), (B.DIV, F64, NAN, 0.0, NAN), (B.DIV, F64, INF, 0.0, INF),
    (B.DIV, F64, 1e308, 1e-308, INF), (B.DIV, F64, 1.0, 3.0, 1 / 3),
    (B.MOD, F64, 5.5, 2.0, 1.5), (B.MOD, F64, -5.5, 2.0, -1.5), (B.MOD, F64, 1.0, 0.0, NAN),
    (B.MOD, F64, INF, 2.0, NAN), (B.MOD, F64, 3.0, -INF, 3.0), (B.MOD, F64, -0.0, 3.0, -0.0),
    (B.EQ, F64, NAN, NAN, False), (B.NE, F64, NAN, 1.0, True), (B.LT, F64, -0.0, 0.0, False),
    (B.GT, F64, NAN, 0.0, False), (B.LE, F64, 1.0, 1.0, True), (B.GE, F64, NAN, NAN, False),
    (B.MIN, F64, NAN, -3.0, -3.0), (B.MIN, F64, 2.0, NAN, 2.0), (B.MIN, F64, 2.0, 1.0, 1.0),
    (B.MAX, F64, NAN, -3.0, -3.0), (B.MAX, F64, 2.0, 1.0, 2.0), (B.MAX, F64, NAN, NAN, NAN),
    (B.ABS_DIFF, F64, -1.5, 1.5, 3.0), (B.ABS_DIFF, F64, 1.0, 1.0, 0.0),
    # pow is C pow: pow(x, 0) == 1 even for NaN, pow(1, y) == 1 even for NaN, a negative base with
    # a non-integer exponent is NaN, pow(+-0, negative odd) == +-inf; f32 rounds the f64 result once
    (B.POW, F64, 2.0, 10.0, 1024.0), (B.POW, F64, NAN, 0.0, 1.0), (B.POW, F64, 1.0, NAN, 1.0),
    (B.POW, F64, -8.0, 1 / 3, NAN), (B.POW, F64, -2.0, 3.0, -8.0), (B.POW, F64, 0.0, -1.0, INF),
    (B.POW, F64, -0.0, -3.0, -INF), (B.POW, F64, 10.0, 400.0, INF), (B.POW, F64, 4.0, 0.5, 2.0),
    (B.POW, F64, -INF, 3.0, -INF), (B.POW, F64, 0.5, INF, 0.0),
    (B.POW, F32, 2.0, 0.5, np.float32(math.sqrt(2.0))), (B.POW, F32, 10.0, 39.0, INF),
    (B.POW, F32, -8.0, 0.5, NAN), (B.POW, F32, NAN, 0.0, 1.0), (B.POW, F32, 3.0, 2.0, 9.0),
    # bool
    (B.EQ, BOOL, True, True, True), (B.EQ, BOOL, True, False, False),
    (B.NE, BOOL, True, False, True), (B.NE, BOOL, False, False, False),
    (B.AND, BOOL, True, True, True), (B.AND, BOOL, True, False, False), (B.AND, BOOL, False, True, False),
    (B.OR, BOOL, False, False, False), (B.OR, BOOL, True, False, True), (B.OR, BOOL, False, True, True),
]


@pytest.mark.parametrize(("op", "t", "a", "b", "want"), BIN_CASES,
                         ids=[f"{c[0].name}-{c[1].short}-{c[2]}-{c[3]}" for c in BIN_CASES])
def test_binop(op: BinOpKind, t: DataType, a: Any, b: Any, want: Any) -> None:
    rt = BINOP_RULES[op].result_for(t)
    got = eval_binop(op, t, a, b)
    assert same(rt, got, want), f"{op.name}({a!r}, {b!r}) on {t.short} = {got!r}, expected {want!r}"


# --- unary ops -------------------------------------------------------------------------------

UN_CASES: list[tuple[UnOpKind, DataType, Any, Any]] = [
    (U.NEGATE, I32, IMIN, IMIN), (U.NEGATE, I32, 5, -5), (U.NEGATE, I32, 0, 0),
    (U.NEGATE, U32, 1, M), (U.NEGATE, U32, 0, 0), (U.NEGATE, U32, 0x80000000, 0x80000000),
    (U.NEGATE, F32, 0.0, -0.0), (U.NEGATE, F32, -INF, INF), (U.NEGATE, F64, 1.5, -1.5),
    (U.NEGATE, F64, 0.0, -0.0),
    (U.BIT_NOT, I32, 0, -1), (U.BIT_NOT, I32, IMAX, IMIN), (U.BIT_NOT, U32, 0, M),
    (U.BIT_NOT, U32, 0xF0, 0xFFFFFF0F),
    (U.LOGICAL_NOT, BOOL, True, False), (U.LOGICAL_NOT, BOOL, False, True),
    (U.ABS, I32, IMIN, IMIN), (U.ABS, I32, -5, 5), (U.ABS, I32, 7, 7), (U.ABS, U32, M, M),
    (U.ABS, F32, -0.0, 0.0), (U.ABS, F32, -INF, INF), (U.ABS, F32, NAN, NAN), (U.ABS, F64, -2.5, 2.5),
    (U.SQRT, F32, 4.0, 2.0), (U.SQRT, F32, -1.0, NAN), (U.SQRT, F32, -0.0, -0.0), (U.SQRT, F32, INF, INF),
    (U.SQRT, F32, 2.0, struct.unpack("<f", bytes.fromhex("f304b53f"))[0]),
    (U.SQRT, F64, 2.0, math.sqrt(2.0)), (U.SQRT, F64, -1.0, NAN), (U.SQRT, F64, -0.0, -0.0),
    (U.INVERSE_SQRT, F32, 4.0, 0.5), (U.INVERSE_SQRT, F32, 0.0, INF), (U.INVERSE_SQRT, F32, -0.0, -INF),
    (U.INVERSE_SQRT, F32, INF, 0.0), (U.INVERSE_SQRT, F32, -1.0, NAN),
    (U.INVERSE_SQRT, F64, 0.25, 2.0), (U.INVERSE_SQRT, F64, 0.0, INF), (U.INVERSE_SQRT, F64, -4.0, NAN),
    (U.RECIPROCAL, F32, 4.0, 0.25), (U.RECIPROCAL, F32, 0.0, INF), (U.RECIPROCAL, F32, -0.0, -INF),
    (U.RECIPROCAL, F32, INF, 0.0), (U.RECIPROCAL, F64, -0.0, -INF), (U.RECIPROCAL, F64, 8.0, 0.125),
    (U.RECIPROCAL, F64, NAN, NAN),
    (U.EXP, F32, 0.0, 1.0), (U.EXP, F32, 100.0, INF), (U.EXP, F32, -INF, 0.0), (U.EXP, F32, NAN, NAN),
    (U.EXP, F64, 1000.0, INF), (U.EXP, F64, -INF, 0.0), (U.EXP, F64, 0.0, 1.0),
    (U.EXP2, F32, 10.0, 1024.0), (U.EXP2, F32, -150.0, 0.0), (U.EXP2, F64, -1.0, 0.5),
    (U.EXP2, F64, 1024.0, INF),
    (U.LOG, F32, 1.0, 0.0), (U.LOG, F32, 0.0, -INF), (U.LOG, F32, -1.0, NAN), (U.LOG, F64, 0.0, -INF),
    (U.LOG, F64, -0.0, -INF), (U.LOG, F64, -1.0, NAN), (U.LOG, F64, INF, INF),
    (U.LOG2, F32, 8.0, 3.0), (U.LOG2, F32, F32_TINY, -149.0), (U.LOG2, F64, 0.0, -INF),
    (U.LOG2, F64, 1024.0, 10.0),
    (U.SIN, F32, 0.0, 0.0), (U.SIN, F32, -0.0, -0.0), (U.SIN, F32, INF, NAN), (U.SIN, F64, INF, NAN),
    (U.SIN, F64, -0.0, -0.0),
    (U.COS, F32, 0.0, 1.0), (U.COS, F64, -INF, NAN), (U.COS, F64, 0.0, 1.0),
    (U.TAN, F32, 0.0, 0.0), (U.TAN, F64, INF, NAN), (U.TAN, F64, -0.0, -0.0),
    (U.ASIN, F32, 2.0, NAN), (U.ASIN, F32, 0.0, 0.0), (U.ASIN, F64, -1.5, NAN),
    (U.ASIN, F64, 1.0, math.pi / 2),
    (U.ACOS, F32, 1.0, 0.0), (U.ACOS, F32, -2.0, NAN), (U.ACOS, F64, 2.0, NAN), (U.ACOS, F64, -1.0, math.pi),
    (U.ATAN, F32, INF, np.float32(math.pi / 2)), (U.ATAN, F64, -INF, -math.pi / 2), (U.ATAN, F64, 0.0, 0.0),
    (U.SINH, F32, 100.0, INF), (U.SINH, F32, -0.0, -0.0), (U.SINH, F64, -1000.0, -INF),
    (U.SINH, F64, 0.0, 0.0),
    (U.COSH, F32, 0.0, 1.0), (U.COSH, F64, 1000.0, INF), (U.COSH, F64, -INF, INF),
    (U.TANH, F32, INF, 1.0), (U.TANH, F32, -INF, -1.0), (U.TANH, F64, 0.0, 0.0), (U.TANH, F64, 50.0, 1.0),
    (U.FLOOR, F32, -0.5, -1.0), (U.FLOOR, F32, 0.5, 0.0), (U.FLOOR, F32, -0.0, -0.0),
    (U.FLOOR, F32, INF, INF),
    (U.FLOOR, F32, 8388607.5, 8388607.0), (U.FLOOR, F64, -2.5, -3.0), (U.FLOOR, F64, NAN, NAN),
    (U.FLOOR, F64, 1e300, 1e300),
    (U.CEIL, F32, -0.5, -0.0), (U.CEIL, F32, 0.2, 1.0), (U.CEIL, F32, -INF, -INF),
    (U.CEIL, F64, 2.000001, 3.0),
    (U.CEIL, F64, -0.9, -0.0),
    (U.TRUNC, F32, -1.7, -1.0), (U.TRUNC, F32, 1.7, 1.0), (U.TRUNC, F32, -0.3, -0.0),
    (U.TRUNC, F64, -1e-300, -0.0),
    (U.TRUNC, F64, 123456.789, 123456.0),
    (U.ROUND, F32, 0.5, 0.0), (U.ROUND, F32, 1.5, 2.0), (U.ROUND, F32, 2.5, 2.0), (U.ROUND, F32, -0.5, -0.0),
    (U.ROUND, F32, -1.5, -2.0), (U.ROUND, F32, -2.5, -2.0), (U.ROUND, F32, 0.49999997, 0.0),
    (U.ROUND, F32, 8388609.0, 8388609.0), (U.ROUND, F32, INF, INF), (U.ROUND, F32, NAN, NAN),
    (U.ROUND, F64, 0.5, 0.0), (U.ROUND, F64, 3.5, 4.0), (U.ROUND, F64, -3.5, -4.0),
    (U.ROUND, F64, -0.2, -0.0),
    (U.ROUND, F64, 2.5000000000000004, 3.0), (U.ROUND, F64, 4503599627370497.0, 4503599627370497.0),
    (U.SIGN, I32, -7, -1), (U.SIGN, I32, 0, 0), (U.SIGN, I32, 9, 1), (U.SIGN, I32, IMIN, -1),
    (U.SIGN, F32, -3.0, -1.0), (U.SIGN, F32, 2.0, 1.0), (U.SIGN, F32, -0.0, -0.0), (U.SIGN, F32, NAN, NAN),
    (U.SIGN, F32, F32_TINY, 1.0), (U.SIGN, F64, 0.0, 0.0), (U.SIGN, F64, -INF, -1.0), (U.SIGN, F64, NAN, NAN),
    (U.POPCOUNT, I32, -1, 32), (U.POPCOUNT, I32, 0, 0), (U.POPCOUNT, I32, IMIN, 1),
    (U.POPCOUNT, U32, M, 32), (U.POPCOUNT, U32, 0b1011, 3),
    (U.CLZ, I32, 0, 32), (U.CLZ, I32, 1, 31), (U.CLZ, I32, -1, 0), (U.CLZ, U32, 0x80000000, 0),
    (U.CLZ, U32, 0, 32), (U.CLZ, U32, 0xFFFF, 16),
    (U.CTZ, I32, 0, 32), (U.CTZ, I32, IMIN, 31), (U.CTZ, I32, 12, 2), (U.CTZ, U32, 0x80000000, 31),
    (U.CTZ, U32, 0, 32), (U.CTZ, U32, 1, 0),
    (U.IS_NAN, F32, NAN, True), (U.IS_NAN, F32, INF, False), (U.IS_NAN, F64, NAN, True),
    (U.IS_NAN, F64, 0.0, False),
    (U.IS_INF, F32, -INF, True), (U.IS_INF, F32, F32_MAX, False), (U.IS_INF, F32, NAN, False),
    (U.IS_INF, F64, INF, True), (U.IS_INF, F64, 1e308, False),
    (U.IS_FINITE, F32, F32_TINY, True), (U.IS_FINITE, F32, NAN, False), (U.IS_FINITE, F32, INF, False),
    (U.IS_FINITE, F64, -1e308, True), (U.IS_FINITE, F64, -INF, False),
    (U.STOP_GRADIENT, F32, -0.0, -0.0), (U.STOP_GRADIENT, F32, NAN, NAN), (U.STOP_GRADIENT, F64, 2.5, 2.5),
    (U.STOP_GRADIENT, F64, -INF, -INF),
]


@pytest.mark.parametrize(("op", "t", "a", "want"), UN_CASES,
                         ids=[f"{c[0].name}-{c[1].short}-{c[2]}" for c in UN_CASES])
def test_unop(op: UnOpKind, t: DataType, a: Any, want: Any) -> None:
    rt = UNOP_RULES[op].result_for(t)
    got = eval_unop(op, t, a)
    assert same(rt, got, want), f"{op.name}({a!r}) on {t.short} = {got!r}, expected {want!r}"


_NUMPY_FN = {  # an independent implementation to compare against
    U.EXP: np.exp, U.EXP2: np.exp2, U.LOG: np.log, U.LOG2: np.log2, U.SIN: np.sin, U.COS: np.cos,
    U.TAN: np.tan, U.ASIN: np.arcsin, U.ACOS: np.arccos, U.ATAN: np.arctan, U.SINH: np.sinh,
    U.COSH: np.cosh, U.TANH: np.tanh, U.SQRT: np.sqrt,
}


@settings(max_examples=80, deadline=None)
@given(op=st.sampled_from(sorted(_NUMPY_FN)), x=st.floats(-0.99, 0.99) | st.floats(0.01, 20.0))
def test_transcendentals_within_ulps(op: UnOpKind, x: float) -> None:
    """Within 4 ulp of numpy's float64 / float32 functions (docs/semantics.md tolerances)."""
    if op in (U.LOG, U.LOG2, U.SQRT):
        x = abs(x) + 1e-3
    if op in (U.ASIN, U.ACOS):
        x = math.tanh(x)
    ref64 = float(_NUMPY_FN[op](np.float64(x)))
    got64 = eval_unop(op, F64, x)
    assert abs(got64 - ref64) <= 4 * math.ulp(ref64)
    x32 = np.float32(x)
    ref32 = _NUMPY_FN[op](x32)
    got32 = eval_unop(op, F32, x32)
    assert isinstance(got32, np.float32)
    assert abs(float(got32) - float(ref32)) <= 4 * float(np.spacing(np.abs(ref32)))


# --- casts -----------------------------------------------------------------------------------

CAST_CASES: list[tuple[DataType, DataType, Any, Any]] = [  # (source, target, value, expected)
    (F32, I32, 1.9, 1), (F32, I32, -1.9, -1), (F32, I32, NAN, 0), (F32, I32, INF, IMAX),
    (F32, I32, -INF, IMIN), (F32, I32, 3e9, IMAX), (F32, I32, -3e9, IMIN),
    (F32, I32, 2147483520.0, 2147483520), (F32, I32, 2147483648.0, IMAX), (F32, I32, -2147483648.0, IMIN),
    (F32, I32, -0.0, 0), (F32, I32, F32_TINY, 0), (F32, I32, -0.99, 0),
    (F32, U32, -1.0, 0), (F32, U32, -0.9, 0), (F32, U32, 4294967040.0, 4294967040),
    (F32, U32, 4294967296.0, M), (F32, U32, NAN, 0), (F32, U32, INF, M), (F32, U32, -INF, 0),
    (F32, U32, 2.5, 2),
    (F64, I32, 2147483647.9, IMAX), (F64, I32, 2147483648.0, IMAX), (F64, I32, -2147483648.9, IMIN),
    (F64, I32, -2147483649.0, IMIN), (F64, I32, -7.5, -7), (F64, I32, NAN, 0), (F64, I32, 1e300, IMAX),
    (F64, U32, 4294967295.5, M), (F64, U32, 4294967296.0, M), (F64, U32, -1e-300, 0), (F64, U32, NAN, 0),
    (F64, U32, 123.999, 123),
    (I32, U32, -1, M), (I32, U32, IMIN, 0x80000000), (I32, U32, 5, 5),
    (U32, I32, M, -1), (U32, I32, 0x80000000, IMIN), (U32, I32, 0x7FFFFFFF, IMAX),
    (I32, F32, 16777217, 16777216.0), (I32, F32, 16777219, 16777220.0), (I32, F32, IMIN, -2147483648.0),
    (I32, F32, IMAX, 2147483648.0), (I32, F32, -3, -3.0),
    (U32, F32, M, 4294967296.0), (U32, F32, 16777217, 16777216.0), (U32, F32, 0, 0.0),
    (I32, F64, IMIN, -2147483648.0), (I32, F64, IMAX, 2147483647.0), (U32, F64, M, 4294967295.0),
    (F64, F32, 1e39, INF), (F64, F32, -1e39, -INF), (F64, F32, 0.1, float(np.float32(0.1))),
    (F64, F32, 1 + 2.0**-24, 1.0), (F64, F32, 1 + 2.0**-24 + 2.0**-50, 1 + 2.0**-23),
    (F64, F32, 1e-46, 0.0), (F64, F32, -1e-46, -0.0), (F64, F32, NAN, NAN), (F64, F32, 2.0**-149, F32_TINY),
    (F32, F64, 0.1, 0.10000000149011612), (F32, F64, -0.0, -0.0), (F32, F64, NAN, NAN),
    (F32, F64, F32_TINY, F32_TINY),
    (BOOL, I32, True, 1), (BOOL, I32, False, 0), (BOOL, U32, True, 1), (BOOL, F32, True, 1.0),
    (BOOL, F32, False, 0.0), (BOOL, F64, True, 1.0), (BOOL, BOOL, True, True),
    (I32, BOOL, -1, True), (I32, BOOL, 0, False), (U32, BOOL, M, True), (U32, BOOL, 0, False),
    (F32, BOOL, NAN, True), (F32, BOOL, -0.0, False), (F32, BOOL, F32_TINY, True),
    (F64, BOOL, NAN, True), (F64, BOOL, 0.0, False), (F64, BOOL, -INF, True),
    (I32, I32, IMIN, IMIN), (U32, U32, M, M), (F32, F32, -0.0, -0.0), (F64, F64, NAN, NAN),
]


@pytest.mark.parametrize(("src", "dst", "v", "want"), CAST_CASES,
                         ids=[f"{c[0].short}-{c[1].short}-{c[2]}" for c in CAST_CASES])
def test_cast(src: DataType, dst: DataType, v: Any, want: Any) -> None:
    got = eval_cast(dst, src, v)
    assert same(dst, got, want), f"cast {src.short}->{dst.short} of {v!r} = {got!r}, expected {want!r}"


# --- atomics ---------------------------------------------------------------------------------

A = AtomicOp
ATOMIC_CASES: list[tuple[AtomicOp, DataType, Any, Any, Any, Any]] = [  # op, type, old, value, expected, new
    (A.ADD, U32, M, 1, None, 0), (A.ADD, I32, IMAX, 1, None, IMIN), (A.ADD, F32, 1.0, 2.0**-24, None, 1.0),
    (A.ADD, F64, 0.1, 0.2, None, 0.30000000000000004),
    (A.MIN, I32, -1, 0, None, -1), (A.MIN, U32, M, 0, None, 0),
    (A.MAX, I32, IMIN, -1, None, -1), (A.MAX, U32, M, 0, None, M),
    (A.AND, I32, -1, 6, None, 6), (A.AND, U32, 0b1100, 0b1010, None, 0b1000),
    (A.OR, I32, IMIN, 1, None, IMIN + 1), (A.OR, U32, 0b1100, 0b1010, None, 0b1110),
    (A.XOR, I32, -1, -1, None, 0), (A.XOR, U32, 0b1100, 0b1010, None, 0b0110),
    (A.EXCHANGE, I32, 5, -9, None, -9), (A.EXCHANGE, U32, 5, 9, None, 9),
    (A.EXCHANGE, F32, 1.5, -0.0, None, -0.0),
    (A.EXCHANGE, F64, 1.5, NAN, None, NAN),
    (A.COMPARE_EXCHANGE, U32, 5, 9, 5, 9), (A.COMPARE_EXCHANGE, U32, 5, 9, 4, 5),
    (A.COMPARE_EXCHANGE, I32, -1, 7, -1, 7), (A.COMPARE_EXCHANGE, I32, -1, 7, 1, -1),
]


@pytest.mark.parametrize(("op", "t", "old", "v", "e", "want"), ATOMIC_CASES,
                         ids=[f"{c[0].name}-{c[1].short}-{c[2]}-{c[3]}" for c in ATOMIC_CASES])
def test_atomic(op: AtomicOp, t: DataType, old: Any, v: Any, e: Any, want: Any) -> None:
    assert same(t, eval_atomic(op, t, old, v, e), want)


# --- the tables cover every op, and the tests cover the tables -------------------------------

def test_tables_cover_every_enum_member() -> None:
    assert set(BINOP_EVAL) == set(BinOpKind)
    assert set(UNOP_EVAL) == set(UnOpKind)
    assert set(ATOMIC_EVAL) == set(AtomicOp)
    for op in BinOpKind:
        assert set(BINOP_EVAL[op]) == set(BINOP_RULES[op].operands), op
    for uop in UnOpKind:
        assert set(UNOP_EVAL[uop]) == set(UNOP_RULES[uop].operands), uop
    for aop in AtomicOp:
        assert set(ATOMIC_EVAL[aop]) == set(ATOMIC_RULES[aop].operands), aop
    assert set(CAST_EVAL) == {(s, t) for s in DataType for t in DataType}


def test_every_accepted_pair_has_cases() -> None:
    def pairs(cases: list[Any]) -> set[tuple[Any, DataType]]:
        return {(c[0], c[1]) for c in cases}

    assert pairs(BIN_CASES) == {(op, t) for op in BinOpKind for t in BINOP_RULES[op].operands}
    assert pairs(UN_CASES) == {(op, t) for op in UnOpKind for t in UNOP_RULES[op].operands}
    assert pairs(CAST_CASES) == set(CAST_EVAL)
    assert pairs(ATOMIC_CASES) == {(op, t) for op in AtomicOp for t in ATOMIC_RULES[op].operands}


def test_bad_scalar_inputs_raise_with_fix() -> None:
    for bad in (lambda: eval_binop(B.SHL, F32, 1.0, 2.0), lambda: eval_unop(U.SQRT, I32, 4),
                lambda: eval_binop(B.ADD, U32, -1, 0), lambda: eval_binop(B.ADD, I32, 2**31, 0),
                lambda: eval_binop(B.ADD, I32, 1.5, 0), lambda: eval_cast(I32, BOOL, 1)):
        with pytest.raises(InterpError, match="Fix:"):
            bad()


# --- the machine uses the same tables --------------------------------------------------------

_VALUES: dict[DataType, st.SearchStrategy[Any]] = {
    I32: st.sampled_from([0, 1, -1, IMIN, IMAX, 7, -7, 31, 32]) | st.integers(IMIN, IMAX),
    U32: st.sampled_from([0, 1, M, 0x80000000, 31, 32, 33]) | st.integers(0, M),
    F32: st.sampled_from([0.0, -0.0, 1.0, -1.5, INF, -INF, NAN, F32_TINY, 0.5, 2.5])
    | st.floats(width=32, allow_nan=True),
    F64: st.sampled_from([0.0, -0.0, 1.0, -1.5, INF, NAN, F64_TINY, 0.5, 2.5]) | st.floats(),
    BOOL: st.booleans(),
}


def _run_scalar(e_of: Any, in_types: list[DataType], out_type: DataType, values: list[Any]) -> Any:
    """Load each operand from its own buffer, apply the expression, store the result, read back."""
    bufs = [read(f"in{k}", k, t) for k, t in enumerate(in_types)]
    out = output("out", len(in_types), out_type)
    body: list[Node] = [let(f"v{k}", b[LitU32(0)]) for k, b in enumerate(bufs)]
    body.append(store(out, LitU32(0), e_of(*[var(f"v{k}") for k in range(len(bufs))])))
    prog = Program.wrapped([*bufs, out], 1, body)
    arrays = {f"in{k}": np.array([v], dtype=t.np_dtype)
              for k, (t, v) in enumerate(zip(in_types, values, strict=True))}
    arrays["out"] = np.zeros(1, dtype=out_type.np_dtype)
    res = run(prog, arrays, grid=1)
    got = res.buffers["out"][0]
    return got.item() if out_type is not F32 else got


@settings(max_examples=150, deadline=None)
@given(data=st.data(), op=st.sampled_from(list(BinOpKind)))
def test_machine_binop_matches_eval_binop(data: st.DataObject, op: BinOpKind) -> None:
    t = data.draw(st.sampled_from(BINOP_RULES[op].operands))
    a, b = data.draw(_VALUES[t]), data.draw(_VALUES[t])
    rt = BINOP_RULES[op].result_for(t)
    got = _run_scalar(lambda x, y: BinOp(op, x, y), [t, t], rt, [a, b])
    want = eval_binop(op, t, a, b)
    assert same(rt, np.float32(got) if rt is F32 else got, want)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), op=st.sampled_from(list(UnOpKind)))
def test_machine_unop_matches_eval_unop(data: st.DataObject, op: UnOpKind) -> None:
    t = data.draw(st.sampled_from(UNOP_RULES[op].operands))
    a = data.draw(_VALUES[t])
    rt = UNOP_RULES[op].result_for(t)
    got = _run_scalar(lambda x: UnOp(op, x), [t], rt, [a])
    assert same(rt, got, eval_unop(op, t, a))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), src=st.sampled_from(list(DataType)), dst=st.sampled_from(list(DataType)))
def test_machine_cast_matches_eval_cast(data: st.DataObject, src: DataType, dst: DataType) -> None:
    a = data.draw(_VALUES[src])
    got = _run_scalar(lambda x: Cast(dst, x), [src], dst, [a])
    assert same(dst, got, eval_cast(dst, src, a))
