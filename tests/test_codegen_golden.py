"""Golden snapshots of generated kernel source (CPU and CUDA emitters).

One snapshot per representative kernel and target under ``tests/golden/codegen/``: flat kernels
(saxpy, fused_chain, matvec with its loop), the CPU lockstep form and CUDA barriers / shared memory
(block_sum), subgroup operations on both CUDA forms (warp intrinsics and the simulator's emulation)
and the CPU lockstep form (subgroup_sum), atomics (histogram), the CPU independent form
(workgroup_ids) and with a workgroup buffer (vyre.ops's row sum: allocated once per call or
chunk, zeroed per workgroup); the NVRTC route's C++ for a few of them (``*_cuda.cu``). The shared scalar
helpers (``PRELUDE``, ``CPU_PRELUDE``, ``C_PRELUDE``) have one snapshot of their
own and stand as a one-line marker in the kernel snapshots.

Set VYRE_UPDATE_GOLDEN=1 to rewrite the files; review the diff before committing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vyre.codegen.cpu import CPU_PRELUDE, emit_cpu
from vyre.codegen.cuda import emit_cuda
from vyre.codegen.prelude import PRELUDE
from vyre.examples import EXAMPLES

GOLDEN = Path(__file__).resolve().parent / "golden" / "codegen"
PRELUDE_MARK = "# <vyre.codegen.prelude.PRELUDE>\n"
CPU_PRELUDE_MARK = "# <vyre.codegen.cpu.CPU_PRELUDE>\n"


def _program(name: str) -> Any:
    if name == "row_sum":  # vyre.ops's CPU row program: a lane array in workgroup memory
        from vyre.ir import F32
        from vyre.ops.rowwise import row_program

        return row_program("sum", F32, gpu=False, wg=1, resident=0, lanes=True)
    return EXAMPLES[name]()


def _cpu(name: str) -> str:
    return emit_cpu(_program(name))


def _cuda(name: str) -> str:
    return emit_cuda(EXAMPLES[name]())


def _sim(name: str) -> str:
    return emit_cuda(EXAMPLES[name](), simulator=True)


SNAPSHOTS: dict[str, tuple[str, Callable[[str], str]]] = {
    "saxpy_cpu": ("saxpy", _cpu),
    "saxpy_cuda": ("saxpy", _cuda),
    "fused_chain_cpu": ("fused_chain", _cpu),
    "fused_chain_cuda": ("fused_chain", _cuda),
    "matvec_cpu": ("matvec", _cpu),
    "matvec_cuda": ("matvec", _cuda),
    "block_sum_cpu": ("block_sum", _cpu),
    "block_sum_cuda": ("block_sum", _cuda),
    "subgroup_sum_cpu": ("subgroup_sum", _cpu),
    "subgroup_sum_cuda": ("subgroup_sum", _cuda),
    "subgroup_sum_cudasim": ("subgroup_sum", _sim),
    "histogram_cpu": ("histogram", _cpu),
    "histogram_cuda": ("histogram", _cuda),
    "workgroup_ids_cpu": ("workgroup_ids", _cpu),
    "row_sum_cpu": ("row_sum", _cpu),
}


def _compare(path: Path, text: str) -> None:
    if os.environ.get("VYRE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} is missing. Fix: run with VYRE_UPDATE_GOLDEN=1 and review the new file"
    assert path.read_text() == text, f"generated source differs from {path.name}; rerun with VYRE_UPDATE_GOLDEN=1"


def _marked(src: str) -> str:
    """``src`` with each shared prelude (which must occur exactly once) replaced by its marker."""
    assert src.count(PRELUDE) == 1
    src = src.replace(PRELUDE, PRELUDE_MARK)
    if "target cpu" in src.splitlines()[0]:
        assert src.count(CPU_PRELUDE) == 1
        src = src.replace(CPU_PRELUDE, CPU_PRELUDE_MARK)
    return src


@pytest.mark.parametrize("snap", sorted(SNAPSHOTS))
def test_generated_source_matches_snapshot(snap: str) -> None:
    example, emit = SNAPSHOTS[snap]
    _compare(GOLDEN / f"{snap}.py", _marked(emit(example)))


def test_preludes_match_snapshot() -> None:
    _compare(GOLDEN / "prelude.py", f"{PRELUDE_MARK}{PRELUDE}\n{CPU_PRELUDE_MARK}{CPU_PRELUDE}")


def test_emission_is_deterministic_and_cache_flag_only_touches_decorators() -> None:
    """Snapshots are only meaningful if emission is a pure function of the program; the disk-cache
    flag changes the ``cache=`` arguments and nothing else."""
    for name in ("block_sum", "saxpy"):
        p = EXAMPLES[name]()
        assert emit_cpu(p) == emit_cpu(EXAMPLES[name]())
        assert emit_cpu(p, cache=True).replace("cache=True", "cache=False") == emit_cpu(p)
        assert emit_cuda(p, cache=True).replace("cache=True", "cache=False") == emit_cuda(p)


#: the NVRTC route's C++ (vyre/codegen/cuda_c.py): a flat kernel, workgroup memory and barriers,
#: subgroup reductions with a warp-aggregated add, and plain atomics
C_SNAPSHOTS = ("saxpy", "block_sum", "subgroup_sum", "histogram")
C_PRELUDE_MARK = "/* <vyre.codegen.c_ops.C_PRELUDE> */\n"


@pytest.mark.parametrize("example", C_SNAPSHOTS)
def test_generated_cuda_c_matches_snapshot(example: str) -> None:
    from vyre.codegen.c_ops import C_PRELUDE
    from vyre.codegen.cuda_c import emit_cuda_c

    src = emit_cuda_c(EXAMPLES[example]()).source
    assert src.count(C_PRELUDE) == 1
    _compare(GOLDEN / f"{example}_cuda.cu", src.replace(C_PRELUDE, C_PRELUDE_MARK))


def test_c_prelude_matches_snapshot() -> None:
    from vyre.codegen.c_ops import C_PRELUDE, C_WARP_ADD

    _compare(GOLDEN / "prelude.cu", f"{C_PRELUDE_MARK}{C_PRELUDE}\n/* C_WARP_ADD */\n{C_WARP_ADD}")


def test_snapshots_are_valid_python() -> None:
    """Every snapshot (prelude markers are comments) parses, so a snapshot is a readable module."""
    import ast

    for path in sorted(GOLDEN.glob("*.py")):
        ast.parse(path.read_text(), filename=str(path))
