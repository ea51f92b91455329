"""The reference interpreter: the executable form of docs/semantics.md.

``run(program, inputs, grid=None, max_steps=50_000_000) -> InterpResult`` executes a program;
``eval_binop`` / ``eval_unop`` / ``eval_cast`` / ``eval_atomic`` are the scalar rules as pure
functions, for use as oracles in other tests. Every backend is tested against this package.
"""

from .machine import InterpResult, run
from .scalar import (
    ATOMIC_EVAL, BINOP_EVAL, CAST_EVAL, UNOP_EVAL, eval_atomic, eval_binop, eval_cast, eval_unop,
    to_value, zero_of,
)

__all__ = [
    "ATOMIC_EVAL", "BINOP_EVAL", "CAST_EVAL", "UNOP_EVAL", "InterpResult", "eval_atomic",
    "eval_binop", "eval_cast", "eval_unop", "run", "to_value", "zero_of",
]
