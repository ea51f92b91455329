"""Shared pytest setup: Hypothesis profiles.

``ci`` (the default) keeps the whole suite fast on 2 cores; ``deep`` runs many more examples for
local bug hunting. Pick one with ``VYRE_HYPOTHESIS_PROFILE=deep pytest``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Program generation draws a lot of data per example; that is expected, not a health problem.
_SLOW_GENERATION = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("ci", max_examples=20, deadline=None, suppress_health_check=_SLOW_GENERATION,
                          print_blob=True)
settings.register_profile("deep", max_examples=1000, deadline=None, suppress_health_check=_SLOW_GENERATION,
                          print_blob=True)
settings.load_profile(os.environ.get("VYRE_HYPOTHESIS_PROFILE", "ci"))
