"""Calls of ``@vyre.func`` functions inside a kernel (:class:`CallLowering`, a part of
:class:`vyre.frontend.lower.FnLowering`).

A function that is one pure ``return`` over annotated scalar parameters becomes an IR
``FunctionDef`` and a ``Call`` of it; any other is inlined: its arguments are bound to fresh
locals, its statements go before the calling statement, and its returns (the last statement, or the
last of both branches of a final ``if``/``else``) assign a result local.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..ir.expr import Atomic, Call, FunctionDef, LitBool, Var, walk
from ..ir.expr import Load as LoadE
from ..ir.node import Let, Node
from ..ir.printer import CALL_HEADS
from ..ir.types import DataType
from .exprs import ExprLowering, Local, Py, _Impure
from .markers import _ArrayType
from .values import BufRef, Typed, Value, Weak, coerce, literal, typed

if TYPE_CHECKING:
    from .api import DeviceFunction
    from .lower import KernelState
    from .source import Source

# Expressions an IR function body may not hold (it must mean the same wherever it is placed).
_IMPURE_EXPRS = {"InvocationId", "LocalId", "WorkgroupId", "SubgroupLocalId", "SubgroupSize",
                 "SubgroupBallot", "SubgroupShuffle", "SubgroupReduce", "BufLen"}


class CallLowering(ExprLowering):
    """The @vyre.func half of a function's lowering."""

    state: KernelState
    ret: tuple[str, list[Node], DataType | None] | None

    def __init__(self, state: KernelState, src: Source, env: Any, kernel: bool) -> None:
        raise NotImplementedError  # FnLowering's

    def bind(self, name: str, b: Any) -> None: raise NotImplementedError
    def stmts(self, body: list[ast.stmt]) -> list[Node]: raise NotImplementedError

    def call_func(self, fn: DeviceFunction, node: ast.Call, pre: list[Node], top: bool) -> Value | None:
        """Lower a call of ``fn``: its statements go to ``pre``, its result is returned (None for
        a function without one). ``top``: the call is a whole statement or a whole right-hand
        side, the only places a function that writes buffers may be called."""
        if fn.writes and not top:
            self.fail(node, f"{fn.name}() writes to arrays, so where it runs inside a larger expression "
                      "would change what the rest of the expression reads",
                      f"call it on its own line, or assign its result first: r = {ast.unparse(node)}")
        if fn in self.state.stack:
            self.fail(node, f"{fn.name}() calls itself (recursion has no IR meaning)", "write it as a loop")
        if node.keywords:
            self.fail(node, f"{fn.name}() takes positional arguments in a kernel", "pass arguments by position")
        if len(node.args) != len(fn.params):
            self.fail(node, f"{fn.name}() takes {len(fn.params)} arguments, got {len(node.args)}",
                      f"pass {', '.join(p for p, _ in fn.params)}")
        args: list[Value | BufRef] = []
        for a, (p, ann) in zip(node.args, fn.params, strict=True):
            v = self.expr(a, pre)
            if (ann is not None and isinstance(ann, _ArrayType) != isinstance(v, BufRef)) or isinstance(v, Py):
                want = "an array" if isinstance(ann, _ArrayType) else "a value"
                self.fail(a, f"{fn.name}()'s parameter `{p}` takes {want}", "pass the matching argument")
            if isinstance(ann, DataType):
                v = self.typing(a, lambda v=v, t=ann, p=p: coerce(v, t, f"parameter `{p}` of {fn.name}()"))
            elif isinstance(v, BufRef):
                v = self.array_argument(fn, p, ann, v, a)
            args.append(v)  # type: ignore[arg-type]
        self.state.stack.append(fn)
        try:
            if fn.pure_candidate and all(isinstance(v, (Typed, Weak)) for v in args):
                got = self.pure_call(fn, args)  # type: ignore[arg-type]
                if got is not None:
                    return got
            return self.inline(fn, args, pre, node)
        finally:
            self.state.stack.pop()

    def array_argument(self, fn: DeviceFunction, p: str, ann: Any, buf: BufRef, node: ast.AST) -> BufRef:
        """``buf`` as the function's array parameter ``p`` (messages from its body name ``p``): of
        the annotation's element type, and seen through the annotation (a ``Uniform`` parameter is
        never written in the body, a ``WriteOnly`` one never read), whatever array is passed."""
        seen = replace(buf, alias=p) if p != buf.name else buf
        if not isinstance(ann, _ArrayType):  # unannotated: the array's own rules
            return seen
        if ann.element is not buf.dtype:
            assert isinstance(ann.element, DataType)
            self.fail(node, f"{fn.name}()'s parameter `{p}` is {ann!r}; `{ast.unparse(node)}` holds {buf.dtype.short}",
                      f"pass an array of {ann.element.short}, or change the annotation")
        if ann.kind == "array" or ann.kind == buf.kind:
            return seen
        if buf.kind in ("array", "workgroup"):
            return replace(seen, kind=ann.kind, declared=p)
        self.fail(node, f"{fn.name}()'s parameter `{p}` is {ann!r}, but `{ast.unparse(node)}` is "
                  f"{'a Uniform array (never written)' if buf.kind == 'uniform' else 'a WriteOnly array (never read)'}",
                  f"annotate `{p}` as Array[{buf.dtype.short}], or pass another array")

    def pure_call(self, fn: DeviceFunction, args: list[Value]) -> Value | None:
        """``fn`` as an IR FunctionDef and a Call of it, when its body allows (else None)."""
        sub = type(self)(self.state, fn.source, fn.env, kernel=False)
        sub.pure = True
        params = tuple(fn.param_types)  # all annotated scalars (pure_candidate)
        for p, t in params:
            sub.bind(p, Local(p, t, 0))
        ret = fn.source.tree.body[-1]
        assert isinstance(ret, ast.Return) and ret.value is not None
        try:
            v = sub.value(ret.value, [])
            res = fn.result
            tv = sub.typing(ret.value, lambda: coerce(v, res, "the result") if res else typed(v))
        except _Impure:
            return None
        if any(isinstance(x, (LoadE, Atomic)) or type(x).__name__ in _IMPURE_EXPRS for x in walk(tv.expr)):
            return None
        op_id = self.function_name(fn, FunctionDef(fn.name, params, tv.dtype, tv.expr))
        call_args = tuple(typed(a, t).expr for a, (_, t) in zip(args, params, strict=True))
        return Typed(Call(op_id, call_args), tv.dtype)

    def function_name(self, fn: DeviceFunction, fdef: FunctionDef) -> str:
        for k, existing in self.state.functions.items():
            if existing == FunctionDef(k, fdef.params, fdef.result, fdef.body):
                return k
        name = fdef.op_id
        n = 1
        while name in self.state.functions or name in CALL_HEADS:
            n += 1
            name = f"{fdef.op_id}_{n}"
        self.state.functions[name] = FunctionDef(name, fdef.params, fdef.result, fdef.body)
        return name

    def inline(self, fn: DeviceFunction, args: list[Value | BufRef], pre: list[Node], node: ast.AST) -> Value | None:
        sub = type(self)(self.state, fn.source, fn.env, kernel=False)
        for (p, _), a in zip(fn.params, args, strict=True):
            if isinstance(a, BufRef):
                sub.bind(p, a)
            else:
                ta = self.typing(node, lambda a=a: typed(a))
                ir = self.fresh(f"{fn.name}_{p}")
                pre.append(self.note(Let(ir, ta.expr), node))
                sub.bind(p, Local(ir, ta.dtype, fn.source.tree.lineno))
        body = [s for k, s in enumerate(fn.source.tree.body) if not (k == 0 and _is_doc(s))]
        check_returns(fn.source, body)
        if body and isinstance(body[-1], ast.Return) and not any(
                isinstance(n, ast.Return) for s in body[:-1] for n in ast.walk(s)):
            last = body[-1]
            pre += sub.stmts(body[:-1])
            if last.value is None:
                return None
            v = sub.value(last.value, pre)
            if fn.result is not None:
                v = sub.typing(last.value, lambda: coerce(v, fn.result, f"{fn.name}()'s result"))
            return v
        if not any(isinstance(n, ast.Return) and n.value is not None for s in body for n in ast.walk(s)):
            pre += sub.stmts(body)
            return None
        inits: list[Node] = []
        name = self.fresh(f"{fn.name}_result")
        sub.ret = (name, inits, fn.result)
        if fn.result is not None:
            inits.append(Let(name, literal(0, fn.result) if fn.result is not DataType.BOOL else LitBool(False)))
        nodes = sub.stmts(body)
        assert sub.ret is not None and sub.ret[2] is not None
        pre += inits + nodes
        return Typed(Var(name), sub.ret[2])


