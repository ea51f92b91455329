"""Training loop entirely on the device: logistic regression on synthetic data, 1000 steps of SGD.

vyre: the loss and its gradients by one fused kernel (``value_and_grad_fn``: forward, backward and
the loss's partial sums in one pass), the update by a vyre kernel; eagerly (dispatch per step) and
as a CUDA graph (``vyre.graph``: the whole step replayed). Peers, same card and same run: PyTorch
eager (autograd), ``torch.compile`` of the step (``torch.func.grad_and_value``, inductor) and
``jax.jit`` of the step. Every variant starts from the same weights; the final losses must agree.

Run on a GPU machine: ``python3 bench/train_bench.py`` (``bench/gpu.sh train`` runs it too).
Prints a markdown table; ``--steps N`` and ``--sizes small,large`` select the work.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

SIZES = {"small": (1024, 16), "large": (1 << 20, 64)}  # (samples, features)
LR = 0.5
NOTES: list[str] = []


def logistic_program(n: int) -> Any:
    """``out[i] = (log(1 + exp(z_i)) - y_i z_i) / n`` with ``z_i = X[i, :] . w + b``: sum(out) is the
    mean logistic loss."""
    from vyre.ir import F32, Program, assign, buflen, exp, f32, gid, if_, let, log, loop, output, read, store, u32, var

    X, y, w, b, out = (read("X", 0, F32), read("y", 1, F32), read("w", 2, F32), read("b", 3, F32),
                       output("out", 4, F32))
    i, j, acc, z = var("i"), var("j"), var("acc"), var("z")
    return Program.wrapped([X, y, w, b, out], 256, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [
            let("acc", f32(0.0)),
            loop("j", u32(0), buflen(w), [assign("acc", acc + X[i * buflen(w) + j] * w[j])]),
            let("z", acc + b[u32(0)]),
            store(out, i, (log(f32(1.0) + exp(z)) - y[i] * z) * f32(1.0 / n)),
        ]),
    ])


def sgd_program() -> Any:
    """``w -= lr * gw`` and ``b -= lr * gb`` in one kernel (invocation ``len(w)`` updates ``b``)."""
    from vyre.ir import F32, Program, buflen, f32, gid, if_, let, read, read_write, store, u32, var

    w, b, gw, gb = read_write("w", 0, F32), read_write("b", 1, F32), read("gw", 2, F32), read("gb", 3, F32)
    i = var("i")
    return Program.wrapped([w, b, gw, gb], 256, [
        let("i", gid()),
        if_(i.lt(buflen(w)), [store(w, i, w[i] - f32(LR) * gw[i])]),
        if_(i.eq(buflen(w)), [store(b, u32(0), b[u32(0)] - f32(LR) * gb[u32(0)])]),
    ])


def data(n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((n, d)) / np.sqrt(d)).astype(np.float32)
    true_w = rng.standard_normal(d).astype(np.float32)
    y = (X @ true_w + 0.3 * rng.standard_normal(n) > 0).astype(np.float32)
    return X, y


def run_vyre(X: np.ndarray, y: np.ndarray, steps: int, graph: bool) -> tuple[float, float]:
    import cupy as cp

    import vyre
    from vyre.autodiff import value_and_grad_fn

    n, d = X.shape
    prog, upd = logistic_program(n), sgd_program()
    args = {"X": cp.asarray(X.reshape(-1)), "y": cp.asarray(y), "w": cp.zeros(d, cp.float32),
            "b": cp.zeros(1, cp.float32), "out": cp.zeros(n, cp.float32)}
    vg = value_and_grad_fn(prog, "out", ["w", "b"], backend="cuda")
    loss, g = vg(args)
    uargs = {"w": args["w"], "b": args["b"], "gw": g["w"], "gb": g["b"]}
    ugrid = (d + 1 + 255) // 256

    def step() -> Any:
        loss, _ = vg(args)
        vyre.dispatch(upd, uargs, backend="cuda", grid=ugrid)
        return loss

    args["w"].fill(0)
    args["b"].fill(0)
    for _ in range(5):  # compile, tune, pin the cached launches
        step()
    args["w"].fill(0)
    args["b"].fill(0)
    cp.cuda.Device().synchronize()
    if not graph and n >= 1 << 16:  # where the time goes: forward alone, fused value+grad, update
        def dev_ms(fn: Any) -> float:
            a, b = cp.cuda.Event(), cp.cuda.Event()
            fn()
            a.record()
            for _ in range(20):
                fn()
            b.record()
            b.synchronize()
            return cp.cuda.get_elapsed_time(a, b) / 20

        w0, b0 = args["w"].copy(), args["b"].copy()
        fwd = dev_ms(lambda: vyre.dispatch(prog, args, backend="cuda"))
        fused = dev_ms(lambda: vg(args))
        upd_t = dev_ms(lambda: vyre.dispatch(upd, uargs, backend="cuda", grid=ugrid))
        NOTES.append(f"vyre device time per step at {n} x {d}: forward kernel alone {fwd:.3f} ms, "
                     f"value_and_grad_fn {fused:.3f} ms, update {upd_t:.3f} ms")
        args["w"][:] = w0
        args["b"][:] = b0
        cp.cuda.Device().synchronize()
    if graph:
        with vyre.graph.capture() as gr:
            parts, _ = vg(args)
            vyre.dispatch(upd, uargs, backend="cuda", grid=ugrid)
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            gr.replay()
        cp.cuda.Device().synchronize()
        dt = (time.perf_counter() - t) / steps
        final = float(parts.sum())  # the loss of the last step (before its update)
    else:
        t = time.perf_counter()
        for _ in range(steps):
            loss = step()
        cp.cuda.Device().synchronize()
        dt = (time.perf_counter() - t) / steps
        final = float(loss)
    return dt, final


def run_torch(X: np.ndarray, y: np.ndarray, steps: int, compiled: bool) -> tuple[float, float]:
    import torch

    d = X.shape[1]
    tX, ty = torch.as_tensor(X, device="cuda"), torch.as_tensor(y, device="cuda")

    def loss_fn(w: Any, b: Any) -> Any:
        z = tX @ w + b[0]
        return (torch.log(1 + torch.exp(z)) - ty * z).mean()

    if compiled:
        from torch.func import grad_and_value

        gv = grad_and_value(loss_fn, argnums=(0, 1))

        def step(w: Any, b: Any) -> tuple[Any, Any, Any]:
            (gw, gb), loss = gv(w, b)
            return w - LR * gw, b - LR * gb, loss

        fn = torch.compile(step)
        w, b = torch.zeros(d, device="cuda"), torch.zeros(1, device="cuda")
        for _ in range(5):
            fn(w, b)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            w, b, loss = fn(w, b)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / steps, float(loss)
    w = torch.zeros(d, device="cuda", requires_grad=True)
    b = torch.zeros(1, device="cuda", requires_grad=True)

    def eager() -> Any:
        loss = loss_fn(w, b)
        loss.backward()
        with torch.no_grad():
            w.sub_(LR * w.grad)
            b.sub_(LR * b.grad)
        w.grad = None
        b.grad = None
        return loss

    for _ in range(5):
        eager()
    with torch.no_grad():
        w.zero_()
        b.zero_()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        loss = eager()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps, float(loss)


def run_jax(X: np.ndarray, y: np.ndarray, steps: int) -> tuple[float, float]:
    import jax
    import jax.numpy as jnp

    d = X.shape[1]
    jX, jy = jnp.asarray(X), jnp.asarray(y)

    def loss_fn(w: Any, b: Any) -> Any:
        z = jX @ w + b[0]
        return jnp.mean(jnp.log(1 + jnp.exp(z)) - jy * z)

    @jax.jit
    def step(w: Any, b: Any) -> tuple[Any, Any, Any]:
        loss, (gw, gb) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w, b)
        return w - LR * gw, b - LR * gb, loss

    w, b = jnp.zeros(d, jnp.float32), jnp.zeros(1, jnp.float32)
    jax.block_until_ready(step(w, b))
    t = time.perf_counter()
    for _ in range(steps):
        w, b, loss = step(w, b)
    jax.block_until_ready(w)
    return (time.perf_counter() - t) / steps, float(loss)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--sizes", default="small,large")
    a = ap.parse_args()
    results: dict[str, Any] = {}
    for size in a.sizes.split(","):
        n, d = SIZES[size]
        X, y = data(n, d)
        print(f"\n### {size}: {n} samples x {d} features, {a.steps} steps of SGD (lr {LR})\n")
        print("| implementation | us per step | final loss | vs PyTorch eager |\n|---|---|---|---|")
        rows: dict[str, tuple[float, float]] = {}
        runners = {
            "vyre (value_and_grad_fn + update kernel, eager)": (run_vyre, False),
            "vyre (the step as a CUDA graph, vyre.graph)": (run_vyre, True),
            "PyTorch eager (autograd)": (run_torch, False),
            "torch.compile (grad_and_value step, inductor)": (run_torch, True),
            "jax.jit (value_and_grad step)": (run_jax, None),
        }
        for name, (fn, flag) in runners.items():
            try:
                rows[name] = fn(X, y, a.steps) if flag is None else fn(X, y, a.steps, flag)
            except Exception as e:  # a peer that fails is reported, the rest still runs
                print(f"| {name} | failed: {type(e).__name__}: {str(e)[:120]} | | |")
        base = rows.get("PyTorch eager (autograd)", (float("nan"), 0.0))[0]
        for name, (dt, loss) in rows.items():
            print(f"| {name} | {dt * 1e6:.1f} | {loss:.6f} | {base / dt:.2f}x |")
        losses = [loss for _, loss in rows.values()]
        spread = (max(losses) - min(losses)) / max(abs(min(losses)), 1e-12) if losses else float("nan")
        print(f"\nfinal losses agree within {spread:.2e} (relative)")
        for note in NOTES:
            print(f"\n{note}")
        NOTES.clear()
        assert spread < 1e-3, f"final losses disagree: {rows}"
        results[size] = {k: {"us": v[0] * 1e6, "loss": v[1]} for k, v in rows.items()}
    out = os.environ.get("OUT")
    if out:
        Path(out, "train_results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
