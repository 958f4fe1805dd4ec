"""How a critic's written verdict maps to Correct / Error: whole words only, None when unclear."""

import pytest

from ragcritic_lib.critic.critics import CORRECT, ERROR, _norm_judgement, parse_critic_output


@pytest.mark.parametrize("value", [
    "Correct", "correct", "CORRECT", "  Correct. ", '"Correct"', "Correct, but incomplete",
    "right", "True", "TRUE!", "Correct\n\nThe answer matches the passage.",
])
def test_correct_words(value):
    assert _norm_judgement(value) == CORRECT


@pytest.mark.parametrize("value", [
    "Error", "error", "ERROR!", "Errors", "Erroneous", "Incorrect", "INCORRECT.", "incorrect answer",
    "wrong", "False", "not correct", "Not Correct!", "not right", "not-true", "Error: the date is off",
])
def test_error_words(value):
    assert _norm_judgement(value) == ERROR


@pytest.mark.parametrize(("value", "expected"), [
    ("Cor", CORRECT), ("Corr", CORRECT), ("Correc", CORRECT), ("Err", ERROR), ("erro", ERROR), ("Err...", ERROR),
])
def test_cut_off_verdict_is_read_as_its_word(value, expected):
    assert _norm_judgement(value) == expected


@pytest.mark.parametrize("value", [
    # Other words that merely start like a verdict.
    "Corrupted", "corrupt", "Correctly", "Corrected", "Correctness", "Errorless", "Errand", "Erratic",
    "Rightly", "Truest", "Wrongful", "Falsehood", "Incorrectly",
    # Too short to be a cut-off verdict, or a cut-off followed by more text.
    "Co", "Er", "E", "Cor rupted", "Err maybe",
    # Negations other than "not <correct-word>", and hedges.
    "not wrong", "not an error", "not", "Not sure", "isn't correct", "Partially correct",
    "The answer is correct", "Unknown", "N/A",
    # Empty or not a written verdict.
    "", "   ", "!!!", "123", None, True, False, 1, ["Correct"], {"Judgement": "Correct"},
])
def test_anything_else_is_unknown(value):
    assert _norm_judgement(value) is None


def test_parser_does_not_read_corrupted_as_correct():
    # The regex fallback (no JSON object) and the JSON path both go through the same mapping.
    assert parse_critic_output("Judgement: Corrupted passage").judgement is None
    p = parse_critic_output('{"Judgement": "Corrupted"}')
    assert p.judgement is None and p.parse_error == "bad_judgement"
    assert parse_critic_output('{"Judgement": "Errorless"}').judgement is None
    assert parse_critic_output('{"Judgement": "not correct"}').judgement == ERROR
    assert parse_critic_output('{"Judgement": "Corr').judgement == CORRECT
