"""GPU benchmarks (run through bench/gpu.sh on an H100/H200). Prints markdown tables; every number
is measured in this run, baselines included. Sections fail independently (an error is printed and the
rest still runs)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

RESULTS: dict[str, object] = {}
# float examples may differ in the last bits on the GPU (FMA contraction); these are exact everywhere
EXACT_EXAMPLES = ("block_sum", "subgroup_sum", "histogram", "workgroup_ids")
ROOT = Path(__file__).resolve().parent.parent


def section(fn):
    def run():
        print(f"\n## {fn.__doc__.strip().splitlines()[0]}\n", flush=True)
        t = time.time()
        try:
            fn()
        except Exception:
            traceback.print_exc()
            RESULTS[fn.__name__] = "FAILED"
        print(f"({time.time() - t:.1f} s)", flush=True)
    return run


def cuda_time(fn, warmup=3, reps=20, per_sample=5) -> float:
    """Median seconds of fn() measured with CUDA events (device time). Each sample times
    ``per_sample`` back-to-back calls: the host's launch work for the first call lands between the
    events, and for the rest it overlaps the GPU's work, so it is not counted per call."""
    import cupy as cp

    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        for _ in range(per_sample):
            fn()
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) / 1e3 / per_sample)
    return statistics.median(ts)


def kernel_time(fn, reps=10) -> float:
    """Seconds of GPU activity per call of fn() (kernels and copies, from CUPTI through
    torch.profiler): what the device spends, without the gaps a host-bound loop leaves. NaN when
    the profiler cannot trace."""
    import torch

    try:
        fn()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
        # self times: a kernel's own; an aten op's device time is its kernels' (counted there)
        tot = sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)
                  for e in prof.key_averages())
        return tot / reps / 1e6
    except Exception:  # an optional column
        return float("nan")


def host_time_per_call(fn, n=20000) -> float:
    """Seconds per call on the host, in a tight loop (launch overhead), device drained after."""
    import cupy as cp

    for _ in range(200):
        fn()
    cp.cuda.Device().synchronize()
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t) / n)
        cp.cuda.Device().synchronize()
    return min(best)


@section
def bandwidth():
    """Fused elementwise chain at 2^26 f32 vs a CuPy device-to-device copy"""
    import cupy as cp

    import vyre
    from vyre.examples import fused_chain

    n = 1 << 26
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.random.standard_normal(n, dtype=cp.float32)
    out = cp.empty_like(x)
    prog = fused_chain()
    args = {"x": x, "y": y, "out": out}
    vyre.dispatch(prog, args, backend="cuda")
    ref = cp.exp(x) * y + cp.sin(x) * x
    err = float(cp.max(cp.abs(out - ref) / cp.maximum(1, cp.abs(ref))))
    t_vyre = cuda_time(lambda: vyre.dispatch(prog, args, backend="cuda"))
    dst = cp.empty_like(x)
    t_copy = cuda_time(lambda: cp.copyto(dst, x))
    chain = cp.ElementwiseKernel("float32 x, float32 y", "float32 o", "o = expf(x) * y + sinf(x) * x", "chain")
    t_cupy = cuda_time(lambda: chain(x, y, out))
    gb = 3 * 4 * n / 1e9
    copy_bw = 2 * 4 * n / 1e9 / t_copy
    from vyre.driver.dispatch import Launch, _by_identity

    k = next(kk for (p, kk) in _by_identity.values() if p is prog)
    sweep = {}
    for wg in (128, 256, 512, 1024):
        for ipt in (1, 2, 4, 8, 16):
            k.launch = Launch(wg, ipt)
            k._fast = None
            sweep[(wg, ipt)] = cuda_time(lambda: k(args), reps=10)
    best = min(sweep, key=sweep.get)
    print("launch sweep (wg, ipt) -> ms: " + ", ".join(f"{c}: {t * 1e3:.3f}" for c, t in sorted(sweep.items())))
    t_best = sweep[best]
    from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var

    a_, b_, o_ = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    add = Program.wrapped([a_, b_, o_], 256, [let("i", gid()), if_(i.lt(buflen(o_)), [store(o_, i, a_[i] + b_[i])])])
    vyre.dispatch(add, args, backend="cuda")
    t_add = cuda_time(lambda: vyre.dispatch(add, args, backend="cuda"))
    rows = [("vyre fused chain (dispatch default / tuner)", t_vyre, gb / t_vyre),
            (f"vyre fused chain, best launch {best}", t_best, gb / t_best),
            ("CuPy ElementwiseKernel chain", t_cupy, gb / t_cupy),
            ("vyre out = x + y (same traffic, no transcendentals)", t_add, gb / t_add),
            ("CuPy d2d copy (read+write)", t_copy, copy_bw)]
    print("| kernel | time (ms) | GB/s | % of copy bandwidth |\n|---|---|---|---|")
    for name, t, bw in rows:
        print(f"| {name} | {t * 1e3:.3f} | {bw:.0f} | {100 * bw / copy_bw:.1f}% |")
    print(f"\nmax relative error vs CuPy: {err:.2e}")
    RESULTS["bandwidth"] = {"vyre_ms": t_vyre * 1e3, "copy_gbs": copy_bw, "vyre_gbs": gb / t_vyre,
                            "cupy_ms": t_cupy * 1e3}


@section
def overhead():
    """Dispatch overhead of a cached 3-buffer kernel (host time per call, 1024 elements)"""
    import cupy as cp
    import torch

    import vyre
    from vyre.driver.dispatch import compile as vcompile
    from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var

    n = 1024
    a_, b_, o_ = read("a", 0, F32), read("b", 1, F32), output("o", 2, F32)
    i = var("i")
    prog = Program.wrapped([a_, b_, o_], 256, [let("i", gid()), if_(i.lt(buflen(o_)), [store(o_, i, a_[i] + b_[i])])])
    a = cp.ones(n, cp.float32)
    b = cp.ones(n, cp.float32)
    o = cp.zeros(n, cp.float32)
    args = {"a": a, "b": b, "o": o}
    vyre.dispatch(prog, args, backend="cuda")
    assert float(o[5]) == 2.0
    k = vcompile(prog, "cuda")
    # the cached path is taken from the second call on; it must launch over the same arrays' new contents
    from vyre.driver.dispatch import _by_identity
    from vyre.driver.fast_launch import driver_launcher

    fast = _by_identity[(id(prog), "cuda")][1]._fast
    assert fast is not None, "the cached launch path was not set up"
    a[:] = cp.arange(n, dtype=cp.float32)
    assert vyre.dispatch(prog, args, backend="cuda")["o"] is o
    assert _by_identity[(id(prog), "cuda")][1]._fast is fast, "the second call did not take the cached path"
    assert bool((o == a + b).all()), "the cached launch computed a wrong result"
    # another thread has no current context: the cached launch must hand over to numba's
    import threading

    got: list[object] = []
    a[:] = 5.0
    th = threading.Thread(target=lambda: got.append(vyre.dispatch(prog, args, backend="cuda")))
    th.start()
    th.join()
    assert got and got[0]["o"] is o and float(o[7]) == 6.0, f"dispatch from a second thread failed: {got}"
    entry = "cuLaunchKernelEx" if driver_launcher().extended else "cuLaunchKernel"
    print(f"cached path: {entry} via ctypes, checked against CuPy, and from a second thread")
    from numba import cuda

    na, nb, no = cuda.as_cuda_array(a), cuda.as_cuda_array(b), cuda.as_cuda_array(o)
    blocks = (n + 255) // 256
    add = cp.ElementwiseKernel("float32 a, float32 b", "float32 o", "o = a + b", "add3")
    ta, tb, to = (torch.ones(n, device="cuda"), torch.ones(n, device="cuda"), torch.zeros(n, device="cuda"))
    launchers = {
        "vyre.dispatch (cached path)": lambda: vyre.dispatch(prog, args, backend="cuda"),
        "numba kernel[grid, block](...)": (lambda: k._fn[blocks, 256](na, nb, no, n, 1)) if k.flat
        else (lambda: k._fn[blocks, 256](na, nb, no)),
        "CuPy ElementwiseKernel": lambda: add(a, b, o),
        "PyTorch torch.add(out=)": lambda: torch.add(ta, tb, out=to),
    }
    # interleaved rounds, so drifts of the host (clock, other tenants) hit every launcher alike
    samples: dict[str, list[float]] = {name: [] for name in launchers}
    for _ in range(5):
        for name, fn in launchers.items():
            samples[name].append(host_time_per_call(fn, n=10000))
    print("| launcher | us per call (median of 5 interleaved rounds) | min | max |\n|---|---|---|---|")
    for name, ts in samples.items():
        print(f"| {name} | {statistics.median(ts) * 1e6:.2f} | {min(ts) * 1e6:.2f} | {max(ts) * 1e6:.2f} |")
    t_vyre, t_numba, t_cupy, t_torch = (statistics.median(ts) for ts in samples.values())
    RESULTS["overhead_us"] = {"vyre": t_vyre * 1e6, "numba": t_numba * 1e6, "cupy": t_cupy * 1e6,
                              "torch": t_torch * 1e6}


