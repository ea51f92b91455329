"""``analyze_pipeline``: dispatch graph construction, static feature counts, the IR diffusion, and
the flags on pipelines whose fusion behaviour is known (docs/self_substrate.md, "Validation")."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vyre.ir import (
    F32, U32, BufferDecl, Program, atomic_add, barrier, buflen, gid, if_, let, lid, load, loop, output, read,
    store, u32, var, wgid, workgroup,
)
from vyre.ir.builder import assign
from vyre.primitives import matmul_program, sheaf_laplacian_step_reference
from vyre.self_substrate import (
    FEATURE_NAMES, DispatchErrorKind, DriverDispatcher, OptimizerDispatchError, analyze_pipeline,
    dispatch_graph, read_u32s, static_counts,
)
from vyre.self_substrate.dispatcher import storage_decls

# The simulator runs in its own process (NUMBA_ENABLE_CUDASIM=1); a real GPU with VYRE_TEST_CUDA=1.
BACKENDS = (["interp", "cpu"] + (["cudasim"] if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else [])
            + (["cuda"] if os.environ.get("VYRE_TEST_CUDA") == "1" else []))


def ew(src: str, dst: str, scale: float = 2.0, wg: int = 256) -> Program:
    """An elementwise map ``dst[i] = src[i] * scale``."""
    x, y = read(src, 0, F32), output(dst, 1, F32)
    i = gid()
    return Program.wrapped([x, y], wg, [if_(i.lt(buflen(y)), [store(y, i, load(x, i) * scale)])])


def square(src: str, dst: str) -> Program:
    """``dst[i] = src[i] * src[i]`` (two loads: a slightly different elementwise kernel)."""
    x, y = read(src, 0, F32), output(dst, 1, F32)
    i = gid()
    return Program.wrapped([x, y], 256, [if_(i.lt(buflen(y)), [store(y, i, load(x, i) * load(x, i))])])


def ew2(a: str, b: str, dst: str) -> Program:
    """``dst[i] = a[i] + b[i]``."""
    x, y, z = read(a, 0, F32), read(b, 1, F32), output(dst, 2, F32)
    i = gid()
    return Program.wrapped([x, y, z], 256, [if_(i.lt(buflen(z)), [store(z, i, load(x, i) + load(y, i))])])


def atomic_sum(src: str, dst: str) -> Program:
    x, t = read(src, 0, F32), BufferDecl.output(dst, 1, F32).with_count(1)
    i = gid()
    body = [let("old", atomic_add(t, u32(0), load(x, i)))]
    return Program.wrapped([x, t], 256, [if_(i.lt(buflen(x)), body)])


def tree_sum(src: str, dst: str) -> Program:
    """Workgroup tree reduction: barriers between halving steps."""
    x, out, sh = read(src, 0, F32), output(dst, 1, F32), workgroup("sh", 256, F32)
    i, local = gid(), lid()
    body = [store(sh, local, load(x, i)), barrier()]
    s = 128
    while s >= 1:
        step = store(sh, local, load(sh, local) + load(sh, local + u32(s)))
        body += [if_(local.lt(u32(s)), [step]), barrier()]
        s //= 2
    body.append(if_(local.eq(u32(0)), [store(out, wgid(), load(sh, u32(0)))]))
    return Program.wrapped([x, out, sh], 256, body)


class ReferenceSheafDispatcher:
    """Runs the sheaf Laplacian step with the float64 reference (and counts calls)."""

    def __init__(self) -> None:
        self.calls = 0

    def dispatch(self, program, inputs, grid_override):
        from vyre.primitives import SheafGraph

        self.calls += 1
        names = [d.name for d in storage_decls(program)]
        assert names == ["x", "row_ptr", "col", "r_self", "r_nbr", "alpha", "x_next"]
        x = np.frombuffer(inputs[0], dtype=np.float32).astype(np.float64)
        row_ptr, col = read_u32s(inputs[1]), read_u32s(inputs[2])
        r_self = np.frombuffer(inputs[3], dtype=np.float32).astype(np.float64)
        r_nbr = np.frombuffer(inputs[4], dtype=np.float32).astype(np.float64)
        alpha = float(np.frombuffer(inputs[5], dtype=np.float32)[0])
        n = len(row_ptr) - 1
        d = x.size // n
        edges, mu, mv = [], [], []
        for u in range(n):
            for h in range(row_ptr[u], row_ptr[u + 1]):
                if u < col[h]:
                    edges.append((u, col[h]))
                    mu.append(r_self[h * d:(h + 1) * d])
                    mv.append(r_nbr[h * d:(h + 1) * d])
        graph = SheafGraph.from_edges(n, d, edges, mu, mv)
        return [sheaf_laplacian_step_reference(graph, x, alpha).astype(np.float32).tobytes()]


class Refuses:
    def dispatch(self, program, inputs, grid_override):
        raise AssertionError("no dispatch expected")


CHAIN = {"scale": ew("x", "y"), "shift": ew("y", "z", 0.5), "square": square("z", "w")}


def test_dispatch_graph_uses_the_last_writer_of_each_buffer() -> None:
    progs = [ew("x", "y"), ew("y", "z"), ew("x", "y"), ew2("y", "z", "out"), ew("x", "q")]
    assert dispatch_graph(progs) == [(0, 1, ("y",)), (1, 3, ("z",)), (2, 3, ("y",))]
    assert dispatch_graph([ew2("a", "b", "c"), ew2("c", "c", "d")]) == [(0, 1, ("c",))]


def test_static_counts() -> None:
    c = static_counts(matmul_program(4, 8, 2, a="a", b="b", c="c"))
    assert c.loops == 1 and c.branches == 1 and c.dynamic_loops == 0
    assert c.load_bytes == 8 * 2 * 4  # two f32 loads per iteration, 8 iterations
    assert c.store_bytes == 4 and c.workgroup_invocations == 64
    t = static_counts(tree_sum("x", "out"))
    assert t.barriers == 9 and t.atomics == 0 and t.branches == 9
    a = static_counts(atomic_sum("x", "t"))
    assert a.atomics == 1 and a.store_bytes == 0
    # A loop with run-time bounds counts a nominal trip count and is reported.
    buf = read("n", 0, U32)
    out = output("o", 1, U32)
    count = loop("k", u32(0), load(buf, u32(0)), [assign("acc", var("acc") + 1)])
    prog = Program.wrapped([buf, out], 64, [let("acc", u32(0)), count, store(out, gid(), var("acc"))])
    d = static_counts(prog)
    assert d.dynamic_loops == 1 and d.arith == 16


@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_chain_has_no_flags(backend: str) -> None:
    report = analyze_pipeline(CHAIN, dispatcher=DriverDispatcher(backend))
    assert [(e.src, e.dst) for e in report.edges] == [("scale", "shift"), ("shift", "square")]
    assert report.flagged_pairs == []
    # Identical kernels are a global section: diffusion does not move them.
    same = analyze_pipeline([ew("x", "y"), ew("y", "z"), ew("z", "w")], dispatcher=DriverDispatcher(backend))
    assert same.flagged_pairs == [] and all(n.displacement < 1e-6 for n in same.nodes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_and_loop_kernels_are_flagged_against_maps(backend: str) -> None:
    disp = DriverDispatcher(backend)
    report = analyze_pipeline(dict(CHAIN, total=atomic_sum("w", "total")), dispatcher=disp)
    assert report.flagged_pairs == [("square", "total")]
    assert report.edges[-1].reasons[0] == "atomics"
    report = analyze_pipeline(dict(CHAIN, tree=tree_sum("w", "partial"), post=ew("partial", "q")),
                              dispatcher=disp)
    assert report.flagged_pairs == [("square", "tree"), ("tree", "post")]
    assert all(e.reasons[0] == "barriers" for e in report.edges if e.flagged)
    # Diffusion spreads the tree's disagreement onto shift -> square, whose kernels agree: the
    # two-sided rule (before and after) keeps that pair unflagged.
    spread = report.edges[1]
    assert (spread.src, spread.dst) == ("shift", "square")
    assert spread.residual_before < 0.5 < spread.residual_after and not spread.flagged
    mm = matmul_program(8, 8, 8, a="w", b="bmat", c="c")
    report = analyze_pipeline(dict(CHAIN, mm=mm, post=ew("c", "d")), dispatcher=disp)
    assert report.flagged_pairs == [("square", "mm"), ("mm", "post")]
    assert all("loops" in e.reasons for e in report.edges if e.flagged)


def test_workgroup_size_mismatch_is_flagged_only_when_large() -> None:
    disp = ReferenceSheafDispatcher()
    assert analyze_pipeline([ew("x", "y", wg=256), ew("y", "z", wg=128)], dispatcher=disp).flagged_pairs == []
    report = analyze_pipeline([ew("x", "y", wg=256), ew("y", "z", wg=32)], dispatcher=disp)
    assert report.flagged_pairs == [("p0", "p1")] and report.edges[0].reasons == ("workgroup",)


def test_ir_diffusion_matches_the_float64_reference() -> None:
    progs = dict(CHAIN, tree=tree_sum("w", "partial"), post=ew("partial", "q"), total=atomic_sum("q", "t"))
    ref_disp = ReferenceSheafDispatcher()
    ref = analyze_pipeline(progs, dispatcher=ref_disp)
    ir = analyze_pipeline(progs, dispatcher=DriverDispatcher("interp"))
    assert ref_disp.calls == ref.steps >= 1
    for a, b in zip(ref.nodes, ir.nodes, strict=True):
        np.testing.assert_allclose(a.diffused, b.diffused, rtol=1e-5, atol=1e-5)
    assert ref.flagged_pairs == ir.flagged_pairs


def test_report_rendering() -> None:
    pipeline = dict(CHAIN, total=atomic_sum("w", "total"))
    report = analyze_pipeline(pipeline, dispatcher=ReferenceSheafDispatcher())
    table = report.to_table()
    assert "INCOMPATIBLE" in table and all(name in table for name in FEATURE_NAMES)
    assert table.count("\n") > 8
    dot = report.to_dot()
    assert dot.startswith("digraph pipeline {") and dot.rstrip().endswith("}")
    assert '"square" -> "total"' in dot and "color=red" in dot


def test_single_program_and_no_diffusion_need_no_dispatch() -> None:
    report = analyze_pipeline([ew("x", "y")], dispatcher=Refuses())
    assert report.edges == () and report.steps == 0
    report = analyze_pipeline(CHAIN, dispatcher=Refuses(), diffusion_time=0.0)
    assert report.steps == 0 and report.flagged_pairs == []


@pytest.mark.parametrize("args, match", [
    (([],), "no programs"),
    (([ew("x", "y"), "not a program"],), "Program"),
    (([ew("x", "y")], -1.0), "non-negative"),
])
def test_bad_arguments(args, match: str) -> None:
    programs = args[0]
    kwargs = {"threshold": args[1]} if len(args) > 1 else {}
    with pytest.raises(OptimizerDispatchError, match=match) as info:
        analyze_pipeline(programs, dispatcher=Refuses(), **kwargs)
    assert info.value.kind is DispatchErrorKind.BAD_INPUTS and "Fix:" in str(info.value)
