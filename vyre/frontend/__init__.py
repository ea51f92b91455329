"""Kernels written as Python functions (``@vyre.kernel``, ``@vyre.func``), lowered to vyre IR.

The function's source is parsed with :mod:`ast` when it is decorated and lowered to a
:class:`vyre.ir.Program` (``kernel.program``); it never runs as Python. Python with no IR meaning is
rejected then, with a :class:`vyre.errors.FrontendError` pointing at the file and line. See
docs/guide.md for the language and :mod:`vyre.frontend.api` for parameters and calls.
"""

from .api import DeviceFunction, KernelFunction, func, grad, kernel, program_of
from .intrinsics import Array, workgroup_array

__all__ = ["Array", "DeviceFunction", "KernelFunction", "func", "grad", "kernel", "program_of", "workgroup_array"]
