"""Keep the ``.ipynb`` twins (what people open in JupyterLab) in step with the ``.py`` sources.

``python -m ragcritic_lib.pipeline.notebooks sync`` first sets every notebook's parameter defaults to
params.yaml's values (so a notebook run in JupyterLab computes what ``dvc repro`` computes), then
writes every ``notebooks/NN_name.ipynb`` from its
jupytext ``.py`` twin with outputs stripped; ``check`` exits non-zero when a twin is missing or
differs in its cells. The ``.py`` file is what DVC depends on and what reviewers read; the pair
is linked by jupytext (``formats: ipynb,py:percent``), so saving in JupyterLab updates both.

``prepare`` (``make lab``) writes only the twins that are missing or whose cells differ from their
``.py`` and touches no ``.py``, so opening the lab changes no tracked file; notebooks/jupytext.toml
keeps jupytext from adding its version to a ``.py`` header when JupyterLab saves a notebook, so a
save of an unchanged notebook rewrites its ``.py`` byte for byte.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from ragcritic_lib import paths

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


def _literal(value: Any) -> str:
    """A Python literal for a params.yaml scalar, strings in double quotes like the notebooks."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def defaults_drift(params: dict[str, Any], notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> list[str]:
    """``notebook: name = default (params.yaml: value)`` for each default that differs by value.

    A notebook opened in JupyterLab runs on its own defaults, so they must equal params.yaml,
    or an interactive run would compute (and overwrite DVC outputs with) something else.
    """
    from ragcritic_lib.pipeline.params import notebook_parameters

    out = []
    for py in sources(notebooks_dir):
        section = params.get(py.stem[3:], {})
        for name, value in notebook_parameters(py).items():
            if name in section and (type(section[name]) is not type(value) or section[name] != value):
                if isinstance(value, int) and isinstance(section[name], float) and float(value) == section[name]:
                    continue
                out.append(f"{py.name}: {name} = {value!r} (params.yaml: {section[name]!r})")
    return out


def sync_defaults(params: dict[str, Any], notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> list[Path]:
    """Rewrite the parameters cells so every default equals params.yaml; returns changed files."""
    from ragcritic_lib.io import atomic_write_text

    changed = []
    for py in sources(notebooks_dir):
        section = params.get(py.stem[3:], {})
        text = py.read_text(encoding="utf-8")
        head, sep, rest = text.partition('# %% tags=["parameters"]\n')
        if not sep:
            continue
        cell, marker, tail = rest.partition("\n# %%")
        lines = []
        for line in cell.split("\n"):
            m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*) = (.*?)(\s+#.*)?$", line)
            if m and m.group(1) in section:
                line = f"{m.group(1)} = {_literal(section[m.group(1)])}{m.group(3) or ''}"
            lines.append(line)
        new = head + sep + "\n".join(lines) + marker + tail
        if new != text:
            atomic_write_text(py, new)
            changed.append(py)
    return changed


def cell_sources(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", []))) for c in nb.cells]


def sources(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> list[Path]:
    """The stage notebooks' ``.py`` sources (``NN_name.py``), in order."""
    return sorted(notebooks_dir.glob("[0-9][0-9]_*.py"))


def write_twin(py: Path) -> Path:
    """Write ``py``'s ``.ipynb`` twin (outputs stripped), dated as its ``.py``; returns the twin.

    JupyterLab opens a pair through jupytext, which refuses a notebook whose ``.ipynb`` is newer
    than its ``.py`` unless both read the same, and a twin written here never reads quite the same
    (jupytext's own view of it adds its version to the header, which the ``.py`` leaves out). A
    twin dated as its source is the pair as git checks it out, and opens.
    """
    import os

    import nbformat

    from ragcritic_lib.io import atomic_write_text

    twin = twin_of(py)
    atomic_write_text(twin, nbformat.writes(render_twin(py)) + "\n")
    stat = py.stat()
    os.utime(twin, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return twin


def sync(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> list[Path]:
    """Write every twin; returns the paths written."""
    return [write_twin(py) for py in sources(notebooks_dir)]


def stale_twins(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> list[Path]:
    """The ``.py`` sources whose twin is missing or holds other cells (outputs do not count)."""
    import nbformat

    stale = []
    for py in sources(notebooks_dir):
        twin = twin_of(py)
        if not twin.exists() or cell_sources(nbformat.read(twin, as_version=4)) != cell_sources(render_twin(py)):
            stale.append(py)
    return stale


def prepare(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> list[Path]:
    """Write the twins :func:`stale_twins` names, and no other file; returns the twins written."""
    return [write_twin(py) for py in stale_twins(notebooks_dir)]


def out_of_sync(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> list[str]:
    """Problems: missing twins, twins whose cells differ, twins that carry outputs."""
    import nbformat

    problems = []
    for py in sources(notebooks_dir):
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
    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.notebooks")
    parser.add_argument("cmd", choices=["sync", "check", "prepare"])
    args = parser.parse_args(argv)
    if args.cmd == "prepare":
        for p in prepare():
            print(f"wrote {p.relative_to(paths.ROOT)}")
        return 0
    if args.cmd == "sync":
        from ragcritic_lib.pipeline.params import load_params

        for p in sync_defaults(load_params()):
            print(f"defaults from params.yaml: {p.relative_to(paths.ROOT)}")
        for p in sync():
            print(f"wrote {p.relative_to(paths.ROOT)}")
        return 0
    problems = out_of_sync()
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
