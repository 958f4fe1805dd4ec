"""Cost and quality of encoding a prompt's shared turns once, measured on choosing rows.

Two prompt sets open with turns many prompts share, then hold their own:

- ``--prompts reader``: every GenerateAnswer prompt opens with the same instruction and worked
  examples (about 190 of its 480-520 tokens) before its own passages and question; the first
  ``--questions`` *dev* questions (never test) answered with standard RAG's prompt, scored by
  token F1 and the share the audited judge (``truth``) calls right.
- ``--prompts teacher``: the LLM teacher's rationale prompts (stage 02) open with its instruction
  and two of three rotating worked examples (about 455 of about 1,080 tokens), so they fall into
  three groups that each share an opening; the hand-audit rows of the train and dev splits (the
  *choosing* rows of ``data/audit/audit.jsonl``, never test), scored by whether the output parses
  and whether its verdict agrees with the hand label (an unparsed output does not agree). A third
  recipe shares the turns and caps the output at ``--verdict-tokens``: the judge audit reads only
  the verdict, which the teacher writes first, and greedy decoding writes the same first tokens
  under any cap.

``HFBackend``'s ``share_generation_prefix`` encodes the shared turns once and reuses their
key-value cache, so each prompt's prefill reads only its own tokens. The arithmetic is the same;
the computation's layout is not, so in bf16 a near tie can decode differently (in fp32 the two
agree). The prompts are generated once with the prefix encoded in every prompt (the default) and
once shared (and, for the teacher, once shared and capped), the generator's cache off, and the
report gives for each the wall seconds, prompts/s and the scores, and for each recipe against the
first the paired 95% bootstrap CI of the differences and how many raw completions differ. A
difference whose CI holds 0 is a cheaper recipe of the same quality on this evidence; the CPU
class is recorded.

    .venv/bin/python benchmarks/bench_answer_prefix.py
    .venv/bin/python benchmarks/bench_answer_prefix.py --questions 140 --out /tmp/answer_prefix.json
    .venv/bin/python benchmarks/bench_answer_prefix.py --prompts teacher
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

OUTS = {"reader": "reports/benchmarks/answer_prefix.json", "teacher": "reports/benchmarks/teacher_prefix.json"}


def reader_set(params: Mapping[str, Any], questions: int) -> tuple[dict[str, Any], list[Any], Any, Callable]:
    """Standard RAG's prompts for the first ``questions`` dev questions of the first dataset."""
    from ragcritic_lib import paths
    from ragcritic_lib.evaluation.scoring import token_f1
    from ragcritic_lib.evaluation.truth import truth_correct
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.retrieval.rag import answer_gen_params, extract_answer

    rag = params["retrieval_rag"]
    ds = next(iter(params["common"]["datasets"]))
    source = paths.stage_dir("retrieval_rag") / ds / "dev.jsonl"
    records = read_jsonl(source)[:questions]
    missing = [r.get("id", i) for i, r in enumerate(records) if not r.get("messages")]
    if missing:
        raise SystemExit(f"{source}: records without 'messages': {missing[:5]}")

    def score(texts: Sequence[str]) -> dict[str, list[float]]:
        answers = [extract_answer(t, prefilled=rag["prompt_variant"] == "prefill")[0] for t in texts]
        return {"f1": [token_f1(a, r["golden_answers"]) for a, r in zip(answers, records)],
                "judge_acc": [float(truth_correct(a, r["golden_answers"], r.get("metadata")))
                              for a, r in zip(answers, records)]}

    meta = {"dataset": ds, "split": "dev", "questions": len(records)}
    return meta, [r["messages"] for r in records], answer_gen_params(rag["prompt_variant"], rag["max_new_tokens"]), score


