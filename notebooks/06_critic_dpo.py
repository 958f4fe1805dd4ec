# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Coarse-to-fine DPO of the error-critic
# For every training sample the true critique is preferred over critiques drawn from the correct
# pool (coarse: wrong judgement) and from error records with other labels (fine: wrong tags), and
# the SFT critic is aligned on these pairs with DPO (sigmoid loss, the SFT model as the frozen
# reference). This reproduces the preference stage of RAG-Critic §3.2.

# %% tags=["parameters"]
k_coarse = 1
k_fine = 1
max_train_samples = 80
max_pairs = 60
recipe = "configs/train/critic_dpo.yaml"
max_steps = 10
launcher = "inprocess"
accelerate_config = "configs/accelerate/deepspeed_zero3.yaml"
num_processes = 0
merge_dtype = "bfloat16"

# %%
import json

import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths
from ragcritic_lib.critic import calibrate_verdicts, load_trained_critic
from ragcritic_lib.critic_data import balance_correct, critic_dpo_metrics, dpo_pairs
from ragcritic_lib.io import read_json, read_jsonl, write_json, write_jsonl
from ragcritic_lib.pipeline.outputs import save_figure
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.taxonomy import load_taxonomy
from ragcritic_lib.training import dpo_start, inference_checkpoint, load_recipe, load_train_result, run_training, write_loss_curve

setup = setup_stage("critic_dpo")  # params and data/critic_dpo; the aligned critic is loaded below
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
taxonomy = load_taxonomy()
sft_dir = paths.stage_dir("critic_sft")
prompt = read_json(sft_dir / "critic_prompt.json")  # the SFT critic's prompt settings
train = read_jsonl(sft_dir / "splits" / "train.jsonl")
prompt

# %% [markdown]
# ## Preference pairs
# An error sample gets one coarse pair (its critique vs {"Judgement": "Correct"}, which is the
# same text for every correct sample) and `k_fine` fine pairs; a correct sample gets `k_coarse`
# coarse pairs against distinct error critiques. Pairs are cut to `max_pairs` for the CPU budget.

# %%
# BEGIN SOLUTION hint: balance the train split with balance_correct (seed + 1, max_train_samples), then build pairs, counts with dpo_pairs (k_coarse, k_fine, seed, max_pairs and the prompt's top_k, passage_words, label_list)
samples, balance = balance_correct(train, seed=seed + 1, max_samples=max_train_samples)
pairs, counts = dpo_pairs(samples, taxonomy, k_coarse=k_coarse, k_fine=k_fine, seed=seed, max_pairs=max_pairs,
                          top_k=prompt["top_k"], passage_words=prompt["passage_words"], label_list=prompt["label_list"])
# END SOLUTION
write_jsonl(out_dir / "pairs.jsonl", pairs)
pd.Series(counts, name="pairs").to_frame()

# %%
# BEGIN SOLUTION hint: print the first pair of each kind ('coarse', 'fine'): its chosen and its rejected critique
for p in [next((p for p in pairs if p["kind"] == kind), None) for kind in ("coarse", "fine")]:
    print(f"[{p['kind']}]\n  chosen:   {p['chosen']}\n  rejected: {p['rejected']}\n" if p else "(no pair of this kind)")
# END SOLUTION

# %% [markdown]
# ## DPO training
# The policy continues the SFT LoRA adapter; TRL keeps a frozen copy of it as the reference
# model, so the reference is the SFT critic as in the paper (after full fine-tuning, the SFT
# model itself is the start and the reference). beta and the loss come from the recipe.

# %%
overrides = {"max_steps": max_steps} if max_steps > 0 else {}
beta = load_recipe(recipe, "dpo", overrides)["beta"]
# The SFT critic's own record: its adapter on the base it was trained on (critic_sft.base_model or
# the generator's model), or its fully fine-tuned checkpoint.
start = dpo_start(load_train_result(sft_dir / "train_result.json"))
result = run_training("dpo", pairs, recipe, out_dir / "adapter", **start, overrides=overrides, launcher=launcher,
                      accelerate_config=accelerate_config, num_processes=num_processes)
write_loss_curve(result.log_history, out_dir / "loss.json")
write_json(out_dir / "train_result.json", result.to_dict())
{"start": start, "beta": beta, "steps": result.steps, "seconds": result.seconds,
 "s_per_step": round(result.seconds_per_step, 2),
 "pairs": result.examples, "dropped_too_long": result.dropped_too_long, "device": result.device}

# %%
curve = pd.DataFrame(json.loads((out_dir / "loss.json").read_text()))
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
axes[0].plot(curve["step"], curve["loss"], marker=".")
axes[0].set(xlabel="optimizer step", ylabel="DPO loss", title="Critic DPO loss")
# BEGIN SOLUTION hint: plot each of rewards_chosen, rewards_rejected and rewards_margins that curve has against step on axes[1], labelled
for col in ("rewards_chosen", "rewards_rejected", "rewards_margins"):
    if col in curve:
        axes[1].plot(curve["step"], curve[col], marker=".", label=col.replace("rewards_", ""))
# END SOLUTION
axes[1].set(xlabel="optimizer step", ylabel="implicit reward", title="Rewards")
axes[1].legend()
for ax in axes:
    ax.grid(alpha=0.3)
fig.tight_layout()
save_figure(fig, "06_critic_dpo", "critic_dpo_loss");

# %% [markdown]
# ## Merged checkpoint for fast inference (used by the benchmark)

# %%
merged = inference_checkpoint(result, out_dir / "merged", dtype=merge_dtype)
sorted(p.name for p in merged.iterdir())

# %% [markdown]
# ## Verdict calibration on the dev split
# As for the SFT critic (notebook 05): the verdict threshold on the margin
# log P("Error") - log P("Correct") with the best balanced accuracy on the dev samples.

# %%
critic = load_trained_critic(params, out_dir, taxonomy, verdict="generate", name="sft+dpo")  # merged + prompt settings
calibration = calibrate_verdicts(critic, read_jsonl(sft_dir / "splits" / "dev.jsonl"), desc="dev verdict margins")
write_json(out_dir / "verdict_calibration.json", calibration)
pd.Series(calibration)

# %%
# Pairs, balance, the training run (its seconds: the comparison's training cost; the last loss and
# rewards) and the verdict calibration, gathered in one dict.
metrics = critic_dpo_metrics(pair_counts=counts, balance=balance, beta=beta, result=result, calibration=calibration)
write_stage_metrics("06_critic_dpo", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_critic_dpo  # noqa: E402

Markdown("\n\n".join(reading_critic_dpo(read_json(setup.metrics_path))))
