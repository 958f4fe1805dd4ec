"""Critic training data: counterfactual answers, cause labels, balance, disjointness, style guard."""

import random

import pytest

from ragcritic_lib.critic.corpus import (
    benchmark_answers, cap_to_correct_share, cause_labels, check_disjoint, counterfactual_answers, data_report, dedupe,
    question_options, question_samples, style_cv_auroc, style_features,
)
from ragcritic_lib.evaluation.scoring import contains_answer
from ragcritic_lib.io import DataFormatError

KNOWN = {
    "gold_not_retrieved": {"tier1": ["Incomplete Information"], "tier2": ["Insufficient or Incomplete Information Retrieval"]},
    "wrong_span_from_context": {"tier1": ["Inaccurate or Misunderstood Response"], "tier2": ["Contextual Understanding Errors"]},
    "unsupported_answer": {"tier1": ["Inaccurate or Misunderstood Response"], "tier2": ["Factual Inaccuracies"]},
    "comparison_error": {"tier1": ["Inaccurate or Misunderstood Response"],
                         "tier2": ["Misinterpretation of Queries and Information"]},
    "numeric_error": {"tier1": ["Inaccurate or Misunderstood Response"], "tier2": ["Incorrect and Incomplete Answers"]},
    "temporal_error": {"tier1": ["Incomplete or Missing Response"], "tier2": ["Partial Coverage and Temporal Issues"]},
    "entity_mismatch": {"tier1": ["Inaccurate or Misunderstood Response"], "tier2": ["Entity and Concept Confusion"]},
    "title_copy": {"tier1": ["Incomplete or Missing Response"], "tier2": ["Lack of Practicality"]},
    "wrong_answer": {"tier1": ["Inaccurate or Misunderstood Response"], "tier2": ["Incorrect and Incomplete Answers"]},
    "off_topic_answer": {"tier1": ["Irrelevant or Off-Topic Response"], "tier2": ["Irrelevant Content and Topic Drift"]},
}
PASSAGES = ["Dorvan Mills\nDorvan Mills was founded in 1961 by Ada Quill. It moved to Port Selby in 1975.",
            "Harlow Steel\nHarlow Steel was founded in 1984 by Ben Ortiz in the city of New Amber."]


def test_question_options() -> None:
    assert question_options("Which was founded earlier, Dorvan Mills or Harlow Steel?") == ["Dorvan Mills", "Harlow Steel"]
    assert question_options("Who tried out for the White Sox? Magic Johnson, Dennis Rodman, Michael Jordan") == [
        "Magic Johnson", "Dennis Rodman", "Michael Jordan"]
    assert question_options("In which year was Dorvan Mills founded?") == []


@pytest.mark.parametrize("question,gold,kinds", [
    ("Which was founded earlier, Dorvan Mills or Harlow Steel?", "Dorvan Mills", {"option"}),
    ("In which year was Dorvan Mills founded?", "1961", {"span", "number"}),
    ("Who founded Dorvan Mills?", "Ada Quill", {"span"}),
])
def test_counterfactuals_are_wrong_and_of_the_reference_shape(question, gold, kinds) -> None:
    out = counterfactual_answers(question, [gold], PASSAGES, rng=random.Random(0), max_answers=3)
    assert out and {k for _, k in out} <= kinds
    for answer, kind in out:
        assert not contains_answer(answer, [gold]) and answer.strip()
        assert "\n" not in answer
        if gold.isdigit():
            assert answer.isdigit() and len(answer) == 4
    # deterministic for a seed
    assert out == counterfactual_answers(question, [gold], PASSAGES, rng=random.Random(0), max_answers=3)


def test_no_counterfactual_without_a_reference() -> None:
    assert counterfactual_answers("Who?", [" "], PASSAGES, rng=random.Random(0)) == []


