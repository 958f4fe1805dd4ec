"""Notebook 15: every stage's metrics gathered into the papers' tables and figures.

Each table or figure is an *item* of :data:`ITEMS`, named after its counterpart in the papers
(RAG-Critic Table 3, RAGEC Table 2, SIM-RAG Fig. 3, ...). A builder reads the stage outputs
through :class:`Inputs`, which records every input it could not find (file absent, key absent,
method absent) instead of failing, and returns a :class:`Table` or ``None``. :class:`Outputs`
writes tables as CSV (tidy, raw fractions) and Markdown (formatted, percentages like the
papers), figures as PNG and SVG, and ``index.json`` mapping each paper item to its files.
Nothing is ever filled in for a missing input: the item is reported under ``missing``.

pandas and matplotlib are imported inside the functions that need them.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import DataFormatError, atomic_write_text, read_jsonl, write_json
from ragcritic_lib.pipeline.outputs import FALLBACK_DPI, write_figure
from ragcritic_lib.pipeline.metrics_schema import MetricsSchemaError
from ragcritic_lib.pipeline.stage_metrics import load_stage_metrics

# Stage name -> stem of its notebook, metrics JSON and executed notebook.
STAGE_FILES: dict[str, str] = {
    "assets": "00_assets",
    "testbed": "00_testbed",
    "retrieval_rag": "01_retrieval_rag",
    "error_sampling": "02_error_sampling",
    "tagging": "03_tagging",
    "taxonomy": "04_taxonomy",
    "critic_sft": "05_critic_sft",
    "critic_dpo": "06_critic_dpo",
    "benchmark": "07_benchmark",
    "correction": "08_correction",
    "self_refine": "09_self_refine",
    "crag": "10_crag",
    "simrag": "11_simrag",
    "repair": "12_repair",
    "ragec": "13_ragec",
    "comparison": "14_comparison",
}
# Method name in the comparison stage (notebook 14) -> the stage that ran it (its metrics file).
METHOD_STAGES: dict[str, str] = {"Self-Refine": "self_refine", "CRAG": "crag", "SIM-RAG": "simrag", "RePAIR": "repair"}


@dataclass(frozen=True)
class Item:
    """One reproduced table or figure and its counterpart in the papers."""

    id: str
    paper: str
    title: str
    inputs_of: str | None = None    # built from the table of another item (shares its missing inputs)


ITEMS: dict[str, Item] = {i.id: i for i in (
    Item("table10_datasets", "RAG-Critic Table 10", "Datasets: corpus size, splits and evaluated questions"),
    Item("table1_source_statistics", "RAG-Critic Table 1", "Error sampling: questions, samples and errors per dataset and type"),
    Item("stage01_retrieval_recall", "Stage 01 (RAG-Critic §4.1 retrieval setup; no paper table)",
         "Answer recall@k per retriever"),
    Item("stage01_standard_rag", "RAG-Critic Table 3, Standard RAG rows",
         "Standard RAG and closed-book EM/F1/acc (answerable vs unanswerable, per type)"),
    Item("table3_main_comparison", "RAG-Critic Table 3 / RePAIR Table 2",
         "Standard RAG, RAG-Critic and every baseline, with paired bootstrap intervals"),
    Item("table3_by_question_type", "RAG-Critic Table 3 / RePAIR Table 2, per question type",
         "Every method per dataset and question type"),
    Item("table4_ablations", "RAG-Critic Table 4", "Ablations of RAG-Critic"),
    Item("table5_7_critic_benchmark", "RAG-Critic Tables 5 and 7", "Critics on the RAG-Error benchmark"),
    Item("fig5_critic_benchmark", "RAG-Critic Fig. 5", "Identification and classification per critic",
         inputs_of="table5_7_critic_benchmark"),
    Item("fig7_critic_per_label", "RAG-Critic Fig. 7", "Per-label F1 of every critic (tier-1 and tier-2)"),
    Item("table6_iterations", "RAG-Critic Table 6", "RAG-Critic after N rounds of critic -> plan -> execute"),
    Item("table8_cost", "RAG-Critic Table 8", "Model calls and tokens per question of each correction phase"),
    Item("table8_cost_methods", "RAG-Critic Table 8 / RePAIR Table 2 (cost per method)",
         "LLM calls and tokens of every method on the shared test questions"),
    Item("critic_training", "RAG-Critic §3.2 (critic SFT and coarse-to-fine DPO; planner SFT of §3.3)",
         "Training runs: steps, examples or pairs, first and last loss"),
    Item("critic_known_causes", "Testbed known causes (no paper counterpart)",
         "Critics' labels against the causes known from the testbed, and identification per dataset"),
    Item("fig6_tier1_errors", "RAG-Critic Fig. 6", "Tier-1 error distribution per pool member and dataset"),
    Item("fig8_11_tier2_errors", "RAG-Critic Figs. 8-11", "Most frequent tier-2 errors per pool member and dataset"),
    Item("ragec_table2_types", "RAGEC Table 2 (with Table 3's per-dataset columns) and Fig. 2",
         "Modal and second-modal error types per stage"),
    Item("ragec_table4_mode_frequency", "RAGEC Table 4", "Frequency of the modal type among K votes"),
    Item("ragec_stages_agreement", "RAGEC stage attribution (cf. RAGEC Table 1)",
         "Wrong answers per blamed stage and agreement with RAG-Critic's tier-1 labels"),
    Item("simrag_fig3_confusion", "SIM-RAG Fig. 3", "Sufficiency-critic confusion matrix on held-out examples"),
    Item("repair_table3_action_usage", "RePAIR Table 3", "Action usage with and without error categories"),
)}

# Method names of the comparison stage (notebook 14) -> the names the tables print, in the order
# of the papers' tables. Only the baseline is renamed ("Standard RAG" as the papers write it).
# Oracle and ablation runs ("SIM-RAG (oracle critic)") keep their names and follow their method.
METHOD_NAMES: dict[str, str] = {
    "standard RAG": "Standard RAG",
    "RAG-Critic": "RAG-Critic",
    "Self-Refine": "Self-Refine",
    "CRAG": "CRAG",
    "SIM-RAG": "SIM-RAG",
    "RePAIR": "RePAIR",
}
# Methods the main table must show, as notebook 14 names them (a missing one is reported, never
# dropped silently).
EXPECTED_METHODS = ("standard RAG", "RAG-Critic", "Self-Refine", "CRAG", "SIM-RAG", "RePAIR")
# Ablation rows of notebook 08 (RAG-Critic Table 4); reference = RAG-Critic after one round.
# The correction ladder's rows (notebook 08): RAG-Critic with a fixed action instead of the planner,
# with the oracle's verdict, with the oracle's critique, and the standard RAG floor.
EXPECTED_ABLATIONS = ("fixed action", "oracle verdict", "oracle critique")
ABLATION_ORDER = ("fixed action", "oracle verdict", "oracle critique", "standard RAG")


def rel(path: str | os.PathLike[str]) -> str:
    """A path relative to the repository root where possible (for reports and indexes)."""
    p = Path(path)
    try:
        return p.resolve().relative_to(paths.ROOT).as_posix()
    except ValueError:
        return p.as_posix()


# --------------------------------------------------------------------------------------------
# Inputs and what is missing
# --------------------------------------------------------------------------------------------
class Inputs:
    """Reads stage outputs for the builders and records every input that is not there.

    Args:
        metrics_dir: folder of the stages' metrics JSON (``reports/metrics``).
        tables_dir: folder of the stages' tables (``reports/tables``).
        root: base of relative data paths (the repository root).
    """

    def __init__(self, metrics_dir: Path = paths.METRICS_DIR, tables_dir: Path = paths.TABLES_DIR,
                 root: Path = paths.ROOT) -> None:
        self.metrics_dir, self.tables_dir, self.root = Path(metrics_dir), Path(tables_dir), Path(root)
        self.missing: list[dict[str, Any]] = []
        self._json: dict[str, Any] = {}

    def note_missing(self, item: str, source: str, reason: str, key: str | None = None) -> None:
        """Record one missing input of ``item`` (deduplicated)."""
        entry = {"item": item, "paper": ITEMS[item].paper if item in ITEMS else item, "input": source,
                 "key": key, "reason": reason}
        if entry not in self.missing:
            self.missing.append(entry)

    def metrics_path(self, stage: str) -> Path:
        return self.metrics_dir / f"{STAGE_FILES.get(stage, stage)}.json"

    def metric(self, stage: str, *keys: str, item: str) -> Any:
        """``metrics[stage][k1][k2]...`` or None (recorded as missing for ``item``).

        Each file is read once through :func:`ragcritic_lib.pipeline.stage_metrics.load_stage_metrics`
        with ``partial=True``: an absent key is recorded for the item that asked for it, while a
        present value that does not match the stage's schema makes the whole file unusable
        (recorded as "does not match its schema" with the key path).
        """
        path = self.metrics_path(stage)
        if path not in self._json:
            try:
                self._json[path] = load_stage_metrics(path.stem, metrics_dir=path.parent, partial=True)
            except FileNotFoundError:
                self._json[path] = None
            except (DataFormatError, MetricsSchemaError) as exc:
                self._json[path] = exc
        data = self._json[path]
        if data is None:
            self.note_missing(item, rel(path), "file not found")
            return None
        if isinstance(data, DataFormatError):
            self.note_missing(item, rel(path), f"unreadable: {data}")
            return None
        if isinstance(data, MetricsSchemaError):
            more = f" (and {len(data.problems) - 1} more)" if len(data.problems) > 1 else ""
            self.note_missing(item, rel(path), f"does not match its schema: {data.problems[0]}{more}")
            return None
        for i, k in enumerate(keys):
            if not isinstance(data, Mapping) or k not in data:
                self.note_missing(item, rel(path), "key not found", ".".join(keys[: i + 1]))
                return None
            data = data[k]
        return data

    def table(self, name: str, *, item: str):
        """A stage's CSV table under ``tables_dir`` (``<NN_stage>/<name>.csv``) as a DataFrame, or None
        (recorded)."""
        import pandas as pd

        path = self.tables_dir / name
        if not path.exists():
            self.note_missing(item, rel(path), "file not found")
            return None
        return pd.read_csv(path)

    def jsonl(self, path: str | os.PathLike[str], *, item: str) -> list[dict[str, Any]] | None:
        """Records of a JSONL data file (relative to ``root``), or None (recorded)."""
        p = Path(path) if Path(path).is_absolute() else self.root / path
        if not p.exists():
            self.note_missing(item, rel(p), "file not found")
            return None
        return read_jsonl(p)

    def missing_for(self, item: str) -> list[dict[str, Any]]:
        return [m for m in self.missing if m["item"] == item]


@dataclass
class Table:
    """A built table: tidy rows for CSV, a formatted frame for Markdown, notes for the reader."""

    frame: Any                      # pandas.DataFrame, raw values (fractions, counts)
    display: Any                    # pandas.DataFrame, formatted for reading
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------
def _isnum(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def fmt_score(v: Any, *, percent: bool = True, digits: int = 1, signed: bool = False) -> str:
    """A score as the papers print it: x100 with ``digits`` decimals; "–" when absent."""
    if not _isnum(v):
        return "–"
    x = 100 * float(v) if percent else float(v)
    d = digits if percent else digits + 2
    return f"{x:+.{d}f}" if signed else f"{x:.{d}f}"


def fmt_ci(v: Any, low: Any, high: Any, *, percent: bool = True, digits: int = 1, signed: bool = False) -> str:
    """``value [low, high]`` (interval omitted when absent)."""
    s = fmt_score(v, percent=percent, digits=digits, signed=signed)
    if _isnum(low) and _isnum(high):
        s += f" [{fmt_score(low, percent=percent, digits=digits, signed=signed)}, " \
             f"{fmt_score(high, percent=percent, digits=digits, signed=signed)}]"
    return s


def to_markdown(frame: Any, *, index: bool = False) -> str:
    """A DataFrame as a GitHub Markdown table ("|" in cells escaped)."""
    f = frame.reset_index() if index else frame
    cols = [str(c) for c in f.columns]
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in cols) + " |", "|" + "---|" * len(cols)]
    for row in f.itertuples(index=False):
        cells = ["" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in row]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def plain(frame: Any) -> Any:
    """A copy for display: absent values as "–", whole floats as ints (counts read as counts)."""
    def cell(v: Any) -> Any:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        if isinstance(v, float) and v.is_integer():
            return int(v)
        return v

    return frame.astype(object).apply(lambda col: [cell(v) for v in col])


def method_name(key: str) -> str:
    """The printed name of a method of notebook 14 (unknown names are printed as they are)."""
    return METHOD_NAMES.get(key, key)


def _method_rank(name: str) -> tuple[int, int, str]:
    """Sort key of a printed method name: the papers' order, each method's oracle or ablation
    runs ("SIM-RAG (oracle critic)") right after it, unknown names last."""
    order = list(METHOD_NAMES.values())
    if name in order:
        return (order.index(name), 0, name)
    for i, base in enumerate(order):
        if name.startswith(base + " ("):
            return (i, 1, name)
    return (len(order), 0, name)


# --------------------------------------------------------------------------------------------
# Datasets (Table 10) and error sampling (Table 1)
# --------------------------------------------------------------------------------------------
def datasets_table(inputs: Inputs) -> Table | None:
    """Corpus passages and split sizes per dataset, and the test questions each stage evaluated."""
    import pandas as pd

    item = "table10_datasets"
    rag = inputs.metric("retrieval_rag", "rag", item=item) or {}
    assets = inputs.metric("assets", item=item)
    testbed = inputs.metric("testbed", item=item)
    known = {"trivia": bool(assets), "testbed": bool(testbed)}
    names = sorted(set(rag) | {k for k, ok in known.items() if ok})
    if not names:
        return None
    n08 = inputs.metric("correction", "n_questions", item=item) or {}
    n14 = {r["dataset"]: r["n"] for r in (inputs.metric("comparison", "rows", item=item) or [])
           if r.get("method") == "standard RAG" and r.get("type") == "all"}
    rows = []
    for ds in names:
        row: dict[str, Any] = {"dataset": ds}
        if ds == "trivia" and assets:
            sizes = assets.get("trivia_split_sizes", {})
            row.update(corpus_passages=assets.get("corpus_passages"), **{s: sizes.get(s) for s in ("train", "dev", "test")})
        elif ds == "testbed" and testbed:
            q = testbed.get("questions", {})
            row.update(corpus_passages=testbed.get("corpus", {}).get("passages"),
                       **{s: q.get(s, {}).get("n") for s in ("train", "dev", "test")})
        row["test_standard_rag"] = rag.get(ds, {}).get("test", {}).get("n")
        row["test_correction"] = n08.get(ds)
        row["test_comparison"] = n14.get(ds)
        rows.append(row)
    frame = pd.DataFrame(rows)
    display = plain(frame)
    return Table(frame, display, ["Counts of questions; test_* = test questions evaluated by stages 01, 08 and 14 "
                                  "(14: every method on the same questions)."])


def source_statistics_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """Table-1-style rows from stage 02 with a total row per dataset."""
    import pandas as pd

    item = "table1_source_statistics"
    rows = inputs.metric("error_sampling", "source_statistics", item=item)
    tags = inputs.metric("tagging", "normalization", item=item)
    if not rows:
        if rows == []:
            inputs.note_missing(item, rel(inputs.metrics_path("error_sampling")), "no rows", "source_statistics")
        return None
    frame = pd.DataFrame(rows)
    totals = frame.groupby("dataset", sort=True)[["questions", "samples", "errors", "correct"]].sum().reset_index()
    totals["type"] = "all"
    totals["error_rate"] = totals.errors / totals.samples.where(totals.samples > 0)
    frame = pd.concat([frame, totals], ignore_index=True)[["dataset", "type", "questions", "samples", "errors",
                                                           "correct", "error_rate"]]
    order = sorted(range(len(frame)), key=lambda i: (frame.dataset.iloc[i], frame.type.iloc[i] != "all", frame.type.iloc[i]))
    frame = frame.iloc[order].reset_index(drop=True)
    display = frame.copy()
    display["error_rate"] = [fmt_score(v, percent=percent, digits=digits) for v in frame.error_rate]
    members = inputs.metric("error_sampling", "error_rate_by_member", item=item) or {}
    notes = [f"Pool of {len(members)} members; error rate per member: "
             + ", ".join(f"{m} {fmt_score(v, percent=percent, digits=digits)}" for m, v in members.items())] if members else []
    if tags:
        notes.append(f"Atomic tags (stage 03): {tags.get('raw_tags')} raw ({tags.get('raw_unique')} unique) -> "
                     f"{tags.get('final_tags')} after normalization ({tags.get('final_unique')} unique); "
                     "the paper goes from more than 20,000 to about 4,000 labels.")
    return Table(frame, display, notes)


# --------------------------------------------------------------------------------------------
# Stage 01: retrieval and standard RAG
# --------------------------------------------------------------------------------------------
def retrieval_recall_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """Answer (and, on the testbed, support) recall@k per dataset and retriever."""
    import pandas as pd

    item = "stage01_retrieval_recall"
    retrieval = inputs.metric("retrieval_rag", "retrieval", item=item)
    if not retrieval:
        return None
    rows = []
    for ds, by_retriever in retrieval.items():
        for name, res in by_retriever.items():
            support = res.get("support_recall", {})
            for k, v in res.get("answer_recall", {}).items():
                rows.append({"dataset": ds, "retriever": name, "k": int(k), "answer_recall": v,
                             "support_recall": support.get(k, float("nan")), "n": res.get("n")})
    if not rows:
        inputs.note_missing(item, rel(inputs.metrics_path("retrieval_rag")), "no rows", "retrieval")
        return None
    frame = pd.DataFrame(rows)
    wide = frame.pivot_table(index=["dataset", "retriever"], columns="k", values="answer_recall", sort=False)
    display = wide.apply(lambda col: [fmt_score(v, percent=percent, digits=digits) for v in col])
    display.columns = [f"R@{k}" for k in display.columns]
    return Table(frame, display.reset_index(), ["Answer recall@k: a gold answer occurs in the top-k passages."])


def plot_retrieval_recall(table: Table | None):
    """Recall@k curves per retriever, one panel per dataset (log-scaled k)."""
    if table is None:
        return None
    import matplotlib.pyplot as plt

    frame = table.frame
    datasets = list(dict.fromkeys(frame.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.6), sharey=True, squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        for name, grp in frame[frame.dataset == ds].groupby("retriever", sort=False):
            ax.plot(grp.k, grp.answer_recall, marker="o", label=name)
        ks = sorted(set(frame.k))
        ax.set(title=ds, xlabel="k", ylabel="answer recall@k", xscale="log", xticks=ks, xticklabels=ks)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def standard_rag_table(inputs: Inputs, *, percent: bool = True, digits: int = 1) -> Table | None:
    """Standard RAG (dev, test) and closed-book (test): overall and per answerable / type group."""
    import pandas as pd

    item = "stage01_standard_rag"
    rag = inputs.metric("retrieval_rag", "rag", item=item)
    if not rag:
        return None
    closed = inputs.metric("retrieval_rag", "closed_book", item=item) or {}
    rows = []
    for method, block in (("standard RAG", rag), ("closed-book", closed)):
        for ds, splits in block.items():
            for split, s in splits.items():
                if not s.get("n"):
                    continue
                rows.append({"dataset": ds, "split": split, "method": method, "group": "all",
                             **{k: s.get(k) for k in ("n", "em", "f1", "acc", "prefix_rate", "truncation_rate")}})
                for g in ("answerable", "type"):
                    for value, m in s.get(f"by_{g}", {}).items():
                        rows.append({"dataset": ds, "split": split, "method": method, "group": f"{g}={value}",
                                     **{k: m.get(k) for k in ("n", "em", "f1", "acc")}})
    if not rows:
        inputs.note_missing(item, rel(inputs.metrics_path("retrieval_rag")), "no rows", "rag")
        return None
    frame = pd.DataFrame(rows)
    display = frame.copy()
    for col in ("em", "f1", "acc", "prefix_rate", "truncation_rate"):
        display[col] = [fmt_score(v, percent=percent, digits=digits) for v in frame[col]]
    return Table(frame, display, ["EM/F1/acc in %; prefix_rate = answers that followed 'So the final answer is:'."])


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
    import matplotlib.pyplot as plt

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
    import matplotlib.pyplot as plt

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
    """Score dicts (``ragcritic_lib.error_benchmark.score_critic``) per critic from stage 07's metrics."""
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
    import matplotlib.pyplot as plt

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
        bal = inputs.metric("critic_sft", "balance", item=item) or {}
        rows.append({"run": "critic SFT (05)", "steps": sft.get("steps"), "examples": sft.get("examples"),
                     "first_loss": sft.get("first_loss"), "last_loss": sft.get("last_loss"),
                     "detail": ", ".join(f"{k}={v}" for k, v in bal.items() if not isinstance(v, (dict, list)))})
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
                                  "data/correction/planner_loss.json (`dvc plots show`)."])


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
    import matplotlib.pyplot as plt

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


