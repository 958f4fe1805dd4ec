"""The abstain-path replay benchmark (benchmarks/bench_abstain_replay.py): the reader's own answer
restored where the path replaced it, and the dev thresholds read from the margins."""

from __future__ import annotations

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_abstain_replay.py")


def _record(qid, gold, before, *, raw=None, after=None, margin=1.0, variant="prefill",
            tags=("Factual Inaccuracies",)):
    events = [{"action": "RefineDoc", "output": "a passage"}]
    if raw is not None:  # the abstain path replaced the reader's answer
        events.append({"action": "GenerateAnswer", "raw": raw, "answer": "insufficient information", "abstained": True})
        after = "insufficient information"
    else:
        events.append({"action": "GenerateAnswer", "raw": after, "answer": after, "abstained": False})
    return {"id": qid, "golden_answers": [gold], "predictions": [before], "final_prediction": after,
            "prompt_variant": variant,
            "steps": [{"critic": {"margin": margin, "tag1": [], "tag2": list(tags)}, "status": "corrected",
                       "answer_after": after, "events": events}]}


def test_the_reader_s_answer_is_restored_only_where_the_abstain_path_fired():
    fired = bench.replay(_record("q1", "Paris", "Paris", raw=" Paris<|im_end|>", margin=3.0))
    assert fired == {"before": 1.0, "after": 0.0, "restored": 1.0, "fired": True, "margin": 3.0,
                     "unanswerable": False, "corrected": True, "unsupported_label": True,
                     "repeat": True, "grounded": False}
    kept = bench.replay(_record("q2", "Lyon", "Paris", after="Lyon", margin=0.5, tags=["Incomplete Information"]))
    assert kept == {"before": 0.0, "after": 1.0, "restored": 1.0, "fired": False, "margin": 0.5,
                    "unanswerable": False, "corrected": True, "unsupported_label": False,
                    "repeat": None, "grounded": None}
    assert bench.replay(_record("q5", "insufficient information", "1984", after="1984"))["unanswerable"] is True
    # An intermediate GenerateAnswer (a sub-question's) is not the answer the path replaced.
    rec = _record("q3", "Rome", "Rome", raw="Rome")
    rec["steps"][0]["events"][-1]["intermediate"] = True
    assert bench.replay(rec)["fired"] is False
    # A record the critic did not act on has no step: nothing changed.
    untouched = {"id": "q4", "golden_answers": ["Oslo"], "predictions": ["Oslo"], "final_prediction": "Oslo"}
    assert bench.replay(untouched) == {"before": 1.0, "after": 1.0, "restored": 1.0, "fired": False, "margin": None,
                                       "unanswerable": False, "corrected": False, "unsupported_label": False,
                                       "repeat": None, "grounded": None}


def test_the_replay_tells_a_repeated_answer_from_a_new_one_and_reads_its_passages():
    rec = _record("q6", "Lyon", "Paris", raw="Marseille")
    rec["steps"][0]["events"][-1]["docs"] = ["Marseille is a port city in France."]
    row = bench.replay(rec)
    assert (row["fired"], row["repeat"], row["grounded"]) == (True, False, True)
    rec["steps"][0]["events"][-1]["docs"] = ["Lyon lies on the Rhone."]
    assert bench.replay(rec)["grounded"] is False
    rec = _record("q7", "Lyon", "Paris", raw="Paris")
    rec["steps"][0]["events"][-1]["docs"] = ["Paris is the capital."]
    assert (bench.replay(rec)["repeat"], bench.replay(rec)["grounded"]) == (True, True)


def test_a_threshold_acts_only_above_its_margin():
    rows = [bench.replay(_record("q1", "Paris", "Paris", raw="Paris", margin=3.0)),
            bench.replay(_record("q2", "Lyon", "Paris", after="Lyon", margin=0.5))]
    assert bench.at_threshold(rows, 0.0, "after") == pytest.approx(0.5)       # acts on both: 0 + 1
    assert bench.at_threshold(rows, 0.0, "restored") == pytest.approx(1.0)
    assert bench.at_threshold(rows, 1.0, "after") == pytest.approx(0.0)       # acts on q1 only: 0 + 0
    assert bench.at_threshold(rows, 5.0, "after") == pytest.approx(0.5)       # acts on none: 1 + 0
