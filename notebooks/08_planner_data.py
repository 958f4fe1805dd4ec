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
# # 08 · The planner, learned from executed outcomes
# RAG-Critic's planner reads the critique and writes a small program over five action functions
# (notebook `08_correction` runs it). Trained to copy the error-action table's rule programs, a
# small planner learns the table, not what repairs an answer. Here the programs are *run*: for
# wrong answers to *train* questions (the error records of stages 02-04, never a test question),
# with the critique those stages wrote, the critique's own rule program and programs drawn from
# the rest of the table go through the restricted executor with the real actions. Each run is an
# executed outcome: critique, program, the new answer, whether the audited judge calls it right
# and its F1 change. The planner is then fine-tuned on the programs that helped, balanced over
# the programs so that one program cannot fill its training set.
#
# This stage is apart from the correction stage because its inputs differ: it reads train
# questions and the error records, the correction reads the critic and the test questions.

# %% tags=["parameters"]
train_file = "data/taxonomy/build/error_qa.jsonl"
records = "testbed=250"
programs_per_record = 4
targets = "outcomes"
max_examples = 96
prompt = "compact"
recipe = "configs/train/planner_sft.yaml"
max_steps = 24
launcher = "inprocess"
accelerate_config = "configs/accelerate/multi_gpu.yaml"
base_model = ""
min_examples = 20

# %%
import random

import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.agent.outcomes import (
    PLANNER_TARGETS, candidate_jobs, execute_jobs, outcome_sft_examples, outcome_summary, outcome_targets,
    planner_data_metrics,
)
from ragcritic_lib.agent.planner import RuleBasedPlanner, load_error_actions, planner_sft_examples
from ragcritic_lib.agent.workflow import correction_actions
from ragcritic_lib.critic.training import run_training, write_loss_curve
from ragcritic_lib.io import read_jsonl, write_json, write_jsonl
from ragcritic_lib.mining.taxonomy import load_taxonomy
from ragcritic_lib.pipeline.params import parse_dataset_counts
from ragcritic_lib.pipeline.stage_models import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.retrieval import CrossEncoderReranker

setup = setup_stage("planner_data")  # params and data/planner_data; the generator and retrievers load on first use
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
if targets not in PLANNER_TARGETS:
    raise ValueError(f"planner_data.targets: must be one of {' | '.join(PLANNER_TARGETS)}, got {targets!r}")
correction = params["correction"]  # the actions run here exactly as the correction stage runs them
rag_cfg, judge = params["retrieval_rag"], params["error_sampling"]
taxonomy = load_taxonomy()
table = load_error_actions(taxonomy=taxonomy)
rule_planner = RuleBasedPlanner(table, topk=correction["action_topk"], deep_topk=correction["deep_topk"])

# %% [markdown]
# ## Wrong answers to train questions
# The error records carry the critique the error-mining stages wrote (verdict, analysis, tier-1
# and tier-2 labels). A fixed draw per dataset (`records`); no question of any test split may
# appear (checked).

# %%
wanted = parse_dataset_counts(records)
pool = read_jsonl(paths.resolve(train_file))
test_questions = {r["question"] for ds in setup.datasets
                  for r in read_jsonl(paths.stage_dir("retrieval_rag") / ds / "test.jsonl")}
overlap = sorted({r["question"] for r in pool} & test_questions)
if overlap:
    raise ValueError(f"{train_file}: {len(overlap)} records ask a test question, e.g. {overlap[0]!r}")
rng = random.Random(seed)
chosen = []
for ds in setup.datasets:
    mine = [r for r in pool if r.get("dataset") == ds]
    rng.shuffle(mine)
    chosen += mine[:wanted.get(ds, 0)]
write_json(out_dir / "train_questions.json", sorted({r["question"] for r in chosen}))
pd.Series({ds: sum(r.get("dataset") == ds for r in chosen) for ds in setup.datasets}, name="records")

# %% [markdown]
# ## Running the candidate programs
# Per record: the critique's own rule program, then `programs_per_record - 1` others drawn from
# the table, each executed once with the correction stage's actions and limits. A program the
# executor rejects keeps the old answer.

