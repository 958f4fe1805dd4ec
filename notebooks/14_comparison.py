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
# # 14 · One comparison: RAG-Critic and the baselines on the same questions
# Every row answers the same test questions (the first `test_questions` of each dataset in
# `datasets`, which are the correction ladder's questions) with the same generator,
# retriever and passages. Standard RAG's answers come from notebook 01, RAG-Critic's from notebook
# 08 (its final answer after `correction.iterations` critique-plan-execute rounds: the ladder's
# "RAG-Critic (2 iter)" row by default), the baselines' from notebooks 09-12 (RAGEC, notebook 13,
# diagnoses errors instead of answering and is summarised at the end).
#
# For each method against standard RAG: the F1 change with a paired bootstrap 95% interval over
# questions, a paired sign-flip permutation p-value, and that p-value Holm-corrected across the
# five methods (RAG-Critic, Self-Refine, CRAG, SIM-RAG, RePAIR). Oracle and ablation rows are
# shown with their unadjusted p-values and are not part of the corrected family. The minimum
# detectable effect says how large a change these questions can detect at 80% power.
#
# Cost: test-time LLM calls per question (generate, score and choose; the standard RAG answer a
# method starts from is included), and training cost, counted alike for every method: the LLM
# calls made before test time (RAG-Critic: answer sampling for its error pool and the LLM-teacher
# subsets; SIM-RAG: self-practice; RePAIR: train answers and executed candidate plans; CRAG: dev
# answers for threshold tuning), the optimizer steps, and `training_seconds`, the wall time of
# the optimizer runs (RAG-Critic: critic SFT, critic DPO, planner SFT; SIM-RAG: the critic's
# LoRA; RePAIR: its two DPO phases; a method without a trained model: 0). The time spent on those
# calls is in each method's own metrics, not in this column. The degenerate list gathers every
# method's flags.

# %% tags=["parameters"]
datasets = "testbed"
test_questions = 280
n_boot = 2000
n_perm = 10000
ci_alpha = 0.05
rag_critic_results = "data/correction/{dataset}/rag_critic_test.jsonl"
rag_critic_pred_key = "final_prediction"

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths
from ragcritic_lib.baselines import (
    comparison_table, jsonable, load_method_results, markdown_table, records_cost, score_records,
)
from ragcritic_lib.baselines.compare import (
    answerability_split, comparison_metrics, comparison_summary, degenerate_list, ladder_steps, method_comparison,
    planner_choices, rag_critic_training,
)
from ragcritic_lib.baselines.harness import load_method_run, shared_test_sets
from ragcritic_lib.io import read_json, read_jsonl
from ragcritic_lib.pipeline.outputs import save_figure, save_markdown, save_table
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics

setup = setup_stage("comparison")  # params and the seed; it loads no model: every answer is read back
params, seed = setup.params, setup.seed
# the audited judge of "right" (stage error_sampling's): the comparison reports its share beside F1
judge = {"judge_metric": params["error_sampling"]["judge_metric"],
         "judge_threshold": params["error_sampling"]["judge_threshold"]}
test = shared_test_sets(params)  # reads datasets and test_questions from params, as every baseline stage does
datasets = list(test)
METHOD_STAGES = {"Self-Refine": ("09_self_refine", "self_refine"), "CRAG": ("10_crag", "crag"),
                 "SIM-RAG": ("11_simrag", "simrag"), "RePAIR": ("12_repair", "repair")}
{ds: len(recs) for ds, recs in test.items()}

# %% [markdown]
# ## Gathering every method's answers

# %%
records = {"standard RAG": score_records([r for recs in test.values() for r in recs])}
extra, run_metrics = {}, {}
m08 = read_json(paths.require(paths.METRICS_DIR / "08_correction.json"))
records["RAG-Critic"] = [r for ds, recs in test.items()
                         for r in load_method_results(rag_critic_results.format(dataset=ds), ids=[x["id"] for x in recs],
                                                      pred_key=rag_critic_pred_key)]
