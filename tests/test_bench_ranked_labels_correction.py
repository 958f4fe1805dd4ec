"""benchmarks/bench_ranked_labels_correction.py: the critic's most probable labels in place of its
greedy ones, and the count of unsupported-answer critiques by answerability."""

from __future__ import annotations

import json

from script_modules import load_script

from ragcritic_lib.critic.critics import ERROR, CriticParse

bench = load_script("benchmarks/bench_ranked_labels_correction.py")


class _LLM:
    """Scores a label list by how many of its labels the question names."""

    def score(self, prompts, options, desc=None):
        return [[float(sum(w in p[0]["content"] for w in json.loads(o.strip().rstrip(",")))) for o in opts]
                for p, opts in zip(prompts, options)]


class _Critic:
    name = "trained"

    def __init__(self):
        self.llm = _LLM()
        self.last_generations = ["g"]

    def messages(self, record):
        return [{"role": "user", "content": record["q"]}]

    def critique_errors(self, records):
        return [CriticParse(judgement=ERROR, analysis=f"about {r['q']}", tag1=["W"], tag2=["w1", "w2"], valid_json=True)
                for r in records]


def test_the_ranked_critique_keeps_the_analysis_and_names_the_most_probable_labels():
    tagger = bench.RankedLabelTagger(_Critic(), [("A",), ("B",)], [("x",), ("y",), ("x", "y")], k=1,
                                     order1=["A", "B"], order2=["y", "x"])
    out = tagger.critique_errors([{"q": "B x"}, {"q": "A y"}])
    assert [(p.tag1, p.tag2, p.analysis) for p in out] == [(["B"], ["x"], "about B x"), (["A"], ["y"], "about A y")]
    assert tagger.last_generations == ["g"] and tagger.name == "trained:ranked1"


def test_ranked_labels_come_most_probable_first_and_ties_follow_the_order():
    m = {"a": 0.2, "b": 0.5, "c": 0.2}
    assert bench.ranked_labels(m, 2, ["c", "a", "b"]) == ["b", "c"]
    assert bench.ranked_labels(m, 3, ["a", "b", "c"]) == ["b", "a", "c"]


def test_unsupported_critiques_are_counted_by_answerability_on_the_first_round():
    def rec(answerable, judgement, tag2):
        return {"metadata": {"answerable": answerable},
                "steps": [{"critic": {"judgement": judgement, "tag2": tag2}}, {"critic": {"judgement": "Error",
                                                                                          "tag2": ["F"]}}]}

    run = [rec(True, "Error", ["F"]), rec(True, "Error", ["G"]), rec(True, "Correct", []),
           rec(False, "Error", ["F", "G"]), {"metadata": {}, "steps": []}]
    assert bench.unsupported_by_answerability(run, frozenset({"F"})) == {
        "answerable": {"error_critiques": 2, "unsupported": 1},
        "unanswerable": {"error_critiques": 1, "unsupported": 1}}


def test_the_unsupported_signal_ranks_unanswerable_questions_among_the_wrong_answers():
    def rec(q, prediction, answerable):
        return {"q": q, "question": q, "golden_answers": ["gold"], "prediction": prediction, "passages": [],
                "metadata": {"answerable": answerable}}

    critic = _Critic()
    tagger = bench.RankedLabelTagger(critic, [("A",)], [("F",), ("x",)], k=1, order1=["A"], order2=["x", "F"],
                                     watch=frozenset({"F"}))
    records = [rec("F F", "no", False), rec("x", "no", True), rec("x", "no", True), rec("F", "gold", True)]
    signal = bench.unsupported_signal(tagger, critic, records, {"metric": "acc", "threshold": 1.0}, seed=0)
    # the right answer is left out; the one unanswerable question has the most mass on "F"
    assert (signal["n"], signal["unanswerable"], signal["auroc"], signal["ranked_named"]) == (3, 1, 1.0, 1)
    assert signal["greedy_auroc"] == 0.5  # the fake critic's greedy labels never name "F"
