"""vyre.ops whole-array reductions on the interpreter and the CPU against numpy / math.fsum:
Hypothesis over lengths and values (NaN, inf, huge, tiny), both program forms, the error bound of
docs/ops.md, determinism and bad input. The simulator runs in tests/test_ops_sim.py."""

from __future__ import annotations

import builtins
import math
from builtins import max as builtins_max

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import vyre.ops as ops
from tests.ops_cases import arrays, check_sum, expected_extreme, floats_array, same_float
from vyre.errors import VyreError
from vyre.ir import DataType
from vyre.ops import argreduce as A
from vyre.ops import reduce as R

BACKENDS = ["cpu", "interp"]


def _run(kind: R.Reduce, post: R.Post, named: dict, backend: str, gpu_form: bool | None = None) -> float:
    return float(R._reduce(kind, post, named, backend, gpu_form))


@pytest.mark.parametrize("backend", BACKENDS)
@given(x=arrays())
def test_sum_mean_norm(backend: str, x: np.ndarray) -> None:
    s = ops.sum(x, backend=backend)
    assert isinstance(s, x.dtype.type)
    check_sum(float(s), x)
    m = float(ops.mean(x, backend=backend))
    if x.size == 0:
        assert math.isnan(m)
    else:
        check_sum(m * x.size, x) if math.isfinite(m) and np.all(np.isfinite(x)) else None
    nm = float(ops.norm(x, backend=backend))
    with np.errstate(all="ignore"):
        ref = float(np.sqrt(math.fsum(x.astype(np.float64) ** 2))) if np.all(np.isfinite(x)) else math.nan
    if math.isnan(ref):
        assert math.isnan(nm) or math.isinf(nm)
    else:
        assert abs(nm - ref) <= 4e-7 * ref + 1e-300, (nm, ref)


@pytest.mark.parametrize("backend", BACKENDS)
@given(x=arrays())
def test_max_min_argmax(backend: str, x: np.ndarray) -> None:
    assert same_float(float(ops.max(x, backend=backend)), expected_extreme(x, True))
    assert same_float(float(ops.min(x, backend=backend)), expected_extreme(x, False))
    if x.size:
        i = ops.argmax(x, backend=backend)
        assert isinstance(i, np.int64)
        assert i == np.argmax(x)


@pytest.mark.parametrize("backend", BACKENDS)
@given(data=st.data())
def test_dot(backend: str, data: st.DataObject) -> None:
    x = data.draw(arrays())
    y = floats_array(data.draw, x.size, x.dtype.type, data.draw(st.booleans()))
    check_sum(float(ops.dot(x, y, backend=backend)), x, y, staged=True)


@settings(max_examples=8)
@given(x=arrays())
def test_gpu_form_on_the_interpreter(x: np.ndarray) -> None:
    """The programs CUDA runs (grid-stride, unrolled, subgroup + workgroup combine, two passes), on
    the reference interpreter."""
    check_sum(_run(R.Reduce.SUM, R.Post.NONE, {"x": x}, "interp", True), x)
    assert same_float(_run(R.Reduce.MAX, R.Post.NONE, {"x": x}, "interp", True), expected_extreme(x, True))
    assert same_float(_run(R.Reduce.MIN, R.Post.NONE, {"x": x}, "interp", True), expected_extreme(x, False))
    if x.size:
        assert A._argmax(x, "interp", True) == np.argmax(x)


def test_gpu_form_multi_workgroup_passes() -> None:
    """Enough elements for several workgroups and a second pass over their partials, with the maximum
    and a NaN placed late (the second pass must keep the lowest index)."""
    rng = np.random.default_rng(1)
    n = builtins.max(2 * R.GPU_WG * R.GPU_UNROLL, R.GPU_ONE_PASS) + 77  # past one pass's length
    x = rng.standard_normal(n)
    x[[5, n - 3]] = 9.0
    assert A._argmax(x, "interp", True) == 5
    check_sum(_run(R.Reduce.SUM, R.Post.NONE, {"x": x}, "interp", True), x)
    x[n - 10] = math.nan
    x[n - 2] = math.nan
    assert A._argmax(x, "interp", True) == n - 10
    assert math.isnan(_run(R.Reduce.MAX, R.Post.NONE, {"x": x}, "interp", True))


