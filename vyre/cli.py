"""The ``vyre`` command line: demo, info, show, tune, analyze."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import VyreError
from .ir import DataType, Program

if TYPE_CHECKING:
    from .tuning.autotune import TuneOutcome
    from .driver.dispatch import Launch


def load_program(spec: str) -> Program:
    """A built-in example name, a ``.vyre`` text file, a wire-format file, or a ``@vyre.kernel`` in
    a Python file: ``kernels.py:name`` (``kernels.py`` alone when it defines one kernel)."""
    from .examples import EXAMPLES

    if spec in EXAMPLES:
        return EXAMPLES[spec]()
    if spec.endswith(".py") or ".py:" in spec:
        from .frontend.api import kernel_in_file

        return kernel_in_file(spec).program
    path = Path(spec)
    if not path.exists():
        raise VyreError(f"{spec!r} is neither a built-in example ({', '.join(EXAMPLES)}) nor a file. "
                        "Fix: pass an example name or the path of a .vyre / wire file")
    data = path.read_bytes()
    if data.startswith(b"VYRE"):
        return Program.from_wire(data)
    from .ir.parser import parse_program

    return parse_program(data.decode("utf-8", errors="replace"))


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import format_rows, run_demo
    from .driver.backends import default_backend

    backend = args.backend or default_backend()
    rows = run_demo(backend, args.n)
    print(format_rows(rows, backend))
    return 0 if all(r.ok for r in rows) else 1


def cmd_info(args: argparse.Namespace) -> int:
    import platform

    import numba

    from . import __version__
    from .driver.backends import BACKENDS, cuda_available, default_backend, simulator_enabled
    from .settings import cache_root, read_settings

    s = read_settings()
    print(f"vyre {__version__}  python {platform.python_version()}  numpy {np.__version__}  "
          f"numba {numba.__version__}")
    try:
        from importlib.metadata import version

        print(f"numba-cuda {version('numba-cuda')}")
    except Exception:
        print("numba-cuda not installed (pip install 'vyre[cuda]')")
    avail = {"cpu": True, "interp": True, "cuda": cuda_available(), "cudasim": simulator_enabled()}
    print("backends: " + ", ".join(f"{b}{'' if avail[b] else ' (unavailable)'}" for b in BACKENDS))
    print(f"default backend: {default_backend()}")
    if avail["cuda"]:
        from numba import cuda

        dev = cuda.get_current_device()
        print(f"device: {dev.name!r} cc {dev.compute_capability}")
    from .driver.cpu_selfcheck import cpu_selfcheck

    check = cpu_selfcheck()  # compiles a few kernels the first time on a machine, then read from disk
    print(f"cpu self-check: {'loop vectoriser on' if check.vectorize else 'safe mode, loop vectoriser off'}"
          f" ({check.detail}); this LLVM {'has' if check.llvm_miscompiles else 'does not have'} the "
          "x[gid % 4] vectoriser bug (README 'Known limits')")
    print(f"cache root: {cache_root()}")
    print(f"tuner mode: {s.autotuner.value}")
    for line in tuner_lines(default_backend()):
        print(line)
    return 0


def tuner_lines(backend: str) -> list[str]:
    """``vyre info``'s tuner cache lines for ``backend``'s adapter."""
    from .tuning.autotune import adapter_fingerprint
    from .tuning.tuner import MAX_LAUNCH_INVOCATIONS, Tuner, TunerCache

    if backend not in ("cpu", "cuda", "cudasim"):
        return [f"tuner cache: none for backend {backend} (no launch knobs)"]
    fp = adapter_fingerprint(backend)
    path = Tuner.cache_path_for_adapter(fp)
    try:
        n = len(TunerCache.load(path, max_invocations=MAX_LAUNCH_INVOCATIONS))
        count = f"{n} cached decision{'' if n == 1 else 's'}"
    except VyreError as e:
        count = f"unreadable ({e})"
    return [f"tuner adapter: {fp}", f"tuner cache: {path} ({count})"]


def cmd_show(args: argparse.Namespace) -> int:
    prog = load_program(args.program)
    prog.validate()
    print(str(prog))
    if not args.ir_only:
        print()
        if args.backend == "cuda-c":  # the NVRTC route's C++ (docs/codegen.md)
            from .codegen.cuda_c import emit_cuda_c

            print(emit_cuda_c(prog).source)
        elif args.backend == "cuda":
            from .codegen.cuda import emit_cuda

            print(emit_cuda(prog))
        else:
            from .codegen.cpu import emit_cpu

            print(emit_cpu(prog))
    return 0


# -- tune ------------------------------------------------------------------------------------------

#: Buffer lengths and invocation counts for built-in examples whose buffers are not all ``n`` long:
#: ``n -> (counts by buffer name, invocations or None for the default grid)``.
EXAMPLE_SHAPES: dict[str, Callable[[int], tuple[dict[str, int], int | None]]] = {
    "matvec": lambda n: ({"m": n * 64, "v": 64, "out": n}, None),
    "histogram": lambda n: ({"keys": n, "counts": 256}, n),
}


def random_inputs(program: Program, n: int, rng: np.random.Generator,
                  counts: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Arrays for every storage buffer: ``counts[name]``, else the declared count, else ``n``
    elements. Written buffers are zero; read floats standard normal; read integers in [0, 1000)."""
    from .driver.bind import storage_buffers

    out: dict[str, np.ndarray] = {}
    for b in storage_buffers(program):
        size = (counts or {}).get(b.name) or b.count or n
        dt = b.element.np_dtype
        if b.access.writable:
            out[b.name] = np.zeros(size, dt)
        elif b.element.is_float:
            out[b.name] = rng.standard_normal(size).astype(dt)
        elif b.element is DataType.BOOL:
            out[b.name] = rng.random(size) < 0.5
        else:
            out[b.name] = rng.integers(0, 1000, size).astype(dt)
    return out


