"""Grounded evidence and known causes on hand-made records."""

from ragcritic_lib.mining.evidence import compute_evidence, error_causes, is_abstention

PASSAGES = [
    {"id": "d1", "contents": "Douro\nThe Douro is a river of the Iberian Peninsula.", "score": 3.0},
    {"id": "d2", "contents": "Porto\nPorto lies on the estuary of the Douro river in Portugal.", "score": 2.0},
    {"id": "d3", "contents": "Lisbon\nLisbon lies on the Tagus estuary.", "score": 1.0},
]


def rag(prediction, golds=("Douro",), metadata=None, passages=PASSAGES, **kw):
    rec = {"id": "q1", "question": "Which river flows through Porto?", "golden_answers": list(golds),
           "metadata": metadata or {}, "passages": passages, "prediction": prediction,
           "followed_prefix": True, "truncated": False}
    rec.update(kw)
    return rec


def test_abstention_phrases():
    for text in ["insufficient information", "I don't know.", "Unknown", "The passages do not mention it",
                 "It cannot be determined from the context", "N/A"]:
        assert is_abstention(text), text
    for text in ["Douro", "", "the unknown soldier", "no"]:
        assert not is_abstention(text), text


def test_trivia_record_evidence():
    ev = compute_evidence(rag("Lisbon"))
    assert ev["gold_in_passages"] is True and ev["gold_passage_ranks"] == [0, 1]
    assert ev["prediction_in_passages"] is True and ev["prediction_passage_ranks"] == [2]
    assert ev["is_title_copy"] is True
    assert ev["abstained"] is False and ev["prediction_empty"] is False and ev["prediction_tokens"] == 1
    assert ev["verbose"] is False and ev["followed_prefix"] is True and ev["truncated"] is False
    assert ev["supporting_recall"] is None and ev["distractor_retrieved"] is None
    assert ev["known_causes"] == []  # no construction metadata
    assert error_causes(rag("Lisbon"), ev) == ["title_copy", "wrong_span_from_context"]


def test_gold_missing_and_unsupported_answer():
    rec = rag("Seine", golds=["Garonne"])
    ev = compute_evidence(rec)
    assert ev["gold_in_passages"] is False and ev["gold_passage_ranks"] == []
    assert ev["prediction_in_passages"] is False
    assert error_causes(rec, ev) == ["gold_not_retrieved", "unsupported_answer"]


def test_verbose_truncated_and_no_prefix():
    long_answer = " ".join(["word"] * 21)
    rec = rag(long_answer, followed_prefix=False, truncated=True, metadata={"answerable": True, "knobs": {}})
    ev = compute_evidence(rec)
    assert ev["verbose"] is True and ev["prediction_tokens"] == 21
    assert ev["known_causes"] == ["answer_not_extracted", "verbose_or_truncated"]
    # 20 tokens is not verbose for a short gold; a long gold raises the bar (3x its length)
    assert compute_evidence(rag(" ".join(["w"] * 20)))["verbose"] is False
    assert compute_evidence(rag(long_answer, golds=[" ".join(["g"] * 8)]))["verbose"] is False


def test_testbed_unanswerable_causes():
    meta = {"answerable": False, "type": "unanswerable", "supporting_ids": [], "knobs": {}}
    answered = rag("1931", golds=["insufficient information"], metadata=meta)
    ev = compute_evidence(answered)
    assert ev["gold_in_passages"] is False  # the abstention gold is not evidence
    assert ev["known_causes"] == ["unanswerable_answered"]
    assert "gold_not_retrieved" not in error_causes(answered, ev)
    abstained = rag("Insufficient information.", golds=["insufficient information"], metadata=meta)
    assert compute_evidence(abstained)["known_causes"] == []


def test_testbed_support_recall_causes():
    base = {"answerable": True, "type": "multi_hop", "knobs": {}}
    none = compute_evidence(rag("x", metadata={**base, "supporting_ids": ["z1", "z2"]}))
    assert none["supporting_recall"] == 0.0 and none["known_causes"] == ["supporting_not_retrieved"]
    half = compute_evidence(rag("x", metadata={**base, "supporting_ids": ["d2", "z2"]}))
    assert half["supporting_recall"] == 0.5 and half["known_causes"] == ["partial_support"]
    split = compute_evidence(rag("x", metadata={**base, "supporting_ids": ["d2", "z2"],
                                                "knobs": {"split_fact": True}}))
    assert split["known_causes"] == ["split_fact"]
    full = compute_evidence(rag("Douro", metadata={**base, "supporting_ids": ["d2"]}))
    assert full["supporting_recall"] == 1.0 and full["known_causes"] == []
    refused = compute_evidence(rag("I do not know", metadata={**base, "supporting_ids": ["d2"]}))
    assert refused["known_causes"] == ["abstained_when_answerable"]


