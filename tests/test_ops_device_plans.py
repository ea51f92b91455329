"""Replayed op calls on device arrays (``vyre.ops._plans.DevicePlan``) without a GPU.

A stand-in "CuPy array" (its type's module is ``cupy.fake``; it wraps a numpy array) goes through
the ops' CUDA path, whose launches run the programs on the interpreter instead (the GPU form, as
on a card). The first call of a key runs the op as written and is recorded; later calls replay
it: they must give the first call's bits, in new arrays of the caller's kind every call (the
GPU may still be reading the last call's), and never change an earlier call's answers. The GPU
bench checks the same on a card with real CuPy arrays and CUDA tensors."""

from __future__ import annotations

import contextlib
import ctypes
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

import vyre
import vyre.ops as vo
from vyre.driver import fast_launch
from vyre.driver.fast_launch import LaunchConfig, Launcher
from vyre.ir import BufferAccess, Program
from vyre.ops import _launch as LA
from vyre.ops import _plans as P
from vyre.ops import _runtime as RT
from vyre.ops import colwise as C


class _Device:
    id = 0


class _Flags:
    def __init__(self, a: np.ndarray) -> None:
        self.c_contiguous = a.flags.c_contiguous


class FakeCupyArray:
    """The CuPy surface the ops touch: shape, dtype, size, flags, reshape, slices, device."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.data = types.SimpleNamespace(ptr=a.ctypes.data)  # as CuPy's MemoryPointer
        self.device = _Device()

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    ndim = property(lambda self: self.a.ndim)
    size = property(lambda self: self.a.size)
    flags = property(lambda self: _Flags(self.a))

    def reshape(self, *shape: Any) -> FakeCupyArray:
        return FakeCupyArray(self.a.reshape(*shape))

    def __getitem__(self, key: Any) -> FakeCupyArray:
        return FakeCupyArray(self.a[key])


FakeCupyArray.__module__ = "cupy.fake"
_ARRAY_OF: dict[int, np.ndarray] = {}


def _host(x: Any) -> np.ndarray:
    return x.a if isinstance(x, FakeCupyArray) else np.asarray(x)


def _fake_launch(program: Program, arrays: Mapping[str, Any], grid: int, backend: str) -> None:
    """The CUDA launch, on the interpreter: the program's outputs written back into the arrays."""
    assert backend == "cuda"
    host = {name: _host(a) for name, a in arrays.items()}
    out = vyre.dispatch(program, host, backend="interp", grid=grid)
    for name, value in out.items():
        if name in host:
            host[name][...] = value


_PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_PROGRAMS: dict[int, Program] = {}  # a fake function handle -> its program


@_PROTO
def _fake_driver(cfg: int, func: int, params: int, extra: int) -> int:
    """``cuLaunchKernelEx`` on the interpreter: the program of the function handle over the arrays
    its packed arguments point at (numba's ABI: nitems at slot 2, data at slot 4 of each seven)."""
    try:
        c = LaunchConfig.from_address(cfg)
        program = _PROGRAMS[int(func)]
        storage = [b for b in program.buffers if not b.is_workgroup]
        slots = (ctypes.c_void_p * (7 * len(storage))).from_address(params)
        vals = [ctypes.c_int64.from_address(int(slots[k])).value for k in range(7 * len(storage))]
        arrays = {}
        for k, b in enumerate(storage):
            n, ptr, dt = vals[7 * k + 2], vals[7 * k + 4], b.element.np_dtype
            arrays[b.name] = (np.ctypeslib.as_array((np.ctypeslib.as_ctypes_type(dt) * n).from_address(ptr))
                              if n else np.empty(0, dt))
        out = vyre.dispatch(program, arrays, backend="interp", grid=c.grid_x)
        for name, value in out.items():
            if name in arrays:
                arrays[name][...] = value
        return 0
    except Exception as e:  # a ctypes callback cannot raise: the launch reports an error code
        _ERRORS.append(e)
        return 1


_ERRORS: list[BaseException] = []


def _fake_build(program: Program, device: int | None) -> LA._Lean:
    _PROGRAMS[id(program)] = program
    order = tuple((b.name, b.element.size_bytes) for b in program.buffers if not b.is_workgroup)
    return LA._Lean(ctypes.c_void_p(id(program)), order, program.workgroup_size, False)


