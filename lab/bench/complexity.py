"""How latency scales with input size: fit latency ~ c * n^k on a log-log plot.

An exponent near 1 means cost grows in step with the text (a streaming vocoder should);
near 2 points at attention or another all-pairs step that will dominate long inputs.

A line through two or three points fits them almost perfectly whatever the law behind them,
so an R^2 near 1 says nothing there; the fit refuses fewer than `MIN_POINTS` distinct sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

MIN_POINTS = 4
"""Distinct sizes needed before an exponent (and its R^2) means anything."""


class PowerLawFit(NamedTuple):
    """Exponent `k`, scale `c`, and the R^2 of the straight-line fit in log-log space."""

    k: float
    c: float
    r2: float

    def predict(self, n: float | np.ndarray) -> float | np.ndarray:
        return self.c * np.asarray(n, dtype=float) ** self.k

    def describe(self) -> str:
        name = scaling_name(self.k)
        return f"latency ~ {self.c:.3g} * n^{self.k:.2f} ({name}, R^2 {self.r2:.3f})"


def scaling_name(k: float) -> str:
    """A plain-words name for an exponent, rounded to the nearest familiar order."""
    if k < 0.5:
        return "about constant"
    if k < 1.5:
        return "about linear"
    if k < 2.5:
        return "about quadratic"
    return "worse than quadratic"


def fit_power_law(n: Sequence[float], latency: Sequence[float]) -> PowerLawFit:
    """Least squares of log(latency) = log(c) + k log(n)."""
    x = np.asarray(n, dtype=float)
    y = np.asarray(latency, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(
            f"sizes and latencies must be equal-length lists, got {x.shape} and {y.shape}"
        )
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))) or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("sizes and latencies must be finite and > 0 to fit on a log scale")
    distinct = len(np.unique(x))
    if distinct < MIN_POINTS:
        raise ValueError(f"a scaling fit needs at least {MIN_POINTS} distinct sizes, got "
                         f"{distinct}; fewer points fit any line")
    lx, ly = np.log(x), np.log(y)
    k, log_c = np.polyfit(lx, ly, 1)
    residual = ly - (log_c + k * lx)
    spread = np.sum((ly - ly.mean()) ** 2)
    r2 = 1.0 - np.sum(residual**2) / spread if spread > 0 else 1.0
    return PowerLawFit(k=float(k), c=float(np.exp(log_c)), r2=float(r2))
