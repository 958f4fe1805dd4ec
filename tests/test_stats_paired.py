"""Paired permutation p-values and minimum detectable effects (ragcritic_lib.evaluation.stats)."""

from __future__ import annotations

import math

import pytest

from ragcritic_lib.evaluation.stats import (
    min_detectable_effect, paired_comparison, paired_mde, paired_permutation_p,
)


def test_permutation_exact_all_positive():
    # Three +1 differences: of the 8 sign assignments only all-plus and all-minus reach |sum| 3.
    assert paired_permutation_p([1, 1, 1], [0, 0, 0]) == 0.25


def test_permutation_exact_ignores_zero_differences():
    # Non-zero differences 1 and 0.5: sums +-1.5, +-0.5; two of four reach 1.5.
    assert paired_permutation_p([1, 0.5, 0, 0.3], [0, 0, 0, 0.3]) == 0.5


def test_permutation_identical_and_empty():
    assert paired_permutation_p([0.2, 0.4], [0.2, 0.4]) == 1.0
    assert math.isnan(paired_permutation_p([], []))


def test_permutation_sampled_counts_observed_once():
    # 2**20 assignments > 1000: sampled; only the two constant-sign ones reach |sum| 20, and a
    # draw of 1000 seeded assignments hits neither, so p = 1 / 1001.
    p = paired_permutation_p([1.0] * 20, [0.0] * 20, n_perm=1000, seed=0)
    assert p == 1 / 1001
    assert p == paired_permutation_p([1.0] * 20, [0.0] * 20, n_perm=1000, seed=0)


def test_permutation_symmetric_in_direction():
    a, b = [0.9, 0.1, 0.5, 0.7, 0.0], [0.2, 0.3, 0.5, 0.1, 0.4]
    assert paired_permutation_p(a, b) == paired_permutation_p(b, a)


def test_permutation_bad_inputs():
    with pytest.raises(ValueError, match="differ in length"):
        paired_permutation_p([1, 2], [1])
    with pytest.raises(ValueError, match="n_perm"):
        paired_permutation_p([1], [0], n_perm=0)


def test_mde_formula():
    # (z_0.975 + z_0.8) = 1.959964 + 0.841621 = 2.801585; sd 1 at n 100 -> 0.2801585.
    assert min_detectable_effect(1.0, 100) == pytest.approx(0.2801585, abs=1e-6)
    assert min_detectable_effect(0.0, 10) == 0.0
    with pytest.raises(ValueError, match="n must be"):
        min_detectable_effect(1.0, 0)
    with pytest.raises(ValueError, match="sd must be"):
        min_detectable_effect(-1.0, 5)


def test_paired_mde_from_scores_and_pilot():
    # Differences 1, 0, 1, 0: sample SD sqrt(1/3); 2.801585 * 0.577350 / 2 = 0.808748.
    assert paired_mde([1, 0, 1, 0], [0, 0, 0, 0]) == pytest.approx(0.808748, abs=1e-6)
    # Pilot SD 0.3 at n 140: 2.801585 * sqrt(2) * 0.3 / sqrt(140) = 0.100457.
    assert paired_mde(pilot_sd=0.3, n=140) == pytest.approx(0.100457, abs=1e-6)
    with pytest.raises(ValueError, match="both a and b"):
        paired_mde([1, 0])
    with pytest.raises(ValueError, match="pilot_sd and n"):
        paired_mde(pilot_sd=0.3)


def test_paired_comparison_row():
    row = paired_comparison([1, 1, 1], [0, 0, 0])
    # Constant differences: the bootstrap interval collapses on 1, the sign-flip p is 2/8.
    assert (row["delta"], row["ci_low"], row["ci_high"], row["p_value"], row["n"]) == (1.0, 1.0, 1.0, 0.25, 3)
    assert row["mde"] == 0.0
