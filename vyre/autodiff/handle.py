"""``value_and_grad_fn``: a compiled value-and-gradient callable for loops.

``vg = value_and_grad_fn(program, "out", ["x", "y"])`` builds the fused program once (forward
values, gradients of ``sum(out)`` and, on device arrays, the loss in partial sums: one kernel,
:mod:`vyre.autodiff.fused`); ``loss, grads = vg({"x": x, "y": y})`` then costs that kernel's
launch (plus zero fills of gradients that are accumulated rather than stored, and the loss's
reduction where it has more than one partial), when called again over the very same arrays.

Per call on device arrays, once a call has taken the kernel's cached launch, the handle keeps its
own copy of that launch (:meth:`~vyre.driver.fast_launch.FastLaunch.clone`): a call over the same
arrays checks their identity (and, for PyTorch tensors, their storage), and launches; no argument dict is
built, no dispatch lookup runs. Where the loss is one partial (up to 8192 outputs), the kernel adds
it straight into a new device scalar taken from a zero-filled pool (:class:`~vyre.driver.arrays.ScalarPool`),
so there is no fill, copy or allocation for it either.

Buffers: everything the handle allocates (gradients, outputs not passed, loss partials) is of
the inputs' kind and device and is **reused** by the next call over the same input arrays, like
PyTorch's ``.grad``: copy a gradient to keep it past the next call. The loss is a fresh value
each call, never overwritten later (a float on the host; a float64 0-d device array for CuPy and
PyTorch CUDA; a float for numba device arrays). Arrays passed for buffers the forward writes are
written in place. A call over other arrays (or another ``grid``) sets up new buffers; the handle
holds the arrays of its last set weakly.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..driver.arrays import ArrayKind, DeviceFill, ScalarPool, copy_device_bytes, current_stream, device_pointer
from ..driver.fast_launch import CAPTURE, FastLaunch
from ..driver.geometry import Grid, grid3, launch_grid
from ..errors import AutodiffError, DispatchError
from ..ir.program import Program
from .checkpoint import tape_arrays
from .fused import LOSS_PREFIX, loss_program, needs_zero_fill, partial_count
from .reverse import GRAD_PREFIX, STORED_PREFIX
from .runners import array_size, forward_grid, forward_lengths, hashable, input_kind

_ADOPT_TRIES = 4  # calls through dispatch before the handle stops looking for a cached launch to copy


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch")


@dataclass(eq=False)
class _Setup:
    """The buffers for one set of input arrays."""

    refs: tuple[tuple[str, weakref.ref[Any]], ...]
    own: dict[str, Any]  # buffers the handle allocated, by buffer name
    zero: tuple[Callable[[], None], ...]  # zero fills to run before each launch
    grads: dict[str, Any]
    loss_of: Any  # the partials buffer, or the output to sum
    kind: ArrayKind
    grid: tuple[int, int, int]
    program: Program  # the fused program this set runs
    scalar_src: int = 0  # device pointer of a one-element partials buffer: the loss is copied out
    # PyTorch tensors, passed (by name) or allocated: (name or tensor, data pointer, element count) when
    # set up; a tensor whose storage was swapped in place (set_, resize_) makes the set stale
    in_tensors: tuple[tuple[str, int, int], ...] = ()
    own_tensors: tuple[tuple[Any, int, int], ...] = ()
    # the handle's own copy of the kernel's cached launch, once a call has taken it
    fast: FastLaunch | None = None
    seen: Any = None  # the kernel's cached launch after the previous call (adopted once stable)
    tries: int = 0
    pool: ScalarPool | None = None  # one-partial loss: the kernel adds into a fresh pooled scalar
    loss_slot: int = -1  # the loss partials' index among the launch's packed arrays
    zero_pooled: tuple[Callable[[], None], ...] = ()  # ``zero`` without the loss partials' fill

    def loss(self) -> Any:
        if self.scalar_src:
            made = self.kind.device_scalar()
            if made is not None:  # one partial: an 8-byte copy into a new device scalar, no reduction kernel
                out, dst = made
                try:
                    copy_device_bytes(dst, self.scalar_src, 8, current_stream(out))
                    return out
                except DispatchError:  # the driver refused the copy: the library's reduction instead
                    self.scalar_src = 0
        return self.kind.total(self.loss_of)

    def matches(self, inputs: Mapping[str, Any]) -> bool:
        if len(inputs) != len(self.refs):
            return False
        for name, ref in self.refs:
            obj = ref()
            if obj is None or inputs.get(name) is not obj:
                return False
        for name, ptr, n in self.in_tensors:
            t = inputs[name]
            if t.data_ptr() != ptr or t.numel() != n or not t.is_contiguous():
                return False
        for t, ptr, n in self.own_tensors:
            if t.data_ptr() != ptr or t.numel() != n or not t.is_contiguous():
                return False
        return True

    def launch(self, fast: FastLaunch) -> tuple[Any, dict[str, Any]] | None:
        """One call through the handle's own launch; None when it could not run (nothing ran)."""
        pool = self.pool
        loss = None
        if pool is None or CAPTURE.stream is not None:  # a capture replays fixed pointers: the fixed partials
            for fill in self.zero:
                fill()
            if pool is not None:
                fast.set_pointer(self.loss_slot, self.scalar_src)
        else:
            for fill in self.zero_pooled:
                fill()
            loss, ptr = pool.take()
            fast.set_pointer(self.loss_slot, ptr)
        if not fast.run():
            return None
        if CAPTURE.stream is not None:  # a library reduction would run outside the capture (vyre.graph)
            return self.loss_of, dict(self.grads)
        return (self.kind.total(self.loss_of) if loss is None else loss), dict(self.grads)

    def adopt(self, program: Program, backend: str | None, args: Mapping[str, Any], output: str) -> None:
        """Copy the kernel's cached launch once it has stayed the same over two calls with ``args``
        (the launch policy has settled): later calls launch it directly."""
        from ..driver.dispatch import dispatched_kernel

        self.tries += 1
        k = dispatched_kernel(program, backend)
        fast = None if k is None or k.backend != "cuda" else k._fast
        if (k is None or fast is None or fast.launch is not k.launch or fast.slots is None
                or not fast.matches(args, self.grid, None)):
            self.seen = None
            return
        if fast is not self.seen:
            self.seen = fast
            return
        mine = fast.clone()
        if self.pool is not None:
            assert mine.slots is not None
            slot = mine.slots.get(LOSS_PREFIX + output)
            if slot is None:
                return
            self.loss_slot = slot
        self.fast = mine
        self.seen = None


