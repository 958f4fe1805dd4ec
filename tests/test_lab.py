"""Opening the lab changes no tracked file, and saving an unchanged notebook keeps its .py twin
byte for byte (the .py twins are stage dependencies: a changed byte calls a stage changed)."""

import asyncio
import shutil
import subprocess

import pytest

from ragcritic_lib import paths
from ragcritic_lib.pipeline import notebooks

SOURCES = sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py"))


def _config():
    from jupytext.config import find_jupytext_configuration_file, load_jupytext_configuration_file

    found = find_jupytext_configuration_file(str(paths.NOTEBOOKS_DIR))
    assert found is not None and found.startswith(str(paths.NOTEBOOKS_DIR)), found
    return load_jupytext_configuration_file(found)


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.name)
def test_jupytext_writes_each_twin_back_byte_for_byte(py):
    import jupytext

    config = _config()
    text = py.read_text(encoding="utf-8")
    assert jupytext.writes(jupytext.reads(text, fmt="py:percent", config=config), fmt="py:percent",
                           config=config) == text


def test_saving_in_jupyterlab_keeps_every_py_twin(tmp_path):
    """jupytext's contents manager (what JupyterLab saves through), rooted at notebooks/ as under
    `make lab`: open each .py as a notebook, add what a kernel and the lab add, save."""
    import jupytext

    shutil.copytree(paths.NOTEBOOKS_DIR, tmp_path / "notebooks", ignore=shutil.ignore_patterns("*.ipynb"))
    cm = jupytext.AsyncTextFileContentsManager(root_dir=str(tmp_path / "notebooks"))

    async def open_and_save(name):
        nb = (await cm.get(name, content=True, type="notebook"))["content"]
        nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.7"}
        for cell in nb["cells"]:
            cell["metadata"].update(trusted=True, execution={"iopub.status.busy": "2026-01-01T00:00:00"})
            if cell["cell_type"] == "code":
                cell.update(execution_count=1, outputs=[{"output_type": "stream", "name": "stdout", "text": "x\n"}])
        await cm.save({"type": "notebook", "format": "json", "content": nb}, name)

    for py in SOURCES:
        asyncio.run(open_and_save(py.name))
        assert (tmp_path / "notebooks" / py.name).read_bytes() == py.read_bytes(), py.name
        assert (tmp_path / "notebooks" / py.with_suffix(".ipynb").name).exists()  # the pairing holds


def test_the_lab_target_syncs_nothing():
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    dry = subprocess.run([make, "-n", "-o", "install", "lab"], cwd=paths.ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert "--sync" not in dry and "notebooks sync" not in dry
    assert "ragcritic_lib.pipeline.notebooks prepare" in dry


def test_prepare_writes_only_missing_or_stale_twins(tmp_path):
    for py in SOURCES[:3]:
        shutil.copy(py, tmp_path / py.name)
    fresh, stale, missing = (tmp_path / p.name for p in SOURCES[:3])
    assert notebooks.prepare(tmp_path) == [notebooks.twin_of(p) for p in (fresh, stale, missing)]
    notebooks.twin_of(missing).unlink()
    stale.write_text(stale.read_text(encoding="utf-8") + "\n# %%\nprint('a new cell')\n", encoding="utf-8")
    fresh_twin = notebooks.twin_of(fresh).read_bytes()
    sources = {p: p.read_bytes() for p in (fresh, stale, missing)}
    assert notebooks.prepare(tmp_path) == [notebooks.twin_of(stale), notebooks.twin_of(missing)]
    assert notebooks.twin_of(fresh).read_bytes() == fresh_twin
    assert {p: p.read_bytes() for p in sources} == sources          # no .py is rewritten
    assert notebooks.prepare(tmp_path) == []
    assert notebooks.out_of_sync(tmp_path) == []


def test_a_prepared_pair_opens_in_jupyterlab_after_its_py_changed(tmp_path):
    """A student (or the browser test) edits a .py; `make lab` rewrites its twin; jupytext's
    contents manager, as JupyterLab uses it, must still open the .py (it refuses an .ipynb newer
    than its .py when their texts differ, and a written twin's text adds jupytext's version)."""
    import os
    import time

    import jupytext

    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(paths.NOTEBOOKS_DIR / "jupytext.toml", folder / "jupytext.toml")
    py = folder / SOURCES[1].name
    shutil.copy(SOURCES[1], py)
    old = time.time() - 60
    os.utime(py, (old, old))
    py.write_text(py.read_text(encoding="utf-8") + "\n# %%\nprint('edited')\n", encoding="utf-8")
    os.utime(py, (old, old))  # edited a minute before the lab starts
    assert notebooks.prepare(folder) == [notebooks.twin_of(py)]
    assert notebooks.twin_of(py).stat().st_mtime_ns <= py.stat().st_mtime_ns
    cm = jupytext.AsyncTextFileContentsManager(root_dir=str(folder))
    nb = asyncio.run(cm.get(py.name, content=True, type="notebook"))["content"]
    assert "print('edited')" in nb["cells"][-1]["source"]
