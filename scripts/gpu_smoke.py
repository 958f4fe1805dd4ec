"""One-GPU smoke run of the GPU stack, printing what it measured.

    python scripts/gpu_smoke.py               # needs CUDA; exits 2 without it
    python scripts/gpu_smoke.py --allow-cpu   # the CPU-possible parts (no DeepSpeed, vLLM, faiss-gpu)

Parts, in order (each prints one line per measurement; a failing part makes the exit status 1):

1. hf: the project's HF backend generates a few answers with the embedded model on the device.
2. train: one LoRA SFT step through ``ragcritic_lib.critic.training.run_training`` under
   ``accelerate launch`` with DeepSpeed ZeRO-3 (configs/accelerate/deepspeed_zero3.yaml, one
   process). With ``--allow-cpu`` and no CUDA it runs one CPU process without DeepSpeed instead.
3. adapter: the saved adapter is loaded back through the HF backend and answers the same prompts.
4. vllm: the same prompts through the project's vLLM backend, base and adapter (skipped, with the
   reason printed, when vLLM is not installed or there is no CUDA).
5. faiss-gpu: a flat inner-product index on the GPU against the same index on the CPU (skipped
   when faiss has no GPU support or there is no CUDA).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from ragcritic_lib import paths

QUESTIONS = [
    "What is the capital of France?",
    "Who wrote the play Romeo and Juliet?",
    "What is the boiling point of water in degrees Celsius?",
    "Which planet is known as the Red Planet?",
]
# A few chat examples in the critic's output format, enough for one optimizer step.
SFT_EXAMPLES = [
    {"messages": [
        {"role": "system", "content": "Judge whether the answer is supported by the passages."},
        {"role": "user", "content": f"Question: {q}\nPassages: (none)\nAnswer: {a}"},
        {"role": "assistant", "content": json.dumps({"Judgement": j, "Error_analysis": why})},
    ]}
    for q, a, j, why in [
        ("What is the capital of France?", "Paris", "Correct", "The answer is right."),
        ("Who wrote Romeo and Juliet?", "Dickens", "Error", "Shakespeare wrote it."),
        ("Which planet is the Red Planet?", "Mars", "Correct", "The answer is right."),
        ("What is the boiling point of water in Celsius?", "50", "Error", "It boils at 100 degrees."),
    ]
]
CPU_ACCELERATE = (
    "compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nnum_processes: 1\nuse_cpu: true\n"
    "mixed_precision: 'no'\nmachine_rank: 0\nnum_machines: 1\n"
)


def _line(part: str, **values: Any) -> None:
    print(f"[{part}] " + ", ".join(f"{k}={v}" for k, v in values.items()), flush=True)


def _prompts() -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": q}] for q in QUESTIONS]


def part_hf(model: str, device: str, max_new_tokens: int, adapter: str | None = None) -> list[str]:
    """Generate one greedy answer per question with the HF backend; returns the texts."""
    from ragcritic_lib.llm import GenParams, load_llm

    cfg = {"backend": "hf", "model": model, "device": device, "cache": False, "batch_size": len(QUESTIONS),
           "dtype": "bfloat16" if device.startswith("cuda") else "float32"}
    if adapter:
        cfg["adapter"] = adapter
    t0 = time.perf_counter()
    llm = load_llm(cfg)
    loaded = time.perf_counter() - t0
    t0 = time.perf_counter()
    gens = llm.generate(_prompts(), GenParams(max_new_tokens=max_new_tokens))
    seconds = time.perf_counter() - t0
    texts = [g.text for g in gens]
    if not any(t.strip() for t in texts):
        raise RuntimeError("every generated answer is empty")
    _line("adapter" if adapter else "hf", device=device, load_s=f"{loaded:.1f}", generate_s=f"{seconds:.2f}",
          prompts=len(texts), first=json.dumps(texts[0][:60]))
    del llm
    return texts


def part_train(model: str, out: Path, cuda: bool, accelerate_config: str) -> Path:
    """One LoRA SFT step under accelerate (DeepSpeed ZeRO-3 on CUDA); returns the adapter folder."""
    from ragcritic_lib.critic.training import run_training

    if cuda:
        import importlib.util

        if importlib.util.find_spec("deepspeed") is None:
            raise RuntimeError("deepspeed is not installed (requirements-gpu.txt pins it)")
        config, how = accelerate_config, "deepspeed zero3"
    else:
        config = str(out / "cpu_accelerate.yaml")
        Path(config).write_text(CPU_ACCELERATE)
        how = "one CPU process (no CUDA: DeepSpeed ZeRO-3 not exercised)"
    overrides = {"max_steps": 1, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
                 "warmup_steps": 0, "max_length": 512, "logging_steps": 1}
    t0 = time.perf_counter()
    result = run_training("sft", SFT_EXAMPLES, paths.CONFIGS_DIR / "train" / "critic_sft.yaml", out / "adapter",
                          base_model=model, overrides=overrides, launcher="accelerate", accelerate_config=config,
                          num_processes=1, seed=0)
    wall = time.perf_counter() - t0
    losses = [r["loss"] for r in result.log_history if "loss" in r]
    if result.steps != 1 or not result.is_adapter or not losses:
        raise RuntimeError(f"expected one LoRA step with a logged loss, got steps={result.steps}, "
                           f"adapter={result.is_adapter}, losses={losses}")
    _line("train", launcher=how, steps=result.steps, loss=f"{losses[0]:.4f}", train_s=f"{result.seconds:.1f}",
          wall_s=f"{wall:.1f}", device=result.device)
    return Path(result.adapter_dir)


def adapter_change(adapter: Path) -> float:
    """Largest absolute LoRA B weight: 0 at initialisation, so > 0 shows the step updated it."""
    from safetensors.torch import load_file

    weights = load_file(str(adapter / "adapter_model.safetensors"))
    b = [t.abs().max().item() for k, t in weights.items() if "lora_B" in k]
    if not b:
        raise RuntimeError(f"{adapter}: no lora_B weights in adapter_model.safetensors")
    return max(b)


def part_vllm(model: str, adapter: Path | None, max_new_tokens: int, hf_texts: list[str]) -> str:
    """The same prompts through the vLLM backend; returns a skip reason or ""."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed"
    from ragcritic_lib.llm import GenParams, load_llm

    base = {"backend": "vllm", "model": model, "cache": False, "dtype": "bfloat16",
            "gpu_memory_utilization": 0.3, "max_model_len": 2048, "batch_size": len(QUESTIONS)}
    t0 = time.perf_counter()
    llm = load_llm(base)
    gens = llm.generate(_prompts(), GenParams(max_new_tokens=max_new_tokens))
    same = sum(g.text.strip() == h.strip() for g, h in zip(gens, hf_texts))
    _line("vllm", generate_s=f"{time.perf_counter() - t0:.1f}", same_as_hf=f"{same}/{len(gens)}",
          first=json.dumps(gens[0].text[:60]))
    if adapter is not None:
        llm_a = load_llm({**base, "adapter": str(adapter)})
        gens_a = llm_a.generate(_prompts(), GenParams(max_new_tokens=max_new_tokens))
        _line("vllm+adapter", prompts=len(gens_a), first=json.dumps(gens_a[0].text[:60]))
    from ragcritic_lib.llm import release_vllm_engine

    release_vllm_engine()
    return ""


