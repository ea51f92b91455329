"""vyre over Dask: compile sharing across worker processes (CPU) and multi-GPU scaling (CUDA).

    python bench/dask_bench.py cache           # CPU: N worker processes, cold vs shared disk cache
    python bench/dask_bench.py gpus [log2 n] [log2 chunk]   # CUDA: chain + sum over n f32,
                                                             # 1 GPU vs all GPUs vs CuPy-on-Dask

Prints markdown tables (paste into BENCHMARKS.md with machine, date, commit).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np


def _chain_program():
    from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, sin, store, var

    x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    return Program.wrapped([x, y, out], 256, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])]),
    ])


def _worker_kernels() -> list[tuple[bool, float]]:
    from vyre.driver import dispatch

    return [(k.cache_hit, round(k.compile_seconds, 3)) for k in dispatch._kernels.values()]


def cache_section(workers: int = 2) -> None:
    import dask.array as da
    import distributed

    import vyre.dask

    root = tempfile.mkdtemp(prefix="vyre-dask-cache-")
    os.environ["VYRE_CACHE_DIR"] = root  # inherited by the worker processes
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    dx = da.from_array(x, chunks=1 << 17)
    print("| run | workers | first compute (s) | kernels per worker (cache hit, compile s) |")
    print("|---|---|---|---|")
    for run in ("cold disk cache", "warm disk cache (new processes)"):
        with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                      dashboard_address=None, silence_logs=40) as cluster, \
                distributed.Client(cluster) as client:
            client.run(lambda: None)  # workers up before the clock starts
            t0 = time.perf_counter()
            client.compute(vyre.dask.map_blocks(_chain_program(), {"x": dx, "y": dx}, "out",
                                                backend="cpu")).result()
            dt = time.perf_counter() - t0
            stats = client.run(_worker_kernels)
        print(f"| {run} | {workers} | {dt:.2f} | {list(stats.values())} |")


def gpus_section(log2n: int = 30, log2chunk: int = 27) -> None:
    import cupy
    import dask
    import dask.array as da

    import vyre
    import vyre.dask

    n = 1 << log2n
    ngpu = cupy.cuda.runtime.getDeviceCount()
    chunk = 1 << log2chunk
    p = _chain_program()

    def on_devices(devices: list[int]) -> tuple[da.Array, da.Array]:
        parts_x, parts_y = [], []
        per = n // len(devices)
        for d in devices:
            with cupy.cuda.Device(d):
                rng = cupy.random.default_rng(d)
                parts_x.append(da.from_array(rng.standard_normal(per, dtype=cupy.float32), chunks=chunk,
                                             asarray=False))
                parts_y.append(da.from_array(rng.standard_normal(per, dtype=cupy.float32), chunks=chunk,
                                             asarray=False))
        return da.concatenate(parts_x), da.concatenate(parts_y)

    def cupy_chain(x, y):
        with cupy.cuda.Device(x.device.id):
            return cupy.exp(x) * y + cupy.sin(x) * x

    def dev_sum(c):
        with cupy.cuda.Device(c.device.id):  # on the chunk's own GPU, finished before the task ends
            return cupy.asnumpy(c.sum(dtype=cupy.float64)).reshape(1)

    def total(arr):
        return arr.map_blocks(dev_sum, chunks=((1,) * arr.numblocks[0],), dtype=np.float64,
                              meta=np.empty((0,), np.float64)).sum()

    def sync_all() -> None:
        for d in range(ngpu):
            with cupy.cuda.Device(d):
                cupy.cuda.runtime.deviceSynchronize()

    def timed(build, reps: int = 5) -> float:
        best = float("inf")
        for _ in range(reps):
            graph = build()
            sync_all()
            t0 = time.perf_counter()
            dask.compute(graph, scheduler="threads", num_workers=2 * ngpu)
            sync_all()
            best = min(best, time.perf_counter() - t0)
        return best

    rows = []
    for label, devs in (("1 GPU", [0]), (f"{ngpu} GPUs", list(range(ngpu)))):
        dx, dy = on_devices(devs)
        got, want = dask.compute(vyre.dask.reduce("sum", vyre.dask.map_blocks(p, {"x": dx, "y": dy}, "out",
                                                                              backend="cuda"), backend="cuda"),
                                 total(da.map_blocks(cupy_chain, dx, dy, dtype=np.float32)), scheduler="threads")
        ref = 0.0
        for part_x, part_y in zip(dx.blocks, dy.blocks, strict=True):  # one chunk at a time, on its GPU
            cx, cy = part_x.compute(scheduler="sync"), part_y.compute(scheduler="sync")
            with cupy.cuda.Device(cx.device.id):
                ref += float((cupy.exp(cx.astype(cupy.float64)) * cy + cupy.sin(cx.astype(cupy.float64)) * cx).sum())
        for name, val in (("vyre", got), ("CuPy-on-Dask", want)):
            assert abs(float(val) - ref) <= 1e-4 * abs(ref), f"{label}: {name} {float(val)} vs float64 {ref}"
        print(f"{label}: sum {float(got):.6e} (float64 reference {ref:.6e})")
        t_vyre = timed(lambda dx=dx, dy=dy: vyre.dask.reduce(
            "sum", vyre.dask.map_blocks(p, {"x": dx, "y": dy}, "out", backend="cuda"), backend="cuda"))
        t_cupy = timed(lambda dx=dx, dy=dy: total(da.map_blocks(cupy_chain, dx, dy, dtype=np.float32)))
        rows.append((label, t_vyre, t_cupy))
    gb = 3 * 4 * n / 1e9  # x, y read, out written
    print(f"chain + sum over 2^{log2n} f32 in chunks of 2^{log2chunk}, threaded Dask scheduler, best of 5")
    print("| devices | vyre (ms) | vyre GB/s | CuPy-on-Dask (ms) | vyre speed-up vs 1 GPU |")
    print("|---|---|---|---|---|")
    for label, tv, tc in rows:
        print(f"| {label} | {tv * 1e3:.1f} | {gb / tv:.0f} | {tc * 1e3:.1f} | {rows[0][1] / tv:.2f}x |")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "cache"
    if what == "cache":
        cache_section()
    elif what == "gpus":
        gpus_section(*(int(a) for a in sys.argv[2:4]))
    else:
        raise SystemExit(__doc__)
