"""How much work one invocation does: statements executed, loop trip counts included.

The CPU backend runs a dispatch serially or on the thread pool. Invocation count alone is the wrong
measure: a row softmax over 4096 rows of 4096 columns has few invocations and a great deal of work.
:func:`work_per_invocation` estimates the statements one invocation executes, each loop multiplying
its body by its trip count evaluated from the call's arrays: literal bounds, ``BufLen``, loads at a
literal index of a read-only buffer (scalar parameters), locals bound once to such expressions, and
``+ - * / % min max >> <<`` and comparisons of them. Invocation, workgroup and local ids count as
0: the first invocation's work stands for every invocation's (a row or block program's invocations
each take one row or block of the same length; a loop whose length grows with the id, rare in vyre
programs, is underestimated). A transcendental call counts :data:`TRANSCENDENTAL_STATEMENTS`. A
bound it cannot evaluate (a loaded value, an outer loop variable) counts :data:`UNKNOWN_TRIPS`
iterations, as the self-substrate's static counts do. A branch whose condition evaluates (a
comparison of such values: a row program's ``cols >= 128``) counts the arm it takes; any other
counts its costlier arm (an upper bound).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ..ir import (
    Assign, BinOp, BinOpKind, Block, BufLen, Cast, Expr, If, InvocationId, Let, LitI32, LitU32, Load, LocalId, Loop,
    Node, Program, Region, SubgroupLocalId, UnOp, UnOpKind, Var, WorkgroupId, node_exprs, walk, walk_nodes,
)

__all__ = ["TRANSCENDENTAL_STATEMENTS", "UNKNOWN_TRIPS", "WorkModel", "work_model", "work_per_invocation"]

#: Iterations assumed for a loop whose bounds cannot be evaluated before the run.
UNKNOWN_TRIPS = 16
#: Statements one transcendental function counts (``exp``, ``log``, ``sin``, ``pow``...): the CPU
#: calls libm once per element, scalar, 2-3 ns, where a vectorised statement takes a fraction of
#: a ns. Counted as one statement, a row softmax of 16x1024 f32 stayed serial: 30.7 us, 19.3 on
#: the thread pool (numpy 30); 64x64 16.7 -> 12.3 us (BENCHMARKS.md).
TRANSCENDENTAL_STATEMENTS = 32
_TRANSCENDENTAL = frozenset({
    UnOpKind.EXP, UnOpKind.EXP2, UnOpKind.LOG, UnOpKind.LOG2, UnOpKind.SIN, UnOpKind.COS, UnOpKind.TAN,
    UnOpKind.ASIN, UnOpKind.ACOS, UnOpKind.ATAN, UnOpKind.SINH, UnOpKind.COSH, UnOpKind.TANH,
})

Arrays = Mapping[str, Any]  # buffer name -> bound array (anything with .size; numpy for loads)
_Eval = Callable[[Arrays], float | None]


class WorkModel(NamedTuple):  # not a dataclass: defined on a warm start's first dispatch (0.07 ms, a dataclass 0.5-1)
    """``statements(arrays)``: statements one invocation executes over these bound arrays."""

    fn: Callable[[Arrays], float]
    constant: float | None = None  # programs without loops: the count, worked out once
    #: the count reads array elements (a scalar parameter in a loop bound), not only lengths: a
    #: count worked out for one call's lengths does not hold for another call's
    reads_elements: bool = True

    def statements(self, arrays: Arrays) -> float:
        return self.constant if self.constant is not None else self.fn(arrays)


def _bound(e: Expr, lets: Mapping[str, Expr], readonly: frozenset[str], depth: int = 0) -> _Eval:
    """An evaluator of ``e`` from the call's arrays (None: not known before the run). ``lets``
    also maps a workgroup buffer's ``BufLen`` to its declared length (see :func:`work_model`)."""
    match e:
        case LitU32(v) | LitI32(v):
            val = float(v)
            return lambda _a: val
        case BufLen(name) if (fixed := lets.get(_BUFLEN + name)) is not None:
            return _bound(fixed, lets, readonly, depth + 1)
        case BufLen(name):
            return lambda arrays: float(arrays[name].size) if name in arrays else None
        case InvocationId() | WorkgroupId() | LocalId() | SubgroupLocalId():
            return lambda _a: 0.0
        case Load(name, LitU32(i)) if name in readonly:
            return lambda arrays: _element(arrays, name, i)
        case Cast(_, inner):
            return _bound(inner, lets, readonly, depth)
        case Var(name) if name in lets and depth < 32:
            return _bound(lets[name], lets, readonly, depth + 1)
        case BinOp(op, a, b) if op in _ARITH:
            fa, fb, f = _bound(a, lets, readonly, depth), _bound(b, lets, readonly, depth), _ARITH[op]

            def ev(arrays: Arrays) -> float | None:
                x, y = fa(arrays), fb(arrays)
                return None if x is None or y is None else f(x, y)

            return ev
        case _:
            return lambda _a: None


