"""CRAG: relevance labels, features, thresholds and actions, strips, the pipeline end to end."""

from __future__ import annotations

import pytest

from ragcritic_lib.baselines import crag
from ragcritic_lib.llm import CallableLLM, GenParams
from ragcritic_lib.retrieval import Hit

Q = "Which river flows through Vienna?"


def test_relevance_label():
    tb = {"metadata": {"supporting_ids": ["d1"]}, "golden_answers": ["Danube"]}
    assert crag.relevance_label(tb, {"id": "d1", "contents": "nothing"}) == 1
    assert crag.relevance_label(tb, {"id": "d2", "contents": "the Danube"}) == 0
    trivia = {"metadata": {"type": "trivia"}, "golden_answers": ["Danube"]}
    assert crag.relevance_label(trivia, {"id": "x", "contents": "The Danube flows."}) == 1
    assert crag.relevance_label(trivia, {"id": "x", "contents": "The Danubes flow."}) == 0
    unans = {"metadata": {"answerable": False}, "golden_answers": ["Danube"]}
    assert crag.relevance_label(unans, {"id": "x", "contents": "The Danube flows."}) == 0


def test_pair_features_exact():
    f = crag.pair_features(Q, "The Danube flows through Vienna.", ce_score=2.0, rank=1, title="Danube")
    # overlap: flows, vienna of {river, flows, vienna}; bigrams: 2 of 4 question bigrams.
    assert f == [2.0, 0.5, pytest.approx(2 / 3), 0.5, 0.0]
    assert len(f) == len(crag.FEATURES)


@pytest.mark.parametrize("scores, action", [
    ([0.59], "Correct"), ([0.589], "Ambiguous"), ([-0.99], "Ambiguous"), ([-0.991], "Incorrect"),
    ([], "Incorrect"), ([-1.0, 0.6], "Correct"), ([-1.0, -0.5], "Ambiguous"),
])
def test_action_thresholds_at_the_boundaries(scores, action):
    assert crag.retrieval_action(scores, 0.59, -0.99) == action


def _f1(correct, ambiguous, incorrect):
    return {"Correct": correct, "Ambiguous": ambiguous, "Incorrect": incorrect}


def test_tune_thresholds_credits_each_action_with_its_measured_f1():
    # Each question does best with a different action: the tuning must open an Ambiguous band
    # between the thresholds (a fixed Ambiguous credit below 1 could never pick it here).
    scores = [[0.9], [0.2, -0.8], [-0.5]]
    f1 = [_f1(1.0, 0.5, 0.0), _f1(0.0, 1.0, 0.0), _f1(0.0, 0.0, 1.0)]
    best = crag.tune_thresholds(scores, f1, grid=[-1.0, 0.0, 0.5, 1.0])
    assert (best["upper"], best["lower"], best["dev_f1"]) == (0.5, 0.0, 1.0)
    assert best["actions"] == {"Correct": 1, "Ambiguous": 1, "Incorrect": 1}
    assert best["degenerate"] == [] and best["n"] == 3
    assert best["action_f1"] == {"Correct": pytest.approx(1 / 3), "Ambiguous": pytest.approx(0.5),
                                 "Incorrect": pytest.approx(1 / 3)}
    assert best["oracle_f1"] == 1.0 and best["all_actions"] == {"upper": 0.5, "lower": 0.0, "dev_f1": 1.0,
                                                                "dev_judge_acc": None}
    assert best["objective"] == "f1" and best["dev_judge_acc"] is None and best["oracle_judge_acc"] is None


def test_tune_thresholds_follow_the_judge_before_f1():
    # Two questions: by F1 Correct wins both (partial overlaps), but the judge calls only the
    # Incorrect action's answer right on the second; the judge's choice routes it there.
    scores = [[0.9], [-0.5]]
    f1 = [_f1(1.0, 0.0, 0.0), _f1(0.8, 0.0, 0.4)]
    right = [_f1(1.0, 0.0, 0.0), _f1(0.0, 0.0, 1.0)]
    by_f1 = crag.tune_thresholds(scores, f1, grid=[-1.0, 0.0, 1.0])
    by_judge = crag.tune_thresholds(scores, f1, action_right=right, grid=[-1.0, 0.0, 1.0])
    assert by_f1["actions"]["Incorrect"] == 0 and by_f1["dev_f1"] == pytest.approx(0.9)
    assert by_judge["objective"] == "judge_acc" and by_judge["dev_judge_acc"] == 1.0
    assert by_judge["actions"] == {"Correct": 1, "Ambiguous": 0, "Incorrect": 1}
    assert by_judge["dev_f1"] == pytest.approx(0.7) and by_judge["oracle_judge_acc"] == 1.0
    assert by_judge["action_judge_acc"] == {"Correct": 0.5, "Ambiguous": 0.0, "Incorrect": 0.5}
    with pytest.raises(ValueError, match=r"action_right\[1\] lacks the value of \['Incorrect'\]"):
        crag.tune_thresholds(scores, f1, action_right=[right[0], {"Correct": 0.0, "Ambiguous": 0.0}])


