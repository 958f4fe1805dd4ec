"""Run one notebook as a pipeline stage: ``python -m ragcritic_lib.pipeline.stage notebooks/NN_name.py``.

1. params.yaml is validated as a whole (one clear error before any compute);
2. the jupytext twin is converted to a notebook in memory;
3. papermill executes it headlessly with the stage's params section injected after the
   ``parameters`` cell, working directory = repository root;
4. the executed notebook is written (atomically) to ``reports/notebooks/NN_name.ipynb``, and the
   stage's wall time to ``environment.wall_seconds`` of its metrics file.

While it runs, the stage talks: it prints each code cell as it starts (number/total and the
markdown heading above it, or its first line of code) and streams the notebook's stdout and
stderr, its tqdm bars included as text (``tqdm.auto`` would draw widgets no terminal shows). The
kernel's start-up warning that its local TCP sockets are unencrypted is dropped. ``--quiet``
prints only the closing line.

This is the ``cmd`` of every stage in dvc.yaml.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import threading
import tempfile
import time
from pathlib import Path

from ragcritic_lib import paths
from ragcritic_lib.pipeline.params import ParamsError, load_params, notebook_parameters, notebook_paths

# The kernel says this once at start-up on every run: it talks to the runner over local TCP.
KERNEL_TCP_WARNING = "Kernel is running over TCP without encryption."
# Run in the kernel before the first cell (not a cell, so the executed notebook is unchanged):
# tqdm.auto renders text bars, and transformers' trainers their text progress callback instead of
# an HTML table, so progress streams to the terminal and the executed notebook alike.
_TEXT_PROGRESS = [
    "import tqdm.auto, tqdm.autonotebook, tqdm.std; "
    "tqdm.auto.tqdm = tqdm.autonotebook.tqdm = tqdm.std.tqdm; "
    "tqdm.auto.trange = tqdm.autonotebook.trange = tqdm.std.trange",
    "try:\n    import transformers.utils as _tu\nexcept ImportError:\n    pass\nelse:\n"
    "    _tu.is_in_notebook = _tu.import_utils.is_in_notebook = lambda: False\n    del _tu",
]


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


def cell_label(cells: list, index: int) -> str:
    """What to call code cell ``index``: the heading of a markdown cell right above it, else its
    first line of code (comments and blank lines skipped)."""
    above = cells[index - 1] if index > 0 else None
    if above is not None and above.cell_type == "markdown":
        heading = next((ln.strip() for ln in above.source.splitlines() if ln.startswith("#")), None)
        if heading:
            return heading
    lines = [ln.strip() for ln in cells[index].source.splitlines()]
    return next((ln for ln in lines if ln and not ln.startswith("#")), next((ln for ln in lines if ln), "(empty)"))


def _announcing(engine_base):
    """A papermill engine that prints ``[stage NAME] cell k/n: LABEL`` as each code cell starts."""

    class Announcing(engine_base):
        stage = "?"

        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
            cells = nb_man.nb.cells
            code = [i for i, c in enumerate(cells) if c.cell_type == "code"]
            start = nb_man.cell_start

            def cell_start(cell, cell_index=None, **kw):
                if cell_index in code:
                    print(f"[stage {cls.stage}] cell {code.index(cell_index) + 1}/{len(code)}: "
                          f"{cell_label(cells, cell_index)}", flush=True)
                return start(cell, cell_index, **kw)

            nb_man.cell_start = cell_start
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    return Announcing


def _forward_kernel_stderr(stream, out) -> None:
    for line in iter(stream.readline, b""):
        if KERNEL_TCP_WARNING.encode() not in line:
            out.buffer.write(line) if hasattr(out, "buffer") else out.write(line.decode(errors="replace"))
            out.flush()
    stream.close()


def _quiet_kernel_manager():
    """The kernel manager papermill starts the kernel with, reading the kernel process's own
    stderr through a filter that drops :data:`KERNEL_TCP_WARNING` and passes the rest on."""
    from jupyter_client import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw):
            kw.setdefault("stderr", subprocess.PIPE)
            await super().start_kernel(**kw)
            process = getattr(self.provisioner, "process", None)
            if process is not None and process.stderr is not None:
                threading.Thread(target=_forward_kernel_stderr, args=(process.stderr, sys.stderr),
                                 daemon=True).start()

    return QuietKernelManager


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


def skip_iri_grammar() -> None:
    """Spare this process a grammar no notebook needs. nbformat's validator imports jsonschema,
    which, when the optional rfc3987-syntax package is installed (jupyter-events brings it), builds
    a Lark grammar for RFC 3987 IRIs at import: about 1 s in every stage's process on 2 cores.
    No notebook schema checks an IRI format, so the process does without that one checker: a
    ``None`` entry in ``sys.modules`` makes the import fail, as jsonschema expects when the package
    is absent. Nothing changes once jsonschema is imported."""
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)


def run_notebook(py_path: str | os.PathLike[str], *, output_dir: Path | None = None,
                 extra_params: dict | None = None, quiet: bool = False) -> Path:
    """Execute one notebook twin with its params section; returns the executed notebook path.

    Args:
        quiet: print no cell headers and no notebook output (only the closing line).
    """
    skip_iri_grammar()
    import nbformat
    import papermill as pm
    from papermill.engines import NBClientEngine, papermill_engines

    from ragcritic_lib.pipeline.stage_metrics import record_wall_seconds

    start = time.perf_counter()
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
        engine = _announcing(NBClientEngine)
        engine.stage = name
        papermill_engines.register("ragcritic_stage", engine)
        talk = {} if quiet else {"stdout_file": sys.stdout, "stderr_file": sys.stderr}
        try:
            pm.execute_notebook(
                str(src), str(partial), parameters=stage_params, kernel_name="python3",
                language="python", cwd=str(paths.ROOT), progress_bar=False, report_mode=False,
                engine_name="ragcritic_stage" if not quiet else None,
                kernel_manager_class=_quiet_kernel_manager(),
                extra_arguments=[f"--IPKernelApp.exec_lines={line}" for line in _TEXT_PROGRESS], **talk,
            )
        except Exception:
            # Keep the failed notebook beside the output for inspection, never as the output.
            if partial.exists():
                partial.replace(output_dir / f"{py_path.stem}.failed.ipynb")
            raise
        partial.replace(out_path)
    elapsed = time.perf_counter() - start
    if py_path.parent == paths.NOTEBOOKS_DIR.resolve():
        record_wall_seconds(py_path.stem, elapsed)
    print(f"[stage {name}] {py_path.name} ran in {elapsed:.1f} s -> "
          f"{out_path.relative_to(paths.ROOT) if out_path.is_relative_to(paths.ROOT) else out_path}")
    return out_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.stage", description=__doc__.split("\n")[0])
    parser.add_argument("notebook", help="notebooks/NN_name.py")
    parser.add_argument("--quiet", action="store_true", help="print no cell headers and no notebook output")
    args = parser.parse_args(argv)
    try:
        run_notebook(args.notebook, quiet=args.quiet)
    except ParamsError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