COLD = r'''
import os, time, sys
t = time.perf_counter()
import vyre
import vyre.codegen.cuda as cg
from vyre.driver.dispatch import compile as vcompile
from vyre.examples import fused_chain
import cupy as cp
if os.environ.get("BENCH_INTERLEAVE") == "1":  # the kernel as it was before interleaving
    cg.MAX_INTERLEAVED_SIZE = -1
t1 = time.perf_counter()
k = vcompile(fused_chain(), "cuda")
t2 = time.perf_counter()
x = cp.ones(1 << 20, cp.float32)
k({"x": x, "y": x, "out": cp.empty_like(x)})  # numba's compile, PTX to cubin, load
cp.cuda.Device().synchronize()
t3 = time.perf_counter()
vyre.dispatch(fused_chain(), {"x": x, "y": x, "out": cp.empty_like(x)}, backend="cuda")  # tuner
cp.cuda.Device().synchronize()
t4 = time.perf_counter()
print(f"{t1 - t:.3f} {t2 - t1:.3f} {t3 - t2:.3f} {t4 - t3:.3f} {int(k.cache_hit)}")
'''


@section
def compile_times():
    """Cold compile and warm start from the disk cache, each in a fresh process"""
    rows = []
    for interleave in ("4", "1"):
        with tempfile.TemporaryDirectory() as d:
            env = {**os.environ, "VYRE_CACHE_DIR": d, "BENCH_INTERLEAVE": interleave}
            for label in ("cold (empty cache)", "warm (disk cache)"):
                out = subprocess.run([sys.executable, "-c", COLD], env=env, capture_output=True, text=True,
                                     check=True)
                imp, gen, first, tune, hit = out.stdout.split()
                rows.append((f"{label}, {interleave} interleaved", float(imp), float(gen), float(first),
                             float(tune), hit == "1"))
    print("| process | import (s) | codegen + module (s) | first launch (s) | first dispatch, tuner (s) "
          "| cache hit |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.2f} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.3f} | {r[5]} |")
    RESULTS["compile_s"] = {"cold": rows[0][2] + rows[0][3], "warm": rows[1][2] + rows[1][3]}


@section
def autodiff():
    """Forward + backward of sum(exp(x)*y + sin(x)*x) at 2^26 f32 vs PyTorch eager and jax.jit(jax.grad)"""
    import cupy as cp
    import jax
    import jax.numpy as jnp
    import torch

    import vyre
    from vyre.autodiff import grad
    from vyre.examples import fused_chain

    n = 1 << 26
    fwd = fused_chain()
    bwd = grad(fwd, ["out"], ["x", "y"], accumulate=False)
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.random.standard_normal(n, dtype=cp.float32)
    out = cp.empty_like(x)
    ones = cp.ones(n, cp.float32)
    gx, gy = cp.empty_like(x), cp.empty_like(x)
    fargs = {"x": x, "y": y, "out": out}
    bargs = {"x": x, "y": y, "out": out, "grad_out": ones, "grad_x": gx, "grad_y": gy}

    def vyre_vg():
        vyre.dispatch(fwd, fargs, backend="cuda")
        loss = cp.sum(out)
        vyre.dispatch(bwd, bargs, backend="cuda")
        return loss

    def vyre_g():
        vyre.dispatch(bwd, bargs, backend="cuda")

    fused = grad(fwd, ["out"], ["x", "y"], accumulate=False, with_value=True, unit_cotangent=True)
    gx2, gy2, out2 = cp.empty_like(x), cp.empty_like(x), cp.empty_like(x)
    fz = {"x": x, "y": y, "out": out2, "grad_x": gx2, "grad_y": gy2}

    def vyre_fused_vg():
        vyre.dispatch(fused, fz, backend="cuda")
        return cp.sum(out2)

    vyre_vg()
    ex = cp.exp(x)
    ref_gx = ex * y + cp.sin(x) + x * cp.cos(x)
    err = float(cp.max(cp.abs(gx - ref_gx) / cp.maximum(1, cp.abs(ref_gx))))
    err = max(err, float(cp.max(cp.abs(gy - ex) / cp.maximum(1, cp.abs(ex)))))
    t_fwd = cuda_time(lambda: vyre.dispatch(fwd, fargs, backend="cuda"))
    t_bwd = cuda_time(vyre_g)
    t_vg = cuda_time(vyre_vg)
    vyre_fused_vg()
    err = max(err, float(cp.max(cp.abs(gx2 - ref_gx) / cp.maximum(1, cp.abs(ref_gx)))))
    t_fvg = cuda_time(vyre_fused_vg)
    t_fk = cuda_time(lambda: vyre.dispatch(fused, fz, backend="cuda"))

    tx = torch.as_tensor(x, device="cuda").clone().requires_grad_(True)
    ty = torch.as_tensor(y, device="cuda").clone().requires_grad_(True)

    def torch_vg():
        tx.grad = None
        ty.grad = None
        loss = (torch.exp(tx) * ty + torch.sin(tx) * tx).sum()
        loss.backward()
        return loss

    t_torch = cuda_time(torch_vg)
    jx, jy = jnp.asarray(cp.asnumpy(x)), jnp.asarray(cp.asnumpy(y))

    def f(a, b):
        return jnp.sum(jnp.exp(a) * b + jnp.sin(a) * a)

    jg = jax.jit(jax.grad(f, argnums=(0, 1)))
    jvg = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))
    jax.block_until_ready(jg(jx, jy))
    jax.block_until_ready(jvg(jx, jy))

    def wall(fn, reps=20):
        for _ in range(3):
            jax.block_until_ready(fn(jx, jy))
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            jax.block_until_ready(fn(jx, jy))
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    t_jg, t_jvg = wall(jg), wall(jvg)
    moved = 4 * 4 * n / 1e9
    print("| what | time (ms) | vs vyre fused value_and_grad |\n|---|---|---|")
    rows = [("vyre forward kernel", t_fwd), ("vyre backward kernel (grad only)", t_bwd),
            ("vyre value_and_grad (fwd + cp.sum + bwd)", t_vg),
            ("vyre fused value+grad kernel (with_value, unit_cotangent)", t_fk),
            ("vyre fused value_and_grad (fused kernel + cp.sum)", t_fvg), ("PyTorch eager fwd+bwd", t_torch),
            ("jax.jit(jax.grad) (wall)", t_jg), ("jax.jit(jax.value_and_grad) (wall)", t_jvg)]
    for name, t in rows:
        print(f"| {name} | {t * 1e3:.3f} | {t / t_fvg:.2f}x |")
    print(f"\nbackward kernel: {5 * 4 * n / 1e9 / t_bwd:.0f} GB/s achieved"
          " (reads x, y, grad_out; writes grad_x, grad_y);"
          f" backward/forward time ratio {t_bwd / t_fwd:.2f}; max rel error {err:.2e};"
          f" the 16n bytes a gradient must move take {moved:.2f} GB")
    RESULTS["autodiff_ms"] = {name: t * 1e3 for name, t in rows}


