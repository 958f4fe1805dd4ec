"""Self-Refine: feedback verdicts, tolerant answer extraction, the N-round loop."""

from __future__ import annotations

import pytest

from ragcritic_lib.baselines import self_refine as sr
from ragcritic_lib.llm import CallableLLM, GenParams
from ragcritic_lib.retrieval.rag import answer_gen_params, build_rag_messages, extract_answer, passages_of, run_standard_rag
from ragcritic_lib.retrieval import Hit

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


@pytest.mark.parametrize("text, prefilled, expected", [
    ("Fixed.\nSo the final answer is: Danube.", False, ("Danube", "prefix")),
    ("Answer: the Danube\nbecause ...", False, ("the Danube", "line")),
    ("Danube", False, ("Danube", "line")),
    (" Danube.", True, ("Danube", "prefix")),
    ("", False, ("Rhine", "kept")),
    ("  ", True, ("Rhine", "kept")),
])
def test_extract_refined_answer_is_standard_rags(text, prefilled, expected):
    assert sr.extract_refined_answer(text, "Rhine", prefilled=prefilled) == expected
    if expected[1] != "kept":  # the answer is exactly what standard RAG's extraction reads
        assert expected[0] == extract_answer(text, prefilled=prefilled)[0]


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
    rf = sr.build_refine_messages(REC["question"], [], "", "Say Danube")[-1]["content"]
    assert "Previous answer: (empty)" in rf and "Feedback: Say Danube" in rf


def test_each_round_sees_the_earlier_answers_and_feedback():
    prompts = []

    def fn(prompt, params):
        user = prompt[-1]["content"]
        prompts.append(user)
        if "Proposed answer:" in user:
            return {"Rhine": "Wrong: not the Rhine.", "Elbe": "Wrong: not the Elbe either."}.get(
                user.split("Proposed answer: ")[1].split("\n")[0], "NO ISSUES")
        # The rewrite only avoids the Rhine again when it is shown the first round.
        return "So the final answer is: " + ("Danube" if "Attempt 1: Rhine" in user else "Elbe")

    (out,) = sr.self_refine(CallableLLM(fn), [REC], rounds=3, gen_params=GEN)
    fb1, rf1, fb2, rf2, fb3 = prompts
    assert "Earlier attempts" not in fb1 and "Earlier attempts" not in rf1  # nothing earlier yet
    assert "Attempt 1: Rhine\nFeedback 1: Wrong: not the Rhine." in fb2  # feedback sees round 1
    # The second rewrite sees both earlier answers with their feedback, then the current one.
    assert "Attempt 1: Rhine\nFeedback 1: Wrong: not the Rhine." in rf2
    assert "Previous answer: Elbe\nFeedback: Wrong: not the Elbe either." in rf2 and "Attempt 2" not in rf2
    assert "Attempt 2: Elbe" in fb3 and "Proposed answer: Danube" in fb3
    assert (out["prediction"], out["self_refine_rounds"], out["self_refine_stopped"]) == ("Danube", 2, True)
    assert [h["reviewed"] for h in out["self_refine_history"]] == ["Rhine", "Elbe", "Danube"]


def test_stops_at_the_first_approval_and_reports_the_approval_rate():
    llm = CallableLLM(scripted)
    recs = [REC, dict(REC, id="2", prediction="Danube")]
    out = sr.self_refine(llm, recs, rounds=3, gen_params=GEN)
    # Question 2 is approved at once: one feedback call and no rewrite; question 1 stops after one.
    assert [r["self_refine_rounds"] for r in out] == [1, 0] and llm.stats.calls == 4
    s = sr.self_refine_summary(out)
    assert (s["questions"], s["approved"], s["approval_rate"], s["feedback_calls"], s["refinements"]) == (
        2, 2, 1.0, 3, 1)
    assert s["approval_rate_by_round"] == {1: {"n": 2, "approval_rate": 0.5}, 2: {"n": 1, "approval_rate": 1.0}}
    assert s["degenerate"] == []
    never = CallableLLM(lambda p, g: "It is wrong." if "Proposed answer:" in p[-1]["content"] else "Answer: Danube")
    bad = sr.self_refine_summary(sr.self_refine(never, recs, rounds=2, gen_params=GEN))
    assert bad["approval_rate"] == 0.0
    assert bad["degenerate"] == ["self_refine: feedback never approves (4 feedback calls on 2 questions)"]
    always = sr.self_refine_summary(sr.self_refine(CallableLLM(lambda p, g: "NO ISSUES"), recs, rounds=2,
                                                   gen_params=GEN))
    assert always["degenerate"] == ["self_refine: feedback approves every original answer (2 questions), "
                                    "nothing refined"]


PASSAGES = ["Vienna\nThe Danube flows through Vienna.", "Rhine\nThe Rhine is long."]
HITS = [Hit("d1", 2.0, PASSAGES[0]), Hit("d2", 1.0, PASSAGES[1])]


