"""Bootstrap intervals (ragcritic_lib.evaluation.stats) and the comparison table built on them."""

from __future__ import annotations

import math

import pytest

from ragcritic_lib.baselines import (
    MeteredLLM, add_costs, comparison_table, cost_from_per_sample, jsonable, markdown_table, records_cost,
)
from ragcritic_lib.llm import CallableLLM, GenParams
from ragcritic_lib.evaluation.stats import bootstrap_ci, paired_bootstrap_diff


def test_exact_enumeration_two_values():
    # n = 2: the four ordered resamples have means 0, .5, .5, 1.
    ci = bootstrap_ci([0.0, 1.0], n_boot=1000, alpha=0.5, seed=123)
    assert ci["exact"] is True
    assert (ci["mean"], ci["low"], ci["high"], ci["n"]) == (0.5, 0.0, 0.5, 2)


def test_exact_enumeration_three_values():
    # 27 resamples of {1,2,3}; sums 3..9 occur 1,3,6,7,6,3,1 times. With alpha = 0.1 the
    # 5% point is the 2nd smallest mean (4/3) and the 95% point the 26th (8/3).
    ci = bootstrap_ci([1, 2, 3], n_boot=1000, alpha=0.1, seed=0)
    assert ci["mean"] == 2.0
    assert ci["low"] == pytest.approx(4 / 3)
    assert ci["high"] == pytest.approx(8 / 3)
    # Exact means seed-independent.
    assert bootstrap_ci([1, 2, 3], n_boot=1000, alpha=0.1, seed=99) == ci


def test_sampled_is_seeded_and_sane():
    values = [0.0] * 30 + [1.0] * 20
    a = bootstrap_ci(values, n_boot=500, alpha=0.05, seed=7)
    b = bootstrap_ci(values, n_boot=500, alpha=0.05, seed=7)
    c = bootstrap_ci(values, n_boot=500, alpha=0.05, seed=8)
    assert a == b
    assert a["exact"] is False and a["mean"] == 0.4
    assert a["low"] < 0.4 < a["high"]
    assert (a["low"], a["high"]) != (c["low"], c["high"])


def test_constant_values_give_degenerate_interval():
    ci = bootstrap_ci([0.25] * 40, n_boot=200, seed=1)
    assert ci["low"] == ci["high"] == ci["mean"] == 0.25


def test_paired_diff_exact():
    # Differences [1, 0, 0]: resampled mean difference is k/3 with k ~ Binomial(3, 1/3):
    # 8, 12, 6, 1 of the 27 resamples for k = 0..3.
    d = paired_bootstrap_diff([1, 1, 0], [0, 1, 0], n_boot=1000, alpha=0.1, seed=0)
    assert d["diff"] == pytest.approx(1 / 3)
    assert d["low"] == 0.0
    assert d["high"] == pytest.approx(2 / 3)
    assert d["p_value"] == pytest.approx(16 / 27)
    assert d["exact"] is True


def test_paired_diff_identical_methods_is_zero():
    a = [0.0, 0.5, 1.0, 0.2, 0.9, 0.1]
    d = paired_bootstrap_diff(a, a, n_boot=300, seed=3)
    assert (d["diff"], d["low"], d["high"], d["p_value"]) == (0.0, 0.0, 0.0, 1.0)


def test_bad_inputs():
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap_diff([1, 2], [1])
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="alpha"):
        bootstrap_ci([1.0], alpha=1.5)
    empty = bootstrap_ci([])
    assert empty["n"] == 0 and math.isnan(empty["mean"])


def _rec(qid, ds, qtype, f1, em=None):
    return {"id": qid, "dataset": ds, "metadata": {"type": qtype}, "f1": f1, "em": f1 if em is None else em, "acc": f1}


