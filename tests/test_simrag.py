"""SIM-RAG: self-practice loop, balancing, question split, critics, inference loop."""

from __future__ import annotations

import json

import pytest

from ragcritic_lib.baselines import simrag
from ragcritic_lib.llm import CallableLLM, GenParams
from ragcritic_lib.retrieval.rag import answer_gen_params, build_rag_messages, run_standard_rag
from ragcritic_lib.retrieval import Hit

Q = {"id": "q1", "question": "Which river flows through Vienna?", "golden_answers": ["Danube"],
     "metadata": {"dataset": "testbed"}}
HITS = [Hit("d1", 2.0, "Vienna\nThe Danube flows through Vienna."), Hit("d2", 1.0, "Rhine\nThe Rhine is long.")]
GEN, QRY = GenParams(max_new_tokens=32), GenParams(max_new_tokens=12)


class FakeRetriever:
    def __init__(self):
        self.calls = []

    def search(self, queries, k):
        self.calls.append((list(queries), k))
        return [HITS[:k] for _ in queries]


def reasoner(prompt, params):
    user = prompt[-1]["content"]
    if "Write one short search query" in user:
        return 'Query: "danube vienna"\nextra'
    found = "The Danube flows" in user
    if "explain what the information above says" in user:  # SIM-RAG's rationale prompt
        return "Passage says Danube." if found else "I guess."
    # standard RAG's answer prompt (default variant) over the passages found so far
    return "Passage says Danube.\nSo the final answer is: Danube" if found else "I guess.\nSo the final answer is: Rhine"


def test_parsers():
    assert simrag.parse_rationale("Because X.\nSo the final answer is: Danube.") == "Because X."
    assert simrag.parse_rationale("  Because X. ") == "Because X." and simrag.parse_rationale("") == ""
    assert simrag.parse_query('  \nSearch query: "river Vienna"\n', "q?") == "river Vienna"
    assert simrag.parse_query("???", "fallback question") == "fallback question"


def test_self_practice_algorithm_1():
    llm, ret = CallableLLM(reasoner), FakeRetriever()
    exs = simrag.self_practice(llm, ret, [Q], max_turns=3, gen_params=GEN, query_params=QRY, docs_per_turn=1)
    assert [(e["turn"], e["label"], e["answer"], len(e["context"])) for e in exs] == [
        (0, "Reject", "Rhine", 0), (1, "Accept", "Danube", 1), (2, "Accept", "Danube", 2)]
    # Seen documents are skipped: the second search adds d2, not d1 again.
    assert [c["doc_ids"] for c in exs[2]["context"]] == [["d1"], ["d2"]]
    assert exs[1]["context"][0]["query"] == "danube vienna" and exs[1]["rationale"] == "Passage says Danube."
    # T answers with T rationales, and T - 1 searches (the unused search after the last answer is skipped).
    assert llm.stats.calls == 8 and len(ret.calls) == 2


def test_initial_docs_and_match_metric():
    exs = simrag.self_practice(CallableLLM(reasoner), FakeRetriever(), [Q], max_turns=1, gen_params=GEN,
                               query_params=QRY, initial_docs=1, match_fn=simrag.make_match_fn("f1", 0.5))
    assert [(e["label"], len(e["context"])) for e in exs] == [("Accept", 1)]
    with pytest.raises(ValueError, match="match metric"):
        simrag.make_match_fn("bleu")


def test_the_match_is_the_projects_judge_truth_included():
    truth = simrag.make_match_fn("truth", 0.5)
    meta = {"other_options": ["Ruddale"]}
    assert truth("Yellfield was founded earlier than Ruddale", ["Yellfield"], meta)
    assert not truth("Yellfield or Ruddale", ["Yellfield"], meta)
    assert truth("Yellfield or Ruddale", ["Yellfield"])  # without metadata it cannot see the rival
    # An abstention is right where every gold is one, under every metric (as the judge has it).
    for metric in ("em", "f1", "acc", "truth"):
        fn = simrag.make_match_fn(metric, 0.5)
        assert fn("I don't know", ["insufficient information"]) and not fn("I don't know", ["Danube"])
    # The examples carry the question's metadata, so a truth match sees the other option.
    rec = dict(Q, metadata={"other_options": ["Rhine"]})
    exs = simrag.self_practice(CallableLLM(reasoner), FakeRetriever(), [rec], max_turns=1, gen_params=GEN,
                               query_params=QRY, initial_docs=1, match_fn=truth)
    assert exs[0]["metadata"] == {"other_options": ["Rhine"]}
    assert simrag.OracleCritic(truth).accept([{"answer": "Danube, not Rhine", "golden_answers": ["Danube"],
                                               "metadata": {"other_options": ["Rhine"]}},
                                              {"answer": "Danube or Rhine", "golden_answers": ["Danube"],
                                               "metadata": {"other_options": ["Rhine"]}}]) == [True, False]


