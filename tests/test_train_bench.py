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


@pytest.mark.parametrize("reps", [1, 4, 32])
def test_split_step_trains_like_numpy(reps: int) -> None:
    X, y = tb.data(1024, 16)
    ref, w, b = _numpy_sgd(X, y, 20)
    step = tb.SplitStep(X, y, np, reps, backend="cpu")
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
    n, d, reps = 96, 5, 3
    X = rng.standard_normal((n, d)).astype(np.float32)
    zargs = {"XT": np.ascontiguousarray(X.T).reshape(-1), "W": rng.standard_normal(reps * d).astype(np.float32),
             "B": rng.standard_normal(reps).astype(np.float32), "z": np.zeros(n, np.float32)}
    check_grad(tb.z_program(n, reps), zargs, ["W", "B"], backend="cpu")
    largs = {"z": rng.standard_normal(n).astype(np.float32), "y": (rng.random(n) > 0.5).astype(np.float32),
             "out": np.zeros(n, np.float32)}
    check_grad(tb.z_loss_program(n), largs, ["z"], backend="cpu")
