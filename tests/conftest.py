"""Shared pytest setup: Hypothesis profiles, and an environment of the suite's own.

``ci`` (the default) keeps the whole suite fast on 2 cores; ``deep`` runs many more examples for
local bug hunting. Pick one with ``VYRE_HYPOTHESIS_PROFILE=deep pytest``.

The suite never reads or writes the user's caches: kernels and tuner decisions go to
``.vyre-test-cache/`` in the checkout (kept between local runs, fresh on CI; the child processes of
the simulator and PTX tests inherit it), and the autotuner is off unless a test turns it on, so
results and timings do not depend on what an earlier run decided.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("VYRE_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".vyre-test-cache"))
os.environ.setdefault("VYRE_AUTOTUNER", "off")

from hypothesis import HealthCheck, settings

# Program generation draws a lot of data per example; that is expected, not a health problem.
_SLOW_GENERATION = [HealthCheck.too_slow, HealthCheck.data_too_large]

# ``ci`` is derandomized: every run draws the same examples, so a red CI always means a change, never
# a new random draw (``deep`` explores; a failure there is reproduced with the printed blob).
settings.register_profile("ci", max_examples=20, deadline=None, suppress_health_check=_SLOW_GENERATION,
                          print_blob=True, derandomize=True, database=None)
settings.register_profile("deep", max_examples=1000, deadline=None, suppress_health_check=_SLOW_GENERATION,
                          print_blob=True)
settings.load_profile(os.environ.get("VYRE_HYPOTHESIS_PROFILE", "ci"))
