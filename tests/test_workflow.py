"""Algorithm 1 end to end on a tiny corpus with a deterministic generator, critic and planner."""

from __future__ import annotations

import json
import re

import pytest

from ragcritic_lib.agent.actions import ActionSet
from ragcritic_lib.agent.planner import Plan, RuleBasedPlanner, load_error_actions
from ragcritic_lib.agent.workflow import (
    CostMeter,
    OracleCritic,
    TierFilterCritic,
    action_usage,
    comparison_rows,
    correction_actions,
    cost_rows,
    generating_model,
    iteration_table,
    pick_case_studies,
    records_at_iteration,
    rejection_counts,
    render_case_study,
    run_correction,
    run_methods,
    status_counts,
    unverified_round,
)
from ragcritic_lib.critic.critics import LLMCritic
from ragcritic_lib.llm import CallableLLM, GenParams
from ragcritic_lib.retrieval import Hit
from ragcritic_lib.retrieval.rag import answer_gen_params
from ragcritic_lib.mining.taxonomy import load_taxonomy

D = {
    "d1": "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887. It is made of stone.",
    "d2": "Aldor\nThe Aldor is a river in the northern lowlands. It is 210 km long.",
    "d3": "Velta\nThe Velta is a river that flows 640 km to the sea.",
    "d4": "Orun (band)\nOrun is a folk band formed in 1999.",
    "d5": "Heron Tower\nThe Heron Tower was completed in 1902 in Lisbrook.",
}


class TinyRetriever:
    name = "tiny"

    def search(self, queries, k):
        out = []
        for q in queries:
            words = set(re.findall(r"[a-z0-9]+", q.lower()))
            scored = sorted((-len(words & set(re.findall(r"[a-z0-9]+", t.lower()))), i, d, t)
                            for i, (d, t) in enumerate(D.items()))
            out.append([Hit(d, float(-s), t) for s, _, d, t in scored[:k]])
        return out


def generator(prompt, params):
    """Rewrites to '<entity> completion year'; reads 'completed in YEAR' for the asked entity."""
    text = prompt[-1]["content"]
    m = re.search(r"Query: When was the (\w+ \w+) completed\?", text)
    if m:
        return f"{m.group(1)} completion year"
    q = re.search(r"Question: When was the (\w+ \w+) completed\?", text)
    if q:
        fact = re.search(rf"{q.group(1)} was completed in (\d{{4}})|{q.group(1)}[^\[]*?completed in (\d{{4}})", text)
        year = next((g for g in fact.groups() if g), None) if fact else None
        return f"So the final answer is: {year or 'insufficient information'}"
    return ""


class ScriptedCritic:
    """Error (tier-1 from the table below) unless the answer is a four-digit year or '640 km'."""

    name = "scripted"

    def __init__(self, tags=("Incomplete Information",), tag2=()):
        self.tags, self.tag2 = list(tags), list(tag2)
        self.seen: list[list[dict]] = []

    def critique(self, records):
        self.seen.append([dict(r) for r in records])
        out = []
        for r in records:
            if re.fullmatch(r"\d{4}|640 km", r["prediction"]):
                out.append({"Judgement": "Correct"})
            else:
                out.append({"Judgement": "Error", "Error_analysis": "The passages lack the date.",
                            "tag1": self.tags, "tag2": self.tag2, "tag3": ["missing date"]})
        return out


class ScriptedPlanner:
    def __init__(self, programs):
        self.programs = programs

    def plan(self, contexts):
        return [Plan(program=self.programs[c.question], raw=self.programs[c.question], source="script",
                     error=None if self.programs[c.question] else "no_program") for c in contexts]


def record(rid, question, gold, passages, prediction, qtype="factual"):
    return {"id": rid, "question": question, "golden_answers": gold, "metadata": {"type": qtype},
            "passages": [{"id": p, "contents": D[p], "score": 1.0} for p in passages], "prediction": prediction}


S1 = record("s1", "When was the Kestrel Bridge completed?", ["1887"], ["d2"], "insufficient information")
S2 = record("s2", "How long is the Velta?", ["640 km"], ["d3"], "640 km", "numerical")
S3 = record("s3", "When was the Heron Tower completed?", ["1902"], ["d4"], "Orun")


