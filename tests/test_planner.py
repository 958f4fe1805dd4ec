"""Planners: rule-based programs (exact text), prompt layout, LLM output parsing, SFT examples."""

from __future__ import annotations

import json

import pytest

from ragcritic_lib.agent.planner import (
    LLMPlanner,
    PlannerContext,
    RuleBasedPlanner,
    build_planner_messages,
    critic_feedback,
    load_error_actions,
    planner_sft_examples,
)
from ragcritic_lib.critic.critics import CriticParse
from ragcritic_lib.llm import CallableLLM
from ragcritic_lib.mining.taxonomy import load_taxonomy


@pytest.fixture(scope="module")
def table():
    return load_error_actions(taxonomy=load_taxonomy())


def err(tag1=(), tag2=(), analysis="x"):
    return {"judgement": "Error", "tag1": list(tag1), "tag2": list(tag2), "tag3": [], "analysis": analysis}


def test_rule_program_for_tier1_exact_text(table):
    program, info = RuleBasedPlanner(table).program_for(err(["Incomplete Information"]))
    assert program == (
        'queries = RewriteQuery(query=question, instruction="expand")\n'
        "more_docs = docs + Retrieval(query=queries[0], topk=3)\n"
        'new_docs = [RefineDoc(query=question, doc=doc, instruction="refine") for doc in more_docs]\n'
        'final_answer = GenerateAnswer(query=question, docs=new_docs, '
        'additional_instruction="Facts were missing before; use the added passages too.")'
    )
    assert info == {"plan_label": "Incomplete Information", "instruction_label": "Incomplete Information",
                    "sub_actions": ["rewrite_expand", "retrieve_more_rewritten_query", "doc_refine"],
                    "tier1": ["Incomplete Information"], "tier2": []}


def test_tier2_refines_plan_and_instruction_and_implies_its_parent(table):
    planner = RuleBasedPlanner(table, topk=2, deep_topk=6)
    program, info = planner.program_for(err([], ["Lack of Specificity", "Data Insufficiency in Retrieval"]))
    assert program == (
        "sub_queries = DecomposeQuery(query=question)\n"
        "hop_docs = Retrieval(query=sub_queries[0], topk=2)\n"
        "bridge = GenerateAnswer(query=sub_queries[0], docs=docs + hop_docs)\n"
        'new_docs = docs + hop_docs + Retrieval(query=sub_queries[-1] + " " + bridge, topk=2)\n'
        'final_answer = GenerateAnswer(query=question, docs=new_docs, '
        'additional_instruction="Name the specific person, place, number or date that is asked for.")'
    )
    assert info["plan_label"] == "Data Insufficiency in Retrieval"
    assert info["instruction_label"] == "Lack of Specificity"
    assert info["tier1"] == ["Incomplete or Missing Response", "Incomplete Information"]


def test_tier1_only_labels_and_aliases(table):
    program, info = RuleBasedPlanner(table).program_for(err(["verbose response", "Incomplete Information"]))
    assert program.splitlines()[0] == 'new_docs = [RefineDoc(query=question, doc=doc, instruction="summarize") for doc in docs]'
    assert info["plan_label"] == info["instruction_label"] == "Overly Verbose Response"


@pytest.mark.parametrize("critique", [err(), err(["Nonsense"], ["Also nonsense"]), {"judgement": "Error"}])
def test_no_usable_label_uses_the_default_rule(table, critique):
    program, info = RuleBasedPlanner(table).program_for(critique)
    assert info["plan_label"] == "Incomplete Information"
    assert program.startswith('queries = RewriteQuery(query=question, instruction="expand")')


def test_mention_prediction_is_escaped_into_a_string_literal(table):
    planner = RuleBasedPlanner(table, mention_prediction=True)
    program, _ = planner.program_for(err(["Overly Verbose Response"]), prediction='He said "no"\nthen left')
    assert program.splitlines()[-1] == (
        'final_answer = GenerateAnswer(query=question, docs=new_docs, additional_instruction="Reply with the short '
        'answer only, without explanation. The earlier answer \\"He said \\"no\\" then left\\" was judged wrong.")'
    )


def ctx(table, critic=None, variant_passages=None):
    return PlannerContext(
        question="Which river is longer, the Velta or the Orun?",
        passages=variant_passages or ["Velta\nThe Velta flows 640 km to the sea and is long.", "Orun (band)\nA band."],
        prediction="Orun is a band",
        critic=critic or err(["Irrelevant or Off-Topic Response"], ["Irrelevant Content and Topic Drift"], "Talks about a band."),
        table=table,
    )


