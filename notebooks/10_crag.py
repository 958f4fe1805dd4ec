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
# # 10 · CRAG: a retrieval evaluator decides whether to trust, refine or replace the passages
# Corrective RAG (Yan et al.) puts a light evaluator between the retriever and the generator. It
# scores each retrieved passage for the question; from the best score and two thresholds it takes
# one of three actions:
# - **Correct** (some passage scores above the upper threshold): keep the retrieved passages,
#   refined by decompose-then-recompose (split into strips, keep the strips that score well);
# - **Incorrect** (every passage below the lower threshold): discard them and use the secondary
#   knowledge source;
# - **Ambiguous** (in between): use both.
#
# The paper's secondary source is web search. There is no web here, so the secondary source is a
# **second retrieval over the same corpus with a rewritten query**: the `secondary` retriever
# queried with a `rewriter` rewrite of the question. The evaluator is a logistic regression over
# (cross-encoder score, rank, lexical overlap) of question-passage pairs from the train split,
# labelled by whether the passage supports the question or contains a gold answer; the paper
# fine-tunes T5-large for the same role.
#
# The thresholds are tuned on **dev**: each dev question is answered once with each action's
# knowledge, and the (upper, lower) pair whose answers the project's judge
# (`error_sampling.judge_metric`) calls right most often wins (mean F1 breaks ties), so each
# action is credited with what it achieves. An action the dev optimum never chooses is flagged as
# degenerate. The test questions are those of every baseline (see notebook 09).
# With `answer_prefix: shared` the opening every answer prompt shares (standard RAG's instruction and
# worked examples) is encoded once, as RAG-Critic's answers are in notebook 08.

# %% tags=["parameters"]
train_questions = 60
dev_questions = 40
use_reranker = True
secondary = "bm25"
k_secondary = 3
top_strips = 4
min_strip_score = -0.5
rewriter = "keywords"
answer_prefix = "shared"

# %%
from collections import Counter

import pandas as pd
from IPython.display import display

from ragcritic_lib import runtime
from ragcritic_lib.baselines import MeteredLLM, crag, dataset_name, jsonable, judge_params, score_records, stopwatch
from ragcritic_lib.baselines.answer_prefix import set_answer_prefix
from ragcritic_lib.baselines.harness import save_method_answers
from ragcritic_lib.baselines.stage_setup import setup_method
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics

setup = setup_method("crag")  # params, standard RAG's settings, the answer setting, generator, questions
params, seed, rr, llm, test = setup.params, setup.seed, setup.rag, setup.llm, setup.test
set_answer_prefix(llm, answer_prefix, key="crag.answer_prefix")  # standard RAG's opening encoded once (shared) or not
reranker = None
if use_reranker:
    from ragcritic_lib.retrieval import CrossEncoderReranker

    reranker = CrossEncoderReranker(runtime.retriever_config(params)["reranker"])
ce = crag.make_ce_scorer(reranker)
crag_kw = dict(gen_params=setup.answer_gen, k_secondary=k_secondary, top_strips=top_strips, min_strip_score=min_strip_score,
               rewriter=rewriter, rag_variant=rr["prompt_variant"], max_passage_words=rr["max_passage_words"])
{ds: len(recs) for ds, recs in test.items()}

# %% [markdown]
# ## The evaluator (train split) and the thresholds (dev split)

# %%
split = lambda ds, name, n: runtime.load_split(params, ds, name, limit=n)  # noqa: E731
tune_m, evaluators, secondaries, best, info = MeteredLLM(llm), {}, {}, {}, {}
with stopwatch() as t_tune:
    for ds in test:
        retriever = setup.retriever(ds)
        # BEGIN SOLUTION hint: attach the retriever's top_k passages (crag.attach_passages) to the train and dev questions from split, then fit evaluators[ds] on train with crag.fit_evaluator
        train = crag.attach_passages(split(ds, "train", train_questions), retriever, rr["top_k"])
        dev = crag.attach_passages(split(ds, "dev", dev_questions), retriever, rr["top_k"])
        evaluators[ds] = crag.fit_evaluator(train, ce, seed=seed)
        # END SOLUTION
        secondaries[ds] = setup.retriever(ds, kind=secondary, rerank=False)
        with tune_m.dataset(ds):
            best[ds] = crag.tune_on_dev(tune_m, dev, evaluator=evaluators[ds], ce_scorer=ce,
                                        secondary=secondaries[ds], judge=judge_params(params), **crag_kw)
        info[ds] = {**{k: v for k, v in best[ds].items() if k != "action_f1_per_question"},
                    "train_pairs": evaluators[ds].train_size, "train_positive_rate": evaluators[ds].positive_rate}
pd.DataFrame(info).T[["upper", "lower", "dev_judge_acc", "dev_f1", "action_judge_acc", "action_f1", "actions", "degenerate"]]

# %% [markdown]
# ## Test: one action per question

# %%
m, out = MeteredLLM(llm), []
with stopwatch() as t:
    for ds, recs in test.items():
        with m.dataset(ds):
            # BEGIN SOLUTION hint: answer this dataset's records with crag.run_crag: its evaluator and secondary retriever, ce, the tuned thresholds best[ds]['upper'] and best[ds]['lower'], crag_kw
            out_ds = crag.run_crag(m, recs, evaluator=evaluators[ds], ce_scorer=ce, secondary=secondaries[ds],
                                   upper=best[ds]["upper"], lower=best[ds]["lower"], **crag_kw)
            # END SOLUTION
        info[ds]["test_actions"] = dict(Counter(r["crag_action"] for r in out_ds))
        info[ds]["test_actions_by_type"] = crag.actions_by_type(out_ds)  # metadata read for the report only
        info[ds]["action_usage"] = crag.action_usage(info[ds]["test_actions"], best[ds])  # < 10% of test: why
        out += out_ds
display(pd.DataFrame({ds: v["test_actions"] for ds, v in info.items()}).fillna(0).astype(int))
pd.concat({ds: pd.DataFrame(v["test_actions_by_type"]).T for ds, v in info.items()}).rename_axis(["dataset", "question type"])

# %% [markdown]
# Test F1 per action taken (a question's action is the evaluator's choice, so these groups are
# not comparable with each other; they show where the answers come from).

# %%
# BEGIN SOLUTION hint: score out with score_records, then count and mean F1 per dataset (dataset_name) and crag_action
scored = score_records(out)
pd.DataFrame([{"dataset": dataset_name(r), "action": r["crag_action"], "f1": r["f1"]} for r in scored]) \
    .groupby(["dataset", "action"]).f1.agg(["count", "mean"]).round(3)
# END SOLUTION

# %%
degenerate = [f"{ds}: {d}" for ds in test for d in info[ds]["degenerate"]]
metrics = save_method_answers(  # the scored answers under data/crag, and the metrics checked
    "crag", "10_crag", "CRAG", out, cost=m.cost(), cost_by_dataset=m.cost_by_dataset(),
    training=crag.crag_training(tune_m, tuning_seconds=t_tune["seconds"]),
    degenerate=degenerate, seconds={"tuning": t_tune["seconds"], "test": t["seconds"]}, info={"crag": info},
)
write_stage_metrics("10_crag", jsonable(metrics))
metrics["scores"]

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_crag  # noqa: E402

# standard RAG's F1 on the same test questions (their records carry its scored answers)
standard_f1 = {ds: sum(r["f1"] for r in recs) / max(1, len(recs)) for ds, recs in test.items()}
Markdown("\n\n".join(reading_crag(read_json(setup.metrics_path), standard_f1=standard_f1)))
