"""Out-of-bounds guards in generated code, and the bounds facts that remove them.

docs/semantics.md: a load past a buffer's end returns 0, a store past it does nothing, an atomic past
it does nothing and returns 0. On the CPU the arrays handed to the kernel are views into larger
arrays whose tails hold canaries: numba does not check bounds, so a missing guard would read a
canary or overwrite one. The simulator (numba's, in a child process: it is chosen when numba.cuda is
first imported) runs the same programs; it raises IndexError on an unguarded access.

The emitter drops a guard only where the index is provably in range (``if i < len(out): out[i] = ...``,
loop variables up to ``len(v)``, small literals, local ids into big enough workgroup memory); a variable
that some ``Assign`` overwrites never proves a bound.

    NUMBA_ENABLE_CUDASIM=1 python -m tests.test_codegen_bounds sim   # the child's side
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre.codegen.cpu import emit_cpu
from vyre.codegen.cuda import emit_cuda
from vyre.ir import (
    F32, U32, BinOpKind, BufferDecl, Program, assign, atomic_add, binop, buflen, gid, if_, let, lid, load,
    loop, output, read, store, u32, var, workgroup,
)

ROOT = Path(__file__).resolve().parent.parent
CANARY = 99.0


# ---- programs whose accesses go out of bounds ----------------------------------------------------
def flat_oob() -> Program:
    """8 invocations; ``x``, ``marks`` have 8 elements, ``cnt`` 4."""
    x, out = read("x", 0, F32), output("out", 1, F32)
    marks, cnt = BufferDecl.read_write("marks", 2, F32), BufferDecl.read_write("cnt", 3, U32)
    olds = output("olds", 4, U32)
    i, j = var("i"), var("j")
    return Program.wrapped([x, out, marks, cnt, olds], 8, [
        let("i", gid()),
        let("y", load(x, i + u32(4))),                   # past the end for i >= 4: 0
        let("j", i),
        if_(i.lt(buflen(out)), [
            store(out, i, var("y")),                      # proven: no guard
            store(out, i + u32(8), 5.0),                  # never in range: dropped
        ]),
        if_(j.lt(buflen(marks)), [
            assign("j", j + u32(4)),                      # j no longer proves anything
            store(marks, j, 1.0),                         # past the end for i >= 4
        ]),
        let("old", atomic_add(cnt, i, u32(1))),           # past the end for i >= 4: 0, no write
        store(olds, i, var("old")),
    ])


def flat_inputs(canary: bool) -> tuple[dict[str, np.ndarray], list[tuple[np.ndarray, int]]]:
    """Inputs (views into canary-tailed arrays when ``canary``) and (whole array, used length) pairs."""
    def tailed(values: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, int]]:
        n = len(values)
        if not canary:
            return values.copy(), (values, n)
        whole = np.full(n + 8, CANARY, values.dtype)
        whole[:n] = values
        return whole[:n], (whole, n)

    x, cx = tailed(np.arange(1, 9, dtype=np.float32))
    marks, cm = tailed(np.zeros(8, np.float32))
    cnt, cc = tailed(np.array([10, 20, 30, 40], np.uint32))
    out, co = tailed(np.full(8, -1.0, np.float32))
    return {"x": x, "marks": marks, "cnt": cnt, "out": out, "olds": np.full(8, 7, np.uint32)}, [cx, cm, cc, co]


FLAT_EXPECTED = {
    "out": [5.0, 6.0, 7.0, 8.0, 0.0, 0.0, 0.0, 0.0],
    "marks": [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
    "cnt": [11, 21, 31, 41],
    "olds": [10, 20, 30, 40, 0, 0, 0, 0],
}


def workgroup_oob() -> Program:
    """32 invocations, workgroup memory of 16: local ids 16..31 store past its end and read zeros."""
    x, out, tile = read("x", 0, F32), output("out", 1, F32), workgroup("tile", 16, F32)
    return Program.wrapped([x, out, tile], 32, [
        store(tile, lid(), load(x, gid())),
        store(out, gid(), load(tile, lid()) + load(tile, lid() + u32(20))),
    ])


WG_EXPECTED = [float(v) for v in range(1, 17)] + [0.0] * 16


def wg_inputs() -> dict[str, np.ndarray]:
    return {"x": np.arange(1, 33, dtype=np.float32), "out": np.full(32, -1.0, np.float32)}


def _as_lists(r: dict[str, Any]) -> dict[str, list]:
    return {k: np.asarray(v).tolist() for k, v in r.items()}


# ---- the CPU backend -----------------------------------------------------------------------------
def test_cpu_out_of_bounds_semantics_and_canaries(tmp_path: Path, monkeypatch: Any) -> None:
    import vyre

    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    inputs, tails = flat_inputs(canary=True)
    got = vyre.compile(flat_oob(), "cpu", parallel=False)(inputs)
    assert _as_lists(got) == FLAT_EXPECTED
    for whole, n in tails:
        assert (whole[n:] == CANARY).all(), whole  # nothing read or written past a buffer's end
    ref, _ = flat_inputs(canary=False)
    assert _as_lists(vyre.compile(flat_oob(), "interp")(ref)) == FLAT_EXPECTED


def test_cpu_workgroup_memory_out_of_bounds(tmp_path: Path, monkeypatch: Any) -> None:
    import vyre

    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    assert vyre.compile(workgroup_oob(), "cpu", parallel=False)(wg_inputs())["out"].tolist() == WG_EXPECTED
    assert vyre.compile(workgroup_oob(), "interp")(wg_inputs())["out"].tolist() == WG_EXPECTED


# ---- the simulator, in a child process -----------------------------------------------------------
def run_sim() -> None:
    import vyre

    flat_in, _ = flat_inputs(canary=False)
    for name, prog, inputs in (("flat", flat_oob(), flat_in), ("workgroup", workgroup_oob(), wg_inputs())):
        try:
            print(json.dumps({"case": name, "result": _as_lists(vyre.compile(prog, "cudasim")(inputs))}), flush=True)
        except Exception as e:  # report, the parent fails the test
            print(json.dumps({"case": name, "error": f"{type(e).__name__}: {e}"}), flush=True)


def test_simulator_out_of_bounds_semantics(tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "VYRE_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "tests.test_codegen_bounds", "sim"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    rows = {r["case"]: r for r in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    assert proc.returncode == 0 and set(rows) == {"flat", "workgroup"}, proc.stderr[-3000:]
    assert rows["flat"].get("result") == FLAT_EXPECTED, rows["flat"]
    assert rows["workgroup"].get("result") == {"out": WG_EXPECTED}, rows["workgroup"]


# ---- guards in the source ------------------------------------------------------------------------
def sources(p: Program) -> Iterator[str]:
    yield emit_cpu(p, parallel=False)
    yield emit_cuda(p)


def guarded_store(src: str, buf: str, idx: str) -> bool:
    """Is there a store to ``buf`` whose index ``idx`` goes through a guard temporary?"""
    m = re.search(rf"^(\s*)(_i\d+) = {re.escape(idx)}\n\1if \2 < {buf}\.shape\[0\]:\n\1    {buf}\[\2\] = ", src, re.M)
    return m is not None


def plain_store(src: str, buf: str, idx: str) -> bool:
    return re.search(rf"^\s*{buf}\[{re.escape(idx)}\] = ", src, re.M) is not None


def test_proven_store_has_no_guard_and_unproven_keeps_it() -> None:
    for src in sources(flat_oob()):
        assert plain_store(src, "b1_out", "v1_i")                            # out[i] under i < len(out)
        assert not guarded_store(src, "b1_out", "v1_i")
        assert guarded_store(src, "b1_out", "uint32(v1_i + uint32(8))")       # out[i + 8]
        assert guarded_store(src, "b2_marks", "v3_j")                         # j is assigned
        assert not plain_store(src, "b2_marks", "v3_j")
        assert "_vy_ld(b0_x, uint32(v1_i + uint32(4)), float32(0))" in src    # x[i + 4]


def test_example_kernels_pay_no_guard_where_it_is_proven() -> None:
    from vyre.examples import fused_chain, matvec, saxpy

    for src in sources(saxpy()):
        assert plain_store(src, "b3_out", "v1_i") and "if _i" not in src
        assert "_vy_ld(b1_x, v1_i" in src  # x may be shorter than out: still guarded
    for src in sources(fused_chain()):
        assert plain_store(src, "b2_out", "v1_i")
    for src in sources(matvec()):
        assert plain_store(src, "b2_out", "v1_r")
        # j < len(v) from the loop bound (the CPU indexes with the loop's int64 counter, CUDA with j)
        assert re.search(r"b1_v\[(v4_j|_it\d+)\]", src) and "_vy_ld(b1_v" not in src
        assert "_vy_ld(b0_m, " in src


def _one(cond_then: list, *, wg: int = 32, extra: tuple[BufferDecl, ...] = ()) -> Program:
    x, out = read("x", 0, F32), output("out", 1, F32)
    return Program.wrapped([x, out, *extra], wg, [let("i", gid()), *cond_then]).validate()


I, X, OUT = var("i"), read("x", 0, F32), output("out", 1, F32)


def test_which_conditions_prove_a_bound() -> None:
    cases: dict[str, tuple[list[Any], bool, bool | None]] = {
        # name: (statements after `let i = gid()`, is out[i] plain?, is x[i] plain?)
        "i < len(out)": ([if_(I.lt(buflen(OUT)), [store(OUT, I, 1.0)])], True, None),
        "len(out) > i": ([if_(buflen(OUT).gt(I), [store(OUT, I, 1.0)])], True, None),
        "and": ([if_(binop(BinOpKind.AND, I.lt(buflen(OUT)), I.lt(buflen(X))), [store(OUT, I, X[I])])], True, True),
        "let alias": ([let("n", buflen(OUT)), if_(I.lt(var("n")), [store(OUT, I, 1.0)])], True, None),
        "other buffer": ([if_(I.lt(buflen(X)), [store(OUT, I, X[I])])], False, True),
        "i <= len(out)": ([if_(I.le(buflen(OUT)), [store(OUT, I, 1.0)])], False, None),
        "or": ([if_(binop(BinOpKind.OR, I.lt(buflen(OUT)), I.lt(buflen(X))), [store(OUT, I, 1.0)])], False, None),
        "else branch": ([if_(I.lt(buflen(OUT)), [], [store(OUT, I, 1.0)])], False, None),
        "after the if": ([if_(I.lt(buflen(OUT)), []), store(OUT, I, 1.0)], False, None),
        "alias assigned": ([let("n", buflen(OUT)), assign("n", var("n") + u32(1)),
                            if_(I.lt(var("n")), [store(OUT, I, 1.0)])], False, None),
        "index assigned before": ([assign("i", I), if_(I.lt(buflen(OUT)), [store(OUT, I, 1.0)])], False, None),
    }
    for name, (stmts, out_plain, x_plain) in cases.items():
        p = _one(stmts)
        for src in sources(p):
            assert plain_store(src, "b1_out", "v1_i") is out_plain, (name, src)
            assert guarded_store(src, "b1_out", "v1_i") is not out_plain, name
            if x_plain is not None:
                assert ("b0_x[v1_i]" in src) is x_plain and ("_vy_ld(b0_x, v1_i," in src) is not x_plain, name


def test_loop_bounds_literals_and_local_ids() -> None:
    v, out = read("v", 0, F32), output("out", 1, F32).with_count(4)
    small, big = workgroup("small", 16, F32), workgroup("big", 32, F32)
    p = Program.wrapped([v, out, small, big], 32, [
        loop("j", u32(0), buflen(v), [store(small, u32(0), load(v, var("j")))]),
        loop("k", u32(0), buflen(v) + u32(1), [store(small, u32(1), load(v, var("k")))]),
        loop("m", u32(0), buflen(v), [store(out, var("m"), 2.0)]),
        store(out, u32(3), 1.0),
        store(out, u32(4), 1.0),
        store(big, lid(), 1.0),
        store(small, lid(), 1.0),
    ]).validate()
    for src in sources(p):
        assert re.search(r"b0_v\[(v\d+_j|_it\d+)\]", src)                # j < len(v)
        assert re.search(r"_vy_ld\(b0_v, v\d+_k, ", src)                 # k <= len(v)
        # m < len(v) says nothing about out
        assert re.search(r"if _i\d+ < b1_out\.shape\[0\]:\n\s+b1_out\[_i\d+\] = float32\(2\.0\)", src)
        assert plain_store(src, "b1_out", "uint32(3)")                   # literal < declared count
        assert guarded_store(src, "b1_out", "uint32(4)")                 # literal == count
        assert plain_store(src, "s1_big", "_lid0")                       # local id < workgroup size <= 32
        assert guarded_store(src, "s0_small", "_lid0")                   # 16 < workgroup size
        assert plain_store(src, "s0_small", "uint32(0)")


def test_atomics_are_always_guarded_on_cuda() -> None:
    for prog in (flat_oob(),):
        src = emit_cuda(prog)
        want = "(cuda.atomic.add(b3_cnt, v1_i, uint32(1)) if v1_i < b3_cnt.shape[0] else uint32(0))"
        assert want in src


def _load_guard_program() -> Program:
    idx, out = BufferDecl.read_write("idx", 0, U32).with_count(4), BufferDecl.read_write("out", 1, U32).with_count(4)
    i = var("i")
    return Program.wrapped([idx, out], 4, [
        let("i", gid()),
        if_(load(idx, i).lt(buflen(out)), [
            store(idx, i, u32(1 << 28)),
            store(out, load(idx, i), u32(7)),   # idx[i] was just overwritten: must stay guarded
        ]),
    ]).validate()


def test_load_guard_program_is_what_the_xfail_below_assumes() -> None:
    src = emit_cpu(_load_guard_program(), parallel=False)
    assert "b0_idx[_i" in src  # the store to idx itself is guarded (i is not proven for idx)


def test_a_load_of_a_written_buffer_never_proves_a_bound() -> None:
    for src in sources(_load_guard_program()):
        assert not plain_store(src, "b1_out", "_vy_ld(b0_idx, v1_i, uint32(0))"), src


if __name__ == "__main__":
    if sys.argv[1:] == ["sim"]:
        run_sim()
    else:
        raise SystemExit(f"usage: python -m tests.test_codegen_bounds sim (got {sys.argv[1:]})")


# ---- int64 indices (Emitter.proven_index) ------------------------------------------------------------
def _strided_copy() -> Program:
    """``out[p + k] = x[p + k] * 2`` over steps of 4 (``p = j * 4``): every index proven in range by
    the range prover, whose bound of ``p + k`` is the unwrapped sum."""
    x, out = read("x", 0, F32), output("out", 1, F32)
    n, p, k = var("n"), var("p"), var("k")
    return Program.wrapped([x, out], 1, [
        let("n", binop(BinOpKind.MIN, buflen(x), buflen(out))),
        loop("j", u32(0), n / u32(4), [
            let("p", var("j") * u32(4)),
            loop("k", u32(0), u32(4), [store(out, p + k, load(x, p + k) * 2.0)]),
        ]),
    ])


def _wrapping_store() -> Program:
    """``if i + c < len(out): out[i + c] = x[i]`` with ``c`` a parameter: where ``i + c`` wraps past
    2^32 the condition speaks of the wrapped index, so the store lands at ``i + c - 2^32``."""
    x, out = read("x", 0, F32), output("out", 1, F32)
    c = BufferDecl.uniform("c", 2, U32).with_count(1)
    idx = gid() + var("c")
    return Program.wrapped([x, out, c], 8, [
        let("c", load(c, u32(0))),
        if_(idx.lt(buflen(out)), [store(out, idx, load(x, gid()))]),
    ])


def test_cpu_indexes_in_int64_where_the_prover_rules_out_wrapping() -> None:
    """The CPU spells a proven sum of indices in int64 and a loop's variable as its counter (LLVM
    then needs no run-time wrap check, and no scalar copy of the loop); an index proven only by a
    condition on the wrapped value stays u32; CUDA keeps u32 everywhere."""
    src = emit_cpu(_strided_copy(), parallel=False)
    assert re.search(r"b0_x\[\(int64\(v\d+_p\) \+ _it\d+\)\]", src), src
    assert re.search(r"b1_out\[\(int64\(v\d+_p\) \+ _it\d+\)\] = ", src), src
    cuda = emit_cuda(_strided_copy())
    assert re.search(r"b0_x, uint32\(v\d+_p \+ v\d+_k\)", cuda) and not re.search(r"\(int64\(v\d+_p\)", cuda)
    wrapping = emit_cpu(_wrapping_store(), parallel=False)
    assert plain_store(wrapping, "b1_out", "uint32(_gid0 + v1_c)"), wrapping  # the condition's fact, in u32


@given(n=st.integers(1, 40), c=st.one_of(st.integers(0, 48), st.integers(2**32 - 48, 2**32 - 1)))
@settings(max_examples=40, deadline=None)
def test_wrapped_indices_match_the_interpreter(n: int, c: int) -> None:
    """u32 index arithmetic wraps on every backend as in the interpreter: offsets near 2^32 move a
    store below the invocation id (and a proven index never hides a wrap)."""
    from vyre import dispatch

    arrays = {"x": np.arange(1, n + 1, dtype=np.float32), "out": np.zeros(n, np.float32), "c": np.uint32(c)}
    prog = _wrapping_store()
    got = {b: dispatch(prog, {k: np.copy(v) for k, v in arrays.items()}, backend=b, grid=(n + 7) // 8)["out"]
           for b in ("cpu", "interp")}
    np.testing.assert_array_equal(got["cpu"], got["interp"])
    strided = {"x": np.arange(n, dtype=np.float32), "out": np.zeros(n + c % 5, np.float32)}
    want = np.zeros(n + c % 5, np.float32)
    want[:n // 4 * 4] = 2 * strided["x"][:n // 4 * 4]
    np.testing.assert_array_equal(dispatch(_strided_copy(), strided, backend="cpu", grid=1)["out"], want)
