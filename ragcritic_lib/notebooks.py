"""Keep the ``.ipynb`` twins (what people open in JupyterLab) in step with the ``.py`` sources.

``python -m ragcritic_lib.notebooks sync`` writes every ``notebooks/NN_name.ipynb`` from its
jupytext ``.py`` twin with outputs stripped; ``check`` exits non-zero when a twin is missing or
differs in its cells. The ``.py`` file is what DVC depends on and what reviewers read; the pair
is linked by jupytext (``formats: ipynb,py:percent``), so saving in JupyterLab updates both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import paths

_PAIRING = "ipynb,py:percent"


def _strip(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
        cell.metadata.pop("papermill", None)
    return nb


def twin_of(py_path: Path) -> Path:
    return py_path.with_suffix(".ipynb")


def render_twin(py_path: Path):
    """The stripped notebook a ``.py`` source corresponds to."""
    import jupytext

    nb = jupytext.read(py_path, fmt="py:percent")
    nb.metadata["jupytext"] = {"formats": _PAIRING}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    # Stable cell ids (notebook name, position, source): re-syncing an unchanged notebook
    # rewrites the same bytes, so twins only show up in a diff when their cells changed.
    import hashlib

    for i, cell in enumerate(nb.cells):
        digest = hashlib.sha1(f"{py_path.stem}:{i}:{cell.cell_type}:{cell.source}".encode()).hexdigest()
        cell.id = digest[:8]
    return _strip(nb)


def cell_sources(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", []))) for c in nb.cells]


def sync(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> list[Path]:
    """Write every twin; returns the paths written."""
    import nbformat

    from .io import atomic_write_text

    written = []
    for py in sorted(notebooks_dir.glob("[0-9][0-9]_*.py")):
        nb = render_twin(py)
        atomic_write_text(twin_of(py), nbformat.writes(nb) + "\n")
        written.append(twin_of(py))
    return written


def out_of_sync(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> list[str]:
    """Problems: missing twins, twins whose cells differ, twins that carry outputs."""
    import nbformat

    problems = []
    for py in sorted(notebooks_dir.glob("[0-9][0-9]_*.py")):
        twin = twin_of(py)
        if not twin.exists():
            problems.append(f"{twin.name}: missing (run `make notebooks`)")
            continue
        nb = nbformat.read(twin, as_version=4)
        if cell_sources(nb) != cell_sources(render_twin(py)):
            problems.append(f"{twin.name}: cells differ from {py.name} (run `make notebooks`)")
        if any(c.cell_type == "code" and c.outputs for c in nb.cells):
            problems.append(f"{twin.name}: carries outputs (strip them with `make notebooks`)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.notebooks")
    parser.add_argument("cmd", choices=["sync", "check"])
    args = parser.parse_args(argv)
    if args.cmd == "sync":
        for p in sync():
            print(f"wrote {p.relative_to(paths.ROOT)}")
        return 0
    problems = out_of_sync()
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
