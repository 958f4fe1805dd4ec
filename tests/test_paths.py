"""paths.resolve_llm_paths: the one place where an LLM config's repository-relative paths resolve."""

from __future__ import annotations

from ragcritic_lib import paths


def test_local_paths_resolve_against_the_root_and_names_stay(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    (tmp_path / "models" / "gen").mkdir(parents=True)
    (tmp_path / "adapters" / "critic").mkdir(parents=True)
    cfg = {"backend": "hf", "model": "models/gen", "adapter": "adapters/critic", "cache_dir": ".cache/llm",
           "tokenizer": "no/such/folder", "batch_size": 8}
    out = paths.resolve_llm_paths(cfg)
    assert out == {"backend": "hf", "model": str(tmp_path / "models/gen"), "adapter": str(tmp_path / "adapters/critic"),
                   "cache_dir": str(tmp_path / ".cache/llm"), "tokenizer": "no/such/folder", "batch_size": 8}
    assert cfg["model"] == "models/gen"  # the input is not changed
    assert paths.resolve_llm_paths({"backend": "hf", "model": "HuggingFaceTB/SmolLM2-135M"})["model"] == \
        "HuggingFaceTB/SmolLM2-135M"  # a hub name, not a local folder


def test_a_served_model_name_is_never_taken_for_a_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    (tmp_path / "critic").mkdir()
    out = paths.resolve_llm_paths({"backend": "openai", "model": "critic", "adapter": "critic", "urls": ["u"]})
    assert out["model"] == "critic" and out["adapter"] == str(tmp_path / "critic")
