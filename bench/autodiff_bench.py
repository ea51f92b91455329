"""Reverse-mode costs: loops, build time, a differentiated block reduction.

* ``loop``: backward / forward time of a loop-carried recurrence per invocation
  (``acc = sin(acc) * x[(i + j) % n] + 0.25``, ``G`` invocations) at 10, 100, 1000, 10 000
  trips. The forward is the program itself; the backward is ``grad``'s program (forward replay
  storing the tape, then the reverse sweep), both dispatched with pre-built arguments.
* ``build``: ``grad()`` wall time for straight-line programs of 100, 1000, 2000 statements.
* ``reduce``: the ``block_sum`` example (workgroup tree reduction + atomic add) forward vs its
  backward, when autodiff supports it.

    python bench/autodiff_bench.py [--backend cpu|cuda] [--sections loop,build,reduce] [--g 256]

Prints a markdown table with machine, date and commit.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vyre.autodiff import grad  # noqa: E402
from vyre.autodiff.checkpoint import tape_arrays  # noqa: E402
from vyre.driver.dispatch import dispatch  # noqa: E402
from vyre.ir import (  # noqa: E402
    F32, U32, Program, assign, buflen, f32, gid, if_, let, load, loop, output, read, sin, store, var,
)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine(backend: str) -> str:
    if backend == "cuda":
        try:
            from numba import cuda
            return cuda.get_current_device().name.decode() if isinstance(
                cuda.get_current_device().name, bytes) else str(cuda.get_current_device().name)
        except Exception:
            return "cuda"
    return f"{platform.processor() or platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores"


class Runner:
    """Dispatch with arguments built once (device arrays on CUDA), timing with a sync."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.cuda = backend == "cuda"
        if self.cuda:
            from numba import cuda
            self._cuda = cuda

    def args(self, arrays: dict[str, np.ndarray]) -> dict[str, object]:
        if not self.cuda:
            return arrays
        return {k: self._cuda.to_device(v) for k, v in arrays.items()}

    def time(self, prog: Program, args: dict[str, object], grid: tuple[int, int, int], reps: int = 7) -> float:
        def once() -> None:
            dispatch(prog, args, backend=self.backend, grid=grid)
            if self.cuda:
                self._cuda.synchronize()

        once()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            once()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)


def recurrence() -> Program:
    x, nb, out = read("x", 0, F32), read("n", 1, U32), output("out", 2, F32)
    i, j = gid(), var("j")
    return Program.wrapped([x, nb, out], 64, [
        if_(i.lt(buflen(out)), [
            let("acc", x[i]),
            loop("j", 0, nb[0], [assign("acc", sin(var("acc")) * x[(i + j) % buflen(x)] + f32(0.25))]),
            store(out, i, var("acc")),
        ])])


def bench_loop(r: Runner, g: int) -> list[str]:
    prog = recurrence()
    back = grad(prog, ["out"], ["x"])
    rng = np.random.default_rng(0)
    rows = ["| trips | forward (ms) | backward (ms) | backward / forward |", "|---|---|---|---|"]
    grid = ((g + 63) // 64, 1, 1)
    g = grid[0] * 64
    for trips in (10, 100, 1000, 10000):
        x = rng.uniform(-1, 1, g).astype(np.float32)
        n = np.array([trips], np.uint32)
        fa = r.args({"x": x, "n": n, "out": np.zeros(g, np.float32)})
        ba = {"x": x, "n": n, "out": np.zeros(g, np.float32), "grad_out": np.ones(g, np.float32),
              "grad_x": np.zeros(g, np.float32)}
        ba.update(tape_arrays(prog, back, grid[0] * 64))
        reps = 3 if trips >= 10000 else 7
        tf = r.time(prog, fa, grid, reps)
        tb = r.time(back, r.args(ba), grid, reps)
        rows.append(f"| {trips} | {tf * 1e3:.3f} | {tb * 1e3:.3f} | {tb / tf:.2f} |")
    return rows


def straight(n: int) -> Program:
    x, out = read("x", 0, F32), output("out", 1, F32)
    body = [let("v0", load(x, gid()))]
    for k in range(1, n):
        body.append(let(f"v{k}", sin(var(f"v{k - 1}")) * f32(0.9) + var(f"v{max(0, k - 3)}") * f32(0.1)))
    body.append(store(out, gid(), var(f"v{n - 1}")))
    return Program.wrapped([x, out], 64, body)


def bench_build() -> list[str]:
    """Wall time and this process's CPU time (the second is what a shared machine does not inflate)."""
    rows = ["| statements | grad() wall (s) | grad() CPU time (s) |", "|---|---|---|"]
    for n in (100, 1000, 2000):
        p = straight(n)
        ts, cs = [], []
        for _ in range(3):
            t, c = time.perf_counter(), time.process_time()
            grad(p, ["out"], ["x"])
            ts.append(time.perf_counter() - t)
            cs.append(time.process_time() - c)
        rows.append(f"| {n} | {min(ts):.3f} | {min(cs):.3f} |")
    return rows


def bench_reduce(r: Runner, g: int) -> list[str]:
    from vyre.examples import block_sum

    prog = block_sum()
    try:
        back = grad(prog, ["out"], ["x"])
    except Exception as e:
        return [f"block_sum backward not available: {e}"]
    n = max(256, (g + 255) // 256 * 256)
    x = np.random.default_rng(1).uniform(-1, 1, n).astype(np.float32)
    grid = (n // 256, 1, 1)
    tf = r.time(prog, r.args({"x": x, "out": np.zeros(1, np.float32)}), grid)
    ba = {"x": x, "out": np.zeros(1, np.float32), "grad_out": np.ones(1, np.float32),
          "grad_x": np.zeros(n, np.float32)}
    ba.update(tape_arrays(prog, back, n))
    tb = r.time(back, r.args(ba), grid)
    return ["| kernel | elements | forward (ms) | backward (ms) | backward / forward |", "|---|---|---|---|---|",
            f"| block_sum | {n} | {tf * 1e3:.3f} | {tb * 1e3:.3f} | {tb / tf:.2f} |"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--sections", default="loop,build,reduce")
    ap.add_argument("--g", type=int, default=1024, help="invocations of the loop benchmark")
    ap.add_argument("--reduce-n", type=int, default=1 << 20, help="elements of the block reduction")
    a = ap.parse_args()
    r = Runner(a.backend)
    print(f"autodiff bench: backend {a.backend}, {machine(a.backend)}, "
          f"{time.strftime('%Y-%m-%d')}, commit {commit()}\n")
    for sec in a.sections.split(","):
        if sec == "loop":
            print(f"loop-carried recurrence, {a.g} invocations")
            print("\n".join(bench_loop(r, a.g)) + "\n")
        elif sec == "build":
            print("\n".join(bench_build()) + "\n")
        elif sec == "reduce":
            print("\n".join(bench_reduce(r, a.reduce_n)) + "\n")
        else:
            raise SystemExit(f"unknown section {sec!r}")


if __name__ == "__main__":
    main()
