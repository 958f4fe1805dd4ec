"""Planners learned from executed outcomes: jobs, execution through the real executor, targets."""

from __future__ import annotations

import pytest

from ragcritic_lib.agent.outcomes import (
    GivenPrograms, candidate_jobs, execute_jobs, helped, outcome_flags, outcome_sft_examples, outcome_summary,
    outcome_targets,
)
from ragcritic_lib.agent.planner import RuleBasedPlanner, load_error_actions
from word_retriever import WordOverlapRetriever

CORPUS = {"d1": "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887.",
          "d2": "Aldor\nThe Aldor is a river in the northern lowlands.",
          "d3": "Velta\nThe Velta is a river that flows 640 km to the sea."}
CRITIQUE = {"Judgement": "Error", "Error_analysis": "No passage says when.", "tag1": ["Incomplete Information"],
            "tag2": ["Insufficient or Incomplete Information Retrieval"]}


def record(rid, prediction="insufficient information", critique=CRITIQUE):
    return {"id": rid, "dataset": "testbed", "question": "When was the Kestrel Bridge completed?",
            "golden_answers": ["1887"], "prediction": prediction,
            "metadata": {"type": "temporal", "answerable": True, "outdated_answers": ["1850"]},
            "passages": [{"id": "d2", "contents": CORPUS["d2"], "score": 1.0}], "critic_target": critique}


@pytest.fixture(scope="module")
def rule():
    return RuleBasedPlanner(load_error_actions())


def test_candidate_jobs_put_the_critiques_own_program_first_and_draw_the_rest(rule):
    recs = [record("q1"), record("q2"), record("q3", critique={"Judgement": "Correct"})]
    jobs = candidate_jobs(recs, rule, per_record=4, seed=3)
    assert len(jobs) == 8  # the record judged Correct has nothing to correct
    for rid in ("q1", "q2"):
        mine = [j for j in jobs if j["record"]["id"] == rid]
        assert mine[0]["own"] and not any(j["own"] for j in mine[1:])
        assert mine[0]["program"] == rule.program_for(mine[0]["critique"])[0]
        assert len({j["program"] for j in mine}) == 4  # distinct programs
    assert jobs == candidate_jobs(recs, rule, per_record=4, seed=3)  # the same draw for the same seed
    table = rule.candidate_programs({"judgement": "Error"}, scope="table")
    assert len(candidate_jobs(recs[:1], rule, per_record=100)) == len(table)  # capped by the table
    with pytest.raises(ValueError, match="per_record"):
        candidate_jobs(recs, rule, per_record=0)


def test_given_programs_refuse_a_different_number_of_contexts():
    with pytest.raises(ValueError, match="1 programs for 2 contexts"):
        GivenPrograms(["final_answer = GenerateAnswer(query=question, docs=docs)"]).plan([object(), object()])


def test_execute_jobs_runs_each_program_and_scores_it_with_the_judge(rule):
    from ragcritic_lib.agent.actions import ActionSet
    from ragcritic_lib.llm import CallableLLM, GenParams


    def generator(prompt, params):
        text = prompt[-1]["content"]
        if "Query:" in text:
            return "Kestrel Bridge completion year"
        if "Question: When was the Kestrel Bridge completed?" in text:
            return "So the final answer is: " + ("1887" if "completed in 1887" in text else "1850 or 1887")
        return ""

    table = load_error_actions()
    acts = ActionSet(CallableLLM(generator, name="gen"), WordOverlapRetriever(CORPUS), gen_params=GenParams(max_new_tokens=16),
                     topk=3, table=table)
    jobs = candidate_jobs([record("q1")], rule, per_record=len(rule.candidate_programs({}, scope="table")), seed=0)
    outcomes = execute_jobs(jobs, actions=acts, judge_metric="truth", judge_threshold=0.5, table=table)
    assert len(outcomes) == len(jobs) and [o["program"] for o in outcomes] == [j["program"] for j in jobs]
    assert all(o["answer_before"] == "insufficient information" and not o["right_before"] for o in outcomes)
    # A program that retrieves the bridge's passage makes the answer right; one that keeps the
    # passages gets "1850 or 1887", wrong by the judge (it asserts the outdated value) though F1 rises.
    right = [o for o in outcomes if o["right_after"]]
    stale = [o for o in outcomes if o["answer_after"] == "1850 or 1887"]
    assert right and stale
    assert all(o["answer_after"] == "1887" and o["delta_f1"] == 1.0 and o["helped"] for o in right)
    assert all(not o["right_after"] and o["helped"] for o in stale)  # same side of the judge, higher F1
    targets = outcome_targets(outcomes)
    assert targets["q1"]["right_after"] is True


