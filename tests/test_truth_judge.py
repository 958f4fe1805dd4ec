"""The truth judge on every kind of answer the audit draws (ragcritic_lib.evaluation.truth)."""

from __future__ import annotations

import pytest

from ragcritic_lib.evaluation.scoring import accuracy, token_f1
from ragcritic_lib.evaluation.truth import asserts, competing_values, truth_correct
from ragcritic_lib.mining.sampling import is_correct, judge_records

COMPARE = {"type": "comparison", "other_options": ["Dorovium Building"]}
GOLD = ["Plalbel Fabrics"]


@pytest.mark.parametrize(("answer", "right"), [
    ("Plalbel Fabrics has more employees than Dorovium Building.", True),   # verbose right sentence
    ("Plalbel Fabrics", True),                                             # terse right
    ("Plalbel Fabrics, not Dorovium Building", True),                      # "A, not B"
    ("Dorovium Building, not Plalbel Fabrics", False),                     # "B, not A"
    ("Plalbel Fabrics or Dorovium Building", False),                       # "A or B" restatement
    ("Both Plalbel Fabrics and Dorovium Building.", False),                # both options named
    ("Dorovium Building has more employees than Plalbel Fabrics.", False),  # the other option asserted
    ("Dorovium Building", False),
    ("Plalbel Fab", False),                                                # truncated answer
    ("Insufficient information.", False),                                  # abstention, answerable
])
def test_comparison_answers(answer, right):
    assert truth_correct(answer, GOLD, COMPARE) is right


def test_verbose_right_sentence_fails_f1_but_not_truth():
    answer = "Plalbel Fabrics has more employees than Dorovium Building."
    assert token_f1(answer, GOLD) < 0.5 and truth_correct(answer, GOLD, COMPARE)


def test_accuracy_credits_both_orders_the_truth_judge_only_one():
    gold, meta = ["Yellfield"], {"other_options": ["Ruddale"]}
    wrong = "Ruddale was founded earlier than Yellfield"
    assert accuracy(wrong, gold) == 1.0 and not truth_correct(wrong, gold, meta)
    assert truth_correct("Yellfield was founded earlier than Ruddale", gold, meta)


def test_numbers_sharing_a_unit_word_are_different_numbers():
    gold = ["627", "627 days"]
    assert token_f1("20 days", gold) == 0.5 and not truth_correct("20 days", gold)
    assert truth_correct("The gap was 627 days.", gold)
    assert not truth_correct("It lasted 1,627 days", gold)       # a longer number holding the digits


@pytest.mark.parametrize(("answer", "gold", "right"), [
    ("about 1200 staff", ["1,200"], True),                       # separators do not matter
    ("1,200", ["200"], False),                                   # "200" is not in "1,200"
    ("20.5", ["20"], False),
    ("45 million dollars", ["45,000,000"], True),                # scale words read as numbers
    ("$45 million", ["$45 million"], True),
    ("in the 1990s", ["1990"], False),                           # a number glued to letters
    ("It was founded in 1990.", ["1990"], True),
])
def test_numbers_are_compared_as_numbers(answer, gold, right):
    assert truth_correct(answer, gold) is right


def test_digits_glued_to_letters_inside_a_word_are_a_word_not_a_crash():
    # a timestamp's "02T00" and a superscript once raised ValueError and stopped a whole stage
    assert truth_correct("The meeting was on 2024-01-02T00:00.", ["2024"])
    assert not truth_correct("At 02T00 it closed", ["2"])
    assert not truth_correct("An area of 5 km²", ["52"])
    assert truth_correct("1e5 people", ["100,000"])                # as before: a float's spelling


def test_superseded_value_beside_the_current_one():
    gold, meta = ["4,300"], {"outdated_answers": ["3,900"]}
    assert accuracy("4,300 or 3,900", gold) == 1.0 and not truth_correct("4,300 or 3,900", gold, meta)
    assert not truth_correct("3,900", gold, meta)
    assert truth_correct("4,300 (formerly 3,900)", gold, meta)
    assert truth_correct("It has 4,300 residents, no longer 3,900.", gold, meta)


def test_near_duplicate_value():
    gold, meta = ["Tagus River", "Tagus"], {"distractor_answers": ["Douro River"]}
    assert truth_correct("It lies on the Tagus.", gold, meta)
    assert not truth_correct("Douro River", gold, meta)
    assert not truth_correct("the Tagus River or the Douro River", gold, meta)