if TYPE_CHECKING:
    from .tape import Tape, TapeValueAndGrad


class ValueAndGrad:
    """``sum(output)`` and its gradients with respect to ``wrt`` (module docs)."""

    def __init__(self, program: Program, output: str, wrt: Sequence[str], *, backend: str | None = None,
                 grid: Grid | None = None) -> None:
        if not isinstance(program, Program):
            raise AutodiffError(f"expected a vyre Program, got {type(program).__name__}. "
                                "Fix: build one with Program.wrapped(...)")
        self.program = hashable(program)  # a tree too deep to hash gets its validation error
        self.output = output
        self.wrt = tuple(wrt)
        self.backend = backend
        self.grid = None if grid is None else grid3(grid)
        # built now, so request errors (unknown names, non-differentiable programs) surface here
        for grid_1d in ((True,) if self.grid is None or self.grid[1:] == (1, 1) else (False,)):
            loss_program(program, output, self.wrt, grid_1d, False)
        self._setup: _Setup | None = None

    def __call__(self, inputs: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        from ..driver.dispatch import dispatch

        st = self._setup
        if st is None or not st.matches(inputs):
            st = self._setup = self._prepare(inputs)
        fast = st.fast
        if fast is not None:  # the same arrays as set up: the handle's own launch
            done = st.launch(fast)
            if done is not None:
                return done
            st.fast = None  # it could not run here (another thread, another stream): dispatch from now on
            st.tries = _ADOPT_TRIES
        for fill in st.zero:
            fill()
        args = dict(st.own)
        args.update(inputs)
        dispatch(st.program, args, backend=self.backend, grid=st.grid)
        if st.tries < _ADOPT_TRIES and st.kind.device and st.refs:
            st.adopt(st.program, self.backend, args, self.output)
        if CAPTURE.stream is not None:  # a library reduction would run outside the capture (vyre.graph)
            return st.loss_of, dict(st.grads)
        return st.loss(), dict(st.grads)

    def _prepare(self, inputs: Mapping[str, Any]) -> _Setup:
        if not isinstance(inputs, Mapping):
            raise AutodiffError(f"inputs must be a mapping of buffer name to array, got {type(inputs).__name__}. "
                                "Fix: pass a dict like {'x': x}")
        declared = {b.name for b in self.program.buffers}
        for name in inputs:
            if name not in declared:
                raise AutodiffError(f"unknown buffer {name!r}; the program declares {sorted(declared)}. "
                                    "Fix: pass only the forward's buffers (the handle allocates the gradients)")
        kind = input_kind(inputs)
        g3 = forward_grid(self.program, inputs, self.grid)
        # device arrays: the loss is summed in the kernel; the host sums the output afterwards in float64
        fused, partials = loss_program(self.program, self.output, self.wrt, g3[1:] == (1, 1), False, kind.device)
        lengths = forward_lengths(self.program, inputs)
        own: dict[str, Any] = {}
        zero: list[Any] = []
        for b in self.program.buffers:
            if b.is_workgroup or b.name in inputs:
                continue
            if b.name not in lengths:
                raise AutodiffError(f"buffer {b.name!r} was not passed and declares no count, so its length "
                                    "is unknown. Fix: pass an array for it")
            own[b.name] = kind.zeros(lengths[b.name], b.element.np_dtype)
        invocations = g3[0] * g3[1] * g3[2] * self.program.workgroup_invocations
        grads: dict[str, Any] = {}
        for w in self.wrt:
            g = (kind.zeros_like(inputs[w]) if w in inputs
                 else kind.zeros(lengths[w], self.program.buffer(w).element.np_dtype))
            own[GRAD_PREFIX + w] = grads[w] = g
            if needs_zero_fill(fused, w) or invocations < lengths[w]:
                zero.append(g)
        own.update(tape_arrays(self.program, fused, g3[0] * self.program.workgroup_size[0], kind))
        if any(b.name == STORED_PREFIX + self.output for b in fused.buffers):
            own[STORED_PREFIX + self.output] = flags = kind.zeros(lengths[self.output], np.dtype(np.uint32))
            zero.append(flags)
        loss_of: Any
        if partials:
            loss_of = own[LOSS_PREFIX + self.output] = kind.zeros(partial_count(lengths[self.output]),
                                                                np.dtype(np.float64))
            zero.append(loss_of)
        else:
            loss_of = inputs.get(self.output, own.get(self.output))
        fills = tuple(DeviceFill(a) if kind.device else functools.partial(kind.zero_, a) for a in zero)
        scalar_src = device_pointer(loss_of) if partials and kind.device and kind.size(loss_of) == 1 else 0
        try:
            refs = tuple((name, weakref.ref(obj)) for name, obj in inputs.items())
        except TypeError:
            refs = ()  # arrays that cannot be referenced weakly never match: set up again each call
        if any(array_size(v) == 0 for v in inputs.values()):
            refs = ()
        in_tensors = tuple((k, int(t.data_ptr()), int(t.numel())) for k, t in inputs.items() if _is_torch(t))
        own_tensors = tuple((t, int(t.data_ptr()), int(t.numel())) for t in own.values() if _is_torch(t))
        pool = None
        pooled = fills
        if scalar_src and kind.pooled_scalars:  # the kernel adds the loss into a pooled scalar
            pool = ScalarPool(kind)
            pooled = tuple(f for f, a in zip(fills, zero, strict=True) if a is not loss_of)
        return _Setup(refs if len(refs) == len(inputs) else (), own, fills, grads, loss_of, kind, g3, fused,
                      scalar_src, in_tensors, own_tensors, pool=pool, zero_pooled=pooled)

def value_and_grad_fn(program: Program | Tape, output: str | Sequence[str], wrt: str | Sequence[str], *,
                      backend: str | None = None, grid: Grid | None = None,
                      dim: Grid | None = None) -> ValueAndGrad | TapeValueAndGrad:
    """A reusable ``inputs -> (sum(output), {w: d sum(output) / dw})`` callable (module docs), in the
    spirit of ``jax.value_and_grad(f)``. ``wrt`` is a name or a list; ``program`` may be a kernel,
    or a :class:`~vyre.autodiff.tape.Tape` (its steps run forward, then their backward programs)."""
    from .checks import as_names, as_program
    from .runners import _one
    from .tape import TapeValueAndGrad, as_tape

    if (tape := as_tape(program)) is not None:  # a Tape, or a list of steps
        if dim is not None:
            grid = dim  # refused either way: a tape's steps keep the grids they were recorded with
        return TapeValueAndGrad(tape, _one(output), as_names(wrt, "wrt"), backend=backend, grid=grid)
    prog = as_program(program)
    return ValueAndGrad(prog, _one(output), as_names(wrt, "wrt"), backend=backend,
                        grid=launch_grid(prog, grid, dim))
