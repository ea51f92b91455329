"""Inputs for the built-in examples, shared by backend tests and benchmarks."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from vyre.examples import EXAMPLES
from vyre.ir import Program


def example_inputs(name: str, rng: np.random.Generator, small: bool) -> tuple[dict[str, np.ndarray], object]:
    n = 100 if small else 5000
    f32 = np.float32
    match name:
        case "fused_chain":
            return {"x": rng.standard_normal(n).astype(f32), "y": rng.standard_normal(n).astype(f32)
                    , "out": np.zeros(n, f32)}, None
        case "saxpy":
            return {"a": np.array([1.5], f32), "x": rng.standard_normal(n).astype(f32),
                    "y": rng.standard_normal(n).astype(f32), "out": np.zeros(n, f32)}, None
        case "matvec":
            r, c = (7, 5) if small else (60, 40)
            return {"m": rng.standard_normal(r * c).astype(f32), "v": rng.standard_normal(c).astype(f32),
                    "out": np.zeros(r, f32)}, None
        case "block_sum":
            # small integers keep the float sum exact in any order
            return {"x": rng.integers(-8, 8, 512 if small else 4096).astype(f32)}, (2 if small else 16)
        case "subgroup_sum":
            return {"x": rng.integers(-8, 8, 128 if small else 1024).astype(f32)}, (2 if small else 16)
        case "histogram":
            return {"keys": rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32),
                    "counts": np.zeros(13, np.uint32)}, -(-n // 128)
        case "workgroup_ids":
            return {"out": np.zeros(n, np.uint32)}, None
    raise KeyError(name)


def example_cases(small: bool, seed: int = 0) -> Iterator[tuple[str, Program, dict[str, np.ndarray], object]]:
    rng = np.random.default_rng(seed)
    for name, build in EXAMPLES.items():
        arrays, grid = example_inputs(name, rng, small)
        yield name, build(), arrays, grid
