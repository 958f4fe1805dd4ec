"""Can a question's wording alone tell the testbed's unanswerable questions apart, and does
``testbed.withheld_focus`` take that away? Builds the testbed in memory (no stage output is read
or written) at each ``--focus``, fine-tunes the embedded sentence encoder on the *train*
questions' wording alone (no passages), and scores the test questions.

The testbed makes a question unanswerable by withholding one attribute of its entity, and only
some attributes of a kind may be withheld. At ``withheld_focus: 0`` (the older sampling, and the
shipped testbed's) an answerable question seldom asks one of those attributes, so "which
attribute is asked" carries the label and a method trained on the train split can learn it
without reading. A positive focus makes factual questions ask the withholdable attributes of
entities that state them, so the same wording appears under both labels.

Per focus this prints, for the train and test splits, the unanswerable questions, the answerable
questions that ask a withholdable attribute (their last fact's), and the question-only encoder's
test AUROC for "unanswerable" with its percentile bootstrap 95% interval over questions (dev
picks the checkpoint): over all test questions, and among the factual and unanswerable ones
alone, which share one form (a single attribute of one entity). Unanswerable questions take only
that form, so over all questions the form alone reaches :func:`form_ceiling` whatever the
attributes; among the one-form questions a wording-free testbed scores near 0.5. With
``--passages`` the same encoder is also trained on each question and its retrieved passages
(``bench_answerability``'s ``passages`` view), which says whether reading adds to the wording once
the attribute no longer tells. Numbers only, no asserts.

    .venv/bin/python benchmarks/bench_testbed_wording.py                 # focus 0, 0.5 and 1
    .venv/bin/python benchmarks/bench_testbed_wording.py --focus 0 1 --passages   # about 25 min
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from typing import Any


def withheld_kinds(questions: Sequence[Mapping[str, Any]]) -> set[str]:
    """The attributes the split's unanswerable questions ask about."""
    return {str(q["metadata"]["withheld_attribute"]) for q in questions
            if not q["metadata"].get("answerable", True) and q["metadata"].get("withheld_attribute")}


def asks_withheld_kind(question: Mapping[str, Any], kinds: set[str]) -> bool:
    """Whether an answerable question's asked fact (its last) is of a kind in ``kinds``."""
    meta = question["metadata"]
    facts = meta.get("facts") or []
    return bool(meta.get("answerable", True) and facts and str(facts[-1].get("attribute")) in kinds)


def wording_rows(questions: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, bool]]:
    """(question, "", unanswerable) per question: the wording alone, labelled from the metadata
    (a training and evaluation label; nothing at test time reads it)."""
    return [(" ".join(str(q["question"]).split()), "", not q["metadata"].get("answerable", True)) for q in questions]


SINGLE_FACT_FORMS = ("factual", "unanswerable")


def form_ceiling(questions: Sequence[Mapping[str, Any]]) -> float:
    """The AUROC for "unanswerable" of a classifier that knows only whether a question has the one
    form unanswerable questions take (a single attribute of one entity, the factual form) and
    ties within it: what no choice of attributes can take away, only unanswerable questions of
    other forms could."""
    pos = [q for q in questions if not q["metadata"].get("answerable", True)]
    neg = [q for q in questions if q["metadata"].get("answerable", True)]
    if not pos or not neg:
        raise ValueError("form_ceiling: needs answerable and unanswerable questions")
    same = sum(1 for q in neg if q["metadata"].get("type") in SINGLE_FACT_FORMS)
    return (len(neg) - same + 0.5 * same) / len(neg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--focus", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--passages", action="store_true",
                    help="also train the encoder on the question and its retrieved passages (stage 01's retriever "
                         "and top_k; bench_answerability's 'passages' view): about 10 min a setting on 2 AVX2 cores")
    args = ap.parse_args()

    from ragcritic_lib import paths
    from ragcritic_lib.critic.verifier import EncoderVerifier, VerifierSettings, train_pairs
    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class
    from ragcritic_lib.testbed import TestbedConfig, generate_testbed

    params = load_params()
    if args.passages:
        import importlib.util
        from pathlib import Path

        from ragcritic_lib import runtime

        spec = importlib.util.spec_from_file_location("bench_answerability", Path(__file__).with_name("bench_answerability.py"))
        answerability = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(answerability)  # type: ignore[union-attr]
        # withheld_focus changes questions only, so the shipped corpus and its retriever serve every setting.
        retriever = runtime.load_retriever(params, "testbed")
        top_k = int(params["retrieval_rag"]["top_k"])
    print(f"cpu {cpu_class()}; shipped testbed.withheld_focus = {params['testbed'].get('withheld_focus', 0.0)}",
          flush=True)
    for focus in args.focus:
        tb = generate_testbed(TestbedConfig(**{**params["testbed"], "withheld_focus": float(focus)}))
        counts = []
        for split in ("train", "test"):
            qs = tb.splits[split]
            kinds = withheld_kinds(qs)
            counts.append(f"{split}: {sum(not q['metadata']['answerable'] for q in qs)} unanswerable, "
                          f"{sum(asks_withheld_kind(q, kinds) for q in qs)} answerable asking a withholdable attribute")
        single = [i for i, q in enumerate(tb.splits["test"]) if q["metadata"]["type"] in SINGLE_FACT_FORMS]

        def fit_and_report(rows, dev, test, max_length: int) -> str:
            """Train on ``rows`` (dev picks the checkpoint), score ``test``: its AUROC over all test
            questions and among the one-form ones, each with its bootstrap interval."""
            model = EncoderVerifier(paths.resolve(params["critic_body"]["verifier_model"]), max_length=max_length,
                                    seed=13)
            t0 = time.time()
            report = train_pairs(model, rows, [(a, b) for a, b, _ in dev], [y for *_, y in dev],
                                 VerifierSettings(epochs=args.epochs, train_layers=6, batch_size=16,
                                                  eval_every=max(200, len(rows) // 4), seed=13))
            scores = model.scores([(a, b) for a, b, _ in test])
            labels = [y for *_, y in test]
            parts = []
            for idx in (range(len(test)), single):
                sc, lab = [scores[i] for i in idx], [labels[i] for i in idx]
                lo, hi = bootstrap_auroc_ci(sc, lab, seed=0, n_boot=args.n_boot)
                parts.append(f"{auroc(sc, lab):.3f} ({lo}, {hi})")
            return (f"fit {time.time() - t0:.0f} s, dev AUROC {report.best_dev_auroc}: test AUROC {parts[0]}; "
                    f"among the {len(single)} factual and unanswerable test questions (one form) {parts[1]}")

        print(f"withheld_focus {focus:g}: {'; '.join(counts)}; a classifier of the form alone reaches "
              f"{form_ceiling(tb.splits['test']):.3f}", flush=True)
        print(f"  question only ({fit_and_report(*(wording_rows(tb.splits[x]) for x in ('train', 'dev', 'test')), 64)})",
              flush=True)
        if args.passages:
            views = [answerability.answerability_rows(answerability.retrieve_records(retriever, tb.splits[x], top_k),
                                                      "passages")[0] for x in ("train", "dev", "test")]
            print(f"  question and passages ({fit_and_report(*views, 256)})", flush=True)

if __name__ == "__main__":
    main()
