"""Parse the text form of a program (see :mod:`vyre.ir.printer` for the syntax).

``parse_program(str(p)) == p`` for every program. The parser checks syntax only: the program it
returns may still be invalid (``Program.validate()`` says why). Errors raise
:class:`vyre.errors.ParseError` with ``line:column``, the source line, a caret under the column,
and a ``Fix:``. Parsing is iterative (explicit stacks for nested statements and expressions), so
deep input cannot exhaust Python's recursion limit. Newlines are not significant; ``#`` starts
a comment that runs to the end of the line.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from ..errors import ParseError
from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, FunctionAdjoint, FunctionDef, InvocationId, LitBool, LitF32,
    LitF64, LitI32, LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId,
)
from .node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store
from .ops import BINOP_SYMBOL, AtomicOp, BinOpKind, UnOpKind
from .printer import (
    ACCESS_NAME, ATOMIC_NAME, BINOP_CALL, CALL_HEADS, KEYWORDS, REDUCE_OP_NAME, TYPE_NAMES, UNOP_NAME,
)
from .program import BufferAccess, BufferDecl, Program
from .types import DataType

__all__ = ["parse_expr", "parse_program"]

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+|\#[^\n]*)
  | (?P<num>-?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:i32|u32|f32|f64)?))
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<qname>`(?:[^`\\\n]|\\.)*`)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<op>\.\.|<<|>>|==|!=|<=|>=|&&|\|\||->|[-+*/%&|^<>=(){}\[\],:@])
""", re.VERBOSE)

_SYMBOL_OP: dict[str, BinOpKind] = {s: k for k, s in BINOP_SYMBOL.items()}
_ACCESS: dict[str, BufferAccess] = {s: k for k, s in ACCESS_NAME.items()}
_REDUCE_OP: dict[str, BinOpKind] = {s: k for k, s in REDUCE_OP_NAME.items()}
_ID_CLASS: dict[str, type[InvocationId] | type[LocalId] | type[WorkgroupId]] = {
    "gid": InvocationId, "lid": LocalId, "wgid": WorkgroupId,
}
_ESCAPE = re.compile(r"\\(u\{([0-9a-fA-F]{1,6})\}|.)")

# Built-in calls whose arguments are all expressions: name -> (arity, builder).
_Build = Callable[[list[Expr]], Expr]
_CALLS: dict[str, tuple[int, _Build]] = {
    "select": (3, lambda a: Select(a[0], a[1], a[2])),
    "fma": (3, lambda a: Fma(a[0], a[1], a[2])),
    "ballot": (1, lambda a: SubgroupBallot(a[0])),
    "shuffle": (2, lambda a: SubgroupShuffle(a[0], a[1])),
}


def _unop(op: UnOpKind) -> _Build:
    return lambda a: UnOp(op, a[0])


def _binop(op: BinOpKind) -> _Build:
    return lambda a: BinOp(op, a[0], a[1])


def _cast(t: DataType) -> _Build:
    return lambda a: Cast(t, a[0])


def _reduce(op: BinOpKind) -> _Build:
    return lambda a: SubgroupReduce(op, a[0])


def _atomic(op: AtomicOp, buf: str) -> _Build:
    return lambda a: Atomic(op, buf, a[0], a[1], a[2] if len(a) > 2 else None)


_CALLS.update({s: (1, _unop(k)) for k, s in UNOP_NAME.items()})
_CALLS.update({s: (2, _binop(k)) for k, s in BINOP_CALL.items()})
_CALLS.update({t.short: (1, _cast(t)) for t in DataType})
_ATOMIC: dict[str, AtomicOp] = {s: k for k, s in ATOMIC_NAME.items()}


@dataclass(slots=True)
class _Tok:
    kind: str
    text: str
    pos: int


@dataclass(slots=True)
class _Frame:
    """A partly parsed expression waiting for sub-expressions."""

    kind: str  # "infix", "call", "user", "atomic", "load"
    pos: int
    build: _Build | None = None
    arity: int = 0
    name: str = ""
    op: BinOpKind | None = None
    args: list[Expr] = field(default_factory=list)


