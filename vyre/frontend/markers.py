"""The markers a kernel's signature and body name, kept import-light (``vyre`` imports them)."""

from __future__ import annotations

from typing import Any

from ..errors import FrontendError


class _ArrayType:
    """``Array[T]``: the annotation of a buffer parameter (``T``: vyre.f32, vyre.u32, ...)."""

    def __init__(self, element: Any = None) -> None:
        self.element = element

    def __getitem__(self, element: Any) -> _ArrayType:
        return _ArrayType(element)

    def __repr__(self) -> str:
        return "Array" if self.element is None else f"Array[{getattr(self.element, '__name__', self.element)}]"


Array = _ArrayType()


def workgroup_array(count: int, dtype: Any) -> None:
    """Inside a ``@vyre.kernel``: ``tile = vyre.workgroup_array(256, vyre.f32)`` declares workgroup
    memory of ``count`` elements per workgroup (a compile-time count)."""
    raise FrontendError("vyre.workgroup_array(...) declares workgroup memory inside a @vyre.kernel "
                        "function; it has no meaning outside one. Fix: with the builders, declare "
                        "vyre.ir.workgroup(name, count, F32)")
