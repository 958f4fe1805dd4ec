"""Where a pipeline run spent its time: every stage's wall time and its slowest cells.

    python benchmarks/bench_stage_cells.py                    # this checkout's executed notebooks
    python benchmarks/bench_stage_cells.py --root /tmp/copy   # another copy (e.g. one bench_repro kept)
    python benchmarks/bench_stage_cells.py --min-seconds 60 --cap-minutes 150

Reads papermill's record of each cell (`metadata.papermill.duration`) in reports/notebooks/*.ipynb,
so it shows the run that wrote those notebooks: after a cold `dvc repro`, the cold times. Each
stage prints its total and the cells above --min-seconds, named by their first code line; the
end prints the sum over stages against --cap-minutes. Nothing is estimated: a stage that did
not run in the last `dvc repro` keeps the time of the run that wrote its notebook, and
`*.failed.ipynb` files (a kept record of a failed run) are skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _first_code_line(source: Any) -> str:
    """The cell's first top-level statement that does work: function and class definitions,
    decorators, imports and comments are passed over (a cell that only defines names keeps its
    first code line)."""
    text = "".join(source) if isinstance(source, list) else str(source or "")
    code = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    skip = ("def ", "class ", "@", "import ", "from ", "async def ")
    for line in code:
        if not line[:1].isspace() and not line.startswith(skip) and not line.startswith((")", "]", "}")):
            return line.strip()
    return code[0].strip() if code else ""


def stage_cells(notebooks_dir: Path) -> dict[str, dict[str, Any]]:
    """{stage notebook stem: {"seconds": total, "cells": [(index, seconds, first code line), ...]}}.

    Only notebooks papermill executed (a duration on the notebook) are listed; a notebook that is
    not valid JSON raises ValueError naming the file.
    """
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(notebooks_dir.glob("*.ipynb")):
        if path.name.endswith(".failed.ipynb"):
            continue
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a notebook ({exc})") from None
        total = nb.get("metadata", {}).get("papermill", {}).get("duration")
        if total is None:
            continue
        cells = []
        for i, cell in enumerate(nb.get("cells", [])):
            seconds = cell.get("metadata", {}).get("papermill", {}).get("duration")
            if seconds is not None:
                cells.append((i, float(seconds), _first_code_line(cell.get("source"))))
        out[path.stem] = {"seconds": float(total), "cells": cells}
    return out


def report(stages: dict[str, dict[str, Any]], *, min_seconds: float, cap_minutes: float) -> list[str]:
    lines, total = [], 0.0
    for stem, info in stages.items():
        total += info["seconds"]
        lines.append(f"{stem:<22} {info['seconds']:8.1f} s  {info['seconds'] / 60:6.1f} min")
        for index, seconds, first in sorted(info["cells"], key=lambda c: -c[1]):
            if seconds < min_seconds:
                break
            lines.append(f"    cell {index:>3} {seconds:8.1f} s  {first[:72]}")
    over = total / 60 - cap_minutes
    verdict = f"over the cap by {over:.1f} min" if over > 0 else f"within the cap ({-over:.1f} min to spare)"
    lines.append(f"{'sum of stages':<22} {total:8.1f} s  {total / 60:6.1f} min  (cap {cap_minutes:g} min: {verdict})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository copy whose reports/notebooks to read")
    parser.add_argument("--min-seconds", type=float, default=30.0, help="list the cells at least this long")
    parser.add_argument("--cap-minutes", type=float, default=150.0, help="the cold-run budget to compare with")
    args = parser.parse_args(argv)
    notebooks_dir = args.root / "reports" / "notebooks"
    if not notebooks_dir.is_dir():
        print(f"{notebooks_dir}: no executed notebooks (run `dvc repro` or `dvc checkout` first)", file=sys.stderr)
        return 2
    stages = stage_cells(notebooks_dir)
    if not stages:
        print(f"{notebooks_dir}: no notebook carries papermill's timings", file=sys.stderr)
        return 2
    print("\n".join(report(stages, min_seconds=args.min_seconds, cap_minutes=args.cap_minutes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
