"""vyre.ops call sites (vyre/ops/_sites.py): a public op's second call with numpy arrays of the
same dtypes, shapes and arguments runs the plan its route replayed, without routing again. A
site skips the route's checks, so it must give the route's answer exactly (bits, dtype, shape,
a new array every call), remember only routes whose answer is the plan's own (or argmax's int64
indices of it), never take an array the plan cannot, follow the default backend, refuse what
the route refuses, and keep threads apart."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre.ops as vo
from tests.ops_cases import run_interleaved
from vyre.ops import OpsError
from vyre.ops import _plans as P
from vyre.ops import argreduce as A
from vyre.ops import linalg as L
from vyre.ops import reduce as R

ONE: dict[str, tuple[Callable[..., Any], Any]] = {
    "sum": (vo.sum, R._SUM_SITE), "mean": (vo.mean, R._MEAN_SITE), "max": (vo.max, R._MAX_SITE),
    "min": (vo.min, R._MIN_SITE), "norm": (vo.norm, R._NORM_SITE), "argmax": (vo.argmax, A._ARGMAX_SITE),
}
def _np_argmax(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> Any:
    """numpy's argmax, with a tuple of axes read as vyre reads it (those axes moved last and
    flattened in order)."""
    if not isinstance(axis, tuple):
        return np.argmax(x, axis=axis, keepdims=keepdims)
    axes = [a % x.ndim for a in axis]
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + axes).reshape([x.shape[a] for a in kept] + [-1])
    out = np.argmax(moved, axis=-1)
    return out.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)]) if keepdims else out


NUMPY: dict[str, Callable[..., Any]] = {
    "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "argmax": _np_argmax,
    "norm": lambda x, axis=None, keepdims=False: np.sqrt(np.sum(np.square(x.astype(np.float64)), axis=axis,
                                                                keepdims=keepdims)),
}


def _same(a: Any, b: Any) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    return (type(a) is type(b) and x.dtype == y.dtype and x.shape == y.shape
            and bool(np.array_equal(x, y, equal_nan=True)))


def _refuse(inputs: list[np.ndarray]) -> Any:
    raise AssertionError("a site ran its plan for a call it must route")


def _refusing(site: Any) -> None:
    for sig, (_, indices) in list(site.runs.items()):
        site.runs[sig] = (_refuse, indices)


@st.composite
def calls(draw: st.DrawFn) -> tuple[tuple[int, ...], Any, bool, bool]:
    shape = draw(st.sampled_from([(7,), (300,), (1, 9), (8, 8), (5, 40), (64, 3), (40, 1), (3, 4, 5), (2, 9, 12)]))
    nd = len(shape)
    axis = draw(st.sampled_from([None, *range(-nd, nd), *([(0, nd - 1)] if nd > 1 else [])]))
    return shape, axis, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=30, deadline=None)
@given(call=calls(), dt=st.sampled_from([np.float32, np.float64]), backend=st.sampled_from([None, "cpu"]),
       seed=st.integers(0, 2**31))
def test_every_route_answers_alike_first_and_later(call: tuple[tuple[int, ...], Any, bool, bool], dt: type,
                                                   backend: str | None, seed: int) -> None:
    """Any shape, axis (int, negative, tuple, None), keepdims and determinism: the later calls (a
    site's plan where the route was remembered) give the first call's answer bit for bit, as new
    arrays, and numpy's values; a signature is remembered exactly where the route answered with
    its plan's answer (the whole array or a matrix's rows or columns, without keepdims)."""
    shape, axis, keepdims, deterministic = call
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dt)
    x.flat[::3] = 0.25  # ties for argmax
    P.forget()
    for name, (op, site) in ONE.items():
        first = op(x, axis, keepdims=keepdims, backend=backend, deterministic=deterministic)
        kept = first.copy()
        later = [op(x, axis, keepdims=keepdims, backend=backend, deterministic=deterministic) for _ in range(3)]
        for got in later:
            assert _same(got, first), (name, got, first)
        if isinstance(first, np.ndarray):
            assert not any(np.shares_memory(a, b) for a in [first, *later] for b in later if a is not b), name
        assert _same(first, kept), f"{name}: a later call changed an earlier answer"
        want = NUMPY[name](x, axis=axis, keepdims=keepdims)
        if name == "argmax":
            np.testing.assert_array_equal(first, want)
            assert np.asarray(first).dtype == np.int64
        else:
            np.testing.assert_allclose(np.asarray(first, np.float64), want, rtol=2e-6 if dt is np.float32 else 1e-12,
                                       atol=1e-6)
        matrix = len(shape) == 2 and isinstance(axis, int)
        expected = not keepdims and (axis is None or (matrix and (axis % 2 == 1 or shape[1] >= 8)))
        sig = (x.dtype, x.shape, axis, keepdims, backend, deterministic)
        if expected:
            assert sig in site.runs, (name, shape, axis, keepdims)
        if sig in site.runs:
            assert site.runs[sig][1] is (name == "argmax" and isinstance(first, np.ndarray))


def _fortran(a: np.ndarray) -> np.ndarray:
    return np.asfortranarray(a)


def _strided(a: np.ndarray) -> np.ndarray:
    return np.repeat(a, 2, axis=1)[:, ::2]


def _unaligned(a: np.ndarray) -> np.ndarray:
    raw = np.frombuffer(b"\0" + a.tobytes(), dtype=np.uint8)[1:]
    return raw.view(a.dtype).reshape(a.shape)


@pytest.mark.parametrize("make", [_fortran, _strided, _unaligned])
def test_a_site_never_takes_an_array_its_plan_cannot(make: Callable[[np.ndarray], np.ndarray]) -> None:
    """An array of a remembered dtype and shape that is not C-contiguous or not aligned takes the
    route (which copies it) and gets numpy's answer."""
    a = np.random.default_rng(1).standard_normal((8, 12)).astype(np.float32)
    other = make(a)
    assert other.shape == a.shape and not (other.flags.c_contiguous and other.flags.aligned)
    P.forget()
    for _ in range(2):
        for op, _site in ONE.values():
            op(a, 0)
            op(a, 1)
            op(a)
        vo.dot(a.ravel(), a.ravel())
    for _, site in ONE.values():
        assert len(site.runs) == 3
        _refusing(site)
    _refusing(R._DOT_SITE)
    np.testing.assert_allclose(vo.sum(other, 0), a.sum(0, dtype=np.float64), rtol=1e-6)
    np.testing.assert_array_equal(vo.max(other, 1), a.max(1))
    np.testing.assert_array_equal(vo.argmax(other, 0), a.argmax(0))
    assert vo.argmax(other) == a.argmax()
    flat = make(a).reshape(-1) if make is not _strided else np.repeat(a.ravel(), 2)[::2]
    if not (flat.flags.c_contiguous and flat.flags.aligned):
        assert float(vo.dot(flat, a.ravel())) == pytest.approx(float(np.dot(a.ravel().astype(np.float64),
                                                                            a.ravel())), rel=1e-6)


