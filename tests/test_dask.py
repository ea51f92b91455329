"""vyre.dask: chunked dispatch matches one dispatch over the whole array (integers bit for bit,
floats within the float tolerance), on the threaded scheduler (Hypothesis over shapes and chunkings)
and on a 2-process dask.distributed cluster."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre
from vyre.errors import DispatchError
from vyre.ir import F32, U32, Program, buflen, exp, gid, if_, let, output, read, sin, store, u32, var

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
import vyre.dask  # noqa: E402


def _chain() -> Program:
    x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    return Program.wrapped([x, y, out], 64, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])]),
    ])


def _int_mix() -> Program:
    """Integer work with wrapping and a whole-array table lookup (exact oracle)."""
    x, t, out = read("x", 0, U32), read("t", 1, U32), output("out", 2, U32)
    i = var("i")
    return Program.wrapped([x, t, out], 32, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [store(out, i, x[i] * u32(2654435761) + t[x[i] % buflen(t)])]),
    ])


def _stencil(radius: int) -> Program:
    """out[i] = sum_{|k|<=r} (k+r+1) * x[i+k], reads past the ends are 0 (vyre's rule)."""
    x, out = read("x", 0, U32), output("out", 1, U32)
    i = var("i")
    acc = x[i] * u32(radius + 1)
    for k in range(1, radius + 1):
        acc = acc + x[i - u32(k)] * u32(radius + 1 - k) + x[i + u32(k)] * u32(radius + 1 + k)
    return Program.wrapped([x, out], 32, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, acc)])])


chunks_1d = st.integers(1, 300).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.integers(1, n), min_size=1, max_size=5)))


def _uneven(n: int, cuts: list[int]) -> tuple[int, ...]:
    """Chunk sizes summing to n built from cut points (uneven on purpose)."""
    pts = sorted({0, n, *(c % n for c in cuts)})
    return tuple(b - a for a, b in itertools.pairwise(pts) if b > a)


@settings(max_examples=25, deadline=None)
@given(chunks_1d, st.integers(0, 2**32 - 1))
def test_map_blocks_integers_bit_exact(spec: tuple[int, list[int]], seed: int) -> None:
    n, cuts = spec
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, n, dtype=np.uint32)
    t = rng.integers(0, 2**32, 7, dtype=np.uint32)
    p = _int_mix()
    want = vyre.dispatch(p, {"x": x, "t": t, "out": np.zeros(n, np.uint32)}, backend="cpu")["out"]
    dx = da.from_array(x, chunks=(_uneven(n, cuts),))
    got = vyre.dask.map_blocks(p, {"x": dx, "t": t}, "out", backend="cpu").compute(scheduler="threads")
    np.testing.assert_array_equal(got, want)


def test_map_blocks_2d_floats_and_interp_agree() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((37, 11)).astype(np.float32)
    y = rng.standard_normal((37, 11)).astype(np.float32)
    p = _chain()
    want = vyre.dispatch(p, {"x": x, "y": y, "out": np.zeros_like(x)}, backend="interp")["out"]
    dx, dy = da.from_array(x, chunks=(10, 4)), da.from_array(y, chunks=(7, 6))  # chunks unify
    got = vyre.dask.map_blocks(p, {"x": dx, "y": dy}, "out", backend="cpu").compute(scheduler="threads")
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want.reshape(x.shape), rtol=2e-6, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(chunks_1d, st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_map_overlap_matches_whole_array_at_borders(spec: tuple[int, list[int]], radius: int, seed: int) -> None:
    n, cuts = spec
    x = np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint32)
    p = _stencil(radius)
    want = vyre.dispatch(p, {"x": x, "out": np.zeros(n, np.uint32)}, backend="cpu")["out"]
    chunks = _uneven(n, cuts)  # chunks shallower than the halo, arrays shorter than it: all allowed
    dx = da.from_array(x, chunks=(chunks,))
    got = vyre.dask.map_overlap(p, {"x": dx}, "out", depth=radius, backend="cpu").compute(scheduler="threads")
    np.testing.assert_array_equal(got, want)


def test_map_overlap_bad_depth() -> None:
    x = da.from_array(np.arange(10, dtype=np.uint32), chunks=4)
    for bad in (-1, 1.5, {3: 1}):
        with pytest.raises(DispatchError, match="depth must be"):
            vyre.dask.map_overlap(_stencil(1), {"x": x}, "out", depth=bad)


def test_map_blocks_without_halo_differs_at_borders() -> None:
    """The halo matters: the same stencil through map_blocks is wrong at chunk borders (so the
    map_overlap test above can fail)."""
    x = np.arange(1, 41, dtype=np.uint32)
    p = _stencil(1)
    want = vyre.dispatch(p, {"x": x, "out": np.zeros(40, np.uint32)}, backend="cpu")["out"]
    got = vyre.dask.map_blocks(p, {"x": da.from_array(x, chunks=10)}, "out", backend="cpu").compute()
    assert (got != want).sum() == 6  # both sides of the 3 inner borders


