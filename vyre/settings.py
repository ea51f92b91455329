"""Typed view of the environment variables vyre reads. The only module that touches ``os.environ``.

==================  =====================================================================
variable            meaning
==================  =====================================================================
``VYRE_BACKEND``    backend the dispatcher should use (lower-cased; parsed by the driver)
``VYRE_AUTOTUNER``  tuner :class:`Mode`: ``on``, ``natural``/``ng``, ``off``/``default``;
                    unset or unknown -> the production default, ``on`` (the sweep)
``VYRE_CACHE_DIR``  root of every vyre disk cache (kernels, tuner decisions)
``OMP_WAIT_POLICY``  written, not read: ``import vyre`` sets it to ``passive`` unless it is set
                    (:func:`quiet_openmp`)
``GOMP_SPINCOUNT``  written, not read: set to :data:`OPENMP_SPINS` with the policy, unless set
``VYRE_TUNE_BUDGET`` seconds the autotuner may spend per kernel and size class (default
                    0.25; ``inf`` or ``0``: unbounded / never measure)
``XDG_CACHE_HOME``  used as ``$XDG_CACHE_HOME/vyre`` when ``VYRE_CACHE_DIR`` is unset
``HOME``            used as ``~/.cache/vyre`` when neither of the above is set (Linux; macOS and
                    Windows use their own user cache directory, through ``platformdirs``)
``VYRE_CACHE_MAX_MB`` size limit of the kernel cache in MiB (least recently used entries go
                    first; default 1024; ``0``: no limit)
``VYRE_BINARY_CACHE`` ``0``/``off``: keep no compiled machine code (CPU kernels then load through
                    numba's own cache, as before the binary cache); default on
``VYRE_CUDA_COMPILER`` ``nvrtc`` or ``numba``: the compiler of CUDA kernels (default: NVRTC where
                    libnvrtc is found, else numba; vyre/driver/cuda_route.py)
``NUMBA_NUM_THREADS`` threads of the CPU thread pool (numba's variable; default: usable CPUs)
``NUMBA_CPU_NAME``, ``NUMBA_CPU_FEATURES``  the CPU numba compiles for (part of kernel cache keys)
==================  =====================================================================

Read the environment once with :func:`read_settings` (or pass a mapping in tests); every field is
already parsed, so callers never compare raw strings.
"""

from __future__ import annotations

import enum
import os
import sys
import warnings
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "AUTOTUNER_ENV", "DEFAULT_TUNE_BUDGET_S", "OPENMP_SPINS", "TUNE_BUDGET_ENV", "Mode", "Settings", "cache_root",
    "backend_setting", "quiet_openmp",
    "read_settings",
]

AUTOTUNER_ENV = "VYRE_AUTOTUNER"
BACKEND_ENV = "VYRE_BACKEND"
CACHE_DIR_ENV = "VYRE_CACHE_DIR"
XDG_CACHE_HOME_ENV = "XDG_CACHE_HOME"
HOME_ENV = "HOME"
TUNE_BUDGET_ENV = "VYRE_TUNE_BUDGET"
#: Seconds the autotuner may spend on one kernel and size class unless ``VYRE_TUNE_BUDGET`` says.
DEFAULT_TUNE_BUDGET_S = 0.25
CACHE_MAX_MB_ENV = "VYRE_CACHE_MAX_MB"
CUDA_COMPILER_ENV = "VYRE_CUDA_COMPILER"
DEFAULT_CACHE_MAX_MB = 1024


