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
# # 07 · The RAG-Error benchmark
# Held-out test questions form a benchmark balanced over tier-2 labels and over correct vs error
# answers, and several critics are scored on it: error identification accuracy and tier-1/tier-2
# label F1, plus agreement with the causes known from the testbed's construction. This reproduces
# RAG-Critic §3.4 and §4.3 (Tables 5 and 7, Figures 5 and 7) at the scale of the embedded default.

# %% tags=["parameters"]
per_label = 3
max_new_tokens = 96
include_zeroshot = True
include_heuristic = True
extra_critic_model = ""
extra_critic_backend = "openai"
extra_critic_urls = ""
extra_critic_variant = "zeroshot"
known_causes_file = "data/taxonomy/known_causes.yaml"

# %%
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.error_benchmark import (
    benchmark_metrics, benchmark_table, build_benchmark, plot_per_label, score_critic, score_known_causes,
)
from ragcritic_lib.critic import HeuristicCritic, LLMCritic, critiques_to_records, load_trained_critic
from ragcritic_lib.io import read_json, read_jsonl, write_jsonl
from ragcritic_lib.pipeline.outputs import save_figure, save_table
from ragcritic_lib.pipeline.stage_models import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.taxonomy import load_known_causes, load_taxonomy

setup = setup_stage("benchmark")  # params and data/benchmark; the generator loads only for the zero-shot critic
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
taxonomy = load_taxonomy()
known_causes = load_known_causes(paths.resolve(known_causes_file), taxonomy=taxonomy)
prompt = read_json(paths.stage_dir("critic_sft") / "critic_prompt.json")
test = read_jsonl(paths.stage_dir("critic_sft") / "splits" / "test.jsonl")
len(test)

# %% [markdown]
# ## Building the benchmark
# Error samples are picked rarest label first until every tier-2 label occurs `per_label` times
# (50 in the paper) where the test split has that many; then as many correct samples.

# %%
bench, report = build_benchmark(test, taxonomy, per_label=per_label, seed=seed)
write_jsonl(out_dir / "benchmark.jsonl", bench)
print(f"{report['n_error']} error + {report['n_correct']} correct samples; "
      f"{len(report['labels_below_n'])} tier-2 labels have fewer than {per_label} test samples")
pd.DataFrame({"available": report["available"], "selected": report["selected"]})

# %% [markdown]
# ## The critics
# The SFT and SFT+DPO critics (merged checkpoints, trained prompt; each also with its verdict
# calibrated on the dev split), the base model zero-shot
# with the benchmark prompt (Prompt E in our words, one worked example), the grounded heuristic
# critic (rules over question, passages and prediction; no LLM) and any model named in params.

# %%
critics = {}
for name, stage, short in (("SFT critic", "critic_sft", "sft"), ("SFT+DPO critic", "critic_dpo", "sft+dpo")):
    # One loader for checkpoint, prompt settings and calibration (the same one notebook 08 uses).
    critics[name] = load_trained_critic(params, paths.stage_dir(stage), taxonomy, verdict="generate",
                                        max_new_tokens=max_new_tokens, name=short)
    critics[f"{name} (calibrated)"] = load_trained_critic(params, paths.stage_dir(stage), taxonomy,
                                                          max_new_tokens=max_new_tokens, name=f"{short}:calibrated")
if include_zeroshot:
    critics["base zero-shot"] = LLMCritic(setup.llm, taxonomy, "zeroshot", top_k=prompt["top_k"],
                                          passage_words=prompt["passage_words"], max_new_tokens=max_new_tokens,
                                          name="zeroshot")
if include_heuristic:
    critics["heuristic"] = HeuristicCritic(taxonomy)
if extra_critic_model:
    extra_cfg = {"backend": extra_critic_backend, "model": extra_critic_model}
    extra_cfg.update({"urls": extra_critic_urls} if extra_critic_urls else {})
    critics[f"{extra_critic_model} ({extra_critic_variant})"] = LLMCritic(
        runtime.build_llm(extra_cfg), taxonomy, extra_critic_variant, max_new_tokens=max_new_tokens, name="extra",
        top_k=prompt["top_k"], passage_words=prompt["passage_words"], label_list=prompt["label_list"])
list(critics)

# %%
golds = [s["target"] for s in bench]
predictions, results = {}, {}
for name, critic in critics.items():
    # BEGIN SOLUTION hint: critique bench with this critic into predictions[name], then score those parses against golds with score_critic into results[name]
    predictions[name] = critic.critique(bench)
    results[name] = score_critic(predictions[name], golds, taxonomy)
    # END SOLUTION
    write_jsonl(out_dir / "predictions" / f"{name.replace(' ', '_').replace('/', '_')}.jsonl",
                critiques_to_records(predictions[name], bench, name))
table = pd.DataFrame(benchmark_table(results)).set_index("critic")
table

# %% [markdown]
# Columns as in Table 5: identification accuracy on correct and on error samples and their mean;
# tier-1 and tier-2 micro-F1 over error samples and their mean; macro-F1, the official scorer's
# per-sample recall and the parse-failure rate beside them (all in %).

# %%
save_table(table, "07_benchmark", "benchmark", index=True)
fig = plot_per_label(results, taxonomy)
save_figure(fig, "07_benchmark", "benchmark_per_label");

# %% [markdown]
# ## Per dataset, and against the causes known from construction (testbed)
# A known cause (e.g. the supporting passage was not retrieved) names the tier-1 label it should
# produce; a critic's tier-1 labels hit it or not.

# %%
# BEGIN SOLUTION hint: by_dataset[critic][dataset]: the 'identification' part of score_critic on that dataset's bench samples only
by_dataset = {name: {ds: score_critic([p for p, s in zip(preds, bench) if s["dataset"] == ds],
                                      [s["target"] for s in bench if s["dataset"] == ds], taxonomy)["identification"]
                     for ds in sorted({s["dataset"] for s in bench})} for name, preds in predictions.items()}
# END SOLUTION
known = {name: score_known_causes(preds, bench, known_causes) for name, preds in predictions.items()}
pd.DataFrame([{"critic": name, "dataset": ds, **acc} for name, per in by_dataset.items() for ds, acc in per.items()])

# %%
pd.DataFrame([{"critic": name, "pairs": k["pairs"], "tier1_hit_rate": k["tier1_hit_rate"],
               "tier2_hit_rate": k["tier2_hit_rate"]} for name, k in known.items()])

# %% [markdown]
# One error sample and what each critic wrote about it:

# %%
example = next((i for i, s in enumerate(bench) if s["judgement"] == "Error"), None)
if example is not None:
    s = bench[example]
    print(f"Q: {s['question']}\nprediction: {s['prediction']}\ngold: {s['target']}\n")
    for name, preds in predictions.items():
        print(f"[{name}] {preds[example].to_critique()}  (parse_error={preds[example].parse_error})")

# %%
# The benchmark, the table, each critic's scores and its token counts (call timings and cache
# hits vary between runs, so they stay out: two cold runs must write identical metrics).
metrics = benchmark_metrics(report=report, table=table.reset_index().to_dict(orient="records"), results=results,
                            by_dataset=by_dataset, known_causes=known, critics=critics)
write_stage_metrics("07_benchmark", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_benchmark  # noqa: E402

Markdown("\n\n".join(reading_benchmark(read_json(setup.metrics_path))))