def repair_action_usage_table(inputs: Inputs) -> Table | None:
    """Action calls of RAG-Critic's planner (with error categories) against RePAIR's (without)."""
    import pandas as pd

    item = "repair_table3_action_usage"
    usage = inputs.metric("repair", "action_usage", item=item)
    if usage is None:
        return None
    if not usage:
        inputs.note_missing(item, rel(inputs.metrics_path("repair")), "no rows", "action_usage")
        return None
    frame = pd.DataFrame(usage)
    display = plain(frame).rename(columns={
        "with_error_categories": "RAG-Critic planner (with categories)", "repair": "RePAIR (without)",
        "change_pct": "change %"})
    return Table(frame, display, ["GenerateAnswer excluded, as in RePAIR Table 3."])


# --------------------------------------------------------------------------------------------
# Writing: tables, figures, index
# --------------------------------------------------------------------------------------------
class Outputs:
    """Writes the items under ``out_dir`` (``tables/``, ``figures/``, ``index.json``).

    Args:
        out_dir: ``reports/analysis``.
        clean: remove the files of an earlier run first, so the index describes this run only.
    """

    def __init__(self, out_dir: Path = paths.REPORTS_DIR / "analysis", *, clean: bool = True,
                 dpi: int = FALLBACK_DPI) -> None:
        self.out_dir = Path(out_dir)
        self.tables_dir, self.figures_dir = self.out_dir / "tables", self.out_dir / "figures"
        self.dpi = dpi
        self.files: dict[str, list[str]] = {}
        self.notes: dict[str, list[str]] = {}
        if clean:
            for d in (self.tables_dir, self.figures_dir):
                for f in d.glob("*") if d.exists() else ():
                    if f.is_file():
                        f.unlink()
            (self.out_dir / "index.json").unlink(missing_ok=True)
        self.tables_dir.mkdir(parents=True, exist_ok=True)
        self.figures_dir.mkdir(parents=True, exist_ok=True)

    def _add(self, item: str, *files: Path) -> None:
        self.files.setdefault(item, [])
        self.files[item] += [rel(f) for f in files if rel(f) not in self.files[item]]

    def table(self, item: str, table: Table | None):
        """Write ``<item>.csv`` (tidy) and ``<item>.md`` (titled, formatted); returns the display
        frame for the notebook, or None when the table could not be built."""
        if table is None:
            print(f"[{item}] not built: inputs missing (see the 'missing' list)")
            return None
        meta = ITEMS[item]
        csv = self.tables_dir / f"{item}.csv"
        atomic_write_text(csv, table.frame.to_csv(index=False))
        md = self.tables_dir / f"{item}.md"
        body = f"### {meta.title}\n\n*Counterpart: {meta.paper}*\n\n{to_markdown(table.display)}"
        if table.notes:
            body += "\n" + "\n".join(f"- {n}" for n in table.notes) + "\n"
        atomic_write_text(md, body)
        self._add(item, csv, md)
        self.notes.setdefault(item, [])
        self.notes[item] += [n for n in table.notes if n not in self.notes[item]]
        return table.display

    def figure(self, item: str, fig: Any, *, close: bool = False):
        """Save ``<item>.png`` and ``<item>.svg`` (SVG without date and with stable ids, so
        re-runs give the same bytes); returns the figure for display."""
        if fig is None:
            print(f"[{item}] no figure: inputs missing (see the 'missing' list)")
            return None
        png, svg = write_figure(fig, self.figures_dir / item, dpi=self.dpi, salt=f"ragcritic-{item}")
        self._add(item, png, svg)
        if close:
            import matplotlib.pyplot as plt

            plt.close(fig)
        return fig

    def index(self, inputs: Inputs) -> dict[str, Any]:
        """Every item with its paper counterpart, status (built / partial / missing), files and
        missing inputs; ``by_paper`` maps each paper label to its files."""
        items = []
        for item_id, meta in ITEMS.items():
            missing = inputs.missing_for(item_id) + (inputs.missing_for(meta.inputs_of) if meta.inputs_of else [])
            files = self.files.get(item_id, [])
            status = "missing" if not files else ("partial" if missing else "built")
            items.append({"id": item_id, "paper": meta.paper, "title": meta.title, "status": status,
                          "files": files, "notes": self.notes.get(item_id, []),
                          "missing": [{k: v for k, v in m.items() if k not in ("item", "paper")} for m in missing]})
        return {"items": items, "by_paper": {i["paper"]: i["files"] for i in items}}

    def write_index(self, inputs: Inputs) -> dict[str, Any]:
        index = self.index(inputs)
        write_json(self.out_dir / "index.json", index)
        return index


