"""Launch tuning, one package above the driver.

The driver offers a launch-policy hook (:func:`vyre.driver.launch_policy.set_launch_policy`) and
imports nothing of this package; :func:`install` registers :func:`autotune.launch_for` there
(``import vyre`` does so lazily, on the first flat kernel dispatched).

* :mod:`.cache`: decision keys and the per-adapter TOML cache.
* :mod:`.policy`: the seed's natural-gradient policy, the latency model and its Fisher matrix.
* :mod:`.timers`: backend timers (``perf_counter``, CUDA events, safe and budgeted wrappers).
* :mod:`.tuner`: :class:`~.tuner.Tuner` and the search strategies.
* :mod:`.autotune`: the dispatch's launch policy, :func:`~.autotune.tune` for the CLI and benches.
* :mod:`.search_space`: launch candidates, adapter fingerprints, decision keys.
* :mod:`.harness`: the scratch-copy bench that times candidates.
"""

from __future__ import annotations

from ..driver.launch_policy import set_launch_policy
from . import autotune
from .autotune import launch_for, tune

__all__ = ["autotune", "install", "launch_for", "tune"]


def install() -> None:
    """Make the autotuner the dispatch's launch policy."""
    set_launch_policy(launch_for)