def _ex(qid, label, turn=0):
    return {"qid": qid, "label": label, "turn": turn}


def test_balance_labels_downsample():
    exs = [_ex("a", "Accept"), _ex("b", "Reject"), _ex("c", "Reject"), _ex("d", "Reject"), _ex("e", "Accept")]
    out = simrag.balance_labels(exs, seed=0, mode="downsample")
    assert [e["label"] for e in out].count("Accept") == 2 and [e["label"] for e in out].count("Reject") == 2
    assert {"a", "e"} <= {e["qid"] for e in out}
    assert [e["qid"] for e in out] == sorted(e["qid"] for e in out)  # original order kept
    assert out == simrag.balance_labels(exs, seed=0, mode="downsample")
    even = [_ex("a", "Accept"), _ex("b", "Reject")]
    assert simrag.balance_labels(even, mode="downsample") == even == simrag.balance_labels(even)
    assert simrag.balance_labels([_ex("a", "Reject")]) == [_ex("a", "Reject")]


def test_balance_labels_oversample_keeps_every_example_and_repeats_the_minority_evenly():
    exs = [_ex("a", "Accept"), _ex("e", "Accept")] + [_ex(f"r{i}", "Reject") for i in range(7)]
    out = simrag.balance_labels(exs, seed=3)
    assert out[:len(exs)] == exs  # the originals first, in order
    labels = [e["label"] for e in out]
    assert labels.count("Accept") == labels.count("Reject") == 7 and len(out) == 14
    repeats = [e["qid"] for e in out[len(exs):]]
    assert sorted({q: repeats.count(q) for q in repeats}.values()) == [2, 3]  # 5 repeats over 2 examples
    assert out == simrag.balance_labels(exs, seed=3)
    with pytest.raises(ValueError, match="simrag.balance must be one of"):
        simrag.balance_labels(exs, mode="smote")


def test_split_by_question_keeps_turns_together():
    exs = [_ex(q, "Accept", t) for q in "abcdefghij" for t in range(3)]
    train, held = simrag.split_by_question(exs, heldout_frac=0.3, seed=1)
    tq, hq = {e["qid"] for e in train}, {e["qid"] for e in held}
    assert not tq & hq and len(hq) == 3 and len(tq) == 7 and len(train) == 21
    assert simrag.split_by_question(exs, heldout_frac=0.3, seed=1) == (train, held)
    t2, h2 = simrag.split_by_question([_ex("a", "Accept"), _ex("b", "Reject")], heldout_frac=0.0)
    assert len(t2) == 1 and len(h2) == 1


def test_split_by_question_stratifies_on_accepted_questions():
    # 40 questions, 4 of them with an Accept: a 30% held-out side gets 1 of those 4, not 0 or 4 by chance.
    exs = [_ex(f"q{i:02d}", "Accept" if i < 4 and t == 2 else "Reject", t) for i in range(40) for t in range(3)]
    for seed in range(20):
        train, held = simrag.split_by_question(exs, heldout_frac=0.3, seed=seed)
        held_acc = {e["qid"] for e in held if e["label"] == "Accept"}
        train_acc = {e["qid"] for e in train if e["label"] == "Accept"}
        assert len(held_acc) == 1 and len(train_acc) == 3
        assert len({e["qid"] for e in held}) == 1 + 11  # round(0.3 x 4) + round(0.3 x 36)
        assert not {e["qid"] for e in train} & {e["qid"] for e in held}
    unstratified = [len({e["qid"] for e in simrag.split_by_question(exs, heldout_frac=0.3, seed=s, stratify=False)[1]
                         if e["label"] == "Accept"}) for s in range(20)]
    assert set(unstratified) != {1}  # by chance alone the held-out Accept count varies


