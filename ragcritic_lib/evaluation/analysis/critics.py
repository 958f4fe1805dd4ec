"""Items on errors and critics: the error distributions (Fig. 6, Figs. 8-11) and the critic
benchmark (Tables 5 and 7, Figs. 5 and 7), with the known-cause ceiling."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from ragcritic_lib.evaluation.analysis.items import (
    Inputs,
    Table,
    _isnum,
    fmt_score,
    plain,
    rel,
)


# --------------------------------------------------------------------------------------------
# Error distributions (Fig. 6, Figs. 8-11)
# --------------------------------------------------------------------------------------------
def _label_rows(records: Iterable[Mapping[str, Any]], tier: int) -> list[dict[str, Any]]:
    """Label counts per (pool member, dataset), per dataset, per pool member and overall."""
    groups: dict[tuple[str, str], Counter[str]] = {}
    sizes: Counter[tuple[str, str]] = Counter()
    for r in records:
        labels = (r.get("critic_target") or {}).get(f"tag{tier}") or []
        member, ds = str(r.get("pool_member", "unknown")), str(r.get("dataset", "unknown"))
        for key in ((member, ds), ("all", ds), (member, "all"), ("all", "all")):
            groups.setdefault(key, Counter()).update(labels)
            sizes[key] += 1
    rows = []
    for (member, ds), c in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0][0], kv[0][1] == "all", kv[0][1])):
        total = sum(c.values())
        for label, count in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])):
            rows.append({"pool_member": member, "dataset": ds, "label": label, "count": count,
                         "share_of_labels": count / total if total else 0.0,
                         "share_of_errors": count / sizes[(member, ds)], "errors": sizes[(member, ds)]})
    return rows


def error_distribution_table(inputs: Inputs, tier: int, *, error_qa_file: str, top: int = 5,
                             percent: bool = True, digits: int = 1) -> Table | None:
    """Tier-``tier`` label counts and shares of D_Error^QA per pool member and dataset.

    Falls back to stage 04's per-dataset counts (no pool members) when the records are absent.
    """
    import pandas as pd

    item = "fig6_tier1_errors" if tier == 1 else "fig8_11_tier2_errors"
    records = inputs.jsonl(error_qa_file, item=item)
    notes = []
    if records is not None:
        rows = _label_rows(records, tier)
    else:
        key = "tier1_by_dataset" if tier == 1 else "tier2_distribution"
        dist = inputs.metric("taxonomy", key, item=item)
        if not dist:
            return None
        dist = dist if tier == 1 else {"all": dist}
        rows = []
        for ds, counts in dist.items():
            total = sum(counts.values())
            rows += [{"pool_member": "all", "dataset": ds, "label": k, "count": v,
                      "share_of_labels": v / total if total else 0.0, "share_of_errors": None, "errors": None}
                     for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        notes.append(f"D_Error^QA records absent: counts from stage 04 metrics ({key}), no pool members.")
    if not rows:
        inputs.note_missing(item, error_qa_file, "no labelled error records")
        return None
    frame = pd.DataFrame(rows)
    shown = frame if tier == 1 else frame.groupby(["pool_member", "dataset"], sort=False).head(top)
    display = shown.copy()
    for col in ("share_of_labels", "share_of_errors"):
        display[col] = [fmt_score(v, percent=percent, digits=digits) for v in shown[col]]
    notes.append("Labels of the error pool D_Error^QA (taxonomy stage); share_of_labels sums to 100% per group, "
                 "share_of_errors = share of error records carrying the label." + ("" if tier == 1 else f" Top {top} per group shown."))
    return Table(frame, display.reset_index(drop=True), notes)


def plot_tier1_distribution(table: Table | None):
    """100%-stacked tier-1 shares per pool member x dataset (and overall rows)."""
    if table is None:
        return None

    frame = table.frame.copy()
    frame["group"] = [f"{m} / {d}" for m, d in zip(frame.pool_member, frame.dataset)]
    wide = frame.pivot_table(index="group", columns="label", values="share_of_labels", sort=False).fillna(0.0)
    ax = wide.plot.barh(stacked=True, figsize=(10, 0.38 * len(wide) + 2), width=0.8)
    ax.set(xlim=(0, 1), xlabel="share of tier-1 labels", ylabel="pool member / dataset",
           title="Tier-1 errors (RAG-Critic Fig. 6)")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1, 0.5))
    ax.figure.tight_layout()
    return ax.figure


def plot_tier2_top(table: Table | None, *, top: int = 5):
    """Top tier-2 labels of each pool member (rows) and dataset (columns), like Figs. 8-11."""
    if table is None:
        return None
    import matplotlib.pyplot as plt

    frame = table.frame
    members = [m for m in dict.fromkeys(frame.pool_member)]
    datasets = [d for d in dict.fromkeys(frame.dataset)]
    fig, axes = plt.subplots(len(members), len(datasets), figsize=(5.2 * len(datasets), 1.9 * len(members) + 0.6),
                             squeeze=False)
    for i, m in enumerate(members):
        for j, d in enumerate(datasets):
            ax = axes[i][j]
            sub = frame[(frame.pool_member == m) & (frame.dataset == d)].head(top)
            ax.barh([str(x)[:38] for x in sub.label][::-1], list(sub.share_of_labels)[::-1], color="#4c72b0")
            ax.set_xlim(0, 1)
            ax.tick_params(labelsize=7)
            ax.set_title(f"{m} / {d}", fontsize=8)
    fig.suptitle(f"Top-{top} tier-2 errors per pool member and dataset (RAG-Critic Figs. 8-11)", fontsize=10)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Critic benchmark (Tables 5, 7; Figs. 5, 7)
# --------------------------------------------------------------------------------------------
def _is_score(d: Any) -> bool:
    return isinstance(d, Mapping) and "identification" in d and "classification" in d


def critic_scores(inputs: Inputs, *, item: str, key: str = "critics") -> dict[str, Mapping[str, Any]] | None:
    """Score dicts (``ragcritic_lib.critic.benchmark.score_critic``) per critic from stage 07's metrics."""
    block = inputs.metric("benchmark", key, item=item)
    if block is None:
        return None
    if isinstance(block, Mapping):
        scores = {str(k): v for k, v in block.items() if _is_score(v)}
    else:
        scores = {}
    if not scores:
        inputs.note_missing(item, rel(inputs.metrics_path("benchmark")), "no critic scores", key)
        return None
    return scores


