"""CPU machine code saved from numba and loaded without it.

A CPU kernel compiled by numba is an object file (ELF, COFF or Mach-O, from numba's own LLVM target
machine) holding the kernel and numba's CPython wrapper around it: ``wrapper(closure, args, kws)``
unboxes the arguments, calls the kernel and returns ``None``. :func:`extract` takes that object code,
the wrapper's symbol, the symbol of the environment global the wrapper reads and the external symbols
the object needs, from a dispatcher compiled in this process.

:func:`load` links such objects into one MCJIT engine of this process (llvmlite) and returns Python
callables made by numba's ``_dynfunc.make_function``, exactly what numba's dispatcher calls once it
has picked an overload. It needs none of numba's Python modules: the external symbols come from
numba's C extensions (``_helperlib``, ``_dynfunc``, ``_nrt_python``, a thread pool: :func:`pool_layers`),
loaded as extension modules, and from the process (the CPython C API, libm). ``import numba`` costs
0.5-0.7 s and loading a kernel from numba's cache another 0.5 s; this costs the llvmlite import.

The callables trust their arguments: each must be what the compiled signature says (a 1-D
C-contiguous, aligned array of the declared dtype per buffer, then int64 scalars), which
:class:`vyre.driver.bind.BindPlan` has checked before a kernel runs; :func:`args_fit` checks the
rest (alignment) per call.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from ..errors import DispatchError
from ..settings import read_settings

__all__ = ["NativeEntry", "NativeLoadError", "args_fit", "extract", "load", "pool_layers", "target_parts"]


class NativeLoadError(DispatchError):
    """Cached machine code could not be linked here (a symbol is missing, the object is unusable)."""


class NativeEntry(NamedTuple):  # not a dataclass: defined on a warm start's first dispatch (0.07 ms, a dataclass 0.5-1)
    """One compiled entry point (``vyre_kernel`` or ``vyre_kernel_parallel``) as object code."""

    wrapper: str  # numba's CPython wrapper: PyObject *(PyObject *closure, PyObject *args, PyObject *kws)
    env: str  # the global holding the wrapper's Environment pointer (set before the first call)
    symbols: tuple[str, ...]  # external symbols the object refers to
    obj: bytes


def extract(dispatcher: Any) -> NativeEntry | None:
    """The object code of a numba dispatcher compiled in this process with exactly one overload, or
    None (several overloads; or the code came from numba's own cache, which hands the object to LLVM
    and keeps no copy)."""
    overloads = list(getattr(dispatcher, "overloads", {}).values())
    if len(overloads) != 1:
        return None
    cres = overloads[0]
    lib = cres.library
    try:
        obj = lib._get_compiled_object()
    except (ValueError, RuntimeError):
        return None
    module = lib._final_module
    symbols = {f.name for f in module.functions if f.is_declaration and not f.name.startswith("llvm.")}
    symbols |= {g.name for g in module.global_variables if g.is_declaration}
    return NativeEntry(cres.fndesc.llvm_cpython_wrapper_name, cres.fndesc.env_name, tuple(sorted(symbols)),
                       bytes(obj))


def _numba_dir() -> Path:
    """numba's package directory, found without importing numba."""
    mod = sys.modules.get("numba")
    if mod is not None and getattr(mod, "__file__", None):
        return Path(mod.__file__).parent  # type: ignore[arg-type]
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        raise NativeLoadError("numba is not installed. Fix: pip install numba")
    return Path(next(iter(spec.submodule_search_locations)))


def _extension(name: str) -> ModuleType:
    """numba's C extension ``name`` (dotted, e.g. ``numba._helperlib``), without importing numba: the
    extension's file is loaded under its own name, so a later ``import numba`` shares its state (an
    extension module is initialised once per process and name)."""
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    base = _numba_dir().joinpath(*name.split(".")[1:])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = base.with_name(base.name + suffix)
        if path.exists():
            loader = importlib.machinery.ExtensionFileLoader(name, str(path))
            spec = importlib.util.spec_from_file_location(name, path, loader=loader)
            assert spec is not None
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
            return mod
    raise NativeLoadError(f"numba's extension {name} was not found under {base.parent}. "
                          "Fix: reinstall numba")


