"""Runs backend checks in a fresh process (the simulator and PTX compilation need one each, because
NUMBA_ENABLE_CUDASIM is read once, when numba.cuda is imported). Prints one JSON object per check.

    NUMBA_ENABLE_CUDASIM=1 python -m tests.backend_runner sim
    NUMBA_ENABLE_CUDASIM=1 python -m tests.backend_runner interleave
    python -m tests.backend_runner ptx
    python -m tests.backend_runner cuda_c_host  # the NVRTC route's C++ on the host (tests/cuda_c_host.py)
"""

from __future__ import annotations

import json
import sys
import traceback
import types
from collections.abc import Iterator

import numpy as np

from tests import optable
from tests.example_inputs import example_cases
from vyre.ir import Program


def cases() -> Iterator[tuple[str, Program, dict[str, np.ndarray], object, list | None]]:
    for name, (prog, arrays, layout) in optable.all_tables():
        yield name, prog, arrays, None, layout
    for name, prog, arrays, grid in example_cases(small=True):
        yield f"example_{name}", prog, arrays, grid, None


def generated_cases(count: int) -> list[tuple[str, Program, dict[str, np.ndarray], object, None]]:
    """Deterministic generated programs with inputs: barriers, subgroup ops, atomics; exact floats."""
    from hypothesis import HealthCheck, given, settings

    from tests.strategies import program_and_inputs

    out: list[tuple[str, Program, dict[str, np.ndarray], object, None]] = []
    if count <= 0:
        return out

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(program_and_inputs(allow_atomics=True, allow_barriers=True, allow_subgroups=True,
                              exact_floats=True))
    def collect(case: tuple[Program, dict[str, np.ndarray], object]) -> None:
        prog, arrays, grid = case
        out.append((f"generated_{len(out)}", prog, arrays, grid, None))

    collect()
    return out[:count]


def run_sim(count: int) -> None:
    from tests.parity import differences
    from tests.test_cpu_index_family import family_cases
    from vyre.driver.dispatch import compile as vcompile

    for name, prog, arrays, grid, layout in [*cases(), *generated_cases(count), *family_cases(6)]:
        try:
            ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
            got = vcompile(prog, "cudasim")({k: v.copy() for k, v in arrays.items()}, grid=grid)
            if layout is not None:
                n = len(next(iter(arrays.values())))
                problems = optable.compare(name, got, ref, layout, n)
            else:
                problems = differences(got, ref, exact=name.startswith(("generated", "index_family")))
            print(json.dumps({"case": name, "problems": problems}), flush=True)
        except Exception:
            print(json.dumps({"case": name, "problems": [traceback.format_exc()]}), flush=True)


def flat_generated_cases(count: int) -> list[tuple[str, Program, dict[str, np.ndarray], object]]:
    """Deterministic generated flat programs (returns, loops, atomics; exact floats) with inputs."""
    from hypothesis import HealthCheck, given, settings

    from tests.strategies import program_and_inputs
    from vyre.codegen.flat import is_tunable

    out: list[tuple[str, Program, dict[str, np.ndarray], object]] = []

    @settings(max_examples=4 * count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(program_and_inputs(allow_atomics=True, exact_floats=True))
    def collect(case: tuple[Program, dict[str, np.ndarray], object]) -> None:
        prog, arrays, grid = case
        if is_tunable(prog) and len(out) < count:
            out.append((f"flat_generated_{len(out)}", prog, arrays, grid))

    collect()
    return out


def run_interleave(count: int) -> None:
    """Flat kernels on the simulator with launches that interleave (vyre.codegen.interleave):
    several invocations per thread, groups cut short by the end of the range, idle threads."""
    from tests.interleave_cases import interleave_cases
    from tests.parity import differences
    from vyre.driver.dispatch import Launch
    from vyre.driver.dispatch import compile as vcompile

    todo = [(n, p, a, None) for n, p, a in interleave_cases()] + flat_generated_cases(count)
    for name, prog, arrays, grid in todo:
        try:
            ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
            kernel = vcompile(prog, "cudasim")
            problems = [] if "_vy_interleaved" in (kernel.source or "") else ["not interleaved"]
            for la in (Launch(4, 4), Launch(3, 9), Launch(8, 1)):
                kernel.launch = la
                got = kernel({k: v.copy() for k, v in arrays.items()}, grid=grid)
                problems += [f"{la}: {p}" for p in differences(got, ref, exact=True)]
            print(json.dumps({"case": name, "problems": problems}), flush=True)
        except Exception:
            print(json.dumps({"case": name, "problems": [traceback.format_exc()]}), flush=True)


def ptx_for(prog: Program) -> str:
    """sm_90 PTX of ``prog``'s CUDA kernel, compiled through NVVM without a GPU."""
    import numba.cuda.dispatcher as disp
    from numba import cuda

    # Device functions ask the current device for its compute capability; there is none here.
    disp.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))  # type: ignore[attr-defined]
    from vyre.codegen.cuda import emit_cuda

    ns: dict[str, object] = {}
    exec(compile(emit_cuda(prog), "<vyre-kernel>", "exec"), ns)
    ptx, _ = cuda.compile_ptx(ns["vyre_kernel_py"], ns["VYRE_SIGNATURE"], cc=(9, 0))
    return str(ptx)


def sample_programs(count: int) -> list[Program]:
    """``count`` generated programs (atomics, barriers and subgroup ops included), deterministic."""
    from hypothesis import HealthCheck, given, settings

    from tests.strategies import programs

    out: list[Program] = []
    if count <= 0:
        return out

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(programs(allow_atomics=True, allow_barriers=True, allow_subgroups=True))
    def collect(p: Program) -> None:
        out.append(p)

    collect()
    return out[:count]


def run_ptx(extra: list[Program]) -> None:
    from tests.interleave_cases import interleave_cases
    from tests import int_edge_cases
    from tests.warp_add_cases import PTX_EXPECT, ptx_programs

    progs = [(name, prog) for name, prog, *_ in cases()] + [(f"extra_{i}", p) for i, p in enumerate(extra)]
    progs += [(f"interleave_{name}", prog) for name, prog, _ in interleave_cases()]
    progs += ptx_programs()
    progs += [(name, prog) for name, prog, _ in int_edge_cases.cases()]
    expect = {**PTX_EXPECT, **int_edge_cases.PTX_EXPECT}
    from tests.test_cpu_index_family import family_cases

    progs += [(name, prog) for name, prog, *_ in family_cases(4)]
    for name, prog in progs:
        try:
            ptx = ptx_for(prog)
            problems = [] if ".target sm_90" in ptx and ".entry" in ptx else ["no sm_90 entry in PTX"]
            must, must_not = expect.get(name, ((), ()))
            problems += [f"PTX lacks {s!r}" for s in must if s not in ptx]
            problems += [f"PTX has {s!r}" for s in must_not if s in ptx]
            print(json.dumps({"case": name, "problems": problems}), flush=True)
        except Exception:
            print(json.dumps({"case": name, "problems": [traceback.format_exc()]}), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "sim":
        run_sim(int(sys.argv[2]) if len(sys.argv) > 2 else 15)
    elif mode == "interleave":
        run_interleave(int(sys.argv[2]) if len(sys.argv) > 2 else 40)
    elif mode == "ptx":
        run_ptx(sample_programs(int(sys.argv[2]) if len(sys.argv) > 2 else 20))
    elif mode == "cuda_c_host":
        from tests.cuda_c_host import host_parity

        host_parity(int(sys.argv[2]) if len(sys.argv) > 2 else 40)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
