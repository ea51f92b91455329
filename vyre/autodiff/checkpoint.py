"""Linear-time reversal of loops that were not unrolled: a per-invocation tape with checkpoints.

The reverse of iteration ``k`` needs the loop-carried values at the start of iteration ``k``
(everything else the body computes is recomputed from them, the loop variable and values defined
before the loop). The forward replay stores them; the reverse reads them back.

Memory: every carried value the adjoint reads gets a scratch buffer ``tape_<k>`` of ``C * G``
elements (``G`` invocations in the dispatch, ``C`` states per invocation), laid out state-major
(``slot * G + invocation``, so neighbouring invocations touch neighbouring addresses). ``C`` is
the *length* of the u32 buffer ``tape_info`` (never read; its contents do not matter) and ``G`` a
tape's length divided by ``C``: the runner sizes them (:func:`tape_arrays`) with any array kind
and no data to upload, and one backward program serves every trip count and grid:

* ``n <= C`` trips: every state is stored in the forward replay (stride 1); the reverse reads
  them back, the whole loop as one segment. Work: one replay + one reverse sweep, O(n).
* ``n > C``: the replay stores a checkpoint every ``L`` iterations in ``K = C / 2`` slots, with
  ``L = S = C - K`` (segments as long as the other ``S`` slots hold, so few of them) while
  ``n <= K * S`` (about ``C^2 / 4``); the reverse handles the segments last to first, replaying
  each from its checkpoint into the ``S`` segment slots and reversing it from there. Work: about
  two replays + one reverse sweep, O(n).
* beyond that, ``L = ceil(n / K)``, and the states of a segment past its first ``S`` are
  recomputed from the segment's checkpoint (O(n * L / 2) extra work): still exact, slower.

Per iteration, the replay records with a carried countdown and address (no division), and the
reverse loads the state it needs next one iteration ahead, so the tape's latency overlaps the
current iteration's work.

The runner picks ``C`` from a memory budget (:data:`TAPE_BUDGET_BYTES`, at most
:data:`MAX_STATES`): see :func:`states_for`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..driver.arrays import ArrayKind
from ..ir.expr import BinOp, BufLen, Expr, InvocationId, LitU32, Load, Select, Var, lit
from ..ir.node import Let, Node, Store
from ..ir.ops import BinOpKind
from ..ir.program import BufferAccess, BufferDecl, Program
from ..ir.types import DataType

TAPE_BUDGET_BYTES = 256 * 2**20
"""Default scratch memory the runners give all tapes of one dispatch together."""

MAX_STATES = 4096
"""Most states per invocation and loop the runners allocate (loops with more trips checkpoint)."""

MIN_STATES = 2


def _b(op: BinOpKind, a: Expr, b: Expr) -> BinOp:
    return BinOp(op, a, b)


def tape_type(ty: DataType) -> DataType:
    """The element type a carried value of type ``ty`` is taped as (bools as u32)."""
    return DataType.U32 if ty is DataType.BOOL else ty


def to_tape(v: Expr, ty: DataType) -> Expr:
    return Select(v, LitU32(1), LitU32(0)) if ty is DataType.BOOL else v


def from_tape(v: Expr, ty: DataType) -> Expr:
    return _b(BinOpKind.NE, v, LitU32(0)) if ty is DataType.BOOL else v


@dataclass
class LoopTape:
    """What the taped emission of one loop leaves for its reversal (names of u32 locals)."""

    trips: str
    stride: str
    columns: dict[str, str]  # carried name -> scratch buffer


@dataclass
class TapePlan:
    """The scratch buffers of one backward program and the locals every tape index uses."""

    info: str
    taken: set[str]
    c: str = "tape_c__"
    k: str = "tape_k__"
    s: str = "tape_s__"
    g: str = "tape_g__"
    buffers: dict[str, DataType] = field(default_factory=dict)
    loops: dict[str, LoopTape] = field(default_factory=dict)

    def new_buffer(self, ty: DataType) -> str:
        k = len(self.buffers)
        while f"tape_{k}" in self.taken:
            k += 1
        name = f"tape_{k}"
        self.taken.add(name)
        self.buffers[name] = tape_type(ty)
        return name

    def prologue(self) -> list[Node]:
        """The locals every tape index reads (dead-code elimination drops them when unused);
        ``G``'s value is set by :meth:`finish` once the surviving tapes are known."""
        return [Let(self.c, BufLen(self.info)), Let(self.k, _b(BinOpKind.DIV, Var(self.c), LitU32(2))),
                Let(self.s, _b(BinOpKind.SUB, Var(self.c), Var(self.k))),
                Let(self.g, LitU32(0))]

    def finish(self, body: tuple[Node, ...], used: set[str]) -> tuple[Node, ...]:
        """``body`` with ``G`` read from the length of a tape that survived dead-code elimination
        (``G`` is only live when one did); without one, ``C`` becomes a constant (and ``used``
        loses ``tape_info``)."""
        live = [b for b in self.buffers if b in used]
        if not live:
            # No tape survived (the adjoints never read carried values): every loop reverses as
            # one segment, so ``C`` is unbounded and ``tape_info`` is not needed.
            used.discard(self.info)
            c = Let(self.c, LitU32(0xFFFFFFFF))
            return tuple(c if isinstance(n, Let) and n.name == self.c else n for n in body)
        g = Let(self.g, _b(BinOpKind.DIV, BufLen(live[0]), Var(self.c)))
        return tuple(g if isinstance(n, Let) and n.name == self.g else n for n in body)

    def addr(self, slot: Expr) -> Expr:
        return _b(BinOpKind.ADD, _b(BinOpKind.MUL, slot, Var(self.g)), InvocationId(0))

    def owned(self) -> Expr:
        """Whether this invocation has tape columns (``InvocationId(0) < G``)."""
        return _b(BinOpKind.LT, InvocationId(0), Var(self.g))

    def store(self, buf: str, slot: Expr, value: Expr, ty: DataType) -> Store:
        return self.store_at(buf, self.addr(slot), value, ty)

    def store_at(self, buf: str, addr: Expr, value: Expr, ty: DataType) -> Store:
        """A store to element ``addr`` of the tape (callers guard it with :meth:`owned`: an
        invocation past ``G`` would write into a neighbour's states)."""
        return Store(buf, addr, to_tape(value, ty))

    def load(self, buf: str, slot: Expr, ty: DataType) -> Expr:
        value = from_tape(Load(buf, self.addr(slot)), ty)
        if ty.is_float:  # an invocation past the G the tapes were sized for reads NaN, not a neighbour's state
            return Select(self.owned(), value, lit(math.nan, ty))
        return value

    def declare(self, used: set[str], first_binding: int) -> list[BufferDecl]:
        """Declarations of the info buffer and the tapes that ``used`` names (the survivors of
        dead-code elimination), bindings from ``first_binding``."""
        out: list[BufferDecl] = []
        live = [b for b in self.buffers if b in used]
        if not live and self.info not in used:
            return out
        out.append(BufferDecl(self.info, first_binding, BufferAccess.READ_ONLY, DataType.U32))
        for k, b in enumerate(live):
            out.append(BufferDecl(b, first_binding + 1 + k, BufferAccess.READ_WRITE, self.buffers[b]))
        return out