@section
def matvec_autodiff():
    """Reduction-style: loss over a matrix-vector product (4096 x 4096 f32), forward + backward"""
    import cupy as cp
    import torch

    import vyre
    from vyre.autodiff import grad
    from vyre.examples import matvec

    r = c = 4096
    fwd = matvec()
    bwd = grad(fwd, ["out"], ["m", "v"])
    m = cp.random.standard_normal(r * c, dtype=cp.float32)
    v = cp.random.standard_normal(c, dtype=cp.float32)
    out = cp.empty(r, cp.float32)
    ones = cp.ones(r, cp.float32)
    gm, gv = cp.zeros_like(m), cp.zeros_like(v)
    fargs = {"m": m, "v": v, "out": out}
    bargs = {"m": m, "v": v, "out": out, "grad_out": ones, "grad_m": gm, "grad_v": gv}

    def vg():
        vyre.dispatch(fwd, fargs, backend="cuda")
        gm.fill(0)
        gv.fill(0)
        vyre.dispatch(bwd, bargs, backend="cuda")

    vg()
    mm = m.reshape(r, c)
    err = float(cp.max(cp.abs(gv - mm.sum(axis=0)))) / float(cp.max(cp.abs(mm.sum(axis=0))))
    t_v = cuda_time(vg, reps=10)
    tm = torch.as_tensor(m, device="cuda").reshape(r, c).clone().requires_grad_(True)
    tv = torch.as_tensor(v, device="cuda").clone().requires_grad_(True)

    def tvg():
        tm.grad = None
        tv.grad = None
        (tm @ tv).sum().backward()

    t_t = cuda_time(tvg, reps=10)
    print(f"| what | time (ms) |\n|---|---|\n| vyre fwd + bwd (atomics into grad_v) | {t_v * 1e3:.3f} |"
          f"\n| PyTorch eager (cuBLAS) | {t_t * 1e3:.3f} |\n\nrelative error of grad_v: {err:.2e}")
    RESULTS["matvec_ms"] = {"vyre": t_v * 1e3, "torch": t_t * 1e3}


