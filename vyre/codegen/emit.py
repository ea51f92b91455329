"""The shared statement and expression emitter.

One emitter turns a validated, call-inlined Program into numba Python source; a :class:`Target`
supplies the few target-specific pieces (ids, atomics, barriers, subgroup operations). Its walk of
statements and expressions decides what is emitted (bounds facts, constants, lane kinds, guards);
the spelling goes through a few syntax hooks (``declare``, ``if_open``, ``load``, ...), which the
NVRTC route's printer overrides to print the same decisions as C++ (vyre/codegen/cuda_c.py). Nothing a user
wrote reaches the source as text except validated identifiers, and those only inside mangled names
(``v3_x``, ``b0_out``); literals are emitted from their typed values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import CodegenError
from ..ir import (
    Assign, Atomic, AtomicOp, Barrier, BinOp, BinOpKind, Block, BufferDecl, BufLen, Call, Cast,
    DataType, Expr, Fma, If, InvocationId, Let, LitBool, LitF32, LitF64, LitI32, LitU32, Load,
    LocalId, Loop, Node, Program, Region, Return, Select, Store, SubgroupBallot, SubgroupLocalId,
    SubgroupReduce, SubgroupShuffle, SubgroupSize, UnOp, UnOpKind, Var, WorkgroupId, node_exprs, walk,
    walk_nodes,
)
from ..ir.typing import expr_type
from .lanes import LaneKind, LaneKinds
from .ops import BINOP_EMIT, CTOR, UNOP_EMIT, emit_cast
from .ranges import RangeCtx, Resolve

CODEGEN_VERSION = 22
#: Bump when the C++ the NVRTC route prints changes (codegen/c_ops.py, cuda_c.py, this module's walk):
#: part of that route's binary keys (kept here, which ``import vyre`` loads, so a cache hit imports no printer).
CUDA_C_VERSION = 2

#: the u32 operations :meth:`Emitter.wide_expr` spells in int64, and how
_WIDE_OPS = {BinOpKind.ADD: "+", BinOpKind.SUB: "-", BinOpKind.MUL: "*"}

# The CUDA launch defaults of interleaved flat kernels (vyre/codegen/interleave.py). They live here,
# in a module `import vyre` loads anyway, because the driver reads them for a kernel loaded from the
# binary cache, which must not import the lowering passes.
#: Invocations interleaved per thread on CUDA.
INTERLEAVE = 4
#: Dispatches of at least this many invocations launch INTERLEAVE per thread by default (fewer
#: would leave the GPU short of threads); programs whose buffers all have static counts below it
#: are not interleaved at all (their dispatches are small: the copy would only cost compile time).
INTERLEAVE_MIN_INVOCATIONS = 1 << 20



class _ScopeTypes(Mapping[str, DataType]):
    """The types of a scope's variables, read through (a dict built per call made emitting a
    program of n statements O(n^2): 2000 statements took tens of seconds)."""

    __slots__ = ("_scope",)

    def __init__(self, scope: Mapping[str, Binding]) -> None:
        self._scope = scope

    def __getitem__(self, name: str) -> DataType:
        return self._scope[name].type

    def __iter__(self) -> Iterator[str]:
        return iter(self._scope)

    def __len__(self) -> int:
        return len(self._scope)

@dataclass(frozen=True, slots=True)
class Binding:
    """Where a local lives: ``src`` is its source in the current invocation. A local of the CPU's
    lockstep form lives in the per-lane array ``lane_array`` (``src`` is ``f"{lane_array}[_l]"``)."""

    src: str
    type: DataType
    lane_array: str | None = None

    def at_lane(self, lane: str) -> Binding:
        """The binding as lane ``lane`` sees it (itself unless it lives in a per-lane array)."""
        return self if self.lane_array is None else Binding(f"{self.lane_array}[{lane}]", self.type)


@dataclass(frozen=True)
class SubgroupCode:
    """A subgroup operation's source as a target gives it: ``lines`` (statements at the ``Let``'s
    indentation) run first, then the emitter binds the ``Let``'s destination to ``value``."""

    lines: tuple[str, ...]
    value: str


