"""Expression checking for :mod:`vyre.ir.validate`: types, names, buffer access and the
placement of atomics and subgroup ops. Private: use ``vyre.ir.validate``."""

from __future__ import annotations


from ..errors import Diagnostic
from ._checks import (
    EXPR_FIELDS, FN_FORBIDDEN, MAX_EXPR_DEPTH, UNIFORM_KINDS, F, binop_name, convert_fix, describe,
    is_identifier, is_label, kids, measure, scalar_ok, show, typed, types_text,
)
from .expr import (
    Atomic, BinOp, BufLen, Call, Cast, Fma, FunctionDef, InvocationId, LitBool, LitF32, LitF64,
    LitI32, LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId,
)
from .ops import ATOMIC_RULES, BINOP_RULES, SUBGROUP_REDUCE_OPS, UNOP_RULES, AtomicOp
from .program import BufferAccess, BufferDecl
from .types import DataType

_U32, _BOOL = DataType.U32, DataType.BOOL


class Bind:
    """A variable in scope: its type (None when unknown after an error), whether it is a loop
    variable, and whether it holds the same value in every invocation of a workgroup. (A plain
    class: validation is imported on a warm start's first dispatch, where a dataclass costs 0.5 ms.)"""

    __slots__ = ("dtype", "loop", "uniform")

    def __init__(self, dtype: DataType | None, loop: bool, uniform: bool) -> None:
        self.dtype = dtype
        self.loop = loop
        self.uniform = uniform


