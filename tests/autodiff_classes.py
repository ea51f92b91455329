"""Generators for the shapes that once gave silently wrong gradients (issue 11), and a float64
central-difference oracle that does not go through ``check_grad``.

* :func:`carried_loops`: loops carrying 2-4 variables that feed each other (swaps, rotations,
  sequential updates reading updated and not-yet-updated values), bounds dynamic or static past
  the unroll limit, sometimes nested;
* :func:`initial_reads`: loop-carried variables initialised from a load that the body reads again
  (so the initial value and the body share one binding);
* :func:`guarded_singular`: ``sqrt``/``log``/division computed unconditionally (NaN or inf on
  part of the inputs) and guarded by selects that share the value, feed other selects, or by
  ``If`` s that carry it in an accumulator; the documented result is an exact 0 for the untaken
  arm.

Programs are f64, run one invocation per element of ``out`` (``N`` of them), read ``x`` (``N``
floats), ``n`` (the dynamic trip count) and write ``out``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from vyre.autodiff import run_forward, vjp
from vyre.ir import (
    F64, U32, BinOpKind, Expr, Node, Program, UnOpKind, assign, binop, buflen, f64, gid, if_, let,
    load, loop, output, read, select, store, unop, var,
)

N = 3
BUFFERS = [read("x", 0, F64), read("n", 1, U32), output("out", 2, F64)]


@dataclass
class Case:
    program: Program
    inputs: dict[str, np.ndarray]

    def __repr__(self) -> str:
        return f"Case(entry={self.program.entry!r}, inputs={self.inputs!r})"


def central_differences(program: Program, inputs: dict[str, np.ndarray], cot: np.ndarray,
                        h: float = 1e-6, backend: str = "interp") -> np.ndarray:
    """d <cot, out> / dx by central differences, one element of ``x`` at a time (float64)."""
    x = inputs["x"]
    g = np.zeros_like(x)
    for k in range(x.size):
        vals = []
        for sign in (1.0, -1.0):
            args = dict(inputs)
            xs = x.copy()
            xs[k] += sign * h
            args["x"] = xs
            vals.append(float(np.dot(run_forward(program, args, backend=backend)["out"], cot)))
        g[k] = (vals[0] - vals[1]) / (2 * h)
    return g


def assert_grad_matches(case: Case, backend: str, rtol: float = 1e-5) -> np.ndarray:
    """vjp of ``out`` w.r.t. ``x`` on ``backend`` against central differences on the interpreter."""
    cot = np.linspace(0.5, 1.5, case.inputs["out"].size)
    g = vjp(case.program, case.inputs, {"out": cot}, ["x"], backend=backend)["x"]
    fd = central_differences(case.program, case.inputs, cot)
    assert np.all(np.isfinite(g)), (g, fd)
    scale = 1.0 + float(np.max(np.abs(fd)))
    assert float(np.max(np.abs(g - fd))) <= rtol * scale, (g, fd)
    return g


def _inputs(draw: st.DrawFn, lo: float, hi: float, trips: int) -> dict[str, np.ndarray]:
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(lo, hi, N), "n": np.array([trips], np.uint32), "out": np.zeros(N)}


def _mix(draw: st.DrawFn, names: list[str], extra: Expr) -> Expr:
    """A smooth function of some of ``names``, damped by 1/2 (a copy excepted) so that a 70-trip
    loop contracts instead of turning chaotic, where central differences mean nothing."""
    a, b = var(draw(st.sampled_from(names))), var(draw(st.sampled_from(names)))
    shape = draw(st.integers(0, 5))
    e = _mix_shape(shape, a, b, extra)
    return e if shape == 0 else binop(BinOpKind.MUL, e, f64(0.5))


def _mix_shape(shape: int, a: Expr, b: Expr, extra: Expr) -> Expr:
    match shape:
        case 0:
            return a
        case 1:
            return binop(BinOpKind.ADD, binop(BinOpKind.MUL, a, f64(0.5)), binop(BinOpKind.MUL, b, extra))
        case 2:
            return unop(UnOpKind.SIN, binop(BinOpKind.ADD, a, binop(BinOpKind.MUL, b, extra)))
        case 3:
            return unop(UnOpKind.TANH, binop(BinOpKind.MUL, a, b))
        case 4:
            return binop(BinOpKind.SUB, a, binop(BinOpKind.MUL, f64(0.3), b))
        case _:
            return binop(BinOpKind.MUL, a, unop(UnOpKind.COS, b))


@st.composite
def carried_loops(draw: st.DrawFn, max_trips: int = 4) -> Case:
    """A loop carrying 2-4 variables updated one after another from each other's values."""
    k = draw(st.integers(2, 4))
    names = [f"c{j}" for j in range(k)]
    i = gid()
    xi = load("x", i)
    xn = load("x", binop(BinOpKind.MOD, binop(BinOpKind.ADD, i, 1), N))
    body: list[Node] = [let("xi", xi)]
    for j, nm in enumerate(names):
        body.append(let(nm, binop(BinOpKind.ADD, var("xi"), f64(0.25 * j)) if j % 2 == 0
                        else binop(BinOpKind.MUL, xn, f64(0.5 + j))))
    inner: list[Node] = []
    if draw(st.booleans()):  # a swap/rotation through a temporary
        inner.append(let("t", var(names[0])))
        for j in range(k - 1):
            inner.append(assign(names[j], var(names[j + 1])))
        inner.append(assign(names[-1], var("t")))
    extra = binop(BinOpKind.MUL, var("xi"), f64(0.3))
    for _ in range(draw(st.integers(1, 4))):
        target = draw(st.sampled_from(names))
        inner.append(assign(target, _mix(draw, names, extra)))
    trips_kind = draw(st.sampled_from(["dynamic", "static", "nested", "nested_dynamic", "in_if"]))
    trips = draw(st.integers(0, max_trips))
    n = load("n", 0)
    if trips_kind == "static":
        body.append(loop("k", 0, 70, inner))  # past the unroll limit
    elif trips_kind == "nested":
        body.append(loop("k", 0, n, [loop("k2", 0, 2, inner)]))
    elif trips_kind == "nested_dynamic":  # an inner loop not unrolled either, its trips vary
        body.append(loop("k", 0, n, [loop("k2", var("k"), n, inner)]))
    elif trips_kind == "in_if":
        body.append(if_(var("xi").gt(f64(-0.5)), [loop("k", 0, n, inner)]))
    else:
        body.append(loop("k", 0, n, inner))
    total: Expr = var(names[0])
    for j, nm in enumerate(names[1:]):
        total = binop(BinOpKind.ADD, total, binop(BinOpKind.MUL, var(nm), f64(float(j + 2))))
    body.append(store("out", i, total))
    prog = Program.wrapped(BUFFERS, 1, [if_(i.lt(buflen("out")), body)])
    return Case(prog, _inputs(draw, -1.0, 1.0, trips))


