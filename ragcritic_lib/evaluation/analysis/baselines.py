"""Items from the baselines' own papers: RAGEC (its Tables 2-4), SIM-RAG (Fig. 3), RePAIR
(Table 3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
# RAGEC (its Tables 2-4), SIM-RAG (Fig. 3), RePAIR (Table 3)
# --------------------------------------------------------------------------------------------
def ragec_types_table(inputs: Inputs, *, table_file: str = "13_ragec/ragec_types.csv", percent: bool = True,
                      digits: int = 1) -> Table | None:
    """Modal / second-modal error-type counts per stage (and per dataset) from notebook 13."""
    item = "ragec_table2_types"
    frame = inputs.table(table_file, item=item)
    if frame is None:
        return None
    if frame.empty:
        inputs.note_missing(item, rel(inputs.tables_dir / table_file), "no rows")
        return None
    frame = frame.copy()
    frame["stage"] = frame["stage"].fillna("")
    display = frame.copy().astype(object)
    pct = frame.label.astype(str).str.startswith("Percentage")
    for col in frame.columns[2:]:
        display[col] = [("" if v != v else int(v)) if not p else
                        (f"{float(v):.{digits}f}%" if percent else f"{float(v) / 100:.{digits + 2}f}")
                        for v, p in zip(frame[col], pct)]
    display = display.rename(columns={"label": "Error type", "stage": "Stage", "mode": "Mode", "second_mode": "2nd Mode"})
    return Table(frame, display, ["Counts of the modal (and second-modal) type of each wrong standard-RAG answer; "
                                  "dataset columns count modal types per dataset (RAGEC Table 3 layout)."])


def plot_ragec_types(table: Table | None):
    """Modal error-type counts per dataset (RAGEC Fig. 2)."""
    if table is None:
        return None

    frame = table.frame
    types = frame[~frame.label.astype(str).str.startswith(("Percentage", "Total"))]
    cols = [c for c in frame.columns if c not in ("label", "stage", "mode", "second_mode")] or ["mode"]
    wide = types.set_index("label")[cols].astype(float)
    ax = wide.plot.barh(figsize=(8, 0.32 * len(wide) + 1.8), width=0.8)
    ax.set(xlabel="wrong answers (modal type)", ylabel="", title="RAGEC modal error types (RAGEC Fig. 2 / Table 2)")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.figure.tight_layout()
    return ax.figure


def ragec_mode_frequency_table(inputs: Inputs) -> Table | None:
    """How many LLM-classified errors had their modal type in f of K votes (RAGEC Table 4)."""
    import pandas as pd

    item = "ragec_table4_mode_frequency"
    freq = inputs.metric("ragec", "mode_frequency", item=item)
    if freq is None:
        return None
    frame = pd.DataFrame([{"mode_frequency": int(f), "errors": int(n)} for f, n in sorted(freq.items(), key=lambda kv: int(kv[0]))])
    if frame.empty:
        inputs.note_missing(item, rel(inputs.metrics_path("ragec")), "no rows", "mode_frequency")
        return None
    total = frame.errors.sum()
    frame["share"] = frame.errors / total if total else 0.0
    display = frame.copy()
    display["share"] = [fmt_score(v) + "%" for v in frame.share]
    k = int(frame.mode_frequency.max())
    return Table(frame, display, [f"K = {k} votes per error (the paper uses K = 10)."])


def ragec_stage_table(inputs: Inputs) -> Table | None:
    """Wrong answers per blamed stage, and side / type agreement with RAG-Critic's tier-1 labels."""
    import pandas as pd

    item = "ragec_stages_agreement"
    stages = inputs.metric("ragec", "stages", item=item)
    if stages is None:
        return None
    if not stages:
        inputs.note_missing(item, rel(inputs.metrics_path("ragec")), "no rows", "stages")
        return None
    block = inputs.metric("ragec", item=item)
    agreement = block.get("agreement") or {}
    total = sum(stages.values())
    rows = [{"row": f"stage: {s}", "value": n, "share": n / total if total else None} for s, n in stages.items()]
    for k in ("n", "side_agreement", "type_agreement", "n_critic_correct", "n_missing"):
        if k in agreement:
            rows.append({"row": f"agreement: {k}", "value": agreement[k], "share": None})
    frame = pd.DataFrame(rows)
    display = frame.copy().astype(object)
    # From the rows, not the frame: pandas turns the counts of a column with rates into floats.
    display["value"] = [fmt_score(r["value"], percent=False, digits=1) if isinstance(r["value"], float)
                        else ("–" if r["value"] is None else r["value"]) for r in rows]
    display["share"] = [fmt_score(v) + "%" if _isnum(v) else "" for v in frame.share]
    notes = [f"Critic labels from: {block.get('critic_source', 'unknown')}; reranking stage present: "
             f"{block.get('reranking_stage', 'unknown')}."]
    if block.get("degenerate"):
        notes.append("Degenerate: " + "; ".join(map(str, block["degenerate"])) + ".")
    return Table(frame, display, notes)


