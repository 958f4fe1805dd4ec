"""Retrieval recall@k, overall and per question type."""

from __future__ import annotations

from types import SimpleNamespace

from ragcritic_lib.evaluation.summaries import recall_at_k


class FixedRetriever:
    def __init__(self, hits):
        self.hits = hits

    def search(self, queries, k):
        return [[SimpleNamespace(doc_id=d, contents=c) for d, c in self.hits[q][:k]] for q in queries]


def rec(q, gold, sup, typ, answerable=True):
    return {"question": q, "golden_answers": [gold],
            "metadata": {"supporting_ids": sup, "type": typ, "answerable": answerable}}


def test_recall_at_k_overall_and_by_type():
    retr = FixedRetriever({
        "a": [("p1", "Paris is big"), ("p2", "x")],
        "b": [("p3", "y"), ("p4", "1887 was the year")],
        "c": [("p5", "z"), ("p6", "w")],
    })
    records = [rec("a", "Paris", ["p1"], "factual"), rec("b", "1887", ["p4", "p9"], "temporal"),
               rec("c", "Rome", ["p7"], "factual"), rec("d", "insufficient information", [], "unanswerable", False)]
    out = recall_at_k(retr, records, [1, 2], group="type")
    assert out["n"] == 3  # the unanswerable record is left out
    assert out["answer_recall"] == {"1": round(1 / 3, 4), "2": round(2 / 3, 4)}
    assert out["support_recall"] == {"1": round(1 / 3, 4), "2": 0.5}
    assert set(out["by_type"]) == {"factual", "temporal"}
    assert out["by_type"]["factual"] == {"n": 2, "answer_recall": {"1": 0.5, "2": 0.5},
                                         "support_recall": {"1": 0.5, "2": 0.5}}
    assert out["by_type"]["temporal"]["support_recall"] == {"1": 0.0, "2": 0.5}
    assert "by_type" not in recall_at_k(retr, records, [1])
