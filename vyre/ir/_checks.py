"""Tables and small helpers behind :mod:`vyre.ir.validate` (limits, field kinds, measuring,
message text). Private: import from ``vyre.ir.validate``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import assert_never

from .expr import (
    I32_MAX, I32_MIN, U32_MAX, Atomic, BinOp, BufLen, Call, Cast, Fma, FunctionDef, InvocationId,
    LitBool, LitF32, LitF64, LitI32, LitU32, Load, LocalId, Select, SubgroupBallot,
    SubgroupLocalId, SubgroupReduce, SubgroupShuffle, SubgroupSize, UnOp, WorkgroupId,
)
from .ops import BINOP_SYMBOL, AtomicOp, BinOpKind, UnOpKind
from .program import BufferAccess
from .schema import EXPR_FIELDS, NODE_FIELDS, F
from .types import DataType

MAX_NAME = 64
MAX_LABEL = 128
MAX_NEST = 64
MAX_EXPR_DEPTH = 128
MAX_NODES = 200_000
MAX_BUFFERS = 64
MAX_INVOCATIONS = 1024
MAX_WORKGROUP_BYTES = 48 * 1024
SUBGROUP_SIZE = 32
# Stable diagnostic codes (documented in docs/errors.md); never reuse a retired one.
CODES: dict[str, str] = {
    "V001": "a value of the wrong Python type (not a statement, expression, op enum, ...)",
    "V002": "a name that is not an identifier of at most 64 characters",
    "V003": "a Region.generator label that is not short printable ASCII without quotes",
    "V004": "two buffers with the same name",
    "V005": "two storage buffers with the same binding",
    "V006": "a binding outside [0, 2^32)",
    "V007": "a reference to an undeclared buffer",
    "V008": "a read of an undeclared variable",
    "V009": "an Assign to an undeclared variable",
    "V010": "an Assign to a loop variable",
    "V011": "a second Let of one name in one scope",
    "V012": "a loop variable that clashes with a name in the same scope",
    "V013": "binary operands of different types",
    "V014": "an operator applied to a type it does not accept",
    "V015": "a Select condition that is not bool",
    "V016": "Select arms of different types",
    "V017": "Fma operands that are not all the same float type",
    "V018": "a buffer index that is not u32",
    "V019": "a loop bound that is not u32",
    "V020": "an If condition that is not bool",
    "V021": "an Assign whose value type differs from the variable's type",
    "V022": "a Store whose value type differs from the buffer's element type",
    "V023": "an Atomic value or expected value whose type differs from the element type",
    "V024": "an Atomic op that the element type does not support",
    "V025": "an Atomic `expected` present on an op other than COMPARE_EXCHANGE, or missing on it",
    "V026": "a SubgroupBallot condition that is not bool",
    "V027": "a SubgroupShuffle lane that is not u32",
    "V028": "a SubgroupReduce op that is not a subgroup reduction or does not accept the type",
    "V030": "an Atomic that is not the whole value of a Let",
    "V031": "a subgroup op that is not the whole value of a Let",
    "V032": "a subgroup op at a non-uniform point",
    "V033": "a Barrier at a non-uniform point",
    "V034": "a Return at a non-uniform point in a program that uses barriers or subgroup ops",
    "V035": "subgroup ops with a workgroup size that is not a multiple of 32",
    "V040": "a Call of a function the program does not carry",
    "V041": "a Call with the wrong number of arguments",
    "V042": "a Call argument whose type differs from the parameter's type",
    "V043": "a function body that loads, uses atomics, subgroup ops, ids or BufLen",
    "V044": "a function body that reads a name that is not one of its parameters",
    "V045": "functions that call themselves, directly or through others",
    "V046": "a function body whose type differs from the declared result",
    "V047": "two functions with one op_id, or two parameters with one name",
    "V050": "a Store to a buffer that is not writable",
    "V051": "an Atomic on a buffer that is not READ_WRITE or WORKGROUP",
    "V052": "a Load from a WRITE_ONLY buffer",
    "V053": "a workgroup buffer without a positive count",
    "V054": "workgroup buffers totalling more than 48 KiB",
    "V055": "is_output on a buffer that is not a writable storage buffer",
    "V056": "a storage buffer count outside [0, 2^32)",
    "V060": "a workgroup size that is not three ints each >= 1",
    "V061": "more than 1024 invocations per workgroup",
    "V062": "an id axis outside {0, 1, 2}",
    "V063": "statements nested deeper than 64",
    "V064": "an expression deeper than 128",
    "V065": "more than 200 000 statements and expressions in all",
    "V066": "more than 64 buffers",
    "V067": "a function's custom adjoint that does not fit its signature (grads per parameter, names, types)",
}

SHOWN = 40  # at most this many characters of a (possibly hostile) name go into a message


# The field tables (EXPR_FIELDS, NODE_FIELDS) and their kinds (F) live in vyre/ir/schema.py.


# Expressions a function body may not use: calls are inlined anywhere, so bodies must be pure
# functions of their parameters.
FN_FORBIDDEN: tuple[type, ...] = (
    Load, BufLen, InvocationId, WorkgroupId, LocalId, SubgroupLocalId, SubgroupSize, Atomic,
    SubgroupBallot, SubgroupShuffle, SubgroupReduce,
)

# Expression kinds that keep an expression uniform when all their operands are (Var is decided
# by its binding). Fma and Call are pure functions of their operands, so they qualify too.
UNIFORM_KINDS: frozenset[type] = frozenset({
    LitBool, LitI32, LitU32, LitF32, LitF64, BufLen, WorkgroupId, SubgroupSize, Cast, BinOp, UnOp,
    Select, Fma, Call,
})

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_identifier(name: object) -> bool:
    """``[A-Za-z_][A-Za-z0-9_]*``, at most 64 characters (names reach generated source)."""
    return isinstance(name, str) and len(name) <= MAX_NAME and _IDENT.fullmatch(name) is not None


def is_label(text: object) -> bool:
    """Printable ASCII without quotes or backslashes, at most 128 characters."""
    return (isinstance(text, str) and len(text) <= MAX_LABEL
            and all(" " <= ch <= "~" and ch not in "\"'\\" for ch in text))


def scalar_ok(kind: F, v: object) -> bool:
    match kind:
        case F.EXPR | F.OPT_EXPR:
            return True  # checked when the sub-expression is visited
        case F.EXPRS | F.NODES:
            return isinstance(v, tuple)
        case F.NAME | F.LABEL:
            return isinstance(v, str)
        case F.AXIS | F.INT:
            return type(v) is int
        case F.BOOL:
            return type(v) is bool
        case F.BINOP:
            return isinstance(v, BinOpKind)
        case F.UNOP:
            return isinstance(v, UnOpKind)
        case F.ATOMIC:
            return isinstance(v, AtomicOp)
        case F.DTYPE:
            return isinstance(v, DataType)
        case F.ACCESS:
            return isinstance(v, BufferAccess)
        case F.I32:
            return type(v) is int and I32_MIN <= v <= I32_MAX
        case F.U32:
            return type(v) is int and 0 <= v <= U32_MAX
        case F.BITS32:
            return type(v) is int and 0 <= v < 2**32
        case F.BITS64:
            return type(v) is int and 0 <= v < 2**64
        case _:
            assert_never(kind)


def kids(x: object) -> list[object]:
    """Sub-expressions and nested statements of ``x`` (anything else has none). Never raises."""
    spec = EXPR_FIELDS.get(type(x))
    if spec is None:
        spec = NODE_FIELDS.get(type(x))
    if spec is None:
        return [getattr(x, "body", None)] if type(x) is FunctionDef else []
    out: list[object] = []
    for name, kind in spec:
        v = getattr(x, name, None)
        if kind is F.EXPR or (kind is F.OPT_EXPR and v is not None):
            out.append(v)
        elif kind in (F.EXPRS, F.NODES) and isinstance(v, tuple):
            out.extend(v)
    return out


_HUGE = 1 << 62


def measure(root: object, memo: dict[int, tuple[int, int, int]]) -> tuple[int, int, int]:
    """``(tree size, expression depth, statement nesting)`` of ``root``, iteratively.

    Memoised by object identity, so a sub-tree shared many times (a DAG of frozen dataclasses)
    is measured once while still counting once per use; a reference cycle measures as huge."""
    k0 = id(root)
    if k0 in memo:
        return memo[k0]
    stack: list[tuple[object, list[object] | None]] = [(root, None)]
    busy: set[int] = set()
    while stack:
        x, ks = stack[-1]
        k = id(x)
        if ks is None:
            if k in memo:
                stack.pop()
            elif k in busy:
                memo[k] = (_HUGE, _HUGE, _HUGE)
                stack.pop()
            else:
                busy.add(k)
                ks = kids(x)
                stack[-1] = (x, ks)
                stack.extend((c, None) for c in ks if id(c) not in memo)
            continue
        stack.pop()
        busy.discard(k)
        if k in memo:
            continue
        size, ed, nd = 1, 0, 0
        for c in ks:
            s, d, n = memo[id(c)]
            size, ed, nd = size + s, max(ed, d), max(nd, n)
        if type(x) in NODE_FIELDS:
            memo[k] = (min(size, _HUGE), ed, min(nd + 1, _HUGE))
        else:
            memo[k] = (min(size, _HUGE), min(ed + 1, _HUGE), nd)
    return memo[k0]


def strongly_connected(graph: Mapping[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (edges must point into ``graph``)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    st: list[str] = []
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        st.append(root)
        on.add(root)
        work = [(root, 0)]
        while work:
            v, i = work[-1]
            edges = graph[v]
            if i < len(edges):
                work[-1] = (v, i + 1)
                w = edges[i]
                if w not in index:
                    index[w] = low[w] = len(index)
                    st.append(w)
                    on.add(w)
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp: list[str] = []
                while True:
                    w = st.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp[::-1])
    return out


# ---- message text -----------------------------------------------------------------------------


def show(x: object) -> str:
    """A short, safe rendering of a name for a message (at most ~40 characters of it)."""
    if isinstance(x, str):
        r = repr(x[:SHOWN])
        return r if len(x) <= SHOWN and len(r) <= SHOWN + 2 else r[:SHOWN] + "..."
    return describe(x)


def describe(x: object) -> str:
    """What ``x`` is, without ever printing a (possibly huge or deep) IR object."""
    if x is None:
        return "None"
    tn = type(x).__name__[:SHOWN]
    if isinstance(x, str):
        return f"a str ({show(x)})"
    if isinstance(x, (bool, int, float)):
        r = repr(x)
        return f"a {tn} ({r[:SHOWN]}{'...' if len(r) > SHOWN else ''})"
    if type(x) in EXPR_FIELDS:
        return f"a {tn} expression"
    if type(x) in NODE_FIELDS:
        return f"a {tn} statement"
    if isinstance(x, (tuple, list)):
        return f"a {tn} of {len(x)} item(s)"
    return f"a {tn} object"


def binop_name(op: BinOpKind) -> str:
    return BINOP_SYMBOL.get(op, op.name.lower())


def types_text(ts: tuple[DataType, ...]) -> str:
    names = [t.short for t in ts]
    return names[0] if len(names) == 1 else "one of " + ", ".join(names)


_LITERALS = (LitBool, LitI32, LitU32, LitF32, LitF64)


def literal_text(e: object) -> str | None:
    """The printer's spelling of a literal (``1u32``, ``-3i32``, ``1.5f32``), None otherwise."""
    match e:
        case LitBool(v):
            return "true" if v else "false"
        case LitI32(v):
            return f"{v}i32"
        case LitU32(v):
            return f"{v}u32"
        case LitF32() | LitF64():
            return f"{e.value!r}{'f32' if isinstance(e, LitF32) else 'f64'}"
        case _:
            return None


