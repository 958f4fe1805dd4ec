"""The reproduction check of benchmarks/bench_repro.py: which numbers and output files differ."""

from __future__ import annotations

import json
from pathlib import Path

from script_modules import load_script

bench = load_script("benchmarks/bench_repro.py")


def test_json_diffs_reports_results_and_skips_times():
    a = {"f1": 0.25, "train": {"seconds": 10.0, "steps": 30}, "rows": [1, 2, 3], "llm_seconds": 3,
         "cost": {"cached_calls": 4, "calls": 140}, "only_a": 1}
    b = {"f1": 0.26, "train": {"seconds": 99.0, "steps": 30}, "rows": [1, 2, 4], "llm_seconds": 9,
         "cost": {"cached_calls": 0, "calls": 140}, "only_b": 2}
    diffs = {path: (x, y) for path, x, y in bench.json_diffs(a, b)}
    assert diffs == {"f1": (0.25, 0.26), "rows[2]": (3, 4), "only_a": (1, "<absent>"),
                     "only_b": ("<absent>", 2)}


def test_json_diffs_lists_of_other_length_are_one_difference():
    assert list(bench.json_diffs({"x": [1, 2]}, {"x": [1, 2, 3]})) == [("x", [1, 2], [1, 2, 3])]
    assert list(bench.json_diffs({"x": [1.0]}, {"x": [1.0]})) == []


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_compare_results_names_differing_numbers_and_files(tmp_path):
    src, copy = tmp_path / "src", tmp_path / "copy"
    for root, f1, weights in ((src, 0.5, "w1"), (copy, 0.5, "w1")):
        _write(root, "reports/metrics/08_x.json", json.dumps({"f1": f1, "seconds": str(root)}))
        _write(root, "data/critic/adapter/model.safetensors", weights)
    _write(src, "reports/metrics/09_y.json", json.dumps({"acc": 0.3}))
    _write(copy, "reports/metrics/09_y.json", json.dumps({"acc": 0.31}))
    _write(src, "reports/metrics/10_z.json", "{}")
    _write(src, "data/critic/adapter/adapter_config.json", '{"base": "/a"}')
    _write(copy, "data/critic/adapter/adapter_config.json", '{"base": "/b"}')
    _write(src, "data/critic/only_here.json", "{}")

    report = bench.compare_results(src, copy)

    assert report["metrics"]["08_x.json"] == []
    assert report["metrics"]["09_y.json"] == [("acc", 0.3, 0.31)]
    assert report["metrics"]["10_z.json"] == "missing"
    row = report["outputs"]["critic"]
    assert row["files"] == 3 and row["same"] == 1
    assert row["differ"] == ["data/critic/adapter/adapter_config.json"]
    assert row["missing"] == ["data/critic/only_here.json"]


def test_repro_record_sums_the_stages_that_ran_and_names_the_unreadable(tmp_path):
    metrics = tmp_path / "reports" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "01_a.json").write_text(json.dumps({"environment": {"wall_seconds": 100.04}}))
    (metrics / "02_b.json").write_text(json.dumps({"environment": {"wall_seconds": 50}}))
    (metrics / "03_c.json").write_text(json.dumps({"environment": {}}))
    (metrics / "09_committed.json").write_text(json.dumps({"environment": {"wall_seconds": 999}}))
    rec = bench.repro_record(tmp_path, ["01_a", "02_b", "03_c", "04_absent"], targets=["b"], profile=None,
                             cold=200.0, noop=1.234, cpu_class="avx2", date="2026-12-06")
    assert rec["stage_wall_seconds"] == {"01_a": 100.0, "02_b": 50.0}  # 09 did not run: not counted
    assert rec["stages_sum_seconds"] == 150.0 and rec["outside_stages_seconds"] == 50.0
    assert rec["unreadable"] == ["03_c.json", "04_absent.json"]
    assert rec["targets"] == ["b"] and rec["profile"] == "default" and rec["noop_seconds"] == 1.23
    json.dumps(rec)
