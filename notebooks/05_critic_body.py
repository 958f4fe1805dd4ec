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
# # 05 · The verdict's body
# Is this answer right? The critic's verdict can be scored by the generative critic itself (its
# margin between "Error" and "Correct"), or by a body of its own that the critic carries beside
# its weights: a linear probe on the frozen generator, or a small encoder verifier. Which body
# scores the verdict was chosen on the measured recipe frontier
# (`reports/benchmarks/critic_recipes.json`, docs/methods/rag-critic.md).
#
# This stage fits that body on the training samples of notebook `05_critic_data` (train
# questions only), with the generator's real answers to the *dev* questions as its learning
# curve. It is apart from notebook `05_critic_sft` because their inputs differ: the body reads the
# frozen generator, never the trained critic, so a new SFT recipe does not refit it and a new
# body does not retrain the critic. Stage `05_critic_sft` puts the body fitted here into the
# critic's folder, and every later stage reads the verdict from there.

# %% tags=["parameters"]
verdict_body = "probe"
verifier_model = "data/assets/models/all-minilm-l6-v2"
verifier_epochs = 2.0
verifier_learning_rate = 5e-05
verifier_max_length = 256
verdict_sources = "generator,pool"
probe_layer = 18
probe_answer_layer = 18
batch_size = 16
eval_every = 400

# %%
import random
import time

import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.critic.data import critic_body_metrics
from ragcritic_lib.critic.probe import fit_probe, load_frozen, probe_scores, save_probe, verdict_features
from ragcritic_lib.critic.verifier import EncoderVerifier, VerifierSettings, is_error_example, train_verifier
from ragcritic_lib.evaluation.stats import auroc
from ragcritic_lib.io import read_jsonl, write_json
from ragcritic_lib.pipeline.outputs import save_figure
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics

setup = setup_stage("critic_body")  # params and data/critic_body
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
# The frozen model the probe reads: the critic's base (critic_sft.base_model; "" = the generator's model).
train_base = runtime.resolve_base_model(params, params["critic_sft"]["base_model"], key="critic_sft.base_model")
data_dir = paths.stage_dir("critic_data")
examples, dev_examples = read_jsonl(data_dir / "sft_train.jsonl"), read_jsonl(data_dir / "sft_dev.jsonl")
sources = [s["source"] for s in read_jsonl(data_dir / "train_samples.jsonl")]  # sft_train.jsonl is in this order
keep = {x.strip() for x in verdict_sources.split(",") if x.strip()}
body_examples = [e for e, src in zip(examples, sources) if not keep or src in keep]
out_dir.mkdir(parents=True, exist_ok=True)
{"body": verdict_body, "samples": len(body_examples), "of": len(examples), "sources": sorted(keep) or "all",
 "dev_answers": len(dev_examples)}

# %% [markdown]
# ## Fitting the body
# With `verdict_body = "probe"`, a logistic regression on the frozen generator's states at the
# verdict position (layer `probe_layer` and the last layer; with `probe_answer_layer` > 0 also
# that layer's mean over the answer's tokens) is fitted on the training samples of
# `verdict_sources` (e.g. the real answers of the generator and the pool; "" = all), its C by
# cross-validation; its learning curve fits it on growing shares of those samples. With
# `"verifier"`, a small encoder verifier (`verifier_model`, its top layers fine-tuned for
# `verifier_epochs` passes, the best dev AUROC kept) reads the critic's own view of each answer.
# With `"generative"` there is nothing to fit here: the critic's own margin scores the verdict.

# %%
body_fit = {"body": "generative"}
if verdict_body == "probe":
    base_lm, base_tok = load_frozen(train_base)
    t0 = time.time()
    span_layer = probe_answer_layer or None
    x_train = verdict_features(base_lm, base_tok, [e["messages"] for e in body_examples], layer=probe_layer,
                               span_layer=span_layer, batch_size=batch_size)
    x_dev = verdict_features(base_lm, base_tok, [e["messages"] for e in dev_examples], layer=probe_layer,
                             span_layer=span_layer, batch_size=batch_size)
    y_train, y_dev = [is_error_example(e) for e in body_examples], [is_error_example(e) for e in dev_examples]
    order = random.Random(seed).sample(range(len(body_examples)), len(body_examples))
    curve_rows = []
    for share in (0.25, 0.5, 0.75, 1.0):  # the learning curve: the probe on growing shares of its samples
        idx = order[: max(10, round(share * len(order)))]
        # BEGIN SOLUTION hint: fit_probe on these samples (x_train[idx], their labels, the seed), then a curve row: len(idx) as examples_seen and the dev AUROC of its probe_scores on x_dev, rounded to 4 digits
        part = fit_probe(x_train[idx], [y_train[i] for i in idx], seed=seed)
        curve_rows.append({"examples_seen": len(idx), "dev_auroc": round(auroc(probe_scores(part, x_dev), y_dev), 4)})
        # END SOLUTION
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
write_json(out_dir / "verdict_body.json", body_fit)
{k: v for k, v in body_fit.items() if k != "curve"}

# %%
curve = pd.DataFrame(body_fit.get("curve") or [])
fig, ax = plt.subplots(figsize=(5.5, 3.4))
if not curve.empty:
    ax.plot(curve["examples_seen"], curve["dev_auroc"], marker="o")
ax.axhline(0.5, color="grey", lw=0.8, ls="--")
ax.set(xlabel="training samples", ylabel="dev verdict AUROC", title=f"Learning curve (the {body_fit['body']})")
ax.grid(alpha=0.3)
fig.tight_layout()
save_figure(fig, "05_critic_body", "verdict_body_curve");

# %%
metrics = critic_body_metrics(verdict_body=body_fit, dev_examples=dev_examples)
write_stage_metrics("05_critic_body", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_critic_body  # noqa: E402

Markdown("\n\n".join(reading_critic_body(read_json(setup.metrics_path))))
