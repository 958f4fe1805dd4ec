"""The cached critic trainer on a tiny random model: exactness of the split, learning, LoRA merge, DPO."""

import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ragcritic_lib.critic.critics import VERDICT_PREFIX  # noqa: E402
from ragcritic_lib.critic.train import (  # noqa: E402
    Encoded, SplitModel, TrainSettings, auroc, bootstrap_auroc_ci, cache_lower, critique_loss, learning_curve,
    merge_lora, train_dpo, train_sft, verdict_margins,
)


class CharTok:
    """Character-level stand-in for a tokenizer (ids 3..98)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3 + ord(c) % 96 for c in text]}


def tiny(layers=4, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()


def toy(n, seed, tok=CharTok()):
    """Error iff token 7 occurs in the prompt; the completion is the verdict."""
    rng = random.Random(seed)
    prefix = tok(VERDICT_PREFIX)["input_ids"]
    out = []
    for i in range(n):
        err = i % 2 == 0
        prompt = [rng.randrange(10, 90) for _ in range(rng.randrange(4, 9))]
        if err:
            prompt[rng.randrange(len(prompt))] = 7
        verdict = tok(VERDICT_PREFIX + ("Error" if err else "Correct"))["input_ids"]
        ids = prompt + verdict
        out.append(Encoded(ids=ids, n_prompt=len(prompt), verdict_pos=len(prompt) + len(prefix) - 1, is_error=err))
    return out


def test_split_model_equals_the_full_forward_on_right_padded_batches() -> None:
    model = tiny()
    enc = toy(6, seed=1)
    split = SplitModel(model, train_layers=2)
    cache = cache_lower(split, enc, batch_size=4, dtype="float32")
    with torch.no_grad():
        for e, h in zip(enc, cache):
            full = model(input_ids=torch.tensor([e.ids])).logits[0]
            pos = torch.arange(len(e.ids))
            got = split.upper_logits(h[None].float(), torch.zeros(len(e.ids), dtype=torch.long), pos)
            assert torch.allclose(got, full, atol=2e-2), (got - full).abs().max()


def test_auroc_matches_the_rank_definition_with_ties() -> None:
    s, y = [0.1, 0.4, 0.4, 0.8, 0.2], [False, True, False, True, False]
    # pairs (pos, neg): 0.4>0.1, 0.4=0.4 (half), 0.4>0.2, 0.8 beats all three -> (2.5 + 3) / 6
    assert auroc(s, y) == pytest.approx(5.5 / 6)
    assert auroc([1, 2], [True, True]) is None
    lo, hi = bootstrap_auroc_ci(s * 20, y * 20, seed=0, n_boot=300)
    assert lo <= auroc(s, y) <= hi
    # An infinite margin ranks; a NaN one cannot (sorting would put it anywhere), so it is refused.
    assert auroc([float("inf"), 0.4, 0.1], [True, True, False]) == 1.0
    with pytest.raises(ValueError, match="1 of 4 scores are NaN"):
        auroc([0.9, float("nan"), 0.1, 0.2], [True, True, False, False])


@pytest.mark.parametrize("method", ["full", "lora"])
def test_training_learns_a_verdict_and_keeps_the_best_dev_weights(method) -> None:
    tok = CharTok()
    train, dev = toy(160, seed=2), toy(40, seed=3)
    split = SplitModel(tiny(layers=3), train_layers=3)  # all layers: plain full fine-tuning (embeddings frozen)
    tc = cache_lower(split, train, batch_size=16, dtype="float32")
    dc = cache_lower(split, dev, batch_size=16, dtype="float32")
    before = auroc(verdict_margins(split, dc, dev, tok, batch_size=16, dtype="float32"), [d.is_error for d in dev])
    settings = TrainSettings(method=method, train_layers=3, epochs=12, learning_rate=3e-3 if method == "full" else 1e-2,
                             batch_size=16, eval_every=160, patience=20, seed=0, dtype="float32", lora_r=8, lora_alpha=16)
    rep = train_sft(split, tok, train, tc, dev, dc, settings)
    after = auroc(verdict_margins(split, dc, dev, tok, batch_size=16, dtype="float32"), [d.is_error for d in dev])
    assert rep.best_dev_auroc == pytest.approx(round(after, 4), abs=1e-3)  # the best weights are the ones kept
    assert after > max(0.85, before)
    assert rep.curve[-1]["loss"] < rep.curve[0]["loss"]
    curve = learning_curve(rep.to_dict(), len(train))
    assert curve[0]["examples"] == 160 and curve[-1]["examples"] == 160 and curve[-1]["examples_seen"] > 160
    if method == "lora":
        ids = torch.tensor([train[0].ids])
        with torch.no_grad():
            want = split.model(input_ids=ids).logits
            merge_lora(split.model)
            got = split.model(input_ids=ids).logits
        assert not any("lora" in n for n, _ in split.model.named_parameters())
        assert torch.allclose(got, want, atol=1e-4)


def test_select_dev_loss_keeps_the_weights_of_the_lowest_dev_critique_loss() -> None:
    # A critic whose verdict comes from another body is kept for what it writes after the verdict.
    tok = CharTok()
    train, dev = toy(96, seed=4), toy(24, seed=5)
    split = SplitModel(tiny(layers=3), train_layers=2)
    tc = cache_lower(split, train, batch_size=16, dtype="float32")
    dc = cache_lower(split, dev, batch_size=16, dtype="float32")
    before = critique_loss(split, dc, dev, batch_size=8, dtype="float32")
    settings = TrainSettings(method="full", train_layers=2, epochs=6, learning_rate=3e-3, batch_size=16,
                             eval_every=96, patience=20, seed=0, dtype="float32", verdict_weight=0.0,
                             select="dev_loss")
    rep = train_sft(split, tok, train, tc, dev, dc, settings)
    losses = [row["dev_loss"] for row in rep.curve]
    assert len(losses) == 6 and all("dev_auroc" in row for row in rep.curve)
    assert rep.select == "dev_loss" and rep.best_dev_loss == min(losses)
    assert rep.best_at_examples == rep.curve[losses.index(min(losses))]["examples_seen"]
    after = critique_loss(split, dc, dev, batch_size=8, dtype="float32")
    assert after == pytest.approx(rep.best_dev_loss, abs=1e-3) and after < before
    with pytest.raises(ValueError, match="select 'tokens'"):
        TrainSettings(select="tokens")


def _toy_pairs(n, seed, tok=CharTok()):
    """(chosen, rejected): each toy example against the same prompt with the other verdict."""
    flip = {True: "Correct", False: "Error"}
    chosen, rejected = [], []
    for e in toy(n, seed=seed):
        chosen.append(e)
        wrong = e.ids[: e.n_prompt] + tok(VERDICT_PREFIX + flip[e.is_error])["input_ids"]
        rejected.append(Encoded(ids=wrong, n_prompt=e.n_prompt, verdict_pos=e.verdict_pos, is_error=not e.is_error))
    return chosen, rejected


def test_dpo_prefers_the_chosen_completion() -> None:
    tok = CharTok()
    chosen, rejected = _toy_pairs(48, seed=4)
    dev = toy(24, seed=5)
    split = SplitModel(tiny(), train_layers=2)
    cc, rc = cache_lower(split, chosen, batch_size=16, dtype="float32"), cache_lower(split, rejected, batch_size=16, dtype="float32")
    dc = cache_lower(split, dev, batch_size=16, dtype="float32")
    settings = TrainSettings(method="full", train_layers=2, epochs=8, learning_rate=3e-3, batch_size=8, eval_every=48,
                             patience=20, seed=0, dtype="float32")
    rep = train_dpo(split, chosen, rejected, cc, rc, dev, dc, tok, settings, beta=0.3)
    assert rep.curve[0]["examples_seen"] == 0 and "loss" not in rep.curve[0]  # the SFT start, evaluated first
    assert rep.curve[-1]["reward_accuracy"] > 0.8
    assert rep.curve[-1]["loss"] < 0.6931


def test_dpo_selected_on_held_out_pairs_keeps_their_lowest_loss() -> None:
    import math

    tok = CharTok()
    chosen, rejected = _toy_pairs(48, seed=4)
    d_chosen, d_rejected = _toy_pairs(16, seed=6)
    dev = toy(24, seed=5)
    split = SplitModel(tiny(), train_layers=2)
    lower = lambda enc: cache_lower(split, enc, batch_size=16, dtype="float32")  # noqa: E731
    settings = TrainSettings(method="full", train_layers=2, epochs=4, learning_rate=3e-3, batch_size=8, eval_every=48,
                             patience=20, seed=0, dtype="float32", select="dev_pairs")
    with pytest.raises(ValueError, match="needs held-out preference pairs"):
        train_dpo(split, chosen, rejected, lower(chosen), lower(rejected), dev, lower(dev), tok, settings, beta=0.3)
    rep = train_dpo(split, chosen, rejected, lower(chosen), lower(rejected), dev, lower(dev), tok, settings, beta=0.3,
                    dev_pairs=(d_chosen, d_rejected, lower(d_chosen), lower(d_rejected)))
    losses = [row["dev_loss"] for row in rep.curve]
    assert losses[0] == pytest.approx(math.log(2), abs=1e-4) and rep.curve[0]["dev_pair_accuracy"] == 0.0
    assert rep.best_dev_loss == min(losses) < math.log(2)  # held-out pairs ranked better than the reference did
    kept = rep.curve[losses.index(min(losses))]
    assert rep.best_at_examples == kept["examples_seen"] and kept["dev_pair_accuracy"] > 0.5


def test_settings_reject_unknown_methods() -> None:
    with pytest.raises(ValueError, match="'adapters'"):
        TrainSettings(method="adapters")


# --------------------------------------------------------------------------------------------
# method: best, and the shipped critic
# --------------------------------------------------------------------------------------------
def test_paired_auroc_difference_and_its_interval() -> None:
    from ragcritic_lib.critic.train import paired_auroc_diff_ci

    y = [True, False] * 30
    good = [1.0 if e else 0.0 for e in y]
    noisy = [random.Random(i).random() for i in range(60)]
    out = paired_auroc_diff_ci(good, noisy, y, seed=0, n_boot=300)
    assert out["diff"] == pytest.approx(1.0 - auroc(noisy, y), abs=1e-4)
    assert 0 < out["low"] <= out["diff"] <= out["high"]
    same = paired_auroc_diff_ci(noisy, noisy, y, seed=0, n_boot=100)
    assert same == {"diff": 0.0, "low": 0.0, "high": 0.0}
    with pytest.raises(ValueError, match="differ in length"):
        paired_auroc_diff_ci(good, noisy[:-1], y, seed=0)


def test_the_default_method_stays_unless_another_is_clearly_better() -> None:
    from ragcritic_lib.critic.train import decide_method

    comp = {"full": {"dev_auroc": 0.60},
            "lora_r32": {"dev_auroc": 0.66, "vs_default": {"diff": 0.06, "low": -0.01, "high": 0.13}},
            "lora_r64": {"dev_auroc": 0.64, "vs_default": {"diff": 0.04, "low": 0.01, "high": 0.07}}}
    assert decide_method(comp, "full")["method"] == "lora_r64"  # r32 is higher but its CI reaches 0
    comp["lora_r64"]["vs_default"]["low"] = 0.0
    d = decide_method(comp, "full")
    assert d["method"] == "full" and "wholly above 0" in d["reason"]
    with pytest.raises(ValueError, match="default_method 'lora' is not among"):
        decide_method(comp, "lora")


def _chat(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        err = i % 2 == 0
        q = " ".join(rng.choice(["capital", "France", "Paris", "river", "yes", "no"]) for _ in range(5))
        ans = "Lyon" if err else "Paris"
        out.append({"messages": [{"role": "system", "content": "Judge."},
                                 {"role": "user", "content": f"{q}? Answer: {ans}"},
                                 {"role": "assistant", "content": VERDICT_PREFIX + ("Error" if err else "Correct") + '"}'}]})
    return out


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from test_llm import _write_tiny_model

    torch.set_num_threads(1)
    return _write_tiny_model(tmp_path_factory.mktemp("critic_train") / "base")


@pytest.mark.parametrize("method", ["best", "lora"])
def test_cached_sft_compares_ships_and_dpo_continues_the_shipped_critic(tiny_dir, tmp_path, method) -> None:
    from ragcritic_lib.critic import forms as model_forms
    from ragcritic_lib.critic.train import run_cached_dpo, run_cached_sft

    settings = TrainSettings(method=method, train_layers=2, epochs=1.0, batch_size=8, eval_every=16, patience=2,
                             max_length=256, seed=0, dtype="float32")
    fit = run_cached_sft(_chat(16, 1), _chat(12, 2), tiny_dir, tmp_path / "sft", settings=settings,
                         compare=("full", "lora_r4") if method == "best" else (), compare_examples=16,
                         lora_learning_rate=1e-3, lora_ranks=[4], bootstrap=50, ship_max_mb=5.0)
    manifest = model_forms.read_manifest(tmp_path / "sft" / "model")
    if method == "best":
        c = fit["comparison"]
        assert set(c) == {"full", "lora_r4"} and c["lora_r4"]["lora_r"] == 4 and c["full"]["examples"] == 16
        assert all(r["ci_low"] <= r["dev_auroc"] <= r["ci_high"] for r in c.values())
        assert "vs_default" in c["lora_r4"] and "vs_default" not in c["full"]
        assert fit["decision"]["default"] == "full"
        assert fit["method"] == ("lora" if fit["decision"]["method"] == "lora_r4" else "full")
    else:
        assert (fit["method"], fit["lora_r"], fit["decision"]) == ("lora", 4, None)
    assert manifest["form"] == ("adapter" if fit["method"] == "lora" else "layers")
    assert manifest["base"]["sha256"] == model_forms.base_sha256(tiny_dir)
    ship = fit["ship"]
    assert ship["form"] == manifest["form"] and ship["mb"] > 0 and ship["flag"] is False
    assert ship["mean_abs_margin_diff"] < 0.05  # bf16 rounding only
    dpo_settings = TrainSettings(method=fit["method"], train_layers=1, epochs=1.0, batch_size=4, eval_every=8,
                                 patience=2, max_length=256, seed=0, dtype="float32")
    pairs = [{"prompt": ex["messages"][:2], "chosen": ex["messages"][2]["content"],
              "rejected": VERDICT_PREFIX + ("Correct" if "Error" in ex["messages"][2]["content"] else "Error") + '"}'}
             for ex in _chat(8, 3)]
    dpo = run_cached_dpo(pairs, _chat(12, 2), tmp_path / "sft" / "model", tmp_path / "dpo", settings=dpo_settings,
                         beta=0.3, ship_max_mb=5.0)
    shipped = model_forms.read_manifest(tmp_path / "dpo" / "model")
    assert shipped["form"] == manifest["form"]
    assert shipped["base"] == manifest["base"]  # against the SFT critic's own base, not a rebuilt copy
    assert dpo["ship"]["flag"] is False


def test_the_cached_trainer_runs_where_torch_sees_a_gpu(monkeypatch) -> None:
    import torch

    from ragcritic_lib.critic.train import autocast_plan, train_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert train_device() == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert train_device() == "cuda"
    # autocast follows the device the weights are on; fp32 asked stays fp32 on either
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert autocast_plan(torch, "auto", "cuda:0") == ("cuda", True)
    assert autocast_plan(torch, "float32", torch.device("cuda", 0)) == ("cuda", False)
    assert autocast_plan(torch, "bfloat16", torch.device("cpu")) == ("cpu", True)
    assert autocast_plan(torch, "float32", "cpu") == ("cpu", False)


def test_split_model_builds_its_inputs_on_the_weights_device(tiny_dir) -> None:
    from ragcritic_lib.critic.train import load_split_model

    split, _ = load_split_model(tiny_dir, 1)
    assert split.device.type == "cpu"
    t = split.tensor([1, 2, 3])
    assert t.device == split.device and t.tolist() == [1, 2, 3]


def test_paired_auroc_interval_follows_the_shared_percentile_rule() -> None:
    """The paired difference's ends are the inverted-CDF percentiles of its resamples (the rule of
    every other interval), and ``groups`` resamples whole questions."""
    import numpy as np

    from ragcritic_lib.critic.train import paired_auroc_diff_ci
    from ragcritic_lib.evaluation.stats import cluster_resamples

    rng = random.Random(3)
    y = [rng.random() < 0.4 for _ in range(80)]
    a = [(0.8 if e else 0.3) + rng.random() for e in y]
    b = [rng.random() for _ in y]
    out = paired_auroc_diff_ci(a, b, y, seed=5, n_boot=200)
    diffs = []
    for idx in cluster_resamples(None, 80, 200, 5):
        yy = [y[i] for i in idx]
        diffs.append(auroc([a[i] for i in idx], yy) - auroc([b[i] for i in idx], yy))
    assert out["low"] == pytest.approx(float(np.quantile(diffs, 0.025, method="inverted_cdf")), abs=1e-4)
    assert out["high"] == pytest.approx(float(np.quantile(diffs, 0.975, method="inverted_cdf")), abs=1e-4)
    groups = [i // 4 for i in range(80)]  # 20 questions of 4 answers each
    by_question = paired_auroc_diff_ci(a, b, y, seed=5, n_boot=200, groups=groups)
    assert by_question["diff"] == out["diff"]
    assert (by_question["low"], by_question["high"]) != (out["low"], out["high"])
    with pytest.raises(ValueError, match="groups has 79 entries"):
        paired_auroc_diff_ci(a, b, y, seed=5, n_boot=10, groups=groups[:-1])


def test_learning_rate_schedules_warm_up_then_decay_to_zero() -> None:
    from ragcritic_lib.critic.train import TrainSettings, _lr_at

    lin, cos = TrainSettings(learning_rate=1.0, warmup_ratio=0.2), TrainSettings(learning_rate=1.0, warmup_ratio=0.2,
                                                                                  schedule="cosine")
    total = 10  # 2 warm-up steps
    for s in (lin, cos):
        assert [_lr_at(k, total, s) for k in (0, 1, 2)] == [0.5, 1.0, 1.0]
        assert _lr_at(total, total, s) == 0.0
    assert _lr_at(6, total, lin) == pytest.approx(0.5)           # halfway down: linear
    assert _lr_at(6, total, cos) == pytest.approx(0.5)           # and the cosine crosses it there
    assert _lr_at(4, total, cos) > _lr_at(4, total, lin)         # the cosine stays higher early
    assert _lr_at(8, total, cos) < _lr_at(8, total, lin)         # and lower late
    with pytest.raises(ValueError, match="schedule 'step'"):
        TrainSettings(schedule="step")
