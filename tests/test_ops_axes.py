"""vyre.ops along axes (``axis=`` / ``keepdims=``): every reduction, softmax, logsumexp and layer
norm with their gradients on arrays of rank 0-4, any axis or tuple of axes, against numpy's own
axis semantics in float64 (Hypothesis over shapes, axes and values with NaN and inf), on the CPU
and the interpreter (the simulator: tests/ops_sim_runner.py); bad axes are clear errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre.ops as vo
from tests.ops_cases import floats_array
from vyre.ops import OpsError
from vyre.ops import argreduce as A
from vyre.ops import colwise as C
from vyre.ir import F32
from vyre.ops._axes import along

#: dims of 0 and 1, and one past the CPU form's switch to lane arrays (64 columns)
DIMS = st.one_of(st.integers(0, 4), st.sampled_from([1, 70]))


@st.composite
def shaped(draw: st.DrawFn, max_rank: int = 4, special: bool = True) -> np.ndarray:
    rank = draw(st.integers(0, max_rank))
    shape = tuple(draw(st.lists(DIMS, min_size=rank, max_size=rank)))
    if np.prod(shape, dtype=np.int64) > 2000:  # keeps the interpreter quick
        shape = tuple(min(d, 4) for d in shape)
    dt = draw(st.sampled_from([np.float32, np.float64]))
    n = int(np.prod(shape, dtype=np.int64))
    return floats_array(draw, n, dt, special and draw(st.booleans())).reshape(shape)


@st.composite
def axes(draw: st.DrawFn, nd: int, allow_none: bool = True) -> Any:
    """None, one axis or a tuple of distinct axes, each as a non-negative or negative number."""
    if nd == 0:
        return None
    choice = draw(st.sampled_from(["none", "int", "tuple"] if allow_none else ["int", "tuple"]))
    if choice == "none":
        return None
    picked = draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
    signed = tuple(a - nd if draw(st.booleans()) else a for a in picked)
    return signed[0] if choice == "int" else signed


def _ref(name: str, x: np.ndarray, axis: Any, keepdims: bool) -> Any:
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        match name:
            case "sum":
                return np.sum(xd, axis, keepdims=keepdims)
            case "mean":
                reduced = range(x.ndim) if axis is None else [a % x.ndim for a in np.atleast_1d(axis)]
                count = np.prod([x.shape[a] for a in reduced], dtype=np.float64)
                return np.sum(xd, axis, keepdims=keepdims) / count  # 0 / 0 = NaN where nothing is reduced
            case "max":
                return np.max(xd, axis, keepdims=keepdims, initial=-np.inf)
            case "min":
                return np.min(xd, axis, keepdims=keepdims, initial=np.inf)
            case "norm":
                return np.sqrt(np.sum(xd * xd, axis, keepdims=keepdims))
    raise AssertionError(name)


def _close(got: Any, want: Any, x: np.ndarray, name: str) -> None:
    g = np.asarray(got, np.float64)
    assert g.shape == np.shape(want)
    if name in ("max", "min"):
        np.testing.assert_array_equal(g, want)  # exact, NaN where a NaN was reduced
        return
    mag = np.abs(np.nan_to_num(x.astype(np.float64), posinf=0, neginf=0))
    scale = 1 + (np.sqrt((mag * mag).sum()) if name == "norm" else mag.sum())
    tol = (2e-6 if x.dtype == np.float32 else 1e-13) * scale
    np.testing.assert_allclose(g, want, rtol=tol, atol=tol, equal_nan=True)


REDUCTIONS = ["sum", "mean", "max", "min", "norm"]


@pytest.mark.parametrize("backend", ["cpu", "interp"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_reductions_along_axes_match_numpy(backend: str, data: st.DataObject) -> None:
    x = data.draw(shaped())
    axis = data.draw(axes(x.ndim))
    keepdims = data.draw(st.booleans())
    for name in REDUCTIONS:
        got = getattr(vo, name)(x, axis, keepdims=keepdims, backend=backend)
        want = _ref(name, x, axis, keepdims)
        _close(got, want, x, name)
        assert np.asarray(got).dtype == x.dtype
        # a numpy scalar where numpy gives one (every axis reduced, no keepdims), else an array
        assert isinstance(got, np.ndarray) == isinstance(want, np.ndarray), (name, axis, keepdims, type(got))


def test_axis_results_are_exactly_the_row_ops() -> None:
    """Reducing the last axis of a 2-D array is row_sum / row_max, bit for bit, and moving an
    axis last first gives the same bits as the caller's own transposed copy."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 300)).astype(np.float32)
    np.testing.assert_array_equal(vo.sum(a, -1), vo.row_sum(a))
    np.testing.assert_array_equal(vo.max(a, 1), vo.row_max(a))
    b = rng.standard_normal((3, 7, 5))  # an inner extent below colwise.MIN_INNER: the rows
    moved = np.ascontiguousarray(np.moveaxis(b, 1, -1)).reshape(15, 7)
    np.testing.assert_array_equal(vo.sum(b, 1), vo.row_sum(moved).reshape(3, 5))
    front = np.ascontiguousarray(np.moveaxis(b, 1, 0)).reshape(7, 15)
    np.testing.assert_array_equal(vo.mean(b, (0, 2)), vo.mean(front, 1))


