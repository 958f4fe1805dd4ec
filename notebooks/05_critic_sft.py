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
verdict_body = "probe"
verifier_model = "data/assets/models/all-minilm-l6-v2"
verifier_epochs = 2.0
verifier_learning_rate = 5e-05
verifier_max_length = 256
verdict_sources = "generator,pool"
probe_layer = 18
probe_answer_layer = 18

# %%
import random
import time

import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.critic.benchmark import dev_tag_check
from ragcritic_lib.critic.critics import calibrate_verdicts, load_trained_critic
from ragcritic_lib.critic.data import critic_sft_metrics
from ragcritic_lib.critic.flags import learning_curve
from ragcritic_lib.critic.train import TrainSettings, run_cached_sft, run_trl_sft
from ragcritic_lib.critic.probe import fit_probe, load_frozen, probe_scores, save_probe, verdict_features
from ragcritic_lib.critic.verifier import EncoderVerifier, VerifierSettings, is_error_example, train_verifier
from ragcritic_lib.evaluation.stats import auroc
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
# Which body scores the verdict was chosen on the measured recipe frontier
# (`reports/benchmarks/critic_recipes.json`, docs/methods/rag-critic.md). With
# `verdict_body = "generative"` it is the critic's own margin. With `"probe"`, a logistic
# regression on the frozen generator's states at the verdict position (layer `probe_layer` and
# the last layer; with `probe_answer_layer` > 0 also that layer's mean over the answer's tokens) is fitted on the training samples of `verdict_sources` (e.g. the real answers of
# the generator and the pool; "" = all), its C by cross-validation; its learning curve fits it on
# growing shares of those samples. With `"verifier"`, a small encoder verifier (`verifier_model`,
# its top layers fine-tuned for `verifier_epochs` passes, the best dev AUROC kept) reads the
# critic's own view of each answer. Either way the generative critic above still writes the tier
# tags and the critique, the body ships beside it (`data/critic_sft/probe` or `verifier`), and every
# later stage that loads this critic reads its verdict from there.

# %%
keep = {x.strip() for x in verdict_sources.split(",") if x.strip()}
sources = [s["source"] for s in read_jsonl(data_dir / "train_samples.jsonl")]  # sft_train.jsonl is in this order
body_examples = [e for e, src in zip(examples, sources) if not keep or src in keep]
body_fit = None
if verdict_body == "probe":
    base_lm, base_tok = load_frozen(train_base)
    t0 = time.time()
    span_layer = probe_answer_layer or None
    x_train = verdict_features(base_lm, base_tok, [e["messages"] for e in body_examples], layer=probe_layer,
                               span_layer=span_layer)
    x_dev = verdict_features(base_lm, base_tok, [e["messages"] for e in dev_examples], layer=probe_layer,
                             span_layer=span_layer)
    y_train, y_dev = [is_error_example(e) for e in body_examples], [is_error_example(e) for e in dev_examples]
    order = random.Random(seed).sample(range(len(body_examples)), len(body_examples))
    curve_rows = []
    for share in (0.25, 0.5, 0.75, 1.0):  # the learning curve: the probe on growing shares of its samples
        idx = order[: max(10, round(share * len(order)))]
        part = fit_probe(x_train[idx], [y_train[i] for i in idx], seed=seed)
        curve_rows.append({"examples_seen": len(idx), "dev_auroc": round(auroc(probe_scores(part, x_dev), y_dev), 4)})
    probe = part
    save_probe(out_dir / "probe", probe, model_dir=train_base, layer=probe_layer, span_layer=span_layer)
    body_fit = {"body": "probe", "examples": len(body_examples), "layer": probe_layer, "C": probe["C"],
                **({"answer_layer": span_layer} if span_layer else {}),
                "seconds": round(time.time() - t0, 1), "curve": curve_rows, "sources": sorted(keep) or "all",
                "best_dev_auroc": max(r["dev_auroc"] for r in curve_rows),
                "best_at_examples": max(curve_rows, key=lambda r: r["dev_auroc"])["examples_seen"]}
    del base_lm
elif verdict_body == "verifier":
    verifier = EncoderVerifier(paths.resolve(verifier_model), max_length=verifier_max_length, seed=seed)
    body_fit = train_verifier(verifier, body_examples, dev_examples,
                              VerifierSettings(epochs=verifier_epochs, learning_rate=verifier_learning_rate,
                                               batch_size=batch_size, max_length=verifier_max_length,
                                               eval_every=eval_every, seed=seed), progress=print).to_dict()
    verifier.save(out_dir / "verifier")
    body_fit = {**body_fit, "body": "verifier", "model": verifier_model, "epochs": verifier_epochs,
                "learning_rate": verifier_learning_rate, "sources": sorted(keep) or "all"}
if body_fit:
    write_json(out_dir / "verdict_body.json", body_fit)
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
