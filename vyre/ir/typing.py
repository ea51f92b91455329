"""Types of expressions in a *valid* program (validation reports the invalid ones).

Passes that need types (interpreter, emitters, autodiff) walk statements keeping a scope map
from variable name to type and call :func:`expr_type`."""

from __future__ import annotations

from collections.abc import Mapping

from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, FunctionDef, InvocationId, LitBool, LitF32,
    LitF64, LitI32, LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId,
    SubgroupReduce, SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId,
)
from .ops import BINOP_RULES, UNOP_RULES
from .program import Program
from .types import DataType


def expr_type(e: Expr, vars: Mapping[str, DataType], program: Program) -> DataType:
    """The type of ``e`` given the types of the variables in scope. Assumes ``e`` is well typed."""
    match e:
        case LitBool():
            return DataType.BOOL
        case LitI32():
            return DataType.I32
        case (LitU32() | BufLen() | InvocationId() | WorkgroupId() | LocalId() | SubgroupLocalId()
              | SubgroupSize() | SubgroupBallot()):
            return DataType.U32
        case LitF32():
            return DataType.F32
        case LitF64():
            return DataType.F64
        case Var(name):
            return vars[name]
        case Load(buf, _) | Atomic(_, buf, _, _, _):
            return program.buffer(buf).element
        case BinOp(op, left, _):
            return BINOP_RULES[op].result_for(expr_type(left, vars, program))
        case UnOp(op, operand):
            return UNOP_RULES[op].result_for(expr_type(operand, vars, program))
        case Select(_, a, _) | Fma(a, _, _) | SubgroupShuffle(a, _) | SubgroupReduce(_, a):
            return expr_type(a, vars, program)
        case Cast(target, _):
            return target
        case Call(op_id, _):
            return program.function(op_id).result
        case _:
            raise TypeError(f"not a vyre expression: {e!r}")


def function_env(fn: FunctionDef) -> dict[str, DataType]:
    return dict(fn.params)
