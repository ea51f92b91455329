"""Runners: build the derivative programs, dispatch them, return arrays.

Every runner dispatches the derived program with the *forward's* grid (the forward's default
grid covers its largest output; a backward's own default would cover its gradient buffers
instead), binds every forward buffer with its pre-forward contents, and zero-fills the buffers
it accumulates into. ``backend`` is passed to :func:`vyre.driver.dispatch.dispatch` (``None``:
its default; ``"interp"`` is the reference interpreter).

Arrays: whatever ``dispatch`` accepts. Buffers a runner allocates (copies of written buffers,
gradients, tangents) are of the kind of the first array in ``inputs`` (numpy, CuPy, PyTorch on
the same device, numba device arrays; :mod:`vyre.driver.arrays`) and stay on its device; results
come back as that kind. Losses are floats for host arrays and float64 device scalars (0-d arrays)
for CuPy and PyTorch CUDA tensors.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..driver.arrays import ArrayKind, first_kind
from ..driver.geometry import Grid, default_grid, grid3, launch_grid
from ..errors import AutodiffError
from ..ir.program import Program
from .checks import as_names, as_program, scalar_inputs
from .checkpoint import tape_arrays
from .forward import TANGENT_PREFIX, jvp_program
from .fused import LOSS_PREFIX, loss_program, partial_count
from .reverse import GRAD_PREFIX, STORED_PREFIX, grad

if TYPE_CHECKING:
    from .tape import Tape



def hashable(program: Program) -> Program:
    """``program``, checked to be hashable: hashing walks the whole tree recursively, so a tree
    too deep for it (always an invalid program: validation bounds depth) is validated instead,
    raising the validation error rather than a ``RecursionError``."""
    try:
        hash(program)
    except RecursionError:
        program.validate()
        raise
    return program


def cached_grad(program: Program, outputs: tuple[str, ...], inputs: tuple[str, ...],
                grid_1d: bool) -> Program:
    """:func:`grad`, memoised on the (immutable, hashable) program and the request."""
    return _cached_grad(hashable(program), outputs, inputs, grid_1d)


def cached_fused(program: Program, output: str, inputs: tuple[str, ...], grid_1d: bool) -> Program:
    """The one-pass value-and-gradient program of ``sum(output)`` (``with_value``, ``unit_cotangent``)."""
    return _cached_fused(hashable(program), output, inputs, grid_1d)


@functools.lru_cache(maxsize=128)
def _cached_grad(program: Program, outputs: tuple[str, ...], inputs: tuple[str, ...],
                 grid_1d: bool) -> Program:
    return grad(program, list(outputs), list(inputs), grid_1d=grid_1d)


@functools.lru_cache(maxsize=128)
def _cached_fused(program: Program, output: str, inputs: tuple[str, ...], grid_1d: bool) -> Program:
    return grad(program, [output], list(inputs), grid_1d=grid_1d, with_value=True, unit_cotangent=True)


def array_size(a: Any) -> int:
    """Element count of any array vyre accepts (numpy, CuPy, PyTorch, numba, JAX)."""
    n = getattr(a, "size", None)
    if isinstance(n, int):
        return n
    return int(math.prod(np.shape(a)))


def input_kind(inputs: Mapping[str, Any]) -> ArrayKind:
    """The kind of array the runner allocates and returns: that of the first input."""
    return first_kind(inputs.values())


def run_program(program: Program, arrays: Mapping[str, Any], *, backend: str | None,
                grid: Grid | None) -> dict[str, Any]:
    """Dispatch ``program`` (written arrays are updated in place) and return its written buffers."""
    from ..driver.dispatch import dispatch

    return dict(dispatch(program, arrays, backend=backend, grid=grid))


def forward_lengths(program: Program, inputs: Mapping[str, Any]) -> dict[str, int]:
    """Element counts of every storage buffer as the forward would see them."""
    out: dict[str, int] = {}
    for b in program.buffers:
        if b.is_workgroup:
            continue
        if b.name in inputs:
            out[b.name] = array_size(inputs[b.name])
        elif b.count:
            out[b.name] = b.count
    return out


def forward_grid(program: Program, inputs: Mapping[str, Any], grid: Grid | None) -> tuple[int, int, int]:
    """The grid the forward runs with: ``grid`` if given, else the forward's default grid."""
    if grid is not None:
        return grid3(grid)
    return default_grid(program, forward_lengths(program, inputs))


