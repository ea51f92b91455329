"""Parallel CPU kernels for flat programs with atomics, through private copies.

The CPU runs atomics as plain read-modify-writes, which is only atomic when one thread runs; real
atomics (LLVM ``atomicrmw``) were measured 11-60x slower than the serial loop on two cores
(BENCHMARKS.md). Most atomics in practice are reductions whose old value nobody reads: autodiff's
scatters into the gradient of a shared weight, histograms. For those, each parallel chunk of
invocations works on its own copy of the target buffer, started at the operation's identity, and
the copies are merged into the buffer after the loop. That is exact for the integer operations
and changes only the order of a float sum, which docs/semantics.md leaves open for atomics.

A flat program qualifies when every atomic's old value is unused, every atomic buffer is touched
by atomics of one operation only (no loads or stores of it), and that operation has an identity
(add, min, max, and, or, xor). The copies cost ``chunks x length`` elements; past
``PRIVATE_LIMIT`` the parallel entry runs the serial kernel instead.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Atomic, AtomicOp, DataType, Let, Load, Program, Store, node_exprs, walk, walk_nodes
from .emit import read_names
from .ops import CTOR

#: Most elements (over all private copies) a parallel dispatch may allocate.
PRIVATE_LIMIT = 1 << 22

_I32_MIN, _I32_MAX, _U32_MAX = -(1 << 31), (1 << 31) - 1, (1 << 32) - 1

# identity per (operation, element type), and how two partial results combine
_IDENTITY: dict[tuple[AtomicOp, DataType], str] = {
    (AtomicOp.ADD, DataType.F32): "-0.0", (AtomicOp.ADD, DataType.F64): "-0.0",  # -0 + x == x, even x = -0
    (AtomicOp.ADD, DataType.I32): "0", (AtomicOp.ADD, DataType.U32): "0",
    (AtomicOp.MIN, DataType.I32): str(_I32_MAX), (AtomicOp.MIN, DataType.U32): str(_U32_MAX),
    (AtomicOp.MAX, DataType.I32): str(_I32_MIN), (AtomicOp.MAX, DataType.U32): "0",
    (AtomicOp.AND, DataType.I32): "-1", (AtomicOp.AND, DataType.U32): str(_U32_MAX),
    (AtomicOp.OR, DataType.I32): "0", (AtomicOp.OR, DataType.U32): "0",
    (AtomicOp.XOR, DataType.I32): "0", (AtomicOp.XOR, DataType.U32): "0",
}
_MERGE: dict[AtomicOp, Callable[[str, str], str]] = {
    AtomicOp.ADD: lambda a, b: f"{a} + {b}", AtomicOp.MIN: lambda a, b: f"min({a}, {b})",
    AtomicOp.MAX: lambda a, b: f"max({a}, {b})", AtomicOp.AND: lambda a, b: f"{a} & {b}",
    AtomicOp.OR: lambda a, b: f"{a} | {b}", AtomicOp.XOR: lambda a, b: f"{a} ^ {b}",
}


def private_atomics(program: Program) -> dict[str, AtomicOp] | None:
    """The atomic buffers of ``program`` and their one operation, when private copies can stand in
    for them (see the module docs); None when they cannot, {} when there are no atomics."""
    read = read_names(program.entry)
    ops: dict[str, AtomicOp] = {}
    touched: set[str] = set()
    for n in walk_nodes(program.entry):
        if isinstance(n, Store):
            touched.add(n.buffer)
        for e in node_exprs(n):
            for x in walk(e):
                if isinstance(x, Load):
                    touched.add(x.buffer)
                elif isinstance(x, Atomic):
                    unused = isinstance(n, Let) and n.value is x and n.name not in read
                    t = program.buffer(x.buffer).element
                    if not unused or (x.op, t) not in _IDENTITY or ops.setdefault(x.buffer, x.op) is not x.op:
                        return None
    if touched & ops.keys():
        return None
    return ops


def private_parallel_entry(program: Program, ops: dict[str, AtomicOp], src: dict[str, str],
                           private_src: dict[str, str], storage_params: str, private_params: str,
                           body: list[str], njit: str, decl: str) -> list[str]:
    """Lines of ``_vy_private_run`` and ``vyre_kernel_parallel(*bufs, _n, _chunk)``: ``body`` is
    one invocation (``_g``) emitted with each atomic buffer renamed to its private copy
    (``private_src``); ``_vy_private_run(*private_params, _lo, _hi)`` runs a chunk's invocations
    (a function of its own, so that the prange body is a call: vyre/codegen/cpu.py, flat form)."""
    names = sorted(ops)
    size = " + ".join(f"{src[b]}.shape[0]" for b in names)
    lines = [f"@{njit}", f"def _vy_private_run({private_params}_lo, _hi):",
             "    for _g in range(_lo, _hi):", *("        " + line for line in body), "", "",
             decl, f"def vyre_kernel_parallel({storage_params}_n, _chunk):",
             "    _nc = (_n + _chunk - 1) // _chunk",
             f"    if _nc * ({size}) > {PRIVATE_LIMIT}:",
             f"        vyre_kernel({storage_params}_n, _chunk)  # the copies would not pay for themselves",
             "        return"]
    for b in names:
        lines.append(f"    {_copies(private_src[b])} = np.empty((_nc, {src[b]}.shape[0]), {src[b]}.dtype)")
    lines += ["    for _c in numba.prange(_nc):"]
    for b in names:
        t = program.buffer(b).element
        lines += [f"        {private_src[b]} = {_copies(private_src[b])}[_c]",
                  f"        {private_src[b]}[:] = {CTOR[t]}({_IDENTITY[(ops[b], t)]})"]
    lines += ["        _lo = _c * _chunk",
              f"        _vy_private_run({private_params}int64(_lo), int64(min(_lo + _chunk, _n)))"]
    for b in names:
        t, dst, cp = program.buffer(b).element, src[b], _copies(private_src[b])
        merged = _MERGE[ops[b]]("_acc", f"{cp}[_k, _j]")
        lines += [f"    for _j in numba.prange({dst}.shape[0]):",
                  f"        _acc = {dst}[_j]",
                  "        for _k in range(_nc):",
                  f"            _acc = {CTOR[t]}({merged})",  # integers wrap to 32 bits
                  f"        {dst}[_j] = _acc"]
    return lines


def _copies(private: str) -> str:
    return f"{private}_all"
