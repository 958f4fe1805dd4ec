"""Training: recipes, the one-step SFT / DPO runs on a tiny random model, adapter merging, configs.

The tiny model (hidden 32, 2 layers) is built here from a config, with the packaged SmolLM2
tokenizer when the assets exist and otherwise a small byte-level BPE trained in the test, so
nothing is downloaded and each run takes seconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ragcritic_lib import paths
from ragcritic_lib.critic.data import dpo_pairs, make_samples, sft_examples
from ragcritic_lib.io import read_yaml, write_json
from ragcritic_lib.mining.taxonomy import load_taxonomy
from ragcritic_lib.critic.training import (
    DEFAULT_SAVE_TOTAL_LIMIT, OUR_KEYS, TrainResult, build_configs, cpu_bf16_enabled, curve_value, dpo_start, inference_checkpoint, load_recipe,
    load_train_result, loss_curve, merge_adapter, portable_keys, train_dpo, train_sft, training_seed, write_loss_curve,
)

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tiny_tokenizer(out: Path, smollm_dir: Path | None) -> None:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if smollm_dir is not None:
        AutoTokenizer.from_pretrained(str(smollm_dir)).save_pretrained(str(out))
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["Question: who wrote the report? Passages: the report was written by Ada.",
              '{"Judgement": "Error", "tag1": ["Incomplete Information"], "Error_analysis": "missing"}',
              "system user assistant Correct Error Retrieval Response Information"] * 20
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|im_end|>", unk_token="<|endoftext|>")
    fast.chat_template = CHATML
    fast.save_pretrained(str(out))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("tiny_llama")
    try:
        smollm = request.getfixturevalue("smollm_dir")
    except (pytest.FixtureLookupError, pytest.skip.Exception):
        smollm = None
    _tiny_tokenizer(out, smollm)
    tok = AutoTokenizer.from_pretrained(str(out))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def taxonomy():
    return load_taxonomy()


def _samples(taxonomy):
    errs = [
        {"id": f"e{i}", "dataset": "t", "question": f"Who wrote report {i}?", "prediction": "Bob",
         "passages": [{"id": "p", "contents": f"Report {i}\nThe report was written by Ada."}],
         "critic_target": {"Judgement": "Error", "Error_analysis": "Wrong author.",
                           "tag1": [taxonomy.tier1[i % 2 * 4]], "tag2": [taxonomy.children(taxonomy.tier1[i % 2 * 4])[0]],
                           "tag3": ["wrong author"]}}
        for i in range(2)
    ]
    cors = [{"id": "c0", "dataset": "t", "question": "Who wrote report 9?", "prediction": "Ada",
             "passages": [{"id": "p", "contents": "Report 9\nThe report was written by Ada."}], "correct": True}]
    return make_samples(errs, cors)


TINY_SFT = {"max_steps": 1, "per_device_train_batch_size": 2, "max_length": 4096, "warmup_steps": 0,
            "lora_r": 4, "lora_alpha": 8}


def test_recipe_rejects_unknown_key_with_its_name() -> None:
    with pytest.raises(ValueError, match="'max_seq_length'"):
        load_recipe({"max_seq_length": 512}, "sft")
    with pytest.raises(ValueError, match="'max_prompt_length'"):
        load_recipe({"max_prompt_length": 512}, "dpo")
    with pytest.raises(ValueError, match="'output_dir'"):
        load_recipe({"output_dir": "x"}, "sft")


@pytest.mark.parametrize("text, key, message", [
    ("learning_rate: 2e-4", "learning_rate", r"must be a number \(YAML reads a number like 2e-4 as a string"),
    ("num_train_epochs: three", "num_train_epochs", "must be a number"),
    ("lora_r: true", "lora_r", "must be a number"),
    ("peft: 'yes'", "peft", "must be true or false"),
    ("lora_target_modules: q_proj", "lora_target_modules", "must be a list of module names"),
    ("model_dtype: bf16", "model_dtype", 'must be "float32", "bfloat16" or "auto"'),
])
def test_recipe_values_of_the_wrong_kind_name_file_and_key(tmp_path: Path, text: str, key: str, message: str) -> None:
    """A value the trainer would choke on after the model has loaded (a string learning rate, a
    module name split into letters) is refused when the recipe is read."""
    path = tmp_path / "recipe.yaml"
    path.write_text(f"max_steps: 1\n{text}\n")
    with pytest.raises(ValueError, match=rf"recipe.yaml: recipe key '{key}' {message}"):
        load_recipe(path, "sft")
    ok = load_recipe({"learning_rate": 2.0e-4, "num_train_epochs": 1, "lora_target_modules": ["q_proj"]}, "sft")
    assert ok["learning_rate"] == 2.0e-4


def test_recipe_null_where_the_trainer_takes_none_and_peft_module_shorthand(tmp_path: Path) -> None:
    assert load_recipe({"max_length": None}, "sft")["max_length"] is None  # no length limit
    with pytest.raises(ValueError, match="'learning_rate' must be a number"):
        load_recipe({"learning_rate": None}, "sft")
    _, lora, _ = build_configs(load_recipe({"lora_target_modules": "all-linear", "max_steps": 1}, "sft"), "sft",
                               tmp_path / "out")
    assert lora.target_modules == "all-linear"


@pytest.mark.parametrize("name", ["critic_sft", "critic_dpo", "planner_sft", "critic_sft_paper",
                                  "critic_dpo_paper", "planner_sft_paper"])
def test_every_recipe_parses_into_trl_config(name: str, tmp_path: Path) -> None:
    kind = "dpo" if "dpo" in name else "sft"
    recipe = load_recipe(paths.CONFIGS_DIR / "train" / f"{name}.yaml", kind)
    cfg, lora, resolved = build_configs(recipe, kind, tmp_path)
    assert type(cfg).__name__ == ("DPOConfig" if kind == "dpo" else "SFTConfig")
    assert (lora is None) == (recipe.get("peft") is False)
    if kind == "dpo":
        assert cfg.beta == 0.3 and cfg.loss_type == ["sigmoid"]
    if name.endswith("_paper"):
        assert cfg.learning_rate == (5e-7 if kind == "dpo" else 7e-6)
        assert cfg.max_length == (4096 if kind == "dpo" else 2048)
    import torch

    if not torch.cuda.is_available():
        # Weights stay float32 on a CPU; bf16 autocast follows cpu_bf16 ("auto": the CPU's native bf16).
        assert cfg.use_cpu is True and resolved["model_dtype"] == "float32"
        assert cfg.bf16 is cpu_bf16_enabled("auto") and cfg.fp16 is False


@pytest.mark.parametrize("setting", [True, False])
def test_cpu_bf16_forced_either_way_on_a_cpu(setting: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ragcritic_lib.critic.training as tr

    monkeypatch.setattr(tr, "has_gpu", lambda: False)
    recipe = load_recipe({"cpu_bf16": setting, "max_steps": 1}, "sft")
    cfg, _, resolved = build_configs(recipe, "sft", tmp_path)
    assert cfg.bf16 is setting and resolved["bf16"] is setting and resolved["model_dtype"] == "float32"


def test_cpu_bf16_auto_follows_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ragcritic_lib.llm as llm_mod
    import ragcritic_lib.critic.training as tr

    monkeypatch.setattr(tr, "has_gpu", lambda: False)
    for native in (True, False):
        monkeypatch.setattr(llm_mod, "_resolve_dtype", lambda d, dev, _n=native: "bfloat16" if _n else "float32")
        cfg, _, _ = build_configs(load_recipe({"max_steps": 1}, "sft"), "sft", tmp_path)
        assert cfg.bf16 is native


@pytest.mark.parametrize("bad", ["yes", "bf16", 1, None])
def test_cpu_bf16_bad_value_names_the_key_and_file(bad: object, tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(f"cpu_bf16: {json.dumps(bad)}\n")
    with pytest.raises(ValueError, match=r"r\.yaml: recipe key 'cpu_bf16'"):
        load_recipe(f, "sft")


def test_accelerate_configs_point_at_the_deepspeed_file() -> None:
    z3 = read_yaml(paths.CONFIGS_DIR / "accelerate" / "deepspeed_zero3.yaml")
    assert z3["distributed_type"] == "DEEPSPEED"
    ds_file = paths.resolve(z3["deepspeed_config"]["deepspeed_config_file"])
    ds = json.loads(ds_file.read_text())
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert read_yaml(paths.CONFIGS_DIR / "accelerate" / "multi_gpu.yaml")["distributed_type"] == "MULTI_GPU"


def test_loss_curve_keeps_training_rows(tmp_path: Path) -> None:
    hist = [{"loss": 2.0, "learning_rate": 1e-4, "step": 1}, {"rewards/margins": 0.5, "loss": 1.5, "step": 2},
            {"train_runtime": 3.0, "train_loss": 1.75, "step": 2}]
    rows = loss_curve(hist)
    assert rows == [{"step": 1, "loss": 2.0, "learning_rate": 1e-4}, {"step": 2, "rewards_margins": 0.5, "loss": 1.5}]
    tsv = write_loss_curve(hist, tmp_path / "c.tsv").read_text().splitlines()
    assert tsv == ["step\tloss\tlearning_rate\trewards_margins", "1\t2.0\t0.0001\t", "2\t1.5\t\t0.5"]
    assert json.loads(write_loss_curve(hist, tmp_path / "c.json").read_text()) == rows


def test_curve_value_reads_a_loss_curve_like_its_dataframe() -> None:
    rows = loss_curve([{"loss": 2.19731, "step": 1}, {"rewards/margins": -0.14758, "loss": 1.71719, "step": 2},
                       {"loss": 1.5, "step": 3}])
    assert (curve_value(rows, "loss", 0), curve_value(rows, "loss")) == (2.1973, 1.5)
    assert curve_value(rows, "rewards_margins", 1) == -0.1476
    # A column some rows lack reads as NaN there (as pandas would); a column none has, or an
    # empty curve, as None.
    assert math.isnan(curve_value(rows, "rewards_margins"))
    assert curve_value(rows, "rewards_accuracies") is None and curve_value([], "loss") is None


def test_sft_then_dpo_one_step_each_and_merge(tiny_model: Path, taxonomy, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    samples = _samples(taxonomy)
    examples = sft_examples(samples, taxonomy, top_k=1, passage_words=10)
    sft = train_sft(examples, paths.CONFIGS_DIR / "train" / "critic_sft.yaml", tmp_path / "sft",
                    base_model=str(tiny_model), overrides=TINY_SFT)
    assert sft.steps == 1 and sft.is_adapter and sft.examples == 3 and sft.dropped_too_long == 0
    assert (tmp_path / "sft" / "adapter_config.json").exists()
    losses = [r["loss"] for r in sft.log_history if "loss" in r]
    assert len(losses) == 1 and math.isfinite(losses[0])

    pairs, counts = dpo_pairs(samples, taxonomy, k_coarse=1, k_fine=1, seed=0, top_k=1, passage_words=10)
    assert counts["total"] == len(pairs) == 2 + 2 + 1  # 2 errors x (coarse + fine) + 1 correct x coarse
    dpo = train_dpo(pairs, paths.CONFIGS_DIR / "train" / "critic_dpo.yaml", tmp_path / "dpo",
                    base_model=str(tiny_model), init_adapter=str(tmp_path / "sft"),
                    overrides={**TINY_SFT, "gradient_accumulation_steps": 1})
    assert dpo.steps == 1 and dpo.is_adapter
    assert (tmp_path / "dpo" / "adapter_config.json").exists()
    assert not (tmp_path / "dpo" / "ref").exists()
    assert any("rewards/margins" in r for r in dpo.log_history)

    merged_dir = merge_adapter(tiny_model, tmp_path / "dpo", tmp_path / "merged", dtype="float32")
    tok = AutoTokenizer.from_pretrained(str(merged_dir))
    ids = tok("Who wrote the report?", return_tensors="pt").input_ids
    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir))
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(tiny_model)), str(tmp_path / "dpo"))
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, peft_model(ids).logits, atol=1e-4)
    assert not any("lora" in n for n, _ in merged.named_parameters())


def test_lora_top_layers_adapts_only_the_top_layers_and_trains(tiny_model: Path, taxonomy, tmp_path: Path) -> None:
    from ragcritic_lib.critic.training import lora_layers, model_depth

    assert model_depth(tiny_model) == 2
    _, lora, resolved = build_configs(load_recipe({"lora_top_layers": 8, "max_steps": 1}, "sft"), "sft", tmp_path,
                                      depth=30)
    assert lora.layers_to_transform == list(range(22, 30)) and resolved["lora_top_layers"] == 8
    assert build_configs(load_recipe({"max_steps": 1}, "sft"), "sft", tmp_path)[1].layers_to_transform is None
    assert lora_layers(0, None) is None
    with pytest.raises(ValueError, match="'lora_top_layers' \\(3\\) needs the base model's depth"):
        build_configs(load_recipe({"lora_top_layers": 3}, "sft"), "sft", tmp_path)
    with pytest.raises(ValueError, match="'lora_top_layers' \\(3\\) exceeds the model's 2 layers"):
        lora_layers(3, 2)
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="recipe key 'lora_top_layers' must be a whole number"):
            load_recipe({"lora_top_layers": bad}, "sft")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"hidden_size": 4}')
    with pytest.raises(ValueError, match="broken/config.json: no positive integer num_hidden_layers"):
        model_depth(tmp_path / "broken")

    examples = sft_examples(_samples(taxonomy), taxonomy, top_k=1, passage_words=10)
    result = train_sft(examples, paths.CONFIGS_DIR / "train" / "critic_sft.yaml", tmp_path / "top1",
                       base_model=str(tiny_model), overrides={**TINY_SFT, "lora_top_layers": 1})
    from safetensors.torch import load_file

    names = list(load_file(str(tmp_path / "top1" / "adapter_model.safetensors")))
    assert names and all(".layers.1." in n for n in names), names
    assert result.steps == 1 and math.isfinite([r["loss"] for r in result.log_history if "loss" in r][0])


def test_sft_drops_examples_longer_than_max_length(tiny_model: Path, taxonomy, tmp_path: Path) -> None:
    examples = sft_examples(_samples(taxonomy), taxonomy, top_k=1, passage_words=10)
    with pytest.raises(ValueError, match="no SFT example fits max_length=8"):
        train_sft(examples, paths.CONFIGS_DIR / "train" / "critic_sft.yaml", tmp_path / "x",
                  base_model=str(tiny_model), overrides={**TINY_SFT, "max_length": 8})


def test_full_finetuning_sft_then_dpo(tiny_model: Path, taxonomy, tmp_path: Path) -> None:
    samples = _samples(taxonomy)
    sft = train_sft(sft_examples(samples, taxonomy, top_k=1, passage_words=10), paths.CONFIGS_DIR / "train" / "critic_sft.yaml",
                    tmp_path / "sft", base_model=str(tiny_model), overrides={**TINY_SFT, "peft": False})
    assert not sft.is_adapter and (tmp_path / "sft" / "model.safetensors").exists()
    start = dpo_start(sft)
    assert start == {"base_model": str(tmp_path / "sft"), "init_adapter": None}
    pairs, _ = dpo_pairs(samples, taxonomy, k_coarse=1, k_fine=1, seed=0, top_k=1, passage_words=10)
    dpo = train_dpo(pairs, paths.CONFIGS_DIR / "train" / "critic_dpo.yaml", tmp_path / "dpo", **start,
                    overrides={**TINY_SFT, "peft": False, "gradient_accumulation_steps": 1})
    assert dpo.steps == 1 and not dpo.is_adapter
    out = inference_checkpoint(dpo, tmp_path / "export", dtype="bfloat16")
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"


def test_train_result_roundtrip_with_repository_relative_paths(tmp_path: Path) -> None:
    r = TrainResult(adapter_dir=str(paths.ROOT / "data" / "x" / "adapter"), is_adapter=True,
                    base_model=str(paths.MODELS_DIR / "m"), steps=4, seconds=10.0)
    d = r.to_dict()
    assert (d["adapter_dir"], d["base_model"], d["seconds_per_step"]) == ("data/x/adapter", "data/assets/models/m", 2.5)
    write_json(tmp_path / "r.json", d)
    back = load_train_result(tmp_path / "r.json")
    assert back.adapter_dir == "data/x/adapter" and back.steps == 4
    assert dpo_start(back) == {"base_model": str(paths.MODELS_DIR / "m"), "init_adapter": str(paths.ROOT / "data/x/adapter")}


def test_accelerate_launcher_runs_the_cli(tiny_model: Path, taxonomy, tmp_path: Path) -> None:
    """The launcher path (subprocess `accelerate launch -m ragcritic_lib.critic.training`) on one CPU process."""
    from ragcritic_lib.critic.training import run_training

    cfg = tmp_path / "cpu.yaml"
    cfg.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nnum_processes: 1\nuse_cpu: true\n"
                   "mixed_precision: 'no'\nmachine_rank: 0\nnum_machines: 1\n")
    examples = sft_examples(_samples(taxonomy), taxonomy, top_k=1, passage_words=10)
    result = run_training("sft", examples, paths.CONFIGS_DIR / "train" / "critic_sft.yaml", tmp_path / "out",
                          base_model=str(tiny_model), overrides=TINY_SFT, launcher="accelerate", accelerate_config=str(cfg))
    assert result.steps == 1 and result.is_adapter and result.examples == 3
    assert (tmp_path / "out" / "adapter_config.json").exists()
    assert json.loads((tmp_path / "out" / "loss_curve.json").read_text())[0]["step"] == 1
    with pytest.raises(ValueError, match="unknown launcher 'slurm'"):
        run_training("sft", examples, "x.yaml", tmp_path / "o2", base_model="m", launcher="slurm")


# --------------------------------------------------------------------------------------------
# Recipes valid under both environments' transformers (CPU: installed; GPU: 5.19, recorded)
# --------------------------------------------------------------------------------------------
RECIPES = ["critic_sft", "critic_dpo", "planner_sft", "critic_sft_paper", "critic_dpo_paper", "planner_sft_paper"]
FIELDS_519 = Path(__file__).parent / "data" / "transformers_5.19.0_training_args_fields.txt"


def _dataclass_field_names(source: str, cls: str = "TrainingArguments") -> set[str]:
    """Field names of a dataclass read from its source: the annotated names of the class body."""
    import ast

    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {st.target.id for st in node.body
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
            and "ClassVar" not in ast.unparse(st.annotation)}


def _recorded_519_fields() -> set[str]:
    return {ln.strip() for ln in FIELDS_519.read_text().splitlines() if ln.strip() and not ln.startswith("#")}


def test_field_reader_matches_the_installed_training_arguments() -> None:
    """The reader that produced the recorded 5.19 list gives dataclasses.fields on this version."""
    import dataclasses

    import transformers
    import transformers.training_args as ta

    assert _dataclass_field_names(Path(ta.__file__).read_text()) == {
        f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    recorded = _recorded_519_fields()
    assert "gradient_checkpointing" in recorded and "activation_checkpointing" not in recorded
    assert {"seed", "data_seed", "max_steps", "save_total_limit", "num_train_epochs"} <= recorded


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_keys_are_valid_for_transformers_519(name: str) -> None:
    import dataclasses

    import transformers

    from trl import DPOConfig, SFTConfig

    kind = "dpo" if "dpo" in name else "sft"
    config = DPOConfig if kind == "dpo" else SFTConfig
    installed_ta = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    trl_own = {f.name for f in dataclasses.fields(config)} - installed_ta  # trl is pinned alike in both sets
    fields_519 = _recorded_519_fields() | trl_own
    raw = read_yaml(paths.CONFIGS_DIR / "train" / f"{name}.yaml")
    keys = portable_keys(raw, fields_519)
    unknown = sorted(k for k in keys if k not in fields_519 and k not in OUR_KEYS)
    assert unknown == []
    if "activation_checkpointing" in raw:
        assert keys["gradient_checkpointing"] == raw["activation_checkpointing"]


def test_renamed_keys_follow_the_installed_version() -> None:
    assert portable_keys({"activation_checkpointing": True, "lr": 1}, {"gradient_checkpointing", "lr"}) == {
        "gradient_checkpointing": True, "lr": 1}
    assert portable_keys({"gradient_checkpointing": False}, {"activation_checkpointing"}) == {
        "activation_checkpointing": False}
    both = {"activation_checkpointing", "gradient_checkpointing"}
    assert portable_keys({"activation_checkpointing": True}, both) == {"activation_checkpointing": True}
    with pytest.raises(ValueError, match="'activation_checkpointing' and 'gradient_checkpointing'"):
        portable_keys({"activation_checkpointing": True, "gradient_checkpointing": False}, {"gradient_checkpointing"})


# --------------------------------------------------------------------------------------------
# One seed (params.yaml common.seed), bounded checkpoints, full epochs, rank-0 merges
# --------------------------------------------------------------------------------------------
def _params_with_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed) -> None:
    f = tmp_path / "params.yaml"
    f.write_text(f"common:\n  seed: {seed}\n")
    monkeypatch.setattr(paths, "PARAMS_FILE", f)


def test_recipes_hold_no_seed_and_a_recipe_seed_is_refused() -> None:
    for name in RECIPES:
        raw = read_yaml(paths.CONFIGS_DIR / "train" / f"{name}.yaml")
        assert "seed" not in raw and "data_seed" not in raw
    with pytest.raises(ValueError, match="'seed' is not a recipe key.*common.seed"):
        load_recipe({"seed": 1}, "sft")
    with pytest.raises(ValueError, match="'data_seed' is not a recipe key"):
        load_recipe({"data_seed": 1}, "dpo")
    assert load_recipe({}, "sft", {"seed": 4})["seed"] == 4  # callers may pass it through


def test_training_seed_comes_from_params_unless_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _params_with_seed(tmp_path, monkeypatch, 7)
    assert training_seed() == 7
    assert training_seed(None, {"seed": 3}) == 3
    assert training_seed(5, {"seed": 3}) == 5
    _params_with_seed(tmp_path, monkeypatch, "x")
    with pytest.raises(ValueError, match="common.seed must be an integer"):
        training_seed()


def test_sft_run_is_seeded_from_params(tiny_model: Path, taxonomy, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _params_with_seed(tmp_path, monkeypatch, 7)
    examples = sft_examples(_samples(taxonomy), taxonomy, top_k=1, passage_words=10)
    result = train_sft(examples, paths.CONFIGS_DIR / "train" / "critic_sft.yaml", tmp_path / "sft",
                       base_model=str(tiny_model), overrides=TINY_SFT)
    assert (result.recipe["seed"], result.recipe["data_seed"]) == (7, 7)


def test_checkpoints_during_training_are_bounded(tiny_model: Path, taxonomy, tmp_path: Path) -> None:
    cfg, _, _ = build_configs({"save_strategy": "steps", "save_steps": 5}, "sft", tmp_path)
    assert cfg.save_total_limit == DEFAULT_SAVE_TOTAL_LIMIT == 2
    assert build_configs({"save_strategy": "steps", "save_total_limit": 3}, "sft", tmp_path)[0].save_total_limit == 3
    assert build_configs({"save_strategy": "no"}, "sft", tmp_path)[0].save_total_limit is None
    for name in RECIPES:
        raw = read_yaml(paths.CONFIGS_DIR / "train" / f"{name}.yaml")
        kind = "dpo" if "dpo" in name else "sft"
        if raw.get("save_strategy", "steps") != "no":
            assert build_configs(load_recipe(raw, kind), kind, tmp_path)[0].save_total_limit == 2
    examples = sft_examples(_samples(taxonomy), taxonomy, top_k=1, passage_words=10)
    train_sft(examples, paths.CONFIGS_DIR / "train" / "critic_sft.yaml", tmp_path / "run", base_model=str(tiny_model),
              overrides={**TINY_SFT, "max_steps": 4, "save_strategy": "steps", "save_steps": 1}, seed=0)
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]


def test_max_steps_minus_one_trains_full_epochs(tiny_model: Path, taxonomy, tmp_path: Path) -> None:
    for name in ("critic_sft_paper", "critic_dpo_paper", "planner_sft_paper"):
        kind = "dpo" if "dpo" in name else "sft"
        assert build_configs(load_recipe(paths.CONFIGS_DIR / "train" / f"{name}.yaml", kind), kind,
                             tmp_path)[0].max_steps == -1
    examples = sft_examples(_samples(taxonomy), taxonomy, top_k=1, passage_words=10)  # 3 examples
    result = train_sft(examples, paths.CONFIGS_DIR / "train" / "critic_sft.yaml", tmp_path / "ep",
                       base_model=str(tiny_model), overrides={**TINY_SFT, "max_steps": -1, "num_train_epochs": 2}, seed=0)
    assert result.steps == 4  # ceil(3 / batch 2) = 2 steps per epoch, 2 epochs


def _merge_worker(rank: int, tiny: str, adapter: str, out: str, log: str, pg_file: str) -> None:
    """One of two gloo ranks calling merge_adapter; every save_pretrained is logged with its rank."""
    import os as _os

    import torch.distributed as dist
    from transformers import PreTrainedModel

    _os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", init_method=f"file://{pg_file}", rank=rank, world_size=2)
    original = PreTrainedModel.save_pretrained

    def logged(self, *args, **kwargs):
        import time as _time

        with open(log, "a") as fh:
            fh.write(f"{rank}\n")
        _time.sleep(1.0)  # a rank that did not wait would look for the files before they exist
        return original(self, *args, **kwargs)

    PreTrainedModel.save_pretrained = logged
    merge_adapter(tiny, adapter, out, dtype="float32")
    # After merge_adapter returns, the merged checkpoint is complete on every rank.
    seen = (Path(out) / "model.safetensors").exists() and (Path(out) / "tokenizer_config.json").exists()
    with open(log, "a") as fh:
        fh.write(f"seen{rank}={seen}\n")
    dist.barrier()
    dist.destroy_process_group()


def test_merge_runs_once_on_rank_zero_and_all_ranks_wait(tiny_model: Path, tmp_path: Path) -> None:
    import torch.multiprocessing as tmp_mp
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(tiny_model)),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    model.save_pretrained(str(tmp_path / "adapter"))
    log = tmp_path / "log.txt"
    tmp_mp.spawn(_merge_worker, args=(str(tiny_model), str(tmp_path / "adapter"), str(tmp_path / "merged"), str(log),
                                      str(tmp_path / "pg")), nprocs=2, join=True)
    lines = log.read_text().split()
    assert [ln for ln in lines if not ln.startswith("seen")] == ["0"]
    assert sorted(ln for ln in lines if ln.startswith("seen")) == ["seen0=True", "seen1=True"]


def test_training_cli_reads_a_repository_relative_data_path_from_any_folder(tmp_path, monkeypatch, capsys) -> None:
    from ragcritic_lib.critic.training import main

    monkeypatch.chdir(tmp_path)  # not the repository root; recipe and data are found from the root
    args = ["sft", "--recipe", "configs/train/critic_sft.yaml", "--data", "data/no_such_dir/x.jsonl",
            "--out", str(tmp_path / "o"), "--base-model", "m", "--set", "max_steps"]
    assert main(args) == 2
    assert "--data data/no_such_dir/x.jsonl: no such file" in capsys.readouterr().err
    rel = [a if a != "data/no_such_dir/x.jsonl" else "pyproject.toml" for a in args]
    assert main(rel) == 2  # found (not "no such file"); the --set without '=' is the one problem
    assert capsys.readouterr().err.strip() == "python -m ragcritic_lib.critic.training: --set expects key=value, got 'max_steps'"


@pytest.mark.parametrize("args, message", [
    (["--recipe", "configs/train/nope.yaml", "--data", "DATA"], "--recipe configs/train/nope.yaml: no such file"),
    (["--recipe", "configs/train/critic_sft.yaml", "--data", "/no/such/data.jsonl"], "--data /no/such/data.jsonl: no such file"),
    (["--recipe", "configs/train/critic_sft.yaml", "--data", "DATA", "--set", "learning_rate=fast"],
     "recipe key 'learning_rate' must be a number"),
    (["--recipe", "configs/train/critic_sft.yaml", "--data", "DATA", "--base-model", "data/assets/models/nope"],
     "--base-model data/assets/models/nope: no such model folder"),
])
def test_training_cli_bad_arguments_are_one_line_before_any_loading(tmp_path, capsys, args, message) -> None:
    from ragcritic_lib.critic.training import main

    data = tmp_path / "data.jsonl"
    data.write_text('{"messages": []}\n')
    args = [str(data) if a == "DATA" else a for a in args]
    if "--base-model" not in args:
        args += ["--base-model", "some-org/some-model"]
    assert main(["sft", *args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m ragcritic_lib.critic.training: ") and message in err and len(err.splitlines()) == 1


def _completion_logp(model, tok, prompt, completion):
    """Summed log-probability of ``completion`` (+ end of turn) after the chat prompt, by one plain forward pass."""
    import torch

    p_ids = tok(tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True),
                add_special_tokens=False)["input_ids"]
    c_ids = tok(completion + tok.eos_token, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p_ids + c_ids])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return float(sum(lp[len(p_ids) - 1 + k, t] for k, t in enumerate(c_ids)))


def test_cached_dpo_trainer_moves_the_full_model_towards_chosen_against_its_reference(tiny_model: Path,
                                                                                       tmp_path: Path) -> None:
    """``trainer: cached``: a fresh LoRA on the top layer starts at the reference (first loss log 2), one
    epoch is ceil(pairs / batch) steps, the saved adapter touches the top layer only, and by a plain
    forward pass of the whole model the chosen completion gains on the rejected one. Continuing that
    adapter starts again at log 2: the reference is the adapter's own state, not the base."""
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompt = [{"role": "system", "content": "Write one plan."}, {"role": "user", "content": "Who wrote report 1?"}]
    pairs = [{"prompt": prompt, "chosen": "Retrieval then GenerateAnswer", "rejected": "RefineDoc"}] * 5
    recipe = {"trainer": "cached", "lora_top_layers": 1, "lora_r": 4, "lora_alpha": 8, "learning_rate": 0.05,
              "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "num_train_epochs": 1,
              "warmup_steps": 0, "beta": 0.1, "cpu_bf16": False, "max_length": 512}
    from ragcritic_lib.critic import cached_dpo

    res = cached_dpo.train_dpo(pairs, recipe, tmp_path / "off", base_model=str(tiny_model))
    assert (res.steps, res.examples, res.is_adapter, res.dropped_too_long) == (3, 5, True, 0)
    assert res.log_history[0]["loss"] == pytest.approx(math.log(2), abs=1e-3)
    assert res.log_history[-1]["loss"] < res.log_history[0]["loss"]
    names = list(load_file(str(tmp_path / "off" / "adapter_model.safetensors")))
    assert names and all(".layers.1." in n for n in names), names
    assert res.recipe["adapted_layers"] == [1]

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    gap = lambda m: _completion_logp(m, tok, prompt, pairs[0]["chosen"]) - _completion_logp(m, tok, prompt, pairs[0]["rejected"])  # noqa: E731
    before = gap(base)
    trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(tiny_model)), str(tmp_path / "off"))
    assert gap(trained) > before + 0.1

    on = cached_dpo.train_dpo(pairs[:2], recipe, tmp_path / "on", **dpo_start(res))
    assert on.steps == 1 and on.log_history[0]["loss"] == pytest.approx(math.log(2), abs=1e-3)