def test_confusion_matrix():
    cm = simrag.confusion_matrix(["Accept", "Accept", "Reject", "Reject", "Reject"], [True, False, True, False, False])
    assert {k: cm[k] for k in ("correct_accept", "correct_reject", "wrong_accept", "wrong_reject", "n")} == {
        "correct_accept": 1, "correct_reject": 1, "wrong_accept": 1, "wrong_reject": 2, "n": 5}
    assert cm["accuracy"] == 0.6 and cm["shares"]["wrong_reject"] == 0.4
    assert (cm["n_correct"], cm["accept_rate_correct"], cm["n_wrong"]) == (2, 0.5, 3)
    assert cm["accept_rate_wrong"] == pytest.approx(1 / 3)
    lo, hi = cm["accept_rate_wrong_ci"]
    assert lo < 1 / 3 < hi and 0 <= lo and hi <= 1
    only_wrong = simrag.confusion_matrix(["Reject", "Reject"], [False, False])
    assert only_wrong["accept_rate_correct"] is None and only_wrong["accept_rate_correct_ci"] is None
    assert only_wrong["accept_rate_wrong"] == 0.0


def test_wilson_interval():
    lo, hi = simrag.wilson_interval(1, 7)
    assert lo == pytest.approx(0.0257, abs=1e-3) and hi == pytest.approx(0.5131, abs=1e-3)
    assert simrag.wilson_interval(0, 0) is None
    lo, hi = simrag.wilson_interval(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-3)
    with pytest.raises(ValueError):
        simrag.confusion_matrix(["Accept"], [])


def _labelled(answer, ctx_doc, label, qid):
    return {"qid": qid, "question": Q["question"], "golden_answers": ["Danube"], "turn": 0,
            "context": [{"query": "q", "doc": ctx_doc}] if ctx_doc else [], "answer": answer, "rationale": "",
            "label": label}


def test_classifier_critic_learns_grounding():
    train = []
    for i in range(6):
        train.append(_labelled("Danube", "The Danube flows through Vienna.", "Accept", f"a{i}"))
        train.append(_labelled(f"Guess{i}", "", "Reject", f"r{i}"))
    critic = simrag.ClassifierCritic().fit(train)
    assert critic.accept(train) == [x["label"] == "Accept" for x in train]
    const = simrag.ClassifierCritic().fit([_labelled("x", "", "Reject", "1")])
    assert const.accept(train[:2]) == [False, False]
    with pytest.raises(RuntimeError):
        simrag.ClassifierCritic().accept(train[:1])


def test_llm_critic_parsing():
    assert simrag.parse_verdict(" accept.") == "Accept" and simrag.parse_verdict("REJECTED") == "Reject"
    assert simrag.parse_verdict("maybe") is None
    critic = simrag.LLMSufficiencyCritic(CallableLLM(lambda p, g: "Accept" if "Danube" in p[-1]["content"] else "hmm"))
    exs = [_labelled("Danube", "", "Accept", "1"), _labelled("Rhine", "", "Reject", "2")]
    assert critic.accept(exs) == [True, False] and critic.invalid == 1
    sft = simrag.critic_sft_examples(exs)
    assert sft[0]["messages"][-1] == {"role": "assistant", "content": "Accept"}
    assert "Danube" not in sft[1]["messages"][1]["content"].split("Proposed answer:")[0]  # no gold shown


class Always:
    def __init__(self, value):
        self.value = value

    def accept(self, examples):
        return [self.value] * len(examples)


def test_inference_loop_stops_when_critic_accepts():
    oracle = simrag.simrag_infer(CallableLLM(reasoner), FakeRetriever(), [Q], simrag.OracleCritic(), max_turns=3,
                                 gen_params=GEN, query_params=QRY, docs_per_turn=1)[0]
    assert (oracle["prediction"], oracle["simrag_turns"], oracle["simrag_accepted"]) == ("Danube", 2, True)
    assert [h["accepted"] for h in oracle["simrag_history"]] == [False, True]

    never = simrag.simrag_infer(CallableLLM(reasoner), FakeRetriever(), [Q], Always(False), max_turns=3,
                                gen_params=GEN, query_params=QRY, docs_per_turn=1)[0]
    assert (never["prediction"], never["simrag_turns"], never["simrag_accepted"]) == ("Danube", 3, False)
    assert len(never["simrag_context"]) == 2

    first = simrag.simrag_infer(CallableLLM(reasoner), FakeRetriever(), [Q], Always(True), max_turns=3,
                                gen_params=GEN, query_params=QRY)[0]
    assert (first["prediction"], first["simrag_turns"], first["simrag_context"]) == ("Rhine", 1, [])


