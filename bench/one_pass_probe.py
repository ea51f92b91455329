"""Probe (device machine): small whole-array GPU reductions as one pass of one workgroup
(``reduce.GPU_ONE_PASS``) against two passes. Per length and op: host time per call in a tight
loop, the latency of a call that waits for its answer (``float(...)``: host + GPU), and GPU time
(CUPTI), for each threshold tried, beside CuPy's.

    python bench/one_pass_probe.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy as cp

import vyre.ops as vo
from gpu_bench import host_time_per_call, kernel_time
from vyre.ops import _plans, argreduce as A, reduce as R

THRESHOLDS = (0, 1 << 12, 1 << 13, 1 << 14, 1 << 16)


def latency(fn, n: int = 2000) -> float:
    """Seconds per call that waits for its answer on the host (a scalar read back)."""
    for _ in range(50):
        float(fn())
    best = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            float(fn())
        best.append((time.perf_counter() - t) / n)
    return min(best)


def main() -> None:
    print("| n | op | threshold | passes | host us/call | waited us/call | GPU us | CuPy host | CuPy waited "
          "| CuPy GPU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in (1 << 8, 1 << 10, 1 << 12, 1 << 13, 1 << 14, 1 << 16):
        x = cp.random.standard_normal(n, dtype=cp.float32)
        for op, ref in (("sum", cp.sum), ("argmax", cp.argmax)):
            ref_fn = lambda x=x, ref=ref: ref(x)  # noqa: E731
            theirs = (host_time_per_call(ref_fn, 3000) * 1e6, latency(ref_fn) * 1e6, kernel_time(ref_fn) * 1e6)
            for th in THRESHOLDS:
                R.GPU_ONE_PASS = th
                A._argmax_passes.cache_clear()
                R._passes.cache_clear()
                _plans.forget()
                fn = lambda x=x, op=op: getattr(vo, op)(x)  # noqa: E731
                want = float(ref_fn())
                got = float(fn())
                ok = got == want if op == "argmax" else abs(got - want) <= 1e-4 * max(1.0, abs(want))
                passes = 1 if n <= th else 2
                print(f"| {n} | {op} | {th} | {passes} | {host_time_per_call(fn, 3000) * 1e6:.1f} | "
                      f"{latency(fn) * 1e6:.1f} | {kernel_time(fn) * 1e6:.1f} | {theirs[0]:.1f} | {theirs[1]:.1f} | "
                      f"{theirs[2]:.1f} |{'' if ok else ' WRONG'}", flush=True)


if __name__ == "__main__":
    main()