@pytest.fixture(params=["launch", "driver"])
def fake_gpu(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Any:
    """A stand-in GPU. ``launch``: every launch runs the program on the interpreter (the plan's
    passes through ``launch``). ``driver``: launches go the whole way to a stand-in for the
    driver's entry point, so replays take the plans' pre-packed launches (DeviceLaunch), whose
    packed arguments the stand-in decodes."""
    cupy = types.ModuleType("cupy")
    # uninitialised memory as garbage (NaN, or 7 for the integers), so an unwritten output shows
    cupy.empty = lambda n, dtype: FakeCupyArray(  # type: ignore[attr-defined]
        np.full(n, np.nan if np.dtype(dtype).kind == "f" else 7, dtype))
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        runtime=types.SimpleNamespace(getDevice=lambda: 0), Device=lambda d: None)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    if request.param == "launch":
        monkeypatch.setattr(RT, "launch", _fake_launch)
        monkeypatch.setattr(P, "launch", _fake_launch)
    else:
        monkeypatch.setattr(LA, "dispatch", lambda program, arrays, backend, grid, return_device:
                            _fake_launch(program, arrays, grid, backend))
        monkeypatch.setattr(LA, "_build", _fake_build)
        monkeypatch.setattr(LA, "_lean", {})
        monkeypatch.setattr(LA, "current_ordinal", lambda: 0)
        monkeypatch.setattr(P, "current_ordinal", lambda: 0)
        monkeypatch.setattr(fast_launch, "_launcher", Launcher(_fake_driver, True))
    monkeypatch.setattr(LA, "resident_workgroups", lambda program: 4)
    monkeypatch.setattr(P, "simulator_enabled", lambda: False)
    monkeypatch.setattr(RT, "simulator_enabled", lambda: False)
    P.forget()
    _ERRORS.clear()
    yield request.param
    assert not _ERRORS, _ERRORS
    P.forget()


def _answers(a: Any) -> Any:
    return tuple(_answers(p) for p in a) if isinstance(a, tuple) else np.array(_host(a), copy=True)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    return bool(np.array_equal(a, b, equal_nan=True)) and a.dtype == b.dtype and a.shape == b.shape


def _cases(x: Any, y: Any, m: Any, m2: Any, v: Any, g: Any) -> dict[str, Callable[[], Any]]:
    # along axis 0: the column form's two passes (90 rows: two row splits, then their merge)
    c = FakeCupyArray(np.tile(x.a, 3).reshape(90, 10))
    return {
        "sum(c, 0)": lambda: vo.sum(c, 0), "mean(c, 0)": lambda: vo.mean(c, 0), "argmax(c, 0)": lambda: vo.argmax(c, 0),
        "sum": lambda: vo.sum(x), "max": lambda: vo.max(x), "argmax": lambda: vo.argmax(x),
        "dot": lambda: vo.dot(x, y), "norm": lambda: vo.norm(x),
        "row_sum": lambda: vo.row_sum(m), "softmax+lse": lambda: vo.softmax(m, return_lse=True),
        "layer_norm": lambda: vo.layer_norm(m, 0.25), "softmax_grad": lambda: vo.softmax_grad(m, m2),
        "matvec": lambda: vo.matvec(m, v), "matvec_grad": lambda: vo.matvec_grad(m, v, g),
    }


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_device_calls_replay_the_first_calls_bits_into_new_arrays(fake_gpu: str, dt: type) -> None:
    rng = np.random.default_rng(3)
    x, y = (FakeCupyArray(rng.standard_normal(300).astype(dt)) for _ in range(2))
    m, m2 = (FakeCupyArray(rng.standard_normal((3, 40)).astype(dt)) for _ in range(2))
    v, g = FakeCupyArray(rng.standard_normal(40).astype(dt)), FakeCupyArray(rng.standard_normal(3).astype(dt))
    for name, op in _cases(x, y, m, m2, v, g).items():
        first = op()  # checked and recorded
        kept = _answers(first)
        later = [op() for _ in range(2)]  # replayed
        assert all(_same(_answers(r), kept) for r in later), name
        assert _same(_answers(first), kept), f"{name}: a replay wrote into an earlier call's answer"
        for r in (first, *later):
            for part in (r if isinstance(r, tuple) else (r,)):
                assert isinstance(part, FakeCupyArray), (name, type(part))  # the caller's kind, 0-d for scalars
        ids = [id(_host(p).base if _host(p).base is not None else _host(p))
               for r in later for p in (r if isinstance(r, tuple) else (r,))]
        assert len(set(ids)) == len(ids), f"{name}: two calls returned the same buffer"
    kinds = {type(p) for p in P._plans.values()}
    assert kinds == {P.DevicePlan} and len(P._plans) == len(_cases(x, y, m, m2, v, g))
    if fake_gpu == "driver":  # every replay took the pre-packed launches
        assert all(p.launches is not None for p in P._plans.values())  # type: ignore[union-attr]


