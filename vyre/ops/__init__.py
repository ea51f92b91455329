"""``vyre.ops``: reductions and the kernels built on them, each a vyre IR program (so ``show``,
``tune``, ``grad``, the interpreter and every backend apply) plus a function that runs it on arrays.

See docs/ops.md for how each is built, its accuracy and its NaN rules."""

from ._runtime import OpsError
from .reduce import argmax, dot, max, mean, min, norm, sum

__all__ = ["OpsError", "argmax", "dot", "max", "mean", "min", "norm", "sum"]
