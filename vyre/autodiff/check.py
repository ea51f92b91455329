"""``check_grad``: reverse-mode gradients against central finite differences in float64.

For a scalar probe ``L(x) = sum_o <u_o, out_o(x)>`` with random cotangents ``u``, the gradient
from :func:`vyre.autodiff.vjp` is compared, along random directions ``v``, with
``(L(x + h v) - L(x - h v)) / 2h``. Programs with f32 buffers are compared against finite
differences of a copy promoted to f64 (:func:`promote_f64`), so f32 kernels are checked without
f32 round-off swamping the difference quotient.

A difference quotient has an error of its own: round-off of about ``ulp(terms) / h`` (a derivative
that is exactly 0, as of ``(w + y) - y`` in ``y``, differences to about 1e-10, not 0) and a
truncation error where higher derivatives are large. Where a direction disagrees, the quotient is
taken again at other steps (``FD_STEPS``), and the disagreement is judged against its spread
across them (``FD_SPREAD``): what the finite differences cannot resolve is not reported as a wrong
gradient, and a wrong gradient, which differs from a quotient that stays put, still is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..driver.arrays import kind_of
from ..errors import AutodiffError
from ..ir.expr import Cast, Expr, LitF32, LitF64
from ..ir.functions import inline_nodes
from ..ir.transform import map_exprs
from ..ir.program import Program
from ..ir.types import DataType
from ..driver.geometry import launch_grid
from .checks import as_names, as_program, scalar_inputs
from .runners import Grid, run_forward, vjp
from .tape import Tape, as_tape

_F32, _F64 = DataType.F32, DataType.F64

#: the steps, as multiples of the first, at which a disagreeing direction's quotient is taken again
FD_STEPS = (0.5, 0.75, 1.5, 2.0)
#: a disagreement up to this many times the quotients' spread is within what they resolve (the
#: spread of a few samples can fall short of the first quotient's own round-off)
FD_SPREAD = 4.0


def _promote(e: Expr) -> Expr:
    """One node of the f32 -> f64 rewrite (children are already rewritten)."""
    match e:
        case LitF32():
            return LitF64(e.value)
        case Cast(t, v) if t is _F32:
            return Cast(_F64, v)
    return e


def promote_f64(program: Program) -> Program:
    """A copy of ``program`` with every f32 (buffers, literals, casts) turned into f64."""
    fns = {f.op_id: f for f in program.functions}
    body = inline_nodes(program.entry, fns) if fns else program.entry
    bufs = tuple(replace(b, element=_F64) if b.element is _F32 else b for b in program.buffers)
    return Program(bufs, program.workgroup_size, map_exprs(body, _promote), ())


def _rel_err(fd: float, ad: float, floor: float) -> float:
    """``|fd - ad| / max(|fd|, |ad|, floor)``; inf when either value is NaN or infinite, so a
    non-finite gradient can never compare as close (``max`` would silently drop a NaN)."""
    if not (math.isfinite(fd) and math.isfinite(ad)):
        return math.inf
    return abs(fd - ad) / max(abs(fd), abs(ad), floor)


def _pick_elements(g: Mapping[str, np.ndarray], wrt: Sequence[str], limit: int,
                   rng: np.random.Generator) -> list[tuple[str, int]]:
    """Elements to difference one at a time for the report: all of them when there are at most
    ``limit``; otherwise the non-finite gradient entries first, then the largest, then random."""
    flat = {w: np.asarray(g[w], dtype=np.float64).reshape(-1) for w in wrt}
    every = [(w, i) for w in wrt for i in range(flat[w].size)]
    if len(every) <= limit:
        return every
    bad = [(w, int(i)) for w in wrt for i in np.nonzero(~np.isfinite(flat[w]))[0]]
    picked = list(dict.fromkeys(bad[:limit // 2]))
    big = sorted(every, key=lambda e: -abs(flat[e[0]][e[1]]) if math.isfinite(flat[e[0]][e[1]]) else 0.0)
    for e in big[:limit // 4]:
        if e not in picked:
            picked.append(e)
    for k in rng.permutation(len(every)):
        if len(picked) >= limit:
            break
        if every[int(k)] not in picked:
            picked.append(every[int(k)])
    return picked


def check_grad(program: Program | Tape, inputs: Mapping[str, Any], wrt: str | Sequence[str], *,
               outputs: str | Sequence[str] | None = None, directions: int = 3, eps: float = 1e-6,
               rtol: float | None = None, atol: float | None = None, seed: int = 0,
               backend: str | None = None, grid: Grid | None = None, dim: Grid | None = None,
               report_elements: int = 32) -> float:
    """Compare ``vjp`` with central finite differences; return the worst relative error.

    ``program`` may be a :class:`~vyre.autodiff.tape.Tape` (a sequence of dispatches). ``outputs``:
    the float outputs probed (default: every float output). ``eps``: the step, relative to the
    largest magnitude among the ``wrt`` inputs. The relative error of one direction is ``|fd - ad| /
    max(|fd|, |ad|, atol)``; ``atol`` defaults to ``1e-7 * (1 + |L|)`` so directions with a (near)
    zero derivative are judged absolutely. ``rtol`` defaults to 1e-5 for f64 programs and 2e-3 for
    f32 ones (whose gradients carry f32 round-off). A direction that disagrees is differenced again
    at other steps, and its floor raised to what those quotients resolve (``FD_SPREAD`` times their
    spread over ``rtol``): the round-off of a difference quotient is not a wrong gradient (module
    docstring). A NaN or infinite value in either gradient (reverse mode, or the finite differences)
    fails the check. On failure it raises AssertionError with every direction's numbers and the
    worst element: up to ``report_elements`` elements are differenced one at a time, and the one
    with the largest error is named with its index, both values and the error. Inputs of any kind
    ``dispatch`` accepts are copied to the host first (the probes run on numpy arrays on
    ``backend``). Keep inputs away from kinks (``abs`` at 0, ``min`` ties, branch boundaries), where
    finite differences are meaningless. ``wrt`` and ``outputs`` are a name or a list of names;
    ``program`` may be a ``@vyre.kernel`` function."""
    wrt = as_names(wrt, "wrt")
    program = as_tape(program) or program  # a Tape, or a list of steps
    if isinstance(program, Tape):
        if dim is not None:
            raise AutodiffError("dim= was passed for a Tape; each step runs with the grid it was "
                                "recorded with. Fix: pass grid= to Tape.record instead")
    else:
        program = as_program(program)
        inputs = scalar_inputs(program, inputs)
        grid = launch_grid(program, grid, dim)
    # finite differences run in float64 on host copies: device arrays and DLPack objects are copied
    # to numpy here, once (a check, not a hot path)
    inputs = {k: kind_of(v).to_host(v) for k, v in inputs.items()}
    if outputs is None:
        outs = [b.name for b in program.buffers if b.is_output and b.element.is_float]
    else:
        outs = as_names(outputs, "outputs")
    if not outs:
        raise AutodiffError("check_grad found no float output to probe. Fix: pass outputs=[...]")
    is32 = any(program.buffer(n).element is _F32 for n in (*outs, *wrt))
    tol = rtol if rtol is not None else (2e-3 if is32 else 1e-5)
    rng = np.random.default_rng(seed)
    base = run_forward(program, inputs, backend=backend, grid=grid)
    cots = {o: rng.standard_normal(np.asarray(base[o]).size).astype(program.buffer(o).element.np_dtype)
            for o in outs}
    g = vjp(program, inputs, cots, list(wrt), backend=backend, grid=grid)
    p64: Program | Tape = program
    if is32:
        p64 = program.promote_f64() if isinstance(program, Tape) else promote_f64(program)
    x64 = {k: (np.asarray(v).astype(np.float64) if np.asarray(v).dtype == np.float32 else v)
           for k, v in inputs.items()}

    def loss(shift: Mapping[str, np.ndarray], h: float) -> float:
        args = dict(x64)
        for w, v in shift.items():
            x = np.asarray(x64[w], dtype=np.float64)
            args[w] = (x.reshape(-1) + h * v).reshape(x.shape)
        res = run_forward(p64, args, backend=backend, grid=grid)
        with np.errstate(all="ignore"):
            return float(sum(np.dot(np.asarray(res[o], dtype=np.float64).reshape(-1),
                                    cots[o].astype(np.float64)) for o in outs))

    scale = max([1.0] + [float(np.max(np.abs(np.asarray(inputs[w])), initial=0.0)) for w in wrt])
    h = eps * scale
    l0 = loss({}, 0.0)
    floor = atol if atol is not None else 1e-7 * (1.0 + abs(l0) if math.isfinite(l0) else 1.0)
    worst = 0.0
    lines = []
    unresolved = False  # a failing direction whose quotients disagree among themselves
    for _ in range(directions):
        v = {w: rng.standard_normal(np.asarray(inputs[w]).size) for w in wrt}
        fd = _quotient(loss, v, h)
        with np.errstate(all="ignore"):
            ad = float(sum(np.dot(np.asarray(g[w], dtype=np.float64).reshape(-1), v[w]) for w in wrt))
        err = _rel_err(fd, ad, floor)
        spread = ""
        if err > tol and math.isfinite(err):
            # is the disagreement the quotient's own? (only where it fails: 8 more forward runs)
            quotients = [_quotient(loss, v, k * h) for k in FD_STEPS]
            wide = max(*quotients, fd) - min(*quotients, fd)
            if math.isfinite(wide):
                err = _rel_err(fd, ad, max(floor, FD_SPREAD * wide / tol))
                spread = f" (quotients at {FD_STEPS[0]:g}-{FD_STEPS[-1]:g}x the step spread {wide:.3g})"
                unresolved |= err > tol and wide > 0.1 * abs(fd)
        worst = max(worst, err)
        lines.append(f"  finite difference {fd:.12g}, reverse mode {ad:.12g}, relative error {err:.3g}{spread}")
    nonfinite = [f"{w}[{int(i)}] = {np.asarray(g[w]).reshape(-1)[i]}" for w in wrt
                 for i in np.nonzero(~np.isfinite(np.asarray(g[w], dtype=np.float64).reshape(-1)))[0][:3]]
    if nonfinite:
        worst = math.inf
    if worst > tol:
        head = (f"gradient check failed (worst relative error {worst:.3g} > {tol:.3g}"
                + (f"; reverse mode gave non-finite values: {', '.join(nonfinite)}" if nonfinite else "")
                + "):\n")
        hint = ("\n  the difference quotients change by more than a tenth with the step: they do not resolve "
                "this derivative here (a kink, a branch boundary, or a function too steep for the step, "
                "such as a value squared many times). Fix: move the inputs away from it, or pass another eps"
                if unresolved and not nonfinite else "")
        raise AssertionError(head + "\n".join(lines) + "\n" + _worst_element(
            loss, g, inputs, wrt, h, floor, report_elements, rng) + hint)
    return worst


def _quotient(loss: Callable[[Mapping[str, np.ndarray], float], float], v: Mapping[str, np.ndarray],
              h: float) -> float:
    """The central difference quotient of ``loss`` along ``v`` with step ``h``."""
    return (loss(v, h) - loss(v, -h)) / (2 * h)


def _worst_element(loss: Callable[[Mapping[str, np.ndarray], float], float],
                   g: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray], wrt: Sequence[str],
                   h: float, floor: float, limit: int, rng: np.random.Generator) -> str:
    """The element with the largest error among those differenced one at a time."""
    picked = _pick_elements(g, wrt, limit, rng)
    rows = []
    for w, i in picked:
        unit = {w: np.zeros(np.asarray(inputs[w]).size)}
        unit[w][i] = 1.0
        fd = _quotient(loss, unit, h)
        ad = float(np.asarray(g[w], dtype=np.float64).reshape(-1)[i])
        rows.append((_rel_err(fd, ad, floor), w, i, fd, ad))
    if not rows:
        return "  (no elements to difference)"
    err, w, i, fd, ad = max(rows, key=lambda r: (r[0], -r[2]))
    total = sum(np.asarray(inputs[x]).size for x in wrt)
    return (f"  worst element {w}[{i}] (of {len(rows)} differenced one at a time out of {total}): "
            f"finite difference {fd:.12g}, reverse mode {ad:.12g}, relative error {err:.3g}")