def _arrays_for_forward_buffers(program: Program, inputs: Mapping[str, Any],
                                lengths: Mapping[str, int], kind: ArrayKind) -> dict[str, Any]:
    """Every forward storage buffer, as given or zero-filled (what the program sees before it runs)."""
    out: dict[str, Any] = {}
    for b in program.buffers:
        if b.is_workgroup:
            continue
        if b.name in inputs:
            out[b.name] = inputs[b.name]
        elif b.name in lengths:
            out[b.name] = kind.zeros(lengths[b.name], b.element.np_dtype)
        else:
            raise AutodiffError(f"buffer {b.name!r} was not passed and declares no count, so its "
                                "length is unknown. Fix: pass an array for it")
    return out


def _tape(program: object) -> Tape | None:
    """``program`` as a :class:`~vyre.autodiff.tape.Tape` when it is one, or a list of steps
    (every runner takes either), else None."""
    from .tape import as_tape

    return as_tape(program)


def vjp(program: Program | Tape, inputs: Mapping[str, Any], cotangents: Mapping[str, Any],
        wrt: str | Sequence[str], *, backend: str | None = None, grid: Grid | None = None,
        dim: Grid | None = None
        ) -> dict[str, Any]:
    """Vector-Jacobian product: ``{w: sum_o J_o,w^T cotangents[o]}`` for every ``w`` in ``wrt``.

    ``inputs`` are the forward's arrays (pre-forward contents); ``cotangents`` maps each output to
    an array of its dtype and length. ``wrt`` is a name or a list of names (so in every runner);
    ``program`` may be a ``@vyre.kernel`` function, or a Tape (names are then shared names)."""
    if (tape := _tape(program)) is not None:
        from . import tape as _t

        return _t.vjp(tape, inputs, cotangents, as_names(wrt, "wrt"), backend=backend, grid=grid, dim=dim)
    program, wrt = as_program(program), as_names(wrt, "wrt")
    inputs = scalar_inputs(program, inputs)
    grid = launch_grid(program, grid, dim)
    g3 = forward_grid(program, inputs, grid)
    back = cached_grad(program, tuple(cotangents), tuple(wrt), g3[1:] == (1, 1))
    kind = input_kind(inputs)
    lengths = forward_lengths(program, inputs)
    for name, cot in cotangents.items():
        lengths.setdefault(name, array_size(cot))
    args = _arrays_for_forward_buffers(program, inputs, lengths, kind)
    for name, cot in cotangents.items():
        args[GRAD_PREFIX + name] = cot
    grads = _bind_gradients(program, back, inputs, lengths, list(cotangents), wrt, args, kind)
    args.update(tape_arrays(program, back, g3[0] * program.workgroup_size[0], kind))
    res = run_program(back, args, backend=backend, grid=g3)
    return {w: kind.wrap(res.get(GRAD_PREFIX + w, grads[w])) for w in wrt}


def _forward_args(program: Program, inputs: Mapping[str, Any], kind: ArrayKind) -> dict[str, Any]:
    """The forward's arrays: inputs as given, copies of the written ones, zeros for written buffers
    not passed that have a known length."""
    lengths = forward_lengths(program, inputs)
    args = {}
    for b in program.buffers:
        if b.is_workgroup:
            continue
        if b.name in inputs:
            arr = inputs[b.name]
            args[b.name] = kind.copy(arr) if b.access.writable else arr
        elif b.access.writable and b.name in lengths:
            args[b.name] = kind.zeros(lengths[b.name], b.element.np_dtype)
    return args


def run_forward(program: Program | Tape, inputs: Mapping[str, Any], *,
                backend: str | None = None, grid: Grid | None = None, dim: Grid | None = None
                ) -> dict[str, Any]:
    """Run the forward on copies of the written buffers (``inputs`` stay pre-forward); a Tape
    runs its steps in order."""
    if (tape := _tape(program)) is not None:
        from . import tape as _t

        return _t.run_forward(tape, inputs, backend=backend, grid=grid, dim=dim)
    program = as_program(program)
    inputs = scalar_inputs(program, inputs)
    grid = launch_grid(program, grid, dim)
    kind = input_kind(inputs)
    res = run_program(program, _forward_args(program, inputs, kind), backend=backend,
                      grid=forward_grid(program, inputs, grid))
    return {k: kind.wrap(v) for k, v in res.items()}


