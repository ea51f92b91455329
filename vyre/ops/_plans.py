"""Replaying an op's launches: the second call of an op with arrays of the same kind, dtypes and
shapes skips every check and plan step.

An op call does the same things every time its arguments have the same dtypes, shapes and
options: it checks the arrays, allocates the same buffers, runs the same passes over them and
shapes the same results. The first such call runs the op as written (its checked path) while a
:class:`Recorder` watches its :class:`~vyre.ops._runtime.Ctx`: which buffers it allocated, which
program ran over which buffers with which grid, and which buffers became the answers. The record
becomes a plan; later calls with the same key (:func:`plan_key`) run the plan.

* :class:`Plan` (numpy arrays, CPU backend): each pass a direct call of the compiled entry its
  checked dispatch chose (vyre.ops._launch.cpu_call; a pass without one leaves the call
  unplanned), partials reused: about 1 us of Python besides the kernels (0.9 for one numpy
  array on the default backend, which :func:`planned` looks up first), where the checked path
  costs 5-10 (a whole-array reduction of 2^12 elements takes about 0.4 us of work).
* :class:`DevicePlan` (CuPy arrays or CUDA tensors, CUDA backend): each pass a direct driver
  launch, every array new: a third less host time per call.

Only arrays ``prepare`` would pass through unchanged reach a plan (C-contiguous; numpy ones
aligned); anything else, the interpreter and the simulator, and any call whose record is
incomplete take the checked path. A call that raised records nothing, so a refused call stays
refused; an op called inside another op's record leaves the outer call unplanned.
"""

from __future__ import annotations

import contextvars
import functools
import operator
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

import numpy as np

from ..driver.backends import default_backend, default_is_cpu, simulator_enabled
from ..ir import BufferAccess, DataType, Program
from ..driver.devices import current_ordinal, on_device
from ..driver.fast_launch import CAPTURE, torch_stream
from ._launch import CpuCall, DeviceLaunch, cpu_call, device_launch, device_of, launch

__all__ = ["USED", "DevicePlan", "Plan", "Recorder", "forget", "plan_key", "planned", "recording"]

T = TypeVar("T")
Op = TypeVar("Op", bound=tuple[Any, ...])

#: how a plan's answer is built from a buffer: the buffer shaped (a result the caller keeps),
#: its element 0 (a numpy scalar), or its element 0 as an int64 index
RESULT, SCALAR, INDEX = "result", "scalar", "index"


class Answer(NamedTuple):
    how: str  # RESULT, SCALAR or INDEX
    buffer: int
    shape: tuple[int, ...]


def _picker(picks: tuple[int, ...]) -> Callable[[list[np.ndarray]], tuple[np.ndarray, ...]]:
    """The arguments of a call from the plan's buffers, as a tuple (C speed: itemgetter)."""
    if len(picks) == 1:
        (i,) = picks
        return lambda bufs: (bufs[i],)
    return operator.itemgetter(*picks)