for name, (stem, stage) in METHOD_STAGES.items():
    run_metrics[name], recs = load_method_run(stem, stage)
    records[name] = score_records(recs)
    for label, run in run_metrics[name].get("runs", {}).items():
        extra[label] = score_records(load_method_run(stem, stage, run=run["file"].rsplit("/", 1)[1][:-6])[1])
pd.DataFrame({name: {"questions": len(recs)} for name, recs in {**records, **extra}.items()}).T

# %% [markdown]
# ## Cost per method and dataset
# Test-time calls per dataset from each stage's meter. RAG-Critic's come from notebook 08's meter
# on these same questions (critic, planner and actions) plus the standard RAG answer it starts from.

# %%
std_calls = {ds: float(records_cost(test[ds])["calls"]) for ds in datasets}
costs = {ds: {"standard RAG": {"calls": std_calls[ds]}} for ds in datasets}
for ds in datasets:
    rc = ((m08.get("cost") or {}).get(ds) or {}).get("RAG-Critic", {}).get("total", {})
    costs[ds]["RAG-Critic"] = {"calls": std_calls[ds] + float(rc.get("calls", 0.0))} if rc else {}
    for name, mt in run_metrics.items():
        c = (mt.get("cost_by_dataset") or {}).get(ds) or {}
        tr = mt.get("training") or {}
        costs[ds][name] = {"calls": float(c.get("calls", 0.0)), "training_calls": tr.get("calls", 0),
                           "training_seconds": tr.get("optimizer_seconds", 0.0)}
m02, m05, m06 = (read_json(paths.require(paths.METRICS_DIR / f"{s}.json"))
                 for s in ("02_error_sampling", "05_critic_sft", "06_critic_dpo"))
m03 = read_json(paths.require(paths.METRICS_DIR / "03_tagging.json"))
rc_training = rag_critic_training(m02, m03, m05, m06, m08)  # calls, steps and seconds; its docstring says what counts
for ds in datasets:
    if costs[ds]["RAG-Critic"]:
        costs[ds]["RAG-Critic"].update(training_calls=rc_training["calls"], training_seconds=rc_training["seconds"])
steps = {"RAG-Critic": sum(v or 0 for v in rc_training["steps"].values()),
         "SIM-RAG": (run_metrics["SIM-RAG"].get("training") or {}).get("llm_critic", {}).get("steps", 0),
         "RePAIR": sum((run_metrics["RePAIR"].get("training") or {}).get("dpo_steps") or [0]),
         "CRAG": 0, "Self-Refine": 0, "standard RAG": 0}
rc_training

# %% [markdown]
# ## The comparison, with Holm-corrected p-values
# Per dataset, `method_comparison` gives one row per method against standard RAG (the Holm
# correction over the five methods happens inside it), and `comparison_summary` reads the block
# as a whole.

# %%
comparison, summaries, extra_rows = {}, {}, {}
for ds in datasets:
    # BEGIN SOLUTION hint: comparison[ds]: method_comparison of records against standard RAG (costs[ds], n_boot, n_perm, ci_alpha, seed; it Holm-corrects p); summaries[ds]: comparison_summary
    comparison[ds] = method_comparison(records, baseline="standard RAG", dataset=ds, costs=costs[ds], n_boot=n_boot,
                                       n_perm=n_perm, alpha=ci_alpha, seed=seed, **judge)
    summaries[ds] = comparison_summary(comparison[ds], alpha=ci_alpha)
    # END SOLUTION
    if extra:
        rows = method_comparison({"standard RAG": records["standard RAG"], **extra}, baseline="standard RAG", dataset=ds,
                                 n_boot=n_boot, n_perm=n_perm, alpha=ci_alpha, seed=seed, **judge)
        extra_rows[ds] = {k: {**v, "p_holm": None, "judge_p_holm": None}  # outside the Holm family
                          for k, v in rows.items() if k != "standard RAG"}
    for name, row in comparison[ds].items():
        row["training_steps"] = steps.get(name, 0)
table = pd.DataFrame([{"dataset": ds, "method": name, **row} for ds in datasets
                      for name, row in {**comparison[ds], **extra_rows.get(ds, {})}.items()])
