"""Static checks that decide whether a program can be differentiated exactly.

They run on the inlined, uniquely renamed source tree (same shape as the user's ``entry``), so
every :class:`~vyre.errors.AutodiffError` names the offending statement by its path.

Activity: a float value is *active* when it depends (through float values, not control) on a
buffer being differentiated. Under the zero-derivative policy of :mod:`vyre.autodiff.rules`, a
float computed from an integer or bool (``cast(f32, cast(u32, x))``, ``cast(f64, x > 0)``) or by
a piecewise-constant op or ``stop_gradient`` is not active: its derivative is 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import AutodiffError
from ..ir._checks import is_identifier
from ..ir.expr import (
    Atomic, BinOp, BufLen, Call, Cast, Expr, Fma, InvocationId, LitBool, LitF32, LitF64, LitI32,
    LitU32, Load, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, SubgroupSize, UnOp, Var, WorkgroupId, walk,
)
from ..ir.node import Assign, Barrier, Block, If, Let, Loop, Node, Region, Return, Store, node_exprs
from ..ir.ops import BINOP_RULES, UNOP_RULES, AtomicOp
from ..ir.program import Program, program_of
from ..ir.types import DataType
from .prepare import iter_paths
from .rules import UNOP_DERIV, NonDiff, stops_gradient


def _err(path: str, found: str, fix: str) -> AutodiffError:
    return AutodiffError(f"{path}: {found}. Fix: {fix}")


def as_names(names: str | Iterable[str], label: str) -> list[str]:
    """A buffer name or a list of names, as a list (every autodiff entry point takes either)."""
    if isinstance(names, str):
        return [names]
    try:
        out = list(names)
    except TypeError:
        out = [names]  # type: ignore[list-item]
    if not all(isinstance(n, str) for n in out):
        raise AutodiffError(f"{label} must be a buffer name or a list of buffer names, got {names!r}. "
                            f"Fix: pass e.g. {label}=['x'] or {label}='x'")
    return out


def as_program(obj: object) -> Program:
    """A Program, or the ``.program`` of a ``@vyre.kernel`` function (:func:`vyre.ir.program.program_of`)."""
    return program_of(obj, AutodiffError)


def scalar_inputs(program: Program, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    """``inputs`` with Python numbers given for scalar parameters (1-element uniform buffers, what
    ``@vyre.kernel`` makes of ``a: f32``) made 1-element arrays, as ``vyre.dispatch`` does."""
    from ..driver.bind import is_scalar_slot, scalar_to_array

    slots = [b for b in program.buffers if is_scalar_slot(b) and b.name in inputs]
    if not slots or not isinstance(inputs, Mapping):
        return inputs
    out = dict(inputs)
    for b in slots:
        out[b.name] = scalar_to_array(b, out[b.name], AutodiffError)
    return out


def check_request(program: Program, outputs: Iterable[str], inputs: Iterable[str],
                  new_prefixes: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Names exist, are float storage buffers, and the buffers autodiff adds do not collide."""
    outs, ins = as_names(outputs, "outputs"), as_names(inputs, "inputs")
    for group, label in ((outs, "outputs"), (ins, "inputs")):
        if len(set(group)) != len(group):
            raise AutodiffError(f"{label} {group!r} names a buffer twice. Fix: list each buffer once")
    declared = {b.name: b for b in program.buffers}
    for name in (*outs, *ins):
        if name not in declared:
            raise AutodiffError(
                f"unknown buffer {name!r}; the program declares {sorted(declared)}. "
                "Fix: differentiate buffers the program declares")
        b = declared[name]
        if b.is_workgroup:
            raise AutodiffError(f"buffer {name!r} is workgroup memory; expected a storage buffer. "
                                "Fix: differentiate storage buffers only")
        if not b.element.is_float:
            raise AutodiffError(
                f"buffer {name!r} holds {b.element.short}; expected f32 or f64 (only floats have "
                "gradients). Fix: differentiate float buffers; integer buffers carry no gradient")
    for name in outs:
        if not declared[name].access.writable:
            raise AutodiffError(
                f"output {name!r} is {declared[name].access.name}, so the program never writes it; "
                "expected a buffer the program stores to. Fix: name written buffers as outputs")
    for name in ins:
        if not declared[name].access.readable:
            raise AutodiffError(f"input {name!r} is write-only; expected a buffer the program "
                                "reads. Fix: name buffers the program loads as inputs")
    for name in (*outs, *ins):
        for prefix in new_prefixes:
            new = prefix + name
            if new in declared:
                raise AutodiffError(
                    f"the program already declares a buffer {new!r}, which autodiff needs for "
                    f"{name!r}. Fix: rename that buffer")
            if not is_identifier(new):
                raise AutodiffError(f"buffer name {new!r} is not an identifier of at most 64 "
                                    f"characters. Fix: give {name!r} a shorter name")
    return outs, ins