class Plan:
    """An op's CPU launches for one key. Buffers: the inputs (flat views), the ``scratch``
    allocations (partials, outputs the caller did not ask for), then the ``fresh`` ones (results
    the caller keeps: new each call). Scratch buffers are reused: a call takes a set from
    ``spare`` (list.pop and append are atomic, so two threads never share one; a thread that finds
    none allocates its own) and gives it back once the answers are built (scalars are copies).

    ``run(inputs)`` is the whole cost of a call: a closure made for the plan's shape (``path``),
    so that a call's Python is a few lines without attribute lookups:

    * ``"result"``: one serial call ``entry(*inputs, answer, grid, 1, 1)`` into one new array
      that is the answer, shaped (a row op, matvec, a column reduction);
    * ``"scalar"``: one serial call ``entry(*inputs, *scratch, grid, 1, 1)`` into reused scratch,
      whose buffer's element 0 is the answer (a whole-array reduction of one block, argmax);
    * ``"general"``: every other plan (several passes, parallel passes, several answers)."""

    __slots__ = ("answers", "fresh", "path", "run", "scratch", "single", "spare", "steps")

    def __init__(self, steps: list[tuple[CpuCall, tuple[int, ...]]], scratch: tuple[tuple[int, np.dtype], ...],
                 fresh: tuple[tuple[int, np.dtype], ...], answers: tuple[Answer, ...], single: bool) -> None:
        #: per step: entry, parallel, grid, its arguments' picker, the CpuCall (the parallel path)
        self.steps = tuple((c.fn, c.parallel, c.grid, _picker(picks), c) for c, picks in steps)
        self.scratch = scratch
        self.fresh = fresh
        self.answers = answers
        self.single = single
        self.spare: list[Any] = []  # sets of scratch buffers (a "scalar" plan's index: with its cell)
        self.path, self.run = self._runner(steps)

    def _runner(self, steps: list[tuple[CpuCall, tuple[int, ...]]]) -> tuple[str, Callable[[list[np.ndarray]], Any]]:
        # the short paths: one serial call whose arguments are the inputs, then every allocation in
        # order, and one answer (0.6-1 us of bookkeeping less per call than the general path)
        n_in = len(steps[0][1]) - len(self.scratch) - len(self.fresh) if steps else 0
        picks = steps[0][1] if steps else ()
        # one serial call taking every buffer once (the short paths), in order (all but one)
        direct = (len(steps) == 1 and not steps[0][0].parallel and self.single and n_in > 0
                  and sorted(picks) == list(range(len(picks))))
        in_order = picks == tuple(range(len(picks)))
        (answer,) = self.answers if self.single else (None,)
        if direct and answer is not None:
            fn, grid = steps[0][0].fn, steps[0][0].grid
            one_result = len(self.fresh) == 1 and answer.how == RESULT and answer.buffer == n_in + len(self.scratch)
            if one_result and (in_order or self.scratch):
                return "result", _run_result(fn, grid, *self.fresh[0], answer.shape, self.spare, self.scratch,
                                             None if in_order else operator.itemgetter(*picks))
            if not in_order:
                return "general", self._run
            which = answer.buffer - n_in  # no fresh buffers: a scratch buffer
            if not self.fresh and (answer.how == SCALAR or (
                    answer.how == INDEX and self.scratch[which] == (1, np.dtype(np.uint32)))):
                return "scalar", _run_scalar(fn, grid, self.spare, self.scratch, which, answer.how == INDEX)
        return "general", self._run

    def _run(self, inputs: list[np.ndarray]) -> Any:
        try:
            scratch = self.spare.pop()
        except IndexError:
            scratch = _allocate(self.scratch)
        bufs = inputs + scratch
        if self.fresh:
            bufs += _allocate(self.fresh)
        for fn, parallel, grid, pick, call in self.steps:
            if parallel:
                call.call(*pick(bufs))
            else:
                fn(*pick(bufs), grid, 1, 1)
        if self.single:
            out = _answer(bufs, self.answers[0])
        else:
            out = tuple([_answer(bufs, a) for a in self.answers])
        self.spare.append(scratch)
        return out


def _allocate(sizes: tuple[tuple[int, np.dtype], ...]) -> list[np.ndarray]:
    """New buffers of these lengths and dtypes (contents undefined: every pass writes its output)."""
    return [np.empty(n, dt) for n, dt in sizes]


def _run_result(fn: Any, grid: int, n: int, dt: np.dtype, shape: tuple[int, ...], spare: list[Any],
                scratch: tuple[tuple[int, np.dtype], ...], order: Callable[[list[np.ndarray]], tuple] | None
                ) -> Callable[[list[np.ndarray]], np.ndarray]:
    """Plan.run of a ``"result"`` plan (its answer shaped ``shape``), with ``scratch`` buffers
    (a column reduction's length carrier) taken from ``spare`` as the general path does;
    ``order``: the kernel's arguments from (inputs, scratch, answer), where not in that order."""
    empty = np.empty
    flat = shape == (n,)
    if scratch:
        def run_scratch(inputs: list[np.ndarray]) -> np.ndarray:
            try:
                bufs = spare.pop()
            except IndexError:
                bufs = _allocate(scratch)
            answer = empty(n, dt)
            if order is None:
                fn(*inputs, *bufs, answer, grid, 1, 1)
            else:
                fn(*order([*inputs, *bufs, answer]), grid, 1, 1)
            spare.append(bufs)
            return answer if flat else answer.reshape(shape)

        return run_scratch
    if flat:
        def run(inputs: list[np.ndarray]) -> np.ndarray:
            answer = empty(n, dt)
            fn(*inputs, answer, grid, 1, 1)
            return answer

        return run

    def run_shaped(inputs: list[np.ndarray]) -> np.ndarray:
        answer = empty(n, dt)
        fn(*inputs, answer, grid, 1, 1)
        return answer.reshape(shape)

    return run_shaped


