"""CPU backend parity with the reference interpreter: op tables, examples, generated programs."""

from __future__ import annotations

import pytest

from tests import optable
from vyre.driver.dispatch import compile as vcompile

TABLES = dict(optable.all_tables())


def run(prog, arrays, backend, **kw):
    k = vcompile(prog, backend, **kw)
    return k({name: a.copy() for name, a in arrays.items()})


@pytest.mark.parametrize("name", sorted(TABLES))
def test_op_table_cpu_matches_interpreter(name: str) -> None:
    prog, arrays, layout = TABLES[name]
    n = len(next(iter(arrays.values())))
    ref = run(prog, arrays, "interp")
    got = run(prog, arrays, "cpu", parallel=False)
    assert optable.compare(name, got, ref, layout, n) == []


# ---- generated programs --------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402

from tests.example_inputs import example_cases  # noqa: E402
from tests.parity import differences  # noqa: E402
from tests.strategies import program_and_inputs  # noqa: E402


def _parity(prog, arrays, grid, exact: bool, **kw) -> list[str]:
    ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
    got = vcompile(prog, "cpu", **kw)({k: v.copy() for k, v in arrays.items()}, grid=grid)
    return differences(got, ref, exact)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program_and_inputs(allow_atomics=True, allow_barriers=True, allow_subgroups=True, exact_floats=True))
def test_generated_programs_cpu_bit_exact(case) -> None:
    prog, arrays, grid = case
    assert _parity(prog, arrays, grid, exact=True, parallel=False) == []


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program_and_inputs(dtypes=(optable.DataType.F32, optable.DataType.F64, optable.DataType.U32)))
def test_generated_float_programs_cpu_within_tolerance(case) -> None:
    prog, arrays, grid = case
    assert _parity(prog, arrays, grid, exact=False, parallel=False) == []


@pytest.mark.parametrize("case", list(example_cases(small=False)), ids=lambda c: c[0])
def test_examples_cpu_parallel_matches_interpreter(case) -> None:
    name, prog, arrays, grid = case
    assert _parity(prog, arrays, grid, exact=name != "fused_chain") == []


# ---- Fma: fused where the CPU can (docs/semantics.md lets a backend contract a*b+c) -------------
def test_cpu_fma_is_one_rounding_where_the_cpu_has_fma() -> None:
    from fractions import Fraction

    import llvmlite.binding as ll
    import numpy as np

    from vyre.codegen.cpu import emit_cpu
    from vyre.ir import F64, Program, buflen, fma, gid, if_, let, load, output, read, store, var

    i = var("i")
    prog = Program.wrapped([read("a", 0, F64), read("b", 1, F64), read("c", 2, F64), output("out", 3, F64)], 64, [
        let("i", gid()),
        if_(i.lt(buflen("out")), [store("out", i, fma(load("a", i), load("b", i), load("c", i)))]),
    ])
    assert "_vy_fma(" in emit_cpu(prog)
    # (1 + 2^-30)(1 - 2^-30) - 1 = -2^-60: unfused, the product rounds to 1.0 and the sum to 0
    a, b, c = 1 + 2.0**-30, 1 - 2.0**-30, -1.0
    arrays = {"a": np.array([a, 2.0]), "b": np.array([b, 3.0]), "c": np.array([c, 1.0]), "out": np.zeros(2)}
    got = run(prog, arrays, "cpu", parallel=False)["out"]
    fused = float(Fraction(a) * Fraction(b) + Fraction(c))
    assert got[1] == 7.0
    assert got[0] in (fused, a * b + c)
    if "+fma" in ll.get_host_cpu_features().flatten().split(","):
        assert got[0] == fused == -(2.0**-60)
    assert run(prog, arrays, "interp")["out"][0] == 0.0  # the interpreter's documented unfused choice


