"""The kernel cache: generated modules in memory and on disk.

numba cannot cache functions built with ``exec``, so each generated module is written to a file named
by its key under ``<cache_root>/kernels/<target>/`` and imported from there; its functions carry
``cache=True``, so numba keeps the compiled machine code next to it (``__pycache__``) and a second
process starts without compiling. The key hashes everything that changes the binary (program
fingerprint, target, options, compute capability, codegen / numba / numba-cuda / vyre versions).
Each file starts with its key and a blake3 digest of the rest; a file whose digest does not match
(corrupt, truncated, edited) is rewritten, and numba's own index rejects stale machine code.
"""

from __future__ import annotations

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


def load_module(target: str, key: str, source: str, use_disk: bool = True) -> tuple[ModuleType, bool]:
    """Import the module for ``key`` (writing ``source`` first if the disk has no intact copy).

    Returns the module and whether it came from a cache (memory or disk)."""
    with _lock:
        mod = _modules.get(key)
        if mod is not None:
            stats["memory_hits"] += 1
            return mod, True
        hit = False
        if use_disk:
            d = kernel_dir(target)
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"k_{key}.py"
            text = _header(key, source) + source
            try:
                existing = path.read_text()
            except (OSError, UnicodeDecodeError):
                existing = None
            if existing == text:
                hit = True
                stats["disk_hits"] += 1
            else:
                if existing is not None and not _intact(existing, key):
                    stats["rebuilt"] += 1
                _atomic_write(path, text)
                stats["writes"] += 1
            spec = importlib.util.spec_from_file_location(f"vyre_kernels.{target}.k_{key}", path)
        else:
            d = Path(tempfile.mkdtemp(prefix="vyre-k-"))
            path = d / f"k_{key}.py"
            path.write_text(source)
            spec = importlib.util.spec_from_file_location(f"vyre_kernels.{target}.k_{key}", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        _modules[key] = mod
        return mod, hit


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
    with _lock:
        _modules.clear()
