"""Run one stage's notebook code in a plain Python process, without Jupyter, papermill or DVC.

    python scripts/run_stage_cells.py critic_sft
    python scripts/run_stage_cells.py critic_sft --set epochs=2.0 --stop-before "## Reading the numbers"

For a machine that has the model stack (torch, transformers, scikit-learn) but not the notebook
stack: a rented GPU, a cluster node. The stage's params section of params.yaml is put in place
after the notebook's ``parameters`` cell, as the stage runner does; ``--set`` overrides one of
them (the notebook must have that parameter). Markdown cells are skipped; so are cells that
display Markdown through IPython when IPython is not installed (a notebook's reading of its
numbers), with a line saying so. The stage writes its outputs where it always does
(``data/<stage>``, its metrics with ``environment.wall_seconds``), so DVC afterwards sees them as
changed: this is for re-running a stage elsewhere and bringing its metrics back, not for
shipping. Where the generator should run is params.yaml's ``common.generator.device``: set it to
``cuda`` on a GPU machine.

Exit status: 0 when every code cell ran; the failing cell's error otherwise, with its number.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_HEAD = re.compile(r"^# %%.*$", re.MULTILINE)


def code_cells(text: str) -> list[tuple[str, str]]:
    """(header, source) of every code cell of a jupytext percent notebook, in order."""
    heads = _HEAD.findall(text)
    bodies = _HEAD.split(text)[1:]
    return [(h, b) for h, b in zip(heads, bodies) if "[markdown]" not in h]


def _needs_missing_ipython(source: str) -> bool:
    return "IPython" in source and importlib.util.find_spec("IPython") is None


def run_cells(text: str, params: Mapping[str, Any], *, name: str = "notebook", stop_before: str | None = None,
              say: Callable[[str], None] = print) -> dict[str, Any]:
    """Execute the code cells of ``text`` in one namespace; ``params`` replace the defaults of the
    ``parameters`` cell right after it runs. Stops before the first cell containing
    ``stop_before``. Returns the namespace.

    Raises:
        ValueError: a key of ``params`` that the parameters cell does not assign, or no parameters cell.
        RuntimeError: a cell raised (the message names the cell's number; the cause is chained).
    """
    cells = code_cells(text)
    tagged = [i for i, (h, _) in enumerate(cells) if re.search(r"tags=\[[^\]]*[\"']parameters[\"']", h)]
    if len(tagged) != 1:
        raise ValueError(f"{name}: expected one cell tagged 'parameters', found {len(tagged)}")
    declared = {t.id for node in ast.parse(cells[tagged[0]][1]).body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    unknown = sorted(set(params) - declared)
    if unknown:
        raise ValueError(f"{name}: no parameter {unknown[0]!r} in its parameters cell")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    start = time.perf_counter()
    for number, (head, source) in enumerate(cells, 1):
        if stop_before and stop_before in source:
            say(f"[{name}] stopped before cell {number} (it contains {stop_before!r})")
            break
        if _needs_missing_ipython(source):
            say(f"[{name}] cell {number} skipped: it displays through IPython, which is not installed")
            continue
        try:
            exec(compile(source, f"{name} cell {number}", "exec"), namespace)  # noqa: S102 - the project's own notebook
        except Exception as exc:
            raise RuntimeError(f"{name}: cell {number} failed: {type(exc).__name__}: {exc}") from exc
        if number - 1 == tagged[0]:
            namespace.update(params)
        say(f"[{name}] cell {number}/{len(cells)} done at {time.perf_counter() - start:.1f} s")
    return namespace


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", help="a stage name of params.yaml, e.g. critic_sft")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one of the stage's params (a Python literal, else a string)")
    parser.add_argument("--stop-before", default=None, help="stop before the first cell containing this text")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from ragcritic_lib import paths
    from ragcritic_lib.pipeline.params import load_params, notebook_paths
    from ragcritic_lib.pipeline.stage_metrics import record_wall_seconds

    notebooks = notebook_paths(paths.NOTEBOOKS_DIR)
    if args.stage not in notebooks:
        print(f"no stage notebook for {args.stage!r} (known: {', '.join(sorted(notebooks))})", file=sys.stderr)
        return 2
    params = dict(load_params().get(args.stage, {}))
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"--set {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        params[key.strip()] = _value(value.strip())
    py_path = Path(notebooks[args.stage])
    start = time.perf_counter()
    try:
        run_cells(py_path.read_text(encoding="utf-8"), params, name=py_path.name, stop_before=args.stop_before)
    except (ValueError, RuntimeError) as exc:
        print(exc, file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - start
    record_wall_seconds(py_path.stem, elapsed)
    print(f"[{py_path.name}] ran in {elapsed:.1f} s without papermill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
