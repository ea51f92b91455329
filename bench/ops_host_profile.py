"""Where a vyre.ops call on device arrays spends its host time (GPU machine): per op, the host
time per call in a tight loop beside the library's own call, then cProfile's top entries over
many calls. Small inputs, so the launch path is all there is.

    python bench/ops_host_profile.py [--times | NAME ...]   # --times: the per-call times only;
                                                            # NAME: profile only the cases it names
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
from collections.abc import Callable
from typing import Any

import cupy as cp
import torch

import vyre.ops as vo
from gpu_bench import host_time_per_call  # bench/ is the script's folder: on sys.path


def per_call(fn: Callable[[], Any], n: int = 3000) -> float:
    """Microseconds of host time per call in a tight loop (gpu_bench's measure)."""
    return host_time_per_call(fn, n) * 1e6


def profile(fn: Callable[[], Any], n: int = 3000, top: int = 25) -> str:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()


def main() -> None:
    small = cp.random.standard_normal(4096, dtype=cp.float32)
    tx = torch.randn(64, 256, device="cuda")
    cols = cp.random.standard_normal((4096, 16), dtype=cp.float32)
    m, v = cp.random.standard_normal((8, 512), dtype=cp.float32), cp.random.standard_normal(512, dtype=cp.float32)
    cases = {
        "sum (CuPy, 4096)": (lambda: vo.sum(small), lambda: cp.sum(small)),
        "softmax (torch, 4x256)": (lambda: vo.softmax(tx[:4]), lambda: torch.softmax(tx[:4], -1)),
        "matvec (CuPy, 8x512)": (lambda: vo.matvec(m, v), lambda: m @ v),
        "sum (torch, 4096)": (lambda: vo.sum(tx.view(-1)[:4096]), lambda: torch.sum(tx.view(-1)[:4096])),
        "sum(a, 0) (torch, 64x256)": (lambda: vo.sum(tx, 0), lambda: tx.sum(0)),
        "sum(a, 0) (CuPy, 4096x16)": (lambda: vo.sum(cols, 0), lambda: cols.sum(0)),
    }
    for name, (ours, theirs) in cases.items():
        print(f"## {name}: vyre {per_call(ours):.1f} us, library {per_call(theirs):.1f} us per call\n")
    if "--times" in sys.argv:
        return
    for name, (ours, _) in cases.items():
        if len(sys.argv) > 1 and not any(a in name for a in sys.argv[1:]):
            continue
        print(f"## profile: {name}\n")
        print(profile(ours))


if __name__ == "__main__":
    main()
