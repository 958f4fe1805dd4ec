"""The headless stage runner talks: cell headers, the notebook's own output and tqdm bars as text,
and no kernel warning about unencrypted local TCP. A tiny notebook in a temporary folder (no models)."""

import nbformat
import pytest

from ragcritic_lib.pipeline import stage

TINY = '''# %% [markdown]
# # Tiny
# A notebook for the runner.

# %% tags=["parameters"]
n = 3
metrics_file = ""

# %% [markdown]
# ## Counting

# %%
from tqdm.auto import tqdm
for i in tqdm(range(n), desc="counting"):
    pass
print("counted", n)

# %%
import sys  # the first line of code names the cell
print("to stderr", file=sys.stderr)
import transformers.utils
print("transformers sees a notebook:", transformers.utils.is_in_notebook())
if metrics_file:
    with open(metrics_file, "w") as fh:
        fh.write('{"environment": {"python": "3"}, "f1": 0.5}')
'''


@pytest.fixture
def tiny(tmp_path):
    (tmp_path / "nb").mkdir()
    path = tmp_path / "nb" / "99_tiny.py"
    path.write_text(TINY, encoding="utf-8")
    return path


def test_cell_label_prefers_the_heading_above_then_the_first_line_of_code():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("Some words\n## Counting\nmore"),
        nbformat.v4.new_code_cell("# a comment\n\nx = 1\ny = 2"),
        nbformat.v4.new_code_cell("# only a comment"),
        nbformat.v4.new_code_cell(""),
    ])
    assert stage.cell_label(nb.cells, 1) == "## Counting"
    assert stage.cell_label(nb.cells, 2) == "# only a comment"
    assert stage.cell_label(nb.cells, 3) == "(empty)"
    nb.cells[0].source = "no heading"
    assert stage.cell_label(nb.cells, 1) == "x = 1"


def test_a_stage_prints_its_cells_and_streams_output_and_text_bars(tiny, tmp_path, capfd):
    out = stage.run_notebook(tiny, output_dir=tmp_path / "out")
    printed = "".join(capfd.readouterr())
    assert "[stage tiny] cell 1/3: # Tiny" in printed
    assert "[stage tiny] cell 2/3: ## Counting" in printed
    assert "[stage tiny] cell 3/3: import sys  # the first line of code names the cell" in printed
    assert "counted 3" in printed and "to stderr" in printed
    assert "counting: 100%" in printed and "3/3" in printed       # tqdm.auto, as text
    assert "transformers sees a notebook: False" in printed       # trainers print text progress
    assert stage.KERNEL_TCP_WARNING not in printed
    executed = nbformat.read(out, as_version=4)
    outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    assert any("counting: 100%" in o.get("text", "") for o in outputs)


def test_quiet_prints_only_the_closing_line(tiny, tmp_path, capfd):
    stage.run_notebook(tiny, output_dir=tmp_path / "out", quiet=True)
    printed = "".join(capfd.readouterr())
    assert "cell 1/3" not in printed and "counted 3" not in printed
    assert stage.KERNEL_TCP_WARNING not in printed
    assert "[stage tiny] 99_tiny.py ran in" in printed


def test_the_runner_records_the_stage_wall_time_in_its_metrics(tiny, tmp_path, monkeypatch):
    from ragcritic_lib import paths
    from ragcritic_lib.io import read_json

    metrics = tmp_path / "metrics" / "99_tiny.json"
    metrics.parent.mkdir()
    monkeypatch.setattr(paths, "NOTEBOOKS_DIR", tiny.parent)
    monkeypatch.setattr(paths, "METRICS_DIR", metrics.parent)
    stage.run_notebook(tiny, output_dir=tmp_path / "out", extra_params={"metrics_file": str(metrics)}, quiet=True)
    data = read_json(metrics)
    assert data["f1"] == 0.5 and data["environment"]["python"] == "3"
    assert data["environment"]["wall_seconds"] > 0


def test_a_stage_process_skips_the_iri_grammar_and_still_validates_notebooks():
    """In a fresh process, as a stage runs: jsonschema comes without its IRI checker, nbformat
    still accepts a valid notebook and rejects a broken one, and other formats are still checked."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ragcritic_lib.pipeline.stage import skip_iri_grammar\n"
        "skip_iri_grammar()\n"
        "import jsonschema, nbformat\n"
        "assert sys.modules['rfc3987_syntax'] is None\n"
        "assert 'iri' not in jsonschema.FormatChecker.checkers and 'email' in jsonschema.FormatChecker.checkers\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1 + 1')])\n"
        "nbformat.validate(nb)\n"
        "del nb.cells[0]['source']\n"
        "try:\n"
        "    nbformat.validate(nb)\n"
        "except nbformat.ValidationError:\n"
        "    print('rejected')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "rejected"


def test_skipping_the_iri_grammar_changes_nothing_once_jsonschema_is_loaded(monkeypatch):
    import sys

    import jsonschema  # noqa: F401 - loaded, as in this test process

    monkeypatch.delitem(sys.modules, "rfc3987_syntax", raising=False)
    stage.skip_iri_grammar()
    assert "rfc3987_syntax" not in sys.modules
