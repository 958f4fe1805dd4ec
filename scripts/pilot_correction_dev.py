"""Dev-split pilot of the correction action layer: fixed action and oracle critique.

Runs the two ladder rows that need no trained critic or planner on the first N questions of the
testbed's *dev* split (standard-RAG answers from stage retrieval_rag), and prints the ladder with
per-type F1 differences and the time taken. It is the place to try action settings: thresholds
and choices are tuned here, on dev, never on the test split that notebook 08 reports.

    .venv/bin/python scripts/pilot_correction_dev.py --n 56
    .venv/bin/python scripts/pilot_correction_dev.py --n 140 --rows "oracle critique,oracle critique (all causes)"
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragcritic_lib.agent.ladder import AlwaysErrorCritic, KnownCauseCritic, ladder_records, ladder_table  # noqa: E402
from ragcritic_lib.agent.dev_runs import dev_ladder, run_dev_methods  # noqa: E402
from ragcritic_lib.data.flashrag import dataset_paths, load_corpus_records  # noqa: E402
from ragcritic_lib.mining.sampling import passage_metadata  # noqa: E402
from ragcritic_lib.pipeline.params import load_params  # noqa: E402
from ragcritic_lib.mining.taxonomy import load_known_causes  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=56, help="dev questions (the split cycles through the types)")
    ap.add_argument("--dataset", default="testbed")
    ap.add_argument("--rows", default="fixed action,oracle critique")
    ap.add_argument("--answer-mode", default="free", help="GenerateAnswer mode: free | spans")
    ap.add_argument("--dump", default="", help="write each row's corrected records to DUMP/<row>.jsonl")
    args = ap.parse_args(argv)

    params = load_params()
    setup = dev_ladder(params, questions=args.n, dataset=args.dataset)
    records, taxonomy, rule_planner = setup.records, setup.taxonomy, setup.rule_planner
    corpus = load_corpus_records(dataset_paths(params["common"]["datasets"], args.dataset)["corpus"])
    methods = {
        "fixed action": {"critic": AlwaysErrorCritic(), "planner": rule_planner},
        "oracle critique": {"critic": KnownCauseCritic(load_known_causes(taxonomy=taxonomy), source_records=records,
                                                       passage_meta=passage_metadata(corpus)),
                            "planner": rule_planner},
        # The oracle reporting every cause, "unsupported" included on answerable questions.
        "oracle critique (all causes)": {
            "critic": KnownCauseCritic(load_known_causes(taxonomy=taxonomy), source_records=records,
                                       passage_meta=passage_metadata(corpus), answerable_aware=False),
            "planner": rule_planner},
    }
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    methods = {k: v for k, v in methods.items() if k in wanted}
    # The correction stage's own actions, with this pilot's answer mode
    runs, _, seconds = run_dev_methods(setup, methods, settings={"answer_mode": args.answer_mode})
    if args.dump:
        from ragcritic_lib.agent.workflow import method_slug
        from ragcritic_lib.io import write_jsonl

        for name, results in runs.items():
            write_jsonl(Path(args.dump) / f"{method_slug(name)}.jsonl", results)
    rows = {"standard RAG": (next(iter(runs)), 0), **{name: (name, 1) for name in runs}}
    ladder = ladder_table(ladder_records(runs, rows), seed=params["common"]["seed"])
    print(f"dev pilot: {args.dataset}, n={len(records)}, {seconds:.0f} s for {len(runs)} rows")
    for row, vals in ladder["all"].items():
        print(f"  {row:18s} " + json.dumps(vals))
    print(f"  mde_f1 {ladder['mde_f1']}")
    for qtype, by_row in ladder["by_type"].items():
        print(f"  {qtype:13s} " + "  ".join(f"{r}: {v['delta_f1']:+.3f}" for r, v in by_row.items() if r != "standard RAG"))
    for name, results in runs.items():
        finals = [r for r in results]
        changed = Counter()
        for r in finals:
            before, after = r.get("prediction", ""), r.get("final_prediction", "")
            if before != after:
                changed["abstained" if "insufficient" in str(after).lower() else "changed"] += 1
        print(f"  {name}: answers changed {dict(changed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