def _run_scalar(fn: Any, grid: int, spare: list[Any], scratch: tuple[tuple[int, np.dtype], ...],
                which: int, index: bool) -> Callable[[list[np.ndarray]], Any]:
    """Plan.run of a ``"scalar"`` plan: the answer is element 0 of scratch buffer ``which`` (a
    numpy scalar, so a copy), or with ``index`` (a u32 of one element) that element as an int64.
    For the index, the kernel writes into the low half of a zeroed int64 cell (a u32 view of it):
    reading the cell gives the int64 answer, a third of the time of converting the u32."""
    if not index:
        def run(inputs: list[np.ndarray]) -> Any:
            try:
                bufs = spare.pop()
            except IndexError:
                bufs = _allocate(scratch)
            fn(*inputs, *bufs, grid, 1, 1)
            value = bufs[which][0]
            spare.append(bufs)
            return value

        return run

    low = 0 if sys.byteorder == "little" else 1  # the u32 half that holds an int64's value

    def new_cell() -> tuple[list[np.ndarray], np.ndarray]:
        cell = np.zeros(1, np.int64)
        bufs = _allocate(scratch)
        bufs[which] = cell.view(np.uint32)[low:low + 1]
        return bufs, cell

    def run_index(inputs: list[np.ndarray]) -> Any:
        try:
            bufs, cell = spare.pop()
        except IndexError:
            bufs, cell = new_cell()
        fn(*inputs, *bufs, grid, 1, 1)
        value = cell[0]
        spare.append((bufs, cell))
        return value

    return run_index


def _answer(bufs: list[np.ndarray], a: Answer) -> Any:
    if a.how == SCALAR:
        return bufs[a.buffer][0]  # a numpy scalar: a copy
    if a.how == RESULT:
        out = bufs[a.buffer]
        return out if out.shape == a.shape else out.reshape(a.shape)  # a reshape costs 0.2 us
    return np.int64(bufs[a.buffer].item(0))  # via a Python int: half the time of np.int64(np.uint32)


class DevicePlan:
    """An op's CUDA launches for one key (device arrays of one library on one GPU): a call makes
    the op's Ctx without checking the arrays again, allocates what the op allocated (new arrays
    every call: the GPU may still be reading the last call's), launches each pass directly
    (a :class:`~vyre.ops._launch.DeviceLaunch` per pass: arguments packed once with the plan's
    lengths, on the stream a checked launch would use, in the GPU's context) and builds the answers
    the op's way. What it skips is the op's Python: checking and classifying every array, planning
    passes and workgroups, and per pass the launch's own lookups."""

    __slots__ = ("allocs", "answers", "backend", "carriers", "ctx", "device", "home", "kind", "launches", "makers",
                 "pointer", "runs", "shared", "single", "torch")

    def __init__(self, backend: str, like: Any,
                 runs: tuple[tuple[Program, int, tuple[str, ...], tuple[int, ...], tuple[int, ...]], ...],
                 allocs: tuple[tuple[int, DataType], ...], answers: tuple[Answer, ...], single: bool,
                 carriers: frozenset[int] = frozenset()) -> None:
        from ._runtime import Ctx, Kind, _kind, torch_dtype  # (imports this module)

        self.ctx = Ctx
        self.backend = backend
        self.kind = _kind(like)
        self.runs = runs
        self.allocs = allocs
        #: the allocations (by position) that only pass a length: no kernel reads or writes them,
        #: so every call shares the ones the first call made (``shared``)
        self.carriers = carriers
        #: per allocation, the buffer every call shares (a length carrier, once made), else None
        self.shared: list[Any] = [None] * len(allocs)
        self.answers = answers
        self.single = single
        self.device = device_of(like)
        self.torch = self.kind is Kind.TORCH
        self.pointer: Callable[[Any], int] = (operator.methodcaller("data_ptr") if self.torch
                                              else operator.attrgetter("data.ptr"))
        launches = [device_launch(program, self.device, dict(zip(names, picks, strict=True)),
                                  dict(zip(names, lengths, strict=True)), grid)
                    for program, grid, names, picks, lengths in runs]
        #: every pass's direct launch, or None (a pass without one: every pass goes through launch)
        self.launches: tuple[DeviceLaunch, ...] | None = (
            tuple(x for x in launches if x is not None) if all(x is not None for x in launches)
            and self.kind in (Kind.CUPY, Kind.TORCH) else None)
        #: each allocation's ``torch.empty`` / ``cupy.empty`` with its arguments bound (2-3 us less
        #: per allocation than through a Ctx); else None. A tensor's device is explicit; CuPy
        #: allocates on the current device, so its makers serve only while that is ``home``
        self.makers: tuple[Callable[[], Any], ...] | None = None
        self.home: tuple[Callable[[], int], int] | None = None
        if self.torch:
            import torch

            self.makers = tuple(functools.partial(torch.empty, n, dtype=torch_dtype(t), device=like.device)
                                for n, t in allocs)
        elif self.kind is Kind.CUPY:
            import cupy

            self.makers = tuple(functools.partial(cupy.empty, n, t.np_dtype) for n, t in allocs)
            self.home = (cupy.cuda.runtime.getDevice, int(like.device.id))

    def run(self, inputs: list[Any]) -> Any:
        """One call over ``inputs`` (the caller's arrays, C-contiguous, of any shape: a pre-packed
        launch needs only their data pointers, the plan knows their lengths)."""
        launches = self.launches
        if launches is None:  # launch reads lengths from the arrays: flat views
            inputs = [x if x.ndim == 1 else x.reshape(-1) for x in inputs]
        made = self.shared
        makers = self.makers
        home = self.home
        if home is not None and home[0]() != home[1]:
            makers = None  # CuPy, another device current: the Ctx allocates on the array's device
        if makers is not None:
            bufs = inputs + [m if m is not None else make() for m, make in zip(made, makers, strict=True)]
        else:
            ctx = self.ctx(self.backend, self.kind, inputs[0])
            bufs = inputs + [m if m is not None else ctx.empty(n, t)
                             for m, (n, t) in zip(made, self.allocs, strict=True)]
        for k in self.carriers:
            if made[k] is None:
                made[k] = bufs[len(inputs) + k]
        if launches is None:
            for program, grid, names, picks, _ in self.runs:
                launch(program, {name: bufs[i] for name, i in zip(names, picks, strict=True)}, grid, self.backend)
        else:
            pointers = list(map(self.pointer, bufs))
            stream = CAPTURE.stream
            if stream is None:
                stream = torch_stream(self.device) if self.torch else 0
            device = self.device
            if device is not None and device != current_ordinal():
                with on_device(device):
                    for step in launches:
                        step(pointers, stream)
            else:
                for step in launches:
                    step(pointers, stream)
        if self.single:
            return _device_answer(bufs[self.answers[0].buffer], self.answers[0])
        return tuple([_device_answer(bufs[a.buffer], a) for a in self.answers])


