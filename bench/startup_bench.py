"""Start-up benchmark: ``import vyre``, the first dispatch of a small kernel in a fresh process
(cold: empty kernel cache, on CUDA by each compile route; warm: the cache a previous process left),
and the dispatch of a Program
rebuilt before every call (as code that builds its programs inside a function does).

Every fresh-process number is the median of ``--runs`` processes (after one unmeasured round
that leaves the modules' compiled bytecode, as an installed package has it), with the tuner off
(``VYRE_AUTOTUNER=off``), wall and CPU time (the CPU time says how much of the wall time was this
process's own work on a loaded machine). Prints a markdown table (machine, date, commit);
``--record`` appends it to BENCHMARKS.md.

On CUDA the warm start is measured with numpy arrays (the first dispatch makes the CUDA context),
with the context made beforehand (so the table separates the driver's context creation from
vyre's own cost), and with PyTorch tensors and CuPy arrays whose library made the context first.
``--tree DIR`` runs the children on another checkout (a baseline, in the same session).

    python bench/startup_bench.py [--backend cpu|cuda] [--runs 5] [--record] [--tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
backend, setup = sys.argv[1], sys.argv[2]
w0, c0 = time.perf_counter(), time.process_time()
import numpy as np
w1, c1 = time.perf_counter(), time.process_time()
import vyre
w2, c2 = time.perf_counter(), time.process_time()
from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, sin, store, var
x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
i = var("i")
p = Program.wrapped([x, y, out], 256, [let("i", gid()),
    if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])])])
xs = np.linspace(0, 1, 4096, dtype=np.float32)
ws, cs = time.perf_counter(), time.process_time()
# what the process did before vyre's first dispatch, timed apart: the CUDA context made by the
# driver itself (cuInit + the primary context, as numba, CuPy and PyTorch make it), or PyTorch /
# CuPy imported with their arrays on the GPU (their context)
if setup == "context":
    import ctypes
    cu = ctypes.CDLL("libcuda.so.1")
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
    inputs = {"x": xs, "y": xs, "out": np.empty_like(xs)}
elif setup == "torch":
    import torch
    t = torch.from_numpy(xs).cuda()
    inputs = {"x": t, "y": t, "out": torch.empty_like(t)}
    torch.cuda.synchronize()
elif setup == "cupy":
    import cupy
    t = cupy.asarray(xs)
    inputs = {"x": t, "y": t, "out": cupy.empty_like(t)}
    cupy.cuda.runtime.deviceSynchronize()
else:
    inputs = {"x": xs, "y": xs, "out": np.empty_like(xs)}
w3, c3 = time.perf_counter(), time.process_time()
r = vyre.dispatch(p, inputs, backend=backend)["out"]
r = r if isinstance(r, np.ndarray) else (r.cpu().numpy() if hasattr(r, "cpu") else r.get() if hasattr(r, "get")
                                         else r.copy_to_host())
w4, c4 = time.perf_counter(), time.process_time()
vyre.dispatch(p, inputs, backend=backend)
w5 = time.perf_counter()
ok = bool(np.allclose(r, np.exp(xs) * xs + np.sin(xs) * xs, rtol=1e-5, atol=1e-6))
print(json.dumps({"numpy": [w1 - w0, c1 - c0], "vyre": [w2 - w1, c2 - c1], "setup": [w3 - ws, c3 - cs],
                  "first": [w4 - w3, c4 - c3], "second": [w5 - w4, 0.0], "ok": ok,
                  "numba": "numba" in sys.modules}))
"""


BREAKDOWN = r"""
import json, sys, time
t = [time.perf_counter()]
def lap():
    t.append(time.perf_counter())
    return (t[-1] - t[-2]) * 1e3
import numpy as np
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
ms = {"dlopen libcuda": lap()}
assert cu.cuInit(0) == 0
ms["cuInit"] = lap()
ctx, dev = ctypes.c_void_p(), ctypes.c_int()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
ms["primary context"] = lap()
import vyre
ms["import vyre"] = lap()
from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, sin, store, var
x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
i = var("i")
p = Program.wrapped([x, y, out], 256, [let("i", gid()),
    if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])])])
xs = np.linspace(0, 1, 4096, dtype=np.float32)
ms["build program"] = lap()
# vyre.compile's steps one by one (each imports what it needs; compile then repeats them cheaply)
from vyre.driver.backend import backend
from vyre.driver.backends import check_backend
from vyre.driver.dispatch import _versions
check_backend("cuda")
ms["compile: backend available (driver probe)"] = lap()
p.validate()
ms["compile: validate"] = lap()
p.fingerprint()
ms["compile: fingerprint"] = lap()
_versions("cuda")
ms["compile: toolchain versions"] = lap()
backend("cuda").target_parts()
ms["compile: compute capability"] = lap()
k = vyre.compile(p, "cuda")
ms["compile: the rest (key, binary cache read)"] = lap()
k._fn.handle()
ms["cuModuleLoadData"] = lap()
o = np.empty_like(xs)
k({"x": xs, "y": xs, "out": o}, tune=True)
ms["first call (checks, copies, launch)"] = lap()
k({"x": xs, "y": xs, "out": o}, tune=True)
ms["second call"] = lap()
print(json.dumps({"ms": ms, "numba": "numba" in sys.modules, "cubin": type(k._fn).__name__}))
"""


