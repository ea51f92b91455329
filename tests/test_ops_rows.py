"""vyre.ops row-wise ops and matvec on the interpreter and the CPU (both program forms) against
numpy in float64: Hypothesis over shapes and values, including NaN and inf rows; the gradient
programs against the analytic formulas and float64 central differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre.ops as vo
from tests.ops_cases import check_sum, floats_array
from vyre.ops import linalg as L
from vyre.ops import rowwise as W
from vyre.ops._rows import LANES_MIN_COLS, LANES_MIN_COLS_COSTLY

FORMS = [("cpu", None), ("interp", None), ("interp", True)]
SHAPES = st.tuples(st.integers(0, 5), st.one_of(st.sampled_from([0, 1, 7, 31, 32, 33, 255, 257, 1025]),
                                                   st.integers(0, 600)))


def _ref_softmax(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        m = np.max(x, -1, keepdims=True) if x.shape[1] else np.zeros((x.shape[0], 1))
        e = np.exp(x - m)
        return e / e.sum(-1, keepdims=True)


def _ref_lse(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        m = np.max(x, -1) if x.shape[1] else np.full(x.shape[0], -np.inf)
        ms = np.where(np.isfinite(m), m, 0.0)
        return ms + np.log(np.exp(x - ms[:, None]).sum(-1))


@st.composite
def matrices(draw: st.DrawFn, special: bool = True) -> np.ndarray:
    r, c = draw(SHAPES)
    dt = draw(st.sampled_from([np.float32, np.float64]))
    return floats_array(draw, r * c, dt, special and draw(st.booleans())).reshape(r, c)


def _close(got: np.ndarray, want: np.ndarray, dt: np.dtype, scale: float = 1.0) -> None:
    tol = (2e-5 if dt == np.float32 else 1e-12) * scale
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("backend, gpu_form", FORMS)
@settings(max_examples=10)
@given(x=matrices())
def test_row_reductions(backend: str, gpu_form: bool | None, x: np.ndarray) -> None:
    xd = x.astype(np.float64)
    got_sum = W._row_reduce("sum", x, backend, gpu_form)
    assert got_sum.dtype == x.dtype and got_sum.shape == (x.shape[0],)
    with np.errstate(all="ignore"):
        _close(got_sum, xd.sum(-1), x.dtype, 1 + np.abs(np.nan_to_num(xd)).sum(-1).max(initial=0))
        want_max = np.max(xd, -1) if x.shape[1] else np.full(x.shape[0], -np.inf)
    np.testing.assert_array_equal(W._row_reduce("max", x, backend, gpu_form), want_max)
    with np.errstate(all="ignore"):
        want_min = np.min(xd, -1) if x.shape[1] else np.full(x.shape[0], np.inf)
        scale = 1 + np.abs(np.nan_to_num(xd)).sum(-1).max(initial=0)
        _close(W._row_reduce("mean", x, backend, gpu_form), xd.sum(-1) / x.shape[1], x.dtype,
               scale / max(1, x.shape[1]))
        _close(W._row_reduce("norm", x, backend, gpu_form), np.sqrt((xd * xd).sum(-1)), x.dtype,
               1 + np.sqrt((np.nan_to_num(xd) ** 2).sum(-1)).max(initial=0))
    np.testing.assert_array_equal(W._row_reduce("min", x, backend, gpu_form), want_min)
    _close(W._row_reduce("lse", x, backend, gpu_form), _ref_lse(xd), x.dtype, 4)


#: around the CPU form's switches to lane arrays (logsumexp's sum of exponentials from
#: LANES_MIN_COLS_COSTLY columns, the other reductions from LANES_MIN_COLS), and across its steps
#: of 256, 128 and the tail
LANE_SHAPES = st.tuples(st.integers(1, 3), st.one_of(
    st.sampled_from([LANES_MIN_COLS_COSTLY - 1, LANES_MIN_COLS_COSTLY, 100, LANES_MIN_COLS - 1, LANES_MIN_COLS,
                     255, 256, 257, 383, 384, 513]), st.integers(0, 700)))


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(a, b, equal_nan=True), (a, b)
    assert np.array_equal(np.signbit(a) | np.isnan(a), np.signbit(b) | np.isnan(b))


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_cpu_form_is_bit_identical_on_cpu_and_interpreter(data: st.DataObject) -> None:
    """The CPU form (lane arrays from LANES_MIN_COLS columns, accumulators below) runs the same
    program on both backends: fixed order, so the results agree bit for bit, NaN and inf rows too."""
    r, c = data.draw(LANE_SHAPES)
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    x = floats_array(data.draw, r * c, dt, data.draw(st.booleans())).reshape(r, c)
    for f in (vo.row_sum, vo.row_max, vo.logsumexp):
        _same_bits(f(x, backend="cpu"), f(x, backend="interp"))
    for f2 in (lambda x, b: vo.softmax(x, backend=b, return_lse=True),
               lambda x, b: vo.layer_norm(x, backend=b, return_stats=True)):
        for got, want in zip(f2(x, "cpu"), f2(x, "interp"), strict=True):
            _same_bits(got, want)


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_row_sum_is_within_the_documented_bound(data: st.DataObject) -> None:
    """Each row's sum against ``math.fsum`` within docs/ops.md's bound (f32 rounds the f64 sum once;
    f64 within ``chain_bound(cols) 2^-53 sum|x|``), through the lane arrays and the accumulators."""
    r, c = data.draw(LANE_SHAPES)
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    x = floats_array(data.draw, r * c, dt, data.draw(st.booleans())).reshape(r, c)
    got = vo.row_sum(x, backend="cpu")
    for i in range(r):
        check_sum(float(got[i]), x[i])


@pytest.mark.parametrize("backend, gpu_form", FORMS)
@settings(max_examples=10)
@given(x=matrices())
def test_softmax_and_layer_norm(backend: str, gpu_form: bool | None, x: np.ndarray) -> None:
    xd = x.astype(np.float64)
    y, lse = vo.softmax(x, backend=backend, return_lse=True, _gpu_form=gpu_form)
    assert y.shape == x.shape and y.dtype == x.dtype
    _close(y, _ref_softmax(xd), x.dtype, 4)
    lse_want = _ref_lse(xd)
    if x.shape[1]:  # softmax shifts by the max itself: NaN where it is infinite
        lse_want[~np.isfinite(np.max(xd, -1))] = np.nan
    _close(lse, lse_want, x.dtype, 4)
    ln, mu, rs = vo.layer_norm(x, backend=backend, return_stats=True, _gpu_form=gpu_form)
    assert ln.shape == x.shape
    if x.shape[1] and np.all(np.isfinite(x)):
        ref = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5)
        _close(ln, ref, x.dtype, 50)
        _close(mu, xd.mean(-1), x.dtype, 1 + float(np.abs(xd).max(initial=0)))
        _close(rs, 1 / np.sqrt(xd.var(-1) + 1e-5), x.dtype, 50 * (1 + float(np.max(rs, initial=0))))
    elif x.shape[1]:
        bad = ~np.all(np.isfinite(x), axis=-1)
        assert np.all(np.isnan(ln[bad]))  # a row with NaN or inf normalises to NaN


@pytest.mark.parametrize("backend, gpu_form", FORMS)
@settings(max_examples=8)
@given(x=matrices(special=False), data=st.data())
def test_gradient_programs_match_the_formulas(backend: str, gpu_form: bool | None, x: np.ndarray,
                                              data: st.DataObject) -> None:
    r, c = x.shape
    g = floats_array(data.draw, r * c, x.dtype.type, False).reshape(r, c)
    gr = floats_array(data.draw, r, x.dtype.type, False)
    xd, gd = x.astype(np.float64), g.astype(np.float64)
    y = vo.softmax(x, backend=backend, _gpu_form=gpu_form)
    yd = y.astype(np.float64)
    _close(vo.softmax_grad(y, g, backend=backend, _gpu_form=gpu_form),
           yd * (gd - (gd * yd).sum(-1, keepdims=True)), x.dtype, 8 * (1 + c))
    lse = vo.logsumexp(x, backend=backend)
    _close(vo.logsumexp_grad(x, lse, gr, backend=backend, _gpu_form=gpu_form),
           gr[:, None] * _ref_softmax(xd), x.dtype, 8)
    _, mu, rs = vo.layer_norm(x, backend=backend, return_stats=True)
    xh = (xd - mu[:, None].astype(np.float64)) * rs[:, None]
    want = rs[:, None] * (gd - gd.mean(-1, keepdims=True) - xh * (gd * xh).mean(-1, keepdims=True))
    _close(vo.layer_norm_grad(x, g, mu, rs, backend=backend, _gpu_form=gpu_form), want, x.dtype,
           50 * (1 + float(np.max(np.abs(rs), initial=0))))


def _fd_check(f, x: np.ndarray, g: np.ndarray, dx: np.ndarray, rtol: float = 1e-6) -> None:
    """<g, f(x + h v) - f(x - h v)> / 2h against <dx, v> along random directions (float64)."""
    rng = np.random.default_rng(3)
    for _ in range(3):
        v = rng.standard_normal(x.shape)
        h = 1e-6 * max(1.0, float(np.abs(x).max(initial=0)))
        fd = (np.sum(g * f(x + h * v)) - np.sum(g * f(x - h * v))) / (2 * h)
        ad = float(np.sum(dx * v))
        assert abs(fd - ad) <= rtol * max(abs(fd), abs(ad), 1e-8) + 1e-9, (fd, ad)


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_gradients_against_central_differences(backend: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 70))
    g = rng.standard_normal((3, 70))
    gr = rng.standard_normal(3)
    y = vo.softmax(x, backend=backend)
    _fd_check(lambda a: vo.softmax(a, backend=backend), x, g, vo.softmax_grad(y, g, backend=backend))
    lse = vo.logsumexp(x, backend=backend)
    _fd_check(lambda a: vo.logsumexp(a, backend=backend), x, gr, vo.logsumexp_grad(x, lse, gr, backend=backend))
    _, mu, rs = vo.layer_norm(x, backend=backend, return_stats=True)
    _fd_check(lambda a: vo.layer_norm(a, backend=backend), x, g, vo.layer_norm_grad(x, g, mu, rs, backend=backend),
              1e-5)
    m, v = rng.standard_normal((5, 70)), rng.standard_normal(70)
    gm, gv = vo.matvec_grad(m, v, gr[:1].repeat(5), backend=backend)
    _fd_check(lambda a: vo.matvec(a, v, backend=backend), m, gr[:1].repeat(5), gm)
    _fd_check(lambda a: vo.matvec(m, a, backend=backend), v, gr[:1].repeat(5), gv)


def test_special_rows_follow_the_documented_rules() -> None:
    x = np.array([[1.0, math.inf, 2.0], [-math.inf, -math.inf, -math.inf], [1.0, math.nan, 0.0],
                  [3.0, -math.inf, 1.0]], np.float32)
    y = vo.softmax(x, backend="cpu")
    assert np.all(np.isnan(y[:3]))  # a +inf, only -inf, a NaN: NaN throughout (as PyTorch)
    assert y[3, 1] == 0 and abs(y[3].sum() - 1) < 1e-6
    lse = vo.logsumexp(x, backend="cpu")
    assert lse[0] == math.inf and lse[1] == -math.inf and math.isnan(lse[2]) and math.isfinite(lse[3])
    mx = vo.row_max(x, backend="cpu")
    assert mx[0] == math.inf and mx[1] == -math.inf and math.isnan(mx[2])
    assert np.all(vo.row_sum(np.zeros((2, 0), np.float32), backend="cpu") == 0)
    assert vo.softmax(np.zeros((0, 4)), backend="cpu").shape == (0, 4)


@pytest.mark.parametrize("backend, gpu_form", FORMS)
@settings(max_examples=10)
@given(data=st.data())
def test_matvec(backend: str, gpu_form: bool | None, data: st.DataObject) -> None:
    r, c = data.draw(st.tuples(st.integers(0, 20), st.integers(0, 300)))
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    sp = data.draw(st.booleans())
    m = floats_array(data.draw, r * c, dt, sp).reshape(r, c)
    v = floats_array(data.draw, c, dt, False)
    got = L.matvec(m, v, backend=backend, _gpu_form=gpu_form)
    assert got.shape == (r,) and got.dtype == dt
    with np.errstate(all="ignore"):
        want = (m.astype(np.float64) * v.astype(np.float64)).sum(-1)  # IEEE specials, no BLAS shortcuts
        finite = np.nan_to_num(m.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        mag = np.abs(finite) @ np.abs(v.astype(np.float64))
    _close(got, want, np.dtype(dt), 1 + float(mag.max(initial=0)))  # NaN/inf positions must agree


@pytest.mark.parametrize("backend", ["cpu", "interp"])
@pytest.mark.parametrize("shape", [(700, 40), (3, 8193), (9000, 1), (5, 0), (33, 255), (6, 256)])
def test_matvec_cpu_form_blocks(backend: str, shape: tuple[int, int]) -> None:
    """The CPU form's blocks of rows (cpu_rows_per_block: several per block, one per block past
    CPU_BLOCK columns, a partial last block) and its lane array's tail (cols % _grouped.CPU_LANES)."""
    r, c = shape
    rng = np.random.default_rng(r * 31 + c)
    m = rng.standard_normal((r, c)).astype(np.float32)
    v = rng.standard_normal(c).astype(np.float32)
    if c:
        m[r // 2, c - 1] = np.nan  # lands in a tail lane when c % CPU_LANES, else in the last lane
    got = L.matvec(m, v, backend=backend, _gpu_form=False)
    with np.errstate(all="ignore"):
        want = (m.astype(np.float64) * v.astype(np.float64)).sum(-1)
    mag = np.abs(np.nan_to_num(m.astype(np.float64))) @ np.abs(v.astype(np.float64))
    _close(got, want, np.dtype(np.float32), 1 + float(mag.max(initial=0)))


@settings(max_examples=8)
@given(data=st.data())
def test_matvec_gpu_form_knobs(data: st.DataObject) -> None:
    """The GPU form's launch knobs (rows per subgroup, columns per lane and step, workgroup size)
    change the partition only: several rows per subgroup with a last subgroup past the end (its
    spare rows read the last row and store nothing), a tail step, an inf past a row's end."""
    from vyre.driver.dispatch import dispatch
    from vyre.ir import F64

    nr, u, wg = data.draw(st.sampled_from([(1, 8, 256), (2, 4, 64), (3, 2, 64), (4, 4, 128)]))
    r, c = data.draw(st.tuples(st.integers(1, 13), st.integers(1, 140)))
    m = np.asarray(data.draw(st.lists(st.floats(-4, 4), min_size=r * c, max_size=r * c))).reshape(r, c)
    v = np.asarray(data.draw(st.lists(st.floats(-4, 4), min_size=c, max_size=c)))
    if r > 1:
        m[1, 0] = math.inf  # row 0's tail step reads it past its end: must not give inf * 0 = NaN there
    prog = L.matvec_program(F64, gpu=True, rows=nr, unroll=u, wg=wg)
    got = dispatch(prog, {"m": m.reshape(-1), "v": v, "out": np.zeros(r)}, backend="interp",
                   grid=-(-r // (wg // 32 * nr)))["out"]
    with np.errstate(all="ignore"):
        want = (m * v).sum(-1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eps", [np.float32(1e-3), np.float64(1e-3), np.int64(0), 1, 0.0, 10**3])
def test_layer_norm_takes_eps_as_any_real_number(eps) -> None:
    """numpy scalars (a float32 eps from a config of float32s) and ints are eps as much as floats
    (the interpreter: each eps is a program of its own, a compile each on the CPU)."""
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + float(eps))
    np.testing.assert_allclose(vo.layer_norm(x, eps=eps, backend="interp"), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("eps", [-1.0, np.float32(-1), math.inf, math.nan, 10**400, True, np.bool_(True), "1e-5",
                                 None, np.ones(1)])
def test_layer_norm_refuses_an_eps_that_is_no_finite_real_number_at_least_0(eps) -> None:
    with pytest.raises(vo.OpsError, match=r"eps must be .*Fix: pass e\.g\. eps=1e-5"):
        vo.layer_norm(np.zeros((2, 3)), eps=eps, backend="cpu")


@pytest.mark.parametrize("call", [
    lambda x, g: vo.softmax_grad(x, g, 1, backend="cpu"),
    lambda x, g: vo.softmax_grad(x, g, backend="cpu"),
    lambda x, g: vo.logsumexp_grad(x, g, np.zeros((2, 4)), 1, backend="cpu"),
    lambda x, g: vo.layer_norm_grad(x, g, np.ones(2), np.ones(2), (1, 2), backend="cpu"),
])
def test_a_cotangent_that_is_no_array_says_so_on_every_axis(call) -> None:
    """A list cotangent is refused as a list (what to pass instead), not as an array of shape ()."""
    x = np.random.default_rng(2).random((2, 3, 4))
    with pytest.raises(vo.OpsError, match=r"takes numpy arrays.*got list.*Fix: pass np\.asarray"):
        call(x, x.tolist())


def test_bad_shapes_are_clear_errors() -> None:
    with pytest.raises(vo.OpsError, match="2-D"):
        vo.row_sum(np.zeros(4), backend="cpu")
    with pytest.raises(vo.OpsError, match=r"0-d .*Fix"):
        vo.softmax(np.zeros(()), backend="cpu")  # a 1-D array is one row (tests/test_ops_axes.py)
    with pytest.raises(vo.OpsError, match="Fix: pass m of shape"):
        vo.matvec(np.zeros((3, 4)), np.zeros(5), backend="cpu")
    with pytest.raises(vo.OpsError, match="cotangent"):
        vo.softmax_grad(np.zeros((2, 3)), np.zeros((3, 2)), backend="cpu")
    with pytest.raises(vo.OpsError, match="eps"):
        vo.layer_norm(np.zeros((2, 3)), eps=-1.0, backend="cpu")
    with pytest.raises(vo.OpsError, match="statistics"):
        vo.layer_norm_grad(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(3), np.zeros(2), backend="cpu")


@settings(max_examples=12, deadline=None)
@given(shape=st.sampled_from([(913, 8), (5, 9), (4, 16), (2000, 31), (3, 255), (1, 17), (700, 100), (7, 256),
                              (9, 7)]),
       dt=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**31),
       special=st.sampled_from([None, np.nan, np.inf, -np.inf]))
def test_short_row_sums_in_groups(shape: tuple[int, int], dt: type, seed: int, special: float | None) -> None:
    """Row sums, means and norms of rows of 8-255 columns run in groups of rows (vyre.ops._grouped:
    blocks of cpu_rows_per_block rows, four at a time, 16 lanes a row, a tail of ``cols % 16``):
    every row within the f64 bound of docs/ops.md (f32 rounded once), specials in a step's or the
    tail's lanes propagating as in numpy, the interpreter's bits on small shapes, and the launch a
    block per workgroup exactly where the columns are in range."""
    from vyre.ops import _plans as P
    from vyre.ops._grouped import cpu_rows_per_block

    r, c = shape
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((r, c)) * 10.0 ** rng.integers(-3, 4, (r, c))).astype(dt)
    if special is not None:
        x[r // 2, c - 1] = special  # the tail's lanes when c % 16, else the last step's
        x[0, rng.integers(0, c)] = special
    xd = x.astype(np.longdouble)  # the reference in extended precision: squares nearly exact
    P.forget()
    u = 2.0**-53
    for kind, op in (("sum", vo.sum), ("mean", vo.mean), ("norm", vo.norm)):
        got = op(x, 1, backend="cpu")
        assert got.dtype == x.dtype and got.shape == (r,)
        with np.errstate(all="ignore"):
            terms = xd * xd if kind == "norm" else xd
            total = terms.sum(1)
            want = (np.sqrt(total) if kind == "norm" else total / c if kind == "mean" else total).astype(np.float64)
            mag = np.abs(np.nan_to_num(terms, nan=0, posinf=0, neginf=0)).sum(1).astype(np.float64)
        chain = math.ceil(c / 16) + 5  # a lane's chain, four halving levels, the square's rounding
        bound = chain * u * mag
        if kind == "norm":
            bound = bound / np.maximum(2 * np.sqrt(np.nan_to_num(total.astype(np.float64))), 1e-300)
        if kind == "mean":
            bound = bound / c
        bound = bound + 2 * u * np.abs(np.nan_to_num(want)) + 1e-300
        if dt is np.float32:
            bound = bound + 2.0**-24 * np.abs(np.nan_to_num(want)) + 2.0**-149
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
        assert np.all(np.abs(got[finite].astype(np.float64) - want[finite]) <= bound[finite] * 1.0001), kind
        if r * c <= 2000:
            np.testing.assert_array_equal(got, op(x, 1, backend="interp"))
        grouped = 8 <= c < 256  # the documented range (docs/ops.md), pinned here
        (plan,) = [p for k, p in P._plans.items() if k[0][0] == "row_" + kind]
        assert plan.steps[0][2] == (-(-r // cpu_rows_per_block(c)) if grouped else r)


@settings(max_examples=12, deadline=None)
@given(shape=st.sampled_from([(5, 24), (4, 32), (2000, 31), (3, 255), (1, 40), (700, 100), (7, 256), (9, 23),
                              (600, 64)]),
       dt=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**31),
       special=st.sampled_from([None, np.nan, np.inf, -np.inf]))
def test_row_argmax_in_groups(shape: tuple[int, int], dt: type, seed: int, special: float | None) -> None:
    """The row argmax of rows of 24-255 columns runs in groups of rows (16 slots a row, each
    keeping its first maximum, its column and a NaN flag): numpy's answer with ties (the lowest
    column), NaNs (the first), all -inf rows (0) and specials in a step's or the tail's slots, the
    interpreter's on small shapes, and a block per workgroup exactly in the documented range."""
    from vyre.ops import _plans as P
    from vyre.ops._grouped import cpu_rows_per_block

    r, c = shape
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (r, c)).astype(dt)  # many ties
    if special is not None:
        x[r // 2, c - 1] = special  # the tail's slots when c % 16, else the last step's
        x[0, rng.integers(0, c)] = special
        x[r - 1, c // 3] = special
    x[-1] = -np.inf if r > 2 else x[-1]
    P.forget()
    got = vo.argmax(x, 1, backend="cpu")
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, x.argmax(1))
    if r * c <= 2000:
        np.testing.assert_array_equal(got, vo.argmax(x, 1, backend="interp"))
    (plan,) = [p for k, p in P._plans.items() if k[0][0] == "row_argmax"]
    grouped = 24 <= c < 256  # the documented range (docs/ops.md), pinned here
    assert plan.steps[0][2] == (-(-r // cpu_rows_per_block(c)) if grouped else r)
