"""The label prior of stage 07: fitted on training targets alone, scored on a critic's own
verdicts, compared with a paired interval, and flagged only when the whole interval lies below 0."""

import json
from types import SimpleNamespace

import pytest

from ragcritic_lib.critic.benchmark import score_critic
from ragcritic_lib.critic.critics import CriticParse
from ragcritic_lib.critic.label_prior import (
    fit_label_prior, label_prior_comparison, label_prior_flags, with_prior_labels,
)

TAX = SimpleNamespace(tier1=["A", "B", "C", "D"], tier2=["a1", "b1", "c1", "d1"])


def _target(verdict, tag1=(), tag2=()):
    return json.dumps({"Judgement": verdict, "tag1": list(tag1), "tag2": list(tag2)})


def _parse(verdict, tag1=(), tag2=()):
    return CriticParse(judgement=verdict, tag1=list(tag1), tag2=list(tag2), valid_json=True)


def test_the_prior_orders_labels_by_count_and_keeps_the_k_with_the_best_training_f1():
    targets = ([_target("Error", ["B"], ["b1"])] * 5 + [_target("Error", ["A", "B"], ["a1"])] * 3
               + [_target("Error", ["C"], ["c1"])] * 1 + [_target("Correct")] * 20)
    prior = fit_label_prior(targets, TAX)
    assert prior["n_errors"] == 9
    assert prior["tag1"]["counts"] == {"B": 8, "A": 3, "C": 1}
    # B alone: tp 8, fp 1, fn 4 -> F1 16/21 = 0.762; B and A: tp 11, fp 7, fn 1 -> 22/30 = 0.733
    assert prior["tag1"]["labels"] == ["B"] and prior["tag1"]["k"] == 1
    assert prior["tag1"]["train_micro_f1"] == pytest.approx(0.7619, abs=1e-4)
    # b1 alone: precision and recall 5/9; b1 and a1: precision 8/18, recall 8/9 -> 0.593 over 0.556
    assert prior["tag2"]["labels"] == ["b1", "a1"] and prior["tag2"]["k"] == 2


def test_ties_in_count_follow_the_taxonomy():
    targets = [_target("Error", ["C", "A"], ["c1"]), _target("Error", ["A", "C"], ["a1"])]
    prior = fit_label_prior(targets, TAX)
    assert prior["tag1"]["labels"] == ["A", "C"]   # both in every target: naming both is perfect
    assert prior["tag2"]["counts"] == {"a1": 1, "c1": 1}
    assert prior["tag2"]["labels"] == ["a1", "c1"]  # a1 alone F1 0.5, both 0.667


def test_a_prior_without_wrong_answers_is_refused():
    with pytest.raises(ValueError, match="none of 2 targets"):
        fit_label_prior([_target("Correct"), _target("Correct")], TAX)


def test_only_critiques_that_call_the_answer_wrong_take_the_prior_labels():
    prior = {"tag1": {"labels": ["B"]}, "tag2": {"labels": ["b1"]}}
    out = with_prior_labels([_parse("Error", ["A"], ["a1"]), _parse("Correct"), _parse(None)], prior)
    assert (out[0].tag1, out[0].tag2, out[0].judgement) == (["B"], ["b1"], "Error")
    assert out[1].tag1 == [] and out[2].judgement is None


def _bench():
    # 6 questions with one wrong answer each (gold label A or B) and one right answer each
    golds, groups = [], []
    for q in range(6):
        label = "A" if q % 2 else "B"
        golds += [_target("Error", [label], [label.lower() + "1"]), _target("Correct")]
        groups += [q, q]
    return golds, groups


def test_a_critic_that_names_each_answer_s_label_beats_the_prior_beyond_its_interval():
    golds, groups = _bench()
    prior = {"tag1": {"labels": ["B"], "k": 1}, "tag2": {"labels": ["b1"], "k": 1}}
    right = [_parse("Error", json.loads(g)["tag1"], json.loads(g)["tag2"]) if json.loads(g)["Judgement"] == "Error"
             else _parse("Correct") for g in golds]
    c = label_prior_comparison(right, golds, TAX, prior, seed=3, n_boot=400, groups=groups)
    assert c["labelled"] == 6
    assert c["tag1"]["critic_micro_f1"] == score_critic(right, golds, TAX)["tag1"]["micro"]["f1"] == 1.0
    assert c["tag1"]["prior_micro_f1"] == 0.5 and c["tag1"]["micro_f1_minus_prior"] == 0.5
    assert c["tag1"]["ci_low"] > 0 and c["tag1"]["critic_labels_per_critique"] == 1.0
    assert c["tag1"]["prior_labels_per_critique"] == 1
    assert label_prior_flags({"good": c}, prior) == []


def test_a_critic_with_wrong_labels_is_flagged_and_one_level_with_the_prior_is_not():
    golds, groups = _bench()
    prior = {"tag1": {"labels": ["A", "B"], "k": 2}, "tag2": {"labels": ["a1"], "k": 1}}
    wrong = [_parse("Error", ["D"], ["d1"]) if json.loads(g)["Judgement"] == "Error" else _parse("Correct")
             for g in golds]
    c = label_prior_comparison(wrong, golds, TAX, prior, seed=3, n_boot=400, groups=groups)
    assert c["tag1"]["critic_micro_f1"] == 0.0 and c["tag1"]["ci_high"] < 0
    found = label_prior_flags({"bad": c}, prior)
    assert len(found) == 1 and found[0].startswith("bad: tier-1 micro F1 0.000 below the label prior's")
    assert "2 commonest tier-1 labels" in found[0]
    assert label_prior_flags({"bad": c}, prior, "tag2")[0].startswith("bad: tier-2 micro F1")
    same = with_prior_labels(wrong, prior)
    level = label_prior_comparison(same, golds, TAX, prior, seed=3, n_boot=400, groups=groups)
    assert level["tag1"]["micro_f1_minus_prior"] == 0.0 and label_prior_flags({"level": level}, prior) == []


def test_the_comparison_scores_the_critic_s_own_verdicts_and_needs_one_group_per_answer():
    golds, groups = _bench()
    prior = {"tag1": {"labels": ["A", "B"], "k": 2}, "tag2": {"labels": ["a1"], "k": 1}}
    # calling every answer right names no label: critic and prior both score 0, nothing labelled
    silent = [_parse("Correct") for _ in golds]
    c = label_prior_comparison(silent, golds, TAX, prior, seed=3, n_boot=50, groups=groups)
    assert c["labelled"] == 0 and c["tag1"]["prior_micro_f1"] == 0.0
    assert c["tag1"]["critic_labels_per_critique"] is None
    assert label_prior_flags({"silent": c}, prior) == []
    with pytest.raises(ValueError, match="groups has 3 entries for 12 samples"):
        label_prior_comparison(silent, golds, TAX, prior, seed=3, n_boot=50, groups=[0, 1, 2])
    with pytest.raises(ValueError, match="11 critiques for 12 gold critiques"):
        label_prior_comparison(silent[:-1], golds, TAX, prior, seed=3, n_boot=50)
