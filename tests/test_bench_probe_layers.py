"""benchmarks/bench_probe_layers.py: the probe's layer sets, what they select, and one fit."""

from __future__ import annotations

import numpy as np
import pytest
from script_modules import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/bench_probe_layers.py")


def test_the_sets_span_the_depth_and_hold_the_shipped_one(bench) -> None:
    sets = bench.layer_sets(30)
    assert sets["last"] == ["last"] and sets["24+last"] == [24, "last"] and sets["21"] == [21]
    assert sorted(k for k in sets if k.isdigit()) == sorted(["6", "12", "15", "18", "21", "24", "27"])
    assert sets["15+18+24+last"] == [15, 18, 24, "last"] and len(sets) == 16


def test_select_reads_layers_and_the_final_state_side_by_side(bench) -> None:
    f = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)  # 2 samples, embeddings + 3 layers, width 3
    x = bench.select(f, [1, "last"])
    assert x.shape == (2, 6) and x[0].tolist() == [3, 4, 5, 9, 10, 11]


def test_a_fit_scores_dev_under_each_order_and_the_first_is_the_stages(bench) -> None:
    rng = np.random.default_rng(0)
    y_train = [bool(i % 2) for i in range(40)]
    y_dev = [bool(i % 2) for i in range(20)]
    signal = lambda ys: np.array([[[1.0 if y else -1.0] * 2] * 3 for y in ys]) + rng.normal(0, 0.5, (len(ys), 3, 2))
    bench._SHARED.update(f_train=signal(y_train), f_dev=signal(y_dev), y_train=y_train, y_dev=y_dev, seed=13, boot=50,
                         sets={"1+last": [1, "last"]}, orders=2, cv_repeats=2)
    row, scores = bench._fit_one("1+last")
    assert row["features"] == 4 and len(scores) == 20 and len(row["dev_auroc_orders"]) == 2
    assert row["dev_auroc"] == row["dev_auroc_orders"][0] > 0.9 and row["ci_low"] <= row["dev_auroc"] <= row["ci_high"]