def _element(arrays: Arrays, name: str, i: int) -> float | None:
    a = arrays.get(name)
    try:
        v = float(a[i]) if a is not None and i < a.size else None
    except (TypeError, ValueError, IndexError):  # a device array, or not a number
        return None
    return v if v is not None and v == v and abs(v) < 2**40 else None


def _div(x: float, y: float) -> float | None:
    return x // y if y else None


def _mod(x: float, y: float) -> float | None:
    return x % y if y else None


_ARITH: dict[BinOpKind, Callable[[float, float], float | None]] = {
    BinOpKind.ADD: lambda x, y: x + y,
    BinOpKind.SUB: lambda x, y: max(0.0, x - y),
    BinOpKind.MUL: lambda x, y: x * y,
    BinOpKind.DIV: _div,
    BinOpKind.MOD: _mod,
    BinOpKind.MIN: min,
    BinOpKind.MAX: max,
    BinOpKind.SHR: lambda x, y: x // 2 ** y if 0 <= y < 64 else None,
    BinOpKind.SHL: lambda x, y: x * 2 ** y if 0 <= y < 64 else None,
    # conditions: 1 or 0 (a SUB that would wrap evaluates to 0, so an estimate may take the other
    # arm than the run: it only counts work, and correctness never depends on it)
    BinOpKind.LT: lambda x, y: float(x < y),
    BinOpKind.LE: lambda x, y: float(x <= y),
    BinOpKind.GT: lambda x, y: float(x > y),
    BinOpKind.GE: lambda x, y: float(x >= y),
    BinOpKind.EQ: lambda x, y: float(x == y),
    BinOpKind.NE: lambda x, y: float(x != y),
    BinOpKind.AND: lambda x, y: float(bool(x) and bool(y)),
    BinOpKind.OR: lambda x, y: float(bool(x) or bool(y)),
}


def _body(body: tuple[Node, ...], lets: Mapping[str, Expr], readonly: frozenset[str], libm: int
          ) -> Callable[[Arrays], float]:
    """Statements executed by ``body`` (loops multiplied by their trip counts; a transcendental
    call ``libm`` more)."""
    flat = 0.0
    loops: list[tuple[_Eval, _Eval, Callable[[Arrays], float], Callable[[Arrays], float]]] = []
    nested: list[Callable[[Arrays], float]] = []
    branches: list[tuple[_Eval, Callable[[Arrays], float], Callable[[Arrays], float]]] = []
    for n in body:
        flat += 1 + libm * _transcendentals(n)
        match n:
            case Loop(name, start, end, inner):
                # in the body the loop variable is its first value, and its last: the mean of the
                # two iterations' work stands for every iteration's (exact where it grows linearly,
                # a triangular loop); unknown, it counted UNKNOWN_TRIPS per outer iteration, and
                # vyre.ops's column sums (a block loop inside a loop over rows) 16x their work
                first = _body(inner, {**lets, name: start}, readonly, libm)
                last = (_body(inner, {**lets, name: BinOp(BinOpKind.SUB, end, LitU32(1))}, readonly, libm)
                        if _mentions(inner, name) else first)  # a body blind to its variable: one count
                loops.append((_bound(start, lets, readonly), _bound(end, lets, readonly), first, last))
            case If(cond, then, otherwise):
                branches.append((_bound(cond, lets, readonly), _body(then, lets, readonly, libm),
                                 _body(otherwise, lets, readonly, libm)))
            case Block(inner) | Region(_, inner):
                nested.append(_body(inner, lets, readonly, libm))
            case _:
                pass

    def count(arrays: Arrays) -> float:
        total = flat + sum(f(arrays) for f in nested)
        for cond, then, otherwise in branches:
            c = cond(arrays)
            if c is None:
                total += max(then(arrays), otherwise(arrays))
            else:
                total += then(arrays) if c else otherwise(arrays)
        for start, end, first, last in loops:
            s, e = start(arrays), end(arrays)
            if s is None or e is None:
                total += UNKNOWN_TRIPS * first(arrays)
            elif e - s > 1:
                total += (e - s) * (first(arrays) + last(arrays)) / 2
            elif e > s:
                total += first(arrays)
        return total

    return count


