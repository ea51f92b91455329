"""Probe (device machine): why the GPU column sum of wide and short matrices (256x65536) runs at
0.6-0.75x PyTorch's GPU time while ``max`` of the same shape keeps up. Times ``sum(a, 0)`` as
shipped (f64 accumulators for f32) beside the same tiled program with f32 accumulators, and
``max``, per shape, in GPU time (CUPTI). A diagnosis only: f32 accumulation is not what ships.

    python bench/colwise_acc_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

import vyre.ops as vo
from gpu_bench import kernel_time
from vyre.ops import _plans, colwise as C

SHAPES = [(256, 65536), (64, 262144), (1024, 16384), (4096, 4096), (65536, 256)]


def main() -> None:
    shipped = C.accumulator_type
    print("| shape | torch sum | vyre sum (f64 acc) | vyre sum (f32 acc) | torch amax | vyre max |")
    print("|---|---|---|---|---|---|")
    for shape in SHAPES:
        a = torch.randn(*shape, device="cuda")
        row = [kernel_time(lambda a=a: a.sum(0)) * 1e6]
        for acc in (shipped, lambda comb, t, **kw: t):
            C.accumulator_type = acc
            C.tiled_program.cache_clear()
            _plans.forget()
            got = vo.sum(a, 0)
            assert torch.allclose(got, a.double().sum(0).float(), rtol=1e-4, atol=1e-3)
            row.append(kernel_time(lambda a=a: vo.sum(a, 0)) * 1e6)
        C.accumulator_type = shipped
        C.tiled_program.cache_clear()
        _plans.forget()
        row.append(kernel_time(lambda a=a: a.amax(0)) * 1e6)
        row.append(kernel_time(lambda a=a: vo.max(a, 0)) * 1e6)
        print(f"| {shape[0]}x{shape[1]} | " + " | ".join(f"{t:.1f}" for t in row) + " |", flush=True)


if __name__ == "__main__":
    main()
