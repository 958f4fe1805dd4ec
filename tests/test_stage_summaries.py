"""The metrics of notebooks 02-04, built by the library from what each stage computed."""

from __future__ import annotations

from types import SimpleNamespace

from ragcritic_lib.mining.sampling import error_sampling_metrics
from ragcritic_lib.mining.tagging import tagging_metrics
from ragcritic_lib.mining.taxonomy import taxonomy_metrics


class _Teacher:
    def __init__(self, name: str, reports: dict) -> None:
        self.name = name
        self._reports = reports

    def parse_report(self) -> dict:
        return self._reports


class _Member:
    def __init__(self, name: str) -> None:
        self.name = name

    def describe(self) -> dict:
        return {"name": self.name}


def _judged(member: str, ds: str, qid: str, correct: bool, f1: float) -> dict:
    return {"pool_member": member, "dataset": ds, "id": qid, "correct": correct, "f1": f1, "em": float(correct),
            "metadata": {"type": "factual"}, "evidence": {"abstained": False, "gold_in_passages": correct}}


def test_error_sampling_metrics():
    judged = [_judged("a", "tb", "q1", True, 1.0), _judged("a", "tb", "q2", False, 0.0),
              _judged("b", "tb", "q1", False, 0.5), _judged("b", "tv", "q3", False, 0.0)]
    errors, correct = [r for r in judged if not r["correct"]], [r for r in judged if r["correct"]]
    primary = _Teacher("grounded", {"rationale": {"failure_rate": 0.0}})
    llm = _Teacher("llm", {"rationale": {"failure_rate": 0.5}})
    m = error_sampling_metrics([_Member("a"), _Member("b")], judged, errors, correct, judge_metric="f1",
                               judge_threshold=0.8, rationale_sources={"grounded": 3}, teacher="grounded",
                               primary=primary, llm_teacher=llm, llm_teacher_agreement={"records": 2})
    assert list(m) == ["pool_size", "pool_members", "samples", "errors", "correct", "error_rate", "judge",
                       "error_rate_by_member", "by_member", "by_dataset", "source_statistics", "rationale_sources",
                       "teacher", "teacher_parse", "llm_teacher_agreement"]
    assert (m["pool_size"], m["samples"], m["errors"], m["correct"], m["error_rate"]) == (2, 4, 3, 1, 0.75)
    assert m["pool_members"] == [{"name": "a"}, {"name": "b"}]
    assert m["judge"] == {"metric": "f1", "threshold": 0.8}
    assert m["error_rate_by_member"] == {"a": 0.5, "b": 1.0}
    assert m["by_member"]["b"]["f1"] == 0.25 and m["by_dataset"]["tv"]["n"] == 1
    assert m["source_statistics"] == [
        {"dataset": "tb", "type": "factual", "questions": 2, "samples": 3, "errors": 2, "correct": 1, "error_rate": 0.6667},
        {"dataset": "tv", "type": "factual", "questions": 1, "samples": 1, "errors": 1, "correct": 0, "error_rate": 1.0}]
    assert m["teacher_parse"] == {"primary": {"failure_rate": 0.0}, "llm_subset": {"failure_rate": 0.5}}
    no_llm = error_sampling_metrics([], [], [], [], judge_metric="em", judge_threshold=1.0, rationale_sources={},
                                    teacher="grounded", primary=primary, llm_teacher=None, llm_teacher_agreement={},
                                    judge_audit={"exists": False, "source": "data/audit/audit.jsonl"})
    assert no_llm["error_rate"] == 0.0 and no_llm["teacher_parse"]["llm_subset"] is None
    assert no_llm["judge"] == {"metric": "em", "threshold": 1.0,
                               "audit": {"exists": False, "source": "data/audit/audit.jsonl"}}