@settings(max_examples=20, deadline=None)
@given(n=st.one_of(st.integers(1, 1 << 20), st.sampled_from([R.GPU_ONE_PASS, R.GPU_ONE_PASS + 1])),
       exact=st.booleans())
def test_small_gpu_reductions_take_one_pass(n: int, exact: bool) -> None:
    """Up to GPU_ONE_PASS elements a GPU reduction is one pass of one workgroup (one launch), past it
    several workgroups and a pass over their partials; the plan depends on the length alone."""
    from vyre.ir import F32

    kind = R.Reduce.MAX if exact else R.Reduce.SUM
    passes = R._passes(kind, F32, R.Post.NONE, n, True, 1056)
    assert [g for _, g, _ in passes] == ([1] if n <= R.GPU_ONE_PASS else [builtins.min(1056, -(-n // 2048)), 1])
    assert [g for _, g in A._argmax_passes(F32, n, True, 1056)] == [g for _, g, _ in passes]


def test_one_pass_and_two_at_the_boundary_on_the_interpreter() -> None:
    """The GPU form at GPU_ONE_PASS elements (one workgroup, each invocation several steps) and one
    past it (two passes), with the maximum and a NaN late: numpy's answers."""
    for n in (R.GPU_ONE_PASS, R.GPU_ONE_PASS + 1):
        x = np.random.default_rng(n).standard_normal(n)
        x[[3, n - 2]] = 7.0
        assert A._argmax(x, "interp", True) == 3
        check_sum(_run(R.Reduce.SUM, R.Post.NONE, {"x": x}, "interp", True), x)
        assert _run(R.Reduce.MAX, R.Post.NONE, {"x": x}, "interp", True) == 7.0
        x[n - 1] = math.nan
        assert A._argmax(x, "interp", True) == n - 1
        assert math.isnan(_run(R.Reduce.MIN, R.Post.NONE, {"x": x}, "interp", True))


@settings(max_examples=15, deadline=None)
@example(n=100, dtype=np.float64, plants=[], base="-inf", seed=0)  # nothing beats -inf: the first one
@example(n=2 * R.GPU_WG * R.GPU_UNROLL + 5, dtype=np.float32, plants=[], base="constant", seed=0)
@example(n=R.GPU_WG * R.GPU_UNROLL + 1, dtype=np.float32, plants=[(0.9, "max"), (0.2, "max")], base="normal", seed=1)
@given(n=st.integers(1, 3 * R.GPU_WG * R.GPU_UNROLL + 300), dtype=st.sampled_from([np.float32, np.float64]),
       plants=st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["max", "nan", "-inf"])), max_size=5),
       base=st.sampled_from(["normal", "constant", "-inf"]), seed=st.integers(0, 2**31))
def test_gpu_form_argmax_keeps_the_first_index_across_its_pairs(n: int, dtype: type, plants: list[tuple[float, str]],
                                                                 base: str, seed: int) -> None:
    """The GPU argmax's first pass keeps GPU_UNROLL (maximum, index) pairs per invocation, each
    taking its elements in index order without comparing indices, then merges them: equal maxima
    in several pairs, invocations and workgroups, the first of several NaNs, constant and all -inf
    arrays, lengths that end mid-step. On the interpreter, against numpy."""
    rng = np.random.default_rng(seed)
    x = {"normal": rng.standard_normal(n), "constant": np.full(n, 1.5), "-inf": np.full(n, -np.inf)}[base]
    x = x.astype(dtype)
    top = float(np.max(x)) + 1.0 if base != "-inf" else 0.0
    for where, what in plants:
        x[min(int(where * n), n - 1)] = {"max": top, "nan": np.nan, "-inf": -np.inf}[what]
    assert A._argmax(x, "interp", True) == np.argmax(x)
    # one or two workgroups over the whole array: each pair sees several elements (an op call
    # only does that past gpu_workgroups_cap() * GPU_WG * GPU_UNROLL elements)
    from vyre import dispatch
    from vyre.ir import F32, F64

    prog = A.argmax_program(F32 if dtype is np.float32 else F64, gpu=True, indexed=False)
    for groups in (1, 2):
        out = dispatch(prog, {"x": x, "val": np.zeros(groups, dtype), "idx": np.zeros(groups, np.uint32)},
                       backend="interp", grid=groups)
        assert _first_argmax(out["val"], out["idx"]) == np.argmax(x), groups


@given(x=arrays(special=False))
def test_cpu_form_is_bit_identical_on_cpu_and_interpreter(x: np.ndarray) -> None:
    """Fixed partition, fixed order, no atomics: the compiled kernel and the reference agree exactly,
    and repeated calls agree exactly (docs/ops.md, "Determinism")."""
    twin = x[::-1].copy()
    for f in (ops.sum, ops.norm, ops.mean, lambda v, backend: ops.dot(v, twin, backend=backend)):
        a = f(x, backend="cpu")
        b = f(x, backend="interp")
        assert a.tobytes() == b.tobytes() or (np.isnan(a) and np.isnan(b))
        assert f(x, backend="cpu").tobytes() == a.tobytes() or np.isnan(a)


def test_parallel_blocks_cover_everything() -> None:
    """Large inputs run on the parallel entries in blocks of CPU_BLOCK (the lane-array forms; a
    second pass over the partials); a length that does not divide evenly must still count every
    element once, and a block's tail (fewer than CPU_LANES elements) too."""
    n = (1 << 20) + 12345
    x = np.ones(n, np.float32)
    x[-1] = 7.0
    assert ops.sum(x, backend="cpu") == n + 6
    assert ops.max(x, backend="cpu") == 7.0
    assert ops.argmax(x, backend="cpu") == n - 1


@given(n=st.sampled_from([R.CPU_BLOCK + 1, 3 * R.CPU_BLOCK + 5, R.CPU_BLOCK_EXACT, R.CPU_BLOCK_EXACT + 1,
                          2 * R.CPU_BLOCK_EXACT + 3]),
       where=st.floats(0, 1), nan=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]))