def test_comparison_table_rows_and_paired_deltas():
    base = [_rec("1", "tb", "factual", 0.0), _rec("2", "tb", "factual", 1.0), _rec("3", "tb", "numerical", 0.0)]
    better = [_rec("1", "tb", "factual", 1.0), _rec("2", "tb", "factual", 1.0), _rec("3", "tb", "numerical", 0.0)]
    rows = comparison_table({"standard_rag": base, "new": better}, n_boot=1000, alpha=0.1, seed=0,
                            costs={"new": {"calls": 7, "wall_seconds": 1.5}})
    keys = [(r["type"], r["method"]) for r in rows]
    assert keys == [("all", "standard_rag"), ("all", "new"), ("factual", "standard_rag"), ("factual", "new"),
                    ("numerical", "standard_rag"), ("numerical", "new")]
    all_new = rows[1]
    assert all_new["n"] == 3 and all_new["f1"] == pytest.approx(2 / 3)
    # Differences [1, 0, 0] again: the exact paired interval of the previous test.
    assert all_new["d_f1"] == pytest.approx(1 / 3)
    assert (all_new["d_f1_low"], all_new["d_f1_high"]) == (0.0, pytest.approx(2 / 3))
    assert all_new["calls"] == 7 and "calls" not in rows[3]
    assert rows[0]["d_f1"] == 0.0
    md = markdown_table(rows[:2], ["method", "n", "f1"])
    assert md.splitlines()[0] == "| method | n | f1 |"
    assert md.splitlines()[3] == "| new | 3 | 0.667 |"
    with pytest.raises(KeyError, match="baseline"):
        comparison_table({"new": better})


def test_metered_llm_counts_logical_calls():
    inner = CallableLLM(lambda p, g: "two words")
    m = MeteredLLM(inner)
    m.generate(["a b c", "a b c", "d"], GenParams(max_new_tokens=4))
    c = m.cost()
    # Three logical calls (one a duplicate served without generating), tokens of all three.
    assert (c["calls"], c["cached_calls"], c["prompt_tokens"], c["completion_tokens"]) == (3, 1, 7, 6)
    assert inner.stats.calls == 2 and m.model == "callable"
    assert add_costs({"calls": 1, "x": 2}, {"calls": 3}) == {"calls": 4, "x": 2}
    assert records_cost([{"prompt_tokens": 5, "completion_tokens": 2}, {}]) == {
        "calls": 2, "prompt_tokens": 5, "completion_tokens": 2}


def test_jsonable_is_strict_json():
    import json

    obj = {"a": float("nan"), "b": (1.234567, float("inf")), 3: {"c": [0.5]}}
    assert jsonable(obj) == {"a": None, "b": [1.2346, None], "3": {"c": [0.5]}}
    json.dumps(jsonable(obj), allow_nan=False)


def test_cost_from_per_sample_scales_means():
    per = {"tb": {"calls_per_sample": 2.5, "prompt_tokens_per_sample": 100.0, "completion_tokens_per_sample": 10.0},
           "trivia": {"calls_per_sample": 1.0}}
    assert cost_from_per_sample(per, {"tb": 4, "trivia": 2}) == {"calls": 12.0, "prompt_tokens": 400.0,
                                                                  "completion_tokens": 40.0}
    assert cost_from_per_sample(per, {"other": 1}) is None


def test_metered_llm_counts_generate_score_and_choose_per_dataset():
    from ragcritic_lib.baselines import dataset_costs, per_dataset, records_cost_by_dataset

    inner = CallableLLM(lambda p, g: "yes", score_fn=lambda p, opts: [-1.0] * len(opts))
    m, other = MeteredLLM(inner), MeteredLLM(inner)
    with per_dataset("tb", m, other, None):
        m.generate(["a b", "c"], GenParams(max_new_tokens=4))
        picks = m.choose(["pick one"], [["yes", "no"]])
    with m.dataset("trivia"):
        scores = m.score(["x y z"], [["Correct", "Error"]])
    m.generate(["outside"], GenParams(max_new_tokens=4))
    assert picks[0].text == "yes" and scores == [[-1.0, -1.0]]
    total = m.cost()
    assert (total["calls"], total["generate_calls"], total["choose_calls"], total["score_calls"]) == (5, 3, 1, 1)
    # score: the prompt (3 words) plus both options (1 each) are read by the model.
    by = m.cost_by_dataset()
    assert sorted(by) == ["(none)", "tb", "trivia"]
    assert (by["tb"]["calls"], by["tb"]["prompt_tokens"], by["tb"]["completion_tokens"]) == (3, 5, 3)
    assert (by["trivia"]["calls"], by["trivia"]["score_calls"], by["trivia"]["prompt_tokens"]) == (1, 1, 5)
    assert by["(none)"]["calls"] == 1 and other.cost()["calls"] == 0
    assert sum(row["calls"] for row in by.values()) == total["calls"] == m.calls
    with pytest.raises(RuntimeError, match="inside dataset"):
        with m.dataset("tb"), m.dataset("trivia"):
            pass
    merged = dataset_costs({"tb": {"calls": 2}}, {"tb": {"calls": 1}, "trivia": {"calls": 4}})
    assert merged == {"tb": {"calls": 3}, "trivia": {"calls": 4}}
    assert records_cost_by_dataset([{"dataset": "tb", "prompt_tokens": 3}, {"dataset": "trivia"}]) == {
        "tb": {"calls": 1, "prompt_tokens": 3, "completion_tokens": 0},
        "trivia": {"calls": 1, "prompt_tokens": 0, "completion_tokens": 0}}


