"""A/B of the device plans' answers (device machine): ``DevicePlan.run`` as shipped, which builds a
call's answer directly (a shaped view, or a 0-d view of the one-element buffer) and makes a Ctx only
where it allocates through one, against the previous form, which made a Ctx every call and built
the answer through it (a slice, then a reshape). Alternating rounds in one process, host time per
call in a tight loop (µs, the best round).

    python bench/device_plan_ab.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy as cp
import torch

import vyre.ops as vo
from gpu_bench import host_time_per_call
from vyre.ops import _plans as P

shipped = P.DevicePlan.run


def previous(self: P.DevicePlan, inputs: list[Any]) -> Any:
    """The form before: a Ctx every call, the answers through it (pre-packed launches only)."""
    ctx = self.ctx(self.backend, self.kind, inputs[0])
    made, makers = self.shared, self.makers
    if self.home is not None and self.home[0]() != self.home[1]:
        makers = None
    if makers is not None:
        bufs = inputs + [m if m is not None else make() for m, make in zip(made, makers, strict=True)]
    else:
        bufs = inputs + [m if m is not None else ctx.empty(n, t) for m, (n, t) in zip(made, self.allocs, strict=True)]
    for k in self.carriers:
        if made[k] is None:
            made[k] = bufs[len(inputs) + k]
    pointers = list(map(self.pointer, bufs))
    stream = P.CAPTURE.stream
    if stream is None:
        stream = P.torch_stream(self.device) if self.torch else 0
    if self.device is not None and self.device != P.current_ordinal():
        raise RuntimeError("the A/B runs on the arrays' device")
    for step in self.launches or ():
        step(pointers, stream)
    out = [ctx.result(bufs[a.buffer], a.shape) if a.how == P.RESULT
           else ctx.scalar(bufs[a.buffer]) if a.how == P.SCALAR else ctx.index(bufs[a.buffer])
           for a in self.answers]
    return out[0] if self.single else tuple(out)


def main() -> None:
    small = cp.random.standard_normal(4096, dtype=cp.float32)
    tx = torch.randn(64, 256, device="cuda")
    cases = {
        "sum (CuPy, 4096)": lambda: vo.sum(small),
        "argmax (CuPy, 4096)": lambda: vo.argmax(small),
        "sum (torch, 4096)": lambda: vo.sum(tx.view(-1)[:4096]),
        "softmax (torch, 4x256)": lambda: vo.softmax(tx[:4]),
        "sum(a, 0) (torch, 64x256)": lambda: vo.sum(tx, 0),
    }
    print("| call | previous (us) | shipped (us) |\n|---|---|---|")
    for name, fn in cases.items():
        best = {"previous": float("inf"), "shipped": float("inf")}
        for _ in range(4):
            for label, run in (("previous", previous), ("shipped", shipped)):
                P.DevicePlan.run = run  # type: ignore[method-assign]
                best[label] = min(best[label], host_time_per_call(fn, 3000) * 1e6)
        P.DevicePlan.run = shipped  # type: ignore[method-assign]
        print(f"| {name} | {best['previous']:.1f} | {best['shipped']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
