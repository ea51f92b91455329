"""``import vyre`` stays light: no numba, llvmlite or CUDA module until a backend needs one (checked
in a fresh interpreter; the timing itself lives in bench/startup_bench.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numba", "llvmlite", "numba_cuda", "cuda", "cupy", "torch", "filelock", "importlib.metadata")


def _loaded_after(code: str) -> list[str]:
    probe = code + f"\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}"
    probe += " or m in " + repr(HEAVY) + ")))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def test_import_vyre_imports_no_backend() -> None:
    assert _loaded_after("import vyre, vyre.ir") == []


def test_building_and_validating_a_program_imports_no_backend() -> None:
    code = ("import vyre\nfrom vyre.ir import F32, Program, gid, output, read, store\n"
            "x, out = read('x', 0, F32), output('out', 1, F32)\n"
            "Program.wrapped([x, out], 64, [store(out, gid(), x[gid()] * 2.0)]).validate().fingerprint()")
    assert _loaded_after(code) == []


def test_toolchain_versions_are_read_without_importlib_metadata() -> None:
    code = ("from vyre.driver.dispatch import dist_version\n"
            "for d, p in [('numba', None), ('numpy', None), ('numba-cuda', 'numba_cuda'), ('nvidia-nvvm', 'nvidia'),"
            " ('no-such-distribution', None)]:\n    dist_version(d, p)")
    assert _loaded_after(code) == []


def test_toolchain_versions_agree_with_importlib_metadata() -> None:
    from importlib.metadata import PackageNotFoundError, version

    from vyre.driver.dispatch import dist_version

    for dist, package in [("numba", None), ("numpy", None), ("blake3", None), ("numba-cuda", "numba_cuda"),
                          ("nvidia-nvvm", "nvidia"), ("no-such-distribution", None)]:
        try:
            want = version(dist)
        except PackageNotFoundError:
            want = "?"
        assert dist_version(dist, package) == want, dist


_DISPATCH = ("import numpy as np, vyre\nfrom vyre.examples import fused_chain\n"
             "x = np.ones({n}, np.float32)\n"
             "vyre.dispatch(fused_chain(), {{'x': x, 'y': x, 'out': np.empty_like(x)}}, backend='cpu')\n"
             "import sys\nprint('TUNER', 'vyre.tuning' in sys.modules)\n")


def _tuner_loaded(tmp: Path, n: int, **env: str) -> bool:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "VYRE_CACHE_DIR": str(tmp), **env}
    out = subprocess.run([sys.executable, "-c", _DISPATCH.format(n=n)], cwd=ROOT, env=full, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return out.strip().splitlines()[-1] == "TUNER True"


def test_a_first_dispatch_the_tuner_could_not_change_does_not_import_it(tmp_path: Path) -> None:
    # the tuner off, or too few invocations to measure, and no decision on disk: the default
    # launch, without importing vyre.tuning (about 40 ms of a new process's first dispatch)
    assert not _tuner_loaded(tmp_path, 1000, VYRE_AUTOTUNER="off")
    assert not _tuner_loaded(tmp_path, 1000, VYRE_AUTOTUNER="on")
    assert not _tuner_loaded(tmp_path, 1 << 16, VYRE_AUTOTUNER="off")
    # enough invocations with the tuner on: it measures
    assert _tuner_loaded(tmp_path, 1 << 16, VYRE_AUTOTUNER="on")
    # a decision on disk (that run saved one) may apply in every mode: the tuner is asked
    assert list((tmp_path / "tuner").glob("*.toml"))
    assert _tuner_loaded(tmp_path, 1000, VYRE_AUTOTUNER="off")


# -- a warm CUDA start: what the first dispatch of a kernel from the binary cache loads ---------------

# Modules a cache hit must not import: the lowering passes and emitters (no source is generated),
# the wire decoder (fingerprinting only encodes), the printer, the tuner (off, nothing on disk).
# (vyre.codegen.cuda also stands for cuda_c, the NVRTC route's printer; vyre.driver.nvrtc would load
# NVRTC itself)
LOWERING = ("vyre.codegen.interleave", "vyre.codegen.simplify", "vyre.codegen.pipeline", "vyre.codegen.cuda",
            "vyre.codegen.cpu", "vyre.codegen.inline", "vyre.codegen.flat", "vyre.codegen.bounds",
            "vyre.ir.wire_decode", "vyre.ir.printer", "vyre.driver.nvrtc", "vyre.tuning")


def _doubled() -> object:
    """``out[i] = x[i] * 2``: the program of the warm-start children."""
    from vyre.ir import F32, Program, buflen, gid, if_, let, output, store, var
    from vyre.ir import read as read_buffer

    x, out = read_buffer("x", 0, F32), output("out", 1, F32)
    i = var("i")
    return Program.wrapped([x, out], 64, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, x[i] * 2.0)])])


def _first_dispatch(program: object, inputs: dict[str, object], backend: str) -> tuple[dict[str, object], dict]:
    """Dispatch and report the vyre modules and the dataclasses that dispatch brought in."""
    import dataclasses

    import vyre

    before = set(sys.modules)
    made: list[str] = []
    process = dataclasses._process_class  # type: ignore[attr-defined]

    def spy(cls: type, *a: object, **k: object) -> object:
        made.append(f"{cls.__module__}.{cls.__qualname__}")
        return process(cls, *a, **k)

    dataclasses._process_class = spy  # type: ignore[attr-defined]
    try:
        r = vyre.dispatch(program, inputs, backend=backend)  # type: ignore[arg-type]
    finally:
        dataclasses._process_class = process  # type: ignore[attr-defined]
    return r, {"modules": sorted(m for m in set(sys.modules) - before if m.startswith("vyre")),
               "dataclasses": made, "numba": "numba" in sys.modules}


def _warm_cuda_child(mode: str) -> None:
    """``prep``: dispatch once through the fake driver (tests/fake_cuda.py), leaving a fake cubin in
    the binary cache under the kernel's key; ``run``: a fresh process's first dispatch of the same
    program, reporting what that dispatch brought in."""
    import numpy as np

    from tests.fake_cuda import FakeCuda, FakeDeviceArray, seed_cubins
    from vyre.driver import cuda_driver, fast_launch

    entry = "vyre_fake_kernel"
    fake = FakeCuda()
    cuda_driver.install(fake.driver())
    fast_launch._launcher = fake.launcher

    def kernel(arrays: list[np.ndarray], scalars: list[int], launch: object) -> None:
        x, out = arrays
        out[: scalars[0]] = x[: scalars[0]] * np.float32(2)

    fake.register(entry, [np.float32] * 2, 2, kernel)
    if mode == "prep":
        seed_cubins(entry)
    p = _doubled()
    xs = np.arange(300, dtype=np.float32)
    r, row = _first_dispatch(p, {"x": FakeDeviceArray(xs), "out": FakeDeviceArray(np.zeros_like(xs))}, "cuda")
    print(json.dumps({"ok": bool(np.array_equal(r["out"].data, xs * 2)),  # type: ignore[attr-defined]
                      "launches": len(fake.launches), **row}), flush=True)


def _warm_cpu_child(mode: str) -> None:
    """The first CPU dispatch of a process (``prep``: compiles through numba and writes the binary
    entry; ``run``: loads it), reporting what that dispatch brought in."""
    import numpy as np

    xs = np.arange(300, dtype=np.float32)
    r, row = _first_dispatch(_doubled(), {"x": xs, "out": np.zeros_like(xs)}, "cpu")
    print(json.dumps({"ok": bool(np.array_equal(r["out"], xs * 2)), **row}), flush=True)


def _warm_rows(tmp: Path, backend: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VYRE_CACHE_DIR": str(tmp), "VYRE_AUTOTUNER": "off"}
    for k in ("VYRE_BINARY_CACHE", "VYRE_BACKEND", "NUMBA_ENABLE_CUDASIM"):
        env.pop(k, None)
    rows = []
    for mode in ("prep", "run"):
        out = subprocess.run([sys.executable, "-m", "tests.test_startup", f"warm-{backend}", mode], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return dict(rows[1])


@pytest.mark.parametrize("backend", ["cuda", "cpu"])
def test_a_warm_dispatch_loads_no_lowering_module(tmp_path: Path, backend: str) -> None:
    """A kernel from the binary cache is keyed, read, loaded, checked and launched: no lowering
    pass, printer or wire decoder is imported, numba neither, and no dataclass is defined (0.5-1 ms
    each on a warm start: the records on that path are NamedTuples or plain classes)."""
    import importlib.util

    if backend == "cuda" and importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("the CUDA backend needs numba-cuda installed")
    run = _warm_rows(tmp_path, backend)
    # the CUDA child counts the fake driver's launches; the CPU child's result is its check
    assert run["ok"] and not run["numba"] and (backend == "cpu" or run["launches"] == 1)
    assert not [m for m in run["modules"] if m.startswith(LOWERING)], run["modules"]
    assert run["dataclasses"] == []
    # the hit path does import what it needs (a sanity check that this process ran from the cache)
    assert "vyre.driver.binary_cache" in run["modules"]
    assert ("vyre.driver.cuda_direct" if backend == "cuda" else "vyre.driver.native_cpu") in run["modules"]


if __name__ == "__main__":
    {"warm-cuda": _warm_cuda_child, "warm-cpu": _warm_cpu_child}[sys.argv[1]](sys.argv[2])
