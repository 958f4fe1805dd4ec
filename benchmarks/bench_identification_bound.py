"""How far a critic's identification can go with its verdict scores as they are: the best any
threshold reaches on stage 07's test benchmark, beside the identification at the threshold the
stage fitted on dev.

Identification (RAG-Critic §3.4) is the mean of the accuracies on right and on wrong answers, so on
a balanced benchmark it is the balanced accuracy of the critic's verdict at one threshold. A
threshold moves answers between the two accuracies; it cannot reorder them. Given the verdict
scores (``margin`` in ``data/benchmark/predictions/<critic>.jsonl``), the best identification over
every threshold is therefore a ceiling that no choice of threshold passes: a critic whose ceiling
lies below a target needs a better ranking (a higher AUROC), not another threshold. The ceiling is
found by reading the test labels, so it is an oracle, a bound for reading the numbers and never a
setting: stage 07 keeps the threshold fitted on dev.

For each critic with verdict scores this prints and writes:

- ``auroc``: its verdict AUROC on the benchmark;
- ``identification``: at its shipped verdicts (the dev threshold), as stage 07 reports it;
- ``oracle_identification``: the best over all thresholds on test, with the percentile bootstrap
  95% interval of that best (questions resampled; each resample takes its own best threshold);
- ``binormal_identification``: what an AUROC of that size gives at best when the two classes'
  scores are normal with equal variance (``Phi(d'/2)`` with ``AUROC = Phi(d'/sqrt 2)``), a
  reference for reading, and ``auroc_for_target``: the AUROC that model needs for the
  identification target (75% by default).

Reads stage outputs only, writes one JSON; numbers, no asserts.

    .venv/bin/python benchmarks/bench_identification_bound.py    # seconds on 2 CPU cores
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths


def balanced_accuracy(flagged: Sequence[bool], is_error: Sequence[bool]) -> float | None:
    """Mean of the share of wrong answers flagged and the share of right answers not flagged
    (None when either class is absent)."""
    wrong = [f for f, y in zip(flagged, is_error) if y]
    right = [f for f, y in zip(flagged, is_error) if not y]
    if not wrong or not right:
        return None
    return (sum(wrong) / len(wrong) + sum(not f for f in right) / len(right)) / 2


def best_threshold(scores: Sequence[float], is_error: Sequence[bool]) -> tuple[float | None, float | None]:
    """The highest balanced accuracy of "wrong when score >= t" over every threshold t (each
    distinct score, and one above them all), and the lowest t that reaches it; (None, None) when
    either class is absent."""
    if len(scores) != len(is_error):
        raise ValueError(f"{len(scores)} scores but {len(is_error)} labels")
    best: tuple[float | None, float | None] = (None, None)
    for t in sorted(set(scores)) + [math.inf]:
        ba = balanced_accuracy([s >= t for s in scores], is_error)
        if ba is not None and (best[0] is None or ba > best[0]):
            best = (ba, t)
    return best


def binormal_identification(auroc: float) -> float:
    """The best balanced accuracy of two equal-variance normal classes whose AUROC is ``auroc``."""
    from scipy.stats import norm

    return float(norm.cdf(math.sqrt(2) * norm.ppf(auroc) / 2))


def binormal_auroc(identification: float) -> float:
    """The AUROC two equal-variance normal classes need for a best balanced accuracy of
    ``identification`` (the inverse of :func:`binormal_identification`)."""
    from scipy.stats import norm

    return float(norm.cdf(math.sqrt(2) * norm.ppf(identification)))


def oracle_interval(scores: Sequence[float], is_error: Sequence[bool], groups: Sequence[Hashable], *,
                    seed: int, n_boot: int) -> tuple[float | None, float | None]:
    """Percentile bootstrap 95% interval of :func:`best_threshold`'s balanced accuracy over
    resamples of whole groups (a question's answers together)."""
    from ragcritic_lib.evaluation.stats import cluster_resamples, percentile_interval

    vals = []
    for idx in cluster_resamples(groups, len(scores), n_boot, seed):
        ba, _ = best_threshold([scores[i] for i in idx], [is_error[i] for i in idx])
        if ba is not None:
            vals.append(ba)
    lo, hi = percentile_interval(vals, 0.05)
    return (None, None) if lo is None else (round(lo, 4), round(hi, 4))


def critic_row(scores: Sequence[float], is_error: Sequence[bool], verdicts: Sequence[bool],
               groups: Sequence[Hashable], *, target: float, seed: int, n_boot: int) -> dict[str, Any]:
    """One critic's row: AUROC, identification at its verdicts, the oracle ceiling with its interval,
    and the equal-variance binormal references."""
    from ragcritic_lib.evaluation.stats import auroc

    area = auroc(scores, is_error)
    ba, threshold = best_threshold(scores, is_error)
    shipped = balanced_accuracy(verdicts, is_error)
    return {"n": len(scores), "n_error": int(sum(is_error)), "auroc": round(area, 4),
            "identification": None if shipped is None else round(shipped, 4),
            "oracle_identification": None if ba is None else round(ba, 4),
            "oracle_identification_ci": oracle_interval(scores, is_error, groups, seed=seed, n_boot=n_boot),
            "oracle_threshold": None if threshold is None or math.isinf(threshold) else round(threshold, 4),
            "binormal_identification": round(binormal_identification(area), 4),
            "auroc_for_target": round(binormal_auroc(target), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=paths.ROOT / "reports" / "benchmarks" / "identification_bound.json")
    ap.add_argument("--target", type=float, default=0.75, help="the identification target to translate into AUROC")
    ap.add_argument("--boot", type=int, default=1000)
    args = ap.parse_args()

    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    t0 = time.time()
    seed = int(load_params()["common"]["seed"])
    bench_dir = paths.stage_dir("benchmark")
    bench = read_jsonl(bench_dir / "benchmark.jsonl")
    is_error = [s["judgement"] == "Error" for s in bench]
    groups = [s["qkey"] for s in bench]
    critics: dict[str, Any] = {}
    for path in sorted((bench_dir / "predictions").glob("*.jsonl")):
        preds = read_jsonl(path)
        if len(preds) != len(bench) or any(p["id"] != s["id"] for p, s in zip(preds, bench)):
            raise SystemExit(f"{path}: its rows are not the benchmark's, in its order")
        if any(not isinstance(p.get("margin"), (int, float)) for p in preds):
            print(f"{path.name}: its predictions carry no verdict score (margin) on every row; left out")
            continue
        critics[preds[0]["critic"]] = critic_row([float(p["margin"]) for p in preds], is_error,
                                                 [p.get("judgement") == "Error" for p in preds], groups,
                                                 target=args.target, seed=seed, n_boot=args.boot)
    out = {"benchmark": str(bench_dir.relative_to(paths.ROOT) / "benchmark.jsonl"), "n": len(bench),
           "n_error": int(sum(is_error)), "target": args.target, "n_boot": args.boot, "seed": seed,
           "note": "oracle_identification reads the test labels to pick its threshold: a ceiling, never a setting",
           "critics": critics, "cpu_class": cpu_class(), "seconds": round(time.time() - t0, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for name, row in critics.items():
        lo, hi = row["oracle_identification_ci"]
        print(f"{name}: AUROC {row['auroc']:.3f}; identification {row['identification']} at its verdicts, "
              f"at best {row['oracle_identification']} on test ({lo}..{hi}; oracle threshold); equal-variance "
              f"binormal {row['binormal_identification']}; {args.target:.0%} needs AUROC {row['auroc_for_target']}")
    print(f"wrote {args.out.relative_to(paths.ROOT)} in {out['seconds']} s")


if __name__ == "__main__":
    main()
