"""The disk kernel cache (vyre/driver/cache.py), with ``VYRE_CACHE_DIR`` in a temporary directory
and the binary cache off (``VYRE_BINARY_CACHE=0``; tests/test_binary_cache.py covers that layer).

- a second *process* compiling the same program hits the disk cache, rewrites nothing and starts from
  numba's cached machine code;
- a corrupt, truncated, emptied or edited module file is detected and rebuilt (results stay right);
- garbage in numba's ``__pycache__`` files next to it (index, data, a bad ``.pyc``) is dropped and
  rebuilt rather than crashing or being trusted;
- different programs, backends, options and codegen versions never share a file, including two
  programs whose fingerprints agree but whose generated parameter order differs;
- processes compiling the same kernel at the same time do not corrupt each other;
- modules kept off the disk cache share one temporary directory, gone when the process exits.

    python -m tests.test_kernel_cache child    # the child's side: compile, run, print JSON
    python -m tests.test_kernel_cache nodisk   # the same with disk_cache=False
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vyre
from vyre.driver import cache
from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var

ROOT = Path(__file__).resolve().parent.parent


def scale_program(factor: float = 3.0) -> Program:
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    return Program.wrapped([x, out], 32, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, x[i] * factor)])])


X = np.arange(10, dtype=np.float32)


def run(k: vyre.Kernel) -> list[float]:
    return k({"x": X.copy(), "out": np.zeros(10, np.float32)})["out"].tolist()


WANT = (X * 3.0).tolist()


def module_file(k: vyre.Kernel) -> Path:
    files = list(cache.kernel_dir(k.backend).glob(f"k_{k.key}_*.py"))
    assert len(files) == 1, files
    return files[0]


def numba_files(path: Path) -> list[Path]:
    return sorted((path.parent / "__pycache__").glob(f"{path.stem}.*"))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VYRE_BINARY_CACHE", "0")  # these are the generated modules' tests: no binaries
    cache.clear_memory()
    yield tmp_path
    cache.clear_memory()


# ---- across processes ----------------------------------------------------------------------------
def child_main() -> None:
    k = vyre.compile(scale_program(), "cpu", parallel=False)
    print(json.dumps({"hit": k.cache_hit, "out": run(k), "key": k.key, "file": str(module_file(k))}), flush=True)


def child_nodisk() -> None:
    kernels = [vyre.compile(scale_program(f), "cpu", parallel=False, disk_cache=False) for f in (6.0, 7.0)]
    files = [sys.modules[k._fn.__module__].__file__ for k in kernels]
    print(json.dumps({"hit": False, "out": run(kernels[0]), "key": kernels[0].key, "file": files[0],
                      "files": files}), flush=True)


def _spawn(cache_root: Path, mode: str = "child") -> subprocess.Popen[str]:
    env = {**os.environ, "VYRE_CACHE_DIR": str(cache_root), "VYRE_BINARY_CACHE": "0"}
    return subprocess.Popen([sys.executable, "-m", "tests.test_kernel_cache", mode], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=300)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(rows) == 1, err[-3000:]
    return rows[0]


def _stat(p: Path) -> tuple[int, int, int]:
    s = p.stat()
    return s.st_ino, s.st_mtime_ns, s.st_size


def test_second_process_hits_the_disk_cache_and_rewrites_nothing(tmp_path: Path) -> None:
    first = _result(_spawn(tmp_path))
    assert first["hit"] is False and first["out"] == WANT
    path = Path(first["file"])
    compiled = numba_files(path)
    assert any(f.suffix == ".nbi" for f in compiled) and any(f.suffix == ".nbc" for f in compiled)
    before = {f: _stat(f) for f in [path, *compiled]}
    second = _result(_spawn(tmp_path))
    assert second == {**first, "hit": True}
    # neither the module nor numba's machine code was written again: the second process compiled nothing
    assert {f: _stat(f) for f in [path, *numba_files(path)]} == before


def test_concurrent_processes_compiling_one_kernel(tmp_path: Path) -> None:
    procs = [_spawn(tmp_path) for _ in range(4)]
    rows = [_result(p) for p in procs]
    assert all(r["out"] == WANT for r in rows)
    assert len({r["file"] for r in rows}) == 1
    path = Path(rows[0]["file"])
    assert list(path.parent.glob("*.py")) == [path]  # one module, no temporary files left behind
    assert not list(path.parent.glob(".tmp-*"))
    text = path.read_text()
    assert cache._intact(text, rows[0]["key"])
    again = _result(_spawn(tmp_path))
    assert again["hit"] is True and again["out"] == WANT


# ---- damaged module files ------------------------------------------------------------------------
def _garbage(p: Path) -> None:
    p.write_bytes(b"\xff\xfe\x00garbage\x80" * 10)


def _truncate(p: Path) -> None:
    p.write_text(p.read_text()[: len(p.read_text()) // 2])


def _empty(p: Path) -> None:
    p.write_text("")


def _edit_body(p: Path) -> None:
    text = p.read_text()
    assert text.count("float32(3.0)") == 1
    p.write_text(text.replace("float32(3.0)", "float32(4.0)"))


def _edit_with_valid_header(p: Path) -> None:
    """An edited body whose header digest was recomputed: intact-looking, but not our text."""
    lines = p.read_text().split("\n", 2)
    key = lines[0].removeprefix("# vyre-key: ")
    body = lines[2].replace("float32(3.0)", "float32(4.0)")
    p.write_text(cache._header(key, body) + body)
    assert cache._intact(p.read_text(), key)


DAMAGE = {"garbage": (_garbage, True), "truncated": (_truncate, True), "empty": (_empty, True),
          "edited": (_edit_body, True), "edited, valid digest": (_edit_with_valid_header, False)}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_damaged_module_file_is_rebuilt(cache_dir: Path, how: str) -> None:
    damage, counts_as_corrupt = DAMAGE[how]
    k = vyre.compile(scale_program(), "cpu", parallel=False)
    path = module_file(k)
    good = path.read_text()
    damage(path)
    cache.clear_memory()
    rebuilt_before = cache.stats["rebuilt"]
    k2 = vyre.compile(scale_program(), "cpu", parallel=False)
    assert k2.cache_hit is False and k2.key == k.key
    assert path.read_text() == good
    assert run(k2) == WANT
    assert cache.stats["rebuilt"] - rebuilt_before == int(counts_as_corrupt)


def _bad_pyc(path: Path) -> Path:
    """A ``.pyc`` whose header matches the source (so Python trusts it) and whose code is garbage."""
    pyc = Path(importlib.util.cache_from_source(str(path)))
    st = path.stat()
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + \
        (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(header + b"\x00garbage, not marshal data")
    return pyc


PYCACHE_DAMAGE = {
    "index garbage": lambda fs: [f.write_bytes(os.urandom(64)) for f in fs if f.suffix == ".nbi"],
    "index truncated": lambda fs: [f.write_bytes(f.read_bytes()[:30]) for f in fs if f.suffix == ".nbi"],
    "data garbage": lambda fs: [f.write_bytes(b"\x80\x05garbage") for f in fs if f.suffix == ".nbc"],
    "data emptied": lambda fs: [f.write_bytes(b"") for f in fs if f.suffix == ".nbc"],
    "data deleted": lambda fs: [f.unlink() for f in fs if f.suffix == ".nbc"],
}


@pytest.mark.parametrize("how", sorted(PYCACHE_DAMAGE))
def test_garbage_in_numbas_pycache_is_dropped(cache_dir: Path, how: str) -> None:
    k = vyre.compile(scale_program(), "cpu", parallel=False)
    path = module_file(k)
    files = numba_files(path)
    assert files
    PYCACHE_DAMAGE[how](files)
    cache.clear_memory()
    k2 = vyre.compile(scale_program(), "cpu", parallel=False)
    assert run(k2) == WANT
    cache.clear_memory()  # and the cache it left behind is sound again
    k3 = vyre.compile(scale_program(), "cpu", parallel=False)
    assert k3.cache_hit is True and run(k3) == WANT


def test_bad_pyc_next_to_the_module_is_ignored(cache_dir: Path) -> None:
    """Modules run from the checked text, never from Python's .pyc of the file."""
    k = vyre.compile(scale_program(), "cpu", parallel=False)
    path = module_file(k)
    _bad_pyc(path)
    cache.clear_memory()
    k2 = vyre.compile(scale_program(), "cpu", parallel=False)
    assert run(k2) == WANT


