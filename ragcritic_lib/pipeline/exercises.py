"""Exercise versions of the notebooks: ``python -m ragcritic_lib.pipeline.exercises build``.

In a solution notebook (``notebooks/NN_name.py``), a code region between the comment lines

    # BEGIN SOLUTION hint: call recall_at_k for each retriever
    ...solution code...
    # END SOLUTION

becomes ``# TODO: call recall_at_k for each retriever`` (same indentation; ``pass`` is added
only where the cell would otherwise not parse, e.g. a loop whose whole body was the solution).
The result is written, outputs stripped and unpaired, to ``notebooks/exercises/NN_name.ipynb``
beside the solutions. Markers inside Markdown cells are left alone; an unbalanced marker is an
error naming the file and line. A notebook without markers is copied unchanged and reported as
having no exercises.

In JupyterLab a notebook runs with the literals of its ``parameters`` cell, not params.yaml. So
``build --profile workshop`` (or ``--params FILE``) writes those values into the parameters cell
of each exercise notebook, and also writes ``NN_name.solution.ipynb`` with the same values: the
workshop's notebooks then run at the profile's sizes when opened and run interactively.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import DataFormatError, atomic_write_text

BEGIN = re.compile(r"^(?P<indent>[ \t]*)#\s*BEGIN SOLUTION\b(?:\s*(?:hint\s*:|:)?\s*(?P<hint>.*?))?\s*$")
END = re.compile(r"^[ \t]*#\s*END SOLUTION\b.*$")
CELL = re.compile(r"^# %%(?P<rest>.*)$")
DEFAULT_HINT = "write the code for this step"
EXERCISES_DIR = paths.NOTEBOOKS_DIR / "exercises"
_STAGE_NB = re.compile(r"^\d\d_[a-z0-9_]+\.py$")


@dataclass
class Exercise:
    """One replaced region: its 1-based line span in the source file and its hint."""

    start: int
    end: int
    hint: str


@dataclass
class Result:
    """What :func:`make_exercise_text` did to one notebook source."""

    text: str
    exercises: list[Exercise] = field(default_factory=list)


def _cells(lines: list[str]) -> list[tuple[int, int, bool]]:
    """(first line index, end index, is_code) of each ``# %%`` cell of a percent-format file."""
    starts = [i for i, line in enumerate(lines) if CELL.match(line)]
    bounds = []
    for j, s in enumerate(starts):
        end = starts[j + 1] if j + 1 < len(starts) else len(lines)
        rest = CELL.match(lines[s]).group("rest")
        bounds.append((s, end, "[markdown]" not in rest and "[raw]" not in rest))
    return bounds


def _parses(lines: list[str]) -> bool:
    try:
        ast.parse("\n".join(line for line in lines))
    except SyntaxError:
        return False
    return True


def _replace(lines: list[str], first: int, where: str, *, add_pass: bool) -> tuple[list[str], list[Exercise]]:
    """Replace the marked regions of one code cell's lines (``first`` = index of lines[0] in the file)."""
    out: list[str] = []
    found: list[Exercise] = []
    open_at: tuple[int, str, str] | None = None
    for i, line in enumerate(lines):
        lineno = first + i + 1
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if open_at is not None:
                raise DataFormatError(f"{where}:{lineno}: BEGIN SOLUTION inside the region opened at line {open_at[0]}")
            open_at = (lineno, begin.group("indent"), (begin.group("hint") or "").strip() or DEFAULT_HINT)
        elif end:
            if open_at is None:
                raise DataFormatError(f"{where}:{lineno}: END SOLUTION without a BEGIN SOLUTION")
            start, indent, hint = open_at
            out.append(f"{indent}# TODO: {hint}")
            if add_pass:
                out.append(f"{indent}pass")
            found.append(Exercise(start, lineno, hint))
            open_at = None
        elif open_at is None:
            out.append(line)
    if open_at is not None:
        raise DataFormatError(f"{where}:{open_at[0]}: BEGIN SOLUTION without an END SOLUTION before the cell ends")
    return out, found


def make_exercise_text(text: str, *, where: str = "<notebook>") -> Result:
    """The exercise version of a jupytext percent source (unchanged when it has no markers).

    Raises:
        DataFormatError: an unbalanced or nested marker, naming ``where`` and the line.
    """
    lines = text.split("\n")
    bounds = _cells(lines)
    if not bounds or bounds[0][0] > 0:
        bounds = [(0, bounds[0][0] if bounds else len(lines), True)] + bounds  # header before the first cell
    out: list[str] = []
    exercises: list[Exercise] = []
    for start, end, is_code in bounds:
        cell = lines[start:end]
        if not is_code:
            out += cell
            continue
        new, found = _replace(cell, start, where, add_pass=False)
        if found and not _parses(new) and _parses(cell):
            new, found = _replace(cell, start, where, add_pass=True)
        out += new
        exercises += found
    return Result("\n".join(out), exercises)


def _literal(value: Any, where: str) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a valid Python literal, double-quoted like the notebooks
    if isinstance(value, (bool, int, float)):
        return repr(value)
    raise DataFormatError(f"{where}: parameter value must be a scalar, got {type(value).__name__}")