def test_tune_thresholds_reports_a_collapsed_action():
    # Ambiguous is never better than both others: the optimum drops it and says so, and the best
    # pair that still uses all three actions is reported with its lower F1.
    scores = [[0.9], [0.2], [-0.5]]
    f1 = [_f1(1.0, 0.5, 0.0), _f1(1.0, 0.5, 0.0), _f1(0.0, 0.5, 1.0)]
    best = crag.tune_thresholds(scores, f1, grid=[-1.0, 0.0, 1.0])
    assert best["dev_f1"] == 1.0 and best["actions"] == {"Correct": 2, "Ambiguous": 0, "Incorrect": 1}
    assert best["degenerate"] == ["crag: Ambiguous never chosen on dev at the best thresholds (f1)"]
    assert best["all_actions"]["dev_f1"] == pytest.approx(2.5 / 3)


def test_tune_thresholds_ties_prefer_more_actions():
    # All actions score the same: every pair ties, and the tie goes to a pair using all three.
    scores = [[0.9], [0.2], [-0.5]]
    best = crag.tune_thresholds(scores, [_f1(0.5, 0.5, 0.5)] * 3, grid=[-1.0, 0.0, 0.5, 1.0])
    assert best["actions"] == {"Correct": 1, "Ambiguous": 1, "Incorrect": 1} and best["degenerate"] == []
    assert -0.99 in crag.default_threshold_grid() and 0.59 in crag.default_threshold_grid()
    with pytest.raises(ValueError, match="differ in length"):
        crag.tune_thresholds([[0.1]], [])
    with pytest.raises(ValueError, match=r"action_f1\[0\] lacks the value of \['Ambiguous'\]"):
        crag.tune_thresholds([[0.1]], [{"Correct": 1.0, "Incorrect": 0.0}])


def test_split_strips_merges_short_sentences():
    text = "Title\nShort one. This is a longer sentence with words. Tiny end."
    assert crag.split_strips(text, min_words=4) == [
        "Short one. This is a longer sentence with words. Tiny end."]
    assert crag.split_strips(text, min_words=2) == ["Short one.", "This is a longer sentence with words.", "Tiny end."]
    assert crag.split_strips("T\nFirst long sentence here. Second long sentence here. x.", min_words=3) == [
        "First long sentence here.", "Second long sentence here. x."]


def test_select_and_recompose():
    scored = [(0, 0, 0.2), (0, 1, 0.9), (1, 0, 0.9), (1, 1, -0.8)]
    assert crag.select_strips(scored, top_strips=2, min_score=0.0) == [(0, 1), (1, 0)]
    assert crag.select_strips(scored, top_strips=5, min_score=0.0) == [(0, 0), (0, 1), (1, 0)]
    assert crag.select_strips([(0, 0, -0.9), (1, 0, -0.7)], top_strips=3, min_score=0.0) == [(1, 0)]
    assert crag.select_strips([], top_strips=3, min_score=0.0) == []
    out = crag.recompose(["A\nx", "B\ny"], [["a1.", "a2."], ["b1."]], [(0, 1), (1, 0), (0, 0)])
    assert out == ["A\na1. a2.", "B\nb1."]


def test_refine_knowledge_keeps_relevant_strips():
    lexical = crag.RetrievalEvaluator(None)  # 2 * overlap - 1
    zero = crag.make_ce_scorer(None)
    passages = ["Vienna\nVienna is a city of music and coffee. The Danube river flows through Vienna today."]
    (out,) = crag.refine_knowledge([Q], [passages], lexical, zero, top_strips=1, min_score=-0.5, min_words=5)
    assert out == ["Vienna\nThe Danube river flows through Vienna today."]
    # With the default 8-word minimum the 7-word last sentence joins the first: one strip.
    (whole,) = crag.refine_knowledge([Q], [passages], lexical, zero, top_strips=1, min_score=-0.5)
    assert whole == passages


