"""The figure and table writer (ragcritic_lib.outputs): per-stage folders under reports/figures and
reports/tables, deterministic bytes."""

import struct

import pandas as pd
import pytest
import yaml

from ragcritic_lib import outputs, paths


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
