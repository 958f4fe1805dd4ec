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
# For every training sample the true critique is preferred over critiques drawn from the other
# verdict (coarse: wrong judgement) and from wrong answers with other labels (fine: wrong tags),
# and the SFT critic is aligned on these pairs with DPO (sigmoid loss, the SFT critic as the
# frozen reference). This reproduces the preference stage of RAG-Critic §3.2. Dev AUROC is read
# before and during DPO: if DPO lowers it, the metrics say so and the SFT weights are kept.

# %% tags=["parameters"]
k_coarse = 1
k_fine = 1
max_train_samples = 600
max_pairs = 600
beta = 0.3
epochs = 1.0
train_layers = 6
learning_rate = 2e-05
batch_size = 8
eval_every = 150
patience = 3
select = "dev_pairs"
max_dev_pairs = 200
tag_check = 40
recipe = "configs/train/critic_dpo.yaml"
max_steps = -1
launcher = "inprocess"
accelerate_config = "configs/accelerate/deepspeed_zero3.yaml"
num_processes = 0
merge_dtype = "bfloat16"
ship_max_mb = 24.0

# %%
import shutil

import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths
from ragcritic_lib.critic.benchmark import dev_tag_check
from ragcritic_lib.critic.critics import calibrate_verdicts, load_trained_critic
from ragcritic_lib.critic.data import balance_correct, critic_dpo_metrics, dpo_pairs, sft_examples
from ragcritic_lib.critic.train import TrainSettings, run_cached_dpo, run_trl_dpo
from ragcritic_lib.io import read_json, read_jsonl, write_json, write_jsonl
from ragcritic_lib.pipeline.outputs import save_figure
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.mining.taxonomy import load_taxonomy

setup = setup_stage("critic_dpo")  # params and data/critic_dpo; the aligned critic is loaded below
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
taxonomy = load_taxonomy()
sft_dir = paths.stage_dir("critic_sft")
prompt = read_json(sft_dir / "critic_prompt.json")  # the SFT critic's prompt settings
sft_fit = read_json(sft_dir / "train_result.json")  # its trainer, method and layers
train = read_jsonl(paths.stage_dir("critic_data") / "train_samples.jsonl")  # the SFT critic's training set
dev = read_jsonl(paths.stage_dir("critic_data") / "dev_samples.jsonl")
view = {k: prompt[k] for k in ("top_k", "passage_words", "label_list", "evidence_words")}
view

# %% [markdown]
# ## Preference pairs
# A wrong sample gets one coarse pair (its critique vs {"Judgement": "Correct"}) and `k_fine`
# fine pairs; a right sample gets `k_coarse` coarse pairs against distinct error critiques.

# %%
# BEGIN SOLUTION hint: balance train with balance_correct (seed + 1, max_train_samples), then build pairs, counts with dpo_pairs (k_coarse, k_fine, seed, max_pairs and the prompt settings in view)
samples, balance = balance_correct(train, seed=seed + 1, max_samples=max_train_samples)
pairs, counts = dpo_pairs(samples, taxonomy, k_coarse=k_coarse, k_fine=k_fine, seed=seed, max_pairs=max_pairs, **view)
# END SOLUTION
write_jsonl(out_dir / "pairs.jsonl", pairs)
pd.Series(counts, name="pairs").to_frame()

# %% [markdown]
# Held-out pairs are built the same way from the dev samples (dev questions, never a training
# one), at most `max_dev_pairs`: with `select = "dev_pairs"` DPO keeps the weights whose DPO loss
# on them, against the same SFT reference, is lowest (log 2 while the policy is the reference).

# %%
dev_pairs = []
if select == "dev_pairs":
    dev_pairs, _ = dpo_pairs(dev, taxonomy, k_coarse=k_coarse, k_fine=k_fine, seed=seed, max_pairs=max_dev_pairs, **view)
print(f"{len(dev_pairs)} held-out dev pairs")

# %%
for p in [next((p for p in pairs if p["kind"] == kind), None) for kind in ("coarse", "fine")]:
    print(f"[{p['kind']}]\n  chosen:   {p['chosen']}\n  rejected: {p['rejected']}\n" if p else "(no pair of this kind)")

