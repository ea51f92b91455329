"""CUDA kernels kept as cubin (vyre/driver/cuda_binary.py). On a GPU: a second process loads the
cubin (no source generated, no numba compile), launches it on the checked path and the cached
launch path, a process using only PyTorch/CuPy (or numpy) arrays never imports numba, a damaged
entry is rebuilt, and a cubin the driver refuses (intact on disk) is compiled again. Without a
GPU: entries that are not a cached CUDA kernel are refused and deleted (tests/test_cuda_driver.py
covers the launch without numba through a fake driver).

    python -m tests.test_cuda_binary child MODE   # compile, dispatch, print JSON (a child process)
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


def _program() -> Any:
    from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, store, var

    x, out = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    return Program.wrapped([x, out], 128, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * 2.0)])])


def child_direct() -> None:
    """A warm process with numpy arrays, then PyTorch tensors or CuPy arrays: numba never imported."""
    import importlib.util

    import vyre
    from vyre.driver.dispatch import _kernel_for

    p = _program()
    xs = np.linspace(0, 1, 5000, dtype=np.float32)
    want = np.exp(xs) * 2
    host = vyre.dispatch(p, {"x": xs, "out": np.zeros_like(xs)}, backend="cuda")["out"]
    lib, dev_ok = None, None
    if importlib.util.find_spec("torch") is not None:
        import torch

        lib, dx = "torch", torch.from_numpy(xs).cuda()
        dout = torch.zeros_like(dx)
        for _ in range(3):
            got = vyre.dispatch(p, {"x": dx, "out": dout}, backend="cuda")["out"]
        dev_ok = got is dout and bool(np.allclose(dout.cpu().numpy(), want, rtol=1e-6))
    elif importlib.util.find_spec("cupy") is not None:
        import cupy

        lib, cx = "cupy", cupy.asarray(xs)
        cout = cupy.zeros_like(cx)
        for _ in range(3):
            got = vyre.dispatch(p, {"x": cx, "out": cout}, backend="cuda")["out"]
        dev_ok = got is cout and bool(np.allclose(cout.get(), want, rtol=1e-6))
    k = _kernel_for(p, "cuda")
    print(json.dumps({"cubin": isinstance(k._fn, cuda_binary.CubinKernel),
                      "host_ok": bool(np.allclose(host, want, rtol=1e-6)), "lib": lib, "dev_ok": dev_ok,
                      "fast": k._fast is not None if lib else None, "numba": "numba" in sys.modules}), flush=True)


def child() -> None:
    import vyre
    from numba import cuda

    from vyre.codegen import cuda as codegen_cuda
    from vyre.driver.dispatch import _kernel_for

    if sys.argv[2] == "warm":
        def no(*a: object, **k: object) -> object:
            raise AssertionError("emitter called on a cubin hit")

        codegen_cuda.emit_cuda = no  # type: ignore[assignment]
        from vyre.codegen import cuda_c

        cuda_c.emit_cuda_c = no  # type: ignore[assignment]
    p = _program()
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


def _run(root: Path, mode: str, compiler: str = "numba") -> dict[str, Any]:
    # numba's route by default: its cubin is saved after the first launch (the NVRTC route saves at
    # compile time: test_the_nvrtc_route_on_the_gpu)
    env = {**os.environ, "VYRE_CACHE_DIR": str(root), "VYRE_AUTOTUNER": "off", "VYRE_CUDA_COMPILER": compiler}
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
    direct = _run(tmp_path, "direct")
    assert direct["cubin"] and direct["host_ok"] and direct["numba"] is False, direct
    if direct["lib"] is not None:
        assert direct["dev_ok"] and direct["fast"], direct
    # a cubin the driver refuses, in an intact entry (another GPU's, say): compiled again, replaced
    rec = binary_cache.decode(entry.read_bytes(), entry.stem[2:])
    assert rec is not None
    entry.write_bytes(binary_cache.encode(binary_cache.Record(rec.key, rec.meta,
                                                              {cuda_binary.CUBIN: b"not a cubin: another GPU's"})))
    refused = _run(tmp_path, "cold")
    assert refused == {"hit": True, "cubin": True, "host_ok": True, "dev_ok": True, "fast": True}
    again_rec = binary_cache.decode(entry.read_bytes(), entry.stem[2:])
    assert again_rec is not None and again_rec.blobs[cuda_binary.CUBIN].startswith(b"\x7fELF")

    entry.write_bytes(entry.read_bytes()[:-7])  # truncated: rebuilt, never used
    again = _run(tmp_path, "cold")  # the module file is still there: a module hit, compiled by numba
    assert again == {"hit": True, "cubin": False, "host_ok": True, "dev_ok": True, "fast": True}
    assert binary_cache.decode(entry.read_bytes(), entry.stem[2:]) is not None


@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_the_nvrtc_route_on_the_gpu(tmp_path: Path) -> None:
    """Cold: NVRTC's cubin, loaded and launched by the driver, saved at once; warm: the same entry."""
    from vyre.driver import nvrtc

    if nvrtc.find() is None:
        pytest.skip(f"no NVRTC: {nvrtc.unavailable()}")
    cold = _run(tmp_path, "cold", "nvrtc")
    assert cold == {"hit": False, "cubin": True, "host_ok": True, "dev_ok": True, "fast": True}
    warm = _run(tmp_path, "warm", "nvrtc")
    assert warm == {"hit": True, "cubin": True, "host_ok": True, "dev_ok": True, "fast": True}


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child_direct() if sys.argv[2] == "direct" else child()