def test_written_inputs_are_never_modified() -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    from vyre.ir import BufferAccess, BufferDecl
    rw = BufferDecl("x", 0, BufferAccess.READ_WRITE, F32)
    i = var("i")
    p = Program.wrapped([rw, out], 16, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [store(rw, i, rw[i] * 2.0), store(out, i, rw[i] + 1.0)]),
    ])
    del x
    base = np.arange(20, dtype=np.float32)
    dx = da.from_array(base, chunks=7)
    got = vyre.dask.map_blocks(p, {"x": dx}, ["out", "x"], backend="cpu")
    o, xx = dask.compute(*got, scheduler="threads")
    np.testing.assert_array_equal(o, base * 2 + 1)
    np.testing.assert_array_equal(xx, base * 2)
    np.testing.assert_array_equal(dx.compute(), np.arange(20, dtype=np.float32))


def test_value_and_grad_over_chunks_matches_whole() -> None:
    from vyre.autodiff import value_and_grad

    rng = np.random.default_rng(3)
    x = rng.standard_normal(50).astype(np.float32)
    y = rng.standard_normal(50).astype(np.float32)
    p = _chain()
    loss0, g0 = value_and_grad(p, {"x": x, "y": y, "out": np.zeros(50, np.float32)}, "out", ["x", "y"],
                               backend="cpu")
    loss, g = vyre.dask.value_and_grad(p, {"x": da.from_array(x, chunks=(13, 20, 17)),
                                           "y": da.from_array(y, chunks=9)}, "out", ["x", "y"], backend="cpu")
    loss_v, gx, gy = dask.compute(loss, g["x"], g["y"], scheduler="threads")
    assert loss_v == pytest.approx(loss0, rel=1e-6)
    np.testing.assert_allclose(gx, g0["x"], rtol=1e-6)
    np.testing.assert_allclose(gy, g0["y"], rtol=1e-6)


def test_value_and_grad_of_a_shared_weight_sums_chunks() -> None:
    """A buffer every chunk reads whole (saxpy's scalar a): its gradient sums over the chunks."""
    from vyre.examples import saxpy

    rng = np.random.default_rng(4)
    a = np.array([1.5], np.float32)
    x = rng.standard_normal(64).astype(np.float32)
    y = rng.standard_normal(64).astype(np.float32)
    loss, g = vyre.dask.value_and_grad(saxpy(), {"a": a, "x": da.from_array(x, chunks=10),
                                                 "y": da.from_array(y, chunks=10)}, "out", ["a", "x"],
                                       backend="cpu")
    loss_v, ga, gx = dask.compute(loss, g["a"], g["x"], scheduler="threads")
    assert loss_v == pytest.approx(float(np.sum(1.5 * x.astype(np.float64) + y)), rel=1e-5)
    np.testing.assert_allclose(ga, [np.sum(x, dtype=np.float64)], rtol=1e-5)
    np.testing.assert_allclose(gx, np.full(64, 1.5, np.float32))


@pytest.mark.parametrize("bad, match", [
    (lambda x: {"x": x.compute(), "t": np.zeros(3, np.uint32)}, "no input is a dask array"),
    (lambda x: {"x": x, "t": np.zeros(3, np.uint32), "nope": x}, "unknown buffer 'nope'"),
    (lambda x: {"x": x, "t": da.zeros(7, chunks=3, dtype=np.uint32)}, "differ in shape"),
])
def test_bad_inputs_are_dispatch_errors(bad, match) -> None:
    x = da.from_array(np.arange(10, dtype=np.uint32), chunks=4)
    with pytest.raises(DispatchError, match=match) as e:
        vyre.dask.map_blocks(_int_mix(), bad(x), "out", backend="cpu")
    assert "Fix:" in str(e.value)


def test_fixed_count_output_is_refused() -> None:
    from vyre.examples import block_sum

    with pytest.raises(DispatchError, match="fixed count"):
        vyre.dask.map_blocks(block_sum(), {"x": da.zeros(10, chunks=5, dtype=np.float32)}, "out")


@settings(max_examples=15, deadline=None)
@given(chunks_1d, st.sampled_from(["sum", "max", "min"]), st.sampled_from([np.float32, np.float64]),
       st.integers(0, 2**32 - 1))
def test_reduce_matches_the_whole_array(spec: tuple[int, list[int]], op: str, dtype: type, seed: int) -> None:
    import math

    n, cuts = spec
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 100).astype(dtype)
    got = vyre.dask.reduce(op, da.from_array(x, chunks=(_uneven(n, cuts),)), backend="cpu").compute()
    assert got.dtype == dtype
    if op == "sum":
        exact = math.fsum(x.astype(np.float64))
        bound = n * float(np.finfo(dtype).eps) * float(np.abs(x.astype(np.float64)).sum()) + abs(exact) * 1e-7
        assert abs(float(got) - exact) <= bound
    else:
        assert got == getattr(np, op)(x)


