"""vyre.ops on the CPU after the first call: each pass calls the compiled entry a checked dispatch
chose (``_launch.cpu_call``), and a repeated whole-array reduction or argmax runs a remembered plan
(``reduce._CpuPlan``). Both skip checks, so they must give the checked path's bits exactly, refuse
nothing the checked path refuses, and never take arrays the machine code cannot (unaligned,
non-contiguous, another dtype or length)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre.ops as vo
from vyre.ir import F32
from vyre.ops import OpsError
from vyre.ops import _launch as LA
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
       specials=st.lists(st.tuples(st.floats(0, 1), values), max_size=3))
def test_repeated_calls_give_the_checked_bits(n: int, dt: type, seed: int, specials: list[tuple[float, float]]) -> None:
    """The first call takes the checked path (no plan yet) and plans; the next ones run the plan
    and must give its bits (the checked path's agreement with the interpreter and numpy is
    tests/test_ops_reduce.py's)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(dt)
    y = rng.standard_normal(n).astype(dt)
    for where, v in specials:
        x[int(where * (n - 1))] = v
    R._cpu_plans.clear()
    for name, fn in [*WHOLE.items(), ("dot", lambda a, backend: vo.dot(a, y, backend=backend))]:
        want = fn(x, backend="cpu")
        for _ in range(2):
            got = fn(x, backend="cpu")
            assert _same(got, want), (name, n, dt, got, want)
    assert len(R._cpu_plans) == len(WHOLE) + 1


def test_a_plan_is_remembered_and_then_used(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.arange(30000, dtype=np.float32)
    vo.sum(x, backend="cpu")
    key = R._plan_key(R.Reduce.SUM, R.Post.NONE, {"x": x}, "cpu")
    assert key is not None and key in R._cpu_plans
    assert len(R._cpu_plans[key].passes) == 2  # 30000 elements: four blocks, then their partials

    def no_checked_path(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the checked path ran although a plan exists")

    monkeypatch.setattr(R, "_reduce_checked", no_checked_path)
    assert vo.sum(x, backend="cpu") == np.float32(np.sum(np.arange(30000, dtype=np.float64)))


@pytest.mark.parametrize("make", [
    lambda x: x[::2],  # not contiguous
    lambda x: np.frombuffer(b"\0" + x.tobytes(), dtype=x.dtype, offset=1, count=x.size - 1),  # unaligned
    lambda x: x.astype(np.int32),  # a dtype the op refuses
])
def test_arrays_the_machine_code_cannot_take_never_reach_a_plan(make: Callable[[np.ndarray], np.ndarray]) -> None:
    x = np.linspace(-3, 5, 4001, dtype=np.float32)
    vo.max(x, backend="cpu")
    vo.max(x, backend="cpu")
    other = make(x)
    key = R._plan_key(R.Reduce.MAX, R.Post.NONE, {"x": other}, "cpu")
    if other.dtype == np.int32:
        with pytest.raises(OpsError, match="Fix:"):
            vo.max(other, backend="cpu")
        with pytest.raises(OpsError, match="Fix:"):
            vo.max(other, backend="cpu")  # still refused: a failed call plans nothing
        assert key not in R._cpu_plans
        return
    assert key is None
    assert vo.max(other, backend="cpu") == np.max(other)
    assert vo.argmax(other, backend="cpu") == np.argmax(other)


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
