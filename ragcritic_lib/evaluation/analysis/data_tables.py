"""Items on the data and the standard-RAG baseline: datasets (Table 10), error sampling
(Table 1), retrieval recall and standard RAG."""

from __future__ import annotations

from typing import Any

from ragcritic_lib.evaluation.analysis.items import (
    Inputs,
    Table,
    fmt_score,
    plain,
    rel,
)


# --------------------------------------------------------------------------------------------
# Datasets (Table 10) and error sampling (Table 1)
# --------------------------------------------------------------------------------------------
def datasets_table(inputs: Inputs) -> Table | None:
    """Corpus passages and split sizes per dataset, and the test questions each stage evaluated."""
    import pandas as pd

    item = "table10_datasets"
    rag = inputs.metric("retrieval_rag", "rag", item=item) or {}
    assets = inputs.metric("assets", item=item)
    testbed = inputs.metric("testbed", item=item)
    known = {"trivia": bool(assets), "testbed": bool(testbed)}
    names = sorted(set(rag) | {k for k, ok in known.items() if ok})
    if not names:
        return None
    n08 = inputs.metric("correction", "n_questions", item=item) or {}
    n14 = {r["dataset"]: r["n"] for r in (inputs.metric("comparison", "rows", item=item) or [])
           if r.get("method") == "standard RAG" and r.get("type") == "all"}
    rows = []
    for ds in names:
        row: dict[str, Any] = {"dataset": ds}
        if ds == "trivia" and assets:
            sizes = assets.get("trivia_split_sizes", {})
            row.update(corpus_passages=assets.get("corpus_passages"), **{s: sizes.get(s) for s in ("train", "dev", "test")})
        elif ds == "testbed" and testbed:
            q = testbed.get("questions", {})
            row.update(corpus_passages=testbed.get("corpus", {}).get("passages"),
                       **{s: q.get(s, {}).get("n") for s in ("train", "dev", "test")})
        row["test_standard_rag"] = rag.get(ds, {}).get("test", {}).get("n")
        row["test_correction"] = n08.get(ds)
        row["test_comparison"] = n14.get(ds)
        rows.append(row)
    frame = pd.DataFrame(rows)
    display = plain(frame)
    return Table(frame, display, ["Counts of questions; test_* = test questions evaluated by stages 01, 08 and 14 "
                                  "(14: every method on the same questions)."])


def source_statistics_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """Table-1-style rows from stage 02 with a total row per dataset."""
    import pandas as pd

    item = "table1_source_statistics"
    rows = inputs.metric("error_sampling", "source_statistics", item=item)
    tags = inputs.metric("tagging", "normalization", item=item)
    if not rows:
        if rows == []:
            inputs.note_missing(item, rel(inputs.metrics_path("error_sampling")), "no rows", "source_statistics")
        return None
    frame = pd.DataFrame(rows)
    totals = frame.groupby("dataset", sort=True)[["questions", "samples", "errors", "correct"]].sum().reset_index()
    totals["type"] = "all"
    totals["error_rate"] = totals.errors / totals.samples.where(totals.samples > 0)
    frame = pd.concat([frame, totals], ignore_index=True)[["dataset", "type", "questions", "samples", "errors",
                                                           "correct", "error_rate"]]
    order = sorted(range(len(frame)), key=lambda i: (frame.dataset.iloc[i], frame.type.iloc[i] != "all", frame.type.iloc[i]))
    frame = frame.iloc[order].reset_index(drop=True)
    display = frame.copy()
    display["error_rate"] = [fmt_score(v, percent=percent, digits=digits) for v in frame.error_rate]
    members = inputs.metric("error_sampling", "error_rate_by_member", item=item) or {}
    notes = [f"Pool of {len(members)} members; error rate per member: "
             + ", ".join(f"{m} {fmt_score(v, percent=percent, digits=digits)}" for m, v in members.items())] if members else []
    if tags:
        notes.append(f"Atomic tags (stage 03): {tags.get('raw_tags')} raw ({tags.get('raw_unique')} unique) -> "
                     f"{tags.get('final_tags')} after normalization ({tags.get('final_unique')} unique); "
                     "the paper goes from more than 20,000 to about 4,000 labels.")
    return Table(frame, display, notes)


