"""Critic data: samples, question-level splits without leakage, balancing and DPO pair counts."""

from __future__ import annotations

import json

import pytest

from ragcritic_lib.critic.data import (
    balance_correct,
    check_no_leakage,
    critic_dpo_metrics,
    critic_sft_metrics,
    dpo_pairs,
    label_counts,
    make_sample,
    make_samples,
    sft_examples,
    split_by_question,
)
from ragcritic_lib.critic.critics import parse_critic_output
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.mining.taxonomy import load_taxonomy


@pytest.fixture(scope="module")
def tx():
    return load_taxonomy()


def _err(i: int, t1: str, t2: str, qid: str | None = None) -> dict:
    return {"id": qid or f"q{i}", "dataset": "tb", "question": f"Question {i}?", "prediction": f"wrong {i}",
            "golden_answers": ["GOLD"], "passages": [{"id": "p", "contents": f"T{i}\nbody {i}"}],
            "metadata": {"type": "factual"}, "evidence": {"known_causes": ["supporting_not_retrieved"]},
            "critic_target": {"Judgement": "Error", "Error_analysis": f"why {i}", "tag1": [t1], "tag2": [t2],
                              "tag3": [f"tag {i}"]}}


def _cor(i: int, qid: str | None = None) -> dict:
    return {"id": qid or f"c{i}", "dataset": "tb", "question": f"Question c{i}?", "prediction": f"right {i}",
            "golden_answers": ["GOLD"], "passages": [], "correct": True}


def _four_errors(tx) -> list[dict]:
    t1 = tx.tier1
    return [_err(i, t1[i], tx.children(t1[i])[0]) for i in range(4)]


def test_sample_keeps_critic_input_and_target_only(tx) -> None:
    s = make_sample(_err(1, tx.tier1[0], tx.tier2[0]), correct=False, max_analysis_words=1)
    assert s["qkey"] == "tb::q1" and s["passages"] == ["T1\nbody 1"] and s["judgement"] == "Error"
    assert s["tag1"] == [tx.tier1[0]] and s["known_causes"] == ["supporting_not_retrieved"] and s["type"] == "factual"
    assert json.loads(s["target"])["Error_analysis"] == "why"
    assert "GOLD" not in json.dumps(s)
    c = make_sample(_cor(1), correct=True)
    assert c["target"] == '{"Judgement": "Correct"}' and c["tag1"] == []


def test_pool_and_target_must_agree(tx) -> None:
    bad = {**_err(1, tx.tier1[0], tx.tier2[0]), "critic_target": {"Judgement": "Correct"}}
    with pytest.raises(DataFormatError, match="record q1: target judgement 'Correct' but the record comes from the error"):
        make_sample(bad, correct=False)
    with pytest.raises(DataFormatError, match="missing key 'prediction'"):
        make_sample({"id": "x", "question": "q"}, correct=True)


def test_split_by_question_has_no_leakage_and_exact_sizes(tx) -> None:
    # 10 questions; questions 0-4 have two pool members' errors and one correct answer each.
    errs = [_err(i, tx.tier1[0], tx.tier2[0], qid=f"q{i}") for i in range(10)]
    errs += [_err(i, tx.tier1[1], tx.tier2[2], qid=f"q{i}") for i in range(5)]
    cors = [_cor(i, qid=f"q{i}") for i in range(5)]
    samples = make_samples(errs, cors)
    splits = split_by_question(samples, dev_fraction=0.2, test_fraction=0.2, seed=3)
    check_no_leakage(splits)
    qkeys = {name: {s["qkey"] for s in rows} for name, rows in splits.items()}
    assert [len(qkeys[n]) for n in ("train", "dev", "test")] == [6, 2, 2]
    assert sum(len(r) for r in splits.values()) == len(samples) == 20
    assert split_by_question(samples, dev_fraction=0.2, test_fraction=0.2, seed=3) == splits
    assert split_by_question(list(reversed(samples)), dev_fraction=0.2, test_fraction=0.2, seed=3)["test"][0]["qkey"] \
        in qkeys["test"]


def test_leakage_is_detected() -> None:
    with pytest.raises(ValueError, match="question tb::q1 is in both 'train' and 'test'"):
        check_no_leakage({"train": [{"qkey": "tb::q1"}], "test": [{"qkey": "tb::q1"}]})
    with pytest.raises(ValueError, match="bad split fractions"):
        split_by_question([], dev_fraction=0.5, test_fraction=0.5, seed=0)


