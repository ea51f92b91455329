"""``vyre demo``: build, compile, run, differentiate and check a real workload end to end.

Steps: a fused elementwise chain checked against the reference interpreter; a least-squares line fit
by gradient descent whose forward and backward are vyre kernels (the backward built by
``vyre.autodiff.grad``), checked against the closed-form solution; and a finite-difference check of
the gradients. ``check_grad`` raises when a gradient is off, so a passing row means it held."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .driver.backends import default_backend
from .driver.dispatch import compile as vcompile
from .examples import fused_chain
from .ir import DataType, Program, buflen, gid, if_, let, output, read, store, var


@dataclass
class Row:
    step: str
    backend: str
    compile_s: float | None
    run_s: float
    max_err: float
    cache_hit: bool | None
    ok: bool


def device_name(backend: str) -> str:
    if backend == "cuda":
        from numba import cuda

        return str(cuda.get_current_device().name.decode() if isinstance(
            cuda.get_current_device().name, bytes) else cuda.get_current_device().name)
    if backend == "cudasim":
        return "numba CUDA simulator"
    return f"{platform.processor() or platform.machine()} x{_cores()}"


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _max_rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(a64 - b64) / np.maximum(1.0, np.abs(b64)))) if a.size else 0.0


def chain_step(backend: str, n: int, rng: np.random.Generator) -> Row:
    """The fused elementwise chain on ``backend`` vs the reference interpreter."""
    prog = fused_chain()
    assert Program.from_wire(prog.to_wire()) == prog
    k = vcompile(prog, backend)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    run_s = _median_time(lambda: k({"x": x, "y": y, "out": out}), 5)
    m = min(n, 4096)
    ref = vcompile(prog, "interp")({"x": x[:m].copy(), "y": y[:m].copy(), "out": np.zeros(m, np.float32)})["out"]
    err = _max_rel_err(out[:m], ref)
    return Row(f"fused chain exp(x)*y+sin(x)*x, n={n}", backend, k.compile_seconds, run_s, err,
               k.cache_hit, err < 1e-5)


def least_squares_program(dtype: DataType = DataType.F32) -> Program:
    """``r[i] = (w[0] * x[i] + b[0] - t[i])^2``: per-sample squared residuals of a line fit."""
    x, t = read("x", 0, dtype), read("t", 1, dtype)
    w, b = read("w", 2, dtype).with_count(1), read("b", 3, dtype).with_count(1)
    r = output("r", 4, dtype)
    i = var("i")
    return Program.wrapped([x, t, w, b, r], 256, [
        let("i", gid()),
        if_(i.lt(buflen(r)), [
            let("e", w[0] * x[i] + b[0] - t[i]),
            store(r, i, var("e") * var("e")),
        ]),
    ])


def fit_step(backend: str, n: int, rng: np.random.Generator) -> Row:
    """Fit a line by gradient descent: every step runs the forward kernel and its vyre.autodiff
    backward kernel on ``backend``; checked against the closed-form least-squares solution."""
    from .autodiff import value_and_grad

    n = min(n, 1 << 16)
    prog = least_squares_program()
    x = rng.uniform(-1, 1, n).astype(np.float32)
    t = (2.0 * x - 0.5 + 0.01 * rng.standard_normal(n)).astype(np.float32)
    w, b, r = np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros(n, np.float32)
    steps, lr = 150, 0.5
    t0 = time.perf_counter()
    for _ in range(steps):
        inputs = {"x": x, "t": t, "w": w, "b": b, "r": r}
        _, g = value_and_grad(prog, inputs, "r", ["w", "b"], backend=backend)
        w = (w - lr * g["w"] / n).astype(np.float32)
        b = (b - lr * g["b"] / n).astype(np.float32)
    run_s = (time.perf_counter() - t0) / steps
    a = np.stack([x.astype(np.float64), np.ones(n)], axis=1)
    w_ref, b_ref = np.linalg.lstsq(a, t.astype(np.float64), rcond=None)[0]
    err = abs(float(w[0]) - w_ref) + abs(float(b[0]) - b_ref)
    return Row(f"least-squares fit, {steps} GD steps (fused value+grad kernel), n={n}", backend, None, run_s,
               err, None, err < 1e-3)


def gradcheck_step(backend: str, n: int, rng: np.random.Generator) -> Row:
    """vyre.autodiff gradients of the fit and of the fused chain vs float64 finite differences."""
    from .autodiff import check_grad

    m = 64 if backend == "cudasim" else 512
    t0 = time.perf_counter()
    prog = least_squares_program(DataType.F64)
    x = rng.uniform(-1, 1, m)
    inputs = {"x": x, "t": 2 * x - 0.5, "w": np.array([0.3]), "b": np.array([0.1]), "r": np.zeros(m)}
    worst = check_grad(prog, inputs, ["w", "b", "x"], backend=backend)
    chain = fused_chain()
    xs, ys = rng.standard_normal(m).astype(np.float32), rng.standard_normal(m).astype(np.float32)
    worst = max(worst, check_grad(chain, {"x": xs, "y": ys, "out": np.zeros(m, np.float32)}, ["x", "y"],
                                  backend=backend))
    return Row("gradients vs finite differences (f64 fit, f32 chain)", backend, None,
               time.perf_counter() - t0, worst, None, True)


STEPS: list[Callable[[str, int, np.random.Generator], Row]] = [chain_step, fit_step, gradcheck_step]


def run_demo(backend: str | None = None, n: int | None = None, seed: int = 0) -> list[Row]:
    b = backend or default_backend()
    size = n or (1 << 24 if b == "cuda" else 1 << 12 if b == "cudasim" else 1 << 20)
    rng = np.random.default_rng(seed)
    return [step(b, size, rng) for step in STEPS]


def format_rows(rows: list[Row], backend: str) -> str:
    head = f"vyre demo — backend {backend} ({device_name(backend)})"
    cols = ("step", "compile", "run", "max err", "cache", "check")
    data = [(r.step, "-" if r.compile_s is None else f"{r.compile_s * 1e3:.1f} ms", f"{r.run_s * 1e3:.3f} ms",
             f"{r.max_err:.2e}", "-" if r.cache_hit is None else ("hit" if r.cache_hit else "miss"),
             "ok" if r.ok else "FAIL")
            for r in rows]
    widths = [max(len(c), *(len(d[i]) for d in data)) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [head, fmt.format(*cols), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*d) for d in data]
    return "\n".join(lines)