@pytest.fixture(scope="module")
def taxonomy():
    return load_taxonomy()


@pytest.fixture(scope="module")
def table(taxonomy):
    return load_error_actions(taxonomy=taxonomy)


def make_actions(counter: list | None = None) -> ActionSet:
    llm = CallableLLM(generator, name="gen")
    if counter is not None:
        original = llm.generate

        def counting(prompts, params=GenParams(), *, desc=None):
            counter.append(len(prompts))
            return original(prompts, params, desc=desc)

        llm.generate = counting  # type: ignore[method-assign]
    return ActionSet(llm, TinyRetriever(), gen_params=GenParams(max_new_tokens=32), topk=3)


REFINED = [
    "Aldor\nThe Aldor is a river in the northern lowlands.",
    "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887.",
    "Velta\nThe Velta is a river that flows 640 km to the sea.",
    # The supplementary retrieval skips the context passage (Aldor), so a third new hit comes in.
    "Orun (band)\nOrun is a folk band formed in 1999.",
]


def test_corrects_skips_correct_and_iterates(table):
    critic = ScriptedCritic()
    out = run_correction([S1, S2], critic=critic, planner=RuleBasedPlanner(table), actions=make_actions(),
                         iterations=2)
    s1, s2 = out
    assert s1["predictions"] == ["insufficient information", "1887", "1887"]
    assert s1["final_prediction"] == "1887" and s1["final_passages"] == REFINED
    assert [s["status"] for s in s1["steps"]] == ["corrected", "skipped_correct"]
    step = s1["steps"][0]
    assert step["program"] == RuleBasedPlanner(table).program_for({"tag1": ["Incomplete Information"]})[0]
    assert [t["call"] for t in step["trace"]] == ["RewriteQuery", "Retrieval"] + ["RefineDoc"] * 4 + ["GenerateAnswer"]
    assert step["trace"][1]["args"] == {"query": "Kestrel Bridge completion year", "topk": 3}
    assert step["events"][0] == {"action": "RewriteQuery", "instruction": "expand",
                                 "output": ["Kestrel Bridge completion year", "Kestrel Bridge completed"],
                                 "raw": "Kestrel Bridge completion year", "fallback": None}
    assert step["critic"]["tag1"] == ["Incomplete Information"]
    assert (step["answer_before"], step["answer_after"]) == ("insufficient information", "1887")
    assert s2["predictions"] == ["640 km"] * 3
    assert [s["status"] for s in s2["steps"]] == ["skipped_correct"]
    # round 2 critiques only the corrected sample, with its new passages and answer
    assert [r["id"] for r in critic.seen[1]] == ["s1"]
    assert critic.seen[1][0]["prediction"] == "1887"
    assert [p["contents"] for p in critic.seen[1][0]["passages"]] == REFINED
    assert status_counts(out) == {"iter1": {"corrected": 1, "skipped_correct": 1}, "iter2": {"skipped_correct": 1}}
    assert S1["prediction"] == "insufficient information"  # inputs untouched


def test_failed_programs_keep_the_previous_answer_and_are_counted(table):
    programs = {
        "When was the Kestrel Bridge completed?": "import os\nfinal_answer = 'x'",
        "When was the Heron Tower completed?": "new_docs = docs[5]\nfinal_answer = GenerateAnswer(query=question, docs=[new_docs])",
        "Who founded Orun?": "",
        "Where is Aldor?": 'final_answer = ""',
    }
    recs = [S1, S3, record("s4", "Who founded Orun?", ["Mara Quill"], ["d4"], "Orun"),
            record("s5", "Where is Aldor?", ["northern lowlands"], ["d2"], "Velta")]
    out = run_correction(recs, critic=ScriptedCritic(), planner=ScriptedPlanner(programs), actions=make_actions(),
                         iterations=2)
    assert [r["predictions"] for r in out] == [[r["prediction"]] * 3 for r in recs]
    assert [(r["steps"][0]["status"], r["steps"][0]["reason"]) for r in out] == [
        ("rejected", "import"), ("runtime_error", "index_error"), ("no_program", "no_program"),
        ("empty_answer", "empty_answer")]
    assert all(len(r["steps"]) == 1 for r in out)  # a failed step is not retried
    assert rejection_counts(out) == {"empty_answer:empty_answer": 1, "no_program:no_program": 1,
                                     "rejected:import": 1, "runtime_error:index_error": 1}
    assert out[0]["steps"][0]["trace"] == [] and "Import" in out[0]["steps"][0]["message"]


