"""The tuner: the seed's unit tests (its vectors), the 16.16 policy arithmetic, the Fisher
estimate, the searches, timers and the Tuner object."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vyre.tuning import timers
from vyre.tuning.tuner import (
    DEFAULT_1D_WORKGROUP_SIZE, Q16_ONE, WORKGROUP_CANDIDATES, CallableTimer, DefaultPolicy,
    ExhaustiveSearch, FisherKind, LatencyPrior, Mode, NaturalGradientPolicy, NaturalGradientSearch,
    NaturalGradientTuningError, NaturalGradientTuningErrorKind, PerfCounterTimer, RandomSearch,
    SafeTimer, SearchCandidate, SearchResult, Tuner, TunerCacheWarning, TunerFeedback,
    TuningMeasurement, candidates_for, estimate_fisher, fisher_inv_sqrt_q16, fit_latency_model,
    identity_fisher_q16, log2_candidates, reference_inv_sqrt, precondition_q16,
)
from vyre.errors import TunerError

Size = tuple[int, int, int]


def measurements() -> list[TuningMeasurement[Size]]:
    return [
        TuningMeasurement((64, 1, 1), 12_000),
        TuningMeasurement((128, 1, 1), 8_000),
        TuningMeasurement((256, 1, 1), 10_000),
    ]


class StaticTimer:
    """The seed's test timer: fixed latencies, optional failure, records what it measured."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.fail_on = fail_on
        self.measured: list[Size] = []

    def time_ns(self, candidate: Size) -> float:
        self.measured.append(candidate)
        if self.fail_on == candidate[0]:
            raise RuntimeError("timer failed")
        return {64: 12_000, 128: 8_000, 256: 10_000}.get(candidate[0], 50_000)


