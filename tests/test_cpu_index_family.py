"""Loads, stores and atomics whose index is an invocation id or a loop variable combined with
constants and buffer lengths, on every CPU kernel form, against the interpreter.

LLVM's loop vectoriser (LLVM 20+, numba 0.68) miscompiled ``x[gid % 4]`` next to ``out[gid]``: it
read and wrote past the ends of buffers (vyre/codegen/cpu_narrow.py). These programs put several
such accesses in one loop, with ``% / >> << & | + - *`` by literals, let-bound constants and buffer
lengths, in u32 and through i32 casts; the arrays are views into larger arrays whose tails hold
canaries, so a read past the end shows up as a wrong value and a write past it as a changed canary.
Each program runs through every entry point its form has: the serial loop, the parallel ``prange``
loop (many small chunks), the private-copy reduction entry (atomics), the per-workgroup forms
(local ids) and the lockstep form (a barrier).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre.driver import cpu_selfcheck
from vyre.driver.dispatch import compile as vcompile
from vyre.ir import (
    I32, U32, BinOpKind, BufferDecl, Expr, Program, assign, atomic_add, barrier, binop, buflen, cast, gid,
    i32, let, lid, loop, output, read, store, u32, var, wgid,
)

WG = 64
GROUPS = 5  # 320 invocations: several vectors, a remainder, more than one parallel chunk
CANARY = 0xDEAD
EXAMPLES = 8 if os.environ.get("VYRE_HYPOTHESIS_PROFILE", "ci") == "ci" else 300

# Hypothesis starts from the first entries (and shrinks towards them): the shapes of the report first.
_MASKING = [BinOpKind.MOD, BinOpKind.BIT_AND, BinOpKind.SHR, BinOpKind.SHL, BinOpKind.DIV]
_OPS = [BinOpKind.ADD, *_MASKING, BinOpKind.BIT_OR, BinOpKind.SUB, BinOpKind.MUL]
_CONSTS = [4, 3, 8, 7, 1, 2, 5, 15, 16, 30, 31, 64, 255]


@st.composite
def index_exprs(draw: Any, base: Expr) -> Expr:
    """A u32 index: ``base`` through a mask, remainder, quotient or shift, then up to two more
    operations; each operand a literal, a let-bound constant (``k``) or a buffer length, sometimes
    in i32 (cast there and back) or on the left."""
    e = base
    for step in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(_MASKING if step == 0 else _OPS))
        signed = draw(st.integers(0, 4)) == 4
        c = draw(st.sampled_from(_CONSTS))
        other: Expr = draw(st.sampled_from([
            i32(c) if signed else u32(c), i32(c) if signed else u32(c),
            var("k_i") if signed else var("k"), cast(I32, buflen("x")) if signed else buflen("x")]))
        lhs = cast(I32, e) if signed else e
        a, b = (other, lhs) if draw(st.integers(0, 5)) == 5 else (lhs, other)
        r = binop(op, a, b)
        e = cast(U32, r) if signed else r
    return e


@st.composite
def family_programs(draw: Any) -> tuple[Program, int, int, int]:
    """(program, len(x), len(out2), len(hist)): one access of the family next to ``out[gid]``
    (the access whose index LLVM compared the family's with), in one of the CPU kernel forms."""
    form = draw(st.sampled_from(["flat", "flat", "workgroup", "lockstep"]))
    kind = draw(st.sampled_from(["load", "store", "loop", "atomic"]))
    base = gid() if form == "flat" else draw(st.sampled_from([wgid() * u32(WG) + lid(), lid(), gid()]))
    lx = draw(st.sampled_from([4, 8, 16, 100, WG * GROUPS]))
    l2 = draw(st.sampled_from([8, 64, 320, 1000]))
    lh = draw(st.sampled_from([4, 8, 16]))
    x = read("x", 0, U32)
    out, out2 = output("out", 1, U32), output("out2", 2, U32)
    bufs: list[BufferDecl] = [x, out, out2]
    i, j = var("i"), var("j")
    k = draw(st.sampled_from(_CONSTS))
    body: list[Any] = [let("k", u32(k)), let("k_i", i32(k)), let("i", base)]
    if form == "lockstep":
        body.append(barrier())
    # the access LLVM compared the family's index with: gid, or another stride and start
    companion = draw(st.sampled_from([gid(), gid() * u32(3), gid() + u32(1)]))
    if kind == "load":
        body.append(store(out, gid(), x[draw(index_exprs(i))]))
    elif kind == "store":  # every writer of out2[s] writes the same value: order cannot matter
        s = draw(index_exprs(i))
        body += [store(out, companion, x[gid()]), store(out2, s, s * u32(2654435761) + u32(1))]
    elif kind == "loop":
        lj, sj = draw(index_exprs(j)), draw(index_exprs(j))
        body += [let("acc", u32(0)),
                 loop("j", u32(0), u32(draw(st.sampled_from([4, 8, 17, 64]))), [
                     assign("acc", var("acc") + x[lj] + x[j] * u32(3)),
                     store(out2, sj, sj + u32(7)),
                 ]),
                 store(out, gid(), var("acc"))]
    else:
        hist = output("hist", 3, U32)
        bufs.append(hist)
        body += [store(out, companion, x[gid()]), let("unused", atomic_add(hist, draw(index_exprs(i)), u32(1)))]
    return Program.wrapped(bufs, WG, body), lx, l2, lh


def _tailed(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    whole = np.full(len(values) + 64, CANARY, values.dtype)
    whole[: len(values)] = values
    return whole[: len(values)], whole


def _inputs(prog: Program, lx: int, l2: int, lh: int) -> dict[str, np.ndarray]:
    n = WG * GROUPS
    arrays = {"x": np.arange(1000, 1000 + lx, dtype=np.uint32), "out": np.zeros(n, np.uint32),
              "out2": np.zeros(l2, np.uint32)}
    if any(b.name == "hist" for b in prog.buffers):
        arrays["hist"] = np.zeros(lh, np.uint32)
    return arrays


def check_program(prog: Program, lx: int, l2: int, lh: int) -> None:
    # in safe mode (the self-check failed) these would pass without testing the vectorised kernels
    assert cpu_selfcheck.vectorize_ok(), "the CPU self-check failed on this machine (tests/test_cpu_selfcheck.py)"
    arrays = _inputs(prog, lx, l2, lh)
    want = vcompile(prog, "interp")({n: a.copy() for n, a in arrays.items()}, grid=(GROUPS,))
    k = vcompile(prog, "cpu")
    storage, flat = k.storage, k.flat
    entries = [("serial", k._fn)] + ([("parallel", k._fn_parallel)] if k._fn_parallel is not None else [])
    for name, fn in entries:
        views, wholes = {}, {}
        for b in storage:
            views[b.name], wholes[b.name] = _tailed(arrays[b.name].copy())
        args = [views[b.name] for b in storage]
        if flat:
            fn(*args, WG * GROUPS, WG)  # chunks of one workgroup: 5 parallel chunks
        else:
            fn(*args, GROUPS, 1, 1)
        for b in storage:
            got = views[b.name]
            if b.access.writable:
                assert np.array_equal(got, want[b.name]), (name, b.name, got, want[b.name])
            assert (wholes[b.name][len(got):] == CANARY).all(), (name, b.name, "wrote past the end")


@settings(max_examples=EXAMPLES)
@given(family_programs())
def test_index_family_matches_interpreter(case: tuple[Program, int, int, int]) -> None:
    check_program(*case)


def _issue_program(mask: Expr) -> Program:
    x, out = read("x", 0, U32), output("out", 1, U32)
    return Program.wrapped([x, out], 64, [store(out, gid(), x[mask])])


@pytest.mark.parametrize("index", ["gid % 4", "gid & 3", "gid & 7", "(gid << 30) >> 30", "gid - gid / 4 * 4",
                                   "i32(gid) % 4"])
def test_issue_reproducers(index: str) -> None:
    """The shapes of the report: ``out[gid] = x[gid % 4]`` and its relatives, serial and parallel."""
    g = gid()
    e = {"gid % 4": g % u32(4), "gid & 3": g & u32(3), "gid & 7": g & u32(7),
         "(gid << 30) >> 30": (g << u32(30)) >> u32(30), "gid - gid / 4 * 4": g - g / u32(4) * u32(4),
         "i32(gid) % 4": cast(U32, cast(I32, g) % i32(4))}[index]
    prog = _issue_program(e)
    assert cpu_selfcheck.vectorize_ok()  # as in check_program
    k = vcompile(prog, "cpu")
    x = np.array([10, 11, 12, 13], np.uint32)
    want = vcompile(prog, "interp")({"x": x, "out": np.zeros(128, np.uint32)}, grid=(2,))["out"]
    for fn in (k._fn, k._fn_parallel):
        view, whole = _tailed(np.zeros(128, np.uint32))
        xv, xw = _tailed(x.copy())
        fn(xv, view, 128, 32)
        assert np.array_equal(view, want), view
        assert (whole[128:] == CANARY).all() and (xw[4:] == CANARY).all()


def family_cases(count: int) -> list[tuple[str, Program, dict[str, np.ndarray], tuple[int], None]]:
    """``count`` programs of the family with inputs, deterministic, for the CUDA runs of
    tests/backend_runner.py (the simulator, PTX) and bench/gpu_index_family.py (a GPU)."""
    from hypothesis import HealthCheck

    out: list[tuple[str, Program, dict[str, np.ndarray], tuple[int], None]] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(family_programs())
    def collect(case: tuple[Program, int, int, int]) -> None:
        prog, lx, l2, lh = case
        out.append((f"index_family_{len(out)}", prog, _inputs(prog, lx, l2, lh), (GROUPS,), None))

    collect()
    return out[:count]
