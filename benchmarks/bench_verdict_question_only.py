"""How much of a critic's verdict AUROC the question alone gives: two question-only references beside
the shipped critics on stage 07's test benchmark, and each critic's AUROC within a kind of question.

Stage 07 scores a critic's verdict by its AUROC over the balanced benchmark (150 right, 150 wrong
test answers). The kinds of question differ widely in how often they are answered right (on the
probe's training samples from under 1% to about 30% right), so a score that only knows the kind
of question already ranks many wrong answers above right ones without reading the answer. This
benchmark measures that share:

- ``question kind prior``: each answer scored by the error rate of its question's kind (dataset
  and the testbed's question type) among the probe's training samples. It reads question
  metadata, so it is a reference for reading the numbers, never a critic.
- ``question only``: the embedded sentence encoder's embedding of the question text, nothing else
  (no answer, no passages), with the verdict probe's logistic regression
  (:func:`ragcritic_lib.critic.probe.fit_probe`, C by cross-validated AUROC) fitted on the probe's
  training samples (train questions, ``critic_body.verdict_sources``). A method could use it; it
  shows how far the wording of a question carries the label.

For each critic in ``data/benchmark/predictions`` with a verdict score (``margin``), and for both
references: test AUROC with its percentile bootstrap 95% interval (resampling questions), the
paired difference to ``question only`` with its interval, and the AUROC *within* kinds: the
share of (wrong, right) pairs of answers to questions of the same kind that the score orders
right (pairs across kinds are left out, so the kinds' base rates cannot help), with its interval.
The dev answers get the same references beside the shipped verdict probe's scores.

Whether the question-only score adds to the verdict (``fusion``): each score standardized by its
mean and spread on the dev answers (no labels), then mixed as ``(1 - w) * verdict + w * question
only``. Dev gets w = 0.25, 0.5 and 0.75, each with its paired AUROC difference to the verdict alone
(resampling questions); test gets only the equal mix (w = 0.5), fixed before any test number is
read, for each critic with a margin, beside that critic alone. Reads stage outputs only, writes one
JSON; numbers, no asserts, and nothing here is tuned on test.

    .venv/bin/python benchmarks/bench_verdict_question_only.py    # a few minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths


def kind_prior(train: Sequence[Mapping[str, Any]], train_is_error: Sequence[bool],
               samples: Sequence[Mapping[str, Any]]) -> list[float]:
    """Each sample's score: the error rate of its kind among ``train`` (the overall rate for a kind
    ``train`` lacks)."""
    from ragcritic_lib.critic.corpus import question_kind as kind_of

    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s, y in zip(train, train_is_error):
        counts[kind_of(s)][0] += int(y)
        counts[kind_of(s)][1] += 1
    overall = sum(train_is_error) / max(1, len(train_is_error))
    return [counts[k][0] / counts[k][1] if counts[k][1] else overall for k in map(kind_of, samples)]


def interval(stat, n: int, groups: Sequence[Hashable], *, seed: int, n_boot: int) -> tuple[float | None, float | None]:
    """Percentile bootstrap 95% interval of ``stat(indices)`` over resamples of whole groups."""
    from ragcritic_lib.evaluation.stats import cluster_resamples, percentile_interval

    vals = [v for idx in cluster_resamples(groups, n, n_boot, seed) if (v := stat(idx)) is not None]
    lo, hi = percentile_interval(vals, 0.05)
    return (None, None) if lo is None else (round(lo, 4), round(hi, 4))


def paired_diff(a: Sequence[float], b: Sequence[float], is_error: Sequence[bool], groups: Sequence[Hashable],
                *, seed: int, n_boot: int) -> dict[str, Any]:
    """AUROC(a) - AUROC(b) on the same answers, with its interval from resampling ``groups``."""
    from ragcritic_lib.evaluation.stats import auroc

    def diff(idx):
        ys = [is_error[i] for i in idx]
        x, y = auroc([a[i] for i in idx], ys), auroc([b[i] for i in idx], ys)
        return None if x is None or y is None else x - y

    return {"diff": round(diff(range(len(a))), 4), "ci": interval(diff, len(a), groups, seed=seed, n_boot=n_boot)}


def score_row(scores: Sequence[float], is_error: Sequence[bool], kinds: Sequence[Hashable],
              groups: Sequence[Hashable], *, reference: Sequence[float] | None, seed: int, n_boot: int) -> dict:
    """AUROC, within-kind AUROC and (with ``reference``) the paired AUROC difference to it, each with
    its interval from resampling ``groups``."""
    from ragcritic_lib.evaluation.stats import (
        auroc, bootstrap_auroc_ci, bootstrap_within_group_auroc_ci, within_group_auroc,
    )

    row: dict[str, Any] = {"auroc": round(auroc(scores, is_error), 4),
                           "auroc_ci": bootstrap_auroc_ci(scores, is_error, seed=seed, n_boot=n_boot, groups=groups)}
    within = within_group_auroc(scores, is_error, kinds)
    row["within_kind_auroc"] = None if within is None else round(within, 4)
    row["within_kind_ci"] = bootstrap_within_group_auroc_ci(scores, is_error, kinds, seed=seed, n_boot=n_boot,
                                                            groups=groups)
    if reference is not None:
        row["vs_question_only"] = paired_diff(scores, reference, is_error, groups, seed=seed, n_boot=n_boot)
    return row


def standardizer(values: Sequence[float]):
    """z-scores by the mean and spread of ``values`` (a spread of 0 counts as 1)."""
    import statistics

    mu = statistics.fmean(values)
    sd = statistics.pstdev(values) or 1.0
    return lambda xs: [(float(x) - mu) / sd for x in xs]


def fuse(verdict: Sequence[float], question: Sequence[float], w: float) -> list[float]:
    """``(1 - w) * verdict + w * question``, both already on one scale."""
    if len(verdict) != len(question):
        raise ValueError(f"fuse: {len(verdict)} verdict scores for {len(question)} question scores")
    return [(1.0 - w) * v + w * q for v, q in zip(verdict, question)]


DEV_WEIGHTS = (0.25, 0.5, 0.75)
TEST_WEIGHT = 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=paths.ROOT / "reports" / "benchmarks" / "verdict_question_only.json")
    ap.add_argument("--boot", type=int, default=1000)
    args = ap.parse_args()

    import numpy as np

    from ragcritic_lib.critic.corpus import question_kind
    from ragcritic_lib.critic.probe import ProbeScorer, fit_probe, probe_scores
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class
    from ragcritic_lib.retrieval.encoders import SentenceTransformerEncoder

    t0 = time.time()
    params = load_params()
    seed = int(params["common"]["seed"])
    keep = {x.strip() for x in str(params["critic_body"]["verdict_sources"]).split(",") if x.strip()}
    data_dir, bench_dir = paths.stage_dir("critic_data"), paths.stage_dir("benchmark")
    train = [s for s in read_jsonl(data_dir / "train_samples.jsonl") if not keep or s["source"] in keep]
    dev = read_jsonl(data_dir / "dev_samples.jsonl")
    test = read_jsonl(bench_dir / "benchmark.jsonl")
    leak = {s["qkey"] for s in train} & {s["qkey"] for s in test}
    if leak:
        raise SystemExit(f"{len(leak)} benchmark questions are among the probe's training questions, e.g. {min(leak)}")
    wrong = {name: [s["judgement"] == "Error" for s in rows] for name, rows in
             (("train", train), ("dev", dev), ("test", test))}

    encoder = SentenceTransformerEncoder(paths.resolve(params["common"]["retriever"]["encoder"]))
    emb = {name: encoder.encode_queries([" ".join(str(s["question"]).split()) for s in rows])
           for name, rows in (("train", train), ("dev", dev), ("test", test))}
    probe = fit_probe(np.asarray(emb["train"]), wrong["train"], seed=seed)
    references = {"question only": {n: probe_scores(probe, emb[n]) for n in ("dev", "test")},
                  "question kind prior": {n: kind_prior(train, wrong["train"], rows)
                                          for n, rows in (("dev", dev), ("test", test))}}

    out: dict[str, Any] = {"train_samples": len(train), "train_sources": sorted(keep) or "all",
                           "question_only_C": probe["C"], "splits": {}}
    for split, rows in (("dev", dev), ("test", test)):
        kinds, groups, y = [question_kind(s) for s in rows], [s["qkey"] for s in rows], wrong[split]
        per_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for k, v in zip(kinds, y):
            per_kind[k][0] += int(v)
            per_kind[k][1] += 1
        scored = {name: ref[split] for name, ref in references.items()}
        if split == "dev":  # the shipped verdict probe on the dev answers, as stage 05 scored them
            scorer = ProbeScorer(paths.stage_dir("critic_sft") / "probe")
            messages = [e["messages"] for e in read_jsonl(data_dir / "sft_dev.jsonl")]
            if len(messages) != len(rows):
                raise SystemExit(f"sft_dev.jsonl has {len(messages)} rows for {len(rows)} dev samples")
            scored["verdict probe (stage 05)"] = scorer(messages)
            del scorer
        else:
            for path in sorted((bench_dir / "predictions").glob("*.jsonl")):
                preds = read_jsonl(path)
                if [p["id"] for p in preds] != [s["id"] for s in rows]:
                    raise SystemExit(f"{path}: its rows are not the benchmark's, in order")
                if all(isinstance(p.get("margin"), (int, float)) for p in preds):
                    scored[preds[0]["critic"]] = [float(p["margin"]) for p in preds]
        reference = references["question only"][split]
        if split == "dev":
            z_verdict = standardizer(scored["verdict probe (stage 05)"])
            z_question = standardizer(reference)
        fusion: dict[str, Any] = {}
        for name in [n for n in scored if n not in references]:
            for w in (DEV_WEIGHTS if split == "dev" else (TEST_WEIGHT,)):
                mixed = fuse(z_verdict(scored[name]), z_question(reference), w)
                row = score_row(mixed, y, kinds, groups, reference=None, seed=seed, n_boot=args.boot)
                row["vs_verdict_alone"] = paired_diff(mixed, scored[name], y, groups, seed=seed, n_boot=args.boot)
                fusion[f"{name} + question only (w={w})"] = row
                print(f"{split:4s} {name} + question only w={w}: AUROC {row['auroc']:.3f} {row['auroc_ci']}  "
                      f"vs alone {row['vs_verdict_alone']['diff']:+.3f} {row['vs_verdict_alone']['ci']}", flush=True)
        out["splits"][split] = {"fusion": fusion,
            "samples": len(rows), "errors": int(sum(y)),
            "kinds": {k: {"errors": e, "samples": n} for k, (e, n) in sorted(per_kind.items())},
            "scores": {name: score_row(sc, y, kinds, groups, reference=None if name == "question only" else reference,
                                       seed=seed, n_boot=args.boot) for name, sc in scored.items()}}
        for name, row in out["splits"][split]["scores"].items():
            vs = row.get("vs_question_only")
            print(f"{split:4s} {name:22s} AUROC {row['auroc']:.3f} {row['auroc_ci']}  within kinds "
                  f"{row['within_kind_auroc']} {row['within_kind_ci']}"
                  + (f"  vs question only {vs['diff']:+.3f} {vs['ci']}" if vs else ""), flush=True)
    out.update(seconds=round(time.time() - t0, 1), cpu_class=cpu_class("cpu"), boot=args.boot)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
