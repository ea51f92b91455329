"""CPU threading: what one parallel dispatch costs with numba's OpenMP pool spinning (the old
behaviour, ``OMP_WAIT_POLICY=active``, libgomp's choice on an idle machine) and passive (what
``import vyre`` now sets), against the serial entry; and a row softmax with fewer rows than the
old invocation threshold, serial (the old rule) against parallel (the work-based rule).

    PYTHONPATH=. python bench/cpu_threads_bench.py            # both policies, a markdown table

Each policy runs in its own process (libgomp reads the variable once, when it loads). Calls are
spaced by 2 ms of sleep, so the pool is idle between them, as in an application. Medians of 40.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _row_softmax() -> object:
    from vyre.ir import (
        F32, U32, Program, assign, buflen, exp, f32, gid, if_, let, load, loop, maximum, output, read, store, u32,
        var,
    )

    x, out, cols = read("x", 0, F32), output("out", 1, F32), read("cols", 2, U32)
    r, j, m, s, c = var("r"), var("j"), var("m"), var("s"), var("c")
    base = r * c
    return Program.wrapped([x, out, cols], 64, [
        let("r", gid()),
        let("c", load(cols, u32(0))),
        if_(r.lt(buflen(out) / c), [
            let("m", f32(-3.0e38)),
            loop("j", u32(0), c, [assign("m", maximum(m, x[base + j]))]),
            let("s", f32(0.0)),
            loop("j", u32(0), c, [assign("s", s + exp(x[base + j] - m))]),
            loop("j", u32(0), c, [store(out, base + j, exp(x[base + j] - m) / s)]),
        ]),
    ])


def _median_ms(fn: object, reps: int = 40) -> float:
    ts = []
    for _ in range(reps):
        time.sleep(0.002)
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        ts.append(time.perf_counter() - t)
    return float(np.median(ts) * 1e3)


def measure() -> dict[str, float]:
    import vyre
    from vyre.driver.dispatch import Launch
    from vyre.ir import F32, Program, buflen, gid, if_, let, output, read, store, var

    x_, o_ = read("x", 0, F32), output("out", 1, F32)
    i = var("i")
    copy = Program.wrapped([x_, o_], 256, [let("i", gid()), if_(i.lt(buflen(o_)), [store(o_, i, x_[i])])])
    res: dict[str, float] = {}
    for n in (1 << 15, 1 << 20):
        a = {"x": np.random.rand(n).astype(np.float32), "out": np.empty(n, np.float32)}
        k = vyre.compile(copy, "cpu")
        for name, la in (("parallel", Launch(1024, max(1, n // 65536))), ("serial", Launch(1024, 4096))):
            k.launch = la
            k(a)
            res[f"copy {n} {name}"] = _median_ms(lambda k=k, a=a: k(a))
    rows, cols = 4096, 1024
    sm = _row_softmax()
    x = np.random.rand(rows * cols).astype(np.float32)
    args = {"x": x, "out": np.empty_like(x), "cols": np.array([cols], np.uint32)}
    k = vyre.compile(sm, "cpu")  # type: ignore[arg-type]
    k(args)
    res["softmax work rule"] = _median_ms(lambda: k(args), 10)
    k.launch = Launch(1024, 4096)  # one chunk: the serial entry, what the invocation-count rule chose
    k(args)
    res["softmax serial"] = _median_ms(lambda: k(args), 10)
    xs = x.reshape(rows, cols)

    def np_softmax() -> None:
        e = np.exp(xs - xs.max(axis=1, keepdims=True))
        e /= e.sum(axis=1, keepdims=True)

    res["softmax numpy"] = _median_ms(np_softmax, 10)
    return res


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(measure()))
        return
    out = {}
    for policy in ("active", "passive"):
        env = {**os.environ, "OMP_WAIT_POLICY": policy, "VYRE_AUTOTUNER": "off", "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
                              timeout=600)
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        out[policy] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians in ms")
    print("| case | OMP_WAIT_POLICY=active (before) | passive (after) |")
    print("|---|---|---|")
    for key in out["active"]:
        print(f"| {key} | {out['active'][key]:.3f} | {out['passive'][key]:.3f} |")


if __name__ == "__main__":
    main()
