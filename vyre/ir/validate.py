"""Validation: every problem in a program, as coded diagnostics (codes in ``docs/errors.md``).

:func:`diagnostics` type-checks a program and checks names, scopes, buffer access, the placement of
barriers / subgroup ops / atomics, and size limits, collecting every finding instead of stopping at
the first. Programs come from users and from bytes, so nothing here may crash on a malformed
object: a value of the wrong Python type is a V001 finding, and no walk recurses past the checked
limits (a 10 000-deep expression is a V064 finding, not a ``RecursionError``).

Order of work:

1. the shapes of the program, its buffers and its workgroup size;
2. one iterative, memoised measurement of every statement and expression (tree size, expression
   depth, statement nesting), so a program whose tree is too large (V065) is rejected before any
   walk that could blow up on it (shared sub-trees make a small object graph a huge tree);
3. functions: bodies, the calls between them, cycles;
4. which ``Let`` bindings are ever assigned (a uniform variable must never be);
5. the scoped walk of ``entry``: types, names, access, placement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import Diagnostic
from ._check_expr import Bind, ExprChecker
from ._checks import (
    CODES, MAX_BUFFERS, MAX_INVOCATIONS, MAX_NEST, MAX_NODES, MAX_WORKGROUP_BYTES, NODE_FIELDS,
    SUBGROUP_SIZE, F, convert_fix, describe, is_identifier, is_label, kids, measure, show,
    strongly_connected, typed,
)
from .expr import (
    Call, FunctionAdjoint, FunctionDef,
)
from .node import Assign, Barrier, Block, If, Let, Loop, Region, Return, Store
from .program import BufferDecl, Program
from .types import DataType

__all__ = ["CODES", "diagnostics", "is_identifier", "is_label", "validate_function"]


_U32, _BOOL = DataType.U32, DataType.BOOL


def diagnostics(program: Program) -> list[Diagnostic]:
    """Every validation finding for ``program`` (empty when it is valid), in discovery order."""
    c = _Checker()
    if not isinstance(program, Program):
        c.add("V001", "program", f"got {describe(program)}, expected a Program. "
              "Fix: build one with Program(...) or Program.wrapped(...)")
        return c.diags
    shapes_ok = c.program_shapes(program)
    if not shapes_ok:
        return c.diags
    c.buffer_decls(program.buffers)
    invocations = c.workgroup(program.workgroup_size)
    total = sum(measure(x, c.memo)[0] for x in (*program.entry, *program.functions))
    if total > MAX_NODES:
        shown = total if total < 10**9 else "over 10^9"
        c.add("V065", "program", f"the program has {shown} statements and expressions (counting "
              f"shared sub-trees once per use); expected at most {MAX_NODES}. Fix: split the "
              "work into several programs, or move repeated expressions into Let bindings")
        return c.diags
    where: dict[str, str] = {}
    for i, f in enumerate(program.functions):
        if _def_ok(f):
            c.functions.setdefault(f.op_id, f)
            where.setdefault(f.op_id, f"functions[{i}]")
    c.function_defs(program.functions, "functions")
    c.check_cycles(c.functions, where)
    c.find_assigned(program.entry, [], 1)
    c.block(program.entry, "entry", 1, True, {})
    if c.uses_sync:
        for p in c.bad_returns:
            c.add("V034", p, "Return inside an If or a non-uniform Loop, in a program that uses "
                  "barriers or subgroup ops; expected Returns only at uniform points (the others "
                  "would wait at the barrier forever). Fix: guard the work with an If instead of "
                  "returning early")
    if c.subgroup_at is not None and invocations is not None and invocations % SUBGROUP_SIZE:
        c.add("V035", c.subgroup_at, f"subgroup op in a program with {invocations} invocations "
              f"per workgroup; expected a multiple of {SUBGROUP_SIZE}. Fix: use a workgroup size "
              "such as (64, 1, 1)")
    return c.diags


def validate_function(
    fn: FunctionDef,
    functions: Mapping[str, FunctionDef] | Iterable[FunctionDef] | None = None,
) -> list[Diagnostic]:
    """Findings for one function definition (codes V001, V002, V04x, V064, ...).

    Calls in its body resolve in ``functions`` (a mapping or an iterable of definitions; default:
    the registry of :func:`vyre.ir.register_function`), and ``fn`` itself. Paths start at
    ``function``."""
    from .functions import registered

    c = _Checker()
    if not isinstance(fn, FunctionDef):
        c.add("V001", "function", f"got {describe(fn)}, expected a FunctionDef. "
              "Fix: build one with FunctionDef(op_id, params, result, body)")
        return c.diags
    if measure(fn, c.memo)[0] > MAX_NODES:
        c.add("V065", "function", f"the function body has more than {MAX_NODES} expressions; "
              "expected fewer. Fix: split it into smaller functions")
        return c.diags
    table: dict[str, FunctionDef] = {}
    if functions is None:
        pending = [fn]
        while pending:
            for x in _called_names(pending.pop()):
                g = registered(x)
                if g is not None and x not in table:
                    table[x] = g
                    pending.append(g)
    else:
        items = functions.values() if isinstance(functions, Mapping) else functions
        table = {g.op_id: g for g in items if isinstance(g, FunctionDef) and isinstance(g.op_id, str)}
    c.functions = {k: v for k, v in table.items() if _def_ok(v)}
    if _def_ok(fn):
        c.functions[fn.op_id] = fn
    c.function_defs([fn], "function", single=True)
    graph_roots = {fn.op_id: "function"} if isinstance(fn.op_id, str) else {}
    c.check_cycles(c.functions, graph_roots)
    return c.diags


def _def_ok(fn: object) -> bool:
    """Fields of usable Python types (a call to it can then be type-checked)."""
    params = getattr(fn, "params", None)
    return (isinstance(fn, FunctionDef) and isinstance(getattr(fn, "op_id", None), str)
            and isinstance(getattr(fn, "result", None), DataType) and isinstance(params, tuple)
            and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                    and isinstance(p[1], DataType) for p in params))


def _called_names(fn: FunctionDef) -> list[str]:
    """op_ids called in ``fn``'s body (each distinct sub-expression object visited once)."""
    out: list[str] = []
    stack: list[object] = [getattr(fn, "body", None)]
    seen: set[int] = set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Call) and isinstance(x.op_id, str) and x.op_id not in out:
            out.append(x.op_id)
        stack.extend(kids(x))
    return out


