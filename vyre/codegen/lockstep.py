"""The lockstep split: a CPU lowering pass for programs with barriers or subgroup operations.

The CPU runs the invocations of a workgroup one after another, so a barrier or a subgroup
operation cannot sit inside one invocation's code: the body is cut at every synchronisation
point (validation only allows them at uniform points) into *steps* that the CPU emitter
(vyre/codegen/cpu.py) prints one for one:

* :class:`Segment`: straight-line statements free of synchronisation, run for every lane of the
  workgroup before the next step starts (the cut between two segments is the barrier). A ``Let``
  at a segment's top level binds a per-lane array, so later steps see every lane's value.
* :class:`Exchange`: ``let name = <subgroup op>`` computed across the lane arrays of each group of
  32 lanes. Its operands are always variables that the segment before it bound (the pass moves
  the operand expressions there, under names of its own that the program does not use).
* :class:`UniformLoop`: a uniform loop that holds synchronisation: a loop around steps (its bounds
  are the same for every lane, so lane 0's values serve).
* :class:`UniformScope`: a ``Block`` or ``Region`` that holds synchronisation: steps in a nested
  scope.

:func:`as_program` turns the steps back into a program of the public IR (a ``Barrier`` after each
segment, an ``Exchange`` as its ``Let``) that means the same as the input: tests run it against the
reference interpreter. :func:`print_lockstep` is its text form, for snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeAlias, assert_never

from ..errors import CodegenError
from ..ir import (
    Assign, Barrier, Block, Expr, Let, Loop, Node, Program, Region, SubgroupBallot, SubgroupReduce,
    SubgroupShuffle, Var, walk_nodes,
)
from ..ir.printer import name_text, print_expr, print_statements

__all__ = [
    "Exchange", "Lockstep", "Segment", "Step", "UniformLoop", "UniformScope", "as_program", "is_sync",
    "needs_lockstep", "print_lockstep", "split_lockstep",
]

SubgroupOp: TypeAlias = SubgroupBallot | SubgroupShuffle | SubgroupReduce
_SUBGROUP = (SubgroupBallot, SubgroupShuffle, SubgroupReduce)


@dataclass(frozen=True, slots=True)
class Segment:
    """Statements without synchronisation, run for every lane before the next step."""

    body: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Exchange:
    """``let name = op`` across each subgroup; ``op``'s operands are :class:`~vyre.ir.Var`."""

    name: str
    op: SubgroupOp


@dataclass(frozen=True, slots=True)
class UniformLoop:
    var: str
    start: Expr
    end: Expr
    body: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class UniformScope:
    body: tuple[Step, ...]


Step: TypeAlias = Segment | Exchange | UniformLoop | UniformScope


@dataclass(frozen=True, slots=True)
class Lockstep:
    """A program in lockstep form: its declarations and its body as steps."""

    program: Program
    steps: tuple[Step, ...]


def is_sync(n: Node) -> bool:
    """Does ``n`` contain a barrier or a subgroup op?"""
    for m in walk_nodes((n,)):
        if isinstance(m, Barrier):
            return True
        if isinstance(m, Let) and isinstance(m.value, _SUBGROUP):
            return True
    return False


def needs_lockstep(program: Program) -> bool:
    """Does the CPU need the lockstep form for ``program`` (a barrier or a subgroup op anywhere)?"""
    return any(is_sync(n) for n in program.entry)


