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
import types
import linecache
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


_modules: dict[str, tuple[str, ast.Module]] = {}  # filename -> (text, its AST): one parse per file


def _module_ast(filename: str, text: str) -> ast.Module:
    hit = _modules.get(filename)
    if hit is not None and hit[0] == text:
        return hit[1]
    tree = ast.parse(text, filename)
    _modules[filename] = (text, tree)
    return tree


def read_source(fn: Any, decorator: str) -> Source:
    """The ``def`` of ``fn`` in its file's AST (the file is parsed once and cached); a
    FrontendError when its text cannot be read."""
    if not isinstance(fn, types.FunctionType):
        raise FrontendError(f"{decorator} decorates a Python function (def ...), got "
                            f"{type(fn).__name__}. Fix: put {decorator} directly above a `def`")
    code = fn.__code__
    filename = code.co_filename
    lines = linecache.getlines(filename, fn.__globals__)
    if not lines:
        raise FrontendError(
            f"cannot read the source of {fn.__qualname__}; {decorator} compiles a function from its "
            "text. Fix: define it in a .py file (not in an interactive prompt or exec)")
    try:
        module = _module_ast(filename, "".join(lines))
    except SyntaxError as e:
        raise FrontendError(f"cannot parse {filename}: {e.msg}. Fix: check that the file on disk is the "
                            "one that was imported") from None
    first = code.co_firstlineno  # the first decorator's line for a decorated function
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == fn.__name__ and \
                min([node.lineno, *(d.lineno for d in node.decorator_list)]) == first:
            return Source(filename, node, 0, 0)
    raise FrontendError(f"cannot find the source of {fn.__qualname__} in {filename} (async def, lambda, "
                        f"or a file changed since import). Fix: write `def {fn.__name__}(...):` under "
                        f"{decorator} and re-import")
