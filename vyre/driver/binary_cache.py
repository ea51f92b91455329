"""Compiled kernels on disk: one file per kernel binary, checked whole before use, managed by size.

A binary entry is ``<cache_root>/kernels/<backend>/b_<key>.vbin``::

    b"VYREBIN\\x01" | u32 header length | header (JSON) | blobs | blake3 of everything before (32 bytes)

The header names the key (which must be the file's), free-form metadata and the blobs (name and
size, in file order). A file that is short, long, of another key, or whose digest does not match
is deleted and reported as a miss: the caller compiles again and writes a fresh entry. Writers
write a temporary file in the same directory and ``os.replace`` it, so a reader sees a whole old
file, a whole new one or none, never a torn one, whatever runs concurrently.

Everything under ``<cache_root>/kernels`` (binaries, generated modules and numba's files next to
them) counts towards :attr:`vyre.settings.Settings.cache_max_bytes`; after a write, the least
recently used entries (modification time; a hit touches its file) are removed until the total
fits. :func:`info` and :func:`clear` back ``vyre cache info`` / ``vyre cache clear``.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import blake3

from ..settings import read_settings

__all__ = ["CacheInfo", "Record", "clear", "compiling", "evict", "info", "read", "write"]

MAGIC = b"VYREBIN\x01"
_DIGEST = 32
_LEN = struct.Struct("<I")
MAX_HEADER_BYTES = 1 << 20
#: how long a process waits for another one compiling the same kernel before compiling it too
COMPILE_WAIT_S = 600.0
stats = {"hits": 0, "misses": 0, "rebuilt": 0, "writes": 0, "evicted": 0}


# The records here are NamedTuples, not dataclasses: a process whose kernels all come from this
# cache imports this module on its first dispatch, and a dataclass costs about 0.6 ms to define
# (a NamedTuple 0.07 ms).
class Record(NamedTuple):
    """A binary entry: its metadata and named blobs."""

    key: str
    meta: Mapping[str, Any]
    blobs: Mapping[str, bytes]


def kernels_root() -> Path:
    return read_settings().cache_root() / "kernels"


def path_for(backend: str, key: str) -> Path:
    return kernels_root() / backend / f"b_{key}.vbin"


def encode(rec: Record) -> bytes:
    header = json.dumps({"key": rec.key, "meta": rec.meta,
                         "blobs": [[name, len(b)] for name, b in rec.blobs.items()]},
                        sort_keys=True).encode()
    body = MAGIC + _LEN.pack(len(header)) + header + b"".join(rec.blobs.values())
    return body + blake3.blake3(body).digest()


def decode(data: bytes, key: str) -> Record | None:
    """The record in ``data`` if it is whole, intact and of ``key``; else None."""
    if len(data) < len(MAGIC) + _LEN.size + _DIGEST or not data.startswith(MAGIC):
        return None
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if blake3.blake3(body).digest() != digest:
        return None
    (n,) = _LEN.unpack_from(body, len(MAGIC))
    start = len(MAGIC) + _LEN.size
    if n > MAX_HEADER_BYTES or start + n > len(body):
        return None
    try:
        header = json.loads(body[start:start + n])
        if header["key"] != key or not isinstance(header["meta"], dict):
            return None
        pos = start + n
        blobs: dict[str, bytes] = {}
        for name, size in header["blobs"]:
            if not isinstance(name, str) or not isinstance(size, int) or size < 0 or pos + size > len(body):
                return None
            blobs[name] = body[pos:pos + size]
            pos += size
    except (ValueError, KeyError, TypeError):
        return None
    if pos != len(body):
        return None
    return Record(key, header["meta"], blobs)


def read(backend: str, key: str) -> Record | None:
    """The entry for ``key``, or None (missing; or damaged, which is deleted). A hit marks the entry
    as recently used."""
    path = path_for(backend, key)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        stats["misses"] += 1
        return None
    except OSError:
        data = b""
    rec = decode(data, key)
    if rec is None:
        stats["rebuilt"] += 1
        stats["misses"] += 1
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    stats["hits"] += 1
    with contextlib.suppress(OSError):
        os.utime(path)  # least recently used eviction goes by modification time
    return rec


def discard(backend: str, key: str) -> None:
    """Delete an entry found unusable after reading (it will be rebuilt)."""
    stats["rebuilt"] += 1
    with contextlib.suppress(OSError):
        path_for(backend, key).unlink()


def write(backend: str, rec: Record) -> Path | None:
    """Write ``rec`` atomically; None when the cache directory is not writable (the kernel still
    runs, it is just not kept). Evicts least recently used entries past the size limit."""
    path = path_for(backend, rec.key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".vbin")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(encode(rec))
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the entry from other users of the cache
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return None
    stats["writes"] += 1
    evict()
    return path


@contextlib.contextmanager
def compiling(backend: str, key: str, wait: float | None = None) -> Iterator[None]:
    """Hold the right to compile the kernel of binary ``key``: one process at a time compiles a
    kernel, so processes that start together (pytest workers, Dask workers, a pool) compile each
    kernel once, the others waiting and then reading the entry it wrote. The caller looks the
    entry up again once inside (:func:`read`).

    The lock is ``.b_<key>.lock`` next to the entry (``filelock``: flock on POSIX, released by
    the system if its holder dies). Nothing depends on it for correctness (writes are atomic
    replacements): where it cannot be taken (a read-only cache, a wait past ``wait`` seconds,
    default :data:`COMPILE_WAIT_S`) the caller compiles anyway. The holder deletes the file
    before releasing it, so no lock file outlives its compile; a process that opened the old
    file meanwhile still waits for the release, then finds the entry."""
    import filelock  # deferred: only a compile needs it

    path = path_for(backend, key)
    lock_path = path.with_name(f".{path.stem}.lock")
    lock = filelock.FileLock(lock_path, timeout=COMPILE_WAIT_S if wait is None else wait)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except (filelock.Timeout, OSError):
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock_path.unlink()
        lock.release()


class _Entry(NamedTuple):
    """Files that live and die together: a binary, or a generated module with numba's files for it."""

    files: tuple[Path, ...]
    size: int
    used: float


