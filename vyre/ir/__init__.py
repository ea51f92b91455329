"""vyre's typed IR: types, expressions, statements, buffers, programs, validation, wire format."""

from .builder import (
    assign, atomic, atomic_add, ballot, barrier, binop, block, boolean, buflen, call, cast, cos,
    exp, f32, f64, fixed_mul, fma, gid, i32, if_, lane, let, lid, load, log, loop, maximum,
    minimum, region, ret, select, shuffle, sin, sqrt, store, subgroup_reduce, subgroup_size,
    tanh, u32, unop, var, wgid,
)
from .expr import (
    EXPR_TYPES, Atomic, BinOp, BufLen, Call, Cast, Expr, ExprLike, Fma, FunctionDef,
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

__all__ = [
    "ATOMIC_RULES", "BINOP_RULES", "BOOL", "EXPR_TYPES", "F32", "F64", "I32", "NODE_TYPES",
    "SUBGROUP_REDUCE_OPS", "U32", "UNOP_RULES", "Assign", "Atomic", "AtomicOp", "Barrier", "BinOp",
    "BinOpKind", "Block", "BufLen", "BufferAccess", "BufferDecl", "Call", "Cast", "DataType",
    "Expr", "ExprLike", "Fma", "FunctionDef", "If", "InvocationId", "Let", "LitBool", "LitF32",
    "LitF64", "LitI32", "LitU32", "Load", "LocalId", "Loop", "Node", "Program", "Region", "Return",
    "Select", "Store", "SubgroupBallot", "SubgroupLocalId", "SubgroupReduce", "SubgroupShuffle",
    "SubgroupSize", "UnOp", "UnOpKind", "Var", "WorkgroupId", "as_expr", "assign", "atomic",
    "atomic_add", "ballot", "barrier", "binop", "block", "boolean", "buflen", "call", "cast",
    "children", "cos", "exp", "f32", "f64", "fixed_mul", "fma", "gid", "i32", "if_",
    "inline_expr", "inline_nodes", "lane", "let", "lid", "load", "log", "loop", "maximum",
    "minimum", "node_children", "node_exprs", "output", "read", "read_write", "region",
    "register_function", "registered", "ret", "select", "shuffle", "sin", "sqrt", "static_type",
    "storage", "store", "subgroup_reduce", "subgroup_size", "tanh", "u32", "uniform", "unop",
    "var", "walk", "walk_nodes", "wgid", "workgroup",
]
