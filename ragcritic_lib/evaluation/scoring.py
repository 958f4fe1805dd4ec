"""Answer and retrieval metrics, and how each relates to the official definitions.

* :func:`normalize_answer` is the official SQuAD v1.1 normalization (the one FlashRAG imports):
  lowercase; delete every character of ``string.punctuation``; replace the words a/an/the
  (``\\b(a|an|the)\\b``) by a space; collapse whitespace. Deleting, not spacing, means
  "U.S. Army" == "US Army" and "well-known" == "wellknown", while "Jean-Paul" != "Jean Paul".
  Unicode quotes and dashes are not in ``string.punctuation`` and are kept, as officially.
* :func:`exact_match` is SQuAD v1.1 EM, maximum over the gold answers (0 when there are none).
* :func:`token_f1` is SQuAD v1.1 token F1 over the normalized strings' whitespace tokens, maximum
  over the golds; no shared token gives 0, so an empty prediction or gold scores 0 (EM of empty
  vs empty is 1). FlashRAG's F1 adds one rule taken from HotpotQA that is not applied here: a
  pair whose normalized prediction or gold is "yes", "no" or "noanswer" scores 0 unless the two
  are equal (SQuAD gives "yes" vs "yes it is" F1 0.67, FlashRAG 0).
* :func:`accuracy` (``acc``) deviates from FlashRAG on purpose. FlashRAG asks whether a
  normalized gold is a substring of the normalized prediction, which gives spurious hits for
  short golds (6.5% of the trivia answers have three characters or fewer; "a" would match
  "banana"). Here a normalized gold must occur as whole words, under either the official
  normalization (so EM 1 implies acc 1 whenever the gold is not empty after normalization) or
  :func:`normalize_words` (so "Paris/London", "1990–2000" or “Paris” still contain "Paris",
  which deleting punctuation would hide). An empty normalized gold is never contained.
* :func:`retrieval_recall` is FlashRAG's recall@k with the same whole-word containment.
* :func:`normalize_words` is not a metric: it turns punctuation (ASCII plus curly quotes, dashes
  and the ellipsis) into spaces, for tokenizing passages and matching phrases word by word.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

_SQUAD_PUNCT = frozenset(string.punctuation)
_WORD_BREAKS = _SQUAD_PUNCT | {"‘", "’", "“", "”", "–", "—", "…"}
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Official SQuAD v1.1 normalization: lowercase, delete punctuation and articles, squash spaces."""
    text = "".join(ch for ch in str(text).lower() if ch not in _SQUAD_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def normalize_words(text: str) -> str:
    """Word-splitting normalization for tokenizing and phrase lookup (not for EM or F1).

    Lowercases, turns punctuation (``string.punctuation``, curly quotes, en/em dashes and the
    ellipsis) into spaces, drops a/an/the and squashes spaces: "Jean-Paul" becomes "jean paul",
    "I don't know" becomes "i don t know".
    """
    text = "".join(" " if ch in _WORD_BREAKS else ch for ch in str(text).lower())
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(golds: str | Sequence[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else [str(g) for g in golds]


def exact_match(prediction: str, golds: str | Sequence[str]) -> float:
    """SQuAD EM: 1.0 when the normalized prediction equals any normalized gold answer."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _as_list(golds)))


def token_f1(prediction: str, golds: str | Sequence[str]) -> float:
    """SQuAD token F1, best over the gold answers (0.0 when no token is shared)."""
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for gold in _as_list(golds):
        gold_tokens = normalize_answer(gold).split()
        overlap = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
        if overlap == 0:
            continue
        precision = overlap / len(pred_tokens)
        recall = overlap / len(gold_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


_NORMALIZATIONS: tuple[Callable[[str], str], ...] = (normalize_answer, normalize_words)


def contains_answer(text: str, golds: str | Sequence[str]) -> bool:
    """Whether a gold occurs in ``text`` as whole words under either normalization.

    Both sides go through :func:`normalize_answer` or both through :func:`normalize_words`;
    a gold that is empty after normalization never matches.
    """
    gold_list = _as_list(golds)
    for norm in _NORMALIZATIONS:
        hay = f" {norm(text)} "
        for gold in gold_list:
            g = norm(gold)
            if g and f" {g} " in hay:
                return True
    return False


def accuracy(prediction: str, golds: str | Sequence[str]) -> float:
    """``acc``: 1.0 when a gold occurs in the prediction as whole words (:func:`contains_answer`)."""
    return float(contains_answer(prediction, golds))


def retrieval_recall(passages: Iterable[str], golds: str | Sequence[str]) -> float:
    """Recall@k: 1.0 when a gold occurs in any passage as whole words (:func:`contains_answer`)."""
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
    """Arithmetic mean (NaN for no values)."""
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
