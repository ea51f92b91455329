"""Whole-program execution in the reference interpreter: control flow, memory, sync, errors."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vyre.errors import InterpError, VyreError
from vyre.interp import InterpResult, run
from vyre.ir import (
    F32, F64, I32, U32, AtomicOp, BinOpKind, FunctionDef, Program, assign, atomic, atomic_add, ballot,
    barrier, block, buflen, call, cast, f32, gid, i32, if_, lane, let, lid, load, loop, maximum, output,
    read, read_write, region, register_function, ret, select, shuffle, sqrt, store, subgroup_reduce,
    u32, var, wgid, workgroup,
)
from vyre.ir.expr import BinOp, Var


def _u32(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.uint32)


# --- elementwise, geometry, in-place ---------------------------------------------------------

def test_elementwise_guarded_default_grid_and_in_place() -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = gid()
    prog = Program.wrapped([x, out], 64, [if_(i.lt(buflen(out)), [store(out, i, x[i] * 2.0 + 1.0)])])
    xs = np.linspace(-3, 3, 100, dtype=np.float32)
    o = np.zeros(100, np.float32)
    res = run(prog, {"x": xs, "out": o})
    assert isinstance(res, InterpResult)
    np.testing.assert_array_equal(o, xs * np.float32(2) + np.float32(1))  # written in place
    assert res.buffers["out"].base is o or res.buffers["out"] is o
    assert set(res.buffers) == {"x", "out"}
    assert (res.oob_loads, res.oob_stores) == (0, 0)


def test_missing_output_with_count_is_allocated_zero_filled() -> None:
    out = output("out", 0, U32).with_count(10)
    prog = Program.wrapped([out], 4, [if_(gid().lt(5), [store(out, gid(), gid() + 1)])])
    res = run(prog, {})
    np.testing.assert_array_equal(res.buffers["out"], [1, 2, 3, 4, 5, 0, 0, 0, 0, 0])


def test_2d_grid_ids_and_lanes() -> None:
    w = 16  # global width: grid 2 x 3 of 8 x 4 workgroups
    out, lanes = output("out", 0, U32), output("lanes", 1, U32)
    idx = gid(1) * w + gid(0)
    prog = Program.wrapped([out, lanes], (8, 4, 1), [
        store(out, idx, wgid(1) * 1000 + wgid(0) * 100 + lid(1) * 10 + lid(0)),
        store(lanes, idx, lane()),
    ])
    o, ln = np.zeros(16 * 12, np.uint32), np.zeros(16 * 12, np.uint32)
    run(prog, {"out": o, "lanes": ln}, grid=(2, 3))
    gx, gy = np.meshgrid(np.arange(16), np.arange(12))
    want = (gy // 4) * 1000 + (gx // 8) * 100 + (gy % 4) * 10 + gx % 8
    np.testing.assert_array_equal(o.reshape(12, 16), want)
    np.testing.assert_array_equal(ln.reshape(12, 16), ((gx % 8) + (gy % 4) * 8) % 32)


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 70), elements=st.floats(-1e3, 1e3, width=32)),
       hnp.arrays(np.float32, 70, elements=st.floats(0.5, 1e3, width=32)))
def test_f32_arithmetic_matches_numpy(xs: np.ndarray, ys: np.ndarray) -> None:
    ys = ys[: xs.size].copy()
    x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = gid()
    prog = Program.wrapped([x, y, out], 32, [if_(i.lt(buflen(out)), [
        let("a", x[i]), let("b", y[i]),
        store(out, i, (var("a") * var("b") - var("a") / var("b")) % 7.0 + sqrt(var("b"))),
    ])])
    o = np.zeros_like(xs)
    run(prog, {"x": xs, "y": ys, "out": o})
    with np.errstate(all="ignore"):
        want = np.fmod(xs * ys - xs / ys, np.float32(7)) + np.sqrt(ys)
    np.testing.assert_array_equal(o, want)


# --- out of bounds ---------------------------------------------------------------------------

def test_out_of_bounds_loads_stores_atomics_are_absorbed_and_counted() -> None:
    x, out, cnt = read("x", 0, I32), output("out", 1, I32), read_write("cnt", 2, U32)
    i = gid()
    prog = Program.wrapped([x, out, cnt], 8, [
        store(out, i, x[i] + i32(100)),  # 16 invocations, x has 4, out has 10
        let("old", atomic_add(cnt, i, u32(1))),  # cnt has 3
        store(out, i + 100, i32(7)),  # always out of bounds
    ])
    o = np.full(10, -5, np.int32)
    c = np.zeros(3, np.uint32)
    res = run(prog, {"x": np.array([1, 2, 3, 4], np.int32), "out": o, "cnt": c}, grid=2)
    np.testing.assert_array_equal(o, [101, 102, 103, 104, 100, 100, 100, 100, 100, 100])
    np.testing.assert_array_equal(c, [1, 1, 1])
    assert res.oob_loads == 12  # x[4..15]
    assert res.oob_stores == 6 + 13 + 16  # out[10..15], cnt[3..15], out[100..115]


def test_out_of_bounds_atomic_returns_zero() -> None:
    buf, out = read_write("buf", 0, I32), output("out", 1, I32)
    prog = Program.wrapped([buf, out], 1, [
        let("a", atomic(AtomicOp.EXCHANGE, buf, u32(5), i32(9))),
        store(out, u32(0), var("a") + i32(1)),
    ])
    res = run(prog, {"buf": np.full(2, 42, np.int32), "out": np.zeros(1, np.int32)}, grid=1)
    assert res.buffers["out"][0] == 1 and res.oob_stores == 1


# --- control flow and scoping ----------------------------------------------------------------

def test_early_return_and_return_in_loop() -> None:
    out = output("out", 0, U32)
    i = gid()
    prog = Program.wrapped([out], 8, [
        if_(i.ge(5), [ret()]),
        let("acc", u32(0)),
        loop("k", u32(0), u32(100), [
            if_(var("k").eq(i + 3), [store(out, i, var("acc")), ret()]),
            assign("acc", var("acc") + var("k")),
        ]),
        store(out, i, u32(999)),  # never reached
    ])
    o = np.full(8, 7, np.uint32)
    run(prog, {"out": o})
    np.testing.assert_array_equal(o, [3, 6, 10, 15, 21, 7, 7, 7])  # sum(0 .. i+2)


def test_nested_loops_empty_loops_and_bounds_evaluated_once() -> None:
    out = output("out", 0, U32)
    i = gid()
    prog = Program.wrapped([out], 4, [
        let("acc", u32(0)),
        loop("a", u32(0), i + 1, [
            loop("b", var("a"), u32(4), [assign("acc", var("acc") + var("a") * 10 + var("b"))]),
        ]),
        loop("e", u32(5), u32(2), [assign("acc", u32(12345))]),  # end <= start: no iterations
        let("n", u32(3)),
        loop("c", u32(0), var("n"), [assign("n", var("n") + 1), assign("acc", var("acc") + 1000)]),
        store(out, i, var("acc")),
    ])
    o = np.zeros(4, np.uint32)
    run(prog, {"out": o})
    want = [sum(a * 10 + b for a in range(g + 1) for b in range(a, 4)) + 3000 for g in range(4)]
    np.testing.assert_array_equal(o, want)


def test_shadowing_blocks_regions_and_let_reading_outer() -> None:
    out = output("out", 0, I32)
    prog = Program.wrapped([out], 1, [
        let("x", i32(1)),
        block([let("x", var("x") + i32(10)), store(out, u32(0), var("x")),  # inner x = outer x + 10
               region("gen", [let("x", i32(-4)), store(out, u32(1), var("x"))]),
               store(out, u32(2), var("x"))]),
        store(out, u32(3), var("x")),
        loop("i", u32(0), u32(2), [let("x", cast(I32, var("i"))), assign("x", var("x") * i32(5))]),
        store(out, u32(4), var("x")),
        if_(var("x").eq(i32(1)), [let("x", i32(8)), store(out, u32(5), var("x"))]),
    ])
    o = np.zeros(6, np.int32)
    run(prog, {"out": o}, grid=1)
    np.testing.assert_array_equal(o, [11, -4, 11, 1, 1, 8])


def test_select_and_i32_division_in_program() -> None:
    x, out = read("x", 0, I32), output("out", 1, I32)
    i = gid()
    prog = Program.wrapped([x, out], 8, [if_(i.lt(buflen(out)), [
        let("v", x[i]),
        store(out, i, select(var("v").lt(i32(0)), var("v") / i32(3), var("v") % i32(-3))),
    ])])
    xs = np.array([-7, 7, -2**31, 2**31 - 1, 0, -1, 5, -9], np.int32)
    o = np.zeros(8, np.int32)
    run(prog, {"x": xs, "out": o})
    want = [int(v / 3) if v < 0 else int(np.fmod(v, -3)) for v in xs.tolist()]
    np.testing.assert_array_equal(o, want)


def test_calls_through_function_defs() -> None:
    a_sq = BinOp(BinOpKind.MUL, Var("a"), Var("a"))
    sq = register_function(FunctionDef("test_interp_sq_plus", (("a", F32), ("b", F32)), F32,
                                       BinOp(BinOpKind.ADD, a_sq, Var("b"))))
    twice = register_function(FunctionDef("test_interp_twice_sq", (("a", F32),), F32,
                                          call(sq.op_id, Var("a"), call(sq.op_id, Var("a"), f32(0.0)))))
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = gid()
    prog = Program.wrapped([x, out], 4, [
        let("a", f32(100.0)),  # the caller's "a" must not leak into the function's parameter
        let("v", x[i]),
        store(out, i, call(twice.op_id, var("v")) + var("a")),
    ])
    assert {f.op_id for f in prog.functions} == {sq.op_id, twice.op_id}
    xs = np.array([1, 2, -3, 0.5], np.float32)
    o = np.zeros(4, np.float32)
    run(prog, {"x": xs, "out": o})
    np.testing.assert_array_equal(o, xs * xs + xs * xs + np.float32(100))


# --- atomics ---------------------------------------------------------------------------------

def test_histogram_and_distinct_old_values_under_contention() -> None:
    x, hist, order = read("x", 0, U32), read_write("hist", 1, U32), output("order", 2, U32)
    ctr = read_write("ctr", 3, U32)
    i = gid()
    prog = Program.wrapped([x, hist, order, ctr], 64, [if_(i.lt(buflen(x)), [
        let("h", atomic_add(hist, x[i] % 8, u32(1))),
        let("ticket", atomic_add(ctr, u32(0), u32(1))),
        store(order, i, var("ticket")),
    ])])
    xs = (np.arange(300, dtype=np.uint32) * 7919) % 1000
    h, o, c = np.zeros(8, np.uint32), np.zeros(300, np.uint32), np.zeros(1, np.uint32)
    run(prog, {"x": xs, "hist": h, "order": o, "ctr": c})
    np.testing.assert_array_equal(h, np.bincount(xs % 8, minlength=8))
    assert c[0] == 300
    np.testing.assert_array_equal(np.sort(o), np.arange(300))  # every old value distinct
    np.testing.assert_array_equal(o, np.arange(300))  # the fixed invocation order


def test_atomic_min_max_cas_exchange_and_float_add() -> None:
    x = read("x", 0, I32)
    mm, fl, res = read_write("mm", 1, I32), read_write("fl", 2, F64), read_write("res", 3, U32)
    i = gid()
    prog = Program.wrapped([x, mm, fl, res], 16, [if_(i.lt(buflen(x)), [
        let("a", atomic(AtomicOp.MIN, mm, u32(0), x[i])),
        let("b", atomic(AtomicOp.MAX, mm, u32(1), x[i])),
        let("c", atomic(AtomicOp.XOR, mm, u32(2), x[i])),
        let("d", atomic(AtomicOp.ADD, fl, u32(0), cast(F64, x[i]) * 0.5)),
        # only the first invocation finds 0 and claims the slot
        let("e", atomic(AtomicOp.COMPARE_EXCHANGE, res, u32(0), i + 1, u32(0))),
        let("f", atomic(AtomicOp.EXCHANGE, res, u32(1), i)),
    ])])
    xs = np.array([5, -3, 9, 2**31 - 1, -2**31, 0, 17], np.int32)
    m, f, r = np.array([0, 0, 0], np.int32), np.zeros(1, np.float64), np.zeros(2, np.uint32)
    run(prog, {"x": xs, "mm": m, "fl": f, "res": r})
    assert m.tolist() == [-2**31, 2**31 - 1, int(np.bitwise_xor.reduce(xs))]
    assert f[0] == sum(float(v) * 0.5 for v in xs.tolist())
    assert r.tolist() == [1, 6]


# --- barriers, workgroup memory, subgroups ---------------------------------------------------

def _tree_reduce_program(wg: int) -> Program:
    x, out, sh = read("x", 0, U32), output("out", 1, U32), workgroup("sh", wg, U32)
    steps = wg.bit_length() - 1
    return Program.wrapped([x, out, sh], wg, [
        store(sh, lid(), load(x, gid())),  # past the end of x reads 0
        barrier(),
        loop("k", u32(0), u32(steps), [
            let("stride", u32(wg // 2) >> var("k")),
            if_(lid().lt(var("stride")), [store(sh, lid(), sh[lid()] + sh[lid() + var("stride")])]),
            barrier(),
        ]),
        if_(lid().eq(0), [store(out, wgid(), sh[u32(0)])]),
    ])


def test_workgroup_tree_reduction_with_barriers() -> None:
    xs = (np.arange(200, dtype=np.uint32) * 2654435761) % 100000
    o = np.zeros(4, np.uint32)
    res = run(_tree_reduce_program(64), {"x": xs, "out": o}, grid=4)
    padded = np.concatenate([xs, np.zeros(56, np.uint32)])
    np.testing.assert_array_equal(o, padded.reshape(4, 64).sum(axis=1))
    assert res.oob_loads == 56


def test_workgroup_memory_is_fresh_per_workgroup() -> None:
    out, sh = output("out", 0, U32), workgroup("sh", 2, U32)
    prog = Program.wrapped([out, sh], 32, [
        let("old", atomic_add(sh, u32(0), u32(1))),
        barrier(),
        if_(lid().eq(0), [store(out, wgid(), sh[u32(0)] + sh[u32(1)])]),
    ])
    o = np.zeros(3, np.uint32)
    run(prog, {"out": o}, grid=3)
    np.testing.assert_array_equal(o, [32, 32, 32])


def test_subgroup_ballot_shuffle_reduce() -> None:
    x = read("x", 0, I32)
    ob, osh, osum, omin, omax, oxor = (output(n, k + 1, t) for k, (n, t) in enumerate(
        [("ballot", U32), ("shuf", I32), ("sum", I32), ("min", I32), ("max", I32), ("xor", U32)]))
    i = gid()
    prog = Program.wrapped([x, ob, osh, osum, omin, omax, oxor], 64, [
        let("v", x[i]),
        let("m", ballot((lane() % 3).eq(0).and_(var("v").gt(-1000)))),
        let("s", shuffle(var("v"), lane() ^ 1)),
        let("sum", subgroup_reduce(BinOpKind.ADD, var("v"))),
        let("mn", subgroup_reduce(BinOpKind.MIN, var("v"))),
        let("mx", subgroup_reduce(BinOpKind.MAX, var("v"))),
        let("xo", subgroup_reduce(BinOpKind.BIT_XOR, cast(U32, var("v")))),
        store(ob, i, var("m")), store(osh, i, var("s")), store(osum, i, var("sum")),
        store(omin, i, var("mn")), store(omax, i, var("mx")), store(oxor, i, var("xo")),
    ])
    rng = np.random.default_rng(1)
    xs = rng.integers(-10**6, 10**6, 128).astype(np.int32)
    xs[5] = -5000  # fails the ballot condition in lane 5 of subgroup 0 (but 5 % 3 != 0 anyway)
    xs[3] = -5000  # lane 3: clears its bit
    outs = {n: np.zeros(128, t) for n, t in
            [("ballot", np.uint32), ("shuf", np.int32), ("sum", np.int32), ("min", np.int32),
             ("max", np.int32), ("xor", np.uint32)]}
    run(prog, {"x": xs, **outs}, grid=2)
    groups = xs.reshape(4, 32)
    for g in range(4):
        sl = slice(32 * g, 32 * g + 32)
        mask = sum(1 << k for k in range(32) if k % 3 == 0 and groups[g, k] > -1000)
        assert set(outs["ballot"][sl].tolist()) == {mask}
        np.testing.assert_array_equal(outs["shuf"][sl], groups[g][np.arange(32) ^ 1])
        assert set(outs["sum"][sl].tolist()) == {int(groups[g].astype(np.int64).sum())}
        assert set(outs["min"][sl].tolist()) == {int(groups[g].min())}
        assert set(outs["max"][sl].tolist()) == {int(groups[g].max())}
        assert set(outs["xor"][sl].tolist()) == {int(np.bitwise_xor.reduce(groups[g].view(np.uint32)))}


def test_divergent_barrier_is_an_error() -> None:
    out = output("out", 0, U32)
    prog = Program.wrapped([out], 32, [if_(lid().lt(3), [barrier()]), store(out, gid(), u32(1))])
    with pytest.raises(VyreError, match="Fix:"):  # ValidationError (V033), or InterpError at run time
        run(prog, {"out": np.zeros(32, np.uint32)})


@pytest.mark.parametrize("body", ["barrier", "ballot"])
def test_scheduler_reports_lanes_that_cannot_meet(monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """With validation bypassed, a sync point inside a divergent If is an InterpError, not a hang."""
    import vyre.interp.machine as machine

    monkeypatch.setattr(machine, "_validate", lambda program: None)
    out = output("out", 0, U32)
    sync = barrier() if body == "barrier" else let("m", ballot(lid().lt(3)))
    prog = Program.wrapped([out], 64, [if_(lid().lt(40), [sync]), barrier(), store(out, gid(), u32(1))])
    with pytest.raises(InterpError, match=r"workgroup \(0, 0, 0\).*Fix:"):
        run(prog, {"out": np.zeros(64, np.uint32)})


def test_float_literals_keep_their_bits() -> None:
    out = output("out", 0, F32)
    x = read("x", 1, F32)
    prog = Program.wrapped([out, x], 1, [
        store(out, u32(0), f32(-0.0)),
        store(out, u32(1), x[u32(0)] * -0.0),
        store(out, u32(2), x[u32(0)] + float("nan")),
        store(out, u32(3), x[u32(0)] + 1e-45),  # smallest subnormal
    ])
    o = np.ones(4, np.float32)
    run(prog, {"out": o, "x": np.array([2.0], np.float32)}, grid=1)
    assert np.signbit(o[0]) and o[0] == 0 and np.signbit(o[1]) and np.isnan(o[2])
    assert o[3] == np.float32(2.0)


# --- limits and bad inputs -------------------------------------------------------------------

def test_max_steps_stops_runaway_loops() -> None:
    out = output("out", 0, U32)
    prog = Program.wrapped([out], 1, [
        let("acc", u32(0)),
        loop("k", u32(0), u32(0xFFFFFFFF), [assign("acc", var("acc") + var("k"))]),
        store(out, u32(0), var("acc")),
    ])
    with pytest.raises(InterpError, match=r"max_steps=1000.*Fix: raise max_steps"):
        run(prog, {"out": np.zeros(1, np.uint32)}, max_steps=1000)


def test_steps_count_statements_and_expressions() -> None:
    out = output("out", 0, U32)
    # per invocation: store (1) + gid + (gid * 2) -> index 1, value 3 nodes = 5 steps
    prog = Program.wrapped([out], 4, [store(out, gid(), gid() * 2 + 1)])
    res = run(prog, {"out": np.zeros(4, np.uint32)})
    assert res.steps == 4 * (1 + 1 + 5)


@pytest.mark.parametrize("bad", [
    {"x": np.zeros(4, np.float64), "out": np.zeros(4, np.float32)},  # wrong dtype
    {"out": np.zeros(4, np.float32)},  # missing input
    {"x": [1.0, 2.0], "out": np.zeros(4, np.float32)},  # not an array
    {"x": np.zeros(4, np.float32), "out": np.zeros(4, np.float32), "nope": np.zeros(1)},
])
def test_bad_inputs_raise_interp_error(bad: dict[str, object]) -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    prog = Program.wrapped([x, out], 4, [store(out, gid(), x[gid()])])
    with pytest.raises(InterpError, match="Fix:"):
        run(prog, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("grid", [0, (1, 0), (1, 2, 3, 4), 1.5, "2", True, np.int64(-1)])
def test_bad_grid(grid: object) -> None:
    out = output("out", 0, U32)
    prog = Program.wrapped([out], 4, [store(out, gid(), gid())])
    with pytest.raises(InterpError, match="Fix:"):
        run(prog, {"out": np.zeros(4, np.uint32)}, grid=grid)  # type: ignore[arg-type]


def test_aliased_written_arrays_are_rejected() -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    prog = Program.wrapped([x, out], 4, [store(out, gid(), x[gid()] + 1.0)])
    a = np.zeros(4, np.float32)
    with pytest.raises(InterpError, match="overlapping"):
        run(prog, {"x": a, "out": a})


# --- speed -----------------------------------------------------------------------------------

def test_timing_smoke_4096_elementwise() -> None:
    """Not an assertion on speed: prints the time of a 4096-invocation, ~20-op program."""
    x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = gid()
    prog = Program.wrapped([x, y, out], 64, [if_(i.lt(buflen(out)), [
        let("a", x[i]), let("b", y[i]),
        let("v", var("a") * var("b") + 1.0),
        assign("v", var("v") * var("v") - var("a")),
        assign("v", maximum(var("v"), var("b")) / 2.0),
        assign("v", sqrt(abs(var("v"))) + var("a") * 3.0 - var("b")),
        assign("v", select(var("v").gt(0.0), var("v"), -var("v")) + var("a") * var("b")),
        store(out, i, var("v")),
    ])])
    rng = np.random.default_rng(0)
    xs, ys = rng.random(4096, np.float32), rng.random(4096, np.float32)
    o = np.zeros(4096, np.float32)
    t0 = time.perf_counter()
    res = run(prog, {"x": xs, "y": ys, "out": o})
    dt = time.perf_counter() - t0
    print(f"\ninterp: 4096 invocations, {res.steps} steps in {dt * 1e3:.1f} ms")
    a, b = xs, ys
    v = a * b + np.float32(1)
    v = v * v - a
    v = np.maximum(v, b) / np.float32(2)
    v = np.sqrt(np.abs(v)) + a * np.float32(3) - b
    v = np.where(v > 0, v, -v) + a * b
    np.testing.assert_array_equal(o, v)
