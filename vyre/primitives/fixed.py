"""16.16 fixed point on u32 bit patterns (docs/semantics.md, ``FixedMulQ16``).

Values travel as u32 bit patterns; arithmetic reads them as signed i32 where the sign matters.
These are the exact integer oracles every backend must match bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import PrimitiveError

Q16_SHIFT = 16
Q16_ONE = 1 << Q16_SHIFT
U32_MASK = 0xFFFF_FFFF
U32_LIMIT = 1 << 32


def wrap_u32(value: int) -> int:
    """``value`` modulo 2^32, as the u32 bit pattern."""
    return value & U32_MASK


def as_i32(bits: int) -> int:
    """The u32 bit pattern ``bits`` read as a two's-complement i32."""
    b = bits & U32_MASK
    return b - U32_LIMIT if b & 0x8000_0000 else b


def fmul_q16(a: int, b: int) -> int:
    """``((i64)a * (i64)b) >> 16`` with both bit patterns read as signed, arithmetic shift, the
    result wrapped to a u32 bit pattern. Python's ``>>`` on ints is arithmetic (floor), which is
    exactly the two's-complement shift of the 64-bit product."""
    return wrap_u32((as_i32(a) * as_i32(b)) >> Q16_SHIFT)


def add_u32(a: int, b: int) -> int:
    return wrap_u32(a + b)


def sub_u32(a: int, b: int) -> int:
    return wrap_u32(a - b)


def to_q16(value: float) -> int:
    """Nearest 16.16 value of ``value`` as a u32 bit pattern (round half away from zero).

    Raises :class:`PrimitiveError` for NaN, infinities and values outside the i32 16.16 range."""
    if value != value or value in (float("inf"), float("-inf")):
        raise PrimitiveError(f"to_q16 got {value!r}, expected a finite number. Fix: filter NaN/inf first")
    scaled = value * Q16_ONE
    q = int(scaled + 0.5) if scaled >= 0 else -int(-scaled + 0.5)
    if not -(2**31) <= q <= 2**31 - 1:
        raise PrimitiveError(
            f"to_q16 got {value!r}, outside the 16.16 range [-32768, 32768). "
            "Fix: rescale the value before converting"
        )
    return wrap_u32(q)


def from_q16(bits: int) -> float:
    """The real value of the 16.16 bit pattern ``bits`` (read as signed)."""
    return as_i32(bits) / Q16_ONE


def to_q16_list(values: Iterable[float]) -> list[int]:
    return [to_q16(v) for v in values]


def from_q16_list(values: Iterable[int]) -> list[float]:
    return [from_q16(v) for v in values]
