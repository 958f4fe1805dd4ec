"""The reader-confidence benchmark (benchmarks/bench_verdict_confidence.py): the answer slot of
standard RAG's prompt, the per-token feature, and a combination fitted on dev only."""

from __future__ import annotations

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_verdict_confidence.py")


def test_answer_prompts_open_the_answer_slot_over_the_first_passages():
    recs = [{"id": "a", "question": "Which lake is deepest?", "prediction": " Lake   Baikal ",
             "passages": ["Baikal\nIt is deep.", {"contents": "Caspian\nIt is large."}, "Third\nUnused."]}]
    prompts, options = bench.answer_prompts(recs, top_k=2, variant="prefill", max_passage_words=60)
    user = prompts[0][-2]["content"]
    assert prompts[0][-1] == {"role": "assistant", "content": "So the final answer is:"}
    assert "It is deep." in user and "It is large." in user and "Unused" not in user
    assert options == [[" Lake Baikal", " insufficient information"]]
    terse, _ = bench.answer_prompts(recs, top_k=1, variant="terse", max_passage_words=60)
    assert terse[0][-1]["role"] == "assistant"  # a variant without a prefill gets the answer prefix
    with pytest.raises(ValueError, match="record b: no 'question'"):
        bench.answer_prompts([{"id": "b", "question": " "}], top_k=1, variant="prefill", max_passage_words=60)


def test_confidence_features_are_per_token_and_higher_for_less_likely_answers():
    got = bench.confidence_features([[-6.0, -2.5], [-1.0, -9.0]], [3, 0])
    assert got == [{"reader": 2.0, "abstention": -2.5}, {"reader": 1.0, "abstention": -9.0}]


def test_fit_combination_learns_from_dev_and_refuses_one_class():
    xs = [[0.0, 0.0], [0.1, 0.2], [2.0, 1.8], [2.2, 2.1]]
    score = bench.fit_combination(xs, [False, False, True, True])
    low, high = score([[0.0, 0.1], [2.1, 2.0]])
    assert high > low
    with pytest.raises(ValueError, match="both right and wrong"):
        bench.fit_combination(xs, [True] * 4)