@st.composite
def initial_reads(draw: st.DrawFn) -> Case:
    """``y = x[i]; loop { y = f(y, x[i]) }``: the initial value's load is read again in the body."""
    i = gid()
    op = draw(st.sampled_from(["mul", "fma", "sin", "div"]))
    y, xi = var("y"), var("xi")
    match op:
        case "mul":
            step = binop(BinOpKind.MUL, y, load("x", i))
        case "fma":
            step = binop(BinOpKind.ADD, binop(BinOpKind.MUL, y, load("x", i)), load("x", i))
        case "sin":
            step = unop(UnOpKind.SIN, binop(BinOpKind.MUL, y, load("x", i)))
        case _:
            step = binop(BinOpKind.DIV, load("x", i), binop(BinOpKind.ADD, f64(2.0), binop(BinOpKind.MUL, y, y)))
    body: list[Node] = [let("xi", load("x", i)), let("y", xi)]
    if draw(st.booleans()):
        body.append(let("z", binop(BinOpKind.MUL, xi, f64(0.5))))
        step2: Expr = binop(BinOpKind.ADD, var("z"), binop(BinOpKind.MUL, y, f64(0.25)))
        inner: list[Node] = [assign("y", step), assign("z", step2)]
        out: Expr = binop(BinOpKind.ADD, y, var("z"))
    else:
        inner = [assign("y", step)]
        out = y
    bound: Expr = load("n", 0) if draw(st.booleans()) else binop(BinOpKind.ADD, load("n", 0), 0)
    body += [loop("k", 0, bound, inner), store("out", i, out)]
    prog = Program.wrapped(BUFFERS, 1, [if_(i.lt(buflen("out")), body)])
    return Case(prog, _inputs(draw, 0.5, 1.2, draw(st.integers(0, 4))))


_SINGULAR = ["sqrt", "log", "div", "sqrt_log"]


def _singular(kind: str, v: Expr) -> Expr:
    match kind:
        case "sqrt":
            return unop(UnOpKind.SQRT, v)
        case "log":
            return unop(UnOpKind.LOG, v)
        case "div":
            return binop(BinOpKind.DIV, f64(1.0), v)
        case _:
            return binop(BinOpKind.MUL, unop(UnOpKind.SQRT, v), unop(UnOpKind.LOG, v))