@dataclass(frozen=True)
class AtomicSite:
    """What a target may want to know about one atomic besides its operand sources."""

    op: AtomicOp
    element: DataType
    count: int  # the buffer's static element count; 0 when it is sized at dispatch
    result_used: bool  # does any expression read the old value?
    constant_value: bool  # is the operand an integer literal?
    lanes_distinct: bool = False  # do the lanes of a warp add to different elements? (lanes.py)


class Target(Protocol):
    """Target hooks used by :class:`Emitter`."""

    name: str
    # True: Return is "_ret = True; break" and every loop containing one is followed by a check
    # (the CPU emits invocation bodies inline in loops); False: Return is a real ``return``.
    flag_returns: bool

    def id_src(self, kind: str, axis: int) -> str: ...
    def atomic(self, site: AtomicSite, buf: str, idx: str, val: str, expected: str | None, zero: str) -> str: ...
    def barrier(self) -> list[str]: ...
    def subgroup(self, e: Expr, operand: Callable[[Expr], str], operand_type: DataType,
                 fresh: Callable[[str], str]) -> SubgroupCode: ...
    def ret(self) -> list[str]: ...


def literal(e: Expr) -> str:
    match e:
        case LitBool(v):
            return "True" if v else "False"
        case LitI32(v):
            return f"int32({v})"
        case LitU32(v):
            return f"uint32({v})"
        case LitF32() | LitF64():
            ctor = "float32" if isinstance(e, LitF32) else "float64"
            fv = e.value
            if math.isnan(fv):
                return f"{ctor}(math.nan)"
            if math.isinf(fv):
                return f"{ctor}({'-' if fv < 0 else ''}math.inf)"
            return f"{ctor}({fv!r})"
        case _:
            raise TypeError(f"not a literal: {e!r}")


def zero_of(t: DataType) -> str:
    return "False" if t is DataType.BOOL else f"{CTOR[t]}(0)"


def assigned_names(body: Iterable[Node]) -> set[str]:
    """Names that some ``Assign`` overwrites (such variables never prove a bound)."""
    return {n.name for n in walk_nodes(tuple(body)) if isinstance(n, Assign)}


def read_names(body: tuple[Node, ...]) -> set[str]:
    """Every variable name an expression of ``body`` mentions (free or not: a safe superset)."""
    return {x.name for n in walk_nodes(body) for e in node_exprs(n) for x in walk(e) if isinstance(x, Var)}


def has_return(body: tuple[Node, ...]) -> bool:
    return any(isinstance(n, Return) for n in walk_nodes(body))


def uses(program: Program, kinds: tuple[type, ...]) -> bool:
    for n in walk_nodes(program.entry):
        if isinstance(n, kinds):
            return True
        for e in node_exprs(n):
            if any(isinstance(x, kinds) for x in walk(e)):
                return True
    return False


