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
# # 01 · Retrieval and standard RAG
# We measure retrieval recall@k for BM25, dense, hybrid and reranked retrieval, then run standard
# RAG (retrieve top-k, answer with "So the final answer is: ...") and a closed-book baseline on
# the controlled testbed and the Wikipedia trivia set. This is the "Standard RAG" row that every
# later table compares against (RAG-Critic §4, Table 3).

# %% tags=["parameters"]
recall_questions = 200
eval_questions = 140
dataset_questions = "testbed=280,trivia=40"
top_k = 3
recall_ks = "1,3,5,10,20"
prompt_variant = "prefill"
variant_probe_questions = 20
max_new_tokens = 32
max_passage_words = 60
closed_book = True

# %%
import shutil

import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.evaluation.summaries import recall_at_k, retrieval_rag_metrics, summarize_rag
from ragcritic_lib.io import write_jsonl
from ragcritic_lib.pipeline.outputs import save_figure
from ragcritic_lib.pipeline.params import parse_dataset_counts
from ragcritic_lib.pipeline.stage_models import setup_stage
from ragcritic_lib.retrieval import export_indexes
from ragcritic_lib.retrieval.rag import PROMPT_VARIANTS, answer_gen_params, run_standard_rag
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics

setup = setup_stage("retrieval_rag")  # params, data/retrieval_rag; generator and retrievers load on first use
params, datasets, out_dir = setup.params, setup.datasets, setup.out_dir
ks = [int(k) for k in recall_ks.split(",")]
# Standard-RAG answers per split: eval_questions, or the count dataset_questions names.
n_eval = {ds: parse_dataset_counts(dataset_questions).get(ds, eval_questions) for ds in datasets}
recall, rag, closed = {}, {}, {}  # per dataset: recall@k per retriever; standard-RAG and closed-book summaries per split
datasets

# %% [markdown]
# ## Retrieval recall@k
# Answer recall@k: a gold answer appears in the top-k passages (FlashRAG's definition; whole
# words after normalization). On the testbed we also know which passages support each answer.

# %%
variants = {
    "bm25": dict(kind="bm25", rerank=False),
    "dense": dict(kind="dense", rerank=False),
    "hybrid": dict(kind="hybrid", rerank=False),
    "hybrid+rerank": dict(kind="hybrid", rerank=True),
}
rows = []
for ds in datasets:
    questions = runtime.load_split(params, ds, "dev", limit=recall_questions)
    recall[ds] = {}
    for name, cfg in variants.items():
        # BEGIN SOLUTION hint: compute recall_at_k for this retriever variant and add one row per k to rows
        res = recall_at_k(setup.retriever(ds, **cfg), questions, ks, group="type")
        recall[ds][name] = res
        rows += [{"dataset": ds, "retriever": name, "k": int(k), "recall": v} for k, v in res["answer_recall"].items()]
        # END SOLUTION
recall_table = pd.DataFrame(rows)
recall_table.pivot_table(index=["dataset", "retriever"], columns="k", values="recall")

# %%
fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.6), sharey=True, squeeze=False)
# BEGIN SOLUTION hint: plot answer recall against k for each retriever on this dataset's axis
for ax, ds in zip(axes[0], datasets):
    for name, grp in recall_table[recall_table.dataset == ds].groupby("retriever"):
        ax.plot(grp.k, grp.recall, marker="o", label=name)
    ax.set(title=ds, xlabel="k", ylabel="answer recall@k", xscale="log", xticks=ks, xticklabels=ks)
    ax.grid(alpha=0.3)
# END SOLUTION
axes[0][0].legend()
fig.tight_layout()
save_figure(fig, "01_retrieval_rag", "recall_at_k");

# %% [markdown]
# Per question type on the testbed (answerable types only): answer recall@k and support recall@k
# (share of the supporting passages retrieved) of the configured retriever.

# %%
kind = "hybrid+rerank" if params["common"]["retriever"].get("rerank") else params["common"]["retriever"]["kind"]
type_rows = [{"dataset": ds, "type": t, "n": m["n"],
              **{f"answer@{k}": v for k, v in m["answer_recall"].items()},
              **{f"support@{k}": v for k, v in m.get("support_recall", {}).items()}}
             for ds in datasets for t, m in recall[ds].get(kind, {}).get("by_type", {}).items()]
pd.DataFrame(type_rows)

# %% [markdown]
# ## Standard RAG and closed-book answers
# The generator reads the top-k passages of the configured retriever (`common.retriever`).

