"""Where the time of the chain + ``vyre.dask.reduce("sum")`` goes on several GPUs (CUDA).

    python bench/dask_timeline.py [log2 n] [log2 chunk] [passes] [out dir]

1. **Ceiling without Dask:** the chunks' tasks (the very functions the Dask tasks run) called from
   one thread, devices alternating, one wait at the end: 1 GPU vs all GPUs.
2. **Timeline of the Dask path:** per task its host start/end and thread (``dask.local``'s
   ``execute_task`` wrapped), per chunk its GPU interval (CUDA events recorded on the chunk's GPU
   before the chain and after the partial sum), for chunks placed in halves and concatenated (GPU
   0 holds the first half; the recipe used before) and by ``vyre.dask.on_gpus`` (round robin,
   persisted). Summaries: when the first kernel starts
   on each GPU, its busy share, the idle gaps; the host's share per kind of task. Full timelines
   go to ``out dir`` as JSON.
3. **Variants** (no instrumentation, best of 5): layouts, scheduler threads, passes per compute.
4. **Host cost of one chunk's task** (cProfile of the direct loop on small chunks).

``TIMELINE_QUICK=1`` stops after section 2.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import sys
import threading
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from dask_bench import _chain_program

BACKEND = os.environ.get("TIMELINE_BACKEND", "cuda")  # "cpu": a dry run of the script with a fake CuPy


def _layout_map(nchunks: int, ngpu: int, layout: str) -> list[int]:
    if layout == "halves":
        per = -(-nchunks // ngpu)
        return [i // per for i in range(nchunks)]
    return [i % ngpu for i in range(nchunks)]


def main(log2n: int = 30, log2chunk: int = 28, passes: int = 8, out_dir: str = "/tmp") -> None:
    import cupy
    import dask
    import dask.array as da
    import dask.local

    import vyre.dask
    from vyre.ir.wire import to_wire

    n, chunk = 1 << log2n, 1 << log2chunk
    nchunks = n // chunk
    ngpu = cupy.cuda.runtime.getDeviceCount()
    p = _chain_program()
    wire = to_wire(p)

    def sync_all() -> None:
        for d in range(ngpu):
            with cupy.cuda.Device(d):
                cupy.cuda.runtime.deviceSynchronize()

    # chunk i's data depends only on i (same seed on every device), so every layout sums the same
    def make(devmap: list[int]) -> tuple[list[Any], list[Any]]:
        xs, ys = [], []
        for i, d in enumerate(devmap):
            with cupy.cuda.Device(d):
                rng = cupy.random.default_rng(i)
                xs.append(rng.standard_normal(chunk, dtype=cupy.float32))
                ys.append(rng.standard_normal(chunk, dtype=cupy.float32))
        return xs, ys

    def as_dask(xs: list[Any], ys: list[Any], tag: str) -> tuple[Any, Any]:
        """The chunks concatenated into one dask array each, every chunk given to Dask on its own
        GPU (from_array copies its input, and CuPy copies to the current GPU) and named (no
        hashing of gigabytes)."""
        out = []
        for nm, arrs in (("x", xs), ("y", ys)):
            parts = []
            for i, a in enumerate(arrs):
                with cupy.cuda.Device(a.device.id):
                    parts.append(da.from_array(a, chunks=chunk, asarray=False, name=f"{tag}-{nm}-{i}"))
            out.append(da.concatenate(parts))
        sync_all()
        return out[0], out[1]

    layouts = {"1 GPU": [0] * nchunks, "halves": _layout_map(nchunks, ngpu, "halves")}
    data = {name: make(m) for name, m in layouts.items()}
    # vyre.dask.on_gpus: the 1-GPU chunks kept on GPU 0, or spread round robin (half of them copied)
    one = as_dask(*data["1 GPU"], "one")
    placed = {"1 GPU": [vyre.dask.on_gpus(a, [0]) for a in one],
              f"{ngpu} GPUs": [vyre.dask.on_gpus(a, list(range(ngpu))) for a in one]}
    halves = as_dask(*data["halves"], "halves")
    del one
    sync_all()
    print(f"{ngpu} GPUs, 2^{log2n} f32 in {nchunks} chunks of 2^{log2chunk}, {passes} passes", flush=True)

    # ---- 1. the ceiling: the tasks' own functions from one thread, devices alternating
    def direct(xs: list[Any], ys: list[Any], k: int) -> tuple[float, float, float]:
        order = sorted(range(len(xs)), key=lambda i: (sum(1 for j in range(i) if xs[j].device.id == xs[i].device.id),
                                                      xs[i].device.id))
        sync_all()
        t0 = time.perf_counter()
        parts = []
        for _ in range(k):
            for i in order:
                o = vyre.dask.chunks._run_chunk(wire, ("x", "y"), ("out",), BACKEND, None, {}, xs[i], ys[i])
                parts.append(vyre.dask.reductions._partial("sum", BACKEND, o))
        t1 = time.perf_counter()
        total = float(np.sum([vyre.dask.reductions._host(q).astype(np.float64) for q in parts]))
        sync_all()
        return time.perf_counter() - t0, t1 - t0, total

    print("\n## 1. ceiling without Dask (one thread, devices alternating, one wait at the end), best of 5")
    print("| layout | passes | ms per pass | host launch time per pass (ms) |\n|---|---|---|---|")
    sums = {}
    for name in ("1 GPU", "halves"):
        for k in (1, passes):
            direct(*data[name], 1)
            best = min((direct(*data[name], k) for _ in range(5)), key=lambda r: r[0])
            sums[name] = best[2] / k
            print(f"| {name} | {k} | {best[0] / k * 1e3:.2f} | {best[1] / k * 1e3:.2f} |", flush=True)
    print(f"sums per pass: {sums}")

    # ---- 2. timeline of the Dask path
    tasks: list[tuple[str, int, float, float]] = []
    gpu: list[tuple[int, Any, Any, float, float]] = []
    local = threading.local()
    instrument = {"on": False}
    orig_exec = dask.local.execute_task
    orig_run, orig_partial = vyre.dask.chunks._run_chunk, vyre.dask.reductions._partial

    def exec_task(key, *a):  # type: ignore[no-untyped-def]
        if not instrument["on"]:
            return orig_exec(key, *a)
        t = time.perf_counter()
        r = orig_exec(key, *a)
        name = key[0] if isinstance(key, tuple) else key
        tasks.append((str(name).split("-")[0], threading.get_ident(), t, time.perf_counter()))
        return r

    def run_chunk(*a):  # type: ignore[no-untyped-def]
        if instrument["on"]:
            d = a[-1].device.id
            with cupy.cuda.Device(d):
                ev = cupy.cuda.Event()
                ev.record()
            local.start = (d, ev, time.perf_counter())
        return orig_run(*a)

    def partial(op, backend, chunk):  # type: ignore[no-untyped-def]
        r = orig_partial(op, backend, chunk)
        if instrument["on"] and getattr(local, "start", None) is not None:
            d, ev0, h0 = local.start
            with cupy.cuda.Device(d):
                ev1 = cupy.cuda.Event()
                ev1.record()
            gpu.append((d, ev0, ev1, h0, time.perf_counter()))
            local.start = None
        return r

    dask.local.execute_task = exec_task
    vyre.dask.chunks._run_chunk, vyre.dask.reductions._partial = run_chunk, partial

    def graphs(dx: Any, dy: Any, k: int, tag: str) -> list[Any]:
        return [vyre.dask.reduce("sum", vyre.dask.map_blocks(p, {"x": dx, "y": dy}, "out", backend=BACKEND,
                                                             name=f"chain-{tag}-{j}-{time.perf_counter_ns()}"),
                                 backend=BACKEND) for j in range(k)]

    def timed(dx: Any, dy: Any, k: int, threads: int, reps: int = 5) -> float:
        best = float("inf")
        for r in range(reps):
            gs = graphs(dx, dy, k, f"t{r}")
            sync_all()
            t0 = time.perf_counter()
            dask.compute(*gs, scheduler="threads", num_workers=threads)
            sync_all()
            best = min(best, time.perf_counter() - t0)
        return best

    def timeline(label: str, dx: Any, dy: Any, k: int, threads: int) -> dict[str, Any]:
        timed(dx, dy, k, threads, reps=2)  # warm
        gs = graphs(dx, dy, k, "tl")
        t_opt0 = time.perf_counter()
        dask.optimize(*gs)
        t_opt = time.perf_counter() - t_opt0
        tasks.clear()
        gpu.clear()
        sync_all()
        refs = []
        for d in range(ngpu):
            with cupy.cuda.Device(d):
                ev = cupy.cuda.Event()
                ev.record()
                ev.synchronize()
                refs.append((ev, time.perf_counter()))
        instrument["on"] = True
        t0 = time.perf_counter()
        results = dask.compute(*gs, scheduler="threads", num_workers=threads)
        t_ret = time.perf_counter()
        sync_all()
        t_end = time.perf_counter()
        instrument["on"] = False

        def gtime(d: int, ev: Any) -> float:
            ref, h = refs[d]
            return h + cupy.cuda.get_elapsed_time(ref, ev) / 1e3

        chunks = [(d, gtime(d, e0), gtime(d, e1), h0, h1) for d, e0, e1, h0, h1 in gpu]
        rec = {"label": label, "passes": k, "threads": threads, "wall_ms": (t_end - t0) * 1e3,
               "compute_returned_ms": (t_ret - t0) * 1e3, "optimize_ms": t_opt * 1e3,
               "sum_per_pass": float(np.mean([float(r) for r in results])),
               "tasks": [(nm, th % 10_000, (a - t0) * 1e3, (b - t0) * 1e3) for nm, th, a, b in tasks],
               "gpu": [(d, (a - t0) * 1e3, (b - t0) * 1e3, (h0 - t0) * 1e3, (h1 - t0) * 1e3)
                       for d, a, b, h0, h1 in chunks]}
        first_task = min((a for _, _, a, _ in rec["tasks"]), default=0.0)
        print(f"\n### {label}: {k} passes, {threads} threads: wall {rec['wall_ms']:.1f} ms "
              f"(compute returned at {rec['compute_returned_ms']:.1f}), dask.optimize alone "
              f"{t_opt * 1e3:.1f} ms, first task starts at {first_task:.1f} ms")
        kinds: dict[str, list[float]] = {}
        for nm, _, a, b in rec["tasks"]:
            kinds.setdefault(nm, []).append(b - a)
        print("host, per kind of task: " + "; ".join(
            f"{nm} x{len(v)} {sum(v):.1f} ms (mean {np.mean(v) * 1e3:.0f} us)" for nm, v in kinds.items()))
        busy_host = sum(b - a for _, _, a, b in rec["tasks"])
        print(f"host: sum of task times {busy_host:.1f} ms over {len({th for _, th, _, _ in rec['tasks']})} threads")
        seq = "".join(str(d) for d, *_ in sorted(rec["gpu"], key=lambda r: r[3]))
        print(f"chunk tasks' GPUs in host launch order: {seq}")
        for d in range(ngpu):
            iv = sorted((a, b, h0, h1) for dd, a, b, h0, h1 in rec["gpu"] if dd == d)
            if not iv:
                continue
            busy = sum(b - a for a, b, _, _ in iv)
            gaps = [(iv[j][0] - iv[j - 1][1]) for j in range(1, len(iv))]
            print(f"GPU {d}: {len(iv)} chunk tasks, first GPU start {iv[0][0]:.1f} ms (launched by host at "
                  f"{iv[0][2]:.1f}), last end {iv[-1][1]:.1f} ms, busy {busy:.1f} ms "
                  f"({busy / rec['wall_ms']:.0%} of wall), idle gaps between chunks "
                  f"{sum(g for g in gaps if g > 0):.1f} ms (largest {max(gaps, default=0):.2f})")
            print("  per chunk (host launch start..end | GPU start..end, ms): " + " ".join(
                f"[{h0:.1f}..{h1:.1f}|{a:.1f}..{b:.1f}]" for a, b, h0, h1 in iv))
        return rec

    print("\n## 2. timeline of the Dask path (instrumented: events add host time)")
    recs = []
    two = f"{ngpu} GPUs"
    for label, arrays, k, threads in (("1 GPU, on_gpus", placed["1 GPU"], passes, 2 * ngpu),
                                      ("halves concatenated (the old recipe)", halves, passes, 2 * ngpu),
                                      (f"{two}, on_gpus", placed[two], passes, 2 * ngpu),
                                      (f"{two}, on_gpus", placed[two], 1, 2 * ngpu),
                                      (f"{two}, on_gpus", placed[two], passes, ngpu)):
        recs.append(timeline(label, *arrays, k, threads))
    with open(os.path.join(out_dir, f"timeline_2p{log2chunk}.json"), "w") as f:
        json.dump(recs, f)
    if os.environ.get("TIMELINE_QUICK"):  # sections 1 and 2 only
        return

    # ---- 3. variants, not instrumented
    print("\n## 3. variants (no instrumentation), best of 5, ms per pass")
    print("| layout | threads | passes | ms per pass | vs 1 GPU, on_gpus, same threads |\n|---|---|---|---|---|")
    base: dict[tuple[int, int], float] = {}
    for label, arrays in (("1 GPU, on_gpus", placed["1 GPU"]), (f"{two}, on_gpus", placed[two]),
                          ("halves concatenated", halves)):
        for threads in (ngpu, 2 * ngpu):
            for k in (1, passes):
                t = timed(*arrays, k, threads) / k
                base.setdefault((threads, k), t)
                print(f"| {label} | {threads} | {k} | {t * 1e3:.2f} | {base[(threads, k)] / t:.2f}x |", flush=True)
    old_si = sys.getswitchinterval()
    sys.setswitchinterval(5e-4)
    for k in (1, passes):
        print(f"| {two}, on_gpus, GIL switch interval 0.5 ms | {2 * ngpu} | {k} | "
              f"{timed(*placed[two], k, 2 * ngpu) / k * 1e3:.2f} | |", flush=True)
    sys.setswitchinterval(old_si)
    if BACKEND == "cuda":  # an experiment: kernel launches that keep the GIL (ctypes.PyDLL)
        import ctypes

        from vyre.driver import fast_launch

        kept = fast_launch.driver_launcher()
        held = ctypes.PyDLL("libcuda.so.1").cuLaunchKernelEx
        held.restype = ctypes.c_int
        fast_launch._launcher = fast_launch.Launcher(held, True)
        for threads in (ngpu, 2 * ngpu):
            for k in (1, passes):
                print(f"| {two}, on_gpus, launches keep the GIL | {threads} | {k} | "
                      f"{timed(*placed[two], k, threads) / k * 1e3:.2f} | |", flush=True)
        fast_launch._launcher = kept

    # ---- 4. host cost of one chunk's task: cProfile of the direct loop over small chunks
    vyre.dask.chunks._run_chunk, vyre.dask.reductions._partial = orig_run, orig_partial
    small = 1 << 20
    xs = [a[:small] for a in data["halves"][0]]
    ys = [a[:small] for a in data["halves"][1]]
    direct(xs, ys, 4)
    t_small = min(direct(xs, ys, 50)[1] for _ in range(3)) / (50 * len(xs))
    print(f"\n## 4. host time of one chunk's task (chain + partial sum, 2^20 chunks, direct loop): "
          f"{t_small * 1e6:.0f} us")
    prof = cProfile.Profile()
    prof.enable()
    direct(xs, ys, 50)
    prof.disable()
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(*(int(a) for a in args[:3]), *(args[3:4]))