def test_keyword_rewrites():
    assert crag.keyword_query("Which river flows through the capital of Austria?") == "river flows capital austria"
    assert crag.keyword_query("Which of them?") == "Which of them?"
    assert crag.parse_keywords("\n Keywords: Danube, Vienna river\nmore", Q) == "danube vienna river"
    assert crag.parse_keywords("!!!", Q) == "river flows vienna"


def test_train_evaluator_orders_and_falls_back():
    X = [[3.0, 1.0, 1.0, 0.5, 0.0], [2.5, 0.5, 0.8, 0.3, 0.0], [-3.0, 0.3, 0.0, 0.0, 0.0], [-2.0, 0.2, 0.1, 0.0, 0.0]]
    ev = crag.train_evaluator(X, [1, 1, 0, 0])
    s = ev.score(X)
    assert min(s[:2]) > max(s[2:]) and all(-1 <= v <= 1 for v in s)
    one = crag.train_evaluator(X, [0, 0, 0, 0])
    assert one.model is None and one.score([[0, 0, 0.5, 0, 0]]) == [0.0]


class FakeRetriever:
    name = "fake"

    def __init__(self, hits):
        self.hits, self.queries = hits, []

    def search(self, queries, k):
        self.queries.extend(queries)
        return [self.hits[:k] for _ in queries]


def test_run_crag_actions_end_to_end():
    good = {"id": "d1", "contents": "Danube\nThe Danube river flows through Vienna and Budapest."}
    bad = {"id": "d2", "contents": "Paris\nParis is the capital of France."}
    recs = [
        {"id": "1", "question": Q, "golden_answers": ["Danube"], "metadata": {}, "passages": [good, bad]},
        {"id": "2", "question": Q, "golden_answers": ["Danube"], "metadata": {}, "passages": [bad]},
    ]
    secondary = FakeRetriever([Hit("w1", 1.0, "Web\nVienna sits on the Danube river, which flows east.")])

    def fn(prompt, params):
        last = prompt[-1]["content"]
        return "So the final answer is: Danube" if "Danube" in last else "So the final answer is: Seine"

    out = crag.run_crag(CallableLLM(fn), recs, evaluator=crag.RetrievalEvaluator(None),
                        ce_scorer=crag.make_ce_scorer(None), secondary=secondary, upper=0.3, lower=-0.5,
                        gen_params=GenParams(max_new_tokens=16), k_secondary=1, top_strips=2)
    # Lexical scores: good passage covers all 3 concepts (+1.0); bad covers none (-1.0).
    assert [r["crag_action"] for r in out] == ["Correct", "Incorrect"]
    assert out[0]["crag_scores"] == [1.0, -1.0] and out[0]["crag_query"] is None
    assert out[0]["knowledge"] == ["Danube\nThe Danube river flows through Vienna and Budapest."]
    assert out[1]["crag_query"] == "river flows vienna" and secondary.queries == ["river flows vienna"]
    assert out[1]["knowledge"] == ["Web\nVienna sits on the Danube river, which flows east."]
    assert [r["prediction"] for r in out] == ["Danube", "Danube"]
    amb = crag.run_crag(CallableLLM(fn), recs[:1], evaluator=crag.RetrievalEvaluator(None),
                        ce_scorer=crag.make_ce_scorer(None), secondary=secondary, upper=1.1, lower=0.0,
                        gen_params=GenParams(max_new_tokens=16), k_secondary=1)
    assert amb[0]["crag_action"] == "Ambiguous" and len(amb[0]["knowledge"]) == 2


