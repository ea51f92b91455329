"""CPU benchmark of vyre.ops reductions along axes against numpy's (column sums and their kin: the
reduced axes before a run of kept ones, vyre/ops/colwise.py; one case through a transposed copy).
Prints a markdown table; every number is measured in this run, vyre and numpy alternately.

    python bench/axes_bench.py
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import vyre.ops as vo


def per_call(f: Callable[[], Any]) -> float:
    f()
    f()
    once = min(timeit.repeat(f, number=1, repeat=3))
    n = max(3, int(0.05 / max(1e-7, once)))
    return min(timeit.repeat(f, number=n, repeat=5)) / n * 1e6


def main() -> None:
    rng = np.random.default_rng(0)
    print("| op | vyre (us) | numpy (us) | speed vs numpy |\n|---|---|---|---|")
    # backend="cpu" named: on a machine with a GPU the default backend is CUDA (host copies each call)
    cases: tuple[tuple[str, Callable[..., Any], Callable[..., Any]], ...] = (
        ("sum(a, 0)", lambda a: vo.sum(a, 0, backend="cpu"), lambda a: a.sum(0)),
        ("max(a, 0)", lambda a: vo.max(a, 0, backend="cpu"), lambda a: a.max(0)),
        ("argmax(a, 0)", lambda a: vo.argmax(a, 0, backend="cpu"), lambda a: a.argmax(0)),
        ("mean(a, 0)", lambda a: vo.mean(a, 0, backend="cpu"), lambda a: a.mean(0)),
        ("argmax(a, 1)", lambda a: vo.argmax(a, 1, backend="cpu"), lambda a: a.argmax(1)),
        ("sum(a, 1)", lambda a: vo.sum(a, 1, backend="cpu"), lambda a: a.sum(1)),
    )
    for shape in ((2048, 2048), (4096, 256), (256, 4096), (64, 64), (100000, 16), (16, 100000)):
        a = rng.standard_normal(shape).astype(np.float32)
        for name, fv, fn in cases:
            tv = min(per_call(partial(fv, a)) for _ in range(2))
            tn = min(per_call(partial(fn, a)) for _ in range(2))
            print(f"| {name} {shape[0]}x{shape[1]} f32 | {tv:.1f} | {tn:.1f} | {tn / tv:.2f}x |", flush=True)
    b = rng.standard_normal((64, 64, 64)).astype(np.float32)
    for name, fv, fn in (("sum(b, (0, 2)), a transposed copy", lambda: vo.sum(b, (0, 2), backend="cpu"),
                          lambda: b.sum((0, 2))),
                         ("sum(b, 1)", lambda: vo.sum(b, 1, backend="cpu"), lambda: b.sum(1)),
                         ("argmax(b, 1)", lambda: vo.argmax(b, 1, backend="cpu"), lambda: b.argmax(1))):
        tv, tn = per_call(fv), per_call(fn)
        print(f"| {name} 64x64x64 f32 | {tv:.1f} | {tn:.1f} | {tn / tv:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
