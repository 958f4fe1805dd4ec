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
    assert bench.shipped_set(18) == "18+last" and bench.shipped_set("24") in sets


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
    row, (scores, oof) = bench._fit_one("1+last")
    assert oof is None and "train_oof_auroc" not in row  # out-of-fold scores only when the train set chooses
    assert row["features"] == 4 and len(scores) == 20 and len(row["dev_auroc_orders"]) == 2
    assert row["dev_auroc"] == row["dev_auroc_orders"][0] > 0.9 and row["ci_low"] <= row["dev_auroc"] <= row["ci_high"]


def _grouped(bench, n_questions: int, per_question: int, seed: int = 5):
    """Probe samples in groups of answers to one question, the label and a noisy signal per sample."""
    rng = np.random.default_rng(seed)
    y = [bool((q + k) % 3) for q in range(n_questions) for k in range(per_question)]
    groups = [f"q{q}" for q in range(n_questions) for _ in range(per_question)]
    f = np.array([[[1.0 if v else -1.0] * 2] * 3 for v in y]) + rng.normal(0, 1.0, (len(y), 3, 2))
    bench._SHARED.update(f_train=f, f_dev=f[:30], y_train=y, y_dev=y[:30], seed=13, boot=50, groups=groups,
                         sets={"1+last": [1, "last"]}, orders=1, cv_repeats=1, select="train")
    return f, y, groups


def test_out_of_fold_scores_come_from_probes_that_never_saw_the_question(bench, monkeypatch) -> None:
    import ragcritic_lib.critic.probe as probe

    f, y, groups = _grouped(bench, n_questions=30, per_question=3)
    seen: list[set] = []
    real_fit = probe.fit_probe

    def spy(features, labels, **kw):
        seen.append({tuple(np.round(r, 6)) for r in np.asarray(features)})
        return real_fit(features, labels, **kw)

    monkeypatch.setattr(probe, "fit_probe", spy)
    x = bench.select(f, [1, "last"])
    oof = bench._out_of_fold(x)
    assert len(seen) == 5 and len(oof) == len(y)
    for q in set(groups):  # every answer to a question is held out together, by a probe that never read them
        rows = {tuple(np.round(x[i], 6)) for i, g in enumerate(groups) if g == q}
        assert sum(rows <= s for s in seen) == 4 and not any(rows & s for s in seen if not rows <= s)
    row, (scores, oof2) = bench._fit_one("1+last")
    assert oof2 is not None and 0.5 < row["train_oof_auroc"] <= 1.0
    assert row["train_oof_ci"][0] <= row["train_oof_auroc"] <= row["train_oof_ci"][1]


def test_the_grouped_paired_difference_is_zero_for_the_same_scores_and_signed_for_better_ones(bench) -> None:
    y = [bool(i % 2) for i in range(40)]
    groups = [i // 2 for i in range(40)]
    good = [float(v) + 0.1 * i / 40 for i, v in enumerate(y)]
    noisy = [0.3 * float(v) + (i * 7 % 11) / 11 for i, v in enumerate(y)]
    same = bench.paired_group_diff(good, good, y, groups, seed=1, n_boot=100)
    assert same == {"diff": 0.0, "low": 0.0, "high": 0.0}
    better = bench.paired_group_diff(good, noisy, y, groups, seed=1, n_boot=200)
    assert better["diff"] > 0 and better["low"] <= better["diff"] <= better["high"]


def test_the_train_choice_needs_an_interval_above_the_shipped_set_and_dev_only_confirms(bench) -> None:
    shipped = {"name": "24+last", "dev_auroc": 0.75, "train_oof_auroc": 0.70}
    near = {"name": "21", "dev_auroc": 0.80, "train_oof_auroc": 0.74, "vs_shipped": {"diff": 0.05},
            "train_vs_shipped": {"diff": 0.04, "low": -0.01, "high": 0.09}}
    clear = {"name": "18", "dev_auroc": 0.70, "train_oof_auroc": 0.73, "vs_shipped": {"diff": -0.05},
             "train_vs_shipped": {"diff": 0.03, "low": 0.01, "high": 0.05}}
    kept = bench.train_selection([shipped, near], "24+last")
    assert kept["chosen_by_train"] == "24+last" and kept["best_on_train"] == "21"
    assert kept["clearly_above_shipped_on_train"] == [] and kept["chosen_dev_vs_shipped"] is None
    moved = bench.train_selection([shipped, near, clear], "24+last")
    assert moved["chosen_by_train"] == "18" and moved["chosen_dev_auroc"] == 0.70  # dev does not overrule it
    assert moved["chosen_dev_vs_shipped"] == {"diff": -0.05}


def test_span_sets_read_the_answer_span_beside_the_verdict_states(bench) -> None:
    f = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)  # 2 samples, embeddings + 3 layers, width 3
    spans = f + 100
    assert bench.select(f, ["a1"], spans)[0].tolist() == [103, 104, 105]
    assert bench.select(f, ["alast", 1, "last"], spans)[0].tolist() == [109, 110, 111, 3, 4, 5, 9, 10, 11]
    assert bench.select(f, [1, "last"], spans).tolist() == bench.select(f, [1, "last"]).tolist()
    with pytest.raises(ValueError, match="a1.*--answer-span"):
        bench.select(f, ["a1"])
    both = np.concatenate([f, spans], axis=1)
    halves = bench.split_spans(both)
    assert halves[0].tolist() == f.tolist() and halves[1].tolist() == spans.tolist()
    sets = bench.answer_span_sets(30, 18)
    assert sets["a18+18+last"] == ["a18", 18, "last"] and sets["alast"] == ["alast"]
    assert sorted(k for k in sets if "+" not in k) == ["a15", "a18", "a24", "alast"]


