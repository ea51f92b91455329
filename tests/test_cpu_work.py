"""The CPU's serial-or-parallel choice by estimated work (loop trip counts), and the OpenMP wait
policy vyre sets before numba's OpenMP layer loads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre
from vyre.driver import dispatch as vdispatch
from vyre.driver.launch_policy import set_launch_policy
from vyre.driver.work import UNKNOWN_TRIPS, work_per_invocation
from vyre.examples import fused_chain, matvec
from vyre.ir import (
    F32, U32, Program, assign, buflen, f32, gid, if_, let, load, loop, output, read, store, u32, var,
)
from vyre.settings import quiet_openmp


def rows_program() -> Program:
    """``out[r] = sum_j x[r * c + j]`` with ``c`` a scalar parameter (a 1-element buffer)."""
    x, out, cols = read("x", 0, F32), output("out", 1, F32), read("cols", 2, U32)
    r, c, acc = var("r"), var("c"), var("acc")
    return Program.wrapped([x, out, cols], 64, [
        let("r", gid()),
        let("c", load(cols, u32(0))),
        if_(r.lt(buflen(out)), [
            let("acc", f32(0.0)),
            loop("j", u32(0), c, [assign("acc", acc + x[r * c + var("j")])]),
            store(out, r, acc),
        ]),
    ])


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 50), cols=st.integers(0, 300))
def test_work_counts_loop_trips_from_lengths_and_scalar_parameters(rows: int, cols: int) -> None:
    arrays = {"x": np.zeros(rows * cols, np.float32), "out": np.zeros(rows, np.float32),
              "cols": np.array([cols], np.uint32)}
    # let r, let c, if [let acc, loop (cols x 1), store]
    assert work_per_invocation(rows_program(), arrays) == 3 + 3 + cols
    m = {"m": np.zeros(rows * max(cols, 1), np.float32), "v": np.zeros(cols, np.float32),
         "out": np.zeros(rows, np.float32)}
    assert work_per_invocation(matvec(), m) == 2 + 3 + cols  # the loop bound is buflen(v)


def test_unknown_bounds_count_a_fixed_number_of_trips() -> None:
    x, out = read("x", 0, U32), output("out", 1, U32)
    p = Program.wrapped([x, out], 64, [
        loop("j", u32(0), load(x, gid()), [store(out, gid(), var("j"))]),  # data-dependent bound
    ])
    assert work_per_invocation(p, {"x": np.zeros(4, np.uint32), "out": np.zeros(4, np.uint32)}) == 1 + UNKNOWN_TRIPS


def entries(monkeypatch: pytest.MonkeyPatch, k: vdispatch.Kernel) -> list[str]:
    used: list[str] = []
    serial, parallel = k._fn, k._fn_parallel
    assert parallel is not None

    def s(*a: Any) -> Any:
        used.append("serial")
        return serial(*a)

    def p(*a: Any) -> Any:
        used.append("parallel")
        return parallel(*a)

    monkeypatch.setattr(k, "_fn", s)
    monkeypatch.setattr(k, "_fn_parallel", p)
    return used


def test_few_heavy_rows_run_parallel_and_many_light_ones_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = set_launch_policy(None)
    try:
        prog = rows_program()
        k = vyre.compile(prog, "cpu")
        used = entries(monkeypatch, k)
        rows, cols = 1024, 512  # 1024 invocations (< 2^15), 515 statements each
        x = np.random.default_rng(0).random(rows * cols).astype(np.float32)
        args = {"x": x, "out": np.zeros(rows, np.float32), "cols": np.array([cols], np.uint32)}
        out = k(args)["out"]
        np.testing.assert_allclose(out, x.reshape(rows, cols).sum(axis=1), rtol=1e-4)
        assert used == ["parallel"]
        la = k.default_launch(rows, 3 + 3 + cols)
        assert la.wg * la.ipt < rows  # split into chunks
        light = {"x": x[:rows * 2], "out": np.zeros(rows, np.float32), "cols": np.array([2], np.uint32)}
        k(light)
        assert used == ["parallel", "serial"]  # 1024 rows of 2: not worth the pool
        chain = vyre.compile(fused_chain(), "cpu")
        used2 = entries(monkeypatch, chain)
        for n in (1000, 1 << 15):
            a = np.ones(n, np.float32)
            chain({"x": a, "y": a, "out": np.zeros(n, np.float32)})
        assert used2 == ["serial", "parallel"]  # elementwise: the invocation threshold, as before
    finally:
        set_launch_policy(previous)


def test_quiet_openmp_sets_passive_unless_set() -> None:
    env: dict[str, str] = {}
    assert quiet_openmp(env) and env == {"OMP_WAIT_POLICY": "passive"}
    mine = {"OMP_WAIT_POLICY": "active"}
    assert not quiet_openmp(mine) and mine == {"OMP_WAIT_POLICY": "active"}
