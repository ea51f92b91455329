"""The program strategies generate what they promise: valid, race-free, deterministic programs
with inputs a slow simulator can run, covering every op."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings

from tests import strategies as S
from tests.strategies import (
    BINOP_FLOAT,
    UNOP_FLOAT,
    FloatClass,
    arbitrary_programs,
    program_and_inputs,
    programs,
    values,
)
from vyre import interp
from vyre.driver.bind import bind_host_arrays
from vyre.ir import (
    EXPR_TYPES,
    NODE_TYPES,
    Atomic,
    BinOp,
    BinOpKind,
    BufferAccess,
    Cast,
    Expr,
    Fma,
    Let,
    Load,
    LocalId,
    Program,
    Store,
    UnOp,
    UnOpKind,
    Var,
    node_exprs,
    walk,
    walk_nodes,
)
from vyre.ir.expr import I32_MAX, I32_MIN, U32_MAX
from vyre.ir.validate import validate_function

FLAGS: list[dict[str, Any]] = [
    {},
    {"allow_atomics": True},
    {"allow_barriers": True},
    {"allow_subgroups": True},
    {"allow_atomics": True, "allow_barriers": True, "allow_subgroups": True, "max_stmts": 12},
    {"exact_floats": True, "allow_atomics": True},
    {"allow_floats": False, "allow_calls": False},
    {"dtypes": (S.F, S.U)},
]


def exprs_of(p: Program) -> list[Expr]:
    return [x for n in walk_nodes(p.entry) for e in node_exprs(n) for x in walk(e)]


def test_float_tables_cover_every_op() -> None:
    assert set(BINOP_FLOAT) == set(BinOpKind)
    assert set(UNOP_FLOAT) == set(UnOpKind)


def test_strategy_functions_are_valid() -> None:
    for fn in S.FUNCTIONS.values():
        assert validate_function(fn, S.FUNCTIONS) == [], fn.op_id
    for caller, callees in S._CALLEES.items():
        assert all(c in S.FUNCTIONS for c in (caller, *callees))


@pytest.mark.parametrize("flags", FLAGS, ids=["-".join(str(k) for k in f) or "default" for f in FLAGS])
def test_generated_programs_are_valid_and_race_free(flags: dict[str, Any]) -> None:
    # 8 per flag set under the ci profile; scales up with deeper profiles.
    @settings(max_examples=max(8, _profile_examples() // 3))
    @given(program_and_inputs(**flags))
    def check(pig: tuple[Program, dict[str, np.ndarray], tuple[int, int, int]]) -> None:
        p, arrays, grid = pig
        p.validate()
        assert p.outputs, "at least one output buffer"
        wx, wy, wz = p.workgroup_size
        assert wy == wz == 1 and 1 <= wx <= 64 and grid[1:] == (1, 1) and 1 <= grid[0] <= 4
        if flags.get("allow_subgroups"):
            assert wx % 32 == 0
        bound = bind_host_arrays(p, arrays)
        assert set(bound) == {b.name for b in p.buffers if not b.is_workgroup}
        for a in arrays.values():
            assert a.dtype.kind != "f" or np.isfinite(a).all()  # finite_only is the default
        check_race_free(p)
        check_determinism_rules(p, exact=flags.get("exact_floats", False))
        interp.run(p, {k: v.copy() for k, v in arrays.items()}, grid, max_steps=2_000_000)

    check()


def _profile_examples() -> int:
    current = settings.default
    return current.max_examples if current is not None else 20


def check_race_free(p: Program) -> None:
    """Stores only to one's own element; atomics only on acc_ buffers; atomic results unread."""
    atomic_vars = set()
    acc_ops: dict[str, set[object]] = {}
    for n in walk_nodes(p.entry):
        if isinstance(n, Store):
            decl = p.buffer(n.buffer)
            want = LocalId(0) if decl.is_workgroup else S.InvocationId(0)
            assert n.index == want and not n.buffer.startswith("acc_"), n
        if isinstance(n, Let) and isinstance(n.value, Atomic):
            assert n.value.buffer.startswith("acc_") and n.value.op in S.ORDER_FREE_ATOMICS
            assert p.buffer(n.value.buffer).access is BufferAccess.READ_WRITE
            acc_ops.setdefault(n.value.buffer, set()).add(n.value.op)
            atomic_vars.add(n.name)
    # order-free atomics commute with themselves only (or then and != and then or): one op a buffer
    assert all(len(ops) == 1 for ops in acc_ops.values()), acc_ops
    for x in exprs_of(p):
        assert not (isinstance(x, Var) and x.name in atomic_vars), "an atomic's old value was read"
        if isinstance(x, Load) and not p.buffer(x.buffer).is_workgroup:
            assert not p.buffer(x.buffer).access.writable or x.index == S.InvocationId(0), x


