"""Runs every vyre.ops function on numba's CUDA simulator (backend ``cudasim``: the GPU-form
programs, device arrays between passes) on small inputs and prints one JSON line per check.
Started by tests/test_ops_sim.py in a child process with NUMBA_ENABLE_CUDASIM=1.

    NUMBA_ENABLE_CUDASIM=1 python -m tests.ops_sim_runner
"""

from __future__ import annotations

import json
import math
import traceback
from collections.abc import Callable

import numpy as np

import vyre.ops as vo
from tests.ops_cases import check_sum, expected_extreme, same_float


def checks() -> list[tuple[str, Callable[[], None]]]:
    rng = np.random.default_rng(7)
    out: list[tuple[str, Callable[[], None]]] = []
    for n, dt in [(0, np.float32), (1, np.float64), (1100, np.float32), (2500, np.float64)]:
        x = rng.standard_normal(n).astype(dt)
        y = rng.standard_normal(n).astype(dt)
        if n > 100:
            x[n // 3] = 50.0
            x[n - 1] = 50.0

        def full(x: np.ndarray = x, y: np.ndarray = y, n: int = n) -> None:
            check_sum(float(vo.sum(x, backend="cudasim")), x)
            check_sum(float(vo.dot(x, y, backend="cudasim")), x, y)
            assert same_float(float(vo.max(x, backend="cudasim")), expected_extreme(x, True))
            assert same_float(float(vo.min(x, backend="cudasim")), expected_extreme(x, False))
            nm = float(vo.norm(x, backend="cudasim"))
            assert abs(nm - float(np.linalg.norm(x.astype(np.float64)))) <= 1e-6 * (1 + nm)
            if n:
                assert int(vo.argmax(x, backend="cudasim")) == int(np.argmax(x))
                assert abs(float(vo.mean(x, backend="cudasim")) - float(x.astype(np.float64).mean())) < 1e-6

        out.append((f"full_n{n}_{np.dtype(dt).name}", full))
    nanx = np.array([1.0, math.nan, 3.0, math.inf, math.nan], np.float32)

    def nans() -> None:
        assert math.isnan(vo.sum(nanx, backend="cudasim"))
        assert math.isnan(vo.max(nanx, backend="cudasim"))
        assert math.isnan(vo.min(nanx, backend="cudasim"))
        assert int(vo.argmax(nanx, backend="cudasim")) == 1

    out.append(("nan_rules", nans))

    def device_in_device_out() -> None:
        from numba import cuda

        d = cuda.to_device(np.arange(10, dtype=np.float32))
        s = vo.sum(d)  # backend=None: device arrays pick the (simulated) GPU
        assert s.shape == () and float(s.copy_to_host()) == 45.0
        assert int(vo.argmax(d).copy_to_host()) == 9
        y = vo.softmax(cuda.to_device(np.ones((3, 4), np.float32)))
        assert y.shape == (3, 4) and np.allclose(y.copy_to_host(), 0.25)

    out.append(("device_arrays", device_in_device_out))

    def along_axes() -> None:
        from numba import cuda

        x = rng.standard_normal((2, 3, 40)).astype(np.float32)
        xd = x.astype(np.float64)
        for axis in (1, (0, 2), -1):
            np.testing.assert_allclose(vo.sum(x, axis, backend="cudasim"), xd.sum(axis), rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(vo.min(x, axis, keepdims=True, backend="cudasim"),
                                          x.min(axis, keepdims=True))
        # softmax along a leading axis: every position of the others is a row (its GPU row program
        # runs a workgroup per row), so a few positions: 120 of them took 27 s on the simulator
        xs = xd[:, :2, :3]
        e = np.exp(xs - xs.max(0, keepdims=True))
        np.testing.assert_allclose(vo.softmax(x[:, :2, :3], 0, backend="cudasim"), e / e.sum(0, keepdims=True),
                                   rtol=1e-5)
        xt = np.round(x * 2)  # ties
        xt[1, 2, 7] = np.nan
        for axis in (0, -1, (0, 2)):
            got = vo.argmax(xt, axis, backend="cudasim")
            assert got.dtype == np.int64
            want = np.argmax(np.moveaxis(xt, 1, 0).reshape(3, -1), -1) if axis == (0, 2) else np.argmax(xt, axis)
            np.testing.assert_array_equal(got, want)
        # a numba device array reduces along its last axes (a reshape) or a run of axes before
        # others (the column forms), and says why not along others (a transpose)
        d = cuda.to_device(x)
        np.testing.assert_allclose(vo.sum(d, 0).copy_to_host(), xd.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(vo.argmax(d, 1).copy_to_host(), np.argmax(x, 1))
        s = vo.norm(d, -1)
        assert s.shape == (2, 3)
        np.testing.assert_allclose(s.copy_to_host(), np.sqrt((xd * xd).sum(-1)), rtol=1e-5)
        np.testing.assert_allclose(vo.mean(d, (1, 2)).copy_to_host(), xd.mean((1, 2)), rtol=1e-5)
        np.testing.assert_array_equal(vo.argmax(d, -1).copy_to_host(), np.argmax(x, -1))
        for axis in (None, 0, -1):  # keepdims: numpy's shape, on the device too
            k = vo.argmax(d, axis, keepdims=True)
            assert k.shape == np.argmax(x, axis, keepdims=True).shape
            np.testing.assert_array_equal(k.copy_to_host(), np.argmax(x, axis, keepdims=True))
        try:
            vo.sum(d, (0, 2))
        except vo.OpsError as e:
            assert "Fix:" in str(e) and "transpose" in str(e)
        else:
            raise AssertionError("a numba device array was transposed")

    out.append(("along_axes", along_axes))
    # rows of 5 (32 invocations a row), 300 (64) and 1030 (256: past 1024 columns); one row of
    # 1030 (19 s for two on the simulator): the rows' indexing is the 3x5 and 2x300 cases'
    for r, c in [(3, 5), (2, 300), (1, 1030)]:
        x = rng.standard_normal((r, c)).astype(np.float32)
        g = rng.standard_normal((r, c)).astype(np.float32)
        gr = rng.standard_normal(r).astype(np.float32)

        def rowwise(x: np.ndarray = x, g: np.ndarray = g, gr: np.ndarray = gr) -> None:
            xd = x.astype(np.float64)
            e = np.exp(xd - xd.max(-1, keepdims=True))
            sm = e / e.sum(-1, keepdims=True)
            np.testing.assert_allclose(vo.row_sum(x, backend="cudasim"), xd.sum(-1), rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(vo.row_max(x, backend="cudasim"), x.max(-1))
            y = vo.softmax(x, backend="cudasim")
            np.testing.assert_allclose(y, sm, rtol=1e-5, atol=1e-6)
            lse = vo.logsumexp(x, backend="cudasim")
            np.testing.assert_allclose(lse, np.log(np.exp(xd).sum(-1)), rtol=1e-5, atol=1e-5)
            ln, mu, rs = vo.layer_norm(x, backend="cudasim", return_stats=True)
            ref = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5)
            np.testing.assert_allclose(ln, ref, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(vo.softmax_grad(y, g, backend="cudasim"),
                                       sm * (g - (g * sm).sum(-1, keepdims=True)), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(vo.logsumexp_grad(x, lse, gr, backend="cudasim"), gr[:, None] * sm,
                                       rtol=1e-4, atol=1e-6)
            xh = (xd - mu[:, None]) * rs[:, None]
            want = rs[:, None] * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))
            np.testing.assert_allclose(vo.layer_norm_grad(x, g, mu, rs, backend="cudasim"), want,
                                       rtol=1e-3, atol=1e-4)

        out.append((f"rowwise_{r}x{c}", rowwise))
    for r, c in [(3, 5), (11, 200)]:
        m = rng.standard_normal((r, c)).astype(np.float32)
        v = rng.standard_normal(c).astype(np.float32)
        g = rng.standard_normal(r).astype(np.float32)

        def mv(m: np.ndarray = m, v: np.ndarray = v, g: np.ndarray = g) -> None:
            md = m.astype(np.float64)
            np.testing.assert_allclose(vo.matvec(m, v, backend="cudasim"), md @ v, rtol=1e-5, atol=1e-5)
            gm, gv = vo.matvec_grad(m, v, g, backend="cudasim")
            np.testing.assert_allclose(gm, np.outer(g, v), rtol=1e-6)
            np.testing.assert_allclose(gv, md.T @ g, rtol=1e-5, atol=1e-5)

        out.append((f"matvec_{r}x{c}", mv))
    return out


def main() -> None:
    import sys

    only = sys.argv[1:]
    for name, fn in checks():
        if only and not any(name.startswith(o) for o in only):
            continue
        try:
            fn()
            print(json.dumps({"name": name, "ok": True}), flush=True)
        except Exception:
            print(json.dumps({"name": name, "ok": False, "error": traceback.format_exc()[-3000:]}), flush=True)


if __name__ == "__main__":
    main()
