"""Op-table programs shared by the backend parity tests (CPU here, simulator and PTX in subprocesses).

One program per operand type applies every applicable op elementwise to edge-value pairs and writes
op k's results to ``out[k * n + i]``, so a whole table costs one compilation per type.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from vyre.ir import (
    BINOP_RULES, UNOP_RULES, BinOp, BufferDecl, Cast, DataType, Program, UnOp, gid, if_, let, output,
    read, store, var,
)

EDGE: dict[DataType, list[float | int | bool]] = {
    DataType.BOOL: [False, True],
    DataType.I32: [0, 1, -1, 2, -2, 7, -7, 31, 32, 33, 2**31 - 1, -(2**31), 123456, -98765, 65536, -65536],
    DataType.U32: [0, 1, 2, 7, 31, 32, 33, 2**31 - 1, 2**31, 2**32 - 1, 123456, 65536, 0xDEADBEEF],
    DataType.F32: [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.75, 1e-40, -1e-40, 1e30, -1e30,
                   3e9, -3e9, 4294967295.0, 2147483648.0, math.inf, -math.inf, math.nan, 0.1, 100.25],
    DataType.F64: [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.75, 5e-324, 1e300, -1e300,
                   3e9, -3e9, 4294967295.5, 2147483647.5, -2147483648.5, math.inf, -math.inf, math.nan, 0.1],
}

TYPES = (DataType.BOOL, DataType.I32, DataType.U32, DataType.F32, DataType.F64)


def binop_table(t: DataType) -> tuple[Program, dict[str, np.ndarray], list[tuple[str, DataType]]]:
    """All binops accepting ``t``, over every ordered pair of edge values."""
    ops = [op for op, rule in BINOP_RULES.items() if t in rule.operands]
    pairs = list(itertools.product(EDGE[t], repeat=2))
    a = np.array([p[0] for p in pairs], dtype=t.np_dtype)
    b = np.array([p[1] for p in pairs], dtype=t.np_dtype)
    return _table(t, [(op.name, BINOP_RULES[op].result_for(t), BinOp(op, var("va"), var("vb"))) for op in ops],
                  {"a": a, "b": b})


def unop_table(t: DataType) -> tuple[Program, dict[str, np.ndarray], list[tuple[str, DataType]]]:
    ops = [op for op, rule in UNOP_RULES.items() if t in rule.operands]
    a = np.array(EDGE[t], dtype=t.np_dtype)
    return _table(t, [(op.name, UNOP_RULES[op].result_for(t), UnOp(op, var("va"))) for op in ops], {"a": a})


def cast_table(t: DataType) -> tuple[Program, dict[str, np.ndarray], list[tuple[str, DataType]]]:
    a = np.array(EDGE[t], dtype=t.np_dtype)
    return _table(t, [(f"CAST_{u.name}", u, Cast(u, var("va"))) for u in TYPES], {"a": a})


def _table(t: DataType, exprs: list, arrays: dict[str, np.ndarray]):
    """One output buffer per result type; entry k of ``layout`` names op k and its buffer."""
    n = len(next(iter(arrays.values())))
    by_type: dict[DataType, list[int]] = {}
    for k, (_, rt, _) in enumerate(exprs):
        by_type.setdefault(rt, []).append(k)
    bufs: list[BufferDecl] = [read(name, i, t) for i, name in enumerate(arrays)]
    outs = {rt: output(f"out_{rt.short}", len(bufs) + j, rt).with_count(n * len(ks))
            for j, (rt, ks) in enumerate(sorted(by_type.items()))}
    i = var("i")
    body = [let(f"v{name}", BufferDecl.__getitem__(bufs[j], i)) for j, name in enumerate(arrays)]
    layout: list[tuple[str, DataType, int]] = []
    for rt, ks in sorted(by_type.items()):
        for slot, k in enumerate(ks):
            body.append(store(outs[rt], i + slot * n, exprs[k][2]))
            layout.append((exprs[k][0], rt, slot))
    prog = Program.wrapped([*bufs, *outs.values()], 64, [let("i", gid()), if_(i.lt(n), body)])
    return prog, arrays, layout


def all_tables():
    for t in TYPES:
        yield f"binop_{t.short}", binop_table(t)
        if any(t in r.operands for r in UNOP_RULES.values()):
            yield f"unop_{t.short}", unop_table(t)
        yield f"cast_{t.short}", cast_table(t)
    yield "subgroup", subgroup_table()


TRANSCENDENTAL = {"POW", "EXP", "EXP2", "LOG", "LOG2", "SIN", "COS", "TAN", "ASIN", "ACOS", "ATAN", "SINH", "COSH",
                  "TANH", "SQRT", "INVERSE_SQRT"}


def compare(name: str, got: dict[str, np.ndarray], ref: dict[str, np.ndarray],
            layout: list[tuple[str, DataType, int]], n: int) -> list[str]:
    """Differences between two runs of a table program; empty when they agree under the semantics."""
    problems = []
    names = {(f"out_{rt.short}", slot): op for op, rt, slot in layout}
    for key in ref:
        g, r = got[key], ref[key]
        if g.dtype.kind in "iub":
            bad = np.nonzero(g != r)[0]
        else:
            rtol = 1e-12 if g.dtype == np.float64 else 4e-6
            both_nan = np.isnan(g) & np.isnan(r)
            close = np.isclose(g.astype(np.float64), r.astype(np.float64), rtol=rtol, atol=1e-300) | both_nan
            bad = np.nonzero(~close)[0]
        for i in bad[:5]:
            op = names.get((key, int(i) // n), "?")
            problems.append(f"{name} {op} element {int(i) % n}: got {g[i]!r}, reference {r[i]!r}")
    return problems


def subgroup_table() -> tuple[Program, dict[str, np.ndarray], list[tuple[str, DataType, int]]]:
    """Every subgroup op on every type it takes (64 invocations = two subgroups)."""
    from vyre.ir import SUBGROUP_REDUCE_OPS, ballot, lane, shuffle, subgroup_reduce

    n = 64
    rng = np.random.default_rng(7)
    arrays: dict[str, np.ndarray] = {}
    bufs: list[BufferDecl] = []
    body: list = [let("i", gid())]
    results: list[tuple[str, DataType, object]] = []
    for t in (DataType.I32, DataType.U32, DataType.F32, DataType.F64, DataType.BOOL):
        name = f"in_{t.short}"
        if t is DataType.BOOL:
            arrays[name] = rng.integers(0, 2, n).astype(bool)
        elif t.is_float:
            arrays[name] = rng.integers(-50, 50, n).astype(t.np_dtype)  # exact sums in any order
        else:
            arrays[name] = np.array(rng.choice(EDGE[t], n), dtype=t.np_dtype)
        bufs.append(read(name, len(bufs), t).with_count(n))
        v = f"v_{t.short}"
        body.append(let(v, bufs[-1][var("i")]))
        for op, rule in SUBGROUP_REDUCE_OPS.items():
            if t in rule.operands:
                results.append((f"reduce_{op.name}_{t.short}", t, subgroup_reduce(op, var(v))))
        results.append((f"shuffle_{t.short}", t, shuffle(var(v), (lane() * 7 + 3) & 31)))
    results.append(("ballot", DataType.U32, ballot(var("v_bool"))))
    by_type: dict[DataType, list[int]] = {}
    for k, (_, rt, _) in enumerate(results):
        by_type.setdefault(rt, []).append(k)
    outs = {rt: output(f"out_{rt.short}", len(bufs) + j, rt).with_count(n * len(ks))
            for j, (rt, ks) in enumerate(sorted(by_type.items()))}
    layout = []
    stores = []
    for rt, ks in sorted(by_type.items()):
        for slot, k in enumerate(ks):
            body.append(let(f"r{k}", results[k][2]))
            stores.append(store(outs[rt], var("i") + slot * n, var(f"r{k}")))
            layout.append((results[k][0], rt, slot))
    # the default grid covers the longest output; invocations past n must not store (they would
    # race with invocation i's later slots)
    body.append(if_(var("i").lt(n), stores))
    return Program.wrapped([*bufs, *outs.values()], 64, body), arrays, layout
