"""The two entries of a CPU kernel (vyre/codegen/cpu.py): ``vyre_kernel`` (serial) and
``vyre_kernel_parallel`` (prange over chunks) call one function holding the work, ``_vy_run``
(flat form: a range of invocations), ``_vy_groups`` (workgroups: a range of workgroups, ids
counted with carries from the first one's) or ``_vy_private_run`` (reductions into private
copies). So numba compiles the work once, whichever entry runs first, and the parallel entry's
prange body is one call.

- every entry, on grids of one to three dimensions whose chunks start anywhere in a row or
  plane of workgroups, gives the interpreter's results (workgroup ids, local ids, workgroup
  buffers zeroed per workgroup);
- compiling the parallel entry after the serial one compiles the work no second time (a type
  that differed between the two calls would compile it twice: the cost this layout removes).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre.codegen.cpu import PARALLEL_CHUNKS, emit_cpu
from vyre.driver.dispatch import compile as vcompile
from vyre.ir import (
    U32, Program, atomic_add, buflen, gid, if_, let, lid, load, output, read, store, u32, var, wgid, workgroup,
)

WG = 4


def ids_program() -> Program:
    """Each invocation writes its workgroup's linear id (from the extents in ``dims``), its three
    workgroup ids and what its slot of a workgroup buffer holds after one increment (lid + 1
    only if the buffer started the workgroup zeroed)."""
    dims, out = read("dims", 0, U32), output("out", 1, U32)
    scratch = workgroup("scratch", WG, U32)
    linear = (wgid(2) * load(dims, u32(1)) + wgid(1)) * load(dims, u32(0)) + wgid(0)
    slot = var("slot")
    return Program.wrapped([dims, out, scratch], WG, [
        store(scratch, lid(), load(scratch, lid()) + lid() + u32(1)),
        let("slot", (linear * u32(WG) + lid()) * u32(5)),
        if_((slot + u32(4)).lt(buflen(out)), [
            store(out, slot, linear), store(out, slot + u32(1), wgid(0)), store(out, slot + u32(2), wgid(1)),
            store(out, slot + u32(3), wgid(2)), store(out, slot + u32(4), load(scratch, lid())),
        ]),
    ])


def _run_ids(fn: object, gx: int, gy: int, gz: int) -> np.ndarray:
    out = np.zeros(gx * gy * gz * WG * 5, np.uint32)
    fn(np.array([gx, gy], np.uint32), out, gx, gy, gz)  # type: ignore[operator]
    return out


def _expected(gx: int, gy: int, gz: int) -> np.ndarray:
    rows = [[(z * gy + y) * gx + x, x, y, z, lane + 1]
            for z in range(gz) for y in range(gy) for x in range(gx) for lane in range(WG)]
    return np.array(rows, np.uint32).ravel()


def _interpreted(gx: int, gy: int, gz: int) -> np.ndarray:
    arrays = {"dims": np.array([gx, gy], np.uint32), "out": np.zeros(gx * gy * gz * WG * 5, np.uint32)}
    return vcompile(ids_program(), "interp")(arrays, grid=(gx, gy, gz))["out"]


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 9), st.integers(1, 7), st.integers(1, 6))
def test_every_entry_runs_each_workgroup_once_with_its_ids(gx: int, gy: int, gz: int) -> None:
    k = vcompile(ids_program(), "cpu")
    assert not k.flat and k._fn_parallel is not None
    want = _interpreted(gx, gy, gz)
    np.testing.assert_array_equal(want, _expected(gx, gy, gz))
    for fn in (k._fn, k._fn_parallel):
        np.testing.assert_array_equal(_run_ids(fn, gx, gy, gz), want)


def test_chunks_that_start_inside_rows_and_planes() -> None:
    """More workgroups than PARALLEL_CHUNKS: chunks of one or two workgroups start at every
    position in a row and plane (the first one's ids divided out, the rest carried)."""
    gx, gy, gz = 7, 9, 5
    assert gx * gy * gz > PARALLEL_CHUNKS
    k = vcompile(ids_program(), "cpu")
    want = _interpreted(gx, gy, gz)
    np.testing.assert_array_equal(want, _expected(gx, gy, gz))
    np.testing.assert_array_equal(_run_ids(k._fn_parallel, gx, gy, gz), want)


def _module(prog: Program) -> dict[str, object]:
    ns: dict[str, object] = {"__name__": "vyre_test_entries"}
    exec(compile(emit_cpu(prog, parallel=True, cache=False), "<vyre-kernel>", "exec"), ns)
    return ns


def _flat_map() -> Program:
    x, out = read("x", 0, U32), output("out", 1, U32)
    i = var("i")
    return Program.wrapped([x, out], 64, [let("i", gid()), if_(i.lt(buflen(x)), [
        store(out, i, load(x, i) * u32(3) + i)])])


def _private_sum() -> Program:
    x, out = read("x", 0, U32), output("out", 1, U32)
    i = var("i")
    return Program.wrapped([x, out], 64, [let("i", gid()), if_(i.lt(buflen(x)), [
        let("old", atomic_add("out", u32(0), load(x, i)))])])


def test_the_parallel_entry_compiles_the_work_no_second_time() -> None:
    for prog, work in ((_flat_map(), ("_vy_run",)), (ids_program(), ("_vy_groups",)),
                       (_private_sum(), ("_vy_run", "_vy_private_run"))):
        ns = _module(prog)
        assert ns["VYRE_PARALLEL"]
        ns["vyre_kernel_parallel"].compile(ns["_SIG"])  # type: ignore[attr-defined]
        for name in work:
            assert len(ns[name].overloads) == 1, (name, list(ns[name].overloads))  # type: ignore[attr-defined]
        src = emit_cpu(prog, parallel=True)
        body = src[src.index("def vyre_kernel_parallel("):].split("numba.prange(", 1)[1]
        call = next(ln for ln in body.splitlines()[1:] if ln.strip().startswith("_vy_"))
        assert call.strip().startswith(work[-1] + "(")


def test_the_flat_and_private_entries_agree_with_the_interpreter() -> None:
    x = np.arange(1, 5001, dtype=np.uint32)
    k = vcompile(_flat_map(), "cpu")
    assert k.flat
    want = x * 3 + np.arange(len(x), dtype=np.uint32)
    for fn in (k._fn, k._fn_parallel):
        out = np.zeros(len(x), np.uint32)
        fn(x, out, len(x), 64)  # 79 chunks of 64 invocations, the last one short
        np.testing.assert_array_equal(out, want)
    k = vcompile(_private_sum(), "cpu")
    assert k.flat
    for fn in (k._fn, k._fn_parallel):
        out = np.zeros(1, np.uint32)
        fn(x, out, len(x), 64)
        assert int(out[0]) == 5000 * 5001 // 2