def test_critic_features_ignore_the_turn_index():
    # The same answer, context and rationale at turn 0 and at turn 2 must look identical to the
    # critic; otherwise it learns "accept late turns" instead of judging the information.
    early = _labelled("Danube", "The Danube flows through Vienna.", "Accept", "a")
    late = {**early, "turn": 2}
    assert simrag.dense_features(early) == simrag.dense_features(late)
    assert simrag.critic_text(early) == simrag.critic_text(late)
    assert "turn" not in simrag.DENSE_FEATURES and "n_searches" not in simrag.DENSE_FEATURES
    assert len(simrag.dense_features(early)) == len(simrag.DENSE_FEATURES)


def test_practice_summary_counts_and_flags():
    exs = [{**_ex(f"q{i // 3}", "Accept" if i % 3 == 2 else "Reject", turn=i % 3), "dataset": "testbed"}
           for i in range(210)]
    ok = simrag.practice_summary(exs, min_examples=200)
    assert (ok["examples"], ok["questions"], ok["accept"], ok["reject"], ok["degenerate"]) == (210, 70, 70, 140, [])
    assert ok["label_accept_rate_by_turn"] == {0: {"n": 70, "accept_rate": 0.0}, 1: {"n": 70, "accept_rate": 0.0},
                                               2: {"n": 70, "accept_rate": 1.0}}
    # Oversampling: the critic learns from all 210 distinct examples, the 70 Accept repeated to 140.
    assert (ok["train_examples"], ok["train_accept"], ok["train_reject"]) == (210, 70, 140)
    assert (ok["balance"], ok["distinct_train"], ok["balanced_train"]) == ("oversample", 210, 280)
    assert len(simrag.balance_labels(exs)) == ok["balanced_train"]
    # Downsampling: 2 x 70 Accept = 140 distinct examples, fewer than 200.
    down = simrag.practice_summary(exs, min_examples=200, balance="downsample")
    assert (down["distinct_train"], down["balanced_train"]) == (140, 140)
    assert len(simrag.balance_labels(exs, mode="downsample")) == down["balanced_train"]
    assert down["degenerate"] == ["simrag: the critic learns from 140 distinct examples (70 Accept, 140 Reject among "
                                  "210 training examples, the 140 Reject downsampled to the 70 Accept; 210 "
                                  "self-practice examples in all), fewer than 200"]
    # With the question split, only the training side counts.
    train, _ = simrag.split_by_question(exs, heldout_frac=0.5, seed=0)
    split = simrag.practice_summary(exs, min_examples=140, train=train)
    assert split["examples"] == 210 and split["train_examples"] == len(train) == 105
    assert split["distinct_train"] == 105 and split["balanced_train"] == 2 * split["train_reject"] == 140
    assert split["degenerate"] == ["simrag: the critic learns from 105 distinct examples (35 Accept, 70 Reject among "
                                   "105 training examples; 210 self-practice examples in all), fewer than 140"]
    # Enough examples, but a handful of the rarer label repeated many times.
    rare = [{**_ex(f"q{i}", "Accept" if i < 8 else "Reject"), "dataset": "testbed"} for i in range(240)]
    few = simrag.practice_summary(rare, min_examples=200, min_minority=20)
    assert few["degenerate"] == ["simrag: the critic's training examples hold 8 Accept examples (of 240), fewer than "
                                 "20: each is repeated about 29 times to balance"]
    rejects = [e for e in exs if e["label"] == "Reject"]
    one = simrag.practice_summary(rejects, min_examples=100)
    assert one["degenerate"] == ["simrag: self-practice produced no Accept example (140 examples: 0 Accept, "
                                 "140 Reject): the critic can only predict one label"]
    assert one["balanced_train"] == one["distinct_train"] == 0
    with pytest.raises(ValueError, match="no Accept example"):
        simrag.practice_summary(rejects, strict=True)
    with pytest.raises(ValueError, match="simrag.balance must be one of"):
        simrag.practice_summary(exs, balance="weights")
    # Both labels in the practice data, but none of the Accept ones on the training side.
    lopsided = simrag.practice_summary(exs, min_examples=10, train=rejects[:50])
    assert lopsided["degenerate"] == ["simrag: the critic's training examples have no Accept example (50 of 210 "
                                      "self-practice examples: 0 Accept, 50 Reject): the critic can only predict "
                                      "one label"]
    with pytest.raises(ValueError, match="training examples have no Accept"):
        simrag.practice_summary(exs, train=rejects[:50], strict=True)