def test_a_features_file_is_reused_only_with_the_states_asked_for(bench, tmp_path) -> None:
    path = tmp_path / "states.npz"
    np.savez(path, train=np.zeros((3, 4, 2)), dev=np.zeros((2, 4, 2)), seconds=1.0, device="cpu", answer_span=False)
    assert bench._load_features(path, 3, 2)[0].shape == (3, 4, 2)
    assert bench._load_features(path, 3, 2, answer_span=True) is None
    assert bench._load_features(path, 4, 2) is None


def test_the_answer_span_holds_exactly_the_answers_tokens() -> None:
    pytest.importorskip("torch")
    from test_llm import _write_tiny_model

    import tempfile
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragcritic_lib.critic.probe import answer_span

    bench = load_script("benchmarks/bench_probe_layers.py")
    with tempfile.TemporaryDirectory() as tmp:
        folder = _write_tiny_model(Path(tmp) / "base")
        tok = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    user = "Question: who?\nPassages:\n[1] Ada Byron wrote it.\nAnswer to check: {}\n\nReply with JSON."
    convs = [[{"role": "system", "content": "Judge."}, {"role": "user", "content": user.format(a)}]
             for a in ("Ada Byron", "a much longer answer than the other one", "")]
    for conv, answer in zip(convs, ("Ada Byron", "a much longer answer than the other one")):
        ids, start, end = answer_span(tok, conv)
        assert tok.decode(ids[start:end]).strip() == answer and end < len(ids)
    assert answer_span(tok, convs[2])[1:] == (0, 0)
    feats = bench.all_layer_span_features(model, tok, convs, batch_size=2)
    n_states = model.config.num_hidden_layers + 1
    assert feats.shape == (3, 2 * n_states, model.config.hidden_size)
    states, spans = bench.split_spans(feats)
    plain = bench.all_layer_features(model, tok, convs, batch_size=1)
    assert np.allclose(states, plain, atol=1e-5)  # the first half is the verdict position's
    assert np.allclose(spans[2], states[2])  # no answer tokens: the verdict state stands in
    assert not np.allclose(spans[0], states[0])
    assert np.allclose(bench.select(states, ["last"], spans), plain[:, -1])  # "last" stays the verdict position's
    with pytest.raises(ValueError, match="Answer to check"):
        answer_span(tok, [{"role": "user", "content": "no mark here"}])


def test_the_paired_difference_within_kinds_ignores_what_the_kinds_tell(bench) -> None:
    y = [bool(i % 2) for i in range(40)]
    kinds = ["hard" if i < 20 else "easy" for i in range(40)]
    groups = [i // 2 for i in range(40)]
    reads = [float(v) for v in y]  # orders every pair inside each kind
    kind_only = [1.0 if k == "hard" else 0.0 for k in kinds]  # knows the kind, nothing else
    within = bench.paired_group_diff(reads, kind_only, y, groups, seed=1, n_boot=100, kinds=kinds)
    assert within["diff"] == 0.5 and within["low"] == within["high"] == 0.5
    plain = bench.paired_group_diff(reads, kind_only, y, groups, seed=1, n_boot=100)
    assert plain["diff"] == 0.5  # the kind-only score is at chance overall here too: balanced kinds
