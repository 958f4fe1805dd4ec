"""The CI budget line: parts read from the file `.ci/run` writes, one line with the CPU class, runs
kept one per class for docs/reproduce.md, and clear errors for a file it cannot read."""

import json
import subprocess
import sys

import pytest

from ragcritic_lib import paths
from ragcritic_lib.pipeline import ci_budget, readme
from ragcritic_lib.pipeline.ci_budget import BudgetError


def _parts(tmp_path, text):
    f = tmp_path / "parts"
    f.write_text(text)
    return f


def test_parts_are_read_in_order_with_the_ones_beside_marked(tmp_path):
    parts = ci_budget.read_parts(_parts(tmp_path, "install 180\ncheck-requirements 330 beside\n\npytest 1900\n"))
    assert [(p["name"], p["seconds"], p["beside"]) for p in parts] == [
        ("install", 180.0, False), ("check-requirements", 330.0, True), ("pytest", 1900.0, False)]


@pytest.mark.parametrize("bad", ["install", "install soon", "install 3 later", "install -4", "a 1 beside x"])
def test_a_malformed_line_is_one_error_naming_file_and_line(tmp_path, bad):
    f = _parts(tmp_path, f"restore 60\n{bad}\n")
    with pytest.raises(BudgetError, match=rf"parts, line 2: expected 'NAME SECONDS'"):
        ci_budget.read_parts(f)


def test_the_line_gives_every_part_the_total_and_the_class_budget():
    record = ci_budget.make_record([{"name": "install", "seconds": 180}, {"name": "check-requirements",
                                    "seconds": 330.4, "beside": True}, {"name": "pytest", "seconds": 1900}],
                                   2400, cls="avx2", cores=2, day="2026-11-28")
    line = ci_budget.budget_line(record)
    assert line == ("CI budget [cpu_class avx2, 2 cores]: install 180 s | check-requirements 330 s (beside the rest) "
                    "| pytest 1900 s | total 2400 s (40.0 min; budget 60 min on avx2, CI's limit 90 min)")
    failed = ci_budget.budget_line({**record, "failed": True, "cpu_class": "other"})
    assert failed.startswith("CI budget [FAILED, cpu_class other") and "no budget set for other" in failed


def test_runs_are_kept_one_per_class_the_latest_replacing_and_failures_refused(tmp_path):
    runs = tmp_path / "ci_runs.json"
    first = ci_budget.make_record([{"name": "pytest", "seconds": 10}], 10, cls="avx2", cores=2, day="2026-11-01")
    ci_budget.add_run(first, runs, "first")
    ci_budget.add_run(ci_budget.make_record([], 5, cls="amx", cores=2), runs)
    later = ci_budget.make_record([{"name": "pytest", "seconds": 8}], 8, cls="avx2", cores=2, day="2026-11-28")
    kept = ci_budget.add_run(later, runs, "later")
    assert [(r["cpu_class"], r["total_s"], r["note"]) for r in kept] == [("amx", 5.0, ""), ("avx2", 8.0, "later")]
    assert ci_budget.load_runs(runs) == kept
    with pytest.raises(BudgetError, match="failed run"):
        ci_budget.add_run({**later, "failed": True}, runs)
    assert ci_budget.load_runs(runs) == kept


def test_an_unreadable_runs_file_names_it_and_the_key(tmp_path):
    bad = tmp_path / "ci_runs.json"
    bad.write_text("{")
    with pytest.raises(BudgetError, match="ci_runs.json: not JSON"):
        ci_budget.load_runs(bad)
    bad.write_text(json.dumps({"runs": [{"date": "x", "cpu_class": "avx2", "cores": 2, "total_s": 1}]}))
    with pytest.raises(BudgetError, match=r"runs\[0\] lacks parts"):
        ci_budget.load_runs(bad)
    bad.write_text(json.dumps({"runs": [{"date": "x", "cpu_class": "vax", "cores": 2, "total_s": 1, "parts": []}]}))
    with pytest.raises(BudgetError, match="'vax' is not one of"):
        ci_budget.load_runs(bad)


