"""Several GPUs through Dask, on the CPU: ``vyre.dask.on_gpus`` lays chunks out round robin as
literal (persisted) chunks, so Dask feeds every GPU from its first tasks on (fake CuPy devices);
``reduce`` over a ``map_blocks`` result runs one task per chunk and gives the unfused path's
values bit for bit."""

from __future__ import annotations

import itertools
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import fake_cupy
from vyre.errors import DispatchError, ValidationError
from vyre.ir import F32, U32, Program, buflen, exp, gid, if_, let, output, read, sin, store, u32, var

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
import vyre.dask  # noqa: E402
import vyre.dask.gpus  # noqa: E402
import vyre.dask.graph  # noqa: E402
import vyre.dask.chunks  # noqa: E402
import vyre.dask.reductions  # noqa: E402


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

def _inputs(kind: str, x: np.ndarray, chunks: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """A dask array of ``x``: chunks read from the array (a materialized layer of getters),
    persisted (literal chunks, as on_gpus gives them), or an unpersisted expression (a Blockwise
    layer, which keeps Dask's full optimization)."""
    d = da.from_array(x, chunks=(chunks,))
    if kind == "persisted":
        (d,) = dask.persist(d, scheduler="sync")
    elif kind == "expression":
        d = d * np.float32(1)
    return d


@settings(max_examples=25, deadline=None)
@given(chunks_1d, st.sampled_from(["sum", "max", "min"]), st.sampled_from([None, 2, 3]),
       st.sampled_from(["from_array", "persisted", "expression"]), st.booleans(), st.integers(0, 2**32 - 1))
def test_fused_reduce_equals_the_unfused_path(spec: tuple[int, list[int]], op: str, split_every: int | None,
                                              kind: str, optimize_graph: bool, seed: int) -> None:
    n, cuts = spec
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    dx = _inputs(kind, x, _uneven(n, cuts))
    dy = _inputs(kind, y, _uneven(n, [*cuts[::-1], n // 2]))  # other chunks: aligned by Dask
    m = vyre.dask.map_blocks(_chain(), {"x": dx, "y": dy}, "out", backend="cpu")
    fused = vyre.dask.reduce(op, m, backend="cpu", split_every=split_every)
    unfused = vyre.dask.reduce(op, m.copy(), backend="cpu", split_every=split_every)  # a copy: no recipe
    assert isinstance(fused, vyre.dask.graph.VyreArray) and not isinstance(unfused, vyre.dask.graph.VyreArray)
    assert fused.name != unfused.name
    # computed together with plain dask arrays over the same inputs (two optimizers, one graph)
    got, want, plain, mapped = dask.compute(fused, unfused, dx.sum(), m, scheduler="threads",
                                            optimize_graph=optimize_graph)
    assert got.dtype == want.dtype == np.float32
    assert got.tobytes() == want.tobytes()
    assert plain == dx.sum().compute(scheduler="sync")
    assert got.tobytes() == vyre.dask.reduce(op, m, backend="cpu", split_every=split_every).compute(
        scheduler="sync").tobytes()
    whole = vyre.dispatch(_chain(), {"x": x, "y": y, "out": np.zeros(n, np.float32)}, backend="cpu")["out"]
    assert mapped.tobytes() == whole.tobytes()
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


# ---- the graph Dask prepares on every compute: vyre's tasks as they were written, culled

def _persisted_chain(n: int = 200, chunk: int = 30):  # type: ignore[no-untyped-def]
    x = np.linspace(-2, 2, n, dtype=np.float32)
    (dx,) = dask.persist(da.from_array(x, chunks=chunk), scheduler="sync")
    return dx, [vyre.dask.reduce("sum", vyre.dask.map_blocks(_chain(), {"x": dx, "y": dx}, "out", backend="cpu",
                                                             name=f"pass-{j}"), backend="cpu") for j in range(3)]


def test_the_optimizer_only_culls_materialized_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every layer materialized, Dask's optimization of vyre's graphs is the cull alone: the
    task objects vyre wrote come back as they are (no fusion, no renamed keys), the chunks as data,
    and keys no result needs are dropped. Dask's array optimizer is never called."""
    from dask._task_spec import DataNode, Task
    from dask.highlevelgraph import HighLevelGraph

    def refuse(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("Dask's array optimizer ran")

    dx, passes = _persisted_chain()
    unused = vyre.dask.reduce("max", vyre.dask.map_blocks(_chain(), {"x": dx, "y": dx}, "out", backend="cpu"),
                              backend="cpu")
    monkeypatch.setattr(da.Array, "__dask_optimize__", staticmethod(refuse))
    graph = HighLevelGraph.merge(*(g.dask for g in [*passes, unused]))
    keys = [g.__dask_keys__() for g in passes]
    opt = vyre.dask.graph.optimize(graph, keys)
    written = {k: v for g in passes for k, v in g.dask.layers[g.name].items()}
    assert set(opt) == set(written) | set(dx.__dask_keys__())
    assert all(opt[k] is v for k, v in written.items())  # the very objects: nothing converted or fused
    assert all(isinstance(v, Task) for v in written.values())
    assert all(isinstance(opt[k], DataNode) for k in dx.__dask_keys__())
    got = dask.compute(*passes, scheduler="threads")  # through Dask's compute, the same optimizer
    assert len({v.tobytes() for v in got}) == 1


def test_the_optimizer_defers_to_dask_where_it_may_fuse(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph with a layer that is not materialized (an expression over dask arrays, not
    persisted) gets Dask's array optimization, as does any graph when `array_optimize` is set."""
    calls: list[str] = []
    dask_opt = da.Array.__dask_optimize__

    def logged(dsk, keys, **kw):  # type: ignore[no-untyped-def]
        calls.append("dask")
        return dask_opt(dsk, keys, **kw)

    monkeypatch.setattr(da.Array, "__dask_optimize__", staticmethod(logged))
    x = da.from_array(np.linspace(-1, 1, 90, dtype=np.float32), chunks=20)
    lazy = vyre.dask.reduce("sum", vyre.dask.map_blocks(_chain(), {"x": x + 1, "y": x}, "out", backend="cpu"),
                            backend="cpu")
    eager = vyre.dask.reduce("sum", vyre.dask.map_blocks(_chain(), {"x": x, "y": x}, "out", backend="cpu"),
                             backend="cpu")
    want = vyre.dask.reduce("sum", vyre.dask.map_blocks(_chain(), {"x": x + 1, "y": x}, "out",
                                                        backend="cpu").copy(), backend="cpu")
    assert lazy.compute().tobytes() == want.compute().tobytes()
    assert calls == ["dask", "dask"]  # lazy's graph, then want's (a plain dask array)
    calls.clear()
    eager.compute()
    assert calls == []
    monkeypatch.undo()  # Dask's own optimizer entry again, which follows the configuration
    seen: list[int] = []
    with dask.config.set(array_optimize=lambda dsk, keys, **kw: seen.append(1) or dsk):
        assert eager.compute().tobytes() == eager.compute(optimize_graph=False).tobytes()
    assert seen == [1]


def test_arrays_derived_from_a_vyre_array_are_plain_dask_arrays() -> None:
    _, passes = _persisted_chain()
    r = passes[0]
    assert isinstance(r, vyre.dask.graph.VyreArray) and isinstance(r, da.Array)
    assert r.shape == () and r.dtype == np.float32
    derived = [r + 1, r.astype(np.float64), da.stack([r, passes[1]])]
    assert all(type(d) is da.Array for d in derived)
    value = r.compute()
    assert (r + 1).compute() == value + 1
    assert da.stack([r, passes[1]]).compute().tobytes() == np.array([value, value]).tobytes()
    (kept,) = dask.persist(r)
    assert kept.compute() == value
    (delayed,) = r.to_delayed().ravel()
    assert delayed.compute() == value


def test_a_gpu_partial_is_copied_behind_its_own_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The partial's copy to host memory and an event are queued on the legacy default stream when
    the partial is made; the final task waits for that event, not for the GPU's whole queue."""
    fake = fake_cupy.install(monkeypatch, gpus=1)
    value = np.array(1.25, np.float64)
    device = types.SimpleNamespace(nbytes=value.nbytes, dtype=value.dtype, size=1, shape=(),
                                   data=types.SimpleNamespace(ptr=value.ctypes.data))
    pending = vyre.dask.gpus.PendingPartial(device)
    assert fake.state["log"] == [("copy", 0, value.nbytes), ("record", 0)]  # queued at once, copy first
    value[...] = 0  # the "device" memory changes after the copy was queued (and ran): not seen
    got = vyre.dask.reductions._host(pending)
    assert fake.state["log"][-1] == ("wait",)
    assert got.shape == () and got.dtype == np.float64 and float(got) == 1.25


# ---- building graphs: the program validated and encoded once, device data never hashed

def _table_mix() -> Program:
    x, t, out = read("x", 0, U32), read("t", 1, U32), output("out", 2, U32)
    i = var("i")
    return Program.wrapped([x, t, out], 64, [let("i", gid()), if_(i.lt(buflen(out)), [
        store(out, i, x[i] * u32(2654435761) + t[x[i] % buflen(t)])])])


class _DeviceTable:
    """A stand-in for a GPU array given whole to every chunk: pickling it (what Dask's tokenizer
    does to objects it does not know, a copy to the host for a real one) fails the test."""

    shape, dtype = (4,), np.dtype(np.uint32)

    @property
    def __cuda_array_interface__(self) -> dict[str, object]:
        return {"shape": (4,), "typestr": "<u4", "data": (0, True), "version": 3}

    def __reduce__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("device data was pickled to name a graph")


def test_graph_names_never_hash_device_buffers() -> None:
    x = da.from_array(np.arange(40, dtype=np.uint32), chunks=10)
    table = _DeviceTable()
    a = vyre.dask.map_blocks(_table_mix(), {"x": x, "t": table}, "out", backend="cpu")
    b = vyre.dask.map_blocks(_table_mix(), {"x": x, "t": table}, "out", backend="cpu")
    assert a.name != b.name  # a device buffer names its call alone (nothing was hashed)
    fn = a._vyre_recipe.fn
    assert dask.base.tokenize(fn) == dask.base.tokenize(fn)  # the same each time Dask asks
    assert a.name.startswith("_run_chunk-")
    # host tables are hashed as Dask hashes numpy arrays: equal calls are one computation
    t1, t2 = np.arange(4, dtype=np.uint32), np.arange(4, dtype=np.uint32)
    host = [vyre.dask.map_blocks(_table_mix(), {"x": x, "t": t}, "out", backend="cpu") for t in (t1, t2, t2 + 1)]
    assert host[0].name == host[1].name != host[2].name
    want = vyre.dispatch(_table_mix(), {"x": np.arange(40, dtype=np.uint32), "t": t1,
                                        "out": np.zeros(40, np.uint32)}, backend="cpu")["out"]
    assert host[0].compute().tobytes() == want.tobytes()


def test_a_program_is_validated_and_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """map_blocks validates and encodes a Program object once (graphs built every iteration), an
    equal new object again, an invalid one on every call; the memo is bounded."""
    seen: list[Program] = []
    validate = Program.validate

    def counted(self):  # type: ignore[no-untyped-def]
        seen.append(self)
        return validate(self)

    def times(q: Program) -> int:  # validations of this very object (dispatch validates its own copies)
        return sum(v is q for v in seen)

    monkeypatch.setattr(Program, "validate", counted)
    p = _chain()
    x = da.from_array(np.linspace(0, 1, 50, dtype=np.float32), chunks=20)
    outs = [vyre.dask.map_blocks(p, {"x": x, "y": x}, "out", backend="cpu", name=f"once-{j}") for j in range(3)]
    assert times(p) == 1
    assert len({o.compute().tobytes() for o in outs}) == 1
    q = _chain()  # an equal but new object
    vyre.dask.map_blocks(q, {"x": x, "y": x}, "out", backend="cpu")
    assert times(q) == 1 and times(p) == 1
    for _ in range(64):  # the memo is bounded: the oldest entries go
        vyre.dask.map_blocks(_chain(), {"x": x, "y": x}, "out", backend="cpu")
    assert len(vyre.dask.chunks._WIRES) <= 64
    vyre.dask.map_blocks(p, {"x": x, "y": x}, "out", backend="cpu")
    assert times(p) == 2  # forgotten, so validated again
    bad = Program.wrapped([read("x", 0, F32), output("out", 1, F32)], 64, [store(output("out", 1, F32), var("i"),
                                                                                read("x", 0, F32)[var("i")])])
    for _ in range(2):  # an invalid program is refused on every call, never remembered
        with pytest.raises(ValidationError, match="V008"):
            vyre.dask.map_blocks(bad, {"x": x}, "out", backend="cpu")
    assert times(bad) == 2


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
    assert vyre.dask.gpus._place(piece, (0, 1), (4,), (1,)) is piece
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
    run = vyre.dask.chunks._run_chunk

    def logged(*a):  # type: ignore[no-untyped-def]
        seen.append(a[-1].device.id)
        return run(*a)

    monkeypatch.setattr(vyre.dask.chunks, "_run_chunk", logged)
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
