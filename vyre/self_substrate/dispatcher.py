"""The seed's byte-level dispatcher contract, kept as a thin compatibility layer over runners.

The self-substrate runs its programs through one *runner* callable over arrays
(:mod:`vyre.primitives.runner`); :func:`as_runner` turns ``None`` (the driver), a runner, or a
byte-level :class:`OptimizerDispatcher` into one. An :class:`OptimizerDispatcher` takes a program
and one little-endian byte buffer per storage buffer, in declaration order (outputs zero-filled by
the caller), and returns the bytes of the program's output buffers, in declaration order.
:class:`DriverDispatcher` implements it over ``vyre.driver.dispatch.dispatch`` for any backend;
tests implement it with small mocks.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..driver.dispatch import dispatch
from ..errors import CodegenError, ValidationError, VyreError
from ..errors import DispatchError as _DriverDispatchError
from ..ir import Program
from ..primitives.runner import Grid3, Runner, driver_runner, output_decls, storage_decls

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


def as_runner(run: Runner | OptimizerDispatcher | None) -> Runner:
    """One runner for any of: None (the driver's default backend), a runner callable (returned as
    it is), or a byte-level :class:`OptimizerDispatcher` (adapted: arrays are encoded to
    little-endian bytes, outputs decoded and checked as :func:`dispatch_arrays` does)."""
    if run is None:
        return driver_runner()
    if isinstance(run, OptimizerDispatcher):
        disp = run

        def via_bytes(program: Program, arrays: Sequence[Any], grid: Grid3 | None) -> list[Any]:
            return dispatch_arrays(disp, program, arrays, grid, "the byte-level dispatcher")

        return via_bytes
    if callable(run):
        return run
    raise OptimizerDispatchError.bad_inputs(
        f"expected a runner callable or an OptimizerDispatcher, got {type(run).__name__}. "
        "Fix: pass vyre.primitives.driver_runner(backend) or a DriverDispatcher")


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


def run_arrays(run: Runner | OptimizerDispatcher | None, program: Program, arrays: Sequence[np.ndarray],
               grid: Grid3 | None, what: str) -> list[np.ndarray]:
    """Run ``program`` on ``arrays`` through :func:`as_runner` ``(run)`` and check its outputs:
    one per output buffer, each as long as the declared count (or the array passed for it), as
    host arrays. ``what`` names the caller in error messages."""
    decls = storage_decls(program)
    if len(arrays) != len(decls):
        raise OptimizerDispatchError.bad_inputs(
            f"{what} got {len(arrays)} arrays for {len(decls)} storage buffers. "
            "Fix: pass one array per storage buffer")
    lengths = {d.name: int(np.asarray(a).size) for d, a in zip(decls, arrays, strict=True)}
    outs = as_runner(run)(program, list(arrays), grid)
    want = output_decls(program)
    if len(outs) < len(want):
        raise OptimizerDispatchError.backend_error(
            f"{what} expected {len(want)} output buffer(s), got {len(outs)}. "
            "Fix: the runner must return every output buffer in declaration order")
    out: list[np.ndarray] = []
    for decl, arr in zip(want, outs, strict=False):
        host = arr if isinstance(arr, np.ndarray) else np.asarray(arr.copy_to_host())
        n = decl.count or lengths[decl.name]
        if host.size != n:
            raise OptimizerDispatchError.backend_error(
                f"{what}: output {decl.name!r} has {host.size} elements, expected {n}. "
                "Fix: the runner must return whole output buffers")
        out.append(host.reshape(-1))
    return out
