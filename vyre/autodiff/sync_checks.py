"""What reverse mode refuses in programs that synchronise or use atomics (docs/autodiff.md).

Supported (reversed by :mod:`vyre.autodiff.reverse`): float atomic adds whose old value is unused
(into a differentiated output, or into workgroup memory), workgroup memory with barriers at
uniform points, subgroup reductions, shuffles and ballots. Refused, with the statement's path:

* an atomic whose old value is read (a counter handing out slots, exchange, compare-exchange):
  the value depends on the order invocations run in, which the backward pass cannot replay;
* an atomic other than add into a differentiated output (the IR's min/max/and/or/xor are
  integer-only; exchange and compare-exchange are order-dependent), or an output that is both
  atomically added to and stored to or loaded;
* ``Return`` in a program with barriers or subgroup ops (the backward's sync points must stay
  uniform);
* workgroup memory or a barrier inside a loop that is not unrolled (checked on the normal form:
  the reverse recomputes loop iterations, and workgroup memory no longer holds their values).
"""

from __future__ import annotations

import re

from ..errors import AutodiffError
from ..ir.expr import Atomic, Load, SubgroupBallot, SubgroupReduce, SubgroupShuffle, Var, walk
from ..ir.node import Barrier, Let, Node, Return, Store, node_exprs
from ..ir.ops import AtomicOp
from ..ir.program import Program
from .nf import NBarrier, NIf, NLet, NLoop, NStmt, NStore
from .prepare import iter_paths


def _err(path: str, found: str, fix: str) -> AutodiffError:
    return AutodiffError(f"{path}: {found}. Fix: {fix}")


def check_sync_and_atomics(program: Program, body: tuple[Node, ...], outputs: list[str]) -> None:
    """Raise for the first atomic, barrier or subgroup use reverse mode cannot differentiate."""
    shared = {b.name for b in program.buffers if b.is_workgroup}
    nodes = list(iter_paths(body))
    used: set[str] = set()
    stored: dict[str, str] = {}
    loaded: dict[str, str] = {}
    sync = False
    for path, n in nodes:
        if isinstance(n, Barrier):
            sync = True
        if isinstance(n, Store):
            stored.setdefault(n.buffer, path)
        for e in node_exprs(n):
            for x in walk(e):
                if isinstance(x, Var):
                    used.add(x.name)
                elif isinstance(x, Load):
                    loaded.setdefault(x.buffer, path)
                elif isinstance(x, SubgroupBallot | SubgroupShuffle | SubgroupReduce):
                    sync = True
    for path, n in nodes:
        if sync and isinstance(n, Return):
            raise _err(path, "a Return in a program with barriers or subgroup ops; the backward "
                             "pass would synchronise at points some invocations no longer reach",
                       "guard the rest of the program with an If on the condition instead of "
                       "returning")
        if not (isinstance(n, Let) and isinstance(n.value, Atomic)):
            continue
        at = n.value
        op = at.op.name.lower()
        if n.name in used:
            raise _err(path, f"the old value returned by an atomic {op} on {at.buffer!r} is read; it "
                             "depends on the order invocations run in, which the backward pass "
                             "cannot replay",
                       "do not use the value an atomic returns in a differentiated program "
                       "(compute slots or counters in a separate dispatch)")
        if at.buffer in outputs:
            if at.op is not AtomicOp.ADD:
                raise _err(path, f"an atomic {op} into the differentiated output {at.buffer!r}; "
                                 "only atomic add has an adjoint",
                           "accumulate the output with atomic adds, or store it")
            other = stored.get(at.buffer) or loaded.get(at.buffer)
            if other is not None:
                raise _err(path, f"atomic adds into {at.buffer!r}, which the program also stores "
                                 f"to or loads (at {other}); its cotangent would mix the two",
                           "accumulate into a separate output buffer")
        elif at.buffer in shared and program.buffer(at.buffer).element.is_float \
                and at.op is not AtomicOp.ADD:
            raise _err(path, f"an atomic {op} on the float workgroup buffer {at.buffer!r}; it "
                             "depends on the order invocations run in",
                       "use an atomic add, or a store at an index only one invocation writes")


def check_loops(stmts: tuple[NStmt, ...], shared: frozenset[str], in_loop: str | None = None) -> None:
    """Raise when workgroup memory or a barrier sits inside a loop that was not unrolled."""
    for s in stmts:
        match s:
            case NLet(_, _, value):
                bufs = {x.buffer for x in walk(value) if isinstance(x, Load | Atomic)}
                if in_loop is not None and bufs & shared:
                    _loop_err(in_loop, f"accesses workgroup buffer {sorted(bufs & shared)[0]!r}")
            case NStore(buf, _, _):
                if in_loop is not None and buf in shared:
                    _loop_err(in_loop, f"stores to workgroup buffer {buf!r}")
            case NBarrier():
                if in_loop is not None:
                    _loop_err(in_loop, "contains a Barrier")
            case NIf(_, then, other, _):
                check_loops(then, shared, in_loop)
                check_loops(other, shared, in_loop)
            case NLoop(var, _, _, body, _):
                check_loops(body, shared, in_loop if in_loop is not None else var)
            case _:
                raise TypeError(f"not a normal-form statement: {s!r}")


def _loop_err(var: str, what: str) -> None:
    name = re.sub(r"__\d+$", "", var)
    raise AutodiffError(
        f"the loop over {name!r} {what}, and it is not unrolled (its bounds are not constants, or "
        "it has more than 64 trips); its reverse recomputes iterations, and workgroup memory no "
        "longer holds their values. Fix: give the loop constant bounds and at most 64 trips, or "
        "move the workgroup phases out of it")


__all__ = ["check_loops", "check_sync_and_atomics"]
