"""End-to-end smoke run: the real dvc.yaml, with the `smoke` params profile, in a copy of the
repository. Every stage runs; a second `dvc repro` must then do nothing. Then the run is shipped
as the project ships one, the copy cloned and restored, and one changed `comparison` parameter
re-runs that stage and its downstream stage only.

With ``RAGCRITIC_SMOKE_WORKSPACE`` set (``.ci/run`` sets it), the copy is built in that folder and
marked with the source's fingerprint, so that the browser tests start from it instead of building
the same stages again (ragcritic_lib.pipeline.workspace)."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from ragcritic_lib.pipeline import shipping
from ragcritic_lib.pipeline.workspace import (SMOKE_WORKSPACE_ENV, copy_repository, mark_built, pipeline_env,
                                              run_timed, source_fingerprint)

pytestmark = pytest.mark.smoke


@pytest.fixture(scope="module")
def smoke_repo(tmp_path_factory):
    keep = os.environ.get(SMOKE_WORKSPACE_ENV)
    if keep:
        root = Path(keep)
        shutil.rmtree(root, ignore_errors=True)
    else:
        root = tmp_path_factory.mktemp("smoke") / "repo"
    fingerprint = source_fingerprint()
    copy_repository(root)
    env = pipeline_env(root, root / ".cache")
    run_timed([sys.executable, "-m", "ragcritic_lib.pipeline.profiles", "smoke"], root, env)
    seconds, out = run_timed(["dvc", "repro"], root, env, log=root / "repro.log")
    print(f"smoke dvc repro: {seconds:.1f} s")
    if keep:
        mark_built(root, fingerprint=fingerprint, profile="smoke")
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


def test_the_verdict_body_travels_with_the_critic_to_every_stage_that_loads_it(smoke_repo):
    root, _ = smoke_repo
    body = json.loads((root / "reports/metrics/05_critic_sft.json").read_text()).get("verdict_body")
    fitted = json.loads((root / "reports/metrics/05_critic_body.json").read_text())["verdict_body"]
    if body:  # critic_body.verdict_body: probe or verifier, fitted in 05_critic_body
        assert body == fitted, "stage 05_critic_sft reports another body than the one 05_critic_body fitted"
        for stage in ("critic_body", "critic_sft"):
            assert (root / "data" / stage / body["body"]).is_dir()
        assert (root / "data/critic_dpo" / body["body"]).is_dir(), "stage 06 left the verdict's body behind"
    else:
        assert fitted["body"] == "generative"
    verdict = yaml.safe_load((root / "params.yaml").read_text())["critic_body"]
    if verdict["verdict_body"] == "probe":  # the probe reads the answer span exactly when the params say so
        want = int(verdict.get("probe_answer_layer") or 0) or None
        assert body.get("answer_layer") == want
        for stage in ("critic_body", "critic_sft", "critic_dpo"):
            shipped = json.loads((root / "data" / stage / "probe" / "probe.json").read_text())
            assert shipped.get("span_layer") == want, f"{stage}'s probe: span_layer is not {want}"


def test_the_benchmark_scores_each_critic_within_kinds_beside_the_question_only_baseline(smoke_repo):
    root, _ = smoke_repo
    m = json.loads((root / "reports/metrics/07_benchmark.json").read_text())
    baseline = m["question_baseline"]
    assert baseline["fit_on"] > 0 and "verdict_auroc_within_kind" in baseline
    for name in ("SFT critic", "SFT+DPO critic"):
        assert "verdict_auroc_within_kind" in m["critics"][name], f"07: {name} has no within-kind AUROC"
        assert set(baseline["critics_minus_baseline"][name]) == {"diff", "ci_low", "ci_high"}


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


def test_a_shipped_run_restores_in_a_clone_and_reruns_one_stage_and_its_downstream(smoke_repo, tmp_path_factory):
    root, _ = smoke_repo
    # The size limits guard what the repository's history takes on; this copy is thrown away, and
    # tests/test_shipping.py checks the refusals.
    report = shipping.ship(root, max_file_bytes=None, max_new_bytes=None)
    print(report.summary())
    shipping.commit_all(root, "smoke run, shipped")
    # data/assets is rebuilt by the set-up, not shipped: linked from the copy instead of rebuilt here.
    clone = shipping.clone_repository(root, tmp_path_factory.mktemp("clone") / "repo", carry=["data/assets"])
    for cache in ("llm", "indexes"):  # keyed by content: they answer what the smoke run already asked
        if (root / ".cache" / cache).exists():
            shutil.copytree(root / ".cache" / cache, clone / ".cache" / cache)
    env = pipeline_env(clone, clone / ".cache")
    seconds, out = run_timed([sys.executable, "-m", "ragcritic_lib.pipeline.shipping", "--root", str(clone),
                              "restore", "--strict"], clone, env, log=clone / "restore.log")
    print(f"restore in the clone: {seconds:.1f} s")
    assert "every stage is up to date" in out, out[-3000:]
    _, out = run_timed(["dvc", "status"], clone, env)
    assert "up to date" in out.lower(), out[-3000:]
    seconds, out = run_timed(["dvc", "repro"], clone, env)
    print(f"no-op dvc repro in the clone: {seconds:.1f} s")
    assert shipping.stages_run(out) == []

    # One parameter of one stage with a stage downstream of it: the comparison (14), which the
    # analysis (15) reads; the cheapest such pair at the smoke sizes (the correction stage, used
    # before, re-ran 08, 13, 14 and 15: about 95 s more with AVX512-BF16, 3x that on AVX2).
    old = yaml.safe_load((clone / "params.yaml").read_text())["comparison"]["n_boot"]
    new = old + 10
    shipping.set_param(clone, "comparison.n_boot", new)
    seconds, out = run_timed(["dvc", "repro"], clone, env, log=clone / "repro-comparison.log")
    ran = shipping.stages_run(out)
    print(f"dvc repro after comparison.n_boot {old} -> {new}: {seconds:.1f} s, ran {ran}")
    assert "analysis" in shipping.downstream_stages(clone, "comparison")
    assert shipping.check_rerun(clone, "comparison", ran) == []
    _, out = run_timed(["dvc", "status"], clone, env)
    assert "up to date" in out.lower(), out[-3000:]
