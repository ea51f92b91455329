"""Automatic differentiation of vyre programs (docs/autodiff.md).

* :func:`grad` builds the backward (vector-Jacobian product) program; :func:`jvp_program` the
  tangent (Jacobian-vector product) program.
* :func:`vjp`, :func:`value_and_grad`, :func:`jvp` and :func:`hvp` build, dispatch and return
  arrays; :func:`check_grad` compares gradients with finite differences.
* :data:`BINOP_DERIV` / :data:`UNOP_DERIV` are the derivative rules, keyed by op.
"""

from .check import check_grad, promote_f64
from .forward import TANGENT_PREFIX, jvp_program
from .reverse import GRAD_PREFIX, STORED_PREFIX, grad
from .rules import BINOP_DERIV, UNOP_DERIV, BinDiff, NonDiff, UnDiff, ZeroDiff
from .handle import ValueAndGrad, value_and_grad_fn
from .runners import hvp, jvp, run_forward, value_and_grad, vjp

__all__ = [
    "BINOP_DERIV", "GRAD_PREFIX", "STORED_PREFIX", "TANGENT_PREFIX", "UNOP_DERIV", "BinDiff",
    "NonDiff", "UnDiff", "check_grad", "grad", "hvp", "jvp", "jvp_program", "promote_f64",
    "ValueAndGrad", "ZeroDiff", "run_forward", "value_and_grad", "value_and_grad_fn", "vjp",
]