class Verifier:
    """Margins by answer text: a year is judged less likely wrong than anything else."""

    llm = None

    def __init__(self, margins):
        self.margins, self.seen = margins, []

    def verdict_margins(self, records):
        self.seen.append([(r["prediction"], [p["contents"] for p in r["passages"]]) for r in records])
        return [self.margins.get(r["prediction"], 0.0) for r in records]


def test_a_verifier_keeps_only_the_corrections_it_prefers(table):
    rejected = {"When was the Heron Tower completed?": 'final_answer = "Orun band"',
                "When was the Kestrel Bridge completed?":
                    'final_answer = GenerateAnswer(query=question, docs=docs + Retrieval(query=question, topk=2))'}
    verifier = Verifier({"insufficient information": 1.0, "1887": -2.0, "Orun": 0.5, "Orun band": 0.9})
    out = run_correction([S1, S3], critic=ScriptedCritic(), planner=ScriptedPlanner(rejected), actions=make_actions(),
                         iterations=2, verifier=verifier)
    s1, s3 = out
    # kept: the margin fell (1.0 -> -2.0); the next round sees the new answer
    assert s1["predictions"] == ["insufficient information", "1887", "1887"]
    assert s1["steps"][0]["status"] == "corrected"
    assert s1["steps"][0]["verification"] == {"margin_before": 1.0, "margin_after": -2.0, "kept": True}
    # not kept: the margin rose (0.5 -> 0.9); the old answer stays and the sample leaves the loop
    assert s3["predictions"] == ["Orun", "Orun", "Orun"] and len(s3["steps"]) == 1
    step = s3["steps"][0]
    assert (step["status"], step["reason"], step["candidate_answer"]) == ("not_verified", "not_verified", "Orun band")
    assert step["answer_after"] == "Orun" and step["verification"]["kept"] is False
    # both answers of a sample are judged on the passages the round started from
    first = verifier.seen[0]
    assert [a for a, _ in first] == ["insufficient information", "Orun"]
    assert verifier.seen[1] == [("1887", first[0][1]), ("Orun band", first[1][1])]
    assert status_counts(out)["iter1"] == {"corrected": 1, "not_verified": 1}
    assert rejection_counts(out) == {}  # a verified-out correction is not a failed program
    # Algorithm 1's first round as written, read from the same run
    plain = unverified_round(out)
    assert [r["predictions"] for r in plain] == [["insufficient information", "1887"], ["Orun", "Orun band"]]
    assert [r["final_prediction"] for r in plain] == ["1887", "Orun band"]
    assert all(s["iteration"] == 1 for r in plain for s in r["steps"])
    assert out[1]["final_prediction"] == "Orun"  # the run itself is untouched


def test_an_equal_margin_keeps_the_old_answer(table):
    programs = {"When was the Heron Tower completed?": 'final_answer = "Heron"'}
    out = run_correction([S3], critic=ScriptedCritic(), planner=ScriptedPlanner(programs), actions=make_actions(),
                         verifier=Verifier({}))
    assert out[0]["final_prediction"] == "Orun" and out[0]["steps"][0]["status"] == "not_verified"


def test_unparsed_critique_is_skipped(table):
    class Mute:
        def critique(self, records):
            return [{"Judgement": None} for _ in records]

    out = run_correction([S1], critic=Mute(), planner=RuleBasedPlanner(table), actions=make_actions())
    assert out[0]["steps"][0]["status"] == "skipped_unparsed" and out[0]["final_prediction"] == S1["prediction"]