def test_tagging_metrics():
    report = {"raw_tags": 10, "raw_unique": 7, "final_unique": 4, "final_tags": 9}
    primary = _Teacher("grounded", {"tags": {"failure_rate": 0.1, "n": 10}})
    m = tagging_metrics([{}, {}, {}], report, primary=primary, llm_teacher=None, llm_teacher_agreement={},
                        grounded_vocabulary=120)
    assert m == {
        "error_records": 3, "tagger": "grounded", "normalization": report, "tags_before_normalization": 10,
        "unique_tags_before_normalization": 7, "unique_tags_after_normalization": 4, "parse_failure_rate": 0.1,
        "parse": {"failure_rate": 0.1, "n": 10}, "llm_subset_parse": None, "llm_teacher_agreement": {},
        "grounded_vocabulary": 120}
    llm = _Teacher("llm", {"tags": {"failure_rate": 0.3}})
    assert tagging_metrics([], report, primary=primary, llm_teacher=llm, llm_teacher_agreement={"x": 1},
                           grounded_vocabulary=1)["llm_subset_parse"] == {"failure_rate": 0.3}


def test_taxonomy_metrics():
    clusters = SimpleNamespace(n_clusters=3, tags=["t1", "t2", "t3", "t4"])
    mappings = [SimpleNamespace(source="name", tier2="B"), SimpleNamespace(source="alias", tier2="A"),
                SimpleNamespace(source="name", tier2="B")]
    tax = SimpleNamespace(tier1=["X", "Y"], tier2=["A", "B", "C"], aliases={"a": "A"})
    qa = [{"dataset": "tb", "critic_target": {"tag1": ["X"], "tag2": ["A"]}},
          {"dataset": "tv", "critic_target": {"tag1": ["X", "Y"], "tag2": ["B"]}}]
    m = taxonomy_metrics(clusters, mappings, tax, qa, qa_report={"records": 2}, known_cause_agreement={"n": 0},
                         cluster_namer="grounded", cluster_name_parse=None)
    assert m == {
        "clusters": 3, "tags_clustered": 4, "cluster_namer": "grounded",
        "mapping_sources": {"alias": 1, "name": 2}, "tier2_labels_used": ["A", "B"], "error_qa": {"records": 2},
        "tier1_distribution": {"X": 2, "Y": 1}, "tier2_distribution": {"A": 1, "B": 1},
        "tier1_by_dataset": {"tb": {"X": 1}, "tv": {"X": 1, "Y": 1}}, "known_cause_agreement": {"n": 0},
        "cluster_name_parse": None, "taxonomy": {"tier1": 2, "tier2": 3, "aliases": 1}}
    empty = taxonomy_metrics(clusters, [], tax, [], qa_report={}, known_cause_agreement={}, cluster_namer="llm",
                             cluster_name_parse={"failure_rate": 0.0})
    assert empty["tier1_distribution"] == {} and empty["tier1_by_dataset"] == {} and empty["mapping_sources"] == {}


def test_retrieval_rag_metrics_keep_the_order_of_the_sections():
    from ragcritic_lib.evaluation.summaries import retrieval_rag_metrics

    m = retrieval_rag_metrics({"tb": {"bm25": {"answer_recall": {"1": 0.5}}}}, {"tb": {"test": {"f1": 0.2}}}, {},
                              [{"dataset": "tb", "variant": "terse", "f1": 0.1}])
    assert list(m) == ["retrieval", "rag", "closed_book", "prompt_variants"]
    assert m == {"retrieval": {"tb": {"bm25": {"answer_recall": {"1": 0.5}}}}, "rag": {"tb": {"test": {"f1": 0.2}}},
                 "closed_book": {}, "prompt_variants": [{"dataset": "tb", "variant": "terse", "f1": 0.1}]}


def test_assets_metrics_leave_out_the_wheel_listing():
    from ragcritic_lib.data.assets import assets_metrics

    report = {"models": {"gen": 1}, "wheels": {"a.whl": {"sha256": "x"}}, "corpus": 3}
    assert assets_metrics(report) == {"models": {"gen": 1}, "corpus": 3} and "wheels" in report
