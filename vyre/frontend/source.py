"""Reading a decorated function's source and pointing at it in errors.

The frontend never runs the function: it reads its text (``inspect``), parses it with ``ast`` and
reports problems against the user's file and line, Triton style::

    kernels.py:14:9: `while` loops have no IR meaning (their exit depends on data)
        while x[i] > 0.0:
        ^^^^^^^^^^^^^^^^^
    Fix: loop a fixed number of times with `for k in range(n):` and guard the body with `if`
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Any

from ..errors import FrontendError


@dataclass(frozen=True)
class Source:
    """A parsed function and where its text came from."""

    filename: str
    tree: ast.FunctionDef
    line_offset: int  # add to an ast line number to get the file's
    col_offset: int  # the indentation dedent removed

    def error(self, node: ast.AST | None, what: str, fix: str) -> FrontendError:
        """A :class:`FrontendError` for ``node`` (None: the function's ``def`` line)."""
        n: Any = node if node is not None and hasattr(node, "lineno") else self.tree
        line = n.lineno + self.line_offset
        col = n.col_offset + self.col_offset
        end_line = getattr(n, "end_lineno", None)
        end_col = getattr(n, "end_col_offset", None)
        text = linecache.getline(self.filename, line).rstrip("\n")
        if end_line == n.lineno and end_col is not None:
            width = max(1, end_col + self.col_offset - col)
        else:
            width = max(1, len(text) - col)
        shown = text.lstrip()
        lead = len(text) - len(shown)
        caret = " " * max(0, col - lead) + "^" * width
        msg = f"{self.filename}:{line}:{col + 1}: {what}\n    {shown}\n    {caret}\nFix: {fix}"
        return FrontendError(msg, self.filename, line, col + 1)


def read_source(fn: Any, decorator: str) -> Source:
    """Parse ``fn``'s definition; a FrontendError when its text cannot be read."""
    if not inspect.isfunction(fn):
        raise FrontendError(f"{decorator} decorates a Python function (def ...), got "
                            f"{type(fn).__name__}. Fix: put {decorator} directly above a `def`")
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except (OSError, TypeError) as e:
        raise FrontendError(
            f"cannot read the source of {fn.__qualname__} ({e}); {decorator} compiles a function "
            "from its text. Fix: define it in a .py file (not in an interactive prompt or exec)"
        ) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    if dedented == text:
        indent = 0
    try:
        module = ast.parse(dedented)
    except SyntaxError as e:  # a lambda or a decorator call spanning odd lines
        raise FrontendError(f"cannot parse the source of {fn.__qualname__}: {e.msg}. "
                            "Fix: decorate a plain `def` function") from None
    defs = [n for n in module.body if isinstance(n, ast.FunctionDef)]
    if not defs:
        raise FrontendError(f"{fn.__qualname__} is not a plain `def` function (async or lambda). "
                            f"Fix: write `def {fn.__name__}(...):` under {decorator}")
    linecache.checkcache(filename)
    return Source(filename, defs[0], first - 1, indent)
