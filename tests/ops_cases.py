"""Shared expectations for the vyre.ops tests (host process and the simulator's child process):
arrays with special values, and the numpy/fsum oracle each op is held to (docs/ops.md)."""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
from hypothesis import strategies as st

from vyre.ops.reduce import STAGE_STEPS

U64 = 2.0**-53
U32 = 2.0**-24

#: lengths around every boundary the passes have: unroll widths, subgroups, workgroups, blocks
LENGTHS = st.one_of(
    st.sampled_from([0, 1, 2, 3, 7, 8, 9, 31, 32, 33, 97, 255, 256, 257, 1023, 1024, 1025, 4096, 4097]),
    st.integers(0, 5000),
)
SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e30, -1e30, 1e-30]


def floats_array(draw: st.DrawFn, n: int, dtype: type, special: bool) -> np.ndarray:
    """Normal values, sometimes with NaN/inf/huge/tiny ones mixed in at drawn positions."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([1.0, 1e-3, 1e3]))
    x = (rng.standard_normal(n) * scale).astype(dtype)
    if special and n:
        for _ in range(draw(st.integers(1, 3))):
            x[draw(st.integers(0, n - 1))] = draw(st.sampled_from(SPECIAL))
    return x


@st.composite
def arrays(draw: st.DrawFn, special: bool | None = None) -> np.ndarray:
    n = draw(LENGTHS)
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    sp = draw(st.booleans()) if special is None else special
    return floats_array(draw, n, dtype, sp)


def chain_bound(n: int) -> int:
    """An upper bound on the additions any element goes through, for every form and pass count:
    a thread's sequential share (at most n / 8 in the CPU form, n / (1024 * 4) ... on the GPU) plus
    pairwise merges and tree levels (docs/ops.md, "Accuracy")."""
    return n // 8 + 64


def check_sum(got: float, x: np.ndarray, extra: np.ndarray | None = None, staged: bool = False) -> None:
    """``got`` against the exact sum of ``x`` (``x * extra`` for a dot product): IEEE special-value
    rules, else the bound of docs/ops.md: f32 rounds the f64 sum once; f64 within
    ``chain_bound(n) * 2^-53 * sum|x|``. ``staged`` (the CPU form of an f32 dot, vyre.ops.reduce
    ``_staged_program``): the f32 stages add ``STAGE_STEPS * 2^-24 * sum|x_i y_i|``."""
    terms = x.astype(np.float64) if extra is None else x.astype(np.float64) * extra.astype(np.float64)
    with np.errstate(all="ignore"):
        naive = np.sum(terms)
    if not np.all(np.isfinite(terms)) or not math.isfinite(naive):
        if math.isnan(naive):
            assert math.isnan(got), (got, naive)
            return
        if not np.all(np.isfinite(terms)):
            assert got == naive, (got, naive)
            return
    exact = math.fsum(terms)
    n = len(terms)
    mag = math.fsum(np.abs(terms))
    bound = chain_bound(n) * U64 * mag
    if x.dtype == np.float32:
        if abs(exact) > 3.4028234663852886e38 * (1 + 2**-25):
            assert math.isinf(got) and math.copysign(1, got) == math.copysign(1, exact), (got, exact)
            return
        if staged:
            bound += STAGE_STEPS * U32 * mag * (1 + 2.0**-20)
        bound = U32 * abs(exact) + bound * (1 + U32) + 1e-45
    assert abs(float(got) - exact) <= bound, (float(got), exact, bound)


def expected_extreme(x: np.ndarray, largest: bool) -> float:
    """numpy's max/min, with the empty identity (-inf / +inf)."""
    if x.size == 0:
        return -math.inf if largest else math.inf
    return float(np.max(x) if largest else np.min(x))


def same_float(a: float, b: float) -> bool:
    """Equal, or both NaN (zeros of either sign are equal: max(-0, 0) may return either)."""
    return (math.isnan(a) and math.isnan(b)) or a == b


def run_interleaved(threads: list[threading.Thread]) -> None:
    """Start and join ``threads`` with the interpreter switching between them after almost any
    two bytecodes (the races a plan or call site could have show up)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