def tuning_problem(spec: str, program: Program, n: int, seed: int = 0
                   ) -> tuple[dict[str, np.ndarray], tuple[int, int, int] | None]:
    """Inputs and grid for tuning ``program`` (named ``spec``) at problem size ``n``."""
    counts, invocations = EXAMPLE_SHAPES[spec](n) if spec in EXAMPLE_SHAPES else ({}, None)
    inputs = random_inputs(program, n, np.random.default_rng(seed), counts)
    wg = program.workgroup_size[0]
    return inputs, (None if invocations is None else (max(1, -(-invocations // wg)), 1, 1))


class Progress:
    """Reports each measurement: tqdm on a terminal when it is installed, a ``\r`` line on a
    terminal without it, one plain line per measurement otherwise."""

    def __init__(self, total: int, stream: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.bar: Any = None
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        if self.tty:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=total, file=self.stream, unit="cand", leave=False)

    def __call__(self, i: int, launch: Launch, ns: float) -> None:
        what = f"wg={launch.wg} ipt={launch.ipt}: {_fmt_ns(ns)}"
        if self.bar is not None:
            self.bar.set_postfix_str(what)
            self.bar.update(1)
        elif self.tty:
            done = int(20 * min(i, self.total) / max(self.total, 1))
            self.stream.write(f"\r[{'#' * done}{'.' * (20 - done)}] {i}/{self.total} {what}   ")
            self.stream.flush()
        else:
            self.stream.write(f"[{i}/{self.total}] {what}\n")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.tty:
            self.stream.write("\n")


def _fmt_ns(ns: float) -> str:
    if not math.isfinite(ns):
        return "failed"
    return f"{ns / 1e3:.1f} us" if ns < 1e7 else f"{ns / 1e6:.2f} ms"


def outcome_table(outcome: TuneOutcome) -> str:
    """Every candidate with its best latency and its ratio to the decision."""
    measured = outcome.measured
    best = measured.get(outcome.launch, math.nan)
    rows = []
    for c in outcome.candidates:
        t = measured.get(c)
        ratio = "" if t is None or not math.isfinite(t) or not best > 0 else f"{t / best:.3f}"
        rows.append((f"{c.wg}", f"{c.ipt}", "not measured" if t is None else _fmt_ns(t), ratio,
                     "<- decision" if c == outcome.launch else ""))
    header = ("wg", "ipt", "latency", "vs decision", "")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    return "\n".join(lines + [fmt.format(*r).rstrip() for r in rows])


def plot_outcome(outcome: TuneOutcome, path: str, title: str) -> None:
    """A PNG bar chart of latency per measured candidate (needs matplotlib)."""
    plt = _pyplot()
    measured = outcome.measured
    cands = [c for c in outcome.candidates if c in measured]
    ys = [measured[c] / 1e3 if math.isfinite(measured[c]) else 0.0 for c in cands]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(cands)), 4.0))
    colors = ["tab:red" if c == outcome.launch else "tab:blue" for c in cands]
    ax.bar(range(len(cands)), ys, color=colors)
    ax.set_xticks(range(len(cands)), [f"{c.wg}x{c.ipt}" for c in cands], rotation=90, fontsize=7)
    ax.set_xlabel("launch (wg x ipt); red = decision, empty = failed")
    ax.set_ylabel("latency (us)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise VyreError(f"--plot needs matplotlib, which is not installed ({e}). "
                        "Fix: pip install matplotlib (or pip install 'vyre[plot]')") from e
    return plt


def cmd_tune(args: argparse.Namespace) -> int:
    from .tuning import autotune
    from .driver.backends import default_backend
    from .driver.dispatch import compile as vcompile
    from .settings import Mode

    if args.plot:
        _pyplot()  # fail before measuring
    backend = args.backend or default_backend()
    if backend not in ("cpu", "cuda", "cudasim"):
        raise VyreError(f"backend {backend!r} has no launch knobs to tune. Fix: pass --backend cpu or cuda")
    program = load_program(args.program)
    kernel = vcompile(program, backend)
    autotune.check_tunable(kernel)
    inputs, grid = tuning_problem(args.program, program, args.n)
    mode = Mode.ON if args.mode == "on" else Mode.NATURAL_GRADIENT
    n_inv = autotune.invocations_for(kernel, inputs, grid)
    progress = Progress(len(autotune.candidates(backend, n_inv)))
    try:
        outcome = autotune.tune(kernel, inputs, grid, mode=mode, use_cache=False, progress=progress,
                                repeats=args.repeats, budget=args.budget)
    finally:
        progress.close()
    tuner = autotune.tuner_for(backend, mode)
    print(f"{args.program} on {backend} ({autotune.adapter_fingerprint(backend)}): {n_inv} invocations, "
          f"mode {mode.value}, {len(outcome.trace)} measurements in {outcome.seconds:.2f} s"
          + (" (budget spent)" if outcome.truncated else ""))
    print(outcome_table(outcome))
    verdict = f"decision: wg={outcome.launch.wg} ipt={outcome.launch.ipt} ({outcome.source.value})"
    if outcome.source in (autotune.DecisionSource.SWEEP, autotune.DecisionSource.NATURAL):
        verdict += f", saved to {tuner.cache_path} as {outcome.key}"
    print(verdict)
    if args.plot:
        plot_outcome(outcome, args.plot, f"{args.program} on {backend}, {n_inv} invocations")
        print(f"plot: {args.plot}")
    return 0 if outcome.source is not autotune.DecisionSource.FAILED else 1


# -- analyze ---------------------------------------------------------------------------------------


def demo_pipeline() -> dict[str, Program]:
    """``fused_chain`` forward and its reverse-mode backward (``vyre.autodiff.grad``)."""
    from .autodiff import grad
    from .examples import fused_chain

    fwd = fused_chain()
    return {"fused_chain": fwd, "fused_chain_grad": grad(fwd, ["out"], ["x", "y"])}


def cmd_analyze(args: argparse.Namespace) -> int:
    from .self_substrate import DriverDispatcher, analyze_pipeline

    if args.programs == ["demo-pipeline"]:
        programs = demo_pipeline()
    else:
        programs = {}
        for spec in args.programs:
            name = Path(spec).stem if spec not in programs and Path(spec).suffix else spec
            base, k = name, 2
            while name in programs:
                name, k = f"{base}#{k}", k + 1
            programs[name] = load_program(spec)
    report = analyze_pipeline(programs, dispatcher=DriverDispatcher(args.backend),
                              threshold=args.threshold)
    print(report.to_table())
    if args.dot:
        Path(args.dot).write_text(report.to_dot() + "\n", encoding="utf-8")
        print(f"dot: {args.dot}")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """``vyre cache info`` / ``vyre cache clear``: the kernel cache (vyre/driver/binary_cache.py)."""
    from .driver import binary_cache

    if args.action == "clear":
        n = binary_cache.clear()
        print(f"removed {n} kernel cache entr{'y' if n == 1 else 'ies'} from {binary_cache.kernels_root()}")
    else:
        print("\n".join(binary_cache.info().lines()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vyre", description="vyre: a Python JIT kernel compiler")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="build, compile, run, differentiate and check a workload")
    d.add_argument("--backend", choices=["cuda", "cpu", "interp", "cudasim"], default=None)
    d.add_argument("--n", type=int, default=None, help="problem size (elements)")
    d.set_defaults(fn=cmd_demo)
    i = sub.add_parser("info", help="backends, device, versions, cache and tuner state")
    i.set_defaults(fn=cmd_info)
    s = sub.add_parser("show", help="print a program's IR and generated source")
    s.add_argument("program", help="built-in example name, .vyre file, wire file or kernels.py:name")
    s.add_argument("--backend", choices=["cuda", "cuda-c", "cpu"], default="cpu",
                   help="cuda: the numba-cuda module; cuda-c: the C++ the NVRTC route compiles")
    s.add_argument("--ir-only", action="store_true")
    s.set_defaults(fn=cmd_show)
    t = sub.add_parser("tune", help="sweep a program's launch candidates, print and save the decision")
    t.add_argument("program", help="built-in example name, .vyre file or wire file")
    t.add_argument("--n", type=int, default=1 << 20, help="problem size (elements per buffer)")
    t.add_argument("--backend", choices=["cuda", "cpu", "cudasim"], default=None)
    t.add_argument("--mode", choices=["on", "natural"], default="on",
                   help="on: measure every candidate; natural: the natural-gradient search")
    t.add_argument("--repeats", type=int, default=5, help="timed runs per candidate (median)")
    t.add_argument("--plot", metavar="OUT.png", default=None, help="write a latency plot (matplotlib)")
    t.add_argument("--budget", type=float, default=float("inf"), metavar="SECONDS",
                   help="stop measuring after this many seconds (default: no limit; dispatch uses "
                        "VYRE_TUNE_BUDGET)")
    t.set_defaults(fn=cmd_tune)
    a = sub.add_parser("analyze", help="dispatch graph and fusion flags of a pipeline of programs")
    a.add_argument("programs", nargs="+",
                   help="program specs in pipeline order, or the single keyword demo-pipeline")
    a.add_argument("--dot", metavar="OUT.dot", default=None, help="write the graph as Graphviz DOT")
    a.add_argument("--backend", choices=["cuda", "cpu", "interp", "cudasim"], default=None,
                   help="backend that runs the sheaf diffusion (default: the driver's)")
    a.add_argument("--threshold", type=float, default=0.5, help="flag threshold")
    a.set_defaults(fn=cmd_analyze)
    c = sub.add_parser("cache", help="the compiled-kernel cache: info (location, entries, size) or clear")
    c.add_argument("action", choices=["info", "clear"])
    c.set_defaults(fn=cmd_cache)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except VyreError as e:
        print(f"vyre: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
