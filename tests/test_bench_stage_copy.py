"""The stage-copy timer (benchmarks/bench_stage_copy.py): a stage name leads to the metrics file its
notebook writes, and a name dvc.yaml lacks is one clear error."""

from __future__ import annotations

import pytest
from script_modules import load_script

from ragcritic_lib import paths

bench = load_script("benchmarks/bench_stage_copy.py")


def test_a_stage_is_read_from_the_metrics_file_of_its_notebook():
    assert bench.stage_stem(paths.ROOT, "critic_sft") == "05_critic_sft"
    assert bench.stage_stem(paths.ROOT, "planner_data") == "08_planner_data"


def test_an_unknown_or_notebookless_stage_is_named(tmp_path):
    with pytest.raises(SystemExit, match="'critics' is not in dvc.yaml"):
        bench.stage_stem(paths.ROOT, "critics")
    (tmp_path / "dvc.yaml").write_text("stages:\n  assets:\n    cmd: python -m x build\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="stage 'assets' runs no notebook"):
        bench.stage_stem(tmp_path, "assets")
