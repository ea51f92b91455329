"""Call sites: the second call of a public op with numpy arrays of the same dtypes, shapes and
arguments runs its plan without routing the call again.

A public op routes its arguments before it reaches a plan (vyre.ops._plans): it reads the axis,
picks the whole-array, row or column form, builds the plan key and looks it up. With a small
array that routing is most of the call (1-2 us of a 2-4 us ``sum(a, 0)`` of 64x64). A
:class:`Site` is one public op's memory of its routes: per *signature* (each array's dtype and
shape, and every other argument as passed) the plan the route replayed, kept only where the
route handed that plan's answer back unchanged, or (argmax) as int64 indices. A later call of
the signature runs the plan directly, after the two checks a plan needs on every call: the
array's layout (C-contiguous and aligned) and, where no backend is named, that the default
backend is still the CPU.

What a site never takes: arrays of other kinds, axes that are not an int or None (a tuple, or a
bool, which equals an int as a key), and any route that copied or reshaped an input first, ran
another plan on its answer, or built its answer from it (keepdims, reshaped rows): those routes
run as before. Since a signature fixes everything a route reads, the route it remembers is the
route every such call takes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..driver.backends import default_is_cpu
from ._plans import SITE_MEMORIES, USED

__all__ = ["Site"]

#: signatures a site keeps before it starts again (as the plan cache does)
SITE_LIMIT = 1024


class Site:
    """One public op's remembered routes (see the module docstring). ``route(x, a, b, c, d)``:
    the op as written, taking its arrays and options positionally; :meth:`one` calls an op of one
    array with (axis, keepdims, backend, deterministic), :meth:`two` an op of two arrays with
    (backend, deterministic)."""

    __slots__ = ("route", "runs")

    def __init__(self, route: Callable[..., Any]) -> None:
        self.route = route
        #: signature -> (the plan's run, whether its answer becomes int64 indices)
        self.runs: dict[tuple[Any, ...], tuple[Callable[[list[np.ndarray]], Any], bool]] = {}
        SITE_MEMORIES.append(self.runs)

    def one(self, x: Any, axis: Any, keepdims: Any, backend: str | None, deterministic: Any) -> Any:
        if type(x) is not np.ndarray or not (axis is None or type(axis) is int):
            return self.route(x, axis, keepdims, backend, deterministic)
        sig = (x.dtype, x.shape, axis, keepdims, backend, deterministic)
        try:
            hit = self.runs.get(sig)
        except TypeError:  # an option that is no key: the route says what is wrong with it
            return self.route(x, axis, keepdims, backend, deterministic)
        if hit is not None:
            flags = x.flags
            if (flags.carray or (flags.c_contiguous and flags.aligned)) and (backend is not None or default_is_cpu()):
                run, as_indices = hit
                out = run([x if x.ndim == 1 else x.ravel()])
                return out.astype(np.int64) if as_indices else out
        return self._learn(sig, x, None, (x, axis, keepdims, backend, deterministic))

    def two(self, x: Any, y: Any, backend: str | None, deterministic: Any) -> Any:
        if type(x) is not np.ndarray or type(y) is not np.ndarray:
            return self.route(x, y, backend, deterministic)
        sig = (x.dtype, x.shape, y.dtype, y.shape, backend, deterministic)
        try:
            hit = self.runs.get(sig)
        except TypeError:
            return self.route(x, y, backend, deterministic)
        if hit is not None:
            fx, fy = x.flags, y.flags
            if ((fx.carray or (fx.c_contiguous and fx.aligned)) and (fy.carray or (fy.c_contiguous and fy.aligned))
                    and (backend is not None or default_is_cpu())):
                return hit[0]([x if x.ndim == 1 else x.ravel(), y if y.ndim == 1 else y.ravel()])
        return self._learn(sig, x, y, (x, y, backend, deterministic))

    def _learn(self, sig: tuple[Any, ...], x: np.ndarray, y: np.ndarray | None, args: tuple[Any, ...]) -> Any:
        """The route's answer; the signature remembered where the route replayed one plan over
        exactly these arrays and answered with its answer (or its indices as int64)."""
        USED.watching += 1
        USED.plan = USED.inputs = USED.answer = USED.indices = None
        try:
            out = self.route(*args)
            used, inputs, answer, indices = USED.plan, USED.inputs, USED.answer, USED.indices
        finally:
            USED.watching -= 1
            USED.plan = USED.inputs = USED.answer = USED.indices = None  # no array kept alive
        arrays = (x,) if y is None else (x, y)
        if used is None or inputs is None or len(inputs) != len(arrays) or any(
                a is not b for a, b in zip(inputs, arrays, strict=True)):
            return out
        if out is answer:
            as_indices = False
        elif indices is not None and indices[0] is answer and indices[1] is out:
            as_indices = True
        else:
            return out
        if len(self.runs) >= SITE_LIMIT:
            self.runs.clear()
        self.runs[sig] = (used.run, as_indices)
        return out
