"""The comparison stage's method block: Holm correction, pairing checks, costs (baselines.compare)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragcritic_lib.baselines.compare import (
    reading, answerability_split, ladder_steps, planner_choices,
    comparison_summary, degenerate_list, holm_adjust, method_comparison, rag_critic_training,
)
from ragcritic_lib.evaluation.stats import paired_mde


def test_holm_hand_computed():
    # Sorted: a .01 * 3 = .03, c .03 * 2 = .06, b .04 * 1 = .04 -> running max .06.
    adj = holm_adjust({"a": 0.01, "b": 0.04, "c": 0.03})
    assert list(adj) == ["a", "b", "c"]
    assert adj == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})


def test_holm_caps_at_one_and_keeps_order():
    rng = np.random.default_rng(3)
    p = {f"m{i}": float(x) for i, x in enumerate(rng.uniform(0, 0.6, size=12))}
    adj = holm_adjust(p)
    ranked = sorted(p, key=p.get)
    values = [adj[k] for k in ranked]
    assert values == sorted(values)
    assert all(adj[k] >= p[k] for k in p)
    assert max(values) == 1.0  # 12 * 0.6-scale p-values must hit the cap
    assert holm_adjust({"only": 0.2}) == {"only": 0.2}
    assert holm_adjust({}) == {}


def test_holm_nan_left_out_of_m():
    adj = holm_adjust({"a": 0.01, "b": float("nan"), "c": 0.02})
    assert math.isnan(adj["b"])
    # m = 2, not 3: a .02, c .02.
    assert adj["a"] == pytest.approx(0.02) and adj["c"] == pytest.approx(0.02)


@pytest.mark.parametrize("bad", [1.5, -0.1, "x", None])
def test_holm_invalid_p_names_key(bad):
    with pytest.raises(ValueError, match="'CRAG'"):
        holm_adjust({"ok": 0.1, "CRAG": bad})


def _records(f1s, *, dataset="testbed", prefix="q"):
    return [{"id": f"{prefix}{i}", "dataset": dataset, "em": float(f >= 1.0), "f1": float(f), "acc": float(f > 0)}
            for i, f in enumerate(f1s)]


@pytest.fixture()
def results():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.0, 0.6, size=60).round(3)
    better = np.minimum(1.0, base + rng.uniform(0.2, 0.4, size=60)).round(3)
    other = _records([0.5] * 5, dataset="other")  # another dataset's rows are ignored
    return {"standard RAG": _records(base) + other, "Better": _records(better)[::-1],
            "Same": _records(base)}


def test_method_comparison_better_and_equal(results):
    block = method_comparison(results, costs={"Better": {"calls": 180, "training_calls": 50}},
                              n_boot=500, n_perm=2000, seed=1)
    assert list(block) == ["standard RAG", "Better", "Same"]
    keys = {"n", "em", "f1", "acc", "delta_f1", "ci_low", "ci_high", "p", "p_holm", "mde",
            "calls_per_question", "training_calls", "training_seconds"}
    assert all(keys <= set(row) for row in block.values())
    base, better, same = block["standard RAG"], block["Better"], block["Same"]
    assert base["n"] == better["n"] == 60
    assert (base["delta_f1"], base["ci_low"], base["ci_high"], base["p"], base["p_holm"]) == (0, 0, 0, 1, 1)
    assert better["delta_f1"] == pytest.approx(better["f1"] - base["f1"])
    assert better["delta_f1"] > 0.2 and 0 < better["ci_low"] <= better["delta_f1"] <= better["ci_high"]
    assert better["p"] == pytest.approx(1 / 2001)  # no random sign assignment reaches the observed sum
    assert better["p_holm"] == pytest.approx(2 / 2001) and better["p_holm"] < 0.01
    assert same["delta_f1"] == 0 and same["ci_low"] == same["ci_high"] == 0
    assert same["p"] == 1.0 and same["p_holm"] == 1.0
    summary = comparison_summary(block)
    assert summary["significant_after_holm"] == ["Better"]
    assert summary["mde_conservative"] == pytest.approx(paired_mde(pilot_sd=base["f1_sd"], n=60))
    assert summary["mde_conservative"] > 0


def test_calls_per_question(results):
    block = method_comparison(results, costs={"standard RAG": {"calls": 60}, "Better": {"calls": 150,
                              "training_seconds": 12.5}}, n_boot=100, n_perm=100)
    assert block["standard RAG"]["calls_per_question"] == 1.0
    assert block["Better"]["calls_per_question"] == 2.5
    assert block["Better"]["training_seconds"] == 12.5 and block["Better"]["training_calls"] is None
    assert block["Same"]["calls_per_question"] is None


def test_same_ids_required(results):
    results["Partial"] = results["Same"][:55] + _records([0.1], prefix="new")
    with pytest.raises(ValueError, match=r"Partial.*5 ids missing, 1 extra"):
        method_comparison(results, n_boot=100, n_perm=100)


def test_dataset_filter_and_bad_inputs(results):
    block = method_comparison({"standard RAG": results["standard RAG"]}, dataset="other")
    assert block["standard RAG"]["n"] == 5
    with pytest.raises(ValueError, match="no question on dataset 'nope'"):
        method_comparison(results, dataset="nope")
    with pytest.raises(KeyError, match="baseline"):
        method_comparison(results, baseline="RAG-Critic")
    with pytest.raises(ValueError, match="Dup.*'q0' appears twice"):
        method_comparison({**results, "Dup": results["Same"] + results["Same"][:1]}, n_boot=100, n_perm=100)


def test_degenerate_list():
    assert degenerate_list({}) == []
    assert degenerate_list({"CRAG": [], "SIM-RAG": None}) == []
    assert degenerate_list({"SIM-RAG": ["critic always accepts"], "CRAG": ["no web search", "all ambiguous"]}) == [
        "CRAG: all ambiguous", "CRAG: no web search", "SIM-RAG: critic always accepts"]
    with pytest.raises(ValueError, match="'CRAG'"):
        degenerate_list({"CRAG": "no web search"})
    # A reason a stage states twice is listed once.
    assert degenerate_list({"SIM-RAG": ["small critic set", "small critic set"], "CRAG": []}) == [
        "SIM-RAG: small critic set"]


def _training_metrics(sft_seconds=30.5, dpo_seconds=12.25, planner_seconds=7.0):
    def run(steps, seconds):
        return {"steps": steps, "device": "cpu", **({} if seconds is None else {"seconds": seconds})}

    return dict(
        error_sampling={"samples": 512, "teacher_parse": {"llm_subset": {"calls": 40}}},
        tagging={"llm_subset_parse": {"calls": 8}},
        critic_sft={"train": run(30, sft_seconds)},
        critic_dpo={"train": {**run(10, dpo_seconds), "beta": 0.3}},
        correction={"planner_training": run(24, planner_seconds)},
    )


def test_rag_critic_training_sums_its_three_training_runs():
    rc = rag_critic_training(**_training_metrics())
    # Calls and steps as the comparison counted them before.
    assert (rc["sampled_answers"], rc["llm_teacher_calls"], rc["calls"]) == (512, 48, 560)
    assert rc["steps"] == {"critic_sft": 30, "critic_dpo": 10, "planner_sft": 24}
    # Seconds: critic SFT + critic DPO + planner SFT.
    assert rc["seconds_by_run"] == {"critic_sft": 30.5, "critic_dpo": 12.25, "planner_sft": 7.0}
    assert rc["seconds"] == pytest.approx(49.8)
    # A run without recorded seconds leaves the total unknown rather than too small.
    missing = rag_critic_training(**_training_metrics(planner_seconds=None))
    assert missing["seconds"] is None and missing["seconds_by_run"]["planner_sft"] is None
    assert missing["calls"] == 560
    empty = rag_critic_training({}, {}, {}, {}, {})
    assert (empty["calls"], empty["seconds"], empty["steps"]["critic_sft"]) == (0, None, None)


def test_rag_critic_training_seconds_reach_the_comparison(results):
    rc = rag_critic_training(**_training_metrics())
    missing = rag_critic_training(**_training_metrics(sft_seconds=None))
    costs = {"Better": {"calls": 120, "training_calls": rc["calls"], "training_seconds": rc["seconds"]}}
    block = method_comparison(results, costs=costs, n_boot=100, n_perm=100)
    assert (block["Better"]["training_calls"], block["Better"]["training_seconds"]) == (560, rc["seconds"])
    # The comparison's metrics schema types every key of the block.
    from ragcritic_lib.pipeline import metrics_schema as ms

    assert set(rc) == set(ms.RagCriticTraining.__annotations__)
    assert ms.problems("14_comparison", {"rag_critic_training": rc}, partial=True) == []
    assert ms.problems("14_comparison", {"rag_critic_training": missing}, partial=True) == []
    bad = {**rc, "seconds": -1.0}
    assert ms.problems("14_comparison", {"rag_critic_training": bad}, partial=True) == [
        "rag_critic_training.seconds = -1.0 is not >= 0"]


def test_reading_says_what_survives_holm_and_quotes_flags():
    block = {
        "standard RAG": {"n": 140, "f1": 0.236, "delta_f1": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_holm": 1.0},
        "Worse": {"n": 140, "f1": 0.164, "delta_f1": -0.072, "ci_low": -0.12, "ci_high": -0.033, "p_holm": 0.0025},
        "Same": {"n": 140, "f1": 0.225, "delta_f1": -0.011, "ci_low": -0.042, "ci_high": 0.012, "p_holm": 1.0},
        "Unknown": {"n": 140, "f1": 0.2, "delta_f1": -0.036, "ci_low": -0.1, "ci_high": 0.02, "p_holm": float("nan")},
    }
    text = reading("testbed", block, {"mde_conservative": 0.107}, {"Same": ["planner: one plan"]})
    lines = text.splitlines()
    assert lines[0].startswith("On testbed (140 questions) standard RAG scores F1 0.236") and "0.107" in lines[0]
    assert "**Worse**" in lines[1] and "below standard RAG after Holm correction (p 0.0025)" in lines[1]
    assert "not distinguishable" in lines[2] and "flagged degenerate: planner: one plan" in lines[2]
    assert lines[3].endswith("not distinguishable from standard RAG after Holm correction.")


def test_comparison_metrics_gather_the_blocks_flags_and_stage_seconds(results):
    from ragcritic_lib.baselines.compare import comparison_metrics

    block = method_comparison(results, n_boot=100, n_perm=100)
    summary = comparison_summary(block)
    rows = [{"dataset": "testbed", "method": "Better", "type": "all", "d_f1": 0.3}]
    flags = {"CRAG": ["no web search"], "SIM-RAG": None, "RAG-Critic": ["one verdict", "one verdict"]}
    training = rag_critic_training(**_training_metrics())
    run_metrics = {"CRAG": {"seconds": {"test": 87.0, "tuning": 35.7}, "scores": {}}, "SIM-RAG": {}}
    metrics = comparison_metrics(comparison={"testbed": block}, extra_rows={"testbed": {}}, summaries={"testbed": summary},
                                 rows=rows, flags=flags, training=training, run_metrics=run_metrics)
    assert metrics == {
        "comparison": {"testbed": block}, "oracle_and_ablation_rows": {"testbed": {}}, "summary": {"testbed": summary},
        "rows": rows, "degenerate": ["CRAG: no web search", "RAG-Critic: one verdict"], "degenerate_by_method": flags,
        "rag_critic_training": training, "stage_seconds": {"CRAG": {"test": 87.0, "tuning": 35.7}, "SIM-RAG": None},
    }
    assert list(metrics) == ["comparison", "oracle_and_ablation_rows", "summary", "rows", "degenerate",
                             "degenerate_by_method", "rag_critic_training", "stage_seconds"]
    # The rows are copies: the metrics do not change with the notebook's table.
    assert metrics["rows"][0] is not rows[0]


def test_method_comparison_reads_the_judges_verdicts_with_holm():
    def recs(predictions):
        return [{"id": f"q{i}", "dataset": "testbed", "prediction": p, "golden_answers": ["1887"],
                 "metadata": {"outdated_answers": ["1850"]}, "em": 0.0, "f1": 0.0, "acc": 0.0}
                for i, p in enumerate(predictions)]

    n = 40
    results = {"standard RAG": recs(["1850"] * n),
               "Fixer": recs(["It was completed in 1887."] * (n - 4) + ["1850"] * 4),
               "Hedger": recs(["1850 or 1887"] * n)}  # names the gold beside the superseded value: wrong
    rows = method_comparison(results, n_boot=500, n_perm=2000, judge_metric="truth")
    assert rows["standard RAG"]["judge_acc"] == 0.0 and rows["standard RAG"]["judge_p_holm"] == 1.0
    fixer, hedger = rows["Fixer"], rows["Hedger"]
    assert fixer["judge_acc"] == 0.9 and fixer["delta_judge_acc"] == pytest.approx(0.9)
    assert 0 < fixer["judge_ci_low"] <= 0.9 <= fixer["judge_ci_high"] and fixer["judge_p"] < 0.01
    assert fixer["judge_p_holm"] == pytest.approx(min(1.0, 2 * fixer["judge_p"]))  # two methods in the family
    assert hedger["delta_judge_acc"] == 0.0 and hedger["judge_p"] == 1.0
    assert "judge_acc" not in method_comparison(results, n_boot=100, n_perm=100)["Fixer"]


def test_the_reading_gives_the_judged_change_beside_f1():
    from ragcritic_lib.evaluation.readings import comparison_block

    row = {"n": 10, "f1": 0.3, "delta_f1": 0.05, "ci_low": -0.01, "ci_high": 0.11, "p_holm": 0.2,
           "judge_acc": 0.6, "delta_judge_acc": 0.3, "judge_ci_low": 0.1, "judge_ci_high": 0.5, "judge_p_holm": 0.02}
    block = {"standard RAG": {"n": 10, "f1": 0.25}, "RAG-Critic": row}
    text = comparison_block("testbed", block, {"mde_conservative": 0.2})
    assert ("- **RAG-Critic**: F1 0.300, change +0.050 (95% CI -0.010..+0.110), not distinguishable from standard RAG "
            "after Holm correction (p 0.2); judged right 0.600, change +0.300 (95% CI +0.100..+0.500, Holm p 0.02).") in text


def _gold_records(rows, *, dataset="testbed"):
    """(f1, gold, prediction) -> scored records carrying gold answers and a prediction."""
    return [{"id": f"q{i}", "dataset": dataset, "golden_answers": [gold], "prediction": pred,
             "em": float(f1 >= 1.0), "f1": float(f1), "acc": float(f1 > 0)} for i, (f1, gold, pred) in enumerate(rows)]


def test_answerability_split_separates_the_questions_whose_answer_is_to_abstain():
    # Six answerable questions where the method loses 0.2 F1 each, four unanswerable ones where it
    # abstains (right) and the baseline answered (wrong): the split shows the loss and the gain
    # apart, and the two shares add up to the change over all ten questions.
    abst = "insufficient information"
    base = _gold_records([(0.5, "Paris", "Paris France")] * 6 + [(0.0, abst, "1984")] * 4)
    method = _gold_records([(0.3, "Paris", "in Paris, the French capital")] * 6 + [(1.0, abst, abst)] * 4)
    out = answerability_split({"standard RAG": base, "Abstainer": method}, n_boot=200, n_perm=200,
                              judge_metric="f1", judge_threshold=0.5)
    assert list(out) == ["answerable", "unanswerable"]
    assert (out["answerable"]["n"], out["unanswerable"]["n"]) == (6, 4)
    a, u = out["answerable"]["rows"]["Abstainer"], out["unanswerable"]["rows"]["Abstainer"]
    assert a["delta_f1"] == pytest.approx(-0.2) and a["ci_high"] < 0
    assert u["delta_f1"] == pytest.approx(1.0) and u["ci_low"] > 0
    assert (a["share_f1"], u["share_f1"]) == (pytest.approx(-0.12), pytest.approx(0.4))
    whole = method_comparison({"standard RAG": base, "Abstainer": method}, n_boot=50, n_perm=50)["Abstainer"]
    assert a["share_f1"] + u["share_f1"] == pytest.approx(whole["delta_f1"])
    # The judge: right before on the answerable ones (F1 0.5), wrong after (0.3); the abstentions right.
    assert a["delta_judge_acc"] == pytest.approx(-1.0) and u["delta_judge_acc"] == pytest.approx(1.0)
    assert u["share_judge_acc"] == pytest.approx(0.4)
    assert "standard RAG" not in out["answerable"]["rows"]


def test_answerability_split_leaves_out_a_part_too_small_and_names_a_record_without_gold():
    base = _gold_records([(0.5, "Paris", "Paris")] * 5 + [(0.0, "insufficient information", "1984")])
    out = answerability_split({"standard RAG": base, "Same": base}, n_boot=50, n_perm=50)
    assert list(out) == ["answerable"]  # one unanswerable question gives no interval
    assert "delta_judge_acc" not in out["answerable"]["rows"]["Same"]  # no judge asked for
    broken = [dict(r) for r in base]
    broken[2]["golden_answers"] = []
    with pytest.raises(ValueError, match="'q2' has no golden_answers"):
        answerability_split({"standard RAG": broken, "Same": base}, n_boot=50, n_perm=50)


def test_ladder_steps_pair_each_row_with_the_one_before_it_and_count_abstentions():
    # Four answerable questions and two unanswerable ones. "labels" turns two answerable
    # abstentions back into answers (+0.5 F1 each) and one unanswerable answer into an abstention
    # (+1.0); "verdict" changes nothing; a step whose row is absent is named, not run.
    abst, gold = "insufficient information", "Paris"
    before = _gold_records([(0.0, gold, abst)] * 2 + [(0.5, gold, "Paris France")] * 2 + [(0.0, abst, "1984")] * 2)
    after = _gold_records([(0.5, gold, "Paris France")] * 4 + [(1.0, abst, abst), (0.0, abst, "1984")])
    steps = (("verdict", "critic", "gold"), ("labels", "gold", "causes"), ("planner", "gold", "trained"))
    out = ladder_steps({"critic": before, "gold": before, "causes": after}, steps=steps, n_boot=300, n_perm=300,
                       judge_metric="f1", judge_threshold=0.5)
    assert [s["changes"] for s in out["steps"]] == ["verdict", "labels"]
    assert out["missing"] == ["planner: trained"]
    same, labels = (s["parts"] for s in out["steps"])
    assert same["all"]["delta_f1"] == 0.0 and same["all"]["n"] == 6
    assert labels["answerable"]["n"] == 4 and labels["answerable"]["delta_f1"] == pytest.approx(0.25)
    assert labels["unanswerable"]["n"] == 2 and labels["unanswerable"]["delta_f1"] == pytest.approx(0.5)
    assert labels["all"]["delta_f1"] == pytest.approx((0.5 * 2 + 1.0) / 6)
    assert labels["answerable"]["delta_judge_acc"] == pytest.approx(0.5)  # two of four turn right by the F1 judge
    assert out["abstentions"]["gold"] == {"all": 2, "answerable": 2, "unanswerable": 0}
    assert out["abstentions"]["causes"] == {"all": 1, "answerable": 0, "unanswerable": 1}


def test_ladder_steps_refuse_rows_on_other_questions_and_records_without_gold():
    base = _gold_records([(0.5, "Paris", "Paris")] * 4)
    with pytest.raises(ValueError, match="different question set"):
        ladder_steps({"a": base, "b": base[:3]}, steps=(("x", "a", "b"),), n_boot=50, n_perm=50)
    broken = [dict(r) for r in base]
    broken[1]["golden_answers"] = []
    with pytest.raises(ValueError, match="'q1' has no golden_answers"):
        ladder_steps({"a": broken, "b": base}, steps=(("x", "a", "b"),), n_boot=50, n_perm=50)
    assert ladder_steps({"a": base}, steps=(("x", "a", "b"),)) == {"steps": [], "abstentions": {}, "missing": ["x: b"]}


def _planned(dataset, tag1, program, n_options=None, option=0):
    info = {} if n_options is None else {"n_options": n_options, "option": option}
    return {"id": f"{dataset}-{len(program)}", "metadata": {"dataset": dataset},
            "steps": [{"iteration": 1, "critic": {"judgement": "Error", "tag1": tag1, "tag2": []},
                       "program": program, "planner_info": info},
                      {"iteration": 2, "critic": {"judgement": "Correct"}, "status": "accepted"}]}


def test_planner_choices_split_a_concentrated_planner_into_its_labels_and_its_choices():
    # Trained planner: two answers whose critique left one option (program A), three chosen among
    # several: A, A, then B for another label set. Four of five plans are A (80%).
    trained = [_planned("testbed", ["X"], "A", 1), _planned("testbed", "X", "A", 1),
               _planned("testbed", ["Y", "X"], "A", 3, 1), _planned("testbed", ["X", "Y"], "A", 3, 1),
               _planned("testbed", ["Z"], "B", 2, 0), _planned("trivia", ["Z"], "C", 2, 1)]
    out = planner_choices(trained, dataset="testbed")
    assert out == {"plans": 5, "distinct": 2, "top_share": 0.8, "label_sets": 3, "top_label_share": 0.4,
                   "label_fixed_share": 1.0, "chooses": True, "forced": 2, "chosen": 3, "chosen_top_share": 0.6667}
    assert planner_choices(trained)["plans"] == 6  # every dataset
    # One label set that got two programs: only the usual one counts as following the labels.
    mixed = [_planned("testbed", ["X"], "A", 2, 0), _planned("testbed", ["X"], "A", 2, 0),
             _planned("testbed", ["X"], "B", 2, 1)]
    assert planner_choices(mixed)["label_fixed_share"] == pytest.approx(0.6667)
    # A rule planner has no options: it neither is forced nor chooses.
    rule = planner_choices([_planned("testbed", ["X"], "A"), _planned("testbed", ["Y"], "B")])
    assert rule["chooses"] is False and rule["forced"] is None and rule["chosen_top_share"] is None
    assert rule["top_share"] == 0.5 and rule["label_sets"] == 2
    # Nothing planned: zero plans and no shares.
    empty = planner_choices([{"id": "q", "steps": [{"critic": {"judgement": "Correct"}}]}])
    assert empty["plans"] == 0 and empty["top_share"] is None and empty["label_fixed_share"] is None
