"""Evaluation helpers shared by the notebooks: retrieval recall@k and RAG result summaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.evaluation.scoring import aggregate, mean, retrieval_recall, support_recall


def recall_at_k(
    retriever: Any,
    records: Sequence[Mapping[str, Any]],
    ks: Sequence[int],
    *,
    group: str | None = None,
) -> dict[str, Any]:
    """Answer recall@k (a gold answer occurs in the top-k passages) for each k, and, where records
    carry ``metadata.supporting_ids``, support recall@k (share of supporting passages retrieved).

    Unanswerable records (``metadata.answerable`` false) are left out of both, since no passage
    can contain their answer. With ``group`` (a metadata key such as ``"type"``) the same numbers
    are also given per value of that key under ``by_<group>``.
    """
    ks = sorted(set(int(k) for k in ks))
    answerable = [r for r in records if r.get("metadata", {}).get("answerable", True)]
    hits = retriever.search([r["question"] for r in answerable], max(ks)) if answerable else []
    per_record = []
    for r, hl in zip(answerable, hits):
        ans = {k: retrieval_recall([h.contents for h in hl[:k]], r["golden_answers"]) for k in ks}
        sup = {k: support_recall([h.doc_id for h in hl[:k]], r.get("metadata", {}).get("supporting_ids", []))
               for k in ks}
        per_record.append((r, ans, sup))

    def summary(rows: Sequence[tuple[Mapping[str, Any], dict[int, float], dict[int, float | None]]]) -> dict[str, Any]:
        out: dict[str, Any] = {"n": len(rows), "answer_recall": {}, "support_recall": {}}
        for k in ks:
            out["answer_recall"][str(k)] = round(mean(a[k] for _, a, _ in rows), 4)
            sup = [s[k] for _, _, s in rows if s[k] is not None]
            if sup:
                out["support_recall"][str(k)] = round(mean(sup), 4)
        if not out["support_recall"]:
            del out["support_recall"]
        return out

    out = summary(per_record)
    if group is not None:
        groups: dict[str, list[Any]] = {}
        for row in per_record:
            value = row[0].get("metadata", {}).get(group)
            if value is not None:
                groups.setdefault(str(value), []).append(row)
        if groups:
            out[f"by_{group}"] = {v: summary(rows) for v, rows in sorted(groups.items())}
    return out


def summarize_rag(results: Sequence[Mapping[str, Any]], groups: Sequence[str] = ("answerable", "type")) -> dict[str, Any]:
    """EM/F1/acc overall and per metadata group, with prefix-following and truncation rates."""
    if not results:
        return {"n": 0}
    out: dict[str, Any] = aggregate(results)
    out["prefix_rate"] = round(mean(float(r.get("followed_prefix", False)) for r in results), 4)
    out["truncation_rate"] = round(mean(float(r.get("truncated", False)) for r in results), 4)
    out["abstain_rate"] = round(mean(float("insufficient information" in str(r.get("prediction", "")).lower())
                                     for r in results), 4)
    for g in groups:
        values = {str(r.get("metadata", {}).get(g)) for r in results}
        if len(values) > 1 or g == "type":
            by: dict[str, list] = {}
            for r in results:
                by.setdefault(str(r.get("metadata", {}).get(g)), []).append(r)
            out[f"by_{g}"] = {k: aggregate(v) for k, v in sorted(by.items())}
    return out


def retrieval_rag_metrics(
    recall: Mapping[str, Mapping[str, Any]],
    rag: Mapping[str, Mapping[str, Any]],
    closed_book: Mapping[str, Mapping[str, Any]],
    prompt_variants: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """Notebook 01's metrics.

    Args:
        recall: ``{dataset: {retriever: recall_at_k(...)}}``.
        rag: ``{dataset: {split: summarize_rag(standard-RAG results)}}``.
        closed_book: the same for the closed-book answers (empty when they were not run).
        prompt_variants: one row per dataset and prompt variant of the probe.
    """
    return {"retrieval": dict(recall), "rag": dict(rag), "closed_book": dict(closed_book),
            "prompt_variants": list(prompt_variants)}
