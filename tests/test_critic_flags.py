"""Flags that catch a critic at chance (stages 05, 06, 07): each reason is raised by the case it
names and by nothing else, and what was not measured raises none."""

import pytest

from ragcritic_lib.critic import flags
from ragcritic_lib.critic.benchmark import benchmark_metrics
from ragcritic_lib.critic.data import critic_dpo_metrics

GOOD_CAL = {"fitted": True, "correct_acc": 0.9, "error_acc": 0.52, "argmax_correct_acc": 0.1, "argmax_error_acc": 0.98}
RISING = [{"examples": 400, "examples_seen": 400, "dev_auroc": 0.52}, {"examples": 800, "examples_seen": 800,
                                                                          "dev_auroc": 0.61}]


def test_a_healthy_sft_critic_raises_nothing():
    assert flags.sft_degenerate(RISING, GOOD_CAL) == []


@pytest.mark.parametrize("cal,said", [
    ({"fitted": True, "correct_acc": 0.0, "error_acc": 1.0}, "every answer called Error"),
    ({"fitted": True, "correct_acc": 1.0, "error_acc": 0.0}, "every answer called Correct"),
    ({"fitted": False, "argmax_correct_acc": 0.0, "argmax_error_acc": 1.0}, "generated: every answer called Error"),
])
def test_one_verdict_on_dev_is_flagged(cal, said):
    found = flags.sft_degenerate(RISING, cal)
    assert len(found) == 1 and "one verdict on dev" in found[0] and said in found[0]


def test_the_calibrated_verdict_is_judged_when_fitted_not_the_generated_one():
    # the generated verdict is all Error (common for a small critic), the calibrated one is not
    cal = {**GOOD_CAL, "argmax_correct_acc": 0.0, "argmax_error_acc": 1.0}
    assert flags.one_verdict(cal, "x") == []


@pytest.mark.parametrize("curve,flagged", [
    ([{"examples": 1, "dev_auroc": 0.60}, {"examples": 2, "dev_auroc": 0.61}, {"examples": 3, "dev_auroc": 0.55}], True),
    ([{"examples": 1, "dev_auroc": 0.60}, {"examples": 2, "dev_auroc": 0.50}, {"examples": 3, "dev_auroc": 0.63}], False),
    ([{"examples": 1, "dev_auroc": 0.60}], False),                       # one point: cannot tell
    ([{"examples": 1, "dev_auroc": None}, {"examples": 2, "dev_auroc": 0.6}], False),
])
def test_a_curve_that_never_rises_is_flagged(curve, flagged):
    found = flags.sft_degenerate(curve, GOOD_CAL)
    assert bool(found) is flagged and all("never rises" in f for f in found)


def test_the_verdict_body_stage_flags_a_flat_curve_and_counts_its_dev_answers():
    from ragcritic_lib.critic.data import critic_body_metrics

    user = {"role": "user", "content": "Question: Who?\nPassages:\n[1] Ann did.\nAnswer to check: Ann\n"}
    dev = [{"messages": [user, {"role": "assistant", "content": '{"Judgement": "%s"}' % v}]}
           for v in ("Error", "Error", "Correct")]
    flat = {"body": "probe", "examples": 40, "layer": 18, "C": 0.1, "seconds": 2.0, "sources": ["pool"],
            "curve": [{"examples_seen": 10, "dev_auroc": 0.70}, {"examples_seen": 40, "dev_auroc": 0.71}]}
    m = critic_body_metrics(verdict_body=flat, dev_examples=dev)
    assert m["dev"] == {"n": 3, "errors": 2, "correct": 1}
    assert m["degenerate"] == ["critic_body: the dev curve never rises (first 0.700, best later 0.710, 2 points)"]
    assert "curve" not in m["verdict_body"] and [p["examples"] for p in m["learning_curve"]] == [10, 40]
    rising = {**flat, "curve": [{"examples_seen": 10, "dev_auroc": 0.60}, {"examples_seen": 40, "dev_auroc": 0.71}]}
    assert critic_body_metrics(verdict_body=rising, dev_examples=dev)["degenerate"] == []
    generative = critic_body_metrics(verdict_body={"body": "generative"}, dev_examples=dev)
    assert generative["learning_curve"] == [] and generative["degenerate"] == []


