"""Every vyre.ops program differentiates through vyre.autodiff: reverse mode against float64
central differences (``check_grad``) on the reference interpreter, over Hypothesis-drawn lengths
and shapes. The CPU-form programs are plain loops, selects and pairwise merges; the GPU forms also share
data through subgroup operations and workgroup memory, which reverse mode takes (docs/autodiff.md)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre.autodiff import check_grad, grad
from vyre.errors import AutodiffError
from vyre.ir import F32, F64, Program
from vyre.ops import linalg as L
from vyre.ops import reduce as R
from vyre.ops import rowwise as W


def _vec(seed: int, n: int, dtype: type = np.float64) -> np.ndarray:
    # values apart from each other, so max has no ties within a finite-difference step
    rng = np.random.default_rng(seed)
    return (rng.permutation(n) + rng.uniform(0.1, 0.4, n)).astype(dtype) / max(n, 1)


FULL = [
    ("sum", R.Reduce.SUM, R.Post.NONE), ("mean", R.Reduce.SUM, R.Post.MEAN), ("dot", R.Reduce.DOT, R.Post.NONE),
    ("norm", R.Reduce.SUMSQ, R.Post.SQRT), ("max", R.Reduce.MAX, R.Post.NONE), ("min", R.Reduce.MIN, R.Post.NONE),
]


@pytest.mark.parametrize("name, kind, post", FULL)
@settings(max_examples=6)
@given(n=st.integers(1, 90), blocks=st.integers(1, 2), seed=st.integers(0, 2**16), f32=st.booleans())
def test_whole_array_programs(name: str, kind: R.Reduce, post: R.Post, n: int, blocks: int, seed: int,
                              f32: bool) -> None:
    """One pass of the GPU form over ``blocks`` workgroups (partials), so the split is
    differentiated too. (The CPU form accumulates into a lane array in workgroup memory inside a
    loop, which reverse mode refuses: below.)"""
    t, dt = (F32, np.float32) if f32 else (F64, np.float64)
    prog = R.full_program(kind, t, t if kind.combine is not R.Combine.ADD else R.accumulator_type(kind.combine, t),
                          gpu=True, post=post)
    out_t = prog.buffer("out").element.np_dtype
    if kind.combine is not R.Combine.ADD:
        blocks = 1  # an empty workgroup's partial is -inf/+inf: nothing to difference
    inputs = {"x": _vec(seed, n, dt), "out": np.zeros(blocks, out_t)}
    wrt = ["x"]
    if kind is R.Reduce.DOT:
        inputs["y"] = _vec(seed + 1, n, dt)
        wrt.append("y")
    check_grad(prog, inputs, wrt, backend="interp", grid=blocks)


@settings(max_examples=6)
@given(rows=st.integers(1, 4), cols=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_row_programs(rows: int, cols: int, seed: int) -> None:
    x = _vec(seed, rows * cols) * 3
    z = np.zeros(rows * cols)
    r = np.zeros(rows)
    cases: list[tuple[Program, dict[str, np.ndarray]]] = [
        (W.logsumexp_program(F64, gpu=False, wg=1), {"x": x, "out": r}),
        (W.layer_norm_program(F64, 1e-5, gpu=False, wg=1), {"x": x, "y": z, "mean": r, "rstd": r.copy()}),
        *((W.row_program(kind, F64, gpu=False, wg=1), {"x": x, "out": r}) for kind in W.ROW_KINDS),
    ]
    for prog, inputs in cases:
        check_grad(prog, {k: v.copy() for k, v in inputs.items()}, ["x"], backend="interp", grid=rows)


@settings(max_examples=6)
@given(rows=st.integers(1, 6), cols=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_matvec_program(rows: int, cols: int, seed: int) -> None:
    inputs = {"m": _vec(seed, rows * cols), "v": _vec(seed + 1, cols), "out": np.zeros(rows)}
    # the GPU form (one subgroup per row, eight rows per workgroup): the CPU form's lane array is
    # refused (test_cpu_whole_array_form_is_refused_with_a_fix)
    check_grad(L.matvec_program(F64, gpu=True), inputs, ["m", "v"], backend="interp", grid=-(-rows // 8))


def test_cpu_softmax_is_refused_as_in_place() -> None:
    """The CPU form of softmax stores the exponentials and rescales them in place (docs/ops.md:
    5x faster than exponentials inside the sum); reverse mode refuses in-place updates by name.
    Its GPU forms differentiate (below), and softmax_grad is its gradient on every backend."""
    with pytest.raises(AutodiffError, match="in-place"):
        grad(W.softmax_program(F64, gpu=False, wg=1), ["y"], ["x"])


def test_cpu_whole_array_form_is_refused_with_a_fix() -> None:
    """The CPU form of the whole-array reductions adds into a lane array (docs/ops.md: the loop
    LLVM vectorises); reverse mode refuses workgroup memory written in a loop and says so. The GPU
    forms differentiate (above)."""
    with pytest.raises(AutodiffError, match=r"workgroup buffer 'lanes'.*Fix:"):
        grad(R.full_program(R.Reduce.SUM, F64, F64, gpu=False), ["out"], ["x"])
    with pytest.raises(AutodiffError, match=r"workgroup buffer 'lanes'.*Fix:"):
        grad(L.matvec_program(F64, gpu=False), ["out"], ["m", "v"])


def test_gradient_programs_differentiate_too() -> None:
    """Second order: the hand-written gradient programs are programs like any other."""
    rng = np.random.default_rng(2)
    y = rng.uniform(0.1, 0.3, 12)
    g = rng.standard_normal(12)
    check_grad(W.softmax_grad_program(F64, gpu=False, wg=1), {"y": y, "g": g, "dx": np.zeros(12), "d": np.zeros(3)},
               ["y", "g"], backend="interp", grid=3)


def _gpu_cases() -> list[tuple[str, Program, dict[str, np.ndarray], list[str], int]]:
    x = _vec(3, 700)
    y = _vec(4, 700)
    m = x[:96] * 3
    z96, z3 = np.zeros(96), np.zeros(3)
    return [
        ("sum", R.full_program(R.Reduce.SUM, F64, F64, gpu=True), {"x": x, "out": np.zeros(2)}, ["x"], 2),
        ("dot", R.full_program(R.Reduce.DOT, F64, F64, gpu=True), {"x": x, "y": y, "out": np.zeros(1)},
         ["x", "y"], 1),
        ("norm", R.full_program(R.Reduce.SUMSQ, F64, F64, gpu=True, post=R.Post.SQRT),
         {"x": x, "out": np.zeros(1)}, ["x"], 1),
        ("max", R.full_program(R.Reduce.MAX, F64, F64, gpu=True), {"x": x, "out": np.zeros(1)}, ["x"], 1),
        ("softmax", W.softmax_program(F64, gpu=True, wg=32, resident=1), {"x": m, "y": z96, "lse": z3}, ["x"], 3),
        ("logsumexp", W.logsumexp_program(F64, gpu=True, wg=32, resident=1), {"x": m, "out": z3}, ["x"], 3),
        ("layer_norm", W.layer_norm_program(F64, 1e-5, gpu=True, wg=32, resident=1),
         {"x": m, "y": z96, "mean": z3, "rstd": z3}, ["x"], 3),
        *((f"row_{kind}", W.row_program(kind, F64, gpu=True, wg=32, resident=1), {"x": m, "out": z3}, ["x"], 3)
          for kind in W.ROW_KINDS),
        ("matvec", L.matvec_program(F64, gpu=True), {"m": x[:60], "v": y[:20], "out": z3}, ["m", "v"], 1),
    ]


@pytest.mark.parametrize("case", range(len(_gpu_cases())))
def test_gpu_forms(case: int) -> None:
    """The GPU-form programs (subgroup reduces, workgroup memory, barriers) through reverse mode."""
    _, prog, inputs, wrt, grid = _gpu_cases()[case]
    check_grad(prog, {k: v.copy() for k, v in inputs.items()}, wrt, backend="interp", grid=grid)


def test_looping_gpu_row_form() -> None:
    """A GPU row form that loops (rows longer than 16 elements per invocation)."""
    m = _vec(5, 2 * 700) * 3
    check_grad(W.softmax_program(F64, gpu=True, wg=32, resident=0),
               {"x": m, "y": np.zeros(1400), "lse": np.zeros(2)}, ["x"], backend="interp", grid=2)
