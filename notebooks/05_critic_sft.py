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
# # 05 · Error-critic SFT
# D_Error^QA is balanced with an equal number of correct answers, split by question into
# train / dev / test, and the base model is fine-tuned (LoRA by default) to write the critic JSON
# from question, passages and prediction alone, never the gold answer. This reproduces the
# supervised stage of RAG-Critic §3.2; the held-out test questions feed the benchmark (notebook 07).

# %% tags=["parameters"]
critic_dataset = "data/taxonomy/build/error_qa.jsonl"
correct_pool = "data/error_sampling/correct.jsonl"
dev_fraction = 0.1
test_fraction = 0.3
max_train_samples = 160
top_k = 3
passage_words = 30
label_list = True
max_analysis_words = 20
max_tag3 = 3
recipe = "configs/train/critic_sft.yaml"
max_steps = 30
launcher = "inprocess"
accelerate_config = "configs/accelerate/deepspeed_zero3.yaml"
num_processes = 0
merge_dtype = "bfloat16"
preview_samples = 4
base_model = ""

# %%
import json

import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.critic import calibrate_verdicts, load_trained_critic
from ragcritic_lib.critic_data import (
    balance_correct, check_no_leakage, critic_sft_metrics, label_counts, make_samples, sft_examples, split_by_question,
)
from ragcritic_lib.io import read_jsonl, write_json, write_jsonl
from ragcritic_lib.pipeline.outputs import save_figure
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.taxonomy import load_taxonomy
from ragcritic_lib.training import inference_checkpoint, run_training, write_loss_curve

setup = setup_stage("critic_sft")  # params and data/critic_sft; the critic is trained and loaded below
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
# The local model folder trained from: base_model, or the generator's model ("" and a local generator).
train_base = runtime.resolve_base_model(params, base_model, key="critic_sft.base_model")
taxonomy = load_taxonomy()
prompt = {"variant": "trained", "top_k": top_k, "passage_words": passage_words, "label_list": label_list}
train_base

# %% [markdown]
# ## Critic samples and question-level splits
# Each sample holds only what the critic may read (question, passages, prediction) and its target
# critique. All answers to one question (from every pool member) land in the same split.

# %%
samples = make_samples(read_jsonl(paths.resolve(critic_dataset)), read_jsonl(paths.resolve(correct_pool)),
                       max_analysis_words=max_analysis_words, max_tag3=max_tag3)
splits = split_by_question(samples, dev_fraction=dev_fraction, test_fraction=test_fraction, seed=seed)
check_no_leakage(splits)
for name, rows in splits.items():
    write_jsonl(out_dir / "splits" / f"{name}.jsonl", rows)
# BEGIN SOLUTION hint: one row per split in split_table: split name, distinct questions (qkey), samples, and how many have judgement 'Error' and 'Correct'
split_table = pd.DataFrame([{"split": name, "questions": len({s["qkey"] for s in rows}), "samples": len(rows),
                             "errors": sum(s["judgement"] == "Error" for s in rows),
                             "correct": sum(s["judgement"] == "Correct" for s in rows)} for name, rows in splits.items()])
# END SOLUTION
split_table

# %%
pd.DataFrame({name: pd.Series(label_counts(rows, 2)) for name, rows in splits.items()}).fillna(0).astype(int)

# %% [markdown]
# ## SFT set: errors balanced with correct answers
# As in §3.2, as many correct samples as error samples (cut to `max_train_samples` for the CPU
# budget). One training example, as the model sees it:

# %%
# BEGIN SOLUTION hint: balance the train split with balance_correct (seed, max_train_samples), then build examples from train_samples with sft_examples and the prompt settings
train_samples, balance = balance_correct(splits["train"], seed=seed, max_samples=max_train_samples)
examples = sft_examples(train_samples, taxonomy, top_k=top_k, passage_words=passage_words, label_list=label_list)
# END SOLUTION
write_jsonl(out_dir / "sft_train.jsonl", examples)
write_json(out_dir / "critic_prompt.json", prompt)
print(json.dumps(balance))
for m in examples[0]["messages"]:
    print(f"--- {m['role']}\n{m['content']}")

# %% [markdown]
# ## Training
# TRL's SFTTrainer with the recipe's LoRA settings; the loss covers the critique only. With
# `launcher = "accelerate"` the same step runs under `accelerate launch` (multi-GPU, DeepSpeed
# ZeRO-3) from `accelerate_config`.

# %%
overrides = {"max_steps": max_steps} if max_steps > 0 else {}
result = run_training("sft", examples, recipe, out_dir / "adapter", base_model=train_base, overrides=overrides,
                      launcher=launcher, accelerate_config=accelerate_config, num_processes=num_processes)
write_loss_curve(result.log_history, out_dir / "loss.json")
write_json(out_dir / "train_result.json", result.to_dict())
{"steps": result.steps, "seconds": result.seconds, "s_per_step": round(result.seconds_per_step, 2),
 "examples": result.examples, "dropped_too_long": result.dropped_too_long, "device": result.device}

# %%
# BEGIN SOLUTION hint: read out_dir / 'loss.json' into the DataFrame curve, then plot curve['loss'] against curve['step'] on a new fig, ax
curve = pd.DataFrame(json.loads((out_dir / "loss.json").read_text()))
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(curve["step"], curve["loss"], marker=".")
# END SOLUTION
ax.set(xlabel="optimizer step", ylabel="SFT loss (critique tokens)", title="Critic SFT")
ax.grid(alpha=0.3)
fig.tight_layout()
save_figure(fig, "05_critic_sft", "critic_sft_loss");

# %% [markdown]
# ## Merged checkpoint and a first look at its critiques
# The adapter is folded into the base weights (bf16) so inference needs no peft (with full
# fine-tuning the model is re-saved in bf16); a few dev samples show what the critic writes now.

# %%
merged = inference_checkpoint(result, out_dir / "merged", dtype=merge_dtype)
critic = load_trained_critic(params, out_dir, taxonomy, verdict="generate", name="sft")  # merged + prompt settings
preview = splits["dev"][:preview_samples]
parses = critic.critique(preview)
pd.DataFrame([{"gold": s["target"], "critic": g.text, "judgement": p.judgement, "parse_error": p.parse_error}
              for s, g, p in zip(preview, critic.last_generations, parses)])

# %% [markdown]
# ## Verdict calibration on the dev split
# With few correct answers to learn from, a small critic tends to write one verdict for nearly
# everything. Its log-probabilities still rank samples: the margin
# log P("Error") - log P("Correct") right after `{"Judgement": "` is scored on the dev samples
# and the threshold with the best balanced accuracy is stored next to the checkpoint; later
# stages read the verdict off that threshold (`verdict="calibrated"`).

# %%
calibration = calibrate_verdicts(critic, splits["dev"], desc="dev verdict margins")
write_json(out_dir / "verdict_calibration.json", calibration)
pd.Series(calibration)

# %%
# Splits, balance, the training run (its seconds: the comparison's training cost), preview parse
# failures and the verdict calibration, gathered in one dict.
metrics = critic_sft_metrics(split_rows=split_table.to_dict("records"), balance=balance, result=result,
                             preview=parses, calibration=calibration)
write_stage_metrics("05_critic_sft", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_critic_sft  # noqa: E402

Markdown("\n\n".join(reading_critic_sft(read_json(setup.metrics_path))))
