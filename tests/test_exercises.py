"""Exercise notebooks from solution notebooks: marked regions replaced exactly, unmarked
notebooks unchanged, bad markers reported with file and line."""

from __future__ import annotations

import re

import pytest

from ragcritic_lib import paths

from ragcritic_lib.pipeline import exercises
from ragcritic_lib.io import DataFormatError

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")

HEADER = "# ---\n# jupyter:\n#   jupytext:\n#     formats: ipynb,py:percent\n# ---\n\n"

SOLUTION = HEADER + """# %% [markdown]
# # 01 · Retrieval
# Two sentences.
# BEGIN SOLUTION hint: markdown markers are left alone
# END SOLUTION

# %% tags=["parameters"]
top_k = 5

# %%
import math

# BEGIN SOLUTION hint: call recall_at_k for each retriever
rows = [math.sqrt(k) for k in range(top_k)]
total = sum(rows)
# END SOLUTION
total

# %%
for k in range(3):
    # BEGIN SOLUTION
    print(k)
    # END SOLUTION
print("done")
"""

EXERCISE = HEADER + """# %% [markdown]
# # 01 · Retrieval
# Two sentences.
# BEGIN SOLUTION hint: markdown markers are left alone
# END SOLUTION

# %% tags=["parameters"]
top_k = 5

# %%
import math

# TODO: call recall_at_k for each retriever
total

# %%
for k in range(3):
    # TODO: write the code for this step
    pass
print("done")
"""

PLAIN = HEADER + """# %% [markdown]
# # 02 · Plain
# No exercises here.

# %% tags=["parameters"]
n = 3

# %%
print(n)
"""


def test_marked_regions_replaced_exactly():
    result = exercises.make_exercise_text(SOLUTION, where="01_x.py")
    assert result.text == EXERCISE
    assert [(e.start, e.end, e.hint) for e in result.exercises] == [
        (19, 22, "call recall_at_k for each retriever"), (27, 29, "write the code for this step")]


def test_pass_only_where_needed():
    # A top-level region leaves a valid cell: no `pass` is added there.
    text = "# %%\nx = 1\n# BEGIN SOLUTION: add one\nx += 1\n# END SOLUTION\n"
    assert exercises.make_exercise_text(text).text == "# %%\nx = 1\n# TODO: add one\n"


def test_unmarked_notebook_unchanged(tmp_path):
    assert exercises.make_exercise_text(PLAIN).text == PLAIN
    (tmp_path / "02_plain.py").write_text(PLAIN)
    counts = exercises.build(tmp_path, tmp_path / "ex")
    assert counts == {"02_plain": 0}
    nb = nbformat.read(tmp_path / "ex" / "02_plain.ipynb", as_version=4)
    solution = jupytext.read(tmp_path / "02_plain.py", fmt="py:percent")
    assert [(c.cell_type, c.source, c.metadata.get("tags")) for c in nb.cells] == \
        [(c.cell_type, c.source, c.metadata.get("tags")) for c in solution.cells]


@pytest.mark.parametrize("body, line, message", [
    ("# %%\n# BEGIN SOLUTION\nx = 1\n", 2, "without an END SOLUTION"),
    ("# %%\nx = 1\n# END SOLUTION\n", 3, "without a BEGIN SOLUTION"),
    ("# %%\n# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", 3, "inside the region opened at line 2"),
    ("# %%\n# BEGIN SOLUTION\nx = 1\n# %%\n# END SOLUTION\n", 2, "before the cell ends"),
])
def test_unbalanced_markers_name_file_and_line(body, line, message):
    with pytest.raises(DataFormatError, match=rf"^03_bad\.py:{line}: .*{message}"):
        exercises.make_exercise_text(body, where="03_bad.py")


