"""Byte helpers for the dispatcher contract: checked counts and exact little-endian u32 codecs.

Every failure is an :class:`OptimizerDispatchError`: bad caller shapes are BadInputs, malformed
backend readback is BackendError.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .dispatcher import ByteBuf, OptimizerDispatchError

U32_LIMIT = 1 << 32
_LE_U32 = np.dtype("<u4")


def ceil_div_u32(a: int, b: int) -> int:
    """``ceil(a / b)`` for u32 operands (``b`` > 0)."""
    if not (0 <= a < U32_LIMIT and 0 < b < U32_LIMIT):
        raise OptimizerDispatchError.bad_inputs(
            f"ceil_div_u32 got a={a}, b={b}; expected 0 <= a < 2^32 and 0 < b < 2^32. "
            "Fix: pass u32 counts and a positive divisor"
        )
    return -(-a // b)


def checked_square_cells(n: int, what: str) -> int:
    """``n * n`` for a u32 buffer count; BadInputs when ``n`` is 0 or ``n*n`` exceeds u32."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise OptimizerDispatchError.bad_inputs(
            f"{what} got n={n!r}, expected a positive int. Fix: pass the block dimension n >= 1"
        )
    cells = n * n
    if cells >= U32_LIMIT:
        raise OptimizerDispatchError.bad_inputs(
            f"{what} n*n={cells} exceeds the primitive u32 buffer-count limit for n={n}. "
            "Fix: split the block (n <= 65535)"
        )
    return cells


def checked_product_count(a: int, b: int, a_name: str, b_name: str, what: str) -> int:
    """``a * b`` as a u32 lane count; BadInputs when either is 0 or the product exceeds u32."""
    for name, v in ((a_name, a), (b_name, b)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise OptimizerDispatchError.bad_inputs(
                f"{what} got {name}={v!r}, expected a positive int. Fix: pass {name} >= 1"
            )
    cells = a * b
    if cells >= U32_LIMIT:
        raise OptimizerDispatchError.bad_inputs(
            f"{what} {a_name}*{b_name}={cells} exceeds the primitive u32 lane limit for "
            f"{a_name}={a}, {b_name}={b}. Fix: split the work"
        )
    return cells


def _u32_array(values: Iterable[int], what: str) -> np.ndarray:
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values)
    if arr.size == 0:
        return np.zeros(0, dtype=_LE_U32)
    if arr.dtype.kind not in "iu":
        raise OptimizerDispatchError.bad_inputs(
            f"{what} got values of dtype {arr.dtype}, expected integers. Fix: pass u32 bit patterns"
        )
    if int(arr.min()) < 0 or int(arr.max()) >= U32_LIMIT:
        raise OptimizerDispatchError.bad_inputs(
            f"{what} got a value outside [0, 2^32). Fix: pass u32 bit patterns (wrap negatives "
            "with value & 0xFFFFFFFF)"
        )
    return arr.astype(_LE_U32).reshape(-1)


def encode_u32_le(values: Iterable[int], what: str = "encode_u32_le") -> bytes:
    """Little-endian bytes of ``values`` (each a u32 bit pattern)."""
    return _u32_array(values, what).tobytes()


def write_u32_slice_le_bytes(buf: bytearray, values: Iterable[int], what: str = "write_u32") -> None:
    """Overwrite ``buf`` in place (same object, reused allocation) with the LE bytes of ``values``."""
    buf[:] = encode_u32_le(values, what)


def write_zero_bytes(buf: bytearray, n_bytes: int) -> None:
    """Overwrite ``buf`` in place with ``n_bytes`` zero bytes."""
    buf[:] = bytes(n_bytes)


def ensure_input_slots(slots: list[bytearray], n: int) -> None:
    """Make ``slots`` hold at least ``n`` reusable byte buffers (existing ones are kept)."""
    while len(slots) < n:
        slots.append(bytearray())


def decode_u32_le(data: ByteBuf, what: str = "decode_u32_le") -> list[int]:
    """u32 values of little-endian ``data``; BackendError when the length is not a multiple of 4."""
    if len(data) % 4:
        raise OptimizerDispatchError.backend_error(
            f"{what} got {len(data)} bytes, not a multiple of 4. Fix: return whole u32 elements"
        )
    return [int(v) for v in np.frombuffer(bytes(data), dtype=_LE_U32)]


read_u32s = decode_u32_le


def decode_u32_output_exact(data: ByteBuf, expected: int, what: str, out: list[int]) -> None:
    """Decode exactly ``expected`` u32 values into ``out`` (cleared and refilled, same object)."""
    if len(data) != expected * 4:
        raise OptimizerDispatchError.backend_error(
            f"{what} expected an output of {expected} u32 values ({expected * 4} bytes), got "
            f"{len(data)} bytes. Fix: the dispatcher must return the whole output buffer"
        )
    out[:] = decode_u32_le(data, what)


def u32_slice_to_le_bytes(values: Sequence[int]) -> bytes:
    """Seed-compatible spelling of :func:`encode_u32_le`."""
    return encode_u32_le(values, "u32_slice_to_le_bytes")
