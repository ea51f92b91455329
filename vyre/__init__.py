"""vyre: a Python JIT kernel compiler. Build kernels as a typed IR, differentiate them with
``grad()``, run them on an NVIDIA GPU (numba.cuda) or on the CPU."""

from . import ir
from .errors import (
    AutodiffError, CodegenError, DispatchError, InterpError, TunerError, ValidationError,
    VyreError, WireError,
)
from .driver.dispatch import Kernel, Launch, compile, dispatch
from .ir import BufferAccess, BufferDecl, DataType, Program

__version__ = "0.1.0"

__all__ = [
    "AutodiffError", "BufferAccess", "BufferDecl", "CodegenError", "DataType", "DispatchError",
    "InterpError", "Kernel", "Launch", "Program", "TunerError", "ValidationError", "VyreError", "WireError",
    "compile", "dispatch",
    "__version__", "ir",
]
