"""``value_and_grad_fn``: a compiled value-and-gradient callable for loops.

``vg = value_and_grad_fn(program, "out", ["x", "y"])`` builds the fused program once (forward
values, gradients of ``sum(out)`` and, on device arrays, the loss in partial sums: one kernel,
:mod:`vyre.autodiff.fused`); ``loss, grads = vg({"x": x, "y": y})`` then costs that kernel's
cached launch, a zero fill of the loss partials (and of gradients that are accumulated rather
than stored), and the loss's reduction, when called again over the very same arrays.

Buffers: everything the handle allocates (gradients, outputs not passed, loss partials) is of
the inputs' kind and device and is **reused** by the next call over the same input arrays, like
PyTorch's ``.grad``: copy a gradient to keep it past the next call. The loss is a fresh value
each call (a float on the host, a float64 device scalar for CuPy / PyTorch CUDA). Arrays passed
for buffers the forward writes are written in place. A call over other arrays (or another
``grid``) sets up new buffers; the handle holds the arrays of its last set weakly.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..driver.arrays import ArrayKind, DeviceFill, copy_device_bytes, current_stream, device_pointer
from ..driver.fast_launch import CAPTURE
from ..driver.geometry import Grid, grid3, launch_grid
from ..errors import AutodiffError, DispatchError
from ..ir.program import Program
from .checkpoint import tape_arrays
from .fused import LOSS_PREFIX, loss_program, needs_zero_fill, partial_count
from .reverse import GRAD_PREFIX, STORED_PREFIX
from .runners import array_size, forward_grid, forward_lengths, hashable, input_kind


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
        return True


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
        for fill in st.zero:
            fill()
        args = dict(st.own)
        args.update(inputs)
        dispatch(st.program, args, backend=self.backend, grid=st.grid)
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
        return _Setup(refs if len(refs) == len(inputs) else (), own, fills, grads, loss_of, kind, g3, fused,
                      scalar_src)

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
