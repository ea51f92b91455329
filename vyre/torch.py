"""vyre inside PyTorch: a program as a differentiable function of tensors.

```python
f = vyre.torch.function(program, inputs=["x", "y"], outputs=["out"])
out = f(tx, ty)              # torch tensors in and out
out.sum().backward()         # tx.grad, ty.grad computed by vyre's backward program
```

Each function is a ``torch.library`` custom operator (``vyre::f_<digest>``) with a registered
autograd formula (a second operator, ``vyre::f_<digest>_vjp``, that dispatches the backward
program of :func:`vyre.autodiff.grad`) and a fake (meta) implementation that gives output shapes
and dtypes, so ``torch.compile`` traces it as one opaque node: no graph break (tested with
``torch._dynamo.explain``). CPU tensors run on the CPU backend (zero-copy through DLPack), CUDA
tensors on the CUDA backend (the cached launch path, on PyTorch's current stream).

Shapes: each output has its declared ``count`` elements (1-D), or else the shape of the first
input; outputs take the program's element types and the first input's device. Inputs are made
contiguous; every other storage buffer of the program must be written and declare a ``count``
(scratch, allocated per call). Gradients flow to float inputs that require grad; the backward
is not itself differentiable through autograd (use :func:`vyre.autodiff.hvp` for second order).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from .autodiff.runners import vjp
from .driver.dispatch import dispatch
from .driver.geometry import Grid, grid3, launch_grid
from .errors import VyreError
from .ir.program import Program


class TorchFunctionError(VyreError):
    """A vyre.torch.function request that cannot work."""


_registered: dict[str, Callable[..., Any]] = {}


def _backend(t: Tensor, backend: str | None) -> str:
    if backend is not None:
        return backend
    return "cuda" if t.device.type == "cuda" else "cpu"


class _Spec:
    def __init__(self, program: Program, inputs: Sequence[str], outputs: Sequence[str], backend: str | None,
                 grid: Grid | None) -> None:
        if not isinstance(program, Program):
            raise TorchFunctionError(f"expected a vyre Program, got {type(program).__name__}. "
                                     "Fix: build one with Program.wrapped(...)")
        program.validate()
        names = {b.name: b for b in program.buffers if not b.is_workgroup}
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        if not self.inputs:
            raise TorchFunctionError("a vyre.torch.function needs at least one input. Fix: pass inputs=[...]")
        for n in (*self.inputs, *self.outputs):
            if n not in names:
                raise TorchFunctionError(f"unknown buffer {n!r}; the program declares {sorted(names)}. "
                                         "Fix: name declared storage buffers")
        if len(set(self.inputs) | set(self.outputs)) != len(self.inputs) + len(self.outputs):
            raise TorchFunctionError("a buffer is listed twice among inputs and outputs. Fix: list each once")
        for n in self.outputs:
            if not names[n].access.writable:
                raise TorchFunctionError(f"output {n!r} is read-only in the program. Fix: name a buffer it writes")
        self.scratch = []
        for b in names.values():
            if b.name in self.inputs or b.name in self.outputs:
                continue
            if not (b.access.writable and b.count > 0):
                raise TorchFunctionError(f"buffer {b.name!r} is neither an input nor an output, and vyre can only "
                                         "allocate written buffers with a declared count. Fix: list it in inputs")
            self.scratch.append(b.name)
        self.program = program
        self.backend = backend
        self.grid = None if grid is None else grid3(grid)
        self.float_inputs = tuple(n for n in self.inputs if names[n].element.is_float)
        self.decls = names

    def out_shape(self, name: str, first: Tensor) -> tuple[int, ...]:
        count = self.decls[name].count
        return (count,) if count else tuple(first.shape)

    def out_dtype(self, name: str) -> torch.dtype:
        return _TORCH_DTYPES[self.decls[name].element.np_dtype.str]

    def forward(self, xs: Sequence[Tensor]) -> list[Tensor]:
        first = xs[0]
        args: dict[str, Any] = {n: x.detach().contiguous() for n, x in zip(self.inputs, xs, strict=True)}
        outs = [torch.empty(self.out_shape(n, first), dtype=self.out_dtype(n), device=first.device)
                for n in self.outputs]
        args.update(zip(self.outputs, outs, strict=True))
        dispatch(self.program, args, backend=_backend(first, self.backend), grid=self.grid)
        return outs

    def backward(self, xs: Sequence[Tensor], gs: Sequence[Tensor], wanted: Sequence[bool]) -> list[Tensor]:
        first = xs[0]
        wrt = [n for n, w in zip(self.inputs, wanted, strict=True) if w and n in self.float_inputs]
        if not wrt:
            return [torch.zeros_like(x) for x in xs]
        args: dict[str, Any] = {n: x.detach().contiguous() for n, x in zip(self.inputs, xs, strict=True)}
        for n in self.outputs:  # the backward binds every forward buffer with its pre-forward contents
            args[n] = torch.zeros(self.out_shape(n, first), dtype=self.out_dtype(n), device=first.device)
        cots = {n: g.detach().contiguous() for n, g in zip(self.outputs, gs, strict=True)}
        g = vjp(self.program, args, cots, wrt, backend=_backend(first, self.backend), grid=self.grid)
        return [g[n].reshape(x.shape) if n in g else torch.zeros_like(x) for n, x in zip(self.inputs, xs, strict=True)]


_TORCH_DTYPES = {"<f4": torch.float32, "<f8": torch.float64, "<i4": torch.int32, "<u4": torch.uint32,
                 "|b1": torch.bool}


def _register(spec: _Spec) -> Callable[..., Any]:
    h = hashlib.blake2b(digest_size=10)
    h.update(spec.program.fingerprint())
    h.update(repr((spec.inputs, spec.outputs, spec.backend, spec.grid)).encode())
    name = f"vyre::f_{h.hexdigest()}"
    if name in _registered:
        return _registered[name]

    @torch.library.custom_op(name, mutates_args=())
    def fwd(xs: list[Tensor]) -> list[Tensor]:
        return spec.forward(xs)

    @fwd.register_fake
    def _(xs: list[Tensor]) -> list[Tensor]:
        return [xs[0].new_empty(spec.out_shape(n, xs[0]), dtype=spec.out_dtype(n)) for n in spec.outputs]

    @torch.library.custom_op(name + "_vjp", mutates_args=())
    def bwd(xs: list[Tensor], gs: list[Tensor], wanted: list[bool]) -> list[Tensor]:
        return spec.backward(xs, gs, wanted)

    @bwd.register_fake
    def _(xs: list[Tensor], gs: list[Tensor], wanted: list[bool]) -> list[Tensor]:
        return [torch.empty_like(x) for x in xs]

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        (xs,) = inputs
        ctx.save_for_backward(*xs)
        ctx.wanted = [bool(x.requires_grad) for x in xs]

    def backward(ctx: Any, grads: list[Tensor | None]) -> tuple[list[Tensor] | None]:
        xs = list(ctx.saved_tensors)
        first = xs[0]
        gs = [g if g is not None else torch.zeros(spec.out_shape(n, first), dtype=spec.out_dtype(n),
                                                   device=first.device)
              for n, g in zip(spec.outputs, grads, strict=True)]
        return (bwd(xs, gs, ctx.wanted),)

    fwd.register_autograd(backward, setup_context=setup_context)
    _registered[name] = fwd
    return fwd


def function(program: Program, inputs: Sequence[str], outputs: Sequence[str], *, backend: str | None = None,
             grid: Grid | None = None, dim: Grid | None = None) -> Callable[..., Any]:
    """``program`` as a differentiable PyTorch function of ``inputs`` returning ``outputs`` (module
    docs): one output gives a tensor, several a tuple. ``backend`` (default: the tensors' device)
    and ``grid`` (workgroups) or ``dim`` (invocations; default: the forward's) are passed to
    :func:`vyre.dispatch`."""
    if dim is not None:
        if not isinstance(program, Program):
            raise TorchFunctionError(f"expected a vyre Program, got {type(program).__name__}. "
                                     "Fix: build one with Program.wrapped(...)")
        grid = launch_grid(program, grid, dim)
    spec = _Spec(program, inputs, outputs, backend, grid)
    op = _register(spec)

    def call(*tensors: Tensor) -> Any:
        if len(tensors) != len(spec.inputs):
            raise TorchFunctionError(f"expected {len(spec.inputs)} tensors ({', '.join(spec.inputs)}), got "
                                     f"{len(tensors)}. Fix: pass one tensor per input, in order")
        for n, t in zip(spec.inputs, tensors, strict=True):
            if not isinstance(t, Tensor):
                raise TorchFunctionError(f"input {n!r} is a {type(t).__name__}, not a torch.Tensor. "
                                         "Fix: torch.as_tensor(value)")
        outs = op(list(tensors))
        return outs[0] if len(outs) == 1 else tuple(outs)

    call.__name__ = call.__qualname__ = f"vyre_function_{'_'.join(spec.outputs)}"
    return call
