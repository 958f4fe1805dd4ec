"""Cost and quality of encoding the reader prompt's shared turns once, measured on dev questions.

Every GenerateAnswer prompt opens with the same turns (the instruction and its worked examples,
about 190 of its 480-520 tokens) before its own passages and question. ``HFBackend``'s
``share_generation_prefix`` encodes those turns once and reuses their key-value cache, so each
prompt's prefill reads only its own tokens. The arithmetic is the same; the computation's layout
is not, so in bf16 a near tie can decode differently (in fp32 the two agree). This benchmark
answers the first ``--questions`` *dev* questions (never test) with standard RAG's prompt, once
with the prefix encoded in every prompt (the default) and once shared, the generator's cache off,
and reports for each the wall seconds, answers/s and the mean token F1 and share the audited
judge (``truth``) calls right, with the paired 95% bootstrap CI of the differences (shared
minus not), and how many raw completions and extracted answers differ. A difference whose CI
holds 0 is a cheaper recipe of the same quality on this evidence; the CPU class is recorded.

    .venv/bin/python benchmarks/bench_answer_prefix.py
    .venv/bin/python benchmarks/bench_answer_prefix.py --questions 140 --out /tmp/answer_prefix.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=140, help="dev questions of the first dataset")
    parser.add_argument("--out", default="reports/benchmarks/answer_prefix.json")
    args = parser.parse_args()
    if args.questions < 2:
        raise SystemExit("--questions: need at least 2")

    from ragcritic_lib import paths, runtime
    from ragcritic_lib.evaluation.scoring import token_f1
    from ragcritic_lib.evaluation.stats import paired_comparison
    from ragcritic_lib.evaluation.truth import truth_correct
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class
    from ragcritic_lib.retrieval.rag import answer_gen_params, extract_answer

    params = load_params()
    rag = params["retrieval_rag"]
    ds = next(iter(params["common"]["datasets"]))
    records = read_jsonl(paths.stage_dir("retrieval_rag") / ds / "dev.jsonl")[: args.questions]
    missing = [r.get("id", i) for i, r in enumerate(records) if not r.get("messages")]
    if missing:
        raise SystemExit(f"{paths.stage_dir('retrieval_rag') / ds / 'dev.jsonl'}: records without 'messages': {missing[:5]}")
    gen_params = answer_gen_params(rag["prompt_variant"], rag["max_new_tokens"])
    generator = runtime.load_generator(params, cache=False)  # both recipes pay every call
    prompts = [r["messages"] for r in records]

    runs = {}
    for name, shared in (("every prompt whole", False), ("shared turns encoded once", True)):
        generator.share_generation_prefix = shared
        start = time.perf_counter()
        gens = generator.generate(prompts, gen_params)
        seconds = time.perf_counter() - start
        answers = [extract_answer(g.text, prefilled=rag["prompt_variant"] == "prefill")[0] for g in gens]
        f1 = [token_f1(a, r["golden_answers"]) for a, r in zip(answers, records)]
        right = [float(truth_correct(a, r["golden_answers"], r.get("metadata"))) for a, r in zip(answers, records)]
        runs[name] = {"raw": [g.text for g in gens], "answers": answers, "f1": f1, "right": right,
                      "seconds": seconds, "prompt_tokens": sum(g.prompt_tokens for g in gens)}
        print(f"{name:<28} {seconds:7.1f} s  F1 {sum(f1) / len(f1):.4f}  right {sum(right) / len(right):.4f}", flush=True)
    generator.share_generation_prefix = False

    (base_name, base), (new_name, new) = runs.items()
    report = {
        "dataset": ds, "split": "dev", "questions": len(records), "cpu_class": cpu_class(),
        "dtype": generator.dtype, "batch_size": generator.batch_size, "reference": base_name,
        "recipes": [{"name": name, "wall_seconds": round(r["seconds"], 1),
                     "answers_per_second": round(len(records) / r["seconds"], 3), "prompt_tokens": r["prompt_tokens"],
                     "f1": round(sum(r["f1"]) / len(records), 4), "judge_acc": round(sum(r["right"]) / len(records), 4)}
                    for name, r in runs.items()],
        "raw_differ": sum(a != b for a, b in zip(base["raw"], new["raw"])),
        "answers_differ": sum(a != b for a, b in zip(base["answers"], new["answers"])),
        "speedup": round(base["seconds"] / new["seconds"], 3),
    }
    for key in ("f1", "right"):
        cmp = paired_comparison(new[key], base[key], seed=int(params["common"]["seed"]))
        report[f"delta_{'f1' if key == 'f1' else 'judge_acc'}"] = {
            k: round(float(cmp[k]), 4) for k in ("delta", "ci_low", "ci_high")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "recipes"}))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
