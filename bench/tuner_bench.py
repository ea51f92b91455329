"""Autotuner benchmark: how many measurements each search strategy needs on real kernels.

For each kernel (fused_chain, saxpy, matvec and the backward of fused_chain from
``vyre.autodiff.grad``) on ``--backend``:

1. **Ground truth.** Every launch candidate is run ``--rounds`` times, interleaved round-robin (so
   drift and background load hit every candidate alike), on scratch buffers; a candidate's latency
   is the median of its runs. "Good" means within 5% of the best median.
2. **Replays.** Each strategy runs ``--seeds`` times against noisy re-measurements: measuring a
   candidate draws ``--repeats`` of its recorded runs at random (bootstrap) and takes their median,
   exactly what the tuner's timer does. Reported: how often a good candidate was measured, the mean
   number of measurements until the first good one, the final pick's true latency over the best
   (mean and worst), and the measurements used. The natural-gradient replays use the float64
   reference for ``F^{-1/2}`` and the product (same algorithm, fast).
3. **Real runs.** ``vyre.tuning.autotune.tune`` in ON mode and in natural-gradient mode (whose
   ``F^{-1/2}`` and product are vyre IR programs dispatched on the same backend), timed end to end.

Prints markdown; ``--record`` appends it to BENCHMARKS.md under "Autotuner".
Usage: python bench/tuner_bench.py --backend cpu|cuda [--seeds 200] [--record]
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vyre.autodiff import grad
from vyre.cli import random_inputs
from vyre.tuning import autotune
from vyre.tuning.autotune import Harness, Launch
from vyre.driver.dispatch import compile as vcompile
from vyre.tuning.tuner import (
    CallableTimer, ExhaustiveSearch, FisherKind, NaturalGradientSearch, RandomSearch, SearchResult,
    log2_candidates,
)
from vyre.examples import fused_chain, matvec, saxpy
from vyre.ir import Program
from vyre.settings import Mode

ROOT = Path(__file__).resolve().parent.parent
GOOD = 0.05
Config = tuple[int, ...]


@dataclass
class Problem:
    name: str
    program: Program
    inputs: dict[str, np.ndarray]
    grid: tuple[int, int, int] | None


def problems(backend: str, scale: int) -> list[Problem]:
    """The benchmark's kernels at ``scale`` elements (matvec: ``scale // 64`` rows of 256)."""
    rng = np.random.default_rng(0)
    n = scale
    out: list[Problem] = []
    fc = fused_chain()
    out.append(Problem("fused_chain", fc, random_inputs(fc, n, rng), None))
    sx = saxpy()
    out.append(Problem("saxpy", sx, random_inputs(sx, n, rng, {"a": 1}), None))
    mv = matvec()
    rows = max(1, n // 64)
    mv_inputs = random_inputs(mv, n, rng, {"m": rows * 256, "v": 256, "out": rows})
    out.append(Problem("matvec", mv, mv_inputs, None))
    bw = grad(fc, ["out"], ["x", "y"])
    binputs = random_inputs(bw, n, rng)
    for name in ("x", "y", "grad_out"):
        binputs[name] = rng.standard_normal(n).astype(np.float32)
    out.append(Problem("fused_chain backward", bw, binputs, (-(-n // fc.workgroup_size[0]), 1, 1)))
    return out


# -- ground truth ----------------------------------------------------------------------------------


def _sampler(h: Harness) -> Callable[[Launch], float]:
    """One run of a candidate on the harness's scratch buffers, in ns."""
    backend = h.kernel.backend
    if backend == "cuda":
        from numba import cuda

        def cuda_sample(la: Launch) -> float:
            h.restore()
            start, stop = cuda.event(), cuda.event()
            start.record()
            h._sample(la)
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop) * 1e6 / autotune.CUDA_LAUNCHES_PER_SAMPLE

        return cuda_sample
    per = 1 if backend == "cpu" else autotune.CUDA_LAUNCHES_PER_SAMPLE

    def host_sample(la: Launch) -> float:
        h.restore()
        t0 = time.perf_counter_ns()
        h.run(la) if backend == "cpu" else h._sample(la)
        return (time.perf_counter_ns() - t0) / per

    return host_sample


def ground_truth(p: Problem, backend: str, rounds: int, seed: int) -> dict[Launch, list[float]]:
    k = vcompile(p.program, backend)
    h = Harness(k, p.inputs, p.grid)
    sample = _sampler(h)
    cands = autotune.candidates(backend, h.invocations)
    samples: dict[Launch, list[float]] = {c: [] for c in cands}
    failed: set[Launch] = set()
    rng = np.random.default_rng(seed)
    for c in cands:  # warm-up (and compilation on CUDA)
        try:
            sample(c)
            sample(c)
        except Exception as e:  # a candidate that cannot launch: inf, as in the tuner
            print(f"  {p.name}: {c} failed: {type(e).__name__}: {e}", file=sys.stderr)
            failed.add(c)
    for _ in range(rounds):
        for i in rng.permutation(len(cands)):
            c = cands[int(i)]
            if c not in failed:
                samples[c].append(sample(c))
    return {c: ([math.inf] if c in failed else s) for c, s in samples.items()}


# -- replays ----------------------------------------------------------------------------------------


@dataclass
class Stats:
    strategy: str
    reached: int
    to_good: list[int]
    quality: list[float]
    used: list[int]


def replay(samples: dict[Launch, list[float]], seeds: int, repeats: int) -> list[Stats]:
    cands = list(samples)
    truth = {c: statistics.median(s) for c, s in samples.items()}
    best = min(truth.values())
    good = {c for c, t in truth.items() if t <= best * (1 + GOOD)}
    search_cands = log2_candidates([(c.wg, c.ipt) for c in cands])

    def timer(seed: int) -> CallableTimer[Config]:
        rng = np.random.default_rng(seed)

        def measure(cfg: Config) -> float:
            s = samples[Launch(cfg[0], cfg[1])]
            if not math.isfinite(s[0]):
                return math.inf
            return float(np.median(rng.choice(s, size=repeats, replace=True)))

        return CallableTimer(measure)

    def stats(name: str, run: Callable[[int], SearchResult[Config]]) -> Stats:
        st = Stats(name, 0, [], [], [])
        for seed in range(seeds):
            r = run(seed)
            picks = [Launch(cfg[0], cfg[1]) for cfg, _ in r.trace]
            first = next((i for i, c in enumerate(picks, 1) if c in good), None)
            if first is not None:
                st.reached += 1
                st.to_good.append(first)
            chosen = Launch(r.best[0], r.best[1]) if r.best is not None else None
            st.quality.append(truth[chosen] / best if chosen is not None else math.inf)
            st.used.append(r.measurements)
        return st

    ng = stats("natural gradient, fitted Fisher",
               lambda s: NaturalGradientSearch().run(search_cands, timer(s)))
    budget = max(1, round(statistics.mean(ng.used)))
    return [
        ng,
        stats("natural gradient, identity Fisher",
              lambda s: NaturalGradientSearch(fisher=FisherKind.IDENTITY).run(search_cands, timer(s))),
        stats(f"random search, budget {budget}",
              lambda s: RandomSearch(budget=budget, seed=s).run(search_cands, timer(s))),
        stats("random search, all", lambda s: RandomSearch(seed=s).run(search_cands, timer(s))),
        stats("exhaustive (fixed order)", lambda s: ExhaustiveSearch().run(search_cands, timer(s))),
    ]


# -- real runs ---------------------------------------------------------------------------------------


def real_runs(p: Problem, backend: str, truth: dict[Launch, float]) -> list[str]:
    k = vcompile(p.program, backend)
    best = min(truth.values())
    rows = []
    for mode in (Mode.ON, Mode.NATURAL_GRADIENT):
        t0 = time.perf_counter()
        o = autotune.tune(k, p.inputs, p.grid, mode=mode, use_cache=False, persist=False)
        wall = time.perf_counter() - t0
        q = truth.get(o.launch, math.nan) / best
        rows.append(f"| {p.name} | {mode.value} | {len(o.trace)} | {wall:.2f} s | "
                    f"wg={o.launch.wg} ipt={o.launch.ipt} | {q:.3f} |")
    return rows


# -- report -------------------------------------------------------------------------------------------


def _fmt_ns(ns: float) -> str:
    return "failed" if not math.isfinite(ns) else f"{ns / 1e3:.1f} us" if ns < 1e7 else f"{ns / 1e6:.2f} ms"


def machine(backend: str) -> str:
    fp = autotune.adapter_fingerprint(backend)
    if backend == "cpu" and hasattr(os, "getloadavg"):
        fp += f", load average {os.getloadavg()[0]:.1f} at start"
    return fp


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run(args: argparse.Namespace) -> str:
    t_start = time.time()
    scale = args.n or {"cpu": 1 << 20, "cuda": 1 << 24}.get(args.backend, 1 << 9)
    lines = [f"### {args.backend}: {machine(args.backend)}", "",
             f"{datetime.date.today().isoformat()}, commit {commit()}, python {platform.python_version()}; "
             f"n = {scale}; ground truth {args.rounds} interleaved runs per candidate; "
             f"{args.seeds} seeded replays per strategy, a measurement = median of {args.repeats} "
             "resampled runs; good = within 5% of the best median.", ""]
    summary = ["| kernel | candidates | best (median) | default launch / best | worst / best |",
               "|---|---|---|---|---|"]
    table = ["| kernel | strategy | reaches 5% | mean measurements to 5% | final / best (mean, worst) | "
             "measurements (mean) |", "|---|---|---|---|---|---|"]
    real = ["| kernel | mode | measurements | tuning wall time | decision | decision / best |",
            "|---|---|---|---|---|---|"]
    for p in problems(args.backend, scale):
        print(f"{p.name}: ground truth ...", file=sys.stderr, flush=True)
        samples = ground_truth(p, args.backend, args.rounds, seed=1)
        truth = {c: statistics.median(s) for c, s in samples.items()}
        best_c = min(truth, key=lambda c: truth[c])
        best = truth[best_c]
        k = vcompile(p.program, args.backend)
        inv = autotune.invocations_for(k, p.inputs, p.grid)
        default = k.default_launch(inv)
        d_ratio = f"{truth[default] / best:.3f}" if default in truth else "n/a (not a candidate)"
        finite = [t for t in truth.values() if math.isfinite(t)]
        summary.append(f"| {p.name} ({inv} invocations) | {len(truth)} | wg={best_c.wg} ipt={best_c.ipt}: "
                       f"{_fmt_ns(best)} | {d_ratio} | {max(finite) / best:.2f} |")
        print(f"{p.name}: replays ...", file=sys.stderr, flush=True)
        for st in replay(samples, args.seeds, args.repeats):
            to = f"{statistics.mean(st.to_good):.1f}" if st.to_good else "-"
            finite_q = [q for q in st.quality if math.isfinite(q)]
            qual = (f"{statistics.mean(finite_q):.3f}, {max(finite_q):.3f}" if finite_q else "-")
            table.append(f"| {p.name} | {st.strategy} | {st.reached}/{args.seeds} | {to} | {qual} | "
                         f"{statistics.mean(st.used):.1f} |")
        if not args.no_real:
            print(f"{p.name}: real tuning runs ...", file=sys.stderr, flush=True)
            real += real_runs(p, args.backend, truth)
    lines += ["Ground truth:", "", *summary, "", "Replays:", "", *table, ""]
    if not args.no_real:
        lines += ["Real tuning runs (`autotune.tune`; natural gradient through the IR programs):", "",
                  *real, ""]
    lines.append(f"(benchmark wall time {time.time() - t_start:.0f} s)")
    return "\n".join(lines) + "\n"


_HEADER = "# Benchmarks\n"
_SECTION = "## Autotuner"
_INTRO = """
`bench/tuner_bench.py --backend cpu|cuda --record`: for real kernels, every launch candidate is
measured carefully (ground truth), then each search strategy is replayed many times against
resampled measurements: how many measurements it needs to reach a launch within 5% of the best,
and how good its final pick is. "Real tuning runs" time the tuner itself, including the
natural-gradient IR programs (Newton-Schulz and the 16.16 product) on the same backend. CPU
candidates are one knob (chunk = 1024 x ipt, 10 values); CUDA candidates are 6 block sizes x 5
invocations per thread. See docs/tuner.md for the strategies.
"""


def record(report: str, path: Path) -> None:
    """Append ``report`` at the end of the Autotuner section of ``path`` (created if missing)."""
    text = path.read_text(encoding="utf-8") if path.exists() else _HEADER
    if _SECTION not in text:
        text = text.rstrip("\n") + f"\n\n{_SECTION}\n{_INTRO}\n"
    start = text.index(_SECTION) + len(_SECTION)
    nxt = text.find("\n## ", start)
    end = len(text) if nxt < 0 else nxt + 1
    body = text[:end].rstrip("\n") + "\n\n" + report.rstrip("\n") + "\n"
    path.write_text(body + ("\n" + text[end:] if end < len(text) else ""), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["cpu", "cuda", "cudasim"], default="cpu")
    ap.add_argument("--n", type=int, default=None, help="elements (default 2^20 on cpu, 2^24 on cuda)")
    ap.add_argument("--rounds", type=int, default=15, help="ground-truth runs per candidate")
    ap.add_argument("--seeds", type=int, default=200, help="replays per strategy")
    ap.add_argument("--repeats", type=int, default=5, help="runs per replayed measurement (median)")
    ap.add_argument("--no-real", action="store_true", help="skip the real tuning runs")
    ap.add_argument("--record", action="store_true", help="append to BENCHMARKS.md")
    args = ap.parse_args(argv)
    report = run(args)
    print(report)
    if args.record:
        record(report, ROOT / "BENCHMARKS.md")
        print(f"recorded in {ROOT / 'BENCHMARKS.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
