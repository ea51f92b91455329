"""vyre over Dask: compile sharing across worker processes (CPU) and multi-GPU scaling (CUDA).

    python bench/dask_bench.py cache           # CPU: N worker processes, cold vs shared disk cache
    python bench/dask_bench.py gpus [log2 n] [log2 chunk] [passes] [on_gpus|concat] [all|vyre]  # CUDA: chain
                                     # + sum over n f32, 1 GPU vs all GPUs vs CuPy-on-Dask (1 pass per
                                     # compute, and `passes` passes per compute: throughput); chunks
                                     # placed by vyre.dask.on_gpus, or per GPU and concatenated
    python bench/dask_bench.py check                        # CUDA: results over CuPy chunks
    python bench/dask_bench.py overhead [log2 n [log2 chunk ...]]  # CUDA, one GPU: per-chunk host cost
                                                             # (many small chunks), GPU-busy share
    python bench/dask_bench.py host            # CPU: Dask's host time per compute of the gpus graphs

Prints markdown tables (paste into BENCHMARKS.md with machine, date, commit).
"""

from __future__ import annotations

import functools
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


def gpus_section(log2n: int = 30, log2chunk: int = 27, passes: int = 8, layout: str = "on_gpus",
                 columns: str = "all") -> None:
    """The chain + sum over 2^log2n f32 (chunks of 2^log2chunk) on 1 GPU and on all of them, vyre
    against CuPy-on-Dask with the same chunks, and the Dask floor (the same graph with tasks that
    do nothing). Two timings: one pass per ``dask.compute`` (latency: Dask's per-compute cost
    included), and ``passes`` independent passes over the same data in one compute (throughput:
    the GPUs' steady state, the per-compute cost spread over the passes). ``layout``: how the
    chunks are placed (see ``on_devices``). ``columns="vyre"`` times vyre alone (4 threads), e.g.
    for a baseline tree in the same run: the other columns do not depend on vyre."""
    import cupy
    import dask
    import dask.array as da

    import vyre
    import vyre.dask

    n = 1 << log2n
    ngpu = cupy.cuda.runtime.getDeviceCount()
    chunk = 1 << log2chunk
    p = _chain_program()
    with cupy.cuda.Device(0):  # the data, made once on GPU 0 (the same numbers for every layout)
        rng = cupy.random.default_rng(0)
        host_x, host_y = (rng.standard_normal(n, dtype=cupy.float32) for _ in range(2))

    def on_devices(devices: list[int]) -> tuple[da.Array, da.Array]:
        """``layout="on_gpus"``: vyre.dask.on_gpus (chunks round robin, persisted). ``"concat"``:
        the recipe it replaces, one array per GPU holding a contiguous share, concatenated."""
        if layout == "on_gpus":
            return tuple(vyre.dask.on_gpus(da.from_array(a, chunks=chunk, asarray=False, name=f"{nm}-{n}-{chunk}"),
                                           devices) for nm, a in (("x", host_x), ("y", host_y)))
        parts: dict[str, list[da.Array]] = {"x": [], "y": []}
        per = n // len(devices)
        for k, d in enumerate(devices):
            with cupy.cuda.Device(d):  # from_array copies its input, and CuPy copies to the current GPU
                for nm, a in (("x", host_x), ("y", host_y)):
                    parts[nm].append(da.from_array(a[k * per:(k + 1) * per], chunks=chunk, asarray=False,
                                                   name=f"{nm}-{d}-{per}-{chunk}"))
        sync_all()
        return da.concatenate(parts["x"]), da.concatenate(parts["y"])

    def cupy_chain(x, y):
        with cupy.cuda.Device(x.device.id):
            return cupy.exp(x) * y + cupy.sin(x) * x

    def dev_sum(c):
        with cupy.cuda.Device(c.device.id):  # on the chunk's own GPU, finished before the task ends
            return cupy.asnumpy(c.sum(dtype=cupy.float64)).reshape(1)

    def nothing(x, y):
        return x

    def host_zero(c):
        return np.zeros(1)

    def total(arr, part=dev_sum):
        return arr.map_blocks(part, chunks=((1,) * arr.numblocks[0],), dtype=np.float64,
                              meta=np.empty((0,), np.float64)).sum()

    def vyre_graph(dx, dy, k: int = 0):  # k: a distinct key name per pass (Dask merges equal graphs)
        return vyre.dask.reduce("sum", vyre.dask.map_blocks(p, {"x": dx, "y": dy}, "out", backend="cuda",
                                                            name=f"vyre-chain-{k}-{dx.name}"), backend="cuda")

    def cupy_graph(dx, dy, k: int = 0):
        return total(da.map_blocks(cupy_chain, dx, dy, dtype=np.float32, name=f"cupy-chain-{k}-{dx.name}"))

    def floor_graph(dx, dy, k: int = 0):
        return total(da.map_blocks(nothing, dx, dy, dtype=np.float32, name=f"nothing-{k}-{dx.name}"), host_zero)

    def sync_all() -> None:
        for d in range(ngpu):
            with cupy.cuda.Device(d):
                cupy.cuda.runtime.deviceSynchronize()

    def timed(build, k: int, reps: int = 5, threads: int = 2 * ngpu) -> float:
        best = float("inf")
        for _ in range(reps):
            graphs = [build(j) for j in range(k)]
            sync_all()
            t0 = time.perf_counter()
            dask.compute(*graphs, scheduler="threads", num_workers=threads)
            sync_all()
            best = min(best, time.perf_counter() - t0)
        return best

    if layout not in ("on_gpus", "concat"):
        raise SystemExit(f"layout must be on_gpus or concat, not {layout!r}")
    rows = []
    configs = [("1 GPU", [0])] + ([(f"{ngpu} GPUs", list(range(ngpu)))] if ngpu > 1 else [])
    for label, devs in configs:
        dx, dy = on_devices(devs)
        only_vyre = columns == "vyre"
        got, want = dask.compute(vyre_graph(dx, dy), vyre_graph(dx, dy, -1) if only_vyre else cupy_graph(dx, dy),
                                 scheduler="threads")
        ref = 0.0
        for part_x, part_y in zip(dx.blocks, dy.blocks, strict=True):  # one chunk at a time, on its GPU
            cx, cy = part_x.compute(scheduler="sync"), part_y.compute(scheduler="sync")
            with cupy.cuda.Device(cx.device.id):
                ref += float((cupy.exp(cx.astype(cupy.float64)) * cy + cupy.sin(cx.astype(cupy.float64)) * cx).sum())
        for what, val in (("vyre", got), ("CuPy-on-Dask", want)):
            assert abs(float(val) - ref) <= 1e-4 * abs(ref), f"{label}: {what} {float(val)} vs float64 {ref}"
        print(f"{label}: sum {float(got):.6e} (float64 reference {ref:.6e})")
        for k in (1, passes):
            t_vyre, t_cupy, t_floor = (timed(functools.partial(g, dx, dy), k) if g is vyre_graph or not only_vyre
                                       else float("nan") for g in (vyre_graph, cupy_graph, floor_graph))
            t_few = float("nan") if only_vyre else timed(functools.partial(vyre_graph, dx, dy), k, threads=ngpu)
            rows.append((k, label, t_vyre, t_few, t_cupy, t_floor))
            print(f"  {label}, {k} passes: vyre {t_vyre / k * 1e3:.2f} ms per pass", flush=True)
        del dx, dy
    gb = 3 * 4 * n / 1e9  # x, y read, out written, per pass
    print(f"chain + sum over 2^{log2n} f32 in chunks of 2^{log2chunk}, layout {layout}, threaded Dask "
          f"scheduler ({2 * ngpu} threads unless said), best of 5")
    print(f"| passes per compute | devices | vyre (ms per pass) | vyre GB/s | vyre, {ngpu} threads (ms per pass) "
          "| CuPy-on-Dask (ms per pass) | Dask floor, no-op tasks (ms per pass) | vyre speed-up vs 1 GPU |")
    print("|---|---|---|---|---|---|---|---|")
    for k in (1, passes):
        base = next(tv for kk, _, tv, *_ in rows if kk == k)
        for kk, label, tv, tw, tc, tf in rows:
            if kk == k:
                print(f"| {k} | {label} | {tv / k * 1e3:.2f} | {gb * k / tv:.0f} | {tw / k * 1e3:.2f} | "
                      f"{tc / k * 1e3:.2f} | {tf / k * 1e3:.2f} | {base / tv:.2f}x |")


