"""Errors raised by the primitive builders and drivers."""

from __future__ import annotations

from ..errors import VyreError


class PrimitiveError(VyreError):
    """A primitive was asked for a shape or value it cannot build (message ends with ``Fix:``)."""


class ConvergenceError(PrimitiveError):
    """An iterative primitive did not reach its tolerance; it reports instead of returning garbage.

    ``residual`` is the last measured residual (``inf`` when the iteration blew up) and
    ``iterations`` how many steps ran."""

    def __init__(self, message: str, *, residual: float, iterations: int) -> None:
        super().__init__(message)
        self.residual = residual
        self.iterations = iterations
