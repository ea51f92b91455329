"""Compiling a CPU kernel: the binary cache first, numba only on a miss.

``compile`` computes the binary's key before anything else: the kernel key (program fingerprint,
options, codegen / numba / numpy versions) plus the buffer declaration order (the fingerprint ignores
it, the generated parameter order follows it), the host CPU and features numba compiles for, the
llvmlite and Python versions and :data:`BINARY_VERSION`. On a hit the machine code is linked
in (vyre/driver/native_cpu.py): no source is generated and numba is not imported. On a miss the
module is generated and compiled by numba as before (vyre/driver/cache.py); the object code numba
produced is then written as a binary entry (vyre/driver/binary_cache.py).

The parallel entry is compiled by numba when a dispatch first needs it, so an entry starts with the
serial kernel; :class:`ParallelOnDemand` compiles the parallel one at its first call (importing numba
then, if this process loaded the serial kernel as machine code) and adds it to the entry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from ..ir import Program
from ..settings import read_settings
from . import binary_cache, cache, native_cpu

#: Bump when what a CPU binary entry holds, or how it is loaded, changes.
BINARY_VERSION = 1

SERIAL, PARALLEL = "vyre_kernel", "vyre_kernel_parallel"


class CpuBuild(NamedTuple):  # not a dataclass: defined on a warm start's first dispatch (0.07 ms, a dataclass 0.5-1)
    """What ``compile`` needs for a CPU kernel, from the binary cache or from numba."""

    serial: Callable[..., Any]
    parallel: Callable[..., Any] | None
    flat: bool
    hit: bool
    source: str | None  # None when loaded as machine code (generated on demand)
    module: Callable[[], ModuleType]  # numba's module for this kernel (generated and compiled on demand)


def binary_key(program: Program, parts: list[str | bytes]) -> str:
    order = "order=" + ",".join(b.name for b in program.buffers)
    return cache.kernel_key(*parts, order, *native_cpu.target_parts(), f"cpu-binary={BINARY_VERSION}")


def _meta_entry(e: native_cpu.NativeEntry) -> dict[str, Any]:
    return {"wrapper": e.wrapper, "env": e.env, "symbols": list(e.symbols)}


def _entries_of(rec: binary_cache.Record) -> dict[str, native_cpu.NativeEntry]:
    out = {}
    for name, m in rec.meta["entries"].items():
        out[name] = native_cpu.NativeEntry(str(m["wrapper"]), str(m["env"]),
                                           tuple(str(s) for s in m["symbols"]), rec.blobs[name])
    return out


class _Binary:
    """The binary entry of one kernel, as this process knows it, and its in-process callables."""

    def __init__(self, key: str, meta: dict[str, Any], blobs: dict[str, bytes]) -> None:
        self.key = key
        self.meta = meta
        self.blobs = blobs
        self.lock = threading.Lock()

    def add(self, name: str, entry: native_cpu.NativeEntry) -> None:
        """Record a newly compiled entry point and rewrite the file."""
        with self.lock:
            self.meta = {**self.meta, "entries": {**self.meta.get("entries", {}), name: _meta_entry(entry)}}
            self.blobs = {**self.blobs, name: entry.obj}
            binary_cache.write("cpu", binary_cache.Record(self.key, self.meta, self.blobs))


#: what reading or linking a binary entry raises when the entry cannot be used (damaged meta, an
#: object LLVM rejects, a symbol this process cannot provide)
_UNUSABLE = (KeyError, TypeError, ValueError, AttributeError, RuntimeError, native_cpu.NativeLoadError)

# Loaded binaries of this process, by binary key: linking one object twice would define its symbols twice.
_loaded: dict[str, tuple[dict[str, Callable[..., Any]], binary_cache.Record]] = {}
_lock = threading.Lock()


class ParallelOnDemand:
    """The parallel entry point until it exists: its first call compiles it through numba, runs it,
    and saves its machine code to the kernel's binary entry (if any). With a binary entry, one
    process at a time compiles it (the binary's compile lock); a kernel loaded as machine code
    (``link_saved``) that waited links the parallel entry the holder saved instead of compiling it
    again. A kernel this process compiled never does: the driver hands its entries any array
    numba's dispatcher takes (unaligned ones too), which machine code must not be given
    (``native_cpu.args_fit`` is asked only for kernels loaded as machine code)."""

    def __init__(self, module: Callable[[], ModuleType], binary: _Binary | None, link_saved: bool) -> None:
        self.module = module
        self.binary = binary
        self.link_saved = link_saved
        self.fn: Any = None
        self.lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        if self.fn is not None:
            return self.fn(*args)
        with self.lock:
            if self.fn is not None:  # another thread made it while this one waited
                return self.fn(*args)
            if self.binary is None:
                return self._compile(args)
            with binary_cache.compiling("cpu", self.binary.key):
                fn = _saved_parallel(self.binary.key) if self.link_saved else None
                if fn is None:
                    return self._compile(args)
            self.fn = fn
            return fn(*args)

    def _compile(self, args: tuple[Any, ...]) -> Any:
        fn = getattr(self.module(), PARALLEL)
        out = fn(*args)
        if self.binary is not None:
            entry = native_cpu.extract(fn)
            if entry is not None:
                self.binary.add(PARALLEL, entry)
        self.fn = fn
        return out


def _saved_parallel(bkey: str) -> Callable[..., Any] | None:
    """The parallel entry another process saved to binary ``bkey`` since this one loaded it, linked
    on its own; None when there is none or it cannot be used (then this process compiles it)."""
    rec = binary_cache.read("cpu", bkey)
    if rec is None or PARALLEL not in rec.blobs:
        return None
    try:
        entry = _entries_of(rec)[PARALLEL]
        return native_cpu.load({PARALLEL: entry})[PARALLEL]
    except _UNUSABLE:
        return None


def emit(program: Program, *, parallel: bool, disk_cache: bool) -> str:
    """The kernel's source. Whether it may use LLVM's loop vectoriser (vyre/driver/cpu_selfcheck.py)
    is settled per toolchain and CPU, which the binary key covers, so a binary hit need not ask."""
    from ..codegen.cpu import emit_cpu
    from .cpu_selfcheck import vectorize_ok

    return emit_cpu(program, parallel=parallel, cache=disk_cache, vectorize=vectorize_ok())


class _Generated:
    """A kernel's source and numba's module for it, each made on first use (a binary hit needs
    neither until the parallel entry is first called)."""

    def __init__(self, program: Program, key: str, parallel: bool, disk_cache: bool) -> None:
        self.program, self.key, self.parallel, self.disk_cache = program, key, parallel, disk_cache
        self._source: str | None = None
        self._module: ModuleType | None = None
        self.hit = False  # numba's own cache had the module

    def source(self) -> str:
        if self._source is None:
            self._source = emit(self.program, parallel=self.parallel, disk_cache=self.disk_cache)
        return self._source

    def module(self, fresh: bool = False) -> ModuleType:
        if self._module is None:
            self._module, self.hit = cache.load_module("cpu", self.key, self.source(), use_disk=self.disk_cache,
                                                       fresh=fresh)
        return self._module


def build(program: Program, key: str, parts: list[str | bytes], *, parallel: bool,
          disk_cache: bool) -> CpuBuild:
    gen = _Generated(program, key, parallel, disk_cache)
    bkey = binary_key(program, parts) if disk_cache and read_settings().binary_cache else None
    if bkey is None:
        return _compiled(gen, None)
    found = _linked(bkey, gen.module)
    if found is not None:
        return found
    # A miss: one process at a time compiles this kernel; one that waited finds its binary.
    with binary_cache.compiling("cpu", bkey):
        found = _linked(bkey, gen.module)
        return found if found is not None else _compiled(gen, bkey)


def _linked(bkey: str, module: Callable[[], ModuleType]) -> CpuBuild | None:
    """The kernel from its binary entry (linked once per process), or None on a miss."""
    with _lock:
        loaded = _loaded.get(bkey)
        if loaded is None:
            loaded = _load(bkey)
            if loaded is not None:
                _loaded[bkey] = loaded
    if loaded is None:
        return None
    fns, rec = loaded
    par: Callable[..., Any] | None = fns.get(PARALLEL)
    if par is None and rec.meta["parallel"]:
        par = ParallelOnDemand(module, _Binary(bkey, dict(rec.meta), dict(rec.blobs)), link_saved=True)
    return CpuBuild(fns[SERIAL], par, bool(rec.meta["flat"]), True, None, module)


def _compiled(gen: _Generated, bkey: str | None) -> CpuBuild:
    """numba compiles the kernel (without its own cache where the binary cache keeps it: numba's
    hit keeps no object code to save), and its serial entry's machine code becomes the binary."""
    mod = gen.module(fresh=bkey is not None)
    flat, has_parallel = bool(mod.VYRE_FLAT), bool(getattr(mod, "VYRE_PARALLEL", False))
    binary = None
    if bkey is not None:
        entry = native_cpu.extract(getattr(mod, SERIAL))
        if entry is not None:
            binary = _Binary(bkey, {"flat": flat, "parallel": has_parallel, "entries": {}}, {})
            binary.add(SERIAL, entry)
    par = ParallelOnDemand(gen.module, binary, link_saved=False) if has_parallel else None
    return CpuBuild(getattr(mod, SERIAL), par, flat, gen.hit, gen.source(), gen.module)


def clear_memory() -> None:
    """Forget the binaries loaded by this process (their machine code stays linked)."""
    with _lock:
        _loaded.clear()


def _load(bkey: str) -> tuple[dict[str, Callable[..., Any]], binary_cache.Record] | None:
    """Link the binary entry ``bkey``; None when there is none or it cannot be used (then it is
    deleted, and the caller compiles and writes a fresh one)."""
    rec = binary_cache.read("cpu", bkey)
    if rec is None:
        return None
    try:
        if not (isinstance(rec.meta.get("flat"), bool) and isinstance(rec.meta.get("parallel"), bool)):
            raise KeyError("flat/parallel")
        entries = _entries_of(rec)
        if SERIAL not in entries:
            raise KeyError(SERIAL)
        fns = native_cpu.load(entries)
    except _UNUSABLE:
        binary_cache.discard("cpu", bkey)
        return None
    return fns, rec