def test_length_only_buffers_are_shared_by_a_plans_calls(fake_gpu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A column reduction passes its shape as the lengths of buffers no kernel reads or writes
    (vyre.ops.colwise): a device plan allocates those once and every call shares them, while
    everything a pass writes is new per call."""
    monkeypatch.setattr(C, "SPLIT_MIN_ROWS", 8)  # 40 rows in splits of 8: two passes
    cupy = sys.modules["cupy"]
    made = cupy.empty
    allocations: list[int] = []

    def empty(n: int, dtype: Any) -> FakeCupyArray:
        allocations.append(n)
        return made(n, dtype)

    monkeypatch.setattr(cupy, "empty", empty)
    x = FakeCupyArray(np.round(np.random.default_rng(5).standard_normal((40, 12)) * 2).astype(np.float32))
    want = np.argmax(x.a, 0)
    per_call = []
    for _ in range(4):  # recorded, then replayed: the first replay makes the carriers, later ones share them
        allocations.clear()
        np.testing.assert_array_equal(_host(vo.argmax(x, 0)).astype(np.int64), want)
        per_call.append(len(allocations))
    (plan,) = P._plans.values()
    assert isinstance(plan, P.DevicePlan) and len(plan.runs) == 2
    written = {i for program, _, names, picks, _ in plan.runs for name, i in zip(names, picks, strict=True)
               if program.buffer(name).access is not BufferAccess.READ_ONLY}
    allocated = set(range(1, 1 + len(plan.allocs)))
    assert {1 + k for k in plan.carriers} == allocated - written  # the four length carriers
    assert len(plan.carriers) == 4 and all(plan.shared[k] is not None for k in plan.carriers)
    assert per_call[1] == len(plan.allocs) and per_call[2:] == [len(plan.allocs) - 4] * 2  # only the outputs
    before = list(plan.shared)
    vo.argmax(x, 0)
    assert all(a is b for a, b in zip(plan.shared, before, strict=True))


def test_cupy_replays_allocate_on_the_arrays_device(fake_gpu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CuPy plan allocates through bound ``cupy.empty`` calls while the arrays' device is
    current, and through the Ctx (which switches to the arrays' device) while another one is:
    every buffer of a call lands on the arrays' device either way."""
    cupy = sys.modules["cupy"]
    state = {"dev": 0}
    where: list[int] = []
    made = cupy.empty

    def empty(n: int, dtype: Any) -> FakeCupyArray:
        where.append(state["dev"])
        return made(n, dtype)

    @contextlib.contextmanager
    def device(d: int) -> Any:
        before, state["dev"] = state["dev"], d
        try:
            yield
        finally:
            state["dev"] = before

    monkeypatch.setattr(cupy, "empty", empty)
    monkeypatch.setattr(cupy, "cuda", types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDevice=lambda: state["dev"]), Device=device))
    x = FakeCupyArray(np.round(np.random.default_rng(8).standard_normal((90, 12)) * 2).astype(np.float32))
    want = x.a.astype(np.float64).sum(0)
    for current in (0, 0, 1, 1):  # recorded, replayed, then replayed with another device current
        state["dev"] = current
        where.clear()
        np.testing.assert_allclose(_host(vo.sum(x, 0)), want, rtol=1e-6)
        assert where and set(where) == {0}, (current, where)
        assert state["dev"] == current
    (plan,) = P._plans.values()
    assert isinstance(plan, P.DevicePlan) and plan.makers is not None


def test_a_replay_runs_no_check_and_no_op_code(fake_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    x = FakeCupyArray(np.linspace(-1, 2, 301, dtype=np.float32))
    want = _answers(vo.sum(x))

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a replayed call prepared its arrays again")

    monkeypatch.setattr(RT, "_prepare", refuse)
    assert _same(_answers(vo.sum(x)), want)


def test_device_plan_keys_keep_every_distinction(fake_gpu: None) -> None:
    """Another shape, dtype or option is another key; an array that is not C-contiguous, or one
    of another library beside it, never reaches a plan."""
    a = FakeCupyArray(np.arange(12, dtype=np.float32).reshape(3, 4))
    b = FakeCupyArray(np.arange(12, dtype=np.float64).reshape(3, 4))
    keys = {P.plan_key(("softmax", False, None), (x,), None)[0] for x in (a, b, a.reshape(4, 3))}  # type: ignore[index]
    assert len(keys) == 3
    assert P.plan_key(("softmax", True, None), (a,), None) != P.plan_key(("softmax", False, None), (a,), None)
    assert P.plan_key(("softmax", False, None), (a[:, ::2],), None) is None
    assert P.plan_key(("matvec", None), (a, np.ones(4, np.float32)), None) is None
    assert P.plan_key(("softmax", False, None), (a,), "cpu") is None
    assert vo.softmax(a).a.shape == (3, 4)  # the checked path still runs where no plan may