def test_build_writes_stripped_unpaired_exercises_and_reports(tmp_path, capsys):
    (tmp_path / "01_retrieval.py").write_text(SOLUTION)
    (tmp_path / "02_plain.py").write_text(PLAIN)
    (tmp_path / "helper.py").write_text("x = 1\n")  # not a stage notebook: ignored
    assert exercises.main(["build", "--notebooks-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "01_retrieval: 2 exercises" in printed and "02_plain: no exercises" in printed
    assert sorted(p.name for p in (tmp_path / "exercises").iterdir()) == ["01_retrieval.ipynb", "02_plain.ipynb"]
    nb = nbformat.read(tmp_path / "exercises" / "01_retrieval.ipynb", as_version=4)
    assert "jupytext" not in nb.metadata and nb.metadata["kernelspec"]["name"] == "python3"
    assert "Fill in the 2 places marked `# TODO`; the solution is `../01_retrieval.ipynb`." in nb.cells[0].source
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert code[1] == "import math\n\n# TODO: call recall_at_k for each retriever\ntotal"
    assert all(c.outputs == [] and c.execution_count is None for c in nb.cells if c.cell_type == "code")
    assert nb.cells[1].metadata["tags"] == ["parameters"]


def test_check_command_fails_on_bad_markers(tmp_path, capsys):
    (tmp_path / "04_bad.py").write_text("# %%\n# END SOLUTION\n")
    assert exercises.main(["check", "--notebooks-dir", str(tmp_path)]) == 2
    assert "04_bad.py:2: END SOLUTION without a BEGIN SOLUTION" in capsys.readouterr().err


def test_repository_notebooks_build(tmp_path):
    counts = exercises.build(paths.NOTEBOOKS_DIR, tmp_path)
    stems = {p.stem for p in paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py")}
    assert set(counts) == stems and {p.stem for p in tmp_path.glob("*.ipynb")} == stems


def test_set_parameters_rewrites_only_named_literals():
    text = '# %% [markdown]\n# # T\n\n# %% tags=["parameters"]\nn = 3\nname = "a"  # note\nflag = True\n\n# %%\nn = 4\n'
    out = exercises.set_parameters(text, {"n": 9, "name": 'say "hi"', "other": 1})
    assert out == ('# %% [markdown]\n# # T\n\n# %% tags=["parameters"]\nn = 9\nname = "say \\"hi\\""\nflag = True\n'
                   '\n# %%\nn = 4\n')
    with pytest.raises(DataFormatError, match="x.py: no cell tagged parameters"):
        exercises.set_parameters("# %%\nn = 1\n", {"n": 2}, where="x.py")
    with pytest.raises(DataFormatError, match="must be a scalar"):
        exercises.set_parameters(text, {"n": [1]})


def test_build_with_params_sets_parameters_and_writes_solutions(tmp_path):
    (tmp_path / "01_retrieval.py").write_text(SOLUTION)
    (tmp_path / "02_plain.py").write_text(PLAIN)
    exercises.build(tmp_path, tmp_path / "ex", params={"retrieval": {"top_k": 2}, "plain": {"n": 7}})
    ex = nbformat.read(tmp_path / "ex" / "01_retrieval.ipynb", as_version=4)
    sol = nbformat.read(tmp_path / "ex" / "01_retrieval.solution.ipynb", as_version=4)
    assert ex.cells[1].source == sol.cells[1].source == "top_k = 2"
    assert "# BEGIN SOLUTION hint: call recall_at_k" in sol.cells[2].source and "# TODO" not in sol.cells[2].source
    assert nbformat.read(tmp_path / "ex" / "02_plain.ipynb", as_version=4).cells[1].source == "n = 7"
    assert ex.cells[0].source.endswith("the solution is `01_retrieval.solution.ipynb`.")


def test_workshop_profile_merges_over_params():
    merged = exercises.profile_params("workshop")
    assert merged["retrieval_rag"]["eval_questions"] == 20
    assert merged["retrieval_rag"]["top_k"] == exercises.profile_params()["retrieval_rag"]["top_k"]
    assert merged["comparison"]["test_questions"] <= merged["correction"]["n_questions"]


def _dvc_stage_notebooks():
    """Notebook paths named by the stage commands in dvc.yaml (``... -m ragcritic_lib.pipeline.stage <notebook>``)."""
    import yaml

    stages = yaml.safe_load(paths.DVC_FILE.read_text(encoding="utf-8"))["stages"]
    found = []
    for stage in stages.values():
        words = str(stage["cmd"]).split()
        if "ragcritic_lib.pipeline.stage" in words:
            found.append(paths.ROOT / words[words.index("ragcritic_lib.pipeline.stage") + 1])
    return sorted(found)


def test_every_stage_notebook_has_exercises_and_builds_valid_python():
    notebooks = [nb for nb in _dvc_stage_notebooks() if nb.stem not in ("00_assets", "00_testbed")]
    assert len(notebooks) >= 15, "dvc.yaml stage commands should name the stage notebooks"
    without = []
    for py in notebooks:
        nb, found = exercises.exercise_notebook(py)
        if not found:
            without.append(py.stem)
        source = jupytext.writes(nb, fmt="py:percent")
        compile(source, f"exercises/{py.stem}.py", "exec")  # raises SyntaxError naming the notebook
        assert "BEGIN SOLUTION" not in "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert without == [], f"stage notebooks without an exercise region: {without}"


def test_workshop_table_counts_the_exercises_each_notebook_has():
    """docs/workshop.md's per-notebook table states how many exercises each notebook holds; a
    notebook that gains or loses one must take the table with it."""
    text = (paths.ROOT / "docs" / "workshop.md").read_text(encoding="utf-8")
    header = "| notebook | what it does | exercises |"
    assert header in text, f"docs/workshop.md has no table headed {header!r}"
    table = text.split(header, 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `(\d\d_\w+)` \|.*\| (\d+|none) \|$", table, flags=re.M))
    counts = {stem: len(found) for stem, found in exercises.check().items()}
    stated = {stem: 0 if n == "none" else int(n) for stem, n in rows.items()}
    assert stated == counts
