"""Thread-safe call counters per self-substrate module (``bump`` / ``snapshot_counters``)."""

from __future__ import annotations

import threading

NATURAL_GRADIENT_AUTOTUNER_CALLS = "natural_gradient_autotuner_calls"
SHEAF_HETEROPHILIC_DISPATCH_CALLS = "sheaf_heterophilic_dispatch_calls"
PIPELINE_ANALYSIS_CALLS = "pipeline_analysis_calls"

_lock = threading.Lock()
_counters: dict[str, int] = {
    NATURAL_GRADIENT_AUTOTUNER_CALLS: 0,
    SHEAF_HETEROPHILIC_DISPATCH_CALLS: 0,
    PIPELINE_ANALYSIS_CALLS: 0,
}


def bump(counter: str, by: int = 1) -> int:
    """Add ``by`` to ``counter`` (created at 0 on first use); return the new value."""
    with _lock:
        value = _counters.get(counter, 0) + by
        _counters[counter] = value
        return value


def snapshot_counters() -> dict[str, int]:
    """A consistent copy of every counter."""
    with _lock:
        return dict(_counters)


def reset_counters() -> None:
    """Zero every counter (tests)."""
    with _lock:
        for k in _counters:
            _counters[k] = 0
