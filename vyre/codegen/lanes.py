"""How an index varies across the lanes of a warp, as far as the emitter can tell cheaply.

The CUDA target turns an atomic add whose old value is unused into a warp-aggregated add (one
atomic for a whole warp adding to one address; vyre/codegen/cuda.py). The check that the warp
agrees costs a shuffle, a vote and a branch per add, which is pure latency where the lanes add to
different elements, e.g. the gradient scatter ``grad_x[(gid + j) % n]`` of a reverse loop. An
index classified :attr:`LaneKind.DISTINCT` (the invocation id plus or times something the same in
every lane, or such a sum modulo something other than a constant under 32) keeps a plain atomic.
The classification only chooses between two correct lowerings: it is a cost heuristic, not a
proof (``gid % len(out)`` with a one-element ``out`` is "distinct").
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir import (
    BinOp, BinOpKind, BufLen, Cast, Expr, Fma, InvocationId, LitBool, LitF32, LitF64, LitI32, LitU32, Load,
    LocalId, Select, SubgroupLocalId, SubgroupSize, UnOp, Var, WorkgroupId,
)
from ..ir.schema import expr_children


class LaneKind(enum.Enum):
    UNIFORM = "uniform"  # the same in every lane of a warp
    DISTINCT = "distinct"  # differs between the lanes of a warp
    UNKNOWN = "unknown"


_U, _D, _X = LaneKind.UNIFORM, LaneKind.DISTINCT, LaneKind.UNKNOWN
_SHIFTING = (BinOpKind.ADD, BinOpKind.SUB)


@dataclass
class LaneKinds:
    """Kinds of the locals bound so far, keyed by their generated source name (unique per binding)."""

    kinds: dict[str, LaneKind] = field(default_factory=dict)

    def record(self, src: str, kind: LaneKind) -> None:
        self.kinds[src] = kind

    def of(self, e: Expr, local: Callable[[str], str | None]) -> LaneKind:
        """The kind of ``e``; ``local(name)`` is the source name of a local in scope that is never
        assigned, else None (assigned ones are unknown: their value depends on the path taken)."""
        match e:
            case LitBool() | LitI32() | LitU32() | LitF32() | LitF64() | BufLen() | WorkgroupId() | SubgroupSize():
                return _U
            case InvocationId(axis) | LocalId(axis):
                return _D if axis == 0 else _X
            case SubgroupLocalId():
                return _D
            case Var(name):
                src = local(name)
                return _X if src is None else self.kinds.get(src, _X)
            case Load(_, index):
                return _U if self.of(index, local) is _U else _X
            case Cast(_, value):
                return self.of(value, local)
            case BinOp(op, a, b):
                ka, kb = self.of(a, local), self.of(b, local)
                if ka is _U and kb is _U:
                    return _U
                if op in _SHIFTING and _U in (ka, kb) and _D in (ka, kb):
                    return _D
                if op is BinOpKind.MOD and ka is _D and kb is _U and not (
                        isinstance(b, (LitI32, LitU32)) and b.value < 32):
                    return _D  # modulo a small constant folds lanes together (i % 1: all of them)
                if op is BinOpKind.MUL and _D in (ka, kb) and any(
                        isinstance(x, (LitI32, LitU32)) and x.value != 0 for x in (a, b)):
                    return _D
                return _X
            case UnOp() | Select() | Fma():  # pure: uniform operands give a uniform value
                return _U if all(self.of(k, local) is _U for k in expr_children(e)) else _X
        return _X  # atomics and subgroup operations differ per lane
