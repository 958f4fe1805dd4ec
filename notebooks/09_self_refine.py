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
# # 09 · Self-Refine: the generator critiques and rewrites its own answer
# The first of five baselines (notebooks 09-13), each answering the same test questions as
# standard RAG (notebook 01) and RAG-Critic (notebook 08) with the same generator, retriever,
# passages and answer format; notebook 14 compares them. The questions are the first
# `comparison.test_questions` test questions of each dataset in `comparison.datasets`.
#
# Self-Refine (Madaan et al.) needs no training: the same model that answered gives feedback on
# its answer against the passages, then rewrites the answer from that feedback, and repeats. Here
# the loop starts from standard RAG's answer and runs up to `rounds` times; feedback and rewrite
# both see the earlier answers of the question with the feedback they got (the method's history),
# and the loop stops as soon as the feedback approves the current answer. Each rewrite is standard
# RAG's prompt (its variant `retrieval_rag.prompt_variant`) with the feedback as an extra
# instruction, read with standard RAG's answer extraction; only the feedback has its own prompt.
# With `answer_prefix: shared` the opening every rewrite prompt shares (standard RAG's instruction
# and worked examples) is encoded once, as RAG-Critic's answers are in notebook 08.

# %% tags=["parameters"]
rounds = 2
answer_prefix = "shared"

# %%
import pandas as pd

from ragcritic_lib.baselines import MeteredLLM, add_costs, dataset_costs, jsonable, records_cost, self_refine, stopwatch
from ragcritic_lib.baselines.answer_prefix import set_answer_prefix
from ragcritic_lib.baselines.harness import save_method_answers
from ragcritic_lib.baselines.stage_setup import setup_method
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics

setup = setup_method("self_refine")  # params, standard RAG's settings, the answer setting, generator, questions
rr, gen, llm, test = setup.rag, setup.gen, setup.llm, setup.test
set_answer_prefix(llm, answer_prefix, key="self_refine.answer_prefix")
answer_kw = dict(gen_params=setup.answer_gen, rag_variant=setup.variant)  # answers as standard RAG writes them
{ds: len(recs) for ds, recs in test.items()}

# %% [markdown]
# ## Feedback and refinement
# Every LLM call is metered per dataset (generate, score and choose, cache hits included), and
# the cost of a question includes the standard RAG answer it starts from.

# %%
m, refined = MeteredLLM(llm), []
with stopwatch() as t:
    for ds, recs in test.items():
        with m.dataset(ds):
            # BEGIN SOLUTION hint: refine this dataset's records with self_refine.self_refine through the metered m (rounds, answer_kw, gen for the feedback, rr['max_passage_words']) and add them to refined
            refined += self_refine.self_refine(m, recs, rounds=rounds, **answer_kw, feedback_params=gen,
                                               max_words=rr["max_passage_words"])
            # END SOLUTION
info = self_refine.self_refine_summary(refined)
print({k: info[k] for k in ("approval_rate", "approval_rate_by_round", "refinements", "degenerate")})
pd.DataFrame([{"rounds_used": r["self_refine_rounds"], "stopped_by_feedback": r["self_refine_stopped"]}
              for r in refined]).value_counts().rename("questions").to_frame()

# %% [markdown]
# ## Did refinement change answers, and for the better?
# How many final answers differ from the standard RAG answer they started from; whether the
# changes help is measured in notebook 14, paired on the same questions.

# %%
# BEGIN SOLUTION hint: original: each test id's standard RAG prediction; changed: the refined records whose stripped prediction differs from it
original = {r["id"]: r["prediction"] for recs in test.values() for r in recs}
changed = [r for r in refined if str(r["prediction"]).strip() != str(original[r["id"]]).strip()]
# END SOLUTION
info["answers_changed"] = len(changed)
{"questions": len(refined), "answers_changed": len(changed)}

# %% [markdown]
# ## Why the feedback approves so rarely
# The first-round feedback per question type: how often it approves, what kind of text it is
# (approving, naming a problem, both, or neither), and two samples. The question type is read
# here for the report only; the method never sees it.

# %%
info["feedback_by_type"] = self_refine.feedback_by_type(refined)
pd.DataFrame({qtype: {"n": row["n"], "approval_rate": round(row["approval_rate"], 3), **row["kinds"]}
              for qtype, row in info["feedback_by_type"].items()}).T.fillna(0)

# %%
for qtype, row in info["feedback_by_type"].items():
    print(f"{qtype}:", *(f"  - {x}" for x in row["samples"]), sep="\n")

# %%
base_cost = {ds: records_cost(recs) for ds, recs in test.items()}
metrics = save_method_answers(  # the scored answers under data/self_refine, and the metrics checked
    "self_refine", "09_self_refine", "Self-Refine", refined,
    cost=add_costs(*base_cost.values(), m.cost()), cost_by_dataset=dataset_costs(base_cost, m.cost_by_dataset()),
    degenerate=info["degenerate"], seconds={"test": t["seconds"]}, info={"self_refine": info},
)
write_stage_metrics("09_self_refine", jsonable(metrics))
metrics["scores"]

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_self_refine  # noqa: E402

# standard RAG's F1 on the same test questions (their records carry its scored answers)
standard_f1 = {ds: sum(r["f1"] for r in recs) / max(1, len(recs)) for ds, recs in test.items()}
Markdown("\n\n".join(reading_self_refine(read_json(setup.metrics_path), standard_f1=standard_f1)))
