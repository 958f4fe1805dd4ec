"""The RAG-Error benchmark (RAG-Critic section 3.4): construction, scoring, table and figure.

Construction: from held-out test samples (see :mod:`ragcritic_lib.critic.data`), error samples
are drawn so that every tier-2 label occurs at least N times where the data allow it (rarest
label first; a sample counts for each of its labels), then the same number of correct samples.

Scoring (:func:`score_critic`), given parsed critiques and the gold critique texts:
- error identification: accuracy on gold-correct samples, on gold-error samples, and their mean;
  a critique whose judgement could not be recovered counts as wrong (an accuracy over no sample
  is None, and the mean is then taken over the other one);
- classification, per tier (tag1, tag2), over gold-error samples only: precision / recall / F1
  micro (pooled counts) and macro (mean over labels present in the gold targets), per label, and
  the official scorer's per-sample recall |pred & gold| / |gold| (named ``official_sample_recall``);
  a critique that says "Correct" asserts no labels; an empty prediction has precision 0;
- parse-failure rate (no judgement), strict-JSON rate, unknown labels per critique.
Headline numbers as in Table 5: identification Correct / Error / Avg, classification Tag1 /
Tag2 micro-F1 and their mean.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.critic.critics import CORRECT, ERROR, CriticParse, TaxonomyLike


# --------------------------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------------------------
def build_benchmark(
    samples: Sequence[Mapping[str, Any]],
    taxonomy: TaxonomyLike,
    *,
    per_label: int,
    seed: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Balanced benchmark over tier-2 labels and over correct vs error.

    Args:
        samples: held-out critic samples (``judgement``, ``tag2``, ...).
        per_label: N, the wanted minimum count of every tier-2 label (50 in the paper).

    Returns:
        (benchmark samples: errors then correct ones, report) where the report holds per-label
        ``available`` and ``selected`` counts, ``labels_below_n`` (fewer than N available), and
        ``n_error`` / ``n_correct``.
    """
    rng = random.Random(seed)
    errors = [dict(s) for s in samples if s["judgement"] == ERROR]
    corrects = [dict(s) for s in samples if s["judgement"] == CORRECT]
    rng.shuffle(errors)
    available = Counter(t for s in errors for t in s.get("tag2", []))
    selected: Counter[str] = Counter()
    chosen: list[int] = []
    taken: set[int] = set()
    # Rarest first, so samples carrying rare labels are not crowded out by frequent ones.
    for label in sorted(taxonomy.tier2, key=lambda lab: (available[lab], taxonomy.tier2.index(lab))):
        for i, s in enumerate(errors):
            if selected[label] >= per_label:
                break
            if i in taken or label not in s.get("tag2", []):
                continue
            taken.add(i)
            chosen.append(i)
            selected.update(s.get("tag2", []))
    bench_err = [errors[i] for i in sorted(chosen)]
    n_cor = min(len(corrects), len(bench_err))
    bench_cor = rng.sample(corrects, n_cor) if n_cor < len(corrects) else corrects
    report = {
        "per_label_n": per_label,
        "available": {lab: available[lab] for lab in taxonomy.tier2},
        "selected": {lab: selected[lab] for lab in taxonomy.tier2},
        "labels_below_n": [lab for lab in taxonomy.tier2 if available[lab] < per_label],
        "n_error": len(bench_err),
        "n_correct": len(bench_cor),
        "errors_available": len(errors),
        "correct_available": len(corrects),
    }
    return bench_err + bench_cor, report


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------
def _gold(g: str | Mapping[str, Any]) -> dict[str, Any]:
    d = json.loads(g) if isinstance(g, str) else dict(g)
    judgement = d.get("Judgement")
    if judgement not in (CORRECT, ERROR):
        raise ValueError(f"gold critique without a valid Judgement: {str(d)[:120]}")
    return d


def _prf(tp: int, fp: int, fn: int) -> dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4)}


