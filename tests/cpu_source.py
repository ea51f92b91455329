"""The serial kernel's text in a generated CPU module (vyre/codegen/cpu.py), for tests that read
what the emitter wrote: from the function holding the invocations (``_vy_run`` of a flat kernel,
``_vy_groups`` of one in workgroups, else ``vyre_kernel``) to the parallel entry's functions."""

from __future__ import annotations

STARTS = ("def _vy_run(", "def _vy_groups(", "def vyre_kernel(")
ENDS = ("def _vy_private_run(", "def vyre_kernel_parallel(")


def serial_source(src: str) -> str:
    rest = src[min(src.index(s) for s in STARTS if s in src):]
    ends = [rest.index(e) for e in ENDS if e in rest]
    return rest[:min(ends)] if ends else rest
