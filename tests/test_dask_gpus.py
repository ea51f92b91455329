"""Several GPUs through Dask, on the CPU: ``vyre.dask.on_gpus`` lays chunks out round robin as
literal (persisted) chunks, so Dask feeds every GPU from its first tasks on (fake CuPy devices);
``reduce`` over a ``map_blocks`` result runs one task per chunk and gives the unfused path's
values bit for bit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import fake_cupy
from vyre.errors import DispatchError
from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, sin, store, var

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
import vyre.dask  # noqa: E402
import vyre.dask_gpus  # noqa: E402


def _chain() -> Program:
    x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    return Program.wrapped([x, y, out], 64, [
        let("i", gid()),
        if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])]),
    ])


def _uneven(n: int, cuts: list[int]) -> tuple[int, ...]:
    pts = sorted({0, n, *(c % n for c in cuts)})
    return tuple(b - a for a, b in itertools.pairwise(pts) if b > a)


chunks_1d = st.integers(1, 400).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.integers(1, n), min_size=1, max_size=8)))


# ---- reduce over a map_blocks result: one task per chunk, the unfused path's values

@settings(max_examples=20, deadline=None)
@given(chunks_1d, st.sampled_from(["sum", "max", "min"]), st.sampled_from([None, 2, 3]),
       st.integers(0, 2**32 - 1))
def test_fused_reduce_equals_the_unfused_path(spec: tuple[int, list[int]], op: str, split_every: int | None,
                                              seed: int) -> None:
    n, cuts = spec
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    dx = da.from_array(x, chunks=(_uneven(n, cuts),))
    dy = da.from_array(y, chunks=(_uneven(n, [*cuts[::-1], n // 2]),))  # other chunks: aligned by Dask
    m = vyre.dask.map_blocks(_chain(), {"x": dx, "y": dy}, "out", backend="cpu")
    fused = vyre.dask.reduce(op, m, backend="cpu", split_every=split_every)
    unfused = vyre.dask.reduce(op, m.copy(), backend="cpu", split_every=split_every)  # a copy: no recipe
    assert fused.name != unfused.name
    got, want = dask.compute(fused, unfused, scheduler="threads")
    assert got.dtype == want.dtype == np.float32
    assert got.tobytes() == want.tobytes()
    whole = vyre.dispatch(_chain(), {"x": x, "y": y, "out": np.zeros(n, np.float32)}, backend="cpu")["out"]
    if op == "sum":
        ref = float(whole.astype(np.float64).sum())
        assert abs(float(got) - ref) <= 1e-6 * float(np.abs(whole).astype(np.float64).sum()) + 1e-6
    else:
        assert got == getattr(np, op)(whole)


def test_fused_reduce_is_one_task_per_chunk() -> None:
    x = da.from_array(np.linspace(-2, 2, 1000, dtype=np.float32), chunks=37)  # 28 chunks
    m = vyre.dask.map_blocks(_chain(), {"x": x, "y": x}, "out", backend="cpu")
    for split_every, gathers in ((None, 0), (4, 7 + 2)):  # 28 -> 7 -> 2 boxes, then the final task
        (opt,) = dask.optimize(vyre.dask.reduce("sum", m, backend="cpu", split_every=split_every))
        keys = [k[0] if isinstance(k, tuple) else k for k in dict(opt.__dask_graph__())]
        assert sum(str(k).startswith("sum-partial-") for k in keys) == 28
        assert sum("-gather" in str(k) for k in keys) == gathers
        assert not any(str(k).startswith(m.name) for k in keys)  # the map_blocks layer is not run
    # a 2-D map_blocks result
    x2 = da.from_array(np.linspace(-1, 1, 7 * 9, dtype=np.float32).reshape(7, 9), chunks=(3, 4))
    m2 = vyre.dask.map_blocks(_chain(), {"x": x2, "y": x2}, "out", backend="cpu")
    got = vyre.dask.reduce("sum", m2, backend="cpu").compute()
    assert got.tobytes() == vyre.dask.reduce("sum", m2.copy(), backend="cpu").compute().tobytes()


def test_fused_reductions_of_one_array_keep_their_keys_apart() -> None:
    """Two reductions of one map_blocks result that differ in op, gathering or backend are
    computed together without sharing a key (each gives its own value)."""
    x = da.from_array(np.linspace(-3, 3, 300, dtype=np.float32), chunks=23)
    m = vyre.dask.map_blocks(_chain(), {"x": x, "y": x}, "out", backend="cpu")
    variants = [("sum", "cpu", None), ("sum", "cpu", 2), ("sum", "interp", None), ("max", "cpu", None),
                ("min", "cpu", 3)]
    graphs = [vyre.dask.reduce(op, m, backend=b, split_every=se) for op, b, se in variants]
    assert len({g.name for g in graphs}) == len(graphs)
    got = dask.compute(*graphs, scheduler="threads")
    for (op, b, se), value in zip(variants, got, strict=True):
        alone = vyre.dask.reduce(op, m.copy(), backend=b, split_every=se).compute(scheduler="sync")
        assert value.tobytes() == alone.tobytes(), (op, b, se)


def test_fused_reduce_of_an_empty_array() -> None:
    x = da.zeros(0, chunks=1, dtype=np.float32)
    m = vyre.dask.map_blocks(_chain(), {"x": x, "y": x}, "out", backend="cpu")
    assert float(vyre.dask.reduce("sum", m, backend="cpu").compute()) == 0.0


# ---- on_gpus: round robin, literal chunks, every GPU fed from the first tasks on

def _literal_chunks(out) -> dict[tuple[int, ...], np.ndarray]:  # type: ignore[no-untyped-def]
    """The persisted array's chunks by block index, read from its graph (no task runs: a chunk
    computed through Dask would be Dask's copy of it)."""
    graph = dict(out.__dask_graph__())
    got = {}
    for key, v in graph.items():
        v = getattr(v, "value", v)  # a DataNode, in Dask's newer graphs
        assert isinstance(v, np.ndarray), f"{key} is a task, not a chunk: {v!r}"
        got[tuple(key[1:])] = v
    return got


