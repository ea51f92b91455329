"""vyre.ops on the CPU after the first call: each pass calls the compiled entry a checked dispatch
chose (``_launch.cpu_call``), and a repeated whole-array reduction or argmax runs a remembered plan
(``vyre.ops._plans``: any op whose passes all have direct calls). Both skip checks, so they must
give the checked path's bits exactly, refuse nothing the checked path refuses, never take arrays
the machine code cannot (unaligned, non-contiguous, another dtype or shape) and never hand an
earlier call's result arrays to a later call."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre.ops as vo
from tests.ops_cases import run_interleaved
from vyre.ir import F32
from vyre.ops import OpsError
from vyre.ops import _launch as LA
from vyre.ops import _plans as P
from vyre.ops import reduce as R

WHOLE: dict[str, Callable[..., Any]] = {
    "sum": vo.sum, "mean": vo.mean, "max": vo.max, "min": vo.min, "norm": vo.norm, "argmax": vo.argmax,
}


def _same(a: Any, b: Any) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    return bool(np.array_equal(x, y, equal_nan=True)) and x.dtype == y.dtype


values = st.sampled_from([0.0, -0.0, 1.5, -2.25, 3e38, -3e38, 1e-30, np.inf, -np.inf, np.nan])


@settings(max_examples=25, deadline=None)
@given(n=st.sampled_from([1, 2, 127, 128, 129, 300, 8191, 8192, 8193, 20000, 70001]),
       dt=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**31),
       specials=st.lists(st.tuples(st.floats(0, 1), values), max_size=3), backend=st.sampled_from([None, "cpu"]))
def test_repeated_calls_give_the_checked_bits(n: int, dt: type, seed: int, specials: list[tuple[float, float]],
                                              backend: str | None) -> None:
    """The first call takes the checked path (no plan yet) and plans; the next ones run the plan
    and must give its bits (the checked path's agreement with the interpreter and numpy is
    tests/test_ops_reduce.py's). ``backend=None`` takes the plan through planned's first lookup
    (one numpy array, the default backend); dot through plan_key."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(dt)
    y = rng.standard_normal(n).astype(dt)
    for where, v in specials:
        x[int(where * (n - 1))] = v
    P.forget()
    for name, fn in [*WHOLE.items(), ("dot", lambda a, backend: vo.dot(a, y, backend=backend))]:
        want = fn(x, backend=backend)
        for _ in range(2):
            got = fn(x, backend=backend)
            assert _same(got, want), (name, n, dt, got, want)
    assert len(P._plans) == len(WHOLE) + 1


def test_a_plan_is_remembered_and_then_used(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.arange(30000, dtype=np.float32)
    vo.sum(x, backend="cpu")
    hit = P.plan_key((R.Reduce.SUM, R.Post.NONE, False, None), (x,), "cpu")
    assert hit is not None and hit[0] in P._plans
    key = hit[0]
    assert len(P._plans[key].steps) == 2  # 30000 elements: four blocks, then their partials

    def no_checked_path(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the checked path ran although a plan exists")

    monkeypatch.setattr(R, "_reduce_checked", no_checked_path)
    assert vo.sum(x, backend="cpu") == np.float32(np.sum(np.arange(30000, dtype=np.float64)))


@pytest.mark.parametrize("make", [
    lambda x: x[::2],  # not contiguous
    lambda x: np.frombuffer(b"\0" + x.tobytes(), dtype=x.dtype, offset=1, count=x.size - 1),  # unaligned
    lambda x: x.astype(np.int32),  # a dtype the op refuses
])
@pytest.mark.parametrize("backend", [None, "cpu"])
def test_arrays_the_machine_code_cannot_take_never_reach_a_plan(make: Callable[[np.ndarray], np.ndarray],
                                                                backend: str | None) -> None:
    x = np.linspace(-3, 5, 4001, dtype=np.float32)
    vo.max(x, backend=backend)
    vo.max(x, backend=backend)
    other = make(x)
    # planned: an array of other's dtype and shape that a plan can take (other is not C-contiguous,
    # not aligned, or of a dtype the op refuses)
    twin = np.require(other, requirements=["C", "A"])
    for _ in range(2):
        for op in (vo.max, vo.argmax):
            with contextlib.suppress(OpsError):
                op(twin, backend=backend)
    hit = P.plan_key((R.Reduce.MAX, R.Post.NONE, False, None), (other,), "cpu")
    if other.dtype == np.int32:
        assert hit is not None
        key = hit[0]
        with pytest.raises(OpsError, match="Fix:"):
            vo.max(other, backend="cpu")
        with pytest.raises(OpsError, match="Fix:"):
            vo.max(other, backend="cpu")  # still refused: a failed call plans nothing
        assert key not in P._plans
        return
    assert hit is None
    assert vo.max(other, backend=backend) == np.max(other)
    assert vo.argmax(other, backend=backend) == np.argmax(other)
    assert vo.argmax(other[::-1], backend=backend) == np.argmax(other[::-1])


@pytest.mark.parametrize("make", [
    lambda y: y[::2],  # not contiguous
    lambda y: np.frombuffer(b"\0" + y.tobytes(), dtype=y.dtype, offset=1, count=y.size - 1),  # unaligned
    lambda y: y.astype(np.float64),  # another dtype than x's: refused
    lambda y: list(y),  # not an array: refused
])
@pytest.mark.parametrize("backend", [None, "cpu"])
def test_two_array_calls_reach_a_plan_only_with_arrays_it_can_take(make: Callable[[np.ndarray], Any],
                                                                   backend: str | None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """dot and matvec look their plan up first too (planned's two-array lookup): a second array
    that is not C-contiguous, not aligned, of another dtype or not a numpy array never runs a plan
    recorded for arrays of its dtype and shape; it takes the checked path (a copy, or the error)."""
    other = make(np.linspace(2, -1, 8000, dtype=np.float32))
    arr = np.asarray(other)
    n = len(arr)
    x = np.linspace(-3, 5, n, dtype=np.float32)
    m = x[:n - n % 100].reshape(-1, 100)
    twin = np.array(arr, dtype=np.float32)  # a fresh copy: what a plan can take, of other's length
    P.forget()
    for _ in range(2):
        vo.dot(x, twin, backend=backend)
        vo.matvec(m, twin[:100], backend=backend)
    assert len(P._plans) == 2

    def refuse(inputs: list[np.ndarray]) -> Any:
        raise AssertionError("a plan ran for an array it cannot take")

    for plan in list(P._plans.values()):
        monkeypatch.setattr(plan, "run", refuse)
    if isinstance(other, list) or arr.dtype != np.float32:
        with pytest.raises(OpsError, match="Fix:"):
            vo.dot(x, other, backend=backend)
        with pytest.raises(OpsError, match="Fix:"):
            vo.matvec(m, other[:100], backend=backend)
        return
    want = float(np.dot(x.astype(np.float64), arr.astype(np.float64)))
    assert float(vo.dot(x, other, backend=backend)) == pytest.approx(want, rel=1e-6, abs=1e-6)
    np.testing.assert_allclose(vo.matvec(m, other[:100], backend=backend), m.astype(np.float64) @ arr[:100],
                               rtol=1e-5, atol=1e-5)


def test_a_plan_of_the_default_backend_follows_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan recorded with ``backend=None`` while the CPU was the default must not run once
    ``VYRE_BACKEND`` names another backend: the call goes where the default now says (the
    interpreter runs the same program: the same bits)."""
    x = np.linspace(-1, 2, 3001, dtype=np.float32)
    cases: list[tuple[Callable[..., Any], np.ndarray]] = [(vo.sum, x), (vo.argmax, x),
                                                          (vo.row_sum, x[:3000].reshape(30, 100)),
                                                          (lambda a: vo.dot(a, a), x)]
    P.forget()
    wants = [fn(arg) for fn, arg in cases]
    for (fn, arg), want in zip(cases, wants, strict=True):
        assert _same(fn(arg), want)  # the plan

    def refuse(inputs: list[np.ndarray]) -> Any:
        raise AssertionError("a CPU plan ran for a call whose default backend is the interpreter")

    plans = list(P._plans.values())
    assert len(plans) == len(cases)
    for plan in plans:
        monkeypatch.setattr(plan, "run", refuse)
    for runs in P.SITE_MEMORIES:  # the call sites' own copies of the plans' runs (vyre/ops/_sites.py)
        for sig, (_, indices) in list(runs.items()):
            monkeypatch.setitem(runs, sig, (refuse, indices))
    monkeypatch.setenv("VYRE_BACKEND", "interp")
    for (fn, arg), want in zip(cases, wants, strict=True):
        assert _same(fn(arg), want), fn
    monkeypatch.setenv("VYRE_BACKEND", "cpu")  # the CPU again, named: the sites and plan_key find the plans
    for fn, arg in cases:
        with pytest.raises(AssertionError, match="a CPU plan ran"):
            fn(arg)


def test_refused_calls_stay_refused() -> None:
    a, b = np.ones(5, np.float32), np.ones(6, np.float32)
    for _ in range(2):
        with pytest.raises(OpsError, match="Fix:"):
            vo.dot(a, b, backend="cpu")
        with pytest.raises(OpsError, match="Fix:"):
            vo.dot(a, np.ones(5, np.float64), backend="cpu")
        with pytest.raises(OpsError, match="Fix:"):
            vo.argmax(np.ones(0, np.float32), backend="cpu")
    assert vo.dot(a, a, backend="cpu") == 5.0


@pytest.mark.parametrize("n", [3000, 20000])  # one block (the one-call fast path); three blocks, two passes
def test_threads_sharing_a_plan_each_get_their_own_answer(n: int) -> None:
    """A plan reuses its partials' buffers between calls: threads running one plan at once (same
    dtype and length, different arrays) must never see each other's partials."""
    import threading
    arrays = [np.random.default_rng(i).standard_normal(n).astype(np.float32) for i in range(6)]
    want = [(vo.sum(a, backend="cpu"), vo.max(a, backend="cpu"), vo.argmax(a, backend="cpu")) for a in arrays]
    wrong: list[tuple[int, Any, Any]] = []
    start = threading.Barrier(len(arrays))

    def work(i: int) -> None:
        start.wait()
        for _ in range(300):
            got = (vo.sum(arrays[i], backend="cpu"), vo.max(arrays[i], backend="cpu"),
                   vo.argmax(arrays[i], backend="cpu"))
            if not all(_same(g, w) for g, w in zip(got, want[i], strict=True)):
                wrong.append((i, got, want[i]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(arrays))]
    run_interleaved(threads)
    assert not wrong, wrong[:3]
    hit = P.plan_key((R.Reduce.SUM, R.Post.NONE, False, None), (arrays[0],), "cpu")
    assert hit is not None
    plan = P._plans[hit[0]]
    assert len(plan.steps) == (1 if n <= R.CPU_BLOCK else 2) and 1 <= len(plan.spare) <= len(arrays)
    assert (plan.path == "scalar") == (n <= R.CPU_BLOCK)


def test_a_pass_runs_the_entry_its_checked_dispatch_chose() -> None:
    x = np.ones(1 << 17, np.float32)  # 16 blocks: enough work for the parallel entry
    prog, g, _ = R._passes(R.Reduce.SUM, F32, R.Post.NONE, x.size, False, 0)[0]
    out = np.empty(g, np.float64)
    LA.launch(prog, {"x": x, "out": out}, g, "cpu")
    call = LA.cpu_call(prog, {"x": x.size, "out": g}, g)
    assert call is not None and call.parallel and call.order == ("x", "out")
    out[:] = 0
    call.call(x, out)
    assert np.all(out == x.size // g)
    assert LA.cpu_call(prog, {"x": x.size + 1, "out": g}, g) is None  # other lengths: not checked yet


def _child_sums(x: np.ndarray, q: Any) -> None:
    import vyre

    from vyre.driver.backend import pool_usable
    from vyre.examples import fused_chain

    n = 1 << 16  # enough invocations for the parallel entry in the parent
    a = np.ones(n, np.float32)
    out = vyre.dispatch(fused_chain(), {"x": a, "y": a, "out": np.zeros(n, np.float32)}, backend="cpu")["out"]
    q.put((pool_usable(), float(vo.sum(x, backend="cpu")), float(vo.max(x, backend="cpu")), float(out[0])))


def test_a_child_forked_after_the_pool_started_runs_the_serial_entries() -> None:
    """GNU OpenMP's threads do not survive fork, and numba's OpenMP layer ends a forked child at its
    first parallel launch: such a child runs every CPU kernel serially, and gets the same answers."""
    import multiprocessing as mp

    import vyre
    from vyre.examples import fused_chain

    x = np.arange(1 << 20, dtype=np.float32) % 1000
    want = (float(vo.sum(x, backend="cpu")), float(vo.max(x, backend="cpu")))
    a = np.ones(1 << 16, np.float32)
    chain = vyre.dispatch(fused_chain(), {"x": a, "y": a, "out": np.zeros(1 << 16, np.float32)}, backend="cpu")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_sums, args=(x, q))
    p.start()
    p.join(120)
    assert p.exitcode == 0, "the forked child died (its first parallel launch on a dead OpenMP pool?)"
    usable, s, m, c = q.get(timeout=10)
    from vyre.driver.backend import _openmp_started

    assert usable is (not _openmp_started())
    assert (s, m) == want and c == float(chain["out"][0])


def _row_cases(x: np.ndarray, y: np.ndarray, v: np.ndarray, g: np.ndarray) -> dict[str, Callable[[], Any]]:
    """Every op with row-shaped inputs, as the caller writes it (each call builds new answers)."""
    lse = vo.logsumexp(x, backend="cpu")
    _, mean, rstd = vo.layer_norm(x, backend="cpu", return_stats=True)
    return {
        "row_sum": lambda: vo.row_sum(x, backend="cpu"),
        "row_max": lambda: vo.row_max(x, backend="cpu"),
        "logsumexp": lambda: vo.logsumexp(x, backend="cpu"),
        "softmax": lambda: vo.softmax(x, backend="cpu"),
        "softmax+lse": lambda: vo.softmax(x, backend="cpu", return_lse=True),
        "layer_norm": lambda: vo.layer_norm(x, backend="cpu"),
        "layer_norm eps=0.5": lambda: vo.layer_norm(x, 0.5, backend="cpu"),
        "layer_norm+stats": lambda: vo.layer_norm(x, backend="cpu", return_stats=True),
        "softmax_grad": lambda: vo.softmax_grad(x, y, backend="cpu"),
        "logsumexp_grad": lambda: vo.logsumexp_grad(x, lse, g, backend="cpu"),
        "layer_norm_grad": lambda: vo.layer_norm_grad(x, y, mean, rstd, backend="cpu"),
        "matvec": lambda: vo.matvec(x, v, backend="cpu"),
        "matvec_grad": lambda: vo.matvec_grad(x, v, g, backend="cpu"),
    }


def _copy(a: Any) -> Any:
    return tuple(np.array(p, copy=True) for p in a) if isinstance(a, tuple) else np.array(a, copy=True)


def _same_answer(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(map(_same_answer, a, b))
    return _same(a, b) and np.shape(a) == np.shape(b)


@settings(max_examples=15, deadline=None)
@given(rows=st.sampled_from([0, 1, 3, 40]), cols=st.sampled_from([1, 16, 127, 128, 300]),
       dt=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**31))
def test_row_ops_and_matvec_replay_the_checked_bits_into_new_arrays(rows: int, cols: int, dt: type, seed: int) -> None:
    """Every op with array results replays its plan from the second call: the checked path's bits,
    in arrays of its own (an earlier call's results never change)."""
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal((rows, cols)).astype(dt) for _ in range(2))
    v, g = rng.standard_normal(cols).astype(dt), rng.standard_normal(rows).astype(dt)
    P.forget()
    for name, op in _row_cases(x, y, v, g).items():
        first = op()  # the checked path, recorded
        kept = _copy(first)
        second = op()  # the plan where one was recorded
        third = op()
        assert _same_answer(second, kept) and _same_answer(third, kept), name
        assert _same_answer(first, kept), f"{name}: a later call changed an earlier call's result"
        for a, b in zip(*(r if isinstance(r, tuple) else (r,) for r in (second, third)), strict=True):
            assert not np.shares_memory(a, b), name
    planned = {k[0][0] for k in P._plans}
    # logsumexp_grad and matvec_grad run flat kernels (one invocation per element), whose launch
    # the CPU picks per call: they take the checked path every time
    assert {"row_sum", "row_max", "row_lse", "softmax", "layer_norm", "softmax_grad", "layer_norm_grad",
            "matvec"} <= planned
    # one serial call into one new array that is the answer takes the short "result" path
    for k, p in P._plans.items():
        if rows and k[0][0] in ("row_sum", "row_max", "row_lse", "matvec") and isinstance(p, P.Plan):
            assert (p.path == "result") is (not p.steps[0][1]), k[0]  # steps: (entry, parallel, ...)


@settings(max_examples=10, deadline=None)
@given(shape=st.sampled_from([(1, 8), (3, 64), (64, 64), (5, 200), (2, 3, 9)]),
       dt=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**31))
def test_column_reductions_replay_through_the_short_path(shape: tuple[int, ...], dt: type, seed: int) -> None:
    """A column reduction's plan (one serial call whose arguments are not in the plan's buffer
    order, with a reused length carrier) takes the short "result" path: numpy's answers, the
    checked path's bits, each call into an array of its own."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(dt)
    x.flat[::5] = 0.5  # ties for argmax
    P.forget()
    for name, op, want in (("sum", lambda: vo.sum(x, 0), None), ("max", lambda: vo.max(x, 0), x.max(0)),
                           ("argmax", lambda: vo.argmax(x, 0), x.argmax(0))):
        first = op()
        kept = first.copy()
        second, third = op(), op()
        assert not np.shares_memory(second, third) and not np.shares_memory(first, second), name
        for got in (first, second, third):
            np.testing.assert_array_equal(got, kept)
            assert got.shape == x.shape[1:]
        if want is not None:
            np.testing.assert_array_equal(kept, want)
        else:
            np.testing.assert_allclose(kept, x.astype(np.float64).sum(0), rtol=1e-6)
    cols = [p for k, p in P._plans.items() if k[0][0].startswith("col_")]
    assert len(cols) == 3 and all(p.path == "result" for p in cols)


def test_an_op_inside_another_ops_record_leaves_the_outer_call_unplanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record only sees its own call's launches: an op that calls another op while being recorded
    must not become a plan (it would replay without the inner op's passes)."""
    def outer(x: np.ndarray) -> Any:
        return P.planned(("outer",), (x,), "cpu", lambda *_: vo.sum(x, backend="cpu") + vo.max(x, backend="cpu"))

    x = np.arange(1000, dtype=np.float32)
    P.forget()
    assert outer(x) == outer(x) == np.float32(499500 + 999)
    assert not any(k[0] == ("outer",) for k in P._plans)


def test_a_program_called_over_ever_new_lengths_keeps_getting_plans() -> None:
    """A program's direct calls are bounded (vyre.ops._launch.CPU_CALLS_KEPT per program) by
    starting again, not by refusing: after more lengths than that, a new length still gets its
    direct call and its plan, so the call site learns it (it had stopped learning, which showed
    as an order-dependent failure of test_every_route_answers_alike_first_and_later)."""
    from vyre.ops import _launch
    from vyre.ops import reduce as R

    P.forget()
    rng = np.random.default_rng(5)
    for n in range(3, 3 + _launch.CPU_CALLS_KEPT + 10):
        x = rng.standard_normal(n)
        for _ in range(2):
            assert float(vo.min(x)) == float(x.min())
        assert (x.dtype, x.shape, None, False, None, False) in R._MIN_SITE.runs, n