def _device_answer(arr: Any, a: Answer) -> Any:
    """A device plan's answer from its buffer, as the op's Ctx builds it for device callers: a
    result shaped (a view), or element 0 as a 0-d view (an index stays uint32 on the device)."""
    if a.how == RESULT:
        return arr if arr.shape == a.shape else arr.reshape(a.shape)
    return device_element0(arr)


def device_element0(arr: Any) -> Any:
    """Element 0 of a flat device array as a 0-d view (CuPy, PyTorch, numba); a one-element
    buffer is reshaped without slicing it first."""
    return arr.reshape(()) if arr.shape[0] == 1 else arr[0:1].reshape(())


class Recorder:
    """What one checked op call did through its Ctx (vyre.ops._runtime calls these hooks)."""

    def __init__(self, inputs: int, backend: str) -> None:
        self.inputs = inputs
        self.backend = backend  # the backend whose Ctx this record watches ("cpu" or "cuda")
        self.where: dict[int, int] = {}  # id of a buffer the op holds -> its index
        self.keep: list[Any] = []  # the recorded objects, alive until the record ends (ids stay theirs)
        self.allocs: list[tuple[int, DataType]] = []
        self.runs: list[tuple[Program, int, tuple[int, ...], dict[str, int]]] = []
        self.answers: dict[int, Answer] = {}  # id of a returned object -> how it was built
        self.complete = True

    def _index(self, arr: Any) -> int | None:
        return self.where.get(id(arr))

    def input(self, position: int, data: Any) -> None:
        self.where[id(data)] = position
        self.keep.append(data)

    def empty(self, arr: Any, n: int, dtype: DataType) -> None:
        self.where[id(arr)] = self.inputs + len(self.allocs)
        self.keep.append(arr)
        self.allocs.append((n, dtype))

    def run(self, program: Program, arrays: Mapping[str, Any], grid: int) -> None:
        indices = []
        for a in arrays.values():
            i = self._index(a)
            if i is None:
                self.complete = False  # a buffer the record does not know (a view, a copy)
                return
            indices.append(i)
        self.runs.append((program, grid, tuple(indices), {name: int(a.shape[0]) for name, a in arrays.items()}))

    def answer(self, obj: Any, arr: Any, how: str, shape: tuple[int, ...] = ()) -> None:
        i = self._index(arr)
        if i is None or i < self.inputs:
            self.complete = False  # an answer that is (a view of) an input: not replayed
            return
        self.keep.append(obj)
        self.answers[id(obj)] = Answer(how, i, shape)

    def _carriers(self, answers: list[Answer | None]) -> frozenset[int]:
        """The allocations (by position) no pass writes and no answer is: buffers that pass a length (their
        contents are never defined, so never read: vyre.ops.colwise's ``inner``)."""
        written = {i for program, _, indices, sizes in self.runs
                   for name, i in zip(sizes, indices, strict=True)
                   if program.buffer(name).access in (BufferAccess.READ_WRITE, BufferAccess.WRITE_ONLY)}
        kept = {a.buffer for a in answers if a is not None}
        return frozenset(i - self.inputs for i in range(self.inputs, self.inputs + len(self.allocs))
                         if i not in written and i not in kept)

    def plan(self, out: Any, like: Any) -> Plan | DevicePlan | None:
        """The plan of this record for the op's return value ``out``, or None where the record
        cannot be replayed exactly. ``like``: the call's first input (a device plan allocates on
        its device, in its library)."""
        if not self.complete:
            return None
        single = not isinstance(out, tuple)
        answers = [self.answers.get(id(o)) for o in ((out,) if single else out)]
        if any(a is None for a in answers):
            return None
        if self.backend != "cpu":
            runs = tuple((program, grid, tuple(sizes), indices, tuple(sizes.values()))
                         for program, grid, indices, sizes in self.runs)
            return DevicePlan(self.backend, like, runs, tuple(self.allocs),
                              tuple(a for a in answers if a is not None), single, self._carriers(answers))
        # buffers renumbered: inputs, then scratch, then fresh (results the caller keeps)
        fresh = {a.buffer for a in answers if a is not None and a.how == RESULT}
        allocated = range(self.inputs, self.inputs + len(self.allocs))
        order = [*range(self.inputs), *(i for i in allocated if i not in fresh), *(i for i in allocated if i in fresh)]
        renumber = {old: new for new, old in enumerate(order)}
        steps = []
        for program, grid, indices, sizes in self.runs:
            call = cpu_call(program, sizes, grid)
            if call is None:
                return None
            by_name = dict(zip(sizes, indices, strict=True))
            steps.append((call, tuple(renumber[by_name[name]] for name in call.order)))
        sized = [(n, t.np_dtype) for n, t in self.allocs]
        scratch = tuple(sized[i - self.inputs] for i in allocated if i not in fresh)
        fresh_allocs = tuple(sized[i - self.inputs] for i in allocated if i in fresh)
        kept = tuple(Answer(a.how, renumber[a.buffer], a.shape) for a in answers if a is not None)
        return Plan(steps, scratch, fresh_allocs, kept, single)


