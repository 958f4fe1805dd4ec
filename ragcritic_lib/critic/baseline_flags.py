"""Flags for the benchmark's critics that were not trained here: the base model zero-shot, the
rule-based heuristic and any model named in params (stage 07).

The trained critics get :func:`ragcritic_lib.critic.flags.benchmark_critic_degenerate`. A
comparison critic can degenerate too, and a reader of the benchmark table should not have to
infer it from a row of zeros: a small base model asked for a JSON critique may write free text
that no parser reads, so it has no verdict and no labels to score, and a critic whose verdict
ranks answers no better than a coin says nothing about them. Each flag names the critic and the
measured value; a value that was not measured (None) raises no flag.

One check reads every critic, trained or not: a critic that names the same set of tier-1 labels
in most of its critiques has labels that do not depend on the answer (a small model asked with a
format example copies the example's labels), and its micro F1 then measures how common those
labels are among the wrong answers, not what it read (:func:`label_set_concentration`,
:func:`one_label_set_flags`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["LABEL_SET_MAX", "LABEL_SET_MIN_CRITIQUES", "UNPARSED_MAX", "baseline_critic_degenerate",
           "baseline_critics_degenerate", "label_set_concentration", "one_label_set_flags"]

UNPARSED_MAX = 0.5  # share of critiques without a readable verdict above which the critic's scores are mostly empty
LABEL_SET_MAX = 0.8  # share of labelled critiques naming one and the same tier-1 label set above which labels are flagged
LABEL_SET_MIN_CRITIQUES = 20  # fewer labelled critiques than this say too little about a critic's label sets


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def baseline_critic_degenerate(name: str, score: Mapping[str, Any]) -> list[str]:
    """One untrained critic's reasons (``score``: its :func:`ragcritic_lib.critic.benchmark.score_critic`
    result with the intervals of ``with_confidence``): more than :data:`UNPARSED_MAX` of its
    critiques unparsed, or a verdict AUROC whose 95% CI holds 0.5."""
    flags = []
    unparsed = _number(score.get("parse_failure_rate"))
    if unparsed is not None and unparsed > UNPARSED_MAX:
        flags.append(f"baseline {name}: {unparsed:.1%} of its critiques unparsed, so its identification and "
                     "label scores count missing verdicts")
    auroc = _number(score.get("verdict_auroc"))
    low, high = _number(score.get("verdict_auroc_ci_low")), _number(score.get("verdict_auroc_ci_high"))
    if auroc is not None and low is not None and high is not None and low <= 0.5 <= high:
        flags.append(f"baseline {name}: verdict AUROC {auroc:.3f} with a 95% CI ({low:.3f}-{high:.3f}) that holds 0.5")
    return flags


def baseline_critics_degenerate(results: Mapping[str, Mapping[str, Any]], trained: Sequence[str]) -> list[str]:
    """The reasons of every critic in ``results`` that is not among ``trained``, in table order."""
    return [f for name, score in results.items() if name not in set(trained)
            for f in baseline_critic_degenerate(name, score)]


def label_set_concentration(parses: Iterable[Any], tier: str = "tag1") -> dict[str, Any]:
    """How often a critic names its most common label set of ``tier`` (``tag1`` or ``tag2``).

    ``parses``: the critic's :class:`ragcritic_lib.critic.critics.CriticParse` objects (or dicts
    with the tier's key), one per benchmark sample. Only critiques that name at least one label of
    the tier count; the set is unordered. Returns ``{"labelled": n, "top_set": [labels, sorted],
    "top_count": k, "top_share": k / n}`` (``top_share`` None and ``top_set`` empty when n is 0).
    """
    sets: Counter[tuple[str, ...]] = Counter()
    for p in parses:
        labels = p.get(tier) if isinstance(p, Mapping) else getattr(p, tier, None)
        if labels:
            sets[tuple(sorted({str(x) for x in labels}))] += 1
    n = sum(sets.values())
    if not n:
        return {"labelled": 0, "top_set": [], "top_count": 0, "top_share": None}
    top, count = min(sets.items(), key=lambda kv: (-kv[1], kv[0]))  # ties go to the first set in sorted order
    return {"labelled": n, "top_set": list(top), "top_count": count, "top_share": round(count / n, 4)}


def one_label_set_flags(concentration: Mapping[str, Mapping[str, Any]], tier: str = "tier-1") -> list[str]:
    """The reasons of every critic in ``concentration`` ({critic: :func:`label_set_concentration`},
    in table order) that names one label set in more than :data:`LABEL_SET_MAX` of at least
    :data:`LABEL_SET_MIN_CRITIQUES` labelled critiques."""
    flags = []
    for name, c in concentration.items():
        n, share = _number(c.get("labelled")), _number(c.get("top_share"))
        if n is None or share is None or n < LABEL_SET_MIN_CRITIQUES or share <= LABEL_SET_MAX:
            continue
        flags.append(f"{name}: names one {tier} label set ({', '.join(c.get('top_set') or [])}) in "
                     f"{c.get('top_count')} of {int(n)} labelled critiques ({share:.1%}), so its labels do not "
                     "follow the answer and its micro F1 measures how common that set is")
    return flags