def critic_benchmark_table(inputs: Inputs, *, key: str = "critics", percent: bool = True,
                           digits: int = 1) -> Table | None:
    """Identification (Correct / Error / Avg) and classification (Tag1 / Tag2 micro-F1 / Avg) per
    critic, plus macro-F1 and parse failures."""
    import pandas as pd

    item = "table5_7_critic_benchmark"
    scores = critic_scores(inputs, item=item, key=key)
    if not scores:
        return None
    rows = []
    for name, s in scores.items():
        ident, cls = s["identification"], s["classification"]
        rows.append({"critic": name, "n": s.get("n"), "correct": ident.get("acc_correct"), "error": ident.get("acc_error"),
                     "ident_avg": ident.get("acc_avg"), "tag1_f1": cls.get("tag1_f1"), "tag2_f1": cls.get("tag2_f1"),
                     "cls_avg": cls.get("avg_f1"),
                     "tag1_macro_f1": (s.get("tag1") or {}).get("macro", {}).get("f1"),
                     "tag2_macro_f1": (s.get("tag2") or {}).get("macro", {}).get("f1"),
                     "parse_failure_rate": s.get("parse_failure_rate")})
    frame = pd.DataFrame(rows)
    display = frame.copy()
    for col in frame.columns[2:]:
        display[col] = [fmt_score(v, percent=percent, digits=digits) for v in frame[col]]
    display = display.rename(columns={"correct": "Ident. Correct", "error": "Ident. Error", "ident_avg": "Ident. Avg",
                                      "tag1_f1": "Tag1 F1", "tag2_f1": "Tag2 F1", "cls_avg": "Class. Avg"})
    return Table(frame, display, ["Identification = accuracy on gold-correct / gold-error samples; classification = "
                                  "micro-F1 of tier-1 (Tag1) and tier-2 (Tag2) labels on gold-error samples."])