@dataclass
class Emitter:
    """Emits statements of one program for one target into ``lines``."""

    program: Program
    target: Target
    buffer_src: dict[str, str]
    lines: list[str] = field(default_factory=list)
    counter: int = 0
    mutable: set[str] = field(default_factory=set)
    # (index source, buffer name) pairs known to be in bounds in the current scope
    facts: frozenset[tuple[str, str]] = frozenset()
    len_alias: dict[str, str] = field(default_factory=dict)
    # names some expression reads: a Let of an atomic outside it discards the old value
    read: set[str] = field(default_factory=set)
    # locals whose value is a compile-time constant (never assigned, bound to literals): source -> value
    consts: dict[str, Expr] = field(default_factory=dict)
    # how locals vary across a warp's lanes (vyre/codegen/lanes.py): what an atomic's index is
    lanes: LaneKinds = field(default_factory=LaneKinds)
    # value ranges (vyre/codegen/ranges.py): an access whose index they prove in range is emitted
    # unguarded; None (CUDA) keeps to the syntactic facts above
    ranges: RangeCtx | None = None
    # u32 locals whose value an int64 expression also holds: a loop's variable -> its int64
    # counter (filled where ``wide_indices``; see :meth:`proven_index`)
    wide: dict[str, str] = field(default_factory=dict)
    counter_src: str = ""  # the counter of the loop :meth:`loop_open` opened last
    #: emit proven indices in int64 arithmetic (:meth:`proven_index`; the CPU emitter)
    wide_indices = False

    def __post_init__(self) -> None:
        self.mutable = assigned_names(self.program.entry)
        self.read = read_names(self.program.entry)

    def fresh(self, hint: str) -> str:
        self.counter += 1
        return f"{hint}{self.counter}"

    # ---- expressions -------------------------------------------------------------------
    def type_of(self, e: Expr, scope: dict[str, Binding]) -> DataType:
        return expr_type(e, _ScopeTypes(scope), self.program)

    def decl(self, name: str) -> BufferDecl:
        return self.program.buffer(name)

    def in_bounds(self, idx_src: str, idx: Expr, buf: BufferDecl, scope: dict[str, Binding] | None = None) -> bool:
        """Is ``idx`` (whose source is ``idx_src``) provably below ``len(buf)`` here? The range
        prover is asked only with the ``scope`` the index is read in (and only on the CPU)."""
        known = self._known_in_bounds(idx_src, idx, buf)
        return known if known is not None else self._prover_bounds(idx, buf, scope)

    def _known_in_bounds(self, idx_src: str, idx: Expr, buf: BufferDecl) -> bool | None:
        """In bounds (or not) by a syntactic fact, a literal below a declared count or a local id
        into workgroup memory; None: the range prover decides."""
        if (idx_src, buf.name) in self.facts:
            return True
        limit = buf.count if buf.count > 0 else None
        if limit is not None and isinstance(idx, LitU32) and idx.value < limit:
            return True
        if buf.is_workgroup and isinstance(idx, LocalId):
            return self.program.workgroup_size[idx.axis] <= buf.count
        return None

    def _prover_bounds(self, idx: Expr, buf: BufferDecl, scope: dict[str, Binding] | None) -> bool:
        return (self.ranges is not None and scope is not None
                and self.ranges.proves_lt(idx, BufLen(buf.name), self.resolver(scope)))

    def proven_index(self, idx_src: str, idx: Expr, buf: BufferDecl, scope: dict[str, Binding]) -> str | None:
        """The source of ``idx`` for an unguarded access of ``buf`` (:meth:`in_bounds`), or None
        where it needs a guard: ``idx_src``, or (``wide_indices``) the same value in int64
        arithmetic. u32 arithmetic wraps, so LLVM must version a loop whose accesses it cannot
        prove consecutive (a run-time check and a scalar copy of the loop), and the scalar copy's
        variable-index accesses keep workgroup arrays in memory; int64 indices need no check.
        Exact where the range prover proves ``idx < len(buf)``: its upper bound of a sum,
        difference or product is the true (unwrapped) one (a difference only where it proved
        ``b <= a``), so below ``len(buf) <= 2^32 - 1`` nothing in it wrapped. A syntactic fact
        (``if p + k < len(x)``) speaks of the wrapped value only: such an index stays u32 unless
        the prover shows it too. The prover runs at most once per access."""
        known = self._known_in_bounds(idx_src, idx, buf)
        by_prover = known is None and self._prover_bounds(idx, buf, scope)
        if not (known or by_prover):
            return None
        if not self.wide_indices:
            return idx_src
        if isinstance(idx, Var):
            return self.wide.get(idx_src, idx_src)  # a loop's variable: its counter
        if not (isinstance(idx, BinOp) and idx.op in _WIDE_OPS):
            return idx_src
        if not (by_prover or self._prover_bounds(idx, buf, scope)):
            return idx_src
        return self.wide_expr(idx, scope)

    def wide_expr(self, e: Expr, scope: dict[str, Binding]) -> str:
        """A u32 expression's value as an int64 expression (:meth:`proven_index` says when that is
        exact): sums, differences and products of locals and literals in int64, anything else
        (which may wrap) as its u32 value."""
        match e:
            case Var(name):
                src = scope[name].src
                return self.wide.get(src, f"int64({src})")
            case LitU32(v):
                return str(v)
            case BinOp(op, a, b) if op in _WIDE_OPS:
                return f"({self.wide_expr(a, scope)} {_WIDE_OPS[op]} {self.wide_expr(b, scope)})"
        return f"int64({self.expr(e, scope)})"

    def resolver(self, scope: dict[str, Binding]) -> Resolve:
        """Names of ``scope`` as the range prover knows them (a binding's source is unique)."""
        def resolve(name: str) -> tuple[str, DataType, bool] | None:
            b = scope.get(name)
            return None if b is None else (b.src, b.type, name not in self.mutable)
        return resolve

    def expr(self, e: Expr, scope: dict[str, Binding]) -> str:
        def sub(x: Expr) -> str:
            return self.expr(x, scope)

        match e:
            case LitBool() | LitI32() | LitU32() | LitF32() | LitF64():
                return self.literal(e)
            case Var(name):
                return scope[name].src
            case Load(buf, index):
                i = sub(index)
                at = self.proven_index(i, index, self.decl(buf), scope)
                return self.load(buf, i, False) if at is None else self.load(buf, at, True)
            case BufLen(buf):
                return self.buf_len(buf)
            case InvocationId(axis):
                return self.target.id_src("gid", axis)
            case WorkgroupId(axis):
                return self.target.id_src("wg", axis)
            case LocalId(axis):
                return self.target.id_src("lid", axis)
            case SubgroupLocalId():
                return self.target.id_src("lane", 0)
            case SubgroupSize():
                return self.literal(LitU32(32))
            case BinOp(op, left, right):
                return self.binop(op, left, right, scope)
            case UnOp(op, operand):
                return self.unop(op, self.type_of(operand, scope), sub(operand))
            case Select(c, a, b):
                return self.select(sub(c), sub(a), sub(b))
            case Cast(target, value):
                return self.cast(target, self.type_of(value, scope), sub(value))
            case Fma(a, b, c):
                return self.fma(sub(a), sub(b), sub(c))
            case Atomic() | SubgroupBallot() | SubgroupShuffle() | SubgroupReduce():
                raise CodegenError(
                    f"{type(e).__name__} nested inside an expression. "
                    "Fix: bind it as the whole value of a Let (validation enforces this)"
                )
            case Call(op_id, _):
                raise CodegenError(f"call of {op_id!r} was not inlined. Fix: run inline_calls first")
            case _:
                raise TypeError(f"not a vyre expression: {e!r}")

    def assigned(self, name: str, value: Expr, scope: dict[str, Binding]) -> str:
        """The source of ``value`` assigned to the variable ``name`` (the CPU emitter writes one
        form differently: vyre/codegen/cpu_narrow.py)."""
        return self.expr(value, scope)

    def binop(self, op: BinOpKind, left: Expr, right: Expr, scope: dict[str, Binding]) -> str:
        """A binary operation's source (the CPU emitter overrides a few: codegen/cpu_narrow.py)."""
        return BINOP_EMIT[op](self.type_of(left, scope), self.expr(left, scope), self.expr(right, scope))

    def is_const(self, e: Expr, scope: dict[str, Binding]) -> bool:
        """Is ``e`` a compile-time constant to LLVM (literals and locals bound to them only)?"""
        for x in walk(e):
            match x:
                case Var(name):
                    if scope[name].src not in self.consts:
                        return False
                case LitBool() | LitI32() | LitU32() | LitF32() | LitF64():
                    pass
                case BinOp() | UnOp() | Cast() | Select() | Fma():
                    pass
                case _:
                    return False
        return True

    def const_let(self, name: str, value: Expr, scope: dict[str, Binding]) -> Expr | None:
        """The constant a ``Let`` of ``name`` to ``value`` binds (``scope``: before it binds; a copy
        of a constant local resolves to that local's value), or None."""
        if name in self.mutable or not self.is_const(value, scope):
            return None
        return self.consts[scope[value.name].src] if isinstance(value, Var) else value

    # ---- expression syntax: numba Python here; the C++ printer overrides these (cuda_c.py) ----
    def literal(self, e: Expr) -> str:
        return literal(e)

    def load(self, buf: str, idx: str, proven: bool) -> str:
        """A load of ``buf[idx]``: unguarded where ``proven`` in bounds, else zero past the end."""
        b = self.buffer_src[buf]
        return f"{b}[{idx}]" if proven else f"_vy_ld({b}, {idx}, {zero_of(self.decl(buf).element)})"

    def buf_len(self, buf: str) -> str:
        return f"uint32({self.buffer_src[buf]}.shape[0])"

    def unop(self, op: UnOpKind, t: DataType, a: str) -> str:
        return UNOP_EMIT[op](t, a)

    def select(self, cond: str, a: str, b: str) -> str:
        return f"({a} if {cond} else {b})"

    def fma(self, a: str, b: str, c: str) -> str:
        """``Fma``: ``a*b + c``, contracted as the compiler chooses (CUDA: ``--fmad=true``); the
        CPU emitter asks LLVM for a fused one where the machine has it (vyre/codegen/cpu_runtime.py)."""
        return f"({a} * {b} + {c})"

    def cast(self, target: DataType, source: DataType, a: str) -> str:
        return emit_cast(target, source, a)

    # ---- statement syntax: numba Python here; the C++ printer overrides these (vyre/codegen/cuda_c.py) ----
    # The statement walk below decides what is emitted (bounds facts, constants, lane kinds, guards,
    # atomics, subgroup operations) once for both languages; these hooks only spell it.
    def declare(self, t: DataType, name: str, value: str, const: bool = False) -> str:
        """The statement binding the new local ``name`` (of type ``t``; ``const``: never reassigned)."""
        return f"{name} = {value}"

    def assign(self, name: str, value: str) -> str:
        return f"{name} = {value}"

    def store(self, buf_src: str, idx: str, value: str) -> str:
        """An unguarded store (``value`` as :meth:`store_value` gives it)."""
        return f"{buf_src}[{idx}] = {value}"

    def store_value(self, buf: str, value: str) -> str:
        """``value`` as it is stored into ``buf``."""
        return value

    def guarded_store(self, indent: int, buf: str, idx: str, value: str) -> None:
        """Store at ``idx`` (a name or literal) of ``buf`` only where it is in bounds."""
        b = self.buffer_src[buf]
        self.emit(indent, f"if {idx} < {b}.shape[0]:")
        self.emit(indent + 1, self.store(b, idx, value))

    def unproven_store(self, indent: int, buf: str, idx: str, value: str) -> None:
        """A store whose index no fact proves in bounds: the index is evaluated once, then guarded."""
        tmp = self.fresh("_i")
        self.emit(indent, self.declare(DataType.U32, tmp, idx))
        self.guarded_store(indent, buf, tmp, value)

    def if_open(self, cond: str) -> str:
        return f"if {cond}:"

    def elif_open(self, cond: str) -> str:
        return f"elif {cond}:"

    def else_open(self) -> str:
        return "else:"

    def close(self, indent: int) -> None:
        """End the block an ``*_open`` line (or :meth:`open_scope`, :meth:`loop_open`) began."""

    def open_scope(self, indent: int) -> int:
        """Begin a nested scope; its statements' indentation."""
        return indent

    def empty_block(self, indent: int) -> None:
        """What a block that emitted nothing holds."""
        self.emit(indent, "pass")

    def all_of(self, conds: list[str]) -> str:
        return " and ".join(conds)

    def none_of(self, conds: list[str]) -> str:
        return f"not ({' or '.join(conds)})"

    def loop_open(self, indent: int, start: str, end: str) -> str:
        """Open a loop counting from ``start`` up to ``end`` (int64); the counter's source as a u32."""
        it = self.fresh("_it")
        self.emit(indent, f"for {it} in range(int64({start}), int64({end})):")
        self.counter_src = it
        return f"uint32({it})"

    def break_if_returned(self, indent: int) -> None:
        """After a loop holding a flagged Return (``Target.flag_returns``): leave the enclosing loop too."""
        self.emit(indent, "if _ret:")
        self.emit(indent + 1, "break")

    # ---- statements --------------------------------------------------------------------
    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def bind_local(self, name: str, t: DataType, scope: dict[str, Binding]) -> str:
        src = self.fresh("v") + "_" + name
        scope[name] = Binding(src, t)
        return src

    def let_target(self, name: str, t: DataType, scope: dict[str, Binding]) -> str:
        """Where a ``Let`` stores its value; CPU lane emulation overrides this."""
        return self.bind_local(name, t, scope)

    def block(self, body: tuple[Node, ...], scope: dict[str, Binding], indent: int) -> None:
        start = len(self.lines)
        saved, saved_ranges = self.facts, self.ranges
        self.ranges = None if saved_ranges is None else saved_ranges.child()
        for n in body:
            self.stmt(n, scope, indent)
        self.facts, self.ranges = saved, saved_ranges
        if len(self.lines) == start:
            self.empty_block(indent)

    def stmt(self, n: Node, scope: dict[str, Binding], indent: int) -> None:
        match n:
            case Let(name, value):
                t = self.type_of(value, scope)
                if isinstance(value, Atomic):
                    rhs = self.atomic(value, scope, result_used=name in self.read)
                    self.emit(indent, self.declare(t, self.let_target(name, t, scope), rhs))
                elif isinstance(value, (SubgroupBallot, SubgroupShuffle, SubgroupReduce)):
                    operand = value.cond if isinstance(value, SubgroupBallot) else value.value
                    ot = self.type_of(operand, scope)
                    inner = dict(scope)
                    code = self.target.subgroup(value, lambda x: self.expr(x, inner), ot, self.fresh)
                    for line in code.lines:
                        self.emit(indent, line)
                    self.emit(indent, self.declare(t, self.let_target(name, t, scope), code.value))
                else:
                    rhs = self.expr(value, scope)
                    const = self.const_let(name, value, scope)
                    resolved = None
                    if self.ranges is not None and name not in self.mutable:
                        resolved = self.ranges.resolved(value, self.resolver(scope), opaque=False)
                    dest = self.let_target(name, t, scope)
                    if self.ranges is not None:
                        self.ranges.define(dest, resolved, t)
                    if isinstance(value, BufLen) and name not in self.mutable:
                        self.len_alias[dest] = value.buffer
                    if const is not None:
                        self.consts[dest] = const
                    if name not in self.mutable:
                        self.lanes.record(dest, self.lane_kind(value, scope))
                    self.emit(indent, self.declare(t, dest, rhs))
            case Assign(name, value):
                self.emit(indent, self.assign(scope[name].src, self.assigned(name, value, scope)))
            case Store(buf, index, value):
                d = self.decl(buf)
                i = self.expr(index, scope)
                v = self.store_value(buf, self.expr(value, scope))
                at = self.proven_index(i, index, d, scope)
                if at is not None:
                    self.emit(indent, self.store(self.buffer_src[buf], at, v))
                else:
                    self.unproven_store(indent, buf, i, v)
            case If(cond, then, otherwise):
                self.emit(indent, self.if_open(self.expr(cond, scope)))
                saved, saved_ranges = self.facts, self.ranges
                self.facts = saved | self.bound_facts(cond, scope)
                if saved_ranges is not None:
                    self.ranges = saved_ranges.child()
                    self.ranges.assume(cond, self.resolver(scope))
                self.block(then, dict(scope), indent + 1)
                self.facts = saved
                if otherwise:
                    if saved_ranges is not None:
                        self.ranges = saved_ranges.child()
                        self.ranges.assume(cond, self.resolver(scope), holds=False)
                    self.emit(indent, self.else_open())
                    self.block(otherwise, dict(scope), indent + 1)
                self.ranges = saved_ranges
                self.close(indent)
            case Loop(var, start, end, body):
                s, e = self.expr(start, scope), self.expr(end, scope)
                inner = dict(scope)
                self.counter_src = ""
                counter = self.loop_open(indent, s, e)
                src = self.bind_local(var, DataType.U32, inner)
                if var not in self.mutable and all(
                        self.lane_kind(x, scope) is LaneKind.UNIFORM for x in (start, end)):
                    self.lanes.record(src, LaneKind.UNIFORM)
                self.emit(indent + 1, self.declare(DataType.U32, src, counter))
                if self.wide_indices and self.counter_src and var not in self.mutable:
                    self.wide[src] = self.counter_src  # start and end are u32: the counter fits
                saved, saved_ranges = self.facts, self.ranges
                bound = self.len_of(end, scope)
                if bound is not None:
                    self.facts = saved | {(src, bound)}
                if saved_ranges is not None:
                    self.ranges = saved_ranges.child()
                    self.ranges.loop(src, start, end, self.resolver(scope))
                self.block(body, inner, indent + 1)
                self.facts, self.ranges = saved, saved_ranges
                self.close(indent)
                if self.target.flag_returns and has_return(body):
                    self.break_if_returned(indent)  # a Return inside: leave the enclosing loop too
            case Block(body) | Region(_, body):
                self.block(body, dict(scope), self.open_scope(indent))
                self.close(indent)
            case Barrier():
                for line in self.target.barrier():
                    self.emit(indent, line)
            case Return():
                for line in self.target.ret():
                    self.emit(indent, line)
            case _:
                raise TypeError(f"not a vyre node: {n!r}")

    def atomic(self, a: Atomic, scope: dict[str, Binding], result_used: bool = True) -> str:
        d = self.decl(a.buffer)
        ex = None if a.expected is None else self.expr(a.expected, scope)
        return self.target.atomic(self.atomic_site(a, scope, result_used), self.buffer_src[a.buffer],
                                  self.expr(a.index, scope), self.expr(a.value, scope), ex, zero_of(d.element))

    def atomic_site(self, a: Atomic, scope: dict[str, Binding], result_used: bool) -> AtomicSite:
        d = self.decl(a.buffer)
        return AtomicSite(a.op, d.element, d.count, result_used, isinstance(a.value, (LitI32, LitU32)),
                          self.lane_kind(a.index, scope) is LaneKind.DISTINCT)

    def lane_kind(self, e: Expr, scope: dict[str, Binding]) -> LaneKind:
        """How ``e`` varies across a warp's lanes (vyre/codegen/lanes.py)."""
        def local(name: str) -> str | None:
            b = scope.get(name)
            return None if b is None or name in self.mutable else b.src

        return self.lanes.of(e, local)

    # ---- bounds facts ------------------------------------------------------------------
    def len_of(self, e: Expr, scope: dict[str, Binding]) -> str | None:
        """The buffer whose length ``e`` is, when ``e`` provably is one."""
        match e:
            case BufLen(buf):
                return buf
            case Var(name) if name in scope and name not in self.mutable:
                return self.len_alias.get(scope[name].src)
        return None

    def stable(self, e: Expr) -> bool:
        """Can ``e`` be trusted to keep its value inside the guarded scope? Only expressions of ids,
        literals, lengths and never-assigned variables: a loaded value may be overwritten by a store
        inside the scope, so a bound proven on it proves nothing."""
        for x in walk(e):
            if isinstance(x, Var) and x.name in self.mutable:
                return False
            if isinstance(x, (Load, Atomic, SubgroupBallot, SubgroupShuffle, SubgroupReduce, Call)):
                return False
        return True

    def bound_facts(self, cond: Expr, scope: dict[str, Binding]) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        match cond:
            case BinOp(BinOpKind.AND, a, b):
                out |= self.bound_facts(a, scope) | self.bound_facts(b, scope)
            case BinOp(BinOpKind.LT, a, n) | BinOp(BinOpKind.GT, n, a):
                buf = self.len_of(n, scope)
                if buf is not None and self.stable(a):
                    out.add((self.expr(a, scope), buf))
        return out
