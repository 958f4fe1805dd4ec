"""The label prior: what a critic's labels score against naming the training data's commonest
labels on the same answers (stage 07).

Tier F1 is scored over the wrong answers a critic calls wrong, so a critic that names the labels
most wrong answers carry scores well whatever it read. The reference here keeps a critic's own
verdicts and replaces its labels: every answer it calls wrong gets the ``k`` labels of each tier
that the training targets name most often, ``k`` chosen to give the best micro F1 on those
training targets themselves (no dev or test answer is read to fit it). The critic's micro F1
minus the prior's, with a 95% interval from resampling questions, then says what its labels add
to the verdict; a critic whose interval lies wholly below 0 names labels that score below the
constant guess (:func:`label_prior_flags`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ragcritic_lib.critic.benchmark import _gold, score_critic, tier_scores
from ragcritic_lib.critic.critics import CORRECT, ERROR, CriticParse, TaxonomyLike

__all__ = ["TIERS", "fit_label_prior", "label_prior_comparison", "label_prior_flags", "with_prior_labels"]

TIERS = ("tag1", "tag2")
TIER_NAMES = {"tag1": "tier-1", "tag2": "tier-2"}


def _inventory(taxonomy: TaxonomyLike, tier: str) -> list[str]:
    return list(taxonomy.tier1 if tier == "tag1" else taxonomy.tier2)


def fit_label_prior(targets: Sequence[str | Mapping[str, Any]], taxonomy: TaxonomyLike) -> dict[str, Any]:
    """The label prior of the training targets (gold critiques, JSON text or mappings).

    Only wrong answers' targets count. Per tier, labels are ordered by how many targets name them
    (ties in the taxonomy's order), and ``k`` is the smallest number of the commonest labels whose
    constant guess has the best micro F1 on those targets. Returns ``{"n_errors": n, "tag1":
    {"labels": [...], "k": k, "train_micro_f1": f, "counts": {label: n}}, "tag2": {...}}``.

    Raises:
        ValueError: no target is a wrong answer's.
    """
    errors = [g for g in (_gold(t) for t in targets) if g["Judgement"] == ERROR]
    if not errors:
        raise ValueError("the label prior needs training targets of wrong answers; none of "
                         f"{len(targets)} targets has Judgement 'Error'")
    out: dict[str, Any] = {"n_errors": len(errors)}
    for tier in TIERS:
        inventory = _inventory(taxonomy, tier)
        golds = [{str(x) for x in (g.get(tier) or [])} for g in errors]
        counts = Counter(label for gold in golds for label in gold)
        rank = {label: i for i, label in enumerate(inventory)}
        order = sorted(counts, key=lambda lab: (-counts[lab], rank.get(lab, len(rank)), lab))
        best_k, best_f1 = 0, -1.0
        for k in range(1, len(order) + 1):
            f1 = tier_scores([set(order[:k])] * len(golds), golds, inventory)["micro"]["f1"]
            if f1 > best_f1:
                best_k, best_f1 = k, f1
        out[tier] = {"labels": order[:best_k], "k": best_k, "train_micro_f1": max(best_f1, 0.0),
                     "counts": {label: counts[label] for label in order}}
    return out


def with_prior_labels(preds: Sequence[CriticParse], prior: Mapping[str, Any]) -> list[CriticParse]:
    """The critic's critiques with the prior's labels: every critique that calls its answer wrong
    names the prior's labels of both tiers; the others are kept as they are."""
    return [dataclasses.replace(p, tag1=list(prior["tag1"]["labels"]), tag2=list(prior["tag2"]["labels"]))
            if p.judgement == ERROR else p for p in preds]


def _counts(preds: Sequence[CriticParse], golds: Sequence[Mapping[str, Any]], tier: str) -> np.ndarray:
    """(n, 3) true positives, false positives and false negatives of each sample for ``tier``,
    as :func:`ragcritic_lib.critic.benchmark.score_critic` counts them (only wrong answers count;
    a critique that says Correct names no label)."""
    rows = []
    for p, g in zip(preds, golds):
        if g["Judgement"] != ERROR:
            rows.append((0, 0, 0))
            continue
        pred = set() if p.judgement == CORRECT else set(getattr(p, tier))
        gold = set(g.get(tier) or [])
        rows.append((len(pred & gold), len(pred - gold), len(gold - pred)))
    return np.asarray(rows, dtype=float).reshape(-1, 3)


def _labels_per_critique(preds: Sequence[CriticParse], golds: Sequence[Mapping[str, Any]], tier: str) -> float | None:
    """Mean number of ``tier`` labels a critic names on the wrong answers it calls wrong."""
    named = [len(set(getattr(p, tier))) for p, g in zip(preds, golds)
             if p.judgement == ERROR and g["Judgement"] == ERROR]
    return round(sum(named) / len(named), 3) if named else None


def _micro_f1(counts: np.ndarray) -> float:
    tp, fp, fn = counts
    return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def label_prior_comparison(preds: Sequence[CriticParse], golds: Sequence[str | Mapping[str, Any]],
                           taxonomy: TaxonomyLike, prior: Mapping[str, Any], *, seed: int, n_boot: int = 2000,
                           groups: Sequence[Any] | None = None) -> dict[str, Any]:
    """One critic against the label prior on its own verdicts, per tier: micro and macro F1 of
    both, how many labels each names on the wrong answers the critic calls wrong (the prior always
    names its ``k``; micro F1 over answers with one or two gold labels rewards naming more), and
    the critic's micro F1 minus the prior's with its percentile 95% interval from
    ``n_boot`` resamples (of whole ``groups``, e.g. questions, when given; the rule of
    :mod:`ragcritic_lib.evaluation.stats`)."""
    from ragcritic_lib.evaluation.stats import cluster_resamples, percentile_interval

    if len(preds) != len(golds):
        raise ValueError(f"{len(preds)} critiques for {len(golds)} gold critiques")
    gold = [_gold(g) for g in golds]
    prior_preds = with_prior_labels(preds, prior)
    critic_score, prior_score = score_critic(preds, gold, taxonomy), score_critic(prior_preds, gold, taxonomy)
    out: dict[str, Any] = {"labelled": sum(p.judgement == ERROR and g["Judgement"] == ERROR
                                           for p, g in zip(preds, gold))}
    resamples = list(cluster_resamples(groups, len(preds), n_boot, seed)) if preds else []
    for tier in TIERS:
        a, b = _counts(preds, gold, tier), _counts(prior_preds, gold, tier)
        diffs = [_micro_f1(a[idx].sum(axis=0)) - _micro_f1(b[idx].sum(axis=0)) for idx in resamples]
        low, high = percentile_interval(diffs)
        point = _micro_f1(a.sum(axis=0)) - _micro_f1(b.sum(axis=0)) if len(a) else 0.0
        out[tier] = {
            "critic_micro_f1": critic_score[tier]["micro"]["f1"],
            "prior_micro_f1": prior_score[tier]["micro"]["f1"],
            "critic_macro_f1": critic_score[tier]["macro"]["f1"],
            "prior_macro_f1": prior_score[tier]["macro"]["f1"],
            "critic_labels_per_critique": _labels_per_critique(preds, gold, tier),
            "prior_labels_per_critique": len(prior[tier]["labels"]),
            "micro_f1_minus_prior": round(point, 4),
            "ci_low": None if low is None else round(low, 4),
            "ci_high": None if high is None else round(high, 4),
        }
    return out


def label_prior_flags(comparison: Mapping[str, Mapping[str, Any]], prior: Mapping[str, Any],
                      tier: str = "tag1") -> list[str]:
    """The reasons of every critic in ``comparison`` ({critic: :func:`label_prior_comparison`}, in
    table order) whose ``tier`` micro F1 lies below the label prior's on its own verdicts with the
    whole 95% interval of the difference below 0."""
    flags = []
    for name, c in comparison.items():
        row = c.get(tier) or {}
        high = row.get("ci_high")
        if high is None or high >= 0:
            continue
        flags.append(
            f"{name}: {TIER_NAMES[tier]} micro F1 {row['critic_micro_f1']:.3f} below the label prior's "
            f"{row['prior_micro_f1']:.3f} on its own verdicts (difference {row['micro_f1_minus_prior']:+.3f}, "
            f"95% CI {row['ci_low']:+.3f}..{high:+.3f}), so its labels score below naming the training data's "
            f"{prior[tier]['k']} commonest {TIER_NAMES[tier]} labels on every answer it calls wrong")
    return flags
