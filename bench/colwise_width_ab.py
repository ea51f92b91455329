"""CPU column reductions (``max``/``min``/``argmax``/``sum`` along axis 0) with their blocks forced
to each width given, alternating in one process (a shared machine's load hits every width), against
numpy. How vyre.ops.colwise.COL_BLOCKS was chosen:

    python bench/colwise_width_ab.py [widths, default 64,128,256] [ops, default max,argmax]

Every width is checked against numpy before it is timed. Timings: the best of five back-to-back
loops per round, the best of three rounds."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import vyre.ops as vo
from vyre.ops import _plans, colwise

SHAPES = [(32, 4096), (128, 1024), (512, 512), (2048, 2048), (256, 4096), (4096, 256), (1000, 100), (64, 64),
          (16, 100000), (100000, 16), (64, 1024), (16, 1024)]


def best(fn: Callable[[], Any], reps: int) -> float:
    fn()
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        ts.append((time.perf_counter() - t) / reps)
    return min(ts) * 1e6


def force(op: str, width: int) -> None:
    """Every later call of ``op`` takes blocks of ``width`` columns (plans and programs rebuilt)."""
    if op in ("sum", "mean", "norm"):
        colwise.COL_BLOCK_SUM = width
    else:
        colwise.COL_BLOCKS = (width,)
    colwise.col_program.cache_clear()
    _plans.forget()


def main() -> None:
    widths = [int(w) for w in (sys.argv[1] if len(sys.argv) > 1 else "64,128,256").split(",")]
    ops = (sys.argv[2] if len(sys.argv) > 2 else "max,argmax").split(",")
    rng = np.random.default_rng(0)
    print("| op | shape | " + " | ".join(f"{w} columns (us)" for w in widths) + " | numpy (us) |")
    print("|---|---|" + "---|" * (len(widths) + 1))
    for shape in SHAPES:
        a = rng.random(shape).astype(np.float32)
        reps = max(5, int(3e5 / a.size))
        for op in ops:
            times: dict[int, list[float]] = {w: [] for w in widths}
            ref: list[float] = []
            for _ in range(3):
                for w in widths:
                    force(op, w)

                    def call(op: str = op, a: np.ndarray = a) -> Any:
                        return getattr(vo, op)(a, 0)

                    np.testing.assert_allclose(call(), getattr(np, op)(a, 0), rtol=1e-5)
                    times[w].append(best(call, reps))
                ref.append(best(lambda op=op, a=a: getattr(np, op)(a, 0), reps))
            n = min(ref)
            cells = " | ".join(f"{min(v):.1f} ({n / min(v):.2f}x)" for v in times.values())
            print(f"| {op} | {shape[0]}x{shape[1]} | {cells} | {n:.1f} |", flush=True)


if __name__ == "__main__":
    main()