def test_title_copy_is_right_only_when_the_title_is_the_gold():
    assert not truth_correct("Plalbel Fabrics Annual Report", ["Maria Oduya"])
    assert truth_correct("Maria Oduya", ["Maria Oduya"])


def test_abstentions():
    unans = ["insufficient information"]
    assert truth_correct("I don't know.", unans)
    assert truth_correct("The passages do not mention it.", unans)
    assert not truth_correct("It was founded in 1990.", unans)
    assert not truth_correct("Not mentioned, but probably 1990", ["1990"])   # abstains on an answerable one
    assert not truth_correct("", ["1990"])


def test_an_abstention_offering_a_competing_value_is_wrong_even_when_unanswerable():
    unans, meta = ["insufficient information"], {"distractor_answers": ["12"]}
    assert truth_correct("insufficient information", unans, meta)
    assert not truth_correct("insufficient information or 12", unans, meta)
    assert truth_correct("insufficient information; not 12", unans, meta)


def test_on_generated_testbed_questions_every_gold_form_is_right_and_every_competing_value_wrong():
    from ragcritic_lib import testbed as tb

    bed = tb.generate_testbed(tb.TestbedConfig(n_entities_per_domain=12))
    questions = [q for split in tb.SPLITS for q in bed.splits[split]]
    kinds = set()
    for q in questions:
        golds, meta = q["golden_answers"], q["metadata"]
        assert all(truth_correct(form, golds, meta) for form in golds), q["id"]
        for key in ("other_options", "outdated_answers", "distractor_answers"):
            for value in meta[key]:
                kinds.add(key)
                assert not truth_correct(value, golds, meta), (q["id"], key, value)
                assert not truth_correct(f"{golds[0]} or {value}", golds, meta), (q["id"], key, value)
                assert truth_correct(f"{golds[0]}, not {value}", golds, meta), (q["id"], key, value)
    assert kinds == {"other_options", "outdated_answers", "distractor_answers"}


def test_a_competitor_inside_the_gold_does_not_count():
    gold, meta = ["Ruddale Mills"], {"other_options": ["Ruddale"]}
    assert truth_correct("Ruddale Mills", gold, meta)
    assert not truth_correct("Ruddale", gold, meta)


def test_without_competing_values_it_is_accuracy_with_safeguards():
    assert truth_correct("The capital is Paris.", ["Paris"])
    assert not truth_correct("banana", ["a"])
    assert truth_correct("the US Army", ["U.S. Army"])
    assert not truth_correct("Paris", [])


def test_competing_values_skip_the_gold_and_read_every_key():
    meta = {"outdated_answers": ["3,900", "4,300"], "distractor_answers": "Douro", "other_options": ["X"]}
    assert competing_values(["4,300"], meta) == ["3,900", "Douro", "X"]
    assert competing_values(["a"], None) == []
    assert competing_values(["4,300"], {"outdated_answers": 3900, "other_options": {"b": "Ruddale"}}) == ["3900", "Ruddale"]


def test_a_short_form_inside_a_denied_long_form_is_denied_too():
    golds, meta = ["Dr Jonas Lowell", "Jonas Lowell"], {"outdated_answers": ["Dr Livia Ostrander", "Livia Ostrander"]}
    assert truth_correct("Dr Jonas Lowell, not Dr Livia Ostrander", golds, meta)
    assert not truth_correct("Dr Livia Ostrander, not Dr Jonas Lowell", golds, meta)


def test_asserts_reads_denial_words():
    assert asserts("not Paris", ["London", "Paris"]) is False
    assert asserts("London rather than Paris", ["Paris"]) is False
    assert asserts("Paris instead of London", ["London"]) is False


def test_is_correct_and_judge_records_use_the_truth_judge():
    rec = {"id": "q", "question": "Q", "prediction": "Plalbel Fabrics has more employees than Dorovium Building.",
           "golden_answers": GOLD, "metadata": COMPARE, "f1": 0.4, "retrieved": []}
    assert is_correct(rec, metric="truth") and not is_correct(rec, metric="f1")
    both = dict(rec, prediction="Plalbel Fabrics or Dorovium Building")
    assert [r["correct"] for r in judge_records([rec, both], metric="truth")] == [True, False]
