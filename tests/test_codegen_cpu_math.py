"""The CPU backend's own f32 exp / exp2 / log / log2 / tanh / sinh / cosh / sin / cos / tan (branch-free, vectorisable;
vyre/codegen/cpu.py CPU_MATH) are within one ulp of the float64 result over the whole f32 range,
special values included."""

from __future__ import annotations

import numpy as np
import pytest

from vyre.driver.dispatch import compile as vcompile
from vyre.ir import F32, Program, UnOpKind, buflen, gid, if_, let, output, read, store, unop, var

REFERENCE = {UnOpKind.EXP: np.exp, UnOpKind.EXP2: np.exp2, UnOpKind.LOG: np.log, UnOpKind.LOG2: np.log2,
             UnOpKind.TANH: np.tanh, UnOpKind.SINH: np.sinh, UnOpKind.COSH: np.cosh, UnOpKind.SIN: np.sin,
             UnOpKind.COS: np.cos, UnOpKind.TAN: np.tan}


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(42)
    parts = [
        rng.uniform(-10, 10, 20000),
        rng.uniform(-200, 200, 20000),  # both sides of the |x| = 120 switch between reductions
        rng.uniform(-110, 95, 20000),  # exp's overflow / subnormal / underflow edges
        rng.standard_normal(40000) * 10.0 ** rng.uniform(-45, 38, 40000),  # every exponent
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, 3.4028235e38, -3.4028235e38,
                  88.72283, 88.72284, -87.33655, -103.97208, -103.97209, 119.99999, 120.0, -120.0,
                  np.pi / 2, np.pi, 1e6 * np.pi, 2.0**24, 2.0**60, 2.0**127,
                  # exp2's edges, log near 1 and at powers of two, tanh around its Taylor switch
                  127.99999, 128.0, -149.0, -149.5, -150.0, -126.0, 1.0, 0.99999994, 1.0000001, 0.5, 2.0**-149,
                  0.125, 0.12499999, -0.125, 1e-4, 9.0, 9.1, 19.99, 20.0, 1e-30,
                  # sinh/cosh overflow, tan next to its poles
                  89.41598, 89.41599, -89.41599, 95.0, 96.0, 1.5707963, 1.5707964, -1.5707964, 4.712389,
                  4.7123890, 3.1415927, 1e4 + 0.5]),
        rng.uniform(0.5, 2.0, 20000),  # log around 1
        rng.uniform(-0.2, 0.2, 20000),  # tanh's small branch and its edge
    ]
    with np.errstate(over="ignore"):
        return np.concatenate(parts).astype(np.float32)


def _ulps(got: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        ref32 = ref64.astype(np.float32)
        spacing = np.spacing(np.abs(ref32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref64) / spacing
    err[np.isnan(got) & np.isnan(ref32)] = 0.0
    err[np.isinf(ref32) & (got == ref32)] = 0.0
    return err


@pytest.mark.parametrize("op", list(REFERENCE), ids=lambda op: op.name)
def test_f32_transcendentals_within_one_ulp(op: UnOpKind) -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    prog = Program.wrapped([x, out], 256, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, unop(op, x[i]))])])
    xs = _inputs()
    got = vcompile(prog, "cpu", parallel=False)({"x": xs, "out": np.empty_like(xs)})["out"]
    with np.errstate(all="ignore"):
        ref = REFERENCE[op](xs.astype(np.float64))
    err = _ulps(got, ref)
    worst = int(np.argmax(err))
    assert err[worst] <= 1.0, f"{op.name}({xs[worst]!r}) = {got[worst]!r}, float64 reference {ref[worst]!r}"
    with np.errstate(over="ignore"):
        ref32 = ref.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(ref32))
    assert np.array_equal(np.signbit(got[xs == 0]), np.signbit(ref[xs == 0].astype(np.float32)))
