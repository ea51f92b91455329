"""Random kernel bodies with locals, reassignment, augmented assignment, if/else (including locals
assigned in both branches, which outlive the if) and counted loops, compiled through @vyre.kernel,
against a vectorised numpy evaluation of the same statements under vyre's semantics."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_frontend_props import (
    CMP_OPS, DTYPES, FLOAT_OPS, INT_OPS, Node, _binop, _exprs, _values, compile_kernel, evaluate, render,
)

Stmt = tuple[Any, ...]


@dataclass
class _Gen:
    t: str
    names: itertools.count = field(default_factory=itertools.count)

    def fresh(self, prefix: str = "v") -> str:
        return f"{prefix}{next(self.names)}"


def _aug_ops(t: str) -> list[str]:
    ops = [o for o in (FLOAT_OPS if t == "f32" else INT_OPS) if o not in ("min", "max")]
    return ops


@st.composite
def _block(draw: st.DrawFn, g: _Gen, visible: tuple[str, ...], depth: int, must: tuple[str, ...] = ()
           ) -> tuple[list[Stmt], tuple[str, ...]]:
    """Statements over ``visible`` locals; returns them and the locals visible after the block
    (``must``: names this block has to bind at its top level, at some point)."""
    out: list[Stmt] = []
    vis = list(visible)
    pending = list(must)
    n = draw(st.integers(1, 4 if depth == 0 else 3))
    for _ in range(n + len(pending)):
        kinds = ["let", "set", "aug"] + (["if", "for"] if depth < 2 else [])
        kind = draw(st.sampled_from(kinds))
        if pending and draw(st.booleans()):
            kind = "must"
        expr = _exprs(g.t, tuple(vis), max_leaves=5)
        if kind in ("let", "must"):
            name = pending.pop() if kind == "must" and pending else g.fresh()
            out.append(("let", name, draw(expr)))
            if name not in vis:
                vis.append(name)
        elif kind == "set":
            out.append(("set", draw(st.sampled_from(vis)), draw(expr)))
        elif kind == "aug":
            out.append(("aug", draw(st.sampled_from(vis)), draw(st.sampled_from(_aug_ops(g.t))), draw(expr)))
        elif kind == "if":
            cond = ("cmp", draw(st.sampled_from(CMP_OPS)), draw(expr), draw(expr))
            shared = tuple(g.fresh("s") for _ in range(draw(st.integers(0, 2))))
            in_then = tuple(x for x in shared if draw(st.booleans()))
            in_else = tuple(x for x in shared if draw(st.booleans()))
            then, _ = draw(_block(g, tuple(vis), depth + 1, in_then))
            other, _ = draw(_block(g, tuple(vis), depth + 1, in_else))
            out.append(("if", cond, then, other))
            vis += [x for x in shared if x in in_then and x in in_else]
        else:
            k = g.fresh("k")
            kv = g.fresh("kv")
            body, _ = draw(_block(g, (*vis, kv), depth + 1))
            out.append(("for", k, kv, draw(st.integers(0, 3)), body))
    for name in pending:  # still owed
        out.append(("let", name, draw(_exprs(g.t, tuple(vis), max_leaves=3))))
        if name not in vis:
            vis.append(name)
    return out, tuple(vis)


@st.composite
def programs(draw: st.DrawFn) -> tuple[str, list[Stmt], Node, list[Any], list[Any]]:
    t = draw(st.sampled_from(list(DTYPES)))
    g = _Gen(t)
    body, vis = draw(_block(g, ("x", "y"), 0))
    result = draw(_exprs(t, vis, max_leaves=6))
    return t, body, result, draw(_values(t)), draw(_values(t))


def render_block(stmts: list[Stmt], t: str, indent: str) -> list[str]:
    lines: list[str] = []
    for s in stmts:
        match s:
            case ("let", name, e) | ("set", name, e):
                lines.append(f"{indent}{name} = {render(e)}")
            case ("aug", name, op, e):
                lines.append(f"{indent}{name} {op}= {render(e)}")
            case ("if", cond, then, other):
                lines.append(f"{indent}if {render(cond)}:")
                lines += render_block(then, t, indent + "    ") or [indent + "    pass"]
                lines.append(f"{indent}else:")
                lines += render_block(other, t, indent + "    ") or [indent + "    pass"]
            case ("for", k, kv, n, body):
                lines.append(f"{indent}for {k} in range({n}):")
                cast = k if t == "u32" else f"vyre.{t}({k})"
                lines.append(f"{indent}    {kv} = {cast}")
                lines += render_block(body, t, indent + "    ")
    return lines


def run_block(stmts: list[Stmt], env: dict[str, np.ndarray], t: str) -> dict[str, np.ndarray]:
    """Evaluate on every invocation at once: both arms of an if, merged with the condition."""
    dt = DTYPES[t]
    env = dict(env)
    for s in stmts:
        match s:
            case ("let", name, e) | ("set", name, e):
                env[name] = evaluate(e, env, t)
            case ("aug", name, op, e):
                with np.errstate(all="ignore"):
                    env[name] = _binop(op, env[name], evaluate(e, env, t), t).astype(dt)
            case ("if", cond, then, other):
                c = evaluate(cond, env, t)
                a, b = run_block(then, env, t), run_block(other, env, t)
                merged = {k: env[k] for k in env}
                for k in set(a) & set(b):
                    merged[k] = np.where(c, a[k], b[k]).astype(dt)
                env = merged
            case ("for", _k, kv, n, body):
                for j in range(n):
                    inner = run_block(body, {**env, kv: np.full(env["x"].shape, j, dt)}, t)
                    env = {k: inner[k] for k in env}
    return env


def check(case: tuple[str, list[Stmt], Node, list[Any], list[Any]], backend: str) -> None:
    t, body, result, xs, ys = case
    dt = DTYPES[t]
    a, b = np.array(xs, dtype=dt), np.array(ys, dtype=dt)
    lines = render_block(body, t, "        ")
    k = compile_kernel(t, render(result), lines)
    got = k(a, b, np.zeros(8, dt), backend=backend)["out"]
    want = evaluate(result, run_block(body, {"x": a, "y": b}, t), t)
    np.testing.assert_array_equal(got, want, err_msg="\n".join(lines) + f"\n-> {render(result)}\n{k.program}")


@settings(max_examples=40)
@given(programs())
def test_random_kernel_bodies_match_numpy_on_the_interpreter(
        case: tuple[str, list[Stmt], Node, list[Any], list[Any]]) -> None:
    check(case, "interp")
