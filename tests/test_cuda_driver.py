"""The CUDA path without numba (vyre/driver/cuda_driver.py, cuda_direct.py, cuda_binary.py), on the
CPU: a fake libcuda (tests/fake_cuda.py) behind real ctypes function pointers stands in for the
driver, host memory for device memory, and Python kernels for the cubin's entry points.

What is checked: the driver calls' marshalling and error reports; the primary context made
current as numba would; a cached cubin loaded per context, a refused one deleted and the program
compiled again; the launch over CAI and numpy arrays against the reference interpreter (argument
ABI, copies in and out, memory freed, results where the checked path puts them), which calls go
to numba's path instead, the cached launch left behind; and, in a child process, a whole
``vyre.dispatch`` from the binary cache with numba never imported.

    python -m tests.test_cuda_driver child MODE   # a fresh process dispatching through the fake driver
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fake_cuda import FakeCuda, FakeDeviceArray, fake_cubin, seed_cubins
from vyre.driver import binary_cache, cuda_binary, cuda_driver, cuda_launch, fast_launch
from vyre.driver.cuda_driver import CudaDriverError
from vyre.driver.dispatch import Kernel, compile as vcompile
from vyre.errors import DispatchError
from vyre.ir import U32, Program, buflen, gid, if_, let, output, read, store, var

ROOT = Path(__file__).resolve().parent.parent
ENTRY = "vyre_fake_kernel"


def program(wg: int = 64) -> Program:
    x, y, out = read("x", 0, U32), read("y", 1, U32), output("out", 2, U32)
    i = var("i")
    return Program.wrapped([x, y, out], wg, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, x[i] * 3 + y[i])])])


def fake_kernel(flat: bool) -> Any:
    """``out[i] = x[i] * 3 + y[i]`` for the invocations a launch covers (u32, wrapping)."""

    def run(arrays: list[np.ndarray], scalars: list[int], launch: dict[str, Any]) -> None:
        x, y, out = arrays
        threads = launch["grid"][0] * launch["block"][0]
        if flat:
            n, ipt = scalars
            assert threads * ipt >= n, "the launch does not cover the invocations"
            m = min(n, out.size)
        else:
            assert scalars == []
            m = min(threads, out.size)
        with np.errstate(over="ignore"):
            out[:m] = x[:m] * np.uint32(3) + y[:m]

    return run


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeCuda]:
    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    f = FakeCuda()
    previous = cuda_driver.install(f.driver())
    monkeypatch.setattr(fast_launch, "_launcher", f.launcher)
    try:
        yield f
    finally:
        cuda_driver.install(previous)
    assert not f.errors, f.errors  # an assert inside a fake kernel or driver call


def cubin_kernel(f: FakeCuda, flat: bool = True, wg: int = 64) -> Kernel:
    f.register(ENTRY, [np.uint32] * 3, 2 if flat else 0, fake_kernel(flat))
    key = "c" * 40
    return Kernel(program(wg), "cuda", None, key, True, 0.0, cuda_binary.CubinKernel(fake_cubin(ENTRY), ENTRY, key),
                  flat)


# -- the driver calls ---------------------------------------------------------------------------------


def test_device_queries_and_the_primary_context(fake: FakeCuda) -> None:
    drv = cuda_driver.driver()
    assert drv.device_count() == 1 and drv.compute_capability(0) == (9, 0) and drv.name(0) == "Fake GPU 0"
    assert drv.version() == (12, 4)
    assert drv.current_context() == 0 and drv.current_device() == 0
    assert drv.thread_device() == 0  # none current: device 0's primary context, made current
    assert fake.current() == 0x1000
    assert drv.thread_device() == 0 and fake.retained == [0]  # retained once
    fake._cuCtxSetCurrent(0x7777)  # a context someone created: not a primary one
    assert drv.thread_device() is None
    with pytest.raises(CudaDriverError, match=r"cuDeviceGet failed with CUDA_ERROR_INVALID_DEVICE \(101\)"):
        drv.compute_capability(3)


def test_memory_round_trip_and_errors(fake: FakeCuda) -> None:
    drv = cuda_driver.driver()
    src = np.arange(10, dtype=np.float64)
    ptr = drv.alloc(src.nbytes)
    assert ptr in fake.memory and drv.alloc(0) == 0
    drv.to_device(ptr, src.ctypes.data, src.nbytes)
    back = np.zeros_like(src)
    drv.to_host(back.ctypes.data, ptr, back.nbytes)
    assert np.array_equal(back, src)
    assert drv.pointer_device(ptr) == 0
    drv.free(ptr)
    assert not fake.memory
    with pytest.raises(CudaDriverError, match="cuMemFree_v2 failed with CUDA_ERROR_INVALID_VALUE") as e:
        drv.free(ptr)
    assert "Fix:" in str(e.value) and isinstance(e.value, DispatchError) and e.value.code == 1
    fake.fail["cuMemAlloc_v2"] = 2
    with pytest.raises(CudaDriverError, match=r"CUDA_ERROR_OUT_OF_MEMORY.*Fix: free device memory"):
        drv.alloc(8)
    fake.fail["cuMemAlloc_v2"] = 12345  # a code the driver cannot name
    with pytest.raises(CudaDriverError, match=r"CUDA error 12345 \(12345\)"):
        drv.alloc(8)


def test_no_driver_or_no_device_is_not_available() -> None:
    for f in (FakeCuda(devices=0), FakeCuda(init_status=100)):
        previous = cuda_driver.install(f.driver())
        try:
            assert cuda_driver.probe() is False
        finally:
            cuda_driver.install(previous)


def test_a_device_error_while_loading_keeps_the_entry(fake: FakeCuda) -> None:
    key = "d" * 40
    rec = binary_cache.Record(key, {"entry": ENTRY, "flat": True, "format": cuda_binary.CUDA_BINARY_VERSION},
                              {cuda_binary.CUBIN: fake_cubin(ENTRY)})
    assert binary_cache.write("cuda", rec) is not None
    found = cuda_binary.load(key)
    assert found is not None
    fake.fail["cuModuleLoadData"] = 2  # out of memory: the cubin is fine
    with pytest.raises(CudaDriverError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        found[0].handle()
    assert binary_cache.path_for("cuda", key).exists()
    del fake.fail["cuModuleLoadData"]
    assert fake.functions[found[0].handle()] == ENTRY


def test_the_cubin_loads_once_per_context(fake: FakeCuda) -> None:
    k = cuda_binary.CubinKernel(fake_cubin("a", ENTRY), ENTRY, "k" * 40)
    h = k.handle()
    assert fake.functions[h] == ENTRY and k.handle() == h and len(fake.modules) == 1
    assert fake.current() == 0x1000  # loaded into the primary context it made current
    fake._cuCtxSetCurrent(0x7777)
    assert k.handle() != h and len(fake.modules) == 2  # another context: loaded there too


@pytest.mark.parametrize("image, entry", [(b"\x7fELF not a fake cubin", ENTRY), (fake_cubin("other"), ENTRY)],
                         ids=["refused image", "missing entry"])
def test_a_refused_cubin_is_deleted_and_compiled_again(fake: FakeCuda, image: bytes, entry: str) -> None:
    key = "b" * 40
    rec = binary_cache.Record(key, {"entry": entry, "flat": True, "format": cuda_binary.CUDA_BINARY_VERSION},
                              {cuda_binary.CUBIN: image})
    assert binary_cache.write("cuda", rec) is not None
    found = cuda_binary.load(key)
    assert found is not None
    cubin = found[0]
    with pytest.raises(cuda_binary.CubinLoadError, match=r"could not be loaded .*Fix: dispatch again"):
        cubin.handle()
    assert not binary_cache.path_for("cuda", key).exists()  # never used again
    kernel = cubin_kernel(fake)
    kernel._fn = cubin
    rebuilt = object()
    cubin.rebuild = lambda: type("B", (), {"fn": rebuilt, "source": "src", "save_binary": None})()
    cuda_binary.ensure_loadable(kernel)
    assert kernel._fn is rebuilt and kernel.source == "src" and kernel.cache_hit is False


# -- the launch without numba ---------------------------------------------------------------------------


class Fallback(Exception):
    pass


def _no_numba_path(*a: Any, **k: Any) -> Any:
    raise Fallback


def _oracle(inputs: dict[str, np.ndarray]) -> np.ndarray:
    got = vcompile(program(), "interp")({k: v.copy() for k, v in inputs.items()})
    return np.asarray(got["out"])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 700), kinds=st.tuples(*[st.sampled_from(["numpy", "device"])] * 3),
       return_device=st.sampled_from([None, True, False]), flat=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_the_launch_without_numba_matches_the_interpreter(n: int, kinds: tuple[str, str, str],
                                                          return_device: bool | None, flat: bool, seed: int) -> None:
    f = FakeCuda()
    previous = cuda_driver.install(f.driver())
    saved_launcher, saved_checked = fast_launch._launcher, cuda_launch._launch_checked
    fast_launch._launcher, cuda_launch._launch_checked = f.launcher, _no_numba_path  # type: ignore[assignment]
    try:
        rng = np.random.default_rng(seed)
        host = {"x": rng.integers(0, 2**32, n, dtype=np.uint32), "y": rng.integers(0, 2**32, n, dtype=np.uint32),
                "out": rng.integers(0, 2**32, n, dtype=np.uint32)}
        want = _oracle(host)
        kernel = cubin_kernel(f, flat)
        inputs: dict[str, Any] = {k: (FakeDeviceArray(v) if kind == "device" else v)
                                  for (k, v), kind in zip(host.items(), kinds, strict=True)}
        any_device = "device" in kinds
        to_device = any_device if return_device is None else return_device
        grid = None if flat else (max(1, -(-n // 64)),)
        if to_device and kinds[2] == "numpy":  # numpy results wanted as device arrays: numba's path
            with pytest.raises(Fallback):
                kernel(inputs, return_device=return_device, grid=grid)
            assert not f.launches
            return
        out = kernel(inputs, return_device=return_device, grid=grid)["out"]
        assert len(f.launches) == 1 and not f.memory  # one launch, every device copy freed
        assert np.array_equal(host["out"], want)  # written in place (through the fake device memory too)
        if to_device:
            assert out is inputs["out"]
        elif kinds[2] == "numpy":
            assert out is host["out"]
        else:
            assert isinstance(out, np.ndarray) and out is not host["out"] and np.array_equal(out, want)
        # only device arrays wanted back on the device leave a cached launch for repeats
        assert (kernel._fast is not None) == (to_device and "numpy" not in kinds)
        if kernel._fast is not None:
            assert kernel._fast.matches(inputs, grid, return_device)
            assert kernel._fast(inputs) == {"out": inputs["out"]} and len(f.launches) == 2
    finally:
        cuda_driver.install(previous)
        fast_launch._launcher, cuda_launch._launch_checked = saved_launcher, saved_checked  # type: ignore[assignment]
        assert not f.errors, f.errors  # an assert inside the fake kernel or driver (the root cause, if any)


def test_calls_the_direct_path_leaves_to_numba(fake: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_launch, "_launch_checked", _no_numba_path)
    k = cubin_kernel(fake)
    x = np.arange(8, dtype=np.uint32)
    dev = FakeDeviceArray(x.copy())
    for inputs in ({"x": x, "y": x},  # "out" left out: allocated, handed back as a numba array
                   {"x": x, "y": [1, 2, 3, 4, 5, 6, 7, 8], "out": x.copy()}):  # a list
        with pytest.raises(Fallback):
            k(inputs)
    with pytest.raises(Fallback):  # host arrays with a PyTorch stream: ordering needs numba's copies
        monkeypatch.setattr(cuda_launch, "launch_stream", lambda i: 77)
        from vyre.driver import cuda_direct

        monkeypatch.setattr(cuda_direct, "launch_stream", lambda i: 77)
        k({"x": x, "y": dev, "out": x.copy()})
    assert not fake.launches
    monkeypatch.undo()


def test_checks_are_the_checked_paths(fake: FakeCuda) -> None:
    k = cubin_kernel(fake)
    x = np.arange(8, dtype=np.uint32)
    with pytest.raises(DispatchError, match="buffer 'x' has dtype float32, expected uint32"):
        k({"x": FakeDeviceArray(x.astype(np.float32)), "y": x, "out": x.copy()})
    with pytest.raises(DispatchError, match="'out' is written by the program but the device array is read-only"):
        k({"x": x, "y": x, "out": FakeDeviceArray(x.copy(), readonly=True)})
    shared = FakeDeviceArray(x.copy())
    with pytest.raises(DispatchError, match=r"overlap|share"):
        k({"x": shared, "y": x, "out": shared})
    with pytest.raises(DispatchError, match="unknown buffer 'z'"):
        k({"x": x, "y": x, "out": x.copy(), "z": x})
    assert not fake.launches and not fake.memory


def test_a_producer_stream_is_waited_for(fake: FakeCuda) -> None:
    k = cubin_kernel(fake)
    x = np.arange(8, dtype=np.uint32)
    k({"x": FakeDeviceArray(x, stream=0xABC), "y": FakeDeviceArray(x, stream=1), "out": FakeDeviceArray(x.copy())})
    assert fake.synced == [0xABC]  # the legacy stream (1) is ordered before our launch already


def test_a_failed_launch_frees_its_copies(fake: FakeCuda) -> None:
    k = cubin_kernel(fake)
    k._fn.handle()
    fake.functions.clear()  # the launch now fails (invalid handle)
    x = np.arange(8, dtype=np.uint32)
    with pytest.raises(DispatchError, match="refused the launch"):
        k({"x": x, "y": x, "out": x.copy()})
    assert not fake.memory


# -- a whole process --------------------------------------------------------------------------------------


def child(mode: str) -> None:
    """Dispatch through the fake driver: the binary cache's first lookup of a CUDA kernel finds a
    fake cubin written just then (what an earlier process would have left)."""
    f = FakeCuda()
    cuda_driver.install(f.driver())
    fast_launch._launcher = f.launcher
    f.register(ENTRY, [np.uint32] * 3, 2, fake_kernel(True))
    seed_cubins(ENTRY)
    import vyre
    from vyre.codegen import cuda as codegen_cuda  # only to prove it is not called
    from vyre.driver.dispatch import _kernel_for

    def no(*a: object, **k: object) -> object:
        raise AssertionError("the emitter ran on a binary cache hit")

    codegen_cuda.emit_cuda = no  # type: ignore[assignment]
    x = np.arange(5000, dtype=np.uint32)
    p = program()
    if mode == "device":
        inputs: dict[str, Any] = {"x": FakeDeviceArray(x), "y": FakeDeviceArray(x), "out": FakeDeviceArray(x * 0)}
    else:
        inputs = {"x": x, "y": x, "out": x * 0}
    for _ in range(3):
        r = vyre.dispatch(p, inputs, backend="cuda" if mode != "default" else None)
    out = r["out"].data if mode == "device" else r["out"]
    print(json.dumps({"ok": bool(np.array_equal(out, x * 4)), "launches": len(f.launches),
                      "numba": sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "numba_cuda", "llvmlite")),
                      "fast": _kernel_for(p, "cuda")._fast is not None}), flush=True)


@pytest.mark.parametrize("mode", ["device", "numpy", "default"])
@pytest.mark.parametrize("tuner", ["off", "on"])
def test_a_process_dispatches_from_the_binary_cache_without_numba(tmp_path: Path, mode: str, tuner: str) -> None:
    import importlib.util

    if importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("the CUDA backend needs numba-cuda installed")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "VYRE_CACHE_DIR": str(tmp_path), "VYRE_AUTOTUNER": tuner, "PYTHONPATH": path}
    for k in ("VYRE_BINARY_CACHE", "VYRE_BACKEND", "NUMBA_ENABLE_CUDASIM"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-m", "tests.test_cuda_driver", "child", mode], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0 and len(rows) == 1, out.stderr[-3000:]
    # device arrays: the first call launches, the repeats take the cached launch (same fake driver)
    assert rows[0] == {"ok": True, "launches": 3, "numba": [], "fast": mode != "numpy" and mode != "default"}


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2])
