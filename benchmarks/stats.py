"""Sample statistics and the time format of the benchmark tables."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def median(samples: Sequence[float]) -> float:
    """The median of the samples."""
    return statistics.median(samples)


def _top_quantile(samples: Sequence[float], n: int) -> float:
    """The last of the ``n``-quantiles (inclusive method; the single sample when there is one)."""
    if len(samples) < 2:
        return samples[0]
    return statistics.quantiles(samples, n=n, method="inclusive")[-1]


def p90(samples: Sequence[float]) -> float:
    """The 90th percentile (inclusive method; the single sample when there is one)."""
    return _top_quantile(samples, 10)


def p95(samples: Sequence[float]) -> float:
    """The 95th percentile (inclusive method; the single sample when there is one)."""
    return _top_quantile(samples, 20)


def ms(seconds: float) -> str:
    """Seconds as milliseconds for the tables."""
    return f"{seconds * 1000:,.1f} ms"