def test_the_command_prints_the_line_and_writes_the_record_as_ci_run_calls_it(tmp_path):
    f = _parts(tmp_path, "install 100\nchromium 40 beside\n")
    out = tmp_path / "budget.json"
    # The system's python3, as .ci/run calls it before the virtual environment exists.
    proc = subprocess.run([sys.executable, "-m", "ragcritic_lib.pipeline.ci_budget", "line", str(f), "--total", "150",
                           "--json", str(out), "--failed"], cwd=paths.ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CI budget [FAILED, cpu_class ")
    assert "install 100 s | chromium 40 s (beside the rest) | total 150 s" in proc.stdout
    assert json.loads(out.read_text())["failed"] is True
    bad = _parts(tmp_path, "install\n")
    proc = subprocess.run([sys.executable, "-m", "ragcritic_lib.pipeline.ci_budget", "line", str(bad), "--total", "1"],
                          cwd=paths.ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "line 1" in proc.stderr


def test_the_ci_times_block_has_a_column_per_recorded_class():
    runs = [ci_budget.make_record([{"name": "install", "seconds": 120}, {"name": "req", "seconds": 300, "beside": True}],
                                  3000, cls="avx2", cores=2, day="2026-11-28"),
            ci_budget.make_record([{"name": "install", "seconds": 60}], 1500, cls="avx512_bf16", cores=2,
                                  day="2026-11-20")]
    runs[0]["note"] = "fresh clone"
    text = readme.render_block("ci_times", {readme.CI_RUNS_KEY: runs})
    assert "| part | avx2 (2 cores, 2026-11-28) | avx512_bf16 (2 cores, 2026-11-20) |" in text
    assert "| install | 2.0 min | 1.0 min |" in text
    assert "| req (beside) | 5.0 min | not run |" in text
    assert "| **total** | **50.0 min** | **25.0 min** |" in text
    assert "- avx2: fresh clone" in text
    assert readme.render_block("ci_times", {}).startswith("No `.ci/run` recorded yet")



def test_the_closing_line_adds_up_every_pytest_summary_of_the_log():
    log = "\n".join([
        "....s.. [100%]",
        "1808 passed, 3 skipped, 6 deselected, 589 warnings in 461.67s (0:07:41)",
        "== the smoke run ==",
        "6 passed, 1811 deselected in 1500.20s (0:25:00)",
        "FAILED tests/browser/test_jupyterlab.py::test_x - AssertionError",
        "========== 1 failed, 1 passed, 1 error, 2 xfailed, 1 xpassed in 300.0s ==========",
        "a line that mentions 3 passed in passing",
        "=========== no tests ran in 0.01s ===========",
    ])
    totals = ci_budget.pytest_totals(log)
    assert totals == {"passed": 1816, "failed": 2, "skipped": 5, "runs": 4}
    assert ci_budget.closing_line(totals) == "ci: 1816 passed, 2 failed, 5 skipped"
    assert ci_budget.pytest_totals("no summary here") == {"passed": 0, "failed": 0, "skipped": 0, "runs": 0}


def test_stage_seconds_are_read_from_papermills_record_and_bad_notebooks_skipped(tmp_path):
    nbs = tmp_path / "reports" / "notebooks"
    nbs.mkdir(parents=True)
    (nbs / "00_assets.ipynb").write_text(json.dumps({"metadata": {"papermill": {"duration": 61.18}}}))
    (nbs / "01_retrieval_rag.ipynb").write_text(json.dumps({"metadata": {"papermill": {"duration": 200}}}))
    (nbs / "02_error_sampling.ipynb").write_text(json.dumps({"metadata": {}}))          # still running
    (nbs / "03_tagging.ipynb").write_text("{truncated")
    (nbs / "04_taxonomy.ipynb").write_text(json.dumps({"metadata": {"papermill": {"duration": None}}}))
    assert ci_budget.stage_seconds(tmp_path) == {"00_assets": 61.2, "01_retrieval_rag": 200.0}
    assert ci_budget.stage_seconds(tmp_path / "nowhere") == {}


def test_the_command_times_block_reads_the_parts_that_time_each_command():
    run = ci_budget.make_record([{"name": "install", "seconds": 180}, {"name": "restore", "seconds": 150},
                                 {"name": "pytest", "seconds": 2400}], 3000, cls="avx2", cores=2, day="2026-11-28")
    text = readme.render_block("command_times", {readme.CI_RUNS_KEY: [run]})
    assert "| command | avx2 (2026-11-28) |" in text
    assert "| `make restore` | 2.5 min |" in text and "| `make test` (its tests, after the restore) | 40.0 min |" in text
    assert "| `make test-browser` | not run |" in text
    assert readme.render_block("command_times", {}).startswith("No `.ci/run` recorded yet")


def test_the_smoke_times_block_has_a_column_per_class_with_recorded_stage_seconds():
    run = ci_budget.make_record([], 3000, cls="avx2", cores=2, day="2026-11-28")
    run["smoke_stages"] = {"00_assets": 61.2, "01_retrieval_rag": 235.4}
    plain = ci_budget.make_record([], 1500, cls="avx512_bf16", cores=2, day="2026-11-20")   # none recorded
    text = readme.render_block("smoke_times", {readme.CI_RUNS_KEY: [plain, run]})
    assert "| notebook | avx2, s (2026-11-28) |" in text and "avx512_bf16" not in text
    assert "| `00_assets` | 61 |" in text and "| all stages | 297 |" in text
    assert "ci_runs.json" not in readme.render_block("smoke_times", {readme.CI_RUNS_KEY: [plain]})
