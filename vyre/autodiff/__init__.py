"""Reverse- and forward-mode automatic differentiation of vyre programs (docs/autodiff.md)."""

from .reverse import GRAD_PREFIX, STORED_PREFIX, grad

__all__ = ["GRAD_PREFIX", "STORED_PREFIX", "grad"]