# %% [markdown]
# ## DPO training
# With the cached trainer (the SFT stage's), the policy is the SFT critic's top `train_layers`
# layers (0: as many as SFT trained; fewer make DPO cheap when SFT trained every layer) and the
# reference is their state before DPO; dev AUROC is read first (the SFT starting point)
# and every `eval_every` pairs, and the best weights are kept. A LoRA SFT critic's adapter is
# trained further; the result ships to `data/critic_dpo/model` against the SFT critic's base,
# as SFT ships (`ship_max_mb`), and `ship` compares the shipped form with the trained one on dev.

# %%
dev_examples = sft_examples(dev, taxonomy, **view)
if sft_fit["method"] == "trl":
    fit = run_trl_dpo(pairs, dev_examples, sft_dir / "model", out_dir, recipe=recipe, max_steps=max_steps,
                      launcher=launcher, accelerate_config=accelerate_config, num_processes=num_processes,
                      merge_dtype=merge_dtype, ship_max_mb=ship_max_mb)
else:
    settings = TrainSettings(method=sft_fit["method"], train_layers=train_layers or sft_fit["settings"]["train_layers"],
                             epochs=epochs,
                             learning_rate=learning_rate, batch_size=batch_size, eval_every=eval_every,
                             patience=patience, max_length=sft_fit["settings"]["max_length"], select=select, seed=seed)
    fit = run_cached_dpo(pairs, dev_examples, sft_dir / "model", out_dir, settings=settings, beta=beta,
                         ship_max_mb=ship_max_mb, merge_dtype=merge_dtype, progress=print, dev_pairs=dev_pairs)
write_json(out_dir / "train_result.json", fit)
write_json(out_dir / "loss.json", fit["run"]["curve"])
{k: fit[k] for k in ("pairs_used", "seconds", "dev_auroc_before", "dev_auroc_after", "dev_pair_loss_before",
                     "dev_pair_loss_after", "kept_start", "ship") if k in fit}

# %%
curve = pd.DataFrame(fit["run"]["curve"])
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
for col, ax in (("loss", axes[0]), ("reward_accuracy", axes[1])):
    if col in curve:
        ax.plot(curve["examples_seen"], curve[col], marker=".", label=col)
if "dev_auroc" in curve:
    axes[1].plot(curve["examples_seen"], curve["dev_auroc"], marker="o", label="dev AUROC")
axes[0].set(xlabel="pairs seen", ylabel="DPO loss", title="Critic DPO loss")
axes[1].set(xlabel="pairs seen", ylabel="share", title="Reward accuracy and dev AUROC")
axes[1].legend()
for ax in axes:
    ax.grid(alpha=0.3)
fig.tight_layout()
save_figure(fig, "06_critic_dpo", "critic_dpo_loss");

# %% [markdown]
# ## Verdict calibration on the dev answers
# As for the SFT critic (notebook 05): the verdict threshold on the margin
# log P("Error") - log P("Correct") with the best balanced accuracy on the dev answers. When the
# SFT critic's verdict has its own body (a probe or a verifier, `critic_body.verdict_body`), DPO
# aligns the critique and the body travels on with the aligned critic unchanged: its score is the
# verdict, calibrated here again.

# %%
for body in ("probe", "verifier"):  # the verdict's own body, when the SFT critic has one
    if (sft_dir / body).is_dir():
        shutil.copytree(sft_dir / body, out_dir / body, dirs_exist_ok=True)
critic = load_trained_critic(params, out_dir, taxonomy, verdict="generate", name="sft+dpo")  # shipped model + prompt settings
calibration = calibrate_verdicts(critic, dev, desc="dev verdict margins")
write_json(out_dir / "verdict_calibration.json", calibration)
pd.Series(calibration)

# %% [markdown]
# ## Does the aligned critic name the error?
# As after SFT (notebook 05): on the first `tag_check` wrong dev answers the critic continues a
# prefilled Error verdict, and its labels are scored against those of the answers' known causes.

# %%
dev_tags = dev_tag_check(critic, dev, taxonomy, tag_check)
pd.DataFrame({t: dev_tags[t] for t in ("tag1", "tag2")}).T if dev_tags else "no wrong dev answer to tag"

# %%
metrics = critic_dpo_metrics(pair_counts=counts, balance=balance, beta=beta, fit=fit, calibration=calibration,
                             dev_tags=dev_tags)
write_stage_metrics("06_critic_dpo", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_critic_dpo  # noqa: E402

Markdown("\n\n".join(reading_critic_dpo(read_json(setup.metrics_path))))
