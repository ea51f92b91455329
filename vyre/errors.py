"""The error hierarchy.

Every error vyre raises on bad input is a :class:`VyreError`. Messages say what was found, what was
expected, and end with ``Fix: ...``. Codes are stable strings (``V001``...) so tests and tools can
match on them without parsing prose.
"""

from __future__ import annotations

from dataclasses import dataclass


class VyreError(Exception):
    """Base of every error vyre raises for a problem the caller can fix."""


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One validation finding: a stable code, where it is, and the message (with ``Fix:``)."""

    code: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"[{self.code}] at {self.path}: {self.message}"


class ValidationError(VyreError):
    """A program is malformed. Carries every finding, not only the first."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = list(diagnostics)
        lines = [f"program is invalid ({len(self.diagnostics)} problem(s)):"]
        lines += [f"  {d}" for d in self.diagnostics]
        super().__init__("\n".join(lines))

    @property
    def codes(self) -> list[str]:
        return [d.code for d in self.diagnostics]


class WireError(VyreError):
    """Bytes handed to ``Program.from_wire`` are not a valid encoding."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        self.offset = offset
        where = f" (at byte {offset})" if offset is not None else ""
        super().__init__(f"{message}{where}")


class ParseError(VyreError):
    """Text handed to ``vyre.ir.parser.parse_program`` is not a program (line:column, caret, Fix:)."""


class InterpError(VyreError):
    """The reference interpreter was asked to run something it cannot (bad inputs, runaway loop)."""


class CodegenError(VyreError):
    """A program cannot be lowered to the requested target."""


class DispatchError(VyreError):
    """Inputs, backend or launch geometry handed to dispatch are wrong."""


class AutodiffError(VyreError):
    """A program cannot be differentiated correctly; the message names the node and the fix."""


class TunerError(VyreError):
    """Autotuner cache or policy problems."""


class BuildError(VyreError, TypeError):
    """An IR builder or operator was given something it cannot build (``x // 2.0``, a Python bool
    as a condition). Also a ``TypeError``, which these cases raised before it existed."""


class FrontendError(VyreError):
    """A ``@vyre.kernel`` / ``@vyre.func`` function uses Python the IR cannot express. The message
    points at the user's file and line with a caret and ends with ``Fix: ...``; ``filename``,
    ``lineno`` and ``col`` say where."""

    def __init__(self, message: str, filename: str = "<unknown>", lineno: int = 0, col: int = 0) -> None:
        self.filename, self.lineno, self.col = filename, lineno, col
        super().__init__(message)
