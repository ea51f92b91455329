"""CPU benchmark of vyre.ops against numpy (the bar: numpy's pairwise sum; BLAS for dot, norm and
matvec). Prints a markdown table; every number is measured in this run. Run on an otherwise idle
machine:

    python bench/ops_bench.py [--quick]

Every op of issue 15 at several sizes: the whole-array reductions at 2^12, 2^16, 2^20 and 2^24
elements (f32 and f64; ``--quick``: 2^16 and 2^20), the row-wise ops on six shapes (two small:
a call's fixed cost), matvec on five (two of them short or narrow).
Timings are the best of several back-to-back calls (warm kernels: compile time is excluded, and
the thread pool is awake, as in a loop of calls), after two calls that compile and plan; vyre and
numpy are measured in alternating rounds (a shared machine's load hits both), except against BLAS
(``pair``'s ``alternate``). Calls after the process has been idle for tens of milliseconds cost
more on both sides (docs/ops.md)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import vyre.ops as vo


#: rest before vyre's rounds of a row against BLAS: OpenBLAS's threads sleep after about 0.2 s idle
BLAS_IDLE_S = 0.4
#: vyre's calls after that rest before its rounds against BLAS are timed
WARM_S = 0.05


def best(fn: Callable[[], Any], reps: int = 5) -> float:
    fn()
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def pair(fv: Callable[[], Any], fn: Callable[[], Any], rounds: int = 3, reps: int = 5, alternate: bool = True
         ) -> tuple[float, float]:
    """(vyre, numpy) seconds: the best of alternating rounds. ``alternate=False`` (the rows against
    BLAS): all of vyre's rounds, then all of numpy's, each in its steady state. OpenBLAS's idle
    threads keep yielding the cores for about 0.2 s after a call (measured: vyre's parallel `dot`
    of 2^20 f64 ran 2.5-3x slower for the first 150-200 ms after fifteen `np.dot` calls, and not
    at all with ``OPENBLAS_NUM_THREADS=1``); alternating rounds measured vyre's matvec at 0.32x
    instead of 0.8x, so vyre's rounds start after ``BLAS_IDLE_S`` of rest."""
    if not alternate:
        time.sleep(BLAS_IDLE_S)  # the last row's BLAS threads asleep again
        # then vyre's steady state: after the rest its first parallel passes ran 2-3x slower for
        # a few ms, now and then more than one round (f64 norm of 2^20: 0.33x in one process,
        # 0.97x in the next)
        end = time.perf_counter() + WARM_S
        while time.perf_counter() < end:
            fv()
        return min(best(fv, reps) for _ in range(rounds)), min(best(fn, reps) for _ in range(rounds))
    tv, tn = [], []
    for _ in range(rounds):
        tv.append(best(fv, reps))
        tn.append(best(fn, reps))
    return min(tv), min(tn)


def np_softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_logsumexp(a: np.ndarray) -> np.ndarray:
    m = a.max(-1)
    return np.log(np.exp(a - m[:, None]).sum(-1)) + m


def np_layer_norm(a: np.ndarray) -> np.ndarray:
    mu = a.mean(-1, keepdims=True)
    return (a - mu) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)


WHOLE: dict[str, tuple[Callable[[np.ndarray, np.ndarray], Any], Callable[[np.ndarray, np.ndarray], Any], str]] = {
    "sum": (lambda x, y: vo.sum(x, backend="cpu"), lambda x, y: np.sum(x), "np.sum"),
    "mean": (lambda x, y: vo.mean(x, backend="cpu"), lambda x, y: np.mean(x), "np.mean"),
    "max": (lambda x, y: vo.max(x, backend="cpu"), lambda x, y: np.max(x), "np.max"),
    "min": (lambda x, y: vo.min(x, backend="cpu"), lambda x, y: np.min(x), "np.min"),
    "argmax": (lambda x, y: vo.argmax(x, backend="cpu"), lambda x, y: np.argmax(x), "np.argmax"),
    "dot": (lambda x, y: vo.dot(x, y, backend="cpu"), lambda x, y: np.dot(x, y), "np.dot, BLAS"),
    "norm": (lambda x, y: vo.norm(x, backend="cpu"), lambda x, y: np.linalg.norm(x), "np.linalg.norm, BLAS"),
}

