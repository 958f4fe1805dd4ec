"""RePAIR's DPO step on this CPU: seconds per step and tokens per sequence for planner-prompt forms
and LoRA depths (what ``repair.prompt`` and ``repair.dpo_recipe``'s ``lora_top_layers`` switch).

It takes the first ``--states`` failed answers of the train questions in
``data/error_sampling/d_error.jsonl`` (stage 02's output), builds the off-policy planner prompt of
each in the given form (``ragcritic_lib.baselines.repair.build_planner_messages``), pairs two
grammar plans per state (which plan is chosen does not change the cost of a step), and runs
``--steps`` DPO steps of the recipe with each variant through ``ragcritic_lib.critic.cached_dpo.train_dpo``,
as the stage does (RePAIR's beta 0.1 and max_length 1024). It prints the median prompt and
sequence tokens, seconds per step (the first step included, as a stage pays it) and the speed-up
against the first variant. Numbers only, no asserts. Run it alone: other load on the cores
changes the numbers. What a variant costs in RePAIR's own dev score is read from the stage's
``dev`` metrics, not here.

    .venv/bin/python benchmarks/bench_repair_dpo.py
    .venv/bin/python benchmarks/bench_repair_dpo.py --variants full:0,compact:8 --steps 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from ragcritic_lib import paths
from ragcritic_lib.io import read_jsonl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(paths.resolve("data/assets/models/smollm2-135m-instruct")))
    ap.add_argument("--records", default=str(paths.resolve("data/error_sampling/d_error.jsonl")))
    ap.add_argument("--recipe", default=str(paths.resolve("configs/train/critic_dpo.yaml")))
    ap.add_argument("--variants", default="full:0,full:8,compact:8",
                    help="comma-separated prompt:lora_top_layers (0 = every layer)")
    ap.add_argument("--states", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from ragcritic_lib.baselines import repair
    from ragcritic_lib.critic.cached_dpo import train_dpo

    recs = [r for r in read_jsonl(args.records) if not r.get("correct")][: args.states]
    if not recs:
        raise SystemExit(f"{args.records}: no failed train answers (run stage 02 first)")
    programs = repair.grammar_programs(8)
    tok = AutoTokenizer.from_pretrained(args.model)
    rows = []
    for spec in args.variants.split(","):
        form, top = spec.split(":")
        pairs = []
        for i, r in enumerate(recs):
            msgs = repair.build_planner_messages(r, correct=False, reasoning=str(r.get("raw_output") or ""),
                                                 oracle=True, example=False, prompt=form)
            pairs.append({"prompt": msgs, "chosen": programs[i % 8], "rejected": programs[(i + 3) % 8]})
        prompt_tokens = [len(tok(tok.apply_chat_template(p["prompt"], add_generation_prompt=True, tokenize=False)
                                 ).input_ids) for p in pairs]
        with tempfile.TemporaryDirectory() as tmp:
            res = train_dpo(pairs, args.recipe, Path(tmp) / "out", base_model=args.model,
                            overrides={"beta": 0.1, "max_length": 1024, "max_steps": args.steps,
                                       "lora_top_layers": int(top)})
        rows.append((spec, statistics.median(prompt_tokens), res.seconds_per_step))
        print(f"{spec:12s} prompt tokens (median) {statistics.median(prompt_tokens):5.0f}  "
              f"{res.seconds_per_step:6.1f} s/step over {res.steps} steps", flush=True)
    base = rows[0][2]
    for spec, _, sps in rows:
        print(f"{spec:12s} speed-up against {rows[0][0]}: {base / sps:.2f}x")


if __name__ == "__main__":
    main()
