"""Flat programs that exercise every path of the interleaved CUDA emission
(vyre.codegen.interleave), with inputs: early returns that some of a group's invocations take,
returns inside loops and else-branches, divergent branches, computed store indices, shadowing,
buffers passed as a tuple."""

from __future__ import annotations

import numpy as np

from vyre.ir import (
    I32, BinOpKind, Expr, Program, assign, binop, block, buflen, cast, gid, i32, if_, let, load,
    loop, output, read, ret, select, store, u32, var,
)

N = 203  # not a multiple of any group: full groups, partial groups and idle threads all occur


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"x": rng.integers(-50, 50, N).astype(np.int32), "out": np.zeros(N, np.int32),
            "out2": np.zeros(N, np.int32)}


def _prog(body: list, two_outputs: bool = False) -> Program:
    bufs = [read("x", 0, I32), output("out", 1, I32)]
    if two_outputs:
        bufs.append(output("out2", 2, I32))
    return Program.wrapped(bufs, 16, body)


def _x(i: Expr) -> Expr:
    return load("x", i)


I = var("i")


def early_return() -> Program:
    return _prog([let("i", gid()), if_(I.ge(u32(77)), [ret()]), store("out", I, _x(I) * i32(3))])


def return_in_loop() -> Program:
    j = cast(I32, var("j"))
    return _prog([let("i", gid()), loop("j", u32(0), u32(6), [
        if_(binop(BinOpKind.GT, _x(I) + j * i32(7), i32(20)), [store("out", I, j + i32(100)), ret()]),
    ]), store("out", I, i32(-1))])


def return_in_else() -> Program:
    return _prog([let("i", gid()),
                  if_(_x(I).ge(i32(0)), [store("out", I, _x(I) + i32(1))], [ret()]),
                  store("out2", I, _x(I) * i32(2))], two_outputs=True)


def divergent_branches() -> Program:
    acc = var("acc")
    return _prog([
        let("i", gid()), let("acc", _x(I)),
        if_(binop(BinOpKind.MOD, acc, i32(2)).eq(i32(0)), [assign("acc", acc * i32(3))],
            [assign("acc", acc - i32(5))]),
        if_(I.lt(buflen("out")), [store("out", I, acc)]),
    ])


def computed_index() -> Program:
    # a permutation of [0, N) written through a computed index, and stores past the end
    return _prog([let("i", gid()),
                  if_(I.lt(buflen("x")), [store("out", binop(BinOpKind.MOD, I * u32(37), u32(N)), _x(I))]),
                  store("out2", I + u32(150), _x(I) + i32(1))], two_outputs=True)


def shadowing() -> Program:
    return _prog([let("i", gid()), let("a", i32(5)),
                  block([let("a", _x(I)), store("out", I, var("a"))]),
                  if_(I.lt(u32(40)), [let("a", i32(9)), store("out2", I, var("a"))], [ret()]),
                  store("out2", I, select(var("a").eq(i32(5)), i32(1), i32(2)))], two_outputs=True)


def return_chain() -> Program:
    return _prog([let("i", gid()), if_(I.ge(u32(190)), [ret()]),
                  let("v", _x(I)), if_(I.ge(u32(120)), [store("out", I, var("v")), ret()]),
                  store("out", I, var("v") + i32(1000))])


def many_buffers() -> Program:
    """Past the emitters' 24-argument limit, buffers travel as one tuple (vyre.codegen.cuda)."""
    outs = [output(f"o{k}", k + 1, I32) for k in range(29)]
    return Program.wrapped([read("x", 0, I32), *outs], 16, [
        let("i", gid()), if_(I.ge(u32(150)), [ret()]),
        *(store(f"o{k}", I, _x(I) + i32(k)) for k in range(29))])


CASES = {f.__name__: f for f in (early_return, return_in_loop, return_in_else, divergent_branches,
                                 computed_index, shadowing, return_chain, many_buffers)}


def interleave_cases() -> list[tuple[str, Program, dict[str, np.ndarray]]]:
    out = []
    inputs = _inputs()
    for name, f in CASES.items():
        p = f()
        out.append((name, p, {b.name: inputs.get(b.name, inputs["out"]).copy() for b in p.buffers}))
    return out