def value_and_grad(program: Program | Tape, inputs: Mapping[str, Any],
                   output: str | Sequence[str], wrt: str | Sequence[str], *,
                   cotangent: Any | None = None,
                   backend: str | None = None, grid: Grid | None = None, dim: Grid | None = None
                   ) -> tuple[Any, dict[str, Any]]:
    """``(loss, {w: dloss/dw})`` with ``loss = sum(output)``, or ``<cotangent, output>`` when a
    cotangent is given, accumulated in float64: a float for host arrays, a float64 device scalar
    for CuPy arrays and PyTorch CUDA tensors (a float for numba device arrays).

    Without a cotangent, one fused kernel (``grad(..., with_value=True, unit_cotangent=True)``)
    computes the outputs, the gradients and, on device arrays, partial sums of the loss in a single
    pass (:mod:`vyre.autodiff.fused`). For a loop, :func:`value_and_grad_fn` keeps the compiled
    program and the buffers between calls. ``output`` is one name (or a list of one). A Tape
    runs its steps forward, then their backward programs in reverse (host arrays)."""
    if (tape := _tape(program)) is not None:
        from . import tape as _t

        return _t.value_and_grad(tape, inputs, _one(output), as_names(wrt, "wrt"),
                                 cotangent=cotangent, backend=backend, grid=grid, dim=dim)
    program, wrt, output = as_program(program), as_names(wrt, "wrt"), _one(output)
    inputs = scalar_inputs(program, inputs)
    grid = launch_grid(program, grid, dim)
    if cotangent is None:
        return _fused_value_and_grad(program, inputs, output, wrt, backend=backend, grid=grid)
    kind = input_kind(inputs)
    outs = run_forward(program, inputs, backend=backend, grid=grid)
    loss = kind.vdot(outs[output], cotangent)
    return loss, vjp(program, inputs, {output: cotangent}, wrt, backend=backend, grid=grid)


