"""Random Python expression bodies, compiled through @vyre.kernel, against numpy evaluation of the
same expression under vyre's semantics (docs/semantics.md): u32/i32 arithmetic wraps, integer
division truncates with the ``x / 0`` rules, shifts take the amount's low 5 bits, float min/max are
IEEE minNum/maxNum, comparisons with NaN are false."""

from __future__ import annotations

import importlib.util
import itertools
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

Node = tuple[Any, ...]
_DIR = Path(tempfile.mkdtemp(prefix="vyre-frontend-props-"))
_count = itertools.count()

INT_OPS = ["+", "-", "*", "//", "%", "&", "|", "^", "<<", ">>", "min", "max"]
FLOAT_OPS = ["+", "-", "*", "/", "min", "max"]
CMP_OPS = ["<", "<=", ">", ">=", "==", "!="]
DTYPES = {"i32": np.int32, "u32": np.uint32, "f32": np.float32}


def _const(t: str) -> st.SearchStrategy[Node]:
    if t == "f32":
        return st.sampled_from([0.0, 0.5, -2.0, 3.25, 1e30, -0.0]).map(lambda v: ("const", v))
    lo = 0 if t == "u32" else -40
    return st.integers(lo, 40).map(lambda v: ("const", v))


def _exprs(t: str, names: tuple[str, ...] = ("x", "y"), max_leaves: int = 8) -> st.SearchStrategy[Node]:
    """Trees whose every subtree mentions a variable (constants only beside one), so each constant
    takes the type of its neighbour, as in the frontend."""
    ops = FLOAT_OPS if t == "f32" else INT_OPS
    leaves = st.sampled_from([("var", n) for n in names])

    def extend(sub: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
        binary = st.tuples(st.just("bin"), st.sampled_from(ops), sub, st.one_of(sub, _const(t)))
        flipped = st.tuples(st.just("bin"), st.sampled_from(ops), _const(t), sub)
        unary = st.tuples(st.just("un"), st.sampled_from(["-", "abs"] + ([] if t == "f32" else ["~"])), sub)
        cond = st.tuples(st.just("cmp"), st.sampled_from(CMP_OPS), sub, st.one_of(sub, _const(t)))
        conds = st.one_of(cond, st.tuples(st.just("logic"), st.sampled_from(["and", "or"]), cond, cond),
                          st.tuples(st.just("not"), cond))
        select = st.tuples(st.just("sel"), conds, sub, sub)
        return st.one_of(binary, flipped, unary, select)

    return st.recursive(leaves, extend, max_leaves=max_leaves)


def render(n: Node) -> str:
    match n:
        case ("var", name):
            return str(name)
        case ("const", v):
            return repr(v)
        case ("bin", op, a, b) if op in ("min", "max"):
            return f"{op}({render(a)}, {render(b)})"
        case ("bin", op, a, b):
            return f"({render(a)} {op} {render(b)})"
        case ("un", "abs", a):
            return f"abs({render(a)})"
        case ("un", op, a):
            return f"({op}{render(a)})"
        case ("cmp", op, a, b):
            return f"({render(a)} {op} {render(b)})"
        case ("logic", op, a, b):
            return f"({render(a)} {op} {render(b)})"
        case ("not", a):
            return f"(not {render(a)})"
        case ("sel", c, a, b):
            return f"({render(a)} if {render(c)} else {render(b)})"
    raise AssertionError(n)


# ---- numpy under vyre's semantics ----------------------------------------------------------------

def _int_div(a: np.ndarray, b: np.ndarray, t: str) -> np.ndarray:
    if t == "u32":
        return np.where(b == 0, np.uint32(0xFFFFFFFF), a // np.where(b == 0, 1, b)).astype(np.uint32)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    q = np.abs(a64) // np.where(b64 == 0, 1, np.abs(b64)) * np.sign(a64) * np.sign(b64)
    q = np.where(b64 == 0, -1, q)
    return (q & 0xFFFFFFFF).astype(np.uint32).view(np.int32)  # INT_MIN / -1 wraps to INT_MIN


def _int_mod(a: np.ndarray, b: np.ndarray, t: str) -> np.ndarray:
    if t == "u32":
        return np.where(b == 0, 0, a % np.where(b == 0, 1, b)).astype(np.uint32)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    q = np.abs(a64) // np.where(b64 == 0, 1, np.abs(b64)) * np.sign(a64) * np.sign(b64)
    return np.where(b64 == 0, 0, a64 - q * b64).astype(np.int32)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32) if a.dtype == np.int32 else a


def evaluate(n: Node, env: dict[str, np.ndarray], t: str) -> np.ndarray:
    dt = DTYPES[t]
    like = env["x"]

    def ev(m: Node) -> np.ndarray:
        match m:
            case ("var", name):
                return env[name]
            case ("const", v):
                return np.full(like.shape, v, dtype=dt)
            case ("bin", op, a, b):
                x, y = ev(a), ev(b)
                return _binop(op, x, y, t)
            case ("un", "-", a):
                return (-ev(a)).astype(dt) if t == "f32" else (np.uint32(0) - _bits(ev(a))).view(dt)
            case ("un", "~", a):
                return ~ev(a)
            case ("un", "abs", a):
                x = ev(a)
                return x if t == "u32" else np.abs(x).astype(dt)
            case ("cmp", op, a, b):
                return _cmp(op, ev(a), ev(b))
            case ("logic", op, a, b):
                return (ev(a) & ev(b)) if op == "and" else (ev(a) | ev(b))
            case ("not", a):
                return ~ev(a)
            case ("sel", c, a, b):
                return np.where(ev(c), ev(a), ev(b)).astype(dt)
        raise AssertionError(m)

    with np.errstate(all="ignore"):
        return ev(n)


def _cmp(op: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
            "==": np.equal, "!=": np.not_equal}[op](x, y)


def _binop(op: str, x: np.ndarray, y: np.ndarray, t: str) -> np.ndarray:
    dt = DTYPES[t]
    if t == "f32":
        f = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "min": np.fmin,
             "max": np.fmax}[op]
        return f(x, y).astype(np.float32)
    ux, uy = _bits(x), _bits(y)
    match op:
        case "+":
            return (ux + uy).view(dt)
        case "-":
            return (ux - uy).view(dt)
        case "*":
            return (ux * uy).view(dt)
        case "//":
            return _int_div(x, y, t)
        case "%":
            return _int_mod(x, y, t)
        case "&":
            return x & y
        case "|":
            return x | y
        case "^":
            return x ^ y
        case "<<":
            return ((ux.astype(np.uint64) << (uy & 31).astype(np.uint64)) & 0xFFFFFFFF).astype(np.uint32).view(dt)
        case ">>":
            return (x >> (uy & 31).astype(dt)).astype(dt)
        case "min":
            return np.minimum(x, y)
        case "max":
            return np.maximum(x, y)
    raise AssertionError(op)


