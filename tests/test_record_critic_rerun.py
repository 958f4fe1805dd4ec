"""scripts/record_critic_rerun.py: a re-run of stage 05 elsewhere, beside the shipped run."""

from __future__ import annotations

import json

import pytest
from script_modules import load_script


@pytest.fixture(scope="module")
def rec():
    return load_script("scripts/record_critic_rerun.py")


def _metrics(cls, auroc, *, n=180, wall=None, device="cpu"):
    env = {"cpu_class": cls, "generator": {"dtype": "float32"}, "torch": "2.x", "transformers": "5.x"}
    if wall is not None:
        env["wall_seconds"] = wall
    return {"environment": env, "verdict_calibration": {"auroc": auroc, "n": n, "threshold": 2.0},
            "train": {"device": device, "best_dev_auroc": 0.46, "seconds": 100.0, "cache_seconds": 40.0},
            "dev_tags": {"tag1": {"f1": 0.5}, "tag2": {"f1": 0.4}}, "verdict_body": {"seconds": 30.0}}


def test_the_entry_sets_the_rerun_beside_the_shipped_run(rec) -> None:
    e = rec.rerun_entry(_metrics("cuda", 0.70, device="cuda"), _metrics("avx2", 0.7513, wall=5000.0),
                        machine="one GPU", wall_seconds=180.0)
    assert (e["cpu_class"], e["device"], e["dev_auroc"], e["wall_seconds"]) == ("cuda", "cuda", 0.70, 180.0)
    assert e["shipped"]["cpu_class"] == "avx2" and e["shipped"]["wall_seconds"] == 5000.0
    assert e["dev_auroc_diff"] == -0.0513 and e["within_tolerance"] is False
    near = rec.rerun_entry(_metrics("amx", 0.76), _metrics("avx2", 0.75), machine="m")
    assert near["within_tolerance"] is True and near["wall_seconds"] is None


def test_runs_on_other_dev_sets_or_without_an_auroc_are_refused(rec) -> None:
    with pytest.raises(ValueError, match="scored 170 dev answers, the shipped run 180"):
        rec.rerun_entry(_metrics("amx", 0.7, n=170), _metrics("avx2", 0.7), machine="m")
    with pytest.raises(ValueError, match="the re-run metrics have no verdict_calibration.auroc"):
        rec.rerun_entry({"environment": {}}, _metrics("avx2", 0.7), machine="m")


def test_a_later_rerun_on_the_same_machine_replaces_the_earlier(rec, tmp_path) -> None:
    out = tmp_path / "critic_reruns.json"
    shipped = _metrics("avx2", 0.75)
    rec.record(rec.rerun_entry(_metrics("cuda", 0.74), shipped, machine="gpu"), out)
    rec.record(rec.rerun_entry(_metrics("amx", 0.73), shipped, machine="cpu box"), out)
    rec.record(rec.rerun_entry(_metrics("cuda", 0.76), shipped, machine="gpu"), out)
    rows = json.loads(out.read_text())["reruns"]
    assert [(r["machine"], r["dev_auroc"]) for r in rows] == [("cpu box", 0.73), ("gpu", 0.76)]
    assert rec.main([str(tmp_path / "missing.json"), "--machine", "m", "--out", str(out)]) == 2
