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
