"""Input checking of ``vyre.compile``, ``vyre.dispatch`` and ``Kernel.__call__``.

Every bad input is a :class:`DispatchError` whose message ends with ``Fix: ...`` and is raised before
anything launches: the output array passed in still holds its sentinel afterwards. Also the good
paths the checks guard: outputs passed in are written in place and returned, outputs left out are
allocated, repeated calls agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import vyre
from vyre.driver.backends import cuda_available, simulator_enabled
from vyre.driver.bind import check_disjoint, spans_overlap
from vyre.errors import DispatchError, ValidationError
from vyre.ir import F32, BufferDecl, Program
from vyre.ir import buflen, gid, if_, let, lid, output, read, store, var, workgroup

SENTINEL = np.float32(42.0)
N = 8


def axpy() -> Program:
    """``out[i] = a[0] * x[i] + y[i]``; ``a`` declares one element."""
    a, x, y, out = read("a", 0, F32).with_count(1), read("x", 1, F32), read("y", 2, F32), output("out", 3, F32)
    i = var("i")
    return Program.wrapped([a, x, y, out], 32, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [store(out, i, a[0] * x[i] + y[i])]),
    ])


def with_tile() -> Program:
    """Workgroup memory plus an output that declares its count (so it may be left out)."""
    x, out, tile = read("x", 0, F32), output("out", 1, F32).with_count(32), workgroup("tile", 32, F32)
    return Program.wrapped([x, out, tile], 32, [
        store(tile, lid(), x[gid()] * 2.0),
        store(out, gid(), tile[lid()]),
    ])


PROG = axpy()


@pytest.fixture(scope="module", autouse=True)
def _isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VYRE_CACHE_DIR", str(tmp_path_factory.mktemp("vyre-cache")))
        mp.delenv("VYRE_BACKEND", raising=False)
        yield


@pytest.fixture(scope="module")
def kernel() -> vyre.Kernel:
    return vyre.compile(PROG, "cpu", parallel=False)


def good() -> dict[Any, Any]:
    return {"a": np.array([2.0], np.float32), "x": np.arange(N, dtype=np.float32),
            "y": np.ones(N, np.float32), "out": np.full(N, SENTINEL, np.float32)}


def expected() -> np.ndarray:
    return 2.0 * np.arange(N, dtype=np.float32) + 1.0


def read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


# name -> (change to the good inputs, text the message must contain)
BAD_INPUTS: dict[str, tuple[Callable[[dict[Any, Any]], object], str]] = {
    "missing input": (lambda d: d.pop("a"), "missing input buffer 'a'"),
    "unknown name": (lambda d: d.update(zz=np.ones(N, np.float32)), "unknown buffer 'zz'"),
    "non-str name": (lambda d: d.__setitem__(1, np.ones(N, np.float32)), "must be str"),
    "wrong dtype": (lambda d: d.update(x=np.arange(N, dtype=np.float64)), "dtype float64, expected float32"),
    "wrong int dtype": (lambda d: d.update(x=np.arange(N, dtype=np.int32)), "dtype int32, expected float32"),
    "wrong length vs count": (lambda d: d.update(a=np.ones(2, np.float32)), "has 2 elements, the program declares 1"),
    "non-contiguous": (lambda d: d.update(x=np.ones(2 * N, np.float32)[::2]), "not C-contiguous"),
    "fortran 2-D": (lambda d: d.update(x=np.ones((2, N // 2), np.float32, order="F")), "not C-contiguous"),
    "read-only output": (lambda d: d.update(out=read_only(np.full(N, SENTINEL, np.float32))), "read-only"),
    "list, not array": (lambda d: d.update(x=[1.0] * N), "got a list, expected a numpy array"),
    "scalar, not array": (lambda d: d.update(a=np.float32(2.0)), "expected a numpy array"),
    "input is the output array": (lambda d: d.update(x=d["out"]), "'out' and 'x' are bound to overlapping memory"),
    "overlapping views": (lambda d: d.update(y=_overlapping(d)), "'out' and 'y' are bound to overlapping memory"),
}


def _overlapping(d: dict[Any, Any]) -> np.ndarray:
    """Re-bind ``out`` to half of a bigger array and return a view overlapping its second half."""
    base = np.full(2 * N, SENTINEL, np.float32)
    d["out"] = base[:N]
    return base[N // 2:N // 2 + N]


def check(err: pytest.ExceptionInfo[BaseException], text: str) -> None:
    msg = str(err.value)
    assert text in msg, msg
    assert "Fix:" in msg, msg


def _bad(name: str) -> dict[Any, Any]:
    d = good()
    BAD_INPUTS[name][0](d)
    return d


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_kernel_call_rejects_bad_input_before_launch(kernel: vyre.Kernel, name: str) -> None:
    d = _bad(name)
    with pytest.raises(DispatchError) as err:
        kernel(d)
    check(err, BAD_INPUTS[name][1])
    assert (d["out"] == SENTINEL).all()


@pytest.mark.parametrize("warm", [False, True], ids=["first-dispatch", "after-a-good-dispatch"])
@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_dispatch_rejects_bad_input_before_launch(name: str, warm: bool) -> None:
    """A Program object dispatch has not seen (full checks), and one it has (the repeated-dispatch path
    that skips name checks, backend resolution and hashing)."""
    prog = PROG if warm else axpy()
    if warm:
        np.testing.assert_array_equal(vyre.dispatch(prog, good(), backend="cpu")["out"], expected())
    d = _bad(name)
    with pytest.raises(DispatchError) as err:
        vyre.dispatch(prog, d, backend="cpu")
    check(err, BAD_INPUTS[name][1])
    assert (d["out"] == SENTINEL).all()


@pytest.mark.parametrize("name", ["missing input", "wrong dtype", "wrong length vs count", "read-only output",
                                  "input is the output array", "overlapping views"])
def test_interp_kernel_applies_the_same_checks(name: str) -> None:
    d = _bad(name)
    with pytest.raises(DispatchError) as err:
        vyre.compile(PROG, "interp")(d)
    check(err, BAD_INPUTS[name][1])
    assert (d["out"] == SENTINEL).all()


@pytest.mark.parametrize("inputs", [[("x", 1)], "x", None, 3], ids=["list", "str", "None", "int"])
def test_inputs_must_be_a_mapping(kernel: vyre.Kernel, inputs: Any) -> None:
    for call in (lambda: kernel(inputs), lambda: vyre.dispatch(PROG, inputs, backend="cpu")):
        with pytest.raises(DispatchError) as err:
            call()
        check(err, "inputs must be a mapping")


def test_workgroup_buffer_cannot_be_passed() -> None:
    p = with_tile()
    d = {"x": np.ones(32, np.float32), "tile": np.ones(32, np.float32), "out": np.full(32, SENTINEL, np.float32)}
    for call in (lambda: vyre.dispatch(p, d, backend="cpu"), lambda: vyre.compile(p, "interp")(d)):
        with pytest.raises(DispatchError) as err:
            call()
        check(err, "'tile' is workgroup memory")
    assert (d["out"] == SENTINEL).all()


def test_output_without_count_must_be_passed(kernel: vyre.Kernel) -> None:
    d = good()
    del d["out"]
    with pytest.raises(DispatchError) as err:
        kernel(d)
    check(err, "declares no count")


BAD_GRIDS: dict[str, tuple[Any, str]] = {
    "zero": (0, "outside [1, 2^31-1]"),
    "negative": (-1, "outside [1, 2^31-1]"),
    "zero in y": ((1, 0), "outside [1, 2^31-1]"),
    "too large": (2**31, "outside [1, 2^31-1]"),
    "4-D": ((1, 1, 1, 1), "1-3 ints"),
    "empty": ((), "1-3 ints"),
    "str": ("1", "1-3 ints"),
    "float in tuple": ((1.0,), "1-3 ints"),
}


@pytest.mark.parametrize("name", sorted(BAD_GRIDS))
def test_bad_grid_is_rejected_before_launch(kernel: vyre.Kernel, name: str) -> None:
    grid, text = BAD_GRIDS[name]
    for call in (lambda d: kernel(d, grid=grid), lambda d: vyre.dispatch(PROG, d, backend="cpu", grid=grid)):
        d = good()
        with pytest.raises(DispatchError) as err:
            call(d)
        check(err, text)
        assert (d["out"] == SENTINEL).all()


def test_float_grid_is_a_dispatch_error(kernel: vyre.Kernel) -> None:
    with pytest.raises(DispatchError):
        kernel(good(), grid=1.5)  # type: ignore[arg-type]


def test_bad_workgroup_size_override() -> None:
    with pytest.raises(DispatchError) as err:
        vyre.dispatch(PROG, good(), backend="cpu", workgroup_size=0)
    check(err, "outside [1, 2^31-1]")
    assert "workgroup_size (0, 1, 1)" in str(err.value)  # names the argument the caller passed
    with pytest.raises(DispatchError) as err:
        vyre.dispatch(PROG, good(), backend="cpu", workgroup_size="64")  # type: ignore[arg-type]
    check(err, "workgroup_size must be")


@pytest.mark.parametrize("value", ["yes", 1, 0, np.True_])
def test_return_device_must_be_a_bool(kernel: vyre.Kernel, value: object) -> None:
    for call in (lambda d: kernel(d, return_device=value),  # type: ignore[arg-type]
                 lambda d: vyre.dispatch(PROG, d, backend="cpu", return_device=value)):  # type: ignore[arg-type]
        for _ in range(2):  # the second call takes dispatch's cached path
            d = good()
            with pytest.raises(DispatchError) as err:
                call(d)
            check(err, "return_device must be")
            assert (d["out"] == SENTINEL).all()


@pytest.mark.parametrize("knobs", [(0, 1), (1025, 1), (1, 0), (1, 4097), (-1, 1)])
def test_launch_knobs_out_of_range(knobs: tuple[int, int]) -> None:
    with pytest.raises(DispatchError) as err:
        vyre.Launch(*knobs)
    check(err, "out of range")


def test_launch_in_range_is_used_and_results_do_not_change(kernel: vyre.Kernel) -> None:
    assert kernel.flat
    try:
        for la in (vyre.Launch(1), vyre.Launch(3, 2), vyre.Launch(1024, 4096)):
            kernel.launch = la
            np.testing.assert_array_equal(kernel(good())["out"], expected())
    finally:
        kernel.launch = None


@pytest.mark.parametrize("knobs", [(1.5, 1), ("a", 1)])
def test_launch_knobs_must_be_ints(knobs: tuple[Any, Any]) -> None:
    with pytest.raises(DispatchError):
        vyre.Launch(*knobs)


@pytest.mark.parametrize("thing", ["program", None, b"\x00", PROG.entry], ids=["str", "None", "bytes", "tuple"])
def test_non_program_is_rejected(thing: Any) -> None:
    for call in (lambda: vyre.compile(thing, "cpu"), lambda: vyre.dispatch(thing, {}, backend="cpu")):
        with pytest.raises(DispatchError) as err:
            call()
        check(err, "expected a vyre Program")


@pytest.mark.parametrize("backend", ["gpu", "CPU", "", "numba"])
def test_unknown_backend(backend: str) -> None:
    for call in (lambda: vyre.compile(PROG, backend), lambda: vyre.dispatch(PROG, good(), backend=backend)):
        with pytest.raises(DispatchError) as err:
            call()
        check(err, "unknown backend")


def test_unknown_backend_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VYRE_BACKEND", "tpu")
    d = good()
    with pytest.raises(DispatchError) as err:
        vyre.dispatch(PROG, d)
    check(err, "unknown backend 'tpu'")
    assert (d["out"] == SENTINEL).all()


@pytest.mark.skipif(simulator_enabled(), reason="this process runs the simulator")
def test_cudasim_needs_the_environment_variable() -> None:
    for call in (lambda: vyre.compile(PROG, "cudasim"), lambda: vyre.dispatch(PROG, good(), backend="cudasim")):
        with pytest.raises(DispatchError) as err:
            call()
        check(err, "NUMBA_ENABLE_CUDASIM=1")


@pytest.mark.skipif(cuda_available(), reason="a GPU is present")
def test_cuda_without_a_gpu() -> None:
    d = good()
    for call in (lambda: vyre.compile(PROG, "cuda"), lambda: vyre.dispatch(PROG, d, backend="cuda")):
        with pytest.raises(DispatchError) as err:
            call()
        check(err, "backend 'cuda' is unavailable")
    assert (d["out"] == SENTINEL).all()


def test_invalid_program_is_a_validation_error() -> None:
    x = read("x", 0, F32)
    bad = Program.wrapped([x], 32, [store(x, gid(), 1.0)])  # store to a READ_ONLY buffer
    d = {"x": np.full(4, SENTINEL, np.float32)}
    for call in (lambda: vyre.compile(bad, "cpu"), lambda: vyre.dispatch(bad, d, backend="cpu"),
                 lambda: vyre.compile(bad, "interp")):
        with pytest.raises(ValidationError) as err:
            call()
        assert "V050" in str(err.value) and "Fix:" in str(err.value)
    assert (d["x"] == SENTINEL).all()


# ---- the good paths ----------------------------------------------------------------------------
def test_passed_outputs_are_written_in_place_and_returned(kernel: vyre.Kernel) -> None:
    d = good()
    out = d["out"]
    r = kernel(d)
    assert set(r) == {"out"} and r["out"] is out
    np.testing.assert_array_equal(out, expected())
    r2 = vyre.dispatch(PROG, d, backend="cpu")
    assert r2["out"] is out


def test_passed_2d_output_keeps_its_shape(kernel: vyre.Kernel) -> None:
    d = good()
    d["out"] = np.zeros((2, N // 2), np.float32)
    r = kernel(d)
    assert r["out"] is d["out"] and r["out"].shape == (2, N // 2)
    np.testing.assert_array_equal(r["out"].ravel(), expected())


def test_outputs_not_passed_are_allocated_per_call() -> None:
    p = with_tile()
    x = np.arange(32, dtype=np.float32)
    r1 = vyre.dispatch(p, {"x": x}, backend="cpu")
    r2 = vyre.dispatch(p, {"x": x}, backend="cpu")
    assert set(r1) == {"out"} and r1["out"].dtype == np.float32 and r1["out"].shape == (32,)
    np.testing.assert_array_equal(r1["out"], 2 * x)
    np.testing.assert_array_equal(r2["out"], r1["out"])
    assert r2["out"] is not r1["out"]


def test_same_call_twice_gives_the_same_result(kernel: vyre.Kernel) -> None:
    first = kernel(good())["out"].copy()
    second = kernel(good())["out"]
    np.testing.assert_array_equal(first, expected())
    np.testing.assert_array_equal(second, first)
    via = [vyre.dispatch(PROG, good(), backend="cpu")["out"] for _ in range(2)]
    np.testing.assert_array_equal(via[0], first)
    np.testing.assert_array_equal(via[1], first)


def test_read_only_array_is_fine_for_an_interp_input() -> None:
    d = good()
    d["x"] = read_only(d["x"])
    np.testing.assert_array_equal(vyre.compile(PROG, "interp")(d)["out"], expected())


def test_read_only_array_is_fine_for_a_cpu_input(kernel: vyre.Kernel) -> None:
    d = good()
    d["x"] = read_only(d["x"])
    np.testing.assert_array_equal(kernel(d)["out"], expected())


def test_buffer_decl_helpers_used_here_are_what_the_checks_assume() -> None:
    """Guards the fixtures: ``a`` declares one element, ``out`` none, ``tile`` is workgroup memory."""
    decls: dict[str, BufferDecl] = {b.name: b for b in PROG.buffers}
    assert decls["a"].count == 1 and decls["out"].count == 0 and decls["out"].access.writable
    assert with_tile().buffer("tile").is_workgroup


def test_read_only_buffers_may_share_an_array(kernel: vyre.Kernel) -> None:
    d = good()
    d["y"] = d["x"]
    np.testing.assert_array_equal(kernel(d)["out"], 3.0 * np.arange(N, dtype=np.float32))


@st.composite
def _spans(draw: st.DrawFn) -> tuple[dict[str, tuple[int, int]], set[str]]:
    n = draw(st.integers(0, 6))
    spans = {}
    for k in range(n):
        start = draw(st.integers(0, 20))
        spans[f"b{k}"] = (start, start + draw(st.integers(0, 12)))
    return spans, set(draw(st.lists(st.sampled_from(sorted(spans)), unique=True))) if spans else set()


@example(({"b0": (0, 10), "b1": (0, 100), "b2": (5, 6)}, {"b0"}))  # the written one is not the widest
@given(_spans())
@settings(max_examples=400)
def test_check_disjoint_rejects_exactly_the_overlaps_that_involve_a_write(
        case: tuple[dict[str, tuple[int, int]], set[str]]) -> None:
    spans, written = case
    names = sorted(spans)
    clash = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
             if (a in written or b in written) and max(spans[a][0], spans[b][0]) < min(spans[a][1], spans[b][1])]
    if clash:
        with pytest.raises(DispatchError, match="overlapping memory") as err:
            check_disjoint(spans, written | {"unbound"}, spans_overlap)  # names not bound are skipped
        named = re.findall(r"'(b\d)'", str(err.value))
        a, b = named[:2]
        assert max(spans[a][0], spans[b][0]) < min(spans[a][1], spans[b][1]) and (a in written or b in written)
    else:
        check_disjoint(spans, written | {"unbound"}, spans_overlap)  # names not bound are skipped
