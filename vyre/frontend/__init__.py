"""Kernels written as Python functions (``@vyre.kernel``, ``@vyre.func``), lowered to vyre IR.

The function's source is parsed with :mod:`ast` when it is decorated and lowered to a
:class:`vyre.ir.Program` (``kernel.program``); it never runs as Python. Python with no IR meaning is
rejected then, with a :class:`vyre.errors.FrontendError` pointing at the file and line. See
docs/guide.md for the language and :mod:`vyre.frontend.api` for parameters and calls.

The lowering is imported on the first decoration, so ``import vyre`` does not pay for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .markers import Array, Uniform, WriteOnly, workgroup_array

if TYPE_CHECKING:
    from ..ir import Program
    from .api import DeviceFunction, KernelFunction

__all__ = ["Array", "DeviceFunction", "KernelFunction", "Uniform", "WriteOnly", "func", "grad", "kernel", "program_of",
           "workgroup_array"]


def kernel(fn: Any = None, /, *, workgroup_size: int | Sequence[int] = 256) -> Any:
    """Compile a Python function into a vyre kernel: ``@vyre.kernel`` or
    ``@vyre.kernel(workgroup_size=128)`` (docs/guide.md). Returns a :class:`KernelFunction`:
    ``k.program`` is the validated Program, ``k(x, out)`` dispatches it.

    >>> @vyre.kernel
    ... def double(x: Array[f32], out: Array[f32]):
    ...     i = vyre.gid()
    ...     if i < len(out):
    ...         out[i] = x[i] * 2.0
    """
    from .api import KernelFunction as _KernelFunction

    if fn is None:
        return lambda f: _KernelFunction(f, workgroup_size)
    return _KernelFunction(fn, workgroup_size)


def func(fn: Any) -> DeviceFunction:
    """A helper kernels call: ``@vyre.func def sq(a: f32) -> f32: return a * a``."""
    from .api import DeviceFunction as _DeviceFunction

    return _DeviceFunction(fn)


def grad(kernel_or_program: Any, wrt: str | Sequence[str], outputs: str | Sequence[str] | None = None,
         **options: Any) -> Program:
    """The backward Program of a kernel or program: ``vyre.grad(chain, wrt=["x"])`` is
    ``vyre.autodiff.grad(chain.program, ["out"], ["x"])`` (``outputs`` default: every output)."""
    from .api import grad as _grad

    return _grad(kernel_or_program, wrt, outputs, **options)


def program_of(obj: Any) -> Program:
    """A Program, or the ``.program`` of a ``@vyre.kernel`` function."""
    from .api import program_of as _program_of

    return _program_of(obj)


def __getattr__(name: str) -> Any:
    if name in ("KernelFunction", "DeviceFunction"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'vyre.frontend' has no attribute {name!r}")