# The thread pool's entry points, by the names numba's parallel code calls them (numba/np/ufunc/parallel.py).
_POOL_SYMBOLS = {
    "numba_parallel_for": "parallel_for", "do_scheduling_signed": "do_scheduling_signed",
    "do_scheduling_unsigned": "do_scheduling_unsigned", "allocate_sched": "allocate_sched",
    "deallocate_sched": "deallocate_sched", "get_num_threads": "get_num_threads",
    "set_num_threads": "set_num_threads", "get_thread_id": "get_thread_id",
    "set_parallel_chunksize": "set_parallel_chunksize", "get_parallel_chunksize": "get_parallel_chunksize",
    "get_sched_size": "get_sched_size",
}


def pool_layers(requested: str) -> list[str]:
    """The thread pools to try, in order, for ``NUMBA_THREADING_LAYER=requested``: numba's own
    choice, except that TBB is tried only when asked for by name (``tbb``, ``safe``), since numba
    checks the TBB library's version before it loads it, which this loader cannot, and that
    ``workqueue`` ends every list (it always loads). ``omp`` comes first by default: a parallel
    launch on it costs about 2 us here, on ``workqueue`` 70-110 us (its threads sleep between
    launches), which made every parallel CPU kernel under about 2^22 elements slower than serial.
    GNU OpenMP is not fork-safe: ``forksafe`` (as in numba) keeps it out on Linux."""
    r = requested.strip().lower()
    linux = sys.platform.startswith("linux")
    order = {
        "tbb": ["tbb"], "omp": ["omp"], "workqueue": [],
        "safe": ["tbb"], "threadsafe": ["tbb", "omp"],
        "forksafe": ["tbb"] if linux else ["tbb", "omp"],
    }.get(r, ["omp"])
    return [*order, "workqueue"]