# ---- the property ----------------------------------------------------------------------------------

def compile_kernel(t: str, body: str, stmts: list[str] | None = None) -> Any:
    """A kernel ``out[i] = body`` over ``x = a[i]``, ``y = b[i]`` (after ``stmts``, indented lines)."""
    path = _DIR / f"prop_kernel_{next(_count)}.py"
    path.write_text(
        "import vyre\nfrom vyre import Array, f32, i32, u32\n\n"
        "@vyre.kernel(workgroup_size=32)\n"
        f"def k(a: Array[{t}], b: Array[{t}], out: Array[{t}]):\n"
        "    i = vyre.gid()\n"
        "    if i < len(out):\n"
        "        x = a[i]\n"
        "        y = b[i]\n"
        + "".join(line + "\n" for line in stmts or ())
        + f"        out[i] = {body}\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


def _values(t: str) -> st.SearchStrategy[list[Any]]:
    if t == "f32":
        el = st.one_of(st.floats(-100, 100, width=32), st.sampled_from([0.0, -0.0, float("nan"), float("inf"),
                                                                        -float("inf"), 3.4e38]))
    elif t == "i32":
        el = st.one_of(st.integers(-50, 50), st.sampled_from([-(2**31), 2**31 - 1, -1, 0, 31, 32]))
    else:
        el = st.one_of(st.integers(0, 60), st.sampled_from([0, 1, 2**32 - 1, 2**31, 31, 32, 33]))
    return st.lists(el, min_size=8, max_size=8)


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, Node, list[Any], list[Any]]:
    t = draw(st.sampled_from(list(DTYPES)))
    return t, draw(_exprs(t)), draw(_values(t)), draw(_values(t))


def check(case: tuple[str, Node, list[Any], list[Any]], backend: str) -> None:
    t, tree, xs, ys = case
    dt = DTYPES[t]
    a, b = np.array(xs, dtype=dt), np.array(ys, dtype=dt)
    k = compile_kernel(t, render(tree))
    got = k(a, b, np.zeros(8, dt), backend=backend)["out"]
    want = evaluate(tree, {"x": a, "y": b}, t)
    np.testing.assert_array_equal(got, want, err_msg=f"{t}: {render(tree)}\n{k.program}")


@settings(max_examples=60)
@given(cases())
def test_random_expressions_match_numpy_on_the_interpreter(case: tuple[str, Node, list[Any], list[Any]]) -> None:
    check(case, "interp")


@settings(max_examples=4)
@given(cases())
def test_random_expressions_match_numpy_on_the_cpu(case: tuple[str, Node, list[Any], list[Any]]) -> None:
    check(case, "cpu")
