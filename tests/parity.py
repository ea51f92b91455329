"""Comparing backend results under docs/semantics.md's rules."""

from __future__ import annotations

import numpy as np


def differences(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], exact: bool) -> list[str]:
    """Integer/bool buffers must match bit for bit; float buffers exactly (NaNs equal, ±0 equal) when
    ``exact``, else within a tolerance scaled to the magnitude of the values."""
    out = []
    for k, r in ref.items():
        g = np.asarray(got[k])
        if r.dtype.kind in "iub":
            bad = np.nonzero(g != r)[0]
        else:
            g64, r64 = g.astype(np.float64), r.astype(np.float64)
            nan = np.isnan(g64) & np.isnan(r64)
            if exact:
                ok = (g64 == r64) | nan
            else:
                rtol, atol = (1e-4, 1e-5) if r.dtype == np.float32 else (1e-9, 1e-12)
                with np.errstate(all="ignore"):
                    ok = np.isclose(g64, r64, rtol=rtol, atol=atol) | nan | (g64 == r64)
            bad = np.nonzero(~ok)[0]
        out += [f"{k}[{i}]: got {g[i]!r}, reference {r[i]!r}" for i in bad[:5]]
    return out