# --------------------------------------------------------------------------------------------
# Stage 01: retrieval and standard RAG
# --------------------------------------------------------------------------------------------
def retrieval_recall_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """Answer (and, on the testbed, support) recall@k per dataset and retriever."""
    import pandas as pd

    item = "stage01_retrieval_recall"
    retrieval = inputs.metric("retrieval_rag", "retrieval", item=item)
    if not retrieval:
        return None
    rows = []
    for ds, by_retriever in retrieval.items():
        for name, res in by_retriever.items():
            support = res.get("support_recall", {})
            for k, v in res.get("answer_recall", {}).items():
                rows.append({"dataset": ds, "retriever": name, "k": int(k), "answer_recall": v,
                             "support_recall": support.get(k, float("nan")), "n": res.get("n")})
    if not rows:
        inputs.note_missing(item, rel(inputs.metrics_path("retrieval_rag")), "no rows", "retrieval")
        return None
    frame = pd.DataFrame(rows)
    wide = frame.pivot_table(index=["dataset", "retriever"], columns="k", values="answer_recall", sort=False)
    display = wide.apply(lambda col: [fmt_score(v, percent=percent, digits=digits) for v in col])
    display.columns = [f"R@{k}" for k in display.columns]
    return Table(frame, display.reset_index(), ["Answer recall@k: a gold answer occurs in the top-k passages."])


def plot_retrieval_recall(table: Table | None):
    """Recall@k curves per retriever, one panel per dataset (log-scaled k)."""
    if table is None:
        return None
    import matplotlib.pyplot as plt

    frame = table.frame
    datasets = list(dict.fromkeys(frame.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.6), sharey=True, squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        for name, grp in frame[frame.dataset == ds].groupby("retriever", sort=False):
            ax.plot(grp.k, grp.answer_recall, marker="o", label=name)
        ks = sorted(set(frame.k))
        ax.set(title=ds, xlabel="k", ylabel="answer recall@k", xscale="log", xticks=ks, xticklabels=ks)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def standard_rag_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """Standard RAG (dev, test) and closed-book (test): overall and per answerable / type group."""
    import pandas as pd

    item = "stage01_standard_rag"
    rag = inputs.metric("retrieval_rag", "rag", item=item)
    if not rag:
        return None
    closed = inputs.metric("retrieval_rag", "closed_book", item=item) or {}
    rows = []
    for method, block in (("standard RAG", rag), ("closed-book", closed)):
        for ds, splits in block.items():
            for split, s in splits.items():
                if not s.get("n"):
                    continue
                rows.append({"dataset": ds, "split": split, "method": method, "group": "all",
                             **{k: s.get(k) for k in ("n", "em", "f1", "acc", "prefix_rate", "truncation_rate")}})
                for g in ("answerable", "type"):
                    for value, m in s.get(f"by_{g}", {}).items():
                        rows.append({"dataset": ds, "split": split, "method": method, "group": f"{g}={value}",
                                     **{k: m.get(k) for k in ("n", "em", "f1", "acc")}})
    if not rows:
        inputs.note_missing(item, rel(inputs.metrics_path("retrieval_rag")), "no rows", "rag")
        return None
    frame = pd.DataFrame(rows)
    display = frame.copy()
    for col in ("em", "f1", "acc", "prefix_rate", "truncation_rate"):
        display[col] = [fmt_score(v, percent=percent, digits=digits) for v in frame[col]]
    return Table(frame, display, ["EM/F1/acc in %; prefix_rate = answers that followed 'So the final answer is:'."])


