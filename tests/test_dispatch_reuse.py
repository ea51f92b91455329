"""The in-memory kernel lookup of ``vyre.dispatch`` (vyre/driver/dispatch.py): the same Program
object, an equal Program built again, a reordered one; none of these compiles or fingerprints
again, and different programs never share a kernel."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import vyre
from vyre.driver import dispatch as dispatch_mod
from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var
from vyre.ir import wire


def build(factor: float = 3.0, reorder: bool = False) -> Program:
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    bufs = [out, x] if reorder else [x, out]
    return Program.wrapped(bufs, 32, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, x[i] * factor)])])


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Empty in-memory kernel tables (restored afterwards) and a private disk cache."""
    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    for name in ("_kernels", "_by_identity", "_by_structure"):
        monkeypatch.setattr(dispatch_mod, name, {})
    yield


def run(p: Program, n: int = 40) -> np.ndarray:
    x = np.arange(n, dtype=np.float32)
    return vyre.dispatch(p, {"x": x, "out": np.zeros(n, np.float32)}, backend="cpu")["out"]


def test_a_rebuilt_program_neither_compiles_nor_fingerprints(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    np.testing.assert_array_equal(run(build()), np.arange(40, dtype=np.float32) * 3)

    def no(*a: object, **k: object) -> object:
        raise AssertionError("a rebuilt program was compiled or fingerprinted again")

    monkeypatch.setattr(wire, "fingerprint", no)
    monkeypatch.setattr(dispatch_mod, "compile", no)
    for _ in range(3):
        np.testing.assert_array_equal(run(build()), np.arange(40, dtype=np.float32) * 3)


def test_different_programs_never_share_a_kernel(fresh: None) -> None:
    for f in (3.0, 2.0, -0.0, 0.0, 3.0):
        np.testing.assert_array_equal(run(build(f)), np.arange(40, dtype=np.float32) * np.float32(f))
    assert len(dispatch_mod._by_structure) == 4


def test_a_reordered_program_shares_the_kernel_through_its_fingerprint(fresh: None) -> None:
    run(build())
    k = dispatch_mod._by_structure[(build(), "cpu")]
    np.testing.assert_array_equal(run(build(reorder=True)), np.arange(40, dtype=np.float32) * 3)
    assert dispatch_mod._by_structure[(build(reorder=True), "cpu")] is k


def test_an_unhashable_program_still_gets_its_validation_error(fresh: None) -> None:
    p = build()
    bad = Program(p.buffers, p.workgroup_size, [*p.entry], p.functions)  # type: ignore[arg-type]
    with pytest.raises(vyre.VyreError):
        run(bad)