@dataclass(slots=True)
class _Open:
    """A statement whose ``{ ... }`` body is being parsed."""

    kind: str  # "program", "then", "else", "for", "block", "region"
    items: list[Node]
    head: tuple[object, ...] = ()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.toks: list[_Tok] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                self.fail(pos, f"unexpected character {text[pos]!r}",
                          "remove it; names are [A-Za-z_][A-Za-z0-9_]* or `quoted`")
            kind = m.lastgroup or ""
            if kind != "ws":
                self.toks.append(_Tok(kind, m.group(), pos))
            pos = m.end()
        self.toks.append(_Tok("eof", "", len(text)))
        self.i = 0

    # ---- errors and tokens ----------------------------------------------------------------

    def fail(self, pos: int, what: str, fix: str) -> NoReturn:
        line = bisect.bisect_right(self.line_starts, pos)
        start = self.line_starts[line - 1]
        end = self.text.find("\n", start)
        src = self.text[start: len(self.text) if end < 0 else end]
        col = pos - start + 1
        lo = max(0, col - 1 - 60)
        shown = ("..." if lo else "") + src[lo: lo + 100] + ("..." if len(src) > lo + 100 else "")
        caret = " " * (col - 1 - lo + (3 if lo else 0)) + "^"
        raise ParseError(f"{line}:{col}: {what}\n  {shown}\n  {caret}\nFix: {fix}")

    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def at(self, text: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t.text == text and t.kind in ("op", "name")

    def expect(self, text: str, fix: str = "") -> _Tok:
        t = self.peek()
        if not self.at(text):
            self.fail(t.pos, f"expected '{text}', found {_found(t)}", fix or f"insert '{text}'")
        return self.next()

    def int_(self, what: str) -> int:
        t = self.next()
        if t.kind != "num" or not re.fullmatch(r"-?(?:\d+|0[xX][0-9a-fA-F]+)", t.text):
            self.fail(t.pos, f"expected {what} (a plain integer), found {_found(t)}",
                      "write an integer without a type suffix, e.g. 64")
        return int(t.text, 0) if not re.fullmatch(r"-?0\d+", t.text) else int(t.text, 10)

    def unescape(self, t: _Tok) -> str:
        """The text of a quoted token, escapes resolved."""
        try:
            return _unescape(t.text[1:-1])
        except _BadEscape as e:
            self.fail(t.pos, str(e), "use \\u{...} with at most 10FFFF, outside D800-DFFF")

    def name(self, what: str) -> str:
        t = self.next()
        if t.kind == "qname":
            return self.unescape(t)
        if t.kind == "name" and t.text not in KEYWORDS:
            return t.text
        self.fail(t.pos, f"expected {what}, found {_found(t)}",
                  "use an identifier; write a keyword used as a name between backticks: `let`")

    def dtype(self) -> DataType:
        t = self.next()
        if t.kind != "name" or t.text not in TYPE_NAMES:
            self.fail(t.pos, f"expected a type, found {_found(t)}", "use bool, i32, u32, f32 or f64")
        return DataType.from_short(t.text)

    # ---- program and statements -----------------------------------------------------------

    def program(self) -> Program:
        if not (self.peek().kind == "name" and self.at("program")):
            self.fail(self.peek().pos, f"expected 'program', found {_found(self.peek())}",
                      "start with a header such as: program wg(64, 1, 1) {")
        self.next()
        self.expect("wg", "write the workgroup size: program wg(64, 1, 1) {")
        self.expect("(")
        wg = [self.int_("a workgroup size")]
        while self.at(","):
            self.next()
            wg.append(self.int_("a workgroup size"))
        self.expect(")")
        self.expect("{")
        buffers: list[BufferDecl] = []
        functions: list[FunctionDef] = []
        top = _Open("program", [])
        stack = [top]
        while True:
            t = self.peek()
            if t.kind == "op" and t.text == "}":
                self.next()
                done = stack.pop()
                if done.kind == "program":
                    break
                node = self.close(done)
                if node is None:
                    stack.append(done)  # now collecting the else branch
                else:
                    stack[-1].items.append(node)
            elif t.kind == "name" and t.text in ("buffer", "fn"):
                if len(stack) > 1:
                    self.fail(t.pos, f"'{t.text}' declaration inside a nested block",
                              "declare buffers and functions at the top level of the program")
                if t.text == "buffer":
                    buffers.append(self.buffer())
                else:
                    functions.append(self.function())
            elif t.kind == "eof":
                self.fail(t.pos, "unexpected end of text: a '{' is not closed", "add the missing '}'")
            else:
                opened = self.statement(stack[-1].items)
                if opened is not None:
                    stack.append(opened)
        t = self.peek()
        if t.kind != "eof":
            self.fail(t.pos, f"text after the end of the program: {_found(t)}", "remove it")
        wg_t: tuple[int, int, int] = tuple(wg)  # type: ignore[assignment]  # any length prints back
        return Program(tuple(buffers), wg_t, tuple(top.items), tuple(functions))

    def close(self, o: _Open) -> Node | None:
        """Finish the statement whose body ``o`` just ended (None: an ``else`` body follows)."""
        body = tuple(o.items)
        match o.kind:
            case "then":
                if self.at("else"):
                    self.next()
                    self.expect("{")
                    o.kind, o.head, o.items = "else", (o.head[0], body), []
                    return None
                return If(o.head[0], body, ())  # type: ignore[arg-type]
            case "else":
                return If(o.head[0], o.head[1], body)  # type: ignore[arg-type]
            case "for":
                return Loop(o.head[0], o.head[1], o.head[2], body)  # type: ignore[arg-type]
            case "block":
                return Block(body)
            case "region":
                return Region(o.head[0], body)  # type: ignore[arg-type]
        raise AssertionError(o.kind)

    def statement(self, items: list[Node]) -> _Open | None:
        """Parse one statement into ``items``, or open a braced one and return it."""
        t = self.peek()
        if t.kind == "name" and t.text in KEYWORDS:
            self.next()
            match t.text:
                case "let":
                    name = self.name("a variable name")
                    self.expect("=")
                    items.append(Let(name, self.expr()))
                case "if":
                    cond = self.expr()
                    self.expect("{")
                    return _Open("then", [], (cond,))
                case "for":
                    var = self.name("a loop variable name")
                    self.expect("in", "write: for i in 0u32 .. n {")
                    start = self.expr()
                    self.expect("..", "write the range as: start .. end")
                    end = self.expr()
                    self.expect("{")
                    return _Open("for", [], (var, start, end))
                case "block":
                    self.expect("{")
                    return _Open("block", [])
                case "region":
                    s = self.next()
                    if s.kind != "str":
                        self.fail(s.pos, f"expected a quoted label, found {_found(s)}",
                                  'write: region "label" {')
                    self.expect("{")
                    return _Open("region", [], (self.unescape(s),))
                case "barrier":
                    items.append(Barrier())
                case "return":
                    items.append(Return())
                case _:
                    self.fail(t.pos, f"'{t.text}' cannot start a statement",
                              "statements start with let, if, for, block, region, barrier, "
                              "return or a name")
            return None
        if t.kind in ("name", "qname"):
            name = self.name("a name")
            if self.at("["):
                self.next()
                index = self.expr()
                self.expect("]")
                self.expect("=")
                items.append(Store(name, index, self.expr()))
            else:
                self.expect("=", "write an assignment as: name = value")
                items.append(Assign(name, self.expr()))
            return None
        self.fail(t.pos, f"expected a statement, found {_found(t)}",
                  "statements start with let, if, for, block, region, barrier, return or a name")

    def buffer(self) -> BufferDecl:
        self.next()
        name = self.name("a buffer name")
        self.expect(":")
        element = self.dtype()
        t = self.next()
        if t.text not in _ACCESS or t.kind != "name":
            self.fail(t.pos, f"expected a buffer access, found {_found(t)}",
                      "use one of " + ", ".join(_ACCESS))
        access = _ACCESS[t.text]
        is_output = self.at("output")
        if is_output:
            self.next()
        binding = count = 0
        if self.at("@"):
            self.next()
            binding = self.int_("a binding")
        if self.at("["):
            self.next()
            self.expect("count")
            count = self.int_("a count")
            self.expect("]")
        return BufferDecl(name, binding, access, element, count, is_output)

    def function(self) -> FunctionDef:
        self.next()
        op_id = self.name("a function name")
        self.expect("(")
        params: list[tuple[str, DataType]] = []
        while not self.at(")"):
            if params:
                self.expect(",", "separate parameters with ','")
            p = self.name("a parameter name")
            self.expect(":")
            params.append((p, self.dtype()))
        self.next()
        self.expect("->", "write the result type: fn f(a: f32) -> f32 = ...")
        result = self.dtype()
        self.expect("=")
        body = self.expr()
        if not (self.at("vjp") and self.at("(", 1)):
            return FunctionDef(op_id, tuple(params), result, body)
        self.next()  # a custom adjoint: vjp(r, g) = [grad, nograd, ...]
        self.expect("(")
        res = self.name("the adjoint's result name")
        self.expect(",", "write vjp(result, cotangent)")
        cot = self.name("the adjoint's cotangent name")
        self.expect(")")
        self.expect("=")
        self.expect("[", "list one gradient per parameter: vjp(r, g) = [g * 2.0f32, nograd]")
        grads: list[Expr | None] = []
        while not self.at("]"):
            if grads:
                self.expect(",", "separate gradients with ','")
            if self.peek().kind == "name" and self.at("nograd"):
                self.next()
                grads.append(None)
            else:
                grads.append(self.expr())
        self.next()
        return FunctionDef(op_id, tuple(params), result, body, FunctionAdjoint(res, cot, tuple(grads)))

    # ---- expressions ----------------------------------------------------------------------

    def expr(self) -> Expr:
        """One expression, iteratively: frames wait for their sub-expressions."""
        stack: list[_Frame] = []
        while True:
            value = self.head(stack)
            if value is None:
                continue
            while True:
                if not stack:
                    return value
                fr = stack[-1]
                fr.args.append(value)
                if not self.after_arg(fr):
                    break
                stack.pop()
                value = self.build(fr)

    def after_arg(self, fr: _Frame) -> bool:
        """Consume what follows an argument of ``fr``; True when ``fr`` is complete."""
        n = len(fr.args)
        t = self.peek()
        match fr.kind:
            case "infix":
                if n == 1:
                    op = _SYMBOL_OP.get(t.text) if t.kind == "op" else None
                    if op is None:
                        self.fail(t.pos, f"expected a binary operator, found {_found(t)}",
                                  "write (a + b); unary ops are calls such as negate(x)")
                    self.next()
                    fr.op = op
                    return False
                self.expect(")", "every binary operation has its own parentheses: ((a + b) * c)")
                return True
            case "load":
                self.expect("]")
                return True
            case "atomic":
                if n == 2 and self.at(",") and self.at("expected", 1) and self.at("=", 2):
                    self.i += 3
                    return False
                if n < 2:
                    self.expect(",", "write atomic_add(buffer, index, value)")
                    return False
                self.expect(")", "write atomic_add(buffer, index, value)")
                return True
            case "user":
                if self.at(","):
                    self.next()
                    return False
                self.expect(")", "separate arguments with ',' and close the call with ')'")
                return True
            case _:
                if n < fr.arity:
                    self.expect(",", f"'{fr.name}' takes {fr.arity} argument(s)")
                    return False
                self.expect(")", f"'{fr.name}' takes {fr.arity} argument(s)")
                return True

    def build(self, fr: _Frame) -> Expr:
        a = fr.args
        match fr.kind:
            case "infix":
                assert fr.op is not None
                return BinOp(fr.op, a[0], a[1])
            case "load":
                return Load(fr.name, a[0])
            case "atomic":
                assert fr.op is None and fr.build is not None
                return fr.build(a)
            case "user":
                return Call(fr.name, tuple(a))
            case _:
                assert fr.build is not None
                return fr.build(a)

    def head(self, stack: list[_Frame]) -> Expr | None:
        """Parse the start of an expression: a whole leaf, or push a frame and return None."""
        t = self.next()
        if t.kind == "num":
            return self.literal(t)
        if t.kind == "op" and t.text == "(":
            stack.append(_Frame("infix", t.pos))
            return None
        if t.kind == "name" and t.text in ("true", "false"):
            return LitBool(t.text == "true")
        if t.kind == "name" and t.text in CALL_HEADS and self.at("("):
            return self.builtin(t, stack)
        if t.kind in ("name", "qname"):
            self.i -= 1
            name = self.name("an expression")
            if self.at("["):
                stack.append(_Frame("load", self.next().pos, name=name))
                return None
            if self.at("("):
                p = self.next().pos
                if self.at(")"):
                    self.next()
                    return Call(name, ())
                stack.append(_Frame("user", p, name=name))
                return None
            return Var(name)
        self.fail(t.pos, f"expected an expression, found {_found(t)}",
                  "write a literal with its type (1u32, 2.0f32, true), a name, or a call")

    def builtin(self, t: _Tok, stack: list[_Frame]) -> Expr | None:
        """A built-in call starting at name ``t`` (the '(' is next): a leaf, or None after
        pushing a frame for its arguments."""
        word = t.text
        if word in _ID_CLASS:
            self.next()
            axis = self.int_("an axis")
            self.expect(")")
            return _ID_CLASS[word](axis)
        if word in ("lane", "subgroup_size"):
            self.next()
            self.expect(")", f"{word}() takes no arguments")
            return SubgroupLocalId() if word == "lane" else SubgroupSize()
        if word == "len":
            self.next()
            b = self.name("a buffer name")
            self.expect(")")
            return BufLen(b)
        if word in ("f32", "f64") and self.at("bits", 1) and self.at("=", 2):
            self.i += 3
            bt = self.peek()
            bits = self.int_("a bit pattern")
            self.expect(")")
            try:
                return LitF32(bits=bits) if word == "f32" else LitF64(bits=bits)
            except ValueError as e:
                self.fail(bt.pos, str(e), f"use a bit pattern that fits in {word[1:]} bits")
        if word == "subgroup_reduce":
            self.next()
            o = self.next()
            op = _REDUCE_OP.get(o.text) if o.kind == "name" else None
            if op is None:
                self.fail(o.pos, f"expected a reduction op name, found {_found(o)}",
                          "write subgroup_reduce(add, v); ops: add, min, max, bit_and, bit_or, bit_xor")
            self.expect(",")
            stack.append(_Frame("call", t.pos, _reduce(op), 1, word))
            return None
        if word in _ATOMIC:
            self.next()
            buf = self.name("a buffer name")
            self.expect(",", f"write {word}(buffer, index, value)")
            stack.append(_Frame("atomic", t.pos, _atomic(_ATOMIC[word], buf), 2, word))
            return None
        spec = _CALLS[word]
        self.next()
        stack.append(_Frame("call", t.pos, spec[1], spec[0], word))
        return None

    def literal(self, t: _Tok) -> Expr:
        m = re.fullmatch(r"(.*?)(i32|u32|f32|f64)", t.text)
        if m is None:
            self.fail(t.pos, f"number {t.text!r} has no type suffix",
                      f"write {t.text}u32, {t.text}i32 or a float such as 1.0f32")
        body, suffix = m.group(1), m.group(2)
        try:
            if suffix in ("f32", "f64"):
                if body.lower().startswith(("0x", "-0x")):
                    raise ValueError("hex digits are for bits=")
                v = float(body)
                return LitF32(v) if suffix == "f32" else LitF64(v)
            if not re.fullmatch(r"-?\d+", body):
                raise ValueError("an integer literal has no fraction or exponent")
            return LitI32(int(body)) if suffix == "i32" else LitU32(int(body))
        except (ValueError, TypeError) as e:
            self.fail(t.pos, f"bad {suffix} literal {t.text!r}: {str(e).split('. Fix:')[0]}",
                      "write a value in the type's range, e.g. 1u32, -1i32, 0.5f32")


def _found(t: _Tok) -> str:
    if t.kind == "eof":
        return "the end of the text"
    return repr(t.text[:40] + ("..." if len(t.text) > 40 else ""))


class _BadEscape(Exception):
    """A ``\\u{...}`` escape that names no Unicode scalar value (the caller reports where)."""


def _unescape(body: str) -> str:
    def one(m: re.Match[str]) -> str:
        if not m.group(2):
            return m.group(1)
        code = int(m.group(2), 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:  # past Unicode, or a lone surrogate
            raise _BadEscape(f"escape \\u{{{m.group(2)}}} is not a Unicode character")
        return chr(code)
    return _ESCAPE.sub(one, body)


def parse_program(text: str) -> Program:
    """Parse the text form of a program (the inverse of ``str(program)``)."""
    if not isinstance(text, str):
        raise ParseError(f"parse_program needs a str, got {type(text).__name__}. "
                         "Fix: pass the text, e.g. parse_program(path.read_text())")
    return _Parser(text).program()


def parse_expr(text: str) -> Expr:
    """Parse the text of one expression (as :func:`vyre.ir.printer.print_expr` writes it)."""
    p = _Parser(text)
    e = p.expr()
    t = p.peek()
    if t.kind != "eof":
        p.fail(t.pos, f"text after the expression: {_found(t)}", "remove it")
    return e
