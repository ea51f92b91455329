"""The autotuner wired into dispatch (vyre.tuning.autotune), on the CPU backend; the CUDA code path
in numba's simulator (a child process)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tomllib
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vyre
from vyre.tuning import autotune
from vyre.driver import dispatch as vdispatch
from vyre.tuning.autotune import (
    CPU_UNIT, MIN_TUNE_INVOCATIONS, AutotuneWarning, DecisionSource, Launch, candidates,
)
from vyre.tuning.tuner import Q16_ONE, MAX_LAUNCH_INVOCATIONS, TunerCache, precondition_q16
from vyre.errors import TunerError
from vyre.examples import fused_chain, histogram, saxpy
from vyre.ir import Program
from vyre.self_substrate import NATURAL_GRADIENT_AUTOTUNER_CALLS, DriverDispatcher, snapshot_counters
from vyre.settings import Mode

ROOT = Path(__file__).resolve().parent.parent
N = MIN_TUNE_INVOCATIONS  # the smallest problem the hook measures: 6 CPU candidates


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One root per module: the kernel cache stays warm, the tuner directory is wiped per test.
    return tmp_path_factory.mktemp("vyre-cache")


@pytest.fixture
def tuner_env(cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("VYRE_CACHE_DIR", str(cache_root))
    monkeypatch.setenv("VYRE_AUTOTUNER", "on")
    monkeypatch.setenv("VYRE_TUNE_BUDGET", "inf")  # these count measurements (budgets: test_tune_budget.py)
    shutil.rmtree(cache_root / "tuner", ignore_errors=True)
    autotune.reset()
    yield cache_root
    autotune.reset()


def chain_inputs(n: int = N, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(n).astype(np.float32), "y": rng.standard_normal(n).astype(np.float32),
            "out": np.zeros(n, np.float32)}


def kernel_of(program: Program) -> vdispatch.Kernel:
    return vdispatch._kernels[(program.fingerprint(), "cpu", program.workgroup_size)]


def cache_file_entries(root: Path) -> dict[str, list[int]]:
    files = list((root / "tuner").glob("*.toml"))
    assert len(files) == 1, files
    return tomllib.loads(files[0].read_text())


# -- candidates, keys, fingerprints ------------------------------------------------------------------


def test_candidates_cover_the_knobs_and_respect_the_problem_size() -> None:
    assert candidates("cpu", 1 << 30) == [Launch(CPU_UNIT, 2**k) for k in range(10)]  # too big for serial
    # below 2^15 invocations (only heavy ones are tuned there) finer chunks too
    assert candidates("cpu", 8192) == ([Launch(64), Launch(256)] + [Launch(CPU_UNIT, i) for i in (1, 2, 4)]
                                       + [autotune.CPU_SERIAL])
    assert candidates("cpu", 1 << 15) == [Launch(CPU_UNIT, i) for i in (1, 2, 4, 8, 16)] + [autotune.CPU_SERIAL]
    assert candidates("cpu", 10) == [autotune.CPU_SERIAL]  # the serial entry is always offered
    full = candidates("cuda", 1 << 30)
    assert len(full) == 30 and {c.wg for c in full} == {32, 64, 128, 256, 512, 1024}
    small = candidates("cudasim", 100)
    assert small and all(c.wg * c.ipt <= 200 for c in small) and Launch(32, 1) in small
    with pytest.raises(TunerError, match="Fix:"):
        candidates("interp", 100)


def test_fingerprints_are_stable_strings() -> None:
    fp = autotune.adapter_fingerprint("cpu")
    assert fp.startswith("cpu ") and fp.endswith(f"x{len(os.sched_getaffinity(0))}")
    autotune.adapter_fingerprint.cache_clear()
    assert autotune.adapter_fingerprint("cpu") == fp
    with pytest.raises(TunerError, match=r"no tunable launch knobs.*Fix:"):
        autotune.adapter_fingerprint("interp")


def test_keys_bucket_the_invocation_count_by_power_of_two() -> None:
    p = fused_chain()
    assert autotune.size_class(4096) == autotune.size_class(8191) != autotune.size_class(8192)
    assert autotune.program_key(p, 5000) == autotune.program_key(p, 8000)
    assert autotune.program_key(p, 5000) != autotune.program_key(p, 9000)
    assert autotune.program_key(p, 5000) != autotune.program_key(saxpy(), 5000)
    assert autotune.program_key(p, 5000).value.startswith("v1-")


def test_decisions_encode_as_wg_ipt_1() -> None:
    la = Launch(1024, 512)
    assert autotune.encode_decision(la) == (1024, 512, 1)
    assert autotune.decode_decision((1024, 512, 1)) == la
    assert autotune.decode_decision((64, 2, 2)) is None  # a seed workgroup size, not a launch
    assert autotune.decode_decision((64, 8192, 1)) is None  # out of Launch's range
    assert 1024 * 512 <= MAX_LAUNCH_INVOCATIONS


# -- the dispatch hook --------------------------------------------------------------------------------


def test_hook_sweeps_once_and_results_equal_the_untuned_run(tuner_env: Path) -> None:
    prog = fused_chain()
    inputs = chain_inputs()
    untuned = vdispatch.compile(prog, "cpu")({k: v.copy() for k, v in inputs.items()})["out"]
    out = vyre.dispatch(prog, inputs, backend="cpu")["out"]
    (outcome,) = autotune.recent_outcomes()
    assert outcome.source is DecisionSource.SWEEP and outcome.mode is Mode.ON
    assert outcome.invocations == N and len(outcome.trace) == len(candidates("cpu", N)) == 6
    assert outcome.launch in outcome.candidates
    assert outcome.launch == min(outcome.measured, key=lambda c: outcome.measured[c])
    k = kernel_of(prog)
    assert k.launch is outcome.launch
    np.testing.assert_array_equal(out, untuned)
    # The second dispatch is a lookup: no new outcome, the same Launch object.
    inputs2 = chain_inputs(seed=1)
    vyre.dispatch(prog, inputs2, backend="cpu")
    assert len(autotune.recent_outcomes()) == 1 and k.launch is outcome.launch
    assert autotune.launch_for(k, inputs2, N) is outcome.launch
    assert autotune.launch_for(k, inputs2, N + 1) is outcome.launch  # same size class
    entries = cache_file_entries(tuner_env)
    assert entries == {outcome.key: [outcome.launch.wg, outcome.launch.ipt, 1]}


def test_timing_uses_scratch_copies_so_atomics_count_once(tuner_env: Path) -> None:
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    counts = np.zeros(97, np.uint32)
    seen_during_timing: list[int] = []
    k = vdispatch.compile(histogram(), "cpu")
    grid = (N // 128, 1, 1)
    outcome = autotune.tune(k, {"keys": keys, "counts": counts}, grid, mode=Mode.ON,
                            progress=lambda i, la, ns: seen_during_timing.append(int(counts.sum())))
    assert outcome.source is DecisionSource.SWEEP and len(outcome.trace) == 6
    assert seen_during_timing == [0] * 6  # the caller's buffer is untouched while candidates run
    k.launch = outcome.launch
    k({"keys": keys, "counts": counts}, grid=grid)
    np.testing.assert_array_equal(counts, np.bincount(keys % 97, minlength=97))
    # Through dispatch: the hook tunes (many runs), then the one real run.
    shutil.rmtree(tuner_env / "tuner")
    autotune.reset()
    counts2 = np.zeros(97, np.uint32)
    vyre.dispatch(histogram(), {"keys": keys, "counts": counts2}, backend="cpu", grid=grid)
    assert autotune.recent_outcomes()[-1].source is DecisionSource.SWEEP
    np.testing.assert_array_equal(counts2, counts)


def test_mode_off_uses_the_cache_or_the_default(tuner_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VYRE_AUTOTUNER", "off")
    prog = saxpy()
    inputs = {"a": np.array([2.0], np.float32), **{k: v for k, v in chain_inputs().items() if k != "y"},
              "y": np.ones(N, np.float32)}
    vyre.dispatch(prog, inputs, backend="cpu")
    outcome = autotune.recent_outcomes()[-1]
    k = kernel_of(prog)
    assert outcome.source is DecisionSource.DEFAULT and outcome.trace == ()
    assert outcome.launch == k.default_launch(N) and k.launch is None  # the kernel's own default runs
    assert not (tuner_env / "tuner").exists() or not any((tuner_env / "tuner").glob("*.toml"))
    # A decision in the adapter's cache is used without measuring.
    tuner = autotune.tuner_for("cpu", Mode.ON)
    tuner.record_decision(autotune.program_key(prog, N), (CPU_UNIT, 4, 1))
    tuner.persist()
    autotune.reset()
    vyre.dispatch(prog, inputs, backend="cpu")
    outcome = autotune.recent_outcomes()[-1]
    assert outcome.source is DecisionSource.CACHED and outcome.launch == Launch(CPU_UNIT, 4)
    np.testing.assert_array_equal(inputs["out"], 2.0 * inputs["x"] + 1.0)


def test_small_problems_and_explicit_workgroup_sizes_are_not_measured(tuner_env: Path) -> None:
    prog = fused_chain()
    vyre.dispatch(prog, chain_inputs(N // 2), backend="cpu")
    assert autotune.recent_outcomes()[-1].source is DecisionSource.DEFAULT
    before = len(autotune.recent_outcomes())
    vyre.dispatch(prog, chain_inputs(), backend="cpu", workgroup_size=128)
    assert len(autotune.recent_outcomes()) == before  # the hook is skipped entirely


def test_a_failing_candidate_scores_inf_and_never_aborts(tuner_env: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    real_run = autotune.Harness.run

    def flaky(self: autotune.Harness, launch: Launch) -> None:
        if launch.ipt in (2, 8):
            raise RuntimeError("too many resources requested for launch")
        real_run(self, launch)

    monkeypatch.setattr(autotune.Harness, "run", flaky)
    k = vdispatch.compile(fused_chain(), "cpu")
    outcome = autotune.tune(k, chain_inputs(), mode=Mode.ON)
    assert outcome.source is DecisionSource.SWEEP
    assert [la.ipt for la, _ in outcome.failures] == [2, 8]
    assert "too many resources" in outcome.failures[0][1]
    assert [math.isinf(t) for _, t in outcome.trace] == [la.ipt in (2, 8) for la, _ in outcome.trace]
    assert outcome.launch.ipt not in (2, 8)


def test_every_candidate_failing_falls_back_to_the_default(tuner_env: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: autotune.Harness, launch: Launch) -> None:
        raise RuntimeError("launch failed")

    monkeypatch.setattr(autotune.Harness, "run", broken)
    prog = fused_chain()
    inputs = chain_inputs()
    with pytest.warns(AutotuneWarning, match=r"every launch candidate.*launch failed.*Fix:"):
        out = vyre.dispatch(prog, inputs, backend="cpu")["out"]
    outcome = autotune.recent_outcomes()[-1]
    assert outcome.source is DecisionSource.FAILED and outcome.launch == kernel_of(prog).default_launch(N)
    x, y = inputs["x"], inputs["y"]
    np.testing.assert_allclose(out, np.exp(x) * y + np.sin(x) * x, rtol=1e-5, atol=1e-5)
    assert not any((tuner_env / "tuner").glob("*.toml"))  # failures are not recorded


def test_tuner_trouble_never_stops_a_dispatch(tuner_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_cache(backend: str, mode: Mode | None = None) -> Any:
        raise TunerError("tuner cache /x is not valid TOML. Fix: delete the file")

    monkeypatch.setattr(autotune, "tuner_for", broken_cache)
    inputs = chain_inputs()
    with pytest.warns(AutotuneWarning, match="autotuning skipped.*not valid TOML"):
        out = vyre.dispatch(fused_chain(), inputs, backend="cpu")["out"]
    x, y = inputs["x"], inputs["y"]
    np.testing.assert_allclose(out, np.exp(x) * y + np.sin(x) * x, rtol=1e-5, atol=1e-5)


def test_untunable_kernels_are_refused() -> None:
    from vyre.examples import block_sum

    with pytest.raises(TunerError, match=r"not tunable.*Fix:"):
        autotune.tune(vdispatch.compile(block_sum(), "cpu"), {"x": np.zeros(256, np.float32)})


# -- natural gradient through the IR programs --------------------------------------------------------


class CountingDispatcher:
    """Delegates to the real driver on the CPU and records which programs ran."""

    def __init__(self) -> None:
        self.inner = DriverDispatcher("cpu")
        self.programs: list[Program] = []

    def dispatch(self, program: Program, inputs: Sequence[Any], grid_override: Any = None) -> list[bytes]:
        self.programs.append(program)
        return self.inner.dispatch(program, inputs, grid_override)


def test_natural_gradient_mode_runs_the_ir_programs(tuner_env: Path) -> None:
    from vyre.primitives import matmul_program, natural_gradient_block_apply, newton_schulz_t_program

    disp = CountingDispatcher()
    before = snapshot_counters()[NATURAL_GRADIENT_AUTOTUNER_CALLS]
    k = vdispatch.compile(fused_chain(), "cpu")
    inputs = chain_inputs()
    outcome = autotune.tune(k, inputs, mode=Mode.NATURAL_GRADIENT, dispatcher=disp)
    assert outcome.source is DecisionSource.NATURAL and outcome.launch in outcome.candidates
    steps = snapshot_counters()[NATURAL_GRADIENT_AUTOTUNER_CALLS] - before
    assert 1 <= steps and len(outcome.trace) - 1 <= steps <= len(outcome.trace)  # one policy step per probe
    n = len(outcome.candidates)
    fps = {p.fingerprint() for p in disp.programs}
    assert newton_schulz_t_program(n).fingerprint() in fps
    assert matmul_program(n, n, n).fingerprint() in fps
    assert natural_gradient_block_apply("m_inv_sqrt", "grad", "grad_nat", n).fingerprint() in fps
    assert inputs["out"].sum() == 0.0  # tuning never touched the caller's output
    assert cache_file_entries(tuner_env) == {outcome.key: [outcome.launch.wg, outcome.launch.ipt, 1]}


def test_natural_gradient_mode_through_dispatch_uses_the_real_driver(tuner_env: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VYRE_AUTOTUNER", "natural")
    before = snapshot_counters()[NATURAL_GRADIENT_AUTOTUNER_CALLS]
    prog = fused_chain()
    inputs = chain_inputs()
    out = vyre.dispatch(prog, inputs, backend="cpu")["out"]
    outcome = autotune.recent_outcomes()[-1]
    assert outcome.source is DecisionSource.NATURAL
    assert snapshot_counters()[NATURAL_GRADIENT_AUTOTUNER_CALLS] > before
    x, y = inputs["x"], inputs["y"]
    np.testing.assert_allclose(out, np.exp(x) * y + np.sin(x) * x, rtol=1e-5, atol=1e-5)


def test_ir_apply_agrees_with_the_seed_product() -> None:
    apply = autotune.ir_apply("cpu")
    rng = np.random.default_rng(7)
    for n in (1, 3, 7):
        cells = [int(v) for v in rng.integers(0, 3 * Q16_ONE, n * n)]
        w = rng.random(n)
        weights = [int(v) for v in np.floor(w / w.sum() * Q16_ONE)]
        weights[-1] += Q16_ONE - sum(weights)
        assert apply(cells, weights, n) == precondition_q16(cells, weights, n)
    # Cells the signed program cannot read are saturated, explicitly, at 2**31 - 1.
    assert apply([2**32 - 1], [Q16_ONE], 1) == [2**31 - 1]


# -- persistence across processes --------------------------------------------------------------------

_CHILD = """
import json, numpy as np, vyre
from vyre.tuning import autotune
from vyre.examples import saxpy
n = {n}
x = np.ones(n, np.float32)
vyre.dispatch(saxpy(), {{"a": np.ones(1, np.float32), "x": x, "y": x, "out": np.zeros(n, np.float32)}},
              backend="cpu")
