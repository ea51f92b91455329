"""Reducing along axes: an N-D array seen as the 2-D rows the row-wise programs take.

``sum(x, axis=...)``, ``softmax(x, axis=...)`` and the others reduce (or normalise) along one or
more axes of an array of any rank. :func:`along` reads the request: the reduced axes (``axis``
normalised as numpy does: an int or a tuple of ints, negative counting from the end) and the kept
ones. :func:`to_rows` turns the array into ``(rows, cols)``: the kept axes in order become the rows,
the reduced ones the columns. When the reduced axes are already the last ones that is a reshape (a
view of a contiguous array); otherwise the array is transposed first, which costs a copy (in the
caller's library, on the caller's device). :func:`from_rows` and :func:`per_row` turn results back:
a row-shaped result (softmax, layer norm) into the input's layout, a per-row one (a sum, a
log-sum-exp, a statistic) into the kept axes' shape (with ``keepdims``, reduced axes of length 1).

Arrays are numpy, CuPy, PyTorch or numba device arrays (vyre.ops._runtime); a numba device array
can only be reduced along its last axes (it has no transpose), which the error says.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any

import numpy as np

from ._runtime import Kind, OpsError, _kind

__all__ = ["Along", "along", "from_rows", "matrix_axis", "per_row", "rows_of_stat", "to_rows", "whole_keepdims"]


class Along:
    """How an array of ``shape`` reduces along ``axes`` (sorted, non-negative); the derived shapes
    are computed once (:func:`along` keeps one per shape and axis)."""

    __slots__ = ("axes", "back", "cols", "keepdims_shape", "kept", "kept_shape", "last", "order", "rows",
                 "shape", "whole")

    def __init__(self, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
        self.shape = shape
        self.axes = axes
        #: the other axes, in order
        self.kept = tuple(a for a in range(len(shape)) if a not in axes)
        #: every axis is reduced: a whole-array reduction
        self.whole = not self.kept
        #: the reduced axes are the last ones: the rows are a reshape, no transpose
        self.last = axes == tuple(range(len(self.kept), len(shape)))
        self.rows = math.prod(shape[a] for a in self.kept)
        self.cols = math.prod(shape[a] for a in axes)
        self.kept_shape = tuple(shape[a] for a in self.kept)
        self.keepdims_shape = tuple(1 if a in axes else s for a, s in enumerate(shape))
        #: the transpose that puts the reduced axes last
        self.order = (*self.kept, *axes)
        #: the transpose that undoes ``order``
        self.back = tuple(sorted(range(len(shape)), key=self.order.__getitem__))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Along) and (self.shape, self.axes) == (other.shape, other.axes)

    def __hash__(self) -> int:
        return hash((self.shape, self.axes))

    def __repr__(self) -> str:
        return f"Along(shape={self.shape}, axes={self.axes})"


def matrix_axis(x: Any, axis: Any) -> int | None:
    """0 or 1 where ``x`` is 2-D and ``axis`` an int naming one of its axes (the common call, which
    the ops take without reading the axes: :func:`along`); else None."""
    if type(axis) is not int or getattr(x, "ndim", 0) != 2 or not -2 <= axis <= 1:
        return None
    return axis % 2


def along(x: Any, axis: Any, name: str = "x") -> Along:
    """The reduction of array ``x`` along ``axis`` (an int, a tuple of ints, or None for every
    axis); an OpsError for an axis out of range, repeated, or not an integer."""
    if type(x) is not np.ndarray:
        _kind(x)  # an OpsError for anything that is not an array vyre.ops takes
    # the key holds the axes' types: 1.0 and True are equal to 1 as keys, but not axes
    types: tuple[str, ...] | str | None = None if axis is None or type(axis) is int else (
        tuple(type(a).__name__ for a in axis) if type(axis) is tuple else type(axis).__name__)
    try:
        return _along(tuple(x.shape), axis, types, name)  # read once per shape and axis (a small op's call)
    except TypeError:  # an axis that is no key (a list): the uncached reading says what is wrong
        return _along.__wrapped__(tuple(x.shape), axis, types, name)


@functools.lru_cache(maxsize=1024)
def _along(raw: tuple[int, ...], axis: Any, types: Any, name: str) -> Along:
    """:func:`along`'s reading (``types``: only part of the cache key)."""
    shape = tuple(int(s) for s in raw)
    nd = len(shape)
    if axis is None:
        return Along(shape, tuple(range(nd)))
    items = axis if isinstance(axis, tuple) else (axis,)
    axes: list[int] = []
    for a in items:
        if isinstance(a, bool):
            raise OpsError(f"axis must be an int, a tuple of ints or None, got {axis!r}. Fix: pass e.g. axis=-1")
        try:
            i = operator.index(a)
        except TypeError:
            raise OpsError(f"axis must be an int, a tuple of ints or None, got {axis!r}. "
                           "Fix: pass e.g. axis=-1") from None
        if not -nd <= i < nd:
            raise OpsError(f"axis {i} is out of range for {name} of shape {shape} ({nd} axes). "
                           f"Fix: pass an axis in [{-nd}, {nd - 1}]" if nd else
                           f"{name} is 0-d (a single value) and has no axis {i}. Fix: pass axis=None")
        i %= nd
        if i in axes:
            raise OpsError(f"axis {axis!r} names axis {i} of {name} twice. Fix: name each axis once")
        axes.append(i)
    return Along(shape, tuple(sorted(axes)))


