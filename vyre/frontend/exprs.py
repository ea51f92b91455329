"""Lowering Python expressions of a kernel body to IR expressions (:class:`ExprLowering`).

Every expression lowers to a :class:`~vyre.frontend.values.Value` (or a buffer, or a Python object
such as a module or an intrinsic, which only calls and attributes may use). Expressions that the IR
allows only as the whole value of a ``Let`` (atomics, subgroup operations) and calls of inlined
``@vyre.func`` functions append statements to ``pre``, which the caller places before the
statement being lowered.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
import builtins
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ..errors import BuildError
from ..ir import Atomic, BinOpKind, Cast, DataType, UnOpKind
from ..ir.builder import _reduce_op
from ..ir.expr import (
    BufLen, Fma, InvocationId, LitU32, Load, LocalId, Select, SubgroupBallot,
    SubgroupLocalId, SubgroupReduce, SubgroupShuffle, SubgroupSize, Var, WorkgroupId,
)
from ..ir.node import Let, Node
from ..ir.ops import ATOMIC_RULES, SUBGROUP_REDUCE_OPS, AtomicOp
from .intrinsics import INTRINSICS, REJECTED_CALLS, SCALAR_TYPES
from .values import (
    BufRef, TypeProblem, Typed, Value, Weak, binary, bool_const, coerce, literal, typed, unary,
    weak_const,
)

if TYPE_CHECKING:
    from .source import Source


@dataclass(frozen=True)
class Py:
    """A Python object a name resolved to (module, intrinsic, @vyre.func, type ...)."""

    obj: Any


@dataclass(frozen=True)
class Local:
    """A kernel local: its IR name and type; loop variables and scalar parameters (loaded into a
    local at the kernel's start) are read-only."""

    ir: str
    dtype: DataType
    line: int
    loop: bool = False
    param: bool = False


Binding = Local | BufRef | Py
Lowered = Value | BufRef | Py

_BINOPS: dict[type, tuple[BinOpKind, str]] = {
    ast.Add: (BinOpKind.ADD, "+"), ast.Sub: (BinOpKind.SUB, "-"), ast.Mult: (BinOpKind.MUL, "*"),
    ast.Mod: (BinOpKind.MOD, "%"), ast.LShift: (BinOpKind.SHL, "<<"), ast.RShift: (BinOpKind.SHR, ">>"),
    ast.BitAnd: (BinOpKind.BIT_AND, "&"), ast.BitOr: (BinOpKind.BIT_OR, "|"),
    ast.BitXor: (BinOpKind.BIT_XOR, "^"), ast.Div: (BinOpKind.DIV, "/"),
    ast.FloorDiv: (BinOpKind.DIV, "//"),
}
_BOOL_BITOPS = {BinOpKind.BIT_AND: BinOpKind.AND, BinOpKind.BIT_OR: BinOpKind.OR, BinOpKind.BIT_XOR: BinOpKind.NE}
_CMPOPS: dict[type, tuple[BinOpKind, str]] = {
    ast.Lt: (BinOpKind.LT, "<"), ast.LtE: (BinOpKind.LE, "<="), ast.Gt: (BinOpKind.GT, ">"),
    ast.GtE: (BinOpKind.GE, ">="), ast.Eq: (BinOpKind.EQ, "=="), ast.NotEq: (BinOpKind.NE, "!="),
}
_ID_TYPES = {"gid": InvocationId, "lid": LocalId, "wgid": WorkgroupId}

# Expression forms with no IR meaning, and what to write instead.
_REJECTED_EXPRS: dict[type, tuple[str, str]] = {
    ast.Lambda: ("lambdas have no IR meaning", "write a @vyre.func function"),
    ast.ListComp: ("list comprehensions have no IR meaning", "loop with for k in range(n): and store into a buffer"),
    ast.SetComp: ("set comprehensions have no IR meaning", "loop with for k in range(n):"),
    ast.DictComp: ("dict comprehensions have no IR meaning", "loop with for k in range(n):"),
    ast.GeneratorExp: ("generator expressions have no IR meaning",
                       "accumulate in a loop: acc = 0.0; for k in range(n): acc += x[k]"),
    ast.List: ("lists have no IR meaning", "use an Array parameter or vyre.workgroup_array(n, vyre.f32)"),
    ast.Tuple: ("tuples have no IR meaning in a kernel", "use separate locals"),
    ast.Dict: ("dicts have no IR meaning", "use separate locals or buffers"),
    ast.Set: ("sets have no IR meaning", "use separate locals or buffers"),
    ast.JoinedStr: ("strings have no IR meaning", "remove it"),
    ast.NamedExpr: ("`:=` has no IR meaning", "assign on its own line first"),
    ast.Await: ("await has no IR meaning", "remove it"),
    ast.Yield: ("yield has no IR meaning", "store results into an output buffer"),
    ast.YieldFrom: ("yield has no IR meaning", "store results into an output buffer"),
    ast.Starred: ("`*` unpacking has no IR meaning", "pass arguments one by one"),
    ast.Slice: ("slices have no IR meaning", "index one element at a time in a loop"),
}


class ExprLowering:
    """Expression half of a function's lowering (see :mod:`vyre.frontend.lower`)."""

    src: Source
    env: Mapping[str, Any]
    scopes: list[dict[str, Binding]]
    gone: dict[str, str]
    pure: bool  # lowering a @vyre.func body into an IR FunctionDef: no statements may be emitted

    # provided by the statement half
    def fresh(self, hint: str) -> str: raise NotImplementedError
    def mark_written(self, buf: BufRef, node: ast.AST) -> None: raise NotImplementedError
    def call_func(self, fn: Any, node: ast.Call, pre: list[Node], top: bool) -> Value | None:
        raise NotImplementedError
    def note(self, n: Node, node: ast.AST) -> Node: raise NotImplementedError

    def fail(self, node: ast.AST | None, what: str, fix: str) -> NoReturn:
        # from None: raised while handling an internal TypeProblem, the user's error stands alone
        raise self.src.error(node, what, fix) from None

    def problem(self, node: ast.AST, p: TypeProblem) -> NoReturn:
        raise self.src.error(node, p.what, p.fix) from None

    def mark_read(self, buf: BufRef, node: ast.AST, how: str = "loads from it") -> None:
        """``buf`` is read here (a load, an in-place update, an atomic): not a WriteOnly array."""
        if buf.kind == "write_only":
            self.fail(node, f"{buf.shown} is a WriteOnly array: the kernel stores into it and never reads "
                      f"it, but this {how}",
                      f"declare it `{buf.spelled}: Array[{buf.dtype.short}]` (read-write) to read it back, "
                      "or keep the value in a local")

    # ---- names ---------------------------------------------------------------------------------

    def lookup(self, name: str, node: ast.AST) -> Binding:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in self.gone:
            self.fail(node, f"`{name}` is not defined here: {self.gone[name]}",
                      f"give `{name}` a value before the block (e.g. {name} = 0.0) and assign it inside")
        if name in self.env:
            return self.python_value(self.env[name], node, name)
        if hasattr(builtins, name):
            return self.python_value(getattr(builtins, name), node, name)
        self.fail(node, f"name `{name}` is not defined", f"define `{name}` before this line, or pass it "
                  "as a parameter")

    def python_value(self, obj: Any, node: ast.AST, name: str) -> Py:
        """A Python object a kernel refers to: numbers become constants, arrays are refused."""
        if isinstance(obj, (bool, np.bool_)):
            return Py(bool(obj))
        if isinstance(obj, (int, float)) and not isinstance(obj, bool):
            return Py(obj)
        if isinstance(obj, np.generic) and obj.dtype.kind in "iuf":
            return Py(obj)
        if isinstance(obj, np.ndarray) or hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__"):
            self.fail(node, f"`{name}` is an array from the enclosing Python code; a kernel cannot capture "
                      "arrays (they are bound at dispatch)", f"make it a parameter: `{name}: Array[f32]`")
        return Py(obj)

    def constant(self, obj: Any, node: ast.AST) -> Lowered:
        if isinstance(obj, bool):
            return bool_const(obj)
        if isinstance(obj, np.generic):
            t = DataType.from_numpy(obj.dtype) if obj.dtype in (np.float32, np.float64, np.int32, np.uint32) else None
            if t is None:
                self.fail(node, f"a numpy {obj.dtype} constant has no vyre type",
                          "use a Python int/float, or np.float32 / np.float64 / np.int32 / np.uint32")
            return Typed(literal(obj.item(), t), t)
        if isinstance(obj, (int, float)):
            return weak_const(obj)
        return Py(obj)

    # ---- expressions ---------------------------------------------------------------------------

    def value(self, e: ast.expr, pre: list[Node], what: str = "a value") -> Value:
        """``e`` as a value (numbers, locals, loads, ...), not a buffer or a Python object."""
        return self.as_value(self.expr(e, pre), e, what)

    def as_value(self, v: Lowered, e: ast.expr, what: str = "a value") -> Value:
        if isinstance(v, BufRef):
            self.fail(e, f"`{ast.unparse(e)}` is an array, used as {what}",
                      f"index it: {ast.unparse(e)}[i]")
        if isinstance(v, Py):
            self.fail(e, f"`{ast.unparse(e)}` ({type(v.obj).__name__}) has no IR value",
                      "use numbers, locals, buffer elements and vyre intrinsics")
        return v

    def expr(self, e: ast.expr, pre: list[Node], top: bool = False) -> Lowered:
        match e:
            case ast.Constant(value=v):
                if isinstance(v, (bool, int, float)):
                    return self.constant(v, e)
                if isinstance(v, str):
                    return Py(v)
                self.fail(e, f"the constant {v!r} has no IR meaning", "use numbers and bools")
            case ast.Name(id=name):
                b = self.lookup(name, e)
                if isinstance(b, Local):
                    return Typed(Var(b.ir), b.dtype)
                if isinstance(b, BufRef) and b.kind == "scalar":
                    return Typed(Load(b.name, LitU32(0)), b.dtype)
                if isinstance(b, Py):
                    return self.constant(b.obj, e)
                return b
            case ast.Attribute(value=base, attr=attr):
                return self.attribute(e, base, attr, pre)
            case ast.BinOp(left=l, op=op, right=r):
                return self.binop(e, op, self.value(l, pre), self.value(r, pre))
            case ast.UnaryOp(op=op, operand=x):
                return self.unaryop(e, op, self.value(x, pre))
            case ast.Compare(left=l, ops=ops, comparators=rs):
                return self.compare(e, l, ops, rs, pre)
            case ast.BoolOp(op=op, values=vals):
                kind = BinOpKind.AND if isinstance(op, ast.And) else BinOpKind.OR
                name = "and" if kind is BinOpKind.AND else "or"
                acc: Value = self.cond(vals[0], pre, name)
                for operand in vals[1:]:
                    left, right = acc, self.cond(operand, pre, name)
                    acc = self.typing(e, lambda x=left, y=right: binary(kind, x, y, name))
                return acc
            case ast.IfExp(test=t, body=a, orelse=b):
                c = self.cond(t, pre, "a conditional expression")
                ta, tb = self.unify(e, self.value(a, pre), self.value(b, pre), "`a if c else b`")
                return Typed(Select(c.expr, ta.expr, tb.expr), ta.dtype)
            case ast.Subscript(value=base, slice=idx):
                buf = self.buffer_of(base, pre)
                self.mark_read(buf, e)
                return Typed(Load(buf.name, self.index(idx, pre)), buf.dtype)
            case ast.Call():
                return self.call(e, pre, top)
        why, fix = _REJECTED_EXPRS.get(type(e), (f"`{type(e).__name__}` expressions have no IR meaning",
                                                  "use arithmetic, comparisons, calls of vyre intrinsics"))
        self.fail(e, why, fix)

    def typing(self, node: ast.AST, f: Any) -> Any:
        try:
            return f()
        except TypeProblem as p:
            self.problem(node, p)

    def cond(self, e: ast.expr, pre: list[Node], where: str) -> Typed:
        v = self.value(e, pre)
        if isinstance(v, Weak) or v.dtype is not DataType.BOOL:
            shown = "a number" if isinstance(v, Weak) else v.dtype.short
            self.fail(e, f"{where} needs a bool, got {shown}",
                      f"compare explicitly, e.g. ({ast.unparse(e)}) != 0")
        return v

    def unify(self, node: ast.AST, a: Value, b: Value, what: str) -> tuple[Typed, Typed]:
        def go() -> tuple[Typed, Typed]:
            if isinstance(a, Weak) and isinstance(b, Weak):
                t = DataType.F32 if float in (a.kind, b.kind) else (
                    DataType.I32 if a.negative or b.negative else DataType.U32)
                return typed(a, t), typed(b, t)
            ta = typed(a, b.dtype if isinstance(b, Typed) else None)
            tb = typed(b, ta.dtype)
            if ta.dtype is not tb.dtype:
                raise TypeProblem(f"{what} mixes {ta.dtype.short} and {tb.dtype.short}",
                                  f"convert one side explicitly with vyre.{tb.dtype.short}(...)")
            return ta, tb
        return self.typing(node, go)  # type: ignore[no-any-return]

    def binop(self, e: ast.AST, op: ast.operator, a: Value, b: Value) -> Value:
        if isinstance(op, ast.Pow):  # float-only in the IR: an int constant is a float exponent
            return self.typing(e, lambda: binary(BinOpKind.POW, a, b, "**"))  # type: ignore[no-any-return]
        if type(op) not in _BINOPS:
            self.fail(e, f"`{ast.unparse(e)}`: the operator has no IR meaning", "use + - * / // % & | ^ << >>")
        kind, sym = _BINOPS[type(op)]
        floats = any((isinstance(v, Weak) and v.kind is float) or (isinstance(v, Typed) and v.dtype.is_float)
                     for v in (a, b))
        ints = any(isinstance(v, Typed) and v.dtype.is_int for v in (a, b)) or (
            not floats and all(isinstance(v, Weak) for v in (a, b)))
        if sym == "/" and ints and not floats:
            self.fail(e, "`/` on integers: Python's true division gives a float, the IR's integer "
                      "division truncates", "write // for integer division (truncates toward zero), "
                      "or convert first: vyre.f32(a) / vyre.f32(b)")
        if sym == "//" and floats:
            self.fail(e, "`//` on floats: Python's floor division has no single IR op",
                      "write vyre.floor(a / b)")
        if kind in _BOOL_BITOPS and all(isinstance(v, Typed) and v.dtype is DataType.BOOL for v in (a, b)):
            kind = _BOOL_BITOPS[kind]
        return self.typing(e, lambda: binary(kind, a, b, sym))  # type: ignore[no-any-return]

    def unaryop(self, e: ast.AST, op: ast.unaryop, a: Value) -> Value:
        if isinstance(op, ast.UAdd):
            return a
        if isinstance(op, ast.USub):
            return self.typing(e, lambda: unary(UnOpKind.NEGATE, a, "-"))  # type: ignore[no-any-return]
        if isinstance(op, ast.Not):
            if isinstance(a, Weak) or a.dtype is not DataType.BOOL:
                self.fail(e, "`not` needs a bool", "compare explicitly: x == 0")
            return self.typing(e, lambda: unary(UnOpKind.LOGICAL_NOT, a, "not"))  # type: ignore[no-any-return]
        if isinstance(a, Typed) and a.dtype is DataType.BOOL:
            self.fail(e, "`~` on a bool is bitwise in Python (~True == -2)", "write `not c` for a bool")
        return self.typing(e, lambda: unary(UnOpKind.BIT_NOT, a, "~"))  # type: ignore[no-any-return]

    def compare(self, e: ast.AST, left: ast.expr, ops: list[ast.cmpop], rights: list[ast.expr],
                pre: list[Node]) -> Value:
        acc: Value | None = None
        a = self.value(left, pre)
        for op, r in zip(ops, rights, strict=True):
            if type(op) not in _CMPOPS:
                self.fail(e, f"`{ast.unparse(e)}`: `is` / `in` have no IR meaning", "compare with == or !=")
            kind, sym = _CMPOPS[type(op)]
            b = self.value(r, pre)
            c = self.typing(e, lambda k=kind, x=a, y=b, s=sym: binary(k, x, y, s))
            acc = c if acc is None else self.typing(e, lambda x=acc, y=c: binary(BinOpKind.AND, x, y, "and"))
            a = b
        assert acc is not None
        return acc

    def attribute(self, e: ast.Attribute, base: ast.expr, attr: str, pre: list[Node]) -> Lowered:
        v = self.expr(base, pre)
        if isinstance(v, Py):
            if not hasattr(v.obj, attr):
                self.fail(e, f"`{ast.unparse(e)}` does not exist", _spelling_fix(v.obj, attr, ast.unparse(base)))
            return self.constant(self.python_value(getattr(v.obj, attr), e, ast.unparse(e)).obj, e)
        if isinstance(v, BufRef) and attr in ("shape", "size"):
            self.fail(e, f"arrays in a kernel have no .{attr}", f"write len({ast.unparse(base)})")
        self.fail(e, f"`{ast.unparse(e)}`: attributes of kernel values have no IR meaning",
                  "use vyre intrinsics: vyre.f32(x) to convert, len(x) for a length")

    def buffer_of(self, e: ast.expr, pre: list[Node]) -> BufRef:
        v = self.expr(e, pre)
        if isinstance(v, BufRef) and v.kind != "scalar":
            return v
        if isinstance(e, ast.Name):
            b = self.lookup(e.id, e)
            if isinstance(b, BufRef) or (isinstance(b, Local) and b.param):
                self.fail(e, f"`{e.id}` is a scalar parameter, not an array", f"use it directly: {e.id}")
        self.fail(e, f"`{ast.unparse(e)}` is not an array", "index Array parameters and workgroup arrays only")

    def index(self, idx: ast.expr, pre: list[Node]) -> Any:
        if isinstance(idx, ast.Tuple):
            self.fail(idx, "arrays are 1-D: a tuple index has no IR meaning",
                      "flatten the index: x[row * n_cols + col]")
        v = self.value(idx, pre, "an index")
        if isinstance(v, Typed) and v.dtype is not DataType.U32:
            self.fail(idx, f"indices are u32, got {v.dtype.short}", f"convert: vyre.u32({ast.unparse(idx)})")
        return self.typing(idx, lambda: typed(v, DataType.U32)).expr

    def hoist(self, pre: list[Node], ex: Any, dtype: DataType, hint: str, node: ast.AST) -> Typed:
        """Bind ``ex`` to a fresh local before the statement (the IR wants it as a Let's value)."""
        if self.pure:
            raise _Impure
        name = self.fresh(hint)
        pre.append(self.note(Let(name, ex), node))
        return Typed(Var(name), dtype)

    # ---- calls ---------------------------------------------------------------------------------

    def call(self, e: ast.Call, pre: list[Node], top: bool) -> Lowered:
        f = self.expr(e.func, pre)
        if not isinstance(f, Py):
            self.fail(e, f"`{ast.unparse(e.func)}` is not callable", "call vyre intrinsics or @vyre.func functions")
        obj = f.obj
        intr = INTRINSICS.get(id(obj))
        if intr is not None:
            return self.intrinsic(e, intr.kind, intr.op, intr.name, pre, top)
        if id(obj) in REJECTED_CALLS:
            why, fix = REJECTED_CALLS[id(obj)]
            self.fail(e, why, fix)
        from .api import DeviceFunction, KernelFunction

        if isinstance(obj, DeviceFunction):
            if self.pure:
                raise _Impure  # nested calls: the caller inlines instead
            r = self.call_func(obj, e, pre, top)
            if r is None:
                self.fail(e, f"{obj.name}() returns nothing, so it has no value", "call it as a statement")
            return r
        if isinstance(obj, KernelFunction):
            self.fail(e, "a kernel cannot call another kernel", "make the callee a @vyre.func function")
        name = getattr(obj, "__qualname__", type(obj).__name__)
        self.fail(e, f"calling `{name}` has no IR meaning (only vyre intrinsics, math functions and "
                  "@vyre.func functions lower to the IR)",
                  "use a vyre intrinsic, or decorate the helper with @vyre.func")

    def args(self, e: ast.Call, n_min: int, n_max: int, name: str) -> list[ast.expr]:
        if e.keywords:
            self.fail(e, f"{name}() takes no keyword arguments in a kernel", "pass arguments by position")
        if not n_min <= len(e.args) <= n_max:
            want = str(n_min) if n_min == n_max else f"{n_min} to {n_max}"
            self.fail(e, f"{name}() takes {want} arguments, got {len(e.args)}", f"see help(vyre.{name})")
        return list(e.args)

    def static_int(self, e: ast.expr, pre: list[Node], what: str) -> int:
        v = self.value(e, pre, what)
        if not (isinstance(v, Weak) and v.kind is int and v.value is not None):
            self.fail(e, f"{what} must be a Python int known when the kernel is compiled",
                      "use a literal or a module-level constant")
        return int(v.value)

    def scalar_type(self, e: ast.expr, pre: list[Node]) -> DataType:
        v = self.expr(e, pre)
        t = SCALAR_TYPES.get(id(v.obj)) if isinstance(v, Py) else None
        if t is None:
            self.fail(e, f"`{ast.unparse(e)}` is not a vyre scalar type",
                      "use vyre.f32, vyre.f64, vyre.i32, vyre.u32 or vyre.boolean")
        return t

    def intrinsic(self, e: ast.Call, kind: str, op: Any, name: str, pre: list[Node], top: bool) -> Lowered:
        match kind:
            case "unop":
                (a,) = self.args(e, 1, 1, name)
                return self.typing(e, lambda: unary(op, self.value(a, pre), name))  # type: ignore[no-any-return]
            case "round":
                (a,) = self.args(e, 1, 1, "round")
                return self.typing(e, lambda: unary(op, self.value(a, pre), name))  # type: ignore[no-any-return]
            case "binop" | "minmax":
                a, b = self.args(e, 2, 2, name)
                va, vb = self.value(a, pre), self.value(b, pre)
                return self.typing(e, lambda: binary(op, va, vb, name))  # type: ignore[no-any-return]
            case "cast":
                (a,) = self.args(e, 1, 1, name)
                return self.cast(e, op, self.value(a, pre))
            case "cast_to":
                t_arg, a = self.args(e, 2, 2, name)
                return self.cast(e, self.scalar_type(t_arg, pre), self.value(a, pre))
            case "len":
                (a,) = self.args(e, 1, 1, name)
                buf = self.buffer_of(a, pre)
                return Typed(BufLen(buf.name), DataType.U32)
            case "load":
                a, i = self.args(e, 2, 2, name)
                buf = self.buffer_of(a, pre)
                self.mark_read(buf, e)
                return Typed(Load(buf.name, self.index(i, pre)), buf.dtype)
            case "id":
                (ax,) = self.args(e, 0, 1, name) or [ast.Constant(0)]
                axis = self.static_int(ax, pre, f"the axis of {name}()")
                if axis not in (0, 1, 2):
                    self.fail(e, f"{name}() axis {axis} is outside 0, 1, 2",
                              "use axis 0 (x), 1 (y) or 2 (z)")
                return Typed(_ID_TYPES[name](axis), DataType.U32)  # type: ignore[arg-type]
            case "nullary":
                self.args(e, 0, 0, name)
                return Typed(SubgroupLocalId() if name == "lane" else SubgroupSize(), DataType.U32)
            case "select":
                c, a, b = self.args(e, 3, 3, name)
                tc = self.cond(c, pre, "select()")
                ta, tb = self.unify(e, self.value(a, pre), self.value(b, pre), "select()")
                return Typed(Select(tc.expr, ta.expr, tb.expr), ta.dtype)
            case "fma":
                a, b, c = self.args(e, 3, 3, name)
                va, vb, vc = (self.value(x, pre) for x in (a, b, c))
                t = next((v.dtype for v in (va, vb, vc) if isinstance(v, Typed)), DataType.F32)
                ta, tb, tc2 = (self.typing(e, lambda v=v: coerce(v, t, "fma()")) for v in (va, vb, vc))
                if not t.is_float:
                    self.fail(e, f"fma() needs floats, got {t.short}", "write a * b + c for integers")
                return Typed(Fma(ta.expr, tb.expr, tc2.expr), t)
            case "ballot":
                (c,) = self.args(e, 1, 1, name)
                return self.hoist(pre, SubgroupBallot(self.cond(c, pre, "ballot()").expr), DataType.U32, "ballot", e)
            case "shuffle":
                v, src = self.args(e, 2, 2, name)
                tv = self.typing(e, lambda: typed(self.value(v, pre)))
                lane = self.index(src, pre)
                return self.hoist(pre, SubgroupShuffle(tv.expr, lane), tv.dtype, "shuffled", e)
            case "subgroup_reduce":
                o, v = self.args(e, 2, 2, name)
                ov = self.expr(o, pre)
                try:
                    rop = _reduce_op(ov.obj if isinstance(ov, Py) else "")
                except BuildError as err:
                    self.fail(o, str(err).split(". Fix:")[0],
                              'name it: "add", "min", "max", "and", "or" or "xor"')
                tv = self.typing(e, lambda: typed(self.value(v, pre)))
                if tv.dtype not in SUBGROUP_REDUCE_OPS[rop].operands:
                    self.fail(e, f"subgroup_reduce({rop.name.lower()}) does not apply to {tv.dtype.short}",
                              "bit reductions need integers; convert with vyre.u32(...)")
                return self.hoist(pre, SubgroupReduce(rop, tv.expr), tv.dtype, "reduced", e)
            case "atomic" | "atomic_any":
                return self.atomic(e, op, pre, top)
            case "barrier":
                self.fail(e, "vyre.barrier() is a statement, not a value", "call it on its own line")
            case "workgroup_array":
                self.fail(e, "vyre.workgroup_array(...) declares workgroup memory only as "
                          "`name = vyre.workgroup_array(count, dtype)` at the top level of a kernel",
                          "move it to the kernel's top level, on its own line")
            case "range":
                self.fail(e, "range() only makes a loop: `for k in range(a, b):`", "use it in a for statement")
        raise AssertionError(kind)

    def cast(self, e: ast.AST, t: DataType, v: Value) -> Typed:
        if isinstance(v, Weak):
            if t is DataType.BOOL:
                return bool_const(bool(v.value)) if v.value is not None else Typed(
                    Cast(t, typed(v).expr), t)
            if v.kind is float and t.is_int and v.value is not None:
                return Typed(Cast(t, typed(v).expr), t)
            return self.typing(e, lambda: typed(v, t))  # type: ignore[no-any-return]
        if v.dtype is t:
            return v
        return Typed(Cast(t, v.expr), t)

    def atomic(self, e: ast.Call, op: AtomicOp | None, pre: list[Node], top: bool) -> Typed:
        args = list(e.args)
        kw = {k.arg: k.value for k in e.keywords}
        if op is None:  # vyre.atomic(op, buf, i, v, expected=None)
            if not args:
                self.fail(e, "atomic() needs an op", "write vyre.atomic_add(buf, i, v) etc.")
            ov = self.expr(args.pop(0), pre)
            if not (isinstance(ov, Py) and isinstance(ov.obj, AtomicOp)):
                self.fail(e, "atomic()'s first argument must be an AtomicOp", "write vyre.atomic_add(buf, i, v) etc.")
            op = ov.obj
        name = "atomic_" + op.name.lower()
        need = 4 if op is AtomicOp.COMPARE_EXCHANGE and "expected" not in kw else 3
        if len(args) != need or set(kw) - {"expected"}:
            self.fail(e, f"{name}() takes (buf, index, {'expected, ' if need == 4 else ''}value)",
                      f"see help(vyre.{name})")
        buf = self.buffer_of(args[0], pre)
        self.mark_written(buf, e)
        self.mark_read(buf, e, "atomic reads its old value")
        index = self.index(args[1], pre)
        exp_node = args[2] if need == 4 else kw.get("expected")
        val_node = args[3] if need == 4 else args[2]
        val = self.typing(val_node, lambda: coerce(self.value(val_node, pre), buf.dtype, f"{name}() on `{buf.name}`"))
        expected = None
        if exp_node is not None:
            expected = self.typing(exp_node, lambda: coerce(self.value(exp_node, pre), buf.dtype, "expected")).expr
        if buf.dtype not in ATOMIC_RULES[op].operands:
            self.fail(e, f"{name}() does not apply to {buf.dtype.short} buffers",
                      "atomic min/max/and/or/xor/compare_exchange need integer buffers")
        ex = Atomic(op, buf.name, index, val.expr, expected)
        if not top:
            self.fail(e, "an atomic inside a larger expression: the IR evaluates atomics only as a "
                      "statement or the whole right-hand side of an assignment",
                      f"assign it first: old = {ast.unparse(e)}")
        return self.hoist(pre, ex, buf.dtype, "old", e)


class _Impure(Exception):
    """A @vyre.func body needs statements, so it is inlined rather than made an IR FunctionDef."""


#: Names users reach for (numpy's, JAX's) that vyre spells otherwise.
_OTHER_NAMES = {
    "max": "Python's max(a, b), or vyre.maximum(a, b)", "min": "Python's min(a, b), or vyre.minimum(a, b)",
    "where": "vyre.select(cond, a, b)", "pow": "a ** b, or vyre.power(a, b)", "abs": "Python's abs(x)",
    "clip": "min(max(x, lo), hi)", "float32": "vyre.f32(x)", "float64": "vyre.f64(x)", "int32": "vyre.i32(x)",
    "uint32": "vyre.u32(x)", "round": "Python's round(x), or vyre.rint(x)", "rsqrt": "vyre.inverse_sqrt(x)",
}


def _spelling_fix(obj: object, attr: str, base: str) -> str:
    """The fix for a missing attribute: the name vyre uses, or the closest public names."""
    import difflib

    if attr in _OTHER_NAMES and getattr(obj, "__name__", "") == "vyre":
        return f"write {_OTHER_NAMES[attr]}"
    close = difflib.get_close_matches(attr, [n for n in dir(obj) if not n.startswith("_")], n=3)
    return f"did you mean {' or '.join(f'{base}.{c}' for c in close)}?" if close else "check the spelling"

