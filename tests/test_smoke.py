"""End-to-end smoke run: the real dvc.yaml, with the `smoke` params profile, in a copy of the
repository. Every stage runs; a second `dvc repro` must then do nothing."""

import json
import sys

import pytest
import yaml

from ragcritic_lib.pipeline.workspace import copy_repository, pipeline_env, run_timed

pytestmark = pytest.mark.smoke


@pytest.fixture(scope="module")
def smoke_repo(tmp_path_factory):
    root = copy_repository(tmp_path_factory.mktemp("smoke") / "repo")
    env = pipeline_env(root, root / ".cache")
    run_timed([sys.executable, "-m", "ragcritic_lib.pipeline.profiles", "smoke"], root, env)
    seconds, out = run_timed(["dvc", "repro"], root, env, log=root / "repro.log")
    print(f"smoke dvc repro: {seconds:.1f} s")
    return root, env


def test_every_stage_ran_and_wrote_its_outputs(smoke_repo):
    root, _ = smoke_repo
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    assert set(lock) == set(stages)
    for name, stage in stages.items():
        for out in stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", []):
            rel = out if isinstance(out, str) else next(iter(out))
            assert (root / rel).exists(), f"stage {name}: {rel} missing"
        for m in stage.get("metrics", []):
            rel = m if isinstance(m, str) else next(iter(m))
            assert isinstance(json.loads((root / rel).read_text()), dict)


def test_second_repro_is_a_no_op(smoke_repo):
    root, env = smoke_repo
    _, out = run_timed(["dvc", "repro"], root, env)
    assert "Running stage" not in out
    assert "up to date" in out.lower()


def test_rag_metrics_are_real_numbers(smoke_repo):
    root, _ = smoke_repo
    m = json.loads((root / "reports/metrics/01_retrieval_rag.json").read_text())
    for ds, splits in m["rag"].items():
        for split, summary in splits.items():
            assert summary["n"] > 0
            # EM implies token-F1 = 1 and a whole-word hit, so the means are ordered.
            assert 0.0 <= summary["em"] <= min(summary["f1"], summary["acc"]) + 1e-9
            assert 0.0 <= summary["prefix_rate"] <= 1.0


def test_report_builds_and_links_every_executed_notebook(smoke_repo):
    root, env = smoke_repo
    run_timed([sys.executable, "-m", "ragcritic_lib.pipeline.html_report"], root, env)
    index = (root / "reports" / "html" / "index.html").read_text()
    executed = sorted((root / "reports" / "notebooks").glob("*.ipynb"))
    assert executed
    for nb in executed:
        assert f"{nb.stem}.html" in index, f"report index does not link {nb.stem}"
        assert (root / "reports" / "html" / f"{nb.stem}.html").exists() or \
            any((root / "reports" / "html").rglob(f"{nb.stem}.html"))


def test_every_figure_named_in_the_readme_exists(smoke_repo):
    import re

    root, _ = smoke_repo
    named = set(re.findall(r"(reports/[\w/.\-]+\.(?:png|svg|csv|md|json))", (root / "README.md").read_text()))
    assert named, "the README names no result files"
    missing = sorted(p for p in named if not (root / p).exists())
    assert missing == []
