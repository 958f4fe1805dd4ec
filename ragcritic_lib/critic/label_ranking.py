"""A critic's labels ranked by its own probability, against the label prior at an equal number of
labels.

A critic writes its labels greedily, and how many it names is part of what micro F1 rewards. To
ask only which labels it ranks first, every label list the training targets hold for a tier (and
each label alone) is scored as a continuation of the critic's Error opening, the candidates'
log-probabilities are normalized over the candidates, and a label's probability is the mass of
the lists that hold it (:func:`label_marginals`). The critic's ``k`` most probable labels then
meet the prior's ``k`` commonest (:mod:`ragcritic_lib.critic.label_prior`) on the same answers,
paired, with a 95% interval from resampling questions (:func:`paired_f1`).

The tier-2 lists follow the critic's own tier-1 list in its critique, so they are scored after a
tier-1 list the critic chose (:func:`tier_prefill`), never after a gold one. Each candidate is
written as the critic writes it inside its JSON (:func:`list_options`): the list's closing
bracket, quote and the comma before the next key are one token for the embedded tokenizer, so a
list scored without that comma would be scored on a token the critic never writes there.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.critic.critics import ERROR, ERROR_PREFILL

__all__ = ["TIER_KEYS", "candidate_lists", "label_marginals", "list_options", "micro_counts", "micro_f1",
           "most_probable", "paired_f1", "rank_tier", "tier_prefill", "top_k"]

TIER_KEYS = ("tag1", "tag2")


def _tier(tier: str) -> str:
    if tier not in TIER_KEYS:
        raise ValueError(f"unknown tier {tier!r} (known: {', '.join(TIER_KEYS)})")
    return tier


def candidate_lists(golds: Sequence[Mapping[str, Any]], inventory: Sequence[str], tier: str, *,
                    min_count: int = 1) -> list[tuple[str, ...]]:
    """The label lists of ``tier`` that wrong answers' gold critiques hold at least ``min_count``
    times, commonest first (ties by the list), then every label of ``inventory`` alone that is
    not among them. ``golds`` are parsed critiques (mappings with ``Judgement``)."""
    key = _tier(tier)
    counts = Counter(tuple(str(x) for x in (g.get(key) or [])) for g in golds if g.get("Judgement") == ERROR)
    lists = sorted((c for c, n in counts.items() if c and n >= min_count), key=lambda c: (-counts[c], c))
    seen = set(lists)
    return lists + [(label,) for label in inventory if (label,) not in seen]


def list_options(candidates: Sequence[Sequence[str]]) -> list[str]:
    """Each candidate list as the critic writes it after its key: a space, the JSON list, a comma."""
    return [" " + json.dumps(list(c), ensure_ascii=False) + "," for c in candidates]


def tier_prefill(tier: str, tag1: Sequence[str] | None = None) -> str:
    """The assistant text a tier's lists continue: the Error opening for tier 1; for tier 2, that
    opening with the tier-1 list ``tag1`` the critic chose, and the tier-2 key."""
    if _tier(tier) == "tag1":
        return ERROR_PREFILL
    if tag1 is None:
        raise ValueError("tier-2 lists continue a tier-1 list: pass the one the critic chose as tag1")
    return f'{ERROR_PREFILL} {json.dumps(list(tag1), ensure_ascii=False)}, "tag2":'


def rank_tier(critic: Any, records: Sequence[Mapping[str, Any]], tier: str, candidates: Sequence[Sequence[str]], *,
              tier1_candidates: Sequence[Sequence[str]] | None = None,
              desc: str = "label lists") -> tuple[list[list[float]], list[tuple[str, ...]]]:
    """Score every candidate list of ``tier`` for each record as a continuation of the critic's
    Error opening (``critic.messages`` and ``critic.llm.score``, as the trained critics have them).

    For tier 2 the tier-1 lists ``tier1_candidates`` are scored first and each record's tier-2
    lists follow its most probable one. Returns the log-probabilities of ``candidates`` per record
    and the tier-1 list each record's scoring continued (empty tuples for tier 1).
    """
    def score(prefills: Sequence[str], cands: Sequence[Sequence[str]], what: str) -> list[list[float]]:
        prompts = [[*critic.messages(r), {"role": "assistant", "content": p}] for r, p in zip(records, prefills)]
        if not prompts:
            return []
        return [list(map(float, lp)) for lp in critic.llm.score(prompts, [list_options(cands)] * len(prompts), desc=what)]

    if _tier(tier) == "tag1":
        return score([tier_prefill("tag1")] * len(records), candidates, desc), [() for _ in records]
    if not tier1_candidates:
        raise ValueError("ranking tier-2 lists needs the tier-1 candidate lists (tier1_candidates)")
    chosen = [most_probable(lp, tier1_candidates)
              for lp in score([tier_prefill("tag1")] * len(records), tier1_candidates, f"{desc} (tier 1)")]
    return score([tier_prefill("tag2", t1) for t1 in chosen], candidates, f"{desc} (tier 2)"), chosen


def label_marginals(logprobs: Sequence[float], candidates: Sequence[Sequence[str]]) -> dict[str, float]:
    """Each label's probability: the normalized mass of the candidate lists that hold it."""
    if len(logprobs) != len(candidates) or not candidates:
        raise ValueError(f"{len(logprobs)} scores for {len(candidates)} candidate lists")
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = sum(weights)
    out: Counter[str] = Counter()
    for w, labels in zip(weights, candidates):
        for label in set(labels):
            out[label] += w / total
    return dict(out)