table[["dataset", "method", "n", "em", "f1", "acc", "delta_f1", "ci_low", "ci_high", "p", "p_holm",
       "calls_per_question", "training_calls", "training_steps", "training_seconds"]].round(3)

# %%
summaries

# %% [markdown]
# ## Degenerate regimes
# A flag means the method ran in a regime that its paper's numbers do not describe: read its row
# with that in mind. Each method's flags are its own stage's `degenerate` list (SIM-RAG's include
# a balanced critic training set below `simrag.min_examples`), listed here once.

# %%
flags = {name: mt.get("degenerate") or [] for name, mt in run_metrics.items()}
flags["RAG-Critic"] = [d for d in (m08.get("degenerate") or [])  # notebook 08's flags on these datasets
                       if "RAG-Critic" in d and any(f"{ds}/" in d or f"{ds}:" in d for ds in datasets)]
m13 = paths.METRICS_DIR / "13_ragec.json"
ragec = read_json(m13) if m13.exists() else {}
flags["RAGEC"] = ragec.get("degenerate") or []
degenerate = degenerate_list(flags)
degenerate

# %% [markdown]
# ## RAGEC: the diagnosis side
# RAGEC answers no question; its stage attribution and its agreement with RAG-Critic's tier-1
# labels on the same wrong answers come from notebook 13.

# %%
{k: ragec.get(k) for k in ("answers", "stages", "invalid_rate", "agreement", "degenerate") if k in ragec}

# %%
fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 3.6), squeeze=False)
for ax, ds in zip(axes[0], datasets):
    # BEGIN SOLUTION hint: sub: this dataset's rows of table except standard RAG; errorbar of delta_f1 per method with ci_low / ci_high as xerr
    sub = table[(table.dataset == ds) & (table.method != "standard RAG")].reset_index(drop=True)
    ax.errorbar(sub.delta_f1, range(len(sub)), xerr=[sub.delta_f1 - sub.ci_low, sub.ci_high - sub.delta_f1],
                fmt="o", capsize=3)
    # END SOLUTION
    ax.axvline(0, color="grey", lw=0.8)
    ax.set(yticks=range(len(sub)), yticklabels=sub.method, xlabel="F1 change vs standard RAG (95% CI)", title=ds)
    ax.invert_yaxis()
fig.tight_layout()
save_figure(fig, "14_comparison", "delta_f1");

# %% [markdown]
# ## Per question type (paired intervals, no correction: descriptive)

# %%
rows = comparison_table({**records, **extra}, baseline="standard RAG", n_boot=n_boot, alpha=ci_alpha, seed=seed)
# BEGIN SOLUTION hint: by_type: rows as a DataFrame; pivot d_f1 by (dataset, type) against method, leaving out type 'all'
by_type = pd.DataFrame(rows)
by_type[by_type.type != "all"].pivot_table(index=["dataset", "type"], columns="method", values="d_f1").round(3)
# END SOLUTION

# %% [markdown]
# ## Where the change comes from: answerable and unanswerable questions
# On an unanswerable question (every gold answer an abstention) the only right answer is to
# abstain, so a method that abstains more gains there whatever it does on the other questions.
# Each row's change is split by that, after the run (no method sees it): its change and paired
# interval on each part, and the part's share of the row's whole change (questions in the part
# over all, times the part's change). The rows are the comparison's, the oracle and ablation
# rows, and the correction ladder's rows of notebook 08 (its runs in the same folder as
# RAG-Critic's); descriptive, without a correction across rows.

# %%
ladder_names = [name for name in ((m08.get("ladder") or {}).get(datasets[0]) or {})
                if name != "standard RAG" and not name.startswith("RAG-Critic (")]
ladder = {f"ladder: {name}": [r for ds, recs in test.items() for r in load_method_results(
              str(Path(rag_critic_results.format(dataset=ds)).parent / f"{paths.method_slug(name)}_test.jsonl"),
              ids=[x["id"] for x in recs], pred_key=rag_critic_pred_key)]
          for name in ladder_names}
