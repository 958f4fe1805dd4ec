"""Size of each shipped form (ragcritic_lib.critic.forms) of the critic's real base model.

A trained critic ships instead of a merged checkpoint: a LoRA adapter, or what changed against
the base (``layers`` in bf16, ``delta8``: int8 with one scale per row, ``lowrank``: truncated
SVD factors in bf16). Their size depends only on which tensors changed and their shapes, so this
benchmark perturbs the base synthetically (a small random change to every tensor of the chosen
decoder layers: all 30, then the top 6, as ``critic_sft.train_layers`` 30 and 6 train them),
writes each form to a temporary folder and prints its size in MB (10^6 bytes), the budget's
choice at ``critic_sft.ship_max_mb``, and each form's reconstruction error over the changed
matrices: relative Frobenius error of the weight delta and of the weights (``layers`` rounds the
weights to bf16 as the merged checkpoints did, which is large against a small delta and small
against the weights; a synthetic full-rank delta is the low-rank form's worst case). LoRA adapters over every linear map of all
layers are written at each rank of ``critic_sft.lora_ranks``. Numbers only, no asserts::

    .venv/bin/python benchmarks/bench_ship_forms.py
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def perturbed(base_state: dict, layers: range, scale: float, seed: int) -> tuple[dict, list[str]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    out, names = dict(base_state), []
    for name, t in base_state.items():
        if any(f"layers.{i}." in name for i in layers):
            out[name] = t + scale * t.abs().mean() * torch.randn(t.shape, generator=g)
            names.append(name)
    return out, names


def write_form(trained: dict, base: dict, names: list[str], form: str, rank: int, folder: Path
               ) -> tuple[float, float, float]:
    """(MB on disk, relative error of the changed matrices' delta, relative error of their
    weights) of one form."""
    import torch
    from safetensors.torch import save_file

    from ragcritic_lib.critic import forms as model_forms

    tensors, entries = model_forms.encode(trained, base, names, form, rank)
    path = folder / f"{form}{rank}.safetensors"
    save_file(tensors, str(path))
    num = den = wden = 0.0
    for e in entries:
        if e["encoding"] == "value" and len(e["shape"]) == 1:
            continue
        d = trained[e["name"]].float() - base[e["name"]].float()
        got = model_forms.decode(e, tensors, base[e["name"]]) - base[e["name"]].float()
        num += float((got - d).pow(2).sum())
        den += float(d.pow(2).sum())
        wden += float(trained[e["name"]].float().pow(2).sum())
    del tensors
    mb = path.stat().st_size / 1e6
    path.unlink()
    return mb, (num / den) ** 0.5 if den else 0.0, (num / wden) ** 0.5 if wden else 0.0


def main(argv: list[str] | None = None) -> int:
    import torch
    from peft import LoraConfig, inject_adapter_in_model
    from transformers import AutoModelForCausalLM

    from ragcritic_lib import runtime
from ragcritic_lib.critic import forms as model_forms
    from ragcritic_lib.pipeline.params import load_params

    params = load_params(validate=False)
    sft = params["critic_sft"]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-mb", type=float, default=float(sft["ship_max_mb"]))
    ap.add_argument("--lowrank", type=int, default=32, help="rank of the fixed-rank low-rank row")
    ap.add_argument("--ranks", default=str(sft["lora_ranks"]), help="LoRA ranks, comma-separated")
    ap.add_argument("--scale", type=float, default=0.01, help="perturbation, relative to each tensor's mean |w|")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    base_dir = Path(runtime.resolve_base_model(params, sft["base_model"], key="critic_sft.base_model"))
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    base = {k: v.detach() for k, v in model.state_dict().items()}
    n_layers = len(model.model.layers)
    print(f"base: {base_dir.name} ({n_layers} layers, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
          f"parameters); CPU: {cpu_name()}; torch {torch.__version__}")
    print(f"budget ship_max_mb {args.max_mb}\n")
    print(f"{'changed layers':<16}{'form':<14}{'MB':>9}{'delta err':>11}{'weight err':>12}{'seconds':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for label, layers in (("all 30" if n_layers == 30 else f"all {n_layers}", range(n_layers)),
                              ("top 6", range(n_layers - 6, n_layers))):
            trained, names = perturbed(base, layers, args.scale, seed=0)
            shapes = {n: list(trained[n].shape) for n in names}
            chosen, rank = model_forms.choose_form(shapes, args.max_mb)
            rows = [("layers", 0), ("delta8", 0), ("lowrank", args.lowrank)]
            if chosen == "lowrank" and rank != args.lowrank:
                rows.append(("lowrank", rank))
            for form, r in rows:
                t0 = time.perf_counter()
                mb, err, werr = write_form(trained, base, names, form, r, folder)
                name = f"{form} r{r}" if form == "lowrank" else form
                mark = " <- budget's choice" if (form, r) == (chosen, rank) else ""
                print(f"{label:<16}{name:<14}{mb:9.1f}{err:11.4f}{werr:12.5f}{time.perf_counter() - t0:9.1f}{mark}",
                      flush=True)
            del trained
        for r in (int(x) for x in args.ranks.split(",")):
            m = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
            cfg = LoraConfig(r=r, lora_alpha=2 * r, target_modules=r".*layers\.\d+\.(self_attn|mlp)\.\w+_proj",
                             init_lora_weights=False)
            inject_adapter_in_model(cfg, m)
            manifest = model_forms.ship_adapter(m, folder / f"lora{r}", base_folder=base_dir,
                                                base_key="critic_sft.base_model", lora_config=cfg)
            label = f"all {n_layers} (LoRA)"
            print(f"{label:<16}{f'adapter r{r}':<14}{manifest['mb']:9.1f}", flush=True)
            del m
    return 0


if __name__ == "__main__":
    sys.exit(main())
