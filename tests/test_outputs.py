"""The figure and table writer (ragcritic_lib.pipeline.outputs) and the contract that every stage uses it:
per-stage folders under reports/figures and reports/tables, declared in dvc.yaml as one out each."""

import ast
import re
import struct

import pandas as pd
import pytest
import yaml

from ragcritic_lib import paths

from ragcritic_lib.pipeline import outputs
from ragcritic_lib.pipeline.params import notebook_paths


@pytest.fixture()
def reports(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "FIGURES_DIR", tmp_path / "reports" / "figures")
    monkeypatch.setattr(paths, "TABLES_DIR", tmp_path / "reports" / "tables")
    params = tmp_path / "params.yaml"
    params.write_text("analysis:\n  figure_dpi: 50\n")
    monkeypatch.setattr(paths, "PARAMS_FILE", params)
    return tmp_path / "reports"


def _figure(title="recall"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([1, 3, 5], [0.2, 0.5, 0.7], marker="o", label="bm25")
    ax.set(title=title)
    ax.legend()
    return fig


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_save_figure_writes_png_and_svg_into_the_stage_folder(reports):
    fig = _figure()
    png, svg = outputs.save_figure(fig, "01_retrieval_rag", "recall_at_k")
    assert (png, svg) == (reports / "figures" / "01_retrieval_rag" / "recall_at_k.png",
                          reports / "figures" / "01_retrieval_rag" / "recall_at_k.svg")
    assert _png_size(png) == (100, 50)  # 2 x 1 inches at params.yaml's analysis.figure_dpi (50)
    assert _png_size(outputs.save_figure(fig, "01_retrieval_rag", "big", dpi=80)[0]) == (160, 80)
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "<dc:date>" not in text and "Matplotlib v" not in text  # no date, no version
    assert b"Software" not in png.read_bytes() and b"matplotlib" not in png.read_bytes().lower()
    assert sorted(p.name for p in png.parent.iterdir()) == ["big.png", "big.svg", "recall_at_k.png", "recall_at_k.svg"]


def test_save_figure_is_byte_identical_on_a_second_call(reports):
    fig = _figure()
    png, svg = outputs.save_figure(fig, "02_error_sampling", "error_rate_by_member")
    first = (png.read_bytes(), svg.read_bytes())
    outputs.save_figure(fig, "02_error_sampling", "error_rate_by_member")
    assert (png.read_bytes(), svg.read_bytes()) == first
    outputs.save_figure(_figure(), "02_error_sampling", "error_rate_by_member")  # the same figure drawn anew
    assert (png.read_bytes(), svg.read_bytes()) == first


def test_default_dpi_comes_from_params(reports, monkeypatch, tmp_path):
    assert outputs.default_dpi() == 50
    monkeypatch.setattr(paths, "PARAMS_FILE", tmp_path / "absent.yaml")
    assert outputs.default_dpi() == outputs.FALLBACK_DPI == 120
    bad = tmp_path / "bad.yaml"
    bad.write_text("analysis:\n  figure_dpi: high\n")
    monkeypatch.setattr(paths, "PARAMS_FILE", bad)
    with pytest.raises(ValueError, match="analysis.figure_dpi"):
        outputs.default_dpi()


def test_project_dpi_is_the_notebooks_120():
    assert yaml.safe_load(paths.PARAMS_FILE.read_text())["analysis"]["figure_dpi"] == 120


def test_save_table_writes_csv_and_markdown(reports):
    frame = pd.DataFrame({"dataset": ["testbed", "trivia"], "errors": [6, 2]})
    csv, md = outputs.save_table(frame, "02_error_sampling", "source_statistics")
    assert (csv, md) == (reports / "tables" / "02_error_sampling" / "source_statistics.csv",
                         reports / "tables" / "02_error_sampling" / "source_statistics.md")
    assert csv.read_text() == "dataset,errors\ntestbed,6\ntrivia,2\n"
    assert md.read_text() == frame.to_markdown(index=False) + "\n"
    first = (csv.read_bytes(), md.read_bytes())
    assert outputs.save_table(frame, "02_error_sampling", "source_statistics") == [csv, md]
    assert (csv.read_bytes(), md.read_bytes()) == first
    indexed = frame.set_index("dataset")
    [only] = outputs.save_table(indexed, "07_benchmark", "benchmark", index=True, formats=("md",))
    assert only.name == "benchmark.md" and "testbed" in only.read_text()
    assert not (only.parent / "benchmark.csv").exists()
    [csv_only] = outputs.save_table(indexed, "07_benchmark", "benchmark", index=True, formats=("csv",))
    assert csv_only.read_text().startswith("dataset,errors\n")


def test_save_markdown(reports):
    path = outputs.save_markdown("# Cases\n\none\n---\n\ntwo", "08_correction", "case_studies")
    assert path == reports / "tables" / "08_correction" / "case_studies.md"
    assert path.read_text() == "# Cases\n\none\n---\n\ntwo"


@pytest.mark.parametrize(("stem", "name", "kwargs"), [
    ("retrieval_rag", "x", {}), ("01_retrieval_rag/..", "x", {}), ("01_retrieval_rag", "a/b", {}),
    ("01_retrieval_rag", "x.csv", {}), ("01_retrieval_rag", "", {}), ("01_retrieval_rag", "x", {"formats": ("html",)}),
    ("01_retrieval_rag", "x", {"formats": ()}),
])
def test_bad_names_are_refused_before_writing(reports, stem, name, kwargs):
    with pytest.raises(ValueError):
        outputs.save_table(pd.DataFrame({"a": [1]}), stem, name, **kwargs)
    assert not (reports / "tables").exists()


# --------------------------------------------------------------------------------------------
# Contract: notebooks write figures and tables only through the writer, into their own folders
# --------------------------------------------------------------------------------------------
_DIRECT_WRITE = re.compile(r"\.savefig\(|\.to_csv\(|\.to_markdown\(")
_REPORT_DIRS = re.compile(r"FIGURES_DIR|TABLES_DIR|reports/(figures|tables)")
_WRITERS = {"save_figure": "figures", "save_table": "tables", "save_markdown": "tables"}


def _writer_calls(nb):
    """(folder, stage_stem) of every writer call in a notebook; the stem must be a literal."""
    calls = []
    for node in ast.walk(ast.parse(nb.read_text(), filename=str(nb))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in _WRITERS:
            stem = node.args[1] if len(node.args) > 1 else None
            assert isinstance(stem, ast.Constant) and isinstance(stem.value, str), \
                f"{nb.name}:{node.lineno}: pass the stage stem as a string literal"
            calls.append((_WRITERS[node.func.id], stem.value))
    return calls


def test_notebooks_save_figures_and_tables_only_through_the_writer():
    for nb in notebook_paths().values():
        for lineno, line in enumerate(nb.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            assert not _DIRECT_WRITE.search(code), f"{nb.name}:{lineno}: use ragcritic_lib.pipeline.outputs: {line.strip()}"
            if _REPORT_DIRS.search(code):
                # Reading a stage's tables (notebook 15) is fine; writing there is the writer's job.
                assert "analysis.Inputs(" in code, f"{nb.name}:{lineno}: use ragcritic_lib.pipeline.outputs: {line.strip()}"


def _outs(stage):
    return {(o if isinstance(o, str) else next(iter(o))): ({} if isinstance(o, str) else next(iter(o.values())) or {})
            for o in stage.get("outs", [])}


def test_stage_figure_and_table_outs_are_per_stage_folders():
    dvc = yaml.safe_load(paths.DVC_FILE.read_text())
    notebooks = notebook_paths()
    declared = {}
    for name, stage in dvc["stages"].items():
        stem = notebooks[name].stem
        for out in _outs(stage):
            m = re.match(r"^reports/(figures|tables)(/.*)?$", out)
            if m:
                assert out == f"reports/{m.group(1)}/{stem}", f"stage {name}: {out} is not reports/{m.group(1)}/{stem}"
                declared[(m.group(1), stem)] = name
    used = set()
    for name, nb in notebooks.items():
        for folder, stem in _writer_calls(nb):
            assert stem == nb.stem, f"{nb.name} saves into another stage's folder ({stem})"
            assert (folder, stem) in declared, f"dvc.yaml stage {name} does not declare reports/{folder}/{stem}"
            used.add((folder, stem))
    assert used == set(declared), "a declared folder no notebook writes into"
    assert used >= {("figures", "01_retrieval_rag"), ("tables", "13_ragec"), ("tables", "14_comparison")}


def test_git_tracked_table_folders_are_uncached_and_not_ignored():
    """A folder kept in git must be ``cache: false`` in dvc.yaml (DVC refuses to cache a git-tracked
    path) and un-ignored in .gitignore; every cached one stays ignored."""
    dvc = yaml.safe_load(paths.DVC_FILE.read_text())
    ignore = paths.ROOT.joinpath(".gitignore").read_text().splitlines()
    assert "/reports/figures/" in ignore and "/reports/tables/*" in ignore
    for stage in dvc["stages"].values():
        for out, opts in _outs(stage).items():
            if not out.startswith(("reports/figures/", "reports/tables/")):
                continue
            unignored = f"!/{out}/" in ignore
            if opts.get("cache", True):
                assert not unignored, f"{out} is DVC-cached, so git must ignore it"
            else:
                assert out.startswith("reports/tables/") and unignored, f"{out} is cache: false: keep it in git"
    tracked = {"reports/tables/13_ragec/ragec_types.csv", "reports/tables/14_comparison/comparison.csv",
               "reports/tables/14_comparison/comparison.md"}
    assert all(paths.ROOT.joinpath(p).is_file() for p in tracked)