def test_comparison_table_takes_costs_per_dataset():
    base = [_rec("1", "tb", "factual", 0.0), _rec("1", "tv", "trivia", 1.0)]
    rows = comparison_table({"standard_rag": base, "new": base}, n_boot=50, by_type=False,
                            costs={"new": {"calls": 10, "wall_seconds": 2.0}},
                            dataset_costs={"new": {"tb": {"calls": 3}, "tv": {"calls": 7}}})
    calls = {(r["dataset"], r["method"]): (r.get("calls"), r.get("wall_seconds")) for r in rows}
    assert calls == {("tb", "standard_rag"): (None, None), ("tb", "new"): (3, 2.0),
                     ("tv", "standard_rag"): (None, None), ("tv", "new"): (7, 2.0)}


def test_epochs_trained_counts_passes_over_the_rows():
    from types import SimpleNamespace

    from ragcritic_lib.baselines import epochs_trained

    recipe = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2}
    assert epochs_trained(SimpleNamespace(steps=25, examples=100, recipe=recipe)) == 1.0
    assert epochs_trained(SimpleNamespace(steps=6, examples=100, recipe=recipe)) == 0.24
    assert epochs_trained(SimpleNamespace(steps=3, examples=10, recipe={})) == 0.3  # batch 1 by default
    assert epochs_trained(SimpleNamespace(steps=0, examples=0, recipe=recipe)) == 0.0


def test_cluster_resamples_draw_whole_groups_and_plain_ones_draw_samples():
    from ragcritic_lib.evaluation.stats import cluster_resamples

    groups = ["q1", "q1", "q1", "q2", "q3", "q3"]
    for idx in cluster_resamples(groups, 6, 200, seed=3):
        drawn = [groups[i] for i in idx]
        # a drawn question comes with all its answers, as often as it was drawn
        for q, size in (("q1", 3), ("q2", 1), ("q3", 2)):
            assert drawn.count(q) % size == 0
        assert sorted(set(idx)) == sorted({i for i in idx})
    plain = list(cluster_resamples(None, 5, 3, seed=1))
    assert len(plain) == 3 and all(len(idx) == 5 for idx in plain)
    with pytest.raises(ValueError, match="groups has 2 entries for 3 samples"):
        list(cluster_resamples(["a", "b"], 3, 1, seed=0))


def test_the_auroc_interval_follows_the_common_percentile_rule_and_widens_with_clusters():
    import numpy as np

    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci, percentile_interval

    rng = np.random.default_rng(0)
    # 40 questions, 5 answers each that share their question's score and verdict
    q_scores, q_wrong = rng.normal(size=40), rng.random(40) < 0.5
    q_scores = q_scores + 0.8 * q_wrong
    scores = [float(s) + 0.01 * k for s in q_scores for k in range(5)]
    wrong = [bool(w) for w in q_wrong for _ in range(5)]
    groups = [q for q in range(40) for _ in range(5)]
    lo, hi = bootstrap_auroc_ci(scores, wrong, seed=0, n_boot=400)
    glo, ghi = bootstrap_auroc_ci(scores, wrong, seed=0, n_boot=400, groups=groups)
    assert lo < auroc(scores, wrong) < hi and glo < auroc(scores, wrong) < ghi
    assert ghi - glo > 1.5 * (hi - lo)           # answers to one question are not independent
    # the same rule as the other intervals: NumPy's inverted_cdf quantiles of the draws
    assert percentile_interval([0.1, 0.2, 0.3, 0.4]) == (0.1, 0.4)
    assert percentile_interval([]) == (None, None)


