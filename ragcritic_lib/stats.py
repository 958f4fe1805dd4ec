"""Bootstrap confidence intervals over questions.

Small differences between RAG methods on a few hundred questions are easy to over-read, so every
comparison table reports a percentile bootstrap interval. Resampling is over questions (the unit
that varies between test sets), seeded, and paired when two methods answered the same questions.

When the number of distinct ordered resamples ``n ** n`` is not larger than ``n_boot`` (n <= 4
with the default 1000), the bootstrap distribution is enumerated exactly instead of sampled, so
tiny inputs give exact, seed-independent intervals.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

# Rows of the index matrix built per chunk; bounds memory at roughly 8 bytes * chunk * n.
_CHUNK = 256


def _as_array(values: Sequence[float], name: str) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a flat sequence of numbers")
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return arr


def _resample_indices(n: int, n_boot: int, seed: int):
    """Yield (index_matrix, weight) chunks covering the bootstrap distribution."""
    if n ** n <= n_boot:
        # Exact: every ordered resample once, equally likely.
        all_idx = np.array(list(itertools.product(range(n), repeat=n)), dtype=np.int64)
        yield all_idx
        return
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_boot:
        m = min(_CHUNK, n_boot - done)
        yield rng.integers(0, n, size=(m, n))
        done += m


def _boot_means(arrays: Sequence[np.ndarray], n_boot: int, seed: int) -> list[np.ndarray]:
    n = arrays[0].size
    out: list[list[np.ndarray]] = [[] for _ in arrays]
    for idx in _resample_indices(n, n_boot, seed):
        for k, arr in enumerate(arrays):
            out[k].append(arr[idx].mean(axis=1))
    return [np.concatenate(parts) for parts in out]


def _interval(dist: np.ndarray, alpha: float) -> tuple[float, float]:
    # inverted_cdf returns attained values of the bootstrap distribution (no interpolation).
    low = float(np.quantile(dist, alpha / 2, method="inverted_cdf"))
    high = float(np.quantile(dist, 1 - alpha / 2, method="inverted_cdf"))
    return low, high


def _check(n_boot: int, alpha: float) -> None:
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def bootstrap_ci(
    values: Sequence[float], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> dict[str, Any]:
    """Percentile bootstrap interval of the mean.

    Args:
        values: one number per question (e.g. per-question F1).
        n_boot: number of resamples (ignored when the exact distribution is enumerated).
        alpha: 1 - confidence level.
        seed: seed of numpy's default generator.

    Returns:
        {"mean", "low", "high", "n", "exact"}; an empty input gives NaNs and n = 0.
    """
    _check(n_boot, alpha)
    arr = _as_array(values, "values")
    n = int(arr.size)
    if n == 0:
        return {"mean": float("nan"), "low": float("nan"), "high": float("nan"), "n": 0, "exact": True}
    (dist,) = _boot_means([arr], n_boot, seed)
    low, high = _interval(dist, alpha)
    return {"mean": float(arr.mean()), "low": low, "high": high, "n": n, "exact": n ** n <= n_boot}


def paired_bootstrap_diff(
    a: Sequence[float],
    b: Sequence[float],
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, Any]:
    """Paired bootstrap interval of mean(a) - mean(b) over the same questions.

    ``a[i]`` and ``b[i]`` must score the same question; each resample draws questions, keeping
    the pairs together, which is what makes small but consistent differences visible.

    Returns:
        {"diff", "low", "high", "n", "p_value", "exact"}; p_value is the two-sided share of
        resampled differences on the other side of zero (capped at 1).
    """
    _check(n_boot, alpha)
    xa, xb = _as_array(a, "a"), _as_array(b, "b")
    if xa.size != xb.size:
        raise ValueError(f"paired inputs differ in length: {xa.size} vs {xb.size}")
    n = int(xa.size)
    if n == 0:
        nan = float("nan")
        return {"diff": nan, "low": nan, "high": nan, "n": 0, "p_value": nan, "exact": True}
    (dist,) = _boot_means([xa - xb], n_boot, seed)
    low, high = _interval(dist, alpha)
    p = 2.0 * min(float(np.mean(dist <= 0)), float(np.mean(dist >= 0)))
    return {
        "diff": float(xa.mean() - xb.mean()),
        "low": low,
        "high": high,
        "n": n,
        "p_value": min(1.0, p),
        "exact": n ** n <= n_boot,
    }
