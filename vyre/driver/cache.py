"""The kernel cache: generated modules in memory and on disk.

numba cannot cache functions built with ``exec``, so each generated module is written to a file
``k_<key>_<source digest>.py`` under ``<cache_root>/kernels/<target>/`` and imported from there; its
functions carry ``cache=True``, so numba keeps the compiled machine code next to it (``__pycache__``)
and a second process starts without compiling. The key hashes everything that changes the binary
(program fingerprint, target, options, compute capability, codegen / numba / numba-cuda versions);
the source digest in the name keeps two different sources apart even when their keys agree (the
fingerprint ignores buffer declaration order, the generated parameter order does not).
Each file starts with its key and a blake3 digest of the rest; a file that is not exactly the expected
text (corrupt, truncated, edited) is rewritten, and numba's own index rejects stale machine code.
Modules kept off the disk (``use_disk=False``: the simulator, ``compile(..., disk_cache=False)``) go to
one temporary directory per process, removed when the process exits.
Unreadable numba cache files (``__pycache__``: garbage index or data pickles, a bad ``.pyc``) make
the import fail; they are then deleted and the module imported once more, compiling afresh.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import blake3

from ..settings import cache_root

_lock = threading.Lock()
_modules: dict[str, ModuleType] = {}
stats = {"memory_hits": 0, "disk_hits": 0, "writes": 0, "rebuilt": 0}


def kernel_key(*parts: str | bytes) -> str:
    h = blake3.blake3(b"vyre-kernel-v1\0")
    for p in parts:
        b = p if isinstance(p, bytes) else p.encode()
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()[:40]


def kernel_dir(target: str) -> Path:
    return cache_root() / "kernels" / target


def _header(key: str, body: str) -> str:
    digest = blake3.blake3(body.encode()).hexdigest()
    return f"# vyre-key: {key}\n# vyre-digest: {digest}\n"


def _intact(text: str, key: str) -> bool:
    lines = text.split("\n", 2)
    if len(lines) < 3:
        return False
    body = lines[2]
    return text.startswith(_header(key, body))


def load_module(target: str, key: str, source: str, use_disk: bool = True,
                fresh: bool = False) -> tuple[ModuleType, bool]:
    """Import the module for ``key`` (writing ``source`` first if the disk has no intact copy).
    ``fresh`` drops numba's cached machine code for it first, so numba compiles here and keeps the
    object code (the binary cache saves it; numba's own cache hit hands it to LLVM and keeps none).

    Returns the module and whether it came from a cache (memory or disk)."""
    ident = f"{key}_{blake3.blake3(source.encode()).hexdigest()[:16]}"
    with _lock:
        mod = _modules.get(ident)
        if mod is not None:
            stats["memory_hits"] += 1
            return mod, True
        hit = False
        if use_disk:
            d = kernel_dir(target)
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"k_{ident}.py"
            text = _header(key, source) + source
            try:
                existing: str | None = path.read_text()
            except FileNotFoundError:
                existing = None
            except (OSError, UnicodeDecodeError):
                existing = ""  # unreadable: as corrupt as a wrong digest
            if fresh:
                _purge_compiled(path)
            if existing == text:
                hit = True
                stats["disk_hits"] += 1
            else:
                if existing is not None and not _intact(existing, key):
                    stats["rebuilt"] += 1
                _atomic_write(path, text)
                stats["writes"] += 1
        else:
            path = _scratch_dir() / f"k_{ident}.py"
            path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"vyre_kernels.{target}.k_{ident}", path)
        assert spec is not None and spec.loader is not None
        try:
            mod = _exec(spec)
        except Exception:
            # numba (or Python) trusted a garbage file of its own cache: drop those and compile afresh
            if not (use_disk and _purge_compiled(path)):
                raise
            stats["rebuilt"] += 1
            hit = False
            mod = _exec(spec)
        _modules[ident] = mod
        return mod, hit


_scratch: tempfile.TemporaryDirectory[str] | None = None


def _scratch_dir() -> Path:
    """One temporary directory per process for modules kept off the disk cache (removed at exit)."""
    global _scratch
    if _scratch is None:
        _scratch = tempfile.TemporaryDirectory(prefix="vyre-k-")
    return Path(_scratch.name)


def _exec(spec: importlib.machinery.ModuleSpec) -> ModuleType:
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
    return mod


def _purge_compiled(path: Path) -> bool:
    """Delete the compiled files numba and Python keep for ``path``; True if there were any."""
    found = False
    for f in (path.parent / "__pycache__").glob(f"{path.stem}.*"):
        f.unlink(missing_ok=True)
        found = True
    return found


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def clear_memory() -> None:
    """Forget the modules and CPU binaries this process loaded (the next compile reads the disk)."""
    from . import cpu_compile

    with _lock:
        _modules.clear()
    cpu_compile.clear_memory()
