"""What numba itself reaches on the fused chain: vyre's generated kernel against hand-written numba
kernels of the same chain (the ceiling for a numba-based code generator), including "lockstep"
kernels that run K invocations per thread statement by statement, so that the loads of all K are
issued before any of their stores. Run through bench/gpu.sh's environment:
python3 bench/gpu_chain_ceiling.py"""

from __future__ import annotations

import math

import cupy as cp
from numba import cuda, float32, uint32

import vyre
from gpu_bench import cuda_time  # bench/ is on sys.path when run as a script
from vyre.examples import fused_chain


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


# Lockstep kernels: per round, K invocations g_k = t + (round*K + k)*stride; when all K are in range
# their statements run interleaved (all loads first), otherwise one at a time.
_LOCK = '''
def lock(x, y, out, n, rounds):
    t = cuda.grid(1)
    stride = cuda.gridsize(1)
    for r in range(rounds):
        g0 = t + r * {K} * stride
        if g0 + {Km1} * stride < n:
{full}
        else:
            for k in range({K}):
                g = g0 + k * stride
                if g < n:
                    i = uint32(g)
                    xi = x[i] if i < x.shape[0] else float32(0)
                    yi = y[i] if i < y.shape[0] else float32(0)
                    out[i] = {body}
'''
_BODIES = {"chain": "math.exp(xi{k}) * yi{k} + math.sin(xi{k}) * xi{k}", "add": "xi{k} + yi{k}"}


def lockstep_kernel(kind: str, k_count: int):
    full = []
    for k in range(k_count):
        full.append(f"            i{k} = uint32(g0 + {k} * stride)")
    for k in range(k_count):
        full.append(f"            xi{k} = x[i{k}] if i{k} < x.shape[0] else float32(0)")
    for k in range(k_count):
        full.append(f"            yi{k} = y[i{k}] if i{k} < y.shape[0] else float32(0)")
    for k in range(k_count):
        full.append(f"            v{k} = " + _BODIES[kind].format(k=k))
    for k in range(k_count):
        full.append(f"            if i{k} < out.shape[0]:\n                out[i{k}] = v{k}")
    src = _LOCK.format(K=k_count, Km1=k_count - 1, full="\n".join(full),
                       body=_BODIES[kind].format(k=""))
    ns = {"cuda": cuda, "math": math, "uint32": uint32, "float32": float32}
    exec(compile(src, f"<lockstep {kind} {k_count}>", "exec"), ns)
    return cuda.jit(ns["lock"])


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
    ref = cp.exp(x) * y + cp.sin(x) * x
    nx, ny, no = cuda.as_cuda_array(x), cuda.as_cuda_array(y), cuda.as_cuda_array(out)
    for tpb in (128, 256, 512):
        rows.append((f"numba by hand, one element per thread, {tpb} threads", cuda_time(
            lambda tpb=tpb: chain_plain[(n + tpb - 1) // tpb, tpb](nx, ny, no))))
    for tpb, ipt in ((128, 4), (128, 8), (256, 4)):
        blocks = (n + tpb * ipt - 1) // (tpb * ipt)
        rows.append((f"numba by hand, grid-stride {tpb} x {ipt}", cuda_time(
            lambda tpb=tpb, ipt=ipt, blocks=blocks: chain_strided[blocks, tpb](nx, ny, no, ipt))))
    for kind in ("chain", "add"):
        for kc in (1, 2, 4, 8):
            kern = lockstep_kernel(kind, kc)
            for tpb, rounds in ((128, 1), (256, 1), (256, 2), (256, 4), (512, 2)):
                per_block = tpb * kc * rounds
                blocks = (n + per_block - 1) // per_block
                t = cuda_time(lambda kern=kern, blocks=blocks, tpb=tpb, rounds=rounds:
                              kern[blocks, tpb](nx, ny, no, n, rounds))
                if kind == "chain":
                    err = float(cp.max(cp.abs(out - ref)))
                    assert err < 1e-3, err
                rows.append((f"lockstep by hand ({kind}), K={kc}, {tpb} threads x {rounds} rounds", t))
    print("| kernel | ms | % of copy bandwidth |\n|---|---|---|")
    for name, t in rows:
        print(f"| {name} | {t * 1e3:.3f} | {100 * 12 * n / t / copy_bw:.1f}% |")


if __name__ == "__main__":
    main()
