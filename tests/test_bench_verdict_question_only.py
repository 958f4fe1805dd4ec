"""The question-only references of the verdict (benchmarks/bench_verdict_question_only.py): the kind
prior, the AUROC within kinds of question, and one scored row with its intervals."""

from __future__ import annotations

import pytest
from script_modules import load_script

from ragcritic_lib.evaluation.stats import auroc, within_group_auroc

bench = load_script("benchmarks/bench_verdict_question_only.py")


def _s(kind: str, dataset: str = "testbed") -> dict:
    return {"dataset": dataset, "type": kind}


def test_the_kind_prior_is_each_kinds_training_error_rate() -> None:
    train = [_s("a"), _s("a"), _s("a"), _s("b"), _s("b"), _s("b", "trivia")]
    wrong = [True, True, False, False, False, True]
    scores = bench.kind_prior(train, wrong, [_s("a"), _s("b"), _s("b", "trivia"), _s("never")])
    assert scores == pytest.approx([2 / 3, 0.0, 1.0, 0.5])  # an unseen kind gets the overall rate


def test_within_kinds_only_pairs_of_the_same_kind_count() -> None:
    # Kind x scores high and kind y low, whatever the answer: within x both wrong answers sit below
    # the right one (0 of 2 pairs), within y the wrong one above both right ones (2 of 2).
    scores = [0.9, 0.8, 0.95, 0.1, 0.05, 0.02]
    wrong = [True, True, False, True, False, False]
    kinds = ["x", "x", "x", "y", "y", "y"]
    assert auroc(scores, wrong) > 0.5
    assert within_group_auroc(scores, wrong, kinds) == pytest.approx((0 + 2 * 1) / 4)  # x: 0/2, y: 2/2
    assert within_group_auroc(scores, wrong, ["x", "x", "y", "y", "z", "z"]) is not None
    assert within_group_auroc([0.5, 0.5], [True, False], ["x", "y"]) is None  # no kind has both classes
    prior = [1.0 if k == "x" else 0.0 for k in kinds]
    assert within_group_auroc(prior, wrong, kinds) == 0.5  # a kind-only score is at chance within kinds


def test_a_row_has_intervals_around_its_values_and_a_paired_difference() -> None:
    n = 60
    wrong = [i % 2 == 0 for i in range(n)]
    kinds = [f"k{i % 3}" for i in range(n)]
    groups = [f"q{i // 2}" for i in range(n)]
    good = [float(w) + 0.01 * (i % 7) for i, w in enumerate(wrong)]
    weak = [0.3 * float(w) + 0.1 * (i % 5) for i, w in enumerate(wrong)]
    row = bench.score_row(good, wrong, kinds, groups, reference=weak, seed=3, n_boot=200)
    assert row["auroc"] == 1.0 and row["within_kind_auroc"] == 1.0
    lo, hi = row["auroc_ci"]
    assert lo <= row["auroc"] <= hi
    vs = row["vs_question_only"]
    assert vs["diff"] == pytest.approx(1.0 - auroc(weak, wrong), abs=1e-4) and vs["ci"][0] <= vs["diff"] <= vs["ci"][1]
    assert "vs_question_only" not in bench.score_row(weak, wrong, kinds, groups, reference=None, seed=3, n_boot=50)


def test_fusion_mixes_standardized_scores_and_reports_its_paired_gain() -> None:
    z = bench.standardizer([1.0, 3.0])
    assert z([1.0, 3.0, 2.0]) == pytest.approx([-1.0, 1.0, 0.0])
    assert bench.standardizer([2.0, 2.0])([2.0, 3.0]) == pytest.approx([0.0, 1.0])  # no spread: a scale of 1
    assert bench.fuse([1.0, -1.0], [0.0, 2.0], 0.25) == pytest.approx([0.75, -0.25])
    with pytest.raises(ValueError, match="2 verdict scores for 1"):
        bench.fuse([1.0, 2.0], [0.0], 0.5)
    # A verdict that misorders one pair and a question score that orders it: the mix gains, and the
    # paired difference says so with an interval around it.
    n = 40
    wrong = [i % 2 == 0 for i in range(n)]
    verdict = [float(w) for w in wrong]
    verdict[0], verdict[1] = 0.0, 1.0
    question = [0.5 * float(w) for w in wrong]
    mixed = bench.fuse(verdict, question, 0.5)
    vs = bench.paired_diff(mixed, verdict, wrong, [f"q{i}" for i in range(n)], seed=1, n_boot=200)
    assert vs["diff"] > 0 and vs["ci"][0] <= vs["diff"] <= vs["ci"][1]
    assert bench.paired_diff(verdict, verdict, wrong, list(range(n)), seed=1, n_boot=50)["diff"] == 0
