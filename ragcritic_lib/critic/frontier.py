"""The critic's recipe frontier: dev verdict AUROC against training cost, measured on one CPU.

Every recipe trains on the same fixed subset of the critic's training examples and is scored on
the same dev answers (the generator's real answers to the dev questions), so the rows differ only
by the recipe. A row is ``{name, dev_auroc, ci_low, ci_high, train_seconds, cpu_class, examples}``
plus what it is (``body``: the generative critic or an encoder verifier; its layers and passes)
and ``projected_stage_minutes``: what the recipe would cost on the full training set, from its
measured seconds per example (caching the frozen layers once per example, training once per
example and pass). The interval is the percentile bootstrap over dev questions
(:func:`ragcritic_lib.evaluation.stats.bootstrap_auroc_ci`).

:func:`choose` reads the frontier the way the stage's default is set: among the recipes whose
projected cost fits the budget, the best dev AUROC, unless a cheaper recipe's interval holds it
(a difference inside the intervals goes to the cheaper one).

``benchmarks/bench_critic_recipes.py`` measures the recipes and writes
``reports/benchmarks/critic_recipes.json`` with its figure.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROW_KEYS = ("name", "dev_auroc", "ci_low", "ci_high", "train_seconds", "cpu_class", "examples")


def subset(examples: Sequence[Any], n: int, *, seed: int) -> list[int]:
    """Indices of a fixed random subset of ``n`` examples (all of them when fewer), in order."""
    idx = list(range(len(examples)))
    if n >= len(idx):
        return idx
    return sorted(random.Random(seed).sample(idx, n))


def row(name: str, *, scores: Sequence[float], labels: Sequence[bool], groups: Sequence[Any], seconds: float,
        cpu_class: str, examples: int, seed: int, n_boot: int = 2000, **extra: Any) -> dict[str, Any]:
    """One frontier row from a recipe's dev scores (higher: more likely wrong)."""
    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci

    a = auroc(scores, labels)
    lo, hi = bootstrap_auroc_ci(scores, labels, seed=seed, n_boot=n_boot, groups=groups)
    return {"name": name, "dev_auroc": None if a is None else round(a, 4), "ci_low": lo, "ci_high": hi,
            "train_seconds": round(float(seconds), 1), "cpu_class": cpu_class, "examples": int(examples), **extra}


def projected_minutes(*, cache_seconds_per_example: float, train_seconds_per_example_pass: float,
                      train_examples: int, dev_examples: int, passes: float, evaluations: int = 0,
                      eval_seconds: float = 0.0) -> float:
    """Minutes a recipe would take on the full training set: the frozen part once over train and
    dev, training ``passes`` times over train, plus its dev evaluations."""
    s = (cache_seconds_per_example * (train_examples + dev_examples)
         + train_seconds_per_example_pass * train_examples * passes + evaluations * eval_seconds)
    return round(s / 60.0, 1)


def check_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    """Raise ValueError naming the row and key when a row lacks a required key."""
    for i, r in enumerate(rows):
        missing = [k for k in ROW_KEYS if k not in r]
        if missing:
            raise ValueError(f"critic recipe row {i} ({r.get('name', '?')!r}) lacks {', '.join(missing)}")


