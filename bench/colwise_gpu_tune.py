"""GPU tuning of the column forms (vyre/ops/colwise.py, ``tiled_program``): the tile's row slices,
the accumulators per invocation and the row splits, against PyTorch's column reductions on the same
card. Prints the GPU time (CUPTI, ``kernel_time``) and the host time per call of each setting.

    python bench/colwise_gpu_tune.py [TILES ...]   (device machine; bench/gpu.sh installs what it needs;
                                                    TILES: narrow, fixed, wide64, wide128, wide256)
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

import vyre.ops as vo
from gpu_bench import host_time_per_call, kernel_time
from vyre.ops import _plans, colwise as C

#: the settings tried: the tiles ("narrow": tile_cols; "fixed": 32 columns for every inner
#: extent; "wide64"/"wide128"/"wide256": 64 to 256 columns where the extent allows, which needs
#: tiled_program to accept those widths; the tiles are the script's arguments, "narrow" without),
#: accumulators, target workgroups, least rows per split,
#: most splits (earlier runs also tried 16 row slices and 2048 workgroups: slower everywhere; 4
#: and 8 accumulators, 128 rows a split, 64 and 1024 splits; BENCHMARKS.md)
GRID = ((sys.argv[1:] or ["narrow"]), (8,), (1024,), (64,), (256,))
SHAPES = [((4096, 4096), 0), ((256, 65536), 0), ((65536, 256), 0), ((64, 4096, 64), 1), ((1024, 16384), 0),
          ((64, 262144), 0)]


NARROW = C.tile_cols
TILE_COLS_OF = {"narrow": NARROW, "fixed": lambda inner: 32,
                "wide64": lambda inner: NARROW(inner) if inner < 64 else 64,
                "wide128": lambda inner: NARROW(inner) if inner < 128 else 128,
                "wide256": lambda inner: NARROW(inner) if inner < 256 else 256}


def main() -> None:
    data = {s: torch.randn(*s[0], device="cuda") for s in SHAPES}
    print("| shape, axis | op | torch GPU us | " + " | ".join(["tiles", "unroll", "target", "min rows", "max splits"]) +
          " | vyre GPU us | speed | host us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (shape, axis), a in data.items():
        for op, ref in (("sum", lambda a=a, axis=axis: a.sum(axis)), ("max", lambda a=a, axis=axis: a.amax(axis)),
                        ("argmax", lambda a=a, axis=axis: a.argmax(axis))):
            t_ref = kernel_time(ref) * 1e6
            for rows, unroll, target, min_rows, most in itertools.product(*GRID):
                C.tile_cols = TILE_COLS_OF[rows]
                C.GPU_COL_UNROLL = unroll
                C.GPU_TARGET_WORKGROUPS, C.SPLIT_MIN_ROWS, C.MAX_SPLITS = target, min_rows, most
                C.tiled_program.cache_clear()
                _plans.forget()

                def fn(a=a, axis=axis, op=op):
                    return getattr(vo, op)(a, axis)

                got = fn()
                want = ref()
                ok = (torch.equal(got.long(), want) if op == "argmax"
                      else torch.allclose(got, want, rtol=1e-4, atol=1e-3))
                t = kernel_time(fn) * 1e6
                h = host_time_per_call(fn, n=500) * 1e6
                print(f"| {shape}, {axis} | {op} | {t_ref:.1f} | {rows} | {unroll} | {target} | {min_rows} | {most} "
                      f"| {t:.1f} "
                      f"| {t_ref / t:.2f}x | {h:.1f} |{'' if ok else ' WRONG'}", flush=True)


if __name__ == "__main__":
    main()
