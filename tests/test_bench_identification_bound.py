"""The identification ceiling of benchmarks/bench_identification_bound.py."""

from __future__ import annotations

import math

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_identification_bound.py")


def test_balanced_accuracy_is_the_mean_of_the_two_classes_accuracies():
    assert bench.balanced_accuracy([True, False, False, False], [True, True, False, False]) == pytest.approx(0.75)
    assert bench.balanced_accuracy([True, True], [True, True]) is None  # no right answer


def test_the_best_threshold_is_the_best_over_every_cut_and_the_lowest_that_reaches_it():
    scores, wrong = [0.9, 0.8, 0.7, 0.3, 0.2, 0.6], [True, True, False, False, False, True]
    ba, t = bench.best_threshold(scores, wrong)
    # ">= 0.8" flags 2 of 3 wrong answers and no right one, ">= 0.6" all 3 wrong and 1 of 3 right: both
    # (2/3 + 1) / 2, and the lower threshold is the one kept
    assert ba == pytest.approx((2 / 3 + 1) / 2) and t == 0.6
    assert bench.best_threshold([0.1, 0.9], [False, True]) == (1.0, 0.9)
    # a score that ranks every right answer above the wrong ones: nothing beats flagging none or all
    assert bench.best_threshold([0.1, 0.9], [True, False])[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="2 scores but 1 labels"):
        bench.best_threshold([0.1, 0.2], [True])


def test_the_binormal_references_are_inverse_and_hit_known_points():
    assert bench.binormal_identification(0.5) == pytest.approx(0.5)
    # AUROC = Phi(d'/sqrt2), best balanced accuracy = Phi(d'/2): d' = 2 Phi^-1(0.75) gives AUROC 0.830
    assert bench.binormal_auroc(0.75) == pytest.approx(0.8299, abs=1e-4)
    for area in (0.6, 0.776, 0.9):
        assert bench.binormal_auroc(bench.binormal_identification(area)) == pytest.approx(area)


def test_a_critic_row_puts_the_shipped_verdicts_beside_the_ceiling():
    scores = [0.9, 0.8, 0.7, 0.3, 0.2, 0.6, 0.1, 0.4]
    wrong = [True, True, False, False, False, True, False, True]
    verdicts = [s >= 0.5 for s in scores]
    row = bench.critic_row(scores, wrong, verdicts, list(range(8)), target=0.75, seed=0, n_boot=50)
    assert row["identification"] == pytest.approx(bench.balanced_accuracy(verdicts, wrong), abs=1e-4)
    assert row["oracle_identification"] >= row["identification"]
    lo, hi = row["oracle_identification_ci"]
    assert 0 <= lo <= hi <= 1 and row["n"] == 8 and row["n_error"] == 4
    assert not math.isinf(row["oracle_threshold"])