def _approx(e: Expr) -> bool:
    return any(isinstance(x, Fma) or (isinstance(x, UnOp) and UNOP_FLOAT[x.op] is FloatClass.APPROX)
               or (isinstance(x, BinOp) and BINOP_FLOAT[x.op] is FloatClass.APPROX) for x in walk(e))


_TO_EXACT_UNOPS = {op for op, c in UNOP_FLOAT.items() if c is FloatClass.NEEDS_DET}
_TO_EXACT_BINOPS = {op for op, c in BINOP_FLOAT.items() if c is FloatClass.NEEDS_DET}


def check_determinism_rules(p: Program, exact: bool) -> None:
    """No approximate float result flows (directly) into an int, a bool, a rounding op or fmod."""
    for x in exprs_of(p):
        if exact:
            assert not _approx(x), x
        match x:
            case Cast(target, v) if not target.is_float:
                assert not _approx(v), x
            case UnOp(op, v) if op in _TO_EXACT_UNOPS:
                assert not _approx(v), x
            case BinOp(op, a, b) if op in _TO_EXACT_BINOPS:
                assert not (_approx(a) or _approx(b)), x
            case Atomic(_, _, i, v, _):
                assert not (_approx(i) or _approx(v)), x


def test_generation_covers_every_op_and_variant() -> None:
    seen: set[object] = set()
    # enough examples that rare variants (SubgroupSize, ...) show up whatever state the run starts in
    cfg = settings(max_examples=200, database=None, phases=[Phase.generate], derandomize=True,
                   suppress_health_check=list(HealthCheck))

    def collect(p: Program) -> None:
        seen.update(type(n) for n in walk_nodes(p.entry))
        for x in exprs_of(p):
            seen.add(type(x))
            if isinstance(x, (BinOp, UnOp)):
                seen.add(x.op)

    cfg(given(programs(max_stmts=12, max_expr_depth=4, allow_atomics=True, allow_barriers=True,
                       allow_subgroups=True))(collect))()
    cfg(given(programs(max_stmts=12, max_expr_depth=4))(collect))()
    wanted = {*BinOpKind, *UnOpKind, *EXPR_TYPES, *NODE_TYPES}
    assert wanted - seen == set()


@pytest.mark.parametrize(("t", "value"), [
    (S.I, I32_MIN), (S.I, I32_MAX), (S.I, -1), (S.I, 0), (S.U, U32_MAX), (S.U, 0), (S.F, 1.0),
])
def test_inputs_reach_edge_values(t: S.DataType, value: float) -> None:
    assert find(values(t), lambda v: v == value) == value


@pytest.mark.parametrize("t", [S.F, S.D])
def test_float_inputs_include_signed_zero_and_optionally_nonfinite(t: S.DataType) -> None:
    assert math.copysign(1.0, find(values(t), lambda v: v == 0 and math.copysign(1.0, v) < 0)) < 0
    assert math.isnan(find(values(t, finite_only=False), math.isnan))
    assert math.isinf(find(values(t, finite_only=False), math.isinf))


@settings(max_examples=10)
@given(arbitrary_programs())
def test_arbitrary_programs_are_programs(p: Program) -> None:
    assert isinstance(p, Program) and len(p.workgroup_size) == 3
