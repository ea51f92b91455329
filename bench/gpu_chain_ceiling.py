"""What numba itself reaches on the fused chain: vyre's generated kernel against hand-written numba
kernels of the same chain (the ceiling for a numba-based code generator). Run through bench/gpu.sh's
environment: python3 bench/gpu_chain_ceiling.py"""

from __future__ import annotations

import math
import statistics

import cupy as cp
from numba import cuda

import vyre
from vyre.examples import fused_chain


def cuda_time(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
    return statistics.median(ts)


@cuda.jit
def chain_plain(x, y, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        xi = x[i]
        out[i] = math.exp(xi) * y[i] + math.sin(xi) * xi


@cuda.jit
def chain_strided(x, y, out, ipt):
    t = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(ipt):
        i = t + k * stride
        if i < out.shape[0]:
            xi = x[i]
            out[i] = math.exp(xi) * y[i] + math.sin(xi) * xi


def main() -> None:
    n = 1 << 26
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.random.standard_normal(n, dtype=cp.float32)
    out = cp.empty_like(x)
    dst = cp.empty_like(x)
    t_copy = cuda_time(lambda: cp.copyto(dst, x))
    copy_bw = 8 * n / t_copy
    args = {"x": x, "y": y, "out": out}
    prog = fused_chain()
    vyre.dispatch(prog, args, backend="cuda")
    rows = [("vyre dispatch (tuned)", cuda_time(lambda: vyre.dispatch(prog, args, backend="cuda")))]
    nx, ny, no = cuda.as_cuda_array(x), cuda.as_cuda_array(y), cuda.as_cuda_array(out)
    for tpb in (128, 256, 512):
        rows.append((f"numba by hand, one element per thread, {tpb} threads", cuda_time(
            lambda tpb=tpb: chain_plain[(n + tpb - 1) // tpb, tpb](nx, ny, no))))
    for tpb, ipt in ((128, 4), (128, 8), (256, 4)):
        blocks = (n + tpb * ipt - 1) // (tpb * ipt)
        rows.append((f"numba by hand, grid-stride {tpb} x {ipt}", cuda_time(
            lambda tpb=tpb, ipt=ipt, blocks=blocks: chain_strided[blocks, tpb](nx, ny, no, ipt))))
    print("| kernel | ms | % of copy bandwidth |\n|---|---|---|")
    for name, t in rows:
        print(f"| {name} | {t * 1e3:.3f} | {100 * 12 * n / t / copy_bw:.1f}% |")


if __name__ == "__main__":
    main()