# %%
llm = setup.llm
gen = answer_gen_params(prompt_variant, max_new_tokens)
summary_rows = []
for ds in datasets:
    retriever = setup.retriever(ds)
    for split in ("dev", "test"):
        records = runtime.load_split(params, ds, split, limit=n_eval[ds])
        # BEGIN SOLUTION hint: run standard RAG on these records with the dataset's retriever, top_k and the prompt variant
        results = run_standard_rag(llm, records, retriever=retriever, k=top_k, variant=prompt_variant,
                                   gen_params=gen, max_passage_words=max_passage_words, desc=f"{ds}/{split}")
        # END SOLUTION
        write_jsonl(out_dir / ds / f"{split}.jsonl", results)
        rag.setdefault(ds, {})[split] = summarize_rag(results)
        summary_rows.append({"dataset": ds, "split": split, "method": "standard RAG", **{
            k: rag[ds][split][k] for k in ("em", "f1", "acc", "prefix_rate", "truncation_rate", "n")}})
        if closed_book and split == "test":
            cb = run_standard_rag(llm, records, retriever=None, variant="closed_book", gen_params=gen,
                                  desc=f"{ds}/{split}/closed-book")
            write_jsonl(out_dir / ds / f"{split}_closed_book.jsonl", cb)
            closed.setdefault(ds, {})[split] = summarize_rag(cb)
            summary_rows.append({"dataset": ds, "split": split, "method": "closed-book", **{
                k: closed[ds][split][k] for k in ("em", "f1", "acc", "prefix_rate", "truncation_rate", "n")}})
pd.DataFrame(summary_rows)

# %% [markdown]
# ## The shipped indexes
# The configured retriever's indexes (BM25's and the dense vectors of every passage) are written to
# `data/indexes` as the index cache's content-addressed folders. This stage's outputs travel with
# the repository, so a later stage on a new machine loads them instead of encoding the corpus
# again (the trivia corpus takes minutes on two cores); a stage whose retriever settings or corpus
# differ finds no matching folder and builds its own.

# %%
retriever_cfg = runtime.retriever_config(params)
shipped_indexes = {ds: [f.name for f in export_indexes(retriever_cfg, runtime.load_corpus(params, ds), paths.INDEXES_DIR)]
                   for ds in datasets}
keep = {name for names in shipped_indexes.values() for name in names}
for folder in paths.INDEXES_DIR.iterdir():  # indexes of an older corpus or configuration
    if folder.name not in keep:
        shutil.rmtree(folder)
shipped_indexes

# %% [markdown]
# ## Prompt variants
# How often does the model follow the answer phrase by itself, and how often does it run to the
# token cap? `prefill` writes the phrase into the assistant turn, so the model only continues it
# (its prefix rate is 1 by construction); `terse` drops the worked example.

# %%
probe_rows = []
for ds in datasets:
    retriever = setup.retriever(ds)
    probe = runtime.load_split(params, ds, "dev", limit=variant_probe_questions)
    for variant in (v for v in PROMPT_VARIANTS if v != "closed_book"):
        res = run_standard_rag(llm, probe, retriever=retriever, k=top_k, variant=variant,
                               gen_params=answer_gen_params(variant, max_new_tokens),
                               max_passage_words=max_passage_words, desc=f"{ds}/probe/{variant}")
        s = summarize_rag(res)
        probe_rows.append({"dataset": ds, "variant": variant, **{k: s[k] for k in ("em", "f1", "acc", "prefix_rate", "truncation_rate", "n")}})
pd.DataFrame(probe_rows)

# %% [markdown]
# Answerable and unanswerable questions apart (an unanswerable question has no gold answer
# anywhere in the corpus), and per question type on the testbed:

# %%
rows = []
for ds in datasets:
    for group in ("by_answerable", "by_type"):
        for value, m in rag[ds]["test"].get(group, {}).items():
            rows.append({"dataset": ds, "group": group[3:], "value": value, **m})
pd.DataFrame(rows)

# %% [markdown]
# One worked example from each dataset's test split:

# %%
from ragcritic_lib.io import read_jsonl

for ds in datasets:
    r = read_jsonl(out_dir / ds / "test.jsonl")[0]
    print(f"[{ds}] Q: {r['question']}\n  gold: {r['golden_answers']}\n  raw: {r['raw_output']!r}\n"
          f"  prediction: {r['prediction']!r}  EM={r['em']} F1={r['f1']:.2f}\n")

# %%
print("generator usage (this run; cached answers cost nothing):", llm.stats.snapshot())
metrics = retrieval_rag_metrics(recall, rag, closed, probe_rows)
write_stage_metrics("01_retrieval_rag", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_retrieval_rag  # noqa: E402

Markdown("\n\n".join(reading_retrieval_rag(read_json(setup.metrics_path), top_k=top_k)))