def plot_critic_benchmark(table: Table | None):
    """Grouped bars of the Table 5 headline numbers per critic (Fig. 5)."""
    if table is None:
        return None

    cols = ["correct", "error", "ident_avg", "tag1_f1", "tag2_f1", "cls_avg"]
    wide = table.frame.set_index("critic")[cols].astype(float)
    wide.columns = ["Ident. Correct", "Ident. Error", "Ident. Avg", "Tag1 F1", "Tag2 F1", "Class. Avg"]
    ax = wide.T.plot.bar(figsize=(9, 3.8), rot=0, ylim=(0, 1))
    ax.set(ylabel="score", title="Critics on the RAG-Error benchmark (RAG-Critic Fig. 5)")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax.figure


def critic_per_label_table(inputs: Inputs, *, key: str = "critics", percent: bool = True,
                           digits: int = 1) -> Table | None:
    """Per-label precision / recall / F1 and support of every critic, tier-1 and tier-2."""
    import pandas as pd

    item = "fig7_critic_per_label"
    scores = critic_scores(inputs, item=item, key=key)
    if not scores:
        return None
    rows = []
    for name, s in scores.items():
        for tier in ("tag1", "tag2"):
            for label, prf in ((s.get(tier) or {}).get("per_label") or {}).items():
                rows.append({"critic": name, "tier": tier, "label": label, "precision": prf.get("precision"),
                             "recall": prf.get("recall"), "f1": prf.get("f1"), "support": prf.get("support"),
                             "predicted": prf.get("predicted")})
    if not rows:
        inputs.note_missing(item, rel(inputs.metrics_path("benchmark")), "no per-label scores", key)
        return None
    frame = pd.DataFrame(rows)
    wide = frame.pivot_table(index=["tier", "label"], columns="critic", values="f1", sort=False)
    display = wide.apply(lambda col: [fmt_score(v, percent=percent, digits=digits) for v in col]).reset_index()
    support = frame.drop_duplicates(["tier", "label"]).set_index(["tier", "label"]).support
    display.insert(2, "support", [int(support.get((t, lab), 0)) for t, lab in zip(display.tier, display.label)])
    return Table(frame, display, ["F1 per label and critic; support = gold-error samples carrying the label."])