@pytest.fixture
def tuner_at(tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(name: str, mode: Mode) -> Tuner:
        return Tuner(name, mode, cache_path=tmp_path / f"{name}.toml")

    return make


# -- the seed's tests -----------------------------------------------------------------------------


def test_unset_autotuner_mode_defaults_to_the_sweep() -> None:
    # the benchmark's cheapest mode for equal quality (BENCHMARKS.md, "Autotuner"); the seed's
    # natural-gradient default is opt-in
    assert Mode.production_default() is Mode.ON
    assert Mode.from_env_value(None) is Mode.ON
    assert Mode.from_env({}) is Mode.ON


def test_explicit_env_modes_preserve_escape_hatches() -> None:
    table = {"natural": Mode.NATURAL_GRADIENT, "ng": Mode.NATURAL_GRADIENT, "on": Mode.ON,
             "off": Mode.OFF_USE_DEFAULT, "default": Mode.OFF_USE_DEFAULT}
    for value, mode in table.items():
        assert Mode.from_env_value(value) is mode
        assert Mode.from_env({"VYRE_AUTOTUNER": value}) is mode
    with pytest.warns(UserWarning, match="Fix:"):
        assert Mode.from_env_value("bogus") is Mode.ON


def test_identity_fisher_preserves_fastest_candidate_policy_gradient() -> None:
    samples = measurements()
    step = NaturalGradientPolicy(temperature_ns=4_000).suggest(samples, identity_fisher_q16(len(samples)))
    assert step.best_measured_workgroup_size == (128, 1, 1)
    assert step.selected_workgroup_size == (128, 1, 1)
    assert step.best_measured_elapsed_ns == 8_000
    # softmax(-(t - 8000) / 4000) = (e^-1, 1, e^-0.5) / sum, in 16.16, last weight the remainder
    assert step.policy_weights_q16 == (12_211, 33_193, 20_132)
    assert step.natural_gradient_q16 == step.policy_weights_q16


def test_anisotropic_fisher_can_redirect_next_probe_without_changing_measurement_winner() -> None:
    samples = measurements()
    fisher = identity_fisher_q16(len(samples))
    fisher[0] = Q16_ONE * 8
    step = NaturalGradientPolicy(temperature_ns=4_000).suggest(samples, fisher)
    assert step.best_measured_workgroup_size == (128, 1, 1)
    assert step.selected_workgroup_size == (64, 1, 1)
    assert step.natural_gradient_q16[0] > step.natural_gradient_q16[1]
    assert step.natural_gradient_q16 == (8 * 12_211, 33_193, 20_132)


@pytest.mark.parametrize("base", [0, 1, 10, 1_000, 2**64 - 1 - 2])
def test_softmax_weights_conserve_q16_probability_mass_across_hostile_latencies(base: int) -> None:
    sat = 2**64 - 1
    samples = [TuningMeasurement((32, 1, 1), base), TuningMeasurement((64, 1, 1), min(base + 1, sat)),
               TuningMeasurement((128, 1, 1), min(base + 2, sat))]
    step = NaturalGradientPolicy(temperature_ns=1).suggest(samples, identity_fisher_q16(3))
    assert sum(step.policy_weights_q16) == Q16_ONE


def test_rejects_empty_measurements_zero_temperature_and_bad_fisher_shape() -> None:
    with pytest.raises(NaturalGradientTuningError, match="Fix:") as e1:
        NaturalGradientPolicy().suggest([], [])
    assert e1.value.kind is NaturalGradientTuningErrorKind.EMPTY_MEASUREMENTS
    samples = measurements()
    with pytest.raises(NaturalGradientTuningError, match="Fix:") as e2:
        NaturalGradientPolicy(temperature_ns=0).suggest(samples, identity_fisher_q16(3))
    assert e2.value.kind is NaturalGradientTuningErrorKind.ZERO_TEMPERATURE
    with pytest.raises(NaturalGradientTuningError, match=r"9 cells for 3 measurement.*got 1.*Fix:") as e3:
        NaturalGradientPolicy().suggest(samples, [Q16_ONE])
    assert (e3.value.kind, e3.value.measurements, e3.value.cells) == (
        NaturalGradientTuningErrorKind.FISHER_MATRIX_SHAPE, 3, 1)
    assert isinstance(e3.value, TunerError)


def test_tuner_exposes_natural_gradient_step_surface(tuner_at) -> None:  # type: ignore[no-untyped-def]
    tuner = tuner_at("natural-gradient-test-adapter", Mode.OFF_USE_DEFAULT)
    samples = measurements()
    step = tuner.natural_gradient_step(samples, identity_fisher_q16(3), NaturalGradientPolicy())
    assert step.selected_workgroup_size == (128, 1, 1)


def test_measured_natural_gradient_sweep_uses_backend_timer_and_fisher_policy(tuner_at) -> None:  # type: ignore[no-untyped-def]
    tuner = tuner_at("measured-natural-gradient-test-adapter", Mode.NATURAL_GRADIENT)
    timer = StaticTimer()
    fisher = identity_fisher_q16(3)
    fisher[0] = Q16_ONE * 8
    step = tuner.best_of_natural_gradient(
        None, [(64, 1, 1), (128, 1, 1), (256, 1, 1)], timer, fisher, NaturalGradientPolicy(4_000)
    )
    assert timer.measured == [(64, 1, 1), (128, 1, 1), (256, 1, 1)]
    assert step.best_measured_workgroup_size == (128, 1, 1)
    assert step.selected_workgroup_size == (64, 1, 1)


def test_measured_natural_gradient_sweep_propagates_timer_failures(tuner_at) -> None:  # type: ignore[no-untyped-def]
    tuner = tuner_at("measured-natural-gradient-error-test-adapter", Mode.NATURAL_GRADIENT)
    timer = StaticTimer(fail_on=128)
    with pytest.raises(RuntimeError, match="timer failed"):
        tuner.best_of_natural_gradient("k", [(64, 1, 1), (128, 1, 1), (256, 1, 1)], timer,
                                       identity_fisher_q16(3))
    assert timer.measured == [(64, 1, 1), (128, 1, 1)]
    assert "k" not in tuner.cache


# -- policy arithmetic ----------------------------------------------------------------------------


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=12), st.integers(1, 2**64 - 1))
@settings(max_examples=200, deadline=None)
def test_weights_always_sum_to_one_and_best_is_first_fastest(times: list[int], temp: int) -> None:
    ms = [TuningMeasurement(i, t) for i, t in enumerate(times)]
    step = NaturalGradientPolicy(temp).suggest(ms, identity_fisher_q16(len(ms)))
    assert sum(step.policy_weights_q16) == Q16_ONE
    assert all(w >= 0 for w in step.policy_weights_q16)
    assert step.best_measured_index == times.index(min(times))


def test_tie_rule_is_rusts_max_by_key_last_maximum() -> None:
    ms = [TuningMeasurement(c, 1_000) for c in "abcd"]
    step = NaturalGradientPolicy().suggest(ms, identity_fisher_q16(4))
    # equal latencies: weights 16384 each, so the last candidate is selected, the first is "best"
    assert step.policy_weights_q16 == (16_384,) * 4
    assert (step.selected, step.best_measured) == ("d", "a")


