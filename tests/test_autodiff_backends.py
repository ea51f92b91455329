"""Backward (and tangent) kernels agree across the interpreter, the CPU backend and the CUDA simulator.

The simulator needs NUMBA_ENABLE_CUDASIM=1 before numba.cuda is imported, so it runs this module
as a script in a child process (``python -m tests.test_autodiff_backends cudasim``), which prints
one JSON line per case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from vyre.autodiff import hvp, vjp
from vyre.examples import block_sum, subgroup_sum
from vyre.ir import (
    F32, F64, U32, BinOpKind, Program, assign, atomic_add, barrier, buflen, exp, f64, gid, if_, lane,
    let, lid, loop, maximum, output, read, select, shuffle, sin, sqrt, store, subgroup_reduce, var,
    workgroup,
)

ROOT = Path(__file__).resolve().parent.parent
N = 64


def _elementwise(dtype) -> Program:
    x, y, out = read("x", 0, dtype), read("y", 1, dtype), output("out", 2, dtype)
    i = gid()
    return Program.wrapped([x, y, out], 32, [
        if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])])])


def _gather() -> Program:
    x, y, idx, out = read("x", 0, F64), read("y", 1, F64), read("idx", 2, U32), output("out", 3, F64)
    i = gid()
    return Program.wrapped([x, y, idx, out], 32, [
        if_(i.lt(buflen(out)), [store(out, i, sin(x[idx[i]]) * y[i] + x[i] * x[(i + 1) % N])])])


def _recurrence() -> Program:
    """Dynamic-bound loop (reversed by recomputation) with a running max and a product."""
    x, y, nb, out = read("x", 0, F64), read("y", 1, F64), read("nb", 2, U32), output("out", 3, F64)
    i = gid()
    return Program.wrapped([x, y, nb, out], 32, [
        if_(i.lt(buflen(out)), [
            let("acc", y[i]), let("m", f64(-5.0)),
            loop("j", 0, nb[0], [
                assign("acc", sin(var("acc")) * x[(i + var("j")) % N] + f64(0.25)),
                assign("m", maximum(var("m"), var("acc") * y[var("j")])),
            ]),
            store(out, i, var("acc") + var("m")),
        ])])


def _twice() -> Program:
    """An output element stored twice per invocation (needs the stored_ flags, an atomic exchange)."""
    x, out = read("x", 0, F64), output("out", 1, F64)
    i = gid()
    return Program.wrapped([x, out], 32, [
        if_(i.lt(buflen(out)), [store(out, i, x[i]), store(out, (i * 7) % N, x[i] * x[i])])])


def _swap() -> Program:
    """Issue 11's first reproducer, per invocation: carried values swapped in a dynamic loop."""
    x, y, nb, out = read("x", 0, F64), read("y", 1, F64), read("nb", 2, U32), output("out", 3, F64)
    i = gid()
    return Program.wrapped([x, y, nb, out], 32, [
        if_(i.lt(buflen(out)), [
            let("a", x[i]), let("b", y[i]),
            loop("j", 0, nb[0], [let("t", var("a")), assign("a", var("b") * var("a")), assign("b", var("t"))]),
            store(out, i, var("a") * f64(2.0) + var("b") * f64(3.0))])])


def _guarded() -> Program:
    """Shared selects guarding sqrt (the untaken arm's zero must stay exact: no NaN)."""
    x, out = read("x", 0, F64), output("out", 1, F64)
    i = gid()
    return Program.wrapped([x, out], 32, [
        if_(i.lt(buflen(out)), [
            let("s", sqrt(x[i])),
            store(out, i, select(x[i].gt(f64(0.0)), var("s"), f64(0.0))
                  + select(x[i].gt(f64(0.5)), var("s"), f64(0.0)))])])


def _sync_mix() -> Program:
    """Workgroup memory with barriers, a subgroup max, an xor shuffle and an atomic add."""
    x, y, idx, out = read("x", 0, F64), read("y", 1, F64), read("idx", 2, U32), output("out", 3, F64)
    tile = workgroup("tile", 32, F64)
    i, lx = gid(), lid()
    return Program.wrapped([x, y, idx, out, tile], 32, [
        let("v", sin(x[i]) * y[i]), store(tile, lx, var("v")), barrier(),
        let("m", tile[(lx + 1) % 32] * tile[0]), barrier(),
        let("s", subgroup_reduce(BinOpKind.MAX, var("v"))),
        let("t", shuffle(var("v") * var("v"), lane() ^ 1)),
        let("_old", atomic_add(out, idx[i] % N, var("m") + var("s") * var("v") + var("t")))])


def _inputs(seed: int, dtype=np.float64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-1, 1, N).astype(dtype), "y": rng.uniform(-1, 1, N).astype(dtype),
            "idx": rng.integers(0, 5, N).astype(np.uint32), "nb": np.array([4], np.uint32),
            "out": np.zeros(N, dtype)}