def test_compact_prompt_lists_only_relevant_rows(table):
    msgs = build_planner_messages(ctx(table), passage_words=4)
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert "- Irrelevant or Off-Topic Response: Break the question into sub-questions; Replacement retrieval with a rewritten query | answer: Answer only the question asked, in a few words." in user
    assert "- Irrelevant Content and Topic Drift:" not in user  # no row of its own: inherits
    assert "Overly Verbose Response" not in user and "Examples:" not in user
    assert user.endswith(
        "Question: Which river is longer, the Velta or the Orun?\nPassages:\n"
        "[1] Velta: The Velta flows 640 ...\n[2] Orun (band): A band.\nAnswer: Orun is a band\n"
        "Critic: judgement: Error; tier-1: Irrelevant or Off-Topic Response; tier-2: Irrelevant Content and Topic Drift;"
        " analysis: Talks about a band.\nProgram:"
    )


def test_full_prompt_has_all_rows_and_worked_examples(table):
    user = build_planner_messages(ctx(table), variant="full")[1]["content"]
    assert all(f"- {t1}:" in user for t1 in table.tier1)
    assert user.count("\nProgram:\n") == 2
    assert ('new_docs = Retrieval(query=sub_queries[0], topk=3) + Retrieval(query=sub_queries[-1], topk=3)\n'
            'final_answer = GenerateAnswer(query=question, docs=new_docs, additional_instruction="Answer only') in user
    # only the critique's labels carry their answer instruction
    assert "| answer: Answer only the question asked" in user and "| answer: Reply with the short" not in user
    with pytest.raises(ValueError, match="unknown planner prompt variant"):
        build_planner_messages(ctx(table), variant="huge")


GOOD = 'new_docs = docs\nfinal_answer = GenerateAnswer(query=question, docs=new_docs)'


@pytest.mark.parametrize(
    "raw, program",
    [
        (GOOD, GOOD),
        (f"Here is the fix:\n```python\n{GOOD}\n```\nThis should help.", GOOD),
        (f"{GOOD}\nprint('done')\nExplanation: more text", GOOD),
        ("```python\nnew_docs = docs\nfinal_answer = GenerateAn", "new_docs = docs\nfinal_answer = GenerateAn"),
        ("", ""),
        ("I think the answer is Paris.", ""),
        ("```\n```", ""),
    ],
)
def test_llm_planner_extracts_programs_from_messy_output(table, raw, program):
    seen = []
    llm = CallableLLM(lambda prompt, params: (seen.append(prompt), raw)[1])
    planner = LLMPlanner(llm, variant="compact")
    (plan,) = planner.plan([ctx(table)])
    assert plan.program == program
    assert plan.raw == raw and plan.source == "llm"
    assert plan.error == (None if program else "no_program")
    assert planner.stats["no_program"] == (0 if program else 1)
    assert seen == [build_planner_messages(ctx(table))]


def test_llm_planner_batches_one_generate_call(table):
    calls = []
    llm = CallableLLM(lambda prompt, params: GOOD)
    original = llm.generate
    llm.generate = lambda prompts, params, desc=None: (calls.append(len(prompts)), original(prompts, params))[1]
    plans = LLMPlanner(llm).plan([ctx(table), ctx(table, err(["Overly Verbose Response"]))])
    assert calls == [2] and [p.program for p in plans] == [GOOD, GOOD]
    assert LLMPlanner(llm).plan([]) == []


def test_critic_feedback_shapes():
    parse = CriticParse(judgement="Error", analysis="a", tag1=["Incomplete Information"], tag2=[], tag3=["t"])
    expected = {"judgement": "Error", "analysis": "a", "tag1": ["Incomplete Information"], "tag2": [], "tag3": ["t"]}
    assert critic_feedback(parse) == expected
    assert critic_feedback({"Judgement": "Error", "Error_analysis": "a", "tag1": ["Incomplete Information"],
                            "tag3": ["t"]}) == expected
    assert critic_feedback({"question": "q", "critic_target": {"Judgement": "Error", "Error_analysis": "a",
                            "tag1": ["Incomplete Information"], "tag2": [], "tag3": ["t"]}}) == expected
    assert critic_feedback({"Judgement": "Correct"})["judgement"] == "Correct"
    assert critic_feedback(None)["judgement"] is None
    assert critic_feedback({"tag1": "Incomplete Information"})["tag1"] == ["Incomplete Information"]