class _Checker(ExprChecker):
    """Program-level checks (buffers, workgroup, functions) and the statement walk."""

    def program_shapes(self, p: Program) -> bool:
        ok = True
        for name in ("buffers", "entry", "functions"):
            v = getattr(p, name, None)
            if not isinstance(v, tuple):
                self.add("V001", name, f"Program.{name} is {describe(v)}, expected a tuple. "
                         "Fix: build the program with Program.wrapped(...), which makes tuples")
                ok = False
        return ok

    def buffer_decls(self, buffers: tuple[object, ...]) -> None:
        bindings: dict[int, str] = {}
        wg_bytes = 0
        if len(buffers) > MAX_BUFFERS:
            self.add("V066", "buffers", f"the program declares {len(buffers)} buffers; expected at "
                     f"most {MAX_BUFFERS}. Fix: pack related data into fewer, larger buffers")
        for i, b in enumerate(buffers):
            p = f"buffers[{i}]"
            if not isinstance(b, BufferDecl):
                self.add("V001", p, f"got {describe(b)}, expected a BufferDecl. "
                         "Fix: declare buffers with read(), read_write(), output(), workgroup() ...")
                continue
            spec = (("name", F.NAME), ("binding", F.INT), ("access", F.ACCESS),
                    ("element", F.DTYPE), ("count", F.INT), ("is_output", F.BOOL))
            if not self.fields_ok(b, spec, p, "buffer"):
                continue
            if b.name in self.buffers:
                self.add("V004", p, f"a second buffer named {show(b.name)}; expected unique buffer "
                         "names. Fix: rename one of them")
            elif is_identifier(b.name):
                self.buffers[b.name] = b
            if b.is_workgroup:
                if not 0 <= b.binding < 2**32:  # unused, but encoded: a u32 in the wire format
                    self.add("V006", p, f"workgroup buffer {show(b.name)} has binding {b.binding}; "
                             "expected a binding in [0, 2^32). Fix: leave it 0")
                if b.count <= 0:
                    self.add("V053", p, f"workgroup buffer {show(b.name)} has count {b.count}; "
                             "expected a positive element count. Fix: workgroup(name, count, dtype) "
                             "with count > 0")
                else:
                    wg_bytes += b.count * b.element.size_bytes
            else:
                if not 0 <= b.binding < 2**32:
                    self.add("V006", p, f"buffer {show(b.name)} has binding {b.binding}; expected "
                             "a binding in [0, 2^32). Fix: number bindings 0, 1, 2, ...")
                elif b.binding in bindings:
                    self.add("V005", p, f"buffer {show(b.name)} reuses binding {b.binding} of "
                             f"{show(bindings[b.binding])}; expected unique bindings among storage "
                             "buffers. Fix: give it an unused binding")
                else:
                    bindings[b.binding] = b.name
                if not 0 <= b.count < 2**32:
                    self.add("V056", p, f"buffer {show(b.name)} has count {b.count}; expected "
                             "0 (sized at dispatch) or a count below 2^32. Fix: use a smaller count")
            if b.is_output and (b.is_workgroup or not b.access.writable):
                self.add("V055", p, f"buffer {show(b.name)} is marked is_output but is "
                         f"{b.access.name}; expected a writable storage buffer (READ_WRITE or "
                         "WRITE_ONLY). Fix: use output(name, binding, dtype), or drop is_output")
        if wg_bytes > MAX_WORKGROUP_BYTES:
            self.add("V054", "buffers", f"workgroup buffers take {wg_bytes} bytes; expected at most "
                     f"{MAX_WORKGROUP_BYTES} (48 KiB). Fix: use smaller tiles")

    def workgroup(self, wg: object) -> int | None:
        if not (isinstance(wg, tuple) and len(wg) == 3 and all(type(v) is int for v in wg)):
            self.add("V060", "workgroup_size", f"workgroup_size is {describe(wg)}; expected three "
                     "ints (x, y, z). Fix: build with Program.wrapped(..., workgroup_size=64, ...)")
            return None
        if any(v < 1 for v in wg):
            self.add("V060", "workgroup_size", f"workgroup_size is {wg}; expected each entry >= 1. "
                     "Fix: use 1 for unused axes, e.g. (64, 1, 1)")
            return None
        n = wg[0] * wg[1] * wg[2]
        if n > MAX_INVOCATIONS:
            self.add("V061", "workgroup_size", f"workgroup_size {wg} has {n} invocations; expected "
                     f"at most {MAX_INVOCATIONS}. Fix: use a smaller workgroup, e.g. (256, 1, 1)")
        return n

    def function_defs(self, fns: Iterable[object], base: str, single: bool = False) -> None:
        """Check definitions and their bodies; calls resolve in ``self.functions``, which the
        caller fills first (so a body may call a function defined after it)."""
        seen: set[str] = set()
        for i, fn in enumerate(fns):
            p = base if single else f"{base}[{i}]"
            if not isinstance(fn, FunctionDef):
                self.add("V001", p, f"got {describe(fn)}, expected a FunctionDef. "
                         "Fix: pass FunctionDef objects")
                continue
            spec = (("op_id", F.NAME), ("params", F.EXPRS), ("result", F.DTYPE))
            if not self.fields_ok(fn, spec, p, "function"):
                continue
            params: dict[str, DataType] = {}
            for j, prm in enumerate(fn.params):
                pp = f"{p}.params[{j}]"
                if not (isinstance(prm, tuple) and len(prm) == 2 and isinstance(prm[0], str)
                        and isinstance(prm[1], DataType)):
                    self.add("V001", pp, f"parameter is {describe(prm)}; expected a (name, "
                             "DataType) pair. Fix: params=(('x', F32), ...)")
                    params = {}
                    break
                if not is_identifier(prm[0]):
                    self.add("V002", pp, f"parameter name {show(prm[0])} is not an identifier; "
                             "expected [A-Za-z_][A-Za-z0-9_]*, at most 64 characters. Fix: rename it")
                if prm[0] in params:
                    self.add("V047", pp, f"parameter {show(prm[0])} appears twice; expected "
                             "distinct parameter names. Fix: rename one")
                params[prm[0]] = prm[1]
            else:
                if fn.op_id in seen:
                    self.add("V047", p, f"a second function {show(fn.op_id)}; expected one "
                             "definition per op_id. Fix: remove or rename the duplicate")
                else:
                    seen.add(fn.op_id)
                self.params = params
                t = self.root(fn.body, f"{p}.body")
                self.params = None
                if t is not None and t != fn.result:
                    self.add("V046", f"{p}.body", f"function {show(fn.op_id)} body has type "
                             f"{typed(t, fn.body)}; expected the declared result {fn.result.short}. "
                             f"Fix: {convert_fix(fn.body, fn.result)}, or change the result type")
                if fn.adjoint is not None:
                    self.function_adjoint(fn, params, p)

    def function_adjoint(self, fn: FunctionDef, params: dict[str, DataType], p: str) -> None:
        """V067: a custom adjoint names fresh identifiers, has one entry per parameter, gives
        gradients only to float parameters of a float function, each of the parameter's type."""
        adj, where = fn.adjoint, f"{p}.adjoint"
        if not isinstance(adj, FunctionAdjoint):
            self.add("V067", where, f"adjoint is {describe(adj)}; expected a FunctionAdjoint. Fix: "
                     "FunctionAdjoint(result='r', cotangent='g', grads=(...one per parameter...))")
            return
        names = (adj.result, adj.cotangent)
        if not all(isinstance(n, str) and is_identifier(n) for n in names) or names[0] == names[1] \
                or any(n in params for n in names):
            self.add("V067", where, f"the adjoint's result and cotangent names {show(adj.result)}, "
                     f"{show(adj.cotangent)} must be two identifiers that are not parameters of "
                     f"{show(fn.op_id)}; expected two fresh names. Fix: e.g. result='r', cotangent='g'")
            return
        if not isinstance(adj.grads, tuple) or len(adj.grads) != len(fn.params):
            n = len(adj.grads) if isinstance(adj.grads, tuple) else describe(adj.grads)
            self.add("V067", f"{where}.grads", f"the adjoint of {show(fn.op_id)} gives {n} "
                     f"gradient(s); expected a tuple of {len(fn.params)}, one per parameter "
                     "(None where a parameter takes none). Fix: list one entry per parameter")
            return
        if not fn.result.is_float and any(g is not None for g in adj.grads):
            self.add("V067", where, f"function {show(fn.op_id)} returns {fn.result.short}, which "
                     "carries no gradient, yet its adjoint gives gradients; expected a float result. "
                     "Fix: drop the adjoint")
            return
        env = {**params, adj.result: fn.result, adj.cotangent: fn.result}
        for k, ((pname, ptype), g) in enumerate(zip(fn.params, adj.grads, strict=True)):
            gp = f"{where}.grads[{k}]"
            if g is None:
                continue
            if not ptype.is_float:
                self.add("V067", gp, f"parameter {show(pname)} is {ptype.short}, which takes no "
                         "gradient; expected None for it. Fix: write None for it")
                continue
            self.params = env
            t = self.root(g, gp)
            self.params = None
            if t is not None and t != ptype:
                self.add("V067", gp, f"the gradient of parameter {show(pname)} has type "
                         f"{typed(t, g)}; expected {ptype.short}, the parameter's type. "
                         f"Fix: {convert_fix(g, ptype)}")

    def check_cycles(self, functions: Mapping[str, FunctionDef], where: Mapping[str, str]) -> None:
        graph = {k: [x for x in _called_names(f) if x in functions] for k, f in functions.items()}
        for comp in strongly_connected(graph):
            head = next((x for x in comp if x in where), None)
            if head is None:
                continue
            if len(comp) == 1 and head not in graph[head]:
                continue
            ring = ", ".join(show(x) for x in comp[:4]) + (", ..." if len(comp) > 4 else "")
            self.add("V045", where[head], f"function {show(head)} calls itself (functions on the "
                     f"cycle: {ring}); "
                     "expected no recursion, since calls are inlined. Fix: unroll the recursion "
                     "into a Loop in the program")

    def find_assigned(self, body: object, scopes: list[dict[str, int]], depth: int) -> None:
        """Record ``id`` of every Let whose binding some Assign overwrites (-1 marks loop vars)."""
        if depth > MAX_NEST or not isinstance(body, tuple):
            return
        scope: dict[str, int] = {}
        scopes.append(scope)
        for n in body:
            match n:
                case Let(str() as name, _):
                    scope[name] = id(n)
                case Assign(str() as name, _):
                    for s in reversed(scopes):
                        if name in s:
                            self.assigned.add(s[name])
                            break
                case If(_, then, otherwise):
                    self.find_assigned(then, scopes, depth + 1)
                    self.find_assigned(otherwise, scopes, depth + 1)
                case Loop(var, _, _, b):
                    scopes.append({var: -1} if isinstance(var, str) else {})
                    self.find_assigned(b, scopes, depth + 1)
                    scopes.pop()
                case Block(b) | Region(_, b):
                    self.find_assigned(b, scopes, depth + 1)
        scopes.pop()

    def block(self, body: tuple[object, ...], path: str, depth: int, uniform: bool,
              scope: dict[str, Bind]) -> None:
        if depth > MAX_NEST:
            self.add("V063", f"{path}[0]" if body else path, f"statements nested {depth} deep; "
                     f"expected at most {MAX_NEST}. Fix: flatten the nesting (move inner work "
                     "into separate statements or programs)")
            return
        self.scopes.append(scope)
        for i, n in enumerate(body):
            self.node(n, f"{path}[{i}]", depth, uniform)
        self.scopes.pop()

    def node(self, n: object, path: str, depth: int, uniform: bool) -> None:
        spec = NODE_FIELDS.get(type(n))
        if spec is None:
            self.add("V001", path, f"got {describe(n)}, expected a statement (Let, Assign, Store, "
                     "If, Loop, Block, Barrier, Return, Region). Fix: wrap expressions in "
                     "let(name, expr) or store(buf, i, expr)")
            return
        if not self.fields_ok(n, spec, path, "statement"):
            return
        self.point_uniform = uniform
        match n:
            case Let(name, value):
                t = self.root(value, f"{path}.value", let_top=True)
                scope = self.scopes[-1]
                old = scope.get(name)
                if old is not None:
                    code, what = ("V012", "the loop variable") if old.loop else ("V011", "a Let")
                    self.add(code, path, f"Let {show(name)} in a scope where {what} already binds "
                             "it; expected one binding per name and scope. Fix: rename it, or "
                             "Assign to the existing variable")
                uni = uniform and id(n) not in self.assigned and self.is_uniform(value)
                scope[name] = Bind(t, False, uni)
            case Assign(name, value):
                t = self.root(value, f"{path}.value")
                b = self.lookup(name)
                if b is None:
                    if is_identifier(name):
                        self.add("V009", path, f"Assign to {show(name)}, which no Let in scope "
                                 f"binds; expected a declared variable. Fix: let({name!r}, ...) "
                                 "before assigning")
                elif b.loop:
                    self.add("V010", path, f"Assign to loop variable {show(name)}; expected "
                             "a Let-bound variable (loop variables are read-only). Fix: copy it "
                             "with a Let and assign the copy")
                elif t is not None and b.dtype is not None and t != b.dtype:
                    self.add("V021", path, f"Assign of {typed(t, value)} to {show(name)} of type "
                             f"{b.dtype.short}; expected the variable's type. "
                             f"Fix: {convert_fix(value, b.dtype)}")
            case Store(buf, index, value):
                ti = self.root(index, f"{path}.index")
                tv = self.root(value, f"{path}.value")
                d = self.buffer(buf, path)
                self.index_u32(ti, index, f"{path}.index")
                if d is not None:
                    if not d.access.writable:
                        self.add("V050", path, f"Store to {show(buf)}, a {d.access.name} buffer; "
                                 "expected a writable buffer. Fix: declare it read_write() or "
                                 "output()")
                    if tv is not None and tv != d.element:
                        self.add("V022", f"{path}.value", f"Store of {typed(tv, value)} into "
                                 f"{show(buf)} of {d.element.short}; expected the element type. "
                                 f"Fix: {convert_fix(value, d.element)}")
            case If(cond, then, otherwise):
                t = self.root(cond, f"{path}.cond")
                if t is not None and t is not _BOOL:
                    self.add("V020", f"{path}.cond", f"If condition is {typed(t, cond)}; expected "
                             "bool. Fix: compare it, e.g. x.ne(0) or x.lt(n)")
                self.block(then, f"{path}.then", depth + 1, False, {})
                self.block(otherwise, f"{path}.otherwise", depth + 1, False, {})
            case Loop(var, start, end, body):
                for e, w in ((start, "start"), (end, "end")):
                    t = self.root(e, f"{path}.{w}")
                    if t is not None and t is not _U32:
                        self.add("V019", f"{path}.{w}", f"loop {w} is {typed(t, e)}; expected "
                                 f"u32. Fix: {convert_fix(e, _U32)}")
                if var in self.scopes[-1]:
                    self.add("V012", path, f"loop variable {show(var)} clashes with a name bound "
                             "in the same scope; expected a fresh name. Fix: rename the loop variable")
                lu = uniform and self.is_uniform(start) and self.is_uniform(end)
                self.block(body, f"{path}.body", depth + 1, lu, {var: Bind(_U32, True, lu)})
            case Block(body):
                self.block(body, f"{path}.body", depth + 1, uniform, {})
            case Region(_, body):
                self.block(body, f"{path}.body", depth + 1, uniform, {})
            case Barrier():
                self.uses_sync = True
                if not uniform:
                    self.add("V033", path, "Barrier inside an If or a non-uniform Loop; expected "
                             "it at a uniform point, reached by the whole workgroup. Fix: move the "
                             "Barrier out of the If (make the If's work conditional instead), or "
                             "give the Loop uniform bounds")
            case Return():
                if not uniform:
                    self.bad_returns.append(path)
            case _:
                raise TypeError(f"validate: unhandled statement kind {type(n).__name__}")