def states_for(invocations: int, bytes_per_state: int, *, budget: int = TAPE_BUDGET_BYTES,
               max_states: int = MAX_STATES) -> int:
    """``C``: states per invocation and loop that fit ``budget`` bytes for ``invocations``."""
    per = max(1, invocations * max(1, bytes_per_state))
    return max(MIN_STATES, min(max_states, budget // per))


def scratch_buffers(program: Program, back: Program) -> tuple[BufferDecl | None, list[BufferDecl]]:
    """The info buffer and the tape buffers of the backward program ``back`` of ``program``:
    every buffer ``grad`` added that is neither a gradient nor a stored-flag buffer."""
    from .reverse import GRAD_PREFIX, STORED_PREFIX

    own = {b.name for b in program.buffers}
    extra = [b for b in back.buffers if b.name not in own and not b.name.startswith(GRAD_PREFIX)
             and not b.name.startswith(STORED_PREFIX)]
    info = next((b for b in extra if b.access is BufferAccess.READ_ONLY), None)
    return info, [b for b in extra if b.access is BufferAccess.READ_WRITE]


def tape_arrays(program: Program, back: Program, invocations: int, kind: ArrayKind | None = None, *,
                budget: int = TAPE_BUDGET_BYTES, max_states: int = MAX_STATES) -> dict[str, Any]:
    """Scratch arrays (of ``kind``, default numpy) for the tapes of ``back`` (empty when it has
    none), for a dispatch of ``invocations`` invocations (grid x times workgroup x): ``tape_info``
    of ``C`` elements and every tape of ``C * invocations``. Nothing needs initialising."""
    info, tapes = scratch_buffers(program, back)
    if info is None:
        return {}
    k = kind if kind is not None else ArrayKind()
    per_state = sum(t.element.size_bytes for t in tapes)
    c = states_for(invocations, per_state, budget=budget, max_states=max_states)
    out = {info.name: k.empty(c, np.dtype(np.uint32))}
    for t in tapes:
        out[t.name] = k.empty(c * invocations, t.element.np_dtype)
    return out


__all__ = ["MAX_STATES", "TAPE_BUDGET_BYTES", "LoopTape", "TapePlan", "scratch_buffers",
           "states_for", "tape_arrays"]