@settings(max_examples=25, deadline=None)
def test_exact_reductions_take_long_blocks(n: int, where: float, nan: bool, dtype: type) -> None:
    """max, min and argmax cut the array into blocks of CPU_BLOCK_EXACT (one pass up to that
    length; the sums keep CPU_BLOCK): the answer is numpy's wherever the extreme (or the first
    NaN) lies, across block boundaries, on the serial and the parallel entries."""
    x = np.random.default_rng(n).standard_normal(n).astype(dtype)
    at = min(int(where * n), n - 1)
    x[at] = np.nan if nan else 1e6
    x[n - 1 - at] = -1e6 if not nan else x[n - 1 - at]
    assert same_float(ops.max(x, backend="cpu"), x.max()) and same_float(ops.min(x, backend="cpu"), x.min())
    assert ops.argmax(x, backend="cpu") == x.argmax()
    passes = R._passes(R.Reduce.MAX, DataType.F32 if dtype is np.float32 else DataType.F64, R.Post.NONE, n, False, 0)
    assert [g for _, g, _ in passes] == ([1] if n <= R.CPU_BLOCK_EXACT else [-(-n // R.CPU_BLOCK_EXACT), 1])


def _segment(dtype: type) -> int:
    """Elements per segment of the CPU argmax (vyre.ops.argreduce._argmax_lanes), at least."""
    return R.CPU_BLOCK_EXACT * R.CPU_LANES * np.dtype(dtype).itemsize // A.ARGMAX_SNAPSHOT_BYTES


def _first_argmax(v: np.ndarray, xi: np.ndarray) -> int:
    """The lowest ``xi`` among the elements holding the maximum (NaN: among the NaNs)."""
    hold = np.isnan(v) if np.isnan(v).any() else v == v.max()
    return int(xi[hold].min())


@given(segs=st.floats(0.1, 3.5), dtype=st.sampled_from([np.float32, np.float64]),
       plants=st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["max", "nan", "inf", "-inf"])), max_size=6),
       base=st.sampled_from(["normal", "constant", "-inf"]), seed=st.integers(0, 2**31))