def test_dpo_that_moves_nothing_or_learns_no_preference_is_flagged():
    assert flags.dpo_degenerate({"before": 0.70, "after": 0.7528}, {"last_reward_accuracy": 0.74}, GOOD_CAL) == []
    moved_nothing = flags.dpo_degenerate({"before": 0.75, "after": 0.7520}, {"last_reward_accuracy": 0.74}, GOOD_CAL)
    assert moved_nothing == ["critic_dpo: DPO moved nothing (dev AUROC 0.7500 -> 0.7520)"]
    chance = flags.dpo_degenerate({"before": 0.7, "after": 0.8}, {"last_reward_accuracy": 0.5}, GOOD_CAL)
    assert chance == ["critic_dpo: no preference learned (final reward accuracy 0.500)"]
    assert flags.dpo_degenerate({"before": None, "after": 0.7}, {"last_reward_accuracy": None}, GOOD_CAL) == []


def test_critic_dpo_metrics_carry_the_flags():
    fit = {"run": {"steps": 2, "curve": [{"loss": 0.7, "reward_accuracy": 0.4, "reward_margin": 0.0}]},
           "seconds": 1.0, "pairs_used": 8, "dropped_too_long": 0, "dev_auroc_before": 0.6, "dev_auroc_after": 0.6}
    m = critic_dpo_metrics(pair_counts={"total": 8}, balance={}, beta=0.1, fit=fit, calibration=GOOD_CAL)
    assert m["degenerate"] == ["critic_dpo: DPO moved nothing (dev AUROC 0.6000 -> 0.6000)",
                               "critic_dpo: no preference learned (final reward accuracy 0.400)"]


def _score(auroc, low, high, tier1):
    return {"identification": {"acc_avg": 0.6}, "classification": {"tag1_f1": tier1}, "verdict_auroc": auroc,
            "verdict_auroc_ci_low": low, "verdict_auroc_ci_high": high}


@pytest.mark.parametrize("score,style,said", [
    (_score(0.80, 0.74, 0.86, 0.4), 0.70, None),
    (_score(0.55, 0.47, 0.63, 0.4), 0.50, "holds 0.5"),
    (_score(0.72, 0.66, 0.78, 0.4), 0.75, "below the style-only baseline's 0.750"),
    (_score(0.80, 0.74, 0.86, 0.0), 0.70, "tier-1 F1 is 0"),
    (_score(None, None, None, None), None, None),
])
def test_a_trained_critic_at_chance_below_style_or_without_tier1_is_flagged(score, style, said):
    found = flags.benchmark_critic_degenerate("SFT critic", score, style)
    assert (found == []) if said is None else (len(found) == 1 and said in found[0] and found[0].startswith("SFT critic:"))


def test_the_benchmark_metrics_flag_trained_critics_only():
    results = {"SFT critic": _score(0.55, 0.47, 0.63, 0.0), "base zero-shot": _score(0.5, 0.4, 0.6, 0.0)}
    m = benchmark_metrics(report={}, table=[], results=results, by_dataset={}, known_causes={}, critics={},
                          style_baseline={"verdict_auroc": 0.6}, degenerate=["too few right answers"])
    assert m["degenerate"][0] == "too few right answers"
    assert [f.split(":")[0] for f in m["degenerate"][1:]] == ["SFT critic"] * 3


def _tags(tier1_f1, named=0.0, n=40):
    tier = {"precision": tier1_f1, "recall": tier1_f1, "f1": tier1_f1, "named_share": named}
    return {"n": n, "tag1": tier, "tag2": dict(tier)}


