"""The warp-aggregated atomic add's cases are right on the CPU and the interpreter, so the GPU bench
(which runs them on a real warp) compares against a correct oracle; the PTX checks live in
tests/test_codegen_ptx.py (tests/warp_add_cases.py: PTX_EXPECT)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.warp_add_cases import gpu_cases
from vyre.driver.dispatch import compile as vcompile

CASES = gpu_cases(n=3000)


@pytest.mark.parametrize("backend", ["cpu", "interp"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_scatter_sums_are_exact(case: tuple, backend: str) -> None:
    _, prog, arrays, exact = case
    grid = (-(-len(arrays["x"]) // prog.workgroup_size[0]),)
    got = vcompile(prog, backend)({"x": arrays["x"]}, grid=grid)["out"]
    assert got.dtype == prog.buffer("out").element.np_dtype
    np.testing.assert_array_equal(got, exact.astype(got.dtype))
