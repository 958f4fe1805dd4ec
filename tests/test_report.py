"""The static HTML report, built from a reports/ folder the test writes (two tiny executed
notebooks, one failed notebook, a figure, tables, metrics and an analysis index)."""

from __future__ import annotations

import base64
import json
import re

import pytest

from ragcritic_lib.pipeline import html_report as report

nbformat = pytest.importorskip("nbformat")

# A 1x1 PNG, so the embedded output and the figure copy are real images.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def _executed_notebook(title: str, value: str):
    v4 = nbformat.v4
    nb = v4.new_notebook()
    nb.cells = [
        v4.new_markdown_cell(f"# {title}\nWhat this stage does."),
        v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}, execution_count=1),
        v4.new_code_cell("x + 1", execution_count=2, outputs=[
            v4.new_output("execute_result", {"text/plain": value}, execution_count=2),
            v4.new_output("display_data", {"image/png": base64.b64encode(PNG).decode(), "text/plain": "<Figure>"})]),
    ]
    return nb


@pytest.fixture()
def reports(tmp_path):
    root = tmp_path / "repo"
    src = root / "notebooks"
    src.mkdir(parents=True)
    for stem in ("00_assets", "01_retrieval_rag", "02_error_sampling", "15_analysis"):
        (src / f"{stem}.py").write_text("# %% [markdown]\n# # t\n")
    rep = root / "reports"
    nbdir = rep / "notebooks"
    nbdir.mkdir(parents=True)
    nbformat.write(_executed_notebook("00 · Embedded-default assets", "SENTINEL-A"), nbdir / "00_assets.ipynb")
    nbformat.write(_executed_notebook("01 · Retrieval & <RAG>", "SENTINEL-B"), nbdir / "01_retrieval_rag.ipynb")
    nbformat.write(_executed_notebook("02 · Error sampling", "SENTINEL-C"), nbdir / "02_error_sampling.failed.ipynb")
    nbformat.write(_executed_notebook("partial", "x"), nbdir / ".03_tagging.partial.ipynb")
    (rep / "figures" / "01_retrieval_rag").mkdir(parents=True)  # one folder per stage (ragcritic_lib.pipeline.outputs)
    (rep / "figures" / "01_retrieval_rag" / "recall_at_k.png").write_bytes(PNG)
    (rep / "figures" / "01_retrieval_rag" / "recall_at_k.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    for stage in ("02_error_sampling", "08_correction", "09_self_refine"):
        (rep / "tables" / stage).mkdir(parents=True)
    (rep / "tables" / "02_error_sampling" / "source_statistics.md").write_text(
        "| dataset | errors |\n|---|---|\n| testbed | 6 |\n")
    (rep / "tables" / "02_error_sampling" / "source_statistics.csv").write_text("dataset,errors\ntestbed,6\n")
    (rep / "tables" / "09_self_refine" / "costs.csv").write_text("method,calls\ncrag,<b>12</b>\n")
    (rep / "tables" / "08_correction" / "case_studies.md").write_text("Model said: <script>alert(1)</script>\n")
    (rep / "metrics").mkdir()
    (rep / "metrics" / "01_retrieval_rag.json").write_text(json.dumps({"rag": {"testbed": {"test": {"f1": 0.4}}}}))
    an = rep / "analysis"
    (an / "tables").mkdir(parents=True)
    (an / "figures").mkdir()
    (an / "tables" / "table6_iterations.md").write_text("### Iterations\n\n| Round | F1 |\n|---|---|\n| + 1 iteration | 60.0 |\n")
    (an / "figures" / "table6_iterations.png").write_bytes(PNG)
    (an / "index.json").write_text(json.dumps({"items": [
        {"id": "table6_iterations", "paper": "RAG-Critic Table 6", "title": "Iterations", "status": "built",
         "files": ["reports/analysis/tables/table6_iterations.md", "reports/analysis/figures/table6_iterations.png"],
         "missing": []},
        {"id": "simrag_fig3_confusion", "paper": "SIM-RAG Fig. 3", "title": "Confusion", "status": "missing", "files": [],
         "missing": [{"input": "reports/metrics/11_simrag.json", "key": None, "reason": "file not found"}]}]}))
    return root


def _links(page: str) -> set[str]:
    return set(re.findall(r'href="([^"]+)"', page)) | set(re.findall(r'src="([^"]+)"', page))


def test_report_links_executed_notebooks_and_lists_missing(reports):
    out = reports / "reports" / "html"
    s = report.build_report(reports / "reports", notebooks_dir=reports / "notebooks")
    index = (out / "index.html").read_text()
    assert s.notebooks == ["notebooks/00_assets.html", "notebooks/01_retrieval_rag.html"]
    assert s.failed == ["02_error_sampling"] and s.missing_notebooks == ["15_analysis"]
    links = _links(index)
    assert {"notebooks/00_assets.html", "notebooks/01_retrieval_rag.html", "notebooks/02_error_sampling.failed.html",
            "tables.html", "metrics.html", "figures/stages/01_retrieval_rag/recall_at_k.png",
            "figures/stages/01_retrieval_rag/recall_at_k.svg", "figures/analysis/table6_iterations.png",
            "tables.html#analysis-table6-iterations"} <= links
    assert 'id="fig-01-retrieval-rag-recall-at-k"' in index and 'id="fig-table6-iterations"' in index
    # Every local link of the index resolves to a file of the report.
    for href in links:
        if not href.startswith(("#", "http")):
            assert (out / href.split("#")[0]).is_file(), href
    assert "15_analysis.ipynb not found" in index and "03_tagging" not in index  # partial files are not notebooks
    assert "01 · Retrieval &amp; &lt;RAG&gt;" in index
    assert "RAG-Critic Table 6" in index and "SIM-RAG Fig. 3" in index
    assert "reports/metrics/11_simrag.json: file not found" in index
    assert s.missing_items == ["simrag_fig3_confusion"]


def test_rendered_notebooks_are_offline_and_embed_outputs(reports):
    out = reports / "reports" / "html"
    report.build_report(reports / "reports", notebooks_dir=reports / "notebooks")
    page = (out / "notebooks" / "00_assets.html").read_text()
    assert "SENTINEL-A" in page and "data:image/png;base64," in page
    assert not re.search(r'<script[^>]*src="https?://', page)
    failed = (out / "notebooks" / "02_error_sampling.failed.html").read_text()
    assert "SENTINEL-C" in failed and "02_error_sampling failed" in failed


def test_tables_page_renders_markdown_and_csv_escaped(reports):
    out = reports / "reports" / "html"
    s = report.build_report(reports / "reports", notebooks_dir=reports / "notebooks")
    page = (out / "tables.html").read_text()
    assert "<td>testbed</td>" in page and "<th>errors</th>" in page  # Markdown table rendered
    assert "<td>&lt;b&gt;12&lt;/b&gt;</td>" in page  # CSV without a Markdown twin, escaped
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert (out / "tables" / "stages" / "02_error_sampling" / "source_statistics.csv").read_text() == \
        "dataset,errors\ntestbed,6\n"
    assert 'id="stages-02-error-sampling-source-statistics"' in page
    assert _links(page) >= {"tables/stages/02_error_sampling/source_statistics.csv", "tables/stages/09_self_refine/costs.csv"}
    assert len(s.tables) == 4
    assert "0.4" in (out / "metrics.html").read_text()


def test_report_from_an_empty_reports_folder(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_retrieval_rag.py").write_text("")
    s = report.build_report(tmp_path / "reports", notebooks_dir=tmp_path / "notebooks")
    index = (tmp_path / "reports" / "html" / "index.html").read_text()
    assert s.notebooks == [] and s.missing_notebooks == ["01_retrieval_rag"]
    assert "reports/analysis/index.json not found: the analysis stage (notebook 15)" in index and "No figures." in index


def test_rebuild_drops_stale_files(reports):
    out = reports / "reports" / "html"
    report.build_report(reports / "reports", notebooks_dir=reports / "notebooks")
    (reports / "reports" / "notebooks" / "00_assets.ipynb").unlink()
    s = report.build_report(reports / "reports", notebooks_dir=reports / "notebooks")
    assert not (out / "notebooks" / "00_assets.html").exists()
    assert "00_assets" in s.missing_notebooks


def test_strip_remote_scripts():
    text = '<script src="https://cdn.x/require.js"></script><script>local()</script><script src="local.js"></script>'
    assert report.strip_remote_scripts(text) == '<script>local()</script><script src="local.js"></script>'