class ExprChecker:
    """Walk state and expression checks. ``params`` is set while a function body is checked (then
    only parameters are in scope); ``point_uniform`` says whether the statement being checked is
    at a uniform point."""

    def __init__(self) -> None:
        self.diags: list[Diagnostic] = []
        self.memo: dict[int, tuple[int, int, int]] = {}
        self.buffers: dict[str, BufferDecl] = {}
        self.functions: dict[str, FunctionDef] = {}
        self.scopes: list[dict[str, Bind]] = []
        self.params: dict[str, DataType] | None = None
        self.assigned: set[int] = set()
        self.point_uniform = True
        self.uses_sync = False
        self.subgroup_at: str | None = None
        self.bad_returns: list[str] = []

    def add(self, code: str, path: str, message: str) -> None:
        self.diags.append(Diagnostic(code, path, message))

    def fields_ok(self, x: object, spec: tuple[tuple[str, F], ...], path: str, what: str) -> bool:
        """Check the Python types of ``x``'s scalar fields (sub-expressions are checked when
        visited); names, labels and axes are checked too but are not fatal."""
        ok = True
        for name, kind in spec:
            v = getattr(x, name, None)
            if not scalar_ok(kind, v):
                self.add("V001", f"{path}.{name}", f"{type(x).__name__}.{name} is {describe(v)}; "
                         f"expected {kind.value}. Fix: build the {what} with the vyre.ir builders, "
                         "which convert Python values")
                ok = False
            elif kind is F.NAME and not is_identifier(v):
                self.add("V002", f"{path}.{name}", f"{type(x).__name__}.{name} {show(v)} is not an "
                         "identifier; expected [A-Za-z_][A-Za-z0-9_]*, at most 64 characters "
                         "(names reach generated source). Fix: rename it")
            elif kind is F.LABEL and not is_label(v):
                self.add("V003", f"{path}.{name}", f"Region label {show(v)} ({len(str(v))} characters) "
                         "is not a plain label; expected printable ASCII without quotes or "
                         "backslashes, at most 128 characters. Fix: use a label such as "
                         "'softmax.max'")
            elif kind is F.AXIS and v not in (0, 1, 2):
                self.add("V062", f"{path}.{name}", f"{type(x).__name__} axis is {v}; expected 0, "
                         "1 or 2. Fix: use axis 0 (x), 1 (y) or 2 (z)")
        return ok

    def lookup(self, name: str) -> Bind | None:
        for s in reversed(self.scopes):
            b = s.get(name)
            if b is not None:
                return b
        return None

    def buffer(self, name: str, path: str) -> BufferDecl | None:
        d = self.buffers.get(name)
        if d is None and is_identifier(name):
            known = ", ".join(show(k) for k in list(self.buffers)[:8]) or "none"
            self.add("V007", path, f"buffer {show(name)} is not declared (declared: {known}); "
                     "expected a declared buffer. Fix: add it to the program's buffers, or fix "
                     "the name")
        return d

    def index_u32(self, t: DataType | None, e: object, path: str) -> None:
        if t is not None and t is not _U32:
            self.add("V018", path, f"buffer index is {typed(t, e)}; expected u32. "
                     f"Fix: {convert_fix(e, _U32)}")

    def is_uniform(self, e: object) -> bool:
        """The same value in every invocation of a workgroup (see docs/errors.md)."""
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Var):
                b = self.lookup(x.name) if isinstance(x.name, str) else None
                if b is None or not b.uniform:
                    return False
            elif isinstance(x, Load):
                # a uniform buffer is read-only and the same for every invocation (a kernel's
                # scalar parameter): loading it at a uniform index is uniform
                d = self.buffers.get(x.buffer) if isinstance(x.buffer, str) else None
                if d is None or d.access is not BufferAccess.UNIFORM:
                    return False
            elif type(x) not in UNIFORM_KINDS:
                return False
            stack.extend(kids(x))
        return True

    def root(self, e: object, path: str, let_top: bool = False) -> DataType | None:
        if measure(e, self.memo)[1] > MAX_EXPR_DEPTH:
            self.add("V064", path, f"expression is {measure(e, self.memo)[1]} levels deep; "
                     f"expected at most {MAX_EXPR_DEPTH}. Fix: split it with Let bindings")
            return None
        return self.expr(e, path, let_top)

    def expr(self, e: object, path: str, let_top: bool = False) -> DataType | None:
        spec = EXPR_FIELDS.get(type(e))
        if spec is None:
            self.add("V001", path, f"got {describe(e)}, expected an expression. Fix: use "
                     "vyre.ir builders (u32(1), f32(0.5), var('x'), ...) for values")
            return None
        if not self.fields_ok(e, spec, path, "expression"):
            return None
        if self.params is not None and isinstance(e, FN_FORBIDDEN):
            self.add("V043", path, f"function body uses {type(e).__name__}; expected a pure "
                     "expression over the parameters (calls are inlined anywhere). Fix: pass "
                     "the value in as a parameter")
            return None
        match e:
            case LitBool():
                return _BOOL
            case LitI32():
                return DataType.I32
            case LitU32() | InvocationId() | WorkgroupId() | LocalId() | SubgroupLocalId() | SubgroupSize():
                return _U32
            case LitF32():
                return DataType.F32
            case LitF64():
                return DataType.F64
            case Var(name):
                return self.var(name, path)
            case Load(buf, index):
                ti = self.expr(index, f"{path}.index")
                self.index_u32(ti, index, f"{path}.index")
                d = self.buffer(buf, path)
                if d is None:
                    return None
                if not d.access.readable:
                    self.add("V052", path, f"Load from {show(buf)}, a WRITE_ONLY buffer; expected a "
                             "readable buffer. Fix: declare it read_write()")
                return d.element
            case BufLen(buf):
                self.buffer(buf, path)
                return _U32
            case BinOp():
                return self.binop(e, path)
            case UnOp(op, operand):
                t = self.expr(operand, f"{path}.operand")
                rule = UNOP_RULES[op]
                if t is not None and t not in rule.operands:
                    self.add("V014", path, f"`{op.name.lower()}` does not accept {typed(t, operand)}; "
                             f"expected {types_text(rule.operands)}. "
                             f"Fix: {convert_fix(operand, rule.operands[0])}")
                    return None
                return None if t is None else rule.result_for(t)
            case Select(cond, a, b):
                tc = self.expr(cond, f"{path}.cond")
                ta = self.expr(a, f"{path}.true_val")
                tb = self.expr(b, f"{path}.false_val")
                if tc is not None and tc is not _BOOL:
                    self.add("V015", f"{path}.cond", f"Select condition is {typed(tc, cond)}; "
                             "expected bool. Fix: compare it, e.g. x.ne(0)")
                if ta is not None and tb is not None and ta != tb:
                    self.add("V016", path, f"Select arms are {typed(ta, a)} and {typed(tb, b)}; "
                             f"expected one type. Fix: {convert_fix(b, ta)}")
                    return None
                return ta or tb
            case Cast(target, value):
                self.expr(value, f"{path}.value")
                return target
            case Fma(a, b, c):
                ts = [self.expr(x, f"{path}.{n}") for x, n in ((a, "a"), (b, "b"), (c, "c"))]
                known = [t for t in ts if t is not None]
                if known and (not known[0].is_float or any(t != known[0] for t in known)):
                    want = known[0] if known[0].is_float else DataType.F32
                    odd = next((x for x, t in zip((a, b, c), ts, strict=True) if t != want), a)
                    self.add("V017", path, f"Fma operands are {', '.join(t.short for t in known)}; "
                             f"expected three operands of one float type. Fix: {convert_fix(odd, want)}")
                    return None
                return known[0] if len(known) == 3 else None
            case Atomic():
                return self.atomic(e, path, let_top)
            case SubgroupBallot() | SubgroupShuffle() | SubgroupReduce():
                return self.subgroup(e, path, let_top)
            case Call(op_id, args):
                return self.call(op_id, args, path)
            case _:
                raise TypeError(f"validate: unhandled expression kind {type(e).__name__}")

    def var(self, name: str, path: str) -> DataType | None:
        if self.params is not None:
            if name in self.params:
                return self.params[name]
            if is_identifier(name):
                known = ", ".join(show(k) for k in list(self.params)[:8]) or "none"
                self.add("V044", path, f"function body reads {show(name)}, which is not a "
                         f"parameter (parameters: {known}); expected only parameters. "
                         "Fix: add it as a parameter")
            return None
        b = self.lookup(name)
        if b is None:
            if is_identifier(name):
                self.add("V008", path, f"read of {show(name)}, which is not bound here; expected a "
                         "variable bound by an earlier Let or an enclosing Loop. Fix: let("
                         f"{name!r}, ...) before this statement, or fix the name")
            return None
        return b.dtype

    def binop(self, e: BinOp, path: str) -> DataType | None:
        tl = self.expr(e.left, f"{path}.left")
        tr = self.expr(e.right, f"{path}.right")
        name = binop_name(e.op)
        if tl is not None and tr is not None and tl != tr:
            if isinstance(e.right, (LitBool, LitI32, LitU32, LitF32, LitF64)) or not isinstance(
                    e.left, (LitBool, LitI32, LitU32, LitF32, LitF64)):
                fix = convert_fix(e.right, tl)
            else:
                fix = convert_fix(e.left, tr)
            self.add("V013", path, f"operands of `{name}` have different types: left is "
                     f"{typed(tl, e.left)}, right is {typed(tr, e.right)}; expected one type. Fix: {fix}")
            return None
        t = tl or tr
        if t is None:
            return None
        rule = BINOP_RULES[e.op]
        if t not in rule.operands:
            self.add("V014", path, f"`{name}` does not accept {t.short} operands; expected "
                     f"{types_text(rule.operands)}. Fix: {convert_fix(e.left, rule.operands[0])}")
            return None
        return rule.result_for(t)

    def atomic(self, e: Atomic, path: str, let_top: bool) -> DataType | None:
        if not let_top:
            self.add("V030", path, "Atomic inside a larger expression or statement; expected it "
                     "as the whole value of a Let (it has a side effect, so its evaluation must be "
                     "a statement of its own). Fix: let('old', atomic(...)) and use the variable")
        ti = self.expr(e.index, f"{path}.index")
        tv = self.expr(e.value, f"{path}.value")
        te = None if e.expected is None else self.expr(e.expected, f"{path}.expected")
        self.index_u32(ti, e.index, f"{path}.index")
        cx = e.op is AtomicOp.COMPARE_EXCHANGE
        if cx != (e.expected is not None):
            self.add("V025", path, f"atomic {e.op.name.lower()} "
                     f"{'without' if cx else 'with'} an expected value; expected `expected` exactly "
                     "for COMPARE_EXCHANGE. Fix: " + ("pass expected=" if cx else "drop expected"))
        d = self.buffer(e.buffer, path)
        if d is None:
            return None
        if d.access not in (BufferAccess.READ_WRITE, BufferAccess.WORKGROUP):
            self.add("V051", path, f"Atomic on {show(e.buffer)}, a {d.access.name} buffer; expected "
                     "a READ_WRITE or WORKGROUP buffer. Fix: declare it read_write()")
        rule = ATOMIC_RULES[e.op]
        if d.element not in rule.operands:
            self.add("V024", path, f"atomic {e.op.name.lower()} on {d.element.short} elements; "
                     f"expected {types_text(rule.operands)}. Fix: use a buffer of a supported type "
                     "or another op")
        for t, x, w in ((tv, e.value, "value"), (te, e.expected, "expected")):
            if t is not None and t != d.element:
                self.add("V023", f"{path}.{w}", f"atomic {w} is {typed(t, x)} on {show(e.buffer)} "
                         f"of {d.element.short}; expected the element type. "
                         f"Fix: {convert_fix(x, d.element)}")
        return d.element

    def subgroup(self, e: SubgroupBallot | SubgroupShuffle | SubgroupReduce, path: str,
                 let_top: bool) -> DataType | None:
        self.uses_sync = True
        if self.subgroup_at is None:
            self.subgroup_at = path
        kind = type(e).__name__
        if not let_top:
            self.add("V031", path, f"{kind} inside a larger expression or statement; expected it "
                     "as the whole value of a Let. Fix: let('s', ...) and use the variable")
        elif not self.point_uniform:
            self.add("V032", path, f"{kind} inside an If or a non-uniform Loop; expected it at a "
                     "uniform point, where every lane reaches it. Fix: compute it before the If "
                     "(use select() for per-lane choices)")
        match e:
            case SubgroupBallot(cond):
                t = self.expr(cond, f"{path}.cond")
                if t is not None and t is not _BOOL:
                    self.add("V026", f"{path}.cond", f"ballot condition is {typed(t, cond)}; "
                             "expected bool. Fix: compare it, e.g. x.ne(0)")
                return _U32
            case SubgroupShuffle(value, lane):
                t = self.expr(value, f"{path}.value")
                tl = self.expr(lane, f"{path}.lane")
                if tl is not None and tl is not _U32:
                    self.add("V027", f"{path}.lane", f"shuffle lane is {typed(tl, lane)}; expected "
                             f"u32. Fix: {convert_fix(lane, _U32)}")
                return t
            case SubgroupReduce(op, value):
                t = self.expr(value, f"{path}.value")
                rule = SUBGROUP_REDUCE_OPS.get(op)
                if rule is None:
                    ops = ", ".join(k.name.lower() for k in SUBGROUP_REDUCE_OPS)
                    self.add("V028", path, f"subgroup reduce with `{binop_name(op)}`; expected one "
                             f"of {ops}. Fix: use one of those ops")
                    return None
                if t is not None and t not in rule.operands:
                    self.add("V028", path, f"subgroup reduce {op.name.lower()} of {typed(t, value)}; "
                             f"expected {types_text(rule.operands)}. "
                             f"Fix: {convert_fix(value, rule.operands[0])}")
                    return None
                return t
            case _:
                raise TypeError(f"validate: unhandled subgroup kind {kind}")

    def call(self, op_id: str, args: tuple[object, ...], path: str) -> DataType | None:
        ts = [self.expr(a, f"{path}.args[{i}]") for i, a in enumerate(args)]
        fn = self.functions.get(op_id)
        if fn is None:
            if is_identifier(op_id):
                self.add("V040", path, f"Call of {show(op_id)}, which the program does not carry; "
                         "expected a function in Program.functions. Fix: register_function(...) "
                         "before building the program, or pass functions= to Program.wrapped")
            return None
        if len(args) != len(fn.params):
            self.add("V041", path, f"Call of {show(op_id)} with {len(args)} argument(s); expected "
                     f"{len(fn.params)}. Fix: pass one argument per parameter")
            return fn.result
        for i, ((pname, pt), t, a) in enumerate(zip(fn.params, ts, args, strict=True)):
            if t is not None and t != pt:
                self.add("V042", f"{path}.args[{i}]", f"argument {show(pname)} of {show(op_id)} is "
                         f"{typed(t, a)}; expected {pt.short}. Fix: {convert_fix(a, pt)}")
        return fn.result
