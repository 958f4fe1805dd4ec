"""Critic (and planner) training with TRL: SFT, DPO, recipes, adapter merging and a launch CLI.

A recipe is a flat YAML file (``configs/train/*.yaml``). Its keys are either fields of TRL's own
``SFTConfig`` / ``DPOConfig`` (hence of ``transformers.TrainingArguments``) or one of the few keys
this module adds:

    peft (bool, default true)    LoRA through peft; false = full fine-tuning
    lora_r, lora_alpha, lora_dropout, lora_target_modules   -> peft.LoraConfig
    lora_top_layers (int, default 0)  LoRA on the top N decoder layers only (0 = every layer): the
                                 backward pass then stops at the lowest adapted layer, so a step
                                 costs the forward pass plus N layers' backward
    model_dtype ("float32" | "bfloat16" | "auto")           -> dtype the model is loaded in
    cpu_bf16 ("auto" | true | false, default "auto")        -> bf16 autocast on a CPU (below)
    trainer ("trl" | "cached")   DPO only: "cached" runs in :mod:`ragcritic_lib.critic.cached_dpo`

Anything else is one clear error naming the key and the file. Keys renamed between the
transformers versions of the two environments (``activation_checkpointing`` in 5.23, called
``gradient_checkpointing`` in 5.19) are written under the installed version's name.

The seed is not a recipe key: every run takes ``params.yaml`` ``common.seed`` (or an explicit
``seed``), as ``seed`` and ``data_seed`` of the trainer, so one number fixes every stage.
Checkpoints during training are bounded (``save_total_limit``, default
:data:`DEFAULT_SAVE_TOTAL_LIMIT`). Under a multi-process launcher, merging an adapter and
writing a checkpoint happen on the main process only, and every process waits for it.

Device handling: without a GPU the run is forced onto the CPU (``use_cpu=True``, ``fp16=False``)
with float32 weights, and ``bf16`` follows ``cpu_bf16``: "auto" turns bf16 autocast on where the CPU
has AMX or AVX512-BF16 (the matrix products then run in bf16, the LoRA weights and the optimizer
stay in float32: about 2x faster per step there) and off elsewhere, where bf16 would be emulated and
slower; true / false force it. With GPUs the recipe applies as written. Multi-GPU and DeepSpeed
ZeRO-3 runs go through ``accelerate launch`` and the CLI of this module::

    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml \\
        -m ragcritic_lib.critic.training sft --recipe configs/train/critic_sft_paper.yaml \\
        --data data/critic_sft/sft_train.jsonl --out data/critic_sft/adapter \\
        --base-model data/assets/models/smollm2-135m-instruct

:func:`run_training` runs the same thing in-process or through that launcher, so a notebook
stage switches between CPU and a GPU cluster with one parameter.

Reference model in DPO (section 3.2: the SFT model, fixed): with ``init_adapter`` (the SFT
LoRA) TRL copies the adapter into a frozen "ref" adapter and trains the other copy; with a
merged SFT checkpoint as ``base_model`` and a fresh LoRA, the reference is that checkpoint with
the adapter disabled. Either way the reference is the SFT model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import read_jsonl, read_yaml, write_json, write_jsonl

OUR_KEYS = {
    "peft": True,
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "lora_top_layers": 0,
    "model_dtype": "float32",
    "cpu_bf16": "auto",
    "trainer": "trl",
}

TRAINERS = ("trl", "cached")  # recipe key ``trainer``: who runs a DPO recipe
# Trainer keys renamed between transformers releases: (newer name, older name). transformers 5.23
# calls it activation_checkpointing (gradient_checkpointing is a deprecated alias); 5.19, the
# version vLLM 0.32 allows in the GPU environment, knows only gradient_checkpointing.
RENAMED_KEYS = (
    ("activation_checkpointing", "gradient_checkpointing"),
    ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"),
)
# The seed comes from params.yaml common.seed; a recipe must not hold a second one.
SEED_KEYS = ("seed", "data_seed")
# Checkpoints kept on disk when a recipe saves during training but sets no limit: a paper-scale
# run saves every 200 steps, and each checkpoint of a 3B model with its optimizer state is ~40 GB.
DEFAULT_SAVE_TOTAL_LIMIT = 2


@dataclass
class TrainResult:
    """What a training run produced.

    Attributes:
        adapter_dir: the saved LoRA adapter (or the full model for ``peft: false``).
        is_adapter: whether ``adapter_dir`` is a peft adapter.
        base_model: the model the adapter applies to.
        steps, seconds: optimizer steps done and wall time of ``trainer.train()``.
        log_history: the trainer's log rows (loss curves).
        examples, dropped_too_long: training rows used / left out for exceeding ``max_length``.
        device: "cpu", "cuda" (or "cuda x N" under a launcher).
        recipe: the resolved recipe (after overrides and device handling).
    """

    adapter_dir: str
    is_adapter: bool
    base_model: str
    steps: int
    seconds: float
    log_history: list[dict[str, Any]] = field(default_factory=list)
    examples: int = 0
    dropped_too_long: int = 0
    device: str = "cpu"
    recipe: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / self.steps if self.steps else 0.0

    def to_dict(self) -> dict[str, Any]:
        """As a dict; paths inside the repository become relative, so the record survives a
        ``dvc pull`` on another machine (resolve them with ``paths.resolve``)."""
        d = dataclasses.asdict(self)
        for key in ("adapter_dir", "base_model"):
            p = Path(d[key])
            if p.is_absolute() and p.is_relative_to(paths.ROOT):
                d[key] = str(p.relative_to(paths.ROOT))
        d["seconds_per_step"] = round(self.seconds_per_step, 3)
        return d


# --------------------------------------------------------------------------------------------
# Recipes
# --------------------------------------------------------------------------------------------
def _config_class(kind: str) -> type:
    if kind == "sft":
        from trl import SFTConfig

        return SFTConfig
    if kind == "dpo":
        from trl import DPOConfig

        return DPOConfig
    raise ValueError(f"unknown training kind {kind!r} (expected 'sft' or 'dpo')")


def portable_keys(recipe: Mapping[str, Any], fields: set[str] | frozenset[str]) -> dict[str, Any]:
    """``recipe`` with each renamed trainer key written under the name ``fields`` knows.

    Args:
        recipe: flat recipe keys and values.
        fields: field names of the trainer config of the installed transformers (or a recorded
            list of another version's).
    """
    out = dict(recipe)
    for new, old in RENAMED_KEYS:
        for have, want in ((new, old), (old, new)):
            if have in out and have not in fields and want in fields:
                if want in out and out[want] != out[have]:
                    raise ValueError(f"recipe sets both {have!r} and {want!r} (the same setting) to different values")
                out[want] = out.pop(have)
    return out


def load_recipe(recipe: str | os.PathLike[str] | Mapping[str, Any], kind: str,
                overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Read a flat recipe and check every key; ``overrides`` win over the file.

    The recipe may not set ``seed`` / ``data_seed`` (they come from params.yaml, see
    :func:`training_seed`); ``overrides`` may.

    Raises:
        ValueError: naming the first unknown key and the recipe it came from.
    """
    if isinstance(recipe, Mapping):
        raw, source = dict(recipe), "<dict>"
    else:
        source = str(recipe)
        raw = read_yaml(paths.resolve(recipe)) or {}
        if not isinstance(raw, Mapping):
            raise ValueError(f"{source}: a recipe must be a flat mapping of keys to values")
    for key in SEED_KEYS:
        if key in raw:
            raise ValueError(f"{source}: {key!r} is not a recipe key: every training run takes params.yaml "
                             "common.seed (or the caller's seed)")
    cls = _config_class(kind)
    fields = {f.name for f in dataclasses.fields(cls)}
    merged = portable_keys({**raw, **dict(overrides or {})}, fields)
    allowed = fields | set(OUR_KEYS)
    for key in merged:
        if key not in allowed:
            raise ValueError(
                f"{source}: unknown recipe key {key!r} (not a field of {cls.__name__} nor one of {sorted(OUR_KEYS)})"
            )
    for key in ("output_dir",):
        if key in merged:
            raise ValueError(f"{source}: {key!r} is set by the caller, not the recipe")
    if "cpu_bf16" in merged and not (isinstance(merged["cpu_bf16"], bool) or merged["cpu_bf16"] == "auto"):
        raise ValueError(f"{source}: recipe key 'cpu_bf16' must be \"auto\", true or false; got {merged['cpu_bf16']!r}")
    fields_by_name = {f.name: f for f in dataclasses.fields(cls)}
    defaults = {name: f.default for name, f in fields_by_name.items()} | OUR_KEYS
    for key, value in merged.items():
        optional = key in fields_by_name and any(w in str(fields_by_name[key].type) for w in ("None", "Optional"))
        if value is None and optional:
            continue  # e.g. max_length: null, "no limit"
        problem = _value_problem(key, value, defaults.get(key, dataclasses.MISSING))
        if problem:
            raise ValueError(f"{source}: recipe key {key!r} {problem}; got {value!r}")
    if kind != "dpo" and merged.get("trainer", "trl") != "trl":
        raise ValueError(f"{source}: recipe key 'trainer' {merged['trainer']!r} is for DPO recipes; {kind} runs with TRL")
    return merged


def _is_number_text(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


def _value_problem(key: str, value: Any, default: Any) -> str | None:
    """Why ``value`` cannot stand for a key whose default is ``default`` (None when it can): the
    numbers, switches and lists that a recipe sets, and the dtypes we load models in."""
    if key == "model_dtype":
        return None if value in ("float32", "bfloat16", "auto") else 'must be "float32", "bfloat16" or "auto"'
    if key == "trainer":
        return None if value in TRAINERS else f"must be one of {', '.join(TRAINERS)}"
    if key == "lora_top_layers":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else "must be a whole number >= 0 (0 = every layer)"
    if key == "lora_target_modules":
        ok = value == "all-linear" or (isinstance(value, list) and value and all(isinstance(v, str) for v in value))
        return None if ok else 'must be a list of module names (or "all-linear")'
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(default, (int, float)):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return None
        hint = " (YAML reads a number like 2e-4 as a string: write 2.0e-4)" if _is_number_text(value) else ""
        return f"must be a number{hint}"
    return None


def training_seed(seed: int | None = None, overrides: Mapping[str, Any] | None = None) -> int:
    """The seed of a training run: ``seed``, else ``overrides["seed"]``, else params.yaml ``common.seed``.

    Raises:
        ValueError: params.yaml has no integer ``common.seed``.
    """
    if seed is None and overrides and overrides.get("seed") is not None:
        seed = overrides["seed"]
    if seed is None:
        from ragcritic_lib.pipeline.params import load_params

        common = load_params(validate=False).get("common") or {}
        seed = common.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"{paths.PARAMS_FILE}: common.seed must be an integer (the seed of every training run), "
                             f"got {seed!r}")
    return int(seed)


def _seeded(overrides: Mapping[str, Any] | None, seed: int | None) -> dict[str, Any]:
    s = training_seed(seed, overrides)
    return {**dict(overrides or {}), "seed": s, "data_seed": s}


def is_main_process() -> bool:
    """True unless this is a non-zero rank of an initialised torch.distributed group or launcher."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return int(os.environ.get("RANK", "0")) == 0


def on_main_process(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` on the main process only; every process waits until it has finished.

    Without a multi-process group this just calls ``fn``. Under ``accelerate launch`` (or
    torchrun) several ranks would otherwise merge into the same folder at once and read each
    other's half-written files. The other ranks return None.
    """
    import torch.distributed as dist

    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if not (dist.is_available() and dist.is_initialized()) and not launched:
        return fn(*args, **kwargs)
    if not dist.is_initialized():
        from accelerate import PartialState

        PartialState()  # joins the launcher's process group, so there is a barrier to wait at
    result = fn(*args, **kwargs) if dist.get_rank() == 0 else None
    dist.barrier()
    return result


def has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def cpu_bf16_enabled(setting: Any) -> bool:
    """Whether a CPU run trains under bf16 autocast: ``cpu_bf16`` "auto" where the CPU has
    AMX or AVX512-BF16 (the rule of the generator's "auto" dtype), or an explicit true / false."""
    if isinstance(setting, bool):
        return setting
    if setting != "auto":
        raise ValueError(f"recipe key 'cpu_bf16' must be \"auto\", true or false; got {setting!r}")
    from ragcritic_lib.llm import _resolve_dtype

    return _resolve_dtype("auto", "cpu") == "bfloat16"


def model_depth(model_dir: str | os.PathLike[str]) -> int:
    """The number of decoder layers of a local model folder (``num_hidden_layers`` of its config.json).

    Raises:
        ValueError: naming the file when it has no such number.
    """
    cfg_file = Path(model_dir) / "config.json"
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{cfg_file}: cannot read the model's config ({exc})") from None
    depth = cfg.get("num_hidden_layers") if isinstance(cfg, dict) else None
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise ValueError(f"{cfg_file}: no positive integer num_hidden_layers (got {depth!r})")
    return depth


def lora_layers(top: int, depth: int | None) -> list[int] | None:
    """The decoder layers ``lora_top_layers: top`` adapts (None = every layer).

    Raises:
        ValueError: ``top`` > 0 without the model's depth, or deeper than the model.
    """
    if not top:
        return None
    if depth is None:
        raise ValueError(f"recipe key 'lora_top_layers' ({top}) needs the base model's depth; pass depth=")
    if top > depth:
        raise ValueError(f"recipe key 'lora_top_layers' ({top}) exceeds the model's {depth} layers")
    return list(range(depth - top, depth))


def build_configs(recipe: Mapping[str, Any], kind: str, output_dir: str | os.PathLike[str], *,
                  depth: int | None = None) -> tuple[Any, Any, dict]:
    """(TRL config, LoraConfig or None, resolved recipe) with the device rules applied.

    ``depth``: the base model's number of decoder layers, needed when the recipe sets ``lora_top_layers``."""
    resolved = {**OUR_KEYS, **dict(recipe)}
    trl_kwargs = {k: v for k, v in resolved.items() if k not in OUR_KEYS}
    trl_kwargs.setdefault("report_to", "none")
    if trl_kwargs.get("save_strategy", "steps") != "no" and trl_kwargs.get("save_total_limit") is None:
        trl_kwargs["save_total_limit"] = DEFAULT_SAVE_TOTAL_LIMIT
    cpu_bf16 = cpu_bf16_enabled(resolved.get("cpu_bf16", "auto"))
    if not has_gpu():
        # TRL's bf16 default assumes a GPU: on a CPU, bf16 autocast only where the CPU computes it natively.
        trl_kwargs.update(use_cpu=True, bf16=cpu_bf16, fp16=False)
        trl_kwargs.setdefault("dataloader_pin_memory", False)
        if str(resolved.get("model_dtype")) == "bfloat16":
            resolved["model_dtype"] = "float32"
    dtype = resolved.get("model_dtype", "float32")
    init_kwargs = dict(trl_kwargs.pop("model_init_kwargs", None) or {})
    init_kwargs.setdefault("dtype", dtype)
    trl_kwargs["model_init_kwargs"] = init_kwargs
    cls = _config_class(kind)
    cfg = cls(output_dir=str(output_dir), **trl_kwargs)
    lora = None
    if resolved.get("peft", True):
        from peft import LoraConfig

        layers = lora_layers(int(resolved.get("lora_top_layers") or 0), depth)
        lora = LoraConfig(
            r=int(resolved["lora_r"]), lora_alpha=int(resolved["lora_alpha"]),
            lora_dropout=float(resolved["lora_dropout"]),
            target_modules=(resolved["lora_target_modules"] if isinstance(resolved["lora_target_modules"], str)
                            else list(resolved["lora_target_modules"])), task_type="CAUSAL_LM",
            **({"layers_to_transform": layers, "layers_pattern": "layers"} if layers else {}),
        )
    resolved.update({k: v for k, v in trl_kwargs.items() if k != "model_init_kwargs"})
    return cfg, lora, resolved


def _recipe_depth(recipe: Mapping[str, Any], base_model: str | os.PathLike[str]) -> int | None:
    """The base model's depth when the recipe adapts only its top layers (else None: not read)."""
    return model_depth(base_model) if recipe.get("lora_top_layers") else None


# --------------------------------------------------------------------------------------------
# Data helpers
# --------------------------------------------------------------------------------------------
def _load_tokenizer(base_model: str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _chat_len(tok: Any, messages: list[dict[str, str]]) -> int:
    ids = tok.apply_chat_template(messages, tokenize=True)
    if isinstance(ids, Mapping) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return len(ids)


def to_prompt_completion(examples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``{"messages": [..., assistant]}`` -> ``{"prompt": [...], "completion": [assistant]}``.

    Prompt-completion rows make TRL compute the loss on the critique only.
    """
    rows = []
    for i, ex in enumerate(examples):
        msgs = ex.get("messages")
        if not isinstance(msgs, list) or not msgs or msgs[-1].get("role") != "assistant":
            raise ValueError(f"SFT example {i}: 'messages' must be a list ending with an assistant message")
        rows.append({"prompt": [dict(m) for m in msgs[:-1]], "completion": [dict(msgs[-1])]})
    return rows


def to_dpo_rows(pairs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Conversational DPO rows: prompt messages, chosen/rejected as one assistant message each."""
    rows = []
    for i, p in enumerate(pairs):
        for key in ("prompt", "chosen", "rejected"):
            if key not in p:
                raise ValueError(f"DPO pair {i}: missing key {key!r}")
        prompt = p["prompt"]
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]

        def wrap(x: Any) -> list[dict[str, str]]:
            return [{"role": "assistant", "content": x}] if isinstance(x, str) else [dict(m) for m in x]

        rows.append({"prompt": [dict(m) for m in prompt], "chosen": wrap(p["chosen"]), "rejected": wrap(p["rejected"])})
    return rows


def _fit(rows: list[dict[str, Any]], tok: Any, max_length: int | None, keys: Sequence[str]) -> tuple[list, int]:
    """Drop rows whose prompt + longest completion exceeds ``max_length`` tokens.

    TRL truncates from the end, which would cut the critique itself: better to leave the row out
    and count it.
    """
    if not max_length:
        return rows, 0
    kept = [r for r in rows if max(_chat_len(tok, r["prompt"] + r[k]) for k in keys) <= max_length]
    return kept, len(rows) - len(kept)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
def _finish(trainer: Any, tok: Any, output_dir: Path, is_adapter: bool, base_model: str, seconds: float,
            examples: int, dropped: int, resolved: dict) -> TrainResult:
    trainer.save_model(str(output_dir))
    if trainer.is_world_process_zero():
        tok.save_pretrained(str(output_dir))
    import torch

    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = ("cuda" if n_gpu else "cpu") + (f" x {world}" if world > 1 else "")
    return TrainResult(
        adapter_dir=str(output_dir), is_adapter=is_adapter, base_model=str(base_model),
        steps=int(trainer.state.global_step), seconds=round(seconds, 2),
        log_history=[dict(r) for r in trainer.state.log_history], examples=examples,
        dropped_too_long=dropped, device=device, recipe=_jsonable(resolved),
    )


def _jsonable(d: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(dict(d), default=str))


def train_sft(
    examples: Sequence[Mapping[str, Any]],
    recipe: str | os.PathLike[str] | Mapping[str, Any],
    output_dir: str | os.PathLike[str],
    *,
    base_model: str,
    overrides: Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> TrainResult:
    """Supervised fine-tuning (loss on the assistant turn only) with TRL's SFTTrainer.

    Args:
        examples: ``{"messages": [system, user, assistant]}`` rows.
        recipe: recipe file or dict (see module docstring); ``overrides`` win over it.
        output_dir: where the adapter (or full model) and tokenizer are saved.
        base_model: local model folder.
        seed: seed and data_seed of the run; default: see :func:`training_seed`.
    """
    import datasets
    from trl import SFTTrainer

    if not examples:
        raise ValueError("train_sft: no training examples")
    recipe_d = load_recipe(recipe, "sft", _seeded(overrides, seed))
    output_dir = Path(output_dir)
    cfg, lora, resolved = build_configs(recipe_d, "sft", output_dir, depth=_recipe_depth(recipe_d, base_model))
    tok = _load_tokenizer(base_model)
    rows, dropped = _fit(to_prompt_completion(examples), tok, cfg.max_length, ["completion"])
    if not rows:
        raise ValueError(f"no SFT example fits max_length={cfg.max_length} ({dropped} too long)")
    # Passing the path (not a loaded model) lets DeepSpeed ZeRO-3 shard the weights at load time.
    trainer = SFTTrainer(model=str(base_model), args=cfg, train_dataset=datasets.Dataset.from_list(rows),
                         processing_class=tok, peft_config=lora)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    return _finish(trainer, tok, output_dir, lora is not None, base_model, seconds, len(rows), dropped, resolved)


def train_dpo(
    pairs: Sequence[Mapping[str, Any]],
    recipe: str | os.PathLike[str] | Mapping[str, Any],
    output_dir: str | os.PathLike[str],
    *,
    base_model: str,
    init_adapter: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> TrainResult:
    """Direct preference optimization (sigmoid loss, ``beta`` from the recipe) with DPOTrainer.

    Args:
        pairs: ``{"prompt": [messages], "chosen": str, "rejected": str}`` rows.
        base_model: the model the policy starts from (with ``init_adapter``: the base of that
            adapter; otherwise e.g. a merged SFT checkpoint).
        init_adapter: a LoRA adapter (the SFT critic) to continue from; it is also the frozen
            reference. With ``peft: false`` it is merged into the base first.
        seed: seed and data_seed of the run; default: see :func:`training_seed`.
    """
    import datasets
    from trl import DPOTrainer

    if not pairs:
        raise ValueError("train_dpo: no preference pairs")
    recipe_d = load_recipe(recipe, "dpo", _seeded(overrides, seed))
    output_dir = Path(output_dir)
    cfg, lora, resolved = build_configs(recipe_d, "dpo", output_dir, depth=_recipe_depth(recipe_d, base_model))
    tok = _load_tokenizer(base_model)
    rows, dropped = _fit(to_dpo_rows(pairs), tok, cfg.max_length, ["chosen", "rejected"])
    if not rows:
        raise ValueError(f"no DPO pair fits max_length={cfg.max_length} ({dropped} too long)")
    if resolved.get("trainer") == "cached":
        raise ValueError(f"{recipe}: trainer: cached runs through ragcritic_lib.critic.cached_dpo.train_dpo")
    model: Any = str(base_model)
    if init_adapter and lora is not None:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        init_kwargs = dict(cfg.model_init_kwargs or {})
        if isinstance(init_kwargs.get("dtype"), str) and init_kwargs["dtype"] != "auto":
            init_kwargs["dtype"] = getattr(torch, init_kwargs["dtype"])
        base = AutoModelForCausalLM.from_pretrained(str(base_model), **init_kwargs)
        cfg.model_init_kwargs = None  # used above; TRL would warn that an instance ignores them
        model = PeftModel.from_pretrained(base, str(init_adapter), is_trainable=True)
        lora = None  # continue the SFT adapter; TRL keeps a frozen copy as the reference
    elif init_adapter:
        merge_adapter(base_model, init_adapter, output_dir / "_init_merged", dtype="float32")
        model = str(output_dir / "_init_merged")
    trainer = DPOTrainer(model=model, args=cfg, train_dataset=datasets.Dataset.from_list(rows),
                         processing_class=tok, peft_config=lora)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    is_adapter = bool(init_adapter and resolved.get("peft", True)) or lora is not None
    result = _finish(trainer, tok, output_dir, is_adapter, base_model, seconds, len(rows), dropped, resolved)
    if is_adapter and init_adapter:
        _drop_ref_adapter(output_dir)
    on_main_process(shutil.rmtree, output_dir / "_init_merged", ignore_errors=True)
    return result


def _drop_ref_adapter(output_dir: Path) -> None:
    """``save_model`` also writes the frozen "ref" copy as a sub-folder; it is not an output."""
    on_main_process(shutil.rmtree, output_dir / "ref", ignore_errors=True)


def merge_adapter(
    base: str | os.PathLike[str],
    adapter_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    dtype: str = "bfloat16",
) -> Path:
    """Fold a LoRA adapter into its base model and save a plain checkpoint for fast inference.

    The merge is computed in float32, then the weights are cast to ``dtype``. The tokenizer
    (with its chat template) is copied from the adapter folder when present, else from the base.
    Under a multi-process launcher only the main process merges; all return when it is written.
    """
    out_dir = Path(out_dir)
    on_main_process(_merge_adapter, base, adapter_dir, out_dir, dtype)
    return out_dir


def _merge_adapter(base: str | os.PathLike[str], adapter_dir: str | os.PathLike[str], out_dir: Path,
                   dtype: str) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragcritic_lib.critic.forms import plain_config

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    merged = merged.to(getattr(torch, dtype))
    plain_config(merged, dtype)  # the merged checkpoint is plain safetensors, not the GGUF it came from
    merged.save_pretrained(str(out_dir), safe_serialization=True)
    tok_src = adapter_dir if (Path(adapter_dir) / "tokenizer_config.json").exists() else base
    AutoTokenizer.from_pretrained(str(tok_src)).save_pretrained(str(out_dir))


def inference_checkpoint(result: TrainResult, out_dir: str | os.PathLike[str], *, dtype: str = "bfloat16") -> Path:
    """A plain checkpoint (the merged adapter, or the fully fine-tuned model re-saved in
    ``dtype``) for exporting a trained model to a tool that reads only full checkpoints. The
    stages do not write one: they ship adapters or compact forms
    (:func:`ragcritic_lib.critic.train.ship_train_result`, :mod:`ragcritic_lib.critic.forms`)."""
    if result.is_adapter:
        return merge_adapter(paths.resolve(result.base_model), paths.resolve(result.adapter_dir), out_dir, dtype=dtype)
    out_dir = Path(out_dir)
    on_main_process(_resave, paths.resolve(result.adapter_dir), out_dir, dtype)
    return out_dir


def _resave(src: Path, out_dir: Path, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(str(src), dtype=getattr(torch, dtype)).save_pretrained(str(out_dir))
    AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(out_dir))


def dpo_start(sft: TrainResult) -> dict[str, str | None]:
    """Where DPO starts from an SFT result: continue its adapter, or fine-tune its full model."""
    if sft.is_adapter:
        return {"base_model": str(paths.resolve(sft.base_model)), "init_adapter": str(paths.resolve(sft.adapter_dir))}
    return {"base_model": str(paths.resolve(sft.adapter_dir)), "init_adapter": None}


def load_train_result(path: str | os.PathLike[str]) -> TrainResult:
    """Read a ``train_result.json`` written from :meth:`TrainResult.to_dict`."""
    d = json.loads(Path(path).read_text(encoding="utf-8"))
    d.pop("seconds_per_step", None)
    names = {f.name for f in dataclasses.fields(TrainResult)}
    return TrainResult(**{k: v for k, v in d.items() if k in names})


# --------------------------------------------------------------------------------------------
# Loss curves
# --------------------------------------------------------------------------------------------
def loss_curve(log_history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Training rows of a log history (those with a ``loss``) as flat dicts with ``step`` first."""
    rows: list[dict[str, Any]] = []
    for r in (r for r in log_history if "loss" in r):
        rows.append({"step": int(r.get("step", len(rows) + 1)),
                     **{k.replace("/", "_"): v for k, v in r.items() if k != "step" and isinstance(v, (int, float))}})
    return rows


def curve_value(rows: Sequence[Mapping[str, Any]], column: str, index: int = -1) -> float | None:
    """``rows[index][column]`` of a loss curve (:func:`loss_curve`'s rows) rounded to 4 digits: None when
    the curve is empty or no row has the column; a row without it reads as NaN, as in a DataFrame."""
    if not rows or not any(column in r for r in rows):
        return None
    return round(float(rows[index].get(column, float("nan"))), 4)


def write_loss_curve(log_history: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write the loss curve as JSON (a list of rows, readable by ``dvc plots``) or TSV by suffix."""
    from ragcritic_lib.io import atomic_write_text

    rows = loss_curve(log_history)
    path = Path(path)
    if path.suffix == ".tsv":
        cols = list(dict.fromkeys(k for r in rows for k in r))
        lines = ["\t".join(cols)] + ["\t".join(str(r.get(c, "")) for c in cols) for r in rows]
        return atomic_write_text(path, "\n".join(lines) + "\n")
    write_json(path, rows)
    return path


# --------------------------------------------------------------------------------------------
# Launching: in-process or through `accelerate launch`
# --------------------------------------------------------------------------------------------
def run_training(
    kind: str,
    data: Sequence[Mapping[str, Any]],
    recipe: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    base_model: str,
    init_adapter: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    launcher: str = "inprocess",
    accelerate_config: str | None = None,
    num_processes: int = 0,
    seed: int | None = None,
) -> TrainResult:
    """Run one training stage in this process or under ``accelerate launch``.

    Args:
        kind: "sft" (data = SFT examples) or "dpo" (data = preference pairs).
        launcher: "inprocess" (CPU or one GPU) or "accelerate" (the data are written next to
            the output and the CLI below runs under ``accelerate launch --config_file
            accelerate_config``; ``num_processes`` > 0 overrides the config's process count).
        seed: seed of the run, resolved here (default params.yaml ``common.seed``, see
            :func:`training_seed`) and handed to the launched processes explicitly.
    """
    output_dir = Path(output_dir)
    seed = training_seed(seed, overrides)
    if launcher == "inprocess":
        if kind == "sft":
            return train_sft(data, recipe, output_dir, base_model=base_model, overrides=overrides, seed=seed)
        return train_dpo(data, recipe, output_dir, base_model=base_model, init_adapter=init_adapter,
                         overrides=overrides, seed=seed)
    if launcher != "accelerate":
        raise ValueError(f"unknown launcher {launcher!r} (expected 'inprocess' or 'accelerate')")
    if not accelerate_config:
        raise ValueError("launcher 'accelerate' needs accelerate_config")
    data_file = output_dir.parent / f"{output_dir.name}.{kind}_data.jsonl"
    write_jsonl(data_file, data)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(paths.resolve(accelerate_config))]
    if num_processes > 0:
        cmd += ["--num_processes", str(num_processes)]
    cmd += ["-m", "ragcritic_lib.critic.training", kind, "--recipe", str(recipe), "--data", str(data_file),
            "--out", str(output_dir), "--base-model", str(base_model), "--seed", str(seed)]
    if init_adapter:
        cmd += ["--init-adapter", str(init_adapter)]
    for k, v in (overrides or {}).items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    subprocess.run(cmd, check=True, cwd=str(paths.ROOT))
    return load_train_result(output_dir / "train_result.json")


def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``python -m ragcritic_lib.critic.training sft|dpo --recipe R --data D --out O --base-model M``."""
    ap = argparse.ArgumentParser(prog="python -m ragcritic_lib.critic.training", description=main.__doc__)
    ap.add_argument("kind", choices=["sft", "dpo"])
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--data", required=True, help="JSONL of SFT examples or DPO pairs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--base-model", required=True)
    ap.add_argument("--init-adapter", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override")
    ap.add_argument("--seed", type=int, default=None, help="default: params.yaml common.seed")
    args = ap.parse_args(argv)
    from ragcritic_lib.llm import looks_like_path

    try:  # what can be wrong with the command line is found before any model loads
        if not paths.resolve(args.recipe).is_file():  # read from the repository root, as load_recipe does
            raise FileNotFoundError(f"--recipe {args.recipe}: no such file")
        if not paths.resolve(args.data).is_file():  # read from the repository root, as read_jsonl does
            raise FileNotFoundError(f"--data {args.data}: no such file")
        overrides = _parse_set(args.set)
        load_recipe(args.recipe, args.kind, overrides)
        if looks_like_path(args.base_model) and not Path(args.base_model).expanduser().exists():
            raise FileNotFoundError(f"--base-model {args.base_model}: no such model folder")
        data = read_jsonl(args.data)
    except (OSError, ValueError) as exc:
        print(f"{ap.prog}: {exc}", file=sys.stderr)
        return 2
    if args.kind == "sft":
        result = train_sft(data, args.recipe, args.out, base_model=args.base_model, overrides=overrides,
                           seed=args.seed)
    else:
        result = train_dpo(data, args.recipe, args.out, base_model=args.base_model,
                           init_adapter=args.init_adapter, overrides=overrides, seed=args.seed)
    if is_main_process():
        write_json(Path(args.out) / "train_result.json", result.to_dict())
        write_loss_curve(result.log_history, Path(args.out) / "loss_curve.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
