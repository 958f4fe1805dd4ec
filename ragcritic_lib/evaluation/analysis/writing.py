"""Writing notebook 15's items: tables as CSV and Markdown, figures as PNG and SVG, and
``index.json`` mapping each paper item to its files (:class:`Outputs`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.evaluation.analysis.items import (
    ITEMS,
    STAGE_FILES,
    Inputs,
    Table,
    _isnum,
    rel,
    to_markdown,
)
from ragcritic_lib.io import atomic_write_text, write_json
from ragcritic_lib.pipeline.outputs import FALLBACK_DPI, write_figure


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


AGREEMENT_ITEM = "standard_rag_agreement"


def standard_rag_agreement(inputs: Inputs, *, dataset: str = "testbed", tol: float = 5e-4) -> dict[str, Any]:
    """Whether every table that quotes standard RAG on ``dataset``'s test questions quotes the same
    answers: stage 01's test score, the correction ladder's "standard RAG" row (08) and the
    comparison's (14) must agree on the number of questions and on F1 (within ``tol``, the rounding
    of the metrics files). One chain gives one set of numbers; a stage left from another run
    shows here.

    Returns:
        {"dataset", "quotes": {stage file: {"f1", "n"}} for each stage that quotes it, "agree":
        True / False (None with fewer than two quotes), "max_gap": the largest F1 difference,
        "problems": one line per disagreement}.
    """
    quotes: dict[str, dict[str, Any]] = {}

    def add(stage: str, row: Any) -> None:
        if isinstance(row, Mapping) and _isnum(row.get("f1")):
            quotes[STAGE_FILES[stage]] = {"f1": float(row["f1"]), "n": int(row.get("n") or 0)}

    add("retrieval_rag", inputs.metric("retrieval_rag", "rag", dataset, "test", item=AGREEMENT_ITEM))
    ladder = inputs.metric("correction", "ladder", dataset, item=AGREEMENT_ITEM)
    add("correction", (ladder or {}).get("standard RAG") if isinstance(ladder, Mapping) else None)
    rows = inputs.metric("comparison", "rows", item=AGREEMENT_ITEM)
    add("comparison", next((r for r in rows or [] if isinstance(r, Mapping) and r.get("method") == "standard RAG"
                            and r.get("dataset") == dataset and r.get("type", "all") == "all"), None))
    problems: list[str] = []
    if len(quotes) >= 2:
        (first, ref), *rest = quotes.items()
        for name, q in rest:
            if q["n"] != ref["n"] or abs(q["f1"] - ref["f1"]) > tol:
                problems.append(f"standard RAG on {dataset} test: {name} quotes F1 {q['f1']:.4f} on {q['n']} questions, "
                                f"{first} {ref['f1']:.4f} on {ref['n']} (a stage from another run)")
    f1s = [q["f1"] for q in quotes.values()]
    return {"dataset": dataset, "quotes": quotes, "agree": (not problems) if len(quotes) >= 2 else None,
            "max_gap": round(max(f1s) - min(f1s), 4) if f1s else None, "problems": problems}


def summary_metrics(index: Mapping[str, Any], inputs: Inputs, main: Table | None = None,
                    agreement: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stage's metrics JSON: what was built, what is missing, the headline F1 numbers and
    whether the stages quote standard RAG alike (``agreement``, :func:`standard_rag_agreement`;
    a disagreement is listed in ``degenerate``)."""
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
    if agreement is not None:
        out[AGREEMENT_ITEM] = dict(agreement)
        out["degenerate"] = [f"analysis: {p}" for p in agreement.get("problems") or []]
    return out


def _round(v: Any, digits: int = 4) -> float | None:
    return round(float(v), digits) if _isnum(v) else None


def status_frame(index: Mapping[str, Any]):
    """The index as a DataFrame (item, paper counterpart, status, files) for the notebook."""
    import pandas as pd

    return pd.DataFrame([{"item": i["id"], "paper": i["paper"], "status": i["status"],
                          "files": ", ".join(Path(f).name for f in i["files"])} for i in index["items"]])
