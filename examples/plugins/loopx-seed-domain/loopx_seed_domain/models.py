"""The domain models: small, dependency-free analyses of a quarterly revenue series.

``revenue-forecast`` fits a linear trend plus a per-quarter seasonal offset to every quarter but
the latest, forecasts the latest and the next quarter, and scores how far the latest quarter
departs from what the history predicted (a z-score of the residual): the "spike" the seed's
goal investigates. ``revenue-trend`` is the trend alone. Both run on the CSV the user passes
(``quarter,revenue`` columns) or on the sample series shipped with this package.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import statistics
from typing import Any
from importlib import resources

MODELS = ("revenue-forecast", "revenue-trend")


class ModelError(ValueError):
    """Bad input data or an unknown model."""


def load_series(path: str | None = None) -> tuple[list[tuple[str, float]], str, str]:
    """``([(quarter, revenue)], source, sha256)`` from ``path`` or the shipped sample."""
    if path is None:
        text = resources.files("loopx_seed_domain").joinpath("data/quarterly_revenue.csv").read_text()
        source = "sample:quarterly_revenue.csv"
    else:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ModelError(f"cannot read {path}: {exc.strerror}") from None
        source = path
    rows = []
    for i, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        try:
            rows.append((row["quarter"].strip(), float(row["revenue"])))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ModelError(f"{source} line {i}: need 'quarter' and a numeric 'revenue'") from None
    if len(rows) < 6:
        raise ModelError(f"{source}: need at least 6 quarters, found {len(rows)}")
    if any(not math.isfinite(v) for _, v in rows):
        raise ModelError(f"{source}: revenue must be finite numbers")
    return rows, source, hashlib.sha256(text.encode()).hexdigest()


def _fit(values: list[float], season: int) -> tuple[float, float, list[float]]:
    """Least-squares trend ``a + b*t`` and mean seasonal offsets of the residuals."""
    n = len(values)
    ts = range(n)
    t_mean, v_mean = (n - 1) / 2, statistics.fmean(values)
    b = sum((t - t_mean) * (v - v_mean) for t, v in zip(ts, values)) / sum((t - t_mean) ** 2 for t in ts)
    a = v_mean - b * t_mean
    resid = [v - (a + b * t) for t, v in zip(ts, values)]
    offsets = [statistics.fmean(resid[k::season]) if resid[k::season] else 0.0 for k in range(season)]
    return a, b, offsets


def run(model: str, series: list[tuple[str, float]]) -> dict[str, Any]:
    """Run ``model`` on ``series``; returns its figures (JSON-ready)."""
    if model not in MODELS:
        raise ModelError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    season = 4 if model == "revenue-forecast" else 1
    history, latest = series[:-1], series[-1]
    values = [v for _, v in history]
    a, b, offsets = _fit(values, season)
    n = len(values)

    def predict(t: int) -> float:
        return a + b * t + offsets[t % season]

    fitted = [predict(t) for t in range(n)]
    errors = [v - f for v, f in zip(values, fitted)]
    sigma = statistics.pstdev(errors) or 1.0
    expected = predict(n)
    z = (latest[1] - expected) / sigma
    # Refit with the latest quarter included for the forward forecast.
    a2, b2, off2 = _fit(values + [latest[1]], season)
    return {
        "model": model,
        "quarters": len(series),
        "latest_quarter": latest[0],
        "latest_revenue": round(latest[1], 2),
        "expected_revenue": round(expected, 2),
        "residual": round(latest[1] - expected, 2),
        "residual_z": round(z, 3),
        "spike": abs(z) >= 3.0,
        "trend_per_quarter": round(b, 2),
        "mae_in_sample": round(statistics.fmean(abs(e) for e in errors), 2),
        "next_quarter_forecast": round(a2 + b2 * (n + 1) + off2[(n + 1) % season], 2),
    }