def test_within_group_auroc_counts_only_pairs_inside_a_group() -> None:
    import random

    from ragcritic_lib.evaluation.stats import auroc, within_group_auroc

    rng = random.Random(4)
    scores = [rng.choice([0.1, 0.2, 0.5, 0.9]) for _ in range(60)]
    wrong = [rng.random() < 0.4 for _ in range(60)]
    groups = [rng.choice("abc") for _ in range(60)]
    pairs = [(w, r) for w in range(60) for r in range(60)
             if wrong[w] and not wrong[r] and groups[w] == groups[r]]
    brute = sum(1.0 if scores[w] > scores[r] else 0.5 if scores[w] == scores[r] else 0.0 for w, r in pairs) / len(pairs)
    assert within_group_auroc(scores, wrong, groups) == pytest.approx(brute)
    assert within_group_auroc(scores, wrong, ["one"] * 60) == pytest.approx(auroc(scores, wrong))
    assert within_group_auroc([1.0, 0.0], [True, False], ["a", "b"]) is None
    with pytest.raises(ValueError, match="groups"):
        within_group_auroc([1.0], [True], [])


def test_bootstrap_within_group_auroc_ci_brackets_the_within_group_auroc() -> None:
    import random

    from ragcritic_lib.evaluation.stats import bootstrap_within_group_auroc_ci, within_group_auroc

    rng = random.Random(7)
    wrong = [rng.random() < 0.5 for _ in range(80)]
    kinds = [rng.choice("ab") for _ in range(80)]
    scores = [float(w) + rng.gauss(0, 1) + (3.0 if k == "a" else 0.0) for w, k in zip(wrong, kinds)]
    lo, hi = bootstrap_within_group_auroc_ci(scores, wrong, kinds, seed=0, n_boot=300, groups=list(range(80)))
    assert lo < within_group_auroc(scores, wrong, kinds) < hi and hi - lo < 0.5
    # a group key shared by whole questions resamples them together; one kind per sample leaves no pair
    assert bootstrap_within_group_auroc_ci(scores, wrong, list(range(80)), seed=0, n_boot=20) == (None, None)
    with pytest.raises(ValueError, match="groups"):
        bootstrap_within_group_auroc_ci(scores, wrong, kinds[:3], seed=0)


def test_paired_auroc_diff_cancels_what_two_scores_share_and_resamples_questions() -> None:
    import numpy as np

    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci, paired_auroc_diff

    rng = np.random.default_rng(1)
    wrong = [bool(w) for w in rng.random(200) < 0.5]
    shared = rng.normal(size=200) + 1.0 * np.asarray(wrong)    # what both scores read
    better = [float(s + 0.6 * w + 0.1 * e) for s, w, e in zip(shared, wrong, rng.normal(size=200))]
    worse = [float(s + 0.1 * e) for s, e in zip(shared, rng.normal(size=200))]
    d = paired_auroc_diff(better, worse, wrong, seed=0, n_boot=400)
    assert d["diff"] == pytest.approx(auroc(better, wrong) - auroc(worse, wrong), abs=1e-4)
    assert 0 < d["ci_low"] < d["diff"] < d["ci_high"]
    # pairing: the difference's interval is narrower than either AUROC's own
    lo, hi = bootstrap_auroc_ci(worse, wrong, seed=0, n_boot=400)
    assert d["ci_high"] - d["ci_low"] < hi - lo
    # a score against itself differs by exactly 0 in every resample
    assert paired_auroc_diff(worse, worse, wrong, seed=0, n_boot=50) == {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    # resampling whole questions (5 answers each): the same difference, an interval that still brackets it
    groups = [i // 5 for i in range(200)]
    g = paired_auroc_diff(better, worse, wrong, seed=0, n_boot=400, groups=groups)
    assert g["diff"] == d["diff"] and g["ci_low"] < g["diff"] < g["ci_high"]
    assert paired_auroc_diff([0.1, 0.2], [0.3, 0.4], [True, True], seed=0, n_boot=10)["diff"] is None
    with pytest.raises(ValueError, match="length"):
        paired_auroc_diff([0.1], [0.2, 0.3], [True], seed=0)
