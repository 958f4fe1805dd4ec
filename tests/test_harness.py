"""The baselines' harness: a method stage writes its scored answers with save_method_answers and
its metrics with one write_stage_metrics call; save_method_run does both."""

from __future__ import annotations

import copy

import pytest

from ragcritic_lib import paths
from ragcritic_lib.baselines import jsonable
from ragcritic_lib.baselines.harness import load_method_run, save_method_answers, save_method_run
from ragcritic_lib.io import read_json, read_jsonl
from ragcritic_lib.pipeline import stage_metrics
from ragcritic_lib.pipeline.metrics_schema import MetricsSchemaError

ENV = {"python": "3.11.7", "generator": {"backend": "hf", "device": "cpu", "dtype": "float32"}}


@pytest.fixture()
def tmp_repo(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "METRICS_DIR", tmp_path / "reports" / "metrics")
    monkeypatch.setattr(paths, "DATA_DIR", tmp_path / "data")
    monkeypatch.setattr(stage_metrics, "environment", lambda generator=None: copy.deepcopy(ENV))
    return tmp_path


def _records():
    return [{"id": str(i), "dataset": "testbed", "golden_answers": ["paris"], "prediction": p}
            for i, p in enumerate(["paris", "rome", "the paris"])]


def _run(save):
    return save("self_refine", "09_self_refine", "Self-Refine", _records(), cost={"calls": 6},
                cost_by_dataset={"testbed": {"calls": 6}}, seconds={"test": 1.26},
                extra_runs={"oracle": ("Self-Refine (oracle)", _records()[:1])},
                info={"self_refine": {"approval_rate": 1 / 3}})


def test_save_method_answers_writes_the_answers_and_leaves_the_metrics_file_to_the_notebook(tmp_repo):
    metrics = _run(save_method_answers)
    assert not (tmp_repo / "reports" / "metrics" / "09_self_refine.json").exists()
    assert [r["f1"] for r in read_jsonl(tmp_repo / "data" / "self_refine" / "test.jsonl")] == [1.0, 0.0, 1.0]
    assert len(read_jsonl(tmp_repo / "data" / "self_refine" / "oracle.jsonl")) == 1
    # As computed (unrounded), the file's form is jsonable(metrics).
    assert metrics["scores"] == {"testbed": {"em": 2 / 3, "f1": 2 / 3, "acc": 2 / 3}}
    assert metrics["self_refine"] == {"approval_rate": 1 / 3} and metrics["seconds"] == {"test": 1.3}
    assert metrics["runs"] == {"Self-Refine (oracle)": {"file": "data/self_refine/oracle.jsonl",
                                                        "scores": {"testbed": {"em": 1.0, "f1": 1.0, "acc": 1.0}}}}
    stage_metrics.write_stage_metrics("09_self_refine", jsonable(metrics))
    loaded, records = load_method_run("09_self_refine", "self_refine")
    assert loaded["scores"] == {"testbed": {"em": 0.6667, "f1": 0.6667, "acc": 0.6667}} and len(records) == 3


def test_save_method_run_writes_the_same_files(tmp_repo):
    answers = _run(save_method_answers)
    by_notebook = read_json(stage_metrics.write_stage_metrics("09_self_refine", jsonable(answers)))
    test_file = (tmp_repo / "data" / "self_refine" / "test.jsonl").read_bytes()
    assert _run(save_method_run) == answers
    assert read_json(tmp_repo / "reports" / "metrics" / "09_self_refine.json") == by_notebook
    assert (tmp_repo / "data" / "self_refine" / "test.jsonl").read_bytes() == test_file


def test_save_method_answers_writes_nothing_when_the_metrics_break_the_schema(tmp_repo):
    with pytest.raises(MetricsSchemaError):
        save_method_answers("simrag", "11_simrag", "SIM-RAG", _records(), cost={"calls": 3}, cost_by_dataset={})
    assert not (tmp_repo / "data").exists()
    with pytest.raises(ValueError, match="reserved keys"):
        save_method_answers("self_refine", "09_self_refine", "Self-Refine", _records(), cost={}, cost_by_dataset={},
                            info={"scores": {}})