def test_balance_correct_equal_counts(tx) -> None:
    samples = make_samples(_four_errors(tx) + [_err(4, tx.tier1[0], tx.tier2[0])], [_cor(i) for i in range(8)])
    out, counts = balance_correct(samples, seed=0)
    assert counts == {"errors_available": 5, "correct_available": 8, "errors": 5, "correct": 5}
    assert sum(s["judgement"] == "Error" for s in out) == 5 and sum(s["judgement"] == "Correct" for s in out) == 5
    out, counts = balance_correct(samples, seed=0, max_samples=7)
    assert (counts["errors"], counts["correct"], len(out)) == (3, 3, 6)
    out2, _ = balance_correct(samples, seed=0, max_samples=7)
    assert out == out2


def test_balance_correct_refuses_an_empty_balanced_set(tx) -> None:
    only_errors = make_samples(_four_errors(tx), [])
    with pytest.raises(ValueError, match=r"4 wrong and 0 right answers .*error_sampling.questions_per_dataset"):
        balance_correct(only_errors, seed=0)
    with pytest.raises(ValueError, match="0 wrong and 2 right"):
        balance_correct(make_samples([], [_cor(0), _cor(1)]), seed=0)
    with pytest.raises(ValueError, match="max_samples=1"):
        balance_correct(make_samples(_four_errors(tx), [_cor(0)]), seed=0, max_samples=1)


def test_sft_examples_end_with_the_target(tx) -> None:
    samples = make_samples(_four_errors(tx)[:1], [_cor(0)])
    ex = sft_examples(samples, tx, top_k=1, passage_words=5)
    assert [m["role"] for m in ex[0]["messages"]] == ["system", "user", "assistant"]
    assert ex[0]["messages"][-1]["content"] == samples[0]["target"]
    assert ex[1]["messages"][-1]["content"] == '{"Judgement": "Correct"}'
    assert "Answer to check: wrong 0" in ex[0]["messages"][1]["content"]


def test_dpo_pair_counts_exact(tx) -> None:
    samples = make_samples(_four_errors(tx), [_cor(i) for i in range(3)])
    pairs, counts = dpo_pairs(samples, tx, k_coarse=2, k_fine=2, seed=0)
    assert counts == {"coarse_error_vs_correct": 4, "coarse_correct_vs_error": 6, "fine": 8,
                      "total_before_cap": 18, "total": 18, "coarse_kept": 10, "fine_kept": 8}
    by_target = {s["target"]: s for s in samples}
    for p in pairs:
        assert p["chosen"] != p["rejected"]
        chosen, rejected = by_target[p["chosen"]], json.loads(p["rejected"])
        if p["kind"] == "fine":
            assert chosen["judgement"] == rejected["Judgement"] == "Error"
            assert (chosen["tag1"], chosen["tag2"]) != (rejected["tag1"], rejected["tag2"])
        else:
            assert chosen["judgement"] != rejected["Judgement"]
        assert [m["role"] for m in p["prompt"]] == ["system", "user"]
    # same seed, same pairs; a cap keeps a seeded subset
    assert dpo_pairs(samples, tx, k_coarse=2, k_fine=2, seed=0)[0] == pairs
    capped, c2 = dpo_pairs(samples, tx, k_coarse=2, k_fine=2, seed=0, max_pairs=10)
    assert (c2["total_before_cap"], c2["total"], len(capped), c2["coarse_kept"] + c2["fine_kept"]) == (18, 10, 10, 10)


def test_dpo_fine_needs_different_tags_and_draws_distinct_texts(tx) -> None:
    t1, t2 = tx.tier1[0], tx.tier2[0]
    same = make_samples([_err(0, t1, t2), _err(1, t1, t2)], [_cor(0), _cor(1), _cor(2)])
    _, counts = dpo_pairs(same, tx, k_coarse=5, k_fine=3, seed=1)
    # no error with other tags -> no fine pair; two distinct error critiques -> 2 coarse per correct
    assert (counts["fine"], counts["coarse_correct_vs_error"], counts["coarse_error_vs_correct"]) == (0, 6, 2)
    no_correct = make_samples(_four_errors(tx), [])
    _, counts = dpo_pairs(no_correct, tx, k_coarse=1, k_fine=1, seed=0)
    assert (counts["coarse_error_vs_correct"], counts["fine"]) == (0, 4)