def teacher_set(params: Mapping[str, Any], rows_wanted: int) -> tuple[dict[str, Any], list[Any], Any, Callable]:
    """The LLM teacher's rationale prompts (stage 02's settings) on the audit's choosing rows."""
    from ragcritic_lib import paths
    from ragcritic_lib.evaluation import audit
    from ragcritic_lib.mining.teachers import LLMTeacher, parse_rationale

    source = paths.DATA_DIR / "audit" / "audit.jsonl"
    rows = [r for r in audit.read_audit(source) if r["role"] == "choosing"]
    rows = rows[:rows_wanted] if rows_wanted > 0 else rows
    if len(rows) < 2:
        raise SystemExit(f"{source}: fewer than 2 choosing rows")
    cfg = params["error_sampling"]
    teacher = LLMTeacher(None, few_shot=int(cfg["teacher_few_shot"]), max_new_tokens=int(cfg["teacher_max_new_tokens"]))

    def score(texts: Sequence[str]) -> dict[str, list[float]]:
        verdicts = audit.teacher_verdicts([parse_rationale(t) for t in texts])
        return {"parsed": [float(v is not None) for v in verdicts],
                "agreement": [float(v is not None and v == (r["label"] == "correct")) for v, r in zip(verdicts, rows)]}

    meta = {"source": source.relative_to(paths.ROOT).as_posix(), "role": "choosing", "rows": len(rows)}
    return meta, [teacher.rationale_messages(r) for r in rows], teacher._params(teacher.max_new_tokens), score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", choices=sorted(OUTS), default="reader", help="which prompt set")
    parser.add_argument("--questions", type=int, default=140,
                        help="reader: dev questions of the first dataset; teacher: choosing rows (<= 0: all)")
    parser.add_argument("--verdict-tokens", type=int, default=None,
                        help="teacher: a third recipe, shared and capped at this many new tokens "
                             "(default: LLMTeacher.verdicts' cap, VERDICT_TOKENS; 0: none)")
    parser.add_argument("--out", default="", help=f"report path (default: {OUTS})")
    args = parser.parse_args()
    if args.prompts == "reader" and args.questions < 2:
        raise SystemExit("--questions: need at least 2")

    from ragcritic_lib import runtime
    from ragcritic_lib.evaluation.stats import paired_comparison
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    params = load_params()
    if args.verdict_tokens is None:
        from ragcritic_lib.mining.teachers import VERDICT_TOKENS

        args.verdict_tokens = VERDICT_TOKENS
    build = reader_set if args.prompts == "reader" else teacher_set
    meta, prompts, gen_params, score = build(params, args.questions)
    generator = runtime.load_generator(params, cache=False)  # both recipes pay every call

    recipes = [("every prompt whole", False, gen_params), ("shared turns encoded once", True, gen_params)]
    if args.prompts == "teacher" and args.verdict_tokens > 0:
        # The audit reads only the verdict, which the teacher writes first: greedy decoding makes
        # the first tokens the same under any cap, so a short cap keeps every verdict it reaches.
        recipes.append((f"shared, verdict cap {args.verdict_tokens}", True,
                        dataclasses.replace(gen_params, max_new_tokens=args.verdict_tokens)))
    runs = {}
    for name, shared, recipe_params in recipes:
        generator.share_generation_prefix = shared
        start = time.perf_counter()
        gens = generator.generate(prompts, recipe_params)
        seconds = time.perf_counter() - start
        texts = [g.text for g in gens]
        runs[name] = {"raw": texts, "scores": score(texts), "seconds": seconds,
                      "prompt_tokens": sum(g.prompt_tokens for g in gens),
                      "max_new_tokens": recipe_params.max_new_tokens}
        means = {k: round(sum(v) / len(v), 4) for k, v in runs[name]["scores"].items()}
        print(f"{name:<28} {seconds:7.1f} s  {means}", flush=True)
    generator.share_generation_prefix = False

    base_name, base = next(iter(runs.items()))
    report = {
        "prompts": args.prompts, **meta, "cpu_class": cpu_class(),
        "dtype": generator.dtype, "batch_size": generator.batch_size, "reference": base_name,
        "recipes": [{"name": name, "wall_seconds": round(r["seconds"], 1), "max_new_tokens": r["max_new_tokens"],
                     "prompts_per_second": round(len(prompts) / r["seconds"], 3), "prompt_tokens": r["prompt_tokens"],
                     **{k: round(sum(v) / len(v), 4) for k, v in r["scores"].items()}}
                    for name, r in runs.items()],
        "versus_reference": {},
    }
    for name, run in list(runs.items())[1:]:
        row: dict[str, Any] = {"raw_differ": sum(a != b for a, b in zip(base["raw"], run["raw"])),
                               "speedup": round(base["seconds"] / run["seconds"], 3)}
        for key in base["scores"]:
            cmp = paired_comparison(run["scores"][key], base["scores"][key], seed=int(params["common"]["seed"]))
            row[f"delta_{key}"] = {k: round(float(cmp[k]), 4) for k in ("delta", "ci_low", "ci_high")}
        report["versus_reference"][name] = row
    out = Path(args.out or OUTS[args.prompts])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "recipes"}))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
