"""Items on the methods: the main comparison (RAG-Critic Table 3, RePAIR Table 2), results by
question type, ablations (Table 4), iterations (Table 6) and cost (Table 8)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.evaluation.analysis.items import (
    ABLATION_ORDER,
    EXPECTED_ABLATIONS,
    EXPECTED_METHODS,
    METHOD_STAGES,
    STAGE_FILES,
    Inputs,
    Table,
    _isnum,
    _method_rank,
    fmt_ci,
    fmt_score,
    method_name,
    plain,
    rel,
)

# --------------------------------------------------------------------------------------------
# Main comparison (RAG-Critic Table 3 / RePAIR Table 2)
# --------------------------------------------------------------------------------------------
COMPARISON_SOURCE = STAGE_FILES["comparison"]


def _comparison_rows(inputs: Inputs, item: str) -> tuple[list[dict[str, Any]], str]:
    """Rows of notebook 14's comparison (``rows``), or of notebook 08's when 14's are absent.

    Rows of notebook 14 get the permutation p-value, its Holm correction and the minimum
    detectable effect of their method from the ``comparison`` block (type "all" rows only; a
    method absent from the block, like an oracle run, gets None).
    """
    rows = inputs.metric("comparison", "rows", item=item)
    if rows:
        present = {r["method"] for r in rows}
        for m in EXPECTED_METHODS:
            if m not in present:
                inputs.note_missing(item, rel(inputs.metrics_path("comparison")),
                                    f"method {m!r} not in the comparison", "rows")
        block = inputs.metric("comparison", "comparison", item=item) or {}
        out = []
        for r in rows:
            row = dict(r)
            row["method_key"] = r["method"]
            row["method"] = method_name(r["method"])
            tested = {}
            if r.get("type") == "all":
                tested = (block.get(r["dataset"]) or {}).get(r["method"]) or {}
            row.update(p_perm=tested.get("p"), p_holm=tested.get("p_holm"), mde=tested.get("mde"))
            out.append(row)
        return out, COMPARISON_SOURCE
    if rows == []:
        inputs.note_missing(item, rel(inputs.metrics_path("comparison")), "no rows", "rows")
    comp = inputs.metric("correction", "comparison", item=item) or {}
    by_type = inputs.metric("correction", "by_type", item=item) or {}
    out = []
    for ds, methods in comp.items():
        for label, m in methods.items():
            if label == "standard RAG" or label.startswith("RAG-Critic"):
                out.append({"dataset": ds, "type": "all", "method": "Standard RAG" if label == "standard RAG" else label,
                            **{k: m.get(k) for k in ("n", "em", "f1", "acc")}})
    for ds, rows8 in by_type.items():
        for r in rows8:
            label = r.get("method", "")
            if label == "standard RAG" or label.startswith("RAG-Critic"):
                out.append({"dataset": ds, "type": r.get("group"), "method": "Standard RAG" if label == "standard RAG" else label,
                            **{k: r.get(k) for k in ("n", "em", "f1", "acc")}})
    return out, "08_correction"


_COMPARISON_COLS = ("dataset", "type", "method", "n", "em", "f1", "acc", "f1_low", "f1_high",
                    "d_em", "d_f1", "d_f1_low", "d_f1_high", "p_f1", "p_perm", "p_holm", "mde", "source")


def fmt_p(v: Any) -> str:
    """A p-value with three decimals ("<0.001" below that); "–" when absent."""
    if not _isnum(v):
        return "–"
    return "<0.001" if float(v) < 0.001 else f"{float(v):.3f}"


def main_comparison_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """EM / F1 (95% CI) / ΔF1 vs standard RAG (paired 95% CI) and its Holm-corrected p-value per
    dataset, plus the overall F1 (mean over datasets, as the paper's "Overall" column)."""
    import pandas as pd

    item = "table3_main_comparison"
    rows, source = _comparison_rows(inputs, item)
    rows = [r for r in rows if r.get("type") == "all"]
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    frame["source"] = source
    frame = frame.reindex(columns=list(_COMPARISON_COLS))
    frame = frame.iloc[sorted(range(len(frame)), key=lambda i: (frame.dataset.iloc[i], _method_rank(frame.method.iloc[i])))]
    frame = frame.reset_index(drop=True)
    datasets = list(dict.fromkeys(frame.dataset))
    methods = sorted(dict.fromkeys(frame.method), key=_method_rank)
    base_overall = _overall_f1(frame, "Standard RAG", datasets)
    out = []
    for m in methods:
        row: dict[str, Any] = {"Method": m}
        for ds in datasets:
            sel = frame[(frame.method == m) & (frame.dataset == ds)]
            if sel.empty:
                row.update({f"{ds} EM": "–", f"{ds} F1": "–", f"{ds} ΔF1": "–", f"{ds} p (Holm)": "–"})
                continue
            r = sel.iloc[0]
            row[f"{ds} EM"] = fmt_score(r.em, percent=percent, digits=digits)
            row[f"{ds} F1"] = fmt_ci(r.f1, r.f1_low, r.f1_high, percent=percent, digits=digits)
            row[f"{ds} ΔF1"] = "–" if m == "Standard RAG" else fmt_ci(r.d_f1, r.d_f1_low, r.d_f1_high, percent=percent,
                                                                   digits=digits, signed=True)
            row[f"{ds} p (Holm)"] = "–" if m == "Standard RAG" else fmt_p(r.p_holm)
        overall = _overall_f1(frame, m, datasets)
        row["Overall F1"] = fmt_score(overall, percent=percent, digits=digits)
        if overall is not None and base_overall is not None and m != "Standard RAG":
            row["Overall F1"] += f" ({fmt_score(overall - base_overall, percent=percent, digits=digits, signed=True)})"
        row["n"] = "/".join(str(int(v)) for v in frame[frame.method == m].n)
        out.append(row)
    if source == COMPARISON_SOURCE:
        notes = [f"Source: {source} (paired bootstrap 95% intervals over questions; p (Holm) = paired sign-flip "
                 "permutation p-value of ΔF1, Holm-corrected across the compared methods; oracle and ablation "
                 "rows are outside that family and show –)."]
        degenerate = inputs.metric("comparison", "degenerate", item=item)
        if degenerate is not None:
            notes.append("Degenerate regimes flagged by the stages: "
                         + ("; ".join(map(str, degenerate)) if degenerate else "none") + ".")
    else:
        notes = [f"Source: {source} (no intervals and no p-values: notebook 14 metrics absent)."]
    notes.append("Overall F1 = mean over datasets; in parentheses the change against standard RAG.")
    return Table(frame, pd.DataFrame(out), notes)


def _overall_f1(frame: Any, method: str, datasets: Sequence[str]) -> float | None:
    sel = frame[frame.method == method]
    if len(set(sel.dataset)) != len(datasets) or sel.empty:
        return None
    return float(sel.groupby("dataset").f1.first().mean())


def plot_main_comparison(table: Table | None):
    """F1 per method with its bootstrap interval, one panel per dataset."""
    if table is None:
        return None
    import matplotlib.pyplot as plt
    import numpy as np

    frame = table.frame
    datasets = list(dict.fromkeys(frame.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 0.45 * frame.method.nunique() + 1.6),
                             squeeze=False, sharex=True)
    for ax, ds in zip(axes[0], datasets):
        sub = frame[frame.dataset == ds].reset_index(drop=True)
        f1 = sub.f1.astype(float).to_numpy()
        low = np.where(sub.f1_low.notna(), f1 - sub.f1_low.astype(float), 0.0)
        high = np.where(sub.f1_high.notna(), sub.f1_high.astype(float) - f1, 0.0)
        colors = ["#999999" if m == "Standard RAG" else ("#c44e52" if m.startswith("RAG-Critic") else "#4c72b0")
                  for m in sub.method]
        ax.barh(range(len(sub)), f1, xerr=[low, high], color=colors, capsize=3)
        base = sub[sub.method == "Standard RAG"].f1
        if not base.empty:
            ax.axvline(float(base.iloc[0]), color="grey", lw=0.8, ls="--")
        ax.set(yticks=range(len(sub)), yticklabels=sub.method, xlabel="token F1", title=ds)
        ax.invert_yaxis()
    fig.suptitle("Main comparison (RAG-Critic Table 3 / RePAIR Table 2)", fontsize=10)
    fig.tight_layout()
    return fig


def by_type_table(inputs: Inputs, *, metric: str = "f1", percent: bool = True, digits: int = 1) -> Table | None:
    """``metric`` per dataset, question type and method (columns = methods)."""
    import pandas as pd

    item = "table3_by_question_type"
    rows, source = _comparison_rows(inputs, item)
    rows = [r for r in rows if r.get("type") != "all"]
    if not rows:
        if source == COMPARISON_SOURCE:
            inputs.note_missing(item, rel(inputs.metrics_path("comparison")), "no per-type rows", "rows")
        return None
    frame = pd.DataFrame(rows)
    frame["source"] = source
    frame = frame.reindex(columns=list(_COMPARISON_COLS))
    wide = frame.pivot_table(index=["dataset", "type"], columns="method", values=metric, sort=True)
    wide = wide[sorted(wide.columns, key=_method_rank)]
    display = wide.apply(lambda col: [fmt_score(v, percent=percent, digits=digits) for v in col]).reset_index()
    n = frame[frame.method == frame.method.iloc[0]].set_index(["dataset", "type"]).n
    display.insert(2, "n", [int(n.get((d, t), 0)) for d, t in zip(display.dataset, display.type)])
    return Table(frame, display, [f"{metric.upper()} per question type; source: {source}."])


# --------------------------------------------------------------------------------------------
# Ablations (Table 4) and iterations (Table 6)
# --------------------------------------------------------------------------------------------
def ablation_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """EM/F1/acc of RAG-Critic (one round) and each ablation; ΔF1 against RAG-Critic."""
    import pandas as pd

    item = "table4_ablations"
    comp = inputs.metric("correction", "comparison", item=item)
    if not comp:
        return None
    rows = []
    for ds, methods in comp.items():
        ref_label = "RAG-Critic (1 iter)" if "RAG-Critic (1 iter)" in methods else "RAG-Critic"
        if ref_label not in methods:
            inputs.note_missing(item, rel(inputs.metrics_path("correction")), "RAG-Critic row not found",
                                f"comparison.{ds}")
            continue
        ref = methods[ref_label]
        for ab in EXPECTED_ABLATIONS:
            if ab not in methods:
                inputs.note_missing(item, rel(inputs.metrics_path("correction")), f"ablation {ab!r} not found",
                                    f"comparison.{ds}")
        for label in (ref_label,) + tuple(a for a in ABLATION_ORDER if a in methods):
            m = methods[label]
            rows.append({"dataset": ds, "method": label, "n": m.get("n"), "em": m.get("em"), "f1": m.get("f1"),
                         "acc": m.get("acc"), "d_f1": None if label == ref_label else m.get("f1") - ref.get("f1"),
                         "d_em": None if label == ref_label else m.get("em") - ref.get("em")})
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    out = []
    for label in dict.fromkeys(frame.method):
        row: dict[str, Any] = {"Method": label}
        for ds in dict.fromkeys(frame.dataset):
            sel = frame[(frame.method == label) & (frame.dataset == ds)]
            if sel.empty:
                row[f"{ds} F1"] = row[f"{ds} EM"] = "–"
                continue
            r = sel.iloc[0]
            row[f"{ds} F1"] = fmt_score(r.f1, percent=percent, digits=digits) + (
                "" if not _isnum(r.d_f1) else f" ({fmt_score(r.d_f1, percent=percent, digits=digits, signed=True)})")
            row[f"{ds} EM"] = fmt_score(r.em, percent=percent, digits=digits)
        out.append(row)
    notes = ["Ablations run one round, so the reference is RAG-Critic after one round; in parentheses the change.",
             "Not reproduced: the paper's 'w/o Manual Sum.' (our tier-1/tier-2 file is the manual summary itself)."]
    return Table(frame, pd.DataFrame(out), notes)


def plot_ablations(table: Table | None):
    """ΔF1 of each ablation against RAG-Critic, grouped by dataset."""
    if table is None:
        return None

    frame = table.frame[table.frame.d_f1.notna()]
    if frame.empty:
        return None
    wide = frame.pivot_table(index="method", columns="dataset", values="d_f1", sort=False)
    ax = wide.plot.barh(figsize=(7, 0.5 * len(wide) + 1.5))
    ax.axvline(0, color="grey", lw=0.8)
    ax.set(xlabel="F1 change vs RAG-Critic (1 round)", ylabel="", title="Ablations (RAG-Critic Table 4)")
    ax.invert_yaxis()
    ax.figure.tight_layout()
    return ax.figure


def iterations_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """EM/F1/acc after each round, with the change against the round before."""
    import pandas as pd

    item = "table6_iterations"
    iters = inputs.metric("correction", "iterations", item=item)
    if not iters:
        return None
    rows = []
    for ds, rounds in iters.items():
        prev = None
        for key in sorted(rounds, key=lambda k: int(k.replace("iter", ""))):
            t = int(key.replace("iter", ""))
            m = rounds[key]
            rows.append({"dataset": ds, "round": t, "label": "standard RAG" if t == 0 else f"+ {t} iteration" + ("s" if t > 1 else ""),
                         "n": m.get("n"), "em": m.get("em"), "f1": m.get("f1"), "acc": m.get("acc"),
                         "d_f1": None if prev is None else m.get("f1") - prev.get("f1"),
                         "d_em": None if prev is None else m.get("em") - prev.get("em")})
            prev = m
    if not rows:
        inputs.note_missing(item, rel(inputs.metrics_path("correction")), "no rounds", "iterations")
        return None
    frame = pd.DataFrame(rows)
    out = []
    for t in sorted(set(frame["round"])):
        sub = frame[frame["round"] == t]
        row: dict[str, Any] = {"Round": sub.label.iloc[0]}
        for ds in dict.fromkeys(frame.dataset):
            sel = sub[sub.dataset == ds]
            if sel.empty:
                row[f"{ds} F1"] = "–"
                continue
            r = sel.iloc[0]
            row[f"{ds} F1"] = fmt_score(r.f1, percent=percent, digits=digits) + (
                "" if not _isnum(r.d_f1) else f" ({fmt_score(r.d_f1, percent=percent, digits=digits, signed=True)})")
        out.append(row)
    return Table(frame, pd.DataFrame(out), ["F1 after each round; in parentheses the change against the round before."])


def plot_iterations(table: Table | None):
    """F1 against the number of rounds, one line per dataset."""
    if table is None:
        return None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    for ds, grp in table.frame.groupby("dataset", sort=False):
        ax.plot(grp["round"], grp.f1, marker="o", label=ds)
    ax.set(xlabel="rounds of critic -> plan -> execute", ylabel="token F1", title="Iterations (RAG-Critic Table 6)",
           xticks=sorted(set(table.frame["round"])))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Cost (Table 8)
# --------------------------------------------------------------------------------------------
def correction_cost_table(inputs: Inputs, *, critic_accuracy: float | None = None, digits: int = 1) -> Table | None:
    """Calls and tokens per question of the critic, planner and action phases of every
    correction method (stage 08), with the critic's benchmark accuracy when known."""
    import pandas as pd

    item = "table8_cost"
    cost = inputs.metric("correction", "cost", item=item)
    if not cost:
        return None
    rows = []
    for ds, methods in cost.items():
        for method, phases in methods.items():
            row: dict[str, Any] = {"dataset": ds, "method": method}
            for phase in ("critic", "planner", "actions"):
                p = phases.get(phase, {})
                row[f"{phase}_calls_per_q"] = p.get("calls_per_sample", 0.0)
                row[f"{phase}_tokens_per_q"] = round(p.get("prompt_tokens_per_sample", 0.0)
                                                     + p.get("completion_tokens_per_sample", 0.0), 1)
            row["action_calls"] = phases.get("actions", {}).get("action_calls", 0.0)
            row["wall_s"] = phases.get("total", {}).get("wall_s")
            rows.append(row)
    frame = pd.DataFrame(rows)
    display = frame.drop(columns=["wall_s"]).copy()
    for col in display.columns:
        if col.endswith("_per_q"):
            display[col] = [f"{v:.{digits + 1}f}" if _isnum(v) else "–" for v in frame[col]]
    notes = ["Per test question (cache hits counted, i.e. a cold run). Standard RAG's own generation adds one "
             "generator call per question to every method. Wall time is in the CSV (machine dependent)."]
    if critic_accuracy is not None:
        notes.append(f"Critic accuracy of the trained critic on the RAG-Error benchmark (identification avg): "
                     f"{fmt_score(critic_accuracy)}% (paper: 96.8% for RAG-Critic 3B).")
    return Table(frame, display, notes)


def method_cost_table(inputs: Inputs, *, digits: int = 1) -> Table | None:
    """Test-time LLM calls per question and training cost of every method of notebook 14 on its
    shared test questions, with tokens per question from each method's own stage (09-12)."""
    import pandas as pd

    item = "table8_cost_methods"
    block = inputs.metric("comparison", "comparison", item=item)
    if not block:
        if block == {}:
            inputs.note_missing(item, rel(inputs.metrics_path("comparison")), "no rows", "comparison")
        return None
    seconds = inputs.metric("comparison", "stage_seconds", item=item) or {}
    rows = []
    for ds, methods in block.items():
        for name, c in methods.items():
            row: dict[str, Any] = {"dataset": ds, "method": method_name(name), "n": c.get("n"),
                                   "calls_per_q": c.get("calls_per_question"),
                                   "prompt_tokens_per_q": None, "completion_tokens_per_q": None}
            stage = METHOD_STAGES.get(name)
            if stage:
                cost = inputs.metric(stage, "cost_by_dataset", ds, item=item) or {}
                n = inputs.metric(stage, "n", ds, item=item)
                for k in ("prompt_tokens", "completion_tokens"):
                    row[f"{k}_per_q"] = round(cost[k] / n, 1) if n and _isnum(cost.get(k)) else None
            row.update({k: c.get(k) for k in ("training_calls", "training_steps", "training_seconds")})
            wall = seconds.get(name) if isinstance(seconds, Mapping) else None
            row["stage_seconds"] = (round(sum(float(v) for v in wall.values() if _isnum(v)), 1)
                                    if isinstance(wall, Mapping) else None)
            rows.append(row)
    frame = pd.DataFrame(rows)
    frame = frame.iloc[sorted(range(len(frame)), key=lambda i: (frame.dataset.iloc[i], _method_rank(frame.method.iloc[i])))]
    frame = frame.reset_index(drop=True)
    display = plain(frame.drop(columns=["training_seconds", "stage_seconds"]))
    for col in ("calls_per_q", "prompt_tokens_per_q", "completion_tokens_per_q"):
        display[col] = [f"{v:.{digits + 1}f}" if _isnum(v) else "–" for v in frame[col]]
    return Table(frame, display, [
        "Per test question of notebook 14 (every call counted, cache hits included, the standard RAG answer a "
        "method starts from included); tokens from each method's stage (09-12), none recorded for standard RAG "
        "and RAG-Critic there (stage 08's phases: see the correction cost table).",
        "training_calls / training_steps = LLM calls and optimizer steps spent before test time (self-practice, "
        "tuning, preference collection, critic and planner training); seconds (machine dependent) in the CSV."])