def plot_critic_per_label(table: Table | None):
    """Per-label F1 of every critic, tier-1 and tier-2 side by side (Fig. 7)."""
    if table is None:
        return None
    import matplotlib.pyplot as plt
    import numpy as np

    frame = table.frame
    critics = list(dict.fromkeys(frame.critic))
    fig, axes = plt.subplots(1, 2, figsize=(15, 7), gridspec_kw={"width_ratios": [1, 2.2]})
    for ax, tier in zip(axes, ("tag1", "tag2")):
        sub = frame[frame.tier == tier]
        labels = list(dict.fromkeys(sub.label))
        y = np.arange(len(labels))
        h = 0.8 / max(1, len(critics))
        for j, c in enumerate(critics):
            vals = sub[sub.critic == c].set_index("label").f1.reindex(labels).fillna(0.0)
            ax.barh(y + j * h - 0.4 + h / 2, vals.to_numpy(dtype=float), height=h, label=c)
        ax.set_yticks(y, [str(lab)[:40] for lab in labels], fontsize=7)
        ax.invert_yaxis()
        ax.set(xlim=(0, 1), xlabel="F1", title="Tier-1 labels" if tier == "tag1" else "Tier-2 labels (RAG-Critic Fig. 7)")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def critic_training_table(inputs: Inputs) -> Table | None:
    """One row per training run: the critic's SFT (05) and DPO (06), and the planner's SFT (08)."""
    import pandas as pd

    item = "critic_training"
    rows = []
    sft = inputs.metric("critic_sft", "train", item=item)
    if sft:
        data = inputs.metric("critic_sft", "data", item=item) or {}
        detail = {"method": sft.get("method"), "layers": sft.get("train_layers"), "epochs": sft.get("epochs"),
                  "correct_share": data.get("correct_share"), "best_dev_auroc": sft.get("best_dev_auroc")}
        rows.append({"run": "critic SFT (05)", "steps": sft.get("steps"), "examples": sft.get("examples"),
                     "first_loss": sft.get("first_loss"), "last_loss": sft.get("last_loss"),
                     "detail": ", ".join(f"{k}={v}" for k, v in detail.items() if v is not None)})
    dpo = inputs.metric("critic_dpo", "train", item=item)
    if dpo:
        pairs = inputs.metric("critic_dpo", "pairs", item=item) or {}
        rows.append({"run": "critic DPO (06)", "steps": dpo.get("steps"), "examples": dpo.get("pairs_used"),
                     "first_loss": dpo.get("first_loss"), "last_loss": dpo.get("last_loss"),
                     "detail": f"beta={dpo.get('beta')}, pairs={pairs}, last reward margin={dpo.get('last_reward_margin')}, "
                               f"last reward accuracy={dpo.get('last_reward_accuracy')}"})
    planner = inputs.metric("correction", "planner_training", item=item)
    if planner:
        rows.append({"run": "planner SFT (08)", "steps": planner.get("steps"), "examples": planner.get("examples"),
                     "first_loss": planner.get("first_loss"), "last_loss": planner.get("last_loss"),
                     "detail": f"device={planner.get('device')}"})
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    display = plain(frame)
    return Table(frame, display, ["Loss curves: data/critic_sft/loss.json, data/critic_dpo/loss.json, "
                                  "data/planner_data/planner_loss.json (`dvc plots show`)."])


def known_causes_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """Each critic's tier-1 / tier-2 hit rate against the testbed's known causes and its
    identification accuracy per dataset (stage 07)."""
    import pandas as pd

    item = "critic_known_causes"
    known = inputs.metric("benchmark", "known_causes", item=item)
    by_ds = inputs.metric("benchmark", "by_dataset", item=item) or {}
    if not known and not by_ds:
        return None
    rows = []
    for name in dict.fromkeys(list(known or {}) + list(by_ds)):
        k = (known or {}).get(name) or {}
        row: dict[str, Any] = {"critic": name, "pairs": k.get("pairs"), "tier1_hit_rate": k.get("tier1_hit_rate"),
                               "tier2_hit_rate": k.get("tier2_hit_rate")}
        for ds, ident in sorted((by_ds.get(name) or {}).items()):
            row[f"{ds}_ident_avg"] = (ident or {}).get("acc_avg")
        rows.append(row)
    frame = pd.DataFrame(rows)
    display = frame.copy().astype(object)
    for col in frame.columns:
        if col.endswith(("_rate", "_ident_avg")):
            display[col] = [fmt_score(v, percent=percent, digits=digits) for v in frame[col]]
    display = plain(display)
    return Table(frame, display, ["hit rate = error samples with a known cause whose expected tier-1 (tier-2) label "
                                  "the critic names; *_ident_avg = identification accuracy (avg) per dataset."])


def trained_critic_accuracy(inputs: Inputs, *, critic: str, key: str = "critics") -> float | None:
    """Identification average of one critic of stage 07 (for Table 8's "Critic Acc." column)."""
    block = inputs.metric("benchmark", key, critic, "identification", "acc_avg", item="table8_cost")
    return float(block) if _isnum(block) else None


