"""The binary kernel cache (vyre/driver/binary_cache.py, cpu_compile.py, native_cpu.py).

- a compile that hits loads machine code: no source is generated, no module imported, and in a new
  process numba is never imported;
- damaged entries (garbage, truncated, one flipped byte, empty, another key's, a symbol this process
  cannot provide) are rebuilt, never used;
- 8 processes compiling the same and different kernels at once leave whole entries only, and each
  kernel is compiled by one of them (the others wait for it and load its binary);
- least recently used entries go first past the size limit; ``vyre cache info`` / ``clear``;
- machine code and numba agree on generated programs, the parallel entry is added on first use, and
  arrays the compiled signature cannot take (unaligned) go through numba.

    python -m tests.test_binary_cache child <factor> warm|cold   # compile, run, print JSON (a child)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import vyre
from tests.strategies import program_and_inputs
from vyre.cli import main as cli_main
from vyre.driver import binary_cache, cache, cpu_compile
from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var

ROOT = Path(__file__).resolve().parent.parent


def scale_program(factor: float = 3.0) -> Program:
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    return Program.wrapped([x, out], 32, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, x[i] * factor)])])


X = np.arange(10, dtype=np.float32)


def run(k: vyre.Kernel, n: int = 10) -> list[float]:
    x = np.arange(n, dtype=np.float32)
    return k({"x": x, "out": np.zeros(n, np.float32)})["out"].tolist()


def binaries(root: Path) -> list[Path]:
    return sorted((root / "kernels" / "cpu").glob("b_*.vbin"))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("VYRE_BINARY_CACHE", raising=False)
    monkeypatch.delenv("VYRE_CACHE_MAX_MB", raising=False)
    cache.clear_memory()
    yield tmp_path
    cache.clear_memory()


def _forbid(monkeypatch: pytest.MonkeyPatch) -> None:
    def no(*a: object, **k: object) -> object:
        raise AssertionError("a cache hit generated source or imported a module")

    monkeypatch.setattr("vyre.codegen.cpu.emit_cpu", no)
    monkeypatch.setattr(cache, "load_module", no)


def test_a_hit_neither_generates_source_nor_imports_a_module(cache_dir: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    k = vyre.compile(scale_program(), "cpu")
    assert not k.cache_hit and run(k) == (X * 3).tolist()
    (entry,) = binaries(cache_dir)
    cache.clear_memory()
    with monkeypatch.context() as m:
        _forbid(m)
        k2 = vyre.compile(scale_program(), "cpu")
        assert k2.cache_hit and run(k2) == (X * 3).tolist()
    assert k2.source == k.source  # generated on demand, identical
    assert binary_cache.decode(entry.read_bytes(), entry.stem[2:]) is not None


# ---- a new process ------------------------------------------------------------------------------
def child_main(factor: float, warm: bool, n: int = 10) -> None:
    from vyre.codegen import cpu as codegen_cpu

    def no(*a: object, **k: object) -> object:
        raise AssertionError("emitter called")

    if warm:
        codegen_cpu.emit_cpu = no  # type: ignore[assignment]
    k = vyre.compile(scale_program(factor), "cpu")
    out = run(k, n)
    print(json.dumps({"hit": k.cache_hit, "out": out, "numba": "numba" in sys.modules, "warm": warm}), flush=True)


def _spawn(root: Path, factor: float, warm: bool = False, n: int = 10) -> subprocess.Popen[str]:
    env = {**os.environ, "VYRE_CACHE_DIR": str(root), "VYRE_AUTOTUNER": "off"}
    env.pop("VYRE_BINARY_CACHE", None)
    return subprocess.Popen([sys.executable, "-m", "tests.test_binary_cache", "child", str(factor),
                             "warm" if warm else "cold", str(n)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=600)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(rows) == 1, err[-3000:]
    return rows[0]


def test_eight_processes_compiling_the_same_and_different_kernels(tmp_path: Path) -> None:
    factors = [2.0, 5.0] * 4
    procs = [_spawn(tmp_path, f) for f in factors]
    rows = [_result(p) for p in procs]
    assert [r["out"] for r in rows] == [(X * f).tolist() for f in factors]
    # one process compiled each kernel; the other three waited for it and linked its binary (so
    # they never imported numba)
    assert [sum(r["numba"] for r, f in zip(rows, factors, strict=True) if f == g) for g in (2.0, 5.0)] == [1, 1]
    entries = binaries(tmp_path)
    assert len(entries) == 2
    assert not list((tmp_path / "kernels" / "cpu").glob(".tmp-*"))  # no torn or abandoned files
    assert not list((tmp_path / "kernels" / "cpu").glob(".*.lock"))  # no lock outlives its compile
    for e in entries:
        assert binary_cache.decode(e.read_bytes(), e.stem[2:]) is not None
    # a new process: machine code, no emitter, no numba
    warm = _result(_spawn(tmp_path, 5.0, warm=True))
    assert warm == {"hit": True, "out": (X * 5).tolist(), "numba": False, "warm": True}


def test_a_compile_lock_that_cannot_be_had_only_costs_a_second_compile(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock is an economy, never a condition: held elsewhere past the wait, or impossible to
    create, the compile goes ahead."""
    import filelock

    key = "ab" * 20
    path = binary_cache.path_for("cpu", key)
    path.parent.mkdir(parents=True)

    def enter(wait: float) -> float:
        t = time.perf_counter()
        with binary_cache.compiling("cpu", key, wait):
            return time.perf_counter() - t

    with filelock.FileLock(path.with_name(f".{path.stem}.lock")):  # another compile of the kernel
        with ThreadPoolExecutor(1) as pool:
            assert 0.2 <= pool.submit(enter, 0.2).result(timeout=60) < 30
    assert enter(0.2) < 0.2  # released: taken at once
    blocker = cache_dir / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("VYRE_CACHE_DIR", str(blocker))  # no lock file can be made under it
    assert binary_cache.path_for("cpu", key).is_relative_to(blocker)
    assert enter(30) < 30