def test_a_kernel_that_fails_to_compile_still_raises(cache_dir: Path) -> None:
    """The purge-and-retry path must not swallow real errors."""
    with pytest.raises(SyntaxError):
        cache.load_module("cpu", "0" * 40, "def broken(:\n")


# ---- keys and files ------------------------------------------------------------------------------
def test_different_programs_options_and_versions_never_share_a_file(cache_dir: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    p = scale_program()
    kernels = {
        "base": vyre.compile(p, "cpu", parallel=False),
        "parallel": vyre.compile(p, "cpu", parallel=True),
        "other constant": vyre.compile(scale_program(4.0), "cpu", parallel=False),
        "other workgroup": vyre.compile(Program(p.buffers, (64, 1, 1), p.entry), "cpu", parallel=False),
    }
    with monkeypatch.context() as m:
        m.setattr("vyre.driver.dispatch.CODEGEN_VERSION", 10**6)
        kernels["codegen version"] = vyre.compile(p, "cpu", parallel=False)
    keys = {name: k.key for name, k in kernels.items()}
    assert len(set(keys.values())) == len(keys), keys
    files = {name: module_file(k) for name, k in kernels.items()}
    assert len(set(files.values())) == len(files)
    assert vyre.compile(p, "interp").key not in keys.values()
    assert run(kernels["other constant"]) == (X * 4.0).tolist() and run(kernels["parallel"]) == WANT


def test_kernel_key_parts_are_unambiguous() -> None:
    fp = scale_program().fingerprint()
    assert cache.kernel_key(fp, "cpu", "") != cache.kernel_key(fp, "cudasim", "")
    assert cache.kernel_key("ab", "c") != cache.kernel_key("a", "bc")
    assert cache.kernel_key("a", "") != cache.kernel_key("a")
    assert cache.kernel_key(b"x") == cache.kernel_key("x") and len(cache.kernel_key("x")) == 40


def test_same_fingerprint_different_buffer_order_is_not_confused(cache_dir: Path) -> None:
    """The fingerprint ignores declaration order; the generated parameter order follows it. Before the
    cache keyed files and memory by source too, the second compile reused the first module and passed
    the arrays in the wrong order (out came back all zeros)."""
    p1 = scale_program()
    p2 = Program(tuple(reversed(p1.buffers)), p1.workgroup_size, p1.entry)
    assert p1.fingerprint() == p2.fingerprint()
    k1 = vyre.compile(p1, "cpu", parallel=False)
    k2 = vyre.compile(p2, "cpu", parallel=False)
    assert run(k1) == WANT and run(k2) == WANT
    assert k1.source != k2.source
    assert len(list(cache.kernel_dir("cpu").glob(f"k_{k1.key}_*.py"))) == 2


def test_memory_cache_returns_the_same_module(cache_dir: Path) -> None:
    k1 = vyre.compile(scale_program(), "cpu", parallel=False)
    hits = cache.stats["memory_hits"]
    k2 = vyre.compile(scale_program(), "cpu", parallel=False)
    assert k2.cache_hit and k2._fn is k1._fn and cache.stats["memory_hits"] == hits + 1


def test_modules_off_the_disk_share_one_temporary_directory_removed_at_exit(tmp_path: Path) -> None:
    row = _result(_spawn(tmp_path, "nodisk"))
    assert row["out"] == (X * 6.0).tolist()
    dirs = {Path(f).parent for f in row["files"]}
    assert len(dirs) == 1 and not tmp_path.joinpath("kernels").exists()
    assert not dirs.pop().exists()  # nothing left behind in the temporary directory


def test_no_disk_cache_writes_nothing_under_the_cache_root(cache_dir: Path) -> None:
    k = vyre.compile(scale_program(5.0), "cpu", parallel=False, disk_cache=False)
    assert run(k) == (X * 5.0).tolist()
    assert not cache.kernel_dir("cpu").exists() or not list(cache.kernel_dir("cpu").glob("*.py"))
    k_disk = vyre.compile(scale_program(5.0), "cpu", parallel=False)
    assert k_disk._fn is not k._fn  # the no-cache module (cache=False source) is not reused for disk
    assert len(list(cache.kernel_dir("cpu").glob("*.py"))) == 1


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        child_main()
    elif sys.argv[1:] == ["nodisk"]:
        child_nodisk()
    else:
        raise SystemExit(f"usage: python -m tests.test_kernel_cache child|nodisk (got {sys.argv[1:]})")
