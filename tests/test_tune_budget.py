"""A bounded, visible, interruptible tuner: the time budget (counted with a fake clock, never
timed), the log line, Ctrl-C mid-tune (in process and in a subprocess)."""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre
from vyre.driver import dispatch as vdispatch
from vyre.examples import fused_chain
from vyre.settings import read_settings
from vyre.tuning import autotune
from vyre.tuning.autotune import DecisionSource, Harness, Launch
from vyre.tuning.cache import TunerCache
from vyre.tuning.timers import Budget, BudgetedTimer, BudgetExhausted, SafeTimer
from vyre.tuning.tuner import MAX_LAUNCH_INVOCATIONS

ROOT = Path(__file__).resolve().parent.parent
N = 1 << 18  # every CPU candidate fits (chunks up to 2N)


class FakeClock:
    """Seconds that only move when a (fake) kernel run says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tuner_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VYRE_AUTOTUNER", "on")
    shutil.rmtree(tmp_path / "tuner", ignore_errors=True)
    autotune.reset()
    yield tmp_path
    autotune.reset()


def fake_runs(monkeypatch: pytest.MonkeyPatch, per_run: float,
              slower: float = 0.0) -> tuple[FakeClock, list[int]]:
    """Replace the tuner's kernel runs by a fake clock advance: a full run of ``Launch(wg, ipt)``
    costs ``per_run * (1 + slower * log2(ipt))`` seconds, a run over the first ``m`` of ``n``
    invocations that times ``m / n``. Returns the clock and the list of run sizes."""
    clock = FakeClock()
    sizes: list[int] = []
    monkeypatch.setattr(autotune, "_clock", clock)

    def run(self: Harness, launch: Launch, invocations: int | None = None) -> None:
        n = self.invocations if invocations is None else min(self.invocations, invocations)
        sizes.append(n)
        clock.now += per_run * (1 + slower * math.log2(launch.ipt)) * n / self.invocations

    monkeypatch.setattr(Harness, "run", run)
    return clock, sizes


def chain(n: int = N) -> dict[str, np.ndarray]:
    x = np.linspace(-1, 1, n).astype(np.float32)
    return {"x": x, "y": x, "out": np.zeros(n, np.float32)}


# -- the timer ---------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(costs=st.lists(st.floats(1e-4, 2.0), min_size=1, max_size=12), seconds=st.floats(0.0, 3.0),
       warmup=st.integers(0, 2), repeats=st.integers(1, 6))
def test_a_budgeted_search_overruns_by_at_most_one_run(costs: list[float], seconds: float, warmup: int,
                                                       repeats: int) -> None:
    clock = FakeClock()
    budget = Budget(seconds, clock=clock)

    def run(i: int) -> None:
        clock.now += costs[i]

    timer = SafeTimer(BudgetedTimer(run, budget, warmup, repeats))
    measured = 0
    try:
        for i in range(len(costs)):
            timer.time_ns(i)
            measured += 1
    except BudgetExhausted:
        pass
    assert clock.now <= seconds + max(costs)
    assert budget.runs <= measured * (warmup + repeats) + 1
    assert timer.failures == []  # the budget is never a candidate failure


def test_a_slow_candidate_stops_after_one_run() -> None:
    clock = FakeClock()
    cost = {0: 0.01, 1: 0.5, 2: 0.012}

    def run(i: int) -> None:
        clock.now += cost[i]

    timer = BudgetedTimer(run, Budget(math.inf, clock=clock), warmup=1, repeats=5)
    assert timer.time_ns(0) == pytest.approx(0.01e9)
    assert timer.time_ns(1) == pytest.approx(0.5e9)  # 50x the fastest run: one run, its time
    assert timer.budget.runs == 7
    timer.time_ns(2)
    assert timer.budget.runs == 13


def test_budget_settings() -> None:
    assert read_settings({}).tune_budget == 0.25
    assert read_settings({"VYRE_TUNE_BUDGET": "2.5"}).tune_budget == 2.5
    assert read_settings({"VYRE_TUNE_BUDGET": "inf"}).tune_budget == math.inf
    with pytest.warns(UserWarning, match="VYRE_TUNE_BUDGET"):
        assert read_settings({"VYRE_TUNE_BUDGET": "fast"}).tune_budget == 0.25
    with pytest.raises(vyre.TunerError, match="budget"):
        Budget(-1.0)


# -- tune() and dispatch under a budget ---------------------------------------------------------------


def test_a_kernel_too_slow_to_tune_costs_a_fraction_of_one_run(tuner_env: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    clock, sizes = fake_runs(monkeypatch, per_run=2.55)  # the 2.55 s kernel
    k = vdispatch.compile(fused_chain(), "cpu")
    out = autotune.tune(k, chain(), budget=0.25)
    assert out.source is DecisionSource.OVER_BUDGET and out.launch == k.default_launch(N)
    assert clock.now <= 0.25 and all(m < N for m in sizes)  # no full run: probes of a few invocations
    assert out.trace == () and TunerCache.load(autotune.tuner_for("cpu").cache_path,
                                               max_invocations=MAX_LAUNCH_INVOCATIONS).get(out.key) is None


@settings(max_examples=10, deadline=None)
@given(per_run=st.floats(1e-4, 0.5), budget=st.floats(0.01, 1.0), natural=st.booleans(),
       slower=st.floats(0.0, 1.0))
def test_the_first_dispatch_spends_at_most_its_budget_on_tuning(per_run: float, budget: float, natural: bool,
                                                                slower: float) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VYRE_CACHE_DIR", tempfile.mkdtemp(prefix="vyre-budget-"))
        mp.setenv("VYRE_AUTOTUNER", "natural" if natural else "on")
        mp.setenv("VYRE_TUNE_BUDGET", repr(budget))
        autotune.reset()
        clock, sizes = fake_runs(mp, per_run, slower)
        prog = fused_chain()
        inputs = chain()
        vyre.dispatch(prog, inputs, backend="cpu")  # the real run is not faked (and not counted)
        (out,) = autotune.recent_outcomes()
        slowest = per_run * (1 + slower * 9)
        assert clock.now <= budget + slowest
        assert out.budget == budget
        if out.source is DecisionSource.OVER_BUDGET:
            assert all(m < N for m in sizes) or len(sizes) <= 2
        else:
            assert out.source in (DecisionSource.SWEEP, DecisionSource.NATURAL, DecisionSource.SINGLE)
            assert len(sizes) == out.runs
        x, y = inputs["x"], inputs["y"]
        np.testing.assert_allclose(inputs["out"], np.exp(x) * y + np.sin(x) * x, rtol=1e-5, atol=1e-6)
        # tuned once: the next dispatch measures nothing
        before = len(sizes)
        vyre.dispatch(prog, inputs, backend="cpu")
        assert len(sizes) == before and len(autotune.recent_outcomes()) == 1
    autotune.reset()


def test_the_budget_cuts_a_sweep_short_and_keeps_the_best_measured(tuner_env: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    clock, _ = fake_runs(monkeypatch, per_run=0.01, slower=-0.05)  # larger ipt slightly faster
    k = vdispatch.compile(fused_chain(), "cpu")
    out = autotune.tune(k, chain(), budget=0.2)
    assert out.truncated and out.source is DecisionSource.SWEEP
    assert 0 < len(out.trace) < len(out.candidates)
    assert out.launch == min(out.measured, key=lambda c: out.measured[c])
    assert clock.now <= 0.2 + 0.01
    saved = TunerCache.load(autotune.tuner_for("cpu").cache_path, max_invocations=MAX_LAUNCH_INVOCATIONS)
    assert saved.get(out.key) == (out.launch.wg, out.launch.ipt, 1)


# -- visible -------------------------------------------------------------------------------------------


def test_one_log_line_when_tuning_happens(tuner_env: Path, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    fake_runs(monkeypatch, per_run=0.001)
    monkeypatch.setenv("VYRE_TUNE_BUDGET", "inf")
    prog = fused_chain()
    with caplog.at_level(logging.INFO, logger="vyre.tuning"):
        vyre.dispatch(prog, chain(), backend="cpu")
        vyre.dispatch(prog, chain(), backend="cpu")
    lines = [r for r in caplog.records if r.name == "vyre.tuning"]
    assert len(lines) == 1 and "tuned the cpu kernel" in lines[0].getMessage()


# -- interruptible -------------------------------------------------------------------------------------


def test_ctrl_c_mid_tune_propagates_and_leaves_nothing_half_done(tuner_env: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real_run = Harness.run

    def run(self: Harness, launch: Launch, invocations: int | None = None) -> None:
        calls.append(1)
        if len(calls) == 9:
            raise KeyboardInterrupt
        real_run(self, launch, invocations)

    monkeypatch.setattr(Harness, "run", run)
    monkeypatch.setenv("VYRE_TUNE_BUDGET", "inf")
    prog = fused_chain()
    inputs = chain()
    key = (prog.fingerprint(), "cpu", prog.workgroup_size)
    before = vdispatch._kernels[key].launch if key in vdispatch._kernels else None
    with pytest.raises(KeyboardInterrupt):
        vyre.dispatch(prog, inputs, backend="cpu")
    k = vdispatch._kernels[key]
    assert k.launch is before  # the candidate under measurement was not left behind
    assert autotune._memo.get(id(k)) is None or not autotune._memo[id(k)][1]
    assert getattr(autotune._local, "depth", 0) == 0
    files = list((tuner_env / "tuner").glob("*.toml")) if (tuner_env / "tuner").exists() else []
    assert all(not TunerCache.load(p, max_invocations=MAX_LAUNCH_INVOCATIONS).entries for p in files)
    monkeypatch.setattr(Harness, "run", real_run)
    out = vyre.dispatch(prog, inputs, backend="cpu")["out"]  # tunes again, from scratch
    assert autotune.recent_outcomes()[-1].source is DecisionSource.SWEEP
    np.testing.assert_allclose(out, np.exp(inputs["x"]) * inputs["y"] + np.sin(inputs["x"]) * inputs["x"],
                               rtol=1e-5, atol=1e-6)


_CHILD = """
import signal, sys, time, numpy as np, vyre
# an interactive process's SIGINT, whatever this one inherited: a suite started in the background
# of a non-interactive shell (`cmd &`) runs with SIGINT ignored, every child inherits that, and the
# sweep finished unharmed by the signal
print("SIGINT at start:", signal.getsignal(signal.SIGINT), sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
      file=sys.stderr)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