# ---- damaged entries ----------------------------------------------------------------------------
def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x40
    p.write_bytes(bytes(data))


def _rekeyed(p: Path, change: Callable[[binary_cache.Record], binary_cache.Record]) -> None:
    rec = binary_cache.decode(p.read_bytes(), p.stem[2:])
    assert rec is not None
    p.write_bytes(binary_cache.encode(change(rec)))


def _other_key(p: Path) -> None:
    """A whole, intact entry of another key (stale: written for other versions) under this name."""
    _rekeyed(p, lambda r: binary_cache.Record("0" * 40, r.meta, r.blobs))


def _unknown_symbol(p: Path) -> None:
    """Intact, but the machine code asks for a symbol no process provides."""
    def change(r: binary_cache.Record) -> binary_cache.Record:
        entries = {n: {**e, "symbols": [*e["symbols"], "vyre_no_such_symbol"]} for n, e in r.meta["entries"].items()}
        return binary_cache.Record(r.key, {**r.meta, "entries": entries}, r.blobs)

    _rekeyed(p, change)


def _garbage_object(p: Path) -> None:
    """Intact framing, garbage machine code: LLVM refuses the object."""
    _rekeyed(p, lambda r: binary_cache.Record(r.key, r.meta, {n: b"\x7fELF garbage" for n in r.blobs}))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "garbage": lambda p: p.write_bytes(os.urandom(300)),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "last byte cut": lambda p: p.write_bytes(p.read_bytes()[:-1]),
    "byte flipped": _flip,
    "empty": lambda p: p.write_bytes(b""),
    "stale (another key)": _other_key,
    "unknown symbol": _unknown_symbol,
    "garbage object code": _garbage_object,
}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_damaged_entries_are_rebuilt_never_used(cache_dir: Path, how: str) -> None:
    k = vyre.compile(scale_program(), "cpu", parallel=False)
    (entry,) = binaries(cache_dir)
    good = binary_cache.decode(entry.read_bytes(), entry.stem[2:])
    assert good is not None
    DAMAGE[how](entry)
    cache.clear_memory()
    rebuilt = binary_cache.stats["rebuilt"]
    k2 = vyre.compile(scale_program(), "cpu", parallel=False)
    assert binary_cache.stats["rebuilt"] == rebuilt + 1
    assert run(k2) == (X * 3).tolist() and k2.key == k.key
    again = binary_cache.decode(entry.read_bytes(), entry.stem[2:])  # rewritten whole
    assert again is not None and set(again.blobs) == set(good.blobs)
    assert (again.meta["flat"], again.meta["parallel"]) == (good.meta["flat"], good.meta["parallel"])
    cache.clear_memory()
    k3 = vyre.compile(scale_program(), "cpu", parallel=False)
    assert k3.cache_hit and k3._module is not None and run(k3) == (X * 3).tolist()


def test_the_binary_key_covers_order_cpu_and_numbas_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    p = scale_program()
    q = Program(tuple(reversed(p.buffers)), p.workgroup_size, p.entry)  # same fingerprint, other order
    parts: list[str | bytes] = [p.fingerprint(), "cpu", "parallel=True"]
    base = cpu_compile.binary_key(p, parts)
    assert cpu_compile.binary_key(q, parts) != base
    for name, value in (("NUMBA_OPT", "0"), ("NUMBA_CPU_NAME", "generic"), ("NUMBA_CPU_FEATURES", "")):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            assert cpu_compile.binary_key(p, parts) != base, name
    assert cpu_compile.binary_key(p, parts) == base


