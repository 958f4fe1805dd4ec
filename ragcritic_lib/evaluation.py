"""Evaluation helpers shared by the notebooks: retrieval recall@k and RAG result summaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .metrics import aggregate, mean, retrieval_recall, support_recall


def recall_at_k(
    retriever: Any,
    records: Sequence[Mapping[str, Any]],
    ks: Sequence[int],
) -> dict[str, Any]:
    """Answer recall@k (a gold answer occurs in the top-k passages) for each k, and, where records
    carry ``metadata.supporting_ids``, support recall@k (share of supporting passages retrieved).

    Unanswerable records (``metadata.answerable`` false) are left out of both, since no passage
    can contain their answer.
    """
    ks = sorted(set(int(k) for k in ks))
    answerable = [r for r in records if r.get("metadata", {}).get("answerable", True)]
    hits = retriever.search([r["question"] for r in answerable], max(ks)) if answerable else []
    out: dict[str, Any] = {"n": len(answerable), "answer_recall": {}, "support_recall": {}}
    for k in ks:
        out["answer_recall"][str(k)] = round(mean(
            retrieval_recall([h.contents for h in hl[:k]], r["golden_answers"]) for r, hl in zip(answerable, hits)
        ), 4)
        sup = [support_recall([h.doc_id for h in hl[:k]], r["metadata"].get("supporting_ids", []))
               for r, hl in zip(answerable, hits)]
        sup = [s for s in sup if s is not None]
        if sup:
            out["support_recall"][str(k)] = round(mean(sup), 4)
    if not out["support_recall"]:
        del out["support_recall"]
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
