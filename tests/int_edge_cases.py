"""i32 edge values through ops whose device lowering once disagreed with the spec.

``abs(INT_MIN)`` is INT_MIN (docs/semantics.md). On an H100, NVVM folded vyre's i32 ``abs`` into
``abs.s32`` and ptxas then treated the result as non-negative, so a signed remainder or a sign
test of it gave the wrong answer (GPU parity, generated programs 144-149:
``bit_not(abs(x) % 6843)`` at ``x = INT_MIN`` gave -6546 on the card, 6544 in the spec).
vyre/codegen/cuda_runtime.py says how the emitter keeps ``abs.s32`` out. Shared by the CPU/PTX
tests (tests/test_int_edges.py) and the GPU bench's parity section.
"""

from __future__ import annotations

import numpy as np

from vyre.ir import (
    F32, I32, U32, Program, abs, cast, f32, gid, i32, max, output, read, select, shr, store, u32,
)

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def edge_inputs(n: int = 64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    edges = [INT_MIN, INT_MIN + 1, INT_MIN + 2, -65536, -6843, -2, -1, 0, 1, 2, 6843, INT_MAX - 1, INT_MAX]
    rest = rng.integers(INT_MIN, INT_MAX, n - len(edges), endpoint=True)
    return np.concatenate([np.array(edges), rest]).astype(np.int32)


def abs_uses() -> Program:
    """``abs(x)`` feeding everything that reads its sign or magnitude."""
    x = read("x", 0, I32)
    outs = [output(f"o{k}", k + 1, t) for k, t in enumerate([I32, I32, I32, I32, I32, F32, U32, I32])]
    a = abs(x[gid()])
    vals = [
        a % i32(6843),                      # signed remainder: takes the dividend's sign
        a / i32(7),                         # truncating division
        select(a < i32(0), i32(1), i32(0)),  # the sign test ptxas folded
        shr(a, i32(1)),                     # arithmetic shift
        max(a, i32(0)),
        cast(F32, a) * f32(1.0),
        cast(U32, a) % u32(1000),
        ~(a % i32(6843)),                   # the generated program's own expression
    ]
    return Program.wrapped([x, *outs], 64, [store(o, gid(), v) for o, v in zip(outs, vals, strict=True)])


def cases() -> list[tuple[str, Program, dict[str, np.ndarray]]]:
    x = edge_inputs()
    prog = abs_uses()
    return [("i32_abs_int_min", prog, with_outputs(prog, x))]


def with_outputs(prog: Program, x: np.ndarray) -> dict[str, np.ndarray]:
    """``x`` and a zeroed array of its length for each output of ``prog``."""
    return {"x": x, **{b.name: np.zeros(len(x), b.element.np_dtype) for b in prog.buffers if b.is_output}}


#: name -> (PTX must contain, PTX must not contain): the i32 abs is a 64-bit abs, never abs.s32
PTX_EXPECT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "i32_abs_int_min": (("abs.s64",), ("abs.s32",)),
}
