"""Answer and retrieval metrics with FlashRAG/SQuAD conventions.

Normalization lowercases, removes punctuation and the articles a/an/the, and collapses
whitespace. ``exact_match`` and ``token_f1`` take the best score over all gold answers.
``accuracy`` asks whether a normalized gold answer occurs in the normalized prediction as a
whole-word span: FlashRAG's plain substring test gives spurious hits for short golds (6.5% of the
trivia answers are three characters or fewer, and "a" would match "banana").
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "–", "—", "…"}
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD-style normalization: lowercase, drop punctuation and articles, squash spaces."""
    text = str(text).lower()
    text = "".join(" " if ch in _PUNCT else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(golds: str | Sequence[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else [str(g) for g in golds]


def exact_match(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 when the normalized prediction equals any normalized gold answer."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _as_list(golds)))


def token_f1(prediction: str, golds: str | Sequence[str]) -> float:
    """Best token-level F1 between the prediction and any gold answer."""
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for gold in _as_list(golds):
        gold_tokens = normalize_answer(gold).split()
        if not pred_tokens or not gold_tokens:
            best = max(best, float(pred_tokens == gold_tokens))
            continue
        common = Counter(pred_tokens) & Counter(gold_tokens)
        overlap = sum(common.values())
        if overlap == 0:
            continue
        precision = overlap / len(pred_tokens)
        recall = overlap / len(gold_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def contains_answer(text: str, golds: str | Sequence[str]) -> bool:
    """Whether any normalized gold occurs in the normalized text as a whole-word span."""
    hay = f" {normalize_answer(text)} "
    for gold in _as_list(golds):
        g = normalize_answer(gold)
        if g and f" {g} " in hay:
            return True
    return False


def accuracy(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 when a gold answer occurs in the prediction (whole words, normalized)."""
    return float(contains_answer(prediction, golds))


def retrieval_recall(passages: Iterable[str], golds: str | Sequence[str]) -> float:
    """1.0 when any gold answer occurs in any of the given passages (FlashRAG recall@k)."""
    return float(any(contains_answer(p, golds) for p in passages))


def support_recall(passage_ids: Iterable[str], supporting_ids: Sequence[str]) -> float | None:
    """Fraction of the known supporting passages that were retrieved (None when there are none)."""
    supporting = set(supporting_ids)
    if not supporting:
        return None
    return len(supporting & set(passage_ids)) / len(supporting)


def score_prediction(prediction: str, golds: Sequence[str]) -> dict[str, float]:
    """EM, token F1 and accuracy of one prediction."""
    return {
        "em": exact_match(prediction, golds),
        "f1": token_f1(prediction, golds),
        "acc": accuracy(prediction, golds),
    }


def mean(values: Iterable[float]) -> float:
    vals = [float(v) for v in values]
    return sum(vals) / len(vals) if vals else float("nan")


def aggregate(records: Sequence[Mapping[str, Any]], keys: Sequence[str] = ("em", "f1", "acc")) -> dict[str, float]:
    """Mean of each metric key over records, plus the count ``n``."""
    out: dict[str, float] = {k: round(mean(r[k] for r in records), 4) for k in keys}
    out["n"] = len(records)
    return out


def aggregate_by(
    records: Sequence[Mapping[str, Any]],
    group: str,
    keys: Sequence[str] = ("em", "f1", "acc"),
) -> dict[str, dict[str, float]]:
    """:func:`aggregate` per value of ``record["metadata"][group]`` (or ``record[group]``)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        value = r.get("metadata", {}).get(group, r.get(group))
        groups.setdefault(str(value), []).append(r)
    return {name: aggregate(rs, keys) for name, rs in sorted(groups.items())}
