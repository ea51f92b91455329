"""Autotuner benchmark: how many measurements each search strategy needs on real kernels.

For each kernel on ``--backend`` (fused_chain, saxpy, matvec, the backward of fused_chain from
``vyre.autodiff.grad``, and kernels whose default launch is poor: loop-heavy rows, a 2-D
transpose and a 2-D 5-point stencil linearised over 1-D ids, a light copy where the CPU's
serial-versus-parallel choice matters):

1. **Ground truth.** Every launch candidate is run ``--rounds`` times, interleaved round-robin (so
   drift and background load hit every candidate alike), on scratch buffers; a candidate's latency
   is the median of its runs. "Good" means within 5% of the best median.
2. **Replays.** Each strategy runs ``--seeds`` times against noisy re-measurements: measuring a
   candidate draws ``--repeats`` of its recorded runs at random (bootstrap) and takes their median,
   exactly what the tuner's timer does. Reported: how often a good candidate was measured, the mean
   number of measurements until the first good one, the final pick's true latency over the best
   (mean and worst), the measurements used, and the wall time the strategy would cost: its own
   computation (timed) plus ``warmup + repeats`` runs of every candidate it measures. The
   natural-gradient replays use the float64 reference for ``F^{-1/2}`` and the product (same
   algorithm, fast; the real runs below use the IR programs). The verdict line per kernel checks
   the natural-gradient target: within 5% of the best in at most 40% of the exhaustive sweep's
   measurements, and less wall time.
3. **Real runs.** ``vyre.tuning.autotune.tune`` in ON mode and in natural-gradient mode (whose
   ``F^{-1/2}`` and product are vyre IR programs dispatched on the same backend), timed end to end,
   without a budget and with the default one (``VYRE_TUNE_BUDGET``).
4. **Cold first dispatch** (``--cold``): a fresh process, empty caches, ``import vyre`` and one
   dispatch of fused_chain, per ``VYRE_AUTOTUNER`` mode.

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
    # kernels whose default launch is poor
    rows, cols = max(1, n // 512), 512
    rs = row_sums()
    out.append(Problem(f"row sums {rows}x{cols} (loop-heavy rows)", rs,
                       {"x": rng.standard_normal(rows * cols).astype(np.float32),
                        "out": np.zeros(rows, np.float32), "cols": np.array([cols], np.uint32)}, None))
    side = max(32, math.isqrt(n))
    tr = transpose()
    out.append(Problem(f"transpose {side}x{side} (2-D)", tr,
                       {"x": rng.standard_normal(side * side).astype(np.float32),
                        "out": np.zeros(side * side, np.float32), "width": np.array([side], np.uint32)}, None))
    st = stencil()
    out.append(Problem(f"5-point stencil {side}x{side} (2-D)", st,
                       {"x": rng.standard_normal(side * side).astype(np.float32),
                        "out": np.zeros(side * side, np.float32), "width": np.array([side], np.uint32)}, None))
    small = max(1 << 15, n >> 5)
    cp = copy()
    out.append(Problem(f"copy {small} (serial vs parallel)", cp,
                       {"x": rng.standard_normal(small).astype(np.float32), "out": np.zeros(small, np.float32)},
                       None))
    return out


def row_sums() -> Program:
    """``out[r] = sum_j x[r * cols + j]``: one invocation per row, a long loop each."""
    from vyre.ir import F32, U32, assign, buflen, f32, gid, if_, let, load, loop, output, read, store, u32, var

    x, out, cols = read("x", 0, F32), output("out", 1, F32), read("cols", 2, U32)
    r, c, acc = var("r"), var("c"), var("acc")
    return Program.wrapped([x, out, cols], 256, [
        let("r", gid()),
        let("c", load(cols, u32(0))),
        if_(r.lt(buflen(out)), [
            let("acc", f32(0.0)),
            loop("j", u32(0), c, [assign("acc", acc + x[r * c + var("j")])]),
            store(out, r, acc),
        ]),
    ])


def _grid2d(body: Callable[..., list]) -> Program:  # type: ignore[type-arg]
    from vyre.ir import F32, U32, buflen, gid, if_, let, load, output, read, u32, var

    x, out, width = read("x", 0, F32), output("out", 1, F32), read("width", 2, U32)
    i = var("i")
    return Program.wrapped([x, out, width], 256, [
        let("i", gid()),
        let("w", load(width, u32(0))),
        let("col", i % var("w")),
        let("row", i / var("w")),
        if_(i.lt(buflen(out)), body(x, out, var("row"), var("col"), var("w"))),
    ])


def transpose() -> Program:
    """``out[c * w + r] = x[r * w + c]`` over a square image, linearised 1-D ids."""
    from vyre.ir import store

    return _grid2d(lambda x, out, r, c, w: [store(out, c * w + r, x[r * w + c])])


def stencil() -> Program:
    """5-point blur ``out = (x[r,c] + x[r±1,c] + x[r,c±1]) / 5`` (out-of-range neighbours read 0)."""
    from vyre.ir import f32, store

    def body(x, out, r, c, w):  # type: ignore[no-untyped-def]
        at = r * w + c
        return [store(out, at, (x[at] + x[at + w] + x[at - w] + x[at + 1] + x[at - 1]) * f32(0.2))]

    return _grid2d(body)


def copy() -> Program:
    from vyre.ir import F32, buflen, gid, if_, let, output, read, store, var

    x, out = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    return Program.wrapped([x, out], 256, [let("i", gid()), if_(i.lt(buflen(out)), [store(out, i, x[i])])])


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
    wall: list[float]  # seconds: the strategy's own computation + the runs of its measurements


def replay(samples: dict[Launch, list[float]], seeds: int, repeats: int, warmup: int = 1) -> list[Stats]:
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
        st = Stats(name, 0, [], [], [], [])
        for seed in range(seeds):
            t0 = time.perf_counter()
            r = run(seed)
            compute = time.perf_counter() - t0
            runs = sum((warmup + repeats) * truth[Launch(cfg[0], cfg[1])] for cfg, t in r.trace
                       if math.isfinite(t)) / 1e9
            st.wall.append(compute + runs)
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
        for budget in (math.inf, None):
            t0 = time.perf_counter()
            o = autotune.tune(k, p.inputs, p.grid, mode=mode, use_cache=False, persist=False, budget=budget)
            wall = time.perf_counter() - t0
            q = truth.get(o.launch, math.nan) / best
            b = "none" if budget == math.inf else f"{o.budget:g} s" + (" (spent)" if o.truncated else "")
            rows.append(f"| {p.name} | {mode.value} | {b} | {len(o.trace)} | {wall:.2f} s | "
                        f"wg={o.launch.wg} ipt={o.launch.ipt} ({o.source.value}) | {q:.3f} |")
    return rows


_COLD = """
import time, numpy as np
t0 = time.perf_counter()
import vyre
from vyre.examples import fused_chain
n = {n}
x = np.ones(n, np.float32)
t1 = time.perf_counter()
vyre.dispatch(fused_chain(), {{"x": x, "y": x, "out": np.zeros(n, np.float32)}}, backend="{backend}")
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def cold_runs(backend: str, n: int) -> list[str]:
    """Fresh processes, empty caches: import, then the first dispatch, per tuner mode."""
    import tempfile

    rows = ["| VYRE_AUTOTUNER | import (s) | first dispatch (s) |", "|---|---|---|"]
    for mode in ("off", "on", "natural"):
        with tempfile.TemporaryDirectory() as d:
            path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT)) if p)
            env = {**os.environ, "VYRE_CACHE_DIR": d, "VYRE_AUTOTUNER": mode, "PYTHONPATH": path}
            proc = subprocess.run([sys.executable, "-c", _COLD.format(n=n, backend=backend)], env=env,
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode:
                rows.append(f"| {mode} | failed | {proc.stderr.strip().splitlines()[-1][:80]} |")
                continue
            imp, first = (float(v) for v in proc.stdout.split())
            rows.append(f"| {mode} | {imp:.2f} | {first:.2f} |")
    return rows


# -- report -------------------------------------------------------------------------------------------


def _fmt_s(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def verdict(name: str, stats: list[Stats], seeds: int) -> str:
    """Whether the fitted-Fisher natural gradient met its target on this kernel."""
    ng = stats[0]
    ex = next(s for s in stats if s.strategy.startswith("exhaustive"))
    budget = 0.4 * statistics.mean(ex.used)
    within = ng.reached == seeds and all(t <= budget for t in ng.to_good)
    cheaper = statistics.mean(ng.wall) < statistics.mean(ex.wall)
    ok = "met" if within and cheaper else "NOT met"
    return (f"- {name}: {ok} (5% reached in {ng.reached}/{seeds} replays, at most "
            f"{max(ng.to_good, default=0)} measurements against a limit of {budget:.1f}; wall "
            f"{_fmt_s(statistics.mean(ng.wall))} against the sweep's {_fmt_s(statistics.mean(ex.wall))})")


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
             "measurements (mean) | wall time (mean) |", "|---|---|---|---|---|---|---|"]
    real = ["| kernel | mode | budget | measurements | tuning wall time | decision | decision / best |",
            "|---|---|---|---|---|---|---|"]
    verdicts: list[str] = []
    for p in problems(args.backend, scale):
        if args.only and args.only not in p.name:
            continue
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
        stats = replay(samples, args.seeds, args.repeats)
        for st in stats:
            to = f"{statistics.mean(st.to_good):.1f}" if st.to_good else "-"
            finite_q = [q for q in st.quality if math.isfinite(q)]
            qual = (f"{statistics.mean(finite_q):.3f}, {max(finite_q):.3f}" if finite_q else "-")
            table.append(f"| {p.name} | {st.strategy} | {st.reached}/{args.seeds} | {to} | {qual} | "
                         f"{statistics.mean(st.used):.1f} | {_fmt_s(statistics.mean(st.wall))} |")
        verdicts.append(verdict(p.name, stats, args.seeds))
        if not args.no_real:
            print(f"{p.name}: real tuning runs ...", file=sys.stderr, flush=True)
            real += real_runs(p, args.backend, truth)
    lines += ["Ground truth:", "", *summary, "", "Replays:", "", *table, "",
              "Natural-gradient target (within 5% of the best in at most 40% of the exhaustive sweep's "
              "measurements, in every replay, and less wall time than the sweep):", "", *verdicts, ""]
    if not args.no_real:
        lines += ["Real tuning runs (`autotune.tune`; natural gradient through the IR programs):", "",
                  *real, ""]
    if args.cold:
        lines += [f"Cold first dispatch (fresh process and caches, fused_chain, {scale} elements):", "",
                  *cold_runs(args.backend, scale), ""]
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
    ap.add_argument("--cold", action="store_true", help="measure cold first dispatches per tuner mode")
    ap.add_argument("--only", default=None, help="run only kernels whose name contains this")
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
