"""The Python objects a kernel body may call, and what each lowers to.

A call is resolved by *identity*: ``vyre.exp``, ``from vyre import exp``, ``vyre.ir.exp`` and
``math.exp`` are the same intrinsic however they are imported. The builders of :mod:`vyre.ir` are
the intrinsics (so ``vyre.exp(x[i])`` in a kernel means what ``exp(x[i])`` builds); a few Python
built-ins (``len abs min max round float int bool range``) and :mod:`math` functions map too.
"""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import builder as b
from ..ir.ops import AtomicOp, BinOpKind, UnOpKind
from ..ir.printer import ATOMIC_NAME, BINOP_CALL, UNOP_NAME
from ..ir.types import DataType
from .markers import workgroup_array


@dataclass(frozen=True)
class Intrinsic:
    """``kind`` says how the lowering treats the call; ``op`` is its op enum or payload."""

    kind: str
    op: Any
    name: str


SCALAR_TYPES: dict[int, DataType] = {}
INTRINSICS: dict[int, Intrinsic] = {}
_KEEP: list[Any] = []  # the keys are ids: keep the objects alive


def _add(obj: Any, kind: str, op: Any, name: str) -> None:
    _KEEP.append(obj)
    INTRINSICS[id(obj)] = Intrinsic(kind, op, name)


_SYMBOL_BUILDER = {
    BinOpKind.ADD: "add", BinOpKind.SUB: "sub", BinOpKind.MUL: "mul", BinOpKind.DIV: "div",
    BinOpKind.MOD: "mod", BinOpKind.BIT_AND: "bit_and", BinOpKind.BIT_OR: "bit_or",
    BinOpKind.BIT_XOR: "bit_xor", BinOpKind.SHL: "shl", BinOpKind.SHR: "shr", BinOpKind.EQ: "eq",
    BinOpKind.NE: "ne", BinOpKind.LT: "lt", BinOpKind.GT: "gt", BinOpKind.LE: "le",
    BinOpKind.GE: "ge", BinOpKind.AND: "logical_and", BinOpKind.OR: "logical_or",
}

for _k in UnOpKind:
    _f = getattr(b, UNOP_NAME[_k], None)
    if _f is not None:
        _add(_f, "unop", _k, UNOP_NAME[_k])
for _bk in BinOpKind:
    _n = BINOP_CALL.get(_bk) or _SYMBOL_BUILDER.get(_bk)
    _f = getattr(b, _n, None) if _n else None
    if _f is not None:
        _add(_f, "binop", _bk, _n or "")
for _a in AtomicOp:
    _add(getattr(b, ATOMIC_NAME[_a]), "atomic", _a, ATOMIC_NAME[_a])
_add(b.atomic, "atomic_any", None, "atomic")
for _name, _t in (("u32", DataType.U32), ("i32", DataType.I32), ("f32", DataType.F32),
                  ("f64", DataType.F64), ("boolean", DataType.BOOL)):
    _add(getattr(b, _name), "cast", _t, _name)
    SCALAR_TYPES[id(getattr(b, _name))] = _t
for _t in DataType:
    SCALAR_TYPES[id(_t)] = _t
for _np, _t in ((np.float32, DataType.F32), (np.float64, DataType.F64), (np.int32, DataType.I32),
                (np.uint32, DataType.U32), (np.bool_, DataType.BOOL)):
    SCALAR_TYPES[id(_np)] = _t
    _KEEP.append(_np)
_add(builtins.float, "cast", DataType.F32, "float")
_add(builtins.int, "cast", DataType.I32, "int")
_add(builtins.bool, "cast", DataType.BOOL, "bool")
_add(b.cast, "cast_to", None, "cast")
_add(builtins.abs, "unop", UnOpKind.ABS, "abs")
_add(builtins.round, "round", UnOpKind.ROUND, "round")
_add(builtins.min, "minmax", BinOpKind.MIN, "min")
_add(builtins.max, "minmax", BinOpKind.MAX, "max")
_add(builtins.len, "len", None, "len")
_add(builtins.pow, "binop", BinOpKind.POW, "pow")
_add(math.pow, "binop", BinOpKind.POW, "math.pow")
_add(b.buflen, "len", None, "buflen")
_add(b.load, "load", None, "load")
_add(b.gid, "id", b.gid, "gid")
_add(b.lid, "id", b.lid, "lid")
_add(b.wgid, "id", b.wgid, "wgid")
_add(b.lane, "nullary", b.lane, "lane")
_add(b.subgroup_size, "nullary", b.subgroup_size, "subgroup_size")
_add(b.select, "select", None, "select")
_add(b.fma, "fma", None, "fma")
_add(b.ballot, "ballot", None, "ballot")
_add(b.shuffle, "shuffle", None, "shuffle")
_add(b.subgroup_reduce, "subgroup_reduce", None, "subgroup_reduce")
_add(b.barrier, "barrier", None, "barrier")
_add(workgroup_array, "workgroup_array", None, "workgroup_array")
_add(builtins.range, "range", None, "range")
for _name, _k in (("exp", UnOpKind.EXP), ("log", UnOpKind.LOG), ("log2", UnOpKind.LOG2),
                  ("sqrt", UnOpKind.SQRT), ("sin", UnOpKind.SIN), ("cos", UnOpKind.COS),
                  ("tan", UnOpKind.TAN), ("asin", UnOpKind.ASIN), ("acos", UnOpKind.ACOS),
                  ("atan", UnOpKind.ATAN), ("sinh", UnOpKind.SINH), ("cosh", UnOpKind.COSH),
                  ("tanh", UnOpKind.TANH), ("fabs", UnOpKind.ABS), ("isnan", UnOpKind.IS_NAN),
                  ("isinf", UnOpKind.IS_INF), ("isfinite", UnOpKind.IS_FINITE)):
    _add(getattr(math, _name), "unop", _k, f"math.{_name}")
if hasattr(math, "exp2"):
    _add(math.exp2, "unop", UnOpKind.EXP2, "math.exp2")

# Built-ins with no IR meaning, and what to write instead.
REJECTED_CALLS: dict[int, tuple[str, str]] = {}
for _obj, _why, _fix in (
    (builtins.print, "print() has no IR meaning (nothing runs as Python on the device)",
     "remove it; write values to an output buffer to inspect them"),
    (builtins.sum, "sum() over a Python iterable has no IR meaning",
     "accumulate in a loop: acc = 0.0; for k in range(n): acc += x[k]"),
    (builtins.list, "lists have no IR meaning", "use an Array parameter or vyre.workgroup_array"),
    (builtins.tuple, "tuples have no IR meaning", "use separate locals"),
    (builtins.dict, "dicts have no IR meaning", "use separate locals or buffers"),
    (builtins.enumerate, "only `for k in range(...)` loops exist in the IR", "write for k in range(len(x)):"),
    (builtins.zip, "only `for k in range(...)` loops exist in the IR", "write for k in range(n): and index"),
    (builtins.isinstance, "isinstance() has no IR meaning: kernel values have fixed types",
     "remove the check"),
):
    _KEEP.append(_obj)
    REJECTED_CALLS[id(_obj)] = (_why, _fix)
