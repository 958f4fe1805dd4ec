"""Whether the trained critic's tier-1 labels know more than the label prior, at an equal number of
labels, on the dev answers.

Stage 07 scores the critics' labels against the label prior (`ragcritic_lib.critic.label_prior`):
the training targets' commonest tier-1 labels, named on every answer a critic calls wrong. On test
the prior's three labels score above the SFT critic's own, which name about one and a half labels a
critique. Micro F1 over answers with one or two gold labels rewards naming more, so the comparison
mixes two things: which labels the critic ranks first and how many it names. This benchmark
separates them on the dev wrong answers (the critics' calibration set; no test answer is read):

- the critic's distribution over tier-1 label lists: after its Error opening
  (`critics.ERROR_PREFILL`), the log-probability of every ordered list of tier-1 labels that its
  training targets hold (and of each label alone), scored as continuations of one encoded prompt
  and normalized over those candidates; a label's probability is the mass of the lists that hold it;
- at k = 1, 2, 3: micro F1 of the critic's k most probable labels against the prior's k commonest,
  with the paired difference and its 95% interval from resampling questions (the percentile rule of
  `ragcritic_lib.evaluation.stats`);
- the critic's most probable list (a proxy of its greedy labels) and, unless ``--no-generate``, the
  labels it writes greedily (`LLMCritic.critique_errors`), each beside the prior at its fitted k.

Reads stage outputs only (data/critic_data, data/critic_sft or --critic-dir), writes one JSON;
numbers, no asserts.

    .venv/bin/python benchmarks/bench_critic_label_ranking.py    # minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib import paths


def label_marginals(logprobs: Sequence[float], candidates: Sequence[Sequence[str]]) -> dict[str, float]:
    """Each label's probability: the normalized mass of the candidate lists that hold it."""
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = sum(weights)
    out: Counter[str] = Counter()
    for w, labels in zip(weights, candidates):
        for label in set(labels):
            out[label] += w / total
    return dict(out)


def top_k(marginals: Mapping[str, float], k: int, order: Sequence[str]) -> set[str]:
    """The k most probable labels (ties in ``order``)."""
    rank = {label: i for i, label in enumerate(order)}
    return set(sorted(marginals, key=lambda lab: (-marginals[lab], rank.get(lab, len(rank))))[:k])


def micro_counts(preds: Sequence[set[str]], golds: Sequence[set[str]]) -> list[tuple[int, int, int]]:
    return [(len(p & g), len(p - g), len(g - p)) for p, g in zip(preds, golds)]


