"""Base models of the trained critic and planner as parameters, and loading what was trained.

Covers runtime.resolve_base_model (override, local generator, served generator), the params rules
of the *base_model keys, and loading a fully fine-tuned checkpoint or a LoRA adapter on its
recorded base for the critic and the planner, on tiny random models written in the test.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from ragcritic_lib import paths, runtime
from ragcritic_lib.pipeline.params import load_params, params_problems
from ragcritic_lib.critic.training import TrainResult

SERVED = {"backend": "openai", "model": "served-generator", "urls": "http://127.0.0.1:9", "cache": False,
          "dtype": "float32", "device": "cpu", "batch_size": 2}


def _params(**generator):
    return {"common": {"generator": generator}}


def _model_folder(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


# ---------------------------------------------------------------------------------------------
# Which folder training starts from
# ---------------------------------------------------------------------------------------------
def test_override_wins_over_the_generator(tmp_path):
    base = _model_folder(tmp_path / "critic-base")
    gen = _model_folder(tmp_path / "generator")
    got = runtime.resolve_base_model(_params(backend="hf", model=str(gen)), str(base), key="critic_sft.base_model")
    assert got == str(base)
    # also with a served generator: the override is all training needs
    assert runtime.resolve_base_model(_params(**SERVED), str(base), key="critic_sft.base_model") == str(base)


def test_empty_override_takes_a_local_generator(tmp_path):
    gen = _model_folder(tmp_path / "generator")
    for backend in ("hf", "vllm"):
        got = runtime.resolve_base_model(_params(backend=backend, model=str(gen)), "",
                                         key="planner_data.base_model")
        assert got == str(gen)


def test_relative_paths_are_resolved_from_the_repository_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not from the working directory
    assert (paths.ROOT / "data" / "taxonomy").is_dir()  # a folder of the repository, but no model
    with pytest.raises(ValueError, match=r"^critic_sft\.base_model: 'data/taxonomy' is no model checkpoint"):
        runtime.resolve_base_model(_params(**SERVED), "data/taxonomy", key="critic_sft.base_model")
    with pytest.raises(ValueError, match=r"^critic_sft\.base_model: the generator's model 'data/taxonomy' "
                                         r"\(backend hf\) is not a local model folder"):
        runtime.resolve_base_model(_params(backend="hf", model="data/taxonomy"), "", key="critic_sft.base_model")


def test_served_generator_error_names_the_key():
    with pytest.raises(ValueError) as err:
        runtime.resolve_base_model(_params(**SERVED), "", key="critic_sft.base_model")
    assert str(err.value) == ("critic_sft.base_model: the generator is served (backend openai, model "
                              "'served-generator'); set a local checkpoint folder to train from")


def test_generator_name_that_is_no_local_folder_is_an_error_naming_the_key():
    with pytest.raises(ValueError, match=r"^repair\.base_model: the generator's model 'org/model' "
                                         r"\(backend hf\) is not a local model folder"):
        runtime.resolve_base_model(_params(backend="hf", model="org/model"), "", key="repair.base_model")


def test_bad_overrides_are_errors_naming_the_key(tmp_path):
    params = _params(**SERVED)
    key = "simrag.critic_base_model"
    with pytest.raises(ValueError, match=rf"^{key}: '.*nowhere' is not a local model folder"):
        runtime.resolve_base_model(params, str(tmp_path / "nowhere"), key=key)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match=rf"^{key}: .* is a LoRA adapter"):
        runtime.resolve_base_model(params, str(adapter), key=key)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=rf"^{key}: .* is no model checkpoint \(no config.json\)"):
        runtime.resolve_base_model(params, str(tmp_path / "empty"), key=key)


# ---------------------------------------------------------------------------------------------
# params.yaml rules
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def params():
    return load_params()


def _with(params, **sections):
    out = copy.deepcopy(params)
    for section, values in sections.items():
        out[section].update(values)
    return out


def test_committed_params_name_every_base_model_key_empty(params):
    assert params["critic_sft"]["base_model"] == ""
    assert params["planner_data"]["base_model"] == ""
    assert params["repair"]["base_model"] == ""
    assert params["simrag"]["critic_base_model"] == ""


def test_base_model_keys_must_be_local_folders_or_stage_outputs(params, tmp_path):
    bad = _with(params, critic_sft={"base_model": "data/nowhere/model"},
                planner_data={"base_model": 7})
    problems = params_problems(bad)
    assert "critic_sft.base_model: data/nowhere/model: no such file or folder, and no dvc.yaml stage produces it" \
        in problems
    assert "planner_data.base_model: expected str, got int (7)" in problems
    good = _with(params, critic_sft={"base_model": str(_model_folder(tmp_path / "m"))},
                 planner_data={"base_model": "data/critic_sft/model"},  # shipped by stage critic_sft
                 repair={"base_model": str(tmp_path / "m")}, simrag={"critic_base_model": ""})
    assert params_problems(good) == []


def test_served_generator_needs_the_base_models_of_the_stages_that_train(params, tmp_path):
    served = copy.deepcopy(params)
    served["common"]["generator"] = {"backend": "openai", "model": "served-x", "urls": "http://127.0.0.1:9"}
    # RePAIR from an init checkpoint and SIM-RAG with the classifier critic train no LLM of their own
    fewer = _with(served, repair={"init_adapter": "data/planner_data/planner_adapter"}, simrag={"critic": "classifier"})
    assert params_problems(fewer) == [
        "critic_sft.base_model: required when common.generator.backend is 'openai' (a served model 'served-x' "
        "cannot be trained; set a local checkpoint folder)",
        "planner_data.base_model: required when common.generator.backend is 'openai' (a served model "
        "'served-x' cannot be trained; set a local checkpoint folder)",
    ]
    # RePAIR without an init checkpoint and SIM-RAG with an LLM critic (the defaults) train from their bases
    more = _with(served, repair={"init_adapter": ""}, simrag={"critic": "llm"})
    assert {p.split(":")[0] for p in params_problems(more)} == {
        "critic_sft.base_model", "planner_data.base_model", "repair.base_model",
        "simrag.critic_base_model"}
    local = str(_model_folder(tmp_path / "m"))
    fixed = _with(more, critic_sft={"base_model": local}, planner_data={"base_model": local},
                  repair={"base_model": local}, simrag={"critic_base_model": local})
    assert params_problems(fixed) == []


# ---------------------------------------------------------------------------------------------
# Trained checkpoints on tiny models: full fine-tuning and LoRA adapters
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny base model, a LoRA adapter on it (with non-zero weights) and a full checkpoint."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from test_llm import _write_tiny_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("trained")
    base = _write_tiny_model(root / "base")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    lora = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    lora.save_pretrained(root / "critic" / "adapter")
    full = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        full.model.layers[0].self_attn.q_proj.weight.add_(0.5)
    full.save_pretrained(root / "full")
    AutoTokenizer.from_pretrained(base).save_pretrained(root / "full")
    # The same base in another folder: a training record naming it must win over peft's record.
    shutil.copytree(base, root / "base_copy")
    return {"root": root, "base": base, "base_copy": root / "base_copy", "adapter": root / "critic" / "adapter",
            "full": root / "full"}


def _record(path, adapter_dir, base_model):
    """A training result as the stages write it (TrainResult.to_dict)."""
    result = TrainResult(adapter_dir=str(adapter_dir), is_adapter=True, base_model=str(base_model), steps=1,
                         seconds=0.1)
    path.write_text(json.dumps(result.to_dict()))
    return path


def _q_proj(llm):
    return llm.hf_model.model.layers[0].self_attn.q_proj.weight.detach().clone()


def test_checkpoint_kind_and_recorded_base(tiny, tmp_path):
    assert runtime.checkpoint_kind(tiny["adapter"]) == "adapter"
    assert runtime.checkpoint_kind(tiny["full"]) == "full"
    with pytest.raises(FileNotFoundError, match="neither a LoRA adapter"):
        runtime.checkpoint_kind(tiny["root"])
    # without a training record, peft's own record of the base (same machine, same run)
    assert runtime.recorded_base_model(tiny["adapter"]) == str(tiny["base"])
    # a training result beside the adapter wins; one naming a missing base is one clear error
    rec = _record(tiny["root"] / "critic" / "train_result.json", tiny["adapter"], tmp_path / "moved-away")
    try:
        with pytest.raises(FileNotFoundError, match=r"train_result.json: the base model .*moved-away"):
            runtime.recorded_base_model(tiny["adapter"])
    finally:
        rec.unlink()


def test_training_start_continues_an_adapter_on_its_base_and_a_full_checkpoint_as_is(tiny):
    start = runtime.training_start(tiny["adapter"])
    assert start == {"base_model": str(tiny["base"]), "init_adapter": str(tiny["adapter"])}
    assert runtime.training_start(tiny["adapter"], base_model=str(tiny["base"]))["base_model"] == str(tiny["base"])
    with pytest.raises(ValueError, match=r"^repair\.base_model: .* is not the base the adapter"):
        runtime.training_start(tiny["adapter"], base_model=str(tiny["full"]), key="repair.base_model")
    assert runtime.training_start(tiny["full"]) == {"base_model": str(tiny["full"]), "init_adapter": None}
    with pytest.raises(ValueError, match=r"^repair\.base_model: .* is a full checkpoint"):
        runtime.training_start(tiny["full"], base_model=str(tiny["base"]), key="repair.base_model")


def test_adapter_runs_on_its_recorded_base_not_on_the_served_generator(tiny):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = runtime.trained_model_config(_params(**SERVED), tiny["adapter"])
    assert cfg["backend"] == "hf" and "urls" not in cfg  # trained weights run locally
    assert (cfg["model"], cfg["adapter"]) == (str(tiny["base"]), str(tiny["adapter"]))
    llm = runtime.load_trained_model(_params(**SERVED), tiny["adapter"])
    expected = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny["base"], dtype=torch.float32),
                                         str(tiny["adapter"])).merge_and_unload()
    plain = AutoModelForCausalLM.from_pretrained(tiny["base"], dtype=torch.float32)
    got = _q_proj(llm)
    assert torch.allclose(got, expected.model.layers[0].self_attn.q_proj.weight, atol=1e-6)
    assert not torch.allclose(got, plain.model.layers[0].self_attn.q_proj.weight, atol=1e-4)


def test_full_checkpoint_is_loaded_directly(tiny):
    import torch
    from transformers import AutoModelForCausalLM

    gen = {"backend": "hf", "model": str(tiny["base"]), "cache": False, "dtype": "float32", "device": "cpu"}
    cfg = runtime.trained_model_config(_params(**gen), tiny["full"])
    assert cfg["model"] == str(tiny["full"]) and "adapter" not in cfg
    llm = runtime.load_trained_model(_params(**gen), tiny["full"])
    saved = AutoModelForCausalLM.from_pretrained(tiny["full"], dtype=torch.float32)
    assert torch.equal(_q_proj(llm), saved.model.layers[0].self_attn.q_proj.weight)


def _critic_stage(root, checkpoint, *, merged: bool):
    d = root / ("merged_stage" if merged else "adapter_stage")
    d.mkdir()
    (d / "critic_prompt.json").write_text(json.dumps({"top_k": 2, "passage_words": 10, "label_list": False}))
    (d / "verdict_calibration.json").write_text(json.dumps({"threshold": 0.5}))
    (d / ("merged" if merged else "adapter")).symlink_to(checkpoint, target_is_directory=True)
    return d


def test_trained_critic_adapter_on_its_recorded_base_and_full_checkpoint(tiny, tmp_path):
    from ragcritic_lib.critic.critics import load_trained_critic
    from ragcritic_lib.mining.taxonomy import load_taxonomy

    params = _params(**SERVED)
    taxonomy = load_taxonomy()
    d = _critic_stage(tmp_path, tiny["adapter"], merged=False)
    _record(d / "train_result.json", d / "adapter", tiny["base_copy"])
    critic = load_trained_critic(params, d, taxonomy, prompt_file=d / "critic_prompt.json")
    assert (critic.llm.model, critic.llm.adapter) == (str(tiny["base_copy"]), str((d / "adapter").resolve()))
    assert critic.threshold == 0.5
    parses = critic.critique([{"question": "Capital of France?", "passages": ["Paris is the capital."],
                               "prediction": "Paris"}])
    assert len(parses) == 1 and parses[0].margin is not None  # calibrated: scored on the loaded model
    d2 = _critic_stage(tmp_path, tiny["full"], merged=True)
    full = load_trained_critic(params, d2, taxonomy, prompt_file=d2 / "critic_prompt.json", verdict="generate")
    assert (full.llm.model, full.llm.adapter) == (str((d2 / "merged").resolve()), None)


def test_trained_planner_adapter_and_full_checkpoint(tiny, tmp_path):
    from ragcritic_lib.agent.planner import LLMPlanner, PlannerContext, critic_feedback, load_trained_planner

    params = _params(**SERVED)
    out = tmp_path / "correction"
    out.mkdir()
    (out / "planner_adapter").symlink_to(tiny["adapter"], target_is_directory=True)
    _record(out / "another_train_result.json", "planner_adapter_elsewhere", tiny["full"])  # another adapter's
    _record(out / "planner_train_result.json", out / "planner_adapter", tiny["base_copy"])  # as notebook 08 writes
    planner = load_trained_planner(params, out / "planner_adapter", max_new_tokens=4, name="trained")
    assert isinstance(planner, LLMPlanner) and planner.name == "trained"
    assert (planner.llm.model, planner.llm.adapter) == (str(tiny["base_copy"]),
                                                        str((out / "planner_adapter").resolve()))
    ctx = PlannerContext(question="Capital of France?", passages=["Paris is the capital."], prediction="Lyon",
                         critic=critic_feedback({"Judgement": "Error", "tag1": [], "tag2": []}))
    assert len(planner.plan([ctx])) == 1
    full = load_trained_planner(params, tiny["full"], max_new_tokens=4)
    assert (full.llm.model, full.llm.adapter) == (str(tiny["full"]), None)
    with pytest.raises(FileNotFoundError):
        load_trained_planner(params, tmp_path / "missing")


# ---------------------------------------------------------------------------------------------
# Shipped compact forms (ragcritic_lib.critic.forms): what stages 05/06 write instead of a merged
# checkpoint; every loader reads them
# ---------------------------------------------------------------------------------------------
@pytest.fixture()
def shipped(tiny, tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    from ragcritic_lib.critic import forms as model_forms

    monkeypatch.setenv("RAGCRITIC_MODEL_CACHE", str(tmp_path / "model_cache"))
    full = AutoModelForCausalLM.from_pretrained(tiny["full"], dtype=torch.float32)
    model_forms.ship_full(full.state_dict(), tiny["base"], tmp_path / "stage" / "model", max_mb=5.0,
                          base_key="critic_sft.base_model", dtype="float32")
    return {"model": tmp_path / "stage" / "model", "full": full, "cache": tmp_path / "model_cache"}


def test_a_shipped_full_form_is_rebuilt_on_its_base_for_every_loader(tiny, shipped):
    import torch

    gen = {"backend": "hf", "model": str(tiny["base"]), "cache": False, "dtype": "float32", "device": "cpu"}
    assert runtime.checkpoint_kind(shipped["model"]) == "shipped"
    cfg = runtime.trained_model_config(_params(**gen), shipped["model"])
    assert Path(cfg["model"]).parent == shipped["cache"] and "adapter" not in cfg
    llm = runtime.load_trained_model(_params(**gen), shipped["model"])
    want = shipped["full"].model.layers[0].self_attn.q_proj.weight.to(torch.bfloat16).float()  # layers ship in bf16
    assert torch.equal(_q_proj(llm), want)
    # training continues from the rebuilt model; a planner base may name the shipped folder
    start = runtime.training_start(shipped["model"])
    assert start == {"base_model": cfg["model"], "init_adapter": None}
    assert runtime.resolve_base_model(_params(**gen), str(shipped["model"]), key="k") == cfg["model"]


def test_a_shipped_form_on_another_base_is_refused_naming_its_manifest(tiny, shipped):
    from ragcritic_lib.critic import forms as model_forms

    gen = {"backend": "hf", "model": str(tiny["base"]), "cache": False, "dtype": "float32", "device": "cpu"}
    manifest = shipped["model"] / model_forms.MANIFEST
    with pytest.raises(model_forms.BaseMismatch, match=str(manifest)):
        runtime.trained_model_config(_params(**gen), shipped["model"], base_model=str(tiny["full"]))


def test_trained_critic_reads_the_shipped_model_folder(tiny, shipped):
    from ragcritic_lib.critic.critics import load_trained_critic
    from ragcritic_lib.mining.taxonomy import load_taxonomy

    d = shipped["model"].parent
    (d / "critic_prompt.json").write_text(json.dumps({"top_k": 2, "passage_words": 10, "label_list": False}))
    (d / "verdict_calibration.json").write_text(json.dumps({"threshold": 0.5}))
    gen = {"backend": "hf", "model": str(tiny["base"]), "cache": False, "dtype": "float32", "device": "cpu"}
    critic = load_trained_critic(_params(**gen), d, load_taxonomy(), prompt_file=d / "critic_prompt.json")
    assert Path(critic.llm.model).parent == shipped["cache"] and critic.llm.adapter is None


def test_a_shipped_adapter_names_its_base_by_hash(tiny, tmp_path):
    from ragcritic_lib.critic import forms as model_forms

    model_forms.ship_adapter_dir(tiny["adapter"], tmp_path / "model", base_folder=tiny["base"], base_key="k")
    assert runtime.checkpoint_kind(tmp_path / "model") == "adapter"
    assert runtime.recorded_base_model(tmp_path / "model") == str(tiny["base"])
    gen = {"backend": "hf", "model": str(tiny["base"]), "cache": False, "dtype": "float32", "device": "cpu"}
    cfg = runtime.trained_model_config(_params(**gen), tmp_path / "model")
    assert (cfg["model"], cfg["adapter"]) == (str(tiny["base"]), str(tmp_path / "model"))
    with pytest.raises(model_forms.BaseMismatch, match="ship_manifest.json"):
        runtime.trained_model_config(_params(**gen), tmp_path / "model", base_model=str(tiny["full"]))


def test_trl_results_ship_their_adapter_or_a_compact_full_form(tiny, tmp_path):
    from ragcritic_lib.critic import forms as model_forms
    from ragcritic_lib.critic.train import ship_train_result

    shutil.copytree(tiny["adapter"], tmp_path / "trl_adapter")
    lora = TrainResult(adapter_dir=str(tmp_path / "trl_adapter"), is_adapter=True, base_model=str(tiny["base"]),
                       steps=1, seconds=0.1)
    m = ship_train_result(lora, tmp_path / "lora_model", base_model=tiny["base"], base_key="k", ship_max_mb=5.0)
    assert m["form"] == "adapter" and not (tmp_path / "trl_adapter").exists()  # checkpoints do not ship
    assert runtime.recorded_base_model(tmp_path / "lora_model") == str(tiny["base"])
    shutil.copytree(tiny["full"], tmp_path / "trl_full")
    full = TrainResult(adapter_dir=str(tmp_path / "trl_full"), is_adapter=False, base_model=str(tiny["base"]),
                       steps=1, seconds=0.1)
    m = ship_train_result(full, tmp_path / "full_model", base_model=tiny["base"], base_key="k", ship_max_mb=5.0)
    assert (m["form"], [e["name"] for e in m["tensors"]]) == ("layers", ["model.layers.0.self_attn.q_proj.weight"])
    # an adapter trained on a rebuilt full critic merges into it and ships against the original base
    shutil.copytree(tiny["adapter"], tmp_path / "trl_adapter2")
    on_full = TrainResult(adapter_dir=str(tmp_path / "trl_adapter2"), is_adapter=True, base_model=str(tiny["full"]),
                          steps=1, seconds=0.1)
    m = ship_train_result(on_full, tmp_path / "merged_model", base_model=tiny["base"], base_key="k", ship_max_mb=5.0)
    assert m["form"] == "layers" and m["base"]["sha256"] == model_forms.base_sha256(tiny["base"])
    names = {e["name"] for e in m["tensors"]}
    assert "model.layers.0.self_attn.q_proj.weight" in names and "model.layers.1.self_attn.v_proj.weight" in names
