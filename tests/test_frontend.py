"""@vyre.kernel / @vyre.func: each construct against the equivalent hand-built IR.

Where the construction is the same the fingerprints must match; everywhere the outputs must match on
the interpreter and the CPU backend."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import vyre
from vyre import Array, Uniform, WriteOnly, autodiff, examples, f32, i32, u32
from vyre.errors import DispatchError, FrontendError
from vyre.ir import (
    F32, I32, U32, BinOpKind, FunctionDef, Program, assign, barrier, buflen, call, cast,
    exp, gid, if_, let, lid, load, loop, output, read, select, sin, store, var, workgroup,
)
from vyre.ir import f32 as lit_f32
from vyre.ir import u32 as lit_u32

BACKENDS = ["interp", "cpu"]
DEBUG = False
TILE = 64


def run(prog_or_kernel: object, inputs: dict[str, object], backend: str, **kw: object) -> dict[str, np.ndarray]:
    prog = vyre.frontend.program_of(prog_or_kernel)
    return vyre.dispatch(prog, inputs, backend=backend, **kw)  # type: ignore[arg-type]


# ---- the fused chain (README) -----------------------------------------------------------------------

@vyre.kernel
def chain(x: Array[f32], y: Array[f32], out: Array[f32]):
    i = vyre.gid()
    if i < len(out):
        out[i] = vyre.exp(x[i]) * y[i] + vyre.sin(x[i]) * x[i]


def chain_ir() -> Program:
    x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
    i = var("i")
    return Program.wrapped([x, y, out], 256, [
        let("i", gid()),
        if_(i < buflen(out), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])]),
    ])


def test_chain_is_the_hand_built_program() -> None:
    assert chain.program == chain_ir()
    assert chain.program.fingerprint() == chain_ir().fingerprint()


def test_printer_output_reads_like_the_source() -> None:
    text = str(chain.program)
    assert "let i = gid(0)" in text
    assert "if (i < len(out)) {" in text
    assert "out[i] = ((exp(x[i]) * y[i]) + (sin(x[i]) * x[i]))" in text


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_call_forms_equal_dispatch(backend: str) -> None:
    rng = np.random.default_rng(0)
    xs, ys = rng.random(300, dtype=np.float32), rng.random(300, dtype=np.float32)
    want = vyre.dispatch(chain_ir(), {"x": xs, "y": ys, "out": np.zeros(300, np.float32)}, backend=backend)["out"]
    by_name = chain(x=xs, y=ys, out=np.zeros(300, np.float32), backend=backend)["out"]
    positional = chain(xs, ys, np.zeros(300, np.float32), backend=backend)["out"]
    np.testing.assert_array_equal(by_name, want)
    np.testing.assert_array_equal(positional, want)


def test_call_options_pass_through_and_unknown_ones_are_refused() -> None:
    xs = np.ones(64, np.float32)
    r = chain(xs, xs, np.zeros(64, np.float32), backend="interp", grid=(1,))
    assert r["out"][0] == pytest.approx(math.exp(1) + math.sin(1))
    with pytest.raises(DispatchError, match="unknown argument"):
        chain(xs, xs, np.zeros(64, np.float32), backnd="interp")
    with pytest.raises(DispatchError, match="twice"):
        chain(xs, xs, np.zeros(64, np.float32), x=xs)


# ---- examples as kernels: same fingerprints ------------------------------------------------------

@vyre.kernel(workgroup_size=128)
def matvec(m: Array[f32], v: Array[f32], out: Array[f32]):
    r = vyre.gid()
    if r < len(out):
        acc = 0.0
        for j in range(len(v)):
            acc += m[r * len(v) + j] * v[j]
        out[r] = acc


@vyre.kernel(workgroup_size=128)
def histogram(keys: Array[u32], counts: Array[u32]):
    i = vyre.gid()
    if i < len(keys):
        _old = vyre.atomic_add(counts, keys[i] % len(counts), 1)


@vyre.kernel(workgroup_size=256)
def block_sum(x: Array[f32], out: Array[f32]):
    tile = vyre.workgroup_array(256, f32)
    i = vyre.gid()
    tile[vyre.lid()] = x[i]
    vyre.barrier()
    for k in range(8):
        s = 128 >> k
        if vyre.lid() < s:
            tile[vyre.lid()] = tile[vyre.lid()] + tile[vyre.lid() + s]
        vyre.barrier()
    if vyre.lid() == 0:
        _old = vyre.atomic_add(out, 0, tile[0])


@vyre.kernel(workgroup_size=64)
def subgroup_sum(x: Array[f32], out: Array[f32]):
    v = x[vyre.gid()]
    s = vyre.subgroup_reduce("add", v)
    if (vyre.lid() & 31) == 0:
        _old = vyre.atomic_add(out, 0, s)


@vyre.kernel(workgroup_size=64)
def workgroup_ids(out: Array[u32]):
    out[vyre.gid()] = vyre.wgid()


def _uncounted(p: Program) -> Program:
    return replace(p, buffers=tuple(b.with_count(0) if not b.is_workgroup else b for b in p.buffers))


@pytest.mark.parametrize("kernel, example", [
    (matvec, examples.matvec), (histogram, examples.histogram), (block_sum, examples.block_sum),
    (subgroup_sum, examples.subgroup_sum), (workgroup_ids, examples.workgroup_ids),
], ids=lambda v: getattr(v, "__name__", ""))
def test_examples_written_as_kernels_have_the_same_fingerprint(kernel: object, example: object) -> None:
    assert vyre.frontend.program_of(kernel).fingerprint() == _uncounted(example()).fingerprint()  # type: ignore[operator]


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_run_like_numpy(backend: str) -> None:
    xs = np.arange(512, dtype=np.float32) / 64
    got = block_sum(xs, np.zeros(1, np.float32), backend=backend, grid=(2,))["out"][0]
    assert got == pytest.approx(xs.sum(), rel=1e-5)
    got = subgroup_sum(xs, np.zeros(1, np.float32), backend=backend, grid=(8,))["out"][0]
    assert got == pytest.approx(xs.sum(), rel=1e-5)
    keys = (np.arange(1000, dtype=np.uint32) * 7) % 13
    counts = histogram(keys, np.zeros(5, np.uint32), backend=backend, grid=(8,))["counts"]
    np.testing.assert_array_equal(counts, np.bincount(keys % 5, minlength=5))


# ---- Uniform and WriteOnly arrays ----------------------------------------------------------------

@vyre.kernel
def poly(coef: Uniform[f32, 4], x: Array[f32], out: WriteOnly[f32]):
    i = vyre.gid()
    if i < len(out):
        v = x[i]
        out[i] = coef[0] + v * (coef[1] + v * (coef[2] + v * coef[3]))


def poly_ir() -> Program:
    coef = vyre.ir.uniform("coef", 0, F32).with_count(4)
    x, out = read("x", 1, F32), vyre.BufferDecl.storage("out", 2, vyre.BufferAccess.WRITE_ONLY, F32).as_output()
    i, v = var("i"), var("v")
    c = [coef[lit_u32(k)] for k in range(4)]
    return Program.wrapped([coef, x, out], 256, [
        let("i", gid()),
        if_(i < buflen(out), [let("v", x[i]), store(out, i, c[0] + v * (c[1] + v * (c[2] + v * c[3])))]),
    ])


def test_uniform_and_write_only_arrays_are_the_hand_built_buffers() -> None:
    assert poly.program == poly_ir()
    assert poly.program.fingerprint() == poly_ir().fingerprint()
    assert [(b.access, b.count, b.is_output) for b in poly.program.buffers] == [
        (vyre.BufferAccess.UNIFORM, 4, False), (vyre.BufferAccess.READ_ONLY, 0, False),
        (vyre.BufferAccess.WRITE_ONLY, 0, True)]
    assert repr(Uniform[f32, 4]) == "Uniform[f32, 4]" and repr(WriteOnly[u32]) == "WriteOnly[u32]"
    assert vyre.Uniform is vyre.frontend.Uniform and vyre.WriteOnly is vyre.frontend.WriteOnly


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_uniform_array_dispatches_from_a_numpy_array(backend: str) -> None:
    coef = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    xs = np.linspace(-2, 2, 70, dtype=np.float32)
    got = poly(coef, xs, np.zeros_like(xs), backend=backend)["out"]
    want = vyre.dispatch(poly_ir(), {"coef": coef, "x": xs, "out": np.zeros_like(xs)}, backend=backend)["out"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, np.polyval(coef[::-1].astype(np.float64), xs), rtol=1e-5, atol=1e-5)
    by_name = vyre.dispatch(poly.program, {"coef": coef, "x": xs, "out": np.zeros_like(xs)}, backend=backend)
    np.testing.assert_array_equal(by_name["out"], want)
    with pytest.raises(DispatchError, match="declares 4"):
        poly(coef[:3], xs, np.zeros_like(xs), backend=backend)


@vyre.kernel
def scatter_rows(table: Uniform[u32], out: WriteOnly[u32, 12]):
    i = vyre.gid()
    if i < len(out):
        out[i] = table[i % len(table)] * 3


def scatter_rows_ir() -> Program:
    table = vyre.ir.uniform("table", 0, U32)
    out = vyre.BufferDecl.storage("out", 1, vyre.BufferAccess.WRITE_ONLY, U32).as_output().with_count(12)
    i = var("i")
    return Program.wrapped([table, out], 256, [
        let("i", gid()), if_(i < buflen(out), [store(out, i, table[i % buflen(table)] * lit_u32(3))])])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_counted_write_only_array_left_out_is_allocated(backend: str) -> None:
    assert scatter_rows.program.fingerprint() == scatter_rows_ir().fingerprint()
    table = np.array([5, 7, 11], np.uint32)  # Uniform[u32]: sized by what is bound
    got = scatter_rows(table, backend=backend)["out"]
    want = vyre.dispatch(scatter_rows_ir(), {"table": table}, backend=backend)["out"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.tile(table, 4) * 3)


@vyre.func
def emit(dst: WriteOnly[f32], i: u32, v: f32):
    dst[i] = v


@vyre.kernel(workgroup_size=4)
def through_funcs(x: Array[f32], out: Array[f32], w: WriteOnly[f32]):
    i = vyre.gid()
    t = vyre.workgroup_array(4, f32)
    emit(t, vyre.lid(), x[i])   # a workgroup array and arrays of any kind fit a WriteOnly parameter
    vyre.barrier()
    emit(out, i, t[vyre.lid()] * 2.0)
    emit(w, i, out[i] + 1.0)    # out is still an ordinary read-write array in the kernel


@pytest.mark.parametrize("backend", BACKENDS)
def test_function_array_annotations_restrict_only_the_function_body(backend: str) -> None:
    access = {b.name: b.access for b in through_funcs.program.buffers}
    assert access == {"x": vyre.BufferAccess.READ_ONLY, "out": vyre.BufferAccess.READ_WRITE,
                      "w": vyre.BufferAccess.WRITE_ONLY, "t": vyre.BufferAccess.WORKGROUP}
    xs = np.arange(8, dtype=np.float32)
    r = through_funcs(xs, np.zeros(8, np.float32), np.zeros(8, np.float32), backend=backend)
    np.testing.assert_array_equal(r["out"], 2 * xs)
    np.testing.assert_array_equal(r["w"], 2 * xs + 1)
    assert repr(vyre.Array[f32, 3]) == "Array[f32, 3]"


# ---- scalar parameters ---------------------------------------------------------------------------

@vyre.kernel
def saxpy(a: f32, x: Array[f32], y: Array[f32], out: Array[f32]):
    i = vyre.gid()
    if i < len(out):
        out[i] = a * x[i] + y[i]


def test_scalar_parameters_are_one_element_uniform_buffers() -> None:
    a = saxpy.program.buffer("a")
    assert a.access is vyre.BufferAccess.UNIFORM and a.count == 1 and a.binding == 0
    assert [b.binding for b in saxpy.program.buffers] == [0, 1, 2, 3]
    text = str(saxpy.program)
    assert "let a = a[0u32]" in text and "out[i] = ((a * x[i]) + y[i])" in text  # read once, by name


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_scalar_value_does_not_recompile(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from vyre.driver import dispatch as d

    xs, ys = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    saxpy(1.0, xs, ys, np.zeros(8, np.float32), backend=backend)  # compiled (or cached) here
    compiles: list[object] = []
    real = d.compile
    monkeypatch.setattr(d, "compile", lambda *a, **k: compiles.append(a) or real(*a, **k))
    for a in (2.0, -0.5, 3):
        out = saxpy(a, xs, ys, np.zeros(8, np.float32), backend=backend)["out"]
        np.testing.assert_array_equal(out, np.float32(a) * xs + ys)
    by_name = vyre.dispatch(saxpy.program, {"a": 4.0, "x": xs, "y": ys, "out": np.zeros(8, np.float32)},
                            backend=backend)["out"]
    np.testing.assert_array_equal(by_name, 4 * xs + ys)
    assert compiles == []


@pytest.mark.parametrize("bad", [True, "2", None])
def test_a_scalar_of_the_wrong_kind_is_refused(bad: object) -> None:
    xs = np.ones(4, np.float32)
    with pytest.raises(DispatchError, match="scalar 'a' is f32"):
        saxpy(bad, xs, xs, np.zeros(4, np.float32), backend="interp")


@vyre.kernel
def shift(n: u32, k: i32, out: Array[i32]):
    i = vyre.gid()
    if i < n:
        out[i] = vyre.i32(i) + k


@pytest.mark.parametrize("bad", [2**32, -1, 1.5])
def test_integer_scalars_convert_exactly_or_not_at_all(bad: object) -> None:
    with pytest.raises(DispatchError, match="integer in range"):
        shift(bad, 0, np.zeros(4, np.int32), backend="interp")
    np.testing.assert_array_equal(shift(3, -5, np.zeros(4, np.int32), backend="interp")["out"], [-5, -4, -3, 0])


# ---- control flow, locals, functions -----------------------------------------------------------

@vyre.func
def sq(a: f32) -> f32:
    return a * a


@vyre.func
def relu_or_leak(v, slope):
    """Two returns: inlined with a result local."""
    if v > 0.0:
        return v
    else:
        return v * slope


@vyre.func
def store_twice(buf: Array[f32], i: u32, v: f32):
    buf[i] = v + v


@vyre.kernel(workgroup_size=32)
def control(x: Array[f32], out: Array[f32], flags: Array[u32]):
    i = vyre.gid()
    if i >= len(out):
        return
    v = x[i]
    if v < -1.0:
        flags[i] = 1
    elif v < 0.0 and not vyre.is_nan(v):
        flags[i] = 2
    elif -0.5 < v <= 0.5 or v > 3.0:
        flags[i] = 3
    else:
        flags[i] = 4
    acc: f32 = 0
    for k in range(2, 10, 3):
        acc += vyre.f32(k)
    if DEBUG:
        flags[i] = 99
    out[i] = sq(v) + relu_or_leak(v, 0.1) + acc + (1.0 if v > 1.0 else 2.0) + math.exp(0.0) * abs(v)
    out[i] += vyre.maximum(v, 0.0) + min(v, 1.0) + float(int(v))


def control_numpy(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flags = np.select([x < -1, (x < 0) & ~np.isnan(x), ((-0.5 < x) & (x <= 0.5)) | (x > 3)], [1, 2, 3], 4)
    acc = np.float32(2 + 5 + 8)
    out = (x * x + np.where(x > 0, x, x * np.float32(0.1)) + acc + np.where(x > 1, 1, 2).astype(np.float32)
           + np.abs(x))
    out = out + np.maximum(x, 0) + np.minimum(x, 1) + np.trunc(x)
    return out.astype(np.float32), flags.astype(np.uint32)


@pytest.mark.filterwarnings("ignore::vyre.driver.coverage.LaunchWarning")  # out is shorter on purpose
@pytest.mark.parametrize("backend", BACKENDS)
def test_control_flow_locals_and_functions_run_like_numpy(backend: str) -> None:
    x = np.linspace(-3, 4, 45).astype(np.float32)
    r = control(x, np.zeros(40, np.float32), np.zeros(45, np.uint32), backend=backend)
    want_out, want_flags = control_numpy(x[:40])
    np.testing.assert_allclose(r["out"], want_out, rtol=1e-6)
    np.testing.assert_array_equal(r["flags"][:40], want_flags)
    assert (r["flags"][40:] == 0).all()  # returned early


def test_pure_functions_become_ir_calls_and_others_inline() -> None:
    prog = control.program
    assert [f.op_id for f in prog.functions] == ["sq"]
    assert prog.functions[0] == FunctionDef("sq", (("a", F32),), F32, var("a") * var("a"))
    text = str(prog)
    assert "sq(v)" in text and "relu_or_leak_result" in text
    assert "99" not in text  # the `if DEBUG:` branch is not compiled


@vyre.kernel
def uses_store_func(out: Array[f32]):
    store_twice(out, vyre.gid(), 1.5)


def test_a_function_storing_into_an_array_marks_it_written() -> None:
    assert uses_store_func.program.buffer("out").access is vyre.BufferAccess.READ_WRITE
    assert (uses_store_func(np.zeros(4, np.float32), backend="interp")["out"] == 3.0).all()


def test_calls_compare_with_the_builder_call() -> None:
    @vyre.kernel
    def k(x: Array[f32], out: Array[f32]):
        out[vyre.gid()] = sq(x[vyre.gid()])

    x, out = read("x", 0, F32), output("out", 1, F32)
    fdef = FunctionDef("sq", (("a", F32),), F32, var("a") * var("a"))
    want = Program.wrapped([x, out], 256, [store(out, gid(), call("sq", x[gid()]))], functions=[fdef])
    assert k.program.fingerprint() == want.fingerprint()


# ---- 2-D grids, casts, integer semantics ----------------------------------------------------------

@vyre.kernel(workgroup_size=(8, 8))
def transpose(a: Array[f32], out: Array[f32], rows: u32, cols: u32):
    r = vyre.gid(1)
    c = vyre.gid(0)
    if r < rows and c < cols:
        out[c * rows + r] = a[r * cols + c]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_d_grid(backend: str) -> None:
    a = np.arange(12 * 20, dtype=np.float32).reshape(12, 20)
    out = transpose(a, np.zeros(240, np.float32), 12, 20, grid=(3, 2), backend=backend)["out"]
    np.testing.assert_array_equal(out.reshape(20, 12), a.T)


def test_two_d_kernel_matches_builders() -> None:
    a, out = read("a", 0, F32), output("out", 1, F32)
    rows, cols = vyre.ir.uniform("rows", 2, U32).with_count(1), vyre.ir.uniform("cols", 3, U32).with_count(1)
    r, c, nr, nc = var("r"), var("c"), var("rows"), var("cols")
    want = Program.wrapped([a, out, rows, cols], (8, 8), [
        let("rows", rows[0]), let("cols", cols[0]),
        let("r", gid(1)), let("c", gid(0)),
        if_((r < nr).and_(c < nc), [store(out, c * nr + r, a[r * nc + c])]),
    ])
    assert transpose.program.fingerprint() == want.fingerprint()


@vyre.kernel(workgroup_size=32)
def int_ops(a: Array[i32], b: Array[i32], out: Array[i32], bits: Array[u32]):
    i = vyre.gid()
    if i < len(out):
        out[i] = a[i] // b[i] + a[i] % b[i] - (a[i] << 2) + (a[i] >> 1) ^ ~b[i]
        bits[i] = vyre.popcount(vyre.u32(a[i])) + vyre.u32(a[i] < b[i]) * 100


def test_integer_semantics_are_the_irs() -> None:
    a = np.array([7, -7, 7, -7, -2**31, 5], np.int32)
    b = np.array([2, 2, -2, -2, -1, 0], np.int32)
    prog_ir = Program.wrapped(
        [read("a", 0, I32), read("b", 1, I32), output("out", 2, I32), output("bits", 3, U32)], 32, [
            let("i", gid()),
            if_(var("i") < buflen("out"), [
                store("out", var("i"), vyre.ir.binop(BinOpKind.BIT_XOR, load("a", var("i")) // load("b", var("i"))
                      + load("a", var("i")) % load("b", var("i")) - (load("a", var("i")) << i32(2))
                      + (load("a", var("i")) >> i32(1)), ~load("b", var("i")))),
                store("bits", var("i"), vyre.ir.popcount(cast(U32, load("a", var("i"))))
                      + cast(U32, load("a", var("i")) < load("b", var("i"))) * 100),
            ]),
        ])
    assert int_ops.program.fingerprint() == prog_ir.fingerprint()
    for backend in BACKENDS:
        got = int_ops(a, b, np.zeros(6, np.int32), np.zeros(6, np.uint32), backend=backend)
        want = vyre.dispatch(prog_ir, {"a": a, "b": b, "out": np.zeros(6, np.int32),
                                       "bits": np.zeros(6, np.uint32)}, backend="interp")
        np.testing.assert_array_equal(got["out"], want["out"])
        np.testing.assert_array_equal(got["bits"], want["bits"])


def test_loop_with_a_step_counts_like_python_range() -> None:
    @vyre.kernel(workgroup_size=1)
    def steps(lo: u32, hi: u32, out: Array[u32]):
        total = 0
        n = 0
        for k in range(lo, hi, 3):
            total += k
            n += 1
        out[0] = total
        out[1] = n

    for lo, hi in [(0, 10), (2, 3), (5, 5), (7, 2), (1, 11)]:
        r = steps(lo, hi, np.zeros(2, np.uint32), backend="interp", grid=(1,))["out"]
        assert list(r) == [sum(range(lo, hi, 3)), len(range(lo, hi, 3))]


def test_select_and_workgroup_builders_agree() -> None:
    @vyre.kernel(workgroup_size=TILE)
    def rev(x: Array[f32], out: Array[f32]):
        t = vyre.workgroup_array(TILE, f32)
        t[vyre.lid()] = x[vyre.gid()]
        vyre.barrier()
        v = t[TILE - 1 - vyre.lid()]
        out[vyre.gid()] = vyre.select(v > 0.0, v, 0.0)

    x, out, t = read("x", 0, F32), output("out", 1, F32), workgroup("t", TILE, F32)
    want = Program.wrapped([x, out, t], TILE, [
        store(t, lid(), x[gid()]), barrier(),
        let("v", t[lit_u32(TILE - 1) - lid()]),  # constants fold
        store(out, gid(), select(var("v") > lit_f32(0.0), var("v"), lit_f32(0.0))),
    ])
    assert rev.program.fingerprint() == want.fingerprint()
    xs = np.arange(-64, 64, dtype=np.float32)
    got = rev(xs, np.zeros(128, np.float32), backend="cpu")["out"]
    np.testing.assert_array_equal(got, np.maximum(xs.reshape(2, 64)[:, ::-1].reshape(-1), 0))


def test_loops_and_assignments_match_builders() -> None:
    @vyre.kernel(workgroup_size=1)
    def tri(out: Array[u32]):
        acc = 0
        for k in range(5):
            acc = acc + k
        out[0] = acc

    want = Program.wrapped([output("out", 0, U32)], 1, [
        let("acc", lit_u32(0)),
        loop("k", lit_u32(0), lit_u32(5), [assign("acc", var("acc") + var("k"))]),
        store("out", lit_u32(0), var("acc")),
    ])
    assert tri.program.fingerprint() == want.fingerprint()


# ---- autodiff ---------------------------------------------------------------------------------------

def test_grad_of_a_kernel_is_autodiffs_grad_of_its_program() -> None:
    back = vyre.grad(chain, wrt=["x"])
    assert back == autodiff.grad(chain.program, ["out"], ["x"])
    assert vyre.grad(chain, "x") == back
    assert vyre.grad(chain.program, wrt="x", outputs="out") == back


def test_autodiff_functions_take_a_name_or_a_list_alike() -> None:
    rng = np.random.default_rng(1)
    xs, ys = rng.random(32, dtype=np.float32), rng.random(32, dtype=np.float32)
    inputs = {"x": xs, "y": ys, "out": np.zeros(32, np.float32)}
    cot = {"out": np.ones(32, np.float32)}
    for prog in (chain.program, chain):
        a = autodiff.vjp(prog, inputs, cot, "x", backend="interp")
        b = autodiff.vjp(prog, inputs, cot, ["x"], backend="interp")
        np.testing.assert_array_equal(a["x"], b["x"])
        la, ga = autodiff.value_and_grad(prog, inputs, "out", "x", backend="interp")
        lb, gb = autodiff.value_and_grad(prog, inputs, ["out"], ["x"], backend="interp")
        assert la == lb
        np.testing.assert_array_equal(ga["x"], gb["x"])
        _, ta = autodiff.jvp(prog, inputs, {"x": np.ones(32, np.float32)}, outputs="out", backend="interp")
        _, tb = autodiff.jvp(prog, inputs, {"x": np.ones(32, np.float32)}, outputs=["out"], backend="interp")
        np.testing.assert_array_equal(ta["out"], tb["out"])
        assert autodiff.grad(prog, "out", "x") == autodiff.grad(chain.program, ["out"], ["x"])
    want = np.exp(xs) * ys + np.cos(xs) * xs + np.sin(xs)
    np.testing.assert_allclose(ga["x"], want, rtol=1e-5)


def test_frontend_errors_are_vyre_errors() -> None:
    assert issubclass(FrontendError, vyre.VyreError)
    with pytest.raises(FrontendError, match="runs only inside a kernel"):
        sq(1.0)
    with pytest.raises(FrontendError, match="workgroup memory"):
        vyre.workgroup_array(4, f32)


@vyre.kernel
def powers(x: Array[f32], out: Array[f32]):
    i = vyre.gid()
    if i < len(out):
        out[i] = x[i] ** 2 + pow(x[i], 0.5) + math.pow(x[i], 3) + vyre.stop_gradient(x[i]) * vyre.power(x[i], 1.5)


def test_powers_and_stop_gradient_match_builders() -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    xi = x[i]
    want = Program.wrapped([x, out], 256, [
        let("i", gid()),
        if_(i < buflen(out), [store(out, i, xi ** 2 + vyre.ir.power(xi, 0.5) + vyre.ir.power(xi, 3)
                                   + vyre.ir.stop_gradient(xi) * vyre.ir.power(xi, 1.5))]),
    ])
    assert powers.program.fingerprint() == want.fingerprint()
    xs = np.linspace(0.5, 2, 16, dtype=np.float32)
    got = powers(xs, np.zeros(16, np.float32), backend="cpu")["out"]
    np.testing.assert_allclose(got, xs**2 + xs**0.5 + xs**3 + xs * xs**1.5, rtol=1e-5)
    g = autodiff.vjp(powers, {"x": xs, "out": np.zeros(16, np.float32)}, {"out": np.ones(16, np.float32)}, "x",
                     backend="interp")["x"]
    np.testing.assert_allclose(g, 2 * xs + 0.5 * xs**-0.5 + 3 * xs**2 + 1.5 * xs * xs**0.5, rtol=1e-4)


@vyre.func
def piecewise(v):
    if v < 0.0:
        r = -v
    elif v < 1.0:
        r = v * v
    else:
        r = 1.0
    return r


@vyre.kernel
def branches(x: Array[f32], out: Array[f32]):
    i = vyre.gid()
    if i < len(out):
        if x[i] > 0.5:
            y = 2.0
            k = 1
        else:
            y = x[i]
            k = 2
        out[i] = y * vyre.f32(k) + piecewise(x[i])


def test_a_local_assigned_in_both_branches_outlives_the_if() -> None:
    text = str(branches.program)
    assert "let y = 0.0f32" in text and "let k = 0u32" in text
    x = np.linspace(-1.5, 1.5, 13, dtype=np.float32)
    got = branches(x, np.zeros_like(x), backend="interp")["out"]
    pw = np.where(x < 0, -x, np.where(x < 1, x * x, 1.0))
    np.testing.assert_allclose(got, np.where(x > 0.5, 2.0 * 1, x * 2) + pw, rtol=1e-6)


SIM_SCRIPT = '''
import numpy as np
import vyre
from vyre import Array, f32, u32

@vyre.kernel(workgroup_size=32)
def saxpy(a: f32, n: u32, x: Array[f32], y: Array[f32], out: Array[f32]):
    i = vyre.gid()
    if i < n:
        out[i] = a * x[i] + y[i]

x = np.arange(40, dtype=np.float32)
y = np.ones(40, np.float32)
for a in (2.0, -1.5):
    got = saxpy(a, 37, x, y, np.zeros(40, np.float32), backend="cudasim")["out"]
    want = np.where(np.arange(40) < 37, np.float32(a) * x + y, 0)
    assert np.array_equal(got, want), (got, want)

@vyre.kernel(workgroup_size=32)
def matvec_tiled(m: Array[f32], v: Array[f32], out: Array[f32], cols: u32, n_tiles: u32):
    tile = vyre.workgroup_array(32, f32)
    r = vyre.gid()
    acc = 0.0
    for t in range(n_tiles):
        tile[vyre.lid()] = v[t * 32 + vyre.lid()]
        vyre.barrier()
        for k in range(32):
            c = t * 32 + k
            if c < cols:
                acc += m[r * cols + c] * tile[k]
        vyre.barrier()
    out[r] = acc

rng = np.random.default_rng(3)
mat = rng.standard_normal((40, 50)).astype(np.float32)
vec = rng.standard_normal(50).astype(np.float32)
got = matvec_tiled(mat, vec, np.zeros(40, np.float32), 50, 2, backend="cudasim", grid=(2,))["out"]
assert np.allclose(got, mat @ vec, rtol=1e-4, atol=1e-5), (got, mat @ vec)
print("OK")
'''


def test_scalar_parameters_on_the_cuda_simulator(tmp_path: Path) -> None:
    """The GPU path binds a scalar parameter from a number too (the simulator runs in a child
    process: NUMBA_ENABLE_CUDASIM is read when numba.cuda is imported)."""
    script = tmp_path / "sim_saxpy.py"
    script.write_text(SIM_SCRIPT)
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


def test_dispatch_options_pass_through_dim() -> None:
    out = workgroup_ids(np.full(200, 7, np.uint32), backend="interp", dim=128)["out"]  # 2 workgroups of 64
    assert list(out[:128]) == [0] * 64 + [1] * 64 and (out[128:] == 7).all()


@vyre.kernel(workgroup_size=32)
def matvec_tiled(m: Array[f32], v: Array[f32], out: Array[f32], cols: u32, n_tiles: u32):
    tile = vyre.workgroup_array(32, f32)
    r = vyre.gid()
    acc = 0.0
    for t in range(n_tiles):          # bounded by a scalar parameter: uniform, so barriers may sit inside
        tile[vyre.lid()] = v[t * 32 + vyre.lid()]
        vyre.barrier()
        for k in range(32):
            c = t * 32 + k
            if c < cols:
                acc += m[r * cols + c] * tile[k]
        vyre.barrier()
    out[r] = acc


@pytest.mark.parametrize("backend", BACKENDS)
def test_barriers_in_a_loop_bounded_by_a_scalar_parameter(backend: str) -> None:
    rng = np.random.default_rng(3)
    mat = rng.standard_normal((40, 70)).astype(np.float32)
    vec = rng.standard_normal(70).astype(np.float32)
    got = matvec_tiled(mat, vec, np.zeros(40, np.float32), 70, 3, backend=backend, grid=(2,))["out"]
    np.testing.assert_allclose(got, mat @ vec, rtol=1e-4, atol=1e-5)


@vyre.kernel(workgroup_size=64)
def kitchen(x: Array[f32], keys: Array[u32], out: Array[f32], counts: Array[u32], flags: Array[u32]):
    i = vyre.gid()
    v: f32 = x[i]
    big = v > 1.0 and not (v > 5.0 or vyre.is_nan(v))
    out[i] += vyre.fma(v, 2.0, 1.0) if big else vyre.f32(keys[i] & 7)
    old = vyre.atomic_max(counts, keys[i] % 4, i)
    swapped = vyre.atomic_compare_exchange(flags, 0, 0, i + 1)
    m = vyre.ballot(v > 0.0)
    w = vyre.shuffle(v, vyre.lane() ^ 1)
    out[i] += vyre.f32(m & 1) + w * 0.0 + vyre.f32(old - old) + vyre.f32(swapped * 0)


def test_kitchen_sink_matches_builders() -> None:
    from vyre.ir import AtomicOp, atomic, ballot, fma, is_nan, lane, shuffle

    x, keys, out = read("x", 0, F32), read("keys", 1, U32), output("out", 2, F32)
    counts, flags = output("counts", 3, U32), output("flags", 4, U32)
    i, v, big = var("i"), var("v"), var("big")
    want = Program.wrapped([x, keys, out, counts, flags], 64, [
        let("i", gid()),
        let("v", x[i]),
        let("big", (v > 1.0).and_(((v > 5.0).or_(is_nan(v))).not_())),
        store(out, i, out[i] + select(big, fma(v, 2.0, 1.0), cast(F32, keys[i] & 7))),
        let("old", atomic(AtomicOp.MAX, counts, keys[i] % 4, i)),
        let("swapped", atomic(AtomicOp.COMPARE_EXCHANGE, flags, 0, i + 1, expected=lit_u32(0))),
        let("m", ballot(v > 0.0)),
        let("w", shuffle(v, lane() ^ 1)),
        store(out, i, out[i] + (cast(F32, var("m") & 1) + var("w") * 0.0 + cast(F32, var("old") - var("old"))
                                + cast(F32, var("swapped") * 0))),
    ])
    assert kitchen.program.fingerprint() == want.fingerprint(), str(kitchen.program)
    xs = np.array([0.5, 2.0, 7.0, np.nan, -1.0, 1.5] * 11, np.float32)[:64]
    ks = np.arange(64, dtype=np.uint32) * 3
    for backend in BACKENDS:
        got = kitchen(xs, ks, np.ones(64, np.float32), np.zeros(4, np.uint32), np.zeros(1, np.uint32),
                      backend=backend)
        ref = vyre.dispatch(want, {"x": xs, "keys": ks, "out": np.ones(64, np.float32),
                                   "counts": np.zeros(4, np.uint32), "flags": np.zeros(1, np.uint32)},
                            backend="interp")
        for name in ("out", "counts"):
            np.testing.assert_array_equal(got[name], ref[name])
        assert got["flags"][0] >= 1


def make_scaler(scale: float, wg: int) -> object:
    @vyre.kernel(workgroup_size=wg)
    def scaled(x: Array[f32], out: Array[f32]):
        i = vyre.gid()
        if i < len(out):
            out[i] = x[i] * scale          # a closure constant, baked in

    return scaled


def test_kernels_made_by_a_factory_bake_their_closure_constants() -> None:
    k2, k3 = make_scaler(2.0, 32), make_scaler(3.0, 64)
    assert "(x[i] * 2.0f32)" in str(k2.program) and "(x[i] * 3.0f32)" in str(k3.program)
    xs = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(k3(xs, np.zeros(5, np.float32), backend="interp")["out"], 3 * xs)  # type: ignore[operator]


N_BINS = 4


@vyre.kernel(workgroup_size=64)
def binned(keys: Array[u32], counts: Array[u32, N_BINS], total: Array[f32, 1]):
    i = vyre.gid()
    if i < len(keys):
        vyre.atomic_add(counts, keys[i] % N_BINS, 1)
        vyre.atomic_add(total, 0, vyre.f32(keys[i]))


def test_arrays_with_a_declared_length_are_allocated_when_left_out() -> None:
    assert binned.program.buffer("counts").count == N_BINS and binned.program.buffer("total").count == 1
    keys = np.arange(100, dtype=np.uint32)
    r = binned(keys, backend="interp", grid=(2,))
    np.testing.assert_array_equal(r["counts"], np.bincount(keys % 4, minlength=4))
    assert r["total"][0] == keys.sum()
    x, counts = read("keys", 0, U32), output("counts", 1, U32).with_count(4)
    assert binned.program.buffers == (x, counts, output("total", 2, F32).with_count(1))
