"""A tape over several dispatches (like ``wp.Tape``): programs run one after another on shared
buffers, differentiated as one function.

    tape = Tape()
    tape.record(layer, {"x": "x", "w": "w", "out": "h"})      # program buffer -> shared buffer
    tape.record(relu, {"x": "h", "out": "a"})
    tape.record(loss, {"x": "a", "out": "loss"})
    loss, g = value_and_grad(tape, {"x": x, "w": w}, "loss", ["w"])

Tapes run on host (numpy) arrays: device inputs are copied to the host once. Every runner
(:func:`~vyre.autodiff.vjp`, :func:`~vyre.autodiff.value_and_grad`,
:func:`~vyre.autodiff.jvp`, :func:`~vyre.autodiff.run_forward`, :func:`~vyre.autodiff.check_grad`)
takes a tape wherever it takes a program; buffer names are then the shared names.

Backward: the forward runs step by step, keeping a copy of what each step's buffers held before
it ran (the backward of a step needs its pre-step contents). Then, from the last step to the
first, each step's vector-Jacobian product (:func:`vyre.autodiff.grad`) takes the current
gradients of the buffers it writes as cotangents and adds its contribution into the gradient
buffers of the buffers it reads. An element a step overwrites does not depend on what the
buffer held before, so its gradient stops there; elements it leaves alone (or atomically adds
to) pass their gradient on to earlier steps. Which elements a step overwrote is recorded, where
it matters, by running that step with a flag store beside each of its stores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..driver.arrays import kind_of
from ..driver.geometry import launch_grid
from ..errors import AutodiffError
from ..ir.expr import Atomic, LitU32, Load, walk
from ..ir.node import Block, If, Let, Loop, Node, Region, Store, node_exprs, walk_nodes
from ..ir.program import BufferAccess, BufferDecl, Program
from ..ir.types import DataType
from .checks import as_program
from .forward import TANGENT_PREFIX, jvp_program
from .checkpoint import tape_arrays
from .runners import Grid, run_program
from .runners import vjp as _vjp

MARK_PREFIX = "overwritten_"


@dataclass(frozen=True, slots=True)
class TapeStep:
    """One recorded dispatch: ``program`` with each storage buffer bound to a shared name."""

    program: Program
    bind: tuple[tuple[str, str], ...]
    grid: Grid | None = None

    def shared(self, name: str) -> str:
        return dict(self.bind)[name]

    def reads(self) -> set[str]:
        """Shared names of the buffers the program loads."""
        loaded = {x.buffer for n in walk_nodes(self.program.entry) for x in _loads(n)}
        return {s for p, s in self.bind if p in loaded}

    def writes(self) -> set[str]:
        return {s for p, s in self.bind if p in _written(self.program)}


def _loads(n: Node) -> list[Load]:
    return [x for e in node_exprs(n) for x in walk(e) if isinstance(x, Load)]


def _written(program: Program) -> set[str]:
    out = set()
    for n in walk_nodes(program.entry):
        if isinstance(n, Store):
            out.add(n.buffer)
        elif isinstance(n, Let) and isinstance(n.value, Atomic):
            out.add(n.value.buffer)
    return out


def _stored(program: Program) -> set[str]:
    return {n.buffer for n in walk_nodes(program.entry) if isinstance(n, Store)}


class Tape:
    """A sequence of programs run on shared, named buffers; see the module docs.

    :meth:`record` appends a step. ``buffers`` maps each of the program's storage buffers to a
    shared name (default: its own name); buffers of different steps with the same shared name
    are the same array, and must agree on the element type."""

    def __init__(self, steps: Iterable[TapeStep] = ()) -> None:
        self._steps: list[TapeStep] = []
        for s in steps:
            self.record(s.program, dict(s.bind), grid=s.grid)

    @property
    def steps(self) -> tuple[TapeStep, ...]:
        return tuple(self._steps)

    def record(self, program: Program | Any, buffers: Mapping[str, str] | None = None, *,
               grid: Grid | None = None, dim: Grid | None = None) -> Tape:
        """Append a dispatch of ``program`` (validated) over the shared buffers named by
        ``buffers``, with ``grid=`` (workgroups) or ``dim=`` (invocations) as in ``dispatch``
        (default: the program's default grid); returns the tape, so calls chain."""
        program = as_program(program)  # a Program or a @vyre.kernel function
        program.validate()
        names = {b.name for b in program.buffers if not b.is_workgroup}
        given = dict(buffers or {})
        unknown = sorted(set(given) - names)
        if unknown:
            raise AutodiffError(f"Tape.record: the program has no storage buffer {unknown}; it "
                                f"declares {sorted(names)}. Fix: map the program's buffer names "
                                "to shared names")
        bind = tuple((b.name, given.get(b.name, b.name)) for b in program.buffers if not b.is_workgroup)
        seen: dict[str, str] = {}
        writes = _written(program)
        for p, s in bind:
            if s in seen and (p in writes or seen[s] in writes):
                raise AutodiffError(f"Tape.record: buffers {seen[s]!r} and {p!r} are both bound to "
                                    f"{s!r} and the program writes one of them. Fix: bind them to "
                                    "different shared buffers")
            seen[s] = p
        known = {b.name: b for b in self.buffers}
        for p, s in bind:
            el = program.buffer(p).element
            if s in known and known[s].element is not el:
                raise AutodiffError(f"Tape.record: shared buffer {s!r} holds {known[s].element.short} "
                                    f"in an earlier step but {p!r} is {el.short} here. Fix: bind "
                                    "buffers of the same element type")
        self._steps.append(TapeStep(program, bind, launch_grid(program, grid, dim)))
        return self

    @property
    def buffers(self) -> tuple[BufferDecl, ...]:
        """One declaration per shared buffer (in order of first use): read-write when some step
        writes it, an output when some step marks it as one."""
        order: dict[str, list[BufferDecl]] = {}
        written: set[str] = set()
        for st in self._steps:
            w = _written(st.program)
            for p, s in st.bind:
                order.setdefault(s, []).append(st.program.buffer(p))
                if p in w:
                    written.add(s)
        out = []
        for k, (s, decls) in enumerate(order.items()):
            access = BufferAccess.READ_WRITE if s in written else BufferAccess.READ_ONLY
            count = next((d.count for d in decls if d.count), 0)
            out.append(BufferDecl(s, k, access, decls[0].element, count,
                                  is_output=any(d.is_output for d in decls)))
        return tuple(out)

    def buffer(self, name: str) -> BufferDecl:
        for b in self.buffers:
            if b.name == name:
                return b
        raise AutodiffError(f"the tape has no shared buffer {name!r}; it has "
                            f"{[b.name for b in self.buffers]}. Fix: use a shared buffer name")

    def promote_f64(self) -> Tape:
        """Every step promoted with :func:`vyre.autodiff.check.promote_f64`."""
        from .check import promote_f64

        return Tape(replace(s, program=promote_f64(s.program)) for s in self._steps)

    def __len__(self) -> int:
        return len(self._steps)

    def __repr__(self) -> str:
        return f"Tape({len(self._steps)} steps, buffers {[b.name for b in self.buffers]})"


def as_tape(obj: object) -> Tape | None:
    """``obj`` if it is a Tape; a Tape of a list (or tuple) of steps, each a program (or
    ``@vyre.kernel`` function) or a ``(program, buffers)`` or ``(program, buffers, grid)`` tuple;
    else None (a single program)."""
    if isinstance(obj, Tape):
        return obj
    if not isinstance(obj, list | tuple):
        return None
    tape = Tape()
    for k, item in enumerate(obj):
        if isinstance(item, tuple) and 1 <= len(item) <= 3 and not isinstance(item[0], tuple):
            prog, buffers, grid = (*item, None, None)[:3]
        else:
            prog, buffers, grid = item, None, None
        if buffers is not None and not isinstance(buffers, Mapping):
            raise AutodiffError(f"step {k} of the sequence binds its buffers with {buffers!r}; "
                                "expected a mapping. Fix: write (program, {'out': 'h'})")
        tape.record(prog, buffers, grid=grid)
    return tape


# ---- running ---------------------------------------------------------------------------------

def _no_grid(grid: Grid | None, dim: Grid | None = None) -> None:
    if grid is not None or dim is not None:
        raise AutodiffError("a grid (or dim) was passed for a Tape; each step runs with the grid it "
                            "was recorded with. Fix: pass grid= to Tape.record instead")


def _initial_state(tape: Tape, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every shared buffer as given (copied when some step writes it) or zero-filled."""
    if not tape.steps:
        raise AutodiffError("the tape is empty. Fix: record at least one program")
    state: dict[str, np.ndarray] = {}
    for b in tape.buffers:
        if b.name in inputs:
            arr = np.asarray(kind_of(inputs[b.name]).to_host(inputs[b.name]))  # a tape runs on the host
            if arr.dtype != b.element.np_dtype:
                raise AutodiffError(f"input {b.name!r} is {arr.dtype}, but the tape's buffer holds "
                                    f"{b.element.short}. Fix: pass a {b.element.np_dtype} array")
            state[b.name] = np.array(arr, copy=True) if b.access.writable else arr
        elif b.count:
            state[b.name] = np.zeros(b.count, dtype=b.element.np_dtype)
        else:
            raise AutodiffError(f"shared buffer {b.name!r} was not passed and no step declares its "
                                "count, so its length is unknown. Fix: pass an array for it")
    return state


def _with_marks(program: Program, bufs: set[str]) -> tuple[Program, dict[str, str]]:
    """``program`` with a u32 flag store beside every store to ``bufs``: ``mark[b][i] = 1``
    where the program overwrote ``b[i]``."""
    taken = {b.name for b in program.buffers}
    marks: dict[str, str] = {}
    for b in sorted(bufs):
        name, k = MARK_PREFIX + b, 0
        while name in taken:
            k += 1
            name = f"{MARK_PREFIX}{k}_{b}"
        taken.add(name)
        marks[b] = name

    def body(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
        out: list[Node] = []
        for n in nodes:
            match n:
                case Store(buf, idx, _) if buf in marks:
                    out.append(Block((n, Store(marks[buf], idx, LitU32(1)))))
                case If(c, t, o):
                    out.append(If(c, body(t), body(o)))
                case Loop(v, s, e, b):
                    out.append(Loop(v, s, e, body(b)))
                case Block(b):
                    out.append(Block(body(b)))
                case Region(g, b):
                    out.append(Region(g, body(b)))
                case _:
                    out.append(n)
        return tuple(out)

    binding = max((b.binding for b in program.buffers), default=-1) + 1
    extra = [BufferDecl(marks[b], binding + k, BufferAccess.READ_WRITE, DataType.U32,
                        program.buffer(b).count, is_output=True) for k, b in enumerate(sorted(marks))]
    return Program((*program.buffers, *extra), program.workgroup_size, body(program.entry),
                   program.functions).validate(), marks


def _dispatch(step: TapeStep, program: Program, state: dict[str, np.ndarray],
              extra: Mapping[str, np.ndarray], backend: str | None) -> None:
    args = {p: state[s] for p, s in step.bind}
    args.update(extra)
    res = run_program(program, args, backend=backend, grid=step.grid)
    for p, s in step.bind:
        if p in res:
            state[s] = np.asarray(res[p])


def run_forward(tape: Tape, inputs: Mapping[str, np.ndarray], *, backend: str | None = None,
                grid: Grid | None = None, dim: Grid | None = None) -> dict[str, np.ndarray]:
    """Run every step in order; returns every shared buffer a step writes (``inputs`` are not
    modified)."""
    _no_grid(grid, dim)
    state = _initial_state(tape, inputs)
    for st in tape.steps:
        _dispatch(st, st.program, state, {}, backend)
    written = set().union(*(st.writes() for st in tape.steps))
    return {k: v for k, v in state.items() if k in written}


@dataclass
class _Recorded:
    state: dict[str, np.ndarray]
    before: list[dict[str, np.ndarray]]  # per step: program name -> contents before it ran
    overwritten: list[dict[str, np.ndarray]]  # per step: shared name -> bool mask


def _record(tape: Tape, inputs: Mapping[str, np.ndarray], wrt: Sequence[str],
            backend: str | None) -> _Recorded:
    state = _initial_state(tape, inputs)
    rec = _Recorded(state, [], [])
    written_so_far: set[str] = set()
    later_writes = [set().union(*(s.writes() for s in tape.steps[k:])) for k in range(len(tape.steps))]
    for k, st in enumerate(tape.steps):
        # Copies only of what a step at or after this one may change.
        rec.before.append({p: (np.array(state[s], copy=True) if s in later_writes[k] else state[s])
                           for p, s in st.bind})
        # An overwrite matters only where the buffer's earlier value can carry a gradient.
        need = {p for p, s in st.bind if p in _stored(st.program)
                and st.program.buffer(p).element.is_float and (s in wrt or s in written_so_far)}
        if need:
            prog, marks = _with_marks(st.program, need)
            flags = {marks[p]: np.zeros(state[st.shared(p)].size, dtype=np.uint32) for p in need}
            _dispatch(st, prog, state, flags, backend)
            rec.overwritten.append({st.shared(p): flags[marks[p]] != 0 for p in need})
        else:
            _dispatch(st, st.program, state, {}, backend)
            rec.overwritten.append({})
        written_so_far |= st.writes()
    return rec


def _float_names(tape: Tape) -> set[str]:
    return {b.name for b in tape.buffers if b.element.is_float}


def vjp(tape: Tape, inputs: Mapping[str, np.ndarray], cotangents: Mapping[str, np.ndarray],
        wrt: Sequence[str], *, backend: str | None = None, grid: Grid | None = None,
        dim: Grid | None = None) -> dict[str, np.ndarray]:
    """``{w: J_w^T cotangents}`` of the whole sequence, by shared buffer name."""
    _no_grid(grid, dim)
    _check_names(tape, list(cotangents), wrt)
    rec = _record(tape, inputs, wrt, backend)
    return _backward(tape, rec, cotangents, wrt, backend, _shapes(inputs, wrt))


def _shapes(inputs: Mapping[str, np.ndarray], wrt: Sequence[str]) -> dict[str, tuple[int, ...]]:
    return {w: np.shape(inputs[w]) if w in inputs else (-1,) for w in wrt}


def _check_names(tape: Tape, outputs: Sequence[str], wrt: Sequence[str]) -> None:
    if isinstance(wrt, str):
        raise AutodiffError(f"wrt must be a list of buffer names, got {wrt!r}. Fix: pass e.g. ['x']")
    floats = _float_names(tape)
    for name in (*outputs, *wrt):
        b = tape.buffer(name)
        if name not in floats:
            raise AutodiffError(f"shared buffer {name!r} holds {b.element.short}; only float buffers "
                                "have gradients. Fix: differentiate float buffers")
    written = set().union(*(st.writes() for st in tape.steps))
    for name in outputs:
        if name not in written:
            raise AutodiffError(f"no step writes {name!r}, so it cannot be an output. Fix: name a "
                                "buffer some step writes")


# Per shared buffer: its gradient (and, for hvp, the gradient's tangent), flattened.
_Grads = dict[str, list[np.ndarray]]
_Step = Callable[[int, TapeStep, list[str], list[str], _Grads], dict[str, list[np.ndarray]]]


def _sweep(tape: Tape, rec: _Recorded, grads: _Grads, wrt: Sequence[str], step: _Step) -> _Grads:
    """The reverse sweep shared by vjp and hvp: from the last step to the first, ``step`` maps the
    gradients of what step ``k`` writes (``outs``) to contributions for what it reads (``ins``);
    then what the step overwrote stops carrying a gradient, and the contributions are added."""
    floats = _float_names(tape)
    for k in range(len(tape.steps) - 1, -1, -1):
        st = tape.steps[k]
        earlier = set().union(*(s.writes() for s in tape.steps[:k]))
        written, stored, loaded = _written(st.program), _stored(st.program), _reads_prog(st.program)
        outs = [p for p, s in st.bind if s in grads and p in written and any(np.any(g) for g in grads[s])]
        # a buffer the step also writes is included, so grad refuses the in-place update loudly
        ins = [p for p, s in st.bind if s in floats and p in loaded and (s in wrt or s in earlier)]
        contrib = step(k, st, outs, ins, grads) if outs and ins else {}
        for p, s in st.bind:  # what this step overwrote no longer depends on earlier values
            if s in grads and p in stored:
                mask = rec.overwritten[k].get(s)
                if mask is None:
                    del grads[s]  # no earlier value of it can carry a gradient
                else:
                    grads[s] = [np.where(mask, 0, g).astype(g.dtype) for g in grads[s]]
        for p, parts in contrib.items():
            s = st.shared(p)
            flat = [np.asarray(c).reshape(-1) for c in parts]
            old = grads.get(s)
            grads[s] = [np.array(c, copy=True) for c in flat] if old is None else [
                o + c for o, c in zip(old, flat, strict=True)]
    return grads


def _seed(rec: _Recorded, name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    size = rec.state[name].size
    if arr.size != size:
        raise AutodiffError(f"the cotangent of {name!r} has {arr.size} elements; the buffer has "
                            f"{size}. Fix: pass one value per element")
    return np.array(arr.reshape(-1), dtype=rec.state[name].dtype, copy=True)


def _result(rec: _Recorded, grads: _Grads, wrt: Sequence[str], part: int,
            shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    return {w: (grads[w][part] if w in grads else np.zeros(rec.state[w].size, dtype=rec.state[w].dtype)
                ).reshape(shapes[w]) for w in wrt}


def _backward(tape: Tape, rec: _Recorded, cotangents: Mapping[str, np.ndarray], wrt: Sequence[str],
              backend: str | None, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    def step(k: int, st: TapeStep, outs: list[str], ins: list[str], grads: _Grads
             ) -> dict[str, list[np.ndarray]]:
        cots = {p: grads[st.shared(p)][0] for p in outs}
        with _step_errors(k):
            g = _vjp(st.program, rec.before[k], cots, ins, backend=backend, grid=st.grid)
        return {p: [v] for p, v in g.items()}

    grads = {name: [_seed(rec, name, cot)] for name, cot in cotangents.items()}
    return _result(rec, _sweep(tape, rec, grads, wrt, step), wrt, 0, shapes)


@contextmanager
def _step_errors(k: int) -> Iterator[None]:
    """An AutodiffError from one step's backward, prefixed with the step it came from."""
    try:
        yield
    except AutodiffError as e:
        raise AutodiffError(f"tape step {k}: {e}") from e


def _reads_prog(program: Program) -> set[str]:
    return {x.buffer for n in walk_nodes(program.entry) for x in _loads(n)}


def value_and_grad(tape: Tape, inputs: Mapping[str, np.ndarray], output: str, wrt: Sequence[str],
                   *, cotangent: np.ndarray | None = None, backend: str | None = None,
                   grid: Grid | None = None, dim: Grid | None = None) -> tuple[float, dict[str, np.ndarray]]:
    """``(loss, grads)`` of ``loss = sum(output)`` (or ``<cotangent, output>``) over the tape."""
    _no_grid(grid, dim)
    _check_names(tape, [output], wrt)
    rec = _record(tape, inputs, wrt, backend)
    val = np.asarray(rec.state[output]).reshape(-1)
    cot = (np.ones(val.size, dtype=val.dtype) if cotangent is None
           else np.asarray(cotangent).reshape(-1))
    loss = float(np.dot(val.astype(np.float64), cot.astype(np.float64)))
    return loss, _backward(tape, rec, {output: cot}, wrt, backend, _shapes(inputs, wrt))


def _forward_tangents(tape: Tape, state: dict[str, np.ndarray], tangents: Mapping[str, np.ndarray],
                      backend: str | None,
                      before_step: Callable[[TapeStep, Mapping[str, np.ndarray]], None] | None
                      ) -> dict[str, np.ndarray]:
    """Run the steps on ``state`` carrying tangents forward; returns the final tangents."""
    floats = _float_names(tape)
    tan: dict[str, np.ndarray] = {k: np.array(np.asarray(v).reshape(-1), dtype=state[k].dtype, copy=True)
                                  for k, v in tangents.items()}
    for k, st in enumerate(tape.steps):
        if before_step is not None:
            before_step(st, tan)
        blind = [p for p, s in st.bind if s in tan and np.any(tan[s]) and p in _written(st.program)
                 and not st.program.buffer(p).access.readable]
        if blind:  # its tangent program could not start from the tangent the buffer carries
            raise AutodiffError(f"tape step {k} writes {blind[0]!r}, which is write-only, while it "
                                "carries a tangent from earlier; the elements the step leaves "
                                "alone would lose it. Fix: declare the buffer read_write")
        live = [p for p, s in st.bind if s in tan and st.program.buffer(p).access.readable]
        if not live:  # no tangent reaches this step: it only computes values
            _dispatch(st, st.program, state, {}, backend)
            continue
        w = _written(st.program)
        outs = [p for p, s in st.bind if s in floats and p in w]
        tp = jvp_program(st.program, live, outs)
        args = {p: state[s] for p, s in st.bind}
        for b in tp.buffers:
            if b.name.startswith(TANGENT_PREFIX) and b.name not in args:
                p = b.name[len(TANGENT_PREFIX):]
                s = st.shared(p)
                args[b.name] = (np.array(tan[s], copy=True) if s in tan
                                else np.zeros(state[s].size, dtype=state[s].dtype))
        res = run_program(tp, args, backend=backend, grid=st.grid)
        for p, s in st.bind:
            if p in res:
                state[s] = np.asarray(res[p])
            if TANGENT_PREFIX + p in res and p in w:
                tan[s] = np.asarray(res[TANGENT_PREFIX + p]).reshape(-1)
    return tan


def jvp(tape: Tape, inputs: Mapping[str, np.ndarray], tangents: Mapping[str, np.ndarray], *,
        outputs: Sequence[str] | None = None, backend: str | None = None,
        grid: Grid | None = None, dim: Grid | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(primal, tangents)`` of the sequence: each step's tangent program, in order, carries the
    tangents of the shared buffers forward (a buffer's tangent starts as its given tangent or 0,
    and elements a step does not overwrite keep theirs)."""
    _no_grid(grid, dim)
    _check_names(tape, [], list(tangents))
    state = _initial_state(tape, inputs)
    floats = _float_names(tape)
    tan = _forward_tangents(tape, state, tangents, backend, None)
    written = set().union(*(st.writes() for st in tape.steps))
    want = [b.name for b in tape.buffers if b.is_output and b.name in floats] if outputs is None \
        else list(outputs)
    prim = {k: v for k, v in state.items() if k in written}
    return prim, {o: tan.get(o, np.zeros(state[o].size, dtype=state[o].dtype)) for o in want}


def _tangents_before(tape: Tape, inputs: Mapping[str, np.ndarray],
                     tangents: Mapping[str, np.ndarray], backend: str | None
                     ) -> list[dict[str, np.ndarray]]:
    """Per step: the tangents (program names) its float buffers held before it ran."""
    out: list[dict[str, np.ndarray]] = []

    def keep(st: TapeStep, tan: Mapping[str, np.ndarray]) -> None:
        out.append({p: np.array(tan[s], copy=True) for p, s in st.bind if s in tan})

    _forward_tangents(tape, _initial_state(tape, inputs), dict(tangents), backend, keep)
    return out


def hvp(tape: Tape, inputs: Mapping[str, np.ndarray], output: str, wrt: Sequence[str],
        vectors: Mapping[str, np.ndarray], *, cotangent: np.ndarray | None = None,
        backend: str | None = None, grid: Grid | None = None, dim: Grid | None = None) -> dict[str, np.ndarray]:
    """Hessian-vector product over the tape, forward over reverse: the tangent (along
    ``vectors``) of every step's backward program, run from the last step to the first."""
    from .runners import (
        GRAD_PREFIX, STORED_PREFIX, _arrays_for_forward_buffers, cached_grad, forward_grid,
        forward_lengths, input_kind,
    )

    _no_grid(grid, dim)
    _check_names(tape, [output], wrt)
    missing = [w for w in wrt if w not in vectors]
    if missing:
        raise AutodiffError(f"no direction given for {missing}. Fix: pass vectors for every wrt input")
    rec = _record(tape, inputs, wrt, backend)
    dfwd = _tangents_before(tape, inputs, {w: vectors[w] for w in wrt}, backend)
    n_out = rec.state[output].size
    seed = _seed(rec, output, np.ones(n_out) if cotangent is None else cotangent)

    def step(k: int, st: TapeStep, outs: list[str], ins: list[str], grads: _Grads
             ) -> dict[str, list[np.ndarray]]:
        """The step's backward program and, beside it, its tangent along ``vectors``."""
        before = rec.before[k]
        written = _written(st.program)
        g3 = forward_grid(st.program, before, st.grid)
        with _step_errors(k):
            back = cached_grad(st.program, tuple(outs), tuple(ins), g3[1:] == (1, 1))
        lengths = forward_lengths(st.program, before)
        args = _arrays_for_forward_buffers(st.program, before, lengths, input_kind(before))
        for p in outs:
            args[GRAD_PREFIX + p] = grads[st.shared(p)][0]
            if any(b.name == STORED_PREFIX + p for b in back.buffers):
                args[STORED_PREFIX + p] = np.zeros(lengths[p], dtype=np.uint32)
        for p in ins:
            args[GRAD_PREFIX + p] = np.zeros(lengths[p], dtype=before[p].dtype)
        # scratch of loops the backward reverses from a tape of carried values
        args.update(tape_arrays(st.program, back, g3[0] * st.program.workgroup_size[0]))
        tans = {p: v for p, v in dfwd[k].items()
                if st.program.buffer(p).access.readable and p not in written}
        tans.update({GRAD_PREFIX + p: grads[st.shared(p)][1] for p in outs})
        tp = jvp_program(back, list(tans), [GRAD_PREFIX + p for p in ins])
        for b in tp.buffers:  # tangents: the forward's and the cotangents', zero for the rest
            name = b.name[len(TANGENT_PREFIX):]
            if b.name.startswith(TANGENT_PREFIX) and b.name not in args:
                args[b.name] = (np.array(tans[name], copy=True) if name in tans
                                else np.zeros_like(np.asarray(args[name]).reshape(-1)))
        res = run_program(tp, args, backend=backend, grid=g3)
        return {p: [res[GRAD_PREFIX + p], res[TANGENT_PREFIX + GRAD_PREFIX + p]] for p in ins}

    grads = {output: [seed, np.zeros(n_out, dtype=seed.dtype)]}
    return _result(rec, _sweep(tape, rec, grads, wrt, step), wrt, 1, _shapes(inputs, wrt))


class TapeValueAndGrad:
    """``inputs -> (loss, grads)`` of a tape, as :func:`vyre.autodiff.value_and_grad_fn` returns
    for a program (the tape's checks run once, here)."""

    def __init__(self, tape: Tape, output: str, wrt: Sequence[str], *, backend: str | None = None,
                 grid: Grid | None = None) -> None:
        _no_grid(grid)
        _check_names(tape, [output], wrt)
        self.tape, self.output, self.wrt, self.backend = tape, output, list(wrt), backend

    def __call__(self, inputs: Mapping[str, Any]) -> tuple[float, dict[str, np.ndarray]]:
        return value_and_grad(self.tape, inputs, self.output, self.wrt, backend=self.backend)


__all__ = ["MARK_PREFIX", "Tape", "TapeStep", "TapeValueAndGrad", "as_tape"]
