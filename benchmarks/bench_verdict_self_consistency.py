"""Whether the generator's own re-answers tell a wrong answer from a right one: self-consistency
scores beside the shipped verdict probe, on the dev answers of stage 05.

A sampling-based check (as SelfCheckGPT scores a passage by how well the model's own samples agree
with it) needs no trained critic: the generator answers the question again from the answer's own
passages, with standard RAG's prompt and settings (``retrieval_rag``: prompt variant, passage
words, new tokens), once greedily and ``--samples`` times at ``--temperature`` (seeds 1000, 1001,
...). Three scores, each higher for an answer more likely wrong, all general (no rule knows the
testbed's templates, no gold answer is read):

- ``greedy disagreement``: 1 - token F1 of the greedy re-answer against the answer;
- ``sampled disagreement``: 1 - mean token F1 of the sampled re-answers against the answer;
- ``sample spread``: 1 - mean token F1 between pairs of sampled re-answers (the answer unread).

Each gets its dev AUROC with a percentile bootstrap 95% interval (resampling questions), its
AUROC within kinds of question, and its paired difference to the shipped verdict probe (stage
05's ``critic_sft/probe`` on the same dev answers); and each is mixed with the probe as
``(1 - w) * probe + w * score`` after both are standardized on the dev answers (no labels), for
w = 0.25, 0.5 and 0.75, with the mix's paired difference to the probe alone. Dev only: a score
would join the verdict only if a mix beat the probe beyond its interval here, and then be judged on
test by stage 07. Reads stage outputs only, writes one JSON (with how many re-answers the LLM
cache already held, which its generation seconds did not pay for); numbers, no asserts.

    .venv/bin/python benchmarks/bench_verdict_self_consistency.py   # about 10 min on 2 bf16 cores
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_verdict_question_only import DEV_WEIGHTS, fuse, paired_diff, score_row, standardizer  # noqa: E402

from ragcritic_lib import paths  # noqa: E402


def disagreement_scores(answer: str, greedy: str, samples: Sequence[str]) -> dict[str, float]:
    """The three scores of one answer (module docstring): 1 - token F1 agreements, in [0, 1]."""
    from ragcritic_lib.evaluation.scoring import token_f1

    pairs = [(a, b) for i, a in enumerate(samples) for b in samples[i + 1:]]
    return {
        "greedy disagreement": 1.0 - token_f1(greedy, [answer]),
        "sampled disagreement": 1.0 - (sum(token_f1(s, [answer]) for s in samples) / len(samples) if samples else 1.0),
        "sample spread": 1.0 - (sum(token_f1(a, [b]) for a, b in pairs) / len(pairs) if pairs else 1.0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=4, help="sampled re-answers per dev answer")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=paths.ROOT / "reports" / "benchmarks" / "verdict_self_consistency.json")
    args = ap.parse_args()
    if args.samples < 2:
        raise SystemExit("--samples: at least 2 (the sample spread compares pairs)")

    from ragcritic_lib import runtime
    from ragcritic_lib.critic.corpus import question_kind
    from ragcritic_lib.critic.probe import ProbeScorer
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class
    from ragcritic_lib.retrieval.rag import answer_gen_params, build_rag_messages, extract_answer

    t0 = time.time()
    params = load_params()
    rag, seed = params["retrieval_rag"], int(params["common"]["seed"])
    data_dir = paths.stage_dir("critic_data")
    dev = read_jsonl(data_dir / "dev_samples.jsonl")
    messages = [e["messages"] for e in read_jsonl(data_dir / "sft_dev.jsonl")]
    if len(messages) != len(dev):
        raise SystemExit(f"sft_dev.jsonl has {len(messages)} rows for {len(dev)} dev samples")
    scorer = ProbeScorer(paths.stage_dir("critic_sft") / "probe")
    probe = scorer(messages)
    del scorer

    llm = runtime.load_generator(params)
    prompts = [build_rag_messages(s["question"], s["passages"], variant=rag["prompt_variant"],
                                  max_passage_words=rag["max_passage_words"]) for s in dev]
    greedy_params = answer_gen_params(rag["prompt_variant"], rag["max_new_tokens"])
    prefilled = rag["prompt_variant"] == "prefill"

    def answers(gen_params) -> list[str]:
        return [extract_answer(g.text, prefilled=prefilled)[0] for g in llm.generate(prompts, gen_params)]

    t_gen, cached_before = time.time(), llm.stats.cached_calls
    greedy = answers(greedy_params)
    sampled = [answers(dataclasses.replace(greedy_params, temperature=args.temperature, seed=1000 + k))
               for k in range(args.samples)]
    gen_seconds, cached = time.time() - t_gen, llm.stats.cached_calls - cached_before
    per_answer = [disagreement_scores(s["prediction"], greedy[i], [run[i] for run in sampled])
                  for i, s in enumerate(dev)]

    y = [s["judgement"] == "Error" for s in dev]
    kinds, groups = [question_kind(s) for s in dev], [s["qkey"] for s in dev]
    scores: dict[str, Any] = {"verdict probe (stage 05)": score_row(probe, y, kinds, groups, reference=None, seed=seed,
                                                                    n_boot=args.boot)}
    mixes: dict[str, Any] = {}
    z_probe = standardizer(probe)(probe)
    for name in per_answer[0]:
        values = [row[name] for row in per_answer]
        row = score_row(values, y, kinds, groups, reference=None, seed=seed, n_boot=args.boot)
        row["vs_probe"] = paired_diff(values, probe, y, groups, seed=seed, n_boot=args.boot)
        scores[name] = row
        for w in DEV_WEIGHTS:
            mixed = fuse(z_probe, standardizer(values)(values), w)
            mix = score_row(mixed, y, kinds, groups, reference=None, seed=seed, n_boot=args.boot)
            mix["vs_probe"] = paired_diff(mixed, probe, y, groups, seed=seed, n_boot=args.boot)
            mixes[f"probe + {name} (w={w})"] = mix
    for name, row in {**scores, **mixes}.items():
        vs = row.get("vs_probe")
        print(f"{name:40s} AUROC {row['auroc']:.3f} {row['auroc_ci']}  within kinds {row['within_kind_auroc']}"
              + (f"  vs probe {vs['diff']:+.3f} {vs['ci']}" if vs else ""), flush=True)
    out = {"split": "dev", "samples": len(dev), "errors": int(sum(y)), "re_answers": args.samples,
           "temperature": args.temperature, "generation_seconds": round(gen_seconds, 1),
           "generations": len(prompts) * (1 + args.samples), "generations_from_cache": cached,
           "scores": scores, "mixes": mixes, "seconds": round(time.time() - t0, 1), "cpu_class": cpu_class("cpu"),
           "boot": args.boot}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
