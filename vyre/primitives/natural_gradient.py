"""Natural-gradient block apply: ``out = M · g`` in 16.16 fixed point, as an IR program.

The autotuner preconditions its gradient with the inverse square root of a Fisher block
(``vyre.self_substrate.natural_gradient_autotuner``); this module owns the kernel and its
references: a float one and an exact integer oracle that every backend matches bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Node, U32, Program, fixed_mul, gid, if_, let, load, loop, output, read, store, u32, var
from ..ir.builder import assign
from .errors import PrimitiveError
from .fixed import Q16_ONE, U32_LIMIT, add_u32, fmul_q16

WORKGROUP = 256


def checked_square(n: int, what: str) -> int:
    """``n * n`` for a u32 buffer count; :class:`PrimitiveError` when ``n`` is 0 or ``n*n``
    does not fit a u32 element count."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise PrimitiveError(
            f"{what} got n={n!r}, expected a positive int. Fix: pass the block dimension n >= 1"
        )
    cells = n * n
    if cells >= U32_LIMIT:
        raise PrimitiveError(
            f"{what} got n={n}: n*n={cells} exceeds the u32 buffer-count limit 2^32-1. "
            "Fix: split the Fisher block into smaller blocks (n <= 65535)"
        )
    return cells


def natural_gradient_block_apply(m_name: str, g_name: str, out_name: str, n: int) -> Program:
    """``out[row] = Σ_j fmul_q16(M[row*n + j], g[j])`` with wrapping accumulation.

    Buffers in declaration order: ``M`` (u32, n·n, read), ``g`` (u32, n, read), ``out`` (u32, n,
    output). Workgroup 256, one invocation per row; invocations past ``n`` do nothing."""
    cells = checked_square(n, "natural_gradient_block_apply")
    names = (m_name, g_name, out_name)
    if len(set(names)) != 3:
        raise PrimitiveError(
            f"natural_gradient_block_apply got buffer names {names}, expected three distinct names. "
            "Fix: rename the buffers"
        )
    m = read(m_name, 0, U32).with_count(cells)
    g = read(g_name, 1, U32).with_count(n)
    out = output(out_name, 2, U32).with_count(n)
    row, j, acc = gid(), var("j"), var("acc")
    body: list[Node] = [
        let("acc", u32(0)),
        loop("j", u32(0), u32(n), [
            assign("acc", acc + fixed_mul(load(m, row * u32(n) + j), load(g, j))),
        ]),
        store(out, row, acc),
    ]
    return Program.wrapped([m, g, out], WORKGROUP, [if_(row.lt(u32(n)), body)])


def _check_lengths(m_len: int, g_len: int, n: int, what: str) -> None:
    cells = checked_square(n, what)
    if m_len != cells:
        raise PrimitiveError(f"{what} requires len(m) == n*n, got len={m_len}, n={n}, n*n={cells}. "
                             "Fix: pass a row-major n x n matrix")
    if g_len != n:
        raise PrimitiveError(f"{what} requires len(g) == n, got len={g_len}, n={n}. "
                             "Fix: pass a length-n gradient")


def natural_gradient_block_apply_cpu(m: Sequence[float], g: Sequence[float], n: int) -> list[float]:
    """Float reference: the row-major ``n x n`` matrix ``m`` times ``g``."""
    _check_lengths(len(m), len(g), n, "natural_gradient_block_apply_cpu")
    return [sum(m[r * n + j] * g[j] for j in range(n)) for r in range(n)]


def natural_gradient_block_apply_exact(m: Sequence[int], g: Sequence[int], n: int) -> list[int]:
    """Exact integer oracle of :func:`natural_gradient_block_apply` on u32 bit patterns."""
    _check_lengths(len(m), len(g), n, "natural_gradient_block_apply_exact")
    out = []
    for r in range(n):
        acc = 0
        for j in range(n):
            acc = add_u32(acc, fmul_q16(m[r * n + j], g[j]))
        out.append(acc)
    return out


def identity_fisher_q16(n: int) -> list[int]:
    """The row-major ``n x n`` identity in 16.16: the Fisher block that makes the natural gradient
    the plain one (the seed's launch path always passed it)."""
    out = [0] * (n * n)
    for i in range(n):
        out[i * n + i] = Q16_ONE
    return out
