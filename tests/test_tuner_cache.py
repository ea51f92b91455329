"""Tuner keys, the TOML decision cache (bounded reads, skipped entries, locked merge-save) and the
settings that locate it."""

from __future__ import annotations

import multiprocessing
import os
import struct
import warnings
from pathlib import Path

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre.tuning import cache as tuner_cache
from vyre.tuning.tuner import Tuner, adapter_file_stem
from vyre.tuning.cache import (
    MAX_TUNER_CACHE_BYTES, StaticProgramShape, TunerCache, TunerCacheWarning, TunerProgramKey,
)
from vyre.errors import TunerError, VyreError
from vyre.settings import Mode, cache_root, read_settings


class FakeProgram:
    """Stands in for a Program until the wire module lands: only ``fingerprint()`` is used."""

    def __init__(self, fp: bytes = bytes(range(32)), workgroup_size: tuple[int, int, int] = (64, 1, 1)):
        self._fp = fp
        self.workgroup_size = workgroup_size

    def fingerprint(self) -> bytes:
        return self._fp


# -- keys ------------------------------------------------------------------------------------------


def _independent_key(fp: bytes, wg: tuple[int, int, int], count: tuple[int, int, int] | None,
                     out: int) -> str:
    """The seed's byte layout, assembled separately from the implementation."""
    data = b"vyre-driver-workgroup-tuner-v1\x00program\x00" + fp + b"\x00workgroup-size\x00"
    data += struct.pack("<III", *wg) + b"\x00workgroup-count\x00"
    data += b"\x00" if count is None else b"\x01" + struct.pack("<III", *count)
    data += b"\x00output-bytes\x00" + struct.pack("<Q", out)
    return "v1-" + blake3.blake3(data).hexdigest()


def test_key_matches_seed_layout_and_is_pinned() -> None:
    key = TunerProgramKey.from_program(FakeProgram(), StaticProgramShape((64, 1, 1), None, 4096))
    assert key.as_str() == _independent_key(bytes(range(32)), (64, 1, 1), None, 4096)
    assert len(key.value) == 67 and key.value.startswith("v1-")
    assert str(key) == key.value
    # Pinned so an accidental change of the layout shows up here.
    assert key.value == "v1-" + blake3.blake3(
        b"vyre-driver-workgroup-tuner-v1\x00program\x00" + bytes(range(32))
        + b"\x00workgroup-size\x00@\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00"
        + b"\x00workgroup-count\x00\x00\x00output-bytes\x00\x00\x10\x00\x00\x00\x00\x00\x00"
    ).hexdigest()


@given(
    fp=st.binary(min_size=32, max_size=32),
    wg=st.tuples(*[st.integers(0, 2**32 - 1)] * 3),
    count=st.none() | st.tuples(*[st.integers(0, 2**32 - 1)] * 3),
    out=st.integers(0, 2**64 - 1),
)
@settings(max_examples=60, deadline=None)
def test_key_layout_property(fp: bytes, wg: tuple[int, int, int], count: tuple[int, int, int] | None,
                             out: int) -> None:
    key = TunerProgramKey.from_program(FakeProgram(fp), StaticProgramShape(wg, count, out))
    assert key.value == _independent_key(fp, wg, count, out)


def test_key_distinguishes_every_field() -> None:
    base = StaticProgramShape((64, 1, 1), None, 16)
    variants = [
        base, StaticProgramShape((128, 1, 1), None, 16), StaticProgramShape((64, 1, 1), (0, 0, 0), 16),
        StaticProgramShape((64, 1, 1), (1, 1, 1), 16), StaticProgramShape((64, 1, 1), None, 17),
    ]
    keys = {TunerProgramKey.from_program(FakeProgram(), s) for s in variants}
    keys.add(TunerProgramKey.from_program(FakeProgram(b"\x01" * 32), base))
    assert len(keys) == len(variants) + 1


def test_shape_for_program_uses_declared_workgroup_size() -> None:
    from vyre.ir import Program

    prog = Program.wrapped([], 128, [])
    assert StaticProgramShape.for_program(prog, None, 8) == StaticProgramShape((128, 1, 1), None, 8)
    with pytest.raises(TunerError, match="Fix:"):
        StaticProgramShape.for_program(object())