def summary_metrics(index: Mapping[str, Any], inputs: Inputs, main: Table | None = None) -> dict[str, Any]:
    """The stage's metrics JSON: what was built, what is missing, and the headline F1 numbers."""
    items = index["items"]
    out: dict[str, Any] = {
        "items": len(items),
        "built": sorted(i["id"] for i in items if i["status"] in ("built", "partial")),
        "partial": sorted(i["id"] for i in items if i["status"] == "partial"),
        "not_built": sorted(i["id"] for i in items if i["status"] == "missing"),
        "files": sum(len(i["files"]) for i in items),
        "missing": inputs.missing,
    }
    if main is not None:
        head: dict[str, Any] = {}
        for row in main.frame.to_dict("records"):
            if row["method"] in ("Standard RAG", "RAG-Critic"):
                entry = {"f1": _round(row["f1"]), "em": _round(row["em"])}
                if row["method"] != "Standard RAG":
                    entry.update(d_f1=_round(row["d_f1"]), d_f1_low=_round(row["d_f1_low"]),
                                 d_f1_high=_round(row["d_f1_high"]), p_holm=_round(row["p_holm"]))
                head.setdefault(row["dataset"], {})[row["method"]] = entry
        out["headline"] = head
    return out


def _round(v: Any, digits: int = 4) -> float | None:
    return round(float(v), digits) if _isnum(v) else None


def status_frame(index: Mapping[str, Any]):
    """The index as a DataFrame (item, paper counterpart, status, files) for the notebook."""
    import pandas as pd

    return pd.DataFrame([{"item": i["id"], "paper": i["paper"], "status": i["status"],
                          "files": ", ".join(Path(f).name for f in i["files"])} for i in index["items"]])
