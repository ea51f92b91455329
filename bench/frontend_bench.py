"""The frontend's cost: reading, parsing and lowering the kernels of docs/guide.md (``@vyre.kernel``
and ``@vyre.func``), next to validating the resulting program and building the same program with
the builders. Prints a markdown table; ``--record`` appends it to BENCHMARKS.md.

    python bench/frontend_bench.py [--reps 30] [--record]

The guide's blocks run once first (on the interpreter, small data) to define the kernels; each
kernel is then decorated again ``--reps`` times from its function object (source read through
``inspect``/``linecache``, ``ast`` parse, lowering, validation), and the median is reported.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VYRE_BACKEND", "interp")


def _guide_namespace(d: Path) -> dict[str, Any]:
    from tests.test_docs import python_blocks, run_blocks

    return run_blocks(ROOT / "docs" / "guide.md", d, python_blocks(ROOT / "docs" / "guide.md"))


def _median_us(f: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()

    from vyre.frontend.api import KernelFunction
    from vyre.frontend.source import _modules, read_source

    tmp = tempfile.TemporaryDirectory()  # the kernels' source files must outlive the timing
    ns = _guide_namespace(Path(tmp.name))
    kernels = {k: v for k, v in ns.items() if isinstance(v, KernelFunction)}
    rows = []
    total_decorate = 0.0
    for name, k in kernels.items():
        wg = k.program.workgroup_size
        fn = k.fn
        decorate = _median_us(lambda fn=fn, wg=wg: KernelFunction(fn, wg), args.reps)
        parse = _median_us(lambda fn=fn: (_modules.clear(), read_source(fn, "@vyre.kernel")), args.reps)
        validate = _median_us(lambda p=k.program: p.diagnostics(), args.reps)
        lines = (k.source.tree.end_lineno or 0) - k.source.tree.lineno + 1
        total_decorate += decorate
        rows.append((name, lines, decorate, parse, validate))
    from vyre.examples import fused_chain

    build = _median_us(lambda: fused_chain().validate(), args.reps)
    cpu = _cpu_name()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    out = [f"### Frontend: {cpu}, {os.cpu_count()} cores, load {load:.1f}, Python {platform.python_version()}, "
           f"commit {commit}", "",
           f"Median of {args.reps} decorations of each kernel of docs/guide.md (`@vyre.kernel` on the "
           "function object: find its `def` in the file's AST, lower, validate; the file's AST is "
           "cached, so its parse is paid once per file, shown apart), and validation alone. "
           "Microseconds.", "",
           "| kernel | lines | decorate | parse of its file (once) | of which validate |",
           "|---|---:|---:|---:|---:|"]
    for name, lines, dec, parse, val in rows:
        out.append(f"| {name} | {lines} | {dec:.0f} | {parse:.0f} | {val:.0f} |")
    out.append(f"| **all {len(rows)} kernels** | | **{total_decorate:.0f}** | | |")
    out.append(f"| (builders: `examples.fused_chain()` + validate) | | {build:.0f} | | |")
    out.append("")
    tmp.cleanup()
    text = "\n".join(out)
    print(text)
    if args.record:
        with open(ROOT / "BENCHMARKS.md", "a") as f:
            f.write("\n" + text + "\n")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


if __name__ == "__main__":
    main()