def test_testbed_distractor_and_outdated():
    meta = {"answerable": True, "type": "factual", "supporting_ids": ["d2"], "knobs": {"distractor": 1},
            "distractor_ids": ["d3"], "distractor_answers": ["Tagus"]}
    ev = compute_evidence(rag("Tagus", metadata=meta))
    assert ev["distractor_retrieved"] is True
    assert ev["known_causes"] == ["distractor_entity"]
    assert "entity_mismatch" not in error_causes(rag("Tagus", metadata=meta), ev)
    # retrieved but not used: no known cause, an evidence cause instead
    ev2 = compute_evidence(rag("Seine", metadata=meta))
    assert ev2["known_causes"] == [] and "entity_mismatch" in error_causes(rag("Seine", metadata=meta), ev2)
    # distractor identified through corpus metadata (entity ids) instead of passage ids
    meta3 = {"answerable": True, "supporting_ids": ["d2"], "knobs": {}, "distractor_entity_ids": ["e9"]}
    pmeta = {"d3": {"entity_ids": ["e9"]}, "d2": {"entity_ids": ["e1"]}}
    ev3 = compute_evidence(rag("Tagus", metadata=meta3), passage_meta=pmeta)
    assert ev3["distractor_retrieved"] is True and ev3["known_causes"] == ["distractor_entity"]
    no_distractor = compute_evidence(rag("Douro", metadata={"answerable": True, "knobs": {}}))
    assert no_distractor["distractor_retrieved"] is False
    outdated = {"answerable": True, "supporting_ids": ["d2"], "knobs": {"conflict": True},
                "outdated_answers": ["Tagus"]}
    assert compute_evidence(rag("Tagus", metadata=outdated))["known_causes"] == ["outdated_statement"]


def test_key_point_coverage_and_summary_cause():
    meta = {"type": "summary", "key_points": ["Douro", "Portugal", "estuary"]}
    rec = rag("The Douro flows in Portugal", metadata=meta)
    ev = compute_evidence(rec)
    assert ev["key_point_coverage"] == 2 / 3
    assert "incomplete_summary" in error_causes(rec, ev)
    # An answer stating none of the points is wrong, not incomplete.
    none = rag("The Tagus", metadata=meta)
    assert compute_evidence(none)["key_point_coverage"] == 0
    assert "incomplete_summary" not in error_causes(none)


def test_a_partial_answer_cut_at_the_token_limit_is_incomplete_not_verbose():
    meta = {"type": "summary", "key_points": ["Douro", "Portugal", "estuary"], "answerable": True, "knobs": {}}
    cut = rag("The Douro flows in Portugal and", metadata=meta, truncated=True)
    causes = error_causes(cut)
    assert "incomplete_summary" in causes and "verbose_or_truncated" not in causes
    # Cut off before stating any point: a fault of form.
    off = rag("Rivers of the Iberian Peninsula are", metadata=meta, truncated=True)
    assert "verbose_or_truncated" in compute_evidence(off)["known_causes"]
    # Verbose stays verbose, partial or not.
    long_partial = rag("The Douro flows in Portugal " + " ".join(["and so on"] * 8), metadata=meta)
    assert "verbose_or_truncated" in compute_evidence(long_partial)["known_causes"]


def test_empty_prediction():
    rec = rag("")
    ev = compute_evidence(rec)
    assert ev["prediction_empty"] is True and ev["is_title_copy"] is False and ev["prediction_in_passages"] is False
    assert error_causes(rec, ev) == ["empty_answer"]


def test_trivia_answerable_flag_is_not_a_construction_cause():
    rec = rag("I don't know", golds=["NyQuil"], metadata={"dataset": "trivia", "type": "trivia", "answerable": False})
    ev = compute_evidence(rec)
    assert ev["abstained"] is True and ev["known_causes"] == []
    assert error_causes(rec, ev) == ["gold_not_retrieved"]
    answered = rag("Advil", golds=["NyQuil"], metadata={"dataset": "trivia", "answerable": False})
    assert error_causes(answered) == ["gold_not_retrieved", "unsupported_answer"]
    in_context = rag("no information", golds=["Douro"], metadata={"dataset": "trivia", "answerable": True})
    assert error_causes(in_context) == ["abstained_when_answerable"]