def _mentions(body: tuple[Node, ...], name: str) -> bool:
    """Does an expression in ``body`` read variable ``name`` (a loop's own variable: locals bound
    outside the loop cannot)?"""
    return any(isinstance(e, Var) and e.name == name
               for n in walk_nodes(body) for top in node_exprs(n) for e in walk(top))


def _transcendentals(n: Node) -> int:
    """Transcendental function calls in ``n``'s own expressions (a loop's or branch's body aside)."""
    return sum(1 for top in node_exprs(n) for e in walk(top)
               if (isinstance(e, UnOp) and e.op in _TRANSCENDENTAL) or (isinstance(e, BinOp) and e.op is BinOpKind.POW))


_BUFLEN = "\0buflen:"  # prefix of a workgroup buffer's length in the ``lets`` map (no local has it)


def _lets(program: Program) -> dict[str, Expr]:
    """Locals bound by exactly one ``let`` and never assigned: their value is that expression; and
    each workgroup buffer's declared length, under ``_BUFLEN + name``."""
    seen: dict[str, Expr] = {}
    bad: set[str] = set()
    for n in walk_nodes(program.entry):
        match n:
            case Let(name, value):
                if name in seen:
                    bad.add(name)
                seen[name] = value
            case Assign(name, _) | Loop(name, _, _, _):
                bad.add(name)
            case _:
                pass
    out: dict[str, Expr] = {k: v for k, v in seen.items() if k not in bad}
    for b in program.buffers:
        if b.is_workgroup:
            out[_BUFLEN + b.name] = LitU32(b.count)
    return out


def _reads_elements(program: Program, readonly: frozenset[str]) -> bool:
    """Could a loop bound's evaluator read an element (``Load(name, literal)`` of a read-only
    buffer, the case :func:`_bound` evaluates)? Checked over the whole program: an upper bound."""
    for n in walk_nodes(program.entry):
        for top in node_exprs(n):
            for e in walk(top):
                if isinstance(e, Load) and e.buffer in readonly and isinstance(e.index, LitU32):
                    return True
    return False


_cache: dict[tuple[int, bool], tuple[Program, WorkModel]] = {}
_lock = threading.Lock()


def work_model(program: Program, libm: bool = True) -> WorkModel:
    """The program's :class:`WorkModel` (built once per program object): a transcendental call
    counts :data:`TRANSCENDENTAL_STATEMENTS` statements, or (``libm=False``) one."""
    key = (id(program), libm)
    hit = _cache.get(key)
    if hit is not None and hit[0] is program:
        return hit[1]
    readonly = frozenset(b.name for b in program.buffers if not b.access.writable and not b.is_workgroup)
    fn = _body(program.entry, _lets(program), readonly, TRANSCENDENTAL_STATEMENTS if libm else 0)
    loops = any(isinstance(n, Loop) for n in walk_nodes(program.entry))
    model = WorkModel(fn, None if loops else fn({}), _reads_elements(program, readonly))
    with _lock:
        if len(_cache) > 4096:
            _cache.clear()
        _cache[key] = (program, model)
    return model


def work_per_invocation(program: Program, arrays: Arrays, *, libm: bool = True) -> float:
    """Statements one invocation of ``program`` executes over the call's bound ``arrays`` (an
    estimate; see the module docs; ``libm``: see :func:`work_model`)."""
    return work_model(program, libm).statements(arrays)