def test_critiques_that_name_no_gold_tier1_label_are_flagged_and_nothing_else():
    found = flags.sft_degenerate(RISING, GOOD_CAL, tags=_tags(0.0, named=0.25))
    assert found == ["critic_sft: its critiques of 40 wrong dev answers name no gold tier-1 label "
                     "(tier-1 F1 0; 25% name any tier-1 label)"]
    assert flags.sft_degenerate(RISING, GOOD_CAL, tags=_tags(0.31, named=0.9)) == []
    assert flags.sft_degenerate(RISING, GOOD_CAL, tags=_tags(0.0, n=0)) == []  # nothing was tagged
    assert flags.sft_degenerate(RISING, GOOD_CAL, tags=None) == []


def test_tag_quality_scores_each_tier_and_counts_critiques_naming_a_label():
    from ragcritic_lib.critic.benchmark import tag_quality
    from ragcritic_lib.critic.critics import CriticParse
    from ragcritic_lib.mining.taxonomy import load_taxonomy

    tax = load_taxonomy()
    a, b = tax.tier1[0], tax.tier1[1]
    gold = [{"Judgement": "Error", "tag1": [a], "tag2": [tax.tier2[0]]},
            {"Judgement": "Error", "tag1": [b], "tag2": []}]
    preds = [CriticParse(judgement="Error", tag1=[a], tag2=[]), CriticParse(judgement="Error", tag1=[], tag2=[])]
    got = tag_quality(preds, gold, tax)
    assert got["n"] == 2
    assert got["tag1"] == {"precision": 1.0, "recall": 0.5, "f1": 0.6667, "named_share": 0.5}
    assert got["tag2"]["f1"] == 0.0 and got["tag2"]["named_share"] == 0.0
    with pytest.raises(ValueError, match="1 critiques for 2"):
        tag_quality(preds[:1], gold, tax)


def test_dpo_selected_on_held_out_pairs_is_flagged_by_their_loss_not_the_auroc():
    same_auroc = {"before": 0.48, "after": 0.48}
    learned = {"n": 200, "loss_before": 0.6931, "loss_after": 0.61}
    assert flags.dpo_degenerate(same_auroc, {"last_reward_accuracy": 0.7}, GOOD_CAL, dev_pairs=learned) == []
    stuck = {"n": 200, "loss_before": 0.6931, "loss_after": 0.6931}
    assert flags.dpo_degenerate(same_auroc, {"last_reward_accuracy": 0.7}, GOOD_CAL, dev_pairs=stuck) == [
        "critic_dpo: no preference learned on held-out pairs (dev pair loss 0.6931 -> 0.6931)"]
    found = flags.dpo_degenerate(same_auroc, {"last_reward_accuracy": 0.7}, GOOD_CAL)
    assert found == ["critic_dpo: DPO moved nothing (dev AUROC 0.4800 -> 0.4800)"]
    tagless = flags.dpo_degenerate(same_auroc, {"last_reward_accuracy": 0.7}, GOOD_CAL, dev_pairs=learned,
                                   tags=_tags(0.0))
    assert len(tagless) == 1 and tagless[0].startswith("critic_dpo: its critiques of 40 wrong dev answers")


def _baseline(auroc, low, high, unparsed):
    return {"verdict_auroc": auroc, "verdict_auroc_ci_low": low, "verdict_auroc_ci_high": high,
            "parse_failure_rate": unparsed}


@pytest.mark.parametrize("score,said", [
    (_baseline(0.70, 0.62, 0.78, 0.0), []),
    (_baseline(0.70, 0.62, 0.78, 0.5), []),  # half unparsed is not yet "mostly"
    (_baseline(0.70, 0.62, 0.78, 0.993), ["99.3% of its critiques unparsed"]),
    (_baseline(0.502, 0.434, 0.572, 0.0), ["0.502 with a 95% CI (0.434-0.572) that holds 0.5"]),
    (_baseline(0.502, 0.434, 0.572, 0.993), ["unparsed", "holds 0.5"]),
    (_baseline(0.30, 0.22, 0.38, 0.0), []),  # below chance, but its interval excludes 0.5
    (_baseline(None, None, None, None), []),
])
def test_an_untrained_critic_mostly_unparsed_or_at_chance_is_flagged(score, said):
    from ragcritic_lib.critic.baseline_flags import baseline_critic_degenerate

    found = baseline_critic_degenerate("base zero-shot", score)
    assert len(found) == len(said)
    assert all(part in f and f.startswith("baseline base zero-shot: ") for part, f in zip(said, found))