def _only(prog: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = {b.name for b in prog.buffers}
    return {k: v for k, v in inputs.items() if k in names}


CASES: dict[str, tuple[Callable[[], Program], list[str], type]] = {
    "elementwise_f32": (lambda: _elementwise(F32), ["x", "y"], np.float32),
    "elementwise_f64": (lambda: _elementwise(F64), ["x", "y"], np.float64),
    "gather_atomic": (_gather, ["x", "y"], np.float64),
    "dynamic_recurrence": (_recurrence, ["x", "y"], np.float64),
    "stored_twice": (_twice, ["x"], np.float64),
    "swap_loop": (_swap, ["x", "y"], np.float64),
    "guarded_select": (_guarded, ["x"], np.float64),
    "sync_mix": (_sync_mix, ["x", "y"], np.float64),
    "block_sum": (block_sum, ["x"], np.float32),
    "subgroup_sum": (subgroup_sum, ["x"], np.float32),
}


def run_case(name: str, backend: str) -> dict[str, list[float]]:
    make, wrt, dtype = CASES[name]
    prog = make()
    inputs = _only(prog, _inputs(11, dtype))
    n_out = prog.buffer("out").count or N  # the examples reduce into one element
    inputs["out"] = np.zeros(n_out, dtype)
    cot: np.ndarray = np.random.default_rng(3).standard_normal(n_out).astype(dtype)
    g = vjp(prog, inputs, {"out": cot}, wrt, backend=backend)
    out = {f"grad_{w}": g[w].astype(np.float64).tolist() for w in wrt}
    if name == "gather_atomic":
        v = {w: np.random.default_rng(4).standard_normal(N) for w in wrt}
        h = hvp(prog, inputs, "out", wrt, v, backend=backend)
        out |= {f"hvp_{w}": h[w].tolist() for w in wrt}
    return out


def generated_cases() -> list[tuple[str, Program, dict[str, np.ndarray], list[str]]]:
    """A deterministic handful of issue 11's generated shapes (tests/autodiff_classes.py)."""
    from tests.autodiff_classes import carried_loops, guarded_singular, initial_reads, sync_programs

    out: list[tuple[str, Program, dict[str, np.ndarray], list[str]]] = []
    for label, strategy, count, wrt in (("carried", carried_loops(), 3, ["x"]), ("initial", initial_reads(), 2, ["x"]),
                                        ("guarded", guarded_singular(), 3, ["x"]),
                                        ("sync", sync_programs(), 2, ["x", "y"])):
        found = _draw(strategy, count)
        out += [(f"{label}_{k}", c.program, c.inputs, wrt) for k, c in enumerate(found[:count])]
    return out


def _draw(strategy, count: int) -> list:
    """The first ``count`` examples Hypothesis draws from ``strategy`` (derandomized)."""
    from hypothesis import HealthCheck, given, settings

    found: list = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case) -> None:
        found.append(case)

    collect()
    return found


def run_generated(backend: str) -> dict[str, dict[str, list[float]]]:
    res = {}
    for name, prog, inputs, wrt in generated_cases():
        cot = np.linspace(0.5, 1.5, inputs["out"].size)
        grid = (max(1, inputs["x"].size // prog.workgroup_size[0]), 1, 1)
        g = vjp(prog, inputs, {"out": cot}, wrt, backend=backend, grid=grid)
        res[name] = {w: np.asarray(g[w], np.float64).tolist() for w in wrt}
    return res


def test_cudasim_generated_issue11_shapes_match_interpreter() -> None:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-m", "tests.test_autodiff_backends", "cudasim-generated"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(rows) != 1:
        pytest.fail(f"simulator run failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
    want = run_generated("interp")
    got = rows[0]
    assert set(got) == set(want)
    for name in want:
        for w in want[name]:
            np.testing.assert_allclose(got[name][w], want[name][w], rtol=1e-9, atol=1e-9, err_msg=f"{name}: {w}")


def _compare(name: str, got: dict[str, list[float]], want: dict[str, list[float]]) -> None:
    rtol = 1e-5 if CASES[name][2] is np.float32 else 1e-11
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=rtol, err_msg=f"{name}: {k}")


@pytest.fixture(scope="module")
def reference() -> dict[str, dict[str, list[float]]]:
    return {name: run_case(name, "interp") for name in CASES}


@pytest.mark.parametrize("name", list(CASES))
def test_cpu_backward_matches_interpreter(name: str, reference) -> None:
    _compare(name, run_case(name, "cpu"), reference[name])


def test_cudasim_backward_matches_interpreter(reference) -> None:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-m", "tests.test_autodiff_backends", "cudasim"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(rows) != len(CASES):
        pytest.fail(f"simulator run failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
    for row in rows:
        _compare(row["case"], row["result"], reference[row["case"]])


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "cudasim-generated":
        print(json.dumps(run_generated("cudasim")), flush=True)
    else:
        for case in CASES:
            print(json.dumps({"case": case, "result": run_case(case, mode)}), flush=True)
