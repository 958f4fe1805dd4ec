"""A critic's labels ranked by its own probability (ragcritic_lib.critic.label_ranking): candidate
lists, the prefills they continue, marginals, the top k, and the paired comparison with the prior."""

from __future__ import annotations

import json
import math

import pytest

from ragcritic_lib.critic.critics import ERROR_PREFILL
from ragcritic_lib.critic.label_ranking import (
    candidate_lists,
    label_marginals,
    list_options,
    micro_f1,
    most_probable,
    paired_f1,
    tier_prefill,
    top_k,
)


def test_a_label_s_probability_is_the_normalized_mass_of_the_lists_that_hold_it():
    lists = [("A",), ("A", "B"), ("C",)]
    m = label_marginals([math.log(2), math.log(1), math.log(1)], lists)
    assert m == pytest.approx({"A": 0.75, "B": 0.25, "C": 0.25})
    # the same with log-probabilities far below 0 (only their differences matter)
    assert label_marginals([-900 + math.log(2), -900.0, -900.0], lists) == pytest.approx(m)
    assert most_probable([-3.0, -1.0, -1.0], lists) == ("A", "B")
    with pytest.raises(ValueError, match="2 scores for 3 candidate lists"):
        label_marginals([0.0, 0.0], lists)


def test_the_top_k_breaks_ties_in_the_given_order():
    m = {"A": 0.4, "B": 0.4, "C": 0.2}
    assert top_k(m, 1, ["B", "A", "C"]) == {"B"}
    assert top_k(m, 2, ["C", "A", "B"]) == {"A", "B"}
    assert top_k(m, 5, ["A", "B", "C"]) == {"A", "B", "C"}


def test_candidates_are_the_wrong_answers_lists_commonest_first_then_every_label_alone():
    golds = [{"Judgement": "Error", "tag1": ["B", "A"]}, {"Judgement": "Error", "tag1": ["B", "A"]},
             {"Judgement": "Error", "tag1": ["C"]}, {"Judgement": "Error", "tag1": []},
             {"Judgement": "Correct", "tag1": ["D"]}]
    assert candidate_lists(golds, ["A", "B", "C", "D"], "tag1") == [("B", "A"), ("C",), ("A",), ("B",), ("D",)]
    assert candidate_lists(golds, ["A", "C"], "tag1", min_count=2) == [("B", "A"), ("A",), ("C",)]
    with pytest.raises(ValueError, match="unknown tier 'tag3'"):
        candidate_lists(golds, ["A"], "tag3")


def test_lists_are_written_as_the_critic_writes_them_inside_its_critique():
    critique = json.dumps({"Judgement": "Error", "tag1": ["Incomplete Information"], "tag2": ["Lack of Specificity"],
                           "tag3": []}, ensure_ascii=False)
    (tier1,) = list_options([("Incomplete Information",)])
    (tier2,) = list_options([("Lack of Specificity",)])
    assert critique.startswith(tier_prefill("tag1") + tier1)
    assert tier_prefill("tag1") == ERROR_PREFILL
    assert critique.startswith(tier_prefill("tag2", ["Incomplete Information"]) + tier2)
    with pytest.raises(ValueError, match="tier-2 lists continue a tier-1 list"):
        tier_prefill("tag2")


def test_the_paired_comparison_scores_both_and_resamples_questions():
    golds = [{"A"}, {"B"}, {"A"}, {"B"}]
    critic = [{"A"}, {"B"}, {"A"}, {"B"}]
    prior = [{"A"}] * 4
    r = paired_f1(critic, prior, golds, [0, 0, 1, 1], seed=1, n_boot=200)
    assert (r["critic"], r["prior"]) == (1.0, 0.5) and r["diff"] == 0.5
    assert r["ci_low"] == r["ci_high"] == 0.5  # each question holds one A and one B answer
    assert micro_f1([(0, 1, 1)]) == 0.0
    with pytest.raises(ValueError, match="groups has 2 entries for 4 samples"):
        paired_f1(critic, prior, golds, [0, 1], seed=1, n_boot=10)
    with pytest.raises(ValueError, match="unequal length"):
        paired_f1(critic, prior[:3], golds, [0, 0, 1, 1], seed=1, n_boot=10)


class _FakeLLM:
    """Scores an option by how many of its labels the prompt's question names (a stand-in for the
    critic's model; it records the prompts it saw)."""

    def __init__(self):
        self.prompts = []

    def score(self, prompts, options, desc=None):
        self.prompts.extend(prompts)
        return [[float(sum(word in prompt[0]["content"] for word in json.loads(opt.strip().rstrip(","))))
                 for opt in opts] for prompt, opts in zip(prompts, options)]


class _FakeCritic:
    def __init__(self):
        self.llm = _FakeLLM()

    def messages(self, record):
        return [{"role": "user", "content": record["q"]}]


def test_tier_2_lists_are_scored_after_the_tier_1_list_the_critic_finds_most_probable():
    from ragcritic_lib.critic.label_ranking import rank_tier

    critic = _FakeCritic()
    records = [{"q": "A x"}, {"q": "B y"}]
    tier1, tier2 = [("A",), ("B",)], [("x",), ("y",), ("x", "y")]
    scores, chosen = rank_tier(critic, records, "tag2", tier2, tier1_candidates=tier1)
    assert chosen == [("A",), ("B",)]
    assert scores == [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
    # the second pass continues each record's own tier-1 choice
    assert [p[-1]["content"] for p in critic.llm.prompts[2:]] == [tier_prefill("tag2", ["A"]),
                                                                  tier_prefill("tag2", ["B"])]
    scores1, chosen1 = rank_tier(_FakeCritic(), records, "tag1", tier1)
    assert scores1 == [[1.0, 0.0], [0.0, 1.0]] and chosen1 == [(), ()]
    assert rank_tier(_FakeCritic(), [], "tag1", tier1) == ([], [])
    with pytest.raises(ValueError, match="needs the tier-1 candidate lists"):
        rank_tier(critic, records, "tag2", tier2)
