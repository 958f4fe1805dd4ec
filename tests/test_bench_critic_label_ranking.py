"""benchmarks/bench_critic_label_ranking.py: how often a label source names an unsupported answer
(the ranking itself is tested with ragcritic_lib.critic.label_ranking, tests/test_label_ranking.py)."""

from __future__ import annotations

from script_modules import load_script

bench = load_script("benchmarks/bench_critic_label_ranking.py")


def test_naming_an_unsupported_answer_is_scored_against_the_gold():
    labels = frozenset({"Factual Inaccuracies"})
    named = [{"Factual Inaccuracies"}, {"Factual Inaccuracies", "X"}, {"X"}, set()]
    golds = [{"Factual Inaccuracies"}, {"X"}, {"Factual Inaccuracies"}, set()]
    assert bench.unsupported_naming(named, golds, labels) == {
        "named": 2, "gold": 2, "n": 4, "precision": 0.5, "recall": 0.5}
    assert bench.unsupported_naming([set()], [set()], labels)["precision"] is None