def test_oracle_critic_uses_gold_and_optional_tagger(table):
    states = [dict(S1), dict(S2)]
    plain = OracleCritic().critique(states)
    assert [p.judgement for p in plain] == ["Error", "Correct"]
    assert plain[0].tag1 == [] and plain[0].analysis == "The answer does not match the gold answer."
    tagged = OracleCritic(tagger=ScriptedCritic(tags=["Overly Verbose Response"])).critique(states)
    assert tagged[0].tag1 == ["Overly Verbose Response"] and tagged[0].tag3 == ["missing date"]
    with pytest.raises(ValueError, match="OracleCritic metric must be one of"):
        OracleCritic(metric="bleu")
    # The project's judge: S2's answer is right by it too; a judge at F1 >= 0.5 reads S1 as wrong.
    judged = OracleCritic(metric="truth", threshold=0.5).critique(states)
    assert [p.judgement for p in judged] == ["Error", "Correct"]
    out = run_correction([S1, S3], critic=OracleCritic(), planner=RuleBasedPlanner(table), actions=make_actions())
    assert [r["final_prediction"] for r in out] == ["1887", "1902"]  # default rule: rewrite + retrieve more
    assert iteration_table(out) == {"iter0": {"em": 0.0, "f1": 0.0, "acc": 0.0, "n": 2},
                                    "iter1": {"em": 1.0, "f1": 1.0, "acc": 1.0, "n": 2}}


def test_tier_filter_critic_drops_data_driven_labels(table):
    base = ScriptedCritic(tags=["Incomplete or Missing Response"], tag2=["Lack of Specificity"])
    (fb,) = TierFilterCritic(base).critique([dict(S1)])
    assert fb == {"judgement": "Error", "analysis": "The passages lack the date.",
                  "tag1": ["Incomplete or Missing Response"], "tag2": [], "tag3": []}
    full = run_correction([S1], critic=base, planner=RuleBasedPlanner(table), actions=make_actions())
    tier1 = run_correction([S1], critic=TierFilterCritic(base), planner=RuleBasedPlanner(table), actions=make_actions())
    assert "Name the specific person" in full[0]["steps"][0]["program"]
    assert "Give a complete and specific final answer" in tier1[0]["steps"][0]["program"]


def test_prefetch_gives_the_same_results_with_fewer_generate_calls(table):
    with_prefetch: list[int] = []
    without: list[int] = []
    kw = {"planner": RuleBasedPlanner(table), "iterations": 1}
    a = run_correction([S1, S3], critic=ScriptedCritic(), actions=make_actions(with_prefetch), prefetch=True, **kw)
    b = run_correction([S1, S3], critic=ScriptedCritic(), actions=make_actions(without), prefetch=False, **kw)
    assert [r["final_prediction"] for r in a] == [r["final_prediction"] for r in b] == ["1887", "1902"]
    assert [r["steps"] for r in a] == [r["steps"] for r in b]
    assert with_prefetch == [2, 2]  # rewrites of both samples, then both answers
    assert without == [1, 1, 1, 1]


def test_cost_meter_counts_logical_and_generated_calls(table, taxonomy):
    def critic_fn(prompt, params):
        text = prompt[-1]["content"]
        if "insufficient information" in text:
            return json.dumps({"Judgement": "Error", "tag1": ["Incomplete Information"], "tag2": [], "tag3": ["x"],
                               "Error_analysis": "No date."})
        return '{"Judgement": "Correct"}'

    critic = LLMCritic(CallableLLM(critic_fn, name="critic"), taxonomy, "trained")
    meter = CostMeter()
    actions = make_actions()
    out = run_correction([S1, S2], critic=critic, planner=RuleBasedPlanner(table), actions=actions,
                         iterations=2, meter=meter)
    assert [r["final_prediction"] for r in out] == ["1887", "640 km"]
    summary = meter.summary(n_samples=2)
    assert summary["critic"]["calls"] == 3  # two in round 1, one in round 2
    assert summary["critic"]["generated_calls"] == 3
    assert summary["planner"].get("calls", 0) == 0
    assert summary["actions"]["calls"] == 2 and summary["actions"]["generated_calls"] == 2
    assert summary["actions"]["action_calls"] == 7
    assert summary["total"]["calls"] == 5 and summary["total"]["calls_per_sample"] == 2.5
    assert action_usage(out) == {"GenerateAnswer": 1, "RefineDoc": 4, "Retrieval": 1, "RewriteQuery": 1}