def micro_f1(rows: Sequence[tuple[int, int, int]]) -> float:
    tp = sum(r[0] for r in rows)
    fp = sum(r[1] for r in rows)
    fn = sum(r[2] for r in rows)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def paired(a: Sequence[set[str]], b: Sequence[set[str]], golds: Sequence[set[str]], groups: Sequence[Any], *,
           seed: int, n_boot: int) -> dict[str, Any]:
    """Micro F1 of ``a`` and ``b`` and a - b with its interval over resampled ``groups``."""
    from ragcritic_lib.evaluation.stats import cluster_resamples, percentile_interval

    ca, cb = micro_counts(a, golds), micro_counts(b, golds)
    diffs = [micro_f1([ca[i] for i in idx]) - micro_f1([cb[i] for i in idx])
             for idx in cluster_resamples(groups, len(golds), n_boot, seed)]
    lo, hi = percentile_interval(diffs)
    return {"critic": round(micro_f1(ca), 4), "prior": round(micro_f1(cb), 4),
            "diff": round(micro_f1(ca) - micro_f1(cb), 4), "ci_low": None if lo is None else round(lo, 4),
            "ci_high": None if hi is None else round(hi, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--critic-dir", default="data/critic_sft")
    ap.add_argument("--limit", type=int, default=0, help="only the first N dev wrong answers (0: all)")
    ap.add_argument("--no-generate", action="store_true", help="skip the critic's greedy critiques")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--out", default="reports/benchmarks/critic_label_ranking.json")
    args = ap.parse_args()

    from ragcritic_lib.critic.benchmark import _gold
    from ragcritic_lib.critic.critics import ERROR, ERROR_PREFILL, load_trained_critic
    from ragcritic_lib.critic.label_prior import fit_label_prior
    from ragcritic_lib.io import read_jsonl, write_json
    from ragcritic_lib.mining.taxonomy import load_taxonomy
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    params, taxonomy = load_params(), load_taxonomy()
    seed = int(params["common"]["seed"])
    data = paths.stage_dir("critic_data")
    train = read_jsonl(data / "train_samples.jsonl")
    targets = [_gold(s["target"]) for s in train]
    prior = fit_label_prior(targets, taxonomy)
    lists = Counter(tuple(t.get("tag1") or []) for t in targets if t["Judgement"] == ERROR)
    candidates = sorted({*(c for c in lists if c), *((label,) for label in taxonomy.tier1)},
                        key=lambda c: (-lists.get(c, 0), c))
    # each list as the critic writes it inside its critique: the list's closing bracket is followed by the
    # comma before "tag2", and the tokenizer writes bracket, quote and comma as one token ('"],'), so a
    # list scored without the comma would be scored on a token the critic never writes there
    options = [" " + json.dumps(list(c), ensure_ascii=False) + "," for c in candidates]

    dev = [s for s in read_jsonl(data / "dev_samples.jsonl") if _gold(s["target"])["Judgement"] == ERROR]
    dev = dev[: args.limit] if args.limit else dev
    golds = [set(_gold(s["target"]).get("tag1") or []) for s in dev]
    groups = [s.get("qkey", s["id"]) for s in dev]
    critic = load_trained_critic(params, paths.resolve(args.critic_dir), taxonomy, name="critic")

    t0 = time.perf_counter()
    prompts = [[*critic.messages(s), {"role": "assistant", "content": ERROR_PREFILL}] for s in dev]
    scores = critic.llm.score(prompts, [options] * len(prompts), desc="tier-1 label lists")
    score_seconds = time.perf_counter() - t0
    marg = [label_marginals(lp, candidates) for lp in scores]
    best_list = [set(candidates[max(range(len(lp)), key=lp.__getitem__)]) for lp in scores]
    order = list(prior["tag1"]["labels"]) + [lab for lab in taxonomy.tier1 if lab not in prior["tag1"]["labels"]]
    prior_order = sorted(prior["tag1"]["counts"], key=lambda lab: -prior["tag1"]["counts"][lab])

    rows: dict[str, Any] = {}
    for k in (1, 2, 3):
        rows[f"top{k}"] = paired([top_k(m, k, order) for m in marg], [set(prior_order[:k])] * len(dev), golds,
                                 groups, seed=seed, n_boot=args.bootstrap)
    k_fit = prior["tag1"]["k"]
    fitted_prior = [set(prior["tag1"]["labels"])] * len(dev)
    rows["most_probable_list"] = paired(best_list, fitted_prior, golds, groups, seed=seed, n_boot=args.bootstrap)
    gen_seconds = None
    if not args.no_generate:
        t1 = time.perf_counter()
        written = [set(p.tag1) for p in critic.critique_errors(dev, desc="dev error critiques")]
        gen_seconds = time.perf_counter() - t1
        rows["generated"] = paired(written, fitted_prior, golds, groups, seed=seed, n_boot=args.bootstrap)
        rows["generated"]["labels_per_critique"] = round(sum(map(len, written)) / max(1, len(written)), 3)
    rows["most_probable_list"]["labels_per_critique"] = round(sum(map(len, best_list)) / max(1, len(best_list)), 3)
    mass = [sum(math.exp(v) for v in lp) for lp in scores]

    out = {
        "what": "SFT critic's tier-1 labels against the label prior at equal k, on the dev wrong answers",
        "critic_dir": args.critic_dir, "n": len(dev), "questions": len(set(groups)),
        "prior": {"labels_by_count": prior_order, "k_fitted_on_train": k_fit, "n_train_errors": prior["n_errors"]},
        "candidates": len(candidates), "candidate_mass_mean": round(sum(mass) / len(mass), 4) if mass else None,
        "rows": rows, "score_seconds": round(score_seconds, 1),
        "generate_seconds": None if gen_seconds is None else round(gen_seconds, 1),
        "cpu_class": cpu_class(), "machine": platform.processor() or platform.machine(),
    }
    write_json(paths.resolve(args.out), out)
    print(f"{len(dev)} dev wrong answers ({out['questions']} questions), {len(candidates)} candidate lists "
          f"holding {out['candidate_mass_mean']} of the critic's probability on average; scoring {score_seconds:.0f} s"
          + ("" if gen_seconds is None else f", generating {gen_seconds:.0f} s") + f" ({out['cpu_class']})")
    print(f"prior by count: {prior_order}; k fitted on train: {k_fit}")
    for name, r in rows.items():
        print(f"{name:>20}: critic {r['critic']:.3f}  prior {r['prior']:.3f}  diff {r['diff']:+.3f} "
              f"({r['ci_low']:+.3f}..{r['ci_high']:+.3f})")


if __name__ == "__main__":
    main()
