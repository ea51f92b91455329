"""Loops reversed through the tape (vyre/autodiff/checkpoint.py): every regime of the
checkpointing scheme (all states stored, checkpoints + segment replay, states recomputed past the
segment slots) against float64 central differences, by forcing small state counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.autodiff_classes import Case, carried_loops, central_differences
from vyre.autodiff import grad
from vyre.autodiff.checkpoint import scratch_buffers, tape_arrays
from vyre.driver.dispatch import dispatch
from vyre.ir import (
    F64, U32, Loop, Program, Store, assign, f64, let, loop, output, read, sin, store, var,
    walk_nodes,
)


def vjp_with_states(prog: Program, inputs: dict[str, np.ndarray], cot: np.ndarray, states: int,
                    backend: str = "interp") -> np.ndarray:
    back = grad(prog, ["out"], ["x"])
    invocations = inputs["out"].size * prog.workgroup_size[0]
    args = {k: np.array(v, copy=True) for k, v in inputs.items()}
    args["grad_out"] = cot
    args["grad_x"] = np.zeros_like(inputs["x"])
    args.update(tape_arrays(prog, back, invocations, max_states=states))
    res = dispatch(back, args, backend=backend, grid=(inputs["out"].size, 1, 1))
    return np.asarray(res["grad_x"])


@settings(max_examples=40, deadline=None)
@given(carried_loops(max_trips=14), st.sampled_from([2, 3, 4, 5, 8]))
def test_every_checkpoint_regime_matches_finite_differences(case: Case, states: int) -> None:
    """With C states: n <= C stores all, n <= C^2/4 replays segments, beyond recomputes."""
    cot = np.linspace(0.5, 1.5, case.inputs["out"].size)
    g = vjp_with_states(case.program, case.inputs, cot, states)
    fd = central_differences(case.program, case.inputs, cot)
    scale = 1.0 + float(np.max(np.abs(fd)))
    assert float(np.max(np.abs(g - fd))) <= 1e-5 * scale, (g, fd)


def _recurrence() -> Program:
    x, nb, out = read("x", 0, F64), read("n", 1, U32), output("out", 2, F64)
    return Program.wrapped([x, nb, out], 1, [
        let("a", x[0]), let("b", x[1]),
        loop("k", 0, nb[0], [assign("a", sin(var("a") * var("b")) + f64(0.1)),
                             assign("b", var("b") * f64(0.99) + var("a") * f64(0.01))]),
        store(out, 0, var("a") + var("b"))])


@pytest.mark.parametrize("backend", ["interp", "cpu"])
@pytest.mark.parametrize("trips,states", [(0, 4), (1, 2), (7, 8), (9, 8), (16, 8), (40, 8), (25, 2)])
def test_recurrence_regimes(backend, trips, states) -> None:
    prog = _recurrence()
    inputs = {"x": np.array([0.7, 0.9]), "n": np.array([trips], np.uint32), "out": np.zeros(1)}
    cot = np.ones(1)
    g = vjp_with_states(prog, inputs, cot, states, backend)
    fd = central_differences(prog, inputs, cot)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


def test_tape_is_linear_and_only_for_values_the_adjoint_reads() -> None:
    """No reverse iteration re-runs a prefix of the loop when the tape holds every state; the
    carried values the adjoint never reads (a running sum) get no tape."""
    x, nb, out = read("x", 0, F64), read("n", 1, U32), output("out", 2, F64)
    prog = Program.wrapped([x, nb, out], 1, [
        let("s", f64(0.0)), let("p", f64(1.0)),
        loop("k", 0, nb[0], [assign("s", var("s") + x[var("k")]), assign("p", var("p") * x[var("k")])]),
        store(out, 0, var("s") + var("p"))])
    back = grad(prog, ["out"], ["x"])
    info, tapes = scratch_buffers(prog, back)
    assert info is not None and len(tapes) == 1 and tapes[0].element is F64
    assert sum(isinstance(n, Store) and n.buffer == tapes[0].name for n in walk_nodes(back.entry)) == 2
    # Loops: the replay, the segments, the segment replay, the reverse sweep and the fallback.
    assert sum(isinstance(n, Loop) for n in walk_nodes(back.entry)) == 5


def test_replay_records_by_countdown_and_the_reverse_loads_states_ahead() -> None:
    """The replay finds the iterations it records with a carried countdown (no division or
    remainder per iteration); the reverse sweep loads iteration t - 1's state during iteration t,
    before it recomputes anything (so the tape's memory latency overlaps the iteration)."""
    from vyre.ir import Assign, BinOp, BinOpKind, Load, node_exprs, walk

    prog = _recurrence()  # its body divides nothing
    back = grad(prog, ["out"], ["x"])
    _, tapes = scratch_buffers(prog, back)
    names = {t.name for t in tapes}
    replay, _segments, _segment_replay, sweep, _far = [n for n in walk_nodes(back.entry) if isinstance(n, Loop)]
    ops = {e.op for n in walk_nodes(replay.body) for x in node_exprs(n) for e in walk(x) if isinstance(e, BinOp)}
    assert not ops & {BinOpKind.DIV, BinOpKind.MOD}
    first_loop = next(k for k, n in enumerate(sweep.body) if isinstance(n, Loop))
    ahead = [n for n in sweep.body[:first_loop] if isinstance(n, Assign)
             and any(isinstance(e, Load) and e.buffer in names for e in walk(n.value))]
    assert len(ahead) == len(tapes) == 2


def test_multi_dimensional_grids_reverse_by_recomputation() -> None:
    """grid_1d=False: InvocationId(0) does not identify an invocation, so no tape."""
    back = grad(_recurrence(), ["out"], ["x"], grid_1d=False)
    assert scratch_buffers(_recurrence(), back) == (None, [])
    inputs = {"x": np.array([0.7, 0.9]), "n": np.array([5], np.uint32), "out": np.zeros(1)}
    g = np.zeros(2)
    dispatch(back, {**inputs, "grad_out": np.ones(1), "grad_x": g}, backend="interp", grid=(1, 1, 1))
    np.testing.assert_allclose(g, central_differences(_recurrence(), inputs, np.ones(1)), rtol=1e-6)


def test_tapes_sized_for_too_few_invocations_give_nan_not_a_neighbours_state() -> None:
    """An invocation past the G its tapes were sized for must not read another one's states."""
    from tests.autodiff_classes import BUFFERS
    from vyre.ir import buflen, gid, if_, load

    i = gid()
    prog = Program.wrapped(BUFFERS, 1, [if_(i.lt(buflen("out")), [
        let("a", load("x", i)), loop("k", 0, load("n", 0), [assign("a", sin(var("a")) * f64(1.5))]),
        store("out", i, var("a"))])])
    back = grad(prog, ["out"], ["x"])
    args = {"x": np.array([0.3, 0.5, 0.7]), "n": np.array([4], np.uint32), "out": np.zeros(3),
            "grad_out": np.ones(3), "grad_x": np.zeros(3)}
    args.update(tape_arrays(prog, back, 2, max_states=8))  # sized for 2 of the 3 invocations
    g = np.asarray(dispatch(back, args, backend="interp", grid=(3, 1, 1))["grad_x"])
    assert np.all(np.isfinite(g[:2])) and np.isnan(g[2])


def test_invocations_past_the_tapes_never_write_a_neighbours_states() -> None:
    """Invocations past G store nothing: the tapes after 3 invocations on tapes sized for 2 hold
    exactly what the 2 invocations wrote (else invocation 2's states land in invocation 0's
    slots, which on a GPU it may overwrite before invocation 0 reads them)."""
    from tests.autodiff_classes import BUFFERS
    from vyre.ir import buflen, gid, if_, load

    i = gid()
    prog = Program.wrapped(BUFFERS, 1, [if_(i.lt(buflen("out")), [
        let("a", load("x", i)), loop("k", 0, load("n", 0), [assign("a", sin(var("a")) * f64(1.5))]),
        store("out", i, var("a"))])])
    back = grad(prog, ["out"], ["x"])
    x = np.array([0.3, 0.5, 0.7])
    tapes = {}
    for count in (2, 3):
        args = {"x": x[:count], "n": np.array([4], np.uint32), "out": np.zeros(count),
                "grad_out": np.ones(count), "grad_x": np.zeros(count)}
        args.update({k: np.zeros_like(v) for k, v in tape_arrays(prog, back, 2, max_states=8).items()})
        res = dispatch(back, args, backend="interp", grid=(count, 1, 1))
        tapes[count] = {k: np.asarray(res[k]) for k in res if k.startswith("tape_") and k != "tape_info"}
    assert tapes[2] and all(np.array_equal(tapes[2][k], tapes[3][k]) for k in tapes[2])
