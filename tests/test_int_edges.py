"""i32 edge values (INT_MIN, INT_MAX, ...) through abs and what reads its sign: the CPU agrees with
the interpreter bit for bit; the PTX side is checked in tests/test_codegen_ptx.py (no ``abs.s32``)
and on the card by the GPU bench's parity section (tests/int_edge_cases.py says why)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.int_edge_cases import INT_MAX, INT_MIN, abs_uses, cases, with_outputs
from tests.parity import differences
from vyre.driver.dispatch import compile as vcompile


def test_abs_of_int_min_is_int_min_everywhere_it_is_read() -> None:
    for _, prog, arrays in cases():
        ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()})
        assert ref["o2"][0] == 1  # abs(INT_MIN) < 0: the spec's wrap
        assert ref["o0"][0] == -(2**31 % 6843)
        got = vcompile(prog, "cpu")({k: v.copy() for k, v in arrays.items()})
        assert differences(got, ref, exact=True) == []


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(INT_MIN, INT_MAX) | st.sampled_from([INT_MIN, INT_MIN + 1, -1, 0, INT_MAX]),
                min_size=1, max_size=70))
def test_abs_uses_match_exact_integer_math(xs: list[int]) -> None:
    prog = abs_uses()
    arrays = with_outputs(prog, np.array(xs, np.int32))
    got = vcompile(prog, "cpu")({k: v.copy() for k, v in arrays.items()})
    # exact integer math with the spec's wrap: abs(INT_MIN) == INT_MIN, remainders take the dividend's sign
    a = [abs(v) if v != INT_MIN else INT_MIN for v in xs]
    rem = [int(np.sign(v)) * (abs(v) % 6843) for v in a]
    assert got["o0"].tolist() == rem
    assert got["o2"].tolist() == [int(v < 0) for v in a]
    assert got["o7"].tolist() == [~r for r in rem]
    assert got["o3"].tolist() == [v >> 1 for v in a]
