"""The markers a kernel's signature and body name, kept import-light (``vyre`` imports them)."""

from __future__ import annotations

from typing import Any

from ..errors import FrontendError


# How each kind of buffer parameter is spelled (the BufRef kind the lowering checks uses).
_SPELLING = {"array": "Array", "uniform": "Uniform", "write_only": "WriteOnly"}


class _ArrayType:
    """``Array[T]``: the annotation of a buffer parameter (``T``: vyre.f32, vyre.u32, ...);
    ``Array[T, n]`` declares its length, so a call or dispatch that leaves a written one out gets
    it allocated, zero-filled (``total = k(x)["out"]`` for ``out: Array[f32, 1]``).

    ``Uniform[T]`` / ``Uniform[T, n]`` is a read-only uniform buffer (the same data for every
    invocation; storing into it is an error); ``WriteOnly[T]`` / ``WriteOnly[T, n]`` a returned
    buffer the kernel only stores into (loading from it is an error). ``kind`` says which."""

    def __init__(self, element: Any = None, count: int = 0, kind: str = "array") -> None:
        self.element = element
        self.count = count
        self.kind = kind

    @property
    def spelling(self) -> str:
        return _SPELLING[self.kind]

    def __getitem__(self, spec: Any) -> _ArrayType:
        if isinstance(spec, tuple) and len(spec) == 2:
            return _ArrayType(spec[0], spec[1], self.kind)
        return _ArrayType(spec, 0, self.kind)

    def __repr__(self) -> str:
        if self.element is None:
            return self.spelling
        # a resolved DataType (``.short``: f32) or the vyre.f32 marker a user wrote (``__name__``)
        name = getattr(self.element, "short", None) or getattr(self.element, "__name__", self.element)
        return f"{self.spelling}[{name}, {self.count}]" if self.count else f"{self.spelling}[{name}]"


Array = _ArrayType()
Uniform = _ArrayType(kind="uniform")
WriteOnly = _ArrayType(kind="write_only")


def workgroup_array(count: int, dtype: Any) -> None:
    """Inside a ``@vyre.kernel``: ``tile = vyre.workgroup_array(256, vyre.f32)`` declares workgroup
    memory of ``count`` elements per workgroup (a compile-time count)."""
    raise FrontendError("vyre.workgroup_array(...) declares workgroup memory inside a @vyre.kernel "
                        "function; it has no meaning outside one. Fix: with the builders, declare "
                        "vyre.ir.workgroup(name, count, F32)")
