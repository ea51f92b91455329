"""How an atomic's index varies across a warp (vyre/codegen/lanes.py) and what the CUDA emitter
does with it: a gid-indexed add stays a plain atomic, a warp-uniform or small-modulus one is
warp-aggregated (the PTX side: tests/warp_add_cases.py's ``lane_distinct_scatter``)."""

from __future__ import annotations

from vyre.codegen.cuda import emit_cuda
from vyre.codegen.lanes import LaneKind, LaneKinds
from vyre.ir import (
    F32, I32, Program, assign, atomic_add, buflen, cast, gid, if_, let, lid, load, loop, output, read, u32, var, wgid,
)

from tests.warp_add_cases import loop_scatter, scatter

U, D, X = LaneKind.UNIFORM, LaneKind.DISTINCT, LaneKind.UNKNOWN


def test_kinds_of_index_shapes() -> None:
    k = LaneKinds({"v_j": U, "v_i": D})
    local = {"j": "v_j", "i": "v_i", "w": "v_w"}
    x = read("x", 0, F32)
    cases = [
        (u32(3), U), (buflen(x), U), (wgid(), U), (gid(), D), (lid(), D),
        (gid() + var("j"), D), (var("j") - gid(), D), ((gid() + var("j")) % buflen(x), D),
        (gid() * u32(4), D), (gid() * var("j"), X), (gid() % u32(4), X), (gid() % u32(64), D),
        (gid() + gid(), X), (gid() & u32(7), X), (var("w"), X), (var("nowhere"), X),
        (load(x, var("j")), U), (load(x, gid()), X), (var("j") * u32(2) + u32(1), U), (cast(I32, gid()), D),
    ]
    for e, want in cases:
        assert k.of(e, local.get) is want, (e, want)


def test_cuda_keeps_plain_atomics_where_lanes_add_to_different_elements() -> None:
    src = emit_cuda(loop_scatter())
    assert "_vy_warp_add" not in src
    assert "cuda.atomic.add(" in src
    # everything into one element (i % 1) and a uniform index stay aggregated
    assert "_vy_warp_add(b1_out" in emit_cuda(scatter(F32, 1, 64))
    x, out = read("x", 0, F32), output("out", 1, F32)
    uniform = Program.wrapped([x, out], 64, [loop("j", 0, 4, [
        if_(gid().lt(buflen(x)), [let("u", atomic_add(out, var("j"), x[gid()]))])])])
    assert "_vy_warp_add(" in emit_cuda(uniform)


def test_assigned_locals_are_unknown() -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    prog = Program.wrapped([x, out], 64, [
        let("k", gid()),
        if_(x[gid()] > 0.0, [assign("k", u32(0))]),  # some lanes all add to element 0 now
        if_(gid().lt(buflen(x)), [let("u", atomic_add(out, var("k"), x[gid()]))]),
    ])
    assert "_vy_warp_add(" in emit_cuda(prog)
