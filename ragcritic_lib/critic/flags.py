"""Flags that catch a critic at chance: the ``degenerate`` lists of stages 05 (the verdict's body
and the SFT critic), 06 and 07.

A small critic can train, calibrate and score without having learned anything: it writes one
verdict for every answer, its dev curve never leaves where it started, DPO leaves it where SFT
did, or its benchmark AUROC is indistinguishable from chance or from a classifier of answer
style alone. Each function here reads what its stage already computed (the metrics it writes)
and returns one sentence per reason, empty when none applies; a value that was not measured
(None) raises no flag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CURVE_MIN_RISE", "DPO_MIN_MOVE", "one_verdict", "sft_degenerate", "curve_degenerate", "dpo_degenerate",
           "benchmark_critic_degenerate"]

CURVE_MIN_RISE = 0.02   # dev AUROC a learning curve must gain over its first point to count as rising
DPO_MIN_MOVE = 0.005    # dev AUROC change (or dev pair loss drop) below which DPO moved nothing


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def one_verdict(calibration: Mapping[str, Any], who: str) -> list[str]:
    """The verdict the critic gives on dev is one class: the calibrated one when a threshold was
    fitted (``correct_acc`` / ``error_acc``), else the generated one (``argmax_*``)."""
    prefix = "" if calibration.get("fitted") else "argmax_"
    right, wrong = _number(calibration.get(f"{prefix}correct_acc")), _number(calibration.get(f"{prefix}error_acc"))
    if right is None or wrong is None:
        return []
    kind = "calibrated" if not prefix else "generated"
    if right == 0.0 and wrong == 1.0:
        return [f"{who}: one verdict on dev ({kind}: every answer called Error)"]
    if right == 1.0 and wrong == 0.0:
        return [f"{who}: one verdict on dev ({kind}: every answer called Correct)"]
    return []


def tags_degenerate(tags: Mapping[str, Any] | None, who: str) -> list[str]:
    """Error critiques of wrong dev answers that name no gold tier-1 label (``tags``:
    :func:`ragcritic_lib.critic.benchmark.tag_quality`; nothing to say without critiques)."""
    tier1 = (tags or {}).get("tag1") or {}
    if not (tags or {}).get("n") or _number(tier1.get("f1")) is None or tier1["f1"] > 0:
        return []
    return [f"{who}: its critiques of {tags['n']} wrong dev answers name no gold tier-1 label "
            f"(tier-1 F1 0; {100 * float(tier1.get('named_share') or 0):.0f}% name any tier-1 label)"]


def sft_degenerate(curve: Sequence[Mapping[str, Any]], calibration: Mapping[str, Any],
                   min_rise: float = CURVE_MIN_RISE, tags: Mapping[str, Any] | None = None) -> list[str]:
    """Stage 05: one verdict on dev, a learning curve whose best dev AUROC is not ``min_rise``
    above its first point (needs two points with an AUROC), or critiques that name no gold
    tier-1 label on dev (:func:`tags_degenerate`)."""
    return (one_verdict(calibration, "critic_sft") + tags_degenerate(tags, "critic_sft")
            + curve_degenerate(curve, "critic_sft", min_rise))


def curve_degenerate(curve: Sequence[Mapping[str, Any]], who: str, min_rise: float = CURVE_MIN_RISE) -> list[str]:
    """A dev learning curve whose best AUROC after its first point is not ``min_rise`` above that
    point (needs two points with an AUROC; stages 05_critic_body and 05_critic_sft)."""
    points = [v for p in curve if (v := _number(p.get("dev_auroc"))) is not None]
    if len(points) < 2:
        return []
    first, best = points[0], max(points[1:])
    if best >= first + min_rise:
        return []
    return [f"{who}: the dev curve never rises (first {first:.3f}, best later {best:.3f}, {len(points)} points)"]


def dpo_degenerate(dev_auroc: Mapping[str, Any], train: Mapping[str, Any], calibration: Mapping[str, Any],
                   min_move: float = DPO_MIN_MOVE, dev_pairs: Mapping[str, Any] | None = None,
                   tags: Mapping[str, Any] | None = None) -> list[str]:
    """Stage 06: one verdict on dev; DPO that moved nothing on what it was selected by (with
    held-out ``dev_pairs``, ``{"loss_before", "loss_after"}``: a dev pair loss lowered by less
    than ``min_move``; else a dev AUROC moved by less than ``min_move``); a policy that ended
    preferring the chosen answer no more often than chance (reward accuracy <= 0.5); or
    critiques that name no gold tier-1 label on dev (:func:`tags_degenerate`)."""
    flags = one_verdict(calibration, "critic_dpo") + tags_degenerate(tags, "critic_dpo")
    if dev_pairs:
        before, after = _number(dev_pairs.get("loss_before")), _number(dev_pairs.get("loss_after"))
        if before is not None and after is not None and before - after < min_move:
            flags.append(f"critic_dpo: no preference learned on held-out pairs (dev pair loss {before:.4f} -> "
                         f"{after:.4f})")
    else:
        before, after = _number(dev_auroc.get("before")), _number(dev_auroc.get("after"))
        if before is not None and after is not None and abs(after - before) < min_move:
            flags.append(f"critic_dpo: DPO moved nothing (dev AUROC {before:.4f} -> {after:.4f})")
    accuracy = _number(train.get("last_reward_accuracy"))
    if accuracy is not None and accuracy <= 0.5:
        flags.append(f"critic_dpo: no preference learned (final reward accuracy {accuracy:.3f})")
    return flags


def benchmark_critic_degenerate(name: str, score: Mapping[str, Any], style_auroc: float | None) -> list[str]:
    """Stage 07, one trained critic: its verdict AUROC interval holds 0.5, its AUROC is below the
    style-only baseline's on the same samples, or its tier-1 F1 is 0."""
    flags = []
    auroc = _number(score.get("verdict_auroc"))
    low, high = _number(score.get("verdict_auroc_ci_low")), _number(score.get("verdict_auroc_ci_high"))
    if low is not None and high is not None and low <= 0.5 <= high:
        flags.append(f"{name}: verdict AUROC {auroc if auroc is not None else float('nan'):.3f} "
                     f"with a 95% CI ({low:.3f}-{high:.3f}) that holds 0.5")
    style = _number(style_auroc)
    if auroc is not None and style is not None and auroc < style:
        flags.append(f"{name}: verdict AUROC {auroc:.3f} below the style-only baseline's {style:.3f}")
    tier1 = _number((score.get("classification") or {}).get("tag1_f1"))
    if tier1 == 0.0:
        flags.append(f"{name}: tier-1 F1 is 0")
    return flags


def learning_curve(run: Mapping[str, Any], n_train: int) -> list[dict[str, Any]]:
    """Dev AUROC against examples trained on, from a training run's evaluation rows: within the
    first epoch a point at N examples has seen N distinct examples; later points have all
    ``n_train`` (``examples_seen`` counts repeats)."""
    return [{"examples": min(int(r["examples_seen"]), n_train), "examples_seen": int(r["examples_seen"]),
             "dev_auroc": r.get("dev_auroc")} for r in run.get("curve", [])]