@dataclass
class Activity:
    """Fixed point of which float locals are active (depend on a differentiated buffer)."""

    program: Program
    active_bufs: set[str]
    types: dict[str, DataType] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)
    report: Callable[[Expr, str], None] | None = None

    def info(self, e: Expr) -> tuple[DataType, bool]:
        """(type, active) of ``e``. Integers and bools are never active: a float computed from
        one has derivative 0 (the zero-derivative policy of :mod:`vyre.autodiff.rules`)."""
        match e:
            case LitBool():
                return DataType.BOOL, False
            case LitI32():
                return DataType.I32, False
            case LitU32() | BufLen() | InvocationId() | WorkgroupId() | LocalId():
                return DataType.U32, False
            case SubgroupLocalId() | SubgroupSize():
                return DataType.U32, False
            case LitF32():
                return DataType.F32, False
            case LitF64():
                return DataType.F64, False
            case Var(name):
                return self.types[name], name in self.active
            case Load(buf, idx):
                self.info(idx)
                ty = self.program.buffer(buf).element
                return ty, ty.is_float and buf in self.active_bufs
            case Atomic(_, buf, idx, v, ex):
                for x in (idx, *(() if ex is None else (ex,))):
                    self.info(x)
                ty = self.program.buffer(buf).element
                return ty, ty.is_float and (buf in self.active_bufs or self.info(v)[1])
            case BinOp(op, a, b):
                ta, aa = self.info(a)
                ba = self.info(b)[1]
                ty = BINOP_RULES[op].result_for(ta)
                return ty, ty.is_float and (aa or ba)
            case UnOp(op, a):
                ta, aa = self.info(a)
                ty = UNOP_RULES[op].result_for(ta)
                if stops_gradient(e):
                    return ty, False  # derivative 0 (rules.py's zero-derivative policy)
                if aa and ty.is_float and isinstance(UNOP_DERIV[op], NonDiff) and self.report:
                    rule = UNOP_DERIV[op]  # a float-valued op without a rule: a table bug
                    assert isinstance(rule, NonDiff)
                    self.report(e, f"{op.name.lower()} of a value that depends on a differentiated "
                                   f"input: {rule.why}|{rule.fix}")
                return ty, ty.is_float and aa
            case Select(c, a, b):
                self.info(c)
                ta, aa = self.info(a)
                return ta, ta.is_float and (aa or self.info(b)[1])
            case Cast(target, v):
                tv, va = self.info(v)
                # from an int or bool: derivative 0 (the zero-derivative policy)
                return target, target.is_float and tv.is_float and va
            case Fma(a, b, c):
                parts = [self.info(x) for x in (a, b, c)]
                return parts[0][0], any(p[1] for p in parts)
            case SubgroupBallot(c):
                self.info(c)
                return DataType.U32, False
            case SubgroupShuffle(v, lane):
                self.info(lane)
                return self.info(v)
            case SubgroupReduce(_, v):
                return self.info(v)
            case Call(op_id, args):  # kept only for a custom adjoint (vyre.autodiff.custom)
                parts = [self.info(a) for a in args]
                ty = self.program.function(op_id).result
                return ty, ty.is_float and any(p[1] for p in parts)
            case _:
                raise TypeError(f"not a vyre expression: {e!r}")

    def solve(self, body: tuple[Node, ...], *, buffers_from_stores: bool,
              shared: frozenset[str] = frozenset()) -> None:
        """Iterate to the fixed point (flow-insensitive over the uniquely named locals).

        With ``buffers_from_stores`` a buffer that receives an active store becomes active too
        (forward mode, where a program may read what it wrote); a ``shared`` (workgroup) buffer
        always does."""
        nodes = [n for _, n in iter_paths(body)]
        self._types(body)
        changed = True
        while changed:
            changed = False
            for n in nodes:
                match n:
                    case Let(name, v) | Assign(name, v):
                        if self.info(v)[1] and name not in self.active:
                            self.active.add(name)
                            changed = True
                    case Store(buf, _, v) if buffers_from_stores or buf in shared:
                        if self.info(v)[1] and buf not in self.active_bufs:
                            self.active_bufs.add(buf)
                            changed = True
                    case _:
                        pass
                if isinstance(n, Let) and isinstance(n.value, Atomic) and (
                        buffers_from_stores or n.value.buffer in shared):
                    at = n.value
                    if self.info(at.value)[1] and at.buffer not in self.active_bufs:
                        self.active_bufs.add(at.buffer)
                        changed = True

    def _types(self, body: tuple[Node, ...]) -> None:
        for _, n in iter_paths(body):
            match n:
                case Let(name, v):
                    self.types[name] = self.info(v)[0]
                case Loop(var, _, _, _):
                    self.types[var] = DataType.U32
                case _:
                    pass

    def find_errors(self, body: tuple[Node, ...]) -> None:
        """Raise the first rejected use of an active value."""
        for path, n in iter_paths(body):
            def report(e: Expr, msg: str, path: str = path) -> None:
                found, fix = msg.split("|", 1)
                raise _err(path, found, fix)

            self.report = report
            try:
                for e in node_exprs(n):
                    self.info(e)
            finally:
                self.report = None


