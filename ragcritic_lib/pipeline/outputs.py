"""One writer for the figures and tables of the pipeline stages.

A stage writes its figures to ``reports/figures/<stage_stem>/`` and its tables to
``reports/tables/<stage_stem>/`` (``stage_stem`` is the notebook's name, e.g. ``01_retrieval_rag``),
so dvc.yaml declares one folder per stage instead of one out per file.

Figures are written as PNG and SVG with no timestamp or software version in their metadata and
with stable SVG element ids, so saving the same figure twice gives the same bytes; tables as CSV
and Markdown. Every file is written to a temporary file first and moved into place, so an
interrupted stage never leaves half a file. The PNG resolution defaults to params.yaml's
``analysis.figure_dpi`` (one knob for every figure of the project; a profile such as ``smoke``
lowers it).
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import atomic_write_bytes, atomic_write_text, read_yaml

FALLBACK_DPI = 120  # when params.yaml has no analysis.figure_dpi
TABLE_FORMATS = ("csv", "md")
_STAGE_STEM = re.compile(r"^\d\d_[a-z0-9_]+$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def default_dpi() -> int:
    """The PNG resolution of figures: ``analysis.figure_dpi`` in params.yaml, else 120."""
    if not paths.PARAMS_FILE.exists():
        return FALLBACK_DPI
    params = read_yaml(paths.PARAMS_FILE) or {}
    section = params.get("analysis") if isinstance(params, dict) else None
    value = section.get("figure_dpi", FALLBACK_DPI) if isinstance(section, dict) else FALLBACK_DPI
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{paths.PARAMS_FILE}: analysis.figure_dpi must be a positive int, got {value!r}")
    return value


def stage_folder(kind: str, stage_stem: str) -> Path:
    """``reports/<kind>/<stage_stem>`` (kind: ``figures`` or ``tables``), checked, not created."""
    if not _STAGE_STEM.match(stage_stem):
        raise ValueError(f"stage_stem must name a notebook like '01_retrieval_rag', got {stage_stem!r}")
    base = {"figures": paths.FIGURES_DIR, "tables": paths.TABLES_DIR}.get(kind)
    if base is None:
        raise ValueError(f"kind must be 'figures' or 'tables', got {kind!r}")
    return base / stage_stem


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name.endswith((".png", ".svg", ".csv", ".md")):
        raise ValueError(f"name must be a plain file stem without folder or extension, got {name!r}")
    return name


def write_figure(fig: Any, base: Path, *, dpi: int, salt: str) -> tuple[Path, Path]:
    """Write ``base.png`` and ``base.svg`` from a matplotlib figure, deterministically.

    Args:
        fig: a matplotlib Figure.
        base: the file path without extension; its folder is created.
        dpi: PNG resolution.
        salt: seeds the SVG element ids (``svg.hashsalt``), so they are the same on every run.
    """
    import matplotlib

    base = Path(base)
    png, svg = base.with_name(base.name + ".png"), base.with_name(base.name + ".svg")
    png_buf, svg_buf = io.BytesIO(), io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": salt}):
        fig.savefig(png_buf, format="png", dpi=dpi, metadata={"Software": None})
        fig.savefig(svg_buf, format="svg", metadata={"Date": None, "Creator": None})
    atomic_write_bytes(png, png_buf.getvalue())
    atomic_write_text(svg, svg_buf.getvalue())
    return png, svg


def save_figure(fig: Any, stage_stem: str, name: str, *, dpi: int | None = None) -> tuple[Path, Path]:
    """Save a stage's figure as ``reports/figures/<stage_stem>/<name>.png`` and ``.svg``.

    Args:
        fig: a matplotlib Figure (``ax.figure`` for an Axes).
        stage_stem: the notebook's name, e.g. ``"01_retrieval_rag"``.
        name: the file stem, e.g. ``"recall_at_k"``.
        dpi: PNG resolution; None takes :func:`default_dpi`.

    Returns:
        The PNG and SVG paths.
    """
    folder = stage_folder("figures", stage_stem)
    name = _check_name(name)
    return write_figure(fig, folder / name, dpi=default_dpi() if dpi is None else dpi,
                        salt=f"ragcritic-{stage_stem}-{name}")


def save_table(frame: Any, stage_stem: str, name: str, *, index: bool = False,
               formats: Sequence[str] = TABLE_FORMATS) -> list[Path]:
    """Save a stage's DataFrame as ``reports/tables/<stage_stem>/<name>.csv`` and/or ``.md``.

    Args:
        frame: a pandas DataFrame.
        stage_stem: the notebook's name, e.g. ``"02_error_sampling"``.
        name: the file stem, e.g. ``"source_statistics"``.
        index: write the frame's index as a column (CSV) / first column (Markdown).
        formats: any of ``"csv"`` and ``"md"``.

    Returns:
        The written paths, in the order of ``formats``.
    """
    folder = stage_folder("tables", stage_stem)
    name = _check_name(name)
    unknown = [f for f in formats if f not in TABLE_FORMATS]
    if unknown or not formats:
        raise ValueError(f"formats must be a non-empty subset of {TABLE_FORMATS}, got {tuple(formats)!r}")
    written = []
    for fmt in formats:
        text = frame.to_csv(index=index) if fmt == "csv" else frame.to_markdown(index=index) + "\n"
        written.append(atomic_write_text(folder / f"{name}.{fmt}", text))
    return written


def save_markdown(text: str, stage_stem: str, name: str) -> Path:
    """Save Markdown a stage composed itself (examples, case studies) as
    ``reports/tables/<stage_stem>/<name>.md``; returns the path."""
    folder = stage_folder("tables", stage_stem)
    return atomic_write_text(folder / f"{_check_name(name)}.md", text)