def tier_scores(
    pred_sets: Sequence[set[str]], gold_sets: Sequence[set[str]], labels: Sequence[str]
) -> dict[str, Any]:
    """Multi-label precision / recall / F1 for one tier.

    Args:
        pred_sets, gold_sets: per sample label sets (same length).
        labels: the tier's label inventory (fixes the order of ``per_label``).

    Returns:
        {"micro": prf, "macro": prf (mean over labels with gold support), "per_label": {label:
        prf + support + predicted}, "official_sample_recall": mean |pred & gold| / |gold| over
        samples with gold labels, "sample_f1": mean per-sample F1, "n": samples}.
    """
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    recalls, f1s = [], []
    for pred, gold in zip(pred_sets, gold_sets):
        for lab in pred & gold:
            tp[lab] += 1
        for lab in pred - gold:
            fp[lab] += 1
        for lab in gold - pred:
            fn[lab] += 1
        if gold:
            hit = len(pred & gold)
            recalls.append(hit / len(gold))
            p = hit / len(pred) if pred else 0.0
            r = hit / len(gold)
            f1s.append(2 * p * r / (p + r) if p + r else 0.0)
    inventory = list(labels) + sorted((set(tp) | set(fp) | set(fn)) - set(labels))
    per_label = {}
    for lab in inventory:
        row = _prf(tp[lab], fp[lab], fn[lab])
        row.update(support=tp[lab] + fn[lab], predicted=tp[lab] + fp[lab])
        per_label[lab] = row
    supported = [lab for lab in inventory if per_label[lab]["support"] > 0]
    macro = {
        k: round(sum(per_label[lab][k] for lab in supported) / len(supported), 4) if supported else 0.0
        for k in ("precision", "recall", "f1")
    }
    return {
        "micro": _prf(sum(tp.values()), sum(fp.values()), sum(fn.values())),
        "macro": macro,
        "per_label": per_label,
        "official_sample_recall": round(sum(recalls) / len(recalls), 4) if recalls else 0.0,
        "sample_f1": round(sum(f1s) / len(f1s), 4) if f1s else 0.0,
        "n": len(gold_sets),
    }


def tag_quality(preds: Sequence[CriticParse], golds: Sequence[str | Mapping[str, Any]],
                taxonomy: TaxonomyLike) -> dict[str, Any]:
    """How well Error critiques of wrong answers name the error, per tier: micro precision, recall
    and F1 against the gold critiques' labels (:func:`tier_scores`), and ``named_share``, the
    share of critiques that name any label of the tier at all (0: the critic writes no label)."""
    if len(preds) != len(golds):
        raise ValueError(f"{len(preds)} critiques for {len(golds)} gold critiques")
    out: dict[str, Any] = {"n": len(preds)}
    for tier, labels in (("tag1", taxonomy.tier1), ("tag2", taxonomy.tier2)):
        pred = [set(getattr(p, tier)) for p in preds]
        gold = [set(_gold(g).get(tier) or []) for g in golds]
        named = sum(bool(x & set(labels)) for x in pred)
        out[tier] = {**tier_scores(pred, gold, labels)["micro"],
                     "named_share": round(named / len(pred), 4) if pred else 0.0}
    return out


def dev_tag_check(critic: Any, samples: Sequence[Mapping[str, Any]], taxonomy: TaxonomyLike,
                  n: int) -> dict[str, Any] | None:
    """:func:`tag_quality` of ``critic``'s Error critiques (``critique_errors``: it continues a
    prefilled Error verdict) of the first ``n`` wrong samples (gold ``target`` judged Error);
    None when there is none."""
    wrong = [s for s in samples if _gold(s["target"])["Judgement"] == ERROR][:max(0, n)]
    if not wrong:
        return None
    return tag_quality(critic.critique_errors(wrong, desc="dev error critiques"), [s["target"] for s in wrong],
                       taxonomy)