@section
def ops():
    """vyre.ops: reductions, row-wise ops and matvec against CuPy / PyTorch (f32, same card, same run)"""
    import cupy as cp
    import torch
    import torch.nn.functional as F

    import vyre
    import vyre.ops as vo
    from vyre.autodiff import grad
    from vyre.examples import matvec as matvec_example

    rows = []
    res: dict[str, dict[str, float]] = {}

    def timed(fn, reps=20):
        """(end-to-end seconds per call as cuda_time measures it, fn)"""
        return cuda_time(fn, reps=reps), fn

    def row(name, v, r, ref, err):
        (t_v, f_v), (t_r, f_r) = v, r
        print(f"| {name} | {t_v * 1e3:.4f} | {t_r * 1e3:.4f} ({ref}) | {t_r / t_v:.2f}x | {err:.1e} |", flush=True)
        res[name] = {"vyre_ms": t_v * 1e3, "ref_ms": t_r * 1e3, "speed": t_r / t_v, "rel_err": err}
        rows.append((name, t_v, t_r, ref, err, f_v, f_r))  # GPU times after every end-to-end row

    def rel(a, b):
        a, b = cp.asarray(a, dtype=cp.float64), cp.asarray(b, dtype=cp.float64)
        return float(cp.max(cp.abs(a - b))) / max(float(cp.max(cp.abs(b))), 1e-30)

    # correctness on the card first: odd lengths and shapes (both row forms), f32 and f64, 2^28
    bad = []
    for n_, dt in [(0, cp.float32), (1, cp.float64), (97, cp.float32), (1000003, cp.float32),
                   (1000003, cp.float64), (1 << 28, cp.float32)]:
        a = cp.random.standard_normal(n_, dtype=cp.float32).astype(dt)
        ref = float(cp.sum(a.astype(cp.float64)))
        if abs(float(vo.sum(a)) - ref) > 1e-6 * (1 + float(cp.sum(cp.abs(a.astype(cp.float64))))):
            bad.append(f"sum n={n_} {dt.__name__}")
        if n_ and (float(vo.max(a)) != float(cp.max(a)) or int(vo.argmax(a)) != int(cp.argmax(a))):
            bad.append(f"max/argmax n={n_}")
        del a
    for r_, c_ in [(7, 1000), (3, 5000), (5, 33)]:
        a = torch.randn(r_, c_, device="cuda", dtype=torch.float64)
        checks = [(vo.softmax(a), torch.softmax(a, -1)), (vo.logsumexp(a), torch.logsumexp(a, -1)),
                  (vo.layer_norm(a), F.layer_norm(a, (c_,))), (vo.row_sum(a), a.sum(-1))]
        for k, (got, want) in enumerate(checks):
            if not torch.allclose(got, want, rtol=1e-9, atol=1e-9):
                bad.append(f"row op {k} {r_}x{c_}")
    # along axes: CUDA tensors permuted, CuPy arrays transposed, in the caller's library
    t3 = torch.randn(3, 50, 70, device="cuda", dtype=torch.float64)
    c3 = cp.asarray(t3)
    axis_checks = [(vo.sum(t3, 1), t3.sum(1)), (vo.max(t3, (0, 2)), t3.amax((0, 2))),
                   (vo.mean(t3, -1, keepdims=True), t3.mean(-1, keepdim=True)),
                   (vo.softmax(t3, 0), torch.softmax(t3, 0)), (vo.logsumexp(t3, 1), torch.logsumexp(t3, 1)),
                   (vo.layer_norm(t3, 1e-5, (1, 2)), F.layer_norm(t3, (50, 70))),
                   (torch.as_tensor(vo.norm(c3, 1), device="cuda"), torch.linalg.vector_norm(t3, dim=1))]
    for k, (got, want) in enumerate(axis_checks):
        if type(got) is not type(want) or not torch.allclose(got, want, rtol=1e-9, atol=1e-9):
            bad.append(f"along axes {k}")
    if not isinstance(vo.min(c3, 0), cp.ndarray):
        bad.append("along axes: CuPy in, CuPy out")
    t3[1, 7, 9] = float("nan")
    for axis in (0, 1, 2):  # torch.argmax's NaN and tie rule is numpy's
        if not torch.equal(vo.argmax(t3, axis).long(), torch.argmax(t3, axis)):
            bad.append(f"argmax along axis {axis}")
    # the tiled column form (vyre/ops/colwise.py) over shapes of one, two and three passes, tails
    # of tiles and splits, f32 and f64, NaN, -inf: against PyTorch in float64
    for shape, axis in [((4097, 33), 0), ((100003, 16), 0), ((7, 65537), 0), ((3, 1000, 40), 1),
                        ((2, 3, 50, 70), (1, 2)), ((1 << 20, 8), 0)]:
        for tdt in (torch.float32, torch.float64):
            a = torch.randn(*shape, device="cuda", dtype=tdt)
            a.view(-1)[a.numel() // 3] = float("nan")
            a.select(-1, 1).fill_(float("-inf"))  # a column of -inf only: argmax's answer is its first row
            ad = a.double()
            ref = {"sum": ad.sum(axis), "mean": ad.mean(axis), "norm": torch.linalg.vector_norm(ad, dim=axis),
                   "max": ad.amax(axis), "min": ad.amin(axis)}
            for kind, want in ref.items():
                got = getattr(vo, kind)(a, axis).double()
                tol = 1e-5 if tdt is torch.float32 else 1e-12
                if not torch.allclose(got, want, rtol=tol, atol=tol * (1 + shape[0]), equal_nan=True):
                    bad.append(f"{kind} along {axis} of {shape} {tdt}")
            if isinstance(axis, int) and not torch.equal(vo.argmax(a, axis).long(), torch.argmax(a, axis)):
                bad.append(f"argmax along {axis} of {shape} {tdt}")
            b = a.clone()
            b.view(-1)[a.numel() // 3] = 0.0
            b = torch.round(b * 2)  # ties
            if isinstance(axis, int) and not torch.equal(vo.argmax(b, axis).long(), torch.argmax(b, axis)):
                bad.append(f"argmax ties along {axis} of {shape} {tdt}")
            del a, ad, b
    from numba import cuda as nb_cuda  # numba's device arrays take the same form (no plan: checked each call)

    h = np.random.default_rng(2).standard_normal((3000, 40)).astype(np.float32)
    h[:, 7] = -np.inf
    dh = nb_cuda.to_device(h)
    if not (np.allclose(vo.sum(dh, 0).copy_to_host(), h.astype(np.float64).sum(0), rtol=1e-5, equal_nan=True)
            and np.array_equal(vo.argmax(dh, 0).copy_to_host().astype(np.int64), np.argmax(h, 0))):
        bad.append("numba device array along axis 0")
    mm, vv = cp.random.standard_normal((1000, 777)), cp.random.standard_normal(777)
    if float(cp.max(cp.abs(vo.matvec(mm, vv) - mm @ vv))) > 1e-9:
        bad.append("matvec 1000x777")
    # replayed calls (vyre/ops/_plans.py: the second call of a key replays the first's launches):
    # every op three times on CuPy arrays and CUDA tensors, the same bits each time, new result
    # arrays every call (an earlier result never changes), the caller's library and device
    from vyre.ops import _plans

    def same(a, b):
        if isinstance(a, tuple):
            return isinstance(b, tuple) and len(a) == len(b) and all(map(same, a, b))
        if type(a) is not type(b) or tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            return False
        ha = a.cpu().numpy() if hasattr(a, "cpu") else cp.asnumpy(a)
        hb = b.cpu().numpy() if hasattr(b, "cpu") else cp.asnumpy(b)
        return bool(np.array_equal(ha, hb, equal_nan=True))

    def copy(a):
        return tuple(map(copy, a)) if isinstance(a, tuple) else a.clone() if hasattr(a, "clone") else a.copy()

    def replay_cases(x, y, m, m2, v, gr):
        lse = vo.logsumexp(m)
        _, mu, rs = vo.layer_norm(m, return_stats=True)
        return {"sum": lambda: vo.sum(x), "mean": lambda: vo.mean(x), "max": lambda: vo.max(x),
                "argmax": lambda: vo.argmax(x), "dot": lambda: vo.dot(x, y), "norm": lambda: vo.norm(x),
                "row_sum": lambda: vo.row_sum(m), "softmax+lse": lambda: vo.softmax(m, return_lse=True),
                "layer_norm+stats": lambda: vo.layer_norm(m, return_stats=True),
                "softmax_grad": lambda: vo.softmax_grad(m, m2),
                "logsumexp_grad": lambda: vo.logsumexp_grad(m, lse, gr),
                "layer_norm_grad": lambda: vo.layer_norm_grad(m, m2, mu, rs),
                "matvec": lambda: vo.matvec(m, v), "matvec_grad": lambda: vo.matvec_grad(m, v, gr)}

    _plans.forget()
    replay_bad, replayed = [], 0
    for lib in ("cupy", "torch"):
        for dt in ("float32", "float64"):
            g = np.random.default_rng(5)
            host = [g.standard_normal(s_).astype(dt) for s_ in ((4099,), (4099,), (37, 300), (37, 300), (300,), (37,))]
            x, y, m, m2, v, gr = (cp.asarray(h) if lib == "cupy" else torch.from_numpy(h).cuda() for h in host)
            for name, f in replay_cases(x, y, m, m2, v, gr).items():
                first = f()
                kept = copy(first)
                second, third = f(), f()
                if not (same(second, kept) and same(third, kept) and same(first, kept)):
                    replay_bad.append(f"{name} {lib} {dt}")
        replayed = len(_plans._plans)
    print(f"replayed calls (CuPy and torch, f32 and f64, 14 ops): {replayed} plans; "
          f"{'all bit-identical, results new each call' if not replay_bad else 'FAILED: ' + ', '.join(replay_bad)}")
    bad += replay_bad
    print(f"correctness on this card: {'all passed' if not bad else 'FAILED: ' + ', '.join(bad)}\n")
    res["correct"] = {"failed": bad}
    print("| op | vyre (ms) | reference (ms) | speed vs reference | rel. error |\n|---|---|---|---|---|", flush=True)

    n = 1 << 26
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.random.standard_normal(n, dtype=cp.float32)
    x64 = x.astype(cp.float64)
    row("sum 2^26", timed(lambda: vo.sum(x)), timed(lambda: cp.sum(x)), "cupy.sum",
        rel(vo.sum(x), cp.sum(x64)))
    row("sum 2^26, deterministic=True", timed(lambda: vo.sum(x, deterministic=True)),
        timed(lambda: cp.sum(x)), "cupy.sum", rel(vo.sum(x, deterministic=True), cp.sum(x64)))
    same = all(float(vo.sum(x)) == float(vo.sum(x)) for _ in range(5))
    print(f"five repeated vyre.ops.sum calls bit-identical: {same}")
    row("dot 2^26", timed(lambda: vo.dot(x, y)), timed(lambda: cp.dot(x, y)), "cupy.dot",
        rel(vo.dot(x, y), cp.dot(x64, y.astype(cp.float64))))
    row("max 2^26", timed(lambda: vo.max(x)), timed(lambda: cp.max(x)), "cupy.max", rel(vo.max(x), cp.max(x)))
    row("norm 2^26", timed(lambda: vo.norm(x)), timed(lambda: cp.linalg.norm(x)), "cupy.linalg.norm",
        rel(vo.norm(x), cp.linalg.norm(x64)))
    row("argmax 2^26", timed(lambda: vo.argmax(x)), timed(lambda: cp.argmax(x)), "cupy.argmax",
        float(int(vo.argmax(x)) != int(cp.argmax(x))))
    del x64

    r = c = 4096
    tx = torch.randn(r, c, device="cuda")
    tg = torch.randn(r, c, device="cuda")
    tgr = torch.randn(r, device="cuda")
    t3b = torch.randn(64, 4096, 64, device="cuda")
    row("softmax 4096x4096", timed(lambda: vo.softmax(tx)), timed(lambda: torch.softmax(tx, -1)),
        "torch.softmax", rel(cp.asarray(vo.softmax(tx)), cp.asarray(torch.softmax(tx, -1))))
    row("logsumexp 4096x4096", timed(lambda: vo.logsumexp(tx)), timed(lambda: torch.logsumexp(tx, -1)),
        "torch.logsumexp", rel(cp.asarray(vo.logsumexp(tx)), cp.asarray(torch.logsumexp(tx, -1))))
    row("layer_norm 4096x4096", timed(lambda: vo.layer_norm(tx)),
        timed(lambda: F.layer_norm(tx, (c,))), "F.layer_norm",
        rel(cp.asarray(vo.layer_norm(tx)), cp.asarray(F.layer_norm(tx, (c,)))))
    row("row_sum 4096x4096", timed(lambda: vo.row_sum(tx)), timed(lambda: tx.sum(-1)), "torch.sum(-1)",
        rel(cp.asarray(vo.row_sum(tx)), cp.asarray(tx.double().sum(-1))))
    row("row_max 4096x4096", timed(lambda: vo.row_max(tx)), timed(lambda: tx.amax(-1)), "torch.amax(-1)",
        rel(cp.asarray(vo.row_max(tx)), cp.asarray(tx.amax(-1))))
    # along other axes: the column forms (vyre/ops/colwise.py), the row argmax
    row("sum(a, 0) 4096x4096", timed(lambda: vo.sum(tx, 0)), timed(lambda: tx.sum(0)), "torch.sum(0)",
        rel(cp.asarray(vo.sum(tx, 0)), cp.asarray(tx.double().sum(0))))
    row("max(a, 0) 4096x4096", timed(lambda: vo.max(tx, 0)), timed(lambda: tx.amax(0)), "torch.amax(0)",
        rel(cp.asarray(vo.max(tx, 0)), cp.asarray(tx.amax(0))))
    row("argmax(a, 0) 4096x4096", timed(lambda: vo.argmax(tx, 0)), timed(lambda: tx.argmax(0)), "torch.argmax(0)",
        float((vo.argmax(tx, 0).long() != tx.argmax(0)).sum()))
    row("argmax(a, -1) 4096x4096", timed(lambda: vo.argmax(tx, -1)), timed(lambda: tx.argmax(-1)),
        "torch.argmax(-1)", float((vo.argmax(tx, -1).long() != tx.argmax(-1)).sum()))
    row("sum(a, 1) 64x4096x64", timed(lambda: vo.sum(t3b, 1)), timed(lambda: t3b.sum(1)), "torch.sum(1)",
        rel(cp.asarray(vo.sum(t3b, 1)), cp.asarray(t3b.double().sum(1))))
    cx = cp.asarray(tx)
    row("sum(a, 0) 4096x4096 CuPy", timed(lambda: vo.sum(cx, 0)), timed(lambda: cx.sum(0)), "cupy.sum(0)",
        rel(vo.sum(cx, 0), cx.astype(cp.float64).sum(0)))
    for shape in [(65536, 256), (262144, 16), (256, 65536)]:
        ts = torch.randn(*shape, device="cuda")
        label = "x".join(map(str, shape))
        # (default arguments: the GPU-time pass after the table calls these again)
        row(f"sum(a, 0) {label}", timed(lambda ts=ts: vo.sum(ts, 0)), timed(lambda ts=ts: ts.sum(0)),
            "torch.sum(0)", rel(cp.asarray(vo.sum(ts, 0)), cp.asarray(ts.double().sum(0))))
        row(f"argmax(a, 0) {label}", timed(lambda ts=ts: vo.argmax(ts, 0)), timed(lambda ts=ts: ts.argmax(0)),
            "torch.argmax(0)", float((vo.argmax(ts, 0).long() != ts.argmax(0)).sum()))

    # value and gradient: vyre's forward + gradient program against PyTorch's forward + backward
    def vg_softmax():
        return vo.softmax_grad(vo.softmax(tx), tg)

    txr = tx.clone().requires_grad_(True)

    def tvg(fn, cot):
        txr.grad = None
        fn(txr).backward(cot)
        return txr.grad

    row("softmax value+grad", timed(vg_softmax), timed(lambda: tvg(lambda a: torch.softmax(a, -1), tg)),
        "torch fwd+bwd", rel(cp.asarray(vg_softmax()), cp.asarray(tvg(lambda a: torch.softmax(a, -1), tg))))

    def vg_lse():
        return vo.logsumexp_grad(tx, vo.logsumexp(tx), tgr)

    row("logsumexp value+grad", timed(vg_lse), timed(lambda: tvg(lambda a: torch.logsumexp(a, -1), tgr)),
        "torch fwd+bwd", rel(cp.asarray(vg_lse()), cp.asarray(tvg(lambda a: torch.logsumexp(a, -1), tgr))))

    def vg_ln():
        _, mu, rs = vo.layer_norm(tx, return_stats=True)
        return vo.layer_norm_grad(tx, tg, mu, rs)

    row("layer_norm value+grad", timed(vg_ln), timed(lambda: tvg(lambda a: F.layer_norm(a, (c,)), tg)),
        "torch fwd+bwd", rel(cp.asarray(vg_ln()), cp.asarray(tvg(lambda a: F.layer_norm(a, (c,)), tg))))

    m = cp.random.standard_normal((r, c), dtype=cp.float32)
    v = cp.random.standard_normal(c, dtype=cp.float32)
    row("matvec 4096x4096", timed(lambda: vo.matvec(m, v)), timed(lambda: m @ v), "cuBLAS (cupy)",
        rel(vo.matvec(m, v), m.astype(cp.float64) @ v.astype(cp.float64)))
    g = cp.ones(r, cp.float32)

    def vg_mv():
        vo.matvec(m, v)
        return vo.matvec_grad(m, v, g)

    tm = torch.as_tensor(m, device="cuda").clone().requires_grad_(True)
    tv = torch.as_tensor(v, device="cuda").clone().requires_grad_(True)

    def tvg_mv():
        tm.grad = None
        tv.grad = None
        (tm @ tv).sum().backward()

    t_ref = timed(tvg_mv, reps=10)
    row("matvec value+grad", timed(vg_mv, reps=10), t_ref, "torch fwd+bwd (cuBLAS)",
        rel(vg_mv()[1], m.astype(cp.float64).sum(axis=0)))
    # before: the examples.matvec program (one invocation per row) through vyre.autodiff
    fwd = matvec_example()
    bwd = grad(fwd, ["out"], ["m", "v"])
    mf, out = m.reshape(-1), cp.empty(r, cp.float32)
    gm, gv = cp.zeros_like(mf), cp.zeros_like(v)

    def vg_old():
        vyre.dispatch(fwd, {"m": mf, "v": v, "out": out}, backend="cuda")
        gm.fill(0)
        gv.fill(0)
        vyre.dispatch(bwd, {"m": mf, "v": v, "out": out, "grad_out": g, "grad_m": gm, "grad_v": gv},
                      backend="cuda")

    vg_old()
    row("matvec value+grad, before: examples.matvec via autodiff", timed(vg_old, reps=10), t_ref,
        "torch fwd+bwd (cuBLAS)", rel(gv, m.astype(cp.float64).sum(axis=0)))
    x = cp.random.standard_normal(n, dtype=cp.float32)
    small = cp.random.standard_normal(1 << 12, dtype=cp.float32)
    mid = cp.random.standard_normal(1 << 16, dtype=cp.float32)
    h_sum = host_time_per_call(lambda: vo.sum(small), n=2000)
    h_cp = host_time_per_call(lambda: cp.sum(small), n=2000)
    h_sum2 = host_time_per_call(lambda: vo.sum(mid), n=2000)
    h_cp2 = host_time_per_call(lambda: cp.sum(mid), n=2000)
    h_sm = host_time_per_call(lambda: vo.softmax(tx[:4]), n=2000)
    h_tsm = host_time_per_call(lambda: torch.softmax(tx[:4], -1), n=2000)
    h_mv = host_time_per_call(lambda: vo.matvec(m[:8], v), n=2000)
    h_cmv = host_time_per_call(lambda: m[:8] @ v, n=2000)
    print(f"\nhost time per call: vyre.ops.sum of 4096 elements (one launch) {h_sum * 1e6:.1f} us, cupy.sum "
          f"{h_cp * 1e6:.1f} us; of 2^16 (two launches) {h_sum2 * 1e6:.1f} us, cupy.sum {h_cp2 * 1e6:.1f} us; "
          f"vyre.ops.softmax (4 rows, one launch) {h_sm * 1e6:.1f} us, torch.softmax "
          f"{h_tsm * 1e6:.1f} us; vyre.ops.matvec (8 rows) {h_mv * 1e6:.1f} us, cupy m @ v {h_cmv * 1e6:.1f} us")
    res["host_us"] = {"vyre_sum": h_sum * 1e6, "cupy_sum": h_cp * 1e6, "vyre_softmax": h_sm * 1e6,
                      "torch_softmax": h_tsm * 1e6, "vyre_matvec": h_mv * 1e6, "cupy_matvec": h_cmv * 1e6}
    # GPU time last, after every end-to-end and host sample: a profiler session may leave CUPTI
    # attached to later launches, which would load the times measured after it
    print("\n| op | vyre (ms) | reference (ms) | speed vs reference | vyre GPU time (ms) | reference GPU time "
          "(ms) | GPU-time speed | rel. error |\n|---|---|---|---|---|---|---|---|")
    for name, t_v, t_r, ref, err, f_v, f_r in rows:
        k_v, k_r = kernel_time(f_v), kernel_time(f_r)
        res[name].update(vyre_gpu_ms=k_v * 1e3, ref_gpu_ms=k_r * 1e3)
        print(f"| {name} | {t_v * 1e3:.4f} | {t_r * 1e3:.4f} ({ref}) | {t_r / t_v:.2f}x | {k_v * 1e3:.4f} | "
              f"{k_r * 1e3:.4f} | {k_r / k_v:.2f}x | {err:.1e} |", flush=True)
    RESULTS["ops"] = res


@section
def histogram():
    """Histogram of 2^26 u32 keys: grouped counts (a constant add) vs adding a loaded 1, and CuPy"""
    import cupy as cp

    import vyre
    from vyre.ir import U32, LitU32, Program, atomic_add, buflen, gid, if_, let, output, read, var

    n = 1 << 26
    keys = cp.random.randint(0, 1 << 30, n, dtype=cp.uint32)
    print("| bins | vyre, constant add (ms) | vyre, loaded 1 (plain atomics) (ms) | CuPy bincount (ms) |")
    print("|---|---|---|---|")
    rows = {}
    for k in (16, 256, 65536):
        def prog(constant: bool, k: int = k) -> Program:
            x, one, out = read("x", 0, U32), read("one", 1, U32), output("out", 2, U32).with_count(k)
            i = var("i")
            value = LitU32(1) if constant else one[0]
            return Program.wrapped([x, one, out], 256, [
                let("i", gid()), if_(i.lt(buflen(x)), [let("u", atomic_add(out, x[i] % k, value))])])

        one = cp.ones(1, cp.uint32)
        times = []
        ref = cp.bincount((keys % k).astype(cp.int64), minlength=k).astype(cp.uint32)
        for constant in (True, False):
            p = prog(constant)
            out = cp.zeros(k, cp.uint32)
            args = {"x": keys, "one": one, "out": out}
            vyre.dispatch(p, args, backend="cuda", grid=n // 256)
            assert bool((out == ref).all()), f"histogram with {k} bins is wrong (constant={constant})"

            def run(p=p, args=args, out=out):
                out.fill(0)
                vyre.dispatch(p, args, backend="cuda", grid=n // 256)

            times.append(cuda_time(run, reps=10))
        t_cp = cuda_time(lambda k=k: cp.bincount((keys % k).astype(cp.int64), minlength=k), reps=10)
        print(f"| {k} | {times[0] * 1e3:.3f} | {times[1] * 1e3:.3f} | {t_cp * 1e3:.3f} |")
        rows[k] = {"constant": times[0] * 1e3, "loaded": times[1] * 1e3, "cupy": t_cp * 1e3}
    RESULTS["histogram_ms"] = rows


def _close(a, b, tol=1e-4):
    import cupy as cp

    a, b = cp.asarray(a, dtype=cp.float64), cp.asarray(b, dtype=cp.float64)
    return float(cp.max(cp.abs(a - b) / cp.maximum(1, cp.abs(b)))) < tol


def _handle_numbers(prog) -> dict[str, object]:
    """The value_and_grad handle: at 2^26 device time vs the bare fused kernel; at 2^10 host time per
    call on CuPy arrays and PyTorch tensors; every loss a fresh value that later calls leave alone."""
    import cupy as cp
    import torch

    import vyre
    from vyre.autodiff import grad, value_and_grad_fn

    res: dict[str, object] = {}

    def ref_grads(x, y):
        ex = cp.exp(x.astype(cp.float64))
        return ex * y + cp.sin(x) + x * cp.cos(x), ex, float((ex * y + cp.sin(x) * x).sum())

    def case(n: int) -> None:
        x = cp.random.standard_normal(n, dtype=cp.float32)
        y = cp.random.standard_normal(n, dtype=cp.float32)
        args = {"x": x, "y": y, "out": cp.zeros(n, cp.float32)}
        vg = value_and_grad_fn(prog, "out", ["x", "y"], backend="cuda")
        gx_ref, gy_ref, loss_ref = ref_grads(x, y)
        losses = []
        for _ in range(4):  # the first calls go through dispatch, later ones through the handle's launch
            loss, g = vg(args)
            losses.append(loss)
            assert _close(g["x"], gx_ref) and _close(g["y"], gy_ref), "handle gradient"
            assert abs(float(loss) - loss_ref) <= 1e-4 * abs(loss_ref), (float(loss), loss_ref)
        assert len({id(v) for v in losses}) == 4, "a loss object was handed out twice"
        x2 = x * 0.5
        vg({"x": x2, "y": y, "out": args["out"]})
        loss_c, _ = vg(args)
        assert all(abs(float(v) - loss_ref) <= 1e-4 * abs(loss_ref) for v in losses), "a later call overwrote a loss"
        assert abs(float(loss_c) - loss_ref) <= 1e-4 * abs(loss_ref)
        fused = grad(prog, ["out"], ["x", "y"], accumulate=False, with_value=True, unit_cotangent=True)
        fz = {"x": x, "y": y, "out": cp.empty_like(x), "grad_x": cp.empty_like(x), "grad_y": cp.empty_like(x)}
        vyre.dispatch(fused, fz, backend="cuda")
        if n > 4096:
            t_h = cuda_time(lambda: vg(args))
            t_k = cuda_time(lambda: vyre.dispatch(fused, fz, backend="cuda"))
            t_ks = cuda_time(lambda: (vyre.dispatch(fused, fz, backend="cuda"), fz["out"].sum()))
            print(f"handle at 2^26: {t_h * 1e3:.3f} ms vs bare fused kernel {t_k * 1e3:.3f} ms "
                  f"({t_h / t_k:.3f}x); fused kernel + cp.sum {t_ks * 1e3:.3f} ms ({t_ks / t_k:.3f}x)")
            res["handle_2_26"] = {"handle_ms": t_h * 1e3, "kernel_ms": t_k * 1e3, "kernel_sum_ms": t_ks * 1e3}
            return
        targs = {k: torch.as_tensor(v, device="cuda") for k, v in args.items()}
        tloss = [vg(targs)[0] for _ in range(4)]
        assert all(type(v) is torch.Tensor and abs(float(v) - loss_ref) <= 1e-4 * abs(loss_ref) for v in tloss)
        h_k = host_time_per_call(lambda: vyre.dispatch(fused, fz, backend="cuda"), n=5000)
        h_h = host_time_per_call(lambda: vg(args), n=5000)
        h_t = host_time_per_call(lambda: vg(targs), n=5000)
        print(f"handle at 2^10: {h_h * 1e6:.2f} us host per call on CuPy arrays, {h_t * 1e6:.2f} us on PyTorch "
              f"tensors (bare fused dispatch {h_k * 1e6:.2f} us); every loss a fresh value, checked")
        res["handle_2_10_us"] = {"handle": h_h * 1e6, "handle_torch": h_t * 1e6, "dispatch": h_k * 1e6}

    for n in (1 << 26, 1 << 10):
        case(n)
    return res


def _torch_dispatch_numbers() -> dict[str, float]:
    """vyre.dispatch host time per call, PyTorch CUDA tensors vs CuPy arrays (1024-element add); on
    torch.cuda.stream(s) a dependent chain stays ordered."""
    import cupy as cp
    import torch

    import vyre
    from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var

    a_, b_, o_ = read("a", 0, F32), read("b", 1, F32), output("o", 2, F32)
    i = var("i")
    add = Program.wrapped([a_, b_, o_], 256, [let("i", gid()), if_(i.lt(buflen(o_)), [store(o_, i, a_[i] + b_[i])])])
    n = 1024
    ta, tb, to = torch.ones(n, device="cuda"), torch.ones(n, device="cuda"), torch.zeros(n, device="cuda")
    ca, cb, co = cp.ones(n, cp.float32), cp.ones(n, cp.float32), cp.zeros(n, cp.float32)
    targs, cargs = {"a": ta, "b": tb, "o": to}, {"a": ca, "b": cb, "o": co}
    vyre.dispatch(add, targs, backend="cuda")
    vyre.dispatch(add, targs, backend="cuda")
    from vyre.driver.dispatch import _by_identity

    assert _by_identity[(id(add), "cuda")][1]._fast is not None, "torch tensors did not take the cached launch"
    assert float(to[3]) == 2.0
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # a dependent chain on a side stream: vyre must run on s, in order
        for _ in range(50):
            ta.add_(1.0)
            vyre.dispatch(add, targs, backend="cuda")
            tb.copy_(to)
    s.synchronize()
    # a = 1 + (k + 1), o = a + b, b = o: b ends at 1 + sum_{k<50} (k + 2) = 1326
    assert float(to[0]) == float(tb[0]) == 1326.0 and float(ta[0]) == 51.0, (float(to[0]), float(ta[0]))
    print(f"PyTorch tensors: cached launch taken; on torch.cuda.stream(s) the chain stays ordered "
          f"(o = {float(to[0])})")
    ta.fill_(1.0), tb.fill_(1.0)
    vyre.dispatch(add, cargs, backend="cuda")
    vyre.dispatch(add, cargs, backend="cuda")
    samples: dict[str, list[float]] = {"torch": [], "cupy": []}
    for _ in range(5):
        samples["torch"].append(host_time_per_call(lambda: vyre.dispatch(add, targs, backend="cuda"), n=10000))
        samples["cupy"].append(host_time_per_call(lambda: vyre.dispatch(add, cargs, backend="cuda"), n=10000))
    t_t, t_c = (statistics.median(v) for v in samples.values())
    print(f"vyre.dispatch host time per call: PyTorch tensors {t_t * 1e6:.2f} us, CuPy arrays {t_c * 1e6:.2f} us "
          f"({t_t / t_c:.2f}x)")
    return {"torch": t_t * 1e6, "cupy": t_c * 1e6}


@section
def host_overhead():
    """Host time of the value_and_grad handle and of dispatch with PyTorch tensors (issue 14's host targets)"""
    from vyre.examples import fused_chain

    RESULTS["host_overhead"] = {**_handle_numbers(fused_chain()), "dispatch_us": _torch_dispatch_numbers()}


def _graph_numbers() -> dict[str, float]:
    """A CUDA graph of a small step (fused value+grad by the handle, momentum, update) and of a matvec
    handle whose gradient is accumulated by atomics: replay == eager, host and device time."""
    import cupy as cp

    import vyre
    from vyre.autodiff import value_and_grad_fn
    from vyre.examples import fused_chain, matvec
    from vyre.ir import F32, Program, buflen, gid, if_, let, read, read_write, store, var

    prog = fused_chain()
    close = _close
    # a small SGD-with-momentum step of 3 kernels (fused value+grad, momentum, update) and the loss
    # partials' zero fill, captured and replayed
    i = var("i")
    n = 1024
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.random.standard_normal(n, dtype=cp.float32)
    sargs = {"x": x, "y": y, "out": cp.zeros(n, cp.float32)}
    vg = value_and_grad_fn(prog, "out", ["x", "y"], backend="cuda")
    _, g = vg(sargs)
    mx, my = cp.zeros(n, cp.float32), cp.zeros(n, cp.float32)
    m1, m2, g1, g2 = read_write("m1", 0, F32), read_write("m2", 1, F32), read("g1", 2, F32), read("g2", 3, F32)
    mom = Program.wrapped([m1, m2, g1, g2], 256, [let("i", gid()), if_(i.lt(buflen(m1)), [
        store(m1, i, m1[i] * 0.9 + g1[i]), store(m2, i, m2[i] * 0.9 + g2[i])])])
    p1, p2, n1, n2 = read_write("p1", 0, F32), read_write("p2", 1, F32), read("n1", 2, F32), read("n2", 3, F32)
    upd = Program.wrapped([p1, p2, n1, n2], 256, [let("i", gid()), if_(i.lt(buflen(p1)), [
        store(p1, i, p1[i] - n1[i] * 1e-4), store(p2, i, p2[i] - n2[i] * 1e-4)])])
    margs = {"m1": mx, "m2": my, "g1": g["x"], "g2": g["y"]}
    uargs = {"p1": x, "p2": y, "n1": mx, "n2": my}

    def eager_step():
        loss, _ = vg(sargs)
        vyre.dispatch(mom, margs, backend="cuda")
        vyre.dispatch(upd, uargs, backend="cuda")
        return loss

    for _ in range(3):
        eager_step()
    x0, y0, mx0, my0 = x.copy(), y.copy(), mx.copy(), my.copy()
    with vyre.graph.capture() as gr:
        parts, _ = vg(sargs)
        vyre.dispatch(mom, margs, backend="cuda")
        vyre.dispatch(upd, uargs, backend="cuda")
    cp.cuda.Device().synchronize()
    assert bool((x == x0).all()), "capture ran something"
    for _ in range(10):
        gr.replay()
    cp.cuda.Device().synchronize()
    x_graph, loss_graph = x.copy(), float(parts.sum())
    x[:], y[:], mx[:], my[:] = x0, y0, mx0, my0
    for _ in range(10):
        loss_eager = eager_step()
    cp.cuda.Device().synchronize()
    assert close(x_graph, x, 1e-6) and abs(loss_graph - float(loss_eager)) <= 1e-6 * abs(loss_graph), \
        "graph replay differs from eager steps"

    def enqueue_time(fn, reps=200, rounds=20):  # host time to issue one step, the GPU queue kept short
        ts = []
        for _ in range(rounds):
            cp.cuda.Device().synchronize()
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            ts.append((time.perf_counter() - t) / reps)
        cp.cuda.Device().synchronize()
        return statistics.median(ts)

    h_graph = enqueue_time(gr.replay)
    h_eager = enqueue_time(eager_step)
    d_graph = cuda_time(gr.replay, per_sample=20)
    d_eager = cuda_time(eager_step, per_sample=20)
    print(f"CUDA graph of a 3-kernel step at 2^10 (fused value+grad, momentum, update; plus the loss partials' "
          f"zero fill; {gr.kernels} graph nodes): replay {h_graph * 1e6:.2f} us host ({h_graph * 1e6 / 3:.2f} us per "
          f"kernel), {d_graph * 1e6:.2f} us device per step; eagerly {h_eager * 1e6:.2f} us host, "
          f"{d_eager * 1e6:.2f} us device; replay == eager")
    # gradients accumulated by atomics (matvec's shared vector) need their zero fill inside the graph too
    mv = value_and_grad_fn(matvec(), "out", ["v"], backend="cuda")
    mm = cp.random.standard_normal(256 * 64, dtype=cp.float32)
    vv = cp.random.standard_normal(64, dtype=cp.float32)
    mvargs = {"m": mm, "v": vv, "out": cp.zeros(256, cp.float32)}
    _, gm = mv(mvargs)
    ref_v = gm["v"].copy()
    with vyre.graph.capture() as gm_graph:
        mv(mvargs)
    for _ in range(3):
        gm_graph.replay()
    cp.cuda.Device().synchronize()
    assert close(gm["v"], ref_v, 1e-5), "the graph accumulated the matvec gradient without its zero fill"
    return {"replay_host_us": h_graph * 1e6, "eager_host_us": h_eager * 1e6, "nodes": gr.kernels,
            "replay_device_us": d_graph * 1e6, "eager_device_us": d_eager * 1e6}


@section
def graph_step():
    """CUDA graphs: a 3-kernel step with the value_and_grad handle, and an atomics-accumulated gradient"""
    RESULTS["graph_step"] = _graph_numbers()


@section
def device_runners():
    """Gradients on the device: runners on CuPy / PyTorch / JAX arrays, the value_and_grad handle, PyTorch
    tensors on the cached launch, vyre.torch.function on CUDA, CUDA graphs"""
    import cupy as cp
    import torch

    import vyre
    import vyre.torch as vt
    from vyre.autodiff import check_grad, hvp, jvp, promote_f64, run_forward, value_and_grad
    from vyre.autodiff import vjp
    from vyre.examples import fused_chain

    res: dict[str, object] = {}
    prog = fused_chain()

    def ref_grads(x, y):
        ex = cp.exp(x.astype(cp.float64))
        return ex * y + cp.sin(x) + x * cp.cos(x), ex, float((ex * y + cp.sin(x) * x).sum())

    def close(a, b, tol=1e-4):
        a, b = cp.asarray(a, dtype=cp.float64), cp.asarray(b, dtype=cp.float64)
        return float(cp.max(cp.abs(a - b) / cp.maximum(1, cp.abs(b)))) < tol

    # 1. one-off runners on CuPy, PyTorch CUDA and numba device arrays: results of the caller's kind
    n = 1 << 20
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.random.standard_normal(n, dtype=cp.float32)
    gx_ref, gy_ref, loss_ref = ref_grads(x, y)
    kinds = {"cupy": (lambda a: a), "torch": (lambda a: torch.as_tensor(a, device="cuda")),
             "numba": (lambda a: __import__("numba").cuda.as_cuda_array(a))}
    for name, conv in kinds.items():
        args = {"x": conv(x), "y": conv(y), "out": conv(cp.zeros(n, cp.float32))}
        loss, g = value_and_grad(prog, args, "out", ["x", "y"], backend="cuda")
        assert type(g["x"]) is type(args["x"]), f"{name}: gradient came back as {type(g['x'])}"
        assert close(cp.asarray(g["x"]), gx_ref) and close(cp.asarray(g["y"]), gy_ref), f"{name}: wrong gradient"
        assert abs(float(loss) - loss_ref) <= 1e-4 * abs(loss_ref), f"{name}: loss {float(loss)} vs {loss_ref}"
        cot = conv(cp.ones(n, cp.float32))
        gv = vjp(prog, args, {"out": cot}, ["x"], backend="cuda")["x"]
        assert close(cp.asarray(gv), gx_ref), f"{name}: vjp"
        _, t = jvp(prog, args, {"x": conv(cp.ones(n, cp.float32))}, backend="cuda")
        assert close(cp.asarray(t["out"]), gx_ref), f"{name}: jvp"
        h = hvp(prog, args, "out", ["y"], {"y": conv(cp.ones(n, cp.float32))}, backend="cuda")["y"]
        assert float(cp.max(cp.abs(cp.asarray(h)))) == 0.0, f"{name}: hvp (d2/dy2 = 0)"
        assert run_forward(prog, args, backend="cuda")["out"] is not args["out"]
    small = {"x": x[:64], "y": y[:64], "out": cp.zeros(64, cp.float32)}
    check_grad(prog, small, ["x", "y"], backend="cuda")
    print("runners on CuPy, PyTorch CUDA and numba device arrays: results of the caller's kind, checked")
    # JAX through DLPack / its array interface (read-only inputs; outputs written into CuPy arrays)
    try:
        import jax.numpy as jnp

        jx, jy = jnp.asarray(cp.asnumpy(x[:4096])), jnp.asarray(cp.asnumpy(y[:4096]))
        out = cp.zeros(4096, cp.float32)
        vyre.dispatch(prog, {"x": jx, "y": jy, "out": out}, backend="cuda")
        assert close(out, cp.exp(x[:4096]) * y[:4096] + cp.sin(x[:4096]) * x[:4096])
        loss, g = value_and_grad(prog, {"x": jx, "y": jy, "out": jnp.zeros(4096, jnp.float32)}, "out", ["x"],
                                 backend="cuda")
        assert type(g["x"]).__module__.startswith("jax"), type(g["x"])
        assert close(cp.from_dlpack(g["x"]), gx_ref[:4096]), "jax gradient"
        xs4, ys4 = x[:4096].astype(cp.float64), y[:4096]
        assert abs(float(loss) - float((cp.exp(xs4) * ys4 + cp.sin(xs4) * xs4).sum())) < 1e-3, "jax loss"
        print("JAX arrays: dispatch and value_and_grad, checked")
        res["jax"] = "ok"
    except Exception as e:
        print(f"JAX: FAILED {type(e).__name__}: {e}")
        res["jax"] = f"FAILED {e}"

    # 2. the handle: 2^26 device time vs the bare fused kernel; 2^10 host time per call
    res.update(_handle_numbers(prog))
    # 3. PyTorch CUDA tensors on the cached launch; torch's current stream
    res["dispatch_us"] = _torch_dispatch_numbers()

    # 4. vyre.torch.function on CUDA: gradcheck in float64, torch.compile (inductor) without graph breaks
    f = vt.function(promote_f64(prog), inputs=["x", "y"], outputs=["out"])
    xs = torch.rand(64, dtype=torch.float64, device="cuda", requires_grad=True)
    ys = torch.rand(64, dtype=torch.float64, device="cuda", requires_grad=True)
    assert torch.autograd.gradcheck(f, (xs, ys))
    import torch._dynamo as dynamo

    def step(a, b):
        return (f(a, b) * 2).sum()

    ex = dynamo.explain(step)(xs, ys)
    cstep = torch.compile(step, fullgraph=True)
    lc = cstep(xs, ys)
    lc.backward()
    gxc = xs.grad.clone()
    xs.grad = None
    step(xs, ys).backward()
    assert torch.allclose(gxc, xs.grad) and torch.allclose(lc, step(xs, ys))
    f32f = vt.function(prog, inputs=["x", "y"], outputs=["out"])
    tx = torch.randn(1 << 20, device="cuda", requires_grad=True)
    ty = torch.randn(1 << 20, device="cuda", requires_grad=True)
    f32f(tx, ty).sum().backward()
    tcall = host_time_per_call(lambda: f32f(tx.detach(), ty.detach()), n=2000)
    print(f"vyre.torch.function on CUDA: gradcheck (f64) passes; torch.compile(fullgraph=True, inductor): "
          f"{ex.graph_count} graph, {ex.graph_break_count} breaks, same gradients; forward call "
          f"{tcall * 1e6:.1f} us host")
    res["torch_function"] = {"graph_breaks": ex.graph_break_count, "call_us": tcall * 1e6}

    res["graph"] = _graph_numbers()
    RESULTS["device_runners"] = res


@section
def train():
    """Training loop on the device (bench/train_bench.py): logistic regression, 1000 steps"""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "train_bench.py")], capture_output=True, text=True)
    print(out.stdout + out.stderr[-3000:])
    if out.returncode:
        raise RuntimeError("train_bench failed")


def cuda_route_cc() -> str:
    from vyre.driver.cuda_launch import compute_capability

    return compute_capability()


@section
def parity():
    """Parity on the real GPU: op tables, examples, generated programs (larger grids) vs the interpreter"""
    sys.path.insert(0, str(ROOT))
    from tests import optable
    from tests.backend_runner import generated_cases
    from tests.example_inputs import example_cases
    from tests.parity import differences
    from collections import Counter

    from vyre.driver import cuda_route, nvrtc
    from vyre.driver.dispatch import compile as vcompile

    nv = nvrtc.find()
    print(f"NVRTC: {nv.path} ({nv.version[0]}.{nv.version[1]})" if nv else f"NVRTC: none ({nvrtc.unavailable()})")
    print(f"compile route now: {cuda_route.compile_route(cuda_route_cc())}")
    routes: Counter[str] = Counter()

    def cuda_kernel(prog):
        k = vcompile(prog, "cuda")
        routes[getattr(k._fn, "compiler", "numba")] += 1  # CubinKernel.compiler; numba's dispatcher has none
        return k

    fails, count = [], 0
    for name, (prog, arrays, layout) in optable.all_tables():
        ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()})
        got = cuda_kernel(prog)({k: v.copy() for k, v in arrays.items()})
        fails += optable.compare(name, got, ref, layout, len(next(iter(arrays.values()))))
        count += 1
    for name, prog, arrays, grid in example_cases(small=False):
        ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
        got = cuda_kernel(prog)({k: v.copy() for k, v in arrays.items()}, grid=grid)
        fails += [f"{name}: {d}" for d in differences(got, ref, exact=name in EXACT_EXAMPLES)]
        count += 1
    from tests.int_edge_cases import cases as int_edge_cases

    for name, prog, arrays in int_edge_cases():  # i32 edge values through ops the device once got wrong
        ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()})
        got = cuda_kernel(prog)({k: v.copy() for k, v in arrays.items()})
        fails += [f"{name}: {d}" for d in differences(got, ref, exact=True)]
        count += 1
    import hypothesis

    from vyre.ir.wire import to_wire

    print(f"generated programs from Hypothesis {hypothesis.__version__} (the stream depends on the version)")
    for name, prog, arrays, grid, _ in generated_cases(int(os.environ.get("VYRE_GPU_PARITY_CASES", "150"))):
        ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
        got = cuda_kernel(prog)({k: v.copy() for k, v in arrays.items()}, grid=grid)
        diff = differences(got, ref, exact=True)
        fails += [f"{name}: {d}" for d in diff]
        if diff and os.environ.get("OUT"):  # keep what reproduces it elsewhere: program and inputs
            np.savez(os.path.join(os.environ["OUT"], f"parity_{name}.npz"), wire=np.frombuffer(to_wire(prog), np.uint8),
                     grid=np.asarray(grid if grid is not None else (0,)), **arrays)
        count += 1
    # flat kernels with launches that interleave several invocations per thread (the default launch
    # of these small problems does not)
    from tests.backend_runner import flat_generated_cases
    from tests.interleave_cases import interleave_cases
    from vyre.driver.dispatch import Launch

    flat = [(n, p, a, None) for n, p, a in interleave_cases()]
    flat += flat_generated_cases(int(os.environ.get("VYRE_GPU_INTERLEAVE_CASES", "100")))
    for name, prog, arrays, grid in flat:
        ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
        kernel = cuda_kernel(prog)
        for la in (Launch(4, 4), Launch(3, 9), Launch(32, 8)):
            kernel.launch, kernel._fast = la, None
            got = kernel({k: v.copy() for k, v in arrays.items()}, grid=grid)
            fails += [f"{name} {la}: {d}" for d in differences(got, ref, exact=True)]
        kernel.launch, kernel._fast = None, None
        count += 1
    # float atomic adds turned into warp-aggregated adds, under every contention pattern: exact sums
    from tests.warp_add_cases import gpu_cases

    for name, prog, arrays, exact in gpu_cases():
        kernel = cuda_kernel(prog)
        grid = (-(-len(arrays["x"]) // prog.workgroup_size[0]),)
        for la in (None, Launch(64, 4), Launch(32, 8)) if kernel.flat else (None,):
            kernel.launch, kernel._fast = la, None
            got = kernel({"x": arrays["x"]}, grid=grid)["out"]
            if not np.array_equal(got, exact.astype(got.dtype)):
                bad = int(np.argmax(got != exact.astype(got.dtype)))
                fails.append(f"warp_add {name} {la}: out[{bad}] = {got[bad]}, exact {exact[bad]}")
        kernel.launch, kernel._fast = None, None
        count += 1
    print(f"{count} programs checked, {len(fails)} differences; kernels by compile route: {dict(routes)}")
    for f in fails[:30]:
        print("  " + f)
    RESULTS["parity"] = {"programs": count, "differences": len(fails), "routes": dict(routes)}


if __name__ == "__main__":
    import numba
    from numba import cuda

    dev = cuda.get_current_device()
    print(f"# vyre GPU benchmarks\n\ndevice: {dev.name}, cc {dev.compute_capability}; numba {numba.__version__}; "
          f"numpy {np.__version__}; date {time.strftime('%Y-%m-%d')}")
    wanted = sys.argv[1:] or ["bandwidth", "overhead", "compile_times", "autodiff", "matvec_autodiff", "ops",
                              "histogram", "device_runners", "train", "parity"]
    for name in wanted:
        globals()[name]()
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_results.json").write_text(json.dumps(RESULTS, indent=1))
