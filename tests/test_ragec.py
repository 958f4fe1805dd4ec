"""RAGEC: type table, stage-attribution rules, vote parsing and aggregation, reports."""

from __future__ import annotations

import pytest

from ragcritic_lib.baselines import mark_correct, ragec
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.llm import CallableLLM

CORPUS = [
    {"id": "p1", "contents": "Vienna\nVienna is the capital of Austria. The Danube flows through Vienna."},
    {"id": "p2", "contents": "Danube\nThe Danube is a river in Europe."},
    {"id": "p3", "contents": "Paris\nParis is the capital of France."},
    {"id": "p4", "contents": "Budapest\nThe Danube also flows through Budapest."},
]
TEXT = {c["id"]: c["contents"] for c in CORPUS}


def passages(*ids):
    return [{"id": i, "contents": TEXT[i], "score": 1.0} for i in ids]


def record(question, *, supporting=None, passed=(), retrieved=None, golds=("Danube",), correct=False, **meta):
    md = {"dataset": "testbed", "type": "factual", **meta}
    if supporting is not None:
        md["supporting_ids"] = list(supporting)
    r = {"id": "q", "question": question, "golden_answers": list(golds), "metadata": md,
         "passages": passages(*passed), "prediction": "Rhine", "correct": correct}
    if retrieved is not None:
        r["retrieved"] = passages(*retrieved)
    return r


@pytest.fixture(scope="module")
def types():
    return ragec.load_ragec_types()


@pytest.fixture(scope="module")
def gold_fn():
    return ragec.make_chunk_gold_fn(CORPUS)


def test_type_table(types):
    assert [t.id for t in types.types] == [f"E{i}" for i in range(1, 17)]
    assert {s: len(types.of_stage(s)) for s in ragec.STAGES} == {
        "Chunking": 3, "Retrieval": 3, "Reranking": 2, "Generation": 8}
    assert types.by_id("E7").name == "Low Recall" and types.by_id("E13").stage == "Generation"
    assert types.stage_side == {"Chunking": "retrieval", "Retrieval": "retrieval", "Reranking": "retrieval",
                                "Generation": "response"}


def test_tier1_mapping_uses_taxonomy_names(types):
    from ragcritic_lib.mining.taxonomy import load_taxonomy

    tax = load_taxonomy()
    assert set(types.tier1_side) == set(tax.tier1)
    assert all(tax.canonical(t.tier1) == t.tier1 for t in types.types)


