import pytest

from ragcritic_lib.metrics import (
    accuracy, aggregate, aggregate_by, contains_answer, exact_match, normalize_answer,
    retrieval_recall, support_recall, token_f1,
)


def test_normalize_answer_squad_rules():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffel tower"
    assert normalize_answer("An apple, a day") == "apple day"
    assert normalize_answer("“Quoted” — dash") == "quoted dash"
    assert normalize_answer("") == ""


def test_exact_match_any_gold():
    assert exact_match("the Paris", ["London", "Paris"]) == 1.0
    assert exact_match("Paris, France", ["Paris"]) == 0.0
    assert exact_match("", [""]) == 1.0


def test_token_f1_exact_values():
    # pred tokens: [paris, france]; gold [paris] -> P=1/2, R=1 -> F1=2/3
    assert token_f1("Paris France", ["Paris"]) == pytest.approx(2 / 3)
    assert token_f1("new york city", ["York", "New York"]) == pytest.approx(0.8)
    assert token_f1("Berlin", ["Paris"]) == 0.0
    assert token_f1("", ["Paris"]) == 0.0


def test_accuracy_whole_words_not_substrings():
    assert accuracy("It is Paris.", ["paris"]) == 1.0
    assert accuracy("banana", ["a"]) == 0.0  # article removed and no whole-word hit
    assert accuracy("ion channel", ["Io"]) == 0.0
    assert contains_answer("born in 1999 in Oslo", ["1999"])


def test_retrieval_and_support_recall():
    assert retrieval_recall(["x y", "Paris is big"], ["Paris"]) == 1.0
    assert retrieval_recall([], ["Paris"]) == 0.0
    assert support_recall(["a", "b"], ["b", "c"]) == 0.5
    assert support_recall(["a"], []) is None


def test_aggregate_and_groups():
    recs = [
        {"em": 1.0, "f1": 1.0, "acc": 1.0, "metadata": {"type": "x"}},
        {"em": 0.0, "f1": 0.5, "acc": 0.0, "metadata": {"type": "y"}},
    ]
    assert aggregate(recs) == {"em": 0.5, "f1": 0.75, "acc": 0.5, "n": 2}
    assert aggregate_by(recs, "type")["y"] == {"em": 0.0, "f1": 0.5, "acc": 0.0, "n": 1}