def part_faiss_gpu() -> str:
    """Flat inner-product search on the GPU vs the CPU; returns a skip reason or ""."""
    import importlib.util

    if importlib.util.find_spec("faiss") is None:
        return "faiss is not installed"
    import faiss
    import numpy as np

    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() < 1:
        return "this faiss has no GPU support (faiss-cpu) or sees no GPU"
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((20000, 384)).astype("float32")
    xq = rng.standard_normal((1000, 384)).astype("float32")
    cpu = faiss.IndexFlatIP(384)
    cpu.add(xb)
    gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, cpu)
    _, i_cpu = cpu.search(xq, 5)
    t0 = time.perf_counter()
    _, i_gpu = gpu.search(xq, 5)
    seconds = time.perf_counter() - t0
    agree = float((i_cpu == i_gpu).mean())
    _line("faiss-gpu", vectors=len(xb), queries=len(xq), queries_per_s=f"{len(xq) / seconds:.0f}",
          top5_ids_equal_cpu=f"{agree:.4f}")
    if agree < 0.99:
        raise RuntimeError(f"GPU and CPU flat search disagree on {1 - agree:.2%} of the top-5 ids")
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--allow-cpu", action="store_true", help="run the CPU-possible parts when CUDA is absent")
    ap.add_argument("--model", default=str(paths.MODELS_DIR / "smollm2-135m-instruct"))
    ap.add_argument("--accelerate-config", default=str(paths.CONFIGS_DIR / "accelerate" / "deepspeed_zero3.yaml"))
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one, removed at the end)")
    args = ap.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print("gpu_smoke: CUDA is not available (torch.cuda.is_available() is False); this check needs a GPU. "
              "Pass --allow-cpu to run the CPU-possible parts.", file=sys.stderr)
        return 2
    if not Path(args.model).exists():
        print(f"gpu_smoke: model folder {args.model} does not exist (run `make assets` or pass --model)",
              file=sys.stderr)
        return 2
    device = "cuda" if cuda else "cpu"
    _line("env", torch=torch.__version__, cuda=cuda,
          gpu=torch.cuda.get_device_name(0) if cuda else "none", model=Path(args.model).name)
    failures: list[str] = []
    skipped: dict[str, str] = {}

    def run(name: str, fn: Any, *a: Any) -> Any:
        try:
            return fn(*a)
        except Exception as exc:  # one part failing must not hide what the others measure
            traceback.print_exc()
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            return None

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        hf_texts = run("hf", part_hf, args.model, device, args.max_new_tokens) or []
        adapter = run("train", part_train, args.model, out, cuda, args.accelerate_config)
        if adapter is not None:
            change = run("adapter", adapter_change, adapter)
            if change is not None:
                _line("adapter", max_abs_lora_B=f"{change:.3g}")
                if change == 0:
                    failures.append("adapter: LoRA B weights are still zero after the step")
            run("adapter", part_hf, args.model, device, args.max_new_tokens, str(adapter))
        if cuda:
            reason = run("vllm", part_vllm, args.model, adapter, args.max_new_tokens, hf_texts)
            reason_faiss = run("faiss-gpu", part_faiss_gpu)
        else:
            reason = reason_faiss = "no CUDA"
        for name, why in (("vllm", reason), ("faiss-gpu", reason_faiss)):
            if why:
                skipped[name] = why
                _line(name, skipped=json.dumps(why))
    _line("summary", failures=len(failures), skipped=",".join(skipped) or "none")
    for f in failures:
        print(f"gpu_smoke: FAILED {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
