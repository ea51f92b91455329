"""Forward mode: ``jvp_program(program, inputs, outputs) -> Program`` (the tangent program).

The tangent program runs the forward computation and, beside every active float value, its
tangent (the directional derivative along the input tangents). Nothing is reversed, so forward
mode also handles what reverse mode rejects: in-place updates (a buffer read after it is
written carries its tangent in a ``tangent_<buf>`` buffer updated in lock step) and float atomic
adds whose old value is unused. That is what makes Hessian-vector products work: the backward
program of :func:`vyre.autodiff.grad` accumulates into ``grad_<in>`` with read-modify-writes
and atomic adds, and its tangent program is the forward-over-reverse HVP.

Buffers: the forward's buffers unchanged, then ``tangent_<b>`` for every buffer ``b`` that is
an input or receives an active value (read-only for inputs the program does not write,
read-write otherwise; outputs among them are marked ``is_output``). Tangent buffers of written
buffers start as the tangent of the buffer's initial contents: zero-fill them unless the buffer
is also an input you pass a tangent for.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import AutodiffError
from ..ir._checks import is_identifier
from ..ir.expr import Atomic, BinOp, Cast, Expr, Fma, Load, Select, UnOp, Var, lit
from ..ir.node import Assign, If, Let, Loop, Node, Store, walk_nodes
from ..ir.ops import AtomicOp, BinOpKind
from ..ir.program import BufferAccess, BufferDecl, Program
from ..ir.types import DataType
from .checks import as_names, as_program, check_jvp_forward, check_request
from .dce import eliminate_dead_code
from .nf import Names, NIf, NLet, NLoop, NStmt, NStore, active_names, parallel_assign
from .prepare import inline_and_rename, remove_returns, source_names
from .rules import BINOP_DERIV, UNOP_DERIV, BinDiff, Ctx, UnDiff, fma_contribs
from .ssa import to_normal_form

TANGENT_PREFIX = "tangent_"


def _sum(parts: list[Expr]) -> Expr | None:
    if not parts:
        return None
    acc = parts[0]
    for p in parts[1:]:
        acc = BinOp(BinOpKind.ADD, acc, p)
    return acc


class _Forward:
    def __init__(self, program: Program, types: dict[str, DataType], active: set[str],
                 active_bufs: set[str], names: Names) -> None:
        self.program = program
        self.types = types
        self.active = active
        self.bufs = active_bufs
        self.names = names
        self.tan: dict[str, str] = {}

    def t(self, e: Expr) -> Expr | None:
        """Tangent of an atom, or None for zero."""
        if isinstance(e, Var) and e.name in self.tan:
            return Var(self.tan[e.name])
        return None

    def tz(self, e: Expr, ty: DataType) -> Expr:
        t = self.t(e)
        return t if t is not None else lit(0.0, ty)

    def value_tangent(self, s: NLet) -> Expr | None:
        r: Expr = Var(s.name)
        match s.value:
            case Var() as a:
                return self.t(a)
            case Load(buf, idx):
                return Load(TANGENT_PREFIX + buf, idx) if buf in self.bufs else None
            case BinOp(op, a, b):
                rule = BINOP_DERIV[op]
                assert isinstance(rule, BinDiff), f"{op} on an active float"
                parts = []
                ta, tb = self.t(a), self.t(b)
                if ta is not None:
                    ca = rule.rule(Ctx(a, b, r, s.ty), ta)[0]
                    if ca is not None:
                        parts.append(ca)
                if tb is not None:
                    cb = rule.rule(Ctx(a, b, r, s.ty), tb)[1]
                    if cb is not None:
                        parts.append(cb)
                return _sum(parts)
            case UnOp(op, a):
                urule = UNOP_DERIV[op]
                assert isinstance(urule, UnDiff), f"{op} on an active float"
                ta = self.t(a)
                return None if ta is None else urule.rule(Ctx(a, a, r, s.ty), ta)
            case Select(c, a, b):
                ta, tb = self.t(a), self.t(b)
                if ta is None and tb is None:
                    return None
                return Select(c, self.tz(a, s.ty), self.tz(b, s.ty))
            case Cast(target, v):
                tv = self.t(v)
                if tv is None:
                    return None
                src = self.types[v.name] if isinstance(v, Var) else target
                return tv if src == target else Cast(target, tv)
            case Fma(a, b, c):
                parts = []
                for k, x in enumerate((a, b, c)):
                    tx = self.t(x)
                    if tx is not None:
                        parts.append(fma_contribs(a, b, tx)[k])
                return _sum(parts)
            case _:
                return None

    def block(self, stmts: tuple[NStmt, ...]) -> list[Node]:
        out: list[Node] = []
        for s in stmts:
            match s:
                case NLet(name, ty, value):
                    out.append(Let(name, value))
                    if isinstance(value, Atomic):
                        self.atomic(value, out)
                    elif name in self.active:
                        tv = self.value_tangent(s)
                        if tv is not None:
                            self.tan[name] = self.names.fresh("d_" + name)
                            out.append(Let(self.tan[name], tv))
                case NStore(buf, idx, value):
                    out.append(Store(buf, idx, value))
                    if buf in self.bufs:
                        ty = self.program.buffer(buf).element
                        out.append(Store(TANGENT_PREFIX + buf, idx, self.tz(value, ty)))
                case NIf(cond, then, other, phis):
                    act = [p for p in phis if p.name in self.active]
                    out += [Let(p.name, p.init) for p in phis]
                    for p in act:
                        self.tan[p.name] = self.names.fresh("d_" + p.name)
                        out.append(Let(self.tan[p.name], self.tz(p.init, p.ty)))
                    branches = []
                    for body, pick in ((then, lambda p: p.then), (other, lambda p: p.other)):
                        b = self.block(body)
                        b += [Assign(p.name, pick(p)) for p in phis if pick(p) != p.init]
                        b += [Assign(self.tan[p.name], self.tz(pick(p), p.ty)) for p in act
                              if pick(p) != p.init]
                        branches.append(tuple(b))
                    out.append(If(cond, branches[0], branches[1]))
                case NLoop(var, start, end, body, carried):
                    actc = [c for c in carried if c.name in self.active]
                    out += [Let(c.name, c.entry) for c in carried]
                    for c in actc:
                        self.tan[c.name] = self.names.fresh("d_" + c.name)
                        out.append(Let(self.tan[c.name], self.tz(c.entry, c.ty)))
                    b = self.block(body)
                    moves = [(c.name, c.next) for c in carried]
                    moves += [(self.tan[c.name], self.tz(c.next, c.ty)) for c in actc]
                    b += parallel_assign(moves, self.names)
                    out.append(Loop(var, start, end, tuple(b)))
                case _:
                    raise TypeError(f"not a normal-form statement: {s!r}")
        return out

    def atomic(self, a: Atomic, out: list[Node]) -> None:
        if a.buffer not in self.bufs or a.op is not AtomicOp.ADD:
            return
        tv = self.t(a.value)
        if tv is not None:
            out.append(Let(self.names.fresh("dscatter"),
                           Atomic(AtomicOp.ADD, TANGENT_PREFIX + a.buffer, a.index, tv)))


def jvp_program(program: Program, inputs: str | Sequence[str], outputs: str | Sequence[str] | None = None
                ) -> Program:
    """The tangent program of ``program`` along ``inputs`` (see the module docs for buffers).

    ``outputs`` (default: every float output the inputs reach) are the buffers whose tangents are
    marked ``is_output``. Raises :class:`vyre.errors.AutodiffError` for what forward mode cannot
    differentiate (barriers, workgroup memory, subgroup ops, float atomics other than an add
    whose old value is unused, floats computed from integers that depend on the inputs)."""
    program = as_program(program)
    program.validate()
    outs_req = [] if outputs is None else as_names(outputs, "outputs")
    _, ins = check_request(program, outs_req, inputs, (TANGENT_PREFIX,))
    names = Names(source_names(program))
    body = inline_and_rename(program, names)
    act = check_jvp_forward(program, body, ins)
    body = remove_returns(body, names)
    stmts, types = to_normal_form(program, body, names, unroll=False)
    bufs = set(act.active_bufs)
    active = active_names(stmts, bufs, types)
    if outputs is None:
        outs = [b.name for b in program.buffers if b.is_output and b.name in bufs]
    else:
        outs = outs_req
        for name in outs:
            if name not in bufs:
                bufs.add(name)  # not reached by the inputs: its tangent is zero where stored
    declared = {b.name for b in program.buffers}
    for name in sorted(bufs):
        if TANGENT_PREFIX + name in declared or not is_identifier(TANGENT_PREFIX + name):
            raise AutodiffError(f"cannot name the tangent buffer of {name!r} {TANGENT_PREFIX + name!r} "
                                "(taken, or longer than 64 characters). Fix: rename the buffer")
    fwd = _Forward(program, types, active, bufs, names)
    entry = fwd.block(stmts)
    written = {n.buffer for n in walk_nodes(program.entry) if isinstance(n, Store)}
    written |= {n.value.buffer for n in walk_nodes(program.entry)
                if isinstance(n, Let) and isinstance(n.value, Atomic)}
    buffers = list(program.buffers)
    binding = max((b.binding for b in program.buffers), default=-1) + 1
    for b in program.buffers:
        if b.name not in bufs:
            continue
        writable = b.name in written or b.name in outs
        access = BufferAccess.READ_WRITE if writable else BufferAccess.READ_ONLY
        buffers.append(BufferDecl(TANGENT_PREFIX + b.name, binding, access, b.element, b.count,
                                  is_output=b.name in outs))
        binding += 1
    result = Program(tuple(buffers), program.workgroup_size, eliminate_dead_code(tuple(entry)), ())
    return result.validate()


__all__ = ["TANGENT_PREFIX", "jvp_program"]
