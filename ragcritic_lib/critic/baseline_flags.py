"""Flags for the benchmark's critics that were not trained here: the base model zero-shot, the
rule-based heuristic and any model named in params (stage 07).

The trained critics get :func:`ragcritic_lib.critic.flags.benchmark_critic_degenerate`. A
comparison critic can degenerate too, and a reader of the benchmark table should not have to
infer it from a row of zeros: a small base model asked for a JSON critique may write free text
that no parser reads, so it has no verdict and no labels to score, and a critic whose verdict
ranks answers no better than a coin says nothing about them. Each flag names the critic and the
measured value; a value that was not measured (None) raises no flag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["UNPARSED_MAX", "baseline_critic_degenerate", "baseline_critics_degenerate"]

UNPARSED_MAX = 0.5  # share of critiques without a readable verdict above which the critic's scores are mostly empty


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
