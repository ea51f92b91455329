"""What a numba kernel can do against OpenBLAS on the rows of ``bench/ops_bench.py`` where vyre
stays below numpy (`matvec` below 2048x2048, `dot` at 2^12 and 2^16): the bar's floor, measured.

For each shape it times, in the same process:

* numpy (``m @ v`` / ``np.dot``: OpenBLAS's ``sgemv`` / ``sdot`` / ``ddot``),
* ``hand32``: a hand-written numba kernel with ``fastmath=True`` that accumulates f32 in f32, as
  ``sgemv`` does (four rows at a time; LLVM vectorises each row's sum and merges its lanes with
  vector shuffles, which fast-math permits),
* ``hand64``: the same kernel accumulating f32 in f64, the accuracy vyre's ``matvec`` and ``dot``
  document (docs/ops.md, "Accuracy"),
* ``call``: a numba kernel with vyre's serial entry's argument list (three arrays, three ints)
  that does nothing, called through its compiled entry point as vyre calls its kernels: the cost
  of one numba call before any work,
* vyre (``vyre.ops.matvec`` / ``vyre.ops.dot``, serial or parallel as the op chooses).

The hand kernels are compiled by numba through its dispatcher (they pay its type dispatch, about
0.3 us more than a compiled entry). Each side is timed in its own block after 0.4 s of rest, so
OpenBLAS's pool is asleep when the others run (bench/ops_bench.py, ``pair``). Prints a markdown
table. Run on an otherwise idle machine, pinned to the cores of the bar:

    taskset -c 0,1 env NUMBA_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 VYRE_BACKEND=cpu python bench/blas_floor.py
"""

from __future__ import annotations

import platform
import time
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

import vyre.ops as vo

REST_S = 0.4


@njit(fastmath=True)
def hand32(m: Any, v: Any, out: Any) -> None:  # pragma: no cover - compiled
    rows, cols = m.shape
    for r in range(0, rows - 3, 4):
        s0 = s1 = s2 = s3 = np.float32(0)
        for j in range(cols):
            w = v[j]
            s0 += m[r, j] * w
            s1 += m[r + 1, j] * w
            s2 += m[r + 2, j] * w
            s3 += m[r + 3, j] * w
        out[r], out[r + 1], out[r + 2], out[r + 3] = s0, s1, s2, s3
    for r in range(rows - rows % 4, rows):
        s = np.float32(0)
        for j in range(cols):
            s += m[r, j] * v[j]
        out[r] = s


@njit(fastmath=True)
def hand64(m: Any, v: Any, out: Any) -> None:  # pragma: no cover - compiled
    rows, cols = m.shape
    for r in range(0, rows - 3, 4):
        s0 = s1 = s2 = s3 = 0.0
        for j in range(cols):
            w = np.float64(v[j])
            s0 += np.float64(m[r, j]) * w
            s1 += np.float64(m[r + 1, j]) * w
            s2 += np.float64(m[r + 2, j]) * w
            s3 += np.float64(m[r + 3, j]) * w
        out[r], out[r + 1], out[r + 2], out[r + 3] = s0, s1, s2, s3
    for r in range(rows - rows % 4, rows):
        s = 0.0
        for j in range(cols):
            s += np.float64(m[r, j]) * np.float64(v[j])
        out[r] = s


@njit(fastmath=True)
def dot32(x: Any, y: Any) -> Any:  # pragma: no cover - compiled
    s = np.float32(0)
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@njit(fastmath=True)
def dot64(x: Any, y: Any) -> float:  # pragma: no cover - compiled
    s = 0.0
    for i in range(x.shape[0]):
        s += np.float64(x[i]) * np.float64(y[i])
    return s


@njit
def nothing(x: Any, y: Any, out: Any, gx: int, gy: int, gz: int) -> None:  # pragma: no cover - compiled
    pass


def _entry(arrays: tuple[Any, ...]) -> Any:
    """``nothing``'s compiled entry point for these arrays and three ints (no type dispatch)."""
    return nothing.compile((*(nothing.typeof_pyval(a) for a in arrays), *(nothing.typeof_pyval(1),) * 3))


def block(fn: Callable[[], Any], n: int) -> float:
    """Microseconds per call: the best of seven blocks of ``n`` calls, after 0.4 s of rest."""
    time.sleep(REST_S)
    fn()
    return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6


def main() -> None:
    print(f"{platform.processor() or platform.machine()}, numpy {np.__version__}, {time.strftime('%Y-%m-%d %H:%M')}")
    print()
    print("| row | numpy (BLAS) | hand32 (f32 sums) | hand64 (f64 sums) | numba call | vyre |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for rows, cols in ((64, 64), (256, 256), (1000, 100), (100, 1000), (16, 4096), (2048, 2048)):
        m = rng.standard_normal((rows, cols)).astype(np.float32)
        v = rng.standard_normal(cols).astype(np.float32)
        print(f"| matvec {rows}x{cols} f32 | " + _matvec_row(m, v) + " |", flush=True)
    for dt in (np.float32, np.float64):
        for k in (12, 16):
            x = rng.standard_normal(1 << k).astype(dt)
            y = rng.standard_normal(1 << k).astype(dt)
            print(f"| dot {np.dtype(dt).name} 2^{k} | " + _dot_row(x, y) + " |", flush=True)


def _matvec_row(m: np.ndarray, v: np.ndarray) -> str:
    o32, o64 = np.empty(m.shape[0], np.float32), np.empty(m.shape[0], np.float64)
    n = 100 if m.size > 10**6 else 2000
    flat = m.ravel()
    entry = _entry((flat, v, o32))
    t = [block(lambda: m @ v, n), block(lambda: hand32(m, v, o32), n), block(lambda: hand64(m, v, o64), n),
         block(lambda: entry(flat, v, o32, 1, 1, 1), n), block(lambda: vo.matvec(m, v), n)]
    return " | ".join(f"{x:.2f}" for x in t)


def _dot_row(x: np.ndarray, y: np.ndarray) -> str:
    """For f64 both hand columns are ``dot64`` (f64 sums: BLAS's and vyre's accuracy alike)."""
    out = np.empty(1, x.dtype)
    entry = _entry((x, y, out))
    hand = dot32 if x.dtype == np.float32 else dot64
    t = [block(lambda: np.dot(x, y), 5000), block(lambda: hand(x, y), 5000), block(lambda: dot64(x, y), 5000),
         block(lambda: entry(x, y, out, 1, 1, 1), 5000), block(lambda: vo.dot(x, y), 5000)]
    return " | ".join(f"{s:.2f}" for s in t)

if __name__ == "__main__":
    main()