def test_cost_meter_counts_a_critics_scoring_calls(table):
    from ragcritic_lib.critic.critics import CORRECT, CriticParse
    from ragcritic_lib.llm import UsageStats

    class ScoringCritic:
        """A calibrated critic: one scoring call per answer, no generation when it finds no error."""

        def __init__(self):
            self.llm = type("Model", (), {"stats": UsageStats()})()
            self.last_generations = []

        def critique(self, records):
            self.llm.stats.add(requests=len(records))
            self.last_generations = []
            return [CriticParse(judgement=CORRECT, valid_json=True) for _ in records]

    meter = CostMeter()
    out = run_correction([S1, S2, S3], critic=ScoringCritic(), planner=RuleBasedPlanner(table), actions=make_actions(),
                         iterations=2, meter=meter)
    assert [r["final_prediction"] for r in out] == [S1["prediction"], S2["prediction"], S3["prediction"]]
    summary = meter.summary(n_samples=3)
    # Three verdicts scored in round 1; nothing is corrected, so round 2 asks nothing.
    assert summary["critic"]["calls"] == 3 and summary["critic"]["score_calls"] == 3
    assert summary["total"]["calls_per_sample"] == 1.0


def test_case_study_rendering(table):
    out = run_correction([S2, S1], critic=ScriptedCritic(), planner=RuleBasedPlanner(table), actions=make_actions())
    (case,) = pick_case_studies(out, n=2)
    assert case["id"] == "s1"
    text = render_case_study(case)
    assert text.startswith("**Question:** When was the Kestrel Bridge completed?\n\n**Retrieved Docs:**\n\n"
                           "- [1] Aldor: The Aldor is a river in the northern lowlands. It is 210 km long.\n")
    assert "**Original Answer:** insufficient information" in text
    assert "**Judgement Result (1):** The answer is incorrect. The passages lack the date." in text
    assert "- Tag1: ['Incomplete Information']" in text
    assert '```python\nqueries = RewriteQuery(query=question, instruction="expand")\n' in text
    assert "1. `Retrieval(query=Kestrel Bridge completion year, topk=3)`" in text
    assert "**Status:** corrected" in text
    assert text.endswith("**New Answer:** 1887\n\n**Final Answer:** 1887\n\n**Gold Answer:** 1887\n")
    rows = records_at_iteration(out, 1)
    assert [(r["id"], r["prediction"], r["acc"]) for r in rows] == [("s2", "640 km", 1.0), ("s1", "1887", 1.0)]
    assert "steps" not in rows[0]


def test_iterations_must_be_positive(table):
    with pytest.raises(ValueError):
        run_correction([S1], critic=ScriptedCritic(), planner=RuleBasedPlanner(table), actions=make_actions(),
                       iterations=0)


def test_run_methods_comparison_and_cost_rows(table):
    methods = {
        "RAG-Critic": {"critic": ScriptedCritic(), "planner": RuleBasedPlanner(table), "iterations": 2},
        "oracle": {"critic": OracleCritic(), "planner": ScriptedPlanner({S1["question"]: "import os", S2["question"]: ""})},
    }
    results, costs = run_methods([S1, S2], methods, actions=make_actions())
    rows = comparison_rows(results)
    overall = [(r["method"], r["iteration"], r["acc"], r["n"]) for r in rows if r["group"] == "all"]
    assert overall == [("standard RAG", 0, 0.5, 2), ("RAG-Critic (1 iter)", 1, 1.0, 2),
                       ("RAG-Critic (2 iter)", 2, 1.0, 2), ("oracle", 1, 0.5, 2)]
    by_type = {(r["method"], r["group"]): r["acc"] for r in rows if r["group"] != "all"}
    assert by_type[("standard RAG", "factual")] == 0.0 and by_type[("standard RAG", "numerical")] == 1.0
    assert rejection_counts(results["oracle"]) == {"rejected:import": 1}
    table_rows = cost_rows(costs, {"calls": 2.0, "prompt_tokens": 10.0, "completion_tokens": 4.0}, 2)
    assert [r["method"] for r in table_rows] == ["RAG-Critic", "oracle"]
    assert table_rows[0]["generate_calls_per_sample"] == 1.0
    assert table_rows[0]["actions_calls_per_sample"] == 1.0  # 2 generator calls for 2 questions
    assert table_rows[0]["action_calls"] == 7.0 and table_rows[1]["action_calls"] == 0.0
    assert table_rows[1]["planner_calls_per_sample"] == 0.0


