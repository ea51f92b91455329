"""Binding caller arrays to a program's buffers: the checks every backend shares.

Rules (docs/semantics.md, "Memory"): every storage buffer is bound to a 1-D view of a C-contiguous
array of exactly the element dtype; nothing is converted or truncated. Host objects that speak
DLPack (PyTorch CPU tensors, JAX CPU arrays) are bound through a zero-copy numpy view. A buffer the caller leaves out
is allocated zero-filled when the program writes it and declares a ``count``; a read-only buffer
that is left out is an error. Arrays given for written buffers are written in place. Two buffers
may not be bound to overlapping memory when the program writes either (:func:`check_disjoint`).
A 1-element uniform buffer (how ``@vyre.kernel`` compiles a scalar parameter) may also be given a
Python or numpy number, converted exactly to a 1-element array (:func:`scalar_to_array`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

import numpy as np

from ..errors import DispatchError, VyreError
from ..ir import BufferAccess, BufferDecl, DataType, Program
from .dlpack import DL_CPU, check_not_traced, dlpack_device, host_view, is_dlpack, is_immutable


def check_names(program: Program, names: list[str], err: type[VyreError] = DispatchError) -> None:
    known = {b.name: b for b in program.buffers}
    for name in names:
        if not isinstance(name, str):
            raise err(f"buffer names must be str, got {name!r}. Fix: key inputs by buffer name")
        b = known.get(name)
        if b is None:
            raise err(
                f"unknown buffer {name!r}; the program declares {sorted(known)}. "
                "Fix: pass arrays only for declared buffers"
            )
        if b.is_workgroup:
            raise err(
                f"buffer {name!r} is workgroup memory, which lives on the device per workgroup. "
                "Fix: do not pass an array for it"
            )


def storage_buffers(program: Program) -> list[BufferDecl]:
    return [b for b in program.buffers if not b.is_workgroup]


def host_array(decl: BufferDecl, obj: Any, err: type[VyreError] = DispatchError) -> Any:
    """``obj`` itself, or for a host DLPack object (a PyTorch CPU tensor, a JAX CPU array) its
    zero-copy numpy view; immutable arrays (JAX) are refused for written buffers."""
    if isinstance(obj, np.ndarray) or not is_dlpack(obj):
        return obj
    if dlpack_device(obj) != DL_CPU:
        raise err(f"buffer {decl.name!r} is a {type(obj).__name__} on a device (DLPack device type "
                  f"{dlpack_device(obj)}); this backend runs on the host. Fix: dispatch with backend='cuda', "
                  "or pass a host array")
    if decl.access.writable and is_immutable(obj):
        raise err(f"buffer {decl.name!r} is written by the program but a {type(obj).__name__} is immutable. "
                  "Fix: pass a writable array for it (or leave it out to have it allocated)")
    return host_view(obj, decl.name, err)


def check_host_array(decl: BufferDecl, arr: Any, err: type[VyreError] = DispatchError) -> np.ndarray:
    """Validate one host array for ``decl`` and return its flat view (no copy). Host DLPack objects
    (PyTorch CPU tensors, ...) are viewed through :func:`host_array`."""
    if not isinstance(arr, np.ndarray):
        check_not_traced(arr, decl.name, err)
        arr = host_array(decl, arr, err)
    if not isinstance(arr, np.ndarray):
        raise err(
            f"buffer {decl.name!r} got a {type(arr).__name__}, expected a numpy array of "
            f"{decl.element.np_dtype}. Fix: pass np.asarray(value, dtype=np.{decl.element.np_dtype})"
        )
    if arr.dtype != decl.element.np_dtype:
        raise err(
            f"buffer {decl.name!r} has dtype {arr.dtype}, expected {decl.element.np_dtype} "
            f"({decl.element.short}). Fix: convert explicitly with .astype(np.{decl.element.np_dtype})"
        )
    flags = arr.flags
    if not flags.c_contiguous:
        raise err(
            f"buffer {decl.name!r} is not C-contiguous. Fix: pass np.ascontiguousarray(array)"
        )
    flat = arr if arr.ndim == 1 else arr.reshape(-1)
    if decl.count and flat.size != decl.count:
        raise err(
            f"buffer {decl.name!r} has {flat.size} elements, the program declares {decl.count}. "
            "Fix: pass an array of the declared length"
        )
    if flat.size >= 2**32:
        raise err(f"buffer {decl.name!r} has {flat.size} elements; indices are u32. Fix: split the work")
    if decl.access.writable and not flags.writeable:
        raise err(
            f"buffer {decl.name!r} is written by the program but the array is read-only. "
            "Fix: pass a writable array (for example array.copy())"
        )
    return flat


def missing_buffer(decl: BufferDecl, err: type[VyreError] = DispatchError) -> VyreError:
    """The error for a buffer the caller left out that cannot be allocated: it is read, or it is
    written but declares no count."""
    if not decl.access.writable:
        return err(f"missing input buffer {decl.name!r}. Fix: pass an array for it")
    return err(f"output buffer {decl.name!r} was not passed and declares no count, so its length "
               "is unknown. Fix: pass an array for it or declare .with_count(n)")


Span = tuple[int, int]
T = TypeVar("T")


def spans_overlap(a: Span, b: Span) -> bool:
    """Do byte ranges ``[start, end)`` share a byte?"""
    return max(a[0], b[0]) < min(a[1], b[1])


def check_disjoint(bound: Mapping[str, T], written: Collection[str], overlaps: Callable[[T, T], bool],
                   err: type[VyreError] = DispatchError) -> None:
    """Reject two buffers bound to overlapping memory (``overlaps`` decides, on what ``bound`` maps
    names to) when the program writes either (``written``: names it writes; those not bound are
    skipped): each backend reads and writes in its own order (the interpreter copies buffers in and
    out, the GPU runs invocations at once), so the result would differ between them. Only pairs
    with a written buffer are compared: O(written x bound)."""
    for w in written:
        if w not in bound:
            continue
        for n, other in bound.items():
            if n != w and (n not in written or n > w) and overlaps(bound[w], other):
                a, b = sorted((w, n))
                raise err(f"buffers {a!r} and {b!r} are bound to overlapping memory and the program "
                          "writes at least one of them, so the result would depend on the order of reads "
                          "and writes (which differs between backends). Fix: pass a separate array for "
                          "each (for example x.copy())")


def is_scalar_slot(decl: BufferDecl) -> bool:
    """A 1-element uniform buffer (a ``@vyre.kernel``'s scalar parameter) also takes a number."""
    return decl.access is BufferAccess.UNIFORM and decl.count == 1


def scalar_to_array(decl: BufferDecl, v: Any, err: type[VyreError] = DispatchError) -> Any:
    """``v`` for a scalar slot: a Python or numpy number becomes a 1-element array of the element
    type, exactly (an int out of range, a float for an int, a bool for a number are errors);
    arrays pass through to the usual checks."""
    if isinstance(v, np.ndarray) or hasattr(v, "__cuda_array_interface__") or hasattr(v, "__dlpack__"):
        return v
    t = decl.element
    if not isinstance(v, (bool, int, float, np.generic)):
        ok = False
    elif t is DataType.BOOL:
        ok = isinstance(v, (bool, np.bool_))
    elif isinstance(v, (bool, np.bool_)):
        ok = False
    elif t.is_int:
        ok = float(v).is_integer() and ((-(2**31) <= int(v) < 2**31) if t is DataType.I32 else (0 <= int(v) < 2**32))
    else:
        ok = True
    if not ok:
        kind = "a bool" if t is DataType.BOOL else "an integer in range" if t.is_int else "a number"
        raise err(f"scalar {decl.name!r} is {t.short}, got {v!r}. Fix: pass {kind}")
    return np.array([v], dtype=t.np_dtype)


def check_mapping(inputs: object, err: type[VyreError] = DispatchError) -> None:
    """Raise ``err`` unless ``inputs`` is a mapping (every entry point checks, cached paths too)."""
    if type(inputs) is not dict and not isinstance(inputs, Mapping):  # the dict test first: cheap
        raise err(f"inputs must be a mapping of buffer name to array, got {type(inputs).__name__}. "
                  "Fix: pass a dict like {'x': x}")


class BindPlan:
    """What binding host arrays to one program needs, worked out once (a kernel keeps one): its
    storage buffers, which of them it writes, and their names. :meth:`bind` performs exactly the
    checks of :func:`bind_host_arrays`."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.storage = tuple(storage_buffers(program))
        self.names = frozenset(b.name for b in self.storage)
        self.scalars = tuple(b for b in self.storage if is_scalar_slot(b))
        # per buffer, what the common case (a 1-D numpy array) is checked against in bind()
        self._plain = tuple((b.name, b, b.access.writable, b.element.np_dtype, b.count) for b in self.storage)

    def with_scalars(self, inputs: Mapping[str, Any], err: type[VyreError] = DispatchError) -> Mapping[str, Any]:
        """``inputs`` with numbers given for scalar slots made 1-element arrays (a no-op, and no
        copy, for programs without such slots); anything but a mapping is an ``err``."""
        check_mapping(inputs, err)
        if not self.scalars:
            return inputs
        out = dict(inputs)
        for b in self.scalars:
            if b.name in out:
                out[b.name] = scalar_to_array(b, out[b.name], err)
        return out

    def bind(self, inputs: Mapping[str, Any], err: type[VyreError] = DispatchError) -> dict[str, np.ndarray]:
        """Map every storage buffer to a flat numpy array (see module docs)."""
        check_mapping(inputs, err)
        names = self.names
        for name in inputs:
            if name not in names:  # unknown, not a str, or workgroup memory: say which
                check_names(self.program, list(inputs), err)
        out: dict[str, np.ndarray] = {}
        given: dict[str, np.ndarray] = {}
        written: list[str] = []
        for name, decl, writable, dtype, count in self._plain:
            if name in inputs:
                a = inputs[name]
                # a 1-D numpy array passing every check of check_host_array, decided inline (the
                # per-call cost of a small dispatch); anything else goes through it
                if (type(a) is not np.ndarray or a.ndim != 1 or a.dtype != dtype or (count and a.size != count)
                        or a.size >= 2**32 or not (f := a.flags).c_contiguous or (writable and not f.writeable)):
                    a = check_host_array(decl, a, err)
                out[name] = given[name] = a
                if writable:
                    written.append(name)
            elif writable and count > 0:
                out[name] = np.zeros(count, dtype=dtype)
            else:
                raise missing_buffer(decl, err)
        if written:
            check_disjoint(given, written, np.may_share_memory, err)
        return out


def bind_host_arrays(
    program: Program, inputs: Mapping[str, Any], err: type[VyreError] = DispatchError
) -> dict[str, np.ndarray]:
    """Map every storage buffer of ``program`` to a flat numpy array (see module docs)."""
    return BindPlan(program).bind(inputs, err)
