"""The one-pass value-and-gradient program, with the loss summed inside the kernel.

``grad(program, [out], wrt, with_value=True, unit_cotangent=True)`` computes ``out`` and the
gradients of ``sum(out)`` in one pass; summing ``out`` afterwards is a second pass over it (on an
H100 at 2^26 f32, 20% of the fused kernel's time). :func:`with_loss_partials` instead adds each
stored value, as float64, into ``loss_<out>[index >> PARTIAL_SHIFT]`` (float atomic adds whose old
value is unused: aggregated per warp on CUDA, private per chunk on the CPU), so the loss is the sum
of ``ceil(len(out) / 2^PARTIAL_SHIFT)`` partials: one element up to 8192 outputs.

That is exact bookkeeping only when each element of ``out`` is stored once, so the rewrite applies
to programs with a single store to ``out`` outside any loop (the determinism rule of
docs/semantics.md already forbids two invocations storing one element); for others it returns
None and the runners sum ``out`` with the array library.

:func:`needs_zero_fill` says which gradient buffers of an ``accumulate=False`` backward are fully
overwritten (one unconditional top-level store at ``InvocationId(0)`` and no other access), so a
reusable handle can skip zero-filling them when the grid covers every element.
"""

from __future__ import annotations

import functools

from ..ir import BufferDecl, DataType, Program
from ..ir.expr import Atomic, AtomicOp, BinOp, BinOpKind, BufLen, Cast, Expr, InvocationId, Load, LitU32, Var, walk
from ..ir.node import Block, If, Let, Loop, Node, Region, Store, node_exprs, walk_nodes
from ..ir.program import BufferAccess
from .reverse import GRAD_PREFIX, grad

LOSS_PREFIX = "loss_"
PARTIAL_SHIFT = 13  # 8192 outputs per loss partial


def partial_count(n_out: int) -> int:
    """Elements of the ``loss_<out>`` buffer for an output of ``n_out`` elements."""
    return max(1, -(-n_out // (1 << PARTIAL_SHIFT)))


def _stores_to(body: tuple[Node, ...], buffer: str, in_loop: bool = False) -> list[tuple[Store, bool]]:
    found: list[tuple[Store, bool]] = []
    for n in body:
        match n:
            case Store() if n.buffer == buffer:
                found.append((n, in_loop))
            case If(_, then, otherwise):
                found += _stores_to(then, buffer, in_loop) + _stores_to(otherwise, buffer, in_loop)
            case Loop(_, _, _, sub):
                found += _stores_to(sub, buffer, True)
            case Block(sub) | Region(_, sub):
                found += _stores_to(sub, buffer, in_loop)
            case _:
                pass
    return found


def _fresh(body: tuple[Node, ...], base: str) -> str:
    used = {n.name for n in walk_nodes(body) if isinstance(n, Let)}
    used |= {e.name for n in walk_nodes(body) for x in node_exprs(n) for e in walk(x) if isinstance(e, Var)}
    name, k = base, 0
    while name in used:
        k += 1
        name = f"{base}{k}"
    return name


def _rewrite(body: tuple[Node, ...], target: Store, loss: str, tmp: str, f64: bool) -> tuple[Node, ...]:
    out: list[Node] = []
    for n in body:
        match n:
            case Store() if n is target:
                v = Var(tmp)
                add: Expr = v if f64 else Cast(DataType.F64, v)
                idx = n.index
                part = BinOp(BinOpKind.SHR, idx, LitU32(PARTIAL_SHIFT))
                out += [Let(tmp, n.value), Store(n.buffer, idx, v),
                        If(BinOp(BinOpKind.LT, idx, BufLen(n.buffer)),
                           (Let(tmp + "_old", Atomic(AtomicOp.ADD, loss, part, add)),))]
            case If(c, then, otherwise):
                out.append(If(c, _rewrite(then, target, loss, tmp, f64), _rewrite(otherwise, target, loss, tmp, f64)))
            case Block(sub):
                out.append(Block(_rewrite(sub, target, loss, tmp, f64)))
            case Region(g, sub):
                out.append(Region(g, _rewrite(sub, target, loss, tmp, f64)))
            case _:
                out.append(n)
    return tuple(out)


def with_loss_partials(fused: Program, output: str) -> Program | None:
    """``fused`` plus a float64 buffer ``loss_<output>`` (read-write, caller-sized, zero-filled) that
    receives ``sum(output)`` in partials (module docs); None when ``output`` is stored more than once
    or inside a loop."""
    stores = _stores_to(fused.entry, output)
    if len(stores) != 1 or stores[0][1]:
        return None
    name = LOSS_PREFIX + output
    if any(b.name == name for b in fused.buffers):
        return None
    tmp = _fresh(fused.entry, "lossv")
    f64 = fused.buffer(output).element is DataType.F64
    body = _rewrite(fused.entry, stores[0][0], name, tmp, f64)
    binding = max(b.binding for b in fused.buffers) + 1
    buffers = (*fused.buffers, BufferDecl(name, binding, BufferAccess.READ_WRITE, DataType.F64, 0, True))
    return Program(buffers, fused.workgroup_size, body, fused.functions).validate()


@functools.lru_cache(maxsize=128)
def loss_program(program: Program, output: str, wrt: tuple[str, ...], grid_1d: bool,
                 accumulate: bool, partials: bool = True) -> tuple[Program, bool]:
    """The fused value-and-gradient program of ``sum(output)`` and whether it carries loss partials
    (``loss_<output>``; only asked for with ``partials``); memoised on the immutable program and
    the request."""
    fused = grad(program, [output], list(wrt), grid_1d=grid_1d, with_value=True, unit_cotangent=True,
                 accumulate=accumulate)
    if not partials:
        return fused, False
    with_loss = with_loss_partials(fused, output)
    return (fused, False) if with_loss is None else (with_loss, True)


def needs_zero_fill(back: Program, wrt: str) -> bool:
    """Must ``grad_<wrt>`` be zero-filled before ``back`` runs (module docs)? False only when the
    body stores it once, unconditionally at top level, at ``InvocationId(0)``, and nowhere reads,
    atomically updates or stores it otherwise (callers still check that the grid covers it)."""
    g = GRAD_PREFIX + wrt
    top = [n for n in back.entry if isinstance(n, Store) and n.buffer == g and n.index == InvocationId(0)]
    if len(top) != 1:
        return True
    for n in walk_nodes(back.entry):
        if isinstance(n, Store) and n.buffer == g and n is not top[0]:
            return True
        for x in node_exprs(n):
            for e in walk(x):
                if isinstance(e, Load | Atomic) and e.buffer == g:
                    return True
    return False
