"""benchmarks/bench_stage_cells.py: stage and cell times read from executed notebooks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_stage_cells.py")


def _notebook(path: Path, total: float | None, cells: list[tuple[str, float | None]]) -> None:
    nb = {"cells": [{"cell_type": "code", "source": src,
                     "metadata": {} if sec is None else {"papermill": {"duration": sec}}} for src, sec in cells],
          "metadata": {} if total is None else {"papermill": {"duration": total}}}
    path.write_text(json.dumps(nb))


def test_stage_cells_reads_durations_and_names_cells_by_their_work(tmp_path):
    _notebook(tmp_path / "01_a.ipynb", 100.0, [
        ("# a comment\nimport x\n\ndef helper(y):\n    return y\n\n\nresult = helper(3)\n", 90.0),
        ("print(1)", 2.5), ("# markdown-like", None)])
    _notebook(tmp_path / "02_b.ipynb", None, [("x = 1", 1.0)])          # not run by papermill
    _notebook(tmp_path / "03_c.failed.ipynb", 50.0, [("x = 1", 50.0)])  # a failed run's record
    stages = bench.stage_cells(tmp_path)
    assert list(stages) == ["01_a"]
    assert stages["01_a"]["seconds"] == 100.0
    assert stages["01_a"]["cells"] == [(0, 90.0, "result = helper(3)"), (1, 2.5, "print(1)")]


def test_report_lists_slow_cells_and_compares_the_sum_with_the_cap(tmp_path):
    stages = {"01_a": {"seconds": 3000.0, "cells": [(0, 10.0, "fast()"), (1, 2900.0, "slow()")]},
              "02_b": {"seconds": 4800.0, "cells": [(0, 4800.0, "train()")]}}
    lines = bench.report(stages, min_seconds=60, cap_minutes=120)
    text = "\n".join(lines)
    assert "slow()" in text and "train()" in text and "fast()" not in text
    assert lines[1].lstrip().startswith("cell   1")  # slowest first, under its stage
    assert "130.0 min" in lines[-1] and "over the cap by 10.0 min" in lines[-1]
    assert "to spare" in bench.report(stages, min_seconds=60, cap_minutes=200)[-1]


def test_a_broken_notebook_is_named(tmp_path):
    (tmp_path / "05_x.ipynb").write_text("{not json")
    with pytest.raises(ValueError, match="05_x.ipynb"):
        bench.stage_cells(tmp_path)


def test_main_says_where_nothing_was_found(tmp_path, capsys):
    assert bench.main(["--root", str(tmp_path)]) == 2
    assert "no executed notebooks" in capsys.readouterr().err