@pytest.mark.parametrize("groups", [5, 70000])  # the serial kernel; the parallel one (chunks of workgroups)
@pytest.mark.parametrize("count", [4, 2048])  # in the kernel's stack frame; on the heap (past STACK_BYTES)
def test_workgroup_memory_starts_zeroed_in_every_workgroup(groups: int, count: int) -> None:
    """The CPU allocates a workgroup buffer once per call (or per parallel chunk) and zeroes it per
    workgroup: a workgroup that reads before writing sees the interpreter's zeros, never the
    previous workgroup's values (nor, in parallel, another thread's)."""
    import numpy as np

    from vyre import dispatch
    from vyre.codegen.cpu import STACK_BYTES, emit_cpu
    from vyre.ir import U32, Program, load, output, store, u32, wgid, workgroup

    scratch = workgroup("scratch", count, U32)
    out = output("out", 0, U32)
    last = u32(count - 1)
    prog = Program.wrapped([out, scratch], 1, [
        store(out, wgid(), load(scratch, u32(0)) + load(scratch, last)),
        store(scratch, u32(0), wgid() + u32(1)),
        store(scratch, last, wgid() + u32(7)),
    ])
    assert ("_vy_stack(" in emit_cpu(prog)) is (count * 4 <= STACK_BYTES)
    got = dispatch(prog, {"out": np.full(groups, 99, np.uint32)}, backend="cpu", grid=groups)["out"]
    assert not got.any()


def test_stack_holds_small_workgroup_buffers_up_to_a_total() -> None:
    """Workgroup buffers of at most STACK_BYTES go to the stack in declaration order until
    STACK_TOTAL bytes are used; the rest (and bigger ones) to the heap, and every one of them
    starts each workgroup zeroed and holds its own values."""
    import numpy as np

    from vyre import dispatch
    from vyre.codegen.cpu import STACK_BYTES, STACK_TOTAL, emit_cpu
    from vyre.ir import U32, Program, load, output, store, u32, wgid, workgroup

    per = STACK_BYTES // 4
    n = STACK_TOTAL // STACK_BYTES + 2
    bufs = [workgroup(f"w{i}", per, U32) for i in range(n)]
    out = output("out", 0, U32)
    body = []
    for i, b in enumerate(bufs):
        body += [store(b, u32(per - 1), wgid() + u32(i + 1))]
    total = load(bufs[0], u32(per - 1))
    for b in bufs[1:]:
        total = total + load(b, u32(per - 1)) * u32(1000) + load(b, u32(0))
    prog = Program.wrapped([out, *bufs], 1, [*body, store(out, wgid(), total)])
    src = emit_cpu(prog)
    assert src.count("_vy_stack(") == STACK_TOTAL // STACK_BYTES  # in _vy_groups, which both entries call
    got = dispatch(prog, {"out": np.zeros(3, np.uint32)}, backend="cpu", grid=3)["out"]
    want = dispatch(prog, {"out": np.zeros(3, np.uint32)}, backend="interp", grid=3)["out"]
    np.testing.assert_array_equal(got, want)


def test_workgroup_ids_on_a_3d_grid_serial_and_parallel() -> None:
    """Both CPU entries of a program with workgroup memory count the workgroups of a 3-D grid in
    order (the serial one with nested loops, the parallel one per chunk with carries from the
    chunk's first id): every workgroup runs once with its own (x, y, z) id. Grids whose chunks
    start mid-row and mid-plane, and axes of length 1."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from vyre.ir import U32, Program, load, output, read, store, u32, wgid, workgroup

    dims = read("dims", 0, U32)  # gx, gy: the program's flat index of a workgroup
    out = output("out", 1, U32)
    seen = workgroup("seen", 2, U32)
    flat = wgid(0) + load(dims, u32(0)) * (wgid(1) + load(dims, u32(1)) * wgid(2))
    prog = Program.wrapped([dims, out, seen], 1, [
        store(seen, u32(1), wgid(0) + u32(1000) * wgid(1) + u32(1000000) * wgid(2)),
        store(out, flat, load(out, flat) + load(seen, u32(1)) + u32(1) + load(seen, u32(0))),
        store(seen, u32(0), u32(7)),  # a later workgroup must see 0 here again
    ])
    k = vcompile(prog, "cpu", disk_cache=False)  # this emitter's code, not a cached build
    entries = [k._fn, k._fn_parallel]
    assert entries[1] is not None

    @settings(max_examples=30, deadline=None)
    @given(gx=st.integers(1, 300), gy=st.integers(1, 7), gz=st.integers(1, 5))
    def check(gx: int, gy: int, gz: int) -> None:
        z, y, x = np.meshgrid(np.arange(gz), np.arange(gy), np.arange(gx), indexing="ij")
        want = (x + 1000 * y + 1000000 * z + 1).astype(np.uint32).ravel()
        for fn in entries:
            got = np.zeros(gx * gy * gz, np.uint32)
            fn(np.array([gx, gy], np.uint32), got, gx, gy, gz)
            np.testing.assert_array_equal(got, want)

    check()
