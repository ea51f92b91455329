"""Scalar data types of the IR."""

from __future__ import annotations

import enum

import numpy as np


class DataType(enum.IntEnum):
    """Element and value types. The integer value is the wire tag; never renumber."""

    BOOL = 1
    I32 = 2
    U32 = 3
    F32 = 4
    F64 = 5

    @property
    def size_bytes(self) -> int:
        return _SIZE[self]

    @property
    def np_dtype(self) -> np.dtype[np.generic]:
        return _NP_DTYPE[self]

    @property
    def is_float(self) -> bool:
        return self in (DataType.F32, DataType.F64)

    @property
    def is_int(self) -> bool:
        return self in (DataType.I32, DataType.U32)

    @property
    def is_numeric(self) -> bool:
        return self is not DataType.BOOL

    @property
    def short(self) -> str:
        """The printer's spelling: ``bool``, ``i32``, ``u32``, ``f32``, ``f64``."""
        return self.name.lower()

    @staticmethod
    def from_short(text: str) -> DataType:
        return DataType[text.upper()]

    @staticmethod
    def from_numpy(dtype: np.dtype[np.generic] | type) -> DataType:
        dt = np.dtype(dtype)
        for t, name in _NP.items():
            if np.dtype(name) == dt:
                return t
        raise KeyError(f"no vyre DataType for numpy dtype {dt}. Fix: convert to one of "
                       f"{sorted(set(_NP.values()))}")


_SIZE = {DataType.BOOL: 1, DataType.I32: 4, DataType.U32: 4, DataType.F32: 4, DataType.F64: 8}
_NP = {
    DataType.BOOL: "bool",
    DataType.I32: "int32",
    DataType.U32: "uint32",
    DataType.F32: "float32",
    DataType.F64: "float64",
}
_NP_DTYPE = {t: np.dtype(name) for t, name in _NP.items()}  # built once: the dispatch path asks often

NUMERIC = (DataType.I32, DataType.U32, DataType.F32, DataType.F64)
INTS = (DataType.I32, DataType.U32)
FLOATS = (DataType.F32, DataType.F64)
