"""Reverse-mode pieces for programs that synchronise (docs/autodiff.md, "Reductions").

* :func:`subgroup_adjoint`: the adjoint of a subgroup reduction or shuffle, run by every lane
  together (subgroup ops sit at uniform points, and so do their adjoints);
* :func:`zero_workgroup`: the zero fill of the adjoint workgroup buffers that starts a backward
  program (workgroup memory starts uninitialised).
"""

from __future__ import annotations

from ..ir.expr import (
    BinOp, Cast, Expr, LitU32, LocalId, Select, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, UnOp, Var, lit,
)
from ..ir.node import Assign, Barrier, If, Let, Loop, Node, Store
from ..ir.ops import BinOpKind, UnOpKind
from ..ir.program import Program
from ..ir.types import DataType
from .nf import Names


def _b(op: BinOpKind, a: Expr, b: Expr) -> BinOp:
    return BinOp(op, a, b)


def subgroup_adjoint(value: Expr, result: str, ty: DataType, d: Expr,
                     names: Names) -> tuple[list[Node], Expr, Expr]:
    """``(statements, operand, contribution)`` for ``result = value`` (a float subgroup op) with
    adjoint ``d`` (an atom): a sum's operand gets the sum of the lanes' adjoints; a min/max's,
    that sum split evenly over the lanes holding the winning value (a NaN lane gets nothing); a
    shuffle's, the adjoints of the lanes that read it (the inverse shuffle for ``lane ^ c`` with a
    constant ``c``, otherwise a 32-step gather over every lane's adjoint and source lane)."""
    fresh = names.fresh
    zero = lit(0.0, ty)
    match value:
        case SubgroupReduce(BinOpKind.ADD, v):
            tot = fresh("sgadj")
            return [Let(tot, SubgroupReduce(BinOpKind.ADD, d))], v, Var(tot)
        case SubgroupReduce(BinOpKind.MIN | BinOpKind.MAX, v):
            tot, win, bal = fresh("sgadj"), fresh("win"), fresh("ties")
            stmts: list[Node] = [Let(tot, SubgroupReduce(BinOpKind.ADD, d)),
                                 Let(win, _b(BinOpKind.EQ, v, Var(result))),
                                 Let(bal, SubgroupBallot(Var(win)))]
            share = _b(BinOpKind.DIV, Var(tot), Cast(ty, UnOp(UnOpKind.POPCOUNT, Var(bal))))
            return stmts, v, Select(Var(win), share, zero)
        case SubgroupShuffle(v, lane):
            match lane:
                case (BinOp(BinOpKind.BIT_XOR, SubgroupLocalId(), LitU32())
                      | BinOp(BinOpKind.BIT_XOR, LitU32(), SubgroupLocalId())):
                    back = fresh("sgadj")  # lane ^ c is its own inverse
                    return [Let(back, SubgroupShuffle(d, lane))], v, Var(back)
                case _:
                    acc, q, dq, sq = fresh("sgacc"), fresh("q"), fresh("dq"), fresh("sq")
                    gather: list[Node] = [Let(acc, zero), Loop(q, LitU32(0), LitU32(32), (
                        Let(dq, SubgroupShuffle(d, Var(q))),
                        Let(sq, SubgroupShuffle(_b(BinOpKind.BIT_AND, lane, LitU32(31)), Var(q))),
                        Assign(acc, _b(BinOpKind.ADD, Var(acc), Select(
                            _b(BinOpKind.EQ, Var(sq), SubgroupLocalId()), Var(dq), zero))),
                    ))]
                    return gather, v, Var(acc)
        case _:
            raise TypeError(f"no adjoint for the subgroup op {value!r}")


def zero_workgroup(adj_wg: dict[str, str], program: Program, names: Names) -> list[Node]:
    """Zero the adjoint workgroup buffers (workgroup memory starts uninitialised), then a barrier."""
    if not adj_wg:
        return []
    wx, wy, _ = program.workgroup_size
    n = program.workgroup_invocations
    local = _b(BinOpKind.ADD, LocalId(0), _b(BinOpKind.ADD, _b(BinOpKind.MUL, LocalId(1), LitU32(wx)),
                                           _b(BinOpKind.MUL, LocalId(2), LitU32(wx * wy))))
    out: list[Node] = []
    for w, a in adj_wg.items():
        decl = program.buffer(w)
        z, k = names.fresh("z"), names.fresh("zi")
        out.append(Loop(z, LitU32(0), LitU32(-(-decl.count // n)), (
            Let(k, _b(BinOpKind.ADD, _b(BinOpKind.MUL, Var(z), LitU32(n)), local)),
            If(_b(BinOpKind.LT, Var(k), LitU32(decl.count)), (Store(a, Var(k), lit(0.0, decl.element)),)),
        )))
    out.append(Barrier())
    return out


__all__ = ["subgroup_adjoint", "zero_workgroup"]