def test_cause_labels_take_the_first_label_of_each_cause() -> None:
    assert cause_labels(["gold_not_retrieved", "wrong_span_from_context"], KNOWN) == (
        ["Incomplete Information", "Inaccurate or Misunderstood Response"],
        ["Insufficient or Incomplete Information Retrieval", "Contextual Understanding Errors"])
    with pytest.raises(DataFormatError, match="'made_up'"):
        cause_labels(["made_up"], KNOWN)


def test_question_samples_label_wrong_answers_and_never_quote_the_reference() -> None:
    q = {"id": "tb-train-1", "dataset": "tb", "question": "In which year was Dorvan Mills founded?",
         "golden_answers": ["1961"], "metadata": {"dataset": "tb"}, "passages": [{"contents": p} for p in PASSAGES]}
    rows = question_samples([q], KNOWN, seed=0, counterfactuals=2)
    assert [r["source"] for r in rows][:1] == ["reference"] and rows[0]["prediction"] == "1961"
    wrong = [r for r in rows if r["judgement"] == "Error"]
    assert wrong and all(r["source"] == "counterfactual" and r["tag1"] and r["tag2"] for r in wrong)
    assert all("1961" not in r["target"] for r in wrong)
    with pytest.raises(DataFormatError, match="tb-train-2"):
        question_samples([{**q, "id": "tb-train-2", "golden_answers": []}], KNOWN, seed=0)


def _s(q, pred, ok, src="pool"):
    return {"qkey": q, "prediction": pred, "judgement": "Correct" if ok else "Error", "source": src, "dataset": "d"}


def test_share_balance_dedupe_and_report() -> None:
    rows = [_s(f"q{i}", f"a{i}", i < 3) for i in range(10)]
    capped = cap_to_correct_share(rows, min_correct_share=0.5, seed=0)
    assert sum(r["judgement"] == "Correct" for r in capped) == 3 and len(capped) == 6
    assert len(dedupe([_s("q", "The  Answer", True), _s("q", "the answer", False)])) == 1
    rep = data_report(rows)
    assert rep["correct_share"] == 0.3 and rep["sources"] == {"pool": {"correct": 3, "error": 7}}


def test_disjoint_splits() -> None:
    assert check_disjoint(train=[_s("a", "x", 1)], test=[_s("b", "x", 1)]) == {"train": 1, "test": 1}
    with pytest.raises(ValueError, match="question b is in both 'train' and 'test'"):
        check_disjoint(train=[_s("b", "x", 1)], test=[_s("b", "y", 0)])


def test_style_guard_sees_surface_only() -> None:
    f = style_features({"prediction": "Insufficient information.", "truncated": False})
    assert f[4] == 1.0 and f[6] == 1.0  # abstains, ends with a period
    rng = random.Random(0)
    # right and wrong answers of the same surface: no better than chance
    same = [_s(f"q{i}", rng.choice(["Ada Quill", "Ben Ortiz", "1961", "1984"]), i % 2 == 0) for i in range(200)]
    assert abs(style_cv_auroc(same, seed=0) - 0.5) < 0.15
    # wrong answers long, right ones short: surface gives them away
    apart = [_s(f"q{i}", "x" if i % 2 == 0 else "a long and rambling answer " * 3, i % 2 == 0) for i in range(200)]
    assert style_cv_auroc(apart, seed=0) > 0.95


def test_benchmark_answers_balance_or_say_why_not() -> None:
    rows = [_s(f"q{i}", f"a{i}", i < 3) for i in range(10)]
    bench, why = benchmark_answers(rows, seed=0, per_class=2)
    assert sorted(r["judgement"] for r in bench) == ["Correct", "Correct", "Error", "Error"] and why == []
    wrong_only = [_s(f"q{i}", f"a{i}", False) for i in range(5)]
    bench, why = benchmark_answers(wrong_only, seed=0, per_class=2)
    assert len(bench) == 4 and why == ["benchmark: no right test answer, so verdict AUROC and identification are undefined"]
