"""A missing upstream output names the stage to run; paths resolve from the repository root."""

import pytest

from ragcritic_lib import paths
from ragcritic_lib.baselines import load_method_results
from ragcritic_lib.io import write_jsonl


def test_missing_stage_output_names_the_stage(tmp_path, monkeypatch):
    missing = "data/correction/nowhere/rag_critic_test.jsonl"
    assert paths.producing_stage(missing) == "correction"
    with pytest.raises(paths.MissingUpstreamError, match=r"dvc repro correction"):
        load_method_results(missing)
    with pytest.raises(FileNotFoundError) as err:
        paths.require("configs/no_such_file.yaml")
    assert not isinstance(err.value, paths.MissingUpstreamError)


def test_relative_paths_resolve_from_root_wherever_the_kernel_starts(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    rel = "data/correction/testbed/rag_critic_test.jsonl"
    write_jsonl(root / rel, [{"id": "q1", "final_prediction": "Paris", "golden_answers": ["Paris"]}])
    monkeypatch.setattr(paths, "ROOT", root)
    (root / "notebooks").mkdir()
    monkeypatch.chdir(root / "notebooks")  # where `make lab` starts JupyterLab
    rows = load_method_results(rel, pred_key="final_prediction")
    assert [r["prediction"] for r in rows] == ["Paris"]


def test_io_readers_resolve_from_root_and_name_the_stage(tmp_path, monkeypatch):
    from ragcritic_lib.io import read_json, read_jsonl, read_yaml, write_json

    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    monkeypatch.setattr(paths, "ROOT", root)
    monkeypatch.chdir(root / "notebooks")
    write_json("reports/x.json", {"a": 1})  # relative: written under the root, not the cwd
    assert (root / "reports" / "x.json").exists() and read_json("reports/x.json") == {"a": 1}
    monkeypatch.setattr(paths, "ROOT", paths.DVC_FILE.parent)  # the real dvc.yaml's stages
    for reader in (read_json, read_jsonl, read_yaml):
        with pytest.raises(paths.MissingUpstreamError, match=r"stage 'critic_sft'.*dvc repro critic_sft"):
            reader("data/critic_sft/no_such_output.json")
