"""Interleaved CUDA emission (vyre.codegen.interleave): the shape of the generated code, the launch
that uses it, and parity with the interpreter on numba's simulator (in a child process) for
hand-written programs that take every path and for generated flat programs."""

from __future__ import annotations

import re

import pytest

from tests.interleave_cases import CASES
from tests.subproc import run_checks
from vyre.codegen.cuda import emit_cuda
from vyre.codegen.interleave import INTERLEAVE, INTERLEAVE_MIN_INVOCATIONS, MAX_INTERLEAVED_SIZE
from vyre.driver.dispatch import Kernel, Launch
from vyre.examples import fused_chain, matvec
from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var


def _interleaved_fn(src: str) -> list[str]:
    start = src.index("def _vy_interleaved_py(")
    return src[start:src.index("_vy_interleaved = _dev", start)].splitlines()


def test_fused_chain_issues_every_load_before_any_store() -> None:
    lines = _interleaved_fn(emit_cuda(fused_chain()))
    assert lines[0].startswith("def _vy_interleaved_py(_g, _stride, ")
    assert [x.strip() for x in lines[3:3 + INTERLEAVE]] == [
        f"_gid0_{k} = uint32(_g + {k} * _stride)" for k in range(INTERLEAVE)]
    fast = lines[lines.index(next(x for x in lines if x.strip().startswith("if _c"))):]
    fast = fast[:next(i for i, x in enumerate(fast) if x.startswith("    elif"))]
    stores = [i for i, x in enumerate(fast) if re.match(r"\s+b2_out\[", x)]
    loads = [i for i, x in enumerate(fast) if "_vy_ld(" in x]
    assert len(stores) == INTERLEAVE and len(loads) == 2 * INTERLEAVE
    assert max(loads) < min(stores)


def test_the_common_guard_proves_the_interleaved_stores() -> None:
    # `out[i]` under `i < len(out)` stays unguarded in the interleaved copy too
    lines = _interleaved_fn(emit_cuda(fused_chain()))
    assert not any("b2_out.shape[0]:" in x for x in lines if x.strip().startswith("if _i"))
    assert sum(1 for x in lines if re.match(r"\s+b2_out\[v\d+_i\] = _v\d+$", x)) == INTERLEAVE


def _solo_points(lines: list[str]) -> int:
    return sum(1 for x in lines if x.strip() == f"for _q in range({INTERLEAVE}):")


def test_disagreeing_groups_go_one_by_one_before_a_write_and_finish_in_turn_after_one() -> None:
    # nothing written yet: the group is handed to the per-invocation function, in a loop
    for name in ("early_return", "return_in_else", "divergent_branches", "return_chain"):
        assert _solo_points(_interleaved_fn(emit_cuda(CASES[name]()))) >= 1, name
    assert _solo_points(_interleaved_fn(emit_cuda(fused_chain()))) == 1
    # a store came first: each invocation finishes on its own in a one-trip loop
    lines = _interleaved_fn(emit_cuda(CASES["shadowing"]()))
    assert _solo_points(lines) == 0
    assert sum(1 for x in lines if x.strip() == "for _once in range(1):") == INTERLEAVE


def test_a_guard_on_the_invocation_id_itself_proves_every_store() -> None:
    # the index source follows the invocation (_gid0_0.._gid0_3): each needs its own fact
    x, out = read("x", 0, F32), output("out", 1, F32)
    prog = Program.wrapped([x, out], 64, [if_(gid().lt(buflen(out)), [store(out, gid(), x[gid()] * 2.0)])])
    lines = _interleaved_fn(emit_cuda(prog))
    stores = [x.strip() for x in lines if "b1_out[" in x]
    assert len(stores) == INTERLEAVE
    assert all(re.fullmatch(rf"b1_out\[_gid0_{k}\] = _v\d+", x) for k, x in enumerate(stores)), stores
    assert not [x for x in lines if "if _gid0_" in x and "b1_out.shape[0]:" in x]  # no store guard left


def test_loop_bodies_run_in_turn_and_still_interleave_around() -> None:
    src = emit_cuda(matvec())
    assert "_vy_interleaved_py" in src
    compile(src, "<matvec>", "exec")


def test_large_bodies_are_not_interleaved() -> None:
    x, out = read("x", 0, F32), output("out", 1, F32)
    e = var("v")
    body = [let("v", x[gid()])]
    for k in range(MAX_INTERLEAVED_SIZE // 4):
        body.append(let(f"w{k}", e * float(k) + 2.0))  # distinct, so CSE keeps them all
    body.append(store(out, gid(), e))
    src = emit_cuda(Program.wrapped([x, out], 64, body))
    assert "_vy_interleaved" not in src
    assert "while _j < _ipt:" in src


def test_programs_with_only_small_static_buffers_are_not_interleaved() -> None:
    small = fused_chain(INTERLEAVE_MIN_INVOCATIONS - 1)
    assert "_vy_interleaved" not in emit_cuda(small)
    assert "_vy_interleaved" in emit_cuda(fused_chain(INTERLEAVE_MIN_INVOCATIONS))


@pytest.mark.parametrize("n, ipt", [(INTERLEAVE_MIN_INVOCATIONS - 1, 1),
                                    (INTERLEAVE_MIN_INVOCATIONS, INTERLEAVE)])
def test_default_cuda_launch_interleaves_big_problems(n: int, ipt: int) -> None:
    k = Kernel(fused_chain(), "cuda", None, "key", False, 0.0, flat=True)
    assert k.default_launch(n) == Launch(256, ipt)  # fused_chain's workgroup is 256 as well


@pytest.fixture(scope="module")
def sim_rows() -> list[dict]:
    return run_checks("interleave", "40", env={"NUMBA_ENABLE_CUDASIM": "1"})


def test_simulator_runs_every_interleave_case(sim_rows: list[dict]) -> None:
    names = {r["case"] for r in sim_rows}
    assert set(CASES) <= names
    assert sum(1 for n in names if n.startswith("flat_generated_")) == 40


def test_interleaved_kernels_match_the_interpreter(sim_rows: list[dict]) -> None:
    problems = [f"{r['case']}: {p}" for r in sim_rows for p in r["problems"]]
    assert problems == []
