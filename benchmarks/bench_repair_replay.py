"""RePAIR's off-policy phase replayed from a shipped stage 12: the dev score and the time of other
DPO recipes and prompt forms, with no plan executed again.

Stage 12 writes the failed train answers it trained on and every grammar plan executed on them
(``data/repair/offpolicy_states.jsonl``, ``offpolicy_candidates.jsonl``), and the same for its
held-out dev states (``dev_states.jsonl`` with the judge's flag, ``dev_candidates.jsonl``). For
each variant ``prompt:recipe[:lora_top_layers]`` this rebuilds the off-policy pairs in that prompt
form exactly as the stage does (``repair.build_preference_pairs`` per state, then
``repair.balance_chosen``), trains one epoch of DPO from the base model with the stage's beta,
and scores the trained planner's picks on the dev states by the stage's rule (``repair.pick_plans``
with ``repair.decoding``, as ``repair.dev_choice`` does; under ``calibrated`` each planner's prior comes from the stage's
calibration states, ``calibration_states.jsonl``, the first ``repair.calibration_states`` of them
unless ``--calibration-states`` says otherwise). A variant may also set the pairs a state gives
(``max_pairs``) and how many of the executed grammar plans of each state it keeps
(``plans_per_state``: the stage's draw per state, ``repair.offpolicy_plans``, as if only those had been executed;
the off-policy execution, the stage's largest part, costs in proportion). ``--shipped`` adds a row
for the stage's own off-policy planner (``planner_off``), scored the same way. It prints, per
variant: pairs, steps, seconds per step, minutes, the dev ``chosen_reward`` and ``top_share``, and
how many dev picks differ from the untrained planner's (as the stage's ``dev.changed_picks``
counts them), beside the untrained planner's, the best single plan's and the per-state best. Numbers only,
no asserts; a difference between variants is read against the dev states' spread, which the
script prints as a paired bootstrap 95% interval of the reward difference to the first variant.
Run it alone: other load on the cores changes the times.

    .venv/bin/python benchmarks/bench_repair_replay.py
    .venv/bin/python benchmarks/bench_repair_replay.py \\
        --variants full:configs/train/critic_dpo.yaml,compact:configs/train/repair_dpo.yaml
    .venv/bin/python benchmarks/bench_repair_replay.py --shipped \\
        --variants compact:configs/train/repair_dpo.yaml::1:4   # prompt:recipe:top:max_pairs:plans_per_state
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


def keep_plans(candidates, k: int, *, seed: int):
    """Of each state's executed candidates, those of ``k`` distinct plans drawn by the stage's rule
    (``draw_state_plans`` of ``ragcritic_lib/baselines/repair.py``, seeded by the state, as
    ``repair.offpolicy_plans`` draws them), so a replay keeps the plans the stage would have
    executed; ``k`` <= 0 keeps them all."""
    from ragcritic_lib.baselines import repair

    if k <= 0:
        return list(candidates)
    by_state: dict[tuple[str, str], list[dict]] = {}
    for c in candidates:
        by_state.setdefault((str(c["dataset"]), str(c["qid"])), []).append(c)
    chosen = {key: repair.draw_state_plans([str(c["plan"]) for c in cands], k, seed=seed, dataset=key[0], qid=key[1])
              for key, cands in by_state.items()}
    return [c for c in candidates
            if repair._norm_plan(str(c["plan"])) in chosen[(str(c["dataset"]), str(c["qid"]))]]


def pick_rewards(planner, states, candidates, *, prompt: str, programs, decoding: str = "constrained",
                 calibration=None):
    """Per dev state, the executed reward of the plan the planner picks by the stage's rule
    (``repair.pick_plans`` with ``decoding``; for "calibrated" the prior is ``repair.plan_prior``
    of this planner over ``calibration``, the calibration states), and the picks."""
    from ragcritic_lib.baselines import dataset_name, repair

    table: dict[tuple[str, str], dict[str, float]] = {}
    for c in candidates:
        if c.get("reward") is not None:
            table.setdefault((str(c["dataset"]), str(c["qid"])), {})[" ".join(str(c["plan"]).split())] = float(c["reward"])
    recs = [r for r in states if (dataset_name(r), str(r.get("id"))) in table]
    prompts = [repair.build_planner_messages(r, correct=bool(r.get("judged_correct")), example=False, prompt=prompt)
               for r in recs]
    prior = None
    if decoding == "calibrated":
        prior = repair.plan_prior(planner, calibration, judged_correct=[bool(r.get("judged_correct")) for r in calibration],
                                  programs=programs, prompt=prompt)
    picks = repair.pick_plans(planner, prompts, list(programs), decoding=decoding, prior=prior, desc="replay dev plans")
    rewards = [table[(dataset_name(r), str(r.get("id")))].get(" ".join(p.split()), 0.0) for r, p in zip(recs, picks)]
    return rewards, picks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage-dir", default=str(paths.resolve("data/repair")))
    ap.add_argument("--variants", default="compact:configs/train/repair_dpo.yaml,full:configs/train/repair_dpo.yaml:0",
                    help="comma-separated prompt:recipe[:lora_top_layers[:max_pairs[:plans_per_state]]] (empty = the recipe's / params' value)")
    ap.add_argument("--max-steps", type=int, default=-1, help="-1: one epoch, as the stage")
    ap.add_argument("--decoding", default=None, help="the dev pick's rule (default: repair.decoding)")
    ap.add_argument("--calibration-states", type=int, default=-1,
                    help="calibrated: the first N of calibration_states.jsonl (-1: repair.calibration_states)")
    ap.add_argument("--shipped", action="store_true", help="also score the stage's own off-policy planner (planner_off)")
    args = ap.parse_args()

    import numpy as np

    from ragcritic_lib import runtime
    from ragcritic_lib.baselines import repair
    from ragcritic_lib.critic.cached_dpo import train_dpo
    from ragcritic_lib.critic.training import dpo_start
    from ragcritic_lib.pipeline.params import load_params

    params = load_params()
    rp = params["repair"]
    stage = Path(args.stage_dir)
    names = ("offpolicy_states", "offpolicy_candidates", "dev_states", "dev_candidates")
    missing = [n for n in names if not (stage / f"{n}.jsonl").exists()]
    if missing:
        raise SystemExit(f"{stage}: no {', '.join(n + '.jsonl' for n in missing)} (run or restore stage 12 first)")
    off_states, off_cands, dev_states, dev_cands = (read_jsonl(stage / f"{n}.jsonl") for n in names)
    decoding = args.decoding or rp["decoding"]
    calibration = None
    if decoding == "calibrated":
        if not (stage / "calibration_states.jsonl").exists():
            raise SystemExit(f"{stage}: no calibration_states.jsonl (a stage 12 run that calibrates writes it)")
        n_cal = int(rp["calibration_states"]) if args.calibration_states < 0 else args.calibration_states
        calibration = list(read_jsonl(stage / "calibration_states.jsonl"))[:n_cal]
    score = dict(decoding=decoding, calibration=calibration)
    programs = repair.grammar_programs(int(rp["grammar_plans"]), topk=int(params["retrieval_rag"]["top_k"]))
    base = runtime.resolve_base_model(params, rp["base_model"], key="repair.base_model")
    dev_ceiling = repair.plan_rewards(dev_cands) or {}
    print(f"{len(off_states)} off-policy states, {len(dev_states)} dev answers; dev best single plan "
          f"{dev_ceiling.get('best_single_reward')}, per-state best {dev_ceiling.get('per_state_best_reward')}")
    untrained = runtime.load_start_model(params, {"base_model": base, "init_adapter": None})
    print(f"dev picks by the {decoding} rule" + (f" ({len(calibration)} calibration states)" if calibration else ""),
          flush=True)
    rows = {"untrained (compact prompt)": (None, *pick_rewards(untrained, dev_states, dev_cands, prompt="compact",
                                                                programs=programs, **score))}
    if args.shipped:
        if not (stage / "planner_off").is_dir():
            raise SystemExit(f"{stage}: no planner_off/ (the stage's off-policy planner)")
        shipped = runtime.load_start_model(params, runtime.training_start(
            str(stage / "planner_off"), base_model=rp["base_model"], key="repair.base_model"))
        rows[f"shipped planner_off ({rp['prompt']}, max_pairs {rp['max_pairs']}, all plans)"] = (
            None, *pick_rewards(shipped, dev_states, dev_cands, prompt=rp["prompt"], programs=programs, **score))
    seed = int(params["common"]["seed"])
    for spec in args.variants.split(","):
        form, recipe, *rest = spec.split(":")
        top, n_pairs, per_state = (rest + ["", "", ""])[:3]
        pairs = offpolicy_pairs(off_states, keep_plans(off_cands, int(per_state or 0), seed=seed), prompt=form,
                                margin=float(rp["margin"]), max_pairs=int(n_pairs or rp["max_pairs"]),
                                max_share=float(rp["max_chosen_share"]), seed=seed)
        overrides = {"beta": float(rp["dpo_beta"]), "max_length": 1024,
                     **({"max_steps": -1, "num_train_epochs": 1} if args.max_steps == -1 else {"max_steps": args.max_steps}),
                     **({"lora_top_layers": int(top)} if top else {})}
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            res = train_dpo(pairs, paths.resolve(recipe), Path(tmp) / "planner", base_model=base, overrides=overrides)
            minutes = (time.perf_counter() - t0) / 60
            planner = runtime.load_start_model(params, dpo_start(res))
            got, picks = pick_rewards(planner, dev_states, dev_cands, prompt=form, programs=programs, **score)
        rows[spec] = ((len(pairs), res.steps, res.seconds_per_step, minutes), got, picks)
    first = list(rows)[1] if len(rows) > 1 else None  # the shipped planner with --shipped, else the first variant
    rng = np.random.default_rng(0)
    start_picks = next(iter(rows.values()))[2]  # the untrained planner's: what DPO moved away from
    for name, (cost, got, picks) in rows.items():
        g = np.asarray(got, dtype=float)
        top = max(Counter(picks).values()) / len(picks) if picks else float("nan")
        moved = sum(a != b for a, b in zip(picks, start_picks))
        line = f"{name:55s} dev chosen_reward {g.mean():.3f} (n={len(g)}), top_share {top:.2f}, {moved} picks moved"
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