def test_cached_dpo_trainer_refuses_what_it_cannot_run(tiny_model: Path, tmp_path: Path) -> None:
    from ragcritic_lib.critic.cached_dpo import train_dpo as cached_train_dpo

    pairs = [{"prompt": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "b"}]
    with pytest.raises(ValueError, match="trainer: cached runs through ragcritic_lib.critic.cached_dpo.train_dpo"):
        train_dpo(pairs, {"trainer": "cached", "lora_top_layers": 1}, tmp_path / "t", base_model=str(tiny_model))
    with pytest.raises(ValueError, match="recipe key 'trainer' must be one of trl, cached"):
        load_recipe({"trainer": "fast"}, "dpo")
    with pytest.raises(ValueError, match="recipe key 'trainer' 'cached' is for DPO recipes"):
        load_recipe({"trainer": "cached"}, "sft")
    with pytest.raises(ValueError, match="needs lora_top_layers > 0"):
        cached_train_dpo(pairs, {"trainer": "cached"}, tmp_path / "a", base_model=str(tiny_model))
    with pytest.raises(ValueError, match="sigmoid DPO loss only"):
        cached_train_dpo(pairs, {"trainer": "cached", "lora_top_layers": 1, "loss_type": "ipo"}, tmp_path / "b",
                         base_model=str(tiny_model))
    with pytest.raises(ValueError, match="trains a LoRA adapter"):
        cached_train_dpo(pairs, {"trainer": "cached", "lora_top_layers": 1, "peft": False}, tmp_path / "c",
                         base_model=str(tiny_model))
