"""One loader for the trained critic: checkpoint, prompt settings and calibration together."""

import json

import pytest

from ragcritic_lib import runtime
from ragcritic_lib.critic import forms as model_forms
from ragcritic_lib.critic.critics import load_trained_critic
from ragcritic_lib.mining.taxonomy import load_taxonomy


PARAMS = {"common": {"generator": {"backend": "hf", "model": "the-generator"}}}


@pytest.fixture
def loads(monkeypatch):
    seen = []
    monkeypatch.setattr(runtime, "_memoized_llm", lambda cfg: seen.append(
        {k: cfg[k] for k in ("model", "adapter") if k in cfg}) or object())
    return seen


def _stage(tmp_path, *, merged=True, adapter_config=False):
    tmp_path.mkdir(parents=True, exist_ok=True)
    prompt = tmp_path / "critic_prompt.json"
    prompt.write_text(json.dumps({"top_k": 2, "passage_words": 17, "label_list": False}))
    d = tmp_path / "critic_dpo"
    (d / "adapter").mkdir(parents=True)
    if merged:
        (d / "merged").mkdir()
        (d / "merged" / "config.json").write_text("{}")
    if adapter_config:
        (d / "adapter" / "adapter_config.json").write_text("{}")
        (tmp_path / "sft_base").mkdir()
        (d / "train_result.json").write_text(json.dumps({"adapter_dir": str(d / "adapter"),
                                                         "base_model": str(tmp_path / "sft_base")}))
    else:
        (d / "adapter" / "config.json").write_text("{}")
    (d / "verdict_calibration.json").write_text(json.dumps({"threshold": -1.25}))
    return d, prompt


def test_loads_the_calibrated_merged_checkpoint_with_its_prompt_settings(tmp_path, loads):
    d, prompt = _stage(tmp_path)
    critic = load_trained_critic(PARAMS, d, load_taxonomy(), prompt_file=prompt)
    assert loads == [{"model": str(d / "merged")}]
    assert (critic.top_k, critic.passage_words, critic.label_list) == (2, 17, False)
    assert (critic.verdict, critic.threshold) == ("calibrated", -1.25)
    plain = load_trained_critic(PARAMS, d, load_taxonomy(), prompt_file=prompt, verdict="generate")
    assert (plain.verdict, plain.threshold) == ("generate", 0.0)


def test_without_merged_checkpoint_adapter_on_its_recorded_base_or_full_model(tmp_path, loads):
    d, prompt = _stage(tmp_path, merged=False, adapter_config=True)
    load_trained_critic(PARAMS, d, load_taxonomy(), prompt_file=prompt)
    d2, prompt2 = _stage(tmp_path / "full", merged=False)
    load_trained_critic(PARAMS, d2, load_taxonomy(), prompt_file=prompt2)
    assert loads == [{"model": str(tmp_path / "sft_base"), "adapter": str(d / "adapter")},
                     {"model": str(d2 / "adapter")}]


def test_missing_calibration_is_one_clear_error(tmp_path, loads):
    d, prompt = _stage(tmp_path)
    (d / "verdict_calibration.json").unlink()
    with pytest.raises(FileNotFoundError, match="verdict_calibration.json"):
        load_trained_critic(PARAMS, d, load_taxonomy(), prompt_file=prompt)


def test_the_shipped_model_folder_wins_over_an_older_merged_checkpoint(tmp_path, loads, monkeypatch):
    d, prompt = _stage(tmp_path)  # an older stage output's merged checkpoint stays beside it
    (d / "model").mkdir()
    (d / "model" / "adapter_config.json").write_text("{}")
    (d / "model" / "ship_manifest.json").write_text("{}")
    (d / "train_result.json").write_text(json.dumps({"adapter_dir": str(d / "model"),
                                                     "base_model": str(tmp_path)}))
    calls = []
    monkeypatch.setattr(model_forms, "manifest_base", lambda folder, base=None: calls.append(folder) or tmp_path)
    load_trained_critic(PARAMS, d, load_taxonomy(), prompt_file=prompt)
    assert loads == [{"model": str(tmp_path), "adapter": str(d / "model")}]
    assert calls == [d / "model"]  # the adapter's base is read from its manifest (hash checked there)
