"""The items of notebook 15 (:data:`ITEMS`, one per paper table or figure), the stage files they
read, :class:`Inputs` (which records every missing input instead of failing), :class:`Table`, and
the number formatting the tables share."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import DataFormatError, read_jsonl
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
# with the rule planner instead of the trained one, with the oracle's verdict (and the trained or
# the rule planner), with the oracle's critique, and the standard RAG floor.
EXPECTED_ABLATIONS = ("fixed action", "oracle verdict", "oracle critique")
ABLATION_ORDER = ("fixed action", "RAG-Critic + rule planner", "oracle verdict", "oracle verdict + rule planner",
                  "oracle critique", "standard RAG")  # the "+ rule planner" rows are shown where the run has them


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