class ByTurn:
    """Accepts exactly the answers at the given turns (a critic that reads the turn)."""

    def __init__(self, turns):
        self.turns = set(turns)

    def accept(self, examples):
        return [e["turn"] in self.turns for e in examples]


def test_critic_report_per_turn_confusion_and_degenerate():
    held = [{**_labelled("Danube", "", "Accept" if t else "Reject", f"h{i}"), "turn": t}
            for i, t in enumerate([0, 0, 1, 1])]
    rep = simrag.critic_report(ByTurn({1}), held)
    assert rep["confusion"]["correct_accept"] == 2 and rep["confusion"]["wrong_reject"] == 2
    assert rep["heldout_accept_rate_by_turn"] == {0: {"n": 2, "accept_rate": 0.0, "label_accept_rate": 0.0},
                                                  1: {"n": 2, "accept_rate": 1.0, "label_accept_rate": 1.0}}
    assert rep["degenerate"] == ["simrag: the critic accepts every held-out answer at turn 1 (2 answers)"]
    infer = simrag.simrag_infer(CallableLLM(reasoner), FakeRetriever(), [Q, {**Q, "id": "q2"}], Always(True),
                                max_turns=3, gen_params=GEN, query_params=QRY)
    rep = simrag.critic_report(Always(True), held[:1], infer)
    assert rep["inference_accept_rate_by_turn"] == {0: {"n": 2, "accept_rate": 1.0}}
    assert rep["degenerate"] == ["simrag: the critic accepts every held-out answer at turn 0 (1 answers)",
                                 "simrag: the critic accepts every inference answer at turn 0 (2 answers)",
                                 "simrag: no held-out example has a correct answer (1 held-out examples), so how "
                                 "often the critic accepts right answers is not measured"]
    never = simrag.critic_report(Always(False), held)
    assert never["degenerate"] == ["simrag: the critic never accepts (4 verdicts)"]
    given = simrag.critic_report(None, held, accepted=[False, False, True, False])  # the critic is not asked
    assert given["heldout_accept_rate_by_turn"][1]["accept_rate"] == 0.5 and given["degenerate"] == []
    with pytest.raises(ValueError, match="differ in length"):
        simrag.critic_report(None, held, accepted=[True])


def _recording(prompts, seen):
    """A reader that records prompts and decoding: a prefilled answer turn gets " Danube." plus
    more text (cut at the newline by the prefill setting); anything else a rationale."""
    def fn(prompt, params):
        prompts.append(prompt)
        seen.append(params)
        return " Danube.\nand more" if prompt[-1]["role"] == "assistant" else "Passage [1] names the Danube."
    return fn


def test_answer_is_standard_rags_for_the_same_passages():
    answer = answer_gen_params("prefill", 20)
    prompts, seen = [], []
    (out,) = simrag.simrag_infer(CallableLLM(_recording(prompts, seen)), FakeRetriever(), [Q], Always(True),
                                 max_turns=3, gen_params=GEN, query_params=QRY, answer_params=answer,
                                 rag_variant="prefill", max_passage_words=50, initial_docs=2)
    std_prompts, std_seen = [], []
    (std,) = run_standard_rag(CallableLLM(_recording(std_prompts, std_seen)), [Q], retriever=None, hits=[HITS], k=2,
                              variant="prefill", gen_params=answer, max_passage_words=50)
    # The same passages give standard RAG's prompt, decoding and extraction, hence its answer.
    assert prompts[0] == std_prompts[0] == build_rag_messages(Q["question"], [h.contents for h in HITS],
                                                              variant="prefill", max_passage_words=50)
    assert seen == [answer, GEN] and std_seen == [answer]  # then the rationale, free text with gen_params
    assert (out["prediction"], out["raw_output"], out["followed_prefix"]) == (
        std["prediction"], std["raw_output"], std["followed_prefix"]) == ("Danube", " Danube.", True)
    assert out["simrag_history"][0]["rationale"] == "Passage [1] names the Danube."
    rationale = prompts[1][-1]["content"]
    assert "Proposed answer: Danube" in rationale and "Search 1:" in rationale  # SIM-RAG's own prompt


