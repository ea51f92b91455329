"""The checked CPU call's per-call shortcuts (vyre/driver/backend.py ``CpuBackend.run``,
vyre/driver/bind.py ``BindPlan.bind``) change no outcome.

A CPU kernel remembers, per buffer lengths and ``grid=``, what the checks that depend on nothing
else decided (grid, invocations, launch defaults); ``BindPlan.bind`` checks a plain 1-D numpy array
inline. Both are checked here against the long way over random call sequences: every call of a
kernel whose memo is warm gives exactly what the same call gives with the memo emptied (result,
error and message, warnings), and that matches the reference interpreter; the inline bind accepts
exactly the arrays :func:`vyre.driver.bind.check_host_array` accepts and raises its errors.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import vyre
from vyre.driver.bind import BindPlan, check_host_array
from vyre.driver.dispatch import _kernel_for
from vyre.errors import DispatchError
from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var


def program() -> Program:
    """``out[i] = x[i] * 2 + y[i]``: three buffers indexed by the invocation id."""
    x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    body = [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, x[i] * 2.0 + y[i])])]
    return Program.wrapped([x, y, out], 16, body)


# grids equal as Python values but not all valid (True == 1.0 == 1): a memo keyed on the raw value
# would let the invalid ones through after a valid one
GRIDS: list[Any] = [None, None, None, 1, (1,), (True,), (1.0,), 3, (3, 1, 1), [3], True, 1.0, (1, 2), 0]


@st.composite
def calls(draw: st.DrawFn) -> dict[str, Any]:
    """One dispatch's arguments: lengths that agree or not, now and then a wrong dtype, a strided or
    read-only array, an output aliasing an input, a bad or a given grid, strict or not."""
    n = draw(st.sampled_from([9, 40]))  # few lengths: calls repeat each other's shapes
    lengths = {b: draw(st.sampled_from([n, n, n, n + 5])) for b in ("x", "y", "out")}
    quirk = draw(st.sampled_from(["none"] * 6 + ["f64", "strided", "readonly-out", "alias", "2d", "left-out"]))
    return {"lengths": lengths, "quirk": quirk, "grid": draw(st.sampled_from(GRIDS)), "strict": draw(st.booleans())}


def inputs_of(call: dict[str, Any]) -> dict[str, np.ndarray]:
    n = call["lengths"]
    x = np.linspace(-1, 1, n["x"], dtype=np.float32)
    y = np.arange(n["y"], dtype=np.float32)
    out = np.full(n["out"], 7.0, np.float32)
    quirk = call["quirk"]
    if quirk == "f64":
        x = x.astype(np.float64)
    elif quirk == "strided":
        y = np.repeat(y, 2)[::2]
    elif quirk == "readonly-out":
        out.setflags(write=False)
    elif quirk == "alias":
        x = out[:]
    elif quirk == "2d" and n["x"] % 2 == 0:
        x = x.reshape(2, -1)
    args = {"x": x, "y": y, "out": out}
    if quirk == "left-out":
        del args["out"]
    return args


def outcome(p: Program, call: dict[str, Any], backend: str) -> tuple[Any, ...]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            r = vyre.dispatch(p, inputs_of(call), backend=backend, grid=call["grid"], strict=call["strict"])
        except DispatchError as e:
            return ("error", type(e).__name__, str(e), [str(w.message) for w in seen])
    return ("ok", r["out"].tolist(), [str(w.message) for w in seen])


@given(st.lists(calls(), min_size=2, max_size=10))
def test_a_warm_kernel_answers_every_call_as_a_cold_one(seq: list[dict[str, Any]]) -> None:
    p = program()
    kernel = _kernel_for(p, "cpu")  # the kernel vyre.dispatch(p, ...) runs
    for call in seq:
        outcome(p, call, "cpu")
        warm = outcome(p, call, "cpu")  # the same call again: whatever it left in the memo, used
        kernel._shapes.clear()
        assert outcome(p, call, "cpu") == warm, call
        # the interpreter applies the same checks and computes the reference result
        assert outcome(p, call, "interp") == warm, call


def test_disagreeing_lengths_warn_on_every_call_and_strict_raises_after_them() -> None:
    p = program()
    call = {"lengths": {"x": 9, "y": 14, "out": 9}, "quirk": "none", "grid": None, "strict": False}
    for _ in range(3):
        got = outcome(p, call, "cpu")
        assert got[0] == "ok" and len(got[-1]) == 1 and "different lengths" in got[-1][0]
    assert outcome(p, {**call, "strict": True}, "cpu")[0] == "error"


def test_a_grid_equal_to_a_valid_one_is_still_checked() -> None:
    p = program()
    call = {"lengths": {"x": 9, "y": 9, "out": 9}, "quirk": "none", "strict": False}
    assert outcome(p, {**call, "grid": (1,)}, "cpu")[0] == "ok"
    for bad in [(True,), (1.0,), True, 1.0, (1, 1.0)]:
        with pytest.raises(DispatchError, match="grid must be an int"):
            vyre.dispatch(p, inputs_of({**call, "grid": bad}), backend="cpu", grid=bad)


# -- the inline bind ----------------------------------------------------------------------------------


DTYPES = [np.float32, np.float64, np.int32, np.uint32, np.bool_]
SHAPES = ["1d", "strided", "2d", "0d", "memmap", "masked", "list", "readonly", "readonly-2d", "fortran", "empty"]


def array(dtype: Any, shape: str) -> Any:
    """12 elements of ``dtype`` (0 for "empty") in the given layout."""
    a: Any = np.zeros(24, dtype)[::2] if shape == "strided" else np.zeros(12, dtype)
    match shape:
        case "2d" | "readonly-2d":
            a = a.reshape(3, 4)
        case "0d":
            a = np.zeros((), dtype)
        case "memmap":
            a = a.view(np.memmap)
        case "masked":
            a = np.ma.masked_array(a)
        case "list":
            a = a.tolist()
        case "fortran":
            a = np.asfortranarray(a.reshape(3, 4))
        case "empty":
            a = np.zeros(0, dtype)
    if shape.startswith("readonly"):
        a.setflags(write=False)
    return a


def decls() -> list[Any]:
    from vyre.ir import BufferAccess, BufferDecl, DataType

    return [BufferDecl(f"b{k}", 0, access, element, count=count)
            for k, (access, element, count) in enumerate(
                (a, e, c) for a in (BufferAccess.READ_ONLY, BufferAccess.READ_WRITE, BufferAccess.WRITE_ONLY)
                for e in (DataType.F32, DataType.U32, DataType.BOOL) for c in (0, 12, 6))]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_inline_bind_accepts_and_refuses_exactly_what_check_host_array_does(shape: str) -> None:
    for dtype in DTYPES:
        a = array(dtype, shape)
        for decl in decls():
            plan = BindPlan(Program((decl,), (1, 1, 1), ()))
            try:
                want: Any = check_host_array(decl, a)
            except DispatchError as e:
                with pytest.raises(DispatchError) as got:
                    plan.bind({decl.name: a})
                assert str(got.value) == str(e)
                continue
            bound = plan.bind({decl.name: a})[decl.name]
            assert type(bound) is type(want) and bound.shape == want.shape
            assert bound is want or bound.size == 0 or np.shares_memory(bound, want)