def breakdown(tree: Path) -> list[str]:
    """Where a warm first dispatch's time goes (one fresh process, kernel cache left by the last
    run of :func:`child`): the driver's own start apart from vyre's steps."""
    with tempfile.TemporaryDirectory(prefix="vyre-startup-") as d:
        child("cuda", d, tree=tree)
        env = {**_env(), "VYRE_CACHE_DIR": d, "VYRE_AUTOTUNER": "off",
               "PYTHONPATH": os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)}
        out = subprocess.run([sys.executable, "-c", BREAKDOWN], env=env, capture_output=True, text=True,
                             timeout=600, cwd=tree)
    if out.returncode != 0:
        return [f"breakdown failed: {out.stderr[-2000:]}"]
    row = json.loads(out.stdout.strip().splitlines()[-1])
    return ["", f"One warm process, step by step (kernel {row['cubin']}, numba imported: {row['numba']}):", "",
            "| step | ms |", "|---|---|", *(f"| {k} | {v:.2f} |" for k, v in row["ms"].items())]


_PYC = tempfile.mkdtemp(prefix="vyre-startup-pyc-")


def _env() -> dict[str, str]:
    """The children's environment: compiled bytecode kept (in a folder of this run), as an installed
    package has it: with ``PYTHONDONTWRITEBYTECODE`` every child would compile vyre's modules from
    source, tens of milliseconds that no installed vyre pays."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": _PYC}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def child(backend: str, cache_dir: str, extra: dict[str, str] | None = None, setup: str = "none",
          tree: Path = ROOT) -> dict:
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    env = {**_env(), "VYRE_CACHE_DIR": cache_dir, "VYRE_AUTOTUNER": "off", "PYTHONPATH": path,
           **(extra or {})}
    out = subprocess.run([sys.executable, "-c", CHILD, backend, setup], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tree)
    if out.returncode != 0:
        raise SystemExit(f"child failed:\n{out.stderr[-3000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if not row["ok"]:
        raise SystemExit("wrong result in the child")
    print(setup, json.dumps(row), file=sys.stderr, flush=True)  # progress (a run cut short still says)
    return row


def med(rows: list[dict], key: str, k: int) -> float:
    return statistics.median(r[key][k] for r in rows)


def rebuilt_dispatch_us(backend: str, reps: int = 3000) -> tuple[float, float]:
    """(same Program object, rebuilt Program) microseconds per dispatch, in this process."""
    import numpy as np

    import vyre
    from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, sin, store, var

    def build() -> Program:
        x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
        i = var("i")
        return Program.wrapped([x, y, out], 256, [let("i", gid()),
                               if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])])])

    if backend == "cuda":
        from numba import cuda

        xs = cuda.to_device(np.linspace(0, 1, 1024, dtype=np.float32))
        o = cuda.device_array(1024, np.float32)
    else:
        xs = np.linspace(0, 1, 1024, dtype=np.float32)
        o = np.empty_like(xs)
    inputs = {"x": xs, "y": xs, "out": o}
    p = build()
    for _ in range(50):
        vyre.dispatch(p, inputs, backend=backend)
    programs = [build() for _ in range(reps)]
    vyre.dispatch(programs[0], inputs, backend=backend)

    def timed(seq: list[Program]) -> float:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for q in seq:
                vyre.dispatch(q, inputs, backend=backend)
            best = min(best, (time.perf_counter() - t) / len(seq) * 1e6)
        return best

    same = timed([p] * reps)
    rebuilt = timed(programs[1:])  # each object dispatched for the first time: structure lookup
    if backend == "cuda":
        cuda.synchronize()
    return same, rebuilt


def machine(backend: str) -> str:
    if backend == "cuda":
        from numba import cuda

        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"


def _setups(backend: str) -> list[str]:
    """The warm variants: numpy arrays (the first dispatch makes the CUDA context), the context made
    first, and device arrays of PyTorch / CuPy (their context made by them) where installed."""
    if backend != "cuda":
        return ["none"]
    import importlib.util

    return ["none", "context"] + [m for m in ("torch", "cupy") if importlib.util.find_spec(m) is not None]


SETUP_NAMES = {"none": "numpy arrays", "context": "numpy arrays, CUDA context made first",
               "torch": "PyTorch tensors (PyTorch made the context)", "cupy": "CuPy arrays (CuPy made the context)"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the vyre checkout the children import (a baseline)")
    ap.add_argument("--no-numba-cache-row", action="store_true", help="skip the VYRE_BINARY_CACHE=0 rows")
    ap.add_argument("--no-rebuilt", action="store_true", help="skip the rebuilt-Program dispatch timing")
    ap.add_argument("--breakdown", action="store_true", help="CUDA: time a warm first dispatch step by step")
    ap.add_argument("--no-numba-route-row", action="store_true",
                    help="CUDA: skip the cold row compiled by numba (VYRE_CUDA_COMPILER=numba)")
    ap.add_argument("--setups", default=None, help="CUDA: the warm variants to run, e.g. none,context,torch")
    args = ap.parse_args()
    tree = args.tree.resolve()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                            text=True).stdout.strip() or "?"
    head = f"### Start-up ({args.backend}): {machine(args.backend)}, {time.strftime('%Y-%m-%d')}, commit {commit}"
    setups = _setups(args.backend)
    if args.setups is not None:
        setups = [x for x in setups if x in args.setups.split(",")]
    warm_names = [f"warm, {SETUP_NAMES[s]}" if args.backend == "cuda" else "warm" for s in setups]
    # cold starts by compile route (vyre/driver/cuda_route.py): the default (NVRTC where found), with the
    # CUDA context made first too, and numba's, each in a fresh empty cache
    cold_rows: list[tuple[str, str, dict[str, str]]] = [("cold", "none", {})]
    if args.backend == "cuda":
        cold_rows += [("cold, CUDA context made first", "context", {}),
                      ("cold, numba route (VYRE_CUDA_COMPILER=numba), context made first", "context",
                       {"VYRE_CUDA_COMPILER": "numba"})]
        if args.no_numba_route_row:
            cold_rows.pop()
    rows: dict[str, list[dict]] = {**{n: [] for n, _, _ in cold_rows}, **{n: [] for n in warm_names}}
    if not args.no_numba_cache_row:
        rows["warm, numba's cache (VYRE_BINARY_CACHE=0)"] = []
    with tempfile.TemporaryDirectory(prefix="vyre-startup-") as d:  # unmeasured: writes the bytecode
        child(args.backend, d, tree=tree)
        for s in setups:
            try:
                child(args.backend, d, setup=s, tree=tree)
            except SystemExit:
                pass
    for _ in range(args.runs):
        for name, s_, extra in cold_rows[1:]:
            with tempfile.TemporaryDirectory(prefix="vyre-startup-") as d2:
                rows[name].append(child(args.backend, d2, extra, setup=s_, tree=tree))
        with tempfile.TemporaryDirectory(prefix="vyre-startup-") as d:
            rows["cold"].append(child(args.backend, d, tree=tree))  # its cache is the warm rows'
            for name, s in zip(warm_names, setups, strict=True):
                try:
                    rows[name].append(child(args.backend, d, setup=s, tree=tree))
                except SystemExit as e:
                    if s == "none":
                        raise
                    print(f"{name}: {e}", file=sys.stderr)  # PyTorch / CuPy broken here: that row is left out
        if not args.no_numba_cache_row:
            with tempfile.TemporaryDirectory(prefix="vyre-startup-") as d:
                # numba's own cache: on CUDA its route (the NVRTC route keeps nothing without the binary cache)
                no_bin = {"VYRE_BINARY_CACHE": "0"}
                if args.backend == "cuda":
                    no_bin["VYRE_CUDA_COMPILER"] = "numba"
                child(args.backend, d, no_bin, tree=tree)
                rows["warm, numba's cache (VYRE_BINARY_CACHE=0)"].append(child(args.backend, d, no_bin, tree=tree))
    lines = [head, "",
             f"Median of {args.runs} fresh processes each, tuner off; wall (CPU) seconds. *before*: what the "
             "process did before vyre's first dispatch (CUDA context, PyTorch/CuPy import and arrays), timed apart.",
             "",
             "| | import numpy | import vyre (after numpy) | before | first dispatch | second | numba imported |",
             "|---|---|---|---|---|---|---|"]
    for name, rs in rows.items():
        if not rs:
            continue
        lines.append(f"| {name} | {med(rs, 'numpy', 0):.3f} ({med(rs, 'numpy', 1):.3f}) | "
                     f"{med(rs, 'vyre', 0):.3f} ({med(rs, 'vyre', 1):.3f}) | "
                     f"{med(rs, 'setup', 0):.3f} | "
                     f"{med(rs, 'first', 0):.4f} ({med(rs, 'first', 1):.4f}) | {med(rs, 'second', 0) * 1e6:.0f} us | "
                     f"{'yes' if any(r['numba'] for r in rs) else 'no'} |")
    if not args.no_rebuilt:
        sys.path.insert(0, str(tree))
        same, rebuilt = rebuilt_dispatch_us(args.backend)
        lines += ["", f"Dispatch of a 1024-element kernel: the same Program object {same:.1f} us, a Program rebuilt "
                  f"before every call {rebuilt:.1f} us (best of 3 x 3000)."]
    if args.breakdown and args.backend == "cuda":
        lines += breakdown(tree)
    for name in (n for n in warm_names if rows[n]):
        lines.append(f"Warm first dispatch after import ({name}): {med(rows[name], 'first', 0) * 1e3:.1f} ms wall, "
                     f"{med(rows[name], 'first', 1) * 1e3:.1f} ms CPU.")
    text = "\n".join(lines)
    print(text, flush=True)
    shutil.rmtree(_PYC, ignore_errors=True)
    if args.record:
        with open(ROOT / "BENCHMARKS.md", "a", encoding="utf-8") as f:
            f.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