def test_label_counts(tx) -> None:
    samples = make_samples(_four_errors(tx) + [_err(9, tx.tier1[0], tx.children(tx.tier1[0])[0])], [_cor(0)])
    assert label_counts(samples, 1) == {tx.tier1[0]: 2, tx.tier1[1]: 1, tx.tier1[2]: 1, tx.tier1[3]: 1}


CALIBRATION = {"threshold": -1.87504, "auroc": 0.56666, "avg_acc": 0.5, "fitted": True, "n": 6, "n_error": 4}


def _fit(curve, **extra):
    run = {"method": "full", "examples": 4, "train_layers": 4, "steps": 3, "seconds": 9.0, "cache_seconds": 1.0,
           "train_tokens": 400, "best_dev_auroc": 0.6, "best_at_examples": 4, "stopped_early": False, "curve": curve}
    return {"examples": 4, "dropped_too_long": 1, "dev_examples": 6, "dev_dropped": 0, "tokens_per_example": 100.0,
            "cache_seconds": 1.0, "untrained_dev_auroc": 0.45, "comparison": {}, "method": "full",
            "settings": {"epochs": 2.0, "train_layers": 4, "max_length": 384}, "run": run, "seconds": 12.3, **extra}


def test_critic_sft_metrics_from_what_the_stage_computed(tx) -> None:
    data = {"examples": 4, "correct": 2, "errors": 2, "correct_share": 0.5, "questions": 3,
            "sources": {"pool": {"correct": 1, "error": 2}, "reference": {"correct": 1, "error": 0}}}
    evidence = {"current": {"n": 6, "with_deciding": 4, "in_prompt": 3, "share": 0.75},
                "first_words": {"n": 6, "with_deciding": 4, "in_prompt": 1, "share": 0.25}}
    curve = [{"examples_seen": 2, "loss": 2.5, "dev_auroc": 0.5}, {"examples_seen": 4, "loss": 1.25, "dev_auroc": 0.6},
             {"examples_seen": 6, "loss": 1.0, "dev_auroc": 0.55}]
    preview = [parse_critic_output(t, tx) for t in ('{"Judgement": "Correct"}', "", "not json")]
    metrics = critic_sft_metrics(data=data, evidence=evidence, style_shortcut_auroc=0.55, dev={"n": 6, "correct": 2},
                                 fit=_fit(curve), preview=preview, calibration=CALIBRATION,
                                 questions={"train": 3, "dev": 6})
    assert metrics["data"]["evidence_in_prompt"] == 0.75 and metrics["data"]["style_shortcut_auroc"] == 0.55
    assert metrics["train"] == {"steps": 3, "seconds": 12.3, "examples": 4, "dropped_too_long": 1, "device": "cpu",
                                "method": "full", "lora_r": None, "train_layers": 4, "epochs": 2.0,
                                "tokens_per_example": 100.0, "cache_seconds": 1.0, "stopped_early": False,
                                "best_at_examples": 4, "best_dev_auroc": 0.6, "select": "dev_auroc", "first_loss": 2.5, "last_loss": 1.0}
    # the device trained on: the fit's own word (a TRL run's), else where torch runs in this process
    import torch

    again = dict(data=data, evidence=evidence, style_shortcut_auroc=0.55, dev={"n": 6, "correct": 2}, preview=preview,
                 calibration=CALIBRATION, questions={"train": 3, "dev": 6})
    assert critic_sft_metrics(fit=_fit(curve, device="cuda x 2"), **again)["train"]["device"] == "cuda x 2"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "is_available", lambda: True)
        assert critic_sft_metrics(fit=_fit(curve), **again)["train"]["device"] == "cuda"
    # within the first epoch a point has seen as many distinct examples; later ones all of them
    assert metrics["learning_curve"] == [{"examples": 2, "examples_seen": 2, "dev_auroc": 0.5},
                                         {"examples": 4, "examples_seen": 4, "dev_auroc": 0.6},
                                         {"examples": 4, "examples_seen": 6, "dev_auroc": 0.55}]
    assert metrics["preview_parse_failures"] == 2
    assert metrics["verdict_calibration"] == {"threshold": -1.875, "auroc": 0.5667, "avg_acc": 0.5, "fitted": True,
                                              "n": 6, "n_error": 4}
    assert "ship" not in metrics and metrics["method_decision"] is None  # an older report without them
    empty = critic_sft_metrics(data=data, evidence=evidence, style_shortcut_auroc=None, dev={}, fit=_fit([]),
                               preview=[], calibration={}, questions={})
    assert (empty["train"]["first_loss"], empty["learning_curve"]) == (None, [])
    ship = {"form": "delta8", "rank": 0, "mb": 21.4, "max_mb": 24.0, "dev_auroc_trained": 0.75,
            "dev_auroc_shipped": 0.72, "auroc_loss": 0.03, "mean_abs_margin_diff": 0.1, "flag": True}
    decision = {"method": "full", "default": "full", "reason": "no method's advantage is clear"}
    shipped = critic_sft_metrics(data=data, evidence=evidence, style_shortcut_auroc=None, dev={},
                                 fit=_fit(curve, ship=ship, decision=decision), preview=[], calibration={}, questions={})
    assert (shipped["ship"], shipped["method_decision"]) == (ship, decision)
    from ragcritic_lib.pipeline import metrics_schema

    assert metrics_schema.problems("05_critic_sft", {**shipped, "verdict_calibration": {}}) == []
    bad = {**shipped, "verdict_calibration": {}, "ship": {**ship, "form": "merged"}}
    assert any("ship" in p and "form" in p for p in metrics_schema.problems("05_critic_sft", bad))


