"""Self-Refine: feedback verdicts, tolerant answer extraction, the N-round loop."""

from __future__ import annotations

import pytest

from ragcritic_lib.baselines import self_refine as sr
from ragcritic_lib.llm import CallableLLM, GenParams

REC = {"id": "1", "question": "Which river flows through Vienna?", "golden_answers": ["Danube"],
       "passages": [{"id": "d1", "contents": "Vienna\nThe Danube flows through Vienna."}],
       "prediction": "Rhine", "raw_output": "So the final answer is: Rhine"}
GEN = GenParams(max_new_tokens=32)


@pytest.mark.parametrize("text, ok", [
    ("NO ISSUES", True), ("  'no issues.'", True), ("The answer is correct.", True), ("Looks good to me", True),
    ("The answer is wrong; it should be Danube.", False), ("No issues, but it is missing the year", False),
    ("", False), ("The answer is incorrect.", False), ("Rhine", False),
])
def test_feedback_verdict(text, ok):
    assert sr.feedback_is_ok(text) is ok


@pytest.mark.parametrize("text, expected", [
    ("Fixed.\nSo the final answer is: Danube.", ("Danube", "prefix")),
    ("Improved answer: the Danube\nbecause ...", ("the Danube", "loose")),
    ("Danube", ("Danube", "line")),
    ("The river that flows through the city of Vienna in Austria is, as the passage explains at length, not the Rhine", ("Rhine", "kept")),
    ("", ("Rhine", "kept")),
])
def test_extract_refined_answer(text, expected):
    assert sr.extract_refined_answer(text, "Rhine") == expected


def scripted(prompt, params):
    user = prompt[-1]["content"]
    if "Proposed answer:" in user:
        return "NO ISSUES" if "Proposed answer: Danube" in user else "Wrong: the passage says Danube."
    return "The passage names it.\nSo the final answer is: Danube"


def test_loop_refines_then_stops_on_approval():
    llm = CallableLLM(scripted)
    (out,) = sr.self_refine(llm, [REC], rounds=3, gen_params=GEN)
    assert (out["prediction"], out["self_refine_rounds"], out["self_refine_stopped"]) == ("Danube", 1, True)
    assert [h["ok"] for h in out["self_refine_history"]] == [False, True]
    assert out["self_refine_history"][0]["how"] == "prefix"
    assert llm.stats.calls == 3  # feedback, refine, feedback
    assert REC["prediction"] == "Rhine"  # input untouched


def test_round_budget_and_zero_rounds():
    never_ok = CallableLLM(lambda p, g: "It is wrong." if "Proposed answer:" in p[-1]["content"] else "Answer: Danube")
    (out,) = sr.self_refine(never_ok, [REC], rounds=2, gen_params=GEN)
    assert (out["prediction"], out["self_refine_rounds"], out["self_refine_stopped"]) == ("Danube", 2, False)
    (same,) = sr.self_refine(never_ok, [REC], rounds=0, gen_params=GEN)
    assert (same["prediction"], same["self_refine_rounds"], same["self_refine_history"]) == ("Rhine", 0, [])


def test_prompts_carry_question_passages_and_feedback():
    fb = sr.build_feedback_messages(REC["question"], ["Vienna\nThe Danube flows."], "Rhine")[1]["content"]
    assert "[1] Vienna: The Danube flows." in fb and "Proposed answer: Rhine" in fb and sr.OK_MARKER in fb
    rf = sr.build_refine_messages(REC["question"], [], "", "Say Danube")[1]["content"]
    assert "(no passages)" in rf and "Previous answer: (empty)" in rf and "Feedback: Say Danube" in rf