def test_planner_sft_examples(table):
    records = [
        {"id": "1", "question": "Q1?", "passages": [{"id": "a", "contents": "T\nbody"}], "prediction": "p",
         "critic_target": {"Judgement": "Error", "Error_analysis": "long", "tag1": ["Overly Verbose Response"],
                           "tag2": ["Overly Complex and Redundant Response"], "tag3": ["rambling"]}},
        {"id": "2", "question": "Q2?", "passages": [], "prediction": "p", "critic_target": {"Judgement": "Correct"}},
        {"id": "3", "question": "Q3?", "passages": [], "prediction": "p"},
    ]
    examples = planner_sft_examples(records, table)
    assert len(examples) == 1
    (ex,) = examples
    assert list(ex) == ["messages"]
    assert [m["role"] for m in ex["messages"]] == ["system", "user", "assistant"]
    assert "Question: Q1?\nPassages:\n[1] T: body\nAnswer: p\n" in ex["messages"][1]["content"]
    assert ex["messages"][2]["content"] == RuleBasedPlanner(table).program_for(records[0]["critic_target"])[0]


def test_planner_sft_examples_balanced_over_plans(table):
    def rec(i, tag):
        return {"question": f"Q{i}?", "passages": ["T\nb"], "prediction": "p",
                "target": json.dumps({"Judgement": "Error", "Error_analysis": "", "tag1": [tag], "tag2": [], "tag3": []})}

    records = [rec(i, "Overly Verbose Response") for i in range(5)] + [rec(9, "Incomplete Information")]
    records.append({"question": "Q10?", "passages": [], "prediction": "p", "target": "{not json"})
    plain = planner_sft_examples(records, table)
    assert len(plain) == 6
    assert "Question: Q0?" in plain[0]["messages"][1]["content"]
    balanced = planner_sft_examples(records, table, max_examples=3, seed=1)
    programs = [ex["messages"][2]["content"].split("\n")[0] for ex in balanced]
    assert programs[0].startswith("queries = RewriteQuery")  # "Incomplete Information" sorts first
    assert all(p.startswith("new_docs = [RefineDoc") for p in programs[1:])
    assert planner_sft_examples(records, table, max_examples=3, seed=1) == balanced
    assert len(planner_sft_examples(records, table, max_examples=100)) == 6


# ---------------------------------------------------------------------------------------------
# Constrained decoding over the table's candidate programs
# ---------------------------------------------------------------------------------------------
def test_candidate_programs_are_distinct_valid_and_start_with_the_rule_plan(table):
    from ragcritic_lib.agent.executor import validate_program

    planner = RuleBasedPlanner(table)
    critique = err(tag2=["Data Insufficiency in Retrieval"])
    cands = planner.candidate_programs(critique, "old answer", scope="table")
    programs = [p for p, _ in cands]
    assert programs[0] == planner.program_for(critique, "old answer")[0]
    assert len(programs) == len(set(programs)) > 5
    with_plan = [r for r in [*table.tier1.values(), *table.tier2.values()] if r.plan]
    assert {info["plan_label"] for _, info in cands} == {r.label for r in with_plan}
    for program in programs:
        validate_program(program, ["Retrieval", "RewriteQuery", "DecomposeQuery", "RefineDoc", "GenerateAnswer"],
                         variables=["question", "docs", "prediction"])
        assert program.splitlines()[-1].startswith("final_answer = GenerateAnswer(")
    # The set does not depend on the critique, only its order (own plan first) does.
    other = [p for p, _ in planner.candidate_programs(err(tag1=["Irrelevant Information"]), scope="table")]
    assert set(other) | {programs[0]} >= set(programs) - {programs[0]}


def test_constrained_llm_planner_returns_one_candidate_per_context(table):
    rule = RuleBasedPlanner(table)
    target = rule.program_for(err(tag1=["Irrelevant Information"]))[0]
    seen = []

    def fn(prompt, params):
        seen.append(prompt)
        return target.replace("question", "questoin")  # near, not equal: matched to the nearest option

    planner = LLMPlanner(CallableLLM(fn), decoding="constrained", candidates=rule, scope="table")
    ctxs = [PlannerContext(question="Q?", passages=["T\nx"], prediction="p", critic=err(tag1=["Incomplete Information"]),
                           table=table) for _ in range(2)]
    plans = planner.plan(ctxs)
    assert [p.program for p in plans] == [target, target]
    assert plans[0].info["decoding"] == "constrained" and plans[0].info["constrained"] is False
    assert plans[0].info["plan_label"] == "Irrelevant Information" and plans[0].error is None
    assert planner.stats["plans"] == 2 and planner.stats["same_as_rule"] == 0
    assert len(seen) == 1  # identical prompts are decoded once