def _is_doc(s: ast.stmt) -> bool:
    """A docstring (or a bare string used as a comment)."""
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)


def check_returns(src: Source, body: list[ast.stmt]) -> None:
    """A @vyre.func's returns must end every path (``return`` last, or last in both branches of
    a final if/else): the IR has no early exit from an expression."""
    def tail_ok(stmts: list[ast.stmt]) -> bool:
        for s in stmts[:-1]:
            for n in ast.walk(s):
                if isinstance(n, ast.Return):
                    raise src.error(n, "a `return` before the end of a @vyre.func has no IR meaning",
                                    "compute the result in a local and return it once at the end, or "
                                    "return from both branches of a final if/else")
        if not stmts:
            return False
        last = stmts[-1]
        if isinstance(last, ast.Return):
            return True
        if isinstance(last, ast.If):
            a, b = tail_ok(last.body), tail_ok(last.orelse)
            if a != b:
                raise src.error(last, "only one branch of this if returns",
                                "return from both branches (add an else), or return once after the if")
            return a
        for n in ast.walk(last):
            if isinstance(n, ast.Return):
                raise src.error(n, "a `return` inside a loop has no IR meaning",
                                "compute the result in a local and return it after the loop")
        return False

    has_value = any(isinstance(n, ast.Return) and n.value is not None for s in body for n in ast.walk(s))
    if has_value and not tail_ok(body):
        raise src.error(None, "not every path through the function returns a value",
                        "end the function with a return")