def test_precondition_saturates_like_u64_u32() -> None:
    top = 2**32 - 1
    assert precondition_q16([top, top, top, top], [top, top], 2) == [top, top]
    assert precondition_q16([Q16_ONE, 3, 0, 2 * Q16_ONE], [5, 1 << 16], 2) == [5 + 3, 2 << 16]


@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.integers(0, 2**31 - 1), min_size=n * n, max_size=n * n),
    st.lists(st.integers(0, Q16_ONE), min_size=n, max_size=n).filter(lambda g: sum(g) <= Q16_ONE))))
@settings(max_examples=100, deadline=None)
def test_precondition_matches_the_ir_primitive_oracle_in_the_tuners_range(case) -> None:  # type: ignore[no-untyped-def]
    """Cells below 2^31 and weights summing to at most 1.0 never overflow, so the seed's
    saturating product and the self-substrate primitive's wrapping one agree bit for bit."""
    natural_gradient = pytest.importorskip("vyre.primitives.natural_gradient")
    n, m, g = case
    assert precondition_q16(m, g, n) == natural_gradient.natural_gradient_block_apply_exact(m, g, n)


def test_injected_apply_is_used_and_checked() -> None:
    calls: list[int] = []

    def apply(m, g, n):  # type: ignore[no-untyped-def]
        calls.append(n)
        return list(reversed(precondition_q16(m, g, n)))

    step = NaturalGradientPolicy(4_000, apply).suggest(measurements(), identity_fisher_q16(3))
    assert calls == [3] and step.selected_index == 1  # reversed: (20132, 33193, 12211)
    with pytest.raises(TunerError, match="Fix:"):
        NaturalGradientPolicy(4_000, lambda m, g, n: [1]).suggest(measurements(), identity_fisher_q16(3))


@pytest.mark.parametrize("bad", [[-1] + [0] * 8, [2**32] + [0] * 8, [1.5] + [0] * 8])
def test_fisher_cells_must_be_u32(bad: list[int]) -> None:
    with pytest.raises(TunerError, match="Fix:"):
        NaturalGradientPolicy().suggest(measurements(), bad)


# -- Fisher estimate ------------------------------------------------------------------------------


@given(st.integers(1, 8), st.integers(0, 2**31))
@settings(max_examples=40, deadline=None)
def test_newton_schulz_matches_eigendecomposition(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, n))
    spd = a @ a.T + 0.05 * np.eye(n)
    w, v = np.linalg.eigh(spd)
    want = (v / np.sqrt(w)) @ v.T
    np.testing.assert_allclose(reference_inv_sqrt(spd), want, rtol=1e-7, atol=1e-9)


def test_newton_schulz_rejects_non_spd() -> None:
    with pytest.raises(TunerError, match="Fix:"):
        reference_inv_sqrt(np.array([[1.0, 0.0], [0.0, -1.0]]))
    with pytest.raises(TunerError, match="Fix:"):
        reference_inv_sqrt(np.zeros((2, 3)))


def test_fisher_without_features_is_diagonal_prior_plus_observation_information() -> None:
    prior = LatencyPrior(prior_var=0.25, nugget=0.0, noise_floor=0.1)
    f = estimate_fisher([[1000.0], [], [1000.0, 1000.0]], prior=prior)
    np.testing.assert_allclose(f, np.diag([4 + 1 / 0.01, 4, 4 + 2 / 0.01]))


def test_fisher_with_features_is_spd_and_couples_neighbours() -> None:
    cands = log2_candidates([(w,) for w in WORKGROUP_CANDIDATES])
    feats = [c.features for c in cands]
    samples = [[5_000.0, 5_200.0], [], [4_000.0], [], [], [9_000.0]]
    f = estimate_fisher(samples, feats)
    assert np.allclose(f, f.T) and np.linalg.eigvalsh(f).min() > 0
    s = reference_inv_sqrt(f)
    cov = s @ s
    assert cov[1, 2] > 20 * abs(cov[1, 5])  # correlated with its neighbour, not with a far candidate
    assert cov[1, 1] > cov[2, 2]  # measured candidates are more certain


def test_posterior_mean_interpolates_between_measured_neighbours() -> None:
    cands = log2_candidates([(w,) for w in WORKGROUP_CANDIDATES])
    model = fit_latency_model([[1_000.0], [], [4_000.0], [], [], []], [c.features for c in cands])
    mu = np.exp(model.posterior_log_latency(reference_inv_sqrt(model.fisher)))
    assert 1_000 < mu[1] < 4_000


