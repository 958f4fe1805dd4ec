"""Run one notebook as a pipeline stage: ``python -m ragcritic_lib.pipeline.stage notebooks/NN_name.py``.

1. params.yaml is validated as a whole (one clear error before any compute);
2. the jupytext twin is converted to a notebook in memory;
3. papermill executes it headlessly with the stage's params section injected after the
   ``parameters`` cell, working directory = repository root;
4. the executed notebook is written (atomically) to ``reports/notebooks/NN_name.ipynb``.

This is the ``cmd`` of every stage in dvc.yaml.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from ragcritic_lib import paths
from ragcritic_lib.pipeline.params import ParamsError, load_params, notebook_parameters, notebook_paths


class _PapermillParameterNoise(logging.Filter):
    """Drops papermill's guesses about the parameters cell. Its line parser cannot read a string
    default that holds "=" (``train_questions = "testbed=700,trivia=400"``), warns that it could
    not parse the line, then calls the value passed for it unknown although it is injected.
    params.yaml is matched against every notebook's parameters cell (read with ``ast``) by
    :func:`load_params` before papermill starts, so those warnings would only mislead."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not (msg.startswith("Unable to parse line") or msg.startswith("Passed unknown parameter"))


def _quiet_papermill_parameter_guesses() -> None:
    for name in ("papermill", "papermill.translators"):
        log = logging.getLogger(name)
        if not any(isinstance(f, _PapermillParameterNoise) for f in log.filters):
            log.addFilter(_PapermillParameterNoise())


def stage_name(notebook: Path) -> str:
    """``notebooks/01_retrieval_rag.py`` -> ``retrieval_rag``."""
    stem = notebook.stem
    return stem.split("_", 1)[1] if stem[:2].isdigit() and "_" in stem else stem


def to_ipynb(py_path: Path):
    """Read a jupytext percent twin as an nbformat notebook with the project's kernel."""
    import jupytext

    nb = jupytext.read(py_path, fmt="py:percent")
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.setdefault("language_info", {"name": "python"})
    nb.metadata.pop("jupytext", None)
    return nb


def run_notebook(py_path: str | os.PathLike[str], *, output_dir: Path | None = None,
                 extra_params: dict | None = None, log_output: bool = False) -> Path:
    """Execute one notebook twin with its params section; returns the executed notebook path."""
    import nbformat
    import papermill as pm

    py_path = Path(py_path).resolve()
    params = load_params()
    name = stage_name(py_path)
    if name not in notebook_paths(py_path.parent):
        raise ParamsError(f"{py_path.name}: not a stage notebook (expected NN_<stage>.py)")
    stage_params = dict(params.get(name, {}))
    unknown = sorted(set(extra_params or {}) - set(notebook_parameters(py_path)))
    if unknown:
        raise ParamsError(f"{py_path.name}: no parameter {unknown[0]!r} in its parameters cell")
    stage_params.update(extra_params or {})
    output_dir = output_dir or paths.EXECUTED_NOTEBOOKS_DIR
    output_dir.mkdir(parents=True, exist_ok=True)
    out_path = output_dir / f"{py_path.stem}.ipynb"
    nb = to_ipynb(py_path)
    _quiet_papermill_parameter_guesses()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{py_path.stem}.ipynb"
        nbformat.write(nb, src)
        partial = output_dir / f".{py_path.stem}.partial.ipynb"
        start = time.perf_counter()
        try:
            pm.execute_notebook(
                str(src), str(partial), parameters=stage_params, kernel_name="python3",
                language="python", cwd=str(paths.ROOT), log_output=log_output,
                progress_bar=False, report_mode=False,
            )
        except Exception:
            # Keep the failed notebook beside the output for inspection, never as the output.
            if partial.exists():
                partial.replace(output_dir / f"{py_path.stem}.failed.ipynb")
            raise
        partial.replace(out_path)
    print(f"[stage {name}] {py_path.name} ran in {time.perf_counter() - start:.1f} s -> "
          f"{out_path.relative_to(paths.ROOT) if out_path.is_relative_to(paths.ROOT) else out_path}")
    return out_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.stage", description=__doc__.split("\n")[0])
    parser.add_argument("notebook", help="notebooks/NN_name.py")
    parser.add_argument("--log-output", action="store_true", help="stream cell output")
    args = parser.parse_args(argv)
    try:
        run_notebook(args.notebook, log_output=args.log_output)
    except ParamsError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
