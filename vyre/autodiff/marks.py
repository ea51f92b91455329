"""Which outputs one invocation may store to twice (reverse mode's ``stored_<out>`` flags).

Only the last store (in forward order) of an element receives its cotangent. When every pair of
store sites of an output is provably to different elements (``base + c1`` vs ``base + c2``) or on
exclusive branches of one ``If``, and none is inside a loop that was not unrolled, no flags are
needed (docs/autodiff.md, "Outputs stored more than once").
"""

from __future__ import annotations

from ..ir.expr import BinOp, Expr, LitU32
from ..ir.ops import BinOpKind
from .nf import NIf, NLoop, NStmt, NStore


def _split_const(e: Expr) -> tuple[Expr, int]:
    """``e`` as ``base + constant`` (u32 wrap-around), peeling literal terms."""
    if isinstance(e, BinOp) and e.op in (BinOpKind.ADD, BinOpKind.SUB):
        if isinstance(e.right, LitU32):
            base, c = _split_const(e.left)
            k = e.right.value if e.op is BinOpKind.ADD else -e.right.value
            return base, (c + k) % 2**32
        if isinstance(e.left, LitU32) and e.op is BinOpKind.ADD:
            base, c = _split_const(e.right)
            return base, (c + e.left.value) % 2**32
    if isinstance(e, LitU32):
        return LitU32(0), e.value
    return e, 0


def _store_sites(stmts: tuple[NStmt, ...], buf: str, path: tuple[tuple[int, int], ...],
                 in_loop: bool, out: list[tuple[Expr, tuple[tuple[int, int], ...], bool]],
                 counter: list[int]) -> None:
    for s in stmts:
        match s:
            case NStore(b, idx, _) if b == buf:
                out.append((idx, path, in_loop))
            case NIf(_, t, o, _):
                counter[0] += 1
                me = counter[0]
                _store_sites(t, buf, (*path, (me, 0)), in_loop, out, counter)
                _store_sites(o, buf, (*path, (me, 1)), in_loop, out, counter)
            case NLoop(_, _, _, body, _):
                _store_sites(body, buf, path, True, out, counter)
            case _:
                pass


def needs_marks(stmts: tuple[NStmt, ...], buf: str) -> bool:
    """Whether one invocation might store to the same element of ``buf`` twice."""
    sites: list[tuple[Expr, tuple[tuple[int, int], ...], bool]] = []
    _store_sites(stmts, buf, (), False, sites, [0])
    if any(in_loop for _, _, in_loop in sites):
        return True
    for x in range(len(sites)):
        for y in range(x + 1, len(sites)):
            (ia, pa, _), (ib, pb, _) = sites[x], sites[y]
            exclusive = any(ka == kb and ba != bb for ka, ba in pa for kb, bb in pb)
            ba_, ca = _split_const(ia)
            bb_, cb = _split_const(ib)
            if not exclusive and not (ba_ == bb_ and ca != cb):
                return True
    return False


__all__ = ["needs_marks"]
