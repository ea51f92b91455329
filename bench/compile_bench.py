"""Cold compile time of the ops' CPU kernels: each program's serial entry compiled by numba with
no disk cache (what a first call on a new machine pays, once; the binary cache keeps it after).

    python bench/compile_bench.py [--quick] [--parallel] [--json FILE]

The programs are the CPU forms vyre.ops runs: whole-array reductions, argmax, matvec, the row
ops (row-per-invocation with lanes, and rows in groups) and the column forms, f32 (and f64 for
the whole-array reductions). ``--quick`` compiles a third of them. ``--parallel`` also compiles
each program's parallel entry (what the first call big enough for the thread pool pays) and
prints both times. Compare two trees by running
this in each, in alternating fresh processes: the machine's load moves single numbers by 5-10%.
"""

from __future__ import annotations

import argparse
import json
import time

from vyre import compile as vcompile
from vyre.ir import DataType, Program
from vyre.ops import argreduce, colwise, linalg, reduce, rowwise

F32, F64 = DataType.F32, DataType.F64


def programs(quick: bool) -> list[tuple[str, Program]]:
    out: list[tuple[str, Program]] = []
    for kind in reduce.Reduce:
        for t in (F32, F64):
            out.append((f"full {kind.value} {t.name}",
                        reduce.full_program(kind, t, reduce.accumulator_type(kind.combine, t), gpu=False)))
    out += [(f"argmax {t.name}", argreduce.argmax_program(t, gpu=False, indexed=False)) for t in (F32, F64)]
    out += [(f"matvec {t.name}", linalg.matvec_program(t, gpu=False)) for t in (F32, F64)]
    out += [(f"row {k} F32", rowwise.row_program(k, F32, gpu=False, wg=1, lanes=True)) for k in rowwise.ROW_KINDS]
    out += [("softmax F32", rowwise.softmax_program(F32, gpu=False, wg=1, lanes=True)),
            ("logsumexp F32", rowwise.logsumexp_program(F32, gpu=False, wg=1, lanes=True)),
            ("layer_norm F32", rowwise.layer_norm_program(F32, 1e-5, gpu=False, wg=1, lanes=True))]
    out += [(f"grouped {k} F32", rowwise.grouped_row_program(k, F32)) for k in rowwise.GROUPED_KINDS]
    out.append(("grouped argmax F32", argreduce.grouped_row_argmax_program(F32)))
    out += [(f"col {k} F32", colwise.col_program(k, F32)) for k in colwise.COL_KINDS]
    return out[::3] if quick else out


def serial_and_parallel(prog: Program) -> tuple[float, float]:
    """Seconds numba takes for the serial entry (compiled as the module loads), then the parallel one."""
    from vyre.codegen.cpu import emit_cpu

    ns: dict[str, object] = {"__name__": "vyre_compile_bench"}
    t = time.perf_counter()
    exec(compile(emit_cpu(prog, parallel=True, cache=False), "<vyre-kernel>", "exec"), ns)
    serial = time.perf_counter() - t
    if not ns.get("VYRE_PARALLEL"):
        return serial, 0.0
    t = time.perf_counter()
    ns["vyre_kernel_parallel"].compile(ns["_SIG"])  # type: ignore[attr-defined]
    return serial, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--parallel", action="store_true", help="time the parallel entries too")
    ap.add_argument("--json", help="write {name: seconds} here")
    args = ap.parse_args()
    vcompile(linalg.outer_program(F32), "cpu", disk_cache=False)  # numba's own start-up, not timed
    times: dict[str, float] = {}
    for name, prog in programs(args.quick):
        if args.parallel:
            serial, par = serial_and_parallel(prog)
            times[name], times[name + " (parallel)"] = serial, par
            print(f"| {name} | {serial:.2f} | {par:.2f} |", flush=True)
            continue
        t = time.perf_counter()
        vcompile(prog, "cpu", disk_cache=False)
        times[name] = time.perf_counter() - t
        print(f"| {name} | {times[name]:.2f} |", flush=True)
    if args.parallel:
        par = sum(v for k, v in times.items() if k.endswith("(parallel)"))
        print(f"| total ({len(times) // 2} programs) | {sum(times.values()) - par:.1f} | {par:.1f} |")
    else:
        print(f"| total ({len(times)} programs) | {sum(times.values()):.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(times, f)


if __name__ == "__main__":
    main()
