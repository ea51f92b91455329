"""Tuner policies: the seed's natural-gradient policy in 16.16 fixed point, its hysteresis resize
policy, and the Fisher estimate that makes the natural gradient differ from the identity.

The arithmetic of :meth:`NaturalGradientPolicy.suggest` is the seed's, operation for operation:
``f64`` softmax rounded half away from zero into ``u32`` 16.16 with the last weight taking the
remainder (so weights sum to exactly :data:`Q16_ONE`), a saturating ``u64`` matrix-vector product,
and Rust's ``max_by_key`` tie rule (the last maximal element wins). See ``docs/tuner.md``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from ..errors import TunerError
from ..primitives import PrimitiveError, identity_fisher_q16, newton_schulz_inv_sqrt_reference

__all__ = [
    "Q16_ONE", "ApplyFn", "DefaultPolicy", "InvSqrtFn", "LatencyModel", "LatencyPrior",
    "NaturalGradientPolicy", "NaturalGradientTuningError", "NaturalGradientTuningErrorKind",
    "NaturalGradientTuningStep", "TunerFeedback", "TuningMeasurement", "checked_inv_sqrt",
    "estimate_fisher", "fisher_inv_sqrt_q16", "fit_latency_model", "identity_fisher_q16",
    "matrix_to_q16", "precondition_q16", "reference_inv_sqrt",
]

Q16_ONE = 1 << 16
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1

C = TypeVar("C", bound=Hashable)

#: ``apply(matrix_q16, vector_q16, n) -> vector_q16``: the preconditioning product (injectable so
#: it can run as a vyre IR program).
ApplyFn = Callable[[Sequence[int], Sequence[int], int], Sequence[int]]
#: ``inv_sqrt(F) -> F^{-1/2}`` for a symmetric positive definite float64 matrix (injectable).
InvSqrtFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True, slots=True)
class TuningMeasurement(Generic[C]):
    """One measured candidate. ``config`` is a workgroup size for the seed's 1D tuner, or any
    hashable launch configuration."""

    config: C
    elapsed_ns: int

    @property
    def workgroup_size(self) -> C:
        return self.config


@dataclass(frozen=True, slots=True)
class NaturalGradientTuningStep(Generic[C]):
    """Result of one policy update (the seed's struct)."""

    #: Candidate selected after Fisher preconditioning: the next probe.
    selected: C
    #: Fastest candidate in the measurement window, and its time.
    best_measured: C
    best_measured_elapsed_ns: int
    policy_weights_q16: tuple[int, ...]
    natural_gradient_q16: tuple[int, ...]
    selected_index: int
    best_measured_index: int

    @property
    def selected_workgroup_size(self) -> C:
        return self.selected

    @property
    def best_measured_workgroup_size(self) -> C:
        return self.best_measured


class NaturalGradientTuningErrorKind(enum.Enum):
    EMPTY_MEASUREMENTS = "empty-measurements"
    FISHER_MATRIX_SHAPE = "fisher-matrix-shape"
    ZERO_TEMPERATURE = "zero-temperature"


class NaturalGradientTuningError(TunerError):
    """The seed's three policy errors; ``kind`` says which."""

    def __init__(self, kind: NaturalGradientTuningErrorKind, measurements: int = 0, cells: int = 0) -> None:
        self.kind = kind
        self.measurements = measurements
        self.cells = cells
        match kind:
            case NaturalGradientTuningErrorKind.EMPTY_MEASUREMENTS:
                msg = ("natural-gradient tuner received no measurements. "
                       "Fix: measure at least one candidate before policy update.")
            case NaturalGradientTuningErrorKind.FISHER_MATRIX_SHAPE:
                msg = (f"natural-gradient tuner expected an inverse-Fisher matrix with "
                       f"{measurements * measurements} cells for {measurements} measurement(s), got "
                       f"{cells}. Fix: pass an n*n 16.16 matrix.")
            case NaturalGradientTuningErrorKind.ZERO_TEMPERATURE:
                msg = "natural-gradient tuner temperature is zero. Fix: use a positive temperature_ns."
            case _:
                raise AssertionError(kind)
        super().__init__(msg)


def precondition_q16(matrix_q16: Sequence[int], gradient_q16: Sequence[int], n: int) -> list[int]:
    """Exact reference of the seed's saturating ``u64`` fixed-point product ``M @ g >> 16``."""
    out = []
    for row in range(n):
        acc = 0
        base = row * n
        for col in range(n):
            term = min(matrix_q16[base + col] * gradient_q16[col], _U64_MAX) >> 16
            acc = min(acc + term, _U64_MAX)
        out.append(min(acc, _U32_MAX))
    return out


def _round_half_away_u32(x: float) -> int:
    """Rust ``x.round() as u32``: half away from zero, then a saturating cast (NaN -> 0)."""
    if math.isnan(x):
        return 0
    r = math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)
    return int(min(max(r, 0), _U32_MAX))