answerability = {ds: answerability_split({**records, **extra, **ladder}, baseline="standard RAG", dataset=ds,
                                         n_boot=n_boot, n_perm=n_perm, alpha=ci_alpha, seed=seed, **judge)
                 for ds in datasets}
pd.DataFrame([{"dataset": ds, "part": part, "n": block["n"], "row": name, **vals}
              for ds, parts in answerability.items() for part, block in parts.items()
              for name, vals in block["rows"].items()]
             ).pivot_table(index="row", columns="part", values=["delta_f1", "share_f1"], sort=False).round(3)

# %% [markdown]
# ## The ladder one part at a time
# Two ladder rows that differ in one part answer the same questions, so their paired difference
# is what that part alone does: the verdict (RAG-Critic + rule planner to oracle verdict + rule
# planner), the labels (oracle verdict + rule planner to oracle critique) and the planner (oracle
# verdict to oracle verdict + rule planner). Each step on all questions and on the answerable and
# unanswerable ones apart, with how many answers of each row are abstentions; descriptive.

# %%
steps = {ds: ladder_steps({"standard RAG": records["standard RAG"],
                           **{name[len("ladder: "):]: recs for name, recs in ladder.items()}}, dataset=ds,
                          n_boot=n_boot, n_perm=n_perm, alpha=ci_alpha, seed=seed, **judge)
         for ds in datasets}
pd.DataFrame([{"dataset": ds, "step": f"{st['changes']}: {st['from']} -> {st['to']}", "part": part, **vals}
              for ds, block in steps.items() for st in block["steps"] for part, vals in st["parts"].items()]
             ).pivot_table(index="step", columns="part", values=["delta_f1", "ci_low", "ci_high"], sort=False).round(3)

# %% [markdown]
# ## Where a planner's plans concentrate
# Notebook 08 flags a planner whose most frequent program is over 60% of its plans. Its plans
# follow the critique: the critic's labels decide which programs of the error-action table are
# offered, and the trained planner chooses among them only where more than one is. For every
# planning row of notebook 08 (its result files, each dataset it ran on): the plans and the top
# program's share (as 08's `plan_shares`), the label sets the critiques named and the top set's
# share, the share of plans that are their label set's usual program (1.0: the program follows
# the labels alone), and, for the trained planner, the plans it had one option for and the top
# program's share of those it chose; descriptive.

# %%
correction_dir = Path(rag_critic_results.format(dataset="_")).parent.parent
planners = {}
for ds, shares in (m08.get("plan_shares") or {}).items():
    planners[ds] = {}
    for name, share in shares.items():
        source = correction_dir / ds / f"{paths.method_slug(name)}_test.jsonl"
        planners[ds][name] = planner_choices(read_jsonl(paths.require(source)))
        if planners[ds][name]["plans"] != share.get("plans"):
            raise ValueError(f"{source}: {planners[ds][name]['plans']} plans, but 08_correction.json "
                             f"plan_shares.{ds}.{name}.plans says {share.get('plans')}")
pd.DataFrame([{"dataset": ds, "row": name, **vals} for ds, rows in planners.items() for name, vals in rows.items()])

# %%
cols = ["dataset", "method", "n", "em", "f1", "acc", "delta_f1", "ci_low", "ci_high", "p", "p_holm",
        "calls_per_question", "training_calls", "training_steps", "training_seconds"]
save_table(table[cols], "14_comparison", "comparison", formats=("csv",))
save_markdown(markdown_table(table[cols].to_dict("records"), cols), "14_comparison", "comparison")
metrics = comparison_metrics(comparison=comparison, extra_rows=extra_rows, summaries=summaries, rows=rows, flags=flags,
                             training=rc_training, run_metrics=run_metrics, answerability=answerability,
                             steps=steps, planners=planners)
write_stage_metrics("14_comparison", jsonable(metrics))
sorted(metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.evaluation.readings import reading_comparison  # noqa: E402
from ragcritic_lib.evaluation.readings import provenance_sentences  # noqa: E402

Markdown("\n\n".join(reading_comparison(metrics, alpha=ci_alpha)
                      + provenance_sentences(read_json(setup.metrics_path))))
