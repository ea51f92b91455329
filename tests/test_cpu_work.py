"""The CPU's serial-or-parallel choice by estimated work (loop trip counts), and the OpenMP wait
policy vyre sets before numba's OpenMP layer loads."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre
from vyre.driver import dispatch as vdispatch
from vyre.driver.launch_policy import set_launch_policy
from vyre.driver.work import TRANSCENDENTAL_STATEMENTS, UNKNOWN_TRIPS, work_model, work_per_invocation
from vyre.examples import fused_chain, matvec
from vyre.ir import (
    F32, U32, Program, assign, buflen, f32, gid, if_, let, load, loop, output, read, store, u32, var, workgroup,
)
from vyre.settings import OPENMP_SPINS, quiet_openmp


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


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 5000), block=st.integers(1, 700))
def test_a_branch_counts_the_arm_its_condition_takes_and_ids_count_as_zero(n: int, block: int) -> None:
    """A condition the model can evaluate picks its arm (a row program's ``cols >= 128``); a span
    that starts at the invocation's id counts the first invocation's share (ids as 0), clipped to
    the array as the program clips it (``bounded_span``)."""
    from vyre.ir import minimum, wgid

    x, out = read("x", 0, F32), output("out", 1, F32)
    lo, ln = var("lo"), var("len")
    p = Program.wrapped([x, out], 1, [
        let("lo", minimum(wgid() * u32(block), buflen(x))),
        let("len", minimum(u32(block), buflen(x) - lo)),
        if_(buflen(x).ge(u32(128)), [loop("j", lo, lo + ln, [store(out, u32(0), x[var("j")])])],
            [store(out, u32(0), f32(1.0))]),
    ])
    got = work_per_invocation(p, {"x": np.zeros(n, np.float32), "out": np.zeros(1, np.float32)})
    # let lo, let len, if; then the arm taken: a loop of the first block's min(block, n) trips
    assert got == 3 + (1 + min(block, n) if n >= 128 else 1)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 300), calls=st.integers(0, 3))
def test_transcendental_calls_count_as_many_statements(n: int, calls: int) -> None:
    """A libm call (exp, log, sin, pow...) counts TRANSCENDENTAL_STATEMENTS beside its statement,
    per call and loop trip; arithmetic and sqrt count nothing extra."""
    from vyre.ir import BinOpKind, UnOpKind, binop, unop

    x, out = read("x", 0, F32), output("out", 1, F32)
    v: Any = load(x, var("i"))
    for k in range(calls):
        if k % 2 == 0:
            v = unop((UnOpKind.EXP, UnOpKind.LOG, UnOpKind.SQRT)[k % 3], v)
        else:
            v = binop(BinOpKind.POW, v, f32(2.0))
    libm = sum(1 for k in range(calls) if k % 2 == 1 or k % 3 != 2)  # pow, exp, log; not sqrt
    p = Program.wrapped([x, out], 1, [loop("i", u32(0), buflen(x), [store(out, var("i"), v * 2.0)])])
    got = work_per_invocation(p, {"x": np.zeros(n, np.float32), "out": np.zeros(n, np.float32)})
    assert got == 1 + n * (1 + TRANSCENDENTAL_STATEMENTS * libm)


def test_a_row_programs_estimate_follows_its_row_length() -> None:
    """vyre.ops's CPU row sum costed per row: the short-row arm below LANES_MIN_COLS columns, the
    lane arm from there, each growing with the row (a 64-column row was once costed as 13079
    statements, and small row ops ran on the thread pool)."""
    from vyre.ops._rows import LANES_MIN_COLS as L
    from vyre.ops.rowwise import row_program

    prog = row_program("sum", F32, gpu=False, wg=1, resident=0, lanes=True)

    def per_row(rows: int, cols: int) -> float:
        return work_per_invocation(prog, {"x": np.zeros(rows * cols, np.float32), "out": np.zeros(rows, np.float32)})

    assert cols_ok(per_row, [16, L // 2, L - 1]) and cols_ok(per_row, [L, 1024, 8192])
    assert per_row(64, L // 2) < 400 < per_row(4, L)  # the lane arm's set-up and merge cost more
    assert per_row(64, L // 2) == per_row(1, L // 2)  # every row the same: the first row's estimate


def cols_ok(per_row: Any, cols: list[int]) -> bool:
    """The estimate grows with the row and counts at least one statement per element."""
    costs = [per_row(8, c) for c in cols]
    growing = all(a < b for a, b in itertools.pairwise(costs))
    return growing and all(w >= c for w, c in zip(costs, cols, strict=True))


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 40), width=st.integers(1, 300), chain=st.integers(0, 20))
def test_a_loop_variable_counts_as_its_first_value_in_its_body(rows: int, width: int, chain: int) -> None:
    """A span clipped at an outer loop's variable (a column block inside a loop over rows) counts
    the first iteration's span, as ids count as 0, however many locals lie between (the column
    sums were once costed 16x their work: ``UNKNOWN_TRIPS`` per row, and small ones ran on the
    thread pool)."""
    from vyre.ir import minimum

    x, out = read("x", 0, F32), output("out", 1, F32)
    r = var("r")
    lets = [let("lo0", minimum(r * u32(width), buflen(x)))]
    lets += [let(f"lo{i + 1}", var(f"lo{i}") + u32(0)) for i in range(chain)]  # a chain of locals
    lo = var(f"lo{chain}")
    p = Program.wrapped([x, out], 1, [
        loop("r", u32(0), buflen(x) / u32(width), [
            *lets,
            let("len", minimum(u32(width), buflen(x) - lo)),
            loop("k", u32(0), var("len"), [store(out, u32(0), load(x, lo + var("k")))]),
        ]),
    ])
    got = work_per_invocation(p, {"x": np.zeros(rows * width, np.float32), "out": np.zeros(1, np.float32)})
    assert got == 1 + rows * (len(lets) + 2 + width)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 400), depth=st.integers(1, 12))
def test_a_triangular_loop_counts_its_mean_iteration_and_nests_multiply(n: int, depth: int) -> None:
    """The mean of a loop's first and last iterations stands for each: exact for ``for j < i``
    inside ``for i < n``; and ``depth`` nested loops, each evaluated at both ends, count right."""
    x, out = read("x", 0, F32), output("out", 1, F32)
    tri = Program.wrapped([x, out], 1, [
        loop("i", u32(0), buflen(x), [loop("j", u32(0), var("i"), [store(out, u32(0), load(x, var("j")))])]),
    ])
    got = work_per_invocation(tri, {"x": np.zeros(n, np.float32), "out": np.zeros(1, np.float32)})
    assert got == 1 + sum(1 + i for i in range(n))
    body: list[Any] = [store(out, u32(0), f32(1.0))]
    for d in range(depth):
        body = [loop(f"k{d}", u32(0), u32(2), body)]
    nested = work_per_invocation(Program.wrapped([x, out], 1, body), {"x": np.zeros(1, np.float32),
                                                                       "out": np.zeros(1, np.float32)})
    assert nested == sum(2**d for d in range(depth + 1))


def test_unknown_bounds_count_a_fixed_number_of_trips() -> None:
    x, out = read("x", 0, U32), output("out", 1, U32)
    p = Program.wrapped([x, out], 64, [
        loop("j", u32(0), load(x, gid()), [store(out, gid(), var("j"))]),  # data-dependent bound
    ])
    assert work_per_invocation(p, {"x": np.zeros(4, np.uint32), "out": np.zeros(4, np.uint32)}) == 1 + UNKNOWN_TRIPS


def test_a_workgroup_buffer_counts_its_declared_length_and_lengths_alone_are_memoised() -> None:
    x, out, tile = read("x", 0, F32), output("out", 1, F32), workgroup("tile", 96, F32)
    p = Program.wrapped([x, out, tile], 1, [
        loop("k", u32(0), buflen(tile), [store(tile, var("k"), load(x, var("k")))]),
        store(out, gid(), tile[u32(0)]),
    ])
    arrays = {"x": np.zeros(8, np.float32), "out": np.zeros(1, np.float32)}
    assert work_per_invocation(p, arrays) == 2 + 96  # the loop runs over the tile's 96 slots
    assert not work_model(p).reads_elements  # so the CPU backend works it out once per lengths
    assert work_model(rows_program()).reads_elements  # a scalar parameter bounds its loop


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


@pytest.mark.parametrize(("requested", "tried"), [
    ("default", ["omp", "workqueue"]), ("", ["omp", "workqueue"]), ("OMP", ["omp", "workqueue"]),
    ("workqueue", ["workqueue"]), ("tbb", ["tbb", "workqueue"]), ("safe", ["tbb", "workqueue"]),
    ("threadsafe", ["tbb", "omp", "workqueue"]), ("forksafe", ["tbb", "workqueue"]),
])
def test_machine_code_takes_the_thread_pool_numba_would(requested: str, tried: list[str]) -> None:
    from vyre.driver.native_cpu import pool_layers

    assert pool_layers(requested) == tried


def test_quiet_openmp_sets_passive_with_a_short_spin_unless_set() -> None:
    env: dict[str, str] = {}
    assert quiet_openmp(env) and env == {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": str(OPENMP_SPINS)}
    mine = {"OMP_WAIT_POLICY": "active"}
    assert not quiet_openmp(mine) and mine == {"OMP_WAIT_POLICY": "active"}
    spins = {"GOMP_SPINCOUNT": "0"}
    assert quiet_openmp(spins) and spins == {"GOMP_SPINCOUNT": "0", "OMP_WAIT_POLICY": "passive"}


def test_the_tuner_measures_few_heavy_invocations_and_leaves_light_ones_to_the_default(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from vyre.tuning import autotune
    from vyre.tuning.autotune import CPU_SERIAL, DecisionSource

    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VYRE_AUTOTUNER", "on")
    monkeypatch.setenv("VYRE_TUNE_BUDGET", "inf")
    autotune.reset()
    previous = set_launch_policy(autotune.launch_for)  # what vyre.tuning.install() registers
    try:
        prog = rows_program()
        rows, cols = 1000, 512  # 1000 invocations (< 2^15), each 518 statements: worth measuring
        x = np.random.default_rng(1).random(rows * cols).astype(np.float32)
        out = vyre.dispatch(prog, {"x": x, "out": np.zeros(rows, np.float32), "cols": np.array([cols], np.uint32)},
                            backend="cpu")["out"]
        np.testing.assert_allclose(out, x.reshape(rows, cols).sum(axis=1), rtol=1e-4)
        (o,) = autotune.recent_outcomes()
        assert o.source is DecisionSource.SWEEP
        assert [c.wg * c.ipt for c in o.candidates] == [64, 256, CPU_SERIAL.wg * CPU_SERIAL.ipt]
        # a light problem of the same size is not measured; the kernel's own default runs it
        light = fused_chain()
        a = np.ones(rows, np.float32)
        vyre.dispatch(light, {"x": a, "y": a, "out": np.zeros(rows, np.float32)}, backend="cpu")
        assert autotune.recent_outcomes()[-1].source is DecisionSource.DEFAULT
        k = vdispatch._kernels[(light.fingerprint(), "cpu", light.workgroup_size)]
        assert k.launch is None
    finally:
        set_launch_policy(previous)
        autotune.reset()


def test_with_the_tuner_off_few_heavy_rows_still_run_parallel(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from vyre.tuning import autotune

    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VYRE_AUTOTUNER", "off")
    autotune.reset()
    autotune_installed = set_launch_policy(autotune.launch_for)
    try:
        prog = rows_program()
        k = vyre.compile(prog, "cpu")
        used = entries(monkeypatch, k)
        rows, cols = 1000, 512  # 1000 rows: a single chunk of 1024 would have been serial
        x = np.ones(rows * cols, np.float32)
        # what vyre.dispatch does: the call asks the launch policy (here the tuner, mode off)
        k({"x": x, "out": np.zeros(rows, np.float32), "cols": np.array([cols], np.uint32)}, tune=True)
        assert k.launch is None and used == ["parallel"]
    finally:
        set_launch_policy(autotune_installed)
        autotune.reset()


def test_rows_of_exponentials_take_the_thread_pool_from_less_work() -> None:
    """A row softmax of 16x1024 (16K exponentials, about 30 us serial) runs on the pool; 4x64 stays
    serial. (The tuner still counts an exp as one statement: test_autotune's small fused chain.)"""
    import vyre.ops as vo
    from vyre.ops import _plans

    for rows, cols, parallel in ((16, 1024, True), (4, 64, False)):
        x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
        _plans.forget()
        vo.softmax(x, backend="cpu")
        (plan,) = _plans._plans.values()
        assert isinstance(plan, _plans.Plan)
        assert [call.parallel for *_, call in plan.steps] == [parallel]
