"""vyre's typed IR: types, expressions, statements, buffers, programs, validation, wire format.

Build a program from buffers and statements (every builder has a docstring with an example)::

    from vyre.ir import F32, Program, buflen, exp, gid, if_, output, read, store
    x, out = read("x", 0, F32), output("out", 1, F32)
    prog = Program.wrapped([x, out], 256, [if_(gid() < buflen(out), [store(out, gid(), exp(x[gid()]))])])

Buffers: ``read``, ``read_write``, ``output``, ``uniform``, ``workgroup`` (``BufferDecl``'s
constructors). Expressions: literals ``u32 i32 f32 f64 boolean``, ``var``, ids ``gid lid wgid lane``,
``x[i]``/``load``, ``buflen``, operators (``+ - * / // % & | ^ << >> ~ -x abs() < <= > >=``;
``==`` is structural, use ``eq``/``ne``), one builder per op (``exp``, ``maximum``, ``is_nan`` ...),
``select``, ``cast``, ``fma``, atomics (``atomic_add`` ...), subgroup ops (``ballot``, ``shuffle``,
``subgroup_reduce``), ``call``. Statements: ``let assign store if_ loop block region barrier ret``.
``vyre.kernel`` (vyre.frontend) writes the same programs as decorated Python functions.
"""

from .builder import (
    abs_diff, absolute, acos, add, asin, assign, atan, atomic, atomic_add, atomic_and,
    atomic_compare_exchange, atomic_exchange, atomic_max, atomic_min, atomic_or, atomic_xor, ballot,
    barrier, binop, bit_and, bit_not, bit_or, bit_xor, block, boolean, buflen, call, cast, ceil, clz,
    cos, cosh, ctz, div, eq, exp, exp2, f32, f64, fixed_mul, floor, fma, ge, gid, gt, i32, if_,
    inverse_sqrt, is_finite, is_inf, is_nan, lane, le, let, lid, load, log, log2, logical_and,
    logical_not, logical_or, loop, lt, maximum, minimum, mod, mul, ne, negate, popcount, power,
    reciprocal, region, ret, rint, select, shl, shr, shuffle, sign, sin, sinh, sqrt, store,
    stop_gradient, sub, subgroup_reduce, subgroup_size, tan, tanh, trunc, u32, unop, var, wgid,
)
from .builder import abs as abs, max as max, min as min, pow as pow, round as round  # not in __all__
from .expr import (
    EXPR_TYPES, Atomic, BinOp, BufLen, Call, Cast, Expr, ExprLike, Fma, FunctionAdjoint, FunctionDef,
    InvocationId, LitBool, LitF32, LitF64, LitI32, LitU32, Load, LocalId, Select, SubgroupBallot,
    SubgroupLocalId, SubgroupReduce, SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId,
    as_expr, children, static_type, walk,
)
from .functions import inline_expr, inline_nodes, register_function, registered
from .node import (
    NODE_TYPES, Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store, node_children,
    node_exprs, walk_nodes,
)
from .ops import ATOMIC_RULES, BINOP_RULES, SUBGROUP_REDUCE_OPS, UNOP_RULES, AtomicOp, BinOpKind, UnOpKind
from .program import BufferAccess, BufferDecl, Program
from .types import DataType

BOOL, I32, U32, F32, F64 = DataType.BOOL, DataType.I32, DataType.U32, DataType.F32, DataType.F64
read = BufferDecl.read
read_write = BufferDecl.read_write
output = BufferDecl.output
uniform = BufferDecl.uniform
workgroup = BufferDecl.workgroup
storage = BufferDecl.storage

# abs, round, min and max are importable by name but left out of __all__: a star import must not
# shadow Python's built-ins (absolute, rint, minimum and maximum are the same builders).
__all__ = [
    "ATOMIC_RULES", "BINOP_RULES", "BOOL", "EXPR_TYPES", "F32", "F64", "I32", "NODE_TYPES",
    "SUBGROUP_REDUCE_OPS", "U32", "UNOP_RULES", "Assign", "Atomic", "AtomicOp", "Barrier", "BinOp",
    "BinOpKind", "Block", "BufLen", "BufferAccess", "BufferDecl", "Call", "Cast", "DataType",
    "Expr", "ExprLike", "Fma", "FunctionAdjoint", "FunctionDef", "If", "InvocationId", "Let", "LitBool", "LitF32",
    "LitF64", "LitI32", "LitU32", "Load", "LocalId", "Loop", "Node", "Program", "Region", "Return",
    "Select", "Store", "SubgroupBallot", "SubgroupLocalId", "SubgroupReduce", "SubgroupShuffle",
    "SubgroupSize", "UnOp", "UnOpKind", "Var", "WorkgroupId",
    "abs_diff", "absolute", "acos", "add", "as_expr", "asin", "assign", "atan", "atomic",
    "atomic_add", "atomic_and", "atomic_compare_exchange", "atomic_exchange", "atomic_max",
    "atomic_min", "atomic_or", "atomic_xor", "ballot", "barrier", "binop", "bit_and", "bit_not",
    "bit_or", "bit_xor", "block", "boolean", "buflen", "call", "cast", "ceil", "children", "clz",
    "cos", "cosh", "ctz", "div", "eq", "exp", "exp2", "f32", "f64", "fixed_mul", "floor", "fma",
    "ge", "gid", "gt", "i32", "if_", "inline_expr", "inline_nodes", "inverse_sqrt", "is_finite",
    "is_inf", "is_nan", "lane", "le", "let", "lid", "load", "log", "log2", "logical_and",
    "logical_not", "logical_or", "loop", "lt", "maximum", "minimum", "mod", "mul", "ne", "negate",
    "node_children", "node_exprs", "output", "popcount", "power", "read", "read_write", "reciprocal",
    "region", "register_function", "registered", "ret", "rint", "select", "shl", "shr", "shuffle",
    "sign", "sin", "sinh", "sqrt", "static_type", "stop_gradient", "storage", "store", "sub", "subgroup_reduce",
    "subgroup_size", "tan", "tanh", "trunc", "u32", "uniform", "unop", "var", "walk", "walk_nodes",
    "wgid", "workgroup",
]
