"""vyre using its own primitives on its own scheduling problems.

* Every program runs through one runner callable over arrays (:mod:`vyre.primitives.runner`;
  :func:`as_runner` also adapts the seed's byte-level dispatchers).
* :mod:`.dispatcher`: the byte-level :class:`OptimizerDispatcher` contract (compatibility), its
  :class:`OptimizerDispatchError` (kinds BadInputs / BackendError / Rejected) and
  :class:`DriverDispatcher` over ``vyre.driver.dispatch.dispatch``.
* :mod:`.natural_gradient_autotuner`: the autotuner's Fisher-preconditioned step.
* :mod:`.sheaf_heterophilic_dispatch`: sheaf diffusion over dispatch graphs.
* :mod:`.analyze`: :func:`analyze_pipeline`, the engine of ``vyre analyze``.
* :mod:`.observability`: thread-safe call counters.
"""

from .analyze import EdgeReport, NodeReport, PipelineReport, analyze_pipeline, dispatch_graph
from .dispatch_buffers import (
    ceil_div_u32, checked_product_count, checked_square_cells, decode_u32_le, decode_u32_output_exact,
    encode_u32_le, ensure_input_slots, read_u32s, u32_slice_to_le_bytes, write_u32_slice_le_bytes,
    write_zero_bytes,
)
from .dispatcher import (
    DispatchErrorKind, DriverDispatcher, OptimizerDispatcher, OptimizerDispatchError, as_runner,
    dispatch_arrays, output_decls, run_arrays, storage_decls,
)
from .features import FEATURE_NAMES, FEATURES, StaticCounts, static_counts
from .natural_gradient_autotuner import (
    NaturalGradientScratch, autotune_step, autotune_step_into, identity_fisher_block,
    identity_fisher_block_into, identity_fisher_block_q16, natural_gradient_direction,
    precondition_autotune_gradient_fixed_via, precondition_autotune_gradient_fixed_via_into, precondition_q16_via,
    precondition_autotune_gradient_fixed_via_with_scratch_into, reference_precondition_autotune_gradient,
    reference_precondition_autotune_gradient_into,
)
from .observability import (
    NATURAL_GRADIENT_AUTOTUNER_CALLS, PIPELINE_ANALYSIS_CALLS, SHEAF_HETEROPHILIC_DISPATCH_CALLS, bump,
    reset_counters, snapshot_counters,
)
from .sheaf_heterophilic_dispatch import (
    SheafDispatchScratch, diffuse_dispatch_stalks_fixed_via, diffuse_dispatch_stalks_fixed_via_into,
    diffuse_dispatch_stalks_fixed_via_with_scratch_into, diffuse_to_equilibrium,
    diffuse_to_equilibrium_into, flag_fusion_incompatible, flag_fusion_incompatible_into,
    reference_diffuse_dispatch_stalks, reference_diffuse_dispatch_stalks_into,
    sheaf_diffuse_to_equilibrium_via, sheaf_diffuse_via,
)

__all__ = [
    "FEATURES", "FEATURE_NAMES", "NATURAL_GRADIENT_AUTOTUNER_CALLS", "PIPELINE_ANALYSIS_CALLS",
    "SHEAF_HETEROPHILIC_DISPATCH_CALLS", "DispatchErrorKind", "DriverDispatcher", "EdgeReport",
    "NaturalGradientScratch", "NodeReport", "OptimizerDispatchError", "OptimizerDispatcher",
    "PipelineReport", "SheafDispatchScratch",
    "as_runner", "precondition_q16_via", "run_arrays", "StaticCounts", "analyze_pipeline", "autotune_step",
    "autotune_step_into", "bump", "ceil_div_u32", "checked_product_count", "checked_square_cells",
    "decode_u32_le", "decode_u32_output_exact", "diffuse_dispatch_stalks_fixed_via",
    "diffuse_dispatch_stalks_fixed_via_into", "diffuse_dispatch_stalks_fixed_via_with_scratch_into",
    "diffuse_to_equilibrium", "diffuse_to_equilibrium_into", "dispatch_arrays", "dispatch_graph",
    "encode_u32_le", "ensure_input_slots", "flag_fusion_incompatible", "flag_fusion_incompatible_into",
    "identity_fisher_block", "identity_fisher_block_into", "identity_fisher_block_q16",
    "natural_gradient_direction", "output_decls", "precondition_autotune_gradient_fixed_via",
    "precondition_autotune_gradient_fixed_via_into",
    "precondition_autotune_gradient_fixed_via_with_scratch_into", "read_u32s",
    "reference_diffuse_dispatch_stalks", "reference_diffuse_dispatch_stalks_into",
    "reference_precondition_autotune_gradient", "reference_precondition_autotune_gradient_into",
    "reset_counters", "sheaf_diffuse_to_equilibrium_via", "sheaf_diffuse_via", "snapshot_counters",
    "static_counts", "storage_decls", "u32_slice_to_le_bytes", "write_u32_slice_le_bytes",
    "write_zero_bytes",
]
