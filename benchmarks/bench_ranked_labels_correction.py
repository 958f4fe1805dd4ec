"""Correction with the critic's most probable labels in place of its greedy ones, on the dev
questions: does the labels step of the ladder shrink?

Stage 08's ladder puts most of the gap between a perfect verdict and the oracle critique at the
labels: with the judge's verdicts and the rule planner, the critic's labels gain 0.060 F1 less on
test than the known causes, mostly because they name an unsupported answer ("Factual
Inaccuracies", whose remedy ends in an abstention) on answerable questions. The critic writes its
labels greedily; `ragcritic_lib.critic.label_ranking` reads the labels it finds most probable
instead. This benchmark runs, on the first ``--questions`` testbed *dev* questions (never test), the
ladder row "oracle verdict + rule planner" twice: with the critic's greedy labels (as stage 08
runs it) and with its ``--k`` most probable labels of each tier (tier 2 scored after its most
probable tier-1 list; candidates: the label lists of the critic's training targets). The verdict
and the planner are the same, so the difference is what the labels alone do. ``--oracle-critique``
adds the known causes' row (the ceiling) on the same questions.

Per row: the dev F1 change against standard RAG with its paired 95% CI, the change in the share
the audited judge calls right, answers corrected, and how many critiques named an unsupported
answer on answerable and on unanswerable questions; then ranked minus greedy, paired per question.
Both modes also ask whether the critic's labels know where abstaining pays: among the answers the
judge calls wrong, the AUROC of its probability of an unsupported-answer label (and of its greedy
naming of one) for the unanswerable questions (``--signal-only``: this alone, no correction run).
Written to ``reports/benchmarks/ranked_labels_correction.json`` (``ranked_labels_signal.json``);
numbers, no asserts.

    .venv/bin/python benchmarks/bench_ranked_labels_correction.py                 # 140 dev questions
    .venv/bin/python benchmarks/bench_ranked_labels_correction.py --questions 70 --k 1
    .venv/bin/python benchmarks/bench_ranked_labels_correction.py --signal-only
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class RankedLabelTagger:
    """A trained critic whose error critiques keep their analysis and carry its ``k`` most probable
    labels of each tier in place of the ones it wrote (the tagger an ``OracleCritic`` attaches)."""

    def __init__(self, critic: Any, tier1_candidates: Sequence[Sequence[str]], tier2_candidates: Sequence[Sequence[str]],
                 *, k: int, order1: Sequence[str], order2: Sequence[str], watch: frozenset[str] = frozenset()) -> None:
        self.critic, self.k, self.watch = critic, k, watch
        self.last_watch_mass: list[float] = []  # per critique of the last call: the probability of the watched labels
        self.cands = {"tag1": list(tier1_candidates), "tag2": list(tier2_candidates)}
        self.order = {"tag1": list(order1), "tag2": list(order2)}
        self.llm = getattr(critic, "llm", None)
        self.name = f"{getattr(critic, 'name', 'critic')}:ranked{k}"
        self.last_generations: list[Any] = []

    def critique_errors(self, records: Sequence[Mapping[str, Any]]) -> list[Any]:
        from ragcritic_lib.critic.label_ranking import label_marginals, rank_tier

        written = self.critic.critique_errors(records)
        self.last_generations = list(getattr(self.critic, "last_generations", []))
        labels = {}
        for tier in ("tag1", "tag2"):
            scores, _ = rank_tier(self.critic, records, tier, self.cands[tier], tier1_candidates=self.cands["tag1"],
                                  desc=f"{tier} label lists")
            marginals = [label_marginals(lp, self.cands[tier]) for lp in scores]
            labels[tier] = [ranked_labels(m, self.k, self.order[tier]) for m in marginals]
            if tier == "tag2":
                self.last_watch_mass = [sum(m.get(label, 0.0) for label in self.watch) for m in marginals]
        return [dataclasses.replace(p, tag1=t1, tag2=t2) for p, t1, t2 in zip(written, labels["tag1"], labels["tag2"])]


def ranked_labels(marginals: Mapping[str, float], k: int, order: Sequence[str]) -> list[str]:
    """The k most probable labels, most probable first (the order the rule planner reads them in)."""
    from ragcritic_lib.critic.label_ranking import top_k

    chosen = top_k(marginals, k, order)
    rank = {label: i for i, label in enumerate(order)}
    return sorted(chosen, key=lambda lab: (-marginals[lab], rank.get(lab, len(rank)), lab))


def unsupported_by_answerability(run: Sequence[Mapping[str, Any]], labels: frozenset[str]) -> dict[str, dict[str, int]]:
    """Per answerable / unanswerable question: critiques of the first round that called the answer
    wrong, and how many of them named an unsupported answer."""
    out = {"answerable": {"error_critiques": 0, "unsupported": 0},
           "unanswerable": {"error_critiques": 0, "unsupported": 0}}
    for record in run:
        steps = record.get("steps") or []
        critic = (steps[0].get("critic") or {}) if steps else {}
        if critic.get("judgement") != "Error":
            continue
        side = "answerable" if (record.get("metadata") or {}).get("answerable", True) else "unanswerable"
        out[side]["error_critiques"] += 1
        out[side]["unsupported"] += bool(set(critic.get("tag2") or []) & labels)
    return out


def unsupported_signal(ranked: RankedLabelTagger, critic: Any, records: Sequence[Mapping[str, Any]],
                       gold: Mapping[str, Any], *, seed: int) -> dict[str, Any]:
    """Among the answers the judge calls wrong (as the oracle verdict's critic sees them), how well
    the critic's probability of an unsupported-answer label, and its greedy naming of one, rank the
    unanswerable questions first: AUROC with a 95% interval (the abstain path pays only there)."""
    from ragcritic_lib.agent.planner import passage_strings
    from ragcritic_lib.agent.workflow import state_record
    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci
    from ragcritic_lib.mining.sampling import is_correct

    states = [state_record(r, passage_strings(r.get("passages", [])), str(r.get("prediction") or ""), first=True)
              for r in records]
    wrong = [s for s in states if not is_correct(s, metric=gold["metric"], threshold=gold["threshold"])]
    parses = ranked.critique_errors(wrong)
    greedy = critic.critique_errors(wrong)
    unanswerable = [not (s.get("metadata") or {}).get("answerable", True) for s in wrong]
    mass = list(ranked.last_watch_mass)
    named = [float(bool(set(p.tag2) & ranked.watch)) for p in greedy]
    lo, hi = bootstrap_auroc_ci(mass, unanswerable, seed=seed)
    a, g = auroc(mass, unanswerable), auroc(named, unanswerable)
    return {"n": len(wrong), "unanswerable": sum(unanswerable), "auroc": None if a is None else round(a, 4),
            "ci_low": lo, "ci_high": hi, "greedy_auroc": None if g is None else round(g, 4),
            "ranked_named": sum(bool(set(p.tag2) & ranked.watch) for p in parses)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=0, help="dev questions (0 = correction.dev_questions)")
    parser.add_argument("--k", type=int, default=1, help="labels of each tier the ranked critique names")
    parser.add_argument("--oracle-critique", action="store_true", help="also run the known causes' row")
    parser.add_argument("--signal-only", action="store_true",
                        help="only the critic's probability of an unsupported answer as a signal of unanswerability "
                             "(no correction run)")
    parser.add_argument("--out", default=None, help="default reports/benchmarks/ranked_labels_correction.json "
                                                    "(ranked_labels_signal.json with --signal-only)")
    args = parser.parse_args()
    args.out = args.out or ("reports/benchmarks/ranked_labels_signal.json" if args.signal_only
                            else "reports/benchmarks/ranked_labels_correction.json")

    from ragcritic_lib import paths
    from ragcritic_lib.agent.actions import UNSUPPORTED_LABELS
    from ragcritic_lib.agent.dev_runs import dev_ladder, run_dev_methods
    from ragcritic_lib.agent.ladder import KnownCauseCritic, ladder_records, ladder_table
    from ragcritic_lib.agent.workflow import OracleCritic
    from ragcritic_lib.critic.benchmark import _gold
    from ragcritic_lib.critic.critics import load_trained_critic
    from ragcritic_lib.critic.label_prior import fit_label_prior
    from ragcritic_lib.critic.label_ranking import candidate_lists
    from ragcritic_lib.data.flashrag import dataset_paths, load_corpus_records
    from ragcritic_lib.evaluation.stats import paired_comparison
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.mining.sampling import passage_metadata
    from ragcritic_lib.mining.taxonomy import load_known_causes
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    params = load_params()
    setup = dev_ladder(params, questions=args.questions)
    cfg, gold, ds, dev, taxonomy = setup.cfg, setup.gold, setup.dataset, setup.records, setup.taxonomy
    rule_planner = setup.rule_planner
    critic = load_trained_critic(params, paths.resolve(cfg["critic_dir"]), taxonomy, verdict="calibrated",
                                 max_new_tokens=cfg["critic_max_new_tokens"], name="trained")
    targets = [_gold(s["target"]) for s in read_jsonl(paths.stage_dir("critic_data") / "train_samples.jsonl")]
    prior = fit_label_prior(targets, taxonomy)
    orders = {tier: [*prior[tier]["counts"], *[lab for lab in inv if lab not in prior[tier]["counts"]]]
              for tier, inv in (("tag1", list(taxonomy.tier1)), ("tag2", list(taxonomy.tier2)))}
    ranked = RankedLabelTagger(critic, candidate_lists(targets, list(taxonomy.tier1), "tag1"),
                               candidate_lists(targets, list(taxonomy.tier2), "tag2"), k=args.k,
                               order1=orders["tag1"], order2=orders["tag2"], watch=UNSUPPORTED_LABELS)
    signal = unsupported_signal(ranked, critic, dev, gold, seed=int(params["common"]["seed"]))
    print(f"the critic's probability of an unsupported answer on the {signal['n']} dev answers the judge calls wrong "
          f"({signal['unanswerable']} unanswerable): AUROC for unanswerable {signal['auroc']} "
          f"({signal['ci_low']}..{signal['ci_high']}); its greedy label as the signal {signal['greedy_auroc']}")
    if args.signal_only:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"what": "the critic's probability of an unsupported answer as a signal of "
                                           "unanswerability, on dev", "dataset": ds, "split": "dev",
                                   "questions": len(dev), "cpu_class": cpu_class(), "unsupported_signal": signal},
                                  indent=2) + "\n")
        return
    greedy_row, ranked_row = "oracle verdict + rule planner", f"oracle verdict + rule planner, ranked top-{args.k}"
    methods: dict[str, dict[str, Any]] = {
        greedy_row: {"critic": OracleCritic(tagger=critic, **gold), "planner": rule_planner},
        ranked_row: {"critic": OracleCritic(tagger=ranked, **gold), "planner": rule_planner},
    }
    if args.oracle_critique:
        corpus = load_corpus_records(dataset_paths(params["common"]["datasets"], ds)["corpus"])
        methods["oracle critique"] = {"critic": KnownCauseCritic(load_known_causes(taxonomy=taxonomy), source_records=dev,
                                                                 passage_meta=passage_metadata(corpus), **gold),
                                      "planner": rule_planner}
    runs, _, wall = run_dev_methods(setup, methods)
    rows = {"standard RAG": (greedy_row, 0), **{name: (name, 1) for name in methods}}
    scored = ladder_records(runs, rows, judge_metric=gold["metric"], judge_threshold=gold["threshold"])
    ladder = ladder_table(scored, seed=int(params["common"]["seed"]))["all"]
    report: dict[str, Any] = {
        "what": "the ladder's labels step on dev: the critic's greedy labels against its most probable ones, "
                "with the judge's verdicts and the rule planner",
        "dataset": ds, "split": "dev", "questions": len(dev), "k": args.k, "wall_seconds": round(wall, 1),
        "cpu_class": cpu_class(), "unsupported_signal": signal, "rows": {},
    }
    for name in methods:
        report["rows"][name] = {
            **{k: ladder[name].get(k) for k in ("delta_f1", "ci_low", "ci_high", "delta_judge_acc",
                                                "delta_judge_acc_ci_low", "delta_judge_acc_ci_high", "corrected",
                                                "corrected_right")},
            "unsupported": unsupported_by_answerability(runs[name], UNSUPPORTED_LABELS),
        }
    diff = paired_comparison([float(r["f1"]) for r in scored[ranked_row]], [float(r["f1"]) for r in scored[greedy_row]],
                             seed=0)
    report["ranked_minus_greedy"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in diff.items()
                                     if k in ("delta", "ci_low", "ci_high", "n")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for name, r in report["rows"].items():
        u = r["unsupported"]
        print(f"{name:<48} dF1 {r['delta_f1']:+.4f} ({r['ci_low']:+.4f}..{r['ci_high']:+.4f})  judged "
              f"{r['delta_judge_acc']:+.4f}  corrected {r['corrected']}  unsupported named: answerable "
              f"{u['answerable']['unsupported']}/{u['answerable']['error_critiques']}, unanswerable "
              f"{u['unanswerable']['unsupported']}/{u['unanswerable']['error_critiques']}")
    d = report["ranked_minus_greedy"]
    print(f"ranked minus greedy: {d['delta']:+.4f} ({d['ci_low']:+.4f}..{d['ci_high']:+.4f}), n {d['n']}; "
          f"{wall:.0f} s ({report['cpu_class']}); wrote {out}")


if __name__ == "__main__":
    main()