@st.composite
def guarded_singular(draw: st.DrawFn) -> Case:
    """Singular functions of ``x`` (NaN/inf for x <= 0) guarded by selects and Ifs."""
    i = gid()
    xi = var("xi")
    s = var("s")
    kind = draw(st.sampled_from(_SINGULAR))
    body: list[Node] = [let("xi", load("x", i)), let("s", _singular(kind, xi))]
    if draw(st.booleans()):
        body.append(let("s2", binop(BinOpKind.MUL, s, s)))
        cands = ["s", "s2"]
    else:
        cands = ["s"]
    thresholds = [0.0, 0.5, 1.0]
    terms: list[Expr] = []
    shape = draw(st.sampled_from(["shared", "nested", "if_acc", "if_phi", "loop_acc"]))
    pick = var(draw(st.sampled_from(cands)))
    if shape == "shared":  # two selects share a value
        for _ in range(draw(st.integers(2, 3))):
            t = f64(draw(st.sampled_from(thresholds)))
            terms.append(select(xi.gt(t), var(draw(st.sampled_from(cands))), f64(0.0)))
    elif shape == "nested":  # a select feeds another
        inner = select(xi.gt(f64(0.0)), pick, binop(BinOpKind.MUL, xi, f64(2.0)))
        terms.append(select(xi.gt(f64(draw(st.sampled_from(thresholds)))), inner, xi))
        terms.append(select(xi.gt(f64(0.0)), pick, f64(0.0)))
    elif shape == "if_acc":  # an If accumulator carries it
        body.append(let("acc", f64(0.0)))
        body.append(if_(xi.gt(f64(draw(st.sampled_from(thresholds)))),
                        [assign("acc", binop(BinOpKind.ADD, var("acc"), pick))]))
        body.append(if_(xi.gt(f64(0.0)), [assign("acc", binop(BinOpKind.MUL, var("acc"), pick))]))
        terms.append(var("acc"))
    elif shape == "if_phi":
        body.append(let("acc", xi))
        body.append(if_(xi.gt(f64(0.0)), [assign("acc", pick)], [assign("acc", binop(BinOpKind.MUL, xi, xi))]))
        terms.append(var("acc"))
    else:  # a loop whose trip count may be 0 accumulates it
        body.append(let("acc", f64(0.0)))
        body.append(loop("k", 0, load("n", 0), [
            if_(xi.gt(f64(0.0)), [assign("acc", binop(BinOpKind.ADD, var("acc"), pick))])]))
        terms.append(var("acc"))
    total = terms[0]
    for t in terms[1:]:
        total = binop(BinOpKind.ADD, total, t)
    body.append(store("out", i, total))
    prog = Program.wrapped(BUFFERS, 1, [if_(i.lt(buflen("out")), body)])
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, N)
    x[0] = -abs(x[0]) - 0.1  # at least one invocation in the singular region
    return Case(prog, {"x": x, "n": np.array([draw(st.integers(0, 3))], np.uint32), "out": np.zeros(N)})


# -- programs that synchronise: workgroup memory + barriers, subgroup ops, atomic adds --------------

WG = 64
NS = 2 * WG
SYNC_BUFFERS = [read("x", 0, F64), read("y", 1, F64), read("idx", 2, U32), output("out", 3, F64)]


@dataclass
class SyncCase:
    program: Program
    inputs: dict[str, np.ndarray]
    stages: list[str]

    def __repr__(self) -> str:
        return f"SyncCase(stages={self.stages}, entry={self.program.entry!r})"


def _tree(op: str, a: Expr, b: Expr) -> Expr:
    match op:
        case "add":
            return binop(BinOpKind.ADD, a, b)
        case "max":
            return binop(BinOpKind.MAX, a, b)
        case _:
            return binop(BinOpKind.ADD, a, unop(UnOpKind.SIN, b))