def to_rows(x: Any, al: Along) -> Any:
    """``x`` as a 2-D ``(rows, cols)`` array of its own library: the kept axes become the rows,
    the reduced axes the columns (a transposed copy unless they are already last)."""
    shape = (al.rows, al.cols)
    if al.last:
        return x if len(al.shape) == 2 and len(al.kept) == 1 else x.reshape(shape)  # already (rows, cols)
    kind = _kind(x)
    if kind is Kind.TORCH:
        return x.permute(*al.order).reshape(shape)
    if kind in (Kind.NUMPY, Kind.CUPY):
        return x.transpose(al.order).reshape(shape)
    raise OpsError(f"reducing axes {al.axes} of an array of shape {al.shape} moves them last, which "
                   f"needs a transpose this kind of array ({type(x).__name__}) does not have. Fix: pass "
                   "a CuPy array or a PyTorch tensor, or reduce along the last axes")


def from_rows(y: Any, al: Along) -> Any:
    """A ``(rows, cols)`` result of :func:`to_rows`'s rows back in the input's layout (a view)."""
    moved = y.reshape(tuple(al.shape[a] for a in al.order))
    if al.last:
        return moved
    if _kind(y) is Kind.TORCH:
        return moved.permute(*al.back)
    return moved.transpose(al.back)


def per_row(r: Any, al: Along, keepdims: bool = False) -> Any:
    """A per-row result (``rows`` values) shaped as the kept axes, or with ``keepdims`` as the input
    with each reduced axis of length 1. With no kept axis and no ``keepdims`` (a 1-D input's one
    row), a numpy result is a numpy scalar, as a whole-array reduction's is."""
    if keepdims:
        return r.reshape(al.keepdims_shape)
    if not al.kept and isinstance(r, np.ndarray):
        return r[0]
    return r.reshape(al.kept_shape)


def rows_of_stat(s: Any, al: Along, name: str) -> Any:
    """A per-row input (a log-sum-exp, a cotangent of one, a statistic) of the kept axes' shape
    (or the keepdims shape), flat: one value per row."""
    if isinstance(s, np.generic):
        s = np.asarray(s)  # a numpy scalar: what a 1-D input's per-row result is
    _kind(s)
    shape = tuple(int(d) for d in s.shape)
    if shape not in (al.kept_shape, al.keepdims_shape):
        raise OpsError(f"{name} has shape {shape}, expected {al.kept_shape} (one value per row of the "
                       f"axes {al.axes} of an array of shape {al.shape}). Fix: pass what the forward "
                       "op returned for these axes")
    return s.reshape((al.rows,))


def whole_keepdims(v: Any, al: Along) -> Any:
    """A whole-array result ``v`` (a numpy scalar, or a 0-d device array) shaped with every axis of
    length 1."""
    shape = (1,) * len(al.shape)
    if not shape:
        return v  # a 0-d input: nothing to keep (numpy gives its scalar too)
    if isinstance(v, (np.generic, np.ndarray)):
        return np.asarray(v).reshape(shape)
    return v.reshape(shape)
