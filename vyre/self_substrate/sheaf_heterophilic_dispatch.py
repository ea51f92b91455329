"""Sheaf diffusion over the dispatch graph, to flag regions that should not be fused.

Two layers, mirroring the seed and then fixing it:

* The seed's contract: :func:`diffuse_dispatch_stalks_fixed_via` dispatches the elementwise 16.16
  decay :func:`vyre.primitives.sheaf_diffusion_step`; :func:`reference_diffuse_dispatch_stalks`,
  :func:`diffuse_to_equilibrium` and :func:`flag_fusion_incompatible` are its float companions.
* Real sheaf diffusion: :func:`sheaf_diffuse_via` runs :func:`vyre.primitives.sheaf_laplacian_step`
  (neighbours coupled through restriction maps) for a number of steps, and
  :func:`sheaf_diffuse_to_equilibrium_via` iterates it until the stalks stop moving.
  ``vyre.self_substrate.analyze`` uses these on a pipeline's dispatch graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir import DataType
from ..primitives import (
    PrimitiveError, SheafGraph, sheaf_diffusion_step, sheaf_diffusion_step_cpu, sheaf_laplacian_step,
)
from .dispatch_buffers import (
    ceil_div_u32, checked_product_count, decode_u32_output_exact, ensure_input_slots,
    write_u32_slice_le_bytes, write_zero_bytes,
)
from ..primitives import Runner
from .dispatcher import OptimizerDispatcher, OptimizerDispatchError, run_arrays
from .observability import SHEAF_HETEROPHILIC_DISPATCH_CALLS, bump

_VIA = "diffuse_dispatch_stalks_fixed_via"


@dataclass
class SheafDispatchScratch:
    """Caller-owned dispatch scratch: input byte buffers reused across calls."""

    inputs: list[bytearray] = field(default_factory=list)
    damping: list[int] = field(default_factory=list)


def reference_diffuse_dispatch_stalks(stalks: Sequence[float], restriction_diag: Sequence[float],
                                      damping: float) -> list[float]:
    """Float reference of one seed step: ``s - damping * r * s`` per cell."""
    out: list[float] = []
    reference_diffuse_dispatch_stalks_into(stalks, restriction_diag, damping, out)
    return out


def reference_diffuse_dispatch_stalks_into(stalks: Sequence[float], restriction_diag: Sequence[float],
                                           damping: float, out: list[float]) -> None:
    bump(SHEAF_HETEROPHILIC_DISPATCH_CALLS)
    out[:] = sheaf_diffusion_step_cpu(stalks, restriction_diag, damping)


def diffuse_dispatch_stalks_fixed_via(dispatcher: OptimizerDispatcher, stalks_fixed: Sequence[int],
                                      restriction_diag_fixed: Sequence[int], damping_fixed: int,
                                      n_nodes: int, d: int) -> list[int]:
    """One seed step on 16.16 u32 buffers of ``n_nodes * d`` cells, by dispatching
    :func:`sheaf_diffusion_step`. Raises :class:`OptimizerDispatchError`."""
    out: list[int] = []
    diffuse_dispatch_stalks_fixed_via_into(dispatcher, stalks_fixed, restriction_diag_fixed,
                                           damping_fixed, n_nodes, d, out)
    return out


def diffuse_dispatch_stalks_fixed_via_into(dispatcher: OptimizerDispatcher, stalks_fixed: Sequence[int],
                                           restriction_diag_fixed: Sequence[int], damping_fixed: int,
                                           n_nodes: int, d: int, out: list[int]) -> None:
    scratch = SheafDispatchScratch()
    diffuse_dispatch_stalks_fixed_via_with_scratch_into(
        dispatcher, stalks_fixed, restriction_diag_fixed, damping_fixed, n_nodes, d, scratch, out)


def diffuse_dispatch_stalks_fixed_via_with_scratch_into(
    dispatcher: OptimizerDispatcher,
    stalks_fixed: Sequence[int],
    restriction_diag_fixed: Sequence[int],
    damping_fixed: int,
    n_nodes: int,
    d: int,
    scratch: SheafDispatchScratch,
    out: list[int],
) -> None:
    """As :func:`diffuse_dispatch_stalks_fixed_via`, reusing ``scratch``'s buffers."""
    bump(SHEAF_HETEROPHILIC_DISPATCH_CALLS)
    cells = checked_product_count(n_nodes, d, "n_nodes", "d", _VIA)
    if len(stalks_fixed) != cells:
        raise OptimizerDispatchError.bad_inputs(
            f"{_VIA} requires len(stalks_fixed) == n_nodes*d, got len={len(stalks_fixed)}, "
            f"n_nodes={n_nodes}, d={d}, cells={cells}. Fix: pass one 16.16 stalk value per cell"
        )
    if len(restriction_diag_fixed) != cells:
        raise OptimizerDispatchError.bad_inputs(
            f"{_VIA} requires len(restriction_diag_fixed) == n_nodes*d, got "
            f"len={len(restriction_diag_fixed)}, n_nodes={n_nodes}, d={d}, cells={cells}. "
            "Fix: pass one 16.16 restriction coefficient per cell"
        )
    try:
        program = sheaf_diffusion_step("stalks", "restriction_diag", "damping", "stalks_next", n_nodes, d)
    except PrimitiveError as exc:
        raise OptimizerDispatchError.bad_inputs(f"{_VIA}: {exc}") from exc
    scratch.damping[:] = [damping_fixed]
    ensure_input_slots(scratch.inputs, 4)
    write_u32_slice_le_bytes(scratch.inputs[0], stalks_fixed, _VIA)
    write_u32_slice_le_bytes(scratch.inputs[1], restriction_diag_fixed, _VIA)
    write_u32_slice_le_bytes(scratch.inputs[2], scratch.damping, _VIA)
    write_zero_bytes(scratch.inputs[3], cells * 4)
    outputs = dispatcher.dispatch(program, scratch.inputs[:4], (ceil_div_u32(cells, 256), 1, 1))
    if not outputs:
        raise OptimizerDispatchError.backend_error(
            f"{_VIA} expected at least one output buffer, got {len(outputs)}. "
            "Fix: the dispatcher must return the program's output buffers in declaration order"
        )
    decode_u32_output_exact(outputs[0], cells, _VIA, out)


