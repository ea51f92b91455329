"""Running a program: binding, launch geometry, invocation scheduling.

Invocations run one after another in a fixed order: workgroups in linear order (x fastest), and
inside a workgroup by linear local index ``lx + ly*wx + lz*wx*wy``. So atomics under contention
and racing stores give the same result on every run.

Programs without sync points take the fast path: each invocation is one call of the compiled
entry closure. Programs with Barriers or subgroup ops run each workgroup in lockstep: every
invocation is a generator that yields at each sync point; once every live invocation is blocked,
subgroups whose live lanes all wait at the same subgroup op are answered, and when every live
invocation waits at a Barrier they are all released. Invocations that returned drop out (they
contribute nothing to later subgroup ops: no ballot bit, no reduce term, and a shuffle from them
reads 0). Lanes that can never meet (a Barrier inside a divergent If) are reported as an error.

Buffers are copied into Python lists for the run (indexing lists is several times faster than
indexing arrays) and written back into the caller's arrays at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..driver.bind import bind_host_arrays
from ..driver.geometry import default_grid
from ..errors import InterpError
from ..ir.program import Program
from ..ir.types import DataType
from .compile import ID_SLOTS, SUBGROUP_SIZE, Memory, Regs, Steps
from .sync import BARRIER, SUBGROUP, SyncCompiler
from .scalar import zero_of


@dataclass
class InterpResult:
    """What :func:`run` returns.

    ``buffers``: every storage (non-workgroup) buffer after the run, by name, as the flat arrays
    that were bound (arrays passed for written buffers were written in place). ``oob_loads`` /
    ``oob_stores``: out-of-bounds accesses absorbed (atomics count as stores). ``steps``:
    statements plus expression evaluations executed."""

    buffers: dict[str, np.ndarray]
    oob_loads: int
    oob_stores: int
    steps: int = 0


def run(
    program: Program,
    inputs: Mapping[str, np.ndarray],
    grid: int | Sequence[int] | None = None,
    max_steps: int = 50_000_000,
) -> InterpResult:
    """Execute ``program`` on ``inputs`` exactly as docs/semantics.md specifies.

    ``grid``: None covers the largest output (:func:`vyre.driver.geometry.default_grid`), an int
    is ``gx``, a sequence is ``(gx, gy, gz)``. Raises :class:`vyre.errors.ValidationError` for an
    invalid program and :class:`vyre.errors.InterpError` for bad inputs or when more than
    ``max_steps`` statements and expression evaluations run."""
    _validate(program)
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise InterpError(f"max_steps must be a positive int, got {max_steps!r}. Fix: pass e.g. 10_000_000")
    arrays = bind_host_arrays(program, inputs, InterpError)  # also rejects overlapping written buffers
    gx, gy, gz = _grid(program, grid, arrays)

    elem = {b.name: b.element for b in program.buffers}
    wg_decls = [b for b in program.buffers if b.is_workgroup]
    mem = Memory(
        storage={name: _to_list(arr, elem[name]) for name, arr in arrays.items()},
        workgroup={b.name: k for k, b in enumerate(wg_decls)},
        wg=[[zero_of(b.element)] * b.count for b in wg_decls],
    )
    steps = Steps(max_steps)
    with np.errstate(all="ignore"):
        compiler = SyncCompiler(program.functions, elem, mem, steps)
        is_sync, body = compiler.program(program.entry)
        _execute(program, (gx, gy, gz), is_sync, body, compiler.nslots, mem, wg_decls)

    for b in program.buffers:
        if not b.is_workgroup and b.access.writable:
            arrays[b.name][...] = np.asarray(mem.storage[b.name], dtype=b.element.np_dtype)
    return InterpResult(arrays, mem.oob[0], mem.oob[1], steps.n)


def _execute(program: Program, grid: tuple[int, int, int], is_sync: bool, body: Callable[[Regs], Any],
             nslots: int, mem: Memory, wg_decls: list[Any]) -> None:
    sx, sy, sz = program.workgroup_size
    gx, gy, gz = grid
    locals_ = [(lx, ly, lz, (lx + ly * sx + lz * sx * sy) % SUBGROUP_SIZE)
               for lz in range(sz) for ly in range(sy) for lx in range(sx)]
    pad = [None] * (nslots - ID_SLOTS)
    for wz in range(gz):
        for wy in range(gy):
            for wx in range(gx):
                for k, b in enumerate(wg_decls):  # fresh workgroup memory (zeros) per workgroup
                    mem.wg[k] = [zero_of(b.element)] * b.count
                bx, by, bz = wx * sx, wy * sy, wz * sz
                regs = ([bx + lx, by + ly, bz + lz, lx, ly, lz, wx, wy, wz, lane, *pad]
                        for lx, ly, lz, lane in locals_)
                if is_sync:
                    _run_lockstep(body, list(regs), (wx, wy, wz))
                else:
                    for r in regs:
                        body(r)


def _run_lockstep(body: Callable[[Regs], Any], regs: list[Regs], wg: tuple[int, int, int]) -> None:
    """Run one workgroup's invocations (generators) in lockstep; see the module docs."""
    n = len(regs)
    gens = [body(r) for r in regs]
    alive = [True] * n
    waiting: list[Any] = [None] * n  # the request each live invocation is blocked on
    send: list[Any] = [None] * n
    ready = list(range(n))
    while True:
        for i in ready:
            try:
                waiting[i] = gens[i].send(send[i])
            except StopIteration:
                alive[i], waiting[i] = False, None
        ready = []
        for base in range(0, n, SUBGROUP_SIZE):
            lanes = [i for i in range(base, min(base + SUBGROUP_SIZE, n)) if alive[i]]
            if not lanes or any(waiting[i][0] != SUBGROUP for i in lanes):
                continue
            sites = {waiting[i][1] for i in lanes}
            if len(sites) != 1:
                raise _diverged(wg, "lanes of one subgroup wait at different subgroup ops")
            resolver = waiting[lanes[0]][2]
            results = resolver([(i - base, waiting[i][3]) for i in lanes])
            for i, v in zip(lanes, results, strict=True):
                send[i] = v
            ready += lanes
        if ready:
            continue
        live = [i for i in range(n) if alive[i]]
        if not live:
            return
        if any(waiting[i][0] != BARRIER for i in live):
            raise _diverged(wg, "some invocations wait at a Barrier while others wait at a subgroup op")
        if len({waiting[i][1] for i in live}) != 1:
            raise _diverged(wg, "invocations wait at different Barriers")
        for i in live:
            send[i] = None
        ready = live


