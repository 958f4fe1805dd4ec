"""The testbed wording benchmark (benchmarks/bench_testbed_wording.py): which attributes the
unanswerable questions ask, which answerable questions ask one of them, and the wording-only rows."""

from __future__ import annotations

from script_modules import load_script

bench = load_script("benchmarks/bench_testbed_wording.py")


def _q(text, answerable, withheld=None, attribute=None):
    facts = [{"entity_id": "e1", "attribute": attribute}] if attribute else []
    return {"question": text, "metadata": {"answerable": answerable, "withheld_attribute": withheld, "facts": facts}}


QUESTIONS = [_q("What net profit did A report?", False, withheld="net_profit"),
             _q("What net  profit did B report?", True, attribute="net_profit"),
             _q("Where is the  office of B?", True, attribute="hq"),
             _q("Who is the mayor of the town where B sits?", True, attribute="net_profit") | {"metadata": {
                 "answerable": True, "facts": [{"attribute": "net_profit"}, {"attribute": "mayor"}]}}]


def test_withheld_kinds_are_the_attributes_unanswerable_questions_ask():
    assert bench.withheld_kinds(QUESTIONS) == {"net_profit"}


def test_only_an_answerable_question_whose_asked_fact_is_withholdable_counts():
    kinds = bench.withheld_kinds(QUESTIONS)
    # The unanswerable one does not count, nor a multi-hop whose bridge (not its asked fact) is one.
    assert [bench.asks_withheld_kind(q, kinds) for q in QUESTIONS] == [False, True, False, False]


def test_wording_rows_carry_the_question_alone_and_the_label():
    rows = bench.wording_rows(QUESTIONS[:3])
    assert rows == [("What net profit did A report?", "", True), ("What net profit did B report?", "", False),
                    ("Where is the office of B?", "", False)]


def test_form_ceiling_ranks_every_other_form_below_and_ties_within_the_one_form():
    qs = [{"metadata": {"answerable": False, "type": "unanswerable"}},
          {"metadata": {"answerable": True, "type": "factual"}},
          {"metadata": {"answerable": True, "type": "multi_hop"}},
          {"metadata": {"answerable": True, "type": "comparison"}}]
    assert bench.form_ceiling(qs) == (2 + 0.5) / 3
    import pytest

    with pytest.raises(ValueError, match="needs answerable and unanswerable"):
        bench.form_ceiling(qs[1:])
