"""GPU: the fixed workgroup count of the whole-array reductions' ``deterministic=True`` passes
(vyre.ops._runtime.gpu_workgroups_cap), against the default (one wave of the device's resident
workgroups) and CuPy, on one card. A fixed count that is not a multiple of what the GPU holds at
once leaves some SMs a workgroup more than others; more workgroups shrink that imbalance.

    python bench/deterministic_cap.py            (device machine; bench/gpu.sh installs what it needs)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy as cp

import vyre.ops as vo
from gpu_bench import cuda_time, kernel_time
from vyre.ops import _plans, argreduce as A, reduce as R

CAPS = (1024, 2048, 4096, 8192, 16384)


def main() -> None:
    x = cp.random.standard_normal(1 << 26, dtype=cp.float32)
    y = cp.random.standard_normal(1 << 26, dtype=cp.float32)
    refs = {"sum": lambda: cp.sum(x), "dot": lambda: cp.dot(x, y), "max": lambda: cp.max(x),
            "argmax": lambda: cp.argmax(x)}
    ops = {"sum": lambda d: vo.sum(x, deterministic=d), "dot": lambda d: vo.dot(x, y, deterministic=d),
           "max": lambda d: vo.max(x, deterministic=d), "argmax": lambda d: vo.argmax(x, deterministic=d)}
    print("| op (2^26 f32) | cupy GPU us | default GPU us | " + " | ".join(f"cap {c}" for c in CAPS) + " |")
    print("|---|---|---|" + "---|" * len(CAPS))
    for name, op in ops.items():
        t_ref = kernel_time(refs[name]) * 1e6
        t_def = kernel_time(lambda op=op: op(False)) * 1e6
        cells = []
        for cap in CAPS:
            R.gpu_workgroups_cap = lambda cap=cap: cap  # the name reduce.py calls
            R._passes.cache_clear()
            getattr(A._argmax_passes, "cache_clear", lambda: None)()
            _plans.forget()
            first = op(True)
            again = op(True)
            same = bool(cp.all(cp.asarray(first) == cp.asarray(again)))
            t = kernel_time(lambda op=op: op(True)) * 1e6
            e2e = cuda_time(lambda op=op: op(True)) * 1e6
            cells.append(f"{t:.1f} ({e2e:.1f}){'' if same else ' NOT SAME'}")
        print(f"| {name} | {t_ref:.1f} | {t_def:.1f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
