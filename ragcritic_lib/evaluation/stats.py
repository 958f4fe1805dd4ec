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
import random
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


def paired_permutation_p(
    a: Sequence[float], b: Sequence[float], n_perm: int = 10000, seed: int = 0
) -> float:
    """Two-sided paired permutation (sign-flip) p-value of mean(a) - mean(b).

    Under the null hypothesis that the two methods are exchangeable on each question, the sign of
    each per-question difference is a fair coin. The p-value is the share of sign assignments
    whose mean difference is at least as far from zero as the observed one (with a tolerance of
    1e-12 for float ties). When ``2 ** m <= n_perm`` (m = number of non-zero differences; zeros
    flip to themselves) every assignment is enumerated, so small inputs give exact p-values;
    otherwise ``n_perm`` random assignments are drawn and the observed one is counted once more,
    so the p-value is never 0.

    Args:
        a, b: per-question scores of two methods on the same questions.
        n_perm: random sign assignments when enumeration is too large.
        seed: seed of numpy's default generator.

    Returns:
        The p-value in (0, 1]; NaN for empty inputs; 1.0 when every difference is zero.
    """
    if n_perm < 1:
        raise ValueError(f"n_perm must be >= 1, got {n_perm}")
    xa, xb = _as_array(a, "a"), _as_array(b, "b")
    if xa.size != xb.size:
        raise ValueError(f"paired inputs differ in length: {xa.size} vs {xb.size}")
    if xa.size == 0:
        return float("nan")
    d = xa - xb
    d = d[d != 0]
    m = int(d.size)
    if m == 0:
        return 1.0
    observed = abs(float(d.sum()))
    tol = 1e-12 * max(1.0, observed)
    if 2 ** m <= n_perm:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m)))
        sums = np.abs(signs @ d)
        return float(np.mean(sums >= observed - tol))
    rng = np.random.default_rng(seed)
    hits, done = 0, 0
    while done < n_perm:
        k = min(_CHUNK * 16, n_perm - done)
        signs = rng.choice((-1.0, 1.0), size=(k, m))
        hits += int(np.sum(np.abs(signs @ d) >= observed - tol))
        done += k
    return (hits + 1) / (n_perm + 1)


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson score interval of a proportion ``k / n`` (95% by default); None when ``n`` is 0.

    Unlike the normal approximation it stays inside [0, 1] and is not empty at ``k = n``: 300
    agreements out of 300 give about (0.987, 1.0).
    """
    if n <= 0:
        return None
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, n], got k={k}, n={n}")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def min_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable mean difference of a paired design (normal approximation).

    ``MDE = (z_{1 - alpha/2} + z_{power}) * sd / sqrt(n)``, where ``sd`` is the standard deviation
    of the per-question differences between the two methods. With alpha 0.05 two-sided and power
    0.8 the factor is 1.95996 + 0.84162 = 2.80158.

    Args:
        sd: standard deviation of per-question differences (>= 0).
        n: number of questions (>= 1).
        alpha: two-sided significance level.
        power: probability of detecting a true effect of that size.

    Returns:
        The smallest true mean difference detected with the given power.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not sd >= 0 or not np.isfinite(sd):
        raise ValueError(f"sd must be a finite number >= 0, got {sd}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    return (_normal_quantile(1 - alpha / 2) + _normal_quantile(power)) * sd / float(np.sqrt(n))


def paired_mde(
    a: Sequence[float] | None = None,
    b: Sequence[float] | None = None,
    *,
    n: int | None = None,
    pilot_sd: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """Minimum detectable F1 effect at ``n`` questions, from paired scores or a pilot SD.

    With ``a`` and ``b`` (per-question scores of the same questions) the SD of their differences
    is used (sample SD, ddof=1); ``n`` defaults to their length. Without them, ``pilot_sd`` is
    the per-question F1 SD of one method on a pilot; a paired difference of two methods whose
    scores are uncorrelated then has SD ``sqrt(2) * pilot_sd`` (a conservative bound, since
    paired scores are usually positively correlated). See :func:`min_detectable_effect`.
    """
    if a is not None or b is not None:
        if a is None or b is None:
            raise ValueError("paired_mde needs both a and b, or neither")
        xa, xb = _as_array(a, "a"), _as_array(b, "b")
        if xa.size != xb.size:
            raise ValueError(f"paired inputs differ in length: {xa.size} vs {xb.size}")
        if xa.size < 2:
            raise ValueError("paired_mde needs at least 2 paired questions")
        sd = float(np.std(xa - xb, ddof=1))
        return min_detectable_effect(sd, int(n or xa.size), alpha, power)
    if pilot_sd is None or n is None:
        raise ValueError("paired_mde needs paired scores, or pilot_sd and n")
    return min_detectable_effect(float(np.sqrt(2.0)) * float(pilot_sd), int(n), alpha, power)


def paired_comparison(
    a: Sequence[float], b: Sequence[float], n_boot: int = 1000, n_perm: int = 10000,
    alpha: float = 0.05, seed: int = 0,
) -> dict[str, Any]:
    """mean(a) - mean(b) with its paired bootstrap CI, permutation p-value and MDE at this n.

    Returns:
        {"delta", "ci_low", "ci_high", "p_value", "mde", "n"}; ``p_value`` is the sign-flip
        permutation p-value (not the bootstrap one); ``mde`` is NaN below 2 questions.
    """
    boot = paired_bootstrap_diff(a, b, n_boot=n_boot, alpha=alpha, seed=seed)
    n = boot["n"]
    return {
        "delta": boot["diff"], "ci_low": boot["low"], "ci_high": boot["high"],
        "p_value": paired_permutation_p(a, b, n_perm=n_perm, seed=seed),
        "mde": paired_mde(a, b, alpha=alpha) if n >= 2 else float("nan"), "n": n,
    }


# ------------------------------------------------------------------------------- AUROC
def auroc(scores: Sequence[float], is_error: Sequence[bool]) -> float | None:
    """Probability that a random wrong answer scores above a random right one (ties count half).

    Raises:
        ValueError: a score is NaN (it has no place in the ranking; an infinite score has).
    """
    scores = list(scores)
    if any(s != s for s in scores):
        raise ValueError(f"auroc: {sum(s != s for s in scores)} of {len(scores)} scores are NaN")
    pos = [s for s, y in zip(scores, is_error) if y]
    neg = [s for s, y in zip(scores, is_error) if not y]
    if not pos or not neg:
        return None
    ranked = sorted((s, y) for s, y in zip(scores, is_error))
    # rank-sum with ties averaged
    ranks: dict[int, float] = {}
    i = 0
    while i < len(ranked):
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    r_pos = sum(ranks[k] for k, (_, y) in enumerate(ranked) if y)
    return (r_pos - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def within_group_auroc(scores: Sequence[float], is_error: Sequence[bool], groups: Sequence[Any]) -> float | None:
    """The AUROC over (wrong, right) pairs of samples in the same group only (e.g. answers to
    questions of one kind): the pair-weighted mean of each group's :func:`auroc`, so that groups
    whose error rates differ cannot order a pair. None when no group holds both classes."""
    if not len(scores) == len(is_error) == len(groups):
        raise ValueError(f"{len(scores)} scores, {len(is_error)} labels and {len(groups)} groups")
    members: dict[Any, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    total = weight = 0.0
    for idx in members.values():
        ys = [bool(is_error[i]) for i in idx]
        pairs = sum(ys) * (len(ys) - sum(ys))
        if pairs:
            total += pairs * auroc([scores[i] for i in idx], ys)
            weight += pairs
    return total / weight if weight else None


def cluster_resamples(groups: Sequence[Any] | None, n: int, n_boot: int, seed: int):
    """``n_boot`` bootstrap resamples of the indices ``0..n-1``, as lists: of single samples when
    ``groups`` is None, else of whole groups (every sample of a drawn group, e.g. every answer to a
    drawn question), so that samples sharing a group are not treated as independent."""
    rng = random.Random(seed)
    if groups is None:
        for _ in range(n_boot):
            yield [rng.randrange(n) for _ in range(n)]
        return
    if len(groups) != n:
        raise ValueError(f"groups has {len(groups)} entries for {n} samples")
    members: dict[Any, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    clusters = list(members.values())
    for _ in range(n_boot):
        yield [i for _ in range(len(clusters)) for i in clusters[rng.randrange(len(clusters))]]


def percentile_interval(values: Sequence[float], alpha: float = 0.05) -> tuple[float | None, float | None]:
    """The percentile interval of a bootstrap distribution by the rule every interval here uses
    (NumPy's ``inverted_cdf`` quantiles); (None, None) for an empty one."""
    if not len(values):
        return None, None
    return _interval(np.asarray(values, dtype=float), alpha)


def bootstrap_auroc_ci(scores: Sequence[float], is_error: Sequence[bool], *, seed: int, n_boot: int = 2000,
                       alpha: float = 0.05, groups: Sequence[Any] | None = None) -> tuple[float | None, float | None]:
    """Percentile bootstrap CI of :func:`auroc`, resampling samples, or whole groups of them
    (``groups``: one key per sample, e.g. its question) as :func:`cluster_resamples` does."""
    _check(n_boot, alpha)
    vals = []
    for idx in cluster_resamples(groups, len(scores), n_boot, seed):
        v = auroc([scores[i] for i in idx], [is_error[i] for i in idx])
        if v is not None:
            vals.append(v)
    lo, hi = percentile_interval(vals, alpha)
    return (None, None) if lo is None else (round(lo, 4), round(hi, 4))


def bootstrap_within_group_auroc_ci(scores: Sequence[float], is_error: Sequence[bool], within: Sequence[Any], *,
                                    seed: int, n_boot: int = 2000, alpha: float = 0.05,
                                    groups: Sequence[Any] | None = None) -> tuple[float | None, float | None]:
    """Percentile bootstrap CI of :func:`within_group_auroc` (pairs inside each ``within`` group,
    e.g. a kind of question), resampling samples or whole ``groups`` as :func:`bootstrap_auroc_ci`."""
    _check(n_boot, alpha)
    if not len(scores) == len(is_error) == len(within):
        raise ValueError(f"{len(scores)} scores, {len(is_error)} labels and {len(within)} groups")
    vals = []
    for idx in cluster_resamples(groups, len(scores), n_boot, seed):
        v = within_group_auroc([scores[i] for i in idx], [is_error[i] for i in idx], [within[i] for i in idx])
        if v is not None:
            vals.append(v)
    lo, hi = percentile_interval(vals, alpha)
    return (None, None) if lo is None else (round(lo, 4), round(hi, 4))


def paired_auroc_diff(a: Sequence[float], b: Sequence[float], is_error: Sequence[bool], *, seed: int,
                      n_boot: int = 2000, alpha: float = 0.05,
                      groups: Sequence[Any] | None = None) -> dict[str, float | None]:
    """AUROC(a) - AUROC(b), two scores of the same samples, with its paired percentile bootstrap
    interval: each resample draws samples (or whole ``groups``, as :func:`cluster_resamples`) and
    scores both on them, so what the two share cancels. ``{"diff", "ci_low", "ci_high"}``, None
    where either AUROC is undefined (one class only)."""
    _check(n_boot, alpha)
    if not len(a) == len(b) == len(is_error):
        raise ValueError(f"paired scores differ in length: {len(a)}, {len(b)}, {len(is_error)} labels")
    whole_a, whole_b = auroc(a, is_error), auroc(b, is_error)
    if whole_a is None or whole_b is None:
        return {"diff": None, "ci_low": None, "ci_high": None}
    diffs = []
    for idx in cluster_resamples(groups, len(a), n_boot, seed):
        y = [is_error[i] for i in idx]
        x, z = auroc([a[i] for i in idx], y), auroc([b[i] for i in idx], y)
        if x is not None and z is not None:
            diffs.append(x - z)
    lo, hi = percentile_interval(diffs, alpha)
    return {"diff": round(whole_a - whole_b, 4), "ci_low": None if lo is None else round(lo, 4),
            "ci_high": None if hi is None else round(hi, 4)}
