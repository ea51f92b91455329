"""CPU benchmark: the fused chain on vyre's CPU backend vs numpy (and dispatch overhead), on this
machine. Prints a markdown table (machine, date, commit); ``--record`` appends it to BENCHMARKS.md.

    python bench/cpu_bench.py [--n 22] [--record]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

import vyre
from vyre.autodiff import grad
from vyre.examples import fused_chain
from vyre.ir import (
    F32,
    BinOp,
    BinOpKind,
    BufferDecl,
    Let,
    LitF32,
    LitU32,
    Load,
    Program,
    Var,
    buflen,
    exp,
    log,
    tanh,
    gid,
    if_,
    let,
    output,
    read,
    store,
    var,
)
from vyre.ir.wire import from_wire, to_wire

ROOT = Path(__file__).resolve().parent.parent


def median_time(fn, reps: int = 15) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def polynomial_chain() -> Program:
    """``out = ((0.5 x + y) x - y^2) / 4 + x``: arithmetic only (no transcendentals)."""
    xb, yb, ob = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    return Program.wrapped([xb, yb, ob], 256, [
        let("i", gid()),
        if_(i.lt(buflen(ob)), [
            let("a", xb[i]), let("b", yb[i]),
            store(ob, i, ((var("a") * 0.5 + var("b")) * var("a") - var("b") * var("b")) * 0.25 + var("a")),
        ]),
    ])


def log_tanh_chain() -> Program:
    """``out = log(|x| + 1) * y + tanh(x)``: the other transcendentals of a loss or an activation."""
    xb, yb, ob = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    return Program.wrapped([xb, yb, ob], 256, [
        let("i", gid()),
        if_(i.lt(buflen(ob)), [
            let("a", xb[i]),
            store(ob, i, log(abs(var("a")) + 1.0) * yb[i] + tanh(var("a"))),
        ]),
    ])


def shared_weight_model() -> Program:
    """``out[i] = exp(x[i] * w[i % 8]) * w[(i + 3) % 8]``: every invocation reads the shared ``w``, so
    its gradient is a scatter (atomics) that the CPU runs on private copies."""
    xb, wb, ob = read("x", 0, F32), read("w", 1, F32), output("out", 2, F32)
    i = var("i")
    return Program.wrapped([xb, wb, ob], 256, [
        let("i", gid()),
        if_(i.lt(buflen(ob)), [store(ob, i, exp(xb[i] * wb[i % 8]) * wb[(i + 3) % 8])]),
    ])


def wide_program(stmts: int = 2000) -> Program:
    """2000 independent ``Let``s of ``in[x + k] + 1.0``: 10 000 IR nodes."""
    x = Var("x")
    body = tuple(Let(f"v{k}", BinOp(BinOpKind.ADD, Load("in", BinOp(BinOpKind.ADD, x, LitU32(k))),
                                    LitF32(1.0)))
                 for k in range(stmts))
    return Program((BufferDecl.read("in", 0, F32),), (64, 1, 1), body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=22, help="log2 of the element count")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    n = 1 << args.n
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    prog = fused_chain()
    io = {"x": x, "y": y, "out": out}
    t0 = time.perf_counter()
    vyre.dispatch(prog, io, backend="cpu")
    first = time.perf_counter() - t0
    ref = np.exp(x) * y + np.sin(x) * x
    err = float(np.max(np.abs(out - ref) / np.maximum(1, np.abs(ref))))
    t_vyre = median_time(lambda: vyre.dispatch(prog, io, backend="cpu"))
    t_np = median_time(lambda: np.exp(x) * y + np.sin(x) * x)
    bwd = grad(prog, ["out"], ["x", "y"], accumulate=False, with_value=True, unit_cotangent=True)
    gx, gy, o2 = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    bio = {"x": x, "y": y, "out": o2, "grad_x": gx, "grad_y": gy}
    vyre.dispatch(bwd, bio, backend="cpu")
    t_vg = median_time(lambda: (vyre.dispatch(bwd, bio, backend="cpu"), float(o2.sum())))

    def numpy_vg():
        ex, sx = np.exp(x), np.sin(x)
        val = float((ex * y + sx * x).sum())
        return val, ex * y + sx + x * np.cos(x), ex

    t_npvg = median_time(numpy_vg)
    poly = polynomial_chain()
    pio = {"x": x, "y": y, "out": out}
    vyre.dispatch(poly, pio, backend="cpu")
    t_poly = median_time(lambda: vyre.dispatch(poly, pio, backend="cpu"))
    t_npoly = median_time(lambda: ((x * 0.5 + y) * x - y * y) * 0.25 + x)
    lt = log_tanh_chain()
    vyre.dispatch(lt, pio, backend="cpu")
    lt_err = float(np.max(np.abs(out - (np.log(np.abs(x) + 1) * y + np.tanh(x)))))
    t_lt = median_time(lambda: vyre.dispatch(lt, pio, backend="cpu"))
    t_nlt = median_time(lambda: np.log(np.abs(x) + np.float32(1)) * y + np.tanh(x))
    sw = grad(shared_weight_model(), ["out"], ["x", "w"], accumulate=False, with_value=True, unit_cotangent=True)
    w8 = np.linspace(-1, 1, 8).astype(np.float32)
    xs = x * np.float32(0.1)
    swio = {"x": xs, "w": w8, "out": np.empty_like(x), "grad_x": np.empty_like(x), "grad_w": np.zeros(8, np.float32)}

    def shared_vg():
        swio["grad_w"][:] = 0
        vyre.dispatch(sw, swio, backend="cpu")

    shared_vg()
    idx = np.arange(n)
    lo, hi = idx % 8, (idx + 3) % 8
    ex = np.exp(xs.astype(np.float64) * w8[lo])
    gw_ref = np.bincount(lo, ex * xs * w8[hi], minlength=8) + np.bincount(hi, ex, minlength=8)
    sw_err = float(np.max(np.abs(swio["grad_w"] - gw_ref) / np.abs(gw_ref)))
    t_sw = median_time(shared_vg)

    def numpy_shared_vg():
        e = np.exp(xs * w8[lo])
        val = e * w8[hi]
        gx = e * w8[lo] * w8[hi]
        gw = np.bincount(lo, e * xs * w8[hi], minlength=8) + np.bincount(hi, e, minlength=8)
        return val, gx, gw

    t_nsw = median_time(numpy_shared_vg)
    small = {"x": x[:1024].copy(), "y": y[:1024].copy(), "out": np.empty(1024, np.float32)}
    vyre.dispatch(prog, small, backend="cpu")
    t_small = median_time(lambda: vyre.dispatch(prog, small, backend="cpu"), reps=2000)
    wide = wide_program()
    wire = to_wire(wide)
    t_decode = median_time(lambda: from_wire(wire))
    t_validate = median_time(lambda: wide.diagnostics())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = [
        f"### CPU backend: {cpu_model()}, {cores} cores, {time.strftime('%Y-%m-%d')}, commit {commit}",
        "",
        f"n = 2^{args.n} float32; median of 15 runs; first call (compile or disk-cache load) {first:.2f} s.",
        "",
        "| what | time (ms) | speed-up vs numpy |",
        "|---|---|---|",
        f"| vyre cpu: fused chain exp(x)*y+sin(x)*x | {t_vyre * 1e3:.2f} | {t_np / t_vyre:.2f}x |",
        f"| numpy: same chain (4 temporaries) | {t_np * 1e3:.2f} | 1.00x |",
        f"| vyre cpu: arithmetic chain ((0.5x+y)x - y^2)/4 + x | {t_poly * 1e3:.2f} | {t_npoly / t_poly:.2f}x |",
        f"| numpy: same arithmetic chain | {t_npoly * 1e3:.2f} | 1.00x |",
        f"| vyre cpu: log(abs(x)+1)*y + tanh(x) | {t_lt * 1e3:.2f} | {t_nlt / t_lt:.2f}x |",
        f"| numpy: same log/tanh chain | {t_nlt * 1e3:.2f} | 1.00x |",
        f"| vyre cpu: fused value+grad kernel + sum | {t_vg * 1e3:.2f} | {t_npvg / t_vg:.2f}x |",
        f"| numpy: value and hand-written gradient | {t_npvg * 1e3:.2f} | 1.00x |",
        f"| vyre cpu: value+grad, shared 8-weight model (gradient scatter) | {t_sw * 1e3:.2f} | {t_nsw / t_sw:.2f}x |",
        f"| numpy: same, gradient by bincount | {t_nsw * 1e3:.2f} | 1.00x |",
        f"| vyre.dispatch of a cached CPU kernel, 1024 elements (overhead) | {t_small * 1e3:.4f} | |",
        f"| IR: from_wire of a 10 000-node program ({len(wire)} bytes) | {t_decode * 1e3:.2f} | |",
        f"| IR: validation of the same program | {t_validate * 1e3:.2f} | |",
        "",
        f"max relative error of the chain vs numpy: {err:.1e}; max abs error of the log/tanh chain: {lt_err:.1e}; "
        f"max relative error of the shared-weight gradient vs float64: {sw_err:.1e}",
    ]
    text = "\n".join(lines)
    print(text)
    if args.record:
        with open(ROOT / "BENCHMARKS.md", "a") as f:
            f.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