def test_method_slug():
    from ragcritic_lib.agent.workflow import method_slug

    assert method_slug("RAG-Critic") == "rag_critic"
    assert method_slug("w/o data-driven labels") == "w_o_data_driven_labels"
    assert method_slug("///") == "method"


def test_a_critic_returning_too_few_critiques_is_a_clear_error(table):
    class Short:
        def critique(self, records):
            return []

    with pytest.raises(ValueError, match="critic returned 0 critiques for 1 records"):
        run_correction([S1], critic=Short(), planner=RuleBasedPlanner(table), actions=make_actions())


def test_oracle_critic_asks_a_critic_for_error_critiques_when_it_can():
    class Forced(ScriptedCritic):
        def critique_errors(self, records):
            return [{"Judgement": "Error", "tag1": ["Erroneous Information"], "tag2": [], "tag3": [],
                     "Error_analysis": "forced"} for _ in records]

    out = OracleCritic(tagger=Forced()).critique([dict(S1), dict(S2)])
    assert out[0].tag1 == ["Erroneous Information"] and out[0].analysis == "forced"
    assert out[1].judgement == "Correct"


# --------------------------------------------------------------------------------------------
# The correction stage's action layer, shared with the planner's data stage
# --------------------------------------------------------------------------------------------
SETTINGS = {"answer_mode": "free", "refine_notes": "extractive", "rewrite_expand": "prf",
            "action_rerank_depth": 10, "answer_prefix": "shared"}
RAG = {"prompt_variant": "prefill", "max_new_tokens": 32, "top_k": 3, "max_passage_words": 60}


def build_actions(llm=None, **changes):
    llm = llm or CallableLLM(generator, name="gen")
    return correction_actions(llm, TinyRetriever(), settings={**SETTINGS, **changes}, rag=RAG,
                              reranker=object(), table=None, default_rerank_depth=20)


def test_correction_actions_take_every_setting():
    llm = CallableLLM(generator, name="gen")
    acts = build_actions(llm)
    assert (acts.notes, acts.expand, acts.answer_mode, acts.rerank_depth) == ("extractive", "prf", "free", 10)
    assert acts.gen_params == answer_gen_params("prefill", 32)
    assert llm.share_generation_prefix is True
    assert build_actions(action_rerank_depth=0).rerank_depth == 20  # 0: the common retriever's depth
    whole = CallableLLM(generator, name="gen")
    build_actions(whole, answer_prefix="whole", refine_notes="llm", rewrite_expand="llm")
    assert whole.share_generation_prefix is False


def test_correction_actions_set_the_prefix_switch_on_the_model_under_a_cost_meter():
    from ragcritic_lib.baselines import MeteredLLM

    inner = CallableLLM(generator, name="gen")
    inner.share_generation_prefix = False
    metered = MeteredLLM(MeteredLLM(inner))
    build_actions(metered)  # shared
    assert inner.share_generation_prefix is True
    assert "share_generation_prefix" not in vars(metered)  # not a flag the wrapper alone would hold
    build_actions(metered, answer_prefix="whole")
    assert inner.share_generation_prefix is False
    assert generating_model(inner) is inner


@pytest.mark.parametrize(("changes", "message"), [
    ({"answer_prefix": "half"}, "correction.answer_prefix"),
    ({"action_rerank_depth": -1}, "correction.action_rerank_depth"),
    ({"action_rerank_depth": "10"}, "correction.action_rerank_depth"),
    ({"refine_notes": "poems"}, "note source"),
])
def test_correction_actions_reject_a_bad_setting(changes, message):
    with pytest.raises(ValueError, match=message):
        build_actions(**changes)


def test_correction_actions_name_a_missing_setting():
    settings = {k: v for k, v in SETTINGS.items() if k != "rewrite_expand"}
    with pytest.raises(KeyError, match="correction.rewrite_expand"):
        correction_actions(CallableLLM(generator, name="gen"), TinyRetriever(), settings=settings, rag=RAG,
                           reranker=object(), table=None, default_rerank_depth=20)
