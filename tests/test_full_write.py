"""vyre.driver.full_write: a buffer judged fully written has unobservable initial contents.

The oracle is the reference interpreter: for random valid programs, every buffer the analysis
calls fully written, under a launch that covers it, gives the very same results (bit for bit)
whether it starts zero-filled or holding arbitrary values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import vyre
from vyre.driver.full_write import covers, writes_every_element
from vyre.ir import (
    F32, Program, block, buflen, gid, if_, let, output, read, read_write, ret, store, u32, var,
)

from .strategies import program_and_inputs


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


@pytest.mark.filterwarnings("ignore::vyre.driver.coverage.LaunchWarning")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program_and_inputs(max_stmts=6))
def test_initial_contents_of_a_fully_written_buffer_are_never_seen(case) -> None:
    program, arrays, grid = case
    for b in program.buffers:
        if b.is_workgroup or not b.access.writable:
            continue
        if not (writes_every_element(program, b.name) and covers(program, grid, arrays[b.name].size)):
            continue
        drawn = {k: v.copy() for k, v in arrays.items()}
        zeroed = {k: v.copy() for k, v in arrays.items()}
        zeroed[b.name] = np.zeros_like(arrays[b.name])
        got = vyre.dispatch(program, drawn, backend="interp", grid=grid)
        want = vyre.dispatch(program, zeroed, backend="interp", grid=grid)
        for name in want:
            assert _bits(got[name]) == _bits(want[name]), (b.name, name)


def _one(body, out_access=output) -> Program:
    x, out = read("x", 0, F32), out_access("out", 1, F32)
    return Program.wrapped([x, out], 32, body)


i = var("i")


@pytest.mark.parametrize("body, full", [
    ([let("i", gid()), if_(i.lt(buflen("out")), [store("out", i, read("x", 0, F32)[i])])], True),
    ([let("i", gid()), if_(buflen("out").gt(i), [store("out", i, read("x", 0, F32)[i])])], True),
    ([store("out", gid(), 1.0)], True),
    ([let("i", gid()), block([store("out", i, 1.0)])], True),
    # guards other than the buffer's own bound, indices other than the id, early returns: filled
    ([let("i", gid()), if_(i.lt(u32(5)), [store("out", i, 1.0)])], False),
    ([let("i", gid()), if_(i.lt(buflen("x")), [store("out", i, 1.0)])], False),
    ([let("i", gid()), store("out", i * u32(2), 1.0)], False),
    ([let("i", gid()), if_(i.eq(u32(3)), [ret()]), store("out", i, 1.0)], False),
    ([let("i", gid()), let("j", u32(0)), store("out", var("j"), 1.0)], False),
])
def test_the_rule_on_chosen_programs(body, full: bool) -> None:
    assert writes_every_element(_one(body), "out") is full


def test_a_buffer_the_program_reads_keeps_its_fill() -> None:
    out = read_write("out", 1, F32)
    p = Program.wrapped([read("x", 0, F32), out], 32,
                        [let("i", gid()), store(out, var("i"), out[var("i")] + 1.0)])
    assert not writes_every_element(p, "out")


def test_covers_counts_invocations_along_x() -> None:
    p = _one([store("out", gid(), 1.0)])
    assert covers(p, (4, 1, 1), 128) and not covers(p, (4, 1, 1), 129)