def test_measure_action_f1_and_tune_on_dev_use_each_actions_knowledge():
    good = {"id": "d1", "contents": "Danube\nThe Danube river flows through Vienna and Budapest."}
    recs = [{"id": "1", "question": Q, "golden_answers": ["Danube"], "metadata": {}, "passages": [good]}]
    secondary = FakeRetriever([Hit("w1", 1.0, "Web\nThe Rhine river flows through Basel, not Vienna.")])
    seen = []

    def fn(prompt, params):
        last = prompt[-1]["content"]
        seen.append(last)
        # Answers Danube only when the Danube strip is the sole passage: Ambiguous (both sources)
        # and Incorrect (second retrieval only) get the Rhine.
        return "So the final answer is: " + ("Rhine" if "Rhine" in last else "Danube")

    kw = dict(evaluator=crag.RetrievalEvaluator(None), ce_scorer=crag.make_ce_scorer(None), secondary=secondary,
              gen_params=GenParams(max_new_tokens=16), k_secondary=1)
    m = crag.measure_action_f1(CallableLLM(fn), recs, **kw)
    assert m["action_f1"] == [{"Correct": 1.0, "Ambiguous": 0.0, "Incorrect": 0.0}]
    assert m["predictions"] == [{"Correct": "Danube", "Ambiguous": "Rhine", "Incorrect": "Rhine"}]
    assert len(seen) == 3 and "Danube" in seen[1] and "Rhine" in seen[1]  # Ambiguous reads both sources
    assert secondary.queries == ["river flows vienna"]
    best = crag.tune_on_dev(CallableLLM(fn), recs, grid=[-1.0, 0.0, 1.0], **kw)
    assert best["actions"]["Correct"] == 1 and best["dev_f1"] == 1.0 and best["positive_rate"] == 1.0
    assert len(best["degenerate"]) == 2 and best["action_f1_per_question"] == m["action_f1"]
    assert m["action_right"] is None and best["objective"] == "f1"
    judged = crag.tune_on_dev(CallableLLM(fn), recs, grid=[-1.0, 0.0, 1.0], judge={"metric": "truth", "threshold": 0.5}, **kw)
    assert judged["objective"] == "judge_acc" and judged["dev_judge_acc"] == 1.0
    assert judged["action_judge_acc"] == {"Correct": 1.0, "Ambiguous": 0.0, "Incorrect": 0.0}
    assert crag.knowledge_of("Ambiguous", ["a"], ["b"]) == ["a", "b"]
    with pytest.raises(ValueError, match="unknown CRAG action"):
        crag.knowledge_of("Maybe", [], [])


def test_crag_training_counts_the_dev_answers_per_dataset():
    from ragcritic_lib.baselines import MeteredLLM

    meter = MeteredLLM(CallableLLM(lambda prompt, params: "Danube"))
    for ds, n in (("testbed", 3), ("trivia", 1)):
        with meter.dataset(ds):
            meter.generate([Q] * n)
    block = crag.crag_training(meter, tuning_seconds=35.74)
    assert block == {"calls": 4, "seconds": 35.7,
                     "by_dataset": {"testbed": {"calls": 3}, "trivia": {"calls": 1}},
                     "what": "dev answers for threshold tuning (the evaluator's fit makes no LLM call)"}
    assert list(block) == ["calls", "seconds", "by_dataset", "what"]
    idle = crag.crag_training(MeteredLLM(CallableLLM(lambda prompt, params: "")), tuning_seconds=0.04)
    assert (idle["calls"], idle["seconds"], idle["by_dataset"]) == (0, 0.0, {})


def test_actions_by_type_lists_every_action():
    recs = [{"metadata": {"type": "temporal"}, "crag_action": "Ambiguous"},
            {"metadata": {"type": "temporal"}, "crag_action": "Ambiguous"},
            {"metadata": {"type": "comparison"}, "crag_action": "Correct"}]
    assert crag.actions_by_type(recs) == {"comparison": {"Correct": 1, "Ambiguous": 0, "Incorrect": 0},
                                          "temporal": {"Correct": 0, "Ambiguous": 2, "Incorrect": 0}}
    assert crag.actions_by_type([]) == {}


def test_action_usage_says_why_an_action_is_rare():
    tuned = crag.tune_thresholds([[0.9], [0.2], [-0.5]], [_f1(1.0, 0.5, 0.0), _f1(1.0, 0.5, 0.0), _f1(0.0, 0.5, 1.0)],
                                 grid=[-1.0, 0.0, 1.0])
    usage = crag.action_usage({"Correct": 190, "Incorrect": 85, "Ambiguous": 5}, tuned)
    assert usage["shares"]["Ambiguous"] == pytest.approx(5 / 280) and usage["below_min"] == ["Ambiguous"]
    assert usage["why"]["Ambiguous"] == ("the dev-tuned thresholds sent 0 of 3 dev questions there; always taking it "
                                         "scores 0.500 dev f1 against the routing's 1.000")
    assert crag.action_usage({"Correct": 10}, None)["below_min"] == ["Ambiguous", "Incorrect"]
    assert crag.action_usage({}, None)["why"]["Correct"] == "no dev tuning recorded"