def set_parameters(text: str, values: Mapping[str, Any], *, where: str = "<notebook>") -> str:
    """Rewrite ``name = literal`` lines of the ``parameters`` cell with ``values`` (other lines,
    and names not in ``values``, unchanged).

    Raises:
        DataFormatError: no parameters cell, or a value that is not a scalar.
    """
    lines = text.split("\n")
    bounds = [b for b in _cells(lines) if "parameters" in lines[b[0]] and "tags=" in lines[b[0]]]
    if not bounds:
        raise DataFormatError(f"{where}: no cell tagged parameters")
    start, end, _ = bounds[0]
    for i in range(start + 1, end):
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=", lines[i])
        if m and m.group(1) in values:
            lines[i] = f"{m.group(1)} = {_literal(values[m.group(1)], f'{where}: {m.group(1)}')}"
    return "\n".join(lines)


def _as_notebook(text: str):
    import jupytext

    nb = jupytext.reads(text, fmt="py:percent")
    nb.metadata.pop("jupytext", None)  # a copy here is not paired with a .py twin
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def exercise_notebook(py_path: Path, values: Mapping[str, Any] | None = None, *, solution: str | None = None):
    """(stripped, unpaired exercise notebook, exercises found) for one solution source, with
    the parameters cell set from ``values`` when given; ``solution`` is where the title cell says
    the solution is (default: the solution notebook one folder up)."""
    text = py_path.read_text(encoding="utf-8")
    if values:
        text = set_parameters(text, values, where=str(py_path))
    result = make_exercise_text(text, where=str(py_path))
    nb = _as_notebook(result.text)
    if result.exercises and nb.cells and nb.cells[0].cell_type == "markdown":
        n = len(result.exercises)
        nb.cells[0].source += (f"\n\n> **Exercise version.** Fill in the {n} place{'s' if n > 1 else ''} marked "
                               f"`# TODO`; the solution is `{solution or f'../{py_path.stem}.ipynb'}`.")
    return nb, result.exercises


def build(notebooks_dir: Path = paths.NOTEBOOKS_DIR, out_dir: Path | None = None,
          params: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, int]:
    """Write ``out_dir/NN_name.ipynb`` for every stage notebook; returns exercises per notebook.

    With ``params`` (sections of params.yaml), each parameters cell takes its section's values and
    a ``NN_name.solution.ipynb`` with the same values is written beside the exercise.
    """
    import nbformat

    out_dir = out_dir or notebooks_dir / "exercises"
    counts: dict[str, int] = {}
    for py in sorted(p for p in notebooks_dir.glob("*.py") if _STAGE_NB.match(p.name)):
        values = (params or {}).get(py.stem.split("_", 1)[1])
        nb, found = exercise_notebook(py, values, solution=f"{py.stem}.solution.ipynb" if params is not None else None)
        atomic_write_text(out_dir / f"{py.stem}.ipynb", nbformat.writes(nb) + "\n")
        if params is not None:
            text = set_parameters(py.read_text(encoding="utf-8"), values or {}, where=str(py))
            atomic_write_text(out_dir / f"{py.stem}.solution.ipynb", nbformat.writes(_as_notebook(text)) + "\n")
        counts[py.stem] = len(found)
    return counts


def profile_params(profile: str | None = None, params_file: Path | None = None) -> dict[str, Any]:
    """params.yaml (or ``params_file``) with ``configs/profiles/<profile>.yaml`` merged over it,
    in memory (params.yaml is not touched)."""
    from ragcritic_lib.io import read_yaml
    from ragcritic_lib.pipeline.params import ParamsError, deep_merge

    base = read_yaml(params_file or paths.PARAMS_FILE) or {}
    if not profile:
        return base
    prof = paths.CONFIGS_DIR / "profiles" / f"{profile}.yaml"
    if not prof.exists():
        raise ParamsError(f"{prof}: no such params profile")
    return deep_merge(base, read_yaml(prof) or {})


def check(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> dict[str, list[Exercise]]:
    """Validate the markers of every stage notebook (raises on the first unbalanced one)."""
    return {py.stem: make_exercise_text(py.read_text(encoding="utf-8"), where=str(py)).exercises
            for py in sorted(p for p in notebooks_dir.glob("*.py") if _STAGE_NB.match(p.name))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.exercises", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write notebooks/exercises/NN_name.ipynb from the solution notebooks")
    c = sub.add_parser("check", help="validate the solution markers and list the exercises")
    for p in (b, c):
        p.add_argument("--notebooks-dir", type=Path, default=paths.NOTEBOOKS_DIR)
    b.add_argument("--out-dir", type=Path, default=None, help="default: <notebooks-dir>/exercises")
    b.add_argument("--profile", default=None, help="set parameters cells from params.yaml + this profile (e.g. workshop)")
    b.add_argument("--params", type=Path, default=None, help="set parameters cells from this params file")
    args = parser.parse_args(argv)
    from ragcritic_lib.pipeline.params import ParamsError

    try:
        if args.cmd == "build":
            params = profile_params(args.profile, args.params) if (args.profile or args.params) else None
            counts = build(args.notebooks_dir, args.out_dir, params)
            out_dir = args.out_dir or args.notebooks_dir / "exercises"
            for stem, n in counts.items():
                print(f"{stem}: {n} exercise{'s' if n != 1 else ''}" if n else
                      f"{stem}: no exercises (no BEGIN SOLUTION markers; copied unchanged)")
            print(f"wrote {len(counts)} notebooks to {out_dir}")
        else:
            for stem, found in check(args.notebooks_dir).items():
                print(f"{stem}: " + ("; ".join(f"lines {e.start}-{e.end}: {e.hint}" for e in found) or "no exercises"))
    except (DataFormatError, ParamsError) as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