def _diverged(wg: tuple[int, int, int], what: str) -> InterpError:
    return InterpError(
        f"in workgroup {wg}, {what}: Barriers and subgroup ops must be reached by every live "
        "invocation of the workgroup at the same point. Fix: keep them out of If and out of loops "
        "with non-uniform bounds, and Return only at uniform points (program.validate() reports this)"
    )


def _validate(program: Program) -> None:
    if not isinstance(program, Program):
        raise InterpError(f"run() needs a vyre.ir.Program, got {type(program).__name__}. "
                          "Fix: build one with Program.wrapped(...)")
    program.validate()


def _grid(program: Program, grid: int | Sequence[int] | None,
          arrays: Mapping[str, np.ndarray]) -> tuple[int, int, int]:
    if grid is None:
        return default_grid(program, {name: int(a.size) for name, a in arrays.items()}, InterpError)
    dims: list[object] | None = None
    if isinstance(grid, (int, np.integer)):
        dims = [grid]
    elif isinstance(grid, (tuple, list)):
        dims = list(grid)
    ints = [int(d) for d in dims or () if isinstance(d, (int, np.integer)) and not isinstance(d, bool)]
    if dims is None or len(ints) != len(dims) or not 1 <= len(ints) <= 3 or min(ints) < 1:
        raise InterpError(f"grid must be None, a positive int or 1-3 positive ints, got {grid!r}. "
                          "Fix: pass e.g. grid=4 or grid=(4, 2, 1)")
    gx, gy, gz = [*ints, 1, 1][:3]
    return gx, gy, gz


def _to_list(arr: np.ndarray, t: DataType) -> list[Any]:
    # f32 values live as numpy float32 scalars; the rest as Python bool/int/float.
    return list(arr) if t is DataType.F32 else arr.tolist()
