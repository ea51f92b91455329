"""The kernel cache: generated modules in memory and on disk.

numba caches only functions whose code names a real source file, so each generated module is written
to a file ``k_<key>_<source digest>.py`` under ``<cache_root>/kernels/<target>/`` and run from the
text that was checked against it (compiled with that file's name: a second read could see another
writer's half-written file); its functions carry ``cache=True``, so numba keeps the compiled machine
code next to it (``__pycache__``) and a second process starts without compiling. The key hashes
everything that changes the binary (program fingerprint, target, options, compute capability,
codegen / numba / numba-cuda versions); the source digest in the name keeps two different sources
apart even when their keys agree (the fingerprint ignores buffer declaration order, the generated
parameter order does not).
Each file starts with its key and a blake3 digest of the rest; a file that is not exactly the expected
text (corrupt, truncated, edited) is rewritten, and numba's own index rejects stale machine code.
Modules kept off the disk (``use_disk=False``: the simulator, ``compile(..., disk_cache=False)``) go to
one temporary directory per process, removed when the process exits.
Unreadable numba cache files (``__pycache__``: garbage index or data pickles, maybe half-written by
another process) make the import fail; its compiled files are then deleted, the module written
again and the import retried, compiling afresh (three attempts; then a ``DispatchError`` with the
cause). Errors of the source itself (``SyntaxError``, numba's compile errors) are raised as they are.
A file where a directory of the cache belongs is replaced by the directory.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import blake3

from ..errors import DispatchError
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
            d = _ensure_dir(kernel_dir(target))
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
        name = f"vyre_kernels.{target}.k_{ident}"
        code_text = text if use_disk else source
        attempt = 0
        while True:
            try:
                mod = _exec(name, path, code_text)
                break
            except Exception as e:
                if not use_disk or _compile_error(e):
                    raise  # the source itself is wrong: no cache to blame
                if attempt == _ATTEMPTS - 1:
                    raise DispatchError(
                        f"the kernel module {path} could not be loaded ({type(e).__name__}: {e}) after "
                        f"deleting its compiled files {_ATTEMPTS - 1} times. Fix: make sure nothing else "
                        "writes that directory; if this repeats with a fresh VYRE_CACHE_DIR, it is a vyre "
                        "bug: please report it") from e
                # numba trusted a damaged file of its cache (index or data, maybe being written by
                # another process): drop its files, write ours again, compile afresh
                stats["rebuilt"] += 1
                hit = False
                attempt += 1
                _purge_compiled(path)
                _atomic_write(path, text)
        _modules[ident] = mod
        return mod, hit


_ATTEMPTS = 3


def _compile_error(e: Exception) -> bool:
    """Is ``e`` an error of the source (Python's or numba's compiler), not of a cache file?"""
    if isinstance(e, SyntaxError):
        return True
    errors = sys.modules.get("numba.core.errors")
    return errors is not None and isinstance(e, errors.NumbaError)


def _ensure_dir(d: Path) -> Path:
    """``d`` as a directory. A file where it or a directory above it (inside the cache root)
    belongs is damage to the cache: it is removed."""
    root = cache_root()
    try:
        d.mkdir(parents=True, exist_ok=True)
        return d
    except (FileExistsError, NotADirectoryError):
        pass
    except OSError as e:
        raise DispatchError(f"cannot create the kernel cache directory {d}: {e}. Fix: make {root} writable, "
                            "or set VYRE_CACHE_DIR to a writable directory") from e
    try:
        rel = d.relative_to(root).parts
        for i in range(1, len(rel) + 1):
            q = root.joinpath(*rel[:i])
            if q.exists() and not q.is_dir():
                q.unlink()
        d.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as e:
        raise DispatchError(f"cannot create the kernel cache directory {d}: a file is in the way ({e}). "
                            f"Fix: remove it, or set VYRE_CACHE_DIR to another directory") from e
    return d


_scratch: tempfile.TemporaryDirectory[str] | None = None


def _scratch_dir() -> Path:
    """One temporary directory per process for modules kept off the disk cache (removed at exit)."""
    global _scratch
    if _scratch is None:
        _scratch = tempfile.TemporaryDirectory(prefix="vyre-k-")
    return Path(_scratch.name)


def _exec(name: str, path: Path, text: str) -> ModuleType:
    """The module ``name`` run from ``text``, the file's contents as checked: not from a second read
    of the file, which another process may be rewriting meanwhile (or anything else garbling).
    Its code names ``path`` as its file, where numba keeps the compiled machine code."""
    mod = ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod
    try:
        exec(compile(text, str(path), "exec"), mod.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
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