def outcome(rid, label, before, after, delta, own=False, program=None):
    return {"id": rid, "plan_label": label, "program": program or f"final_answer = GenerateAnswer(query='{label}')",
            "right_before": before, "right_after": after, "delta_f1": delta, "own": own, "status": "corrected"}


def test_helped_and_targets_rank_the_judge_before_f1():
    assert helped(outcome("q", "a", False, True, -0.2))  # became right, whatever its F1
    assert not helped(outcome("q", "a", True, False, 0.5))  # turned wrong
    assert helped(outcome("q", "a", False, False, 0.1)) and not helped(outcome("q", "a", False, False, 0.0))
    outs = [outcome("q1", "a", False, False, 0.4, own=True), outcome("q1", "b", False, True, 0.1),
            outcome("q2", "a", False, False, 0.0, own=True), outcome("q2", "b", False, False, -0.3),
            outcome("q3", "a", False, False, 0.2), outcome("q3", "b", False, False, 0.2, own=True)]
    targets = outcome_targets(outs)
    assert sorted(targets) == ["q1", "q3"]  # nothing helped q2
    assert targets["q1"]["plan_label"] == "b"  # judged right beats a larger F1 change
    assert targets["q3"]["plan_label"] == "b"  # a tie goes to the critique's own program


def test_sft_examples_are_balanced_over_the_programs_that_helped():
    table = load_error_actions()
    recs = [record(f"q{i}") for i in range(6)]
    targets = {f"q{i}": outcome(f"q{i}", "a" if i < 4 else "b", False, True, 1.0) for i in range(5)}
    examples = outcome_sft_examples(recs, targets, table, max_examples=4, seed=0)
    assert [e["plan_label"] for e in examples] == ["a", "b", "a", "a"]  # round-robin, b runs out
    assert examples[1]["messages"][-1] == {"role": "assistant", "content": targets["q4"]["program"]}
    assert "When was the Kestrel Bridge completed?" in examples[0]["messages"][1]["content"]
    assert len(outcome_sft_examples(recs, targets, table)) == 5  # q5 has no target
    summary = outcome_summary([outcome("q0", "a", False, True, 1.0, own=True), outcome("q0", "b", False, False, -0.5),
                               outcome("q1", "a", False, False, 0.0, own=True)], targets, examples)
    assert summary["executed_records"] == 3 and summary["records"] == 2 and summary["made_right"] == 1
    assert summary["by_program"]["a"] == {"executed": 2, "made_right": 1, "helped": 1, "mean_delta_f1": 0.5,
                                          "targets": 4}
    assert summary["own_program"]["executed"] == 2 and summary["top_target_share"] == 0.75
    assert outcome_flags(summary, min_examples=2) == [
        "planner_data: one program is the target of 75% of the examples (over 60%)"]
    assert outcome_flags({"examples": 3, "top_target_share": 0.5}, min_examples=20) == [
        "planner_data: 3 examples from programs that helped (fewer than 20)"]


def test_planner_data_metrics_fit_the_schema_and_flag_only_outcome_training():
    from ragcritic_lib.agent.outcomes import planner_data_metrics
    from ragcritic_lib.pipeline.metrics_schema import problems

    recs = [record("q1"), {**record("q2"), "dataset": "trivia", "question": "Who?"}]
    outs = [outcome("q1", "a", False, True, 1.0, own=True), outcome("q2", "b", False, False, -0.2, own=True)]
    targets = outcome_targets(outs)
    examples = outcome_sft_examples(recs, targets, load_error_actions())
    summary = outcome_summary(outs, targets, examples)
    train = {"steps": 3, "examples": 1, "seconds": 12.5, "device": "cpu", "log_history": [{"loss": 1.0}]}
    metrics = planner_data_metrics(records=recs, datasets=["testbed", "trivia"], targets="outcomes",
                                   programs_per_record=2, summary=summary, train_result=train, test_overlap=0,
                                   min_examples=2)
    assert problems("08_planner_data", metrics) == []
    assert metrics["records"] == {"testbed": 1, "trivia": 1} and metrics["questions"] == {"train": 2, "test_overlap": 0}
    assert metrics["train"] == {"steps": 3, "examples": 1, "device": "cpu"}  # no wall time, log or recipe
    assert metrics["degenerate"] == [
        "planner_data: 1 examples from programs that helped (fewer than 2)",
        "planner_data: one program is the target of 100% of the examples (over 60%)"]
    ruled = planner_data_metrics(records=recs, datasets=["testbed", "trivia"], targets="rule", programs_per_record=2,
                                 summary=summary, train_result=train, test_overlap=0, min_examples=2)
    assert ruled["degenerate"] == []
    assert problems("08_planner_data", {**metrics, "targets": "luck"}) != []
