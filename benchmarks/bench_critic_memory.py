"""Time and resident memory of the critic's SFT (notebook 05's cached trainer) on this CPU.

Stage 05 trains every layer of the 135M critic in fp32 master weights under bf16 autocast, on
examples of a few hundred tokens of varying length. What it needs is a few GB (weights, AdamW
state, one batch's activations), but the process can hold much more: the C library's allocator
keeps freed blocks of the ever-changing tensor sizes instead of returning them. This benchmark
runs the stage's own training loop (``critic_train.train_sft``) on random token examples with
the stage's lengths, batch and dev size, and prints seconds per example, seconds per dev
evaluation and the resident memory (now and peak), so a machine's owner can see what stage 05
will hold there and what the allocator settings below cost.

Run each setting in its own process (an environment variable is read once, at start), alone on
the cores:

    .venv/bin/python benchmarks/bench_critic_memory.py --steps 30
    MALLOC_MMAP_THRESHOLD_=65536 .venv/bin/python benchmarks/bench_critic_memory.py --steps 30
    .venv/bin/python benchmarks/bench_critic_memory.py --steps 30 --trim-every 1

``--trim-every N`` asks the C library (glibc's ``malloc_trim``) to hand free memory back every N
optimizer steps. Numbers only, no asserts.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import sys
import time
from pathlib import Path

from ragcritic_lib import paths


def resident_gib() -> tuple[float, float]:
    """(resident now, peak resident) of this process in GiB, from /proc (Linux)."""
    fields = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 2 ** 20  # kB
    return fields["VmRSS"], fields["VmHWM"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(paths.resolve("data/assets/models/smollm2-135m-instruct")))
    ap.add_argument("--steps", type=int, default=30, help="optimizer steps (batches) to time")
    ap.add_argument("--batch", type=int, default=16, help="critic_sft.batch_size")
    ap.add_argument("--train-layers", type=int, default=30, help="critic_sft.train_layers")
    ap.add_argument("--mean-tokens", type=float, default=247.0, help="mean example length (stage 05 measured 247)")
    ap.add_argument("--max-length", type=int, default=384, help="critic_sft.max_length")
    ap.add_argument("--dev", type=int, default=180, help="dev examples scored per evaluation")
    ap.add_argument("--trim-every", type=int, default=0, help="malloc_trim every N optimizer steps (0: never)")
    args = ap.parse_args()
    if not (Path(args.model) / "config.json").is_file():
        sys.exit(f"--model {args.model}: no model folder there (config.json missing); run `make assets` first "
                 "or pass the folder of a local causal LM")

    import torch

    from ragcritic_lib.critic import train as ct

    env = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; allocator settings {env or 'default'}; "
          f"malloc_trim every {args.trim_every or 'never'} steps")

    if args.trim_every:
        libc = ctypes.CDLL("libc.so.6")
        step_fn = torch.optim.AdamW.step
        count = [0]

        def step(self, *a, **k):  # the stage's optimizer, with a trim after every N-th step
            out = step_fn(self, *a, **k)
            count[0] += 1
            if count[0] % args.trim_every == 0:
                libc.malloc_trim(0)
            return out

        torch.optim.AdamW.step = step

    split, tok = ct.load_split_model(args.model, args.train_layers)
    _, correct_id, error_id = ct._verdict_tokens(tok)
    rng = random.Random(0)
    vocab = int(split.model.config.vocab_size)

    def example(i: int) -> ct.Encoded:  # a prompt, then a critique whose verdict token is real
        n = max(120, min(args.max_length, int(rng.gauss(args.mean_tokens, 45))))
        n_prompt = n - 30
        ids = [rng.randrange(100, vocab) for _ in range(n)]
        ids[n_prompt + 4] = error_id if i % 2 else correct_id
        return ct.Encoded(ids=ids, n_prompt=n_prompt, verdict_pos=n_prompt + 3, is_error=bool(i % 2))

    train = [example(i) for i in range(args.steps * args.batch)]
    dev = [example(i) for i in range(args.dev)]
    train_cache = ct.cache_lower(split, train, batch_size=32, dtype="auto")
    dev_cache = ct.cache_lower(split, dev, batch_size=32, dtype="auto")
    print(f"model and caches loaded: {resident_gib()[0]:.2f} GiB resident")

    t0 = time.perf_counter()
    ct.verdict_margins(split, dev_cache, dev, tok, batch_size=32, dtype="auto")
    print(f"one dev evaluation ({args.dev} examples, untrained weights): {time.perf_counter() - t0:.1f} s")

    settings = ct.TrainSettings(method="full", train_layers=args.train_layers, epochs=1.0, learning_rate=1e-4,
                                batch_size=args.batch, eval_every=10 ** 9, patience=3, max_length=args.max_length,
                                verdict_weight=10.0, seed=0)
    t0 = time.perf_counter()
    ct.train_sft(split, tok, train, train_cache, dev, dev_cache, settings)  # ends with one dev evaluation
    seconds = time.perf_counter() - t0
    print(f"{args.steps} steps of {args.batch} (one dev evaluation included): {seconds:.1f} s, "
          f"{seconds / len(train):.3f} s an example")
    t0 = time.perf_counter()
    ct.verdict_margins(split, dev_cache, dev, tok, batch_size=32, dtype="auto")
    print(f"one dev evaluation after training: {time.perf_counter() - t0:.1f} s")
    now, peak = resident_gib()
    print(f"resident memory now {now:.2f} GiB, peak {peak:.2f} GiB")


if __name__ == "__main__":
    main()