def _recording(prompts, seen, answer=" Rhine.\nThen more text", feedback=lambda user: "NO ISSUES"):
    """A reader that records prompts and decoding; a prefilled turn gets ``answer``."""
    def fn(prompt, params):
        prompts.append(prompt)
        seen.append(params)
        return answer if prompt[-1]["role"] == "assistant" else feedback(prompt[-1]["content"])
    return fn


def test_initial_answer_is_standard_rags_prompt_and_extraction():
    q = {"id": "1", "question": REC["question"], "golden_answers": ["Danube"]}
    gen = answer_gen_params("prefill", 24)
    std_prompts, std_seen = [], []
    (std,) = run_standard_rag(CallableLLM(_recording(std_prompts, std_seen)), [q], retriever=None, hits=[HITS], k=2,
                              variant="prefill", gen_params=gen, max_passage_words=50)
    prompts, seen = [], []
    # The same question and passages, without standard RAG's answer: Self-Refine answers first.
    (out,) = sr.self_refine(CallableLLM(_recording(prompts, seen)), [{**q, "passages": std["passages"]}], rounds=0,
                            gen_params=gen, rag_variant="prefill", max_words=50)
    assert prompts == std_prompts == [build_rag_messages(q["question"], PASSAGES, variant="prefill",
                                                         max_passage_words=50)]
    assert seen == std_seen == [gen] and gen.stop == ("\n",)  # the prefill setting: cut at the newline
    assert (out["prediction"], out["raw_output"], out["followed_prefix"]) == (
        std["prediction"], std["raw_output"], std["followed_prefix"]) == ("Rhine", " Rhine.", True)
    # A record that carries standard RAG's answer starts from it: no answer call, only feedback.
    prompts.clear()
    (kept,) = sr.self_refine(CallableLLM(_recording(prompts, [])), [std], rounds=2, gen_params=gen,
                             rag_variant="prefill", max_words=50)
    assert len(prompts) == 1 and "Proposed answer: Rhine" in prompts[0][-1]["content"]
    assert (kept["prediction"], kept["self_refine_stopped"]) == ("Rhine", True)


def test_refined_answer_is_standard_rags_prompt_with_the_feedback():
    prompts, seen = [], []
    wrong = "Wrong: the passage says Danube."
    fn = _recording(prompts, seen, answer=" Danube\nand more",
                    feedback=lambda user: wrong if "Proposed answer: Rhine" in user else "NO ISSUES")
    gen = answer_gen_params("prefill", 24)
    rec = {**REC, "passages": passages_of(HITS)}  # standard RAG answered Rhine
    (out,) = sr.self_refine(CallableLLM(fn), [rec], rounds=2, gen_params=gen, rag_variant="prefill", max_words=50)
    _, refine, _ = prompts
    assert refine == build_rag_messages(REC["question"], PASSAGES, variant="prefill", max_passage_words=50,
                                        additional_instruction=sr.refine_instruction("Rhine", wrong))
    # Standard RAG's prompt word for word, the feedback added as its instruction after the question.
    std = build_rag_messages(REC["question"], PASSAGES, variant="prefill", max_passage_words=50)
    assert refine[:-2] == std[:-2] and refine[-1] == std[-1]
    assert refine[-2]["content"].startswith(std[-2]["content"] + "\nInstruction: " + sr.REFINE_INSTRUCTION)
    # Answers use the prefill setting; the free-text feedback the default variant's.
    assert seen == [answer_gen_params("default", 24), gen, answer_gen_params("default", 24)]
    assert (out["prediction"], out["raw_output"], out["followed_prefix"]) == ("Danube", " Danube", True)
    assert [h.get("how") for h in out["self_refine_history"]] == ["prefix", None]


def test_feedback_kinds_and_first_round_feedback_by_type():
    assert sr.feedback_kind("NO ISSUES.") == "approves"
    assert sr.feedback_kind("Looks good, but the date is missing.") == "approves but names a problem"
    assert sr.feedback_kind("The answer is wrong: it should be 1999.") == "names a problem"
    assert sr.feedback_kind("The passage talks about rivers.") == "neither"
    assert sr.feedback_kind("  ") == "empty"

    def rec(qtype, feedback, ok):
        return {"metadata": {"type": qtype}, "self_refine_history": [{"feedback": feedback, "ok": ok},
                                                                      {"feedback": "later", "ok": True}]}
    recs = [rec("temporal", "NO ISSUES", True), rec("temporal", "It is wrong " + "x" * 300, False),
            rec("temporal", "Rivers.", False), rec("comparison", "", False), {"metadata": {"type": "x"}}]
    out = sr.feedback_by_type(recs, samples=2, max_chars=20)
    assert list(out) == ["comparison", "temporal"]           # no history: not counted
    t = out["temporal"]
    assert (t["n"], t["approved"], t["approval_rate"]) == (3, 1, 1 / 3)
    assert t["kinds"] == {"approves": 1, "names a problem": 1, "neither": 1}
    assert t["samples"] == ["NO ISSUES", "It is wrong xxxxxxx…"] and len(t["samples"][1]) == 20
    assert out["comparison"]["kinds"] == {"empty": 1}
