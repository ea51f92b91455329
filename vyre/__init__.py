"""vyre: a Python JIT kernel compiler. Build kernels as a typed IR, differentiate them with
``grad()``, run them on an NVIDIA GPU (numba.cuda) or on the CPU."""

from . import ir
from .errors import (
    AutodiffError, CodegenError, DispatchError, InterpError, TunerError, ValidationError,
    VyreError, WireError,
)
from .driver.dispatch import Kernel, Launch, compile, dispatch
from .driver.launch_policy import set_launch_policy
from .ir import BufferAccess, BufferDecl, DataType, Program

# The kernel language (vyre.frontend, docs/guide.md): decorators, Array/Uniform/WriteOnly, what bodies call.
from .frontend import Array, Uniform, WriteOnly, func, grad, kernel, workgroup_array
from .frontend.lang import *  # noqa: F403 - exp, gid, f32, atomic_add, ... (listed in lang.__all__)
from .frontend.lang import __all__ as _lang_names

from .settings import quiet_openmp

__version__ = "0.1.0"

# before numba's OpenMP layer loads (at the first parallel launch, not at import): idle pool
# threads must not spin on a shared machine (settings.quiet_openmp says why)
quiet_openmp()


def _autotuned_launch(kernel: Kernel, arrays: object, invocations: int) -> Launch | None:
    """The launch policy until the autotuner is first needed: import :mod:`vyre.tuning` (which
    installs its own policy in this one's place) and ask it. Keeps ``import vyre`` from loading
    the tuner; ``set_launch_policy(None)`` runs every flat kernel with its default launch.

    A call the tuner would not measure (the tuner off, or too few invocations) where no decision
    is on disk gets the default launch without importing the tuner (about 40 ms of a new
    process's first dispatch); remembered per kernel and size class, as the tuner remembers."""
    key = (id(kernel), invocations.bit_length())
    if _untuned.get(key) is kernel:
        return None
    if not _may_need_tuner(kernel, arrays, invocations):
        if len(_untuned) >= 4096:
            _untuned.clear()
        _untuned[key] = kernel
        return None
    from . import tuning

    tuning.install()
    return tuning.launch_for(kernel, arrays, invocations)  # type: ignore[arg-type]


_untuned: dict[tuple[int, int], Kernel] = {}


def _may_need_tuner(kernel: Kernel, arrays: object, invocations: int) -> bool:
    """Could the tuner choose anything but the default launch for this call? (The rules of
    vyre.tuning.autotune.launch_for: a cached decision applies in every mode; measuring needs the
    tuner on and enough invocations or, on the CPU, enough work.)"""
    from .driver.launch_policy import measurable
    from .settings import TUNER_DIR, Mode, read_settings

    settings = read_settings()
    decisions = settings.cache_root() / TUNER_DIR
    if decisions.is_dir() and any(decisions.glob("*.toml")):
        return True
    return settings.autotuner is not Mode.OFF_USE_DEFAULT and measurable(kernel, arrays, invocations)  # type: ignore[arg-type]


set_launch_policy(_autotuned_launch)

__all__ = [
    "AutodiffError", "BufferAccess", "BufferDecl", "CodegenError", "DataType", "DispatchError",
    "InterpError", "Kernel", "Launch", "Program", "TunerError", "ValidationError", "VyreError", "WireError",
    "compile", "dispatch",
    "__version__", "ir",
    "Array", "Uniform", "WriteOnly", "func", "grad", "kernel", "workgroup_array", *_lang_names,
]


def __getattr__(name: str) -> object:
    """``vyre.torch`` and ``vyre.graph`` load on first use (PyTorch is optional and heavy to import)."""
    if name in ("torch", "graph"):
        import importlib

        try:
            return importlib.import_module(f".{name}", __name__)
        except ImportError as e:  # an AttributeError, so hasattr(vyre, "torch") stays False without PyTorch
            fix = "pip install torch" if name == "torch" else "pip install 'vyre[cuda]'"
            raise AttributeError(f"vyre.{name} is unavailable ({e}). Fix: {fix}") from e
    raise AttributeError(f"module 'vyre' has no attribute {name!r}")