def diffuse_to_equilibrium(initial_stalks: Sequence[float], restriction_diag: Sequence[float],
                           damping: float, tol: float, max_iters: int) -> tuple[list[float], int]:
    """Iterate the seed step until no cell moves by ``tol`` or more, at most ``max_iters`` times.
    Returns ``(final_stalks, iterations_run)``."""
    out: list[float] = []
    scratch: list[float] = []
    iters = diffuse_to_equilibrium_into(initial_stalks, restriction_diag, damping, tol, max_iters,
                                        out, scratch)
    return out, iters


def diffuse_to_equilibrium_into(initial_stalks: Sequence[float], restriction_diag: Sequence[float],
                                damping: float, tol: float, max_iters: int, out: list[float],
                                scratch: list[float]) -> int:
    out[:] = list(initial_stalks)
    for it in range(max_iters):
        reference_diffuse_dispatch_stalks_into(out, restriction_diag, damping, scratch)
        max_change = max((abs(a - b) for a, b in zip(scratch, out, strict=True)), default=0.0)
        out[:], scratch[:] = scratch, out[:]
        if max_change < tol:
            return it + 1
    return max_iters


def flag_fusion_incompatible(initial_stalks: Sequence[float], diffused_stalks: Sequence[float],
                             divergence_threshold: float) -> list[int]:
    """Per region: 1 where ``|initial - diffused| > divergence_threshold`` (its stalk moved, i.e.
    it disagreed with its neighbourhood), else 0."""
    out: list[int] = []
    flag_fusion_incompatible_into(initial_stalks, diffused_stalks, divergence_threshold, out)
    return out


def flag_fusion_incompatible_into(initial_stalks: Sequence[float], diffused_stalks: Sequence[float],
                                  divergence_threshold: float, out: list[int]) -> None:
    if len(initial_stalks) != len(diffused_stalks):
        raise OptimizerDispatchError.bad_inputs(
            f"flag_fusion_incompatible got {len(initial_stalks)} initial and {len(diffused_stalks)} "
            "diffused stalks. Fix: pass stalks of the same length"
        )
    out[:] = [1 if abs(i - d) > divergence_threshold else 0
              for i, d in zip(initial_stalks, diffused_stalks, strict=True)]


# --------------------------------------------------------------------------------------------
# Real sheaf diffusion through the dispatcher.

def sheaf_diffuse_via(dispatcher: Runner | OptimizerDispatcher | None, graph: SheafGraph,
                      x0: np.ndarray | Sequence[float],
                      alpha: float, steps: int, dtype: DataType = DataType.F32) -> np.ndarray:
    """``steps`` applications of ``x <- x - alpha L_F x`` by dispatching
    :func:`sheaf_laplacian_step`; returns the stalks (float64, flat ``n_nodes*d``)."""
    bump(SHEAF_HETEROPHILIC_DISPATCH_CALLS)
    x = np.asarray(x0, dtype=np.float64).reshape(-1)
    if x.size != graph.n_cells:
        raise OptimizerDispatchError.bad_inputs(
            f"sheaf_diffuse_via got {x.size} stalk values for n_nodes*d={graph.n_cells}. "
            "Fix: pass one value per (node, component)"
        )
    if steps < 0:
        raise OptimizerDispatchError.bad_inputs(f"sheaf_diffuse_via got steps={steps}. Fix: pass steps >= 0")
    program = sheaf_laplacian_step(graph.n_nodes, graph.d, dtype=dtype)
    grid = (ceil_div_u32(graph.n_cells, 256), 1, 1)
    base = graph.dispatch_inputs(x, alpha, dtype)
    cur = base["x"]
    for _ in range(steps):
        arrays = [cur, base["row_ptr"], base["col"], base["r_self"], base["r_nbr"], base["alpha"],
                  np.zeros(graph.n_cells, dtype=dtype.np_dtype)]
        (cur,) = run_arrays(dispatcher, program, arrays, grid, "sheaf_diffuse_via")
    return cur.astype(np.float64)


def sheaf_diffuse_to_equilibrium_via(dispatcher: Runner | OptimizerDispatcher | None, graph: SheafGraph,
                                     x0: np.ndarray | Sequence[float], alpha: float, tol: float,
                                     max_iters: int,
                                     dtype: DataType = DataType.F32) -> tuple[np.ndarray, int]:
    """Iterate :func:`sheaf_diffuse_via` one step at a time until no cell moves by ``tol`` or more;
    returns ``(stalks, iterations_run)``."""
    x = np.asarray(x0, dtype=np.float64).reshape(-1)
    for it in range(max_iters):
        nxt = sheaf_diffuse_via(dispatcher, graph, x, alpha, 1, dtype)
        moved = float(np.max(np.abs(nxt - x), initial=0.0))
        x = nxt
        if moved < tol:
            return x, it + 1
    return x, max_iters