def _sync_and_atomics(program: Program, body: tuple[Node, ...]) -> None:
    """Forward mode's refusals (reverse mode handles these: sync_checks.py)."""
    for b in program.buffers:
        if b.is_workgroup:
            raise AutodiffError(
                f"buffer {b.name!r} is workgroup memory; forward mode (jvp, hvp) does not "
                "differentiate programs that share data through workgroup memory. Fix: use reverse "
                "mode (grad, vjp, value_and_grad), or compute the value per invocation from "
                "storage buffers")
    for path, n in iter_paths(body):
        if isinstance(n, Barrier):
            raise _err(path, "a Barrier; forward mode (jvp, hvp) does not differentiate programs "
                             "that synchronise invocations",
                       "use reverse mode (grad, vjp, value_and_grad), or split the program into "
                       "separate dispatches")
        for e in node_exprs(n):
            for x in walk(e):
                if isinstance(x, SubgroupBallot | SubgroupShuffle | SubgroupReduce):
                    raise _err(path, f"a subgroup op ({type(x).__name__}); forward mode (jvp, hvp) "
                                     "does not differentiate subgroup ops",
                               "use reverse mode (grad, vjp, value_and_grad), or compute the value "
                               "per invocation without subgroup ops")


def check_grad_forward(program: Program, body: tuple[Node, ...], outputs: list[str],
                       inputs: list[str]) -> Activity:
    """Everything ``grad`` rejects, with the path of the first offending statement."""
    from .sync_checks import check_sync_and_atomics

    check_sync_and_atomics(program, body, outputs)
    shared = frozenset(b.name for b in program.buffers if b.is_workgroup)
    loaded: dict[str, str] = {}
    for path, n in iter_paths(body):
        for e in node_exprs(n):
            for x in walk(e):
                if isinstance(x, Load) and x.buffer not in shared:
                    loaded.setdefault(x.buffer, path)
    for path, n in iter_paths(body):
        if isinstance(n, Store) and n.buffer in loaded:
            raise _err(path, f"a store to {n.buffer!r}, which the program also loads (at "
                             f"{loaded[n.buffer]}); the backward pass sees only pre-forward "
                             "contents, so an in-place update cannot be differentiated",
                       "write the result to a separate output buffer")
    written = {n.buffer for _, n in iter_paths(body) if isinstance(n, Store)}
    written |= {n.value.buffer for _, n in iter_paths(body) if isinstance(n, Let) and isinstance(n.value, Atomic)}
    for name in inputs:
        if name in written:
            raise AutodiffError(
                f"input {name!r} is also written by the program; its gradient would mix the "
                "values it held before and after. Fix: read inputs from a buffer the program "
                "does not write")
    act = Activity(program, set(inputs))
    act.solve(body, buffers_from_stores=False, shared=shared)
    act.find_errors(body)
    return act


def check_jvp_forward(program: Program, body: tuple[Node, ...], inputs: list[str]) -> Activity:
    """What ``jvp`` rejects: sync, and float atomics other than an add whose old value is unused."""
    _sync_and_atomics(program, body)
    act = Activity(program, set(inputs))
    act.solve(body, buffers_from_stores=True)
    act.find_errors(body)
    used_names = {x.name for _, n in iter_paths(body) for e in node_exprs(n) for x in walk(e)
                  if isinstance(x, Var)}
    for path, n in iter_paths(body):
        if isinstance(n, Let) and isinstance(n.value, Atomic):
            at = n.value
            el = program.buffer(at.buffer).element
            if not el.is_float or at.buffer not in act.active_bufs:
                continue
            if at.op is not AtomicOp.ADD:
                raise _err(path, f"an atomic {at.op.name.lower()} on the active float buffer "
                                 f"{at.buffer!r}; only atomic add has a tangent",
                           "use an atomic add, or keep the buffer out of the differentiated path")
            if n.name in used_names:
                raise _err(path, "the old value returned by an atomic add on an active buffer is "
                                 "read; it depends on the order invocations run in",
                           "do not use the value an atomic add returns")
    for path, n in iter_paths(body):
        if isinstance(n, Store | Let | Assign | If | Loop | Block | Region | Return):
            continue
        raise _err(path, f"an unsupported statement {type(n).__name__}", "remove it")
    return act
