"""Lowering a kernel function's statements to IR statements, and assembling the Program.

Scoping follows the IR: a local first assigned inside an ``if`` or a loop lives in that block; using
it after the block is an error with a fix (give it a value before the block), except that a local
assigned in both branches of an ``if``/``else`` with one type is declared before the ``If``. A local
keeps the type of its first assignment. ``@vyre.func`` calls become IR ``Call`` s of a ``FunctionDef`` when the
function is one pure ``return`` over annotated scalar parameters, and are inlined otherwise.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from ..ir import BufferAccess, BufferDecl, DataType, Program
from ..ir.expr import FunctionDef, LitBool, Var
from ..ir.expr import Load as LoadE
from ..ir.node import Assign, Barrier, If, Let, Loop, Node, Return, Store
from .calls import CallLowering, _is_doc
from .exprs import Binding, Local, Py
from .intrinsics import INTRINSICS
from .values import BufRef, TypeProblem, Typed, Value, Weak, coerce, literal, typed

if TYPE_CHECKING:
    from .source import Source

_AUG = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
        ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}

_REJECTED_STMTS: dict[type, tuple[str, str]] = {
    ast.While: ("`while` loops have no IR meaning (their exit depends on data)",
                "loop a bounded number of times with `for k in range(n):` and guard the body with `if`"),
    ast.Break: ("`break` has no IR meaning (loops run their whole range)",
                "guard the rest of the body with an `if` on a flag local"),
    ast.Continue: ("`continue` has no IR meaning", "guard the rest of the body with an `if`"),
    ast.Try: ("try/except has no IR meaning (nothing raises on the device)", "remove it"),
    ast.With: ("`with` has no IR meaning", "remove it"),
    ast.Raise: ("`raise` has no IR meaning (nothing raises on the device)",
                "check inputs before dispatch, or write a flag to an output buffer"),
    ast.Assert: ("`assert` has no IR meaning on the device", "check inputs before dispatch"),
    ast.Delete: ("`del` has no IR meaning", "remove it"),
    ast.Global: ("`global` has no IR meaning: kernels write only buffers", "pass an Array parameter and store into it"),
    ast.Nonlocal: ("`nonlocal` has no IR meaning", "pass an Array parameter and store into it"),
    ast.FunctionDef: ("nested functions (closures) have no IR meaning",
                      "define it at module level with @vyre.func"),
    ast.AsyncFunctionDef: ("nested functions have no IR meaning", "define it at module level with @vyre.func"),
    ast.ClassDef: ("classes have no IR meaning in a kernel", "move it out of the kernel"),
    ast.Import: ("imports inside a kernel have no IR meaning", "import at module level"),
    ast.ImportFrom: ("imports inside a kernel have no IR meaning", "import at module level"),
    ast.Match: ("`match` has no IR meaning", "use if / elif / else"),
    ast.AsyncFor: ("async loops have no IR meaning", "use for k in range(n):"),
    ast.AsyncWith: ("`async with` has no IR meaning", "remove it"),
}


@dataclass
class KernelState:
    """What the lowering of one kernel (and the functions it inlines) shares."""

    buffers: dict[str, BufRef]
    written: set[str] = field(default_factory=set)
    workgroup: dict[str, BufferDecl] = field(default_factory=dict)
    functions: dict[str, FunctionDef] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    stack: list[Any] = field(default_factory=list)
    lines: dict[int, tuple[Node, Source, ast.AST]] = field(default_factory=dict)

    def fresh(self, hint: str) -> str:
        n, name = 0, hint
        while name in self.used:
            n += 1
            name = f"{hint}_{n}"
        self.used.add(name)
        return name


def _names(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


class FnLowering(CallLowering):
    """Lowers one function body (the kernel's or an inlined @vyre.func's)."""

    def __init__(self, state: KernelState, src: Source, env: Mapping[str, Any], kernel: bool) -> None:
        self.state, self.src, self.env, self.kernel = state, src, env, kernel
        self.scopes: list[dict[str, Binding]] = [{}]
        self.gone: dict[str, str] = {}
        self.pure = False
        self.ret: tuple[str, list[Node], DataType | None] | None = None  # inlined: result local
        self.irnames: dict[str, str] = {}
        state.used |= _names(src.tree)

    # ---- plumbing for the expression half -------------------------------------------------------

    def fresh(self, hint: str) -> str:
        return self.state.fresh(hint)

    def note(self, n: Node, node: ast.AST) -> Node:
        self.state.lines[id(n)] = (n, self.src, node)
        return n

    def mark_written(self, buf: BufRef, node: ast.AST) -> None:
        if buf.kind == "scalar":
            self.fail(node, f"`{buf.name}` is a scalar parameter; it cannot be written",
                      f"make it an array (`{buf.name}: Array[...]`) or copy it to a local")
        if buf.kind == "uniform":
            self.fail(node, f"{buf.shown} is a Uniform array (read-only, the same for every invocation); "
                      "it cannot be written",
                      f"make it an output array (`{buf.spelled}: Array[{buf.dtype.short}]`, or WriteOnly[...] "
                      "if it is never read), or copy the value to a local")
        self.state.written.add(buf.name)

    def bind(self, name: str, b: Binding) -> None:
        self.scopes[-1][name] = b
        self.gone.pop(name, None)

    def block(self, body: list[ast.stmt], where: str) -> list[Node]:
        return self.scoped_block(body, where)[0]

    def scoped_block(self, body: list[ast.stmt], where: str) -> tuple[list[Node], dict[str, Binding]]:
        """The statements of a nested scope, and the locals it bound (gone after it)."""
        self.scopes.append({})
        out: list[Node] = []
        for s in body:
            self.stmt(s, out)
        scope = self.scopes.pop()
        for name, b in scope.items():
            if isinstance(b, Local):
                self.gone[name] = (f"`{name}` was first assigned inside {where} (line "
                                   f"{b.line + self.src.line_offset}), so it exists only in that block")
        return out, scope

    def if_stmt(self, s: ast.If, c: Typed, pre: list[Node]) -> None:
        """An If; a local first assigned in *both* branches with one type outlives the If (Python
        code does this all the time): it is declared before the If and assigned in each branch."""
        line = s.lineno + self.src.line_offset
        then, t_new = self.scoped_block(s.body, f"the `if` at line {line}")
        other, e_new = self.scoped_block(s.orelse, f"the `else` of line {line}")
        for name, a in t_new.items():
            b = e_new.get(name)
            if not (isinstance(a, Local) and isinstance(b, Local) and not a.loop and not b.loop
                    and a.ir == b.ir and a.dtype is b.dtype):
                continue
            then, other = _let_to_assign(then, a.ir), _let_to_assign(other, a.ir)
            zero = literal(0, a.dtype) if a.dtype is not DataType.BOOL else LitBool(False)
            pre.append(self.note(Let(a.ir, zero), s))
            self.bind(name, Local(a.ir, a.dtype, a.line))
        pre.append(self.note(If(c.expr, tuple(then), tuple(other)), s))

    # ---- statements ----------------------------------------------------------------------------

    def stmts(self, body: list[ast.stmt]) -> list[Node]:
        out: list[Node] = []
        for k, s in enumerate(body):
            if k == 0 and _is_doc(s):
                continue
            self.stmt(s, out)
        return out

    def stmt(self, s: ast.stmt, out: list[Node]) -> None:
        pre: list[Node] = []
        match s:
            case ast.Assign(targets=targets, value=value):
                if len(targets) != 1:
                    self.fail(s, "chained assignment (a = b = ...) has no IR meaning",
                              "assign each local on its own line")
                self.assign(s, targets[0], value, None, pre)
            case ast.AnnAssign(target=target, annotation=ann, value=value):
                if value is None:
                    self.fail(s, "a declaration without a value", f"give it a value: {ast.unparse(s)} = 0")
                t = self.scalar_type(ann, pre)
                self.assign(s, target, value, t, pre)
            case ast.AugAssign(target=target, op=op, value=value):
                self.aug_assign(s, target, op, value, pre)
            case ast.If(test=test, body=body, orelse=orelse):
                c = self.cond(test, pre, "`if`")
                if isinstance(c.expr, LitBool) and isinstance(test, (ast.Constant, ast.Name, ast.Attribute)):
                    # a compile-time flag (if DEBUG:): only the taken branch is compiled
                    pre += self.block(body if c.expr.value else orelse, "an `if`")
                else:
                    self.if_stmt(s, c, pre)
            case ast.For():
                self.for_loop(s, pre)
            case ast.Return(value=value):
                self.ret_stmt(s, value, pre)
            case ast.Expr(value=value):
                self.expr_stmt(s, value, pre)
            case ast.Pass():
                pass
            case _:
                why, fix = _REJECTED_STMTS.get(type(s), (f"`{type(s).__name__}` statements have no IR meaning",
                                                         "use assignments, if/else, for-range loops and calls"))
                self.fail(s, why, fix)
        out += pre

    def assign(self, s: ast.stmt, target: ast.expr, value: ast.expr, t: DataType | None,
               pre: list[Node]) -> None:
        if isinstance(target, ast.Subscript):
            buf = self.buffer_of(target.value, pre)
            self.mark_written(buf, target)
            v = self.as_value(self.expr(value, pre, top=True), value)  # Python evaluates the value first
            idx = self.index(target.slice, pre)
            tv = self.typing(value, lambda: coerce(v, buf.dtype, f"a store into `{buf.name}` ({buf.dtype.short})"))
            pre.append(self.note(Store(buf.name, idx, tv.expr), s))
            return
        if not isinstance(target, ast.Name):
            self.fail(target, f"assigning to `{ast.unparse(target)}` has no IR meaning",
                      "assign one local (x = ...) or one element (out[i] = ...) per line")
        name = target.id
        if isinstance(value, ast.Call) and self.is_intrinsic(value.func, "workgroup_array"):
            self.workgroup_array(s, name, value, pre)
            return
        current = self.current(name)
        v = self.as_value(self.expr(value, pre, top=True), value)
        if current is None:
            tv = self.typing(value, lambda: coerce(v, t, "the annotation") if t is not None else typed(v))
            if pre and isinstance(tv.expr, Var) and isinstance(pre[-1], Let) and pre[-1].name == tv.expr.name:
                # `old = atomic_add(...)`, `s = subgroup_reduce(...)`: bind under the user's name
                tv = Typed(pre.pop().value, tv.dtype)  # type: ignore[union-attr]
            self.bind(name, Local(self.ir_name(name), tv.dtype, s.lineno))
            local = self.current(name)
            assert isinstance(local, Local)
            pre.append(self.note(Let(local.ir, tv.expr), s))
            return
        self.reassign(s, name, current, v, value, pre)

    def reassign(self, s: ast.stmt, name: str, current: Binding, v: Value, value: ast.AST,
                 pre: list[Node]) -> None:
        if isinstance(current, BufRef):
            self.fail(s, f"`{name}` is a parameter; it cannot be reassigned",
                      f"use a new local name, or store into it ({name}[i] = ...)" if current.kind != "scalar"
                      else f"copy it to a new local first: {name}_2 = {name}")
        if isinstance(current, Py):
            self.fail(s, f"`{name}` names a Python object here", "use a new local name")
        if current.param:
            self.fail(s, f"`{name}` is a scalar parameter; it cannot be reassigned",
                      f"copy it to a new local first: {name}_2 = {name}")
        if current.loop:
            self.fail(s, f"`{name}` is a loop variable, read-only in the IR", f"copy it first: j = {name}")
        try:
            tv = coerce(v, current.dtype, f"`{name}`")
        except TypeProblem:
            got = typed(v).dtype.short if isinstance(v, Weak) else v.dtype.short
            self.fail(s, f"`{name}` is {current.dtype.short} (first assigned at line "
                      f"{current.line + self.src.line_offset}); here it is assigned {got}. A local keeps its type",
                      f"convert: {name} = vyre.{_spelled(current.dtype)}(...), "
                      "or use a new name")
        pre.append(self.note(Assign(current.ir, tv.expr), s))

    def aug_assign(self, s: ast.AugAssign, target: ast.expr, op: ast.operator, value: ast.expr,
                   pre: list[Node]) -> None:
        if type(op) not in _AUG:
            self.fail(s, f"`{ast.unparse(s)}` has no IR meaning", "write x = x * y etc.")
        if isinstance(target, ast.Subscript):
            buf = self.buffer_of(target.value, pre)
            self.mark_written(buf, target)
            self.mark_read(buf, target, f"`{ast.unparse(s)}` reads its old value")
            idx = self.index(target.slice, pre)
            old = Typed(LoadE(buf.name, idx), buf.dtype)
            new = self.binop(s, op, old, self.value(value, pre))
            tv = self.typing(s, lambda: coerce(new, buf.dtype, f"a store into `{buf.name}`"))
            pre.append(self.note(Store(buf.name, idx, tv.expr), s))
            return
        if not isinstance(target, ast.Name):
            self.fail(target, f"`{ast.unparse(target)}` cannot be updated", "update a local or an element")
        current = self.current(target.id)
        if current is None:
            self.lookup(target.id, target)  # says why if it went out of scope
            self.fail(target, f"`{target.id}` is not defined yet", f"give it a value first: {target.id} = 0")
        cur = self.expr(ast.Name(target.id, ast.Load(), lineno=s.lineno, col_offset=s.col_offset), pre)
        if not isinstance(cur, Typed):
            self.reassign(s, target.id, current, typed(Weak(int, lambda t: literal(0, t), 0, False)), s, pre)
            return
        new = self.binop(s, op, cur, self.value(value, pre))
        self.reassign(s, target.id, current, new, s, pre)

    def current(self, name: str) -> Binding | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def ir_name(self, name: str) -> str:
        """The IR name of a local: the Python name in a kernel; in an inlined function one fresh
        name per Python name (so both branches of an if bind the same one)."""
        if self.kernel:
            return name
        if name not in self.irnames:
            self.irnames[name] = self.fresh(self.prefix + name)
        return self.irnames[name]

    @property
    def prefix(self) -> str:
        return "" if self.kernel else f"{self.src.tree.name}_"

    def is_intrinsic(self, func: ast.expr, kind: str) -> bool:
        try:
            f = self.expr(func, [])
        except Exception:
            return False
        intr = INTRINSICS.get(id(f.obj)) if isinstance(f, Py) else None
        return intr is not None and intr.kind == kind

    def workgroup_array(self, s: ast.stmt, name: str, call: ast.Call, pre: list[Node]) -> None:
        if not self.kernel or len(self.scopes) != 1:
            self.fail(s, "workgroup memory is declared only at the top level of a kernel",
                      "move `name = vyre.workgroup_array(count, dtype)` to the kernel's top level")
        if self.current(name) is not None or name in self.state.buffers:
            self.fail(s, f"`{name}` is already defined", "use a new name for the workgroup array")
        count_e, t_e = self.args(call, 2, 2, "workgroup_array")
        count = self.static_int(count_e, pre, "the workgroup array's size")
        if count <= 0:
            self.fail(count_e, f"a workgroup array of {count} elements", "use a positive size")
        t = self.scalar_type(t_e, pre)
        ref = BufRef(name, t, "workgroup")
        self.state.buffers[name] = ref
        self.state.workgroup[name] = BufferDecl.workgroup(name, count, t)
        self.bind(name, ref)

    def for_loop(self, s: ast.For, pre: list[Node]) -> None:
        if s.orelse:
            self.fail(s.orelse[0], "`for ... else` has no IR meaning", "move the else body after the loop")
        if not isinstance(s.target, ast.Name):
            self.fail(s.target, "a loop variable must be one name", "write for k in range(n):")
        if not (isinstance(s.iter, ast.Call) and self.is_intrinsic(s.iter.func, "range")):
            self.fail(s.iter, "only `for k in range(...)` loops have an IR meaning",
                      "loop over indices: for k in range(len(x)): ... x[k]")
        args = self.args(s.iter, 1, 3, "range")
        name = s.target.id
        if self.current(name) is not None:
            self.fail(s.target, f"`{name}` is already a local; an IR loop variable is a new name",
                      "use a new name for the loop variable")
        lo = self.loop_bound(args[0], pre) if len(args) > 1 else Typed(literal(0, DataType.U32), DataType.U32)
        hi = self.loop_bound(args[1] if len(args) > 1 else args[0], pre)
        step = self.static_int(args[2], pre, "range()'s step") if len(args) == 3 else 1
        if step <= 0:
            self.fail(args[2], f"range() step {step}: IR loops count up",
                      "count up and index from the end: x[n - 1 - k]")
        ir_name = name if self.kernel else self.fresh(self.prefix + name)
        self.scopes.append({name: Local(ir_name, DataType.U32, s.lineno, loop=True)})
        if step == 1:
            body = self.block(s.body, f"the loop at line {s.lineno + self.src.line_offset}")
            self.scopes.pop()
            pre.append(self.note(Loop(ir_name, lo.expr, hi.expr, tuple(body)), s))
        else:  # k = lo + t * step for t in 0 .. ceil((hi - lo) / step)
            t = self.fresh(f"{name}_step")
            lo_v = self.hoist(pre, lo.expr, DataType.U32, f"{name}_lo", s)
            count = self.hoist(pre, ((hi.expr > lo_v.expr).cast(DataType.U32)) * (
                (hi.expr - lo_v.expr - 1) // step + 1), DataType.U32, f"{name}_n", s)
            self.scopes[-1] = {name: Local(ir_name + "_v", DataType.U32, s.lineno, loop=True)}
            body = self.block(s.body, f"the loop at line {s.lineno + self.src.line_offset}")
            self.scopes.pop()
            head = Let(ir_name + "_v", lo_v.expr + Var(t) * step)
            pre.append(self.note(Loop(t, literal(0, DataType.U32), count.expr, (head, *body)), s))
        self.gone[name] = f"`{name}` is the variable of the loop at line {s.lineno + self.src.line_offset}"

    def loop_bound(self, e: ast.expr, pre: list[Node]) -> Typed:
        v = self.value(e, pre, "a range bound")
        if isinstance(v, Typed) and v.dtype is not DataType.U32:
            self.fail(e, f"range() bounds are u32, got {v.dtype.short}", f"convert: vyre.u32({ast.unparse(e)})")
        return self.typing(e, lambda: typed(v, DataType.U32))  # type: ignore[no-any-return]

    def ret_stmt(self, s: ast.Return, value: ast.expr | None, pre: list[Node]) -> None:
        if self.kernel:
            if value is not None:
                self.fail(s, "a kernel returns no value (results go to output arrays)",
                          "store the value into an Array parameter: out[i] = ...")
            pre.append(self.note(Return(), s))
            return
        if self.ret is None or value is None:
            self.fail(s, "`return` here has no IR meaning", "return once, at the end of the function")
        name, inits, t = self.ret
        v = self.value(value, pre)
        if t is None:
            tv = self.typing(value, lambda: typed(v))
            self.ret = (name, inits, tv.dtype)
            inits.append(Let(name, literal(0, tv.dtype) if tv.dtype is not DataType.BOOL else LitBool(False)))
        else:
            tv = self.typing(value, lambda: coerce(v, t, "the function's result"))
        pre.append(self.note(Assign(name, tv.expr), s))

    def expr_stmt(self, s: ast.Expr, value: ast.expr, pre: list[Node]) -> None:
        if isinstance(value, ast.Call):
            if self.is_intrinsic(value.func, "barrier"):
                self.args(value, 0, 0, "barrier")
                pre.append(self.note(Barrier(), s))
                return
            f = self.expr(value.func, pre)
            from .api import DeviceFunction

            if isinstance(f, Py) and isinstance(f.obj, DeviceFunction):
                self.call_func(f.obj, value, pre, top=True)
                return
            if isinstance(f, Py) and INTRINSICS.get(id(f.obj)) is not None and \
                    INTRINSICS[id(f.obj)].kind in ("atomic", "atomic_any"):
                self.expr(value, pre, top=True)
                return
            self.expr(value, pre)
        elif isinstance(value, ast.Constant) and isinstance(value.value, str):
            return  # a string as a comment
        else:
            self.expr(value, pre)
        self.fail(s, f"`{ast.unparse(value)}` computes a value that is never used",
                  "assign it to a local or store it into an output array")

def _let_to_assign(body: list[Node], name: str) -> list[Node]:
    """``body`` with its top-level ``Let name = v`` made ``name = v`` (declared before the If)."""
    return [Assign(n.name, n.value) if isinstance(n, Let) and n.name == name else n for n in body]


def _spelled(t: DataType) -> str:
    return "boolean" if t is DataType.BOOL else t.short


def program_for(state: KernelState, params: list[BufRef], entry: list[Node], wg: tuple[int, int, int],
                src: Source) -> Program:
    """Assemble and validate; a validation finding is reported at the statement it concerns."""
    decls: list[BufferDecl] = []
    for k, p in enumerate(params):
        if p.kind == "scalar":
            decls.append(BufferDecl(p.name, k, BufferAccess.UNIFORM, p.dtype, count=1))
        elif p.kind == "uniform":
            decls.append(BufferDecl(p.name, k, BufferAccess.UNIFORM, p.dtype, p.count))
        elif p.kind == "write_only":  # returned even if no path stores into it (it is what was asked for)
            decls.append(BufferDecl(p.name, k, BufferAccess.WRITE_ONLY, p.dtype, p.count, is_output=True))
        elif p.name in state.written:
            decls.append(BufferDecl(p.name, k, BufferAccess.READ_WRITE, p.dtype, p.count, is_output=True))
        else:
            decls.append(BufferDecl(p.name, k, BufferAccess.READ_ONLY, p.dtype, p.count))
    decls += state.workgroup.values()
    fns = tuple(state.functions[k] for k in sorted(state.functions))
    prog = Program(tuple(decls), wg, tuple(entry), fns)
    try:
        return prog.validate()
    except ValidationError as e:
        d = e.diagnostics[0]
        where = _node_at(prog, d.path)
        hit = state.lines.get(id(where)) if where is not None else None
        s, node = (hit[1], hit[2]) if hit else (src, None)
        text = d.message
        what, _, fix = text.partition("Fix: ")
        raise s.error(node, f"[{d.code}] {what.strip().rstrip('.')}",
                      fix or "see docs/errors.md for the code") from None


def _node_at(prog: Program, path: str) -> Node | None:
    """The deepest statement a diagnostic path (``entry[2].then[0].value``) names."""
    cur: Any = prog
    found: Node | None = None
    for attr, idx in re.findall(r"(\w+)(?:\[(\d+)\])?", path):
        nxt = getattr(cur, attr, None)
        if nxt is None:
            break
        if idx:
            try:
                nxt = nxt[int(idx)]
            except (IndexError, TypeError, KeyError):
                break
        cur = nxt
        if type(cur).__name__ in ("Let", "Assign", "Store", "If", "Loop", "Block", "Barrier", "Return", "Region"):
            found = cur
    return found


def lower_kernel(src: Source, env: Mapping[str, Any], params: list[BufRef], wg: tuple[int, int, int]) -> Program:
    state = KernelState({p.name: p for p in params})
    low = FnLowering(state, src, env, kernel=True)
    used = _names(ast.Module(body=src.tree.body, type_ignores=[]))
    entry: list[Node] = []
    for p in params:
        if p.kind == "scalar" and p.name in used:
            # read once, under its own name: the IR then reads like the source (`a * x[i]`)
            entry.append(low.note(Let(p.name, LoadE(p.name, literal(0, DataType.U32))), src.tree))
            low.bind(p.name, Local(p.name, p.dtype, src.tree.lineno, param=True))
        else:
            low.bind(p.name, p)
    entry += low.stmts(src.tree.body)
    return program_for(state, params, entry, wg, src)

