"""The CPU emitter's branch-free forms (vyre/codegen/cpu_runtime.py): ``Select`` as one LLVM
``select`` (``_vy_sel``) and logical ``And``/``Or`` without short circuit (``_vy_and``/``_vy_or``),
which cut numba's compile time of the ops' kernels by a fifth. The semantics already evaluate every
operand (docs/semantics.md), so the kernels must give the interpreter's bits whatever the untaken
arm holds: a load past the end (guarded: 0), a division by zero, a NaN. A running minimum over
selected values keeps Python's conditional (faster merges: cpu_narrow.CpuEmitter.assigned)."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre import compile as vcompile
from vyre.codegen.cpu import emit_cpu
from vyre.codegen.cpu_runtime import both, either, select
from vyre.ir import (
    F32, U32, Program, assign, buflen, cast, gid, if_, let, load, loop, minimum, output, read, store, u32, var,
)
from vyre.ir import select as sel
from vyre.ir.expr import lit
from tests.cpu_source import serial_source


@numba.njit
def _pick(c, a, b):  # type: ignore[no-untyped-def]
    return select(c, a, b)


@numba.njit
def _logic(a, b):  # type: ignore[no-untyped-def]
    return both(a, b), either(a, b)


@numba.njit
def _mixed(c):  # type: ignore[no-untyped-def]
    # operands of two integer types and two bool literals: the result takes their common type
    return select(c, np.uint32(7), np.int64(-1)), select(c, True, False), select(c, np.float32(0.5), 2.0)


@pytest.mark.parametrize("c", [True, False])
def test_select_and_logic_compute_what_python_does(c: bool) -> None:
    for a, b in [(1.5, -2.0), (np.float32(3), np.float32(-0.0)), (np.uint32(5), np.uint32(9)), (-3, 4)]:
        assert _pick(c, a, b) == (a if c else b)
    for x in (True, False):
        assert _logic(c, x) == (c and x, c or x)
    u, flag, f = _mixed(c)
    assert (u, flag, f) == ((7, True, 0.5) if c else (-1, False, 2.0))
    got = _pick(c, 1.0, math.nan)
    assert got == 1.0 if c else math.isnan(got)


def test_a_non_boolean_condition_is_a_typing_error() -> None:
    with pytest.raises(numba.core.errors.TypingError):
        _pick(np.uint32(1), 1.0, 2.0)


NONE = 2**32 - 1


def _program() -> Program:
    """out[i] = a running maximum of x and selects whose untaken arm loads past the end of x,
    divides by zero or holds NaN; q[i] also takes the lowest index holding a value below x[i]
    (a running minimum over selects: Python's conditional)."""
    i, k, m, b = var("i"), var("k"), var("m"), var("b")
    n = buflen("x")
    xi = load("x", i)
    return Program.wrapped([read("x", 0, F32), read("d", 1, U32), output("out", 2, F32), output("q", 3, U32)], 64, [
        let("i", gid()),
        if_(i.lt(buflen("out")), [
            let("m", lit(-math.inf, F32)),
            let("b", u32(NONE)),
            loop("k", u32(0), n, [assign("m", sel(load("x", k).gt(m), load("x", k), m)),
                                  assign("b", minimum(b, sel(load("x", k).lt(xi), k, u32(NONE))))]),
            store("out", i, sel(i.lt(n).and_(xi.eq(xi)), xi + m, load("x", i + u32(1000)) + m)),
            store("q", i, sel(load("d", i).eq(u32(0)).or_(i.ge(n)), u32(77), u32(1000) / load("d", i))),
            if_(xi.ne(xi).or_(xi.gt(m)), [store("out", i, cast(F32, load("d", i)))]),
            if_(b.ne(u32(NONE)), [store("q", i, load("q", i) + b)]),
        ]),
    ])


def test_selects_are_one_instruction_and_a_running_minimum_keeps_its_conditional() -> None:
    src = emit_cpu(_program(), parallel=False)
    body = serial_source(src)
    assert " and " not in body.replace("_vy_and", "") and " or " not in body.replace("_vy_or", "")
    lines = body.splitlines()
    running_max = [ln for ln in lines if "_m = " in ln and "inf" not in ln]
    running_min = [ln for ln in lines if "_b = min(" in ln]
    assert running_max and all("_vy_sel(" in ln and " if " not in ln for ln in running_max), running_max
    assert running_min and all(" if " in ln and "_vy_sel" not in ln for ln in running_min), running_min
    stores = [ln for ln in lines if ln.strip().startswith(("b2_out[", "b3_q["))]
    assert any("_vy_sel(" in ln for ln in stores) and "_vy_and(" in body and "_vy_or(" in body


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**31),
       special=st.sampled_from([None, math.nan, math.inf, -math.inf, 0.0]))
def test_branch_free_selects_give_the_interpreters_bits(n: int, seed: int, special: float | None) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    if special is not None:
        x[rng.integers(n)] = special
    d = rng.integers(0, 3, n).astype(np.uint32)  # zeros: the untaken division's divisor
    prog = _program()
    arrays = {"x": x, "d": d, "out": np.zeros(n, np.float32), "q": np.zeros(n, np.uint32)}
    want = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()})
    got = vcompile(prog, "cpu", parallel=False)({k: v.copy() for k, v in arrays.items()})
    for name in ("out", "q"):
        np.testing.assert_array_equal(np.asarray(got[name]).view(np.uint32), np.asarray(want[name]).view(np.uint32),
                                      err_msg=name)
