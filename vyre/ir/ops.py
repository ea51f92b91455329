"""Operator enums and their type rules.

Each op's type rule lives in one table keyed by the op enum (:data:`BINOP_RULES`,
:data:`UNOP_RULES`, :data:`ATOMIC_RULES`, :data:`SUBGROUP_REDUCE_OPS`). The interpreter,
emitters and autodiff keep their own per-op tables keyed by the same enums; a test checks that
every table covers every member, so a new op cannot be half-added.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .types import FLOATS, INTS, NUMERIC, DataType


class BinOpKind(enum.IntEnum):
    """Binary operators. The value is the wire tag; never renumber."""

    ADD = 1
    SUB = 2
    MUL = 3
    DIV = 4
    MOD = 5
    BIT_AND = 6
    BIT_OR = 7
    BIT_XOR = 8
    SHL = 9
    SHR = 10
    EQ = 11
    NE = 12
    LT = 13
    GT = 14
    LE = 15
    GE = 16
    AND = 17
    OR = 18
    MIN = 19
    MAX = 20
    ABS_DIFF = 21
    FIXED_MUL_Q16 = 22
    POW = 23


class UnOpKind(enum.IntEnum):
    """Unary operators. The value is the wire tag; never renumber."""

    NEGATE = 1
    BIT_NOT = 2
    LOGICAL_NOT = 3
    ABS = 4
    SQRT = 5
    INVERSE_SQRT = 6
    EXP = 7
    EXP2 = 8
    LOG = 9
    LOG2 = 10
    SIN = 11
    COS = 12
    TAN = 13
    ASIN = 14
    ACOS = 15
    ATAN = 16
    SINH = 17
    COSH = 18
    TANH = 19
    FLOOR = 20
    CEIL = 21
    ROUND = 22
    TRUNC = 23
    SIGN = 24
    RECIPROCAL = 25
    POPCOUNT = 26
    CLZ = 27
    CTZ = 28
    IS_NAN = 29
    IS_INF = 30
    IS_FINITE = 31
    STOP_GRADIENT = 32


class AtomicOp(enum.IntEnum):
    """Atomic read-modify-write operators. The value is the wire tag; never renumber."""

    ADD = 1
    MIN = 2
    MAX = 3
    AND = 4
    OR = 5
    XOR = 6
    EXCHANGE = 7
    COMPARE_EXCHANGE = 8


@dataclass(frozen=True, slots=True)
class OpRule:
    """Which operand types an op accepts and what it yields.

    ``result`` is None when the result has the operand type; otherwise a fixed type, or a mapping
    from operand type to result type.
    """

    operands: tuple[DataType, ...]
    result: DataType | dict[DataType, DataType] | None = None

    def result_for(self, operand: DataType) -> DataType:
        if self.result is None:
            return operand
        if isinstance(self.result, dict):
            return self.result[operand]
        return self.result


_B = DataType.BOOL
_ARITH = OpRule(NUMERIC)
_INT = OpRule(INTS)
_CMP = OpRule(NUMERIC, _B)
_EQ = OpRule((*NUMERIC, _B), _B)
_LOGIC = OpRule((_B,))
_FLOAT = OpRule(FLOATS)

BINOP_RULES: dict[BinOpKind, OpRule] = {
    BinOpKind.ADD: _ARITH,
    BinOpKind.SUB: _ARITH,
    BinOpKind.MUL: _ARITH,
    BinOpKind.DIV: _ARITH,
    BinOpKind.MOD: _ARITH,
    BinOpKind.BIT_AND: _INT,
    BinOpKind.BIT_OR: _INT,
    BinOpKind.BIT_XOR: _INT,
    BinOpKind.SHL: _INT,
    BinOpKind.SHR: _INT,
    BinOpKind.EQ: _EQ,
    BinOpKind.NE: _EQ,
    BinOpKind.LT: _CMP,
    BinOpKind.GT: _CMP,
    BinOpKind.LE: _CMP,
    BinOpKind.GE: _CMP,
    BinOpKind.AND: _LOGIC,
    BinOpKind.OR: _LOGIC,
    BinOpKind.MIN: _ARITH,
    BinOpKind.MAX: _ARITH,
    # |a - b| is always representable as u32 for 32-bit integers (Rust's abs_diff).
    BinOpKind.ABS_DIFF: OpRule(NUMERIC, {DataType.I32: DataType.U32, DataType.U32: DataType.U32,
                                         DataType.F32: DataType.F32, DataType.F64: DataType.F64}),
    BinOpKind.FIXED_MUL_Q16: _INT,
    BinOpKind.POW: _FLOAT,
}

UNOP_RULES: dict[UnOpKind, OpRule] = {
    UnOpKind.NEGATE: _ARITH,
    UnOpKind.BIT_NOT: _INT,
    UnOpKind.LOGICAL_NOT: _LOGIC,
    UnOpKind.ABS: _ARITH,
    UnOpKind.SQRT: _FLOAT,
    UnOpKind.INVERSE_SQRT: _FLOAT,
    UnOpKind.EXP: _FLOAT,
    UnOpKind.EXP2: _FLOAT,
    UnOpKind.LOG: _FLOAT,
    UnOpKind.LOG2: _FLOAT,
    UnOpKind.SIN: _FLOAT,
    UnOpKind.COS: _FLOAT,
    UnOpKind.TAN: _FLOAT,
    UnOpKind.ASIN: _FLOAT,
    UnOpKind.ACOS: _FLOAT,
    UnOpKind.ATAN: _FLOAT,
    UnOpKind.SINH: _FLOAT,
    UnOpKind.COSH: _FLOAT,
    UnOpKind.TANH: _FLOAT,
    UnOpKind.FLOOR: _FLOAT,
    UnOpKind.CEIL: _FLOAT,
    UnOpKind.ROUND: _FLOAT,
    UnOpKind.TRUNC: _FLOAT,
    UnOpKind.SIGN: OpRule((DataType.I32, DataType.F32, DataType.F64)),
    UnOpKind.RECIPROCAL: _FLOAT,
    UnOpKind.POPCOUNT: OpRule(INTS, DataType.U32),
    UnOpKind.CLZ: OpRule(INTS, DataType.U32),
    UnOpKind.CTZ: OpRule(INTS, DataType.U32),
    UnOpKind.IS_NAN: OpRule(FLOATS, _B),
    UnOpKind.IS_INF: OpRule(FLOATS, _B),
    UnOpKind.IS_FINITE: OpRule(FLOATS, _B),
    # The identity on values; autodiff treats the result as a constant (derivative 0).
    UnOpKind.STOP_GRADIENT: _FLOAT,
}

ATOMIC_RULES: dict[AtomicOp, OpRule] = {
    AtomicOp.ADD: OpRule(NUMERIC),
    AtomicOp.MIN: _INT,
    AtomicOp.MAX: _INT,
    AtomicOp.AND: _INT,
    AtomicOp.OR: _INT,
    AtomicOp.XOR: _INT,
    AtomicOp.EXCHANGE: OpRule(NUMERIC),
    AtomicOp.COMPARE_EXCHANGE: _INT,
}

# Reductions a subgroup can perform, with the operand types each accepts.
SUBGROUP_REDUCE_OPS: dict[BinOpKind, OpRule] = {
    BinOpKind.ADD: _ARITH,
    BinOpKind.MIN: _ARITH,
    BinOpKind.MAX: _ARITH,
    BinOpKind.BIT_AND: _INT,
    BinOpKind.BIT_OR: _INT,
    BinOpKind.BIT_XOR: _INT,
}

# Printer / parser spellings. Infix symbols where the op reads naturally infix.
BINOP_SYMBOL: dict[BinOpKind, str] = {
    BinOpKind.ADD: "+", BinOpKind.SUB: "-", BinOpKind.MUL: "*", BinOpKind.DIV: "/",
    BinOpKind.MOD: "%", BinOpKind.BIT_AND: "&", BinOpKind.BIT_OR: "|", BinOpKind.BIT_XOR: "^",
    BinOpKind.SHL: "<<", BinOpKind.SHR: ">>", BinOpKind.EQ: "==", BinOpKind.NE: "!=",
    BinOpKind.LT: "<", BinOpKind.GT: ">", BinOpKind.LE: "<=", BinOpKind.GE: ">=",
    BinOpKind.AND: "&&", BinOpKind.OR: "||",
}
