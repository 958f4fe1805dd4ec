"""Critic prompts, targets, the tolerant parser (malformed, truncated, adversarial) and critics."""

from __future__ import annotations

import json

import pytest

from ragcritic_lib.critic.critics import (
    CriticParse,
    HeuristicCritic,
    LLMCritic,
    build_critic_messages,
    critic_target,
    format_passages,
    parse_critic_output,
)
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.llm import CallableLLM, Generation
from ragcritic_lib.mining.taxonomy import load_taxonomy


@pytest.fixture(scope="module")
def tx():
    return load_taxonomy()


PASSAGES = [
    {"id": "d1", "contents": "Ada Lovelace\nAda Lovelace wrote the first published algorithm in 1843 for the engine."},
    {"id": "d2", "contents": "Charles Babbage\nBabbage designed the Analytical Engine."},
]
RECORD = {"id": "q1", "question": "Who wrote the first published algorithm?", "passages": PASSAGES,
          "prediction": "Ada Lovelace", "golden_answers": ["SECRET-GOLD"], "metadata": {"causes": ["x"]}}


# ------------------------------------------------------------------------------------ prompts
@pytest.mark.parametrize("variant", ["trained", "zeroshot"])
def test_prompt_holds_input_and_labels_but_never_the_gold(tx, variant: str) -> None:
    msgs = build_critic_messages(RECORD["question"], PASSAGES, RECORD["prediction"], taxonomy=tx, variant=variant)
    assert [m["role"] for m in msgs] == ["system", "user"]
    text = msgs[1]["content"]
    assert RECORD["question"] in text and "Ada Lovelace" in text
    assert all(label in text for label in tx.tier1 + tx.tier2)
    assert "SECRET-GOLD" not in json.dumps(msgs)


def test_trained_prompt_without_label_list(tx) -> None:
    msgs = build_critic_messages("q?", PASSAGES, "p", taxonomy=tx, variant="trained", label_list=False)
    assert not any(label in msgs[1]["content"] for label in tx.tier2)
    assert "tag1, tag2, tag3 and Error_analysis" in msgs[1]["content"]


def test_unknown_prompt_variant_is_an_error(tx) -> None:
    with pytest.raises(ValueError, match="'fancy'"):
        build_critic_messages("q", [], "p", taxonomy=tx, variant="fancy")


def test_passages_cut_to_budget() -> None:
    text = format_passages(PASSAGES + [{"contents": "T\nthird"}], top_k=2, passage_words=3)
    assert text == "[1] Ada Lovelace: Ada Lovelace wrote ...\n[2] Charles Babbage: Babbage designed the ..."
    assert format_passages([]) == "(no passages)"


# ------------------------------------------------------------------------------------ targets
def test_critic_target_orders_tags_before_analysis_and_cuts_it() -> None:
    rec = {"id": "e", "critic_target": {"Judgement": "Error", "Error_analysis": "one two three four",
                                        "tag1": ["A"], "tag2": ["B"], "tag3": ["c"]}}
    text = critic_target(rec, max_analysis_words=2)
    assert text == '{"Judgement": "Error", "tag1": ["A"], "tag2": ["B"], "tag3": ["c"], "Error_analysis": "one two"}'
    rec["critic_target"]["tag3"] = ["c", "d", "e"]
    assert json.loads(critic_target(rec, max_tag3=2))["tag3"] == ["c", "d"]
    assert critic_target({"id": "c", "correct": True}) == '{"Judgement": "Correct"}'
    assert json.loads(critic_target({"id": "s", "critic_target": '{"Judgement": "Correct"}'})) == {"Judgement": "Correct"}


def test_critic_target_without_labels_names_the_record() -> None:
    with pytest.raises(DataFormatError, match="record r7"):
        critic_target({"id": "r7", "question": "q"})
    with pytest.raises(DataFormatError, match="record r8: 'critic_target' is not valid JSON"):
        critic_target({"id": "r8", "critic_target": "{oops"})


# ------------------------------------------------------------------------------------ parsing
def test_parse_strict_error_critique(tx) -> None:
    text = json.dumps({"Judgement": "Error", "Error_analysis": "Missing doc.", "tag1": ["Incomplete Information"],
                       "tag2": ["Data Insufficiency in Retrieval"], "tag3": ["missing hop"]})
    p = parse_critic_output(text, tx)
    assert (p.judgement, p.tag1, p.tag2, p.tag3, p.analysis) == (
        "Error", ["Incomplete Information"], ["Data Insufficiency in Retrieval"], ["missing hop"], "Missing doc.")
    assert p.valid_json and p.parse_error is None and p.repairs == [] and p.unknown_labels == []