ROWS: dict[str, tuple[Callable[[np.ndarray], Any], Callable[[np.ndarray], Any], str]] = {
    "row_sum": (lambda a: vo.row_sum(a, backend="cpu"), lambda a: a.sum(-1), "a.sum(-1)"),
    "row_max": (lambda a: vo.row_max(a, backend="cpu"), lambda a: a.max(-1), "a.max(-1)"),
    "softmax": (lambda a: vo.softmax(a, backend="cpu"), np_softmax, "numpy"),
    "logsumexp": (lambda a: vo.logsumexp(a, backend="cpu"), np_logsumexp, "numpy"),
    "layer_norm": (lambda a: vo.layer_norm(a, backend="cpu"), np_layer_norm, "numpy"),
}


def row_ops(rng: np.random.Generator, quick: bool, row: Callable[[str, tuple[float, float], str], None]) -> None:
    # small shapes too: a call's fixed cost (Python, the plan, the launch) against numpy's
    shapes = ((1024, 1024), (64, 64)) if quick else ((2048, 2048), (256, 4096), (1000, 100), (65536, 16), (64, 64),
                                                      (16, 1024))
    for r, c in shapes:
        a = rng.standard_normal((r, c)).astype(np.float32)
        for name, (fr, fnr, ref) in ROWS.items():
            row(f"{name} {r}x{c} f32", pair(partial(fr, a), partial(fnr, a)), ref)


def commit() -> str:
    """HEAD's short hash, with a mark where the tracked files differ from it (a copied tree whose
    git metadata is older than its files, as on a lent device machine)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=here, check=True).stdout.strip()
        clean = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], capture_output=True, cwd=here).returncode == 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head if clean else f"{head} + changes to tracked files"


def main() -> None:
    quick = "--quick" in sys.argv
    rng = np.random.default_rng(0)
    lines: list[str] = []
    wins = total = 0

    def row(name: str, times: tuple[float, float], ref: str) -> None:
        nonlocal wins, total
        t_v, t_n = times
        total += 1
        wins += t_n >= t_v
        lines.append(f"| {name} | {t_v * 1e6:.1f} | {t_n * 1e6:.1f} ({ref}) | {t_n / t_v:.2f}x |")
        print(lines[-1], file=sys.stderr, flush=True)

    # the rows against BLAS last: OpenBLAS's idle threads keep yielding the cores for a while after
    # a call, which slows whatever runs next (vyre's threads, or numpy's in the next round)
    for blas in (False, True):
        for dt in (np.float32, np.float64):
            for lg in ((16, 20) if quick else (12, 16, 20, 24)):
                x, y = rng.standard_normal(1 << lg).astype(dt), rng.standard_normal(1 << lg).astype(dt)
                for name, (fv, fn, ref) in WHOLE.items():
                    if ("BLAS" in ref) == blas:
                        row(f"{name} {np.dtype(dt).name} 2^{lg}",
                            pair(partial(fv, x, y), partial(fn, x, y), alternate=not blas), ref)
        if not blas:
            row_ops(rng, quick, row)
    for r, c in (((1024, 1024),) if quick else ((2048, 2048), (4096, 4096), (256, 256), (1000, 100), (100, 1000))):
        m = rng.standard_normal((r, c)).astype(np.float32)
        v = rng.standard_normal(c).astype(np.float32)
        row(f"matvec {r}x{c} f32", pair(partial(vo.matvec, m, v, backend="cpu"), partial(np.matmul, m, v),
                                        alternate=False), "m @ v, BLAS")
    print(f"# vyre.ops CPU benchmark\n\n{os.cpu_count()} cores ({platform.processor() or platform.machine()}); "
          f"numpy {np.__version__}; commit {commit()}; date {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| op | vyre (us) | numpy (us) | speed vs numpy |\n|---|---|---|---|")
    print("\n".join(lines))
    print(f"\nvyre at least as fast as numpy in {wins} of {total} rows.")


if __name__ == "__main__":
    main()
