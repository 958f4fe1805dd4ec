"""The answerability-gate benchmark (benchmarks/bench_answerability.py): sentence units with their
titles, the support score as the best sentence's, a dev threshold by balanced accuracy, and the
gate restoring the reader's answer only where the abstain path fired and the gate refuses it."""

from __future__ import annotations

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_answerability.py")


def test_sentence_units_carry_their_passage_title():
    units = bench.sentence_units([{"contents": "Lake Baikal\nIt is deep. It is in Siberia."}, "No title here."])
    assert units == ["Lake Baikal. It is deep.", "Lake Baikal. It is in Siberia.", "No title here."]


def test_support_score_is_the_best_sentence_and_minus_inf_without_passages():
    def fake(queries, texts):  # the score: words of the question found in the sentence
        return [len(set(q.lower().split()) & set(t.lower().rstrip(".").split())) for q, t in zip(queries, texts)]

    got = bench.support_scores(fake, ["how deep is it", "who founded it"],
                               [["Lake\nIt is deep. Cold water.", "Other\nNothing."], []])
    assert got[0] == 3.0  # "it", "is", "deep"
    assert got[1] == float("-inf")


def test_threshold_separates_and_prefers_the_lower_cut_on_ties():
    t, bal = bench.fit_threshold([0.1, 0.2, 5.0, 6.0], [True, True, False, False])
    assert bal == 1.0 and t == 5.0  # score < 5.0 flags both unanswerable, no answerable
    t2, bal2 = bench.fit_threshold([1.0, 1.0], [True, False])
    assert bal2 == 0.5 and t2 == 1.0  # nothing separates: the lowest cut that reaches 0.5
    with pytest.raises(ValueError, match="both classes"):
        bench.fit_threshold([1.0, 2.0], [False, False])


def test_gate_restores_only_refused_firings():
    rows = [{"fired": True, "after": 0.0, "restored": 1.0}, {"fired": True, "after": 1.0, "restored": 0.0},
            {"fired": False, "after": 0.5, "restored": 0.5}]
    assert bench.gated_f1(rows, [False, True, False]) == [1.0, 1.0, 0.5]
    assert bench.gated_f1(rows, [True, True, True]) == [0.0, 1.0, 0.5]


def test_reader_prompt_keeps_a_prefill_and_opens_the_answer_slot_otherwise():
    prefilled = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "So the final answer is:"}]
    assert bench.reader_prompt(prefilled) == prefilled
    opened = bench.reader_prompt([{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"}])
    assert opened[-1] == {"role": "assistant", "content": "So the final answer is:"} and len(opened) == 3
    with pytest.raises(ValueError, match="no messages"):
        bench.reader_prompt([])
    with pytest.raises(ValueError, match="message 1 needs a role"):
        bench.reader_prompt([{"role": "user", "content": "Q?"}, {"content": "x"}])


def test_reader_abstain_scores_scores_the_abstention_beside_the_readers_answer():
    class Fake:
        def __init__(self):
            self.calls = []

        def score(self, prompts, options, desc=None):
            self.calls.append((prompts, options))
            return [[-1.0 * len(o[0].split()), -2.0 * len(o[1].split())] for o in options]

        def count_tokens(self, text):
            return len(text.split())

    llm = Fake()
    recs = [{"messages": [{"role": "user", "content": "Q?"}], "prediction": "  Lake   Baikal "}]
    got = bench.reader_abstain_scores(llm, recs)
    prompts, options = llm.calls[0]
    assert options == [[" insufficient information", " Lake Baikal"]]  # the answer's spaces normalized
    assert prompts[0][-1]["role"] == "assistant"
    assert got == [{"abstain": -2.0, "own": -4.0, "abstain_tokens": 2.0, "own_tokens": 2.0}]
    assert bench.reader_abstain_scores(llm, []) == [] and len(llm.calls) == 1  # no call for no records


def test_holds_answer_matches_whole_normalized_words_and_never_an_abstention():
    assert bench.holds_answer("Founded in 1960, it grew.", ["1960"])
    assert not bench.holds_answer("Founded in 19601.", ["1960"])
    assert bench.holds_answer("The Mayor is Adrian Carlhurst.", ["adrian carlhurst"])
    assert not bench.holds_answer("There is insufficient information here.", ["insufficient information"])
    assert not bench.holds_answer("a b c", ["a"])  # one character is too short to mean anything


def test_answerability_rows_label_each_view_from_the_gold_and_keep_their_owner():
    recs = [{"id": "a", "question": "When was it founded?", "golden_answers": ["1960"],
             "passages": [{"contents": "Komtrix\nIt was founded in 1960. It is big."}]},
            {"id": "b", "question": "Who sponsors it?", "golden_answers": ["insufficient information"],
             "passages": [{"contents": "Komtrix\nIt is big."}]}]
    rows, owner = bench.answerability_rows(recs, "passages")
    assert [y for *_, y in rows] == [False, True] and owner == [0, 1]
    assert rows[0][1] == "Komtrix. It was founded in 1960. Komtrix. It is big."
    rows, _ = bench.answerability_rows(recs, "question")
    assert [b for _, b, _ in rows] == ["", ""]
    rows, owner = bench.answerability_rows(recs, "sentences")
    # True means "this sentence does not answer": every sentence of an unanswerable question.
    assert [y for *_, y in rows] == [False, True, True] and owner == [0, 0, 1]
    with pytest.raises(ValueError, match="view must be one of"):
        bench.answerability_rows(recs, "title")
    with pytest.raises(ValueError, match="'c' has no question"):
        bench.answerability_rows([{"id": "c", "question": " "}], "passages")


def test_per_record_takes_the_best_supported_row_so_a_low_score_predicts_unanswerable():
    assert bench.per_record([2.0, -1.0, 3.0], [0, 0, 1], 2) == [1.0, -3.0]


def test_retrieve_records_adds_the_top_k_in_stage_01s_form():
    from ragcritic_lib.retrieval.base import Hit

    class FakeRetriever:
        def search(self, queries, k):
            return [[Hit(f"d{i}", 1.0 / (i + 1), f"T\n{q}") for i in range(k)] for q in queries]

    got = bench.retrieve_records(FakeRetriever(), [{"id": "x", "question": "why"}], 2)
    assert got[0]["id"] == "x" and [p["id"] for p in got[0]["passages"]] == ["d0", "d1"]
    assert got[0]["passages"][0] == {"id": "d0", "contents": "T\nwhy", "score": 1.0}
    assert bench.retrieve_records(FakeRetriever(), [], 2) == []


def test_contrast_rows_put_each_question_under_both_labels():
    recs = [{"question": "When was it founded?", "golden_answers": ["1960"],
             "passages": [{"contents": "K\nFounded in 1960."}, {"contents": "K\nIt is big."}, {"contents": "K\nIt is old."}]},
            {"question": "Who sponsors it?", "golden_answers": ["insufficient information"],
             "passages": [{"contents": "K\nIt is big."}, {"contents": "K\nIt is old."}]},
            {"question": "Where?", "golden_answers": ["Paris"],  # the answer is not in the top 1
             "passages": [{"contents": "K\nIt is big."}, {"contents": "K\nIn Paris."}]}]
    rows = bench.contrast_rows(recs, 1)
    assert rows == [("When was it founded?", "K. Founded in 1960.", False), ("When was it founded?", "K. It is big.", True)]
    # Two passages without the answer are needed for k=2 and the first record has them; none else qualifies.
    assert [y for *_, y in bench.contrast_rows(recs, 2)] == [False, True]
    assert bench.contrast_rows(recs, 3) == []