def test_scored_llm_planner_ranks_candidates_by_mean_logprob(table):
    rule = RuleBasedPlanner(table)
    target = rule.program_for(err(tag1=["Irrelevant Information"]))[0]
    ctx = PlannerContext(question="Q?", passages=["T\nx"], prediction="p", critic=err(tag1=["Incomplete Information"]),
                         table=table)
    opts = [p for p, _ in rule.candidate_programs(ctx.critic, ctx.prediction, scope="table")]
    short = min((o for o in opts if o != target), key=lambda o: len(o.split()))
    n_t, n_s = len(target.split()), len(short.split())
    assert target in opts and n_s < n_t

    def score_fn(prompt, options):
        # The target: -0.2 per word. The shortest other program: a higher total than the
        # target's but a lower mean. All others: -0.5 per word.
        return [-0.2 * n_t if o == target else (-0.2 * n_t + 0.01 if o == short else -0.5 * len(o.split()))
                for o in options]

    planner = LLMPlanner(CallableLLM(lambda p, g: "", score_fn=score_fn), decoding="scored", candidates=rule,
                         scope="table")
    (plan,) = planner.plan([ctx])
    assert plan.program == target and plan.info["decoding"] == "scored"
    assert plan.info["plan_label"] == "Irrelevant Information" and opts[plan.info["option"]] == target
    assert plan.info["margin"] > 0 and planner.stats["same_as_rule"] == 0
    # Without log-probabilities (a served model), scored decoding says so.
    with pytest.raises(NotImplementedError, match="cannot score"):
        LLMPlanner(CallableLLM(lambda p, g: ""), decoding="scored", candidates=rule, scope="table").plan([ctx])


def test_critique_scope_offers_only_the_programs_of_the_named_labels(table):
    rule = RuleBasedPlanner(table)
    two = err(tag1=["Incomplete Information"], tag2=["Data Insufficiency in Retrieval"])
    opts = rule.candidate_programs(two, "p")
    own = {rule.program_for(two, "p")[0], rule.program_for(err(tag1=["Incomplete Information"]), "p")[0],
           rule.program_for(err(tag2=["Data Insufficiency in Retrieval"]), "p")[0]}
    assert {p for p, _ in opts} == own and opts[0][0] == rule.program_for(two, "p")[0]
    assert len(opts) < len(rule.candidate_programs(two, "p", scope="table"))
    # Different diagnoses, different options: the choice follows the critique.
    other = {p for p, _ in rule.candidate_programs(err(tag1=["Irrelevant Information"]), "p")}
    assert other.isdisjoint({p for p, _ in opts}) or other != {p for p, _ in opts}
    with pytest.raises(ValueError, match="scope"):
        rule.candidate_programs(two, "p", scope="everything")


def test_single_candidate_samples_are_planned_without_the_model(table):
    rule = RuleBasedPlanner(table)
    calls = []

    def fn(prompt, params):
        calls.append(prompt)
        return ""

    one = err(tag1=["Irrelevant Information"])
    assert len(rule.candidate_programs(one, "p")) == 1
    ctx = PlannerContext(question="Q?", passages=["T\nx"], prediction="p", critic=one, table=table)
    for decoding in ("constrained", "scored"):
        planner = LLMPlanner(CallableLLM(fn, score_fn=lambda p, o: [0.0] * len(o)), decoding=decoding, candidates=rule)
        (plan,) = planner.plan([ctx])
        assert plan.program == rule.program_for(one, "p")[0] and plan.info["n_options"] == 1
    assert calls == []


def test_constrained_planner_needs_candidates_and_known_decoding(table):
    llm = CallableLLM(lambda p, g: "")
    for decoding in ("constrained", "scored"):
        with pytest.raises(ValueError, match="candidates"):
            LLMPlanner(llm, decoding=decoding)
    with pytest.raises(ValueError, match="decoding"):
        LLMPlanner(llm, decoding="beam")