class Mode(enum.Enum):
    """Tuner runtime mode (the seed's ``Mode``)."""

    #: Sweep candidate sizes on first dispatch and record the fastest (production default: the
    #: cheapest mode for equal quality in bench/tuner_bench.py, BENCHMARKS.md "Autotuner").
    ON = "on"
    #: Probe candidates chosen by the Fisher-preconditioned policy (opt-in: it did not reach its
    #: target of 5% of the best in 40% of the sweep's measurements and less wall time).
    NATURAL_GRADIENT = "natural"
    #: Use cached decisions when present, otherwise the default workgroup (deterministic bisects).
    OFF_USE_DEFAULT = "off"

    @staticmethod
    def production_default() -> Mode:
        """The sweep: the seed defaulted to the natural-gradient search, which the benchmark shows
        costs more wall time for no better decisions (BENCHMARKS.md, "Autotuner")."""
        return Mode.ON

    @staticmethod
    def from_env_value(value: str | None) -> Mode:
        """Parse a ``VYRE_AUTOTUNER`` value; ``None`` (unset) and unknown values give the default.

        An unknown value also warns, since a typo such as ``of`` would otherwise silently keep the
        tuner on."""
        if value is None:
            return Mode.production_default()
        mode = _MODE_BY_VALUE.get(value.strip().lower())
        if mode is None:
            warnings.warn(
                f"{AUTOTUNER_ENV}={value!r} is not a known tuner mode (expected one of "
                f"{', '.join(sorted(_MODE_BY_VALUE))}); using "
                f"{Mode.production_default().value!r}. Fix: set {AUTOTUNER_ENV} to one of those "
                "values or unset it.",
                stacklevel=2,
            )
            return Mode.production_default()
        return mode

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None) -> Mode:
        env = os.environ if environ is None else environ
        return Mode.from_env_value(env.get(AUTOTUNER_ENV))


