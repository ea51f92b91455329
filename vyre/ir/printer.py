"""The text form of a program: readable, line-oriented, and parsed back exactly by
:func:`vyre.ir.parser.parse_program` (``parse_program(str(p)) == p`` for every program).

::

    program wg(64, 1, 1) {
      buffer x: f32 read @0
      buffer out: f32 read_write output @1 [count 4]
      buffer tile: f32 workgroup [count 64]
      fn sq(a: f32) -> f32 = (a * a)
      let i = gid(0)
      if (i < len(out)) {
        out[i] = (x[i] * 2.0f32)
      } else {
        return
      }
      for j in 0u32 .. 4u32 {
        barrier
      }
    }

Spelling:

- literals carry their type: ``true``, ``-3i32``, ``7u32``, ``1.5f32``, ``-0.0f64``. A float prints as
  its shortest decimal when that parses back to the same bits, else (NaN, inf, the rare double
  rounding case) as its bit pattern: ``f32(bits=0x7fc00001)``;
- binary ops with a symbol (``BINOP_SYMBOL``) print infix and always parenthesised: ``(a + b)``;
  the others as calls: ``min(a, b)``, ``max``, ``abs_diff``, ``fixed_mul``;
- unary ops as calls named after the op: ``negate(x)``, ``sqrt(x)``, ``is_nan(x)`` ...;
- ``f32(x)`` is a cast; ``select(c, a, b)``, ``fma(a, b, c)``, ``x[i]``, ``len(x)``, ``gid(0)``,
  ``lid(1)``, ``wgid(2)``, ``lane()``, ``subgroup_size()``, ``ballot(c)``, ``shuffle(v, l)``,
  ``subgroup_reduce(add, v)``, ``atomic_add(buf, i, v)``,
  ``atomic_compare_exchange(buf, i, v, expected=e)``, ``sq(a, b)`` (a program function);
- statements: ``let x = e``, ``x = e``, ``buf[i] = e``, ``if c { } else { }``,
  ``for i in a .. b { }``, ``block { }``, ``region "label" { }``, ``barrier``, ``return``.

A name that is not a plain identifier, or that is a keyword (or, for a function, a built-in call
name), prints between backticks with backslash escapes: ``\\`let\\```, ``\\`min\\`(a, b)``. Every
walk here is iterative, so deep programs print without recursion.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import numpy as np

from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, FunctionDef, InvocationId, LitBool, LitF32,
    LitF64, LitI32, LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId, f32_bits, f64_bits,
)
from .node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store
from .ops import BINOP_SYMBOL, AtomicOp, BinOpKind, UnOpKind
from .program import BufferAccess, BufferDecl, Program
from .types import DataType

__all__ = ["print_expr", "print_function", "print_program", "print_statements"]

# ---- spellings shared with the parser ---------------------------------------------------------

ACCESS_NAME: dict[BufferAccess, str] = {
    BufferAccess.READ_ONLY: "read",
    BufferAccess.READ_WRITE: "read_write",
    BufferAccess.UNIFORM: "uniform",
    BufferAccess.WRITE_ONLY: "write_only",
    BufferAccess.WORKGROUP: "workgroup",
}
UNOP_NAME: dict[UnOpKind, str] = {k: k.name.lower() for k in UnOpKind}
BINOP_CALL: dict[BinOpKind, str] = {
    k: ("fixed_mul" if k is BinOpKind.FIXED_MUL_Q16 else k.name.lower())
    for k in BinOpKind if k not in BINOP_SYMBOL
}
REDUCE_OP_NAME: dict[BinOpKind, str] = {k: k.name.lower() for k in BinOpKind}
ATOMIC_NAME: dict[AtomicOp, str] = {k: "atomic_" + k.name.lower() for k in AtomicOp}
ID_NAME: dict[type, str] = {InvocationId: "gid", LocalId: "lid", WorkgroupId: "wgid"}
TYPE_NAMES: frozenset[str] = frozenset(t.short for t in DataType)

# Words that start a statement or are literals: never printed bare as a name.
KEYWORDS: frozenset[str] = frozenset({
    "let", "if", "else", "for", "block", "region", "barrier", "return", "buffer", "fn",
    "true", "false", "nograd",
})
# Built-in call names: a program function with one of these names prints between backticks.
CALL_HEADS: frozenset[str] = frozenset({
    *UNOP_NAME.values(), *BINOP_CALL.values(), *ATOMIC_NAME.values(), *ID_NAME.values(),
    *TYPE_NAMES, "len", "lane", "subgroup_size", "select", "fma", "ballot", "shuffle",
    "subgroup_reduce",
})

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Decimal float spellings the parser's number token accepts (checked before use).
FLOAT_TEXT = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


def quote(text: str, delim: str) -> str:
    """``text`` between ``delim`` quotes; backslash, the quote and non-printable-ASCII characters
    escaped (``\\\\``, ``\\"``, ``\\u{e9}``)."""
    out = [delim]
    for ch in text:
        if ch == "\\" or ch == delim:
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append(f"\\u{{{ord(ch):x}}}")
    out.append(delim)
    return "".join(out)


def name_text(name: str, call: bool = False) -> str:
    """A name as printed: bare when it is a plain identifier and no keyword, else backticked."""
    if not isinstance(name, str):
        raise TypeError(f"cannot print a name of type {type(name).__name__}; expected str")
    if _PLAIN.fullmatch(name) and name not in KEYWORDS and not (call and name in CALL_HEADS):
        return name
    return quote(name, "`")


def f32_text(bits: int) -> str:
    v = float(np.frombuffer(int(bits).to_bytes(4, "little"), dtype=np.float32)[0])
    if math.isfinite(v):
        s = str(np.float32(v))  # numpy's shortest decimal that identifies the f32
        if FLOAT_TEXT.fullmatch(s) and f32_bits(float(s)) == bits:
            return s + "f32"
    return f"f32(bits={bits:#010x})"


def f64_text(bits: int) -> str:
    v = float(np.frombuffer(int(bits).to_bytes(8, "little"), dtype=np.float64)[0])
    if math.isfinite(v):
        s = repr(v)
        if FLOAT_TEXT.fullmatch(s) and f64_bits(float(s)) == bits:
            return s + "f64"
    return f"f64(bits={bits:#018x})"


# ---- expressions --------------------------------------------------------------------------------

_Piece = str | tuple[Expr]


def _pieces(e: Expr) -> list[_Piece]:
    """Text and sub-expressions (1-tuples) that spell ``e``, left to right."""
    match e:
        case LitBool(v):
            return ["true" if v else "false"]
        case LitI32(v):
            return [f"{v}i32"]
        case LitU32(v):
            return [f"{v}u32"]
        case LitF32(bits=b):
            return [f32_text(b)]
        case LitF64(bits=b):
            return [f64_text(b)]
        case Var(n):
            return [name_text(n)]
        case Load(buf, index):
            return [name_text(buf) + "[", (index,), "]"]
        case BufLen(buf):
            return [f"len({name_text(buf)})"]
        case InvocationId(axis) | WorkgroupId(axis) | LocalId(axis):
            return [f"{ID_NAME[type(e)]}({int(axis)})"]
        case SubgroupLocalId():
            return ["lane()"]
        case SubgroupSize():
            return ["subgroup_size()"]
        case BinOp(op, left, right):
            sym = BINOP_SYMBOL.get(op)
            if sym is not None:
                return ["(", (left,), f" {sym} ", (right,), ")"]
            return [BINOP_CALL[op] + "(", (left,), ", ", (right,), ")"]
        case UnOp(op, operand):
            return [UNOP_NAME[op] + "(", (operand,), ")"]
        case Select(cond, a, b):
            return ["select(", (cond,), ", ", (a,), ", ", (b,), ")"]
        case Cast(target, value):
            return [target.short + "(", (value,), ")"]
        case Fma(a, b, c):
            return ["fma(", (a,), ", ", (b,), ", ", (c,), ")"]
        case Atomic(op, buf, index, value, expected):
            tail: list[_Piece] = [] if expected is None else [", expected=", (expected,)]
            return [f"{ATOMIC_NAME[op]}({name_text(buf)}, ", (index,), ", ", (value,), *tail, ")"]
        case SubgroupBallot(cond):
            return ["ballot(", (cond,), ")"]
        case SubgroupShuffle(value, lane):
            return ["shuffle(", (value,), ", ", (lane,), ")"]
        case SubgroupReduce(op, value):
            return [f"subgroup_reduce({REDUCE_OP_NAME[op]}, ", (value,), ")"]
        case Call(op_id, args):
            out: list[_Piece] = [name_text(op_id, call=True) + "("]
            for i, a in enumerate(args):
                out += [", ", (a,)] if i else [(a,)]
            return [*out, ")"]
        case _:
            raise TypeError(f"cannot print {type(e).__name__}: not a vyre expression")


def print_expr(e: Expr) -> str:
    """The text of one expression (iterative: any depth)."""
    out: list[str] = []
    stack: list[_Piece] = [(e,)]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            out.append(x)
        else:
            stack.extend(reversed(_pieces(x[0])))
    return "".join(out)


# ---- statements and programs --------------------------------------------------------------------

_Item = str | tuple[int, Node]


def _braced(head: str, body: Iterable[Node], depth: int, close: str) -> list[_Item]:
    items = [(depth + 1, n) for n in body]
    if not items:
        return [f"{head} {{ }}{close}"]
    return [f"{head} {{", *items, "  " * depth + "}" + close]


def _node_items(n: Node, depth: int) -> list[_Item]:
    pad = "  " * depth
    match n:
        case Let(name, value):
            return [f"{pad}let {name_text(name)} = {print_expr(value)}"]
        case Assign(name, value):
            return [f"{pad}{name_text(name)} = {print_expr(value)}"]
        case Store(buf, index, value):
            return [f"{pad}{name_text(buf)}[{print_expr(index)}] = {print_expr(value)}"]
        case If(cond, then, otherwise):
            head = f"{pad}if {print_expr(cond)}"
            if not otherwise:
                return _braced(head, then, depth, "")
            return [*_braced(head, then, depth, " else {"), *[(depth + 1, x) for x in otherwise],
                    pad + "}"]
        case Loop(var, start, end, body):
            head = f"{pad}for {name_text(var)} in {print_expr(start)} .. {print_expr(end)}"
            return _braced(head, body, depth, "")
        case Block(body):
            return _braced(f"{pad}block", body, depth, "")
        case Region(generator, body):
            if not isinstance(generator, str):
                raise TypeError(f"cannot print a Region label of type {type(generator).__name__}")
            label = quote(generator, '"')
            return _braced(f"{pad}region {label}", body, depth, "")
        case Barrier():
            return [f"{pad}barrier"]
        case Return():
            return [f"{pad}return"]
        case _:
            raise TypeError(f"cannot print {type(n).__name__}: not a vyre statement")


def _statement_lines(body: Iterable[Node], depth: int, out: list[str]) -> None:
    stack: list[_Item] = [(depth, n) for n in reversed(tuple(body))]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            out.append(x)
        else:
            stack.extend(reversed(_node_items(x[1], x[0])))


def print_statements(body: Iterable[Node], depth: int = 0) -> str:
    """The text of a statement list, indented two spaces per ``depth``."""
    out: list[str] = []
    _statement_lines(body, depth, out)
    return "\n".join(out)


def _buffer_line(b: BufferDecl) -> str:
    parts = [f"buffer {name_text(b.name)}: {b.element.short} {ACCESS_NAME[b.access]}"]
    if b.is_output:
        parts.append("output")
    if not b.is_workgroup or b.binding != 0:
        parts.append(f"@{int(b.binding)}")
    if b.count != 0:
        parts.append(f"[count {int(b.count)}]")
    return " ".join(parts)


def print_function(fn: FunctionDef) -> str:
    """``fn name(a: f32, b: f32) -> f32 = body``, then, for a custom adjoint,
    `` vjp(r, g) = [grad of a, nograd]`` (``nograd`` where a parameter takes none)."""
    params = ", ".join(f"{name_text(p)}: {t.short}" for p, t in fn.params)
    head = f"fn {name_text(fn.op_id, call=True)}({params}) -> {fn.result.short} = {print_expr(fn.body)}"
    if fn.adjoint is None:
        return head
    adj = fn.adjoint
    grads = ", ".join("nograd" if g is None else print_expr(g) for g in adj.grads)
    return f"{head} vjp({name_text(adj.result)}, {name_text(adj.cotangent)}) = [{grads}]"


def print_program(program: Program) -> str:
    """The text of ``program`` (no trailing newline); ``str(program)`` calls this."""
    wg = ", ".join(str(int(v)) for v in program.workgroup_size)
    lines = [f"program wg({wg}) {{"]
    lines += ["  " + _buffer_line(b) for b in program.buffers]
    lines += ["  " + print_function(f) for f in program.functions]
    _statement_lines(program.entry, 1, lines)
    lines.append("}")
    return "\n".join(lines)
