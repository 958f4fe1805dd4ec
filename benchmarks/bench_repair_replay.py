"""RePAIR's off-policy phase replayed from a shipped stage 12: the dev score and the time of other
DPO recipes and prompt forms, with no plan executed again.

Stage 12 writes the failed train answers it trained on and every grammar plan executed on them
(``data/repair/offpolicy_states.jsonl``, ``offpolicy_candidates.jsonl``), and the same for its
held-out dev states (``dev_states.jsonl`` with the judge's flag, ``dev_candidates.jsonl``). For
each variant ``prompt:recipe[:lora_top_layers]`` this rebuilds the off-policy pairs in that prompt
form exactly as the stage does (``repair.build_preference_pairs`` per state, then
``repair.balance_chosen``), trains one epoch of DPO from the base model with the stage's beta,
and scores the trained planner's picks on the dev states (``repair.dev_choice``). It prints, per
variant: pairs, steps, seconds per step, minutes, and the dev ``chosen_reward`` and ``top_share``
beside the untrained planner's, the best single plan's and the per-state best. Numbers only,
no asserts; a difference between variants is read against the dev states' spread, which the
script prints as a paired bootstrap 95% interval of the reward difference to the first variant.
Run it alone: other load on the cores changes the times.

    .venv/bin/python benchmarks/bench_repair_replay.py
    .venv/bin/python benchmarks/bench_repair_replay.py \\
        --variants full:configs/train/critic_dpo.yaml,compact:configs/train/repair_dpo.yaml
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
import time
from pathlib import Path

from ragcritic_lib import paths
from ragcritic_lib.io import read_jsonl


def offpolicy_pairs(states, candidates, *, prompt: str, margin: float, max_pairs: int, max_share: float, seed: int):
    """The stage's off-policy pairs, rebuilt in ``prompt`` form from its executed candidates."""
    from ragcritic_lib.baselines import dataset_name, repair

    by_state: dict[tuple[str, str], list[dict]] = {}
    for c in candidates:
        by_state.setdefault((str(c["dataset"]), str(c["qid"])), []).append(c)
    pairs = []
    for rec in states:
        cands = by_state.get((dataset_name(rec), str(rec.get("id"))), [])
        msgs = repair.build_planner_messages(rec, correct=False, reasoning=str(rec.get("raw_output") or ""),
                                             oracle=True, example=False, prompt=prompt)
        for a, b in repair.build_preference_pairs(cands, margin=margin, max_pairs=max_pairs):
            pairs.append({"prompt": msgs, "chosen": cands[a]["plan"], "rejected": cands[b]["plan"]})
    return repair.balance_chosen(pairs, max_share=max_share, seed=seed)


def pick_rewards(planner, states, candidates, *, prompt: str, programs):
    """Per dev state, the executed reward of the plan the planner picks (the stage's dev score, per state)."""
    from ragcritic_lib.baselines import dataset_name, repair

    table: dict[tuple[str, str], dict[str, float]] = {}
    for c in candidates:
        table.setdefault((str(c["dataset"]), str(c["qid"])), {})[" ".join(str(c["plan"]).split())] = float(c["reward"])
    recs = [r for r in states if (dataset_name(r), str(r.get("id"))) in table]
    prompts = [repair.build_planner_messages(r, correct=bool(r.get("judged_correct")), example=False, prompt=prompt)
               for r in recs]
    picks = planner.choose(prompts, [list(programs)] * len(prompts), desc="replay dev plans")
    rewards = [table[(dataset_name(r), str(r.get("id")))].get(" ".join(p.text.split()), 0.0) for r, p in zip(recs, picks)]
    return rewards, [p.text for p in picks]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage-dir", default=str(paths.resolve("data/repair")))
    ap.add_argument("--variants", default="compact:configs/train/repair_dpo.yaml,full:configs/train/repair_dpo.yaml:0",
                    help="comma-separated prompt:recipe[:lora_top_layers]")
    ap.add_argument("--max-steps", type=int, default=-1, help="-1: one epoch, as the stage")
    args = ap.parse_args()

    import numpy as np

    from ragcritic_lib import runtime
    from ragcritic_lib.baselines import repair
    from ragcritic_lib.critic.training import dpo_start, train_dpo
    from ragcritic_lib.pipeline.params import load_params

    params = load_params()
    rp = params["repair"]
    stage = Path(args.stage_dir)
    names = ("offpolicy_states", "offpolicy_candidates", "dev_states", "dev_candidates")
    missing = [n for n in names if not (stage / f"{n}.jsonl").exists()]
    if missing:
        raise SystemExit(f"{stage}: no {', '.join(n + '.jsonl' for n in missing)} (run or restore stage 12 first)")
    off_states, off_cands, dev_states, dev_cands = (read_jsonl(stage / f"{n}.jsonl") for n in names)
    programs = repair.grammar_programs(int(rp["grammar_plans"]), topk=int(params["retrieval_rag"]["top_k"]))
    base = runtime.resolve_base_model(params, rp["base_model"], key="repair.base_model")
    dev_ceiling = repair.plan_rewards(dev_cands) or {}
    print(f"{len(off_states)} off-policy states, {len(dev_states)} dev answers; dev best single plan "
          f"{dev_ceiling.get('best_single_reward')}, per-state best {dev_ceiling.get('per_state_best_reward')}")
    untrained = runtime.load_start_model(params, {"base_model": base, "init_adapter": None})
    rows = {"untrained (compact prompt)": (None, *pick_rewards(untrained, dev_states, dev_cands, prompt="compact",
                                                                programs=programs))}
    for spec in args.variants.split(","):
        form, recipe, *top = spec.split(":")
        pairs = offpolicy_pairs(off_states, off_cands, prompt=form, margin=float(rp["margin"]),
                                max_pairs=int(rp["max_pairs"]), max_share=float(rp["max_chosen_share"]),
                                seed=int(params["common"]["seed"]))
        overrides = {"beta": float(rp["dpo_beta"]), "max_length": 1024,
                     **({"max_steps": -1, "num_train_epochs": 1} if args.max_steps == -1 else {"max_steps": args.max_steps}),
                     **({"lora_top_layers": int(top[0])} if top else {})}
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            res = train_dpo(pairs, paths.resolve(recipe), Path(tmp) / "planner", base_model=base, overrides=overrides)
            minutes = (time.perf_counter() - t0) / 60
            planner = runtime.load_start_model(params, dpo_start(res))
            got, picks = pick_rewards(planner, dev_states, dev_cands, prompt=form, programs=programs)
        rows[spec] = ((len(pairs), res.steps, res.seconds_per_step, minutes), got, picks)
    first = list(rows)[1] if len(rows) > 1 else None
    rng = np.random.default_rng(0)
    for name, (cost, got, picks) in rows.items():
        g = np.asarray(got, dtype=float)
        top = max(Counter(picks).values()) / len(picks) if picks else float("nan")
        line = f"{name:55s} dev chosen_reward {g.mean():.3f} (n={len(g)}), top_share {top:.2f}"
        if cost:
            line += f"  pairs {cost[0]}, {cost[1]} steps, {cost[2]:.1f} s/step, {cost[3]:.1f} min"
        if first and name != first:
            ref = np.asarray(rows[first][1], dtype=float)
            d = g - ref
            boots = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(2000)]
            line += f"  vs {first.split(':')[0]}: {d.mean():+.3f} ({np.quantile(boots, 0.025):+.3f}, {np.quantile(boots, 0.975):+.3f})"
        print(line, flush=True)


if __name__ == "__main__":
    main()
