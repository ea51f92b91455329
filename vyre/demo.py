"""``vyre demo``: build, compile, run, differentiate and check a real workload end to end."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .driver.backends import default_backend
from .driver.dispatch import compile as vcompile
from .examples import fused_chain
from .ir import Program


@dataclass
class Row:
    step: str
    backend: str
    compile_s: float
    run_s: float
    max_err: float
    cache_hit: bool | None
    ok: bool


def device_name(backend: str) -> str:
    if backend == "cuda":
        from numba import cuda

        return str(cuda.get_current_device().name.decode() if isinstance(
            cuda.get_current_device().name, bytes) else cuda.get_current_device().name)
    if backend == "cudasim":
        return "numba CUDA simulator"
    return f"{platform.processor() or platform.machine()} x{_cores()}"


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _max_rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(a64 - b64) / np.maximum(1.0, np.abs(b64)))) if a.size else 0.0


def chain_step(backend: str, n: int, rng: np.random.Generator) -> Row:
    """The fused elementwise chain on ``backend`` vs the reference interpreter."""
    prog = fused_chain()
    assert Program.from_wire(prog.to_wire()) == prog
    k = vcompile(prog, backend)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    run_s = _median_time(lambda: k({"x": x, "y": y, "out": out}), 5)
    m = min(n, 4096)
    ref = vcompile(prog, "interp")({"x": x[:m].copy(), "y": y[:m].copy(), "out": np.zeros(m, np.float32)})["out"]
    err = _max_rel_err(out[:m], ref)
    return Row(f"fused chain exp(x)*y+sin(x)*x, n={n}", backend, k.compile_seconds, run_s, err,
               k.cache_hit, err < 1e-5)


STEPS: list[Callable[[str, int, np.random.Generator], Row]] = [chain_step]


def run_demo(backend: str | None = None, n: int | None = None, seed: int = 0) -> list[Row]:
    b = backend or default_backend()
    size = n or (1 << 24 if b == "cuda" else 1 << 12 if b == "cudasim" else 1 << 20)
    rng = np.random.default_rng(seed)
    return [step(b, size, rng) for step in STEPS]


def format_rows(rows: list[Row], backend: str) -> str:
    head = f"vyre demo — backend {backend} ({device_name(backend)})"
    cols = ("step", "compile", "run", "max err", "cache", "check")
    data = [(r.step, f"{r.compile_s * 1e3:.1f} ms", f"{r.run_s * 1e3:.3f} ms", f"{r.max_err:.2e}",
             "-" if r.cache_hit is None else ("hit" if r.cache_hit else "miss"), "ok" if r.ok else "FAIL")
            for r in rows]
    widths = [max(len(c), *(len(d[i]) for d in data)) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [head, fmt.format(*cols), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*d) for d in data]
    return "\n".join(lines)