o = autotune.recent_outcomes()[-1]
print(json.dumps({{"source": o.source.value, "wg": o.launch.wg, "ipt": o.launch.ipt, "key": o.key}}))
"""


def test_a_second_process_starts_tuned(tuner_env: Path) -> None:
    x = np.ones(N, np.float32)
    vyre.dispatch(saxpy(), {"a": np.ones(1, np.float32), "x": x, "y": x, "out": np.zeros(N, np.float32)},
                  backend="cpu")
    first = autotune.recent_outcomes()[-1]
    assert first.source is DecisionSource.SWEEP
    env = {**os.environ, "VYRE_CACHE_DIR": str(tuner_env), "VYRE_AUTOTUNER": "on"}
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(n=N)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    assert child == {"source": "cached", "wg": first.launch.wg, "ipt": first.launch.ipt, "key": first.key}


def test_cache_files_of_launch_decisions_load_with_the_launch_limit(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('"a" = [1024, 512, 1]\n"b" = [1024, 8192, 1]\n')
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cache = TunerCache.load(path, max_invocations=MAX_LAUNCH_INVOCATIONS)
    assert cache.get("a") == (1024, 512, 1) and cache.get("b") is None and len(w) == 1
    with pytest.warns(UserWarning, match="skipped 2 invalid"):
        assert len(TunerCache.load(path)) == 0  # the seed's limit still applies by default


# -- the CUDA path, in the simulator ------------------------------------------------------------------

_SIM = """
import json, numpy as np
from vyre.tuning import autotune
from vyre.driver.dispatch import compile
from vyre.examples import fused_chain, histogram
from vyre.settings import Mode
rng = np.random.default_rng(0)
n = 200
x = rng.standard_normal(n).astype(np.float32); y = rng.standard_normal(n).astype(np.float32)
out = np.zeros(n, np.float32)
k = compile(fused_chain(), "cudasim")
o = autotune.tune(k, {"x": x, "y": y, "out": out}, mode=Mode.ON, warmup=0, repeats=1)
untouched = float(np.abs(out).sum())
k.launch = o.launch
k({"x": x, "y": y, "out": out})
err = float(np.abs(out - (np.exp(x) * y + np.sin(x) * x)).max())
keys = rng.integers(0, 2**32, 300, dtype=np.uint64).astype(np.uint32)
counts = np.zeros(7, np.uint32)
kh = compile(histogram(), "cudasim")
oh = autotune.tune(kh, {"keys": keys, "counts": counts}, (3,), mode=Mode.ON, warmup=0, repeats=1)
during = int(counts.sum())
kh.launch = oh.launch
kh({"keys": keys, "counts": counts}, grid=(3,))
exact = bool((counts == np.bincount(keys % 7, minlength=7)).all())
print(json.dumps({"source": [o.source.value, oh.source.value], "measured": [len(o.trace), len(oh.trace)],
                  "untouched": untouched, "during": during, "err": err, "exact": exact}))
"""


def test_cuda_path_in_the_simulator(tuner_env: Path) -> None:
    env = {**os.environ, "VYRE_CACHE_DIR": str(tuner_env), "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-c", _SIM], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["source"] == ["sweep", "sweep"] and r["measured"] == [15, 15]
    assert r["untouched"] == 0.0 and r["during"] == 0 and r["exact"] and r["err"] < 1e-5