def test_critic_dpo_metrics_from_what_the_stage_computed() -> None:
    curve = [{"examples_seen": 0, "dev_auroc": 0.6},
             {"examples_seen": 8, "dev_auroc": 0.58, "loss": 0.69, "reward_accuracy": 0.5, "reward_margin": 0.01},
             {"examples_seen": 16, "dev_auroc": 0.57, "loss": 0.6, "reward_accuracy": 0.75, "reward_margin": 0.3}]
    fit = {"pairs_used": 16, "dropped_too_long": 0, "cache_seconds": 1.0, "dev_auroc_before": 0.6,
           "dev_auroc_after": 0.6, "kept_start": True, "settings": {}, "seconds": 5.5,
           "run": {"steps": 2, "curve": curve}}
    counts = {"coarse_error_vs_correct": 8, "fine": 8, "total": 16}
    balance = {"errors_available": 4, "correct_available": 2, "errors": 2, "correct": 2}
    metrics = critic_dpo_metrics(pair_counts=counts, balance=balance, beta=0.3, fit=fit, calibration=CALIBRATION)
    assert metrics["train"] == {"beta": 0.3, "steps": 2, "seconds": 5.5, "pairs_used": 16, "dropped_too_long": 0,
                                "device": "cpu", "first_loss": 0.69, "last_loss": 0.6, "last_reward_margin": 0.3,
                                "last_reward_accuracy": 0.75}
    # DPO did not beat the SFT start on dev: the metrics say so, and the SFT weights were kept
    assert metrics["dev_auroc"] == {"before": 0.6, "after": 0.6, "lowered": False, "kept_sft_weights": True}
    assert metrics["pairs"] == counts and metrics["curve"] == curve


def test_critic_sft_metrics_keep_the_probes_answer_span_layer_and_drop_unknown_keys(tx) -> None:
    from ragcritic_lib.pipeline import metrics_schema

    body = {"body": "probe", "layer": 18, "answer_layer": 18, "C": 0.02, "examples": 8, "seconds": 1.5,
            "curve": [{"examples_seen": 8, "dev_auroc": 0.7}], "best_dev_auroc": 0.7, "best_at_examples": 8,
            "sources": ["generator"], "scratch": 1}
    evidence = {"current": {"n": 6, "with_deciding": 4, "in_prompt": 3, "share": 0.75}}
    data = {"examples": 4, "correct": 2, "errors": 2, "correct_share": 0.5, "questions": 3,
            "sources": {"pool": {"correct": 1, "error": 2}, "reference": {"correct": 1, "error": 0}}}
    common = dict(data=data, evidence=evidence, style_shortcut_auroc=None, dev={}, fit=_fit([]),
                  preview=[], calibration={}, questions={})
    metrics = critic_sft_metrics(verdict_body=body, **common)
    assert metrics["verdict_body"]["answer_layer"] == 18 and "scratch" not in metrics["verdict_body"]
    plain = {k: v for k, v in body.items() if k != "answer_layer"}
    assert "answer_layer" not in critic_sft_metrics(verdict_body=plain, **common)["verdict_body"]
    assert metrics_schema.problems("05_critic_sft", {**metrics, "verdict_calibration": {}}) == []
