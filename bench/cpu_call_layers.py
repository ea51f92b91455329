"""Where a small CPU op call spends its time, layer by layer (dot and argmax at 2^12): the public
op, its call site (vyre.ops._sites), the plan's run, the compiled entry alone, and numpy's call.
Nanoseconds per call, best of seven blocks.

    taskset -c 0,1 env VYRE_BACKEND=cpu python bench/cpu_call_layers.py
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from typing import Any

import numpy as np

import vyre.ops as vo
from vyre.ops.argreduce import _ARGMAX_SITE
from vyre.ops.reduce import _DOT_SITE


def ns(fn: Callable[[], Any], n: int = 20000) -> float:
    fn()
    return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e9


def layers(name: str, site: Any, public: Callable[[], Any], inputs: list[np.ndarray],
           theirs: Callable[[], Any]) -> None:
    public()
    public()
    site.runs.clear()
    public()
    public()
    (run, _), = site.runs.values()
    cells = dict(zip(run.__code__.co_freevars, (c.cell_contents for c in run.__closure__ or ()), strict=True))
    fn, grid, spare = cells["fn"], cells["grid"], cells["spare"]
    bufs = spare[-1][0] if isinstance(spare[-1], tuple) else spare[-1]
    print(f"{name}: op {ns(public):.0f}  run {ns(lambda: run(inputs)):.0f}  "
          f"entry {ns(lambda: fn(*inputs, *bufs, grid, 1, 1)):.0f}  numpy {ns(theirs):.0f}")


def main() -> None:
    for dt in (np.float32, np.float64):
        _both(np.random.default_rng(0).standard_normal(4096).astype(dt))


def _both(x: np.ndarray) -> None:
    y = x[::-1].copy()
    layers(f"dot {x.dtype.name}", _DOT_SITE, lambda: vo.dot(x, y), [x, y], lambda: np.dot(x, y))
    layers(f"argmax {x.dtype.name}", _ARGMAX_SITE, lambda: vo.argmax(x), [x], lambda: np.argmax(x))


if __name__ == "__main__":
    main()