def jvp(program: Program | Tape, inputs: Mapping[str, Any], tangents: Mapping[str, Any],
        *, outputs: str | Sequence[str] | None = None, backend: str | None = None,
        grid: Grid | None = None, dim: Grid | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Jacobian-vector product: ``(primal outputs, {o: J_o tangents})`` for the float outputs
    (default: every output the tangents reach; for a Tape, every float output)."""
    if (tape := _tape(program)) is not None:
        from . import tape as _t

        return _t.jvp(tape, inputs, tangents, backend=backend, grid=grid, dim=dim,
                      outputs=None if outputs is None else as_names(outputs, "outputs"))
    program = as_program(program)
    inputs = scalar_inputs(program, inputs)
    grid = launch_grid(program, grid, dim)
    tp = jvp_program(program, list(tangents), None if outputs is None else as_names(outputs, "outputs"))
    g3 = forward_grid(program, inputs, grid)
    kind = input_kind(inputs)
    lengths = forward_lengths(program, inputs)
    args: dict[str, Any] = {}
    for b in tp.buffers:
        if b.is_workgroup:
            continue
        if b.name in inputs:
            arr = inputs[b.name]
            args[b.name] = kind.copy(arr) if b.access.writable else arr
        elif b.name.startswith(TANGENT_PREFIX) and b.name[len(TANGENT_PREFIX):] in tangents:
            t = tangents[b.name[len(TANGENT_PREFIX):]]
            args[b.name] = kind.copy(t) if b.access.writable else t
        else:
            base = b.name[len(TANGENT_PREFIX):] if b.name.startswith(TANGENT_PREFIX) else b.name
            if base not in lengths:
                raise AutodiffError(f"buffer {base!r} was not passed and declares no count. "
                                    "Fix: pass an array for it")
            args[b.name] = kind.zeros(lengths[base], b.element.np_dtype)
    res = run_program(tp, args, backend=backend, grid=g3)
    outs = [b.name for b in tp.buffers if b.is_output and b.name.startswith(TANGENT_PREFIX)]
    primal = {b.name: kind.wrap(res[b.name]) for b in program.buffers if b.is_output and b.name in res}
    return primal, {o[len(TANGENT_PREFIX):]: kind.wrap(res[o]) for o in outs}


def hvp(program: Program | Tape, inputs: Mapping[str, Any], output: str | Sequence[str],
        wrt: str | Sequence[str],
        vectors: Mapping[str, Any], *, cotangent: Any | None = None,
        backend: str | None = None, grid: Grid | None = None, dim: Grid | None = None) -> dict[str, Any]:
    """Hessian-vector product of ``loss = <cotangent (default ones), output>`` by forward-over-
    reverse: the tangent program of the backward program. ``vectors`` maps each ``wrt`` input to
    its direction; returns ``{w: (H v)_w}``."""
    if (tape := _tape(program)) is not None:
        from . import tape as _t

        return _t.hvp(tape, inputs, _one(output), as_names(wrt, "wrt"), vectors,
                      cotangent=cotangent, backend=backend, grid=grid, dim=dim)
    program, wrt, output = as_program(program), as_names(wrt, "wrt"), _one(output)
    inputs = scalar_inputs(program, inputs)
    grid = launch_grid(program, grid, dim)
    g3 = forward_grid(program, inputs, grid)
    back = cached_grad(program, (output,), tuple(wrt), g3[1:] == (1, 1))
    kind = input_kind(inputs)
    lengths = forward_lengths(program, inputs)
    args = _arrays_for_forward_buffers(program, inputs, lengths, kind)
    n_out = lengths[output]
    args[GRAD_PREFIX + output] = (kind.ones(n_out, program.buffer(output).element.np_dtype)
                                  if cotangent is None else cotangent)
    if any(b.name == STORED_PREFIX + output for b in back.buffers):
        args[STORED_PREFIX + output] = kind.zeros(n_out, np.dtype(np.uint32))
    for w in wrt:
        args[GRAD_PREFIX + w] = kind.zeros_like(inputs[w])
    args.update(tape_arrays(program, back, g3[0] * program.workgroup_size[0], kind))
    missing = [w for w in wrt if w not in vectors]
    if missing:
        raise AutodiffError(f"no direction given for {missing}. Fix: pass vectors for every wrt input")
    _, tans = jvp(back, args, {w: vectors[w] for w in wrt},
                  outputs=[GRAD_PREFIX + w for w in wrt], backend=backend, grid=g3)
    return {w: tans[GRAD_PREFIX + w] for w in wrt}


def _one(output: str | Sequence[str]) -> str:
    """The single output a loss is taken over: a name, or a list of one."""
    names = as_names(output, "output")
    if len(names) != 1:
        raise AutodiffError(f"the loss is the sum of one output, got {names!r}. Fix: pass one output name")
    return names[0]


def _fused_value_and_grad(program: Program, inputs: Mapping[str, Any], output: str,
                          wrt: Sequence[str], *, backend: str | None, grid: Grid | None
                          ) -> tuple[Any, dict[str, Any]]:
    g3 = forward_grid(program, inputs, grid)
    kind = input_kind(inputs)
    # on device arrays the loss is summed inside the kernel (no second pass over the output); on the
    # host the output is summed in float64 afterwards, which is as fast and more accurate
    fused, partials = (loss_program(hashable(program), output, tuple(wrt), g3[1:] == (1, 1), True) if kind.device
                       else (cached_fused(program, output, tuple(wrt), g3[1:] == (1, 1)), False))
    lengths = forward_lengths(program, inputs)
    args = _arrays_for_forward_buffers(program, inputs, lengths, kind)
    for b in program.buffers:  # the forward writes these: give it copies, inputs stay pre-forward
        if b.access.writable and not b.is_workgroup and b.name in inputs:
            args[b.name] = kind.copy(args[b.name])
    grads = _bind_gradients(program, fused, inputs, lengths, [output], wrt, args, kind)
    args.update(tape_arrays(program, fused, g3[0] * program.workgroup_size[0], kind))
    if partials:
        args[LOSS_PREFIX + output] = kind.zeros(partial_count(lengths[output]), np.dtype(np.float64))
    res = run_program(fused, args, backend=backend, grid=g3)
    loss = kind.total(res[LOSS_PREFIX + output] if partials else res[output])
    return loss, {w: kind.wrap(res.get(GRAD_PREFIX + w, grads[w])) for w in wrt}


def _bind_gradients(program: Program, back: Program, inputs: Mapping[str, Any], lengths: Mapping[str, int],
                    outputs: Sequence[str], wrt: Sequence[str], args: dict[str, Any], kind: ArrayKind
                    ) -> dict[str, Any]:
    """Zero-filled ``stored_<out>`` flags (where the backward has them) and ``grad_<w>`` arrays, added
    to ``args``; returns the gradient arrays by input name."""
    for name in outputs:
        if any(b.name == STORED_PREFIX + name for b in back.buffers):
            args[STORED_PREFIX + name] = kind.zeros(lengths[name], np.dtype(np.uint32))
    grads = {w: kind.zeros_like(inputs[w]) if w in inputs
             else kind.zeros(lengths.get(w, 0), program.buffer(w).element.np_dtype) for w in wrt}
    for w, arr in grads.items():
        args[GRAD_PREFIX + w] = arr
    return grads
