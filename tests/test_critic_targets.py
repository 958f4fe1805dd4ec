"""Critic training targets explain errors without the reference answer, from observed causes."""

import json

from ragcritic_lib.critic.critics import critic_target, redact_reference
from ragcritic_lib.mining.evidence import compute_evidence, error_causes
from ragcritic_lib.mining.teachers import GroundedTeacher


def _record(question, prediction, golds, passages, **meta):
    return {"id": "q1", "dataset": "testbed", "question": question, "prediction": prediction,
            "golden_answers": golds, "passages": [{"id": str(i), "contents": p} for i, p in enumerate(passages)],
            "metadata": meta, "correct": False}


def test_grounded_rationales_never_quote_the_reference():
    passages = ["Harbor Bank\nHarbor Bank was founded in 1987 in Lisbon.", "Other\nNothing here."]
    leaked = []
    for i in range(60):  # many seeds: every opening, cause sentence and closing gets drawn
        rec = _record("When was Harbor Bank founded?", "1990", ["1987"], passages, type="temporal")
        rec["id"] = f"q{i}"
        text = GroundedTeacher(seed=i).rationales([rec])[0].analysis
        if "1987" in text:
            leaked.append(text)
    assert not leaked, leaked[:2]


def test_llm_teacher_quote_of_the_reference_is_redacted_from_the_target():
    rec = _record("Who founded Harbor Bank?", "Ana Silva", ["Rui Costa"], ["x"])
    rec["critic_target"] = {"Judgement": "Error", "tag1": ["Generation errors"], "tag2": ["Wrong span"],
                            "tag3": ["said Ana Silva not rui costa"],
                            "Error_analysis": 'The expected answer is "Rui Costa", but the model said Ana Silva.'}
    target = json.loads(critic_target(rec))
    assert "rui costa" not in json.dumps(target).lower()
    assert "Ana Silva" in target["Error_analysis"] and "the answer" in target["Error_analysis"]
    # A reference that is part of the prediction stays: the analysis may quote the prediction.
    kept = redact_reference({"Error_analysis": "It said 2020 March 3."}, {"prediction": "2020 March 3", "golden_answers": ["2020"]})
    assert kept["Error_analysis"] == "It said 2020 March 3."


def test_causes_come_from_the_observed_error_not_the_question_type():
    passages = ["Harbor Bank\nHarbor Bank was founded in 1987 and employs 420 people."]
    # Same question type ("temporal"), different observed errors, different causes.
    wrong_year = _record("When was Harbor Bank founded?", "1990", ["1987"], passages, type="temporal")
    wrong_name = _record("When was Harbor Bank founded?", "Harbor Bank", ["1987"], passages, type="temporal")
    assert "temporal_error" in error_causes(wrong_year)
    assert "temporal_error" not in error_causes(wrong_name)
    # A wrong count is a numeric error whatever the type says.
    count = _record("How many people does Harbor Bank employ?", "400", ["420"], passages, type="factual")
    assert "numeric_error" in error_causes(count) and "temporal_error" not in error_causes(count)
    # Picking the other option named in the question is a comparison error, with or without a type.
    cmp_rec = _record("Which is older, Harbor Bank or Delta Trust?", "Delta Trust", ["Harbor Bank"], passages)
    assert "comparison_error" in error_causes(cmp_rec)
    typed_only = _record("Which is older, Harbor Bank or Delta Trust?", "1987", ["Harbor Bank"], passages, type="comparison")
    assert "comparison_error" not in error_causes(typed_only)


def test_evidence_is_unchanged_by_the_question_type():
    passages = ["Harbor Bank\nHarbor Bank was founded in 1987."]
    a = _record("When was Harbor Bank founded?", "1990", ["1987"], passages, type="temporal")
    b = _record("When was Harbor Bank founded?", "1990", ["1987"], passages, type="numerical")
    assert error_causes(a, compute_evidence(a)) == error_causes(b, compute_evidence(b))


def test_a_long_answer_paraphrasing_a_passage_is_supported_not_invented():
    passages = ["Calombel\nCalombel Sensorics works in industrial sensors and was founded in 1956 in Gormington."]
    para = _record("Summarize Calombel Sensorics.", "Calombel Sensorics makes industrial sensors, founded 1956 in Gormington",
                   ["Calombel Sensorics works in industrial sensors."], passages)
    ev = compute_evidence(para)
    assert ev["prediction_in_passages"] and "unsupported_answer" not in error_causes(para, ev)
    invented = _record("Summarize Calombel Sensorics.", "A shipping firm from Norway trading timber and copper since 1802",
                       ["Calombel Sensorics works in industrial sensors."], passages)
    assert "unsupported_answer" in error_causes(invented)