@pytest.mark.parametrize("split_every", [2, 3, None])
def test_reduce_gathers_partials_in_a_tree(split_every) -> None:
    x = np.arange(1000, dtype=np.float64) - 400.5
    dx = da.from_array(x, chunks=37)  # 28 chunks: several levels of gathering with split_every=2
    got = vyre.dask.reduce("sum", dx, backend="cpu", split_every=split_every).compute()
    assert float(got) == float(x.sum())  # integers and halves: exact in f64 in any order
    assert vyre.dask.reduce("max", dx, backend="cpu", split_every=split_every).compute() == x.max()


def test_map_blocks_name_keeps_equal_calls_apart() -> None:
    x = da.from_array(np.arange(10, dtype=np.float32), chunks=5)
    a = vyre.dask.map_blocks(_chain(), {"x": x, "y": x}, "out", backend="cpu")
    b = vyre.dask.map_blocks(_chain(), {"x": x, "y": x}, "out", backend="cpu")
    c = vyre.dask.map_blocks(_chain(), {"x": x, "y": x}, "out", backend="cpu", name="chain-2")
    assert a.name == b.name != c.name == "chain-2"
    np.testing.assert_array_equal(a.compute(), c.compute())
    with pytest.raises(DispatchError, match="name must be a str"):
        vyre.dask.map_blocks(_chain(), {"x": x, "y": x}, "out", name=3)


def test_reduce_errors() -> None:
    x = da.zeros(0, chunks=1, dtype=np.float32)
    assert float(vyre.dask.reduce("sum", x, backend="cpu").compute()) == 0.0
    with pytest.raises(DispatchError, match="empty array has no value"):
        vyre.dask.reduce("max", x)
    with pytest.raises(DispatchError, match="split_every must be an int >= 2"):
        vyre.dask.reduce("sum", da.ones(3, chunks=1), split_every=1)
    with pytest.raises(DispatchError, match="unknown reduction"):
        vyre.dask.reduce("prod", da.ones(3, chunks=1))
    with pytest.raises(DispatchError, match="float32 and float64"):
        vyre.dask.reduce("sum", da.ones(3, chunks=1, dtype=np.uint32))
    with pytest.raises(DispatchError, match="expected a dask array"):
        vyre.dask.reduce("sum", np.ones(3))


def test_distributed_two_worker_processes(tmp_path) -> None:
    """A LocalCluster of 2 worker processes, uneven chunks: exact integers, float tolerance, a
    halo, and the program shipped as wire bytes (no pickled Program)."""
    distributed = pytest.importorskip("distributed")
    import os

    os.environ["VYRE_CACHE_DIR"] = os.environ.get("VYRE_CACHE_DIR", str(tmp_path))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40) as cluster, \
            distributed.Client(cluster) as client:
        rng = np.random.default_rng(5)
        x = rng.integers(0, 2**32, 1000, dtype=np.uint32)
        t = rng.integers(0, 2**32, 5, dtype=np.uint32)
        dx = da.from_array(x, chunks=((100, 300, 17, 583),))
        p = _int_mix()
        want = vyre.dispatch(p, {"x": x, "t": t, "out": np.zeros(1000, np.uint32)}, backend="cpu")["out"]
        got = client.compute(vyre.dask.map_blocks(p, {"x": dx, "t": t}, "out", backend="cpu")).result()
        np.testing.assert_array_equal(got, want)
        st2 = _stencil(2)
        want2 = vyre.dispatch(st2, {"x": x, "out": np.zeros(1000, np.uint32)}, backend="cpu")["out"]
        got2 = client.compute(vyre.dask.map_overlap(st2, {"x": dx}, "out", depth=2, backend="cpu")).result()
        np.testing.assert_array_equal(got2, want2)
        xf = rng.standard_normal(1000).astype(np.float32)
        want3 = vyre.dispatch(_chain(), {"x": xf, "y": xf, "out": np.zeros(1000, np.float32)},
                              backend="cpu")["out"]
        dxf = da.from_array(xf, chunks=((250, 250, 1, 499),))
        got3 = client.compute(vyre.dask.map_blocks(_chain(), {"x": dxf, "y": dxf}, "out", backend="cpu")).result()
        np.testing.assert_allclose(got3, want3, rtol=2e-6, atol=1e-6)
        # reduce over a map_blocks result: one task per chunk, partials moved between the workers
        m = vyre.dask.map_blocks(_chain(), {"x": dxf, "y": dxf}, "out", backend="cpu")
        got4 = client.compute(vyre.dask.reduce("sum", m, backend="cpu", split_every=2)).result()
        want4 = vyre.dask.reduce("sum", m.copy(), backend="cpu", split_every=2).compute(scheduler="sync")
        assert got4.tobytes() == want4.tobytes()
        assert len(client.scheduler_info()["workers"]) == 2


def test_the_readme_dask_example_runs() -> None:
    """The README's Dask example stays true."""
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    m = re.search(r"```python\n(import numpy as np, dask\.array.*?)```", readme, re.S)
    assert m is not None, "README lost its Dask example"
    code = m.group(1).replace("print(total.compute())", "result = total.compute(scheduler='threads')")
    scope: dict[str, object] = {}
    exec(code, scope)
    assert float(scope["result"]) > 0  # type: ignore[arg-type]
