"""Training speed of the packaged model on this CPU: seconds per LoRA step, float32 against bf16
autocast (what a recipe's ``cpu_bf16`` switches), for SFT-shaped batches.

For each mode it builds the trainer's model the way ``ragcritic_lib.critic.training`` does (float32
weights, LoRA r=16 on the attention projections), runs ``--warmup`` steps, then times ``--steps``
optimizer steps (forward, backward, AdamW) on random token batches of ``--batch`` x ``--tokens``,
and prints the median seconds per step, the loss of the last step and the speed-up. Numbers only,
no asserts. Run it alone: other load on the cores changes the numbers.

    .venv/bin/python benchmarks/bench_training.py
    .venv/bin/python benchmarks/bench_training.py --batch 2 --tokens 1024 --steps 3
"""

from __future__ import annotations

import argparse
import statistics
import time

from ragcritic_lib import paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(paths.resolve("data/assets/models/smollm2-135m-instruct")))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=600)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--modes", default="float32,bf16-autocast")
    args = ap.parse_args()

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from ragcritic_lib.critic.training import cpu_bf16_enabled

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; CPU bf16 native: {cpu_bf16_enabled('auto')}")
    print(f"batch {args.batch} x {args.tokens} tokens, {args.steps} timed steps after {args.warmup} warm-up")
    results = {}
    for mode in args.modes.split(","):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, task_type="CAUSAL_LM",
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        vocab = int(model.config.vocab_size)
        batch = torch.randint(0, vocab, (args.batch, args.tokens), generator=torch.Generator().manual_seed(1))
        times, loss = [], float("nan")
        for i in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16-autocast"):
                out = model(input_ids=batch, labels=batch)
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            loss = float(out.loss)
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        results[mode] = statistics.median(times)
        print(f"{mode:>14}: {results[mode]:.2f} s/step (median of {len(times)}), last loss {loss:.3f}")
    if "float32" in results and "bf16-autocast" in results:
        print(f"speed-up of bf16 autocast: {results['float32'] / results['bf16-autocast']:.2f}x")


if __name__ == "__main__":
    main()
