"""CUDA kernels kept as cubin (vyre/driver/cuda_binary.py). On a GPU: a second process loads the
cubin (no source generated, no numba compile), launches it on the checked path and the cached
launch path, and a damaged entry is rebuilt. Without a GPU: entries that are not a cached CUDA
kernel are refused and deleted.

    python -m tests.test_cuda_binary child   # compile, dispatch, print JSON (a child process)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vyre.driver import binary_cache, cuda_binary
from vyre.driver.backends import cuda_available

ROOT = Path(__file__).resolve().parent.parent


def test_entries_without_a_kernel_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    key = "1" * 40
    for meta, blobs in [({"entry": "k", "flat": True}, {}),  # no cubin
                        ({"flat": True, "format": cuda_binary.CUDA_BINARY_VERSION}, {"cubin": b"x"}),  # no entry
                        ({"entry": "k", "flat": 1, "format": cuda_binary.CUDA_BINARY_VERSION}, {"cubin": b"x"}),
                        ({"entry": "k", "flat": True, "format": 999}, {"cubin": b"x"})]:  # another format
        assert binary_cache.write("cuda", binary_cache.Record(key, meta, blobs)) is not None
        assert cuda_binary.load(key) is None
        assert not binary_cache.path_for("cuda", key).exists()
    assert binary_cache.write("cuda", binary_cache.Record(
        key, {"entry": "k", "flat": False, "format": cuda_binary.CUDA_BINARY_VERSION}, {"cubin": b"x"}))
    found = cuda_binary.load(key)
    assert found is not None and found[0].entry == "k" and found[1] is False


def child() -> None:
    import vyre
    from numba import cuda

    from vyre.codegen import cuda as codegen_cuda
    from vyre.driver.dispatch import _kernel_for
    from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, store, var

    if sys.argv[2] == "warm":
        def no(*a: object, **k: object) -> object:
            raise AssertionError("emitter called on a cubin hit")

        codegen_cuda.emit_cuda = no  # type: ignore[assignment]
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    p = Program.wrapped([x, out], 128, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * 2.0)])])
    xs = np.linspace(0, 1, 5000, dtype=np.float32)
    k = vyre.compile(p, "cuda")
    host = vyre.dispatch(p, {"x": xs, "out": np.zeros_like(xs)}, backend="cuda")["out"]
    dx, dout = cuda.to_device(xs), cuda.device_array(5000, np.float32)
    for _ in range(3):  # the third takes the cached launch
        dev = vyre.dispatch(p, {"x": dx, "out": dout}, backend="cuda")["out"].copy_to_host()
    kk = _kernel_for(p, "cuda")
    want = np.exp(xs) * 2
    print(json.dumps({"hit": k.cache_hit, "cubin": isinstance(k._fn, cuda_binary.CubinKernel),
                      "host_ok": bool(np.allclose(host, want, rtol=1e-6)),
                      "dev_ok": bool(np.allclose(dev, want, rtol=1e-6)), "fast": kk._fast is not None}), flush=True)


def _run(root: Path, mode: str) -> dict[str, Any]:
    env = {**os.environ, "VYRE_CACHE_DIR": str(root), "VYRE_AUTOTUNER": "off"}
    env.pop("VYRE_BINARY_CACHE", None)
    out = subprocess.run([sys.executable, "-m", "tests.test_cuda_binary", "child", mode], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0 and len(rows) == 1, out.stderr[-3000:]
    return rows[0]


@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_a_second_process_launches_the_cached_cubin(tmp_path: Path) -> None:
    cold = _run(tmp_path, "cold")
    assert cold == {"hit": False, "cubin": False, "host_ok": True, "dev_ok": True, "fast": True}
    (entry,) = (tmp_path / "kernels" / "cuda").glob("b_*.vbin")
    warm = _run(tmp_path, "warm")
    assert warm == {"hit": True, "cubin": True, "host_ok": True, "dev_ok": True, "fast": True}
    entry.write_bytes(entry.read_bytes()[:-7])  # truncated: rebuilt, never used
    again = _run(tmp_path, "cold")  # the module file is still there: a module hit, compiled by numba
    assert again == {"hit": True, "cubin": False, "host_ok": True, "dev_ok": True, "fast": True}
    assert binary_cache.decode(entry.read_bytes(), entry.stem[2:]) is not None


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child()