def simrag_confusion_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """The SIM-RAG sufficiency critic's 2x2 confusion on held-out self-practice examples."""
    import pandas as pd

    item = "simrag_fig3_confusion"
    conf = inputs.metric("simrag", "heldout_confusion", item=item)
    if conf is None:
        return None
    n = conf.get("n") or 0
    rows = []
    for truth in ("correct", "wrong"):
        for verdict in ("accept", "reject"):
            count = int(conf.get(f"{truth}_{verdict}", 0))
            rows.append({"answer": truth, "critic": verdict, "count": count, "share": count / n if n else None})
    frame = pd.DataFrame(rows)
    display = frame.pivot_table(index="answer", columns="critic", values="count", sort=False)
    display = display.astype(int).rename(columns={"accept": "critic: Accept", "reject": "critic: Reject"})
    display.index = [f"answer {i}" for i in display.index]
    acc = conf.get("accuracy")
    return Table(frame, display.reset_index().rename(columns={"index": ""}),
                 [f"n = {n} held-out examples; critic accuracy {fmt_score(acc, percent=percent, digits=digits)}"
                  + ("%" if percent else "") + "."])


def plot_simrag_confusion(table: Table | None):
    """Heat map of the confusion matrix with counts and shares."""
    if table is None:
        return None
    import matplotlib.pyplot as plt

    frame = table.frame
    fig, ax = plt.subplots(figsize=(4.2, 3.4))
    grid = [[int(frame[(frame.answer == t) & (frame.critic == v)]["count"].iloc[0]) for v in ("accept", "reject")]
            for t in ("correct", "wrong")]
    total = sum(map(sum, grid)) or 1
    ax.imshow(grid, cmap="Blues", vmin=0)
    for i in range(2):
        for j in range(2):
            ax.text(j, i, f"{grid[i][j]}\n({100 * grid[i][j] / total:.1f}%)", ha="center", va="center", fontsize=10)
    ax.set_xticks([0, 1], ["Accept", "Reject"])
    ax.set_yticks([0, 1], ["answer correct", "answer wrong"])
    ax.set(xlabel="critic verdict", title="SIM-RAG critic (SIM-RAG Fig. 3)")
    fig.tight_layout()
    return fig


def action_usage_rows(actions: Sequence[str], with_categories: Mapping[str, int], without: Mapping[str, int]
                      ) -> list[dict[str, Any]]:
    """Rows like RePAIR Table 3: per action, the calls of RAG-Critic's planner (with error
    categories), RePAIR's (without) and the relative change in percent (None when the first is 0)."""
    rows = []
    for a in actions:
        w, wo = int(with_categories.get(a, 0)), int(without.get(a, 0))
        rows.append({"action": a, "with_error_categories": w, "repair": wo,
                     "change_pct": round(100.0 * (wo - w) / w, 1) if w else None})
    return rows


def repair_action_usage_table(inputs: Inputs) -> Table | None:
    """Action calls written in RAG-Critic's correction programs (notebook 08, every round, with
    error categories) against those in RePAIR's executed test plans (notebook 12, without), on
    the datasets RePAIR ran."""
    import pandas as pd

    item = "repair_table3_action_usage"
    repair_calls = inputs.metric("repair", "action_calls", item=item)
    ran = inputs.metric("repair", "n", item=item)  # {dataset: questions}
    critic_calls = inputs.metric("correction", "program_calls", item=item)
    if repair_calls is None or ran is None or critic_calls is None:
        return None
    if not repair_calls:
        inputs.note_missing(item, rel(inputs.metrics_path("repair")), "no rows", "action_calls")
        return None
    datasets = [ds for ds in ran if ds in critic_calls and "RAG-Critic" in critic_calls[ds]]
    if not datasets:
        inputs.note_missing(item, rel(inputs.metrics_path("correction")), "no RAG-Critic programs on RePAIR's datasets",
                            "program_calls")
        return None
    actions = list(repair_calls)  # the actions before the answer, as stage 12 wrote them
    with_categories = {a: sum(int(critic_calls[ds]["RAG-Critic"].get(a, 0)) for ds in datasets) for a in actions}
    frame = pd.DataFrame(action_usage_rows(actions, with_categories, repair_calls))
    display = plain(frame).rename(columns={
        "with_error_categories": "RAG-Critic planner (with categories)", "repair": "RePAIR (without)",
        "change_pct": "change %"})
    note = (f"Calls written in the programs on {', '.join(datasets)}; GenerateAnswer excluded, as in RePAIR "
            "Table 3. RAG-Critic writes programs only for the answers its critic acts on (both rounds counted); "
            "RePAIR plans for every question.")
    return Table(frame, display, [note])