@pytest.mark.parametrize("fp", [b"short", "0" * 64, None])
def test_key_rejects_bad_fingerprint(fp: object) -> None:
    with pytest.raises(TunerError, match="Fix:"):
        TunerProgramKey.from_program(FakeProgram(fp), StaticProgramShape((64, 1, 1)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "shape", [StaticProgramShape((2**32, 1, 1)), StaticProgramShape((64, 1, 1), None, -1),
              StaticProgramShape((64, 1), None, 0)],  # type: ignore[arg-type]
)
def test_key_rejects_out_of_range_shape(shape: StaticProgramShape) -> None:
    with pytest.raises(TunerError, match="Fix:"):
        TunerProgramKey.from_program(FakeProgram(), shape)


# -- cache in memory -------------------------------------------------------------------------------


def test_get_set_by_string_or_key() -> None:
    cache = TunerCache()
    key = TunerProgramKey.from_program(FakeProgram(), StaticProgramShape((64, 1, 1)))
    cache.set(key, (256, 1, 1))
    cache.set("plain", [32, 2, 1])  # type: ignore[arg-type]
    assert cache.get(key.value) == (256, 1, 1) and cache.get(key) == (256, 1, 1)
    assert cache.get("plain") == (32, 2, 1) and cache.get("missing") is None
    assert key in cache and "plain" in cache and len(cache) == 2


@pytest.mark.parametrize("size", [(0, 1, 1), (2048, 1, 1), (64, 1), (64.0, 1, 1), (True, 1, 1), (33, 33, 1)])
def test_set_rejects_what_load_would_skip(size: object) -> None:
    with pytest.raises(TunerError, match="Fix:"):
        TunerCache().set("k", size)  # type: ignore[arg-type]


def test_set_rejects_non_string_key() -> None:
    with pytest.raises(TunerError, match="Fix:"):
        TunerCache().set(5, (64, 1, 1))  # type: ignore[arg-type]


# -- files -----------------------------------------------------------------------------------------


def test_save_writes_seed_format_and_roundtrips(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "adapter.toml"
    cache = TunerCache({"v1-bb": (128, 1, 1), "v1-aa": (64, 2, 1)})
    cache.save(path)
    assert path.read_text() == '"v1-aa" = [64, 2, 1]\n"v1-bb" = [128, 1, 1]\n'
    assert TunerCache.load(path) == cache
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


@given(keys=st.lists(st.text(min_size=0, max_size=20), min_size=1, max_size=5, unique=True))
@settings(max_examples=40, deadline=None)
def test_hostile_keys_roundtrip(keys: list[str]) -> None:
    cache = TunerCache({k: (32, 1, 1) for k in keys})
    assert TunerCache.from_toml(cache.to_toml()) == cache


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert len(TunerCache.load(tmp_path / "nope.toml")) == 0


def test_invalid_toml_is_an_error_with_fix(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('"k" = [64, 1, 1\n')
    with pytest.raises(TunerError, match=r"not valid TOML.*Fix:") as info:
        TunerCache.load(path)
    assert isinstance(info.value, VyreError)


def test_non_utf8_is_an_error_with_fix(tmp_path: Path) -> None:
    path = tmp_path / "bin.toml"
    path.write_bytes(b'"k" = [64, 1, 1]\n\xff\xfe')
    with pytest.raises(TunerError, match=r"UTF-8.*Fix:"):
        TunerCache.load(path)


def test_oversized_file_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "huge.toml"
    path.write_bytes(b"#" * (MAX_TUNER_CACHE_BYTES + 1))
    reads: list[int] = []
    real_open = open

    class Spy:
        def __init__(self, f):  # type: ignore[no-untyped-def]
            self.f = f

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *a):  # type: ignore[no-untyped-def]
            self.f.close()

        def fileno(self) -> int:
            return int(self.f.fileno())

        def read(self, n: int = -1) -> bytes:
            reads.append(n)
            return bytes(self.f.read(n))

    monkeypatch.setattr(tuner_cache, "open", lambda p, m: Spy(real_open(p, m)), raising=False)
    with pytest.raises(TunerError, match=r"over the 4194304-byte limit; it was not read.*Fix:"):
        TunerCache.load(path)
    assert reads == []


def test_file_at_the_limit_is_read(tmp_path: Path) -> None:
    line = b'"v1-k" = [64, 1, 1]\n'
    path = tmp_path / "full.toml"
    path.write_bytes(line + b"#" * (MAX_TUNER_CACHE_BYTES - len(line) - 1) + b"\n")
    assert os.path.getsize(path) == MAX_TUNER_CACHE_BYTES
    assert TunerCache.load(path).get("v1-k") == (64, 1, 1)


def test_bad_entries_are_skipped_with_one_warning(tmp_path: Path) -> None:
    path = tmp_path / "mixed.toml"
    path.write_text(
        '"good" = [128, 1, 1]\n"zero" = [0, 1, 1]\n"short" = [64, 1]\n"str" = ["a", 1, 1]\n'
        '"big" = [2048, 1, 1]\n"product" = [64, 32, 1]\n"bool" = [true, 1, 1]\n"neg" = [-64, 1, 1]\n'
        '"float" = [1.5, 1, 1]\n"u32" = [4294967296, 1, 1]\n"scalar" = 64\n"also_good" = [32, 32, 1]\n'
        "[table]\nx = 1\n"
    )
    with pytest.warns(TunerCacheWarning, match="skipped 11 invalid entries") as record:
        cache = TunerCache.load(path)
    assert len(record) == 1
    assert cache.entries == {"good": (128, 1, 1), "also_good": (32, 32, 1)}


def test_save_merges_with_what_another_process_saved(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    first, second = TunerCache.load(path), TunerCache.load(path)
    first.set("a", (64, 1, 1))
    first.set("shared", (32, 1, 1))
    first.save(path)
    second.set("b", (128, 1, 1))
    second.set("shared", (256, 1, 1))  # the later writer wins on a conflict
    second.save(path)
    assert TunerCache.load(path).entries == {"a": (64, 1, 1), "b": (128, 1, 1), "shared": (256, 1, 1)}
    assert second.entries == TunerCache.load(path).entries


def test_save_replaces_an_unreadable_file_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text("not = [toml")
    cache = TunerCache({"k": (64, 1, 1)})
    with pytest.warns(TunerCacheWarning, match="replacing unreadable"):
        cache.save(path)
    assert TunerCache.load(path).entries == {"k": (64, 1, 1)}


def test_failed_replace_leaves_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.toml"
    TunerCache({"old": (64, 1, 1)}).save(path)

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tuner_cache.os, "replace", boom)
    with pytest.raises(TunerError, match=r"could not write.*Fix:"):
        TunerCache({"new": (32, 1, 1)}).save(path)
    monkeypatch.undo()
    assert TunerCache.load(path).entries == {"old": (64, 1, 1)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.toml", "t.toml.lock"]


def _save_many(args: tuple[str, int, int]) -> None:
    path, worker, count = args
    for i in range(count):  # a fresh cache per save: the merge, not memory, must keep old keys
        cache = TunerCache()
        cache.set(f"w{worker}-k{i}", (32 * (1 + i % 4), 1, 1))
        cache.save(path)


def test_concurrent_processes_lose_no_decisions(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "adapter.toml"
    workers, count = 6, 8
    # fork when the platform has it: children start in milliseconds instead of re-importing vyre
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ctx.Pool(workers) as pool:
        pool.map(_save_many, [(str(path), w, count) for w in range(workers)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = TunerCache.load(path)
    assert set(loaded.entries) == {f"w{w}-k{i}" for w in range(workers) for i in range(count)}
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


# -- where the cache lives ------------------------------------------------------------------------


def test_cache_root_precedence() -> None:
    env = {"HOME": "/home/u"}
    assert cache_root(read_settings(env)) == Path("/home/u/.cache/vyre")
    assert cache_root(read_settings({**env, "XDG_CACHE_HOME": "/xdg"})) == Path("/xdg/vyre")
    assert cache_root(read_settings({**env, "XDG_CACHE_HOME": "relative"})) == Path("/home/u/.cache/vyre")
    assert cache_root(read_settings({**env, "XDG_CACHE_HOME": ""})) == Path("/home/u/.cache/vyre")
    both = {**env, "XDG_CACHE_HOME": "/xdg", "VYRE_CACHE_DIR": "/vc"}
    assert cache_root(read_settings(both)) == Path("/vc")


def test_settings_parse_everything() -> None:
    s = read_settings({"HOME": "/h", "VYRE_BACKEND": " CUDA ", "VYRE_AUTOTUNER": "off"})
    assert s.backend == "cuda" and s.autotuner is Mode.OFF_USE_DEFAULT and s.cache_dir is None
    assert read_settings({"HOME": "/h"}).autotuner is Mode.ON
    with pytest.warns(UserWarning, match="VYRE_AUTOTUNER='of'.*Fix:"):
        assert read_settings({"HOME": "/h", "VYRE_AUTOTUNER": "of"}).autotuner is Mode.ON


def test_tuner_cache_path_follows_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VYRE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert Tuner.cache_path_for_adapter("gpu0") == tmp_path / "vyre" / "tuner" / "gpu0.toml"
    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path / "vc"))
    assert Tuner("gpu0", Mode.ON).cache_path == tmp_path / "vc" / "tuner" / "gpu0.toml"


@pytest.mark.parametrize(
    "fp", ["../../etc/passwd", "/abs/path", "..", ".hidden", "a b/c", "x" * 500, "name\x00nul", "é-gpu"]
)
def test_adapter_fingerprint_cannot_escape_the_directory(fp: str, tmp_path: Path) -> None:
    path = Tuner.cache_path_for_adapter(fp, tmp_path)
    assert path.parent == tmp_path / "tuner"
    assert path.name.endswith(".toml") and not path.name.startswith(".")
    assert "/" not in path.name and len(path.name) < 200


def test_sanitised_fingerprints_stay_distinct() -> None:
    stems = {adapter_file_stem(fp) for fp in ["a/b", "a_b", "a b", "a:b"]}
    assert len(stems) == 4
    assert adapter_file_stem("NVIDIA_H100-sm90-560.35") == "NVIDIA_H100-sm90-560.35"
    with pytest.raises(TunerError, match="Fix:"):
        adapter_file_stem("")
