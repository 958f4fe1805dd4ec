"""DPO of a LoRA on a causal LM's top layers, with the frozen layers below it computed once.

A DPO recipe (``configs/train/*.yaml``, :func:`ragcritic_lib.critic.training.load_recipe`) with
``trainer: cached`` runs here; :func:`train_dpo` takes the same arguments as
:func:`ragcritic_lib.critic.training.train_dpo`, returns the same :class:`TrainResult`, and hands a
recipe without it (``trainer: trl``, the default) to TRL there.

Why it is cheaper: a LoRA on the top ``lora_top_layers`` leaves every layer below it the same for
the policy and the reference and from one step to the next. So each sequence goes through those
layers once, without a gradient (:func:`ragcritic_lib.critic.train.cache_lower`); the reference's
log-probabilities are computed once, before training; and every step runs only the adapted layers,
with the output head at the completion's positions. TRL runs the whole model twice a step (policy
and reference) with the head at every position: RePAIR's planner DPO took 28.5 s a step there on 2
AVX512-BF16 cores. The loss is the same sigmoid DPO loss; the learning rate warms up linearly, then
decays linearly or by a cosine (``lr_scheduler_type``); there is no dev selection (the last weights
are saved, as TRL saves them).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ragcritic_lib.critic import train as cached
from ragcritic_lib.critic import training


def run_cached_pair_dpo(rows: Sequence[Mapping[str, Any]], base_model: str | Path, output_dir: str | Path, *,
                        settings: cached.TrainSettings, beta: float, lora_config: Any = None,
                        init_adapter: str | Path | None = None, max_steps: int = -1,
                        progress: Any = None) -> dict[str, Any]:
    """One cached DPO run (module docstring).

    Args:
        rows: conversational rows ``{"prompt": [messages], "chosen": [assistant], "rejected":
            [assistant]}`` (:func:`ragcritic_lib.critic.training.to_dpo_rows`).
        lora_config: a fresh adapter (``peft.LoraConfig``, top layers via ``layers_to_transform``):
            the base model is the reference.
        init_adapter: an adapter to continue instead: its state before training is the reference.
        max_steps: optimizer steps (-1: ``settings.epochs`` passes over the pairs).

    The adapter is saved as a peft folder with the tokenizer at ``output_dir``. Returns pairs used
    and dropped (longer than ``settings.max_length``), the adapted layers, the run's report and the
    cache's and the whole run's seconds.
    """
    import torch
    from peft import PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if lora_config is None and not init_adapter:
        raise ValueError("cached DPO trains a LoRA adapter: give a LoRA config or an adapter to continue")
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(str(base_model))
    model = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=torch.float32)
    model.config.use_cache = False
    peft_model = (PeftModel.from_pretrained(model, str(init_adapter), is_trainable=True) if init_adapter
                  else get_peft_model(model, lora_config))
    inner = peft_model.base_model.model
    adapted = sorted({int(m.group(1)) for n, _ in inner.named_parameters()
                      if "lora_" in n and (m := re.search(r"layers\.(\d+)\.", n))})
    if not adapted:
        raise ValueError(f"cached DPO: the adapter of {init_adapter or 'the recipe'} adapts no decoder layer")
    split = cached.SplitModel(inner.to(cached.train_device()), len(inner.model.layers) - adapted[0])
    split.lora_config = peft_model.peft_config["default"]  # the adapter trains as it is (no new one)
    chosen: list[cached.Encoded] = []
    rejected: list[cached.Encoded] = []
    dropped = 0
    for i, row in enumerate(rows):
        try:
            c, r = (cached.encode(tok, row["prompt"], row[k][-1]["content"], max_length=settings.max_length)
                    for k in ("chosen", "rejected"))
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"DPO row {i}: needs 'prompt' messages and one assistant message in 'chosen' and "
                             f"'rejected' ({exc!r})") from exc
        if c is None or r is None:
            dropped += 1
            continue
        chosen.append(c)
        rejected.append(r)
    if not chosen:
        raise ValueError(f"no DPO pair fits max_length={settings.max_length} ({dropped} too long)")
    epochs = settings.epochs if max_steps <= 0 else max_steps * settings.batch_size / len(chosen)
    settings = cached.TrainSettings(**{**asdict(settings), "method": "lora", "train_layers": len(split.upper),
                                       "epochs": epochs, "eval_every": settings.batch_size})
    split.model.eval()
    lower = functools.partial(cached.cache_lower, split, batch_size=16, dtype=settings.dtype)
    cc, rc = lower(chosen), lower(rejected)
    cache_seconds = round(time.time() - t0, 1)
    report = cached.train_dpo(split, chosen, rejected, cc, rc, [], [], tok, settings, beta=beta, progress=progress)
    report.cache_seconds = cache_seconds
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    peft_model.to("cpu").save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return {"pairs_used": len(chosen), "dropped_too_long": dropped, "adapted_layers": adapted,
            "cache_seconds": cache_seconds, "run": report, "seconds": round(time.time() - t0, 1)}


def train_dpo(pairs: Sequence[Mapping[str, Any]], recipe: str | Path | Mapping[str, Any], output_dir: str | Path, *,
              base_model: str, init_adapter: str | None = None, overrides: Mapping[str, Any] | None = None,
              seed: int | None = None) -> training.TrainResult:
    """:func:`ragcritic_lib.critic.training.train_dpo` for any DPO recipe: ``trainer: cached`` runs
    here (its LoRA, batch = per-device batch x accumulation, epochs or ``max_steps``, learning rate,
    schedule and warm-up, beta and max_length), any other recipe in TRL."""
    import torch

    recipe_d = training.load_recipe(recipe, "dpo", training._seeded(overrides, seed))
    if recipe_d.get("trainer", "trl") != "cached":
        return training.train_dpo(pairs, recipe, output_dir, base_model=base_model, init_adapter=init_adapter,
                                  overrides=overrides, seed=seed)
    if not pairs:
        raise ValueError("train_dpo: no preference pairs")
    source = f"{recipe if not isinstance(recipe, Mapping) else '<dict>'} (trainer: cached)"
    output_dir = Path(output_dir)
    _, lora, resolved = training.build_configs(recipe_d, "dpo", output_dir,
                                               depth=training._recipe_depth(recipe_d, base_model))
    if not resolved.get("peft", True) or (lora is None and not init_adapter):
        raise ValueError(f"{source}: the cached trainer trains a LoRA adapter: set peft: true")
    if not resolved.get("lora_top_layers") and not init_adapter:
        raise ValueError(f"{source}: the cached trainer needs lora_top_layers > 0 (the layers below are computed once)")
    loss = resolved.get("loss_type", "sigmoid")
    if loss not in ("sigmoid", ["sigmoid"]):
        raise ValueError(f"{source}: the cached trainer computes the sigmoid DPO loss only; got loss_type {loss!r}")
    schedule = str(resolved.get("lr_scheduler_type", "linear"))
    if schedule not in cached.SCHEDULES:
        raise ValueError(f"{source}: the cached trainer decays the learning rate linearly or by a cosine; "
                         f"got lr_scheduler_type {schedule!r}")
    tok = training._load_tokenizer(base_model)
    rows, dropped = training._fit(training.to_dpo_rows(pairs), tok, resolved.get("max_length"), ["chosen", "rejected"])
    if not rows:
        raise ValueError(f"no DPO pair fits max_length={resolved.get('max_length')} ({dropped} too long)")
    batch = int(resolved.get("per_device_train_batch_size") or 1) * int(resolved.get("gradient_accumulation_steps") or 1)
    epochs = float(resolved.get("num_train_epochs") or 1.0)
    warm = float(resolved.get("warmup_steps") or 0)  # a float < 1 is a ratio of the steps, as TRL reads it
    ratio = (warm if warm < 1 else min(1.0, warm * batch / (len(rows) * epochs))) or float(resolved.get("warmup_ratio") or 0)
    bf16 = resolved.get("cpu_bf16", "auto")
    settings = cached.TrainSettings(
        method="lora", epochs=epochs, learning_rate=float(resolved.get("learning_rate", 5e-5)), batch_size=batch,
        weight_decay=float(resolved.get("weight_decay") or 0.0), warmup_ratio=ratio, schedule=schedule,
        lora_r=int(resolved.get("lora_r", 16)), lora_alpha=int(resolved.get("lora_alpha", 32)),
        max_length=int(resolved.get("max_length") or 1 << 30), seed=int(resolved.get("seed", 13)),
        dtype="auto" if bf16 == "auto" else ("bfloat16" if bf16 else "float32"))
    run = run_cached_pair_dpo(rows, base_model, output_dir, settings=settings, beta=float(resolved.get("beta", 0.1)),
                              lora_config=None if init_adapter else lora, init_adapter=init_adapter,
                              max_steps=int(resolved.get("max_steps") or -1))
    report = run["run"]
    log = [{"step": i + 1, "loss": r["loss"], "rewards/accuracies": r["reward_accuracy"],
            "rewards/margins": r["reward_margin"], "epoch": round(r["examples_seen"] / run["pairs_used"], 4)}
           for i, r in enumerate(report.curve)]
    return training.TrainResult(
        adapter_dir=str(output_dir), is_adapter=True, base_model=str(base_model), steps=report.steps,
        seconds=run["seconds"], log_history=log, examples=run["pairs_used"],
        dropped_too_long=dropped + run["dropped_too_long"], device="cuda" if torch.cuda.is_available() else "cpu",
        recipe=training._jsonable({**resolved, "cache_seconds": run["cache_seconds"],
                                   "adapted_layers": run["adapted_layers"]}))
