"""Does the reader's own confidence in an answer add to the critic's verdict? Dev-fitted, scored on
the RAG-Error benchmark's test answers, from shipped stages 05 and 07.

The critic's verdict is the margin of a probe on the critic's hidden states (stage 05). A
second, general signal of a wrong answer is how unlikely the reader finds it: the generator's
log-probability of the answer, per token, in standard RAG's own prompt over the answer's
passages (the first ``retrieval_rag.top_k``, ``prompt_variant``, ``max_passage_words``), with the
answer prefix prefilled; beside it the log-probability of "insufficient information" in the same
slot. Every answer is scored that way whatever produced it (the pool's closed-book and other
configurations too): the question is how plausible the answer is given the passages.

This prints, for the benchmark's test answers (``data/benchmark/benchmark.jsonl``, the
margins of ``data/benchmark/predictions/<critic>.jsonl``), the verdict AUROC (wrong answers score
higher) with its bootstrap 95% CI resampling questions, of

- ``margin``: the critic's margin alone (stage 07's number);
- ``reader``: minus the answer's mean log-probability per token alone;
- ``margin + reader`` and ``margin + reader + abstention``: a logistic regression on those
  features fitted on the critic's dev answers (``data/critic_data/dev_samples.jsonl``, their
  margins scored again by the shipped critic), never on test;

and the paired bootstrap CI of each combination's AUROC difference to ``margin`` alone. Numbers
only, no asserts. A combination earns a place in stage 05 only when that difference lies above 0.

    .venv/bin/python benchmarks/bench_verdict_confidence.py   # about 17 min on 2 AVX2 cores, cold
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import read_jsonl


def answer_prompts(records: Sequence[Mapping[str, Any]], *, top_k: int, variant: str,
                   max_passage_words: int) -> tuple[list[list[dict[str, str]]], list[list[str]]]:
    """Per record: standard RAG's prompt over its first ``top_k`` passages with the answer slot open
    (the prefilled answer prefix; added as the assistant turn where the variant does not prefill),
    and the two continuations to score there: the record's answer (whitespace normalized) and the
    abstention.

    Raises:
        ValueError: a record without a question.
    """
    from ragcritic_lib.retrieval.rag import ABSTAIN_ANSWER, ANSWER_PREFIX, build_rag_messages

    prompts, options = [], []
    for i, r in enumerate(records):
        question = str(r.get("question") or "").strip()
        if not question:
            raise ValueError(f"record {r.get('id', i)}: no 'question'")
        passages = [str(p.get("contents", "")) if isinstance(p, Mapping) else str(p) for p in r.get("passages") or []]
        messages = build_rag_messages(question, passages[:top_k], variant=variant, max_passage_words=max_passage_words)
        if messages[-1]["role"] != "assistant":
            messages.append({"role": "assistant", "content": ANSWER_PREFIX})
        prompts.append(messages)
        options.append([" " + " ".join(str(r.get("prediction") or "").split()), f" {ABSTAIN_ANSWER}"])
    return prompts, options


def confidence_features(scores: Sequence[Sequence[float]], answer_tokens: Sequence[int]) -> list[dict[str, float]]:
    """Per answer: ``reader`` (minus its mean log-probability per token: higher is less likely)
    and ``abstention`` (the abstention's total log-probability in the same slot)."""
    return [{"reader": -float(s[0]) / max(1, int(n)), "abstention": float(s[1])} for s, n in zip(scores, answer_tokens)]


def fit_combination(train_x: Sequence[Sequence[float]], train_y: Sequence[bool]):
    """A standardized logistic regression (``y``: the answer is wrong); returns a scorer of rows.

    Raises:
        ValueError: fewer than two classes in ``train_y``.
    """
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if len(set(bool(v) for v in train_y)) < 2:
        raise ValueError("fit_combination: the dev answers need both right and wrong ones")
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000))
    model.fit(np.asarray(train_x, dtype=float), np.asarray(train_y, dtype=bool))
    return lambda xs: [float(v) for v in model.decision_function(np.asarray(xs, dtype=float))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--critic", default="SFT critic", help="a critic of data/benchmark/predictions (its file name, spaces as _)")
    ap.add_argument("--critic-dir", default="data/critic_sft", help="that critic's checkpoint, to score the dev margins")
    ap.add_argument("--n-boot", type=int, default=2000)
    args = ap.parse_args()

    from ragcritic_lib import runtime
    from ragcritic_lib.critic.critics import load_trained_critic
    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci, cluster_resamples
    from ragcritic_lib.mining.taxonomy import load_taxonomy
    from ragcritic_lib.pipeline.params import load_params

    params = load_params()
    rag = params["retrieval_rag"]
    bench_file = paths.resolve("data/benchmark/benchmark.jsonl")
    pred_file = paths.resolve(f"data/benchmark/predictions/{args.critic.replace(' ', '_')}.jsonl")
    dev_file = paths.resolve("data/critic_data/dev_samples.jsonl")
    missing = [str(p) for p in (bench_file, pred_file, dev_file) if not p.exists()]
    if missing:
        raise SystemExit(f"no {', '.join(missing)} (run or restore stages 05 and 07 first)")
    test, preds, dev = read_jsonl(bench_file), read_jsonl(pred_file), read_jsonl(dev_file)
    if [str(r.get("id")) for r in test] != [str(p.get("id")) for p in preds]:
        raise SystemExit(f"{pred_file}: its records do not follow {bench_file} one for one")

    critic = load_trained_critic(params, paths.resolve(args.critic_dir), load_taxonomy(), verdict="calibrated")
    dev_margins = critic.verdict_margins(dev, desc="dev margins")
    del critic
    llm = runtime.load_generator(params)
    feats = {}
    for split, recs in (("dev", dev), ("test", test)):
        prompts, options = answer_prompts(recs, top_k=rag["top_k"], variant=rag["prompt_variant"],
                                          max_passage_words=rag["max_passage_words"])
        scores = llm.score(prompts, options, desc=f"reader {split}")
        feats[split] = confidence_features(scores, [llm.count_tokens(o[0]) for o in options])

    def wrong(r: Mapping[str, Any]) -> bool:
        return str(r.get("judgement")) != "Correct"

    y_dev, y_test = [wrong(r) for r in dev], [wrong(r) for r in test]
    groups = [str(r.get("qkey") or r.get("id")) for r in test]
    columns = {"margin + reader": ("reader",), "margin + reader + abstention": ("reader", "abstention")}
    test_scores = {"margin": [float(p["margin"]) for p in preds], "reader": [f["reader"] for f in feats["test"]]}
    for name, cols in columns.items():
        dev_x = [[m, *(f[c] for c in cols)] for m, f in zip(dev_margins, feats["dev"])]
        test_x = [[float(p["margin"]), *(f[c] for c in cols)] for p, f in zip(preds, feats["test"])]
        test_scores[name] = fit_combination(dev_x, y_dev)(test_x)
    print(f"dev: {len(dev)} answers ({sum(y_dev)} wrong), margin AUROC {auroc(dev_margins, y_dev):.3f}, "
          f"reader AUROC {auroc([f['reader'] for f in feats['dev']], y_dev):.3f}")
    print(f"test: {len(test)} benchmark answers ({sum(y_test)} wrong), {len(set(groups))} questions")
    base = test_scores["margin"]
    draws = list(cluster_resamples(groups, len(test), args.n_boot, 0))
    for name, s in test_scores.items():
        lo, hi = bootstrap_auroc_ci(s, y_test, seed=0, n_boot=args.n_boot, groups=groups)
        line = f"  {name:30s} AUROC {auroc(s, y_test):.3f} ({lo:.3f}, {hi:.3f})"
        if name != "margin":
            diffs = sorted(auroc([s[i] for i in d], [y_test[i] for i in d]) - auroc([base[i] for i in d], [y_test[i] for i in d])
                           for d in draws if len({y_test[i] for i in d}) == 2)
            line += (f"; minus margin {auroc(s, y_test) - auroc(base, y_test):+.3f} "
                     f"({diffs[int(0.025 * len(diffs))]:+.3f}, {diffs[int(0.975 * len(diffs)) - 1]:+.3f})")
        print(line, flush=True)


if __name__ == "__main__":
    main()