def test_on_gpus_places_chunks_round_robin(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_cupy.install(monkeypatch, gpus=3)
    a = np.arange(11 * 7, dtype=np.float32).reshape(11, 7)
    x = da.from_array(a, chunks=((3, 3, 5), (4, 3)))  # host chunks: copied to their GPU
    out = vyre.dask.on_gpus(x, [2, 0])
    chunks = _literal_chunks(out)
    assert len(chunks) == 6
    for k, idx in enumerate(itertools.product(range(3), range(2))):
        assert isinstance(chunks[idx], fake.ndarray)
        assert chunks[idx].device.id == [2, 0][k % 2]
    np.testing.assert_array_equal(np.asarray(out.compute(scheduler="sync")), a)
    assert isinstance(out._meta, fake.ndarray)


def test_on_gpus_copies_only_chunks_on_another_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_cupy.install(monkeypatch, gpus=2)
    src = fake_cupy.on_device(np.arange(40, dtype=np.float32), 1)
    with fake.cuda.Device(1):  # Dask's from_array copies its input: CuPy copies to the current GPU
        x = da.from_array(src, chunks=10, asarray=False)
    out = vyre.dask.on_gpus(x)  # all GPUs: chunks 0, 2 -> GPU 0 (copied), 1, 3 -> GPU 1 (kept)
    literal = _literal_chunks(out)
    chunks = [literal[(i,)] for i in range(4)]
    assert [c.device.id for c in chunks] == [0, 1, 0, 1]
    assert fake.state["synced"] == [1, 1]  # each copy waited for the GPU that wrote its source
    np.testing.assert_array_equal(np.concatenate(chunks), np.arange(40, dtype=np.float32))
    # a chunk already on its GPU is used as it is: the same array, no copy, no wait
    piece = src[10:20]
    assert vyre.dask_gpus._place(piece, (0, 1), (4,), (1,)) is piece
    assert fake.state["synced"] == [1, 1]


def test_on_gpus_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cupy.install(monkeypatch, gpus=2)
    x = da.ones(4, chunks=2)
    with pytest.raises(DispatchError, match="chunks of a dask array"):
        vyre.dask.on_gpus(np.ones(4))
    for bad in ([], [0, 0], [2], [-1], [True], ["0"]):
        with pytest.raises(DispatchError, match="distinct GPU ordinals in range"):
            vyre.dask.on_gpus(x, bad)
    monkeypatch.setitem(__import__("sys").modules, "cupy", None)
    with pytest.raises(DispatchError, match="CuPy is not installed"):
        vyre.dask.on_gpus(x)


def _launch_order(monkeypatch: pytest.MonkeyPatch, dx, dy, passes: int) -> list[int]:  # type: ignore[no-untyped-def]
    """The GPUs of the chunk tasks, in the order Dask runs them, for ``passes`` independent
    chain + sum passes over the same data in one compute."""
    seen: list[int] = []
    run = vyre.dask._run_chunk

    def logged(*a):  # type: ignore[no-untyped-def]
        seen.append(a[-1].device.id)
        return run(*a)

    monkeypatch.setattr(vyre.dask, "_run_chunk", logged)
    graphs = [vyre.dask.reduce("sum", vyre.dask.map_blocks(_chain(), {"x": dx, "y": dy}, "out", backend="cpu",
                                                           name=f"pass-{j}"), backend="cpu")
              for j in range(passes)]
    sums = dask.compute(*graphs, scheduler="sync")
    assert len({float(s) for s in sums}) == 1
    return seen


def _longest_run(seq: list[int]) -> int:
    return max(len(list(g)) for _, g in itertools.groupby(seq))


@pytest.mark.parametrize("gpus,chunks", [(2, 4), (2, 8), (3, 6)])
def test_on_gpus_feeds_every_gpu_from_the_start(monkeypatch: pytest.MonkeyPatch, gpus: int, chunks: int) -> None:
    """Dask runs several passes over on_gpus data pass by pass, with neighbouring chunks on
    different GPUs: no GPU's tasks come in a long run while another GPU waits. (Chunks made on
    each GPU and concatenated, the layout this replaces, run every pass of one chunk first: runs
    of at least `passes` tasks on one GPU.)"""
    fake_cupy.install(monkeypatch, gpus=gpus)
    n, passes = chunks * 64, 8
    rng = np.random.default_rng(0)
    host_x, host_y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    dx, dy = (vyre.dask.on_gpus(da.from_array(a, chunks=64)) for a in (host_x, host_y))
    order = _launch_order(monkeypatch, dx, dy, passes)
    assert len(order) == passes * chunks
    assert _longest_run(order) <= chunks // gpus + 1  # at most one pass's share, and a neighbour
    assert set(order[:chunks]) == set(range(gpus))  # every GPU has work within the first pass