def latency_softmax_weights_q16(elapsed_ns: Sequence[int], best: int, temperature_ns: int) -> list[int]:
    """The seed's softmax of ``-(t - t_best) / T`` in 16.16; the last weight takes the remainder."""
    temperature = float(temperature_ns)
    weights = [math.exp(-float(max(t - best, 0)) / temperature) for t in elapsed_ns]
    total = 0.0
    for w in weights:  # left to right in f64, as the seed does (sum() may compensate)
        total += w
    out: list[int] = []
    assigned = 0
    for i, w in enumerate(weights):
        if i + 1 == len(weights):
            out.append(max(Q16_ONE - assigned, 0))
            break
        q = min(_round_half_away_u32((w / total) * float(Q16_ONE)), max(Q16_ONE - assigned, 0))
        assigned = min(assigned + q, _U32_MAX)
        out.append(q)
    return out


def _check_u(value: object, bits: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**bits:
        raise TunerError(
            f"{what} must be a u{bits} integer, found {value!r}. Fix: pass integers in [0, 2**{bits})."
        )
    return value


@dataclass(frozen=True, slots=True)
class NaturalGradientPolicy:
    """Choose the next probe from latency samples and an inverse-Fisher square root (16.16).

    ``apply`` is the preconditioning product; the default is the exact Python-int reference, and a
    caller may pass one that runs the self-substrate IR program."""

    temperature_ns: int = 10_000
    apply: ApplyFn = field(default=precondition_q16, compare=False, repr=False)

    def suggest(
        self, measurements: Sequence[TuningMeasurement[C]], fisher_inv_sqrt_q16: Sequence[int]
    ) -> NaturalGradientTuningStep[C]:
        """The seed's ``suggest``. Raises :class:`NaturalGradientTuningError` for an empty window,
        a zero temperature or a matrix that is not ``n * n``; :class:`TunerError` for values that
        are not ``u64`` times / ``u32`` cells."""
        n = len(measurements)
        if n == 0:
            raise NaturalGradientTuningError(NaturalGradientTuningErrorKind.EMPTY_MEASUREMENTS)
        if _check_u(self.temperature_ns, 64, "temperature_ns") == 0:
            raise NaturalGradientTuningError(NaturalGradientTuningErrorKind.ZERO_TEMPERATURE)
        if len(fisher_inv_sqrt_q16) != n * n:
            raise NaturalGradientTuningError(
                NaturalGradientTuningErrorKind.FISHER_MATRIX_SHAPE, n, len(fisher_inv_sqrt_q16)
            )
        matrix = [_check_u(v, 32, "inverse-Fisher cell") for v in fisher_inv_sqrt_q16]
        elapsed = [_check_u(m.elapsed_ns, 64, "elapsed_ns") for m in measurements]

        best_index, best_elapsed = 0, elapsed[0]
        for i in range(1, n):
            if elapsed[i] < best_elapsed:  # strict: the first fastest wins, as in the seed
                best_index, best_elapsed = i, elapsed[i]

        weights = latency_softmax_weights_q16(elapsed, best_elapsed, self.temperature_ns)
        natural = [int(v) for v in self.apply(matrix, weights, n)]
        if len(natural) != n or not all(0 <= v <= _U32_MAX for v in natural):
            raise TunerError(
                f"preconditioning apply returned {len(natural)} values (expected {n} u32 values). "
                "Fix: the injected apply must return M @ g in 16.16, one u32 per candidate."
            )
        selected_index = best_index
        top = -1
        for i, v in enumerate(natural):
            if v >= top:  # Rust's max_by_key returns the LAST maximal element
                selected_index, top = i, v
        return NaturalGradientTuningStep(
            selected=measurements[selected_index].config,
            best_measured=measurements[best_index].config,
            best_measured_elapsed_ns=best_elapsed,
            policy_weights_q16=tuple(weights),
            natural_gradient_q16=tuple(natural),
            selected_index=selected_index,
            best_measured_index=best_index,
        )


# -- the seed's hysteresis resize ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TunerFeedback:
    """Snapshot of live behaviour the tuner consumes for adaptive resizing."""

    per_opcode_counts: tuple[tuple[int, int], ...] = ()
    wall_time_us: int = 0
    idle_us: int = 0
    observed_workgroup_size_x: int = 64
    observed_throughput_per_us: float = 0.0


@dataclass(frozen=True, slots=True)
class DefaultPolicy:
    """Hysteresis resize: halve when idle too long, double when under-saturated."""

    adapter_max_workgroup_size_x: int = 1024
    minimum_workgroup_size_x: int = 32
    saturation_threshold_per_us: float = 1.0
    idle_shrink_us: int = 100_000

    def suggest_resize(self, feedback: TunerFeedback) -> int | None:
        current = max(feedback.observed_workgroup_size_x, 1)
        if feedback.idle_us > self.idle_shrink_us:
            shrunk = current // 2
            if shrunk >= self.minimum_workgroup_size_x and shrunk != current:
                return shrunk
            return None
        if feedback.observed_throughput_per_us < self.saturation_threshold_per_us:
            grown = current * 2
            if grown > _U32_MAX:  # the seed's checked_mul on u32
                return None
            if grown <= self.adapter_max_workgroup_size_x and grown != current:
                return grown
        return None


# -- Fisher estimate -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LatencyPrior:
    """Prior of the Gaussian model of log-latency over candidates (see ``docs/tuner.md``).

    ``length_scale`` is in feature units (one doubling when features are log2 sizes);
    ``prior_var`` is the prior variance of log-latency; ``nugget`` (a fraction of ``prior_var``)
    is variation no feature explains; ``noise_floor`` is the smallest relative timing noise
    believed (a standard deviation of log-latency); ``noise_pseudo_count`` shrinks each
    candidate's noise estimate toward the pooled one."""

    length_scale: float = 1.0
    prior_var: float = 0.25
    nugget: float = 0.05
    noise_floor: float = 0.03
    noise_pseudo_count: float = 2.0


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Fisher information of the log-latency field and the pieces the posterior mean needs."""

    fisher: np.ndarray  # (n, n): prior precision + diag(observation information)
    obs_info: np.ndarray  # (n,): samples / noise variance; 0 for unmeasured
    mean_log: np.ndarray  # (n,): mean observed log-latency; prior_mean where unmeasured
    prior_mean: float

    def posterior_log_latency(self, inv_sqrt_fisher: np.ndarray) -> np.ndarray:
        """Posterior mean ``m0 + F^{-1} D (y - m0)``, using ``F^{-1} = (F^{-1/2})^2`` so the only
        matrix function is the injected inverse square root."""
        s = np.asarray(inv_sqrt_fisher, dtype=np.float64)
        rhs = self.obs_info * (self.mean_log - self.prior_mean)
        return np.asarray(self.prior_mean + s @ (s @ rhs), dtype=np.float64)


def _log_samples(samples: Sequence[Sequence[float]]) -> list[np.ndarray]:
    logs = []
    for i, s in enumerate(samples):
        a = np.asarray(list(s), dtype=np.float64)
        if a.size and not (np.all(np.isfinite(a)) and np.all(a > 0)):
            raise TunerError(
                f"latency samples of candidate {i} must be positive and finite, found {a.tolist()}. "
                "Fix: drop failed (infinite) measurements before estimating the Fisher matrix."
            )
        logs.append(np.log(a))
    return logs


def fit_latency_model(
    samples: Sequence[Sequence[float]],
    features: np.ndarray | Sequence[Sequence[float]] | None = None,
    prior: LatencyPrior = LatencyPrior(),
) -> LatencyModel:
    """Gaussian model of log-latency: GP prior over features, per-candidate Gaussian timing noise.

    ``samples[i]`` are recent latencies (ns) of candidate ``i`` (empty when unmeasured)."""
    n = len(samples)
    if n == 0:
        raise TunerError("estimate_fisher received no candidates. Fix: pass one sample list per candidate.")
    logs = _log_samples(samples)
    if features is None:
        kernel = np.eye(n)
    else:
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] != n or not np.all(np.isfinite(x)):
            raise TunerError(
                f"features must be a finite ({n}, d) array, one row per candidate, found shape "
                f"{x.shape}. Fix: give every candidate a feature vector of the same length."
            )
        d2 = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
        kernel = np.exp(-d2 / (2.0 * prior.length_scale**2))
    cov = prior.prior_var * (kernel + prior.nugget * np.eye(n))
    prior_precision = np.linalg.inv(cov)
    prior_precision = 0.5 * (prior_precision + prior_precision.T)

    # Noise variance of log-latency: pooled within-candidate variance, shrunk per candidate.
    floor = prior.noise_floor**2
    ss = np.array([float(np.sum((a - a.mean()) ** 2)) if a.size else 0.0 for a in logs])
    dof = np.array([max(a.size - 1, 0) for a in logs], dtype=np.float64)
    pooled = max(floor, float(ss.sum() / dof.sum())) if dof.sum() > 0 else floor
    k0 = prior.noise_pseudo_count
    noise_var = np.maximum(floor, (k0 * pooled + ss) / (k0 + dof))
    counts = np.array([a.size for a in logs], dtype=np.float64)
    obs_info = counts / noise_var

    measured = counts > 0
    prior_mean = float(np.mean([a.mean() for a in logs if a.size])) if measured.any() else 0.0
    mean_log = np.array([a.mean() if a.size else prior_mean for a in logs])
    return LatencyModel(prior_precision + np.diag(obs_info), obs_info, mean_log, prior_mean)


def estimate_fisher(
    samples: Sequence[Sequence[float]],
    features: np.ndarray | Sequence[Sequence[float]] | None = None,
    prior: LatencyPrior = LatencyPrior(),
) -> np.ndarray:
    """Fisher information (float64, ``n x n``, symmetric positive definite) of the candidates'
    log-latencies given recent samples: GP prior precision plus ``diag(samples / noise variance)``.
    Without features the candidates are independent a priori."""
    return fit_latency_model(samples, features, prior).fisher


def reference_inv_sqrt(a: np.ndarray) -> np.ndarray:
    """Float64 ``A^{-1/2}`` of a symmetric positive definite matrix by
    :func:`vyre.primitives.newton_schulz_inv_sqrt_reference` (the one Newton-Schulz iteration;
    the tuner's default when no IR version is injected), symmetrised; :class:`TunerError` when it
    does not converge."""
    try:
        r = newton_schulz_inv_sqrt_reference(np.asarray(a, dtype=np.float64), tol=1e-9)
    except PrimitiveError as e:
        raise TunerError(
            f"Newton-Schulz did not give an inverse square root ({e}). Fix: the Fisher matrix must be "
            "symmetric positive definite; add a ridge (LatencyPrior.nugget / noise_floor)") from e
    return np.asarray(0.5 * (r + r.T), dtype=np.float64)

def fisher_inv_sqrt_q16(fisher: np.ndarray, inv_sqrt: InvSqrtFn = reference_inv_sqrt) -> list[int]:
    """``F^{-1/2}`` as the row-major unsigned 16.16 matrix the policy takes.

    The seed's format is unsigned, so negative couplings are clamped to zero and cells saturate
    at ``u32::MAX``; ``docs/tuner.md`` explains why the clamp loses little."""
    f = np.asarray(fisher, dtype=np.float64)
    return matrix_to_q16(checked_inv_sqrt(f, inv_sqrt))


def checked_inv_sqrt(fisher: np.ndarray, inv_sqrt: InvSqrtFn = reference_inv_sqrt) -> np.ndarray:
    """``inv_sqrt(fisher)``, checked to be a finite matrix of the same shape."""
    s = np.asarray(inv_sqrt(fisher), dtype=np.float64)
    if s.shape != fisher.shape or not np.all(np.isfinite(s)):
        raise TunerError(
            f"inv_sqrt returned shape {s.shape} (expected {fisher.shape}) or non-finite values. "
            "Fix: the injected inverse square root must return a finite matrix of the input's shape."
        )
    return s


def matrix_to_q16(matrix: np.ndarray) -> list[int]:
    """Row-major unsigned 16.16 cells: rounded half up, negatives clamped to 0, saturating."""
    q = np.clip(np.floor(np.asarray(matrix, dtype=np.float64) * Q16_ONE + 0.5), 0, _U32_MAX)
    return [int(v) for v in q.reshape(-1)]
