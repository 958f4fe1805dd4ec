"""Label normalization of open-set tags (RAG-Critic 3.1.2) on small fixed inputs."""

import pytest

from ragcritic_lib.mining.tagging import normalize_tags, surface_form, tag_key


def test_tag_key_merges_case_space_and_punctuation_variants():
    variants = ["Missing evidence", "missing  evidence.", " MISSING-evidence ", '"missing evidence!"']
    assert {tag_key(v) for v in variants} == {"missing evidence"}
    assert surface_form('  "Missing   evidence." ') == "Missing evidence"


def test_normalize_tags_filters_in_order_with_exact_counts():
    long_tag = " ".join(["word"] * 26)
    ok_long = " ".join(["w"] * 25)
    tag_lists = [
        ["Missing evidence", "entity confusion", long_tag],
        ["missing evidence.", "Entity Confusion", "rare tag"],
        None,  # malformed teacher output
        ["MISSING EVIDENCE", "", 7, ok_long],
        ["missing evidence", "missing evidence", ok_long],
    ]
    out, rep = normalize_tags(tag_lists, alpha=2)
    assert out == [
        ["missing evidence", "Entity Confusion"],  # tie of two variants: "E" sorts first
        ["missing evidence", "Entity Confusion"],
        [],
        ["missing evidence", ok_long],
        ["missing evidence", ok_long],
    ]
    assert rep["outputs"] == 5
    assert rep["malformed_outputs"] == 1
    assert rep["raw_tags"] == 13
    assert rep["dropped_empty_or_non_string"] == 2
    assert rep["unique_after_merge"] == 5  # missing evidence, entity confusion, long, rare, ok_long
    assert rep["too_long_unique"] == 1 and rep["too_long_occurrences"] == 1
    assert rep["tags_after_length"] == 9  # the duplicate in record 5 counts once
    assert rep["below_alpha_unique"] == 1 and rep["below_alpha_occurrences"] == 1
    assert rep["final_tags"] == 8 and rep["final_unique"] == 3
    assert rep["records_without_tags"] == 1


def test_display_form_is_most_frequent_variant_then_alphabetical():
    out, _ = normalize_tags([["Entity Confusion"], ["entity confusion"], ["Entity Confusion"]], alpha=1)
    assert out == [["Entity Confusion"]] * 3
    out, _ = normalize_tags([["B tag"], ["b tag"]], alpha=1)
    assert out == [["B tag"], ["B tag"]]  # tie: "B tag" < "b tag"


def test_max_tokens_and_custom_token_counter():
    out, rep = normalize_tags([["a b c", "a b"]], alpha=1, max_tokens=2)
    assert out == [["a b"]] and rep["too_long_unique"] == 1
    out, _ = normalize_tags([["abcdef"]], alpha=1, max_tokens=2, count_tokens=lambda s: len(s) // 2)
    assert out == [[]]


def test_alpha_must_be_positive():
    with pytest.raises(ValueError):
        normalize_tags([["x"]], alpha=0)