class _Runtime:
    """One MCJIT engine per process and the symbol table numba's code links against."""

    def __init__(self) -> None:
        import llvmlite.binding as ll

        self.ll = ll
        ll.initialize_native_target()
        ll.initialize_native_asmprinter()
        self.dynfunc = _extension("numba._dynfunc")
        helper = _extension("numba._helperlib")
        nrt = _extension("numba.core.runtime._nrt_python")
        self.symbols: dict[str, int] = {}
        for c_helpers in (helper.c_helpers, self.dynfunc.c_helpers):
            for name, addr in c_helpers.items():
                self.symbols["numba_" + name] = addr
        for name, addr in helper.c_helpers.items():  # libm functions, bound to CPython's C runtime as numba does
            self.symbols.setdefault(name, addr)
        for name, addr in nrt.c_helpers.items():
            self.symbols[name if name.startswith("_") else "NRT_" + name] = addr
        nrt.memsys_use_cpython_allocator()
        self.helper, self.nrt = helper, nrt
        self.pool: ModuleType | None = None
        self.tm = ll.Target.from_default_triple().create_target_machine(jit=True)
        self.lock = threading.Lock()
        self.module = ModuleType("vyre_native")  # what the callables name as their module
        # Engines and environments of everything loaded: machine code is never unloaded (as numba's)
        self.keep: list[Any] = []

    def _threads(self) -> None:
        """Start numba's thread pool of the layer numba itself would pick (:func:`pool_layers`;
        idempotent in C, shared with numba if it starts the same layer later) and name its entry
        points; symbols numba registered already are left alone."""
        if self.pool is not None:
            return
        pool = None
        for layer in pool_layers(dict(read_settings().numba_env).get("NUMBA_THREADING_LAYER", "default")):
            try:
                pool = _extension(f"numba.np.ufunc.{layer}pool" if layer != "workqueue" else
                                  "numba.np.ufunc.workqueue")
                break
            except (ImportError, OSError, NativeLoadError):  # libgomp / libtbb missing
                continue
        assert pool is not None  # workqueue ends every list and ships with numba
        n = read_settings().num_threads
        ctypes.CFUNCTYPE(None, ctypes.c_int)(pool.launch_threads)(n)
        ctypes.CFUNCTYPE(None, ctypes.c_int)(pool.set_num_threads)(n)
        for sym, attr in _POOL_SYMBOLS.items():
            self.symbols[sym] = getattr(pool, attr)
        self.pool = pool

    def resolve(self, names: Iterable[str]) -> None:
        """Make every name resolvable by the engine, or raise :class:`NativeLoadError`."""
        ll = self.ll
        for name in names:
            if name in _POOL_SYMBOLS:
                self._threads()
            if ll.address_of_symbol(name):
                continue  # numba (or the process: CPython's C API, libc) provides it
            addr = self.symbols.get(name)
            if addr is None:
                raise NativeLoadError(f"cached machine code needs the symbol {name!r}, which this process "
                                      "cannot provide. Fix: clear the kernel cache (vyre cache clear)")
            ll.add_symbol(name, addr)

    def load(self, entries: dict[str, NativeEntry]) -> dict[str, Callable[..., Any]]:
        """Link ``entries`` (one kernel's entry points) into an engine of their own: loading the same
        kernel again (after its file was rebuilt) never meets its own symbols."""
        ll = self.ll
        with self.lock:
            # first the engine: creating one makes the process's own symbols (CPython's C API, libc)
            # visible to LLVM's lookup, which resolve() relies on
            engine = ll.create_mcjit_compiler(ll.parse_assembly(""), self.tm)
            self.keep.append(engine)
            for e in entries.values():
                self.resolve(e.symbols)
            objects = [ll.ObjectFileRef.from_data(e.obj) for e in entries.values()]
            if not all(o._ptr for o in objects):  # LLVM could not parse it (handing it on would crash)
                raise NativeLoadError("cached machine code is not an object file LLVM can read. "
                                      "Fix: clear the kernel cache (vyre cache clear)")
            for o in objects:
                engine.add_object_file(o)
            engine.finalize_object()
            out: dict[str, Callable[..., Any]] = {}
            for name, e in entries.items():
                addr = engine.get_function_address(e.wrapper)
                env_addr = engine.get_global_value_address(e.env)
                if not addr or not env_addr:
                    missing = e.wrapper if not addr else e.env
                    raise NativeLoadError(f"cached machine code defines no {missing!r}. "
                                          "Fix: clear the kernel cache (vyre cache clear)")
                env = self.dynfunc.Environment({})
                self.keep.append(env)
                (ctypes.c_void_p * 1).from_address(env_addr)[0] = id(env)
                out[name] = self.dynfunc.make_function(self.module, name, f"vyre kernel {name}", addr, env, ())
            return out


_runtime: _Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> _Runtime:
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _Runtime()
        return _runtime


def load(entries: dict[str, NativeEntry]) -> dict[str, Callable[..., Any]]:
    """Link ``entries`` into this process and return a callable per entry (see module docs)."""
    return runtime().load(entries)


def target_parts() -> list[str]:
    """What, besides the program and the toolchain, decides the machine code: the host CPU numba
    compiles for, as numba determines it (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` override),
    and numba's other ``NUMBA_*`` settings."""
    import llvmlite
    import llvmlite.binding as ll

    s = read_settings()
    name = s.numba_cpu_name or ll.get_host_cpu_name()
    features = s.numba_cpu_features if s.numba_cpu_features is not None else ll.get_host_cpu_features().flatten()
    # numba's own settings (NUMBA_OPT, NUMBA_LOOP_VECTORIZE, ...) may change the code it produced
    numba_env = ";".join(f"{k}={v}" for k, v in s.numba_env if k != "NUMBA_NUM_THREADS")
    return [f"llvmlite={llvmlite.__version__}", f"triple={ll.get_process_triple()}", f"cpu={name}",
            f"features={features}", f"python={sys.implementation.cache_tag}", f"numba-env={numba_env}"]


def args_fit(arrays: Iterable[Any]) -> bool:
    """Can the compiled signature take these (checked) arrays? numba compiles aligned arrays; an
    unaligned view (``np.frombuffer`` at an odd offset) goes to numba's dispatcher instead."""
    return all(a.flags.aligned for a in arrays)