def _learned_default_calls() -> tuple[list[Callable[[], Any]], list[Any], list[Any]]:
    """Calls of five sites without ``backend=``, each made twice after :func:`P.forget` (the
    second call is where a site learns): (the calls, their answers, the sites, each holding a run)."""
    a = np.linspace(-1, 2, 96, dtype=np.float32).reshape(8, 12)
    v = np.linspace(0, 1, 12, dtype=np.float32)
    cases: list[Callable[[], Any]] = [lambda: vo.sum(a, 0), lambda: vo.argmax(a, 1), lambda: vo.max(a),
                                      lambda: vo.dot(v, v), lambda: vo.matvec(a, v)]
    P.forget()
    wants = [c() for c in cases]
    assert all(_same(c(), w) for c, w in zip(cases, wants, strict=True))
    sites = [R._SUM_SITE, A._ARGMAX_SITE, R._MAX_SITE, R._DOT_SITE, L._MATVEC_SITE]
    assert all(site.runs for site in sites)
    return cases, wants, sites


def test_a_site_follows_the_default_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """A signature remembered with ``backend=None`` while the CPU was the default is routed again
    once ``VYRE_BACKEND`` names another backend (the interpreter: the same bits)."""
    cases, wants, sites = _learned_default_calls()
    for site in sites:
        _refusing(site)
    monkeypatch.setenv("VYRE_BACKEND", "interp")
    for c, w in zip(cases, wants, strict=True):
        assert _same(c(), w)