def test_parse_fenced_with_prose(tx) -> None:
    p = parse_critic_output('Here you go:\n```json\n{"Judgement": "Correct"}\n```\nHope this helps {not json}', tx)
    assert p.judgement == "Correct" and p.valid_json


def test_parse_single_quotes_trailing_commas_and_key_variants(tx) -> None:
    text = "{'judgment': 'incorrect', 'TAG1': ['incomplete response',], 'Tag 2': 'Omission of Key Information', " \
           "'Error analysis': \"the model's answer is vague\",}"
    p = parse_critic_output(text, tx)
    assert p.judgement == "Error"
    assert p.tag1 == ["Incomplete or Missing Response"]  # alias resolved through the taxonomy
    assert p.tag2 == ["Omission of Key Information"]  # a string given instead of a list
    assert p.analysis == "the model's answer is vague"
    assert not p.valid_json and {"single_quotes", "trailing_comma"} <= set(p.repairs)


def test_parse_truncated_keeps_what_is_complete(tx) -> None:
    text = '{"Judgement": "Error", "tag1": ["Irrelevant Information", "Overly Verbose Response"], "tag2": ["Irrelevant Inf'
    p = parse_critic_output(text, tx)
    assert p.judgement == "Error"
    assert p.tag1 == ["Irrelevant Information", "Overly Verbose Response"]
    assert p.tag2 == [] and p.unknown_labels == ["Irrelevant Inf"]
    assert "truncated" in p.repairs and p.parse_error is None


@pytest.mark.parametrize("text", ['{"Judgement": "Err', '{"Judgement":"Error","tag1":["Incomplete Informa'])
def test_parse_truncated_judgement_prefix(tx, text: str) -> None:
    assert parse_critic_output(text, tx).judgement == "Error"


def test_unknown_and_misplaced_labels_are_dropped_and_listed(tx) -> None:
    text = json.dumps({"Judgement": "Error", "tag1": ["Made Up Label", "Factual Inaccuracies", "erroneous information"],
                       "tag2": "Factual Inaccuracies; Entity and Concept Confusion, Nonsense"})
    p = parse_critic_output(text, tx)
    assert p.tag1 == ["Erroneous Information"]
    assert p.tag2 == ["Factual Inaccuracies", "Entity and Concept Confusion"]
    assert p.unknown_labels == ["Made Up Label", "Factual Inaccuracies", "Nonsense"]
    assert "tier2_label_in_tag1" in p.repairs


@pytest.mark.parametrize(
    ("text", "error"),
    [("", "empty"), ("   \n", "empty"), (None, "empty"), ("The answer looks fine to me.", "no_json"),
     ('{"Judgement": "Maybe"}', "bad_judgement"), ('{"verdict_of_model": 1}', "no_judgement"),
     ('{"Judgement": ', "bad_judgement"), ("[" * 5000, "no_json"), ("{" * 5000, "no_json"),
     ('{"Judgement": true}', "bad_judgement")],
)
def test_parse_failures_are_counted_not_raised(tx, text, error: str) -> None:
    p = parse_critic_output(text, tx)
    assert p.judgement is None and p.parse_error == error and not p.ok


def test_parse_never_evaluates_model_text(tx) -> None:
    text = "{'Judgement': __import__('os').system('echo pwned'), 'tag1': [open('/etc/passwd').read()]}"
    p = parse_critic_output(text, tx)
    assert p.judgement is None and p.tag1 == []


def test_parse_skips_objects_without_judgement_and_reads_nested(tx) -> None:
    p = parse_critic_output('Example {"a": 1}. Mine: {"Judgement": "Error", "tag1": ["Verbose Response"]}', tx)
    assert p.judgement == "Error" and p.tag1 == ["Overly Verbose Response"] and p.valid_json
    assert parse_critic_output('{"critique": {"judgement": "CORRECT"}}', tx).judgement == "Correct"


def test_parse_regex_fallback_and_bare_word(tx) -> None:
    p = parse_critic_output('Judgement: Error, tag1: ["Irrelevant Information"]', tx)
    assert p.judgement == "Error" and p.tag1 == ["Irrelevant Information"] and "regex" in p.repairs
    assert parse_critic_output("Correct.", tx).judgement == "Correct"
    assert parse_critic_output("Incorrect, the passage says otherwise", tx).judgement == "Error"


