"""How RePAIR's trained planner picks a plan, replayed from a shipped stage 12: the stage's greedy
decoding inside the plans' token trie against picking by each plan's whole log-probability, with
no plan executed again.

Stage 12 picks one of the grammar's plans per answer by ``repair.decoding``: ``constrained``,
greedy decoding inside their token trie (``planner.choose``), where the first token at which two
plans part decides between them although DPO trained whole-sequence log-probabilities, or
``calibrated`` (``repair.pick_plans``). This scores every grammar plan on each held-out dev state
with the shipped planner (``data/repair/planner``, ``planner.score``) and compares three rules on
the dev states' executed rewards (``dev_candidates.jsonl``):

- ``trie greedy``: ``repair.decoding: constrained``;
- ``sequence log-prob``: the plan with the highest summed log-probability;
- ``calibrated`` (with ``--calibrate``): that log-probability minus the plan's mean over train
  states (a plan's prior taken out, so a state's own evidence decides): the stage's calibration
  states (``calibration_states.jsonl``, written since the stage calibrates) or, from an older
  stage, its failed off-policy train answers. Every plan is scored on every train state (2.8 s
  a state on 2 AVX2-only cores alone, 25 s beside another process; 1 December 2026);
  ``--train-states`` takes the first N.

It prints per rule the dev mean reward of the picks, the share of the most frequent pick, the
distinct picks, and the reward difference to the trie rule with its paired bootstrap 95% interval
and minimum detectable effect (``evaluation.stats.paired_comparison``), beside the best single
plan's reward and the per-state best. Numbers only, no asserts. The dev
states are few (23 in the shipped run): read every difference against its interval.

    .venv/bin/python benchmarks/bench_repair_decoding.py
    .venv/bin/python benchmarks/bench_repair_decoding.py --calibrate --train-states 40
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from ragcritic_lib import paths
from ragcritic_lib.io import read_jsonl


def reward_table(candidates) -> dict[tuple[str, str], dict[str, float]]:
    """{(dataset, qid): {normalized plan: executed reward}}."""
    table: dict[tuple[str, str], dict[str, float]] = {}
    for c in candidates:
        if c.get("reward") is not None:
            table.setdefault((str(c["dataset"]), str(c["qid"])), {})[" ".join(str(c["plan"]).split())] = float(c["reward"])
    return table


def state_prompts(states, table, *, prompt: str):
    """The states that have executed candidates, and the planner prompt of each (as at test time)."""
    from ragcritic_lib.baselines import dataset_name, repair

    recs = [r for r in states if (dataset_name(r), str(r.get("id"))) in table]
    return recs, [repair.build_planner_messages(r, correct=bool(r.get("judged_correct")), example=False, prompt=prompt)
                  for r in recs]


def calibration_prompts(states, *, prompt: str):
    """The test-time planner prompt of each calibration state the stage wrote (its judge flag kept)."""
    from ragcritic_lib.baselines import repair

    return [repair.build_planner_messages(r, correct=bool(r.get("judged_correct")), example=False, prompt=prompt)
            for r in states]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage-dir", default=str(paths.resolve("data/repair")))
    ap.add_argument("--calibrate", action="store_true", help="also score the off-policy train states and calibrate")
    ap.add_argument("--train-states", type=int, default=0,
                    help="with --calibrate: the first N off-policy train states only (0 = all; each costs one scoring of every plan)")
    args = ap.parse_args()

    import numpy as np

    from ragcritic_lib import runtime
    from ragcritic_lib.baselines import dataset_name, repair
    from ragcritic_lib.evaluation.stats import paired_comparison
    from ragcritic_lib.pipeline.params import load_params

    params = load_params()
    rp = params["repair"]
    stage = Path(args.stage_dir)
    need = ["dev_states", "dev_candidates"]
    if args.calibrate and not (stage / "calibration_states.jsonl").exists():
        need += ["offpolicy_states", "offpolicy_candidates"]
    missing = [f"{n}.jsonl" for n in need if not (stage / f"{n}.jsonl").exists()]
    missing += [] if (stage / "planner").is_dir() else ["planner/"]
    if missing:
        raise SystemExit(f"{stage}: no {', '.join(missing)} (run or restore stage 12 first)")
    programs = repair.grammar_programs(int(rp["grammar_plans"]), topk=int(params["retrieval_rag"]["top_k"]))
    norm = [" ".join(p.split()) for p in programs]
    start = runtime.training_start(str(stage / "planner"), base_model=rp["base_model"], key="repair.base_model")
    planner = runtime.load_start_model(params, start)

    dev_table = reward_table(read_jsonl(stage / "dev_candidates.jsonl"))
    recs, prompts = state_prompts(read_jsonl(stage / "dev_states.jsonl"), dev_table, prompt=rp["prompt"])
    rewards = np.array([[dev_table[(dataset_name(r), str(r.get("id")))].get(p, 0.0) for p in norm] for r in recs])
    ceiling = repair.plan_rewards(read_jsonl(stage / "dev_candidates.jsonl")) or {}
    print(f"{len(recs)} dev states, {len(programs)} plans; best single plan {ceiling.get('best_single')} "
          f"{ceiling.get('best_single_reward')}, per-state best {ceiling.get('per_state_best_reward')}", flush=True)

    trie = [norm.index(" ".join(c.text.split())) for c in planner.choose(prompts, [programs] * len(prompts), desc="trie")]
    scores = np.array(planner.score(prompts, [programs] * len(prompts), desc="dev scores"), dtype=float)
    rules = {"trie greedy (stage)": trie, "sequence log-prob": [int(i) for i in scores.argmax(axis=1)]}
    if args.calibrate:
        if (stage / "calibration_states.jsonl").exists():
            off_prompts = calibration_prompts(read_jsonl(stage / "calibration_states.jsonl"), prompt=rp["prompt"])
        else:
            off_table = reward_table(read_jsonl(stage / "offpolicy_candidates.jsonl"))
            _, off_prompts = state_prompts(read_jsonl(stage / "offpolicy_states.jsonl"), off_table, prompt=rp["prompt"])
        off_prompts = off_prompts[: args.train_states] if args.train_states > 0 else off_prompts
        off = np.array(planner.score(off_prompts, [programs] * len(off_prompts), desc="train scores"), dtype=float)
        rules[f"calibrated ({len(off_prompts)} train states)"] = [int(i) for i in (scores - off.mean(axis=0)).argmax(axis=1)]

    ref = rewards[np.arange(len(recs)), trie]
    for name, picks in rules.items():
        got = rewards[np.arange(len(recs)), picks]
        counts = Counter(picks)
        line = (f"{name:34s} dev reward {got.mean():.3f}  top_share {max(counts.values()) / len(picks):.2f}  "
                f"distinct {len(counts)}")
        if picks is not trie:
            cmp = paired_comparison(got, ref, n_boot=2000, seed=0)
            line += (f"  vs trie {cmp['delta']:+.3f} ({cmp['ci_low']:+.3f}, {cmp['ci_high']:+.3f}), "
                     f"MDE {cmp['mde']:.3f}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
