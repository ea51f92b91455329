"""Tuner decision keys and the per-adapter TOML cache of decisions.

The file format is the seed's: one line per decision, ``"<key>" = [x, y, z]``. Unlike the seed,

* a file over :data:`MAX_TUNER_CACHE_BYTES` is refused with a :class:`TunerError` without being read;
* an entry that is not three positive integers with at most :data:`MAX_WORKGROUP_INVOCATIONS`
  invocations is skipped with a :class:`TunerCacheWarning` (the seed turned it into zeros);
* :meth:`TunerCache.save` holds an exclusive lock on ``<file>.lock`` (``filelock``), re-reads the
  file, merges (this process's decisions win on a conflict) and replaces the file atomically, so
  concurrent processes lose no decisions and readers never see a torn file.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
import reprlib
import tempfile
import tomllib
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import blake3

from ..errors import TunerError

__all__ = [
    "MAX_LAUNCH_INVOCATIONS", "MAX_TUNER_CACHE_BYTES", "MAX_WORKGROUP_INVOCATIONS", "StaticProgramShape", "TunerCache",
    "TunerCacheWarning", "TunerProgramKey", "WorkgroupSize", "check_workgroup_size",
]

MAX_TUNER_CACHE_BYTES = 4 * 1024 * 1024
MAX_WORKGROUP_INVOCATIONS = 1024
#: Limit for caches of flat-kernel launch decisions ``[wg, ipt, 1]`` (``vyre.tuning.autotune``):
#: ``wg <= 1024`` threads (or a 1024-invocation CPU unit) times ``ipt <= 4096``.
MAX_LAUNCH_INVOCATIONS = 1024 * 4096
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1

WorkgroupSize = tuple[int, int, int]


class TunerCacheWarning(UserWarning):
    """A tuner cache entry was skipped or an unreadable cache file was replaced."""


class HasFingerprint(Protocol):
    """Anything with the program fingerprint (``vyre.ir.Program`` is one)."""

    def fingerprint(self) -> bytes: ...


def _problem_with_size(value: object, max_invocations: int = MAX_WORKGROUP_INVOCATIONS) -> str | None:
    """Why ``value`` is not a usable workgroup size (at most ``max_invocations``), or None."""
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        return f"expected 3 integers, found {reprlib.repr(value)}"  # reprlib: bounded depth and length
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return f"expected integers, found {reprlib.repr(value)}"
    if not all(1 <= v <= _U32_MAX for v in value):
        return f"expected positive u32 axes, found {list(value)}"
    invocations = math.prod(value)
    if invocations > max_invocations:
        return f"{list(value)} has {invocations} invocations, more than {max_invocations}"
    return None


def check_workgroup_size(value: object, max_invocations: int = MAX_WORKGROUP_INVOCATIONS) -> WorkgroupSize:
    """Return ``value`` as a workgroup-size triple or raise :class:`TunerError`."""
    problem = _problem_with_size(value, max_invocations)
    if problem is not None:
        raise TunerError(
            f"tuner decision is not a workgroup size: {problem}. "
            f"Fix: record three positive integers whose product is at most {max_invocations}."
        )
    assert isinstance(value, (list, tuple))
    return (value[0], value[1], value[2])


@dataclass(frozen=True, slots=True)
class StaticProgramShape:
    """Static launch facts that disambiguate decisions for one program (the seed's struct)."""

    workgroup_size: WorkgroupSize
    workgroup_count: WorkgroupSize | None = None
    output_bytes: int = 0

    @staticmethod
    def for_program(
        program: object, workgroup_count: WorkgroupSize | None = None, output_bytes: int = 0
    ) -> StaticProgramShape:
        """The seed's ``StaticProgramShape::new``: the program's declared workgroup size."""
        wg = getattr(program, "workgroup_size", None)
        if not isinstance(wg, tuple) or len(wg) != 3:
            raise TunerError(
                f"StaticProgramShape.for_program expected a program with a 3-axis workgroup_size, "
                f"found {type(program).__name__} with {wg!r}. Fix: pass a vyre.ir.Program."
            )
        return StaticProgramShape((wg[0], wg[1], wg[2]), workgroup_count, output_bytes)


def _u32_axes(axes: tuple[int, ...], what: str) -> bytes:
    if len(axes) != 3 or not all(isinstance(a, int) and 0 <= a <= _U32_MAX for a in axes):
        raise TunerError(
            f"tuner key {what} must be three u32 values, found {axes!r}. Fix: pass a (x, y, z) tuple "
            "of integers in [0, 2**32)."
        )
    return struct.pack("<3I", *axes)


@dataclass(frozen=True, slots=True, order=True)
class TunerProgramKey:
    """Stable key of one tuning decision: ``v1-`` and 64 hex digits of blake3."""

    value: str

    @staticmethod
    def from_program(program: HasFingerprint, shape: StaticProgramShape) -> TunerProgramKey:
        """blake3 over the seed's domain-separated fields, byte for byte."""
        fp = program.fingerprint()
        if not isinstance(fp, (bytes, bytearray)) or len(fp) != 32:
            raise TunerError(
                f"program fingerprint must be 32 bytes, found {type(fp).__name__} of length "
                f"{len(fp) if hasattr(fp, '__len__') else '?'}. Fix: fingerprint() must return the "
                "blake3 digest of the program's wire bytes."
            )
        if not isinstance(shape.output_bytes, int) or not 0 <= shape.output_bytes <= _U64_MAX:
            raise TunerError(
                f"tuner key output_bytes must be a u64, found {shape.output_bytes!r}. "
                "Fix: pass a non-negative byte count."
            )
        h = blake3.blake3()
        h.update(b"vyre-driver-workgroup-tuner-v1\0program\0")
        h.update(bytes(fp))
        h.update(b"\0workgroup-size\0")
        h.update(_u32_axes(shape.workgroup_size, "workgroup_size"))
        h.update(b"\0workgroup-count\0")
        if shape.workgroup_count is None:
            h.update(b"\x00")
        else:
            h.update(b"\x01")
            h.update(_u32_axes(shape.workgroup_count, "workgroup_count"))
        h.update(b"\0output-bytes\0")
        h.update(struct.pack("<Q", shape.output_bytes))
        return TunerProgramKey("v1-" + h.hexdigest())

    def as_str(self) -> str:
        return self.value

    def __str__(self) -> str:
        return self.value


KeyLike = str | TunerProgramKey


def _key_str(key: KeyLike) -> str:
    if isinstance(key, TunerProgramKey):
        return key.value
    if isinstance(key, str):
        return key
    raise TunerError(
        f"tuner cache key must be a str or TunerProgramKey, found {type(key).__name__}. "
        "Fix: build keys with TunerProgramKey.from_program."
    )


def _toml_basic_string(text: str) -> str:
    """``text`` as a TOML basic string (quotes, backslashes and control characters escaped)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _read_bounded(path: Path) -> str | None:
    """The file's text, or None when it does not exist; refuses files over the size limit."""
    try:
        f = open(path, "rb")  # closed below: size and read come from the same open file
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TunerError(f"could not open tuner cache {path}: {e}. Fix: check its permissions.") from e
    with f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(MAX_TUNER_CACHE_BYTES + 1) if size <= MAX_TUNER_CACHE_BYTES else b""
        if size > MAX_TUNER_CACHE_BYTES or len(data) > MAX_TUNER_CACHE_BYTES:
            raise TunerError(
                f"tuner cache {path} is {max(size, len(data))} bytes, over the "
                f"{MAX_TUNER_CACHE_BYTES}-byte limit; it was not read. Fix: delete the file (the "
                "tuner re-measures) or point VYRE_CACHE_DIR elsewhere."
            )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TunerError(
            f"tuner cache {path} is not UTF-8 ({e}). Fix: delete the file; the tuner re-measures."
        ) from e


class TunerCache:
    """Per-adapter decisions: key string -> workgroup size ``(x, y, z)``.

    ``max_invocations`` bounds ``x * y * z`` of every entry (default: the seed's 1024; caches of
    launch decisions use :data:`MAX_LAUNCH_INVOCATIONS`)."""

    __slots__ = ("entries", "max_invocations")

    def __init__(self, entries: Mapping[str, WorkgroupSize] | None = None, *,
                 max_invocations: int = MAX_WORKGROUP_INVOCATIONS) -> None:
        self.entries: dict[str, WorkgroupSize] = {}
        self.max_invocations = max_invocations
        for key, size in (entries or {}).items():
            self.set(key, size)

    def get(self, key: KeyLike) -> WorkgroupSize | None:
        return self.entries.get(_key_str(key))

    def set(self, key: KeyLike, size: WorkgroupSize) -> None:
        """Record a decision; raises :class:`TunerError` for a size the loader would reject."""
        self.entries[_key_str(key)] = check_workgroup_size(size, self.max_invocations)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, (str, TunerProgramKey)) and _key_str(key) in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.entries))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TunerCache) and self.entries == other.entries

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"TunerCache({len(self.entries)} entries)"

    # -- text form ---------------------------------------------------------------------------

    def to_toml(self) -> str:
        """The file body: one ``"key" = [x, y, z]`` line per entry, sorted by key."""
        return "".join(
            f"{_toml_basic_string(k)} = [{s[0]}, {s[1]}, {s[2]}]\n" for k, s in sorted(self.entries.items())
        )

    @staticmethod
    def from_toml(text: str, source: str = "<string>", *,
                  max_invocations: int = MAX_WORKGROUP_INVOCATIONS) -> TunerCache:
        """Parse a cache body; bad entries are skipped with one :class:`TunerCacheWarning`."""
        try:
            table = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise TunerError(
                f"tuner cache {source} is not valid TOML: {e}. Fix: delete the file; the tuner "
                "re-measures and rewrites it."
            ) from e
        except (RecursionError, ValueError) as e:  # valid TOML past what Python reads: [[[[...]]]] nested
            raise TunerError(                     # beyond the recursion limit, integers of 5000 digits
                f"tuner cache {source} could not be read ({type(e).__name__}: {str(e)[:200]}). Fix: delete "
                "the file; the tuner re-measures and rewrites it."
            ) from e
        cache = TunerCache(max_invocations=max_invocations)
        skipped: list[str] = []
        for key, value in table.items():
            problem = _problem_with_size(value, max_invocations)
            if problem is None:
                cache.entries[key] = (value[0], value[1], value[2])
            else:
                skipped.append(f"{key!r}: {problem}")
        if skipped:
            shown = "; ".join(skipped[:5]) + (f"; ... ({len(skipped) - 5} more)" if len(skipped) > 5 else "")
            warnings.warn(
                f"tuner cache {source}: skipped {len(skipped)} invalid entr"
                f"{'y' if len(skipped) == 1 else 'ies'} ({shown}). Fix: none needed, the tuner "
                "re-measures those programs; delete the file to silence this.",
                TunerCacheWarning,
                stacklevel=2,
            )
        return cache

    # -- files ---------------------------------------------------------------------------------

    @staticmethod
    def load(path: str | os.PathLike[str], *, max_invocations: int = MAX_WORKGROUP_INVOCATIONS) -> TunerCache:
        """Load a cache file. A missing file is an empty cache; an oversized, non-UTF-8 or
        non-TOML file raises :class:`TunerError`."""
        p = Path(path)
        text = _read_bounded(p)
        if text is None:
            return TunerCache(max_invocations=max_invocations)
        return TunerCache.from_toml(text, str(p), max_invocations=max_invocations)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Merge with the file on disk and replace it atomically, under an exclusive file lock.

        Entries another process saved meanwhile are kept; on a conflicting key this cache wins.
        Afterwards ``self`` holds the merged entries. A file on disk that cannot be read
        (oversized, invalid) is replaced, with a warning."""
        p = Path(path)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TunerError(
                f"could not create tuner cache directory {p.parent}: {e}. Fix: set VYRE_CACHE_DIR to "
                "a writable directory."
            ) from e
        with _locked(p.with_name(p.name + ".lock")):
            try:
                on_disk = TunerCache.load(p, max_invocations=self.max_invocations)
            except TunerError as e:
                warnings.warn(f"replacing unreadable tuner cache: {e}", TunerCacheWarning, stacklevel=2)
                on_disk = TunerCache(max_invocations=self.max_invocations)
            merged = {**on_disk.entries, **self.entries}
            body = TunerCache._trusted(merged, self.max_invocations).to_toml().encode("utf-8")
            if len(body) > MAX_TUNER_CACHE_BYTES:
                raise TunerError(
                    f"tuner cache {p} would grow to {len(body)} bytes, over the "
                    f"{MAX_TUNER_CACHE_BYTES}-byte limit. Fix: delete the file to start afresh."
                )
            _atomic_write(p, body)
            self.entries = merged

    @staticmethod
    def _trusted(entries: dict[str, WorkgroupSize],
                 max_invocations: int = MAX_WORKGROUP_INVOCATIONS) -> TunerCache:
        cache = TunerCache(max_invocations=max_invocations)
        cache.entries = entries
        return cache


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Hold ``lock_path`` exclusively (``filelock``: flock on POSIX, msvcrt locking on Windows)."""
    import filelock  # deferred: its import costs ~0.1 s, and only saving a decision needs it

    lock = filelock.FileLock(lock_path)
    try:
        lock.acquire()
    except OSError as e:
        raise TunerError(
            f"could not open tuner cache lock {lock_path}: {e}. Fix: make its directory writable."
        ) from e
    try:
        yield
    finally:
        lock.release()


def _atomic_write(path: Path, body: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then ``os.replace``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise TunerError(
            f"could not write tuner cache {path}: {e}. Fix: check disk space and permissions."
        ) from e
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
