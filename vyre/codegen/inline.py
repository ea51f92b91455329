"""Call inlining before emission (emitters see no ``Call``)."""

from __future__ import annotations

from ..ir import Program, inline_nodes


def inline_calls(program: Program) -> Program:
    if not program.functions:
        return program
    table = {f.op_id: f for f in program.functions}
    return Program(program.buffers, program.workgroup_size, inline_nodes(program.entry, table), ())