signal.signal(signal.SIGINT, signal.default_int_handler)
from vyre.tuning import autotune
from vyre.examples import matvec
real = autotune.Harness.run
def run(self, launch, invocations=None):
    print("RUN", flush=True)
    real(self, launch, invocations)
    # each run a few ms: the whole sweep (36 runs) once took less than a loaded machine took to
    # read three lines and send the signal; with the pause it lasts seconds
    time.sleep(0.25)
autotune.Harness.run = run
rows, cols = 1 << 15, 256
m = np.ones(rows * cols, np.float32)
vyre.dispatch(matvec(), {"m": m, "v": np.ones(cols, np.float32), "out": np.zeros(rows, np.float32)},
              backend="cpu")
print("FINISHED", flush=True)
"""


def test_sigint_mid_tune_exits_promptly_with_valid_cache_files(tmp_path: Path) -> None:
    env = {**os.environ, "VYRE_CACHE_DIR": str(tmp_path), "VYRE_AUTOTUNER": "on", "VYRE_TUNE_BUDGET": "inf",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for _ in range(3):  # a few measured runs in: mid-tune
            line = proc.stdout.readline()
            assert line.startswith("RUN"), (line, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # generous: "promptly" is within a run, not a sweep
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, (proc.returncode, out[-2000:], err[-4000:])
    for f in (tmp_path / "tuner").glob("*.toml") if (tmp_path / "tuner").exists() else ():
        TunerCache.load(f, max_invocations=MAX_LAUNCH_INVOCATIONS)  # parses: never torn