def typed(t: DataType, e: object) -> str:
    """``u32``, or ``u32 (the literal 1u32)`` when ``e`` is a literal."""
    lt = literal_text(e)
    return t.short if lt is None else f"{t.short} (the literal {lt})"


def _builder_literal(e: object, want: DataType) -> str | None:
    """How to write the literal ``e`` as a ``want`` literal with the builders, if it fits."""
    if not isinstance(e, _LITERALS):
        return None
    v = e.value
    match want:
        case DataType.BOOL:
            return f"boolean({v})" if isinstance(v, bool) else None
        case DataType.I32 | DataType.U32:
            if isinstance(v, bool) or (isinstance(v, float) and not (math.isfinite(v) and v.is_integer())):
                return None
            n = int(v)
            lo, hi = (I32_MIN, I32_MAX) if want is DataType.I32 else (0, U32_MAX)
            return f"{want.short}({n})" if lo <= n <= hi else None
        case DataType.F32 | DataType.F64:
            return None if isinstance(v, bool) else f"{want.short}({float(v)!r})"
        case _:
            assert_never(want)


def convert_fix(e: object, want: DataType) -> str:
    """The ``Fix:`` text for an operand ``e`` that should have type ``want``."""
    lit = _builder_literal(e, want)
    if lit is not None:
        return f"write {lit} instead of the literal {literal_text(e)}"
    return f"convert it with cast({want.name}, ...)"