# %%
jobs = candidate_jobs(chosen, rule_planner, per_record=programs_per_record, seed=seed)
retriever_cfg = runtime.retriever_config(params)
reranker = CrossEncoderReranker(retriever_cfg["reranker"])
outcomes = []
for ds in setup.datasets:
    mine = [j for j in jobs if j["record"].get("dataset") == ds]
    if not mine:
        continue
    # The correction stage's own actions: its answer setting, notes, query expansion, rerank depth and prompt prefix
    actions = correction_actions(setup.llm, setup.retriever(ds), settings=correction, rag=rag_cfg, reranker=reranker,
                                 table=table, default_rerank_depth=retriever_cfg["rerank_depth"])
    outcomes += execute_jobs(mine, actions=actions, judge_metric=judge["judge_metric"],
                             judge_threshold=judge["judge_threshold"], max_calls=correction["max_calls"],
                             timeout_s=correction["timeout_s"], table=table)
write_jsonl(out_dir / "executed.jsonl", outcomes)
print(f"{len(outcomes)} programs executed on {len({o['id'] for o in outcomes})} wrong answers")
pd.DataFrame(outcomes).groupby("plan_label")[["right_after", "helped", "delta_f1"]].mean().round(3)

# %% [markdown]
# ## The planner's training set
# With `targets: outcomes` each record's best program (judged right first, then the larger F1
# change; a tie goes to the critique's own program) is a target when it helped: the answer became
# right, or stayed on its side of the judge with a higher F1. Records where nothing helped teach
# nothing and are left out. `targets: rule` trains on the rule programs instead (the planner as it
# was before outcomes were recorded), for comparison.

# %%
# BEGIN SOLUTION hint: each record's best helping program with outcome_targets, then the balanced SFT examples of those targets with outcome_sft_examples (prompt variant, max_examples, seed)
best = outcome_targets(outcomes)
examples = outcome_sft_examples(chosen, best, table, variant=prompt, max_examples=max_examples, seed=seed)
# END SOLUTION
summary = outcome_summary(outcomes, best, examples if targets == "outcomes" else [])
# No program helped any record (a tiny run): the planner learns the rule programs, and the flags say so.
trained_on = targets if examples or targets == "rule" else "rule (no program helped)"
if trained_on != "outcomes":
    examples = [{**ex, "plan_label": "rule"} for ex in
                planner_sft_examples(chosen, table, variant=prompt, planner=rule_planner, max_examples=max_examples,
                                     seed=seed)]
write_jsonl(out_dir / "planner_sft.jsonl", examples)
write_json(out_dir / "outcomes.json", {"targets": trained_on, "outcomes": summary})  # the correction stage reports it
pd.DataFrame(summary["by_program"]).T

# %%
# The local model folder trained from: base_model, or the generator's model ("" and a local generator).
planner_base = runtime.resolve_base_model(params, base_model, key="planner_data.base_model")
trained = run_training("sft", [{"messages": ex["messages"]} for ex in examples], recipe, out_dir / "planner_adapter",
                       base_model=planner_base, overrides={"max_steps": max_steps, "seed": seed}, launcher=launcher,
                       accelerate_config=accelerate_config)
write_loss_curve(trained.log_history, out_dir / "planner_loss.json")
write_json(out_dir / "planner_train_result.json", trained.to_dict())  # records the base the adapter belongs on
{k: v for k, v in trained.to_dict().items() if k in ("steps", "seconds", "seconds_per_step", "examples", "device")}

# %%
metrics = planner_data_metrics(records=chosen, datasets=setup.datasets, targets=targets,
                               programs_per_record=programs_per_record, summary=summary, train_result=trained.to_dict(),
                               test_overlap=len(overlap), min_examples=min_examples)
write_stage_metrics("08_planner_data", metrics)
print("degenerate:", metrics["degenerate"])

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_planner_data  # noqa: E402

Markdown("\n\n".join(reading_planner_data(read_json(setup.metrics_path))))