# ---- size limit, info, clear --------------------------------------------------------------------
def test_least_recently_used_entries_go_first(cache_dir: Path) -> None:
    for f in (2.0, 3.0, 4.0):
        vyre.compile(scale_program(f), "cpu", parallel=False)
    root = binary_cache.kernels_root()
    stamp = 1_000_000_000  # age every entry, oldest first in compile order
    for n, e in enumerate(sorted(binary_cache._entries(root), key=lambda e: e.used)):
        for f in e.files:
            os.utime(f, (stamp + n, stamp + n))
    cache.clear_memory()
    assert vyre.compile(scale_program(2.0), "cpu", parallel=False).cache_hit  # the first becomes the newest
    hit = max(binaries(cache_dir), key=lambda p: p.stat().st_mtime)
    total = binary_cache.info().bytes
    assert binary_cache.evict(limit=hit.stat().st_size) == 5  # two binaries, three modules
    assert binaries(cache_dir) == [hit] and binary_cache.info().entries == 1
    assert binary_cache.info().bytes == hit.stat().st_size < total
    cache.clear_memory()
    k = vyre.compile(scale_program(3.0), "cpu", parallel=False)  # evicted: compiled again, right
    assert not k.cache_hit and run(k) == (X * 3).tolist()
    cache.clear_memory()
    k = vyre.compile(scale_program(2.0), "cpu", parallel=False)  # kept: still a hit
    assert k.cache_hit and run(k) == (X * 2).tolist()


