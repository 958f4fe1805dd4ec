"""The Self-Refine rounds benchmark (benchmarks/bench_self_refine_rounds.py): each round's answer
read from a result's history, and the generator's calls summed into rounds."""

from __future__ import annotations

import pytest
from script_modules import load_script

from ragcritic_lib.baselines.self_refine import self_refine
from ragcritic_lib.llm import CallableLLM, GenParams

bench = load_script("benchmarks/bench_self_refine_rounds.py")


def test_a_round_keeps_the_answer_before_it_where_feedback_approved_or_the_question_stopped():
    rec = {"prediction": "Lyon", "self_refine_history": [
        {"reviewed": "Paris", "feedback": "wrong city", "ok": False, "answer": "Lyon"},
        {"reviewed": "Lyon", "feedback": "NO ISSUES", "ok": True},
    ]}
    assert bench.answers_by_round(rec, 3) == ["Paris", "Lyon", "Lyon", "Lyon"]
    assert bench.answers_by_round({"prediction": "Oslo"}, 2) == ["Oslo", "Oslo", "Oslo"]
    with pytest.raises(ValueError, match="rounds"):
        bench.answers_by_round(rec, -1)


def test_calls_are_summed_into_the_rounds_their_feedback_opens():
    calls = [{"desc": "self-refine initial answer", "prompts": 3, "prompt_tokens": 90, "completion_tokens": 9, "seconds": 1.0},
             {"desc": "self-refine feedback", "prompts": 3, "prompt_tokens": 300, "completion_tokens": 30, "seconds": 2.0},
             {"desc": "self-refine rewrite", "prompts": 2, "prompt_tokens": 200, "completion_tokens": 8, "seconds": 1.5},
             {"desc": "self-refine feedback", "prompts": 2, "prompt_tokens": 220, "completion_tokens": 20, "seconds": 1.25}]
    assert bench.round_costs(calls) == [
        {"calls": 2, "prompts": 5, "prompt_tokens": 500, "completion_tokens": 38, "seconds": 3.5},
        {"calls": 1, "prompts": 2, "prompt_tokens": 220, "completion_tokens": 20, "seconds": 1.25},
    ]


def test_the_meter_records_each_round_of_a_real_self_refine_run():
    def model(prompt, params):
        text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        return "The answer is wrong." if "Proposed answer" in text else "So the final answer is: Rome"

    meter = bench.RoundMeter(CallableLLM(model, name="scripted"))
    recs = [{"id": "q1", "question": "Capital of Italy?", "golden_answers": ["Rome"], "prediction": "Milan",
             "passages": [{"contents": "Rome is the capital of Italy."}]}]
    out = self_refine(meter, recs, rounds=2, gen_params=GenParams(max_new_tokens=16), rag_variant="default", max_words=60)
    assert [c["desc"] for c in meter.calls] == ["self-refine feedback", "self-refine rewrite"] * 2
    assert [r["calls"] for r in bench.round_costs(meter.calls)] == [2, 2]
    assert bench.answers_by_round(out[0], 2) == ["Milan", "Rome", "Rome"]
