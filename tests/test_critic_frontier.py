"""The critic's recipe frontier: rows, the choice of the default recipe, the file and its figure,
and the deeper cache a recipe with fewer trained layers starts from."""

import json

import pytest

from ragcritic_lib.critic import frontier


def _row(name, auroc, lo, hi, minutes, **kw):
    return {"name": name, "dev_auroc": auroc, "ci_low": lo, "ci_high": hi, "train_seconds": minutes * 6.0,
            "cpu_class": "avx2", "examples": 640, "projected_stage_minutes": minutes, **kw}


def test_choose_takes_the_best_recipe_that_fits_the_budget() -> None:
    rows = [_row("cheap", 0.60, 0.52, 0.68, 20), _row("mid", 0.78, 0.71, 0.85, 50), _row("huge", 0.90, 0.85, 0.95, 300)]
    got = frontier.choose(rows, budget_minutes=80)
    assert got["name"] == "mid" and got["fits"] == ["cheap", "mid"]
    assert "best dev AUROC" in got["reason"] and "0.78" in got["reason"]


def test_a_difference_inside_the_interval_goes_to_the_cheaper_recipe() -> None:
    rows = [_row("cheap", 0.74, 0.66, 0.80, 20), _row("cheaper", 0.70, 0.60, 0.77, 10), _row("best", 0.76, 0.70, 0.83, 60)]
    got = frontier.choose(rows, budget_minutes=80)
    # both cheaper intervals hold 0.76? only "cheap" does (0.66-0.80); "cheaper" tops out at 0.77 and holds it too
    assert got["name"] == "cheaper" and "the cheaper one" in got["reason"]
    rows[1]["ci_high"] = 0.75
    assert frontier.choose(rows, budget_minutes=80)["name"] == "cheap"


def test_choose_names_no_recipe_when_none_fits() -> None:
    got = frontier.choose([_row("huge", 0.9, 0.8, 0.95, 300), _row("empty", None, None, None, 5)], budget_minutes=80)
    assert got == {"name": None, "reason": "no recipe fits 80 minutes with a dev AUROC", "fits": []}


def test_a_row_without_a_required_key_is_refused_by_name_and_nothing_is_written(tmp_path) -> None:
    bad = _row("gen-top6", 0.6, 0.5, 0.7, 30)
    del bad["train_seconds"]
    with pytest.raises(ValueError, match=r"critic recipe row 1 \('gen-top6'\) lacks train_seconds"):
        frontier.write_frontier(tmp_path / "r.json", [_row("a", 0.6, 0.5, 0.7, 10), bad])
    assert not (tmp_path / "r.json").exists()


def test_row_measures_auroc_and_a_question_bootstrap_interval(tmp_path) -> None:
    scores = [0.9, 0.8, 0.7, 0.2, 0.1, 0.3, 0.85, 0.15]
    labels = [True, True, True, False, False, False, True, False]
    r = frontier.row("probe", scores=scores, labels=labels, groups=["a", "a", "b", "b", "c", "c", "d", "d"],
                     seconds=12.34, cpu_class="avx2", examples=8, seed=0, n_boot=200, body="probe")
    assert r["dev_auroc"] == 1.0 and r["ci_low"] <= 1.0 <= r["ci_high"] and r["train_seconds"] == 12.3
    out = frontier.write_frontier(tmp_path / "r.json", [r], cpu_class="avx2")
    saved = json.loads(out.read_text())
    assert saved["recipes"][0]["name"] == "probe" and saved["cpu_class"] == "avx2"
    fig = frontier.plot_frontier([r, {**r, "name": "empty", "dev_auroc": None}], tmp_path / "f.png")
    assert fig.stat().st_size > 1000


def test_projected_minutes_scale_the_measured_seconds_to_the_full_set() -> None:
    got = frontier.projected_minutes(cache_seconds_per_example=0.5, train_seconds_per_example_pass=0.4,
                                     train_examples=2000, dev_examples=200, passes=2.0, evaluations=5, eval_seconds=12)
    assert got == round((0.5 * 2200 + 0.4 * 2000 * 2 + 60) / 60, 1)


def test_subset_is_fixed_by_the_seed_and_ordered() -> None:
    a = frontier.subset(list(range(100)), 10, seed=3)
    assert a == frontier.subset(list(range(100)), 10, seed=3) == sorted(a) and len(set(a)) == 10
    assert frontier.subset([1, 2], 10, seed=3) == [0, 1]


def test_extend_cache_equals_caching_the_deeper_split() -> None:
    torch = pytest.importorskip("torch")
    from test_critic_train import tiny, toy

    from ragcritic_lib.critic.train import SplitModel, cache_lower

    model, enc = tiny(layers=4), toy(6, seed=2)
    shallow = SplitModel(model, train_layers=3)          # 1 frozen layer
    deep = SplitModel(model, train_layers=1)             # 3 frozen layers
    c1 = cache_lower(shallow, enc, batch_size=4, dtype="float32")
    want = cache_lower(deep, enc, batch_size=4, dtype="float32")
    got = frontier.extend_cache(shallow, c1, model.model.layers[1:3], batch_size=4, dtype="float32")
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.allclose(g.float(), w.float(), atol=3e-2)