def test_the_size_limit_is_applied_on_write(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VYRE_CACHE_MAX_MB", "0")  # no limit
    for f in (2.0, 3.0):
        vyre.compile(scale_program(f), "cpu", parallel=False)
    assert len(binaries(cache_dir)) == 2
    assert binary_cache.evict(limit=1) >= 2 and binary_cache.info().entries == 0


def test_cache_info_and_clear(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vyre.compile(scale_program(), "cpu", parallel=False)
    assert cli_main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache_dir / "kernels") in out and "(1 binaries)" in out and "MiB" in out
    info = binary_cache.info()
    assert info.entries == 2 and info.bytes > 0  # the binary, and the module with numba's files
    assert cli_main(["cache", "clear"]) == 0
    assert "removed 2 kernel cache entries" in capsys.readouterr().out
    assert binary_cache.info().entries == 0 and not binaries(cache_dir)


# ---- machine code against numba -----------------------------------------------------------------
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(program_and_inputs(max_stmts=4, allow_atomics=True, allow_barriers=True, allow_subgroups=True))
def test_machine_code_agrees_with_numba_on_generated_programs(cache_dir: Path, case: Any) -> None:
    """Same object code, so bit for bit the same results, for every kernel form (flat, workgroups,
    lockstep with barriers and subgroup operations, atomics)."""
    program, inputs, grid = case
    compiled = vyre.compile(program, "cpu")
    want = compiled({k: v.copy() for k, v in inputs.items()}, grid=grid)
    cache.clear_memory()
    loaded = vyre.compile(program, "cpu")
    assert loaded.cache_hit and loaded._module is not None
    got = loaded({k: v.copy() for k, v in inputs.items()}, grid=grid)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_the_parallel_entry_is_added_on_first_use(cache_dir: Path) -> None:
    n = 1 << 16
    k = vyre.compile(scale_program(), "cpu")
    assert run(k, n) == (np.arange(n, dtype=np.float32) * 3).tolist()  # compiles and saves the parallel entry
    (entry,) = binaries(cache_dir)
    rec = binary_cache.decode(entry.read_bytes(), entry.stem[2:])
    assert rec is not None and set(rec.blobs) == {cpu_compile.SERIAL, cpu_compile.PARALLEL}
    cache.clear_memory()
    k2 = vyre.compile(scale_program(), "cpu")
    assert not isinstance(k2._fn_parallel, cpu_compile.ParallelOnDemand)
    assert run(k2, n) == (np.arange(n, dtype=np.float32) * 3).tolist()


def test_processes_needing_a_new_parallel_entry_together_compile_it_once(tmp_path: Path) -> None:
    """Four processes whose kernel's binary holds only the serial entry all run it on an input
    large enough for the thread pool at once: one compiles the parallel entry (importing numba) and
    saves it; the others wait for the compile lock and link what it saved."""
    assert _result(_spawn(tmp_path, 7.0))["numba"]  # the serial entry only (10 elements)
    (entry,) = binaries(tmp_path)
    rec = binary_cache.decode(entry.read_bytes(), entry.stem[2:])
    assert rec is not None and set(rec.blobs) == {cpu_compile.SERIAL}
    n = 1 << 16
    rows = [_result(p) for p in [_spawn(tmp_path, 7.0, n=n) for _ in range(4)]]
    assert all(r["hit"] and r["out"] == (np.arange(n, dtype=np.float32) * 7).tolist() for r in rows)
    assert sum(r["numba"] for r in rows) == 1
    rec = binary_cache.decode(entry.read_bytes(), entry.stem[2:])
    assert rec is not None and set(rec.blobs) == {cpu_compile.SERIAL, cpu_compile.PARALLEL}
    assert not list((tmp_path / "kernels" / "cpu").glob(".*.lock"))


def test_a_kernel_compiled_here_compiles_its_parallel_entry_even_where_one_was_saved(cache_dir: Path) -> None:
    """The driver gives a kernel this process compiled any array numba takes (unaligned too), so
    its parallel entry stays numba's even where another load of the kernel saved machine code."""
    n = 1 << 16
    here = vyre.compile(scale_program(), "cpu")  # compiled: the serial entry only so far
    assert here.source is not None
    cache.clear_memory()
    loaded = vyre.compile(scale_program(), "cpu")  # the same kernel as machine code
    assert run(loaded, n) == (np.arange(n, dtype=np.float32) * 3).tolist()  # saves the parallel entry
    rec = binary_cache.read("cpu", loaded._fn_parallel.binary.key)
    assert rec is not None and cpu_compile.PARALLEL in rec.blobs
    raw = np.zeros(n * 4 + 1, np.uint8)
    x = np.frombuffer(raw.data, dtype=np.float32, count=n, offset=1)
    assert not x.flags.aligned
    x[...] = np.arange(n, dtype=np.float32)  # type: ignore[index]
    out = here({"x": x, "out": np.zeros(n, np.float32)})["out"]
    assert out.tolist() == (np.arange(n, dtype=np.float32) * 3).tolist()
    assert hasattr(here._fn_parallel.fn, "overloads")  # numba's dispatcher, not the saved machine code


def test_a_saved_parallel_entry_that_does_not_link_is_compiled_again(cache_dir: Path) -> None:
    """A kernel loaded as machine code whose binary's parallel entry no longer links (bytes LLVM
    rejects) compiles its own, gives the right answer, and saves a usable entry over the damaged
    one, which the next load links."""
    n = 1 << 16
    want = (np.arange(n, dtype=np.float32) * 5).tolist()
    vyre.compile(scale_program(5.0), "cpu")  # compiled: the serial entry only
    cache.clear_memory()
    loaded = vyre.compile(scale_program(5.0), "cpu")
    key = loaded._fn_parallel.binary.key
    rec = binary_cache.read("cpu", key)
    assert rec is not None and set(rec.blobs) == {cpu_compile.SERIAL}
    entries = {**rec.meta["entries"], cpu_compile.PARALLEL: rec.meta["entries"][cpu_compile.SERIAL]}
    binary_cache.write("cpu", binary_cache.Record(key, {**rec.meta, "entries": entries},
                                                  {**rec.blobs, cpu_compile.PARALLEL: b"not an object file"}))
    assert run(loaded, n) == want
    assert hasattr(loaded._fn_parallel.fn, "overloads")  # numba compiled it
    rec = binary_cache.read("cpu", key)
    assert rec is not None and rec.blobs[cpu_compile.PARALLEL] != b"not an object file"
    cache.clear_memory()
    again = vyre.compile(scale_program(5.0), "cpu")
    assert run(again, n) == want
    par = again._fn_parallel  # the saved machine code, linked with the serial entry
    assert not isinstance(par, cpu_compile.ParallelOnDemand) and not hasattr(par, "overloads")


def test_unaligned_arrays_go_through_numba(cache_dir: Path) -> None:
    vyre.compile(scale_program(), "cpu")
    cache.clear_memory()
    k = vyre.compile(scale_program(), "cpu")
    assert k._module is not None
    raw = np.zeros(10 * 4 + 1, np.uint8)
    x = np.frombuffer(raw.data, dtype=np.float32, count=10, offset=1)
    assert not x.flags.aligned
    x[...] = X  # type: ignore[index]
    out = k({"x": x, "out": np.zeros(10, np.float32)})["out"]
    assert out.tolist() == (X * 3).tolist()


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child_main(float(sys.argv[2]), sys.argv[3] == "warm", int(sys.argv[4]))
