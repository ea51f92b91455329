"""The byte-level dispatcher contract the self-substrate runs its programs through.

An :class:`OptimizerDispatcher` takes a program and one little-endian byte buffer per storage
buffer, in declaration order (outputs zero-filled by the caller), and returns the bytes of the
program's output buffers, in declaration order. :class:`DriverDispatcher` implements it over
``vyre.driver.dispatch.dispatch`` for any backend; tests implement it with small mocks.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import CodegenError, ValidationError, VyreError
from ..errors import DispatchError as _DriverDispatchError
from ..ir import BufferDecl, Program

Grid = tuple[int, int, int]
ByteBuf = bytes | bytearray


class DispatchErrorKind(enum.Enum):
    """Why an optimizer dispatch failed."""

    BAD_INPUTS = "BadInputs"  # the caller's shapes or bytes are wrong
    BACKEND_ERROR = "BackendError"  # the backend failed or returned malformed outputs
    REJECTED = "Rejected"  # the backend refused the program (invalid, or not lowerable)


class OptimizerDispatchError(_DriverDispatchError):
    """A self-substrate dispatch failed; ``kind`` says which way. A :class:`vyre.DispatchError`."""

    def __init__(self, kind: DispatchErrorKind, message: str) -> None:
        self.kind = kind
        self.detail = message
        super().__init__(f"{kind.value}: {message}")

    @classmethod
    def bad_inputs(cls, message: str) -> OptimizerDispatchError:
        return cls(DispatchErrorKind.BAD_INPUTS, message)

    @classmethod
    def backend_error(cls, message: str) -> OptimizerDispatchError:
        return cls(DispatchErrorKind.BACKEND_ERROR, message)

    @classmethod
    def rejected(cls, message: str) -> OptimizerDispatchError:
        return cls(DispatchErrorKind.REJECTED, message)


@runtime_checkable
class OptimizerDispatcher(Protocol):
    """Runs ``program`` on ``inputs`` (one byte buffer per storage buffer, declaration order) over
    ``grid_override`` workgroups (None: the driver's default grid) and returns the bytes of its
    output buffers in declaration order. Raises :class:`OptimizerDispatchError`."""

    def dispatch(self, program: Program, inputs: Sequence[ByteBuf],
                 grid_override: Grid | None) -> list[bytes]: ...


def storage_decls(program: Program) -> list[BufferDecl]:
    """Buffers the caller passes bytes for: every non-workgroup buffer, declaration order."""
    return [b for b in program.buffers if not b.is_workgroup]


def output_decls(program: Program) -> list[BufferDecl]:
    """Buffers a dispatcher returns: those marked ``is_output`` (else every writable storage
    buffer), in declaration order."""
    marked = [b for b in storage_decls(program) if b.is_output]
    return marked or [b for b in storage_decls(program) if b.access.writable]


@dataclass(frozen=True)
class DriverDispatcher:
    """:class:`OptimizerDispatcher` over ``vyre.driver.dispatch.dispatch``.

    ``backend`` is passed through (``"interp"``, ``"cpu"``, ``"cuda"``, ``"cudasim"``, or None
    for the driver's default). Errors: wrong input count or byte lengths -> BadInputs; invalid or
    unlowerable programs -> Rejected; anything the backend raises -> BackendError (chained)."""

    backend: str | None = None

    def dispatch(self, program: Program, inputs: Sequence[ByteBuf],
                 grid_override: Grid | None = None) -> list[bytes]:
        arrays = self._arrays(program, inputs)
        try:
            from ..driver.dispatch import dispatch
        except ImportError as exc:  # the driver is optional at import time of this module
            raise OptimizerDispatchError.backend_error(
                f"vyre.driver.dispatch is not importable ({exc}). Fix: install vyre with its driver"
            ) from exc
        grid = None if grid_override is None else tuple(int(g) for g in grid_override)
        try:
            result = dispatch(program, arrays, backend=self.backend, grid=grid)
        except (ValidationError, CodegenError) as exc:
            raise OptimizerDispatchError.rejected(
                f"backend {self.backend or 'default'} refused the program: {exc}. "
                "Fix: validate the program and pick a backend that supports it"
            ) from exc
        except VyreError as exc:
            raise OptimizerDispatchError.backend_error(
                f"backend {self.backend or 'default'} failed: {exc}. Fix: see the chained error"
            ) from exc
        except Exception as exc:  # the contract reports every backend failure as BackendError
            raise OptimizerDispatchError.backend_error(
                f"backend {self.backend or 'default'} raised {type(exc).__name__}: {exc}. "
                "Fix: see the chained error"
            ) from exc
        out: list[bytes] = []
        for decl in output_decls(program):
            if decl.name not in result:
                raise OptimizerDispatchError.backend_error(
                    f"dispatch returned no buffer {decl.name!r} (got {sorted(result)}). "
                    "Fix: the driver must return every writable storage buffer"
                )
            out.append(np.ascontiguousarray(result[decl.name]).tobytes())
        return out

    @staticmethod
    def _arrays(program: Program, inputs: Sequence[ByteBuf]) -> dict[str, np.ndarray]:
        decls = storage_decls(program)
        if len(inputs) != len(decls):
            raise OptimizerDispatchError.bad_inputs(
                f"got {len(inputs)} input buffers, the program declares {len(decls)} storage buffers "
                f"({[d.name for d in decls]}). Fix: pass one byte buffer per storage buffer, "
                "in declaration order"
            )
        arrays: dict[str, np.ndarray] = {}
        for decl, data in zip(decls, inputs, strict=True):
            if not isinstance(data, (bytes, bytearray)):
                raise OptimizerDispatchError.bad_inputs(
                    f"input for buffer {decl.name!r} is a {type(data).__name__}, expected bytes. "
                    "Fix: encode it with numpy's tobytes() or encode_u32_le"
                )
            size = decl.element.size_bytes
            if len(data) % size:
                raise OptimizerDispatchError.bad_inputs(
                    f"buffer {decl.name!r} got {len(data)} bytes, not a multiple of its element size "
                    f"{size} ({decl.element.short}). Fix: pass whole elements"
                )
            n = len(data) // size
            if decl.count and n != decl.count:
                raise OptimizerDispatchError.bad_inputs(
                    f"buffer {decl.name!r} got {n} elements, the program declares {decl.count}. "
                    "Fix: pass a buffer of the declared length"
                )
            arrays[decl.name] = np.frombuffer(bytes(data), dtype=decl.element.np_dtype.newbyteorder("<")) \
                .astype(decl.element.np_dtype)
        return arrays


def dispatch_arrays(dispatcher: OptimizerDispatcher, program: Program, arrays: Sequence[np.ndarray],
                    grid: Grid | None, what: str) -> list[np.ndarray]:
    """Run ``program`` through ``dispatcher`` on numpy arrays (one per storage buffer, declaration
    order) and decode its outputs, checking each has the length of the declared count (or of the
    array passed for it). ``what`` names the caller in error messages."""
    decls = storage_decls(program)
    if len(arrays) != len(decls):
        raise OptimizerDispatchError.bad_inputs(
            f"{what} got {len(arrays)} arrays for {len(decls)} storage buffers. "
            "Fix: pass one array per storage buffer"
        )
    payload: list[bytes] = []
    lengths: dict[str, int] = {}
    for decl, arr in zip(decls, arrays, strict=True):
        a = np.asarray(arr)
        if a.dtype != decl.element.np_dtype:
            raise OptimizerDispatchError.bad_inputs(
                f"{what}: buffer {decl.name!r} got dtype {a.dtype}, expected {decl.element.np_dtype}. "
                "Fix: convert with .astype"
            )
        lengths[decl.name] = a.size
        payload.append(np.ascontiguousarray(a, dtype=decl.element.np_dtype.newbyteorder("<")).tobytes())
    outputs = dispatcher.dispatch(program, payload, grid)
    outs = output_decls(program)
    if len(outputs) < len(outs):
        raise OptimizerDispatchError.backend_error(
            f"{what} expected {len(outs)} output buffer(s), got {len(outputs)}. "
            "Fix: the dispatcher must return every output buffer in declaration order"
        )
    decoded: list[np.ndarray] = []
    for decl, data in zip(outs, outputs, strict=False):
        want = decl.count or lengths[decl.name]
        nbytes = want * decl.element.size_bytes
        if len(data) != nbytes:
            raise OptimizerDispatchError.backend_error(
                f"{what}: output {decl.name!r} has {len(data)} bytes, expected {nbytes} "
                f"({want} x {decl.element.short}). Fix: the dispatcher must return whole output buffers"
            )
        decoded.append(np.frombuffer(bytes(data), dtype=decl.element.np_dtype.newbyteorder("<"))
                       .astype(decl.element.np_dtype))
    return decoded