@pytest.mark.parametrize("value", ["cpu", " CPU "])
def test_a_site_runs_its_plan_when_vyre_backend_names_the_cpu(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """``VYRE_BACKEND=cpu`` makes the CPU the default as surely as having no GPU does: a
    remembered signature runs its plan without routing again (it had routed every such call,
    3-5 us each), with the route's answer."""
    from vyre.driver.backends import cuda_available, default_is_cpu

    monkeypatch.setenv("VYRE_BACKEND", value)
    assert default_is_cpu()
    cases, wants, sites = _learned_default_calls()
    ran: list[int] = []
    for site in sites:
        for sig, (run, indices) in list(site.runs.items()):
            site.runs[sig] = (lambda inputs, run=run: (ran.append(1), run(inputs))[1], indices)
    assert all(_same(c(), w) for c, w in zip(cases, wants, strict=True))
    assert len(ran) == len(cases)
    for other, cpu in [("interp", False), ("cuda", False), ("", not cuda_available())]:
        monkeypatch.setenv("VYRE_BACKEND", other)
        assert default_is_cpu() is cpu


@pytest.mark.parametrize("axis", [True, False, 1.0, np.int64(1), [1], (1,)])
def test_an_axis_that_equals_a_remembered_one_is_still_read(axis: Any) -> None:
    """``True == 1`` and ``1.0 == 1`` as dict keys: a site remembers only int (or None) axes, so a
    bool or float axis is refused as before, and numpy ints, lists and tuples take the route."""
    a = np.random.default_rng(2).standard_normal((6, 10)).astype(np.float64)
    P.forget()
    for _ in range(2):
        vo.sum(a, 1)
        vo.argmax(a, 1)
    if isinstance(axis, (bool, float, list)):
        for op in (vo.sum, vo.argmax):
            with pytest.raises(OpsError, match="Fix:"):
                op(a, axis)
        return
    np.testing.assert_allclose(vo.sum(a, axis), a.sum(1))
    np.testing.assert_array_equal(vo.argmax(a, axis), a.argmax(1))


def test_refused_calls_stay_refused_after_a_site_learned() -> None:
    a = np.ones((4, 9), np.float32)
    P.forget()
    for _ in range(2):
        vo.sum(a, 1)
        vo.dot(a[0], a[0])
        vo.matvec(a, a[0])
    for _ in range(2):
        with pytest.raises(OpsError, match="Fix:"):
            vo.sum(a, 2)
        with pytest.raises(OpsError, match="Fix:"):
            vo.dot(a[0], a[0, :5])
        with pytest.raises(OpsError, match="Fix:"):
            vo.matvec(a, a[0, :4])
        with pytest.raises(OpsError, match="Fix:"):
            vo.argmax(np.ones((0, 9), np.float32), 0)


def test_threads_learning_and_running_one_site_keep_their_answers() -> None:
    """Threads that learn one signature at once (each route watched through a thread's own record)
    and then run its plan together, each on its own array, get their own answers."""
    arrays = [np.random.default_rng(i).standard_normal((16, 40)).astype(np.float32) for i in range(6)]
    wants = [(a.argmax(0), a.max(1), a.argmax()) for a in arrays]
    wrong: list[Any] = []
    start = threading.Barrier(len(arrays))

    def work(i: int) -> None:
        start.wait()
        for _ in range(200):
            got = (vo.argmax(arrays[i], 0), vo.max(arrays[i], 1), vo.argmax(arrays[i]))
            if not all(np.array_equal(g, w) for g, w in zip(got, wants[i], strict=True)):
                wrong.append((i, got))

    P.forget()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(arrays))]
    run_interleaved(threads)
    assert not wrong, wrong[:2]
    assert len(A._ARGMAX_SITE.runs) == 2 and len(R._MAX_SITE.runs) == 1
    assert P.USED.watching == 0 and P.USED.plan is None


def test_forget_clears_every_site() -> None:
    a = np.ones((3, 8), np.float32)
    for _ in range(2):
        vo.sum(a, 0)
        vo.dot(a[0], a[0])
    assert R._SUM_SITE.runs and R._DOT_SITE.runs
    P.forget()
    assert not R._SUM_SITE.runs and not R._DOT_SITE.runs and not P._plans


def test_a_site_keeps_no_array_alive() -> None:
    """The record a site reads its route from holds the route's arrays only while it watches."""
    import weakref

    a = np.ones((5, 16), np.float64)
    P.forget()
    out = [vo.sum(a, 1) for _ in range(2)][-1]
    ref = weakref.ref(out)
    del out
    assert ref() is None and P.USED.answer is None and P.USED.inputs is None


def test_a_route_that_runs_its_plan_on_a_copy_is_not_remembered() -> None:
    """A route that hands its plan another array than the caller's (here reversed, a copy) must
    be routed every call: replaying its plan on the caller's array would answer another question."""
    from vyre.ops._sites import Site

    def reversed_argmax(x: Any, axis: Any, keepdims: Any, backend: Any, deterministic: Any) -> Any:
        return A._argmax_route(x[::-1].copy(), axis, keepdims, backend, deterministic)

    site = Site(reversed_argmax)
    x = np.arange(50, dtype=np.float32)
    P.forget()
    assert [site.one(x, None, False, None, False) for _ in range(3)] == [0, 0, 0]
    assert not site.runs