def choose(rows: Sequence[Mapping[str, Any]], *, budget_minutes: float) -> dict[str, Any]:
    """The default recipe: the best dev AUROC among those whose ``projected_stage_minutes`` fit
    ``budget_minutes``; a cheaper recipe whose interval holds the best's AUROC wins instead (the
    cheapest such). Returns ``{"name", "reason", "fits": [names]}``; ``name`` is None when no
    recipe fits or none has an AUROC."""
    check_rows(rows)
    fits = [r for r in rows if r.get("projected_stage_minutes") is not None
            and r["projected_stage_minutes"] <= budget_minutes and r.get("dev_auroc") is not None]
    if not fits:
        return {"name": None, "reason": f"no recipe fits {budget_minutes:g} minutes with a dev AUROC", "fits": []}
    best = max(fits, key=lambda r: (r["dev_auroc"], -r["projected_stage_minutes"]))
    cheaper = [r for r in fits if r["projected_stage_minutes"] < best["projected_stage_minutes"]
               and r.get("ci_low") is not None and r.get("ci_high") is not None
               and r["ci_low"] <= best["dev_auroc"] <= r["ci_high"]]
    names = [r["name"] for r in fits]
    if cheaper:
        pick = min(cheaper, key=lambda r: r["projected_stage_minutes"])
        return {"name": pick["name"], "fits": names,
                "reason": (f"{pick['name']} ({pick['dev_auroc']}, 95% CI {pick['ci_low']}-{pick['ci_high']}, "
                           f"{pick['projected_stage_minutes']} min) holds the best, {best['name']} "
                           f"({best['dev_auroc']}, {best['projected_stage_minutes']} min), inside its interval: "
                           "the cheaper one")}
    return {"name": best["name"], "fits": names,
            "reason": (f"{best['name']} has the best dev AUROC ({best['dev_auroc']}, 95% CI {best['ci_low']}-"
                       f"{best['ci_high']}) of the {len(fits)} recipes within {budget_minutes:g} min "
                       f"({best['projected_stage_minutes']} min projected), and no cheaper recipe's interval holds it")}


def write_frontier(path: str | Path, rows: Sequence[Mapping[str, Any]], **meta: Any) -> Path:
    """``{"recipes": rows, **meta}`` as JSON (rows checked first: nothing is written for a bad row)."""
    check_rows(rows)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps({"recipes": list(rows), **meta}, indent=1) + "\n", encoding="utf-8")
    tmp.replace(p)
    return p


def plot_frontier(rows: Sequence[Mapping[str, Any]], path: str | Path, *, title: str = "", dpi: int = 110) -> Path:
    """Dev AUROC (with its 95% interval) against training minutes on the subset, one point a recipe."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for r in rows:
        if r.get("dev_auroc") is None:
            continue
        x = r["train_seconds"] / 60.0
        lo, hi = r.get("ci_low"), r.get("ci_high")
        yerr = [[r["dev_auroc"] - lo], [hi - r["dev_auroc"]]] if lo is not None and hi is not None else None
        ax.errorbar([x], [r["dev_auroc"]], yerr=yerr, fmt="o", capsize=3,
                    color={"generative": "tab:blue", "verifier": "tab:orange"}.get(r.get("body"), "tab:green"))
        ax.annotate(r["name"], (x, r["dev_auroc"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="training minutes on the subset (frozen-layer cache included)", ylabel="dev verdict AUROC",
           title=title or "Critic recipes")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=dpi)
    plt.close(fig)
    return p


# --------------------------------------------------------------------------------------------
# Measuring the recipes
# --------------------------------------------------------------------------------------------
def extend_cache(split: Any, cache: Sequence[Any], layers: Sequence[Any], *, batch_size: int = 32,
                 dtype: str = "auto") -> list[Any]:
    """Run more frozen ``layers`` over cached hidden states (a deeper cache without starting over)."""
    import torch

    from ragcritic_lib.critic.train import _autocast, _pad

    order = sorted(range(len(cache)), key=lambda i: cache[i].shape[0])
    out: list[Any] = [None] * len(cache)
    with torch.no_grad(), _autocast(torch, dtype):
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            h = split._run(_pad([cache[i].float() for i in idx], torch), layers)
            for j, i in enumerate(idx):
                out[i] = h[j, : cache[i].shape[0]].to(torch.bfloat16).clone()
    return out


def probe_scores(train_features: Any, train_labels: Sequence[bool], dev_features: Any, *, seed: int) -> list[float]:
    """Logistic regression (C by 5-fold cross-validated AUROC on train, standardized features) on
    frozen features; the dev scores are its log-odds of "wrong"."""
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegressionCV(Cs=8, cv=5, scoring="roc_auc", max_iter=2000,
                                                               random_state=seed, l1_ratios=(0.0,),
                                                               use_legacy_attributes=False))
    clf.fit(train_features, [int(y) for y in train_labels])
    return [float(v) for v in clf.decision_function(dev_features)]


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.time()
    out = fn()
    return out, time.time() - t0
