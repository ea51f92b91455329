"""CPU benchmark of vyre.ops against numpy (the bar: numpy's pairwise sum). Prints a markdown table;
every number is measured in this run. Run on an otherwise idle machine:

    python bench/ops_bench.py [--quick]

Timings are the best of several runs (warm kernels: compile time is excluded), after one call that
compiles and one that the autotuner may use; vyre and numpy are measured in alternating rounds (a
shared machine's load hits both), and vyre's CPU time (all threads) is reported beside its wall time."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import vyre.ops as vo


def best(fn, reps: int = 7) -> float:
    fn()
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def cpu_time(fn, reps: int = 5) -> float:
    """Process CPU seconds per call (every thread's)."""
    t = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - t) / reps


def pair(fv, fn, rounds: int = 3) -> tuple[float, float, float]:
    """(vyre wall, numpy wall, vyre CPU) seconds: the best of alternating rounds."""
    tv, tn = [], []
    for _ in range(rounds):
        tv.append(best(fv, 3))
        tn.append(best(fn, 3))
    return min(tv), min(tn), cpu_time(fv)


def row_reductions(row, x: np.ndarray, y: np.ndarray) -> None:
    k = f"{x.dtype.name} 2^{x.size.bit_length() - 1}"
    row(f"sum {k}", pair(lambda: vo.sum(x, backend="cpu"), lambda: np.sum(x)), "np.sum")
    row(f"dot {k}", pair(lambda: vo.dot(x, y, backend="cpu"), lambda: np.dot(x, y)), "np.dot (BLAS)")
    row(f"max {k}", pair(lambda: vo.max(x, backend="cpu"), lambda: np.max(x)), "np.max")
    row(f"norm {k}", pair(lambda: vo.norm(x, backend="cpu"), lambda: np.linalg.norm(x)), "np.linalg.norm")
    row(f"argmax {k}", pair(lambda: vo.argmax(x, backend="cpu"), lambda: np.argmax(x)), "np.argmax")


def main() -> None:
    quick = "--quick" in sys.argv
    rng = np.random.default_rng(0)
    n = 1 << (22 if quick else 24)
    rows = []

    def row(name: str, times: tuple[float, float, float], ref: str) -> None:
        t_v, t_n, c_v = times
        rows.append(f"| {name} | {t_v * 1e3:.3f} | {c_v * 1e3:.3f} | {t_n * 1e3:.3f} ({ref}) | {t_n / t_v:.2f}x |")
        print(rows[-1], file=sys.stderr, flush=True)

    for dt in (np.float32, np.float64):
        row_reductions(row, rng.standard_normal(n).astype(dt), rng.standard_normal(n).astype(dt))
    r = c = 1024 if quick else 2048
    xm = rng.standard_normal((r, c)).astype(np.float32)
    v = rng.standard_normal(c).astype(np.float32)

    def np_softmax(a: np.ndarray) -> np.ndarray:
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def np_ln(a: np.ndarray) -> np.ndarray:
        mu = a.mean(-1, keepdims=True)
        return (a - mu) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)

    row(f"row_sum {r}x{c} f32", pair(lambda: vo.row_sum(xm, backend="cpu"), lambda: xm.sum(-1)), "sum(-1)")
    row(f"softmax {r}x{c} f32", pair(lambda: vo.softmax(xm, backend="cpu"), lambda: np_softmax(xm)), "numpy")
    row(f"logsumexp {r}x{c} f32", pair(lambda: vo.logsumexp(xm, backend="cpu"),
                                       lambda: np.log(np.exp(xm - xm.max(-1, keepdims=True)).sum(-1)) + xm.max(-1)),
        "numpy")
    row(f"layer_norm {r}x{c} f32", pair(lambda: vo.layer_norm(xm, backend="cpu"), lambda: np_ln(xm)), "numpy")
    row(f"matvec {r}x{c} f32", pair(lambda: vo.matvec(xm, v, backend="cpu"), lambda: xm @ v), "BLAS")
    print(f"# vyre.ops CPU benchmark\n\n{os.cpu_count()} cores; numpy {np.__version__}; "
          f"date {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| op | vyre (ms) | vyre CPU time (ms, all threads) | numpy (ms) | speed vs numpy |\n|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
