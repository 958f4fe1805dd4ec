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
# The critic learns to tell a right answer from a wrong one and to name the error, from question,
# passages and answer alone (never the reference), on the training set that notebook
# `05_critic_data` built from the train questions and labelled with the audited judge. Early
# stopping, the learning curve and the verdict threshold read the generator's real answers to the
# *dev* questions; no test question is seen here.

# %% tags=["parameters"]
trainer = "cached"
method = "full"
default_method = "full"
lora_ranks = "32,64"
compare_examples = 1000
train_layers = 6
epochs = 1.0
learning_rate = 0.0003
lora_learning_rate = 0.0003
batch_size = 16
eval_every = 400
patience = 3
max_length = 384
verdict_weight = 0.0
select = "dev_loss"
recipe = "configs/train/critic_sft.yaml"
max_steps = -1
launcher = "inprocess"
accelerate_config = "configs/accelerate/deepspeed_zero3.yaml"
num_processes = 0
merge_dtype = "bfloat16"
ship_max_mb = 24.0
preview_samples = 4
tag_check = 40
base_model = ""

# %%
import shutil

import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.critic.benchmark import dev_tag_check
from ragcritic_lib.critic.critics import calibrate_verdicts, load_trained_critic
from ragcritic_lib.critic.data import critic_sft_metrics
from ragcritic_lib.critic.flags import learning_curve
from ragcritic_lib.critic.train import TrainSettings, run_cached_sft, run_trl_sft
from ragcritic_lib.io import read_json, read_jsonl, write_json
from ragcritic_lib.pipeline.outputs import save_figure
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.mining.taxonomy import load_taxonomy

setup = setup_stage("critic_sft")  # params and data/critic_sft
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
# The local model folder trained from: base_model, or the generator's model ("" and a local generator).
train_base = runtime.resolve_base_model(params, base_model, key="critic_sft.base_model")
taxonomy = load_taxonomy()
data_dir = paths.stage_dir("critic_data")
report = read_json(data_dir / "data_report.json")  # what notebook 05_critic_data built: sources, evidence, dev counts
prompt = read_json(data_dir / "critic_prompt.json")
examples, dev_examples = read_jsonl(data_dir / "sft_train.jsonl"), read_jsonl(data_dir / "sft_dev.jsonl")
dev = read_jsonl(data_dir / "dev_samples.jsonl")
out_dir.mkdir(parents=True, exist_ok=True)
write_json(out_dir / "critic_prompt.json", prompt)  # the prompt this critic is trained on travels with it
pd.DataFrame(report["data"]["sources"]).T

# %% [markdown]
# ## Training
# `trainer = "cached"`: the lower layers are frozen and run once over every example; the top
# `train_layers` layers learn on the critique tokens (full weights or LoRA on every linear map).
# With `method = "best"`, full fine-tuning and LoRA at each of `lora_ranks` first train one
# epoch on the same `compare_examples` examples; each gets its dev AUROC with a bootstrap CI,
# and the paired bootstrap CI of its difference to `default_method`. The default trains on
# unless another method's advantage has a CI wholly above 0. Dev AUROC is measured every
# `eval_every` examples: that is the learning curve, and training stops when it has not
# improved for `patience` evaluations, keeping the best weights. The critic then ships in a
# compact form (`data/critic_sft/model`): LoRA as its adapter, full fine-tuning as what changed
# against the base within `ship_max_mb`, and the shipped form is scored on dev against the
# trained model (`ship`; flagged when it loses more than 0.02 AUROC). `trainer = "trl"` runs the
# TRL recipe instead (GPUs, DeepSpeed ZeRO-3 via `launcher = "accelerate"`).

# %%
# BEGIN SOLUTION hint: TrainSettings from this notebook's parameters (method, train_layers, epochs, learning_rate, batch_size, eval_every, patience, max_length, verdict_weight, select) and the seed
settings = TrainSettings(method=method, train_layers=train_layers, epochs=epochs, learning_rate=learning_rate,
                         batch_size=batch_size, eval_every=eval_every, patience=patience, max_length=max_length,
                         verdict_weight=verdict_weight, select=select, seed=seed)
# END SOLUTION
ranks = [int(r) for r in lora_ranks.split(",")]
if trainer == "cached":
    fit = run_cached_sft(examples, dev_examples, train_base, out_dir, settings=settings,
                         compare=("full", *(f"lora_r{r}" for r in ranks)) if method == "best" else (),
                         compare_examples=compare_examples, lora_learning_rate=lora_learning_rate,
                         default_method=default_method, lora_ranks=ranks, ship_max_mb=ship_max_mb,
                         merge_dtype=merge_dtype, progress=print)