def test_fisher_rejects_bad_samples_and_features() -> None:
    for bad in ([[0.0]], [[math.inf]], [[-5.0]], []):
        with pytest.raises(TunerError, match="Fix:"):
            estimate_fisher(bad)
    with pytest.raises(TunerError, match="Fix:"):
        estimate_fisher([[1.0], [2.0]], features=[[1.0]])


def test_fisher_inv_sqrt_q16_uses_the_injected_inverse_square_root() -> None:
    seen: list[tuple[int, ...]] = []

    def inv_sqrt(m: np.ndarray) -> np.ndarray:
        seen.append(m.shape)
        return np.array([[0.5, -0.25], [-0.25, 2.0]])

    assert fisher_inv_sqrt_q16(np.eye(2), inv_sqrt) == [Q16_ONE // 2, 0, 0, 2 * Q16_ONE]  # negatives clamp
    assert seen == [(2, 2)]
    assert fisher_inv_sqrt_q16(np.eye(3) * 4.0) == [v // 2 for v in identity_fisher_q16(3)]
    with pytest.raises(TunerError, match="Fix:"):
        fisher_inv_sqrt_q16(np.eye(2), lambda m: np.ones((3, 3)))


# -- searches -------------------------------------------------------------------------------------

WGS, IPTS = (32, 64, 128, 256, 512, 1024), (1, 2, 4, 8, 16)
CANDS = log2_candidates([(w, i) for w in WGS for i in IPTS])


def landscape(seed: int):  # type: ignore[no-untyped-def]
    """A smooth bowl in (log2 workgroup, log2 items/thread) with a little roughness."""
    rng = random.Random(seed)
    x0, y0 = rng.uniform(5, 10), rng.uniform(0, 4)
    a, b, c = rng.uniform(0.02, 0.3), rng.uniform(0.02, 0.3), rng.uniform(-0.1, 0.1)
    rough = {cand.config: rng.gauss(0, 0.05) for cand in CANDS}

    def f(cfg: tuple[int, ...]) -> float:
        x, y = math.log2(cfg[0]) - x0, math.log2(cfg[1]) - y0
        return 10_000 * math.exp(a * x * x + b * y * y + c * x * y + rough[cfg])

    return f


def _noisy(f, seed: int) -> CallableTimer:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    return CallableTimer(lambda cfg: f(cfg) * math.exp(rng.gauss(0, 0.02)))


def _evaluate(search, trials: int = 24) -> tuple[int, float, float]:  # type: ignore[no-untyped-def]
    hits, to_target, used = 0, [], []
    for seed in range(trials):
        f = landscape(seed)
        true_best = min(f(c.config) for c in CANDS)
        r = search.run(CANDS, _noisy(f, seed + 1000))
        first = next((i for i, (cfg, _) in enumerate(r.trace, 1) if f(cfg) <= 1.05 * true_best), None)
        hits += first is not None
        to_target.append(first if first is not None else len(CANDS))
        used.append(r.measurements)
    return hits, float(np.mean(to_target)), float(np.mean(used))


def test_natural_gradient_search_beats_exhaustive_and_the_identity_fisher() -> None:
    ng_hits, ng_to, ng_used = _evaluate(NaturalGradientSearch())
    id_hits, _, _ = _evaluate(NaturalGradientSearch(fisher=FisherKind.IDENTITY))
    ex_hits, ex_to, ex_used = _evaluate(ExhaustiveSearch())
    assert ex_hits == 24 and ex_used == len(CANDS)
    assert ng_hits >= 22 and ng_to < ex_to / 2 and ng_used < len(CANDS) / 2
    assert ng_hits > id_hits  # the Fisher geometry, not the surrogate alone, earns the hits


def test_search_budget_failures_and_errors() -> None:
    f = landscape(3)
    fail = {CANDS[i].config for i in range(0, len(CANDS), 3)}

    def launch(c: tuple[int, ...]) -> float:
        if c in fail:
            raise RuntimeError("launch")
        return float(f(c))

    timer: SafeTimer[tuple[int, ...]] = SafeTimer(CallableTimer(launch))
    for search in (NaturalGradientSearch(budget=6), ExhaustiveSearch(budget=6), RandomSearch(budget=6)):
        r = search.run(CANDS, timer)
        assert r.measurements == 6 and r.best not in fail and math.isfinite(r.best_ns)
    everything_fails: CallableTimer[tuple[int, ...]] = CallableTimer(lambda c: math.inf)
    for search in (NaturalGradientSearch(budget=4), ExhaustiveSearch(), RandomSearch()):
        r = search.run(CANDS, everything_fails)
        assert r.best is None and r.best_ns == math.inf
    boom: CallableTimer[tuple[int, ...]] = CallableTimer(lambda c: 1.0 / 0.0)
    with pytest.raises(ZeroDivisionError):
        NaturalGradientSearch().run(CANDS, boom)
    with pytest.raises(TunerError, match="Fix:"):
        NaturalGradientSearch(start=99).run(CANDS, boom)
    with pytest.raises(TunerError, match="Fix:"):
        ExhaustiveSearch(budget=0).run(CANDS, boom)
    with pytest.raises(TunerError, match="Fix:"):
        RandomSearch().run([], boom)


def test_search_orders_and_results() -> None:
    timer: CallableTimer[tuple[int, ...]] = CallableTimer(lambda c: float(c[0]))
    cands = [SearchCandidate((w,)) for w in (256, 64, 128)]
    ex = ExhaustiveSearch().run(cands, timer)
    assert [c for c, _ in ex.trace] == [(256,), (64,), (128,)] and ex.best == (64,)
    assert ex.measurements_to_within(64.0) == 2 and ex.measurements_to_within(1.0) is None
    r1, r2 = RandomSearch(seed=7).run(cands, timer), RandomSearch(seed=7).run(cands, timer)
    assert r1.trace == r2.trace and sorted(r1.trace) == sorted(ex.trace)
    ng = NaturalGradientSearch().run(cands, timer)  # no features: candidates independent a priori
    assert ng.best == (64,) and isinstance(ng, SearchResult)
    with pytest.raises(TunerError, match="Fix:"):
        NaturalGradientSearch().run([SearchCandidate((1,), (1.0,)), SearchCandidate((2,), (1.0, 2.0))], timer)


def test_search_uses_injected_matrix_functions() -> None:
    used = {"inv_sqrt": 0, "apply": 0}

    def inv_sqrt(m: np.ndarray) -> np.ndarray:
        used["inv_sqrt"] += 1
        return reference_inv_sqrt(m)

    def apply(m, g, n):  # type: ignore[no-untyped-def]
        used["apply"] += 1
        return precondition_q16(m, g, n)

    a = NaturalGradientSearch(inv_sqrt=inv_sqrt, apply=apply).run(CANDS, CallableTimer(landscape(1)))
    b = NaturalGradientSearch().run(CANDS, CallableTimer(landscape(1)))
    assert a.trace == b.trace and used["inv_sqrt"] > 0 and used["apply"] == used["inv_sqrt"]


# -- timers ---------------------------------------------------------------------------------------


def test_perf_counter_timer_returns_median_after_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([0, 50, 100, 130, 200, 900, 1000, 1040])  # durations 50, 30, 700, 40
    monkeypatch.setattr(timers.time, "perf_counter_ns", lambda: next(ticks))
    calls: list[int] = []
    t = PerfCounterTimer(calls.append, warmup=2, repeats=4)
    assert t.time_ns(7) == 45.0 and calls == [7] * 6
    with pytest.raises(TunerError, match="Fix:"):
        PerfCounterTimer(calls.append, repeats=0)


def test_safe_timer_scores_launch_failures_inf(tuner_at) -> None:  # type: ignore[no-untyped-def]
    def launch(c: Size) -> float:
        if c[0] == 128:
            raise MemoryError("too much shared memory")
        return float(c[0])

    safe = SafeTimer(CallableTimer(launch), catch=(MemoryError,))
    tuner = tuner_at("safe", Mode.ON)
    best = tuner.best_of("k", [1024, 128, 256], safe)
    assert best is not None and best.config == (256, 1, 1) and tuner.resolve("k") == (256, 1, 1)
    assert [c for c, _ in safe.failures] == [(128, 1, 1)]
    narrow: SafeTimer[Size] = SafeTimer(CallableTimer(lambda c: float(int("x"))), catch=(MemoryError,))
    with pytest.raises(ValueError):
        narrow.time_ns((1, 1, 1))
    nan: SafeTimer[Size] = SafeTimer(CallableTimer(lambda c: math.nan))
    assert nan.time_ns((1, 1, 1)) == math.inf


# -- the Tuner object -----------------------------------------------------------------------------


def test_candidates_for() -> None:
    assert candidates_for(1024) == list(WORKGROUP_CANDIDATES)
    assert candidates_for(200) == [32, 64, 128] and candidates_for(16) == []
    assert Tuner.candidates_for(64) == [32, 64]


def test_best_of_records_first_fastest_and_skips_failures(tuner_at) -> None:  # type: ignore[no-untyped-def]
    tuner = tuner_at("bo", Mode.ON)
    times = {32: 5.0, 64: 3.0, 128: 3.0, 256: math.inf}
    best = tuner.best_of("p", [32, 64, 128, 256], CallableTimer(lambda c: times[c[0]]))
    assert best == TuningMeasurement((64, 1, 1), 3)
    assert tuner.resolve("p") == (64, 1, 1) and tuner.resolve("other") == DEFAULT_1D_WORKGROUP_SIZE
    assert tuner.best_of("q", [256], CallableTimer(lambda c: math.inf)) is None and "q" not in tuner.cache
    with pytest.raises(RuntimeError):
        tuner.best_of("r", [(64, 1, 1), (128, 1, 1)], StaticTimer(fail_on=64))
    with pytest.raises(TunerError, match="Fix:"):
        tuner.best_of("s", [64], CallableTimer(lambda c: -1.0))


def test_natural_gradient_sweep_drops_failed_rows(tuner_at) -> None:  # type: ignore[no-untyped-def]
    tuner = tuner_at("ngd", Mode.NATURAL_GRADIENT)
    fisher = identity_fisher_q16(3)
    fisher[8] = 8 * Q16_ONE  # favours 256, which fails
    times = {64: 12_000.0, 128: 8_000.0, 256: math.inf}
    step = tuner.best_of_natural_gradient("k", [64, 128, 256], CallableTimer(lambda c: times[c[0]]),
                                          fisher, NaturalGradientPolicy(4_000))
    assert len(step.policy_weights_q16) == 2 and step.selected == (128, 1, 1)
    assert tuner.resolve("k") == (128, 1, 1)


def test_persist_then_a_second_process_starts_tuned(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    first = Tuner("gpu", Mode.ON, cache_path=path)
    first.record_decision("prog", (256, 1, 1))
    first.persist()
    second = Tuner("gpu", Mode.OFF_USE_DEFAULT, cache_path=path)
    assert second.resolve("prog") == (256, 1, 1) and second.mode is Mode.OFF_USE_DEFAULT


def test_unreadable_cache_starts_empty_with_warning(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text("[[[")
    with pytest.warns(TunerCacheWarning, match="empty tuner cache"):
        tuner = Tuner("gpu", Mode.ON, cache_path=path)
    assert len(tuner.cache) == 0


# -- the seed's hysteresis resize -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("feedback", "expected"),
    [
        (TunerFeedback(idle_us=200_000, observed_workgroup_size_x=256), 128),
        (TunerFeedback(idle_us=200_000, observed_workgroup_size_x=32), None),  # floor
        (TunerFeedback(idle_us=100_000, observed_workgroup_size_x=256, observed_throughput_per_us=0.5), 512),
        (TunerFeedback(observed_workgroup_size_x=1024, observed_throughput_per_us=0.5), None),  # cap
        (TunerFeedback(observed_workgroup_size_x=256, observed_throughput_per_us=2.0), None),  # saturated
        (TunerFeedback(observed_workgroup_size_x=0, observed_throughput_per_us=0.0), 2),  # max(1) then x2
        (TunerFeedback(observed_workgroup_size_x=2**31, observed_throughput_per_us=0.0), None),
    ],
)
def test_default_policy_resize(feedback: TunerFeedback, expected: int | None) -> None:
    assert DefaultPolicy().suggest_resize(feedback) == expected


def test_cuda_event_timer_against_the_numba_simulator() -> None:
    """The simulator checks the numba.cuda calls and the warm-up/repeat counts (its events report a
    fixed -1 ms, so the value itself is only checked on a GPU)."""
    pytest.importorskip("numba.cuda")

    code = (
        "import numpy as np\n"
        "from numba import cuda\n"
        "from vyre.tuning.timers import CudaEventTimer\n"
        "@cuda.jit\n"
        "def k(a):\n"
        "    i = cuda.grid(1)\n"
        "    if i < a.size:\n"
        "        a[i] += 1\n"
        "a = cuda.to_device(np.zeros(100, np.float32))\n"
        "t = CudaEventTimer(lambda wg: k[(100 + wg - 1) // wg, wg](a), warmup=2, repeats=3)\n"
        "ns = t.time_ns(32)\n"
        "assert isinstance(ns, float)\n"
        "assert a.copy_to_host()[0] == 5\n"
    )
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