def _entries(root: Path) -> Iterator[_Entry]:
    if not root.is_dir():
        return
    for backend_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        pycache = backend_dir / "__pycache__"
        compiled: dict[str, list[Path]] = {}
        if pycache.is_dir():
            for f in pycache.iterdir():
                compiled.setdefault(f.name.split(".", 1)[0], []).append(f)
        for f in backend_dir.iterdir():
            if not f.is_file() or f.name.startswith("."):  # temporary files, the eviction lock
                continue
            group = [f, *compiled.pop(f.stem, [])] if f.suffix == ".py" else [f]
            yield _group(group)
        for orphans in compiled.values():  # numba's files whose module is gone
            yield _group(orphans)


def _group(files: list[Path]) -> _Entry:
    size, used = 0, 0.0
    for f in files:
        with contextlib.suppress(OSError):
            st = f.stat()
            size += st.st_size
            used = max(used, st.st_mtime)
    return _Entry(tuple(files), size, used)


def evict(limit: int | None = None) -> int:
    """Remove least recently used entries until the kernel cache fits ``limit`` bytes (default: the
    setting; 0 means no limit). Returns the number of entries removed."""
    limit = read_settings().cache_max_bytes if limit is None else limit
    if limit <= 0:
        return 0
    import filelock  # deferred: only writers evict

    root = kernels_root()
    try:
        # one evicting process at a time; another one already evicting makes this one's pass moot
        with filelock.FileLock(root / ".evict.lock", timeout=0):
            return _evict(root, limit)
    except (filelock.Timeout, OSError):
        return 0


def _evict(root: Path, limit: int) -> int:
    entries = list(_entries(root))
    total = sum(e.size for e in entries)
    removed = 0
    for e in sorted(entries, key=lambda e: e.used):
        if total <= limit:
            break
        for f in e.files:
            with contextlib.suppress(OSError):
                f.unlink()
        total -= e.size
        removed += 1
    stats["evicted"] += removed
    return removed


class CacheInfo(NamedTuple):
    """What ``vyre cache info`` reports."""

    location: Path
    entries: int
    binaries: int
    bytes: int
    limit: int

    def lines(self) -> list[str]:
        limit = f"{self.limit / 2**20:.0f} MiB" if self.limit else "none"
        return [f"location: {self.location}", f"entries: {self.entries} ({self.binaries} binaries)",
                f"size: {self.bytes / 2**20:.2f} MiB", f"limit: {limit} (VYRE_CACHE_MAX_MB)"]


def info() -> CacheInfo:
    root = kernels_root()
    entries = list(_entries(root))
    binaries = sum(1 for e in entries if e.files[0].suffix == ".vbin")
    return CacheInfo(root, len(entries), binaries, sum(e.size for e in entries), read_settings().cache_max_bytes)


def clear() -> int:
    """Remove every kernel cache entry; returns how many."""
    n = 0
    for e in list(_entries(kernels_root())):
        for f in e.files:
            with contextlib.suppress(OSError):
                f.unlink()
        n += 1
    return n
