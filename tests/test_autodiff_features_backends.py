"""pow, stop_gradient, the zero-derivative policy, custom adjoints and tapes give the same
gradients on the interpreter, the CPU backend and the CUDA simulator.

The simulator needs NUMBA_ENABLE_CUDASIM=1 before numba.cuda is imported, so it runs this module
as a script in a child process (``python -m tests.test_autodiff_features_backends cudasim``),
which prints one JSON line per case. Cases stay tiny: the simulator costs ~160 us per thread.
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

from vyre.autodiff import vjp
from vyre.autodiff.tape import Tape
from vyre.ir import (
    F32, F64, Expr, FunctionAdjoint, FunctionDef, Program, buflen, call, cos, f32, f64, floor, gid,
    if_, output, power, read, register_function, rint, sign, sin, stop_gradient, store, tanh, var,
)

ROOT = Path(__file__).resolve().parent.parent
N = 8

register_function(FunctionDef("feat_sinmul", (("a", F64), ("b", F64)), F64, sin(var("a")) * var("b")),
                  adjoint=FunctionAdjoint("r", "g", (var("g") * cos(var("a")) * var("b"),
                                                      var("g") * sin(var("a")))))


def _ew(f: Callable[[Expr, Expr], Expr], t=F64) -> Program:
    x, y, out = read("x", 0, t), read("y", 1, t), output("out", 2, t)
    i = gid()
    return Program.wrapped([x, y, out], 4, [if_(i.lt(buflen(out)), [store(out, i, f(x[i], y[i]))])])


def _tape() -> Tape:
    return (Tape().record(_ew(lambda a, b: power(a * a + f64(1.0), b)), {"out": "h"})
            .record(_ew(lambda a, b: tanh(a) * b), {"x": "h", "out": "loss"}))


CASES: dict[str, tuple[Callable[[], Program | Tape], np.dtype]] = {
    "pow_f64": (lambda: _ew(lambda a, b: power(a * a + f64(0.5), b) + b ** f64(2.0)), np.dtype(np.float64)),
    "pow_f32": (lambda: _ew(lambda a, b: power(a * a + f32(0.5), b), F32), np.dtype(np.float32)),
    "stop_and_steps": (lambda: _ew(lambda a, b: a * stop_gradient(b) + floor(a * f64(3.0)) * b
                                   + sign(a) * rint(b) + a), np.dtype(np.float64)),
    "custom_adjoint": (lambda: _ew(lambda a, b: call("feat_sinmul", a, b) * a), np.dtype(np.float64)),
    "tape": (_tape, np.dtype(np.float64)),
}


def run_case(name: str, backend: str) -> dict[str, list[float]]:
    make, dtype = CASES[name]
    rng = np.random.default_rng(7)
    inputs = {"x": rng.uniform(0.2, 1.5, N).astype(dtype), "y": rng.uniform(-1.2, 1.2, N).astype(dtype)}
    prog = make()
    out = "loss" if isinstance(prog, Tape) else "out"
    if isinstance(prog, Tape):
        inputs |= {"h": np.zeros(N), "loss": np.zeros(N)}
    else:
        inputs["out"] = np.zeros(N, dtype)
    cot = rng.standard_normal(N).astype(dtype)
    g = vjp(prog, inputs, {out: cot}, ["x", "y"], backend=backend)
    return {w: np.asarray(g[w], dtype=np.float64).tolist() for w in ("x", "y")}


def _compare(name: str, got: dict[str, list[float]], want: dict[str, list[float]]) -> None:
    rtol = 2e-5 if CASES[name][1] == np.float32 else 1e-11
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=rtol, err_msg=f"{name}: {k}")


@pytest.fixture(scope="module")
def reference() -> dict[str, dict[str, list[float]]]:
    return {name: run_case(name, "interp") for name in CASES}


@pytest.mark.parametrize("name", list(CASES))
def test_cpu_matches_interpreter(name: str, reference) -> None:
    _compare(name, run_case(name, "cpu"), reference[name])


def test_cudasim_matches_interpreter(reference) -> None:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-m", "tests.test_autodiff_features_backends", "cudasim"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(rows) != len(CASES):
        pytest.fail(f"simulator run failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
    for row in rows:
        _compare(row["case"], row["result"], reference[row["case"]])


if __name__ == "__main__":
    backend = sys.argv[1]
    for case in CASES:
        print(json.dumps({"case": case, "result": run_case(case, backend)}), flush=True)
