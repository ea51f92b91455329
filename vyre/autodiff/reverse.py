"""Reverse mode: ``grad(program, outputs, inputs) -> Program`` (see docs/autodiff.md).

Per invocation the backward program replays the forward computation (stores left out), then runs
the adjoint statements in reverse order. Adjoints of locals are locals with a symbolic zero (no
statement is built until a contribution exists). Across control flow:

* ``If``: the adjoint of the branch taken is run; it recomputes the branch's locals first.
  Adjoints of outer values touched inside become mutable accumulators for the duration.
* ``Loop`` (one not unrolled by :mod:`vyre.autodiff.ssa`): reversed in O(trips) through a tape of
  its carried values with checkpoints (:mod:`vyre.autodiff.checkpoint`); on grids that are not
  1-D, by recomputation: reverse iteration ``i`` re-runs iterations ``start .. i-1`` from the
  loop-entry values (O(n^2); dropped by dead-code elimination when the adjoint does not need the
  carried values). Carried adjoints move to the previous iteration simultaneously.
* Workgroup memory, barriers, subgroup ops, atomic adds (:mod:`vyre.autodiff.sync_reverse`):
  the forward's phases are reversed last to first with their barriers; workgroup buffers get
  adjoints in workgroup memory; values loaded from workgroup memory inside an ``If`` are
  exported past it, since the reverse recomputes branch locals after later phases ran.
* A zero adjoint contributes an exact zero: adjoints that may be a structural zero (an untaken
  select arm, an accumulator nothing reached) are tracked, and rules whose factor reads a primal
  value are applied to them as ``select(d == 0, 0, rule(d))``.
* Gradients of an input accumulate with an atomic add, unless every load of that input is at
  ``InvocationId(0)`` (the invocation's own element): then they are summed in a local and
  written once at the end.
* An output element may be stored more than once per invocation only if the stores are provably
  to different elements or on exclusive branches; otherwise a ``stored_<out>`` flag buffer makes
  only the last store (in forward order) receive the cotangent.

This module holds ``grad`` (building the backward program) and the walk over the statement kinds;
the adjoint bookkeeping they share is in :mod:`vyre.autodiff.adjoints`, the reversal of loops
(taped and recomputed) in :mod:`vyre.autodiff.loop_reverse`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..ir.expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, InvocationId, LitF32, LitF64, LitU32, Load, Select,
    SubgroupReduce, SubgroupShuffle, UnOp, Var, lit,
)
from ..errors import AutodiffError
from ..ir._checks import MAX_BUFFERS, MAX_WORKGROUP_BYTES
from ..ir.functions import substitute
from ..ir.node import Barrier, If, Let, Node, Store
from ..ir.ops import AtomicOp, BinOpKind, UnOpKind
from ..ir.program import BufferAccess, BufferDecl, Program
from ..ir.types import DataType
from .adjoints import Env, private_key
from .checks import as_program, check_grad_forward, check_request
from .custom import call_contribs, custom_ids, inline_calls
from .checkpoint import TapePlan
from .dce import eliminate_dead_code
from .loop_reverse import LoopReverse
from .nf import Names, NBarrier, NIf, NLet, NLoop, NStmt, NStore, Replay, defined, emit, rename
from .prepare import inline_and_rename, remove_returns, source_names
from .rules import BINOP_DERIV, UNOP_DERIV, BinDiff, Ctx, UnDiff, fma_contribs, select_contribs
from .schedule import loads_first
from .ssa import to_normal_form
from .sync_checks import check_loops
from .sync_reverse import subgroup_adjoint, zero_workgroup

GRAD_PREFIX = "grad_"
STORED_PREFIX = "stored_"


class _Reverse(LoopReverse):
    """The reverse walk: the forward replay and the adjoint of each statement kind."""

    # -- replay -------------------------------------------------------------------------------

    def replay(self, stmts: tuple[NStmt, ...], *, stores: bool = False, initial: bool = False) -> list[Node]:
        """IR recomputing ``stmts`` (see :func:`emit`), taping the loops directly in ``stmts``:
        :meth:`block` reverses exactly these statements next, in the same scope. The ``initial``
        replay (the whole forward, once) also rebuilds workgroup memory and exports the values
        loaded from it inside ``If`` s; later replays (of a branch or loop body, to recompute its
        locals) read those exports instead."""
        rp = Replay(self.shared if initial else frozenset(), self.exports, initial, self.decls)
        if self.tape is None:
            return emit(stmts, self.names, stores=stores, replay=rp)
        out: list[Node] = []
        for s in stmts:
            if isinstance(s, NLoop) and s.carried:
                out += self.taped_loop(s, stores)
            else:
                out += emit((s,), self.names, stores=stores, replay=rp)
        return out

    # -- statements ---------------------------------------------------------------------------

    def block(self, stmts: tuple[NStmt, ...], env: Env, out: list[Node]) -> None:
        for s in reversed(stmts):
            match s:
                case NLet(_, _, Atomic()):
                    self.atomic(s, env, out)
                case NLet():
                    self.let(s, env, out)
                case NBarrier():
                    out.append(Barrier())
                case NStore():
                    self.store(s, env, out)
                case NIf():
                    self.if_(s, env, out)
                case NLoop():
                    self.loop(s, env, out)
                case _:
                    raise TypeError(f"not a normal-form statement: {s!r}")

    def let(self, s: NLet, env: Env, out: list[Node]) -> None:
        d = env.adj.get(s.name)
        if d is None:
            return
        r: Expr = Var(s.name)
        wrap = _identity
        if self.may_be_zero(d):
            # A zero adjoint contributes exactly zero, even where the local derivative is
            # infinite or NaN (the untaken arm of a select: sqrt'(x) at x < 0).
            d = self.atomize_adj(d, out, True)
            zero = lit(0.0, s.ty)
            cond = BinOp(BinOpKind.EQ, d, zero)

            def wrap(e: Expr) -> Expr:
                return e if _linear_in(e, d) else Select(cond, zero, e)
        match s.value:
            case Var() as a:
                self.contribute(env, out, a, d)
            case Load(buf, idx) if buf in self.adj_wg:
                out.append(Let(self.names.fresh("wgadj"), Atomic(AtomicOp.ADD, self.adj_wg[buf], idx, d)))
            case SubgroupReduce() | SubgroupShuffle():
                self.subgroup(s, s.value, d, env, out)
            case Load(buf, idx):
                if buf not in self.inputs:
                    return
                if buf in self.private:
                    self.contribute(env, out, private_key(buf), d)
                else:
                    out.append(Let(self.names.fresh("scatter"),
                                   Atomic(AtomicOp.ADD, GRAD_PREFIX + buf, idx, d)))
            case BinOp(op, a, b):
                rule = BINOP_DERIV[op]
                assert isinstance(rule, BinDiff), f"{op} on an active float"
                ca, cb = rule.rule(Ctx(a, b, r, s.ty), d)
                if ca is not None:
                    self.contribute(env, out, a, wrap(ca))
                if cb is not None:
                    self.contribute(env, out, b, wrap(cb))
            case UnOp(op, a):
                urule = UNOP_DERIV[op]
                assert isinstance(urule, UnDiff), f"{op} on an active float"
                self.contribute(env, out, a, wrap(urule.rule(Ctx(a, a, r, s.ty), d)))
            case Select(c, a, b):
                ca, cb = select_contribs(c, d, s.ty)
                self.contribute(env, out, a, ca)
                self.contribute(env, out, b, cb)
            case Cast(_, v):
                if isinstance(v, Var) and self.ty(v.name).is_float:
                    src = self.ty(v.name)
                    self.contribute(env, out, v, wrap(d if src == s.ty else Cast(src, d)))
            case Fma(a, b, c):
                ca, cb, cc = fma_contribs(a, b, d)
                self.contribute(env, out, a, wrap(ca))
                self.contribute(env, out, b, wrap(cb))
                self.contribute(env, out, c, wrap(cc))
            case Call(op_id, args):  # a function's custom adjoint (vyre.autodiff.custom)
                for a, c in call_contribs(self.program.function(op_id), args, r, d):
                    self.contribute(env, out, a, wrap(c))
            case _:
                raise TypeError(f"no adjoint for the binding {s!r}")

    def ty_of_buf(self, buf: str) -> DataType:
        return self.program.buffer(buf).element

    def atomic(self, s: NLet, env: Env, out: list[Node]) -> None:
        """An atomic add whose old value is unused (the checks refuse every other atomic on an
        active buffer): each contribution receives the cotangent of its target element."""
        at = s.value
        assert isinstance(at, Atomic)
        if at.op is not AtomicOp.ADD:
            return
        if at.buffer in self.outputs:
            self.contribute(env, out, at.value, Load(GRAD_PREFIX + at.buffer, at.index))
        elif at.buffer in self.adj_wg:
            d = self.names.fresh("wgd")
            out.append(Let(d, Load(self.adj_wg[at.buffer], at.index)))
            self.zeroable.add(d)
            self.contribute(env, out, at.value, Var(d))

    def subgroup(self, s: NLet, value: Expr, d: Expr, env: Env, out: list[Node]) -> None:
        """Adjoints of subgroup ops (:func:`.sync_reverse.subgroup_adjoint`)."""
        stmts, operand, contrib = subgroup_adjoint(value, s.name, s.ty, self.atomize(d, out), self.names)
        out += stmts
        self.contribute(env, out, operand, contrib)

    def store(self, s: NStore, env: Env, out: list[Node]) -> None:
        if s.buffer in self.adj_wg:
            # The stored value takes the element's adjoint; the overwritten value's is zero.
            adj = self.adj_wg[s.buffer]
            d = self.names.fresh("wgd")
            out += [Let(d, Load(adj, s.index)), Store(adj, s.index, lit(0.0, self.ty_of_buf(s.buffer)))]
            self.zeroable.add(d)
            self.contribute(env, out, s.value, Var(d))
            return
        if s.buffer not in self.outputs:
            return
        cot: Expr = Load(GRAD_PREFIX + s.buffer, s.index)
        if s.buffer in self.marked:
            # Only the last store (in forward order) to an element receives its cotangent.
            m = self.names.fresh("seen")
            out.append(Let(m, Atomic(AtomicOp.EXCHANGE, STORED_PREFIX + s.buffer, s.index, LitU32(1))))
            zero = lit(0.0, self.program.buffer(s.buffer).element)
            cot = Select(BinOp(BinOpKind.EQ, Var(m), LitU32(0)), cot, zero)
        self.contribute(env, out, s.value, cot)

    def if_(self, s: NIf, env: Env, out: list[Node]) -> None:
        seeds = [(p, env.adj[p.name]) for p in s.phis if p.name in env.adj]
        if not seeds and not self.has_store(s.then + s.other):
            return
        branches: list[list[Node]] = []
        extra = {a.name for p, _ in seeds for a in (p.then, p.other) if isinstance(a, Var)}
        extra -= defined(s.then + s.other)
        child_targets = self.targets(s.then + s.other, extra)
        child_proto, new = self.open_scope(env, out, child_targets)
        for stmts, pick in ((s.then, lambda p: p.then), (s.other, lambda p: p.other)):
            subst: dict[str, Expr] = {}
            copy = rename(stmts, subst, self.names)
            body = self.replay(copy)
            child = Env({}, dict(child_proto.acc))
            for p, d in seeds:
                self.contribute(child, body, substitute(pick(p), subst), d)
            self.block(copy, child, body)
            branches.append(body)
        out.append(If(s.cond, tuple(branches[0]), tuple(branches[1])))
        self.close_scope(env, new)


def _identity(e: Expr) -> Expr:
    return e


def _linear_in(e: Expr, d: Expr) -> bool:
    """Whether ``e`` is exactly zero when ``d`` is: built from ``d`` with negation, finite literal
    factors, sums and selects (whose conditions may read anything), and no other value."""
    match e:
        case _ if e == d:
            return True
        case LitF32() | LitF64():
            return math.isfinite(e.value)
        case Select(_, a, b):
            return _linear_in(a, d) and _linear_in(b, d)
        case UnOp(UnOpKind.NEGATE, a) | Cast(_, a):
            return _linear_in(a, d)
        case BinOp(BinOpKind.ADD | BinOpKind.SUB, a, b):
            return _linear_in(a, d) and _linear_in(b, d) and not (_is_lit(a) or _is_lit(b))
        case BinOp(BinOpKind.MUL, a, b):
            return (_linear_in(a, d) and _is_lit(b)) or (_is_lit(a) and _linear_in(b, d))
        case _:
            return False


def _is_lit(e: Expr) -> bool:
    return isinstance(e, LitF32 | LitF64)


def grad(program: Program, outputs: str | Sequence[str], inputs: str | Sequence[str], *, accumulate: bool = True,
         grid_1d: bool = True, with_value: bool = False, unit_cotangent: bool = False) -> Program:
    """The backward (vector-Jacobian product) program of ``program``.

    Buffers: every forward buffer (read-only; bind it with its *pre-forward* contents), then for
    each output ``grad_<out>`` (read-only cotangent, same element type and length), for each
    output that one invocation may store twice ``stored_<out>`` (u32 flags, zero-filled, same
    length), and for each input ``grad_<in>`` (read-write output, same element type and length).
    Gradients are *added* into ``grad_<in>``: zero-fill it (or pass a gradient to accumulate
    onto). With ``accumulate=False``, gradients private to an invocation are stored instead of
    added (saves a read); atomically accumulated ones still need the zero fill.

    Dispatch the backward with the forward's grid (its default grid covers the gradient buffers,
    not the forward's outputs); the runners in :mod:`vyre.autodiff` do this. ``grid_1d=False``
    says the grid will have more than one workgroup along y or z, so ``InvocationId(0)`` does not
    identify an invocation and every gradient is accumulated atomically.

    Fusion options, for value-and-gradient in one pass: ``with_value=True`` keeps the forward's
    stores in the backward (every buffer the forward writes is then written here too, with the
    forward's values), so one dispatch yields the outputs and the gradients. ``unit_cotangent=True``
    takes every cotangent to be 1 (the gradient of ``sum(output)``) and drops the ``grad_<out>``
    buffers: a store the forward would drop (out of bounds) still gets cotangent 0.

    ``outputs`` and ``inputs`` are each a buffer name or a list of names; ``program`` may be a
    ``@vyre.kernel`` function. Raises :class:`vyre.errors.AutodiffError` (naming the statement and
    the fix) for programs it cannot differentiate exactly; see docs/autodiff.md."""
    program = as_program(program)
    program.validate()
    outs, ins = check_request(program, outputs, inputs, (GRAD_PREFIX, STORED_PREFIX))
    names = Names(source_names(program))
    body = inline_and_rename(program, names, custom_ids(program))
    check_grad_forward(program, body, outs, ins)
    body = remove_returns(body, names)
    stmts, types = to_normal_form(program, body, names)
    check_loops(stmts, frozenset(b.name for b in program.buffers if b.is_workgroup))
    stmts = loads_first(stmts)  # the replay issues loads before the arithmetic (schedule.py)
    private_ok = grid_1d and program.workgroup_size[1:] == (1, 1)
    opts = (accumulate, with_value, unit_cotangent)
    result = _build(program, stmts, types, names, outs, ins, private_ok, private_ok, opts)
    if len(result.buffers) > MAX_BUFFERS:  # too many tapes: reverse loops by recomputation
        result = _build(program, stmts, types, names, outs, ins, private_ok, False, opts)
    return result  # dispatch validates it (before compiling); the tests validate every shape


def _build(program: Program, stmts: tuple[NStmt, ...], types: dict[str, DataType], names: Names,
           outs: list[str], ins: list[str], private_ok: bool, taped: bool,
           opts: tuple[bool, bool, bool]) -> Program:
    accumulate, with_value, unit_cotangent = opts
    tape = None
    if taped:
        taken = {b.name for b in program.buffers}
        info = next(n for n in ("tape_info", *(f"tape_info{k}" for k in range(1, 100))) if n not in taken)
        taken.add(info)
        tape = TapePlan(info, taken, names.fresh("tape_c"), names.fresh("tape_k"), names.fresh("tape_s"),
                        names.fresh("tape_g"))
    rev = _Reverse(program, stmts, dict(types), names, outs, ins, private_ok=private_ok, tape=tape)
    wg_bytes = sum(b.count * b.element.size_bytes for b in program.buffers if b.is_workgroup)
    wg_bytes += sum(program.buffer(w).count * program.buffer(w).element.size_bytes for w in rev.adj_wg)
    if wg_bytes > MAX_WORKGROUP_BYTES:
        raise AutodiffError(
            f"the backward program needs {wg_bytes} bytes of workgroup memory (the forward's buffers "
            f"and an adjoint for each of {sorted(rev.adj_wg)}), more than {MAX_WORKGROUP_BYTES}. "
            "Fix: use smaller workgroup buffers (at most half the limit)")
    replay = rev.replay(stmts, stores=with_value, initial=True)
    entry: list[Node] = tape.prologue() if tape is not None else []
    entry += zero_workgroup(rev.adj_wg, program, names) + rev.decls + replay
    env = Env()
    rev.block(stmts, env, entry)
    gid = InvocationId(0)
    for b in ins:
        d = env.adj.get(private_key(b))
        if b in rev.private and d is not None:
            g = GRAD_PREFIX + b
            entry.append(Store(g, gid, BinOp(BinOpKind.ADD, Load(g, gid), d) if accumulate else d))
    buffers = [b if (with_value and b.access.writable) or b.is_workgroup else
               BufferDecl(b.name, b.binding, BufferAccess.UNIFORM if b.access is BufferAccess.UNIFORM
                          else BufferAccess.READ_ONLY, b.element, b.count, False)
               for b in program.buffers]
    binding = max((b.binding for b in program.buffers), default=-1) + 1
    for name in outs:
        if unit_cotangent:
            continue
        d0 = program.buffer(name)
        buffers.append(BufferDecl(GRAD_PREFIX + name, binding, BufferAccess.READ_ONLY, d0.element, d0.count))
        binding += 1
    for name in outs:
        if name in rev.marked:
            d0 = program.buffer(name)
            buffers.append(BufferDecl(STORED_PREFIX + name, binding, BufferAccess.READ_WRITE,
                                      DataType.U32, d0.count))
            binding += 1
    for name in ins:
        d0 = program.buffer(name)
        buffers.append(BufferDecl(GRAD_PREFIX + name, binding, BufferAccess.READ_WRITE, d0.element,
                                  d0.count, is_output=True))
        binding += 1
    buffers += [BufferDecl.workgroup(a, program.buffer(w).count, program.buffer(w).element)
                for w, a in rev.adj_wg.items()]
    scratch = frozenset(tape.buffers) if tape is not None else frozenset()
    scratch |= rev.shared | frozenset(rev.adj_wg.values())
    used: set[str] = set()
    body_out = eliminate_dead_code(tuple(entry), scratch, used)
    if tape is not None:
        body_out = tape.finish(body_out, used)
        buffers += tape.declare(used, binding)
    body_out = inline_calls(body_out, program)  # custom adjoints' calls (vyre.autodiff.custom)
    if unit_cotangent:
        body_out = _unit_cotangents(body_out, program, outs)
    return Program(tuple(buffers), program.workgroup_size, body_out, ())


def _unit_cotangents(body: tuple[Node, ...], program: Program, outs: list[str]) -> tuple[Node, ...]:
    """Replace each cotangent load ``grad_<out>[i]`` by ``select(i < len(out), 1, 0)``."""
    from ..ir.transform import map_exprs

    loads = {GRAD_PREFIX + o: o for o in outs}

    def rewrite(e: Expr) -> Expr:
        if isinstance(e, Load) and e.buffer in loads:
            out = loads[e.buffer]
            t = program.buffer(out).element
            one, zero = (LitF32(1.0), LitF32(0.0)) if t is DataType.F32 else (LitF64(1.0), LitF64(0.0))
            return Select(BinOp(BinOpKind.LT, e.index, BufLen(out)), one, zero)
        return e

    return map_exprs(body, rewrite)


__all__ = ["GRAD_PREFIX", "STORED_PREFIX", "grad"]