def test_parse_python_literals_and_unquoted(tx) -> None:
    p = parse_critic_output("{Judgement: Correct, extra: None}", tx)
    assert p.judgement == "Correct" and {"unquoted_key", "unquoted_value"} <= set(p.repairs)


def test_parse_without_taxonomy_keeps_labels() -> None:
    p = parse_critic_output('{"Judgement": "Error", "tag1": ["Anything"], "tag3": "a; b"}')
    assert p.tag1 == ["Anything"] and p.tag3 == ["a", "b"]


def test_critique_dict_roundtrip() -> None:
    p = CriticParse(judgement="Error", analysis="x", tag1=["A"], tag2=["B"], tag3=["c"], valid_json=True)
    assert CriticParse.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    assert p.to_critique() == {"Judgement": "Error", "Error_analysis": "x", "tag1": ["A"], "tag2": ["B"], "tag3": ["c"]}
    assert CriticParse(judgement="Correct").to_critique() == {"Judgement": "Correct"}


# ------------------------------------------------------------------------------------ critics
def test_llm_critic_batches_and_parses(tx) -> None:
    seen = []

    def fn(prompt, params):
        seen.append((prompt, params.max_new_tokens))
        if "Ada Lovelace" in prompt[-1]["content"].split("Answer to check:")[1]:
            return '{"Judgement": "Correct"}'
        return Generation(text='{"Judgement": "Error", "tag1": ["Incomplete Inf', prompt_tokens=5,
                          completion_tokens=96, finish_reason="length")

    critic = LLMCritic(CallableLLM(fn), tx, "trained", max_new_tokens=96)
    out = critic.critique([RECORD, {**RECORD, "id": "q2", "prediction": "Babbage"}])
    assert [p.judgement for p in out] == ["Correct", "Error"]
    assert "hit_token_limit" in out[1].repairs and out[1].tag1 == []
    assert len(seen) == 2 and all(n == 96 for _, n in seen)
    assert "SECRET-GOLD" not in json.dumps([p for p, _ in seen])


def test_llm_critic_shrinks_passages_to_token_budget(tx) -> None:
    long = [{"contents": "T\n" + " ".join(["word"] * 400)}]
    critic = LLMCritic(CallableLLM(lambda p, g: "{}"), tx, "trained", passage_words=200, max_prompt_tokens=300)
    msgs = critic.messages({"question": "q?", "passages": long, "prediction": "x"})
    assert sum(len(m["content"].split()) for m in msgs) <= 300
    assert "word " * 12 in msgs[1]["content"]  # passages shortened, not dropped


def _h(tx, prediction: str, passages=PASSAGES, question=RECORD["question"], **extra) -> CriticParse:
    return HeuristicCritic(tx).critique([{"question": question, "passages": passages, "prediction": prediction,
                                          **extra}])[0]


def test_heuristic_critic_rules(tx) -> None:
    assert _h(tx, "Ada Lovelace").judgement == "Correct"
    empty = _h(tx, "")
    assert (empty.judgement, empty.tag1, empty.tag2) == ("Error", ["Incomplete or Missing Response"],
                                                         ["Omission of Key Information"])
    assert _h(tx, "Insufficient information.").tag2 == ["Omission of Key Information"]
    off = _h(tx, "I don't know", question="What is the boiling point of mercury?")
    assert off.tag1 == ["Incomplete Information"]
    assert _h(tx, "Grace Hopper").tag2 == ["Factual Inaccuracies"]
    assert _h(tx, "Grace Hopper", question="Which river crosses Paris?").tag2 == ["Irrelevant Information Retrieval"]
    assert _h(tx, "Ada Lovelace", truncated=True).tag1 == ["Overly Verbose Response"]
    assert _h(tx, "the engine the engine the engine the engine the engine the engine the engine").tag2 == \
        ["Off-Topic and Redundant Responses"]
    assert _h(tx, "first published algorithm").tag2 == ["Lack of Practicality"]


def test_heuristic_critic_ignores_gold_answers(tx) -> None:
    a = HeuristicCritic(tx).critique([RECORD])[0]
    b = HeuristicCritic(tx).critique([{**RECORD, "golden_answers": ["Grace Hopper"], "correct": False,
                                       "evidence": {"gold_in_passages": False}}])[0]
    assert a == b


def test_critic_input_needs_prediction(tx) -> None:
    with pytest.raises(DataFormatError, match="missing key 'prediction'"):
        HeuristicCritic(tx).critique([{"id": "z", "question": "q"}])