@st.composite
def sync_programs(draw: st.DrawFn) -> SyncCase:
    """Stages drawn from: a workgroup tree reduction (add, max or a nonlinear combine) read back
    by every invocation, a neighbour exchange through workgroup memory, subgroup add/max
    reductions, xor and arbitrary-lane shuffles; the result stored or atomically added (at
    repeated indices) into ``out``."""
    from vyre.ir import (
        barrier, lane, lid, shuffle, subgroup_reduce, workgroup,
    )
    from vyre.ir.expr import Atomic
    from vyre.ir.ops import AtomicOp

    i, lx = gid(), lid()
    v = var("v")
    body: list[Node] = [let("v", binop(BinOpKind.ADD, unop(UnOpKind.SIN, load("x", i)),
                                       binop(BinOpKind.MUL, load("y", i), f64(0.5))))]
    stages = draw(st.lists(st.sampled_from(["tree_add", "tree_max", "tree_sin", "neighbour", "sg_add",
                                            "sg_max", "shfl_xor", "shfl_any", "shfl_data"]),
                           min_size=1, max_size=3))
    uses_wg = False
    for k, stage in enumerate(stages):
        t = f"t{k}"
        if stage.startswith("tree"):
            uses_wg = True
            body += [store("tile", lx, v), barrier()]
            s = WG // 2
            while s >= 1:
                body += [if_(lx.lt(s), [store("tile", lx, _tree(stage[5:], load("tile", lx),
                                                                   load("tile", binop(BinOpKind.ADD, lx, s))))]),
                         barrier()]
                s //= 2
            body += [let(t, load("tile", 0)), barrier(),
                     assign("v", binop(BinOpKind.ADD, v, binop(BinOpKind.MUL, var(t), f64(0.05))))]
        elif stage == "neighbour":
            uses_wg = True
            body += [store("tile", lx, unop(UnOpKind.TANH, v)), barrier(),
                     let(t, binop(BinOpKind.MUL, load("tile", binop(BinOpKind.MOD, binop(BinOpKind.ADD, lx, 1), WG)),
                                  load("tile", 0))),
                     barrier(), assign("v", binop(BinOpKind.ADD, v, var(t)))]
        elif stage == "sg_add":
            body += [let(t, subgroup_reduce(BinOpKind.ADD, unop(UnOpKind.SIN, v))),
                     assign("v", binop(BinOpKind.ADD, v, binop(BinOpKind.MUL, var(t), f64(0.1))))]
        elif stage == "sg_max":
            body += [let(t, subgroup_reduce(BinOpKind.MAX, v)), assign("v", binop(BinOpKind.MUL, v, var(t)))]
        elif stage == "shfl_xor":
            c = draw(st.sampled_from([1, 2, 16]))
            body += [let(t, shuffle(binop(BinOpKind.MUL, v, v), binop(BinOpKind.BIT_XOR, lane(), c))),
                     assign("v", binop(BinOpKind.ADD, v, var(t)))]
        elif stage == "shfl_any":
            body += [let(t, shuffle(unop(UnOpKind.COS, v), binop(BinOpKind.BIT_AND, binop(
                BinOpKind.ADD, binop(BinOpKind.MUL, lane(), 5), 3), 31))),
                     assign("v", binop(BinOpKind.MUL, v, var(t)))]
        else:  # a data-dependent source lane (several lanes may read one)
            body += [let(t, shuffle(v, load("idx", i))), assign("v", binop(BinOpKind.ADD, v, var(t)))]
    if draw(st.booleans()):
        body.append(store("out", i, v))
    else:
        body.append(let("_old", Atomic(AtomicOp.ADD, "out", binop(BinOpKind.MOD, load("idx", i), NS), v)))
    bufs = SYNC_BUFFERS + ([workgroup("tile", WG, F64)] if uses_wg else [])
    prog = Program.wrapped(bufs, WG, body)
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    inputs = {"x": rng.uniform(-1.5, 1.5, NS), "y": rng.uniform(-1.5, 1.5, NS),
              "idx": rng.integers(0, 7, NS).astype(np.uint32), "out": np.zeros(NS)}
    return SyncCase(prog, inputs, stages)


def directional_check(program: Program, inputs: dict[str, np.ndarray], wrt: list[str], backend: str,
                      directions: int = 2, h: float = 1e-6, rtol: float = 1e-6, seed: int = 0) -> None:
    """<vjp(u), v> against the central difference of <u, out> along random v (float64)."""
    from vyre.autodiff import vjp as _vjp

    rng = np.random.default_rng(seed)
    n = inputs["out"].size
    grid = (max(1, inputs["x"].size // program.workgroup_size[0]), 1, 1)
    u = rng.standard_normal(n)
    g = _vjp(program, inputs, {"out": u}, wrt, backend=backend, grid=grid)
    for _ in range(directions):
        vs = {w: rng.standard_normal(inputs[w].size) for w in wrt}
        vals = []
        for sign in (1.0, -1.0):
            args = dict(inputs)
            for w in wrt:
                args[w] = inputs[w] + sign * h * vs[w]
            vals.append(float(np.dot(run_forward(program, args, backend="interp", grid=grid)["out"], u)))
        fd = (vals[0] - vals[1]) / (2 * h)
        ad = sum(float(np.dot(g[w], vs[w])) for w in wrt)
        assert np.isfinite(ad), g
        assert abs(fd - ad) <= rtol * max(1.0, abs(fd)) * 10, (fd, ad)