def score_critic(
    preds: Sequence[CriticParse | Mapping[str, Any]],
    golds: Sequence[str | Mapping[str, Any]],
    taxonomy: TaxonomyLike,
) -> dict[str, Any]:
    """Score parsed critiques against gold critiques (see the module docstring for definitions)."""
    if len(preds) != len(golds):
        raise ValueError(f"{len(preds)} predictions but {len(golds)} gold critiques")
    parses = [p if isinstance(p, CriticParse) else CriticParse.from_dict(p) for p in preds]
    gold = [_gold(g) for g in golds]
    n_cor = sum(g["Judgement"] == CORRECT for g in gold)
    n_err = len(gold) - n_cor
    hit_cor = sum(g["Judgement"] == CORRECT and p.judgement == CORRECT for p, g in zip(parses, gold))
    hit_err = sum(g["Judgement"] == ERROR and p.judgement == ERROR for p, g in zip(parses, gold))
    # None, not 0, when a subset (e.g. one dataset) has no gold sample of that kind.
    acc_cor = round(hit_cor / n_cor, 4) if n_cor else None
    acc_err = round(hit_err / n_err, 4) if n_err else None
    present = [a for a in (acc_cor, acc_err) if a is not None]
    err_pairs = [(p, g) for p, g in zip(parses, gold) if g["Judgement"] == ERROR]

    def pred_set(p: CriticParse, tier: int) -> set[str]:
        # A critique that says "Correct" asserts no error labels.
        return set() if p.judgement == CORRECT else set(getattr(p, f"tag{tier}"))

    tiers = {}
    for tier, labels in ((1, taxonomy.tier1), (2, taxonomy.tier2)):
        tiers[f"tag{tier}"] = tier_scores(
            [pred_set(p, tier) for p, _ in err_pairs],
            [set(g.get(f"tag{tier}", [])) for _, g in err_pairs],
            labels,
        )
    n = len(parses)
    predicted = Counter(p.judgement or "none" for p in parses)
    return {
        "n": n,
        "n_correct_gold": n_cor,
        "n_error_gold": n_err,
        "identification": {
            "acc_correct": acc_cor,
            "acc_error": acc_err,
            "acc_avg": round(sum(present) / len(present), 4) if present else None,
        },
        "predicted_judgements": {k: predicted.get(k, 0) for k in (CORRECT, ERROR, "none")},
        "classification": {
            "tag1_f1": tiers["tag1"]["micro"]["f1"],
            "tag2_f1": tiers["tag2"]["micro"]["f1"],
            "avg_f1": round((tiers["tag1"]["micro"]["f1"] + tiers["tag2"]["micro"]["f1"]) / 2, 4),
            "official_avg_sample_recall": round(
                (tiers["tag1"]["official_sample_recall"] + tiers["tag2"]["official_sample_recall"]) / 2, 4),
        },
        "tag1": tiers["tag1"],
        "tag2": tiers["tag2"],
        "parse_failure_rate": round(sum(not p.ok for p in parses) / n, 4) if n else 0.0,
        "valid_json_rate": round(sum(p.valid_json for p in parses) / n, 4) if n else 0.0,
        "unknown_labels_per_critique": round(sum(len(p.unknown_labels) for p in parses) / n, 4) if n else 0.0,
    }


