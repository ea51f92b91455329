"""Flat kernels for *tunable* programs.

A program is tunable when its meaning depends on its invocation id alone: 1-D, no local or
workgroup ids, lanes, barriers, workgroup memory or subgroup operations. For those, the launch
shape is free: the emitters generate one *flat* kernel whose per-invocation body is a function of
the invocation id, plus a driver loop taking the number of invocations and the launch knobs as
runtime arguments (CUDA: threads per block and invocations per thread; CPU: invocations per
parallel chunk). One compiled kernel then serves every candidate the tuner probes, and the
invocation count stays that of the declared workgroup size, so tuning never changes results.
"""

from __future__ import annotations

from ..ir import (
    Barrier, InvocationId, LocalId, Program, SubgroupBallot, SubgroupLocalId, SubgroupReduce,
    SubgroupShuffle, WorkgroupId, node_exprs, walk, walk_nodes,
)

_NOT_FLAT = (LocalId, WorkgroupId, SubgroupLocalId, SubgroupBallot, SubgroupShuffle, SubgroupReduce)


def is_tunable(program: Program) -> bool:
    """True when the program's results do not depend on its launch shape (see module docs)."""
    if program.workgroup_size[1:] != (1, 1) or any(b.is_workgroup for b in program.buffers):
        return False
    for n in walk_nodes(program.entry):
        if isinstance(n, Barrier):
            return False
        for e in node_exprs(n):
            for x in walk(e):
                if isinstance(x, _NOT_FLAT) or (isinstance(x, InvocationId) and x.axis != 0):
                    return False
    for f in program.functions:
        for x in walk(f.body):
            if isinstance(x, _NOT_FLAT):
                return False
    return True
