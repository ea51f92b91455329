"""Hypothesis strategies for differentiable vyre programs (f64, smooth away from measure-zero sets).

A generated program has one invocation per element of ``out``. Each invocation loads its own
``x[i]``, ``y[i]``, a gather ``x[idx[i]]`` (``idx`` repeats indices, so many invocations scatter
into one gradient element) and a constant ``w[i]``; then runs random statements: lets, assigns,
ifs on float comparisons, selects, static loops (unrolled by autodiff) and dynamic loops (bound
read from ``nb[0]``, reversed by recomputation) with recurrences (products, Horner steps,
running max), sometimes an early ``Return``; and stores ``out[i]``.

Expressions only use ops that stay finite and smooth on any input: ``exp`` appears as
``exp(tanh(e))``, ``log`` as ``log(1 + e*e)``, ``sqrt`` as ``sqrt(1 + e*e)``, division as
``e / (2 + e*e)``. Inputs come from a seeded numpy generator (not from Hypothesis floats, which
would shrink towards kinks such as ``abs(0)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from vyre.ir import (
    F64, U32, BinOpKind, Expr, Node, Program, UnOpKind, assign, binop, buflen, f64, fma, gid, if_,
    let, loop, output, read, ret, select, store, unop, var,
)
from vyre.ir.expr import BinOp, LitU32, Load

N = 8
WG = 4
DYN_TRIPS = 3
CONSTS = (0.5, 1.5, -0.7, 2.0)


@dataclass
class Case:
    program: Program
    inputs: dict[str, np.ndarray]
    wrt: list[str]

    def __repr__(self) -> str:
        return f"Case(entry={self.program.entry!r})"


def make_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.uniform(-1.5, 1.5, N),
        "y": rng.uniform(-1.5, 1.5, N),
        "w": rng.uniform(-1.0, 1.0, N),
        "idx": rng.integers(0, 3, N).astype(np.uint32),  # many repeats
        "nb": np.array([DYN_TRIPS], dtype=np.uint32),
        "out": np.zeros(N),
    }


BUFFERS = [read("x", 0, F64), read("y", 1, F64), read("w", 2, F64), read("idx", 3, U32),
           read("nb", 4, U32), output("out", 5, F64)]


class _Gen:
    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.counter = 0

    def fresh(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def leaf(self, scope: list[str]) -> Expr:
        if scope and self.draw(st.integers(0, 4)) > 0:
            return var(self.draw(st.sampled_from(scope)))
        return f64(self.draw(st.sampled_from(CONSTS)))

    def expr(self, scope: list[str], depth: int) -> Expr:
        if depth <= 0:
            return self.leaf(scope)
        kind = self.draw(st.integers(0, 9))
        a = self.expr(scope, depth - 1)
        match kind:
            case 0:
                return a
            case 1:
                op = self.draw(st.sampled_from([UnOpKind.SIN, UnOpKind.COS, UnOpKind.TANH,
                                                UnOpKind.ATAN, UnOpKind.NEGATE, UnOpKind.ABS]))
                return unop(op, a)
            case 2:
                shape = self.draw(st.integers(0, 2))
                sq = binop(BinOpKind.ADD, f64(1.0), binop(BinOpKind.MUL, a, a))
                if shape == 0:
                    return unop(UnOpKind.EXP, unop(UnOpKind.TANH, a))
                return unop(UnOpKind.LOG if shape == 1 else UnOpKind.SQRT, sq)
            case 3:
                b = self.expr(scope, depth - 1)
                return binop(BinOpKind.DIV, a, binop(BinOpKind.ADD, f64(2.0), binop(BinOpKind.MUL, b, b)))
            case 4 | 5:
                b = self.expr(scope, depth - 1)
                bop = self.draw(st.sampled_from([BinOpKind.ADD, BinOpKind.SUB, BinOpKind.MUL,
                                                 BinOpKind.MIN, BinOpKind.MAX]))
                return binop(bop, a, b)
            case 6:
                b, c = self.expr(scope, depth - 1), self.expr(scope, depth - 1)
                return fma(a, b, c)
            case 7:
                b = self.expr(scope, depth - 1)
                c, d = self.leaf(scope), self.leaf(scope)
                return select(a.gt(b), c, d)
            case _:
                return self.leaf(scope)

    def stmts(self, scope: list[str], budget: int, depth: int, in_loop: bool,
              loop_var: Expr | None, top: bool) -> list[Node]:
        out: list[Node] = []
        for _ in range(self.draw(st.integers(1, budget))):
            kind = self.draw(st.integers(0, 9))
            if kind <= 2 or not scope:
                name = self.fresh()
                value = self.expr(scope, 2)
                if loop_var is not None and self.draw(st.booleans()):
                    # A load that moves with the loop variable (neighbours of i).
                    idx = BinOp(BinOpKind.MOD, BinOp(BinOpKind.ADD, gid(), loop_var), LitU32(N))
                    value = binop(BinOpKind.MUL, value, Load("x", idx))
                out.append(let(name, value))
                scope.append(name)
            elif kind <= 4:
                target = self.draw(st.sampled_from(scope))
                rec = self.draw(st.integers(0, 3))
                e = self.expr(scope, 1)
                t = var(target)
                if rec == 0:  # product recurrence
                    value = binop(BinOpKind.MUL, t, unop(UnOpKind.TANH, e))
                elif rec == 1:  # Horner step
                    value = fma(t, var("xi"), e)
                elif rec == 2:  # running max
                    value = binop(BinOpKind.MAX, t, e)
                else:
                    value = unop(UnOpKind.SIN, binop(BinOpKind.ADD, t, e))
                out.append(assign(target, value))
            elif kind == 5 and depth > 0:
                cond = self.expr(scope, 1).gt(f64(self.draw(st.sampled_from(CONSTS))))
                then = self.stmts(list(scope), 2, depth - 1, in_loop, loop_var, False)
                other = self.stmts(list(scope), 2, depth - 1, in_loop, loop_var, False)
                out.append(if_(cond, then, other))
            elif kind == 6 and depth > 0:
                lv = self.fresh()
                trips = self.draw(st.integers(1, 3))
                body = self.stmts(list(scope), 2, depth - 1, True, var(lv), False)
                out.append(loop(lv, 0, trips, body))
            elif kind == 7 and depth > 0:
                lv = self.fresh()
                body = self.stmts(list(scope), 2, depth - 1, True, var(lv), False)
                out.append(loop(lv, 0, Load("nb", LitU32(0)), body))
            elif kind == 8 and top and not in_loop:
                cond = self.expr(scope, 1).lt(f64(-0.9))
                out.append(if_(cond, [store("out", gid(), self.expr(scope, 1)), ret()]))
            else:
                name = self.fresh()
                out.append(let(name, self.expr(scope, 2)))
                scope.append(name)
        return out


@st.composite
def programs(draw: st.DrawFn) -> Case:
    """A random differentiable program with its inputs; differentiate ``out`` w.r.t. x and y."""
    g = _Gen(draw)
    i = gid()
    scope = ["xi", "yi", "gi", "wi"]
    body: list[Node] = [
        let("xi", Load("x", i)), let("yi", Load("y", i)),
        let("gi", Load("x", Load("idx", i))), let("wi", Load("w", i)),
    ]
    body += g.stmts(scope, 4, 2, False, None, True)
    body.append(store("out", i, g.expr(scope, 2)))
    prog = Program.wrapped(BUFFERS, WG, [if_(i.lt(buflen("out")), body)])
    seed = draw(st.integers(0, 2**31 - 1))
    return Case(prog, make_inputs(seed), ["x", "y"])