@settings(max_examples=40, deadline=None)
def test_argmax_finds_the_first_maximum_across_segments(segs: float, dtype: type, plants: list[tuple[float, str]],
                                                        base: str, seed: int) -> None:
    """The CPU argmax finds the lowest index holding a block's maximum by scanning one segment of
    each lane that holds it: equal maxima in several lanes and segments, the first of several
    NaNs, +-inf, constant and all -inf blocks, blocks of one segment and of several, a last
    segment shorter than the rest, and a block longer than its snapshots hold (one workgroup over
    the whole array: segments grow). Checked against numpy on both entries, and through
    ``xi`` (a later pass: the index is xi's, not the position)."""
    from vyre import dispatch
    from vyre.ir import F32, F64

    n = builtins_max(1, int(segs * _segment(dtype)))
    rng = np.random.default_rng(seed)
    x = {"normal": rng.standard_normal(n), "constant": np.full(n, 2.5), "-inf": np.full(n, -np.inf)}[base]
    x = x.astype(dtype)
    top = np.float64(x.max()) + 1.0 if base != "-inf" else 0.0
    for where, what in plants:
        at = min(int(where * n), n - 1)
        x[at] = {"max": top, "nan": np.nan, "inf": np.inf, "-inf": -np.inf}[what]
    assert ops.argmax(x, backend="cpu") == np.argmax(x)
    t = F32 if dtype is np.float32 else F64
    prog = A.argmax_program(t, gpu=False, indexed=False)
    # one block (one workgroup) over more than CPU_BLOCK_EXACT elements: longer segments
    big = np.resize(x, R.CPU_BLOCK_EXACT + 3 * n)
    out = dispatch(prog, {"x": big, "val": np.zeros(1, dtype), "idx": np.zeros(1, np.uint32)}, backend="cpu", grid=1)
    assert int(out["idx"][0]) == np.argmax(big)
    xi = np.sort(rng.choice(4 * n + 7, size=n, replace=False)).astype(np.uint32)
    out = dispatch(A.argmax_program(t, gpu=False, indexed=True),
                   {"x": x, "xi": xi, "val": np.zeros(1, dtype), "idx": np.zeros(1, np.uint32)}, backend="cpu", grid=1)
    assert int(out["idx"][0]) == _first_argmax(x, xi)


def test_empty_identities() -> None:
    for dt in (np.float32, np.float64):
        e = np.zeros(0, dt)
        assert ops.sum(e, backend="cpu") == 0 and ops.dot(e, e, backend="cpu") == 0
        assert ops.norm(e, backend="cpu") == 0
        assert ops.max(e, backend="cpu") == -np.inf and ops.min(e, backend="cpu") == np.inf
        assert np.isnan(ops.mean(e, backend="cpu"))


def _check_norm(got: float, x: np.ndarray) -> None:
    ref = math.sqrt(math.fsum((x.astype(np.float64) ** 2).tolist()))
    assert abs(got - ref) <= 4e-7 * ref + 1e-45, (got, ref)


@settings(deadline=None)
@given(n=st.integers(1, 1200), where=st.floats(0, 1), plant=st.sampled_from(["cancel", "tiny", "huge", "zeros"]),
       backend=st.sampled_from(BACKENDS), seed=st.integers(0, 2**32 - 1))