def most_probable(logprobs: Sequence[float], candidates: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The candidate list with the highest log-probability (the first on a tie)."""
    if len(logprobs) != len(candidates) or not candidates:
        raise ValueError(f"{len(logprobs)} scores for {len(candidates)} candidate lists")
    return tuple(candidates[max(range(len(logprobs)), key=logprobs.__getitem__)])


def top_k(marginals: Mapping[str, float], k: int, order: Sequence[str]) -> set[str]:
    """The k most probable labels (ties in ``order``, then by name)."""
    rank = {label: i for i, label in enumerate(order)}
    return set(sorted(marginals, key=lambda lab: (-marginals[lab], rank.get(lab, len(rank)), lab))[:k])


def micro_counts(preds: Sequence[set[str]], golds: Sequence[set[str]]) -> list[tuple[int, int, int]]:
    """Per answer: true positives, false positives, false negatives."""
    return [(len(p & g), len(p - g), len(g - p)) for p, g in zip(preds, golds)]


def micro_f1(rows: Sequence[tuple[int, int, int]]) -> float:
    tp = sum(r[0] for r in rows)
    fp = sum(r[1] for r in rows)
    fn = sum(r[2] for r in rows)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def paired_f1(a: Sequence[set[str]], b: Sequence[set[str]], golds: Sequence[set[str]], groups: Sequence[Any], *,
              seed: int, n_boot: int) -> dict[str, Any]:
    """Micro F1 of the label sets ``a`` (the critic) and ``b`` (the prior) on the same answers, and
    a - b with its 95% interval from resampling ``groups`` (the percentile rule of
    :mod:`ragcritic_lib.evaluation.stats`)."""
    from ragcritic_lib.evaluation.stats import cluster_resamples, percentile_interval

    if not len(a) == len(b) == len(golds):
        raise ValueError(f"label sets of unequal length: {len(a)}, {len(b)}, {len(golds)} gold")
    ca, cb = micro_counts(a, golds), micro_counts(b, golds)
    diffs = [micro_f1([ca[i] for i in idx]) - micro_f1([cb[i] for i in idx])
             for idx in cluster_resamples(groups, len(golds), n_boot, seed)]
    lo, hi = percentile_interval(diffs)
    return {"critic": round(micro_f1(ca), 4), "prior": round(micro_f1(cb), 4),
            "diff": round(micro_f1(ca) - micro_f1(cb), 4), "ci_low": None if lo is None else round(lo, 4),
            "ci_high": None if hi is None else round(hi, 4)}
