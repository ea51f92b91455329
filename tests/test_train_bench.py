"""The training benchmark's programs (bench/train_bench.py) on the CPU: both layouts of logistic
regression train exactly like float64 numpy SGD."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import vyre

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import train_bench as tb


@pytest.mark.parametrize("replicated", [False, True], ids=["row-major", "column-major+replicas"])
def test_vyre_sgd_matches_numpy(replicated: bool) -> None:
    X, y = tb.data(1024, 16)
    n, d = X.shape
    w, b = np.zeros(d), 0.0
    for _ in range(20):
        z = X @ w + b
        s = 1 / (1 + np.exp(-z))
        ref = float(np.mean(np.log1p(np.exp(z)) - y * z))
        w, b = w - tb.LR * X.T @ (s - y) / n, b - tb.LR * float(np.mean(s - y))
    _, upd, vg, args, uargs, ugrid, params = tb.vyre_setup(X, y, np, replicated)
    for p in params:
        args[p].fill(0)
    for _ in range(20):
        loss, _ = vg(args)
        vyre.dispatch(upd, uargs, backend="cpu", grid=ugrid)
    assert loss == pytest.approx(ref, rel=1e-6)
    np.testing.assert_allclose(args[params[0]][:d], w, rtol=1e-4, atol=1e-6)


def _numpy_sgd(X: np.ndarray, y: np.ndarray, steps: int) -> tuple[float, np.ndarray, float]:
    n, d = X.shape
    w, b = np.zeros(d), 0.0
    for _ in range(steps):
        z = X @ w + b
        s = 1 / (1 + np.exp(-z))
        ref = float(np.mean(np.log1p(np.exp(z)) - y * z))
        w, b = w - tb.LR * X.T @ (s - y) / n, b - tb.LR * float(np.mean(s - y))
    return ref, w, b


@pytest.mark.parametrize(("reps", "rows"), [(1, 1), (4, 3), (32, 8)])
def test_split_step_trains_like_numpy(reps: int, rows: int) -> None:
    X, y = tb.data(1000, 16)  # 1000 = 3 * 334 - 2: the last invocation has rows past the end
    ref, w, b = _numpy_sgd(X, y, 20)
    step = tb.SplitStep(X, y, np, reps, backend="cpu", rows=rows)
    for _ in range(20):
        loss = step()
    assert loss == pytest.approx(ref, rel=1e-6)
    got_w, got_b = step.weights()
    np.testing.assert_allclose(got_w, w, rtol=1e-4, atol=1e-6)
    assert got_b == pytest.approx(b, rel=1e-4, abs=1e-6)
    W = step.W.reshape(reps, -1)
    assert (W == W[0]).all() and (step.B == step.B[0]).all()  # every copy updated alike
    assert not step.gW.any() and not step.gB.any()  # the update left zeros for the next backward


def test_split_step_programs_have_the_finite_difference_gradients() -> None:
    from vyre.autodiff import check_grad

    rng = np.random.default_rng(1)
    n, d, reps = 97, 5, 3
    X = rng.standard_normal((n, d)).astype(np.float32)
    zargs = {"XT": np.ascontiguousarray(X.T).reshape(-1), "W": rng.standard_normal(reps * d).astype(np.float32),
             "B": rng.standard_normal(reps).astype(np.float32), "z": np.zeros(n, np.float32)}
    for rows in (1, 4):
        check_grad(tb.z_program(n, reps, rows), zargs, ["W", "B"], backend="cpu")
    largs = {"z": rng.standard_normal(n).astype(np.float32), "y": (rng.random(n) > 0.5).astype(np.float32),
             "out": np.zeros(n, np.float32)}
    check_grad(tb.z_loss_program(n), largs, ["z"], backend="cpu")


@pytest.mark.parametrize("reps", [5, 32])
def test_the_update_sums_the_copies_updates_every_copy_and_zeroes_the_gradients(reps: int) -> None:
    rng = np.random.default_rng(2)
    d = 7
    W, B = rng.standard_normal(reps * d).astype(np.float32), rng.standard_normal(reps).astype(np.float32)
    gW, gB = rng.standard_normal(reps * d).astype(np.float32), rng.standard_normal(reps).astype(np.float32)
    want_W = W - tb.LR * np.tile(gW.reshape(reps, d).sum(0, dtype=np.float64), reps)
    want_B = B - tb.LR * gB.sum(dtype=np.float64)
    grid = -(-(d + 1) * (32 if reps == 32 else 1) // 64)
    vyre.dispatch(tb.sgd_zeroing_program(reps), {"W": W, "B": B, "gW": gW, "gB": gB}, backend="cpu", grid=grid)
    np.testing.assert_allclose(W, want_W, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(B, want_B, rtol=1e-5, atol=1e-5)
    assert not gW.any() and not gB.any()