@example(n=700, where=0.1, plant="cancel", backend="cpu", seed=0)  # in a stage
@example(n=700, where=0.99, plant="cancel", backend="cpu", seed=0)  # in the f64 rest of the block
def test_f32_stages_give_way_to_f64_where_they_would_lose(n: int, where: float, plant: str, backend: str,
                                                          seed: int) -> None:
    """The CPU form of f32 dot and norm adds products in f32 stages (vyre.ops.reduce
    ``_staged_program``); a block whose staged total overflowed f32 (products past 3.4e38 that
    cancel), or is tiny (squares lost to f32's subnormals), or zero, is summed again in f64: the
    answer stays within the bound of docs/ops.md where the stages alone give NaN, inf or 0."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    i = min(n - 1, int(where * n))
    if plant == "cancel":  # x_i y_i = 1e40 = -x_j y_j: NaN in f32, exact in f64
        x[i], y[i] = 1e30, 1e10
        if n > 1:
            j = (i + 1 + int(rng.integers(0, n - 1))) % n
            x[j], y[j] = -1e30, 1e10
    elif plant == "tiny":
        x *= np.float32(1e-22)
        y *= np.float32(1e-22)
    elif plant == "huge":
        x *= np.float32(1e20)
    else:
        x[:] = 0
    check_sum(float(ops.dot(x, y, backend=backend)), x, y, staged=True)
    _check_norm(float(ops.norm(x, backend=backend)), x)


@pytest.mark.parametrize("plant", ["cancel", "tiny", "huge"])
@pytest.mark.parametrize("block", [0, 1])
def test_f32_stages_give_way_per_block(plant: str, block: int) -> None:
    """Longer arrays (two blocks: the serial entry, whose parallel twin runs the same blocks,
    tests/test_cpu_private.py): each block decides for itself; a planted block beside an ordinary
    one, first or second."""
    n = R.CPU_BLOCK_EXACT + R.CPU_BLOCK_EXACT // 2 + 77
    for kind in (R.Reduce.DOT, R.Reduce.SUMSQ):
        assert [g for _, g, _ in R._passes(kind, DataType.F32, R.Post.NONE, n, False, 0)] == [2, 1]
    rng = np.random.default_rng(7)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    half = -(-n // 2)
    b = slice(0, half) if block == 0 else slice(half, n)
    if plant == "cancel":
        x[b.start + 5], x[b.stop - 3], y[b.start + 5], y[b.stop - 3] = 1e30, -1e30, 1e10, 1e10
    else:
        x[b] *= np.float32(1e-22 if plant == "tiny" else 1e20)
        y[b] *= np.float32(1e-22 if plant == "tiny" else 1)
    check_sum(float(ops.dot(x, y, backend="cpu")), x, y, staged=True)
    _check_norm(float(ops.norm(x, backend="cpu")), x)


def test_f32_sum_accumulates_in_f64() -> None:
    """Values whose f32 running sum loses everything (1 + many 2^-24) come out as the f64 sum
    rounded once."""
    x = np.full(1 << 16, 2.0**-24, np.float32)
    x[0] = 1.0
    want = np.float32(1.0 + (len(x) - 1) * 2.0**-24)
    assert ops.sum(x, backend="cpu") == want
    assert ops.sum(x, backend="interp") == want


def test_multidimensional_input_reduces_everything() -> None:
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert ops.sum(x, backend="cpu") == 66
    assert ops.argmax(x, backend="cpu") == 11
    assert ops.sum(x[:, ::2], backend="cpu") == x[:, ::2].sum()  # strided: copied contiguous


@pytest.mark.parametrize("call, fix", [
    (lambda: ops.argmax(np.zeros(0, np.float32), backend="cpu"), "x.size > 0"),
    (lambda: ops.sum(np.zeros(4, np.int32), backend="cpu"), "astype"),
    (lambda: ops.sum([1.0, 2.0], backend="cpu"), "np.asarray"),
    (lambda: ops.dot(np.zeros(3), np.zeros(4), backend="cpu"), "same length"),
    (lambda: ops.dot(np.zeros(3), np.zeros(3, np.float32), backend="cpu"), "one dtype"),
    (lambda: ops.dot(np.zeros((2, 2)), np.zeros((2, 2)), backend="cpu"), "1-D"),
    (lambda: ops.sum(np.zeros(3), backend="nope"), "backend"),
    (lambda: ops.sum(np.zeros(3), backend=3), "backend='cpu'"),
])
def test_bad_input_is_a_clear_error(call, fix: str) -> None:
    with pytest.raises(VyreError, match="Fix:") as info:
        call()
    assert fix in str(info.value)
    assert isinstance(info.value, ops.OpsError) or "backend" in fix


@pytest.mark.parametrize("backend", ["cpu", "interp"])
@pytest.mark.parametrize("call", [
    lambda x, b: ops.sum(x, backend=b), lambda x, b: ops.max(x, backend=b), lambda x, b: ops.argmax(x, backend=b),
    lambda x, b: ops.sum(x, 0, backend=b), lambda x, b: ops.argmax(x, 1, backend=b),
    lambda x, b: ops.mean(x, (0, 1), keepdims=True, backend=b),
    lambda x, b: ops.softmax(x, backend=b), lambda x, b: ops.layer_norm(x, backend=b),
    lambda x, b: ops.dot(x.ravel(), x.ravel().data, backend=b), lambda x, b: ops.matvec(x.data, x[0], backend=b),
])
def test_a_masked_array_is_refused_not_read_without_its_mask(call, backend: str) -> None:
    """numpy's reductions skip masked elements; vyre.ops would read them (the data holds them), so
    a masked array is an error that says how to get the answer, never a silent wrong one."""
    x = np.ma.array(np.arange(24, dtype=np.float32).reshape(3, 8), mask=np.arange(24).reshape(3, 8) % 5 == 0)
    with pytest.raises(ops.OpsError, match=r"masked array.*Fix: pass x\.filled"):
        call(x, backend)


def test_device_array_on_a_host_backend_is_an_error() -> None:
    class FakeDevice:
        def __init__(self) -> None:
            self.__cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0, False), "version": 3}
            self.dtype = np.dtype(np.float32)
            self.shape = (3,)

    with pytest.raises(ops.OpsError, match=r"device array.*Fix:"):
        ops.sum(FakeDevice(), backend="cpu")


@pytest.mark.parametrize("call", [
    lambda t: ops.sum(t), lambda t: ops.argmax(t, 0), lambda t: ops.softmax(t.reshape(2, 3)),
    lambda t: ops.dot(t, t), lambda t: ops.matvec(t.reshape(2, 3), t[:3]),
])
def test_a_cpu_tensor_is_an_error_that_says_what_to_pass(call) -> None:
    """vyre.ops takes PyTorch tensors on a CUDA device; one on the CPU is told how to get the
    answer (a numpy view of it), not that vyre.ops takes PyTorch tensors."""
    torch = pytest.importorskip("torch")
    for t in (torch.arange(6, dtype=torch.float32), torch.ones(6, requires_grad=True)):
        with pytest.raises(ops.OpsError, match=r"CUDA device, got one on cpu\. Fix: pass t\.numpy\(\)"):
            call(t)


def test_every_program_prints_parses_and_crosses_the_wire() -> None:
    """The op programs are ordinary programs: the printer's text (what `vyre show` reads and
    writes) parses back to the same program, and so does the wire format."""
    from vyre.ir import F32, F64, Program
    from vyre.ir.parser import parse_program
    from vyre.ops import linalg as L
    from vyre.ops import rowwise as W

    progs = [R.full_program(k, t, R.accumulator_type(k.combine, t), gpu=g) for k in R.Reduce for t in (F32, F64)
             for g in (True, False)]
    progs += [A.argmax_program(F32, gpu=g, indexed=i) for g in (True, False) for i in (True, False)]
    progs += [W.softmax_program(F32, gpu=True, wg=256, resident=16), W.softmax_program(F64, gpu=False, wg=1),
              W.layer_norm_program(F32, 1e-5, gpu=False, wg=1), W.logsumexp_grad_program(F32, gpu=True, wg=32),
              W.layer_norm_grad_program(F64, gpu=True, wg=64, resident=0), L.matvec_program(F32, gpu=True),
              L.vecmat_program(F32, first=True), L.vecmat_program(F32, first=False), L.outer_program(F64)]
    for p in progs:
        assert parse_program(str(p)).fingerprint() == p.fingerprint()
        assert Program.from_wire(p.to_wire()).fingerprint() == p.fingerprint()
