"""Compact forms of trained models (ragcritic_lib.critic.forms) on a tiny random Llama (2 layers,
hidden 32): every form rebuilds the trained weights, the budget picks the most faithful form that
fits, a changed base is refused naming the manifest, and an adapter ships alone."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ragcritic_lib.critic import forms as model_forms  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from test_llm import _write_tiny_model

    torch.set_num_threads(1)
    return _write_tiny_model(tmp_path_factory.mktemp("forms") / "base")


def _load(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)


def _trained(base, *, low_rank: int | None = None, layers=(1,)):
    """The base with every tensor of ``layers`` changed (a rank-``low_rank`` delta per matrix when
    given, else a dense one); returns (model, names of the changed tensors)."""
    model = _load(base)
    g = torch.Generator().manual_seed(1)
    changed = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not any(f"layers.{i}." in name for i in layers):
                continue
            if p.dim() == 2 and low_rank:
                d = torch.randn(p.shape[0], low_rank, generator=g) @ torch.randn(low_rank, p.shape[1], generator=g)
            else:
                d = torch.randn(p.shape, generator=g)
            p.add_(0.05 * d)
            changed.append(name)
    return model, changed


def _ship(base, model, out, max_mb, **kw):
    return model_forms.ship_full(model.state_dict(), base, out, max_mb=max_mb, base_key="critic_sft.base_model", **kw)


def test_layers_form_rebuilds_the_trained_weights_in_bf16(base, tmp_path):
    model, changed = _trained(base)
    m = _ship(base, model, tmp_path / "ship", 10.0)
    assert m["form"] == "layers"
    assert sorted(e["name"] for e in m["tensors"]) == sorted(changed)  # only what changed ships
    assert m["base"]["params_key"] == "critic_sft.base_model"
    assert m["base"]["sha256"] == model_forms.base_sha256(base)
    rebuilt = model_forms.rebuild_model(tmp_path / "ship")
    want = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    for k, v in rebuilt.state_dict().items():
        assert torch.equal(v, want[k]), k
    assert rebuilt.dtype == torch.bfloat16


def test_delta8_form_is_within_int8_rounding_of_the_trained_weights(base, tmp_path):
    model, changed = _trained(base)
    shapes = {n: list(model.state_dict()[n].shape) for n in changed}
    layers_mb = (model_forms.form_bytes(shapes, "layers") + model_forms._OVERHEAD) / 1e6
    m = _ship(base, model, tmp_path / "ship", layers_mb - 0.001)  # layers does not fit, delta8 does
    assert m["form"] == "delta8"
    rebuilt = model_forms.rebuild_model(tmp_path / "ship", dtype="float32").state_dict()
    base_sd = _load(base).state_dict()
    for name in changed:
        t = model.state_dict()[name]
        if t.dim() == 2:
            row_max = (t - base_sd[name]).abs().amax(dim=1, keepdim=True)
            err = (rebuilt[name] - t).abs()
            assert (err <= row_max / 254 + 1e-6).all(), name  # half an int8 step of its row
            assert err.max() > 0  # not stored exactly: the delta really was quantized
        else:
            assert torch.equal(rebuilt[name], t.to(torch.bfloat16).float())
    for name in set(base_sd) - set(changed):
        assert torch.equal(rebuilt[name], base_sd[name])


def test_lowrank_form_recovers_a_low_rank_delta_at_its_rank(base, tmp_path):
    model, changed = _trained(base, low_rank=2)
    shapes = {n: list(model.state_dict()[n].shape) for n in changed}
    budget = (model_forms.form_bytes(shapes, "lowrank", 3) + model_forms._OVERHEAD) / 1e6
    assert budget < (model_forms.form_bytes(shapes, "delta8") + model_forms._OVERHEAD) / 1e6
    m = _ship(base, model, tmp_path / "ship", budget)
    assert (m["form"], m["rank"]) == ("lowrank", 3)  # the largest rank that fits
    rebuilt = model_forms.rebuild_model(tmp_path / "ship", dtype="float32").state_dict()
    base_sd = _load(base).state_dict()
    for name in changed:
        t = model.state_dict()[name]
        if t.dim() != 2:
            continue
        delta, got = t - base_sd[name], rebuilt[name] - base_sd[name]
        assert torch.linalg.matrix_rank(got, rtol=1e-3) == 2, name
        assert (got - delta).norm() / delta.norm() < 1e-2, name  # bf16 factors of the exact rank-2 delta
    # rank 1 of the same delta loses a whole direction
    model_forms.ship_full(model.state_dict(), base, tmp_path / "r1", max_mb=9.0, base_key="k", forms=("lowrank",))
    assert json.loads((tmp_path / "r1" / model_forms.MANIFEST).read_text())["rank"] > 2
    one = model_forms.encode(model.state_dict(), base_sd, changed, "lowrank", 1)
    entry = next(e for e in one[1] if e["encoding"] == "lowrank")
    rec = model_forms.decode(entry, one[0], base_sd[entry["name"]]) - base_sd[entry["name"]]
    d = model.state_dict()[entry["name"]] - base_sd[entry["name"]]
    assert (rec - d).norm() / d.norm() > 0.05


def test_budget_picks_the_most_faithful_form_that_fits():
    shapes = {"a.weight": [64, 32], "b.weight": [32, 32], "n.weight": [32]}
    layers = model_forms.form_bytes(shapes, "layers")
    delta8 = model_forms.form_bytes(shapes, "delta8")
    assert layers == 2 * (64 * 32 + 32 * 32 + 32)
    assert delta8 == 64 * 32 + 4 * 64 + 32 * 32 + 4 * 32 + 2 * 32
    over = model_forms._OVERHEAD
    assert model_forms.choose_form(shapes, (layers + over) / 1e6) == ("layers", 0)
    assert model_forms.choose_form(shapes, (layers + over - 1) / 1e6) == ("delta8", 0)
    assert model_forms.choose_form(shapes, (delta8 + over - 1) / 1e6)[0] == "lowrank"
    r8 = model_forms.form_bytes(shapes, "lowrank", 8)
    assert model_forms.choose_form(shapes, (r8 + over) / 1e6) == ("lowrank", 8)
    assert model_forms.choose_form(shapes, (r8 + over - 1) / 1e6) == ("lowrank", 7)
    with pytest.raises(ValueError, match="ship_max_mb"):
        model_forms.choose_form(shapes, over / 1e6)


def test_a_changed_base_is_refused_naming_the_manifest(base, tmp_path):
    model, _ = _trained(base)
    _ship(base, model, tmp_path / "ship", 10.0)
    other = tmp_path / "other_base"
    shutil.copytree(base, other)
    tampered = _load(other)
    with torch.no_grad():
        tampered.model.norm.weight.add_(1.0)
    tampered.save_pretrained(str(other))
    manifest = str(tmp_path / "ship" / model_forms.MANIFEST)
    with pytest.raises(model_forms.BaseMismatch, match=manifest.replace(".", r"\.")):
        model_forms.rebuild_model(tmp_path / "ship", base=other)
    with pytest.raises(model_forms.BaseMismatch, match="not a local folder"):
        m = json.loads((tmp_path / "ship" / model_forms.MANIFEST).read_text())
        m["base"]["path"] = str(tmp_path / "gone")
        (tmp_path / "ship" / model_forms.MANIFEST).write_text(json.dumps(m))
        model_forms.rebuild_model(tmp_path / "ship")


def test_materialize_writes_a_loadable_folder_once(base, tmp_path):
    model, _ = _trained(base)
    _ship(base, model, tmp_path / "ship", 10.0)
    out = model_forms.materialize(tmp_path / "ship", root=tmp_path / "cache")
    assert out.parent == tmp_path / "cache" and (out / "tokenizer_config.json").is_file()
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert model_forms.materialize(tmp_path / "ship", root=tmp_path / "cache") == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt
    loaded = _load(out)
    want = model.state_dict()["model.layers.1.mlp.up_proj.weight"].to(torch.bfloat16).float()
    assert torch.equal(loaded.state_dict()["model.layers.1.mlp.up_proj.weight"], want)


def test_adapter_ships_alone_and_loads_on_its_base(base, tmp_path):
    from peft import LoraConfig, PeftModel, inject_adapter_in_model

    model = _load(base)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=r".*layers\.(0|1)\.(self_attn|mlp)\.\w+_proj",
                     init_lora_weights=False)
    inject_adapter_in_model(cfg, model)
    with torch.no_grad():  # the adapter ships in bf16: the reference holds the same rounded weights
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.copy_(p.to(torch.bfloat16).float())
    m = model_forms.ship_adapter(model, tmp_path / "adapter", base_folder=base, base_key="critic_sft.base_model",
                                 lora_config=cfg)
    assert m["form"] == "adapter" and m["rank"] == 4
    files = sorted(p.name for p in (tmp_path / "adapter").iterdir())
    assert files == ["adapter_config.json", "adapter_model.safetensors", model_forms.MANIFEST]
    assert len(m["tensors"]) == 2 * 7 * 2  # A and B of 7 linear maps in 2 layers
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        want = model(ids).logits
        peft_loaded = PeftModel.from_pretrained(_load(base), str(tmp_path / "adapter"))
        assert torch.allclose(peft_loaded(ids).logits, want, atol=1e-5)
        rebuilt = model_forms.rebuild_model(tmp_path / "adapter", dtype="float32")
        assert torch.allclose(rebuilt(ids).logits, want, atol=1e-4)
        again = _load(base)
        model_forms.load_adapter_into(again, tmp_path / "adapter")
        assert torch.allclose(again(ids).logits, want, atol=1e-6)
    assert model_forms.model_folder(tmp_path / "adapter") == tmp_path / "adapter"


def test_ship_check_flags_a_loss_over_the_tolerance():
    labels = [True, False] * 4
    trained = [1.0, -1.0] * 4
    same = model_forms.ship_check(trained, [x + 0.01 for x in trained], labels, auroc=_auroc)
    assert same["flag"] is False and same["auroc_loss"] == 0.0 and same["mean_abs_margin_diff"] == 0.01
    worse = model_forms.ship_check(trained, [0.0] * 8, labels, auroc=_auroc)
    assert worse["flag"] is True and worse["dev_auroc_shipped"] == 0.5


def _auroc(scores, labels):
    from ragcritic_lib.evaluation.stats import auroc

    return auroc(scores, labels)
