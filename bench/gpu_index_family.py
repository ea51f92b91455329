"""The CPU index family (tests/test_cpu_index_family.py) on a real GPU: loads, stores and atomics
whose index is gid or a loop variable through ``% / >> << & | + - *`` with constants and lengths,
on the CUDA backend against the interpreter. Buffers are CuPy views into larger arrays whose tails
hold canaries, so a read past an end shows as a wrong value and a write past it as a changed canary.

    python bench/gpu_index_family.py [count | cases.pkl]

A ``.pkl`` argument is a pickled list of cases written by ``--write cases.pkl count`` on a machine
with Hypothesis (the GPU machine may not have it).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pickle

import numpy as np

from vyre.driver.dispatch import Launch
from vyre.driver.dispatch import compile as vcompile

CANARY = 0xDEAD  # as tests/test_cpu_index_family.py


def main() -> None:
    if sys.argv[1:2] == ["--write"]:
        from tests.test_cpu_index_family import family_cases

        Path(sys.argv[2]).write_bytes(pickle.dumps(family_cases(int(sys.argv[3]))))
        return
    import cupy as cp

    arg = sys.argv[1] if len(sys.argv) > 1 else "60"
    if arg.endswith(".pkl"):
        cases = pickle.loads(Path(arg).read_bytes())
    else:
        from tests.test_cpu_index_family import family_cases

        cases = family_cases(int(arg))
    bad = 0
    for name, prog, arrays, grid, _ in cases:
        want = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
        kernel = vcompile(prog, "cuda")
        launches = [None, Launch(256, 4), Launch(32, 3)] if kernel.flat else [None]
        for la in launches:
            kernel.launch = la
            wholes = {k: cp.asarray(np.concatenate([v, np.full(64, CANARY, v.dtype)])) for k, v in arrays.items()}
            views = {k: wholes[k][: len(v)] for k, v in arrays.items()}
            kernel(views, grid=grid)
            problems = []
            for k, v in arrays.items():
                w = cp.asnumpy(wholes[k])
                if k in want and not np.array_equal(w[: len(v)], want[k]):
                    problems.append(f"{k}: {int((w[: len(v)] != want[k]).sum())} wrong")
                if (w[len(v):] != CANARY).any():
                    problems.append(f"{k}: wrote past the end")
            if problems:
                bad += 1
                print(name, la, problems, "\n", prog, flush=True)
    print(f"{len(cases)} programs, {bad} wrong runs")


if __name__ == "__main__":
    main()