def test_later_turns_answer_over_every_passage_found():
    prompts, seen = [], []
    exs = simrag.self_practice(CallableLLM(_recording(prompts, seen)), FakeRetriever(), [Q], max_turns=3,
                               gen_params=GEN, query_params=QRY, rag_variant="prefill", docs_per_turn=1)
    answers = [p for p in prompts if p[-1]["role"] == "assistant"]
    found = [HITS[0].contents, HITS[1].contents]  # one new document per search, in the order found
    assert answers == [build_rag_messages(Q["question"], found[:n], variant="prefill") for n in range(3)]
    assert simrag.context_passages(exs[2]["context"]) == found
    # Without answer_params the answers take the variant's setting at gen_params' length.
    assert seen[0] == answer_gen_params("prefill", GEN.max_new_tokens)
    assert [e["answer"] for e in exs] == ["Danube"] * 3


def _practice_meter():
    from ragcritic_lib.baselines import MeteredLLM

    meter = MeteredLLM(CallableLLM(lambda prompt, params: "Danube"))
    with meter.dataset("testbed"):
        meter.generate(["a", "b", "c"])
    with meter.dataset("trivia"):
        meter.generate(["d"])
    return meter


def test_simrag_training_with_the_llm_critic_adds_its_heldout_calls_and_its_fit():
    from ragcritic_lib.critic.training import TrainResult

    res = TrainResult("out/critic", True, "base", steps=93, seconds=468.24, examples=370)
    training = {"llm_critic": {"steps": 93, "seconds_per_step": 5.03, "epochs": 1.01, "rows": 370, "heldout_calls": 90},
                "classifier_critic": {"seconds": 0.185, "rows": 370}}
    block = simrag.simrag_training(training, practice_meter=_practice_meter(), practice_seconds=179.71,
                                   critic_seconds=488.3, critic="llm", critic_result=res)
    assert block == {"calls": 94, "seconds": 668.0, "by_dataset": {"testbed": {"calls": 3}, "trivia": {"calls": 1}},
                     "what": "self-practice answers and queries, critic fine-tuning and its held-out check",
                     "optimizer_seconds": 468.2, **training}
    assert list(block) == ["calls", "seconds", "by_dataset", "what", "optimizer_seconds", "llm_critic", "classifier_critic"]


def test_simrag_training_with_the_classifier_critic_takes_its_fit_time():
    training = {"classifier_critic": {"seconds": 0.185, "rows": 12}}
    block = simrag.simrag_training(training, practice_meter=_practice_meter(), practice_seconds=0.04,
                                   critic_seconds=0.0, critic="classifier")
    assert (block["calls"], block["seconds"], block["optimizer_seconds"]) == (4, 0.0, 0.185)
    assert block["classifier_critic"] == {"seconds": 0.185, "rows": 12} and "llm_critic" not in block


def test_simrag_info_labels_the_practice_confusions_and_turn_tables():
    llm_c = simrag.confusion_matrix(["Accept", "Reject"], [True, True])
    cls_c = simrag.confusion_matrix(["Accept", "Reject"], [True, False])
    held, infer = {0: {"n": 2, "accept_rate": 0.5, "label_accept_rate": 0.0}}, {0: {"n": 1, "accept_rate": 1.0}}
    report = {"confusion": llm_c, "heldout_accept_rate_by_turn": held, "inference_accept_rate_by_turn": infer,
              "degenerate": ["x"]}
    info = simrag.simrag_info(critic="llm", practice=[{}, {}, {}], practice_info={"accept": 1}, balanced=[{}, {}],
                              confusions={"llm": llm_c, "classifier": cls_c}, report=report)
    critic = {"name": "llm", "balanced_train": 2, "distinct_train": 0, "train_accept": 0, "train_reject": 0,
              "heldout": {"n": 2, "n_correct": 1, "n_wrong": 1, "accept_rate_correct": 1.0,
                          "accept_rate_correct_ci": llm_c["accept_rate_correct_ci"], "accept_rate_wrong": 1.0,
                          "accept_rate_wrong_ci": llm_c["accept_rate_wrong_ci"], "accuracy": 0.5}}
    assert info == {"critic": critic, "practice_examples": 3, "practice": {"accept": 1}, "balanced_train": 2,
                    "heldout_confusion": llm_c, "heldout_confusion_by_critic": {"llm": llm_c, "classifier": cls_c},
                    "accept_rate_by_turn": {"heldout_accept_rate_by_turn": held, "inference_accept_rate_by_turn": infer}}
    assert list(info) == ["critic", "practice_examples", "practice", "balanced_train", "heldout_confusion",
                          "heldout_confusion_by_critic", "accept_rate_by_turn"]
    with pytest.raises(KeyError):
        simrag.simrag_info(critic="classifier", practice=[], practice_info={}, balanced=[], confusions={"llm": llm_c},
                           report=report)