_recording: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("vyre_ops_recording", default=None)


def recording() -> Recorder | None:
    """The recorder of the op call running in this context, if it is being recorded."""
    return _recording.get()


class _Used(threading.local):
    """What the numpy fast path of :func:`planned` last replayed in this thread, kept only while
    a call site (vyre.ops._sites) watches its route: the plan, the inputs as the route passed them,
    the plan's answer, and (host_indices) that answer with the int64 array made of it."""

    watching = 0
    plan: Plan | DevicePlan | None = None
    inputs: tuple[Any, ...] | None = None
    answer: Any = None
    indices: tuple[Any, Any] | None = None


USED = _Used()
#: every call site's signature memory (vyre.ops._sites), cleared by :func:`forget`
SITE_MEMORIES: list[dict[Any, Any]] = []

#: (op and options, backend argument, per input: dtype, shape) -> plan
_plans: dict[tuple[Any, ...], Plan | DevicePlan] = {}


def plan_key(op: tuple[Any, ...], inputs: tuple[Any, ...], backend: str | None
             ) -> tuple[tuple[Any, ...], list[Any]] | None:
    """The plan key of this call and its inputs as a plan takes them (flat views), or None where
    the call must take the checked path: numpy arrays off the CPU backend, device arrays off CUDA,
    or an array prepare would copy or refuse (not C-contiguous, unaligned, of another library)."""
    if type(inputs[0]) is not np.ndarray:
        return _device_key(op, inputs, backend)
    if backend != "cpu" and (backend is not None or not (default_is_cpu() or default_backend() == "cpu")):
        return None
    key: list[Any] = [op, backend]
    flat = []
    for x in inputs:
        if type(x) is not np.ndarray:
            return None
        if not _usable(x):
            return None
        flat.append(x if x.ndim == 1 else x.ravel())  # a view: C-contiguous (ravel: a third of reshape's time)
        key += [x.dtype, x.shape]
    return tuple(key), flat


