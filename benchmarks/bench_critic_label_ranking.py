"""Whether the trained critic's labels know more than the label prior, at an equal number of labels,
on the dev answers (tier 1, or tier 2 with ``--tier 2``).

Stage 07 scores the critics' labels against the label prior (`ragcritic_lib.critic.label_prior`):
the training targets' commonest labels of each tier, named on every answer a critic calls wrong. On
test the prior's three tier-1 labels score above the SFT critic's own, which name about one and a
half labels a critique. Micro F1 over answers with one or two gold labels rewards naming more, so
the comparison mixes two things: which labels the critic ranks first and how many it names. This
benchmark separates them on the dev wrong answers (the critics' calibration set; no test answer is
read), with `ragcritic_lib.critic.label_ranking`:

- the critic's distribution over a tier's label lists: after its Error opening
  (`critics.ERROR_PREFILL`; for tier 2, that opening with the critic's most probable tier-1 list
  and the tier-2 key), the log-probability of every ordered list of the tier's labels that its
  training targets hold (and of each label alone), scored as continuations of one encoded prompt
  and normalized over those candidates; a label's probability is the mass of the lists that hold it;
- at k = 1, 2, 3: micro F1 of the critic's k most probable labels against the prior's k commonest,
  with the paired difference and its 95% interval from resampling questions (the percentile rule of
  `ragcritic_lib.evaluation.stats`);
- the critic's most probable list (a proxy of its greedy labels) and, unless ``--no-generate``, the
  labels it writes greedily (`LLMCritic.critique_errors`), each beside the prior at its fitted k;
- for tier 2, how often each source names an unsupported answer (`agent.actions.UNSUPPORTED_LABELS`,
  the labels that send the action layer's answer down its abstain path), with its precision and
  recall against the gold critiques.

Reads stage outputs only (data/critic_data, data/critic_sft or --critic-dir), writes one JSON;
numbers, no asserts.

    .venv/bin/python benchmarks/bench_critic_label_ranking.py             # minutes on 2 CPU cores
    .venv/bin/python benchmarks/bench_critic_label_ranking.py --tier 2    # both tiers scored
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from collections.abc import Sequence
from typing import Any

from ragcritic_lib import paths


def unsupported_naming(named: Sequence[set[str]], golds: Sequence[set[str]], labels: frozenset[str]) -> dict[str, Any]:
    """How often a label source names an unsupported answer (the labels that send the action
    layer's GenerateAnswer down its abstain path), and its precision and recall against the gold."""
    pred = [bool(n & labels) for n in named]
    gold = [bool(g & labels) for g in golds]
    tp = sum(p and g for p, g in zip(pred, gold))
    return {"named": sum(pred), "gold": sum(gold), "n": len(pred),
            "precision": round(tp / sum(pred), 4) if sum(pred) else None,
            "recall": round(tp / sum(gold), 4) if sum(gold) else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", type=int, choices=(1, 2), default=1,
                    help="the tier whose labels are ranked (tier 2 continues the critic's most probable tier-1 list)")
    ap.add_argument("--critic-dir", default="data/critic_sft")
    ap.add_argument("--limit", type=int, default=0, help="only the first N dev wrong answers (0: all)")
    ap.add_argument("--min-count", type=int, default=1,
                    help="candidate lists: those the training targets hold at least this often (every label alone too)")
    ap.add_argument("--no-generate", action="store_true", help="skip the critic's greedy critiques")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--out", default=None,
                    help="default reports/benchmarks/critic_label_ranking.json (tier 1), critic_label_ranking_tier2.json")
    args = ap.parse_args()
    out_path = args.out or ("reports/benchmarks/critic_label_ranking.json" if args.tier == 1
                            else "reports/benchmarks/critic_label_ranking_tier2.json")

    from ragcritic_lib.agent.actions import UNSUPPORTED_LABELS
    from ragcritic_lib.critic.benchmark import _gold
    from ragcritic_lib.critic.critics import ERROR, load_trained_critic
    from ragcritic_lib.critic.label_prior import fit_label_prior
    from ragcritic_lib.critic.label_ranking import (
        candidate_lists,
        label_marginals,
        most_probable,
        paired_f1,
        rank_tier,
        top_k,
    )
    from ragcritic_lib.io import read_jsonl, write_json
    from ragcritic_lib.mining.taxonomy import load_taxonomy
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    params, taxonomy = load_params(), load_taxonomy()
    seed = int(params["common"]["seed"])
    tier = f"tag{args.tier}"
    data = paths.stage_dir("critic_data")
    targets = [_gold(s["target"]) for s in read_jsonl(data / "train_samples.jsonl")]
    prior = fit_label_prior(targets, taxonomy)
    cands1 = candidate_lists(targets, list(taxonomy.tier1), "tag1", min_count=args.min_count)
    inventory = list(taxonomy.tier1 if tier == "tag1" else taxonomy.tier2)
    candidates = cands1 if tier == "tag1" else candidate_lists(targets, inventory, tier, min_count=args.min_count)

    dev = [s for s in read_jsonl(data / "dev_samples.jsonl") if _gold(s["target"])["Judgement"] == ERROR]
    dev = dev[: args.limit] if args.limit else dev
    golds = [set(_gold(s["target"]).get(tier) or []) for s in dev]
    groups = [s.get("qkey", s["id"]) for s in dev]
    critic = load_trained_critic(params, paths.resolve(args.critic_dir), taxonomy, name="critic")

    t0 = time.perf_counter()
    scores, _ = rank_tier(critic, dev, tier, candidates, tier1_candidates=cands1, desc="dev label lists")
    score_seconds = time.perf_counter() - t0
    marg = [label_marginals(lp, candidates) for lp in scores]
    best_list = [set(most_probable(lp, candidates)) for lp in scores]
    fitted = list(prior[tier]["labels"])
    order = fitted + [lab for lab in inventory if lab not in fitted]
    prior_order = sorted(prior[tier]["counts"], key=lambda lab: -prior[tier]["counts"][lab])

    rows: dict[str, Any] = {}
    named: dict[str, list[set[str]]] = {}
    for k in (1, 2, 3):
        named[f"top{k}"] = [top_k(m, k, order) for m in marg]
        rows[f"top{k}"] = paired_f1(named[f"top{k}"], [set(prior_order[:k])] * len(dev), golds, groups,
                                    seed=seed, n_boot=args.bootstrap)
    fitted_prior = [set(fitted)] * len(dev)
    named["most_probable_list"] = best_list
    rows["most_probable_list"] = paired_f1(best_list, fitted_prior, golds, groups, seed=seed, n_boot=args.bootstrap)
    gen_seconds = None
    if not args.no_generate:
        t1 = time.perf_counter()
        written = [set(getattr(p, tier)) for p in critic.critique_errors(dev, desc="dev error critiques")]
        gen_seconds = time.perf_counter() - t1
        named["generated"] = written
        rows["generated"] = paired_f1(written, fitted_prior, golds, groups, seed=seed, n_boot=args.bootstrap)
    for name, sets in named.items():
        rows[name]["labels_per_critique"] = round(sum(map(len, sets)) / max(1, len(sets)), 3)
    named["prior"] = fitted_prior
    unsupported = ({name: unsupported_naming(sets, golds, UNSUPPORTED_LABELS) for name, sets in named.items()}
                   if tier == "tag2" else None)
    mass = [sum(math.exp(v) for v in lp) for lp in scores]

    out = {
        "what": f"SFT critic's tier-{args.tier} labels against the label prior at equal k, on the dev wrong answers"
                + (" (tier-2 lists scored after the critic's most probable tier-1 list)" if tier == "tag2" else ""),
        "tier": tier, "critic_dir": args.critic_dir, "n": len(dev), "questions": len(set(groups)),
        "prior": {"labels_by_count": prior_order, "k_fitted_on_train": prior[tier]["k"],
                  "n_train_errors": prior["n_errors"]},
        "candidates": len(candidates), "candidate_min_count": args.min_count,
        "candidate_mass_mean": round(sum(mass) / len(mass), 4) if mass else None,
        "rows": rows, "unsupported_label": unsupported, "score_seconds": round(score_seconds, 1),
        "generate_seconds": None if gen_seconds is None else round(gen_seconds, 1),
        "cpu_class": cpu_class(), "machine": platform.processor() or platform.machine(),
    }
    write_json(paths.resolve(out_path), out)
    print(f"{len(dev)} dev wrong answers ({out['questions']} questions), {len(candidates)} candidate tier-{args.tier} "
          f"lists holding {out['candidate_mass_mean']} of the critic's probability on average; scoring "
          f"{score_seconds:.0f} s" + ("" if gen_seconds is None else f", generating {gen_seconds:.0f} s")
          + f" ({out['cpu_class']})")
    print(f"prior by count: {prior_order}; k fitted on train: {prior[tier]['k']}")
    for name, r in rows.items():
        print(f"{name:>20}: critic {r['critic']:.3f}  prior {r['prior']:.3f}  diff {r['diff']:+.3f} "
              f"({r['ci_low']:+.3f}..{r['ci_high']:+.3f})  labels a critique {r['labels_per_critique']}")
    for name, u in (unsupported or {}).items():
        print(f"{name:>20}: names an unsupported answer on {u['named']} of {u['n']} (gold {u['gold']}), "
              f"precision {u['precision']}, recall {u['recall']}")


if __name__ == "__main__":
    main()