def test_classifier_scores_are_reject_log_odds_that_agree_with_its_verdicts():
    train = []
    for i in range(6):
        train.append(_labelled("Danube", "The Danube flows through Vienna.", "Accept", f"a{i}"))
        train.append(_labelled(f"Guess{i}", "", "Reject", f"r{i}"))
    critic = simrag.ClassifierCritic().fit(train)
    scores = critic.scores(train)
    assert [s < 0 for s in scores] == critic.accept(train) == [x["label"] == "Accept" for x in train]
    assert simrag.ClassifierCritic().fit(train[1:2]).scores(train[:2]) == [1.0, 1.0]  # Reject only


def test_probe_critic_fits_on_frozen_states_and_accepts_where_reject_log_odds_are_negative(tmp_path):
    torch = pytest.importorskip("torch")
    from test_llm import _write_tiny_model

    torch.set_num_threads(1)
    base = _write_tiny_model(tmp_path / "base")
    train = []
    for i in range(10):
        train.append(_labelled("Danube", f"The Danube flows through Vienna, page {i}.", "Accept", f"a{i}"))
        train.append(_labelled(f"Guess number {i} about rivers", "", "Reject", f"r{i}"))
    critic = simrag.ProbeSufficiencyCritic(base, layer=1, seed=0).fit(train)
    assert critic.probe["n"] == 20 and critic.probe["n_error"] == 10
    scores = critic.scores(train)
    assert [s < 0 for s in scores] == critic.accept(train)
    # the same example reads the same states alone as in a batch of any length
    assert critic.scores(train[:1]) == pytest.approx(scores[:1], abs=1e-4)
    folder = critic.save(tmp_path / "critic")
    doc = json.loads((folder / "probe.json").read_text())
    assert doc["layer"] == 1 and doc["base"]["params_key"] == "simrag.critic_base_model"
    one_label = simrag.ProbeSufficiencyCritic(base, layer=1).fit(train[1:2])
    assert one_label.accept(train[:3]) == [False] * 3
    with pytest.raises(RuntimeError, match="nothing fitted"):
        one_label.save(tmp_path / "x")
    with pytest.raises(ValueError, match="simrag.probe_layer: must lie in 1..2"):
        simrag.ProbeSufficiencyCritic(base, layer=3)


def test_stage_match_and_loop_settings_follow_the_params():
    params = {"error_sampling": {"judge_metric": "f1", "judge_threshold": 0.5}}
    judge = simrag.stage_match_fn(params, "judge", 1.0)
    assert judge("the Danube river", ["Danube"]) and not simrag.stage_match_fn(params, "em", 1.0)("the Danube river", ["Danube"])

    class Setup:
        gen = GEN
        answer_gen = answer_gen_params("prefill", 32)
        variant = "prefill"
        rag = {"max_passage_words": 60}

    kw = simrag.loop_settings(Setup(), max_turns=3, docs_per_turn=2, initial_docs=0)
    assert kw["query_params"].max_new_tokens == 24 and kw["query_params"].stop == ("\n",)
    assert (kw["gen_params"], kw["answer_params"], kw["rag_variant"], kw["max_passage_words"]) == (
        GEN, Setup.answer_gen, "prefill", 60)
    assert (kw["max_turns"], kw["docs_per_turn"], kw["initial_docs"]) == (3, 2, 0)
