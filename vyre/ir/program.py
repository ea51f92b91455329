"""Buffers and programs."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .expr import ExprLike, FunctionDef, Load, as_expr
from .node import Node
from .types import DataType

if TYPE_CHECKING:
    from ..errors import Diagnostic


class BufferAccess(enum.IntEnum):
    """How a kernel may use a buffer. The value is the wire tag; never renumber."""

    READ_ONLY = 1
    READ_WRITE = 2
    UNIFORM = 3
    WRITE_ONLY = 4
    WORKGROUP = 5

    @property
    def readable(self) -> bool:
        return self is not BufferAccess.WRITE_ONLY

    @property
    def writable(self) -> bool:
        return self in (BufferAccess.READ_WRITE, BufferAccess.WRITE_ONLY, BufferAccess.WORKGROUP)


@dataclass(frozen=True, slots=True)
class BufferDecl:
    """A buffer the program uses.

    ``count`` is the element count: 0 means "sized by the array passed at dispatch" for storage
    buffers, and is required (> 0) for workgroup buffers, which live per workgroup. ``is_output``
    marks buffers whose contents dispatch returns."""

    name: str
    binding: int
    access: BufferAccess
    element: DataType
    count: int = 0
    is_output: bool = False

    @staticmethod
    def storage(name: str, binding: int, access: BufferAccess, element: DataType) -> BufferDecl:
        """A storage buffer of any access: ``storage("w", 3, BufferAccess.WRITE_ONLY, F32)``."""
        return BufferDecl(name, binding, access, element)

    @staticmethod
    def read(name: str, binding: int, element: DataType) -> BufferDecl:
        """A read-only input buffer: ``x = read("x", 0, F32)``."""
        return BufferDecl(name, binding, BufferAccess.READ_ONLY, element)

    @staticmethod
    def read_write(name: str, binding: int, element: DataType) -> BufferDecl:
        """A buffer the kernel reads and writes, not returned: ``acc = read_write("acc", 2, U32)``."""
        return BufferDecl(name, binding, BufferAccess.READ_WRITE, element)

    @staticmethod
    def output(name: str, binding: int, element: DataType) -> BufferDecl:
        """A read-write buffer dispatch returns: ``out = output("out", 1, F32)``."""
        return BufferDecl(name, binding, BufferAccess.READ_WRITE, element, is_output=True)

    @staticmethod
    def uniform(name: str, binding: int, element: DataType) -> BufferDecl:
        """Read-only data the same for every invocation; of count 1 it is a scalar parameter that
        dispatch also takes as a number: ``a = uniform("a", 0, F32).with_count(1)``."""
        return BufferDecl(name, binding, BufferAccess.UNIFORM, element)

    @staticmethod
    def workgroup(name: str, count: int, element: DataType) -> BufferDecl:
        """Workgroup (shared) memory of ``count`` elements per workgroup: ``workgroup("tile", 256, F32)``."""
        return BufferDecl(name, 0, BufferAccess.WORKGROUP, element, count=count)

    def with_count(self, n: int) -> BufferDecl:
        """The same buffer with a declared element count: ``output("out", 1, F32).with_count(1)``."""
        return replace(self, count=n)

    def as_output(self, is_output: bool = True) -> BufferDecl:
        """The same buffer marked as returned by dispatch: ``read_write("acc", 2, U32).as_output()``."""
        return replace(self, is_output=is_output)

    def __getitem__(self, index: ExprLike) -> Load:
        """``x[i]`` builds ``Load(x.name, i)``."""
        return Load(self.name, as_expr(index, DataType.U32))

    @property
    def is_workgroup(self) -> bool:
        return self.access is BufferAccess.WORKGROUP


@dataclass(frozen=True, slots=True)
class Program:
    """A kernel: buffers, a workgroup size (x, y, z), the entry statements and the functions its
    ``Call`` expressions name. Immutable; passes return new programs."""

    buffers: tuple[BufferDecl, ...]
    workgroup_size: tuple[int, int, int]
    entry: tuple[Node, ...]
    functions: tuple[FunctionDef, ...] = ()
    # The fingerprint, computed once per object (the object is immutable); not part of equality.
    _fingerprint: bytes | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    @staticmethod
    def wrapped(
        buffers: Iterable[BufferDecl],
        workgroup_size: int | Sequence[int],
        entry: Iterable[Node],
        functions: Iterable[FunctionDef] | None = None,
    ) -> Program:
        """Build a program from lists; functions default to those its calls name in the registry."""
        wg = (workgroup_size,) if isinstance(workgroup_size, int) else tuple(workgroup_size)
        wg3 = (*(int(v) for v in wg), 1, 1, 1)[:3]
        body = tuple(entry)
        if functions is None:
            from .functions import functions_for

            fns = functions_for(body)
        else:
            fns = tuple(functions)
        return Program(tuple(buffers), (wg3[0], wg3[1], wg3[2]), body, fns)

    def buffer(self, name: str) -> BufferDecl:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(f"program has no buffer named {name!r}. Fix: use one of "
                       f"{[b.name for b in self.buffers]}")

    def function(self, op_id: str) -> FunctionDef:
        for f in self.functions:
            if f.op_id == op_id:
                return f
        raise KeyError(f"program carries no function {op_id!r}. Fix: register it with "
                       "vyre.ir.functions.register_function before building the program")

    @property
    def workgroup_invocations(self) -> int:
        x, y, z = self.workgroup_size
        return x * y * z

    @property
    def outputs(self) -> tuple[BufferDecl, ...]:
        return tuple(b for b in self.buffers if b.is_output)

    def diagnostics(self) -> list[Diagnostic]:
        """Every validation finding (empty when valid)."""
        from .validate import diagnostics

        return diagnostics(self)

    def validate(self) -> Program:
        """Raise :class:`vyre.errors.ValidationError` listing every problem; return self if valid."""
        from ..errors import ValidationError

        diags = self.diagnostics()
        if diags:
            raise ValidationError(diags)
        return self

    def to_wire(self) -> bytes:
        from .wire import to_wire

        return to_wire(self)

    @staticmethod
    def from_wire(data: bytes) -> Program:
        from .wire import from_wire

        return from_wire(data)

    def fingerprint(self) -> bytes:
        """blake3 of the canonical encoding (buffer declaration order does not matter); computed
        once per object."""
        fp = self._fingerprint
        if fp is None:
            from .wire import fingerprint

            fp = fingerprint(self)
            object.__setattr__(self, "_fingerprint", fp)
        return fp

    def __str__(self) -> str:
        from .printer import print_program

        return print_program(self)


def program_of(obj: object, err: type[Exception]) -> Program:
    """``obj`` if it is a Program, else its ``.program`` (a ``@vyre.kernel`` function); anything else
    raises ``err`` (the caller's error kind) with a fix. The one place every entry point that takes
    "a program or a kernel" resolves it."""
    if isinstance(obj, Program):
        return obj
    prog = getattr(obj, "program", None)
    if isinstance(prog, Program):
        return prog
    raise err(f"expected a vyre Program or a @vyre.kernel function, got {type(obj).__name__}. "
              "Fix: pass kernel.program or a Program")