def _softmax(x: np.ndarray, axis: Any) -> np.ndarray:
    m = np.max(x, axis, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis, keepdims=True)


def _lse(x: np.ndarray, axis: Any, keepdims: bool = False) -> np.ndarray:
    m = np.max(x, axis, keepdims=True)
    s = np.log(np.exp(x - m).sum(axis, keepdims=True)) + m
    return s if keepdims else np.squeeze(s, axis)


def _layer_norm(x: np.ndarray, axis: Any, eps: float) -> np.ndarray:
    mu = x.mean(axis, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis, keepdims=True) + eps)


@pytest.mark.parametrize("backend", ["cpu", "interp"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_row_ops_along_axes_match_numpy(backend: str, data: st.DataObject) -> None:
    """softmax, logsumexp, layer_norm and their gradients along any axes of finite arrays with
    something to reduce (the special rows' rules: tests/test_ops_rows.py)."""
    x = data.draw(shaped(special=False).filter(lambda a: a.ndim > 0 and a.size > 0))
    axis = data.draw(axes(x.ndim, allow_none=False))
    xd = x.astype(np.float64)
    tol = 2e-5 if x.dtype == np.float32 else 1e-11
    close = {"rtol": tol, "atol": tol}
    y, lse = vo.softmax(x, axis, backend=backend, return_lse=True)
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_allclose(y, _softmax(xd, axis), **close)
    np.testing.assert_allclose(lse, _lse(xd, axis), **close)
    np.testing.assert_allclose(vo.logsumexp(x, axis, backend=backend), _lse(xd, axis), **close)
    kd = vo.logsumexp(x, axis, keepdims=True, backend=backend)
    assert kd.shape == _lse(xd, axis, True).shape
    ln, mean, rstd = vo.layer_norm(x, 1e-5, axis, backend=backend, return_stats=True)
    assert ln.shape == x.shape and np.shape(mean) == np.shape(lse)
    np.testing.assert_allclose(ln, _layer_norm(xd, axis, 1e-5), rtol=tol * 50, atol=tol * 50)

    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    g = rng.standard_normal(x.shape).astype(x.dtype)
    gr = rng.standard_normal(np.shape(lse)).astype(x.dtype)
    sm = _softmax(xd, axis)
    np.testing.assert_allclose(vo.softmax_grad(y, g, axis, backend=backend),
                               sm * (g - (g * sm).sum(axis, keepdims=True)), rtol=tol * 10, atol=tol * 10)
    keep = _lse(xd, axis, True)
    np.testing.assert_allclose(vo.logsumexp_grad(x, lse, gr, axis, backend=backend),
                               np.reshape(gr, keep.shape) * np.exp(xd - keep), rtol=tol * 10, atol=tol * 10)
    # the statistics of the keepdims shape are taken too
    mu_k = np.reshape(mean, keep.shape).astype(np.float64)
    rs_k = np.reshape(rstd, keep.shape).astype(np.float64)
    xh = (xd - mu_k) * rs_k
    want = rs_k * (g - g.mean(axis, keepdims=True) - xh * (g * xh).mean(axis, keepdims=True))
    np.testing.assert_allclose(vo.layer_norm_grad(x, g, np.reshape(mean, keep.shape), rstd, axis, backend=backend),
                               want, rtol=tol * 200, atol=tol * 200)


def test_one_dimensional_row_ops() -> None:
    """A 1-D array is one row: softmax keeps its shape, logsumexp is a numpy scalar."""
    v = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(vo.softmax(v), _softmax(v, -1))
    s = vo.logsumexp(v)
    assert isinstance(s, np.float64) and s == pytest.approx(_lse(v, -1))
    y, lse = vo.softmax(v, return_lse=True)
    np.testing.assert_allclose(vo.logsumexp_grad(v, lse, np.float64(2.0)), 2 * y)


def test_keepdims_of_whole_reductions() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got = vo.sum(x, keepdims=True)
    assert isinstance(got, np.ndarray) and got.shape == (1, 1, 1) and got.dtype == np.float32 and got[0, 0, 0] == 276
    assert vo.max(x, (0, 1, 2), keepdims=True).shape == (1, 1, 1)
    assert vo.sum(x, (2, 0, 1)) == 276  # every axis, in any order: the whole array
    assert vo.argmax(x, (0, 1, 2)) == 23 and vo.argmax(x[0, 0], -1) == 3
    for axis in (None, (0, 1, 2), 1):  # argmax's keepdims, as numpy's
        want = np.argmax(x, None if isinstance(axis, tuple) else axis, keepdims=True)
        got = vo.argmax(x, axis, keepdims=True)
        assert got.shape == want.shape and got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
    # the row ops' axis=None is every axis, as scipy.special's: one row of the whole array
    np.testing.assert_allclose(vo.softmax(x, None), _softmax(x.astype(np.float64), None), rtol=1e-6)
    assert vo.logsumexp(x, None) == pytest.approx(float(_lse(x.astype(np.float64), None)), rel=1e-6)


def test_bad_axes_equal_to_good_ones_are_still_errors() -> None:
    """1.0, True and (0, 1.0) equal 1 and (0, 1) as dict keys: after the good axes were read (and
    cached), the bad ones are still errors, for every op that reads axes."""
    x = np.ones((2, 3, 4), np.float32)
    for good, bad in ((1, 1.0), (1, True), (0, False), ((0, 1), (0, 1.0)), ((0, 1), (False, 1))):
        for op in (vo.sum, vo.argmax, vo.softmax, vo.logsumexp):
            op(x, good)
            with pytest.raises(OpsError, match=r"axis must be an int, a tuple of ints or None.*Fix:"):
                op(x, bad)
    assert vo.sum(x, np.int64(1)).shape == (2, 4)  # a numpy integer is an axis


@pytest.mark.parametrize("call, match", [
    (lambda x: vo.sum(x, 3), r"axis 3 is out of range .*\(3 axes\)\. Fix: pass an axis in \[-3, 2\]"),
    (lambda x: vo.max(x, -4), r"axis -4 is out of range"),
    (lambda x: vo.mean(x, (0, -3)), r"names axis 0 of x twice\. Fix:"),
    (lambda x: vo.min(x, 1.0), r"axis must be an int, a tuple of ints or None, got 1\.0\. Fix:"),
    (lambda x: vo.norm(x, True), r"axis must be an int"),
    (lambda x: vo.sum(x, [0, 1]), r"axis must be an int"),
    (lambda x: vo.softmax(x, [0]), r"axis must be an int"),
    (lambda x: vo.argmax(x[:, :0], 1), r"argmax along an axis of length 0 has no answer\. Fix:"),
    (lambda x: vo.softmax_grad(x, x[0], 1), r"g has shape \(3, 4\) but the output has \(2, 3, 4\)\. Fix:"),
    (lambda x: vo.logsumexp_grad(x, np.zeros((2, 3)), np.zeros((2, 4)), 2),
     r"g has shape \(2, 4\), expected \(2, 3\) .*Fix:"),
    (lambda x: vo.layer_norm_grad(x, x, np.zeros(3), np.zeros((2, 3)), 2), r"mean has shape \(3,\), expected"),
    (lambda x: vo.sum(np.zeros(()), 0), r"0-d .* has no axis 0\. Fix: pass axis=None"),
])
def test_bad_axes_are_clear_errors(call: Any, match: str) -> None:
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    before = x.copy()
    with pytest.raises(OpsError, match=match):
        call(x)
    np.testing.assert_array_equal(x, before)


def _moved(x: np.ndarray, axis: Any) -> np.ndarray:
    """``x`` with the axes of ``axis`` moved last (in increasing order) and flattened into one."""
    axes = sorted(a % x.ndim for a in (axis if isinstance(axis, tuple) else (axis,)))
    kept = [a for a in range(x.ndim) if a not in axes]
    return np.transpose(x, kept + axes).reshape([x.shape[a] for a in kept] + [-1])


@pytest.mark.parametrize("backend", ["cpu", "interp"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_argmax_along_axes_matches_numpy(backend: str, data: st.DataObject) -> None:
    """numpy's rule per row: the first NaN, else the first of tied maxima (small integers make
    ties); a tuple of axes indexes them flattened in order."""
    x = data.draw(shaped().filter(lambda a: a.ndim > 0 and a.size > 0))
    if data.draw(st.booleans()):
        x = np.round(x * 2) if np.isfinite(x).all() else x  # ties
    axis = data.draw(axes(x.ndim, allow_none=False))
    if data.draw(st.booleans()):  # keepdims: numpy's shape, each reduced axis of length 1
        got = vo.argmax(x, axis, keepdims=True, backend=backend)
        named = sorted(a % x.ndim for a in (axis if isinstance(axis, tuple) else (axis,)))
        want = np.argmax(_moved(x, axis), -1).reshape([1 if a in named else d for a, d in enumerate(x.shape)])
        assert got.dtype == np.int64 and got.shape == want.shape
        if not isinstance(axis, tuple):
            assert got.shape == np.argmax(x, axis, keepdims=True).shape
        np.testing.assert_array_equal(got, want)
        return
    got = vo.argmax(x, axis, backend=backend)
    want = np.argmax(_moved(x, axis), -1)
    if want.ndim == 0:  # every axis named: the whole-array index
        assert isinstance(got, np.int64) and got == want
        return
    assert got.dtype == np.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cols", [1, 2, 31, 33, 64, 65, 257, 1500, 4097])
@pytest.mark.parametrize("backend, gpu_form", [("cpu", None), ("interp", None), ("interp", True)])
def test_row_argmax_forms(cols: int, backend: str, gpu_form: bool | None) -> None:
    """Both program forms (the GPU form: one workgroup per row, resident and looping, the lowest
    index across subgroups and the workgroup) against numpy, with a NaN, ties across invocations
    and an all -inf row."""
    rng = np.random.default_rng(cols)
    x = np.round(rng.standard_normal((4, cols)) * 2).astype(np.float32)
    x[1, cols // 2] = np.nan
    x[1, cols - 1] = np.nan
    x[2] = -np.inf
    x[3, ::7] = 9.0  # ties, the first in invocation 0
    got = A._row_argmax(x, backend, gpu_form)
    np.testing.assert_array_equal(np.asarray(got).astype(np.int64), np.argmax(x, -1))
    assert A._row_argmax(x[:0], backend, gpu_form).shape == (0,)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_cpu_row_argmax_one_pass(data: st.DataObject) -> None:
    """The CPU row argmax's one pass (lane slots, the last partial step taken as a whole one that
    revisits columns, the lanes' merge, the NaN and all -inf rules) over row lengths around the
    lane count, from values that tie often and hold NaN and infinities where the steps overlap."""
    rows = data.draw(st.integers(1, 3))
    cols = data.draw(st.one_of(st.integers(1, 200), st.sampled_from([63, 64, 65, 127, 128, 129, 191])))
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    pool = st.sampled_from([-np.inf, -1.0, 0.0, 2.0, 3.0, np.inf, np.nan])
    x = np.array(data.draw(st.lists(pool, min_size=rows * cols, max_size=rows * cols)), dt).reshape(rows, cols)
    if data.draw(st.booleans()):
        x[np.isnan(x)] = 0.0  # no NaN, so the lanes decide
    if data.draw(st.booleans()):  # the maximum (tied or not) past the last whole step of 64 columns
        x[~(x < 3.0)] = 0.0
        for c in data.draw(st.lists(st.integers(cols - cols % 64 if cols % 64 else 0, cols - 1), min_size=1)):
            x[:, c] = 3.0
    got = A._row_argmax(x, "cpu")
    np.testing.assert_array_equal(np.asarray(got).astype(np.int64), np.argmax(x, -1))


@pytest.mark.parametrize("kind, dtypes", [("max", [np.float32]), ("min", [np.float64]),
                                          ("argmax", [np.float32, np.float64])])
@settings(max_examples=20, deadline=None)
@given(outer=st.integers(1, 3), red=st.sampled_from([1, 2, 7]),
       inner=st.sampled_from([127, 128, 255, 256, 300, 511, 512, 513, 700, 1030]), data=st.data())
def test_column_forms_of_every_block_width(kind: str, dtypes: list[type], outer: int, red: int, inner: int,
                                           data: st.DataObject) -> None:
    """max, min and argmax take blocks of 64, 128 or 256 columns (the widest leaving two blocks,
    C.cpu_block): each width, its last partial block and the widths' thresholds, against numpy on
    the CPU (NaN, inf and ties; the interpreter runs one small case of each width). max and min
    share their code but for the combine, so each takes one dtype (every kernel is a compile)."""
    width = C.cpu_block(kind, inner)
    assert width == max([64] + [w for w in (64, 128, 256) if inner >= 2 * w])
    dt = data.draw(st.sampled_from(dtypes))
    x = floats_array(data.draw, outer * red * inner, dt, data.draw(st.booleans())).reshape(outer, red, inner)
    if kind == "argmax" and np.isfinite(x).all():
        x = np.round(x)  # ties
    backends = ["cpu"] + (["interp"] if outer * red == 1 and inner in (256, 512) else [])
    for backend in backends:
        got = np.asarray(C._columns(kind, x, (outer, red, inner), backend)).reshape(outer, inner)
        want = getattr(np, kind)(x, 1)
        np.testing.assert_array_equal(got, want)


def test_a_column_form_refuses_a_width_it_has_not() -> None:
    with pytest.raises(ValueError, match="Fix: pass cpu_block"):
        C.col_program("max", F32, 96)
    with pytest.raises(ValueError, match="Fix: pass cpu_block"):
        C.col_program("sum", F32, 256)


@pytest.mark.parametrize("kind", C.COL_KINDS)
@pytest.mark.parametrize("backend, gpu_form", [("cpu", None), ("interp", None), ("interp", True)])
@settings(max_examples=8, deadline=None)
@given(outer=st.integers(0, 3), red=st.sampled_from([0, 1, 2, 5, 33]),
       inner=st.sampled_from([8, 9, 16, 17, 63, 64, 65, 130]), data=st.data())
def test_column_forms(kind: str, backend: str, gpu_form: bool | None, outer: int, red: int, inner: int,
                      data: st.DataObject) -> None:
    """Both column forms (vyre.ops.colwise: the reduced axes before a run of kept ones, no
    transpose) against numpy over axis 1 of (outer, red, inner): blocks of 64 columns and their
    tails; the GPU form's tiles of 8, 16 and 32 columns and their tails, its unrolled steps and their tail,
    its row splits and the passes merging them; NaN, inf and ties."""
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    x = floats_array(data.draw, outer * red * inner, dt, data.draw(st.booleans())).reshape(outer, red, inner)
    # the GPU form's row splits: one, or several (then a pass merging them: splits of 1-3 rows of 33)
    split_rows = data.draw(st.sampled_from([None, 1, 2, 3])) if gpu_form else None
    if kind == "argmax":
        x = np.round(x) if np.isfinite(x).all() else x  # ties
        if red == 0:
            if outer:
                with pytest.raises(OpsError, match="length 0"):
                    C._columns(kind, x, (outer, red, inner), backend, gpu_form, split_rows)
            return
    got = np.asarray(C._columns(kind, x, (outer, red, inner), backend, gpu_form, split_rows)).reshape(outer, inner)
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if kind == "argmax":
            np.testing.assert_array_equal(got, np.argmax(x, 1))
        elif kind in ("max", "min"):
            want = np.max(xd, 1, initial=-np.inf) if kind == "max" else np.min(xd, 1, initial=np.inf)
            np.testing.assert_array_equal(got, want)
        else:
            want = {"sum": xd.sum(1), "mean": xd.sum(1) / red, "norm": np.sqrt((xd * xd).sum(1))}[kind]
            mag = np.abs(np.nan_to_num(xd, posinf=0, neginf=0))
            scale = 1 + (np.sqrt((mag * mag).sum()) if kind == "norm" else mag.sum())
            tol = (2e-6 if dt == np.float32 else 1e-13) * scale
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
            assert got.dtype == dt


@pytest.mark.parametrize("kind", C.COL_KINDS)
@pytest.mark.parametrize("outer, red, inner, split_rows", [(2, 33, 8, 2), (1, 70, 40, 3), (3, 9, 33, 1),
                                                           (2, 40, 16, 5), (1, 20, 13, 2)])
def test_gpu_column_form_over_several_passes(kind: str, outer: int, red: int, inner: int, split_rows: int) -> None:
    """The GPU form's row splits and the pass merging them on the interpreter, f32 and
    f64, with NaN, ties and a column of -inf only (argmax: its first row): mean divides once, by
    the rows of the axis; argmax's rows come through the partials."""
    assert len(C.gpu_passes(outer, red, inner, split_rows)) >= 2
    rng = np.random.default_rng(red)
    for dt in (np.float32, np.float64):
        x = np.round(rng.standard_normal((outer, red, inner)) * 2).astype(dt)
        x[0, red // 2, 3] = np.nan
        x[-1, :, 5] = -np.inf
        got = np.asarray(C._columns(kind, x, (outer, red, inner), "interp", True, split_rows)).reshape(outer, inner)
        xd = x.astype(np.float64)
        with np.errstate(all="ignore"):
            want = {"sum": xd.sum(1), "mean": xd.mean(1), "norm": np.sqrt((xd * xd).sum(1)), "max": xd.max(1),
                    "min": xd.min(1), "argmax": np.argmax(x, 1)}[kind]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5, equal_nan=True)


@settings(max_examples=200, deadline=None)
@given(outer=st.integers(0, 5000), red=st.integers(0, 10**7), inner=st.integers(C.MIN_INNER, 10**6),
       min_rows=st.sampled_from([1, 2, 7, C.SPLIT_MIN_ROWS]))
def test_gpu_column_passes(outer: int, red: int, inner: int, min_rows: int) -> None:
    """The GPU form's passes: fixed by the shape alone (no device in it, so the bits are the same
    on every GPU); the row splits (at most MAX_SPLITS, and ceil(rows / min_rows)), then where
    there are several one pass that merges them, reading their partials as (1, splits, outer *
    inner)."""
    passes = C.gpu_passes(outer, red, inner, min_rows)
    (o, r, i, s), *rest = passes
    assert (o, r, i) == (outer, red, inner)
    assert 1 <= s <= min(C.MAX_SPLITS, max(1, -(-red // min_rows)))
    assert rest == ([(1, s, outer * inner, 1)] if s > 1 else [])


def test_column_and_row_paths_agree() -> None:
    """The column forms and the rows (a transposed copy) give one answer: exactly for max, min and
    argmax, within rounding for sums; the column path is what sum(a, 0) takes."""
    rng = np.random.default_rng(11)
    a = np.round(rng.standard_normal((300, 40)) * 3).astype(np.float32)
    a[17, 5] = np.nan
    assert C.column_block(along(a, 0)) == (1, 300, 40)
    moved = np.ascontiguousarray(a.T)
    np.testing.assert_array_equal(vo.max(a, 0), vo.row_max(moved))
    np.testing.assert_array_equal(vo.argmax(a, 0), np.argmax(moved, 1))
    np.testing.assert_allclose(vo.sum(a, 0), vo.row_sum(moved), rtol=1e-6)