@dataclass
class _Splitter:
    taken: set[str]
    counter: int = 0

    def synthetic(self, hint: str) -> str:
        """A variable name that no variable of the program uses (they share the lane arrays' scopes)."""
        while True:
            self.counter += 1
            name = f"{hint}_{self.counter}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def exchange(self, name: str, v: SubgroupOp, out: list[Step]) -> None:
        op_name = self.synthetic("sgop")
        stmts: list[Node] = []
        op: SubgroupOp
        match v:
            case SubgroupBallot(cond):
                stmts.append(Let(op_name, cond))
                op = SubgroupBallot(Var(op_name))
            case SubgroupShuffle(value, lane):
                lane_name = self.synthetic("sglane")
                stmts += [Let(op_name, value), Let(lane_name, lane)]
                op = SubgroupShuffle(Var(op_name), Var(lane_name))
            case SubgroupReduce(kind, value):
                stmts.append(Let(op_name, value))
                op = SubgroupReduce(kind, Var(op_name))
            case _:
                assert_never(v)
        out.append(Segment(tuple(stmts)))
        out.append(Exchange(name, op))

    def steps(self, body: tuple[Node, ...]) -> tuple[Step, ...]:
        out: list[Step] = []
        pending: list[Node] = []
        for n in body:
            if not is_sync(n):
                pending.append(n)
                continue
            if pending:
                out.append(Segment(tuple(pending)))
                pending = []
            match n:
                case Barrier():
                    pass  # the cut between two segments is the barrier
                case Let(name, SubgroupBallot() | SubgroupShuffle() | SubgroupReduce() as value):
                    self.exchange(name, value, out)
                case Loop(var, start, end, lbody):
                    out.append(UniformLoop(var, start, end, self.steps(lbody)))
                case Block(b) | Region(_, b):
                    out.append(UniformScope(self.steps(b)))
                case _:
                    raise CodegenError(
                        f"{type(n).__name__} holding a barrier or subgroup op is not at a uniform point. "
                        "Fix: validate the program first (program.validate())"
                    )
        if pending:
            out.append(Segment(tuple(pending)))
        return tuple(out)


def split_lockstep(program: Program) -> Lockstep:
    """``program`` (valid, calls inlined) cut into lockstep steps (module docs)."""
    taken = {n.name for n in walk_nodes(program.entry) if isinstance(n, (Let, Assign))}
    taken |= {n.var for n in walk_nodes(program.entry) if isinstance(n, Loop)}
    return Lockstep(program, _Splitter(taken).steps(program.entry))


def _nodes(steps: tuple[Step, ...]) -> list[Node]:
    out: list[Node] = []
    for s in steps:
        match s:
            case Segment(body):
                out += [*body, Barrier()]
            case Exchange(name, op):
                out.append(Let(name, op))
            case UniformLoop(var, start, end, body):
                out.append(Loop(var, start, end, tuple(_nodes(body))))
            case UniformScope(body):
                out.append(Block(tuple(_nodes(body))))
            case _:
                assert_never(s)
    return out


def as_program(ls: Lockstep) -> Program:
    """The steps as a program of the public IR with the input's meaning (module docs)."""
    return replace(ls.program, entry=tuple(_nodes(ls.steps)))


def _step_lines(steps: tuple[Step, ...], depth: int, out: list[str], counter: list[int]) -> None:
    pad = "  " * depth
    for s in steps:
        match s:
            case Segment(body):
                out.append(f"{pad}segment {counter[0]} {{")
                counter[0] += 1
                if body:
                    out.append(print_statements(body, depth + 1))
                out.append(pad + "}")
            case Exchange(name, op):
                out.append(f"{pad}exchange {name_text(name)} = {print_expr(op)}")
            case UniformLoop(var, start, end, body):
                out.append(f"{pad}uniform for {name_text(var)} in {print_expr(start)} .. {print_expr(end)} {{")
                _step_lines(body, depth + 1, out, counter)
                out.append(pad + "}")
            case UniformScope(body):
                out.append(f"{pad}uniform block {{")
                _step_lines(body, depth + 1, out, counter)
                out.append(pad + "}")
            case _:
                assert_never(s)


def print_lockstep(ls: Lockstep) -> str:
    """The steps' text: segments numbered as the CPU emitter numbers its segment functions;
    statements and expressions as the IR printer (vyre/ir/printer.py) writes them."""
    out = ["lockstep {"]
    _step_lines(ls.steps, 1, out, [0])
    out.append("}")
    return "\n".join(out)
