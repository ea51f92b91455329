"""``vyre.ops``: reductions and the kernels built on them, each a vyre IR program (so ``show``,
``tune``, ``grad``, the interpreter and every backend apply) plus a function that runs it on arrays.

Whole arrays (vyre.ops.reduce, vyre.ops.argreduce): ``sum``, ``max``, ``min``, ``mean``, ``dot``, ``norm``,
``argmax``.
Rows of a 2-D array (vyre.ops.rowwise): ``row_sum``, ``row_max``, ``softmax``, ``logsumexp``,
``layer_norm`` and the gradients ``softmax_grad``, ``logsumexp_grad``, ``layer_norm_grad``.
Linear algebra (vyre.ops.linalg): ``matvec`` and ``matvec_grad``.

See docs/ops.md for how each is built, its accuracy and its NaN rules."""

from ._runtime import OpsError
from .argreduce import argmax
from .linalg import matvec, matvec_grad
from .reduce import dot, max, mean, min, norm, sum
from .rowwise import (
    layer_norm, layer_norm_grad, logsumexp, logsumexp_grad, row_max, row_sum, softmax, softmax_grad,
)

__all__ = [
    "OpsError", "argmax", "dot", "layer_norm", "layer_norm_grad", "logsumexp", "logsumexp_grad",
    "matvec", "matvec_grad", "max", "mean", "min", "norm", "row_max", "row_sum", "softmax",
    "softmax_grad", "sum",
]
