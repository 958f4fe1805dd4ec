"""The planner-calibration benchmark (benchmarks/bench_planner_calibration.py): a batch prior per
program, the calibrated pick among a critique's candidates, shares, and the dev F1 it reads."""

from __future__ import annotations

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_planner_calibration.py")


def test_batch_prior_is_each_programs_mean_and_refuses_ragged_rows():
    assert bench.batch_prior([[-1.0, -4.0], [-3.0, -2.0]]) == [-2.0, -3.0]
    with pytest.raises(ValueError, match="no scores"):
        bench.batch_prior([])
    with pytest.raises(ValueError, match="every program"):
        bench.batch_prior([[-1.0, -2.0], [-1.0]])


def test_calibrated_pick_discounts_a_program_favoured_everywhere():
    programs = ["A", "B", "C"]
    prior = [-1.0, -5.0, -9.0]  # A is likely on every prompt
    # Raw scores prefer A; minus the prior B stands out on this prompt.
    assert bench.calibrated_pick(["A", "B"], programs, [-2.0, -3.0, -9.0], prior) == 1
    assert bench.calibrated_pick(["B", "A"], programs, [-1.0, -5.0, -9.0], prior) == 0  # a tie: the earlier
    with pytest.raises(KeyError, match="not among the table"):
        bench.calibrated_pick(["Z"], programs, [0.0, 0.0, 0.0], prior)


def test_shares_count_the_top_program():
    assert bench.shares(["A", "A", "B", "A"]) == {"plans": 4, "distinct": 2, "top_share": 0.75}
    assert bench.shares([]) == {"plans": 0, "distinct": 0, "top_share": 0.0}


def test_dev_f1_acts_above_the_threshold_and_honours_verification():
    recs = [
        {"golden_answers": ["Baikal"], "predictions": ["Caspian"], "final_prediction": "Baikal",
         "steps": [{"critic": {"margin": 3.0}, "verification": {"kept": False}}]},
        {"golden_answers": ["Paris"], "predictions": ["Paris"], "final_prediction": "Lyon",
         "steps": [{"critic": {"margin": 0.5}}]},
    ]
    assert bench.dev_f1(recs, threshold=float("-inf"), verified=False) == [1.0, 0.0]
    assert bench.dev_f1(recs, threshold=1.0, verified=False) == [1.0, 1.0]
    assert bench.dev_f1(recs, threshold=1.0, verified=True) == [0.0, 1.0]  # the verifier refused the first
