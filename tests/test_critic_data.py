"""Critic data: samples, question-level splits without leakage, balancing and DPO pair counts."""

from __future__ import annotations

import json
import math

import pytest

from ragcritic_lib.critic_data import (
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
from ragcritic_lib.critic import parse_critic_output
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.taxonomy import load_taxonomy


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


def _train_result(log_history: list[dict], examples: int):
    from ragcritic_lib.training import TrainResult

    return TrainResult(adapter_dir="data/x/adapter", is_adapter=True, base_model="m", steps=3, seconds=12.3456,
                       log_history=log_history, examples=examples, dropped_too_long=1, device="cpu")


CALIBRATION = {"threshold": -1.87504, "auroc": 0.56666, "avg_acc": 0.5, "fitted": True, "n": 6, "n_error": 4}


def test_critic_sft_metrics_from_what_the_stage_computed(tx) -> None:
    samples = make_samples(_four_errors(tx), [_cor(i) for i in range(2)])
    splits = split_by_question(samples, dev_fraction=0.0, test_fraction=0.0, seed=0)
    split_rows = [{"split": name, "questions": len({s["qkey"] for s in rows}), "samples": len(rows),
                   "errors": sum(s["judgement"] == "Error" for s in rows),
                   "correct": sum(s["judgement"] == "Correct" for s in rows)} for name, rows in splits.items()]
    train, balance = balance_correct(splits["train"], seed=0)
    history = [{"loss": 2.19731, "grad_norm": 1.5, "step": 1}, {"eval_loss": 2.0, "step": 1},
               {"loss": 1.71719, "step": 3}, {"train_runtime": 12.3, "train_loss": 1.9, "step": 3}]
    preview = [parse_critic_output(t, tx) for t in ('{"Judgement": "Correct"}', "", "not json")]
    metrics = critic_sft_metrics(split_rows=split_rows, balance=balance, result=_train_result(history, len(train)),
                                 preview=preview, calibration=CALIBRATION)
    assert metrics == {
        "splits": {"train": {"questions": 6, "samples": 6, "errors": 4, "correct": 2},
                   "dev": {"questions": 0, "samples": 0, "errors": 0, "correct": 0},
                   "test": {"questions": 0, "samples": 0, "errors": 0, "correct": 0}},
        "balance": {"errors_available": 4, "correct_available": 2, "errors": 2, "correct": 2},
        "train": {"steps": 3, "seconds": 12.3, "examples": 4, "dropped_too_long": 1, "device": "cpu",
                  "first_loss": 2.1973, "last_loss": 1.7172},
        "preview_parse_failures": 2,
        "verdict_calibration": {"threshold": -1.875, "auroc": 0.5667, "avg_acc": 0.5, "fitted": True, "n": 6,
                                "n_error": 4},
    }
    assert list(metrics) == ["splits", "balance", "train", "preview_parse_failures", "verdict_calibration"]
    # No logged loss (a run of zero steps): no first or last loss.
    empty = critic_sft_metrics(split_rows=[], balance=balance, result=_train_result([], 0), preview=[],
                               calibration={})
    assert (empty["train"]["first_loss"], empty["train"]["last_loss"], empty["splits"]) == (None, None, {})


def test_critic_dpo_metrics_from_what_the_stage_computed() -> None:
    history = [{"loss": 0.693147, "rewards/margins": 0.0, "rewards/accuracies": 0.0, "step": 1},
               {"loss": 0.77301, "rewards/margins": -0.14758, "rewards/accuracies": 0.25, "step": 3},
               {"train_runtime": 4.0, "step": 3}]
    counts = {"coarse_error_vs_correct": 2, "fine": 2, "total": 4}
    balance = {"errors_available": 4, "correct_available": 2, "errors": 2, "correct": 2}
    metrics = critic_dpo_metrics(pair_counts=counts, balance=balance, beta=0.3, result=_train_result(history, 4),
                                 calibration=CALIBRATION)
    assert metrics == {
        "pairs": counts, "balance": balance,
        "train": {"beta": 0.3, "steps": 3, "seconds": 12.3, "pairs_used": 4, "dropped_too_long": 1, "device": "cpu",
                  "first_loss": 0.6931, "last_loss": 0.773, "last_reward_margin": -0.1476, "last_reward_accuracy": 0.25},
        "verdict_calibration": {"threshold": -1.875, "auroc": 0.5667, "avg_acc": 0.5, "fitted": True, "n": 6,
                                "n_error": 4},
    }
    # Rewards not logged: None; logged on earlier rows only: the last row's is missing (NaN, as in
    # a DataFrame of the loss curve).
    no_rewards = critic_dpo_metrics(pair_counts=counts, balance=balance, beta=0.1,
                                    result=_train_result([{"loss": 0.5, "step": 1}], 1), calibration={})
    assert (no_rewards["train"]["last_reward_margin"], no_rewards["train"]["last_reward_accuracy"]) == (None, None)
    partial = critic_dpo_metrics(pair_counts=counts, balance=balance, beta=0.1,
                                 result=_train_result(history[:1] + [{"loss": 0.5, "step": 2}], 1), calibration={})
    assert math.isnan(partial["train"]["last_reward_margin"]) and partial["train"]["last_loss"] == 0.5
    empty = critic_dpo_metrics(pair_counts={}, balance=balance, beta=0.1, result=_train_result([], 0), calibration={})
    assert [empty["train"][k] for k in ("first_loss", "last_loss", "last_reward_margin")] == [None, None, None]
