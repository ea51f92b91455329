"""Flat CPU kernels whose atomics are reductions run in parallel on private copies
(vyre/codegen/cpu_private.py). Results are checked exactly: integer operations are exact, and float
sums of small integers are exact in any order. Sizes are at least PARALLEL_MIN_INVOCATIONS, or the
threshold is lowered, so the parallel entry really runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.parity import differences
from vyre.codegen.cpu import emit_cpu
from vyre.codegen.cpu_private import PRIVATE_LIMIT, private_atomics
from vyre.codegen.flat import is_tunable
from vyre.driver import dispatch as dispatch_mod
from vyre.driver.dispatch import PARALLEL_MIN_INVOCATIONS, Launch
from vyre.driver.dispatch import compile as vcompile
from vyre.ir import (
    F32, F64, I32, U32, AtomicOp, DataType, Program, atomic, atomic_add, buflen, cast, gid, i32, if_, let, loop,
    output, read, ret, store, var,
)

N = 4 * PARALLEL_MIN_INVOCATIONS


def reduce_into(op: AtomicOp, t: DataType, slots: int, count: int | None = None) -> Program:
    """``acc[i % slots] op= x[i]`` for every ``i < len(x)``, the old value discarded."""
    x, acc = read("x", 0, t), output("acc", 1, t).with_count(count or slots)
    i = var("i")
    return Program.wrapped([x, acc], 256, [
        let("i", gid()),
        if_(i.lt(buflen(x)), [let("unused", atomic(op, acc, i % slots, x[i]))]),
    ])


def oracle(op: AtomicOp, x: np.ndarray, slots: int, acc0: np.ndarray) -> np.ndarray:
    out = acc0.copy()
    for s in range(slots):
        part = x[s::slots]
        if op is AtomicOp.ADD:
            if x.dtype.kind == "f":
                out[s] = (out[s].astype(np.float64) + part.astype(np.float64).sum()).astype(x.dtype)
            else:  # wrapping 32-bit sum, read back in the element type
                total = (int(out[s]) + int(part.astype(np.int64).sum())) % (1 << 32)
                out[s] = np.array(total, np.uint32).view(x.dtype)
        else:
            fn = {AtomicOp.MIN: np.minimum, AtomicOp.MAX: np.maximum, AtomicOp.AND: np.bitwise_and,
                  AtomicOp.OR: np.bitwise_or, AtomicOp.XOR: np.bitwise_xor}[op]
            out[s] = fn.reduce(np.concatenate([out[s:s + 1], part]))
    return out


CASES = [(AtomicOp.ADD, F32), (AtomicOp.ADD, F64), (AtomicOp.ADD, U32), (AtomicOp.ADD, I32),
         (AtomicOp.MIN, I32), (AtomicOp.MIN, U32), (AtomicOp.MAX, I32), (AtomicOp.MAX, U32),
         (AtomicOp.AND, U32), (AtomicOp.AND, I32), (AtomicOp.OR, I32), (AtomicOp.XOR, U32)]


@pytest.mark.parametrize(("op", "t"), CASES, ids=lambda v: getattr(v, "name", str(v)).lower())
def test_reductions_are_exact_in_parallel(op: AtomicOp, t: DataType) -> None:
    prog = reduce_into(op, t, 8, count=16)  # slots 8..15 are never touched
    assert private_atomics(prog) == {"acc": op}
    kernel = vcompile(prog, "cpu")
    assert kernel._fn_parallel is not None
    rng = np.random.default_rng(int(op) * 10 + int(t))
    if t.is_float:
        x = rng.integers(-8, 9, N).astype(t.np_dtype)
        acc0 = np.full(16, -0.0, t.np_dtype)  # an untouched -0.0 must stay -0.0
        acc0[:4] = [1.0, -2.0, 0.5, 3.0]  # and the reduction lands on what was there
    else:
        lo, hi = (0, 1 << 32) if t is U32 else (-(1 << 31), 1 << 31)
        x = rng.integers(lo, hi, N, dtype=np.int64).astype(t.np_dtype)
        acc0 = rng.integers(lo, hi, 16, dtype=np.int64).astype(t.np_dtype)
    got = kernel({"x": x, "acc": acc0.copy()}, grid=N // 256)["acc"]
    want = oracle(op, x, 8, acc0)
    assert np.array_equal(got, want)
    if t.is_float:
        assert np.array_equal(np.signbit(got), np.signbit(want))
    ref = vcompile(prog, "interp")({"x": x[:4096], "acc": acc0.copy()}, grid=16)["acc"]
    assert np.array_equal(vcompile(prog, "cpu")({"x": x[:4096], "acc": acc0.copy()}, grid=16)["acc"], ref)


def test_too_many_private_elements_fall_back_to_the_serial_loop() -> None:
    slots = PRIVATE_LIMIT // 8  # 64+ chunks of this many elements exceed the limit
    prog = reduce_into(AtomicOp.ADD, U32, slots)
    x = np.ones(N, np.uint32)
    got = vcompile(prog, "cpu")({"x": x}, grid=N // 256)["acc"]
    assert got.sum() == N and got[: N % slots or slots].min() >= 1


def _read_old() -> Program:
    x, cnt, t = read("x", 0, U32), output("cnt", 1, U32).with_count(1), output("tickets", 2, U32)
    i = var("i")
    return Program.wrapped([x, cnt, t], 256, [
        let("i", gid()), if_(i.lt(buflen(x)), [let("old", atomic_add(cnt, 0, 1)), store(t, i, var("old"))])])


def _mixed_ops() -> Program:
    x, acc = read("x", 0, U32), output("acc", 1, U32).with_count(2)
    i = var("i")
    return Program.wrapped([x, acc], 256, [let("i", gid()), if_(i.lt(buflen(x)), [
        let("a", atomic_add(acc, 0, x[i])), let("b", atomic(AtomicOp.MAX, acc, 1, x[i]))])])


def _also_loaded() -> Program:
    x, acc, out = read("x", 0, U32), output("acc", 1, U32).with_count(2), output("out", 2, U32)
    i = var("i")
    return Program.wrapped([x, acc, out], 256, [let("i", gid()), if_(i.lt(buflen(x)), [
        let("a", atomic_add(acc, 0, x[i])), store(out, i, acc[1])])])


def _exchange() -> Program:
    x, acc = read("x", 0, F32), output("acc", 1, F32).with_count(2)
    i = var("i")
    return Program.wrapped([x, acc], 256, [let("i", gid()), if_(i.lt(buflen(x)), [
        let("a", atomic(AtomicOp.EXCHANGE, acc, 0, x[i]))])])


@pytest.mark.parametrize("make", [_read_old, _mixed_ops, _also_loaded, _exchange], ids=lambda f: f.__name__)
def test_atomics_that_are_not_reductions_stay_serial(make) -> None:
    prog = make()
    assert private_atomics(prog) is None
    assert "VYRE_PARALLEL = False" in emit_cpu(prog)


def test_tickets_stay_in_invocation_order() -> None:
    got = vcompile(_read_old(), "cpu")({"x": np.zeros(N, np.uint32), "tickets": np.zeros(N, np.uint32)})
    assert np.array_equal(got["tickets"], np.arange(N, dtype=np.uint32)) and got["cnt"][0] == N


def test_programs_without_atomics_have_nothing_to_privatise() -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    prog = Program.wrapped([x, out], 64, [let("i", gid()), store(out, var("i"), x[var("i")])])
    assert private_atomics(prog) == {}


# ---- generated reduction programs, through the parallel entry with many small chunks ----------
_OPS = [(op, t) for op, t in CASES]


@st.composite
def reduction_programs(draw: st.DrawFn) -> tuple[Program, dict[str, np.ndarray], int]:
    """Flat programs whose atomics are all reductions: 1-3 accumulators (one op each), indices from
    the invocation id or from data, values from inputs, atomics under guards, in loops, after a
    possible early return."""
    n = draw(st.integers(1, 300))
    x, idx = read("x", 0, I32), read("idx", 1, U32)
    bufs = [x, idx]
    i = var("i")
    body: list = [let("i", gid())]
    inner: list = []
    if draw(st.booleans()):
        inner.append(if_(x[i].lt(i32(-6)), [ret()]))  # some invocations leave early
    accs = []
    for k in range(draw(st.integers(1, 3))):
        op, t = draw(st.sampled_from(_OPS))
        slots = draw(st.integers(1, 40))
        acc = output(f"acc{k}", 2 + k, t).with_count(slots)
        bufs.append(acc)
        accs.append((acc, op, t, slots))
        for m in range(draw(st.integers(1, 3))):
            where = draw(st.sampled_from(["gid", "data", "loop"]))
            value = cast(t, x[i]) if t is not U32 else cast(U32, x[i] + i32(8))
            if where == "gid":
                inner.append(let(f"u{k}_{m}", atomic(op, acc, (i * draw(st.integers(1, 7))) % slots, value)))
            elif where == "data":
                inner.append(if_(x[i].gt(i32(draw(st.integers(-9, 9)))),
                                 [let(f"u{k}_{m}", atomic(op, acc, idx[i], value))]))  # may be out of bounds
            else:
                inner.append(loop(f"j{k}_{m}", 0, draw(st.integers(0, 3)), [
                    let(f"u{k}_{m}", atomic(op, acc, (i + var(f"j{k}_{m}")) % slots, value))]))
    body.append(if_(i.lt(buflen(x)), inner))
    prog = Program.wrapped(bufs, draw(st.sampled_from([1, 8, 64])), body)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrays: dict[str, np.ndarray] = {"x": rng.integers(-8, 9, n).astype(np.int32),
                                     "idx": rng.integers(0, 48, n).astype(np.uint32)}
    for acc, _, t, slots in accs:
        arrays[acc.name] = (rng.integers(-8, 9, slots).astype(t.np_dtype) if t.is_float else
                            rng.integers(0, 1 << 32, slots, dtype=np.int64).astype(np.uint32).view(t.np_dtype))
    return prog, arrays, -(-n // prog.workgroup_size[0])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reduction_programs(), st.sampled_from([Launch(1, 1), Launch(8, 2), Launch(64, 1)]))
def test_generated_reductions_in_parallel_match_the_interpreter(case, launch) -> None:
    prog, arrays, groups = case
    assert is_tunable(prog) and private_atomics(prog)
    ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=groups)
    kernel = vcompile(prog, "cpu")
    kernel.launch = launch  # small chunks: many private copies to merge
    saved = dispatch_mod.PARALLEL_MIN_INVOCATIONS
    dispatch_mod.PARALLEL_MIN_INVOCATIONS = 0  # every dispatch takes the parallel entry
    try:
        got = kernel({k: v.copy() for k, v in arrays.items()}, grid=groups)
    finally:
        dispatch_mod.PARALLEL_MIN_INVOCATIONS = saved
    assert differences(got, ref, exact=True) == []