def test_bad_type_table_names_the_key(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("types:\n  - {id: E1, name: Overchunking, definition: x, tier1: y}\n")
    with pytest.raises(DataFormatError, match=r"types\[0\] lacks a non-empty string 'stage'"):
        ragec.load_ragec_types(bad)


def test_concept_coverage():
    # concepts: river, flow(s), capital, austria
    q = "Which river flows through the capital of Austria?"
    assert ragec.concept_coverage(q, [TEXT["p2"]]) == 0.25
    assert ragec.concept_coverage(q, [TEXT["p1"], TEXT["p2"]]) == 1.0
    assert ragec.concept_coverage("Which of them?", ["anything"]) == 1.0


def test_gold_chunks_supporting_unanswerable_and_trivia(gold_fn):
    assert [c["id"] for c in gold_fn(record("q?", supporting=["p2", "p1"]))] == ["p2", "p1"]
    assert gold_fn(record("q?", type="unanswerable")) == []
    trivia = record("Which river flows through Vienna?", type="trivia")
    # p1 shares "flows" and "Vienna", p2 "river", p4 "flows"; ties keep corpus order.
    assert [c["id"] for c in gold_fn(trivia)] == ["p1", "p2", "p4"]
    strict = ragec.make_chunk_gold_fn(CORPUS, min_query_overlap=2)
    assert [c["id"] for c in strict(trivia)] == ["p1"]
    assert [c["id"] for c in ragec.make_chunk_gold_fn(CORPUS, max_chunks=1)(trivia)] == ["p1"]


def test_stage_rules_every_branch(gold_fn):
    attr = lambda r, **kw: ragec.attribute_stage(r, chunk_gold_fn=gold_fn, **kw)  # noqa: E731
    q = "Which river flows through the capital of Austria?"

    out = attr(record(q, type="unanswerable", passed=["p3"]))
    assert (out["stage"], out["reason"]) == ("Generation", "no_gold_chunks")

    out = attr(record(q, supporting=["p1", "p2"], passed=["p1", "p2", "p3"]))
    assert (out["stage"], out["gold_chunks_to_generator"]) == ("Generation", 2)

    # Exactly half is not "more than half": the rules go on to the reranker.
    out = attr(record(q, supporting=["p1", "p2"], passed=["p1"], retrieved=["p3", "p1", "p2"]))
    assert (out["stage"], out["reason"], out["reranker_dropped"]) == ("Reranking", "reranker_dropped_gold_chunk", True)

    out = attr(record(q, supporting=["p2"], passed=["p3"], retrieved=["p3"]))
    assert (out["stage"], out["coverage"]) == ("Chunking", 0.25)

    out = attr(record("What flows through Vienna?", supporting=["p1"], passed=["p3"]))
    assert (out["stage"], out["coverage"], out["reranker_dropped"]) == ("Retrieval", 1.0, False)

    ok = attr(record(q, supporting=["p1"], correct=True))
    assert (ok["stage"], ok["reason"]) == (None, "not_an_error")


def test_coverage_threshold_boundary(gold_fn):
    # concepts: danube, europe, river, vienna, austria; p2 holds 3 of 5 = 0.6.
    r = record("Danube Europe river Vienna Austria", supporting=["p2"], passed=["p3"])
    assert ragec.attribute_stage(r, chunk_gold_fn=gold_fn, coverage_threshold=0.6)["stage"] == "Retrieval"
    assert ragec.attribute_stage(r, chunk_gold_fn=gold_fn, coverage_threshold=0.61)["stage"] == "Chunking"
    assert ragec.attribute_stage(r, chunk_gold_fn=gold_fn, reranker_dropped=True)["stage"] == "Reranking"


def test_parse_type_vote(types):
    rer, gen, chunk = types.of_stage("Reranking"), types.of_stage("Generation"), types.of_stage("Chunking")
    assert ragec.parse_type_vote("E7", rer) == "E7"
    assert ragec.parse_type_vote("answer: e-8.", rer) == "E8"
    assert ragec.parse_type_vote("I think E4", rer) is None  # a retrieval type is not a reranking vote
    assert ragec.parse_type_vote("E4? no, E 7", rer) == "E7"
    assert ragec.parse_type_vote("Low precision, clearly", rer) == "E8"
    assert ragec.parse_type_vote("context mismatch, or overchunking", chunk) == "E3"
    assert ragec.parse_type_vote("E10", gen) == "E10" and ragec.parse_type_vote("E10", chunk) is None
    assert ragec.parse_type_vote("", gen) is None and ragec.parse_type_vote("E99 E0", gen) is None


def test_aggregate_votes():
    agg = ragec.aggregate_votes(["E5", "E4", None, "E4", "E5", "E6"])
    assert (agg["mode"], agg["mode_freq"], agg["second_mode"], agg["second_freq"]) == ("E5", 2, "E4", 2)
    assert (agg["n_valid"], agg["n_invalid"], agg["counts"]) == (5, 1, {"E5": 2, "E4": 2, "E6": 1})
    none = ragec.aggregate_votes([None, None])
    assert (none["mode"], none["mode_freq"], none["n_invalid"]) == (None, 0, 2)


def test_classify_types_votes_with_seeds_and_fallback(types, gold_fn):
    seen = []

    def fn(prompt, params):
        seen.append((params.seed, params.temperature))
        return ["E7", "Low Recall", "no idea", "E8", "E7"][params.seed - 10]

    llm = CallableLLM(fn)
    r = record("Which river flows through the capital of Austria?", supporting=["p1", "p2"], passed=["p1"],
               retrieved=["p1", "p2"])
    item = {"record": r, "stage": "Reranking", "gold_chunks": gold_fn(r)}
    (out,) = ragec.classify_types(llm, [item], types, k=5, temperature=0.7, seed=10)
    assert sorted(seen) == [(10, 0.7), (11, 0.7), (12, 0.7), (13, 0.7), (14, 0.7)]
    assert (out["mode"], out["mode_freq"], out["n_invalid"], out["source"]) == ("E7", 3, 1, "llm")
    assert out["votes"] == ["E7", "E7", None, "E8", "E7"]

    silent = CallableLLM(lambda p, g: "I cannot tell.")
    (fb,) = ragec.classify_types(silent, [item], types, k=3, seed=0)
    assert (fb["mode"], fb["mode_freq"], fb["n_invalid"], fb["source"]) == ("E7", 0, 3, "grounded")


def test_prompt_shows_only_stage_relevant_context(types, gold_fn):
    r = record("Which river flows through Vienna?", supporting=["p1"], passed=["p3"])
    gen = ragec.build_type_messages(r, "Generation", types)[1]["content"]
    chunk = ragec.build_type_messages(r, "Chunking", types, gold_chunks=gold_fn(r))[1]["content"]
    assert "System answer (wrong): Rhine" in gen and "Paris" in gen and "E13 Misinterpretation" in gen
    assert "Rhine" not in chunk and "Vienna is the capital" in chunk and "E16" not in chunk


def test_grounded_generation_types():
    g = lambda **kw: ragec.grounded_type(dict(record("q?", passed=["p1"]), **kw), "Generation")  # noqa: E731
    assert g(metadata={"type": "unanswerable"}, golden_answers=["insufficient information"]) == "E9"
    assert g(golden_answers=["1642"], prediction="1,500 metres") == "E16"
    assert g(metadata={"type": "temporal"}) == "E15"
    assert g(prediction="insufficient information") == "E12"
    assert g(golden_answers=["river Danube"], prediction="Danube") == "E12"
    assert g(prediction="Austria") == "E13"
    assert g(prediction="Rhine") == "E10"


def test_run_ragec_and_reports(types, gold_fn):
    q = "Which river flows through the capital of Austria?"
    recs = [
        dict(record(q, supporting=["p1", "p2"], passed=["p1", "p2"]), id="a"),
        dict(record(q, supporting=["p1", "p2"], passed=["p1"], retrieved=["p1", "p2"]), id="b"),
        dict(record(q, supporting=["p2"], passed=["p3"]), id="c"),
        dict(record(q, supporting=["p1"], correct=True), id="d"),
    ]
    answers = {"Generation": "E13", "Reranking": "E7", "Chunking": "E3"}

    def fn(prompt, params):
        text = prompt[-1]["content"]
        stage = next(s for s in answers if ragec._STAGE_TASK[s][:40] in text)
        return answers[stage]

    res = ragec.run_ragec(CallableLLM(fn), recs, types, chunk_gold_fn=gold_fn, k=2, seed=0)
    assert [(r["id"], r["stage"], r["mode"], r["mode_freq"]) for r in res] == [
        ("a", "Generation", "E13", 2), ("b", "Reranking", "E7", 2), ("c", "Chunking", "E3", 2)]
    assert ragec.stage_counts(res) == {"Chunking": 1, "Retrieval": 0, "Reranking": 1, "Generation": 1}
    assert ragec.mode_frequency_table(res, 2) == {1: 0, 2: 3}

    table = ragec.distribution_table(res, types)
    by_label = {row["label"]: row for row in table}
    assert by_label["E3 Context Mismatch"]["mode"] == 1 and by_label["E4 Missed Retrieval"]["mode"] == 0
    assert by_label["Percentage Generation"]["mode"] == pytest.approx(100 / 3)
    assert by_label["Total"]["mode"] == 3 and len(table) == 16 + 4 + 1
    grouped = ragec.distribution_table(res, types, group_key="question_type")
    assert grouped[-1]["factual"] == 3

    tags = {("testbed", "a"): ["Inaccurate or Misunderstood Response"],
            ("testbed", "b"): ["Irrelevant Information"],
            ("testbed", "c"): None}
    agr = ragec.tier1_agreement(res, tags, types)
    # a: side and type agree; b: side agrees (retrieval), type does not (E7 -> Incomplete Information).
    assert (agr["n"], agr["n_critic_correct"], agr["n_missing"]) == (2, 1, 0)
    assert (agr["side_agreement"], agr["type_agreement"]) == (1.0, 0.5)
    assert agr["by_stage"]["Reranking"] == {"Irrelevant Information": 1}


def test_run_ragec_without_llm_uses_grounded_rules(types, gold_fn):
    r = record("Which river flows through the capital of Austria?", supporting=["p1", "p2"], passed=["p1"],
               retrieved=["p1", "p2"])
    (res,) = ragec.run_ragec(None, [r], types, chunk_gold_fn=gold_fn, k=5)
    assert (res["stage"], res["mode"], res["source"], res["votes"]) == ("Reranking", "E7", "grounded", [])


def test_critic_tier1_labels_from_parses_and_workflow_steps():
    from ragcritic_lib.critic.critics import CriticParse

    recs = [{"id": "a", "dataset": "tb"}, {"id": "b", "dataset": "tb"}, {"id": "c", "dataset": "tb"}]
    parses = [CriticParse("Error", tag1=["Irrelevant Information"]), CriticParse("Correct"), {"Judgement": None}]
    assert ragec.critic_tier1_labels(recs, parses) == {
        ("tb", "a"): ["Irrelevant Information"], ("tb", "b"): None, ("tb", "c"): None}
    results = [{"steps": [{"critic": {"judgement": "Error", "tag1": ["X"]}}, {"critic": {}}]}, {"steps": []}]
    assert ragec.first_round_critiques(results) == [{"judgement": "Error", "tag1": ["X"]}, {}]


def test_ragec_summary_reports_invalid_votes_and_flags_degenerate_runs():
    rows = [{"dataset": "testbed", "n_valid": 1, "n_invalid": 3, "source": "llm", "stage": "Generation"},
            {"dataset": "trivia", "n_valid": 0, "n_invalid": 4, "source": "grounded", "stage": "Reranking"},
            {"dataset": "trivia", "n_valid": 3, "n_invalid": 1, "source": "llm", "stage": "Retrieval"}]
    s = ragec.ragec_summary(rows, 4, reranking_stage=True)
    assert (s["errors"], s["votes"], s["invalid_votes"], s["grounded_fallbacks"]) == (3, 12, 8, 1)
    assert s["invalid_vote_rate"] == pytest.approx(8 / 12)
    assert s["invalid_vote_rate_by_dataset"] == {"testbed": 0.75, "trivia": 0.625}
    assert s["stages"] == {"Chunking": 0, "Retrieval": 1, "Reranking": 1, "Generation": 1}
    assert s["degenerate"] == ["ragec: 8 of 12 votes (67%) name no type of the blamed stage"]
    # Exactly half invalid is not degenerate; a pipeline without a reranker is.
    half = ragec.ragec_summary(rows[2:] + [dict(rows[0], n_valid=3, n_invalid=3)], 4, reranking_stage=False)
    assert half["invalid_vote_rate"] == 0.4
    assert half["degenerate"] == ["ragec: the diagnosed pipeline has no reranking stage, so E7/E8 cannot be chosen"]


class _Ranked:
    """A retriever returning fixed hits (the first stage, or the reranked top k)."""

    def __init__(self, ids):
        self.ids, self.calls = ids, []

    def search(self, queries, k):
        from ragcritic_lib.retrieval import Hit

        self.calls.append(k)
        return [[Hit(i, 1.0, TEXT[i]) for i in self.ids[:k]] for _ in queries]


def test_reranked_records_make_the_reranking_stage_reachable(types, gold_fn):
    q = "Which river flows through the capital of Austria?"
    # Standard RAG's record: its own answer and a judged flag that must not leak into the new run.
    old = dict(record(q, supporting=["p1", "p2"], passed=["p1", "p2"]), correct=True, prediction="Danube")
    llm = CallableLLM(lambda p, g: "So the final answer is: Rhine")
    first, reranked = _Ranked(["p1", "p3", "p2", "p4"]), _Ranked(["p3", "p1"])
    (new,) = ragec.reranked_records(llm, [old], reranked=reranked, first_stage=first, depth=4, k=2)
    assert "correct" not in new and new["prediction"] == "Rhine" and new["em"] == 0.0
    assert [p["id"] for p in new["passages"]] == ["p3", "p1"] and [p["id"] for p in new["retrieved"]] == [
        "p1", "p3", "p2", "p4"]
    assert (first.calls, reranked.calls) == ([4], [2])
    with pytest.raises(ValueError, match="record 'q' has no judged 'correct' flag"):
        ragec.run_ragec(None, [new], types, chunk_gold_fn=gold_fn, k=0)  # the new answer is not judged yet
    (judged,) = mark_correct([new], metric="truth", threshold=0.5)
    assert judged["correct"] is False  # "Rhine" where the gold is "Danube"
    (res,) = ragec.run_ragec(None, [judged], types, chunk_gold_fn=gold_fn, k=0)
    assert (res["stage"], res["mode"]) == ("Reranking", "E7")  # p2 was retrieved, then dropped
    assert ragec.same_answer_keys([old], [new]) == set()
    assert ragec.same_answer_keys([old], [dict(new, prediction="the Danube.")]) == {("testbed", "q")}


def test_params_ask_ten_votes_with_a_reranking_stage():
    from ragcritic_lib.pipeline.params import load_params

    section = load_params()["ragec"]
    assert section["votes"] == 10 and section["rerank"] is True


# --------------------------------------------------------------------- constrained voting
def test_constrained_votes_are_draws_from_the_scored_type_ids(types, gold_fn):
    offered = []

    def score_fn(prompt, options):
        offered.append(list(options))
        return [0.0 if o == "E8" else -4.0 for o in options]

    llm = CallableLLM(lambda p, g: "never asked", score_fn=score_fn)
    r = record("Which river flows through the capital of Austria?", supporting=["p1", "p2"], passed=["p1"],
               retrieved=["p1", "p2"])
    item = {"record": r, "stage": "Reranking", "gold_chunks": gold_fn(r)}
    (out,) = ragec.classify_types(llm, [item], types, k=10, temperature=0.7, seed=3, voting="constrained")
    assert offered == [["E7", "E8"]]  # only the blamed stage's ids
    assert out["n_invalid"] == 0 and out["n_valid"] == 10 and out["source"] == "llm"
    assert set(out["votes"]) <= {"E7", "E8"} and out["mode"] == "E8" and out["mode_freq"] >= 8
    again = ragec.classify_types(llm, [item], types, k=10, temperature=0.7, seed=3, voting="constrained")
    assert again[0]["votes"] == out["votes"]  # seeded
    with pytest.raises(ValueError, match="ragec.voting"):
        ragec.classify_types(llm, [item], types, k=2, voting="majority")


def test_draw_votes_temperature_and_nucleus():
    ids = ["E9", "E10", "E11"]
    assert ragec.draw_votes([-2.0, -0.1, -3.0], ids, k=4, temperature=0.0, top_p=1.0, seed=0) == ["E10"] * 4
    # top_p 0.5 keeps only the most probable id; a flat distribution at top_p 1 draws all of them.
    assert set(ragec.draw_votes([0.0, -1.0, -1.0], ids, k=50, temperature=1.0, top_p=0.5, seed=1)) == {"E9"}
    assert set(ragec.draw_votes([0.0, 0.0, 0.0], ids, k=200, temperature=1.0, top_p=1.0, seed=1)) == set(ids)
    with pytest.raises(ValueError, match="scores for"):
        ragec.draw_votes([0.0], ids, k=1, temperature=1.0, top_p=1.0, seed=0)


def test_constrained_voting_refuses_ids_that_prefix_each_other():
    with pytest.raises(ValueError, match="'E1' of stage Generation is a prefix of 'E10'"):
        ragec._check_prefix_free(["E1", "E10"], "Generation")


def test_summary_flags_one_modal_type_for_every_error_of_a_stage():
    rows = [{"dataset": "testbed", "n_valid": 4, "n_invalid": 0, "source": "llm", "stage": "Generation", "mode": "E9"}
            for _ in range(5)]
    s = ragec.ragec_summary(rows, 4, reranking_stage=True)
    assert s["degenerate"] == ["ragec: all 5 Generation errors get the same modal type E9"]
    varied = rows[:4] + [dict(rows[0], mode="E12")]
    assert ragec.ragec_summary(varied, 4, reranking_stage=True)["degenerate"] == []
    assert ragec.ragec_summary(rows[:4], 4, reranking_stage=True)["degenerate"] == []  # too few to tell


def test_params_and_library_name_the_same_votings():
    from ragcritic_lib.pipeline.params import RAGEC_VOTINGS

    assert set(RAGEC_VOTINGS) == set(ragec.VOTINGS)


def test_ragec_metrics_gather_the_summary_answers_agreement_and_cost():
    from ragcritic_lib.baselines import MeteredLLM

    rows = [{"dataset": "testbed", "n_valid": 3, "n_invalid": 1, "source": "llm", "stage": "Generation",
             "mode": "E13", "mode_freq": 3},
            {"dataset": "testbed", "n_valid": 0, "n_invalid": 0, "source": "grounded", "stage": "Reranking"}]
    summary = ragec.ragec_summary(rows, 4, reranking_stage=True)
    meter = MeteredLLM(CallableLLM(lambda prompt, params: "E13"))
    with meter.dataset("testbed"):
        meter.generate(["Which stage?", "And this one?"])
    answers = {"testbed": {"answers": 10, "wrong": 2, "diagnosed": 2}}
    agreement = {"n": 1, "side_agreement": 1.0, "type_agreement": 0.0}
    metrics = ragec.ragec_metrics(summary, answers=answers, mode_frequency=ragec.mode_frequency_table(rows, 4),
                                  agreement=agreement, same_answer={("testbed", "a"), ("testbed", "b")}, meter=meter,
                                  diagnosis_seconds=201.849, undiagnosed={"over max_errors (2)": 3})
    assert list(metrics) == [*summary, "answers", "undiagnosed", "mode_frequency", "agreement", "critic_source",
                             "same_answer_questions", "cost", "cost_by_dataset", "seconds"]
    assert {k: metrics[k] for k in summary} == summary
    assert metrics["mode_frequency"] == {1: 0, 2: 0, 3: 1, 4: 0}
    assert metrics["undiagnosed"] == {"over max_errors (2)": 3}
    assert metrics["stage_types"] == {"Generation": {"n": 1, "types": {"E13": 1}}, "Reranking": {"n": 1, "types": {}}}
    assert (metrics["answers"], metrics["agreement"], metrics["critic_source"]) == (answers, agreement, "notebook 08 critic")
    assert (metrics["same_answer_questions"], metrics["seconds"]) == (2, {"diagnosis": 201.8})
    assert metrics["cost"] == meter.cost() and metrics["cost"]["calls"] == 2
    assert metrics["cost_by_dataset"] == meter.cost_by_dataset() and list(metrics["cost_by_dataset"]) == ["testbed"]


def test_select_errors_takes_every_wrong_answer_or_a_spread_subset_and_says_why():
    recs = [{"id": str(i), "prediction": "x", "correct": i % 4 == 0, "question_type": f"t{i // 10}"}
            for i in range(40)]   # 30 wrong, sorted by type
    every, left = ragec.select_errors(recs, 0)
    assert len(every) == 30 and left == {}
    assert ragec.select_errors(recs, 30) == (every, {})
    some, left = ragec.select_errors(recs, 8, seed=3)
    assert len(some) == 8 and left == {"over max_errors (8)": 22}
    assert [r["id"] for r in some] == sorted((r["id"] for r in some), key=int)   # order kept
    assert len({r["question_type"] for r in some}) > 1        # not the first eight, all of one type
    assert ragec.select_errors(recs, 8, seed=3) == (some, left)
    with pytest.raises(ValueError, match="ragec.max_errors"):
        ragec.select_errors(recs, -1)


def test_undiagnosed_reasons_count_left_out_and_voteless_answers():
    rows = [{"mode": "E13"}, {"mode": None}, {"mode": ""}]
    assert ragec.undiagnosed_reasons({"over max_errors (3)": 5}, rows) == {"over max_errors (3)": 5, "no valid vote": 2}
    assert ragec.undiagnosed_reasons({}, rows[:1]) == {}