def score_known_causes(
    preds: Sequence[CriticParse],
    samples: Sequence[Mapping[str, Any]],
    known_causes: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """Agreement of each critic's labels with the causes known from construction (testbed).

    Only gold-error samples with known causes count; a critique that says "Correct" carries no
    labels and so misses every cause. Uses :func:`ragcritic_lib.mining.taxonomy.known_cause_agreement`.
    """
    from ragcritic_lib.mining.taxonomy import known_cause_agreement

    rows = []
    for p, s in zip(preds, samples):
        if s.get("judgement") != ERROR or not s.get("known_causes"):
            continue
        labels = {"tag1": [], "tag2": []} if p.judgement == CORRECT else {"tag1": p.tag1, "tag2": p.tag2}
        rows.append({"evidence": {"known_causes": s["known_causes"]}, "critic_labels": labels})
    return known_cause_agreement(rows, known_causes, label_key_name="critic_labels")


# --------------------------------------------------------------------------------------------
# Table and figure
# --------------------------------------------------------------------------------------------
def benchmark_table(results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows like RAG-Critic Table 5 (percentages, one decimal) for each critic's score dict."""
    def pct(x: float | None) -> float | None:
        return None if x is None else round(100 * x, 1)

    rows = []
    for name, r in results.items():
        ident, cls = r["identification"], r["classification"]
        auroc = r.get("verdict_auroc")
        rows.append({
            "critic": name,
            "auroc": None if auroc is None else round(100 * auroc, 1),
            "auroc_ci": None if auroc is None or r.get("verdict_auroc_ci_low") is None
            else f"{100 * r['verdict_auroc_ci_low']:.1f}-{100 * r['verdict_auroc_ci_high']:.1f}",
            "correct": pct(ident["acc_correct"]),
            "error": pct(ident["acc_error"]),
            "ident_avg": pct(ident["acc_avg"]),
            "tag1_f1": round(100 * cls["tag1_f1"], 1),
            "tag2_f1": round(100 * cls["tag2_f1"], 1),
            "cls_avg": round(100 * cls["avg_f1"], 1),
            "tag1_macro_f1": round(100 * r["tag1"]["macro"]["f1"], 1),
            "tag2_macro_f1": round(100 * r["tag2"]["macro"]["f1"], 1),
            "official_recall_avg": round(100 * cls["official_avg_sample_recall"], 1),
            "parse_fail": round(100 * r["parse_failure_rate"], 1),
        })
    return rows


LLM_USAGE_KEYS = ("requests", "request_prompt_tokens", "request_completion_tokens")
"""The LLM stats a benchmark run reports: token counts only, since call timings and cache hits vary
between runs and two cold runs must write identical metrics."""


def benchmark_metrics(*, report: Mapping[str, Any], table: Sequence[Mapping[str, Any]],
                      results: Mapping[str, Mapping[str, Any]], by_dataset: Mapping[str, Any],
                      known_causes: Mapping[str, Any], critics: Mapping[str, Any],
                      style_baseline: Mapping[str, Any] | None = None,
                      question_baseline: Mapping[str, Any] | None = None,
                      degenerate: Sequence[str] | None = None,
                      trained: Sequence[str] | None = None) -> dict[str, Any]:
    """The benchmark stage's metrics (``reports/metrics/07_benchmark.json``, schema
    ``BenchmarkMetrics``) from what the stage computed.

    Args:
        report: :func:`build_benchmark`'s report.
        table: the Table 5 rows as shown (the notebook's table as records, ``critic`` first).
        results: {critic: :func:`score_critic`}; by_dataset: {critic: {dataset: identification
            scores}}; known_causes: {critic: :func:`score_known_causes`}.
        critics: {name: critic}; each one with an ``llm`` reports its :data:`LLM_USAGE_KEYS`.
        style_baseline: the style-only baseline's scores on the same samples.
        question_baseline: the question-only baseline's
            (:func:`ragcritic_lib.critic.corpus.question_only_baseline`), when it was scored.
        degenerate: the benchmark's own reasons (too few samples of a class); each trained critic
            (``trained``) adds those of :func:`ragcritic_lib.critic.flags.benchmark_critic_degenerate`.
        trained: the names of the trained critics among ``results`` (default: those whose name says
            SFT or DPO).
    """
    from ragcritic_lib.critic.flags import benchmark_critic_degenerate

    style_auroc = (style_baseline or {}).get("verdict_auroc")
    trained = list(trained) if trained is not None else [n for n in results if "SFT" in n or "DPO" in n]
    flags = list(degenerate or []) + [f for name in trained if name in results
                                      for f in benchmark_critic_degenerate(name, results[name], style_auroc)]
    return {
        "benchmark": report,
        "table": table,
        "critics": results,
        "by_dataset": by_dataset,
        "known_causes": known_causes,
        "style_baseline": dict(style_baseline or {}),
        **({"question_baseline": dict(question_baseline)} if question_baseline is not None else {}),
        "degenerate": flags,
        "llm_usage": {name: {k: v for k, v in c.llm.stats.snapshot().items() if k in LLM_USAGE_KEYS}
                      for name, c in critics.items() if hasattr(c, "llm")},
    }


def plot_per_label(results: Mapping[str, Mapping[str, Any]], taxonomy: TaxonomyLike) -> Any:
    """Per-label F1 of every critic, tier-1 and tier-2 side by side (like Fig. 5 / Fig. 7); returns
    the matplotlib Figure (saved by :func:`ragcritic_lib.pipeline.outputs.save_figure`)."""
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(15, 7), gridspec_kw={"width_ratios": [1, 2.4]})
    for ax, tier, labels in ((axes[0], "tag1", taxonomy.tier1), (axes[1], "tag2", taxonomy.tier2)):
        y = np.arange(len(labels))
        h = 0.8 / max(1, len(names))
        for j, name in enumerate(names):
            per = results[name][tier]["per_label"]
            vals = [100 * per.get(lab, {}).get("f1", 0.0) for lab in labels]
            ax.barh(y + j * h - 0.4 + h / 2, vals, height=h, label=name)
        support = [results[names[0]][tier]["per_label"].get(lab, {}).get("support", 0) for lab in labels] \
            if names else [0] * len(labels)
        ax.set_yticks(y, [f"{lab} (n={s})" for lab, s in zip(labels, support)], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel("F1 (%)")
        ax.set_title("Tier-1 labels" if tier == "tag1" else "Tier-2 labels")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(names)), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


# --------------------------------------------------------------------------------------------
# Verdict AUROC and bootstrap CIs
# --------------------------------------------------------------------------------------------
def verdict_scores(preds: Sequence[CriticParse]) -> list[float]:
    """A per-sample "wrong answer" score: the verdict margin where the critic has one, else its
    verdict (1 Error, 0 Correct, 0.5 unparsed), so every critic gets an AUROC."""
    out = []
    for p in preds:
        if p.margin is not None:
            out.append(float(p.margin))
        else:
            out.append(1.0 if p.judgement == ERROR else 0.0 if p.judgement == CORRECT else 0.5)
    return out


def verdict_auroc_summary(scores: Sequence[float], is_error: Sequence[bool], *, seed: int, n_boot: int = 2000,
                          groups: Sequence[Any] | None = None, kinds: Sequence[Any] | None = None
                          ) -> dict[str, Any]:
    """Verdict AUROC of a "wrong answer" score with its percentile bootstrap 95% CI (resampling
    ``groups``, e.g. questions, when given) and, with ``kinds`` (one kind of question per sample),
    the AUROC within kinds with its CI: the keys stage 07 writes for a critic or a baseline."""
    from ragcritic_lib.evaluation.stats import (
        auroc, bootstrap_auroc_ci, bootstrap_within_group_auroc_ci, within_group_auroc,
    )

    a = auroc(scores, is_error)
    lo, hi = bootstrap_auroc_ci(scores, is_error, seed=seed, n_boot=n_boot, groups=groups)
    out = {"verdict_auroc": None if a is None else round(a, 4), "verdict_auroc_ci_low": lo,
           "verdict_auroc_ci_high": hi}
    if kinds is not None:
        w = within_group_auroc(scores, is_error, kinds)
        w_lo, w_hi = bootstrap_within_group_auroc_ci(scores, is_error, kinds, seed=seed, n_boot=n_boot, groups=groups)
        out.update({"verdict_auroc_within_kind": None if w is None else round(w, 4),
                    "verdict_auroc_within_kind_ci_low": w_lo, "verdict_auroc_within_kind_ci_high": w_hi})
    return out


def with_confidence(result: Mapping[str, Any], preds: Sequence[CriticParse], golds: Sequence[str],
                    taxonomy: TaxonomyLike, *, scores: Sequence[float] | None = None, seed: int,
                    n_boot: int = 2000, groups: Sequence[Any] | None = None,
                    kinds: Sequence[Any] | None = None) -> dict[str, Any]:
    """``result`` (:func:`score_critic`) plus verdict AUROC and percentile-bootstrap 95% CIs of the
    AUROC, the identification average and tier-1/tier-2 F1, by the percentile rule of
    :mod:`ragcritic_lib.evaluation.stats`.

    ``scores``: a "wrong answer" score per sample (default :func:`verdict_scores`). ``groups``: one
    key per sample, its question: resamples then draw questions with all their answers, since
    answers to one question are not independent (None: resample answers). ``kinds``: one key per
    sample, its kind of question (:func:`ragcritic_lib.critic.corpus.question_kind`): adds the
    verdict AUROC within kinds (only pairs of answers to questions of one kind, so that kinds whose
    error rates differ cannot order a pair) with its CI.
    """
    from ragcritic_lib.evaluation.stats import cluster_resamples, percentile_interval

    y = [_gold(g)["Judgement"] == ERROR for g in golds]
    s = list(scores) if scores is not None else verdict_scores(preds)
    summary = verdict_auroc_summary(s, y, seed=seed, n_boot=n_boot, groups=groups, kinds=kinds)
    keys = {"acc_avg": ("identification", "acc_avg"), "tag1_f1": ("classification", "tag1_f1"),
            "tag2_f1": ("classification", "tag2_f1")}
    draws: dict[str, list[float]] = {k: [] for k in keys}
    # the label scores are slower to recompute: a quarter of the resamples
    for idx in cluster_resamples(groups, len(preds), max(1, n_boot // 4), seed + 1):
        r = score_critic([preds[i] for i in idx], [golds[i] for i in idx], taxonomy)
        for k, (a1, a2) in keys.items():
            if r[a1][a2] is not None:
                draws[k].append(r[a1][a2])
    ci = {}
    for k, vals in draws.items():
        low, high = percentile_interval(vals)
        ci[k] = [None, None] if low is None else [round(low, 4), round(high, 4)]
    return {**result, **summary, "ci95": ci}
