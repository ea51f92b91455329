"""Start-up benchmark: ``import vyre``, the first dispatch of a small kernel in a fresh process
(cold: empty kernel cache; warm: the cache a previous process left), and the dispatch of a Program
rebuilt before every call (as code that builds its programs inside a function does).

Every fresh-process number is the median of ``--runs`` processes, with the tuner off
(``VYRE_AUTOTUNER=off``), wall and CPU time (the CPU time says how much of the wall time was this
process's own work on a loaded machine). Prints a markdown table (machine, date, commit);
``--record`` appends it to BENCHMARKS.md.

    python bench/startup_bench.py [--backend cpu|cuda] [--runs 5] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
w0, c0 = time.perf_counter(), time.process_time()
import numpy as np
w1, c1 = time.perf_counter(), time.process_time()
import vyre
w2, c2 = time.perf_counter(), time.process_time()
from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, sin, store, var
x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
i = var("i")
p = Program.wrapped([x, y, out], 256, [let("i", gid()),
    if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])])])
xs = np.linspace(0, 1, 4096, dtype=np.float32)
o = np.empty_like(xs)
w3, c3 = time.perf_counter(), time.process_time()
r = vyre.dispatch(p, {"x": xs, "y": xs, "out": o}, backend=sys.argv[1])
r = r["out"] if isinstance(r["out"], np.ndarray) else r["out"].copy_to_host()
w4, c4 = time.perf_counter(), time.process_time()
ok = bool(np.allclose(r, np.exp(xs) * xs + np.sin(xs) * xs, rtol=1e-5, atol=1e-6))
print(json.dumps({"numpy": [w1 - w0, c1 - c0], "vyre": [w2 - w1, c2 - c1], "first": [w4 - w3, c4 - c3],
                  "ok": ok, "numba": "numba" in sys.modules}))
"""


def child(backend: str, cache_dir: str, extra: dict[str, str] | None = None) -> dict:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "VYRE_CACHE_DIR": cache_dir, "VYRE_AUTOTUNER": "off", "PYTHONPATH": path,
           **(extra or {})}
    out = subprocess.run([sys.executable, "-c", CHILD, backend], env=env, capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"child failed:\n{out.stderr[-3000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if not row["ok"]:
        raise SystemExit("wrong result in the child")
    return row


def med(rows: list[dict], key: str, k: int) -> float:
    return statistics.median(r[key][k] for r in rows)


def rebuilt_dispatch_us(backend: str, reps: int = 3000) -> tuple[float, float]:
    """(same Program object, rebuilt Program) microseconds per dispatch, in this process."""
    import numpy as np

    import vyre
    from vyre.ir import F32, Program, buflen, exp, gid, if_, let, output, read, sin, store, var

    def build() -> Program:
        x, y, out = read("x", 0, F32), read("y", 1, F32), output("out", 2, F32)
        i = var("i")
        return Program.wrapped([x, y, out], 256, [let("i", gid()),
                               if_(i.lt(buflen(out)), [store(out, i, exp(x[i]) * y[i] + sin(x[i]) * x[i])])])

    if backend == "cuda":
        from numba import cuda

        xs = cuda.to_device(np.linspace(0, 1, 1024, dtype=np.float32))
        o = cuda.device_array(1024, np.float32)
    else:
        xs = np.linspace(0, 1, 1024, dtype=np.float32)
        o = np.empty_like(xs)
    inputs = {"x": xs, "y": xs, "out": o}
    p = build()
    for _ in range(50):
        vyre.dispatch(p, inputs, backend=backend)
    programs = [build() for _ in range(reps)]
    vyre.dispatch(programs[0], inputs, backend=backend)

    def timed(seq: list[Program]) -> float:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for q in seq:
                vyre.dispatch(q, inputs, backend=backend)
            best = min(best, (time.perf_counter() - t) / len(seq) * 1e6)
        return best

    same = timed([p] * reps)
    rebuilt = timed(programs[1:])  # each object dispatched for the first time: structure lookup
    if backend == "cuda":
        cuda.synchronize()
    return same, rebuilt


def machine(backend: str) -> str:
    if backend == "cuda":
        from numba import cuda

        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "?"
    head = f"### Start-up ({args.backend}): {machine(args.backend)}, {time.strftime('%Y-%m-%d')}, commit {commit}"
    rows: dict[str, list[dict]] = {"cold": [], "warm": [], "warm, numba's cache (VYRE_BINARY_CACHE=0)": []}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="vyre-startup-") as d:
            rows["cold"].append(child(args.backend, d))
            rows["warm"].append(child(args.backend, d))
        with tempfile.TemporaryDirectory(prefix="vyre-startup-") as d:
            child(args.backend, d, {"VYRE_BINARY_CACHE": "0"})
            rows["warm, numba's cache (VYRE_BINARY_CACHE=0)"].append(child(args.backend, d, {"VYRE_BINARY_CACHE": "0"}))
    warm = rows["warm"]
    lines = [head, "",
             f"Median of {args.runs} fresh processes each, tuner off; wall (CPU) seconds.", "",
             "| | import numpy | import vyre (after numpy) | first dispatch | numba imported |",
             "|---|---|---|---|---|"]
    for name, rs in rows.items():
        lines.append(f"| {name} | {med(rs, 'numpy', 0):.3f} ({med(rs, 'numpy', 1):.3f}) | "
                     f"{med(rs, 'vyre', 0):.3f} ({med(rs, 'vyre', 1):.3f}) | "
                     f"{med(rs, 'first', 0):.3f} ({med(rs, 'first', 1):.3f}) | "
                     f"{'yes' if any(r['numba'] for r in rs) else 'no'} |")
    same, rebuilt = rebuilt_dispatch_us(args.backend)
    lines += ["", f"Dispatch of a 1024-element kernel: the same Program object {same:.1f} us, a Program rebuilt "
              f"before every call {rebuilt:.1f} us (best of 3 x 3000).",
              f"Warm first dispatch after import: {med(warm, 'first', 0) * 1e3:.0f} ms wall, "
              f"{med(warm, 'first', 1) * 1e3:.0f} ms CPU."]
    text = "\n".join(lines)
    print(text)
    if args.record:
        with open(ROOT / "BENCHMARKS.md", "a", encoding="utf-8") as f:
            f.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
