"""The library's layout: no import cycles, modules short enough to read, tooling apart from research."""

from __future__ import annotations

from pathlib import Path

from ragcritic_lib import paths
from ragcritic_lib.pipeline.deps import import_cycles, import_graph

# Modules allowed past MAX_LINES, each because it holds one concept that splitting would scatter.
LONG_MODULES = {
    "ragcritic_lib/agent/executor.py": "the restricted executor: one safety boundary, read as a whole",
    "ragcritic_lib/agent/actions.py": "the five action functions and the state they share",
    "ragcritic_lib/critic/critics.py": "the critic's prompt, target, parser and loaders (one format, kept together)",
    "ragcritic_lib/baselines/ragec.py": "RAGEC's predictor, diagnosis and correction (one method)",
    "ragcritic_lib/baselines/repair.py": "RePAIR's plan grammar, preferences, DPO rounds, decoding rules and reports (one method)",
    "ragcritic_lib/evaluation/readings.py": "one reading per stage, on shared number-formatting helpers",
    "ragcritic_lib/pipeline/params.py": "params.yaml's rules table and its checker",
    "ragcritic_lib/pipeline/readme.py": "one renderer per generated block of README and docs, on shared formatting helpers",
    "ragcritic_lib/pipeline/metrics_schema.py": "the schema of every stage's metrics file",
    "ragcritic_lib/critic/train.py": ("the cached critic trainer: one split model shared by SFT, DPO, "
                                      "the method comparison and the shipped form's check"),
}
MAX_LINES = 800
# The pipeline's runner tooling; research code (steps, agent, baselines, evaluation) never needs it.
RUNNER_TOOLING = ("stage", "deps", "notebooks", "exercises", "html_report", "workspace", "readme", "profiles",
                  "shipping")


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_library_has_no_import_cycles():
    assert import_cycles(import_graph()) == []


def test_cycles_through_lazy_and_check_only_imports_are_found(tmp_path):
    _write(tmp_path, "ragcritic_lib/__init__.py", "")
    _write(tmp_path, "ragcritic_lib/a.py", "from ragcritic_lib import b\n")
    _write(tmp_path, "ragcritic_lib/b.py", "def f():\n    from ragcritic_lib.a import x  # deps: check-only\n")
    _write(tmp_path, "ragcritic_lib/c.py", "from . import d\n")
    _write(tmp_path, "ragcritic_lib/d.py", "def g():\n    from .c import y\n")
    _write(tmp_path, "ragcritic_lib/e.py", "from ragcritic_lib import a\n")
    _write(tmp_path, "ragcritic_lib/pkg/__init__.py", "from ragcritic_lib.pkg import inner\n")
    _write(tmp_path, "ragcritic_lib/pkg/inner.py", "from ragcritic_lib.pkg import helper\n")
    _write(tmp_path, "ragcritic_lib/pkg/helper.py", "x = 1\n")
    graph = import_graph(tmp_path)
    assert graph["ragcritic_lib.e"] == {"ragcritic_lib.a"}
    # A package's __init__ importing its submodules, which import their siblings, is no cycle.
    assert import_cycles(graph) == [["ragcritic_lib.a", "ragcritic_lib.b"], ["ragcritic_lib.c", "ragcritic_lib.d"]]


def test_a_module_importing_itself_is_a_cycle():
    assert import_cycles({"m": {"m"}, "n": set()}) == [["m"]]


def test_modules_stay_short_enough_to_read():
    lengths = {f.relative_to(paths.ROOT).as_posix(): len(f.read_text(encoding="utf-8").splitlines())
               for f in (paths.ROOT / "ragcritic_lib").rglob("*.py")}
    too_long = {f: n for f, n in lengths.items() if n > MAX_LINES and f not in LONG_MODULES}
    assert not too_long, f"split these modules or say in LONG_MODULES why they are one concept: {too_long}"
    stale = sorted(f for f in LONG_MODULES if lengths.get(f, 0) <= MAX_LINES)
    assert not stale, f"no longer over {MAX_LINES} lines (or gone): drop from LONG_MODULES: {stale}"


def test_research_code_does_not_import_the_pipeline_runner():
    tooling = {f"ragcritic_lib.pipeline.{m}" for m in RUNNER_TOOLING}
    offenders = {m: sorted(e & tooling) for m, e in import_graph().items()
                 if not m.startswith("ragcritic_lib.pipeline") and e & tooling}
    assert offenders == {}


def test_every_documented_module_command_names_a_module():
    """``python -m ragcritic_lib....`` in the docs, Makefile, configs, CI and scripts runs a real module."""
    import importlib.util
    import re

    sources = [paths.ROOT / name for name in ("README.md", "Makefile", "dvc.yaml", ".ci/run")]
    for pattern in ("docs/*.md", "configs/**/*.yaml", "scripts/*", "benchmarks/*.py", "data/README.md"):
        sources += sorted(paths.ROOT.glob(pattern))
    named = {(f.relative_to(paths.ROOT).as_posix(), m)
             for f in sources if f.is_file()
             for m in re.findall(r"python -m (ragcritic_lib[\w.]*)", f.read_text(encoding="utf-8"))}
    assert named, "no module command found: the scan is broken"
    missing = sorted((f, m) for f, m in named if importlib.util.find_spec(m) is None)
    assert not missing, f"commands naming modules that do not exist: {missing}"
