"""IR program builders with exact references: the kernels vyre uses on its own problems.

* 16.16 fixed point: :func:`to_q16`, :func:`from_q16`, :func:`fmul_q16` (the exact oracle).
* :func:`natural_gradient_block_apply` (``out = M · g`` in 16.16) with float and exact references.
* :func:`sheaf_diffusion_step` (the seed's decay) and :func:`sheaf_laplacian_step` (real sheaf
  diffusion over a :class:`SheafGraph`) with float64 references.
* :func:`newton_schulz_inv_sqrt`: ``M^{-1/2}`` of an SPD matrix by IR programs run through a
  :mod:`runner <.runner>`, and its float64 numpy twin :func:`newton_schulz_inv_sqrt_reference`.
* :mod:`.runner`: the runner callable every self-hosted program goes through.
"""

from .errors import ConvergenceError, PrimitiveError
from .fixed import (
    Q16_ONE, Q16_SHIFT, add_u32, as_i32, fmul_q16, from_q16, from_q16_list, sub_u32, to_q16,
    to_q16_list, wrap_u32,
)
from .natural_gradient import (
    identity_fisher_q16, natural_gradient_block_apply, natural_gradient_block_apply_cpu,
    natural_gradient_block_apply_exact,
)
from .newton_schulz import (
    inv_sqrt_eigh, matmul_program, newton_schulz_inv_sqrt, newton_schulz_inv_sqrt_reference,
    newton_schulz_t_program,
)
from .runner import Runner, driver_runner, output_decls, storage_decls
from .sheaf import (
    SheafGraph, coboundary, sheaf_diffusion_step, sheaf_diffusion_step_cpu, sheaf_diffusion_step_exact,
    sheaf_dirichlet_energy, sheaf_laplacian_apply, sheaf_laplacian_dense, sheaf_laplacian_step,
    sheaf_laplacian_step_reference, sheaf_stable_alpha,
)

__all__ = [
    "Q16_ONE", "Q16_SHIFT", "ConvergenceError", "PrimitiveError", "SheafGraph", "add_u32", "as_i32",
    "coboundary", "fmul_q16", "from_q16", "from_q16_list", "identity_fisher_q16", "inv_sqrt_eigh", "matmul_program",
    "natural_gradient_block_apply", "natural_gradient_block_apply_cpu",
    "natural_gradient_block_apply_exact", "newton_schulz_inv_sqrt", "newton_schulz_inv_sqrt_reference",
    "Runner", "driver_runner", "output_decls", "storage_decls",
    "newton_schulz_t_program", "sheaf_diffusion_step", "sheaf_diffusion_step_cpu",
    "sheaf_diffusion_step_exact", "sheaf_dirichlet_energy", "sheaf_laplacian_apply",
    "sheaf_laplacian_dense", "sheaf_laplacian_step", "sheaf_laplacian_step_reference",
    "sheaf_stable_alpha", "sub_u32", "to_q16", "to_q16_list", "wrap_u32",
]