def check_section() -> None:
    """CUDA: vyre.dask over CuPy chunks (uneven, several layouts, so both the checked first launch
    and the direct launches run) equals one dispatch over the whole array: integers bit for bit
    (map_blocks, map_overlap), the chain within float tolerance, the reduction against float64."""
    import cupy
    import dask.array as da

    import vyre
    import vyre.dask
    from vyre.ir import U32, Program, buflen, gid, if_, let, output, read, store, u32, var

    xs, ts, o = read("x", 0, U32), read("t", 1, U32), output("out", 2, U32)
    i = var("i")
    mix = Program.wrapped([xs, ts, o], 64, [let("i", gid()), if_(i.lt(buflen(o)), [
        store(o, i, xs[i] * u32(2654435761) + ts[xs[i] % buflen(ts)])])])
    xx, oo = read("x", 0, U32), output("out", 1, U32)
    sten = Program.wrapped([xx, oo], 64, [let("i", gid()), if_(i.lt(buflen(oo)), [
        store(oo, i, xx[i - u32(1)] + xx[i] * u32(3) + xx[i + u32(1)] * u32(5))])])
    rng = np.random.default_rng(1)
    n = 100_003
    chunks = ((20_000, 20_000, 30_000, 7, 30_000 - 4),)
    x = cupy.asarray(rng.integers(0, 2**32, n, dtype=np.uint32))
    t = cupy.asarray(rng.integers(0, 2**32, 97, dtype=np.uint32))
    dx = da.from_array(x, chunks=chunks, asarray=False)
    for _ in range(2):  # the second pass takes the direct launch for every layout
        want = vyre.dispatch(mix, {"x": x, "t": t, "out": cupy.zeros(n, cupy.uint32)}, grid=-(-n // 64))["out"]
        got = vyre.dask.map_blocks(mix, {"x": dx, "t": t}, "out", backend="cuda").compute(scheduler="threads")
        assert bool((cupy.asarray(got) == want).all()), "map_blocks differs from one dispatch"
        want = vyre.dispatch(sten, {"x": x, "out": cupy.zeros(n, cupy.uint32)}, grid=-(-n // 64))["out"]
        got = vyre.dask.map_overlap(sten, {"x": dx}, "out", depth=1, backend="cuda").compute(scheduler="threads")
        assert bool((cupy.asarray(got) == want).all()), "map_overlap differs from one dispatch"
    f = cupy.asarray(rng.standard_normal(n).astype(np.float32))
    for _ in range(2):
        got_s = float(vyre.dask.reduce("sum", da.from_array(f, chunks=chunks, asarray=False),
                                       backend="cuda").compute(scheduler="threads"))
        ref = float(f.astype(cupy.float64).sum())
        assert abs(got_s - ref) <= 1e-5 * float(cupy.abs(f).astype(cupy.float64).sum()), (got_s, ref)
    print("check: map_blocks and map_overlap bit-exact, reduce within tolerance, over uneven CuPy chunks")


def overhead_section(log2n: int = 26, *log2chunks: int) -> None:
    """One GPU: the chain + ``vyre.dask.reduce`` over 2^log2n f32 in ever smaller chunks. Small
    chunks leave the GPU idle, so their time per chunk is the host's cost per chunk (Dask's
    scheduling included); the GPU-busy share is the device time of the same kernels (measured
    back to back on one large array, scaled by elements) over the wall time."""
    import cupy
    import dask
    import dask.array as da

    import vyre
    import vyre.dask
    import vyre.ops

    n = 1 << log2n
    log2chunks = log2chunks or (18, 20, 22, 24)
    p = _chain_program()
    rng = cupy.random.default_rng(0)
    x, y = rng.standard_normal(n, dtype=cupy.float32), rng.standard_normal(n, dtype=cupy.float32)

    # device time per element of the chain + the sum, back to back on the whole array
    out = cupy.empty(n, cupy.float32)
    vyre.dispatch(p, {"x": x, "y": y, "out": out}, grid=-(-n // 256))
    vyre.ops.sum(out)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    reps = 20
    start.record()
    for _ in range(reps):
        vyre.dispatch(p, {"x": x, "y": y, "out": out}, grid=-(-n // 256))
        vyre.ops.sum(out)
    stop.record()
    stop.synchronize()
    dev_s = cupy.cuda.get_elapsed_time(start, stop) / 1e3 / reps
    print(f"device time of chain + sum over 2^{log2n} f32, back to back: {dev_s * 1e3:.3f} ms")

    def cupy_chain(a, b):
        with cupy.cuda.Device(a.device.id):
            return cupy.exp(a) * b + cupy.sin(a) * a

    def dev_sum(c):
        with cupy.cuda.Device(c.device.id):
            return cupy.asnumpy(c.sum(dtype=cupy.float64)).reshape(1)

    print("| chunk | chunks | vyre (ms) | vyre per chunk (us) | vyre GPU-busy | CuPy-on-Dask (ms) "
          "| CuPy per chunk (us) |")
    print("|---|---|---|---|---|---|---|")
    for lc in log2chunks:
        dx, dy = (da.from_array(a, chunks=1 << lc, asarray=False) for a in (x, y))
        nchunks = dx.numblocks[0]

        def vyre_graph(dx=dx, dy=dy):
            return vyre.dask.reduce("sum", vyre.dask.map_blocks(p, {"x": dx, "y": dy}, "out", backend="cuda"),
                                    backend="cuda")

        def cupy_graph(dx=dx, dy=dy):
            m = da.map_blocks(cupy_chain, dx, dy, dtype=np.float32)
            return m.map_blocks(dev_sum, chunks=((1,) * m.numblocks[0],), dtype=np.float64,
                                meta=np.empty((0,), np.float64)).sum()

        def best(build, reps: int = 3) -> float:
            dask.compute(build(), scheduler="threads", num_workers=2)  # warm: kernels, tuner, pools
            t = float("inf")
            for _ in range(reps):
                g = build()
                cupy.cuda.runtime.deviceSynchronize()
                t0 = time.perf_counter()
                dask.compute(g, scheduler="threads", num_workers=2)
                cupy.cuda.runtime.deviceSynchronize()
                t = min(t, time.perf_counter() - t0)
            return t

        tv, tc = best(vyre_graph), best(cupy_graph)
        print(f"| 2^{lc} | {nchunks} | {tv * 1e3:.1f} | {tv / nchunks * 1e6:.0f} | {dev_s / tv:.0%} | "
              f"{tc * 1e3:.1f} | {tc / nchunks * 1e6:.0f} |")
    got = float(vyre_graph().compute(scheduler="threads"))
    ref = float((cupy.exp(x.astype(cupy.float64)) * y + cupy.sin(x.astype(cupy.float64)) * x).sum())
    assert abs(got - ref) <= 1e-4 * abs(ref), (got, ref)
    print(f"sum {got:.6e} (float64 reference {ref:.6e})")


def host_section(reps: int = 30) -> None:
    """CPU: Dask's host time per compute for vyre's graphs, the GPU bench's graphs on tiny host
    chunks (so the tasks' own work is negligible): ``passes`` chain + ``vyre.dask.reduce("sum")``
    graphs over persisted inputs in one ``dask.compute`` (4 threads). Columns: host time from the
    call to the first task handed to a thread (optimization, ordering: time every GPU waits), the
    whole compute, and building the graphs (not part of the compute). Medians of ``reps``."""
    import dask
    import dask.array as da
    import dask.threaded

    import vyre.dask

    p = _chain_program()
    mark: dict[str, float] = {}
    pool = dask.threaded.ContextAwareThreadPoolExecutor
    submit = pool.submit

    def first_submit(self, fn, *a, **k):  # type: ignore[no-untyped-def]
        mark.setdefault("t", time.perf_counter())
        return submit(self, fn, *a, **k)

    pool.submit = first_submit  # type: ignore[method-assign]
    print("| chunks | passes per compute | host ms before the first task | compute ms | graph build ms |")
    print("|---|---|---|---|---|")
    for nch, passes in ((2, 8), (4, 8), (2, 1), (4, 1)):
        x = np.random.default_rng(0).standard_normal(nch * 1024).astype(np.float32)
        (dx, dy) = dask.persist(da.from_array(x, chunks=1024), da.from_array(x * 2, chunks=1024), scheduler="sync")

        def graphs(tag: str, dx=dx, dy=dy, passes=passes) -> list:  # type: ignore[no-untyped-def]
            return [vyre.dask.reduce("sum", vyre.dask.map_blocks(p, {"x": dx, "y": dy}, "out", backend="cpu",
                                                                 name=f"chain-{tag}-{j}"), backend="cpu")
                    for j in range(passes)]

        first, whole, build = [], [], []
        for r in range(reps + 5):
            t0 = time.perf_counter()
            gs = graphs(f"r{r}")
            t1 = time.perf_counter()
            mark.clear()
            dask.compute(*gs, scheduler="threads", num_workers=4)
            t2 = time.perf_counter()
            if r >= 5:  # warm
                first.append(mark["t"] - t1)
                whole.append(t2 - t1)
                build.append(t1 - t0)
        print(f"| {nch} | {passes} | {np.median(first) * 1e3:.2f} | {np.median(whole) * 1e3:.2f} | "
              f"{np.median(build) * 1e3:.2f} |", flush=True)
    pool.submit = submit  # type: ignore[method-assign]


def profile_section(log2n: int = 24, log2chunk: int = 16) -> None:
    """cProfile of one compute of the chain + reduce in 2^(log2n - log2chunk) chunks on the
    synchronous scheduler: where each chunk's host time goes (top functions by own time)."""
    import cProfile
    import pstats

    import cupy
    import dask.array as da

    import vyre.dask

    n = 1 << log2n
    p = _chain_program()
    x = cupy.random.default_rng(0).standard_normal(n, dtype=cupy.float32)
    dx = da.from_array(x, chunks=1 << log2chunk, asarray=False)

    def run():
        return vyre.dask.reduce("sum", vyre.dask.map_blocks(p, {"x": dx, "y": dx}, "out", backend="cuda"),
                                backend="cuda").compute(scheduler="sync")

    run()
    prof = cProfile.Profile()
    prof.enable()
    run()
    prof.disable()
    print(f"profile: {dx.numblocks[0]} chunks of 2^{log2chunk}, synchronous scheduler")
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(10)
    stats.sort_stats("cumulative").print_stats("vyre", 14)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "cache"
    if what == "cache":
        cache_section()
    elif what == "gpus":
        gpus_section(*(int(a) for a in sys.argv[2:5]), *sys.argv[5:7])
    elif what == "check":
        check_section()
    elif what == "overhead":
        overhead_section(*(int(a) for a in sys.argv[2:]))
    elif what == "host":
        host_section()
    elif what == "profile":
        profile_section(*(int(a) for a in sys.argv[2:4]))
    else:
        raise SystemExit(__doc__)
