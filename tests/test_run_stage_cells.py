"""scripts/run_stage_cells.py: a stage's notebook code without Jupyter, with params.yaml's values."""

from __future__ import annotations

import pytest
from script_modules import load_script

NOTEBOOK = '''# ---
# jupyter: {}
# ---

# %% [markdown]
# # A stage
# words = "never run"

# %% tags=["parameters"]
rounds = 1
label = "default"

# %%
seen = [label] * rounds

# %% [markdown]
# ## Reading the numbers

# %%
done = True
'''


@pytest.fixture(scope="module")
def cells():
    return load_script("scripts/run_stage_cells.py")


def test_params_replace_the_defaults_right_after_the_parameters_cell(cells) -> None:
    said = []
    ns = cells.run_cells(NOTEBOOK, {"rounds": 2, "label": "from params"}, name="nb", say=said.append)
    assert ns["seen"] == ["from params", "from params"] and ns["done"] is True
    assert "words" not in ns  # markdown cells are not run
    assert len(said) == 3 and said[0].startswith("[nb] cell 1/3 done")


def test_it_stops_before_the_named_cell_and_names_a_failing_one(cells) -> None:
    said = []
    ns = cells.run_cells(NOTEBOOK, {}, name="nb", stop_before="done = True", say=said.append)
    assert ns["seen"] == ["default"] and "done" not in ns
    assert said[-1] == "[nb] stopped before cell 3 (it contains 'done = True')"
    with pytest.raises(RuntimeError, match=r"nb: cell 2 failed: TypeError"):
        cells.run_cells(NOTEBOOK, {"rounds": "x", "label": 1}, name="nb", say=lambda _: None)


def test_an_unknown_parameter_is_refused_before_anything_runs(cells) -> None:
    with pytest.raises(ValueError, match=r"nb: no parameter 'round' in its parameters cell"):
        cells.run_cells(NOTEBOOK, {"round": 2}, name="nb", say=lambda _: None)
    with pytest.raises(ValueError, match="expected one cell tagged 'parameters', found 0"):
        cells.run_cells(NOTEBOOK.replace('tags=["parameters"]', ""), {}, name="nb", say=lambda _: None)


def test_a_cell_that_needs_a_missing_ipython_is_skipped(cells, monkeypatch) -> None:
    monkeypatch.setattr(cells.importlib.util, "find_spec", lambda name: None)
    text = NOTEBOOK + "\n# %%\nfrom IPython.display import Markdown\nshown = Markdown('x')\n"
    said = []
    ns = cells.run_cells(text, {}, name="nb", say=said.append)
    assert "shown" not in ns and ns["done"] is True
    assert said[-1] == "[nb] cell 4 skipped: it displays through IPython, which is not installed"