# One row per accepted spelling (the seed's table).
_MODE_BY_VALUE: dict[str, Mode] = {
    "on": Mode.ON,
    "natural": Mode.NATURAL_GRADIENT,
    "ng": Mode.NATURAL_GRADIENT,
    "off": Mode.OFF_USE_DEFAULT,
    "default": Mode.OFF_USE_DEFAULT,
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything vyre takes from the environment, parsed."""

    backend: str | None
    autotuner: Mode
    cache_dir: Path | None
    xdg_cache_home: Path | None
    home: Path
    tune_budget: float = DEFAULT_TUNE_BUDGET_S
    cache_max_bytes: int = DEFAULT_CACHE_MAX_MB << 20  # 0: no limit
    binary_cache: bool = True
    #: ``VYRE_CUDA_COMPILER``: ``"nvrtc"`` or ``"numba"`` forces that CUDA compile route; None: NVRTC
    #: where it is found, else numba (vyre/driver/cuda_route.py)
    cuda_compiler: Literal["nvrtc", "numba"] | None = None
    num_threads: int = 1
    numba_cpu_name: str | None = None
    numba_cpu_features: str | None = None
    #: every ``NUMBA_*`` variable set, sorted: numba's configuration (optimisation level, vectorisers,
    #: target CPU, ...) can change the machine code, so compiled-kernel keys include it
    numba_env: tuple[tuple[str, str], ...] = ()

    def cache_root(self) -> Path:
        """``$VYRE_CACHE_DIR``, else ``$XDG_CACHE_HOME/vyre``, else the platform's user cache
        directory (``platformdirs``): ``~/.cache/vyre`` on Linux and other XDG systems,
        ``~/Library/Caches/vyre`` on macOS, ``%LOCALAPPDATA%\\vyre\\Cache`` on Windows."""
        if self.cache_dir is not None:
            return self.cache_dir
        if self.xdg_cache_home is not None:
            return self.xdg_cache_home / "vyre"
        if sys.platform in ("darwin", "win32"):
            import platformdirs

            return Path(platformdirs.user_cache_dir("vyre", appauthor=False))
        return self.home / ".cache" / "vyre"


def _nonempty(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value else None


def _home(env: Mapping[str, str]) -> Path:
    home = _nonempty(env, HOME_ENV)
    if home is not None:
        return Path(home)
    try:
        return Path.home()
    except RuntimeError:  # no HOME and no passwd entry: the seed falls back to the working directory
        return Path(".")


def _usable_cpus() -> int:
    """CPUs this process may run on (numba's default thread count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _positive_int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    value = _nonempty(env, name)
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        n = minimum - 1
    if n < minimum:
        warnings.warn(f"{name}={value!r} is not an integer >= {minimum}; using {default}. "
                      f"Fix: set {name} to such an integer or unset it.", stacklevel=3)
        return default
    return n


def read_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Parse the environment (``os.environ`` unless a mapping is given)."""
    env = os.environ if environ is None else environ
    backend = _nonempty(env, BACKEND_ENV)
    cache_dir = _nonempty(env, CACHE_DIR_ENV)
    xdg = _nonempty(env, XDG_CACHE_HOME_ENV)
    # The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
    xdg_path = Path(xdg) if xdg is not None and os.path.isabs(xdg) else None
    return Settings(
        backend=_backend_name(backend),
        autotuner=Mode.from_env_value(env.get(AUTOTUNER_ENV)),
        cache_dir=Path(cache_dir).expanduser() if cache_dir is not None else None,
        xdg_cache_home=xdg_path,
        home=_home(env),
        tune_budget=_budget(env.get(TUNE_BUDGET_ENV)),
        cache_max_bytes=_positive_int(env, CACHE_MAX_MB_ENV, DEFAULT_CACHE_MAX_MB, minimum=0) << 20,
        binary_cache=env.get("VYRE_BINARY_CACHE", "1").strip().lower() not in ("0", "off", "false", "no"),
        cuda_compiler=_cuda_compiler(env.get(CUDA_COMPILER_ENV)),
        num_threads=_positive_int(env, "NUMBA_NUM_THREADS", _usable_cpus()),
        numba_cpu_name=_nonempty(env, "NUMBA_CPU_NAME"),
        numba_cpu_features=env.get("NUMBA_CPU_FEATURES"),
        numba_env=tuple(sorted((k, v) for k, v in env.items() if k.startswith("NUMBA_"))),
    )


def _cuda_compiler(value: str | None) -> Literal["nvrtc", "numba"] | None:
    """``VYRE_CUDA_COMPILER``; unset, empty or unknown (which also warns): None, the default route."""
    v = (value or "").strip().lower()
    if v == "nvrtc":
        return "nvrtc"
    if v == "numba":
        return "numba"
    if v:
        warnings.warn(f"{CUDA_COMPILER_ENV}={value!r} is not a CUDA compiler vyre knows; using the default "
                      "(NVRTC where found, else numba). Fix: set it to nvrtc or numba, or unset it", stacklevel=3)
    return None


def _budget(value: str | None) -> float:
    """``VYRE_TUNE_BUDGET`` as seconds >= 0 (``inf`` allowed); unset or invalid: the default (an
    invalid value also warns)."""
    if value is None or not value.strip():
        return DEFAULT_TUNE_BUDGET_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        warnings.warn(f"{TUNE_BUDGET_ENV}={value!r} is not a number of seconds >= 0; using "
                      f"{DEFAULT_TUNE_BUDGET_S}. Fix: set it to e.g. 0.5, or inf for no limit", stacklevel=3)
        return DEFAULT_TUNE_BUDGET_S
    return seconds


OMP_WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
GOMP_SPINCOUNT_ENV = "GOMP_SPINCOUNT"
#: spins of an idle libgomp thread before it sleeps, as ``import vyre`` sets it: about 0.3 ms on the
#: development VM (Emerald Rapids; BENCHMARKS.md, "What a parallel CPU launch cost"), enough that a
#: launch soon after another (an op's next pass, a loop of calls) finds its threads awake (2 us
#: instead of 40-150 us for a sleeping pool; 1000-2000 spins measured too short for a loop of
#: `vyre.ops.max` calls), short enough that idle threads burn little on a shared machine (libgomp's
#: own default, 300000, is about 10 ms)
OPENMP_SPINS = 10000


def quiet_openmp(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``OMP_WAIT_POLICY=passive`` and ``GOMP_SPINCOUNT=OPENMP_SPINS`` unless the wait policy
    is set already (``GOMP_SPINCOUNT`` is set only when it is unset too); True when anything was set
    here.

    numba's OpenMP threading layer (GNU libgomp) otherwise keeps its idle threads spinning for
    300000 spins (milliseconds here); on a shared or loaded machine every parallel CPU dispatch then
    waits for spinning threads to be scheduled (measured in BENCHMARKS.md: ~20 ms per call on a
    loaded 2-core box, against ~0.03 ms passive). Fully passive threads sleep at once, and waking
    them costs 40-150 us per launch on a VM, more than a whole reduction of 2^18 elements takes: so
    they spin :data:`OPENMP_SPINS` times first (libgomp honours ``GOMP_SPINCOUNT`` under the
    passive policy). libgomp reads both variables when it loads, which numba does at the first
    parallel launch, so ``import vyre`` calls this first; a process that ran a parallel numba
    function before importing vyre keeps its policy. It applies to anything else in the process that
    loads libgomp later too; set ``OMP_WAIT_POLICY`` yourself to choose otherwise."""
    env = os.environ if environ is None else environ
    if env.get(OMP_WAIT_POLICY_ENV):
        return False
    env[OMP_WAIT_POLICY_ENV] = "passive"
    if not env.get(GOMP_SPINCOUNT_ENV):
        env[GOMP_SPINCOUNT_ENV] = str(OPENMP_SPINS)
    return True


CUDASIM_ENV = "NUMBA_ENABLE_CUDASIM"


def cuda_simulator(environ: Mapping[str, str] | None = None) -> bool:
    """``NUMBA_ENABLE_CUDASIM`` is set (numba reads it once, when numba.cuda is first imported)."""
    if environ is None and _RAW_CUDASIM_KEY not in _RAW_ENV:  # type: ignore[operator]
        return False  # the usual case, asked on every op call: no decoding of the environment
    env = os.environ if environ is None else environ
    return env.get(CUDASIM_ENV, "0") not in ("", "0")


# os.environ's own dict (bytes keys on POSIX): a membership test there costs no encoding, which
# matters on the cached dispatch path (vyre.dispatch asks on every call).
_RAW_ENV: object = getattr(os.environ, "_data", os.environ)


def _raw_key(name: str) -> object:
    """``name`` as a key of :data:`_RAW_ENV` (encoded where that dict holds bytes)."""
    return name.encode() if _RAW_ENV is not os.environ and os.name == "posix" else name


_RAW_BACKEND_KEY = _raw_key(BACKEND_ENV)
_RAW_CUDASIM_KEY = _raw_key(CUDASIM_ENV)


def backend_forced() -> bool:
    """Is ``VYRE_BACKEND`` set? (The cheapest question about the environment: no parsing.)"""
    return _RAW_BACKEND_KEY in _RAW_ENV  # type: ignore[operator]


def backend_setting() -> str | None:
    """``read_settings().backend`` without parsing the rest of the environment (which costs tens of
    microseconds; every op called without ``backend=`` asks for the default backend)."""
    if _RAW_BACKEND_KEY not in _RAW_ENV:  # type: ignore[operator]  # backend_forced(), one call less
        return None
    return _backend_name(os.environ.get(BACKEND_ENV))


def _backend_name(value: str | None) -> str | None:
    """``VYRE_BACKEND`` as the driver checks it (lower-cased; unset or empty: None)."""
    return value.strip().lower() if value else None


def cache_root(settings: Settings | None = None) -> Path:
    """Root directory of vyre's disk caches, from ``settings`` or the current environment."""
    return (settings if settings is not None else read_settings()).cache_root()


#: The autotuner's decisions live in ``cache_root()/TUNER_DIR``, one TOML file per adapter.
TUNER_DIR = "tuner"
