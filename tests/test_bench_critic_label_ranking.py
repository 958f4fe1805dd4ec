"""The label ranking of benchmarks/bench_critic_label_ranking.py: marginals over candidate label
lists, the top k, and the paired comparison with the prior."""

from __future__ import annotations

import math

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_critic_label_ranking.py")


def test_a_label_s_probability_is_the_normalized_mass_of_the_lists_that_hold_it():
    lists = [("A",), ("A", "B"), ("C",)]
    m = bench.label_marginals([math.log(2), math.log(1), math.log(1)], lists)
    assert m == pytest.approx({"A": 0.75, "B": 0.25, "C": 0.25})
    # the same with log-probabilities far below 0 (only their differences matter)
    assert bench.label_marginals([-900 + math.log(2), -900.0, -900.0], lists) == pytest.approx(m)


def test_the_top_k_breaks_ties_in_the_given_order():
    m = {"A": 0.4, "B": 0.4, "C": 0.2}
    assert bench.top_k(m, 1, ["B", "A", "C"]) == {"B"}
    assert bench.top_k(m, 2, ["C", "A", "B"]) == {"A", "B"}
    assert bench.top_k(m, 5, ["A", "B", "C"]) == {"A", "B", "C"}


def test_the_paired_comparison_scores_both_and_resamples_questions():
    golds = [{"A"}, {"B"}, {"A"}, {"B"}]
    critic = [{"A"}, {"B"}, {"A"}, {"B"}]
    prior = [{"A"}] * 4
    r = bench.paired(critic, prior, golds, [0, 0, 1, 1], seed=1, n_boot=200)
    assert (r["critic"], r["prior"]) == (1.0, 0.5) and r["diff"] == 0.5
    assert r["ci_low"] == r["ci_high"] == 0.5  # each question holds one A and one B answer
    assert bench.micro_f1([(0, 1, 1)]) == 0.0
    with pytest.raises(ValueError, match="groups has 2 entries for 4 samples"):
        bench.paired(critic, prior, golds, [0, 1], seed=1, n_boot=10)