else:
    fit = run_trl_sft(examples, dev_examples, train_base, out_dir, recipe=recipe, max_steps=max_steps,
                      launcher=launcher, accelerate_config=accelerate_config, num_processes=num_processes,
                      merge_dtype=merge_dtype, max_length=max_length, ship_max_mb=ship_max_mb)
write_json(out_dir / "train_result.json", fit)
write_json(out_dir / "loss.json", fit["run"]["curve"])
pd.DataFrame(fit["comparison"]).T if fit["comparison"] else {k: fit[k] for k in ("examples", "method", "seconds")}

# %%
{"decision": fit["decision"], "ship": fit["ship"]}

# %% [markdown]
# ## The verdict's body
# Stage `05_critic_body` fitted the verdict's own body (`critic_body.verdict_body`) on the
# frozen generator, apart from this training: with `"probe"` a logistic probe on the generator's
# states at the verdict position, with `"verifier"` a small encoder verifier, with
# `"generative"` none (the critic's own margin scores the verdict). The body goes into this
# critic's folder (`data/critic_sft/probe` or `verifier`), so it travels with the critic and
# every later stage that loads the critic reads the verdict from there; the generative critic
# trained above still writes the tier tags and the critique.

# %%
verdict_dir = paths.stage_dir("critic_body")
body_fit = read_json(verdict_dir / "verdict_body.json")
if body_fit.get("body") in ("probe", "verifier"):
    shutil.copytree(verdict_dir / body_fit["body"], out_dir / body_fit["body"], dirs_exist_ok=True)
    write_json(out_dir / "verdict_body.json", body_fit)
else:
    body_fit = None  # the generative critic scores its own verdict
body_fit and {k: v for k, v in body_fit.items() if k != "curve"}

# %%
curve = pd.DataFrame(learning_curve(body_fit or fit["run"], fit["examples"]))
losses = pd.DataFrame(fit["run"]["curve"])
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
if not curve.empty:
    ax1.plot(curve["examples_seen"], curve["dev_auroc"], marker="o")
    ax1.axhline(0.5, color="grey", lw=0.8, ls="--")
if "loss" in losses:
    ax2.plot(losses["examples_seen"], losses["loss"], marker=".")
ax1.set(xlabel="training examples seen", ylabel="dev verdict AUROC",
        title="Learning curve" + (f" (the {body_fit['body']})" if body_fit else ""))
ax2.set(xlabel="training examples seen", ylabel="loss (critique tokens)", title="Training loss")
for ax in (ax1, ax2):
    ax.grid(alpha=0.3)
fig.tight_layout()
save_figure(fig, "05_critic_sft", "critic_sft_loss");

# %% [markdown]
# ## The saved critic, its first critiques and its verdict threshold
# The shipped critic is loaded the way every later stage loads it; a few dev answers show what it
# writes. The margin log P("Error") - log P("Correct") right after `{"Judgement": "` (or the
# score of the verdict's own body, when it has one) is scored on the dev answers, and the
# threshold with the best balanced accuracy is stored next to the shipped critic
# (`verdict="calibrated"` in later stages).

# %%
critic = load_trained_critic(params, out_dir, taxonomy, verdict="generate", name="sft", max_new_tokens=64)
preview = dev[:preview_samples]
parses = critic.critique(preview)
pd.DataFrame([{"gold": s["target"], "critic": g.text, "judgement": p.judgement, "parse_error": p.parse_error}
              for s, g, p in zip(preview, critic.last_generations, parses)])

# %%
calibration = calibrate_verdicts(critic, dev, desc="dev verdict margins")
write_json(out_dir / "verdict_calibration.json", calibration)
pd.Series(calibration)

# %% [markdown]
# ## Does the critic name the error?
# Whatever body scores the verdict, the critic writes the tags and the critique that the planner
# of stage 08 acts on. On the first `tag_check` wrong dev answers it continues a prefilled Error
# verdict (as a calibrated critic does), and its tier-1 and tier-2 labels are scored against the
# labels of the answers' known causes: micro precision, recall and F1, and the share of critiques
# that name any label of the tier. Critiques that name no gold tier-1 label are flagged.

# %%
dev_tags = dev_tag_check(critic, dev, taxonomy, tag_check)
pd.DataFrame({t: dev_tags[t] for t in ("tag1", "tag2")}).T if dev_tags else "no wrong dev answer to tag"

# %%
data = report["data"]
metrics = critic_sft_metrics(data=data, evidence=data["evidence"], style_shortcut_auroc=data["style_shortcut_auroc"],
                             dev=report["dev"], fit=fit, preview=parses, calibration=calibration,
                             questions=report["questions"], verdict_body=body_fit, dev_tags=dev_tags)
write_stage_metrics("05_critic_sft", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_critic_sft  # noqa: E402

Markdown("\n\n".join(reading_critic_sft(read_json(setup.metrics_path))))
