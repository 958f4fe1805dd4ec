"""Record a re-run of stage 05 (critic SFT) made on another machine beside the shipped run.

    python scripts/record_critic_rerun.py /path/to/rerun/05_critic_sft.json --machine "one NVIDIA H200"

The re-run's metrics file (from ``scripts/run_stage_cells.py critic_sft`` or a whole ``dvc repro``
on that machine) is compared with the committed ``reports/metrics/05_critic_sft.json``: the dev
verdict AUROC both got on the same dev answers, its difference (the critic issue asks for at most
0.05), the fitted threshold, the critic's own margin AUROC, the dev tag check, and the seconds
each spent. The entry goes to ``reports/benchmarks/critic_reruns.json`` (one per machine and
class; a later re-run on the same replaces it), which README's benchmark block reads.
``--wall-seconds`` gives the stage's time where the metrics file has none.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "reports" / "metrics" / "05_critic_sft.json"
OUT = ROOT / "reports" / "benchmarks" / "critic_reruns.json"
TOLERANCE = 0.05  # the largest dev AUROC difference a re-run may show (the critic issue's target)


def _get(m: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(m, Mapping) or k not in m:
            return None
        m = m[k]
    return m


def summary(metrics: Mapping[str, Any], *, wall_seconds: float | None = None) -> dict[str, Any]:
    """What one run of stage 05 says about its critic and its cost."""
    env = metrics.get("environment") or {}
    return {
        "cpu_class": env.get("cpu_class"), "device": _get(metrics, "train", "device"),
        "dtype": _get(env, "generator", "dtype"), "torch": env.get("torch"), "transformers": env.get("transformers"),
        "dev_n": _get(metrics, "verdict_calibration", "n"),
        "dev_auroc": _get(metrics, "verdict_calibration", "auroc"),
        "threshold": _get(metrics, "verdict_calibration", "threshold"),
        "critic_margin_dev_auroc": _get(metrics, "train", "best_dev_auroc"),
        "dev_tag1_f1": _get(metrics, "dev_tags", "tag1", "f1"), "dev_tag2_f1": _get(metrics, "dev_tags", "tag2", "f1"),
        "cache_seconds": _get(metrics, "train", "cache_seconds"), "train_seconds": _get(metrics, "train", "seconds"),
        "verdict_body_seconds": _get(metrics, "verdict_body", "seconds"),
        "wall_seconds": env.get("wall_seconds") if env.get("wall_seconds") is not None else wall_seconds,
    }


def rerun_entry(rerun: Mapping[str, Any], shipped: Mapping[str, Any], *, machine: str,
                wall_seconds: float | None = None, note: str = "") -> dict[str, Any]:
    """The re-run beside the shipped run, with the dev AUROC difference and whether it is within
    :data:`TOLERANCE`.

    Raises:
        ValueError: either run lacks its dev verdict AUROC, or they were scored on different dev sets.
    """
    new, old = summary(rerun, wall_seconds=wall_seconds), summary(shipped)
    for label, s in (("re-run", new), ("shipped", old)):
        if s["dev_auroc"] is None:
            raise ValueError(f"the {label} metrics have no verdict_calibration.auroc")
    if new["dev_n"] != old["dev_n"]:
        raise ValueError(f"the re-run scored {new['dev_n']} dev answers, the shipped run {old['dev_n']}: not comparable")
    diff = round(new["dev_auroc"] - old["dev_auroc"], 4)
    return {"stage": "critic_sft", "machine": machine, **new, "note": note,
            "shipped": old, "dev_auroc_diff": diff, "within_tolerance": abs(diff) <= TOLERANCE,
            "tolerance": TOLERANCE}


def record(entry: Mapping[str, Any], path: Path = OUT) -> dict[str, Any]:
    """Put ``entry`` into the file, replacing one of the same machine and class."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"reruns": []}
    rows = [r for r in data.get("reruns", [])
            if (r.get("machine"), r.get("cpu_class")) != (entry["machine"], entry["cpu_class"])]
    data = {"reruns": [*rows, dict(entry)]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path, help="the re-run's 05_critic_sft.json")
    parser.add_argument("--machine", required=True, help="the machine in words, e.g. 'one NVIDIA H200'")
    parser.add_argument("--wall-seconds", type=float, default=None, help="the stage's time, where the file has none")
    parser.add_argument("--note", default="", help="how the re-run was made (inputs, what differed)")
    parser.add_argument("--shipped", type=Path, default=SHIPPED)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        rerun = json.loads(args.metrics.read_text(encoding="utf-8"))
        shipped = json.loads(args.shipped.read_text(encoding="utf-8"))
        entry = rerun_entry(rerun, shipped, machine=args.machine, wall_seconds=args.wall_seconds, note=args.note)
    except (OSError, ValueError) as exc:
        print(f"record_critic_rerun: {exc}", file=sys.stderr)
        return 2
    record(entry, args.out)
    print(json.dumps({k: entry[k] for k in ("machine", "cpu_class", "dev_auroc", "dev_auroc_diff",
                                            "within_tolerance", "wall_seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