def _device_key(op: tuple[Any, ...], inputs: tuple[Any, ...], backend: str | None
                ) -> tuple[tuple[Any, ...], list[Any]] | None:
    """:func:`plan_key` for CuPy arrays and CUDA tensors on the real GPU (the library, device,
    dtype and shape of each array are the key; all of one library, C-contiguous)."""
    if backend not in (None, "cuda") or simulator_enabled():
        return None
    key: list[Any] = [op, backend]
    flat = []
    for x in inputs:
        mod = type(x).__module__
        if mod.startswith("cupy") and hasattr(x, "device"):
            if not x.flags.c_contiguous:
                return None
            key += ["cupy", x.device.id, x.dtype, x.shape]
        elif mod.startswith("torch") and getattr(x, "is_cuda", False):
            if not x.is_contiguous():
                return None
            key += ["torch", x.device.index, x.dtype, tuple(x.shape)]
        else:
            return None
        flat.append(x)  # as it is: a device plan needs its pointer (DevicePlan.run flattens for launch)
    if len(set(key[2::4])) != 1:
        return None  # arrays of two libraries: the checked path says why that is refused
    return tuple(key), flat


def _usable(x: np.ndarray) -> bool:
    """Can a plan take numpy array ``x`` as it is (C-contiguous and aligned, as plan_key asks)?"""
    flags = x.flags
    # carray: C-contiguous, aligned and writeable (half the time of asking two flags)
    return flags.carray or (flags.c_contiguous and flags.aligned)


def planned(op: Op, inputs: tuple[Any, ...], backend: str | None,
            checked: Callable[[Op, tuple[Any, ...], str | None], T]) -> T:
    """``checked(op, inputs, backend)`` (the op as written), or its plan where one exists for
    this key; the first call of a key is recorded into one. ``op``: the op's name and every option
    that changes what it runs or returns (a forced program form included), which is all
    ``checked`` gets besides the arrays and the backend argument."""
    x = inputs[0]
    if type(x) is np.ndarray and (backend is None or backend == "cpu"):
        # the common calls (one or two numpy arrays, the default or the CPU backend) look their
        # plan up first, and check what plan_key would only once a plan exists: 0.5 us less per
        # call (the key is plan_key's)
        n = len(inputs)
        if n == 1:
            plan = _plans.get((op, backend, x.dtype, x.shape))
            if plan is not None and _usable(x) and (backend is not None or default_is_cpu()):
                out = plan.run([x if x.ndim == 1 else x.ravel()])
                if USED.watching:
                    USED.plan, USED.inputs, USED.answer = plan, inputs, out
                return out  # type: ignore[no-any-return]
        elif n == 2:
            y = inputs[1]
            if type(y) is np.ndarray:
                plan = _plans.get((op, backend, x.dtype, x.shape, y.dtype, y.shape))
                if plan is not None and _usable(x) and _usable(y) and (backend is not None or default_is_cpu()):
                    out = plan.run([x if x.ndim == 1 else x.ravel(), y if y.ndim == 1 else y.ravel()])
                    if USED.watching:
                        USED.plan, USED.inputs, USED.answer = plan, inputs, out
                    return out  # type: ignore[no-any-return]
    hit = plan_key(op, inputs, backend)
    if hit is None:
        return checked(op, inputs, backend)
    key, flat = hit
    plan = _plans.get(key)
    if plan is not None:
        return plan.run(flat)  # type: ignore[no-any-return]
    outer = _recording.get()
    if outer is not None:
        outer.complete = False  # an op inside another op's record: the outer record would miss its passes
        return checked(op, inputs, backend)
    rec = Recorder(len(flat), "cpu" if type(flat[0]) is np.ndarray else "cuda")
    token = _recording.set(rec)
    try:
        out = checked(op, inputs, backend)
    finally:
        _recording.reset(token)
    made = rec.plan(out, flat[0])
    if made is not None:
        if len(_plans) > 1024:
            _plans.clear()
        _plans[key] = made
    return out


def forget() -> None:
    """Drop every plan and every call site's memory of them (tests)."""
    _plans.clear()
    for runs in SITE_MEMORIES:
        runs.clear()