def test_only_the_critics_not_trained_here_get_baseline_flags_in_table_order():
    from ragcritic_lib.critic.baseline_flags import baseline_critics_degenerate

    results = {"SFT critic": _baseline(0.5, 0.4, 0.6, 0.9), "base zero-shot": _baseline(0.5, 0.4, 0.6, 0.9),
               "heuristic": _baseline(0.503, 0.448, 0.558, 0.0), "served": _baseline(0.8, 0.7, 0.9, 0.1)}
    found = baseline_critics_degenerate(results, ["SFT critic", "SFT+DPO critic"])
    assert [f.split(":")[0] for f in found] == ["baseline base zero-shot"] * 2 + ["baseline heuristic"]


def _critiques(*sets):
    from ragcritic_lib.critic.critics import CriticParse

    return [CriticParse(judgement="Error" if s else "Correct", tag1=list(s)) for s in sets]


def test_label_set_concentration_counts_unordered_sets_over_labelled_critiques_only():
    from ragcritic_lib.critic.baseline_flags import label_set_concentration

    parses = _critiques(("B", "A"), ("A", "B"), ("A",), (), ()) + [{"tag1": ["A", "B"]}]
    assert label_set_concentration(parses) == {"labelled": 4, "top_set": ["A", "B"], "top_count": 3,
                                               "top_share": 0.75}
    assert label_set_concentration(_critiques((), ())) == {"labelled": 0, "top_set": [], "top_count": 0,
                                                           "top_share": None}
    # a tie goes to the first set in sorted order, so the record does not depend on the answers' order
    assert label_set_concentration(_critiques(("B",), ("A",)))["top_set"] == ["A"]
    assert label_set_concentration(_critiques(("A",), ("B",)))["top_set"] == ["A"]


@pytest.mark.parametrize("sets,flagged", [
    ([("A", "B")] * 241 + [("B",)] * 5, True),  # the zero-shot model copying its prompt's example
    ([("A", "B")] * 80 + [("B",)] * 20, False),  # 80% is not yet "more than 80%"
    ([("A", "B")] * 81 + [("B",)] * 19, True),
    ([("A",)] * 19, False),  # every critique one set, but too few critiques to say so
    ([("A",)] * 34 + [("A", "C")] * 31 + [("B",)] * 51, False),  # the SFT critic's spread
    ([()] * 300, False),  # no labels at all: nothing to concentrate
])
def test_a_critic_naming_one_label_set_in_most_critiques_is_flagged(sets, flagged):
    from ragcritic_lib.critic.baseline_flags import label_set_concentration, one_label_set_flags

    found = one_label_set_flags({"base zero-shot": label_set_concentration(_critiques(*sets))})
    assert bool(found) == flagged
    if flagged:
        assert found[0].startswith("base zero-shot: names one tier-1 label set (A, B) in ")
        assert f"of {sum(1 for s in sets if s)} labelled critiques" in found[0]


def test_one_label_set_flags_read_every_critic_in_table_order():
    from ragcritic_lib.critic.baseline_flags import label_set_concentration, one_label_set_flags

    one, spread = _critiques(*[("A",)] * 30), _critiques(*[("A",)] * 15 + [("B",)] * 15)
    found = one_label_set_flags({"SFT critic": label_set_concentration(one), "heuristic": label_set_concentration(spread),
                                 "base zero-shot": label_set_concentration(one)})
    assert [f.split(":")[0] for f in found] == ["SFT critic", "base zero-shot"]
    assert "(100.0%)" in found[0]
