"""Training loop entirely on the device: logistic regression on synthetic data, 1000 steps of SGD.

vyre, three ways, each eagerly (a dispatch per kernel) and as a CUDA graph (``vyre.graph``: the
whole step replayed):

- the split step (:class:`SplitStep`, the headline): ``z = X w + b``, the loss and ``d/dz`` by a
  ``value_and_grad_fn`` handle, the backward program of the first kernel for ``d/dw``, an update
  kernel. X is read twice per step, and the weight gradient's atomics are spread over weight copies;
- one fused value-and-gradient kernel (``value_and_grad_fn`` of the whole loss) over row-major X;
- the same fused kernel over column-major X with 128 weight copies.

Peers, same card and same run: PyTorch eager (autograd), ``torch.compile`` of the step
(``torch.func.grad_and_value``, inductor) and ``jax.jit`` of the step. Every variant starts from
the same weights; the final losses must agree.

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



def _device_ms(cp: Any, fn: Any, reps: int = 20) -> float:
    """Device milliseconds per call of ``fn`` (CUDA events around ``reps`` calls, one warm-up)."""
    a, b = cp.cuda.Event(), cp.cuda.Event()
    fn()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return float(cp.cuda.get_elapsed_time(a, b)) / reps


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


def replicas(n: int) -> int:
    """Weight copies for the privatised program: one per group of 32 samples (a warp), at most 128."""
    return max(1, min(128, n // 32))


def logistic_program_t(n: int, reps: int) -> Any:
    """The same loss over column-major data ``XT[j * n + i]`` (neighbouring invocations read
    neighbouring addresses) and ``reps`` copies of the weights, ``W[r * d + j]``, copy ``r = (i / 32)
    mod reps``: the weight gradient (an atomic add per warp per weight, made by autodiff) is spread
    over ``reps`` times more addresses instead of serialising on one cache line."""
    from vyre.ir import F32, Program, assign, buflen, exp, f32, gid, if_, let, log, loop, output, read, store, u32, var

    XT, y, W, B, out = (read("XT", 0, F32), read("y", 1, F32), read("W", 2, F32), read("B", 3, F32),
                        output("out", 4, F32))
    i, j, acc, z, r, d = var("i"), var("j"), var("acc"), var("z"), var("r"), var("d")
    return Program.wrapped([XT, y, W, B, out], 256, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [
            let("d", buflen(W) // u32(reps)),
            let("r", (i >> u32(5)) % u32(reps)),
            let("acc", f32(0.0)),
            loop("j", u32(0), d, [assign("acc", acc + XT[j * buflen(out) + i] * W[r * d + j])]),
            let("z", acc + B[r]),
            store(out, i, (log(f32(1.0) + exp(z)) - y[i] * z) * f32(1.0 / n)),
        ]),
    ])


def sgd_replicas_program(reps: int) -> Any:
    """Every weight copy ``-= lr *`` the sum of the copies' gradients (invocation ``k < len(W)``
    updates ``W[k]``; the next ``reps`` update ``B``)."""
    from vyre.ir import F32, Program, assign, buflen, f32, gid, if_, let, loop, read, read_write, store, u32, var

    W, B, gW, gB = read_write("W", 0, F32), read_write("B", 1, F32), read("gW", 2, F32), read("gB", 3, F32)
    k, s, r, d = var("k"), var("s"), var("r"), var("d")
    return Program.wrapped([W, B, gW, gB], 256, [
        let("k", gid()),
        let("d", buflen(W) // u32(reps)),
        let("s", f32(0.0)),
        if_(k.lt(buflen(W)), [
            loop("r", u32(0), u32(reps), [assign("s", s + gW[r * d + k % d])]),
            store(W, k, W[k] - f32(LR) * s),
        ]),
        if_(k.ge(buflen(W)).and_(k.lt(buflen(W) + u32(reps))), [
            loop("r", u32(0), u32(reps), [assign("s", s + gB[r])]),
            store(B, k - buflen(W), B[k - buflen(W)] - f32(LR) * s),
        ]),
    ])


SPLIT_REPLICAS = 32  # weight copies of the split step (SplitStep)
SPLIT_ROWS = 8  # samples per invocation of its z program


def z_program(n: int, reps: int, rows: int = 1) -> Any:
    """``z[i] = XT[:, i] . W_r + B[r]`` over column-major ``XT[j * n + i]``. Invocation ``t`` computes
    the ``rows`` rows ``t + k m`` (``m = ceil(n / rows)``: neighbouring invocations read neighbouring
    addresses) with one load of each weight for all of them, so the backward adds one gradient term
    per weight per invocation for ``rows`` samples: ``rows`` times fewer atomics. It uses weight copy
    ``r = (t / 32) mod reps`` (``W[r * d + j]``, ``B[r]``). The only program of the step that reads X."""
    from vyre.ir import F32, Program, assign, buflen, gid, if_, let, loop, output, read, store, u32, var

    XT, W, B, z = read("XT", 0, F32), read("W", 1, F32), read("B", 2, F32), output("z", 3, F32)
    m = -(-n // rows)
    t, j, r, d, wj, b = var("t"), var("j"), var("r"), var("d"), var("wj"), var("b")
    acc = [var(f"acc{k}") for k in range(rows)]
    row = [t + u32(k * m) for k in range(rows)]
    return Program.wrapped([XT, W, B, z], 256, [
        let("t", gid()),
        if_(t.lt(u32(m)), [
            let("d", buflen(W) // u32(reps)),
            let("r", (t >> u32(5)) % u32(reps)),
            let("b", B[r]),
            *[let(f"acc{k}", b) for k in range(rows)],
            loop("j", u32(0), d, [
                let("wj", W[r * d + j]),
                *[assign(f"acc{k}", acc[k] + XT[j * buflen(z) + row[k]] * wj) for k in range(rows)],
            ]),
            *[if_(row[k].lt(buflen(z)), [store(z, row[k], acc[k])]) for k in range(rows)],
        ]),
    ])


def z_loss_program(n: int) -> Any:
    """``out[i] = (log(1 + exp(z_i)) - y_i z_i) / n``: sum(out) is the mean logistic loss."""
    from vyre.ir import F32, Program, buflen, exp, f32, gid, if_, let, log, output, read, store, var

    z, y, out = read("z", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    return Program.wrapped([z, y, out], 256, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [store(out, i, (log(f32(1.0) + exp(z[i])) - y[i] * z[i]) * f32(1.0 / n))]),
    ])


def sgd_zeroing_program(reps: int) -> Any:
    """The update of the split step: every weight copy ``-= lr *`` the sum of the copies' gradients,
    and the gradients zeroed for the next step's backward (no fill kernel). With 32 copies one
    subgroup sums one weight's copies (invocation ``32 j + r``: weight ``j``, copy ``r``; ``j = d`` is
    the bias); otherwise invocation ``j`` loops over the copies."""
    from vyre.ir import (
        F32, Program, assign, buflen, f32, gid, if_, let, loop, read_write, select, store, subgroup_reduce, u32, var,
    )

    W, B, gW, gB = (read_write("W", 0, F32), read_write("B", 1, F32), read_write("gW", 2, F32),
                    read_write("gB", 3, F32))
    k, s, r, d, j = var("k"), var("s"), var("r"), var("d"), var("j")
    if reps == 32:
        at = r * d + j
        return Program.wrapped([W, B, gW, gB], 64, [
            let("k", gid()),
            let("j", k >> u32(5)),
            let("r", k & u32(31)),
            let("d", buflen(W) // u32(32)),
            # every lane reaches the reduction; lanes past the bias add 0
            let("s", subgroup_reduce("add", select(j.lt(d), gW[at], select(j.eq(d), gB[r], f32(0.0))))),
            if_(j.lt(d), [store(W, at, W[at] - f32(LR) * s), store(gW, at, f32(0.0))]),
            if_(j.eq(d), [store(B, r, B[r] - f32(LR) * s), store(gB, r, f32(0.0))]),
        ])
    at = r * d + k
    return Program.wrapped([W, B, gW, gB], 64, [
        let("k", gid()),
        let("d", buflen(W) // u32(reps)),
        let("s", f32(0.0)),
        if_(k.lt(d), [
            loop("r", u32(0), u32(reps), [assign("s", s + gW[at])]),
            loop("r", u32(0), u32(reps), [store(W, at, W[at] - f32(LR) * s), store(gW, at, f32(0.0))]),
        ]),
        if_(k.eq(d), [
            loop("r", u32(0), u32(reps), [assign("s", s + gB[r])]),
            loop("r", u32(0), u32(reps), [store(B, r, B[r] - f32(LR) * s), store(gB, r, f32(0.0))]),
        ]),
    ])


class SplitStep:
    """One SGD step as four kernels, none with a contended atomic, X read twice (as the peers do):

    1. ``z = X w + b`` (:func:`z_program`), a plain dispatch;
    2. the loss and ``d loss / d z`` by a ``value_and_grad_fn`` handle of :func:`z_loss_program`
       (elementwise: gradients stored, the loss summed in the kernel);
    3. ``d loss / d W`` and ``d loss / d B``: the backward program of step 1 (``vyre.autodiff.grad``),
       fed ``d loss / d z``. Its scatter into the weights is an atomic add per warp per weight, spread
       over ``reps`` weight copies (a warp's copy is ``(i / 32) mod reps``), so no cache line takes
       more than ``1 / reps`` of them;
    4. the update (:func:`sgd_zeroing_program`): sums the copies' gradients, updates every copy, and
       zeroes the gradients for the next step's backward.

    The chain rule between the programs is this class's (the peers' frameworks do the same between
    their kernels); every derivative is vyre's autodiff."""

    def __init__(self, X: np.ndarray, y: np.ndarray, xp: Any, reps: int = SPLIT_REPLICAS,
                 backend: str | None = None, rows: int = SPLIT_ROWS) -> None:
        from vyre.autodiff import grad, value_and_grad_fn

        n, d = X.shape
        self.reps, self.d, self.xp = reps, d, xp
        self.backend = backend or ("cuda" if xp is not np else "cpu")
        self.zprog, self.lprog, self.upd = z_program(n, reps, rows), z_loss_program(n), sgd_zeroing_program(reps)
        self.zback = grad(self.zprog, ["z"], ["W", "B"], accumulate=True)
        self.vg = value_and_grad_fn(self.lprog, "out", ["z"], backend=self.backend)
        self.W, self.B = xp.zeros(reps * d, np.float32), xp.zeros(reps, np.float32)
        self.gW, self.gB = xp.zeros(reps * d, np.float32), xp.zeros(reps, np.float32)
        self.zargs = {"XT": xp.asarray(np.ascontiguousarray(X.T).reshape(-1)), "W": self.W, "B": self.B,
                      "z": xp.zeros(n, np.float32)}
        self.largs = {"z": self.zargs["z"], "y": xp.asarray(y), "out": xp.zeros(n, np.float32)}
        _, g = self.vg(self.largs)
        self.bargs = {**self.zargs, "grad_z": g["z"], "grad_W": self.gW, "grad_B": self.gB}
        self.uargs = {"W": self.W, "B": self.B, "gW": self.gW, "gB": self.gB}
        self.ugrid = -(-(d + 1) * (32 if reps == 32 else 1) // 64)
        m = -(-n // rows)  # invocations of the z program
        self.zgrid = -(-m // 256)  # the backward's default grid would follow its small outputs
        self.gW[:] = 0
        self.gB[:] = 0

    def __call__(self) -> Any:
        """One step; returns the loss before the update (a device scalar, or the partials inside a
        CUDA graph capture)."""
        import vyre

        b = self.backend
        vyre.dispatch(self.zprog, self.zargs, backend=b)
        loss, _ = self.vg(self.largs)
        vyre.dispatch(self.zback, self.bargs, backend=b, grid=self.zgrid)
        vyre.dispatch(self.upd, self.uargs, backend=b, grid=self.ugrid)
        return loss

    def weights(self) -> tuple[np.ndarray, float]:
        """Copy 0 of the weights (all copies are equal) and the bias, on the host."""
        w = self.W[:self.d]
        w = w.get() if hasattr(w, "get") else np.asarray(w)
        b = self.B[:1]
        return w, float(b.get()[0] if hasattr(b, "get") else b[0])


def data(n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((n, d)) / np.sqrt(d)).astype(np.float32)
    true_w = rng.standard_normal(d).astype(np.float32)
    y = (X @ true_w + 0.3 * rng.standard_normal(n) > 0).astype(np.float32)
    return X, y


def vyre_setup(X: np.ndarray, y: np.ndarray, xp: Any, replicated: bool) -> tuple[Any, ...]:
    """The forward and update programs, the handle, their arrays (of array module ``xp``) and the
    update's grid, for the row-major program or the column-major one with weight replicas."""
    import vyre  # noqa: F401
    from vyre.autodiff import value_and_grad_fn

    n, d = X.shape
    if replicated:
        reps = replicas(n)
        prog, upd = logistic_program_t(n, reps), sgd_replicas_program(reps)
        args = {"XT": xp.asarray(np.ascontiguousarray(X.T).reshape(-1)), "y": xp.asarray(y),
                "W": xp.zeros(reps * d, np.float32), "B": xp.zeros(reps, np.float32), "out": xp.zeros(n, np.float32)}
        vg = value_and_grad_fn(prog, "out", ["W", "B"], backend="cuda" if xp is not np else "cpu")
        _, g = vg(args)
        uargs = {"W": args["W"], "B": args["B"], "gW": g["W"], "gB": g["B"]}
        return prog, upd, vg, args, uargs, (reps * (d + 1) + 255) // 256, ("W", "B")
    prog, upd = logistic_program(n), sgd_program()
    args = {"X": xp.asarray(X.reshape(-1)), "y": xp.asarray(y), "w": xp.zeros(d, np.float32),
            "b": xp.zeros(1, np.float32), "out": xp.zeros(n, np.float32)}
    vg = value_and_grad_fn(prog, "out", ["w", "b"], backend="cuda" if xp is not np else "cpu")
    _, g = vg(args)
    uargs = {"w": args["w"], "b": args["b"], "gw": g["w"], "gb": g["b"]}
    return prog, upd, vg, args, uargs, (d + 1 + 255) // 256, ("w", "b")


def run_vyre(X: np.ndarray, y: np.ndarray, steps: int, graph: bool, replicated: bool = False
             ) -> tuple[float, float]:
    import cupy as cp

    import vyre

    n, d = X.shape
    prog, upd, vg, args, uargs, ugrid, params = vyre_setup(X, y, cp, replicated)

    def step() -> Any:
        loss, _ = vg(args)
        vyre.dispatch(upd, uargs, backend="cuda", grid=ugrid)
        return loss

    for _ in range(5):  # compile, tune, pin the cached launches
        step()
    for p in params:
        args[p].fill(0)
    cp.cuda.Device().synchronize()
    if not graph and n >= 1 << 16:  # where the time goes: forward alone, fused value+grad, update
        def dev_ms(fn: Any) -> float:
            return _device_ms(cp, fn)

        w0, b0 = args[params[0]].copy(), args[params[1]].copy()
        fwd = dev_ms(lambda: vyre.dispatch(prog, args, backend="cuda"))
        fused = dev_ms(lambda: vg(args))
        upd_t = dev_ms(lambda: vyre.dispatch(upd, uargs, backend="cuda", grid=ugrid))
        layout = "column-major X, weight replicas" if replicated else "row-major X"
        NOTES.append(f"vyre ({layout}) device time per step at {n} x {d}: forward kernel alone {fwd:.3f} ms, "
                     f"value_and_grad_fn {fused:.3f} ms, update {upd_t:.3f} ms")
        args[params[0]][:] = w0
        args[params[1]][:] = b0
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


def run_split(X: np.ndarray, y: np.ndarray, steps: int, graph: bool, reps: int = SPLIT_REPLICAS,
              rows: int = SPLIT_ROWS) -> tuple[float, float]:
    import cupy as cp

    import vyre

    n, d = X.shape
    step = SplitStep(X, y, cp, reps, rows=rows)
    for _ in range(5):  # compile, tune, pin the cached launches
        step()
    step.W.fill(0)
    step.B.fill(0)
    cp.cuda.Device().synchronize()
    if not graph and n >= 1 << 16:  # where the time goes
        def dev_ms(fn: Any) -> float:
            return _device_ms(cp, fn)

        w0, b0, bk = step.W.copy(), step.B.copy(), step.backend
        parts = {
            "z = X w + b": lambda: vyre.dispatch(step.zprog, step.zargs, backend=bk),
            "loss and d/dz (handle)": lambda: step.vg(step.largs),
            "backward of z (d/dW, d/dB)": lambda: vyre.dispatch(step.zback, step.bargs, backend=bk, grid=step.zgrid),
            "update + zero": lambda: vyre.dispatch(step.upd, step.uargs, backend=bk, grid=step.ugrid),
        }
        times = {k: dev_ms(f) for k, f in parts.items()}
        NOTES.append(f"vyre split step ({reps} weight copies, {rows} rows per invocation) device time per kernel "
                     f"at {n} x {d}: "
                     + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items()))
        step.W[:] = w0
        step.B[:] = b0
        step.gW.fill(0)
        step.gB.fill(0)
        cp.cuda.Device().synchronize()
    if graph:
        with vyre.graph.capture() as gr:
            vyre.dispatch(step.zprog, step.zargs, backend="cuda")
            loss_parts, _ = step.vg(step.largs)
            vyre.dispatch(step.zback, step.bargs, backend="cuda", grid=step.zgrid)
            vyre.dispatch(step.upd, step.uargs, backend="cuda", grid=step.ugrid)
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            gr.replay()
        cp.cuda.Device().synchronize()
        dt = (time.perf_counter() - t) / steps
        final = float(loss_parts.sum())
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
    ap.add_argument("--variants", action="store_true",
                    help="also the split step with other weight copies and rows per invocation")
    ap.add_argument("--fused", action="store_true", help="also one fused value-and-gradient kernel per step")
    a = ap.parse_args()
    results: dict[str, Any] = {}
    for size in a.sizes.split(","):
        n, d = SIZES[size]
        X, y = data(n, d)
        print(f"\n### {size}: {n} samples x {d} features, {a.steps} steps of SGD (lr {LR})\n")
        print("| implementation | us per step | final loss | vs PyTorch eager |\n|---|---|---|---|")
        rows: dict[str, tuple[float, float]] = {}
        split = f"vyre split step ({SPLIT_REPLICAS} weight copies, {SPLIT_ROWS} rows per invocation"
        runners = {  # the headline and the peers first: a run cut short still has them
            f"{split}), eager": (run_split, (False,)),
            f"{split}), CUDA graph": (run_split, (True,)),
            "PyTorch eager (autograd)": (run_torch, False),
            "jax.jit (value_and_grad step)": (run_jax, None),
            "torch.compile (grad_and_value step, inductor)": (run_torch, True),
        }
        if a.variants:  # what the choices above rest on
            runners.update({
                f"vyre split step ({c} weight copies, {r} rows per invocation), CUDA graph": (run_split, (True, c, r))
                for c, r in ((32, 1), (32, 4), (32, 16), (128, 8))})
        if a.fused:
            runners.update({
                "vyre, one fused kernel, column-major X + 128 weight copies, CUDA graph": (run_vyre, (True, True)),
                "vyre, one fused kernel, row-major X, CUDA graph": (run_vyre, (True, False)),
            })
        for name, (fn, flag) in runners.items():
            try:
                rows[name] = (fn(X, y, a.steps) if flag is None else
                              fn(X, y, a.steps, *flag) if isinstance(flag, tuple) else fn(X, y, a.steps, flag))
                print(f"| {name} | {rows[name][0] * 1e6:.1f} | {rows[name][1]:.6f} | |", flush=True)
                for note in NOTES:
                    print(f"\n{note}\n", flush=True)
                NOTES.clear()
            except Exception as e:  # a peer that fails is reported, the rest still runs
                print(f"| {name} | failed: {type(e).__name__}: {str(e)[:120]} | | |", flush=True)
        print("\nvs PyTorch eager:\n")
        base = rows.get("PyTorch eager (autograd)", (float("nan"), 0.0))[0]
        for name, (dt, _) in rows.items():
            print(f"- {name}: {base / dt:.2f}x")
        losses = [loss for _, loss in rows.values()]
        spread = (max(losses) - min(losses)) / max(abs(min(losses)), 1e-12) if losses else float("nan")
        print(f"\nfinal losses agree within {spread:.2e} (relative)")
        assert spread < 1e-3, f"final losses disagree: {rows}"
        results[size] = {k: {"us": v[0] * 1e6, "loss": v[1]} for k, v in rows.items()}
    out = os.environ.get("OUT")
    if out:
        Path(out, "train_results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
