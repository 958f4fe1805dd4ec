"""Wall time of a cold and of a no-op `dvc repro`, in a fresh copy of the repository.

    python benchmarks/bench_repro.py                 # the embedded default (params.yaml as is)
    python benchmarks/bench_repro.py --profile smoke # a params profile from configs/profiles/
    python benchmarks/bench_repro.py --compare       # ... then compare with this checkout's results
    python benchmarks/bench_repro.py --target retrieval_rag --target taxonomy --keep  # stages 00-04 only
    python benchmarks/bench_repro.py --compare-only /tmp/ragcritic-repro-XXXX/repo  # a kept copy
    python benchmarks/bench_repro.py --target benchmark --out reports/benchmarks/repro_critic_chain.json

Cold = empty LLM and index caches (the asset wheels already downloaded are reused). Prints the
total, each stage's wall time (from papermill's record in the executed notebooks) and the no-op
time. With --compare it then sets the copy's results beside this checkout's (whose outputs must
be checked out: `dvc checkout`): per metrics file, every number that differs, leaving out keys
that name times or cache hits; per output folder under data/, the files whose bytes differ.
Nothing is asserted: a reader decides what a difference means. With --out the run is also written
as JSON (:func:`repro_record`): the CPU class, the cold and no-op times, each stage's own wall time
from its metrics (`environment.wall_seconds`) and their sum, so the time of one `dvc repro` can be
set beside the sum of the stages timed one by one (`reports/benchmarks/stage_copies.json`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragcritic_lib.io import file_sha256  # noqa: E402
from ragcritic_lib.pipeline.workspace import probe_host, run_timed, temporary_copy  # noqa: E402


def stage_seconds(root: Path) -> dict[str, float]:
    out = {}
    for nb in sorted((root / "reports" / "notebooks").glob("*.ipynb")):
        meta = json.loads(nb.read_text()).get("metadata", {}).get("papermill", {})
        if meta.get("duration") is not None:
            out[nb.stem] = round(float(meta["duration"]), 1)
    return out


# Metrics keys whose values differ between any two runs without saying anything about results.
VOLATILE_KEY_WORDS = ("second", "time", "wall", "minute", "date", "cached")


def _volatile(key: str) -> bool:
    return any(word in key.lower() for word in VOLATILE_KEY_WORDS)


def json_diffs(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted path, value in a, value in b) for every leaf of two JSON documents that differs.

    Keys that name times or cache hits (:data:`VOLATILE_KEY_WORDS`) are skipped at any depth; a
    key present on one side only, or lists of different lengths, count as one difference.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if _volatile(str(key)):
                continue
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                yield sub, a.get(key, "<absent>"), b.get(key, "<absent>")
            else:
                yield from json_diffs(a[key], b[key], sub)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from json_diffs(x, y, f"{path}[{i}]")
    elif a != b:
        yield path, a, b


def repro_record(root: Path, ran: list[str], *, targets: list[str] | None, profile: str | None, cold: float,
                 noop: float, cpu_class: str, date: str) -> dict[str, Any]:
    """One timed `dvc repro` of the copy at ``root`` as a JSON-ready record: for each stage that ran
    (``ran``: notebook stems, as :func:`stage_seconds` finds them; the copy's other metrics files are
    the committed ones) the stage runner's ``environment.wall_seconds``, their sum, and the whole
    command's cold and no-op seconds. A stage without a numeric wall time is named in
    ``unreadable``."""
    stages: dict[str, float] = {}
    unreadable: list[str] = []
    for f in [root / "reports" / "metrics" / f"{stem}.json" for stem in sorted(ran)]:
        try:
            wall = json.loads(f.read_text(encoding="utf-8"))["environment"]["wall_seconds"]
        except (OSError, ValueError, KeyError, TypeError):
            wall = None
        if isinstance(wall, (int, float)) and not isinstance(wall, bool):
            stages[f.stem] = round(float(wall), 1)
        else:
            unreadable.append(f.name)
    return {"date": date, "cpu_class": cpu_class, "profile": profile or "default",
            "targets": targets or "all stages", "cold_seconds": round(cold, 1), "noop_seconds": round(noop, 2),
            "stage_wall_seconds": stages, "stages_sum_seconds": round(sum(stages.values()), 1),
            "outside_stages_seconds": round(cold - sum(stages.values()), 1), "unreadable": unreadable}


def compare_results(src: Path, copy: Path) -> dict[str, Any]:
    """Set a copy's results beside the source checkout's.

    Returns ``{"metrics": {file: [(path, src value, copy value), ...] or "missing"},
    "outputs": {folder under data/: {"files", "same", "differ": [...], "missing": [...]}}}``;
    folders are the first level under ``data/`` (``assets`` included).
    """
    report: dict[str, Any] = {"metrics": {}, "outputs": {}}
    for f in sorted((src / "reports" / "metrics").glob("*.json")):
        other = copy / "reports" / "metrics" / f.name
        if not other.is_file():
            report["metrics"][f.name] = "missing"
            continue
        report["metrics"][f.name] = list(json_diffs(json.loads(f.read_text()), json.loads(other.read_text())))
    data = src / "data"
    for folder in sorted(p for p in data.iterdir() if p.is_dir()) if data.is_dir() else []:
        row = {"files": 0, "same": 0, "differ": [], "missing": []}
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = f.relative_to(src)
            row["files"] += 1
            other = copy / rel
            if not other.is_file():
                row["missing"].append(str(rel))
            elif file_sha256(f) == file_sha256(other):
                row["same"] += 1
            else:
                row["differ"].append(str(rel))
        report["outputs"][folder.name] = row
    return report


def print_comparison(report: dict[str, Any], limit: int = 8) -> None:
    print("metrics files (numbers that differ, times and cache hits left out):")
    for name, diffs in report["metrics"].items():
        if diffs == "missing":
            print(f"  {name:<28} missing in the copy")
            continue
        print(f"  {name:<28} {len(diffs)} differ")
        for path, a, b in diffs[:limit]:
            print(f"      {path}: {json.dumps(a)[:80]} -> {json.dumps(b)[:80]}")
    print("outputs under data/ (files whose bytes differ):")
    for folder, row in report["outputs"].items():
        print(f"  {folder:<28} {row['same']} of {row['files']} identical, {len(row['differ'])} differ, "
              f"{len(row['missing'])} missing")
        for rel in row["differ"][:limit]:
            print(f"      {rel}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=None, help="params profile to apply first")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    parser.add_argument("--target", action="append", default=None,
                        help="a dvc.yaml stage: run it and the stages it depends on, not the whole pipeline "
                             "(repeat for several)")
    parser.add_argument("--compare", action="store_true",
                        help="then compare the copy's results with this checkout's")
    parser.add_argument("--compare-only", type=Path, default=None, metavar="COPY",
                        help="only compare an existing copy (a kept run's repo folder) with this checkout")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the run as JSON (the CPU class, cold and no-op times, each stage's wall time)")
    args = parser.parse_args()
    if args.compare_only is not None:
        if not (args.compare_only / "reports" / "metrics").is_dir():
            parser.error(f"--compare-only: {args.compare_only} has no reports/metrics folder")
        print_comparison(compare_results(ROOT, args.compare_only))
        return
    host = probe_host(ROOT) if args.out is not None else None  # the machine's speed, kept with the record
    with temporary_copy("ragcritic-repro-", keep=args.keep) as (tmp, root, env):
        if args.profile:
            run_timed([sys.executable, "-m", "ragcritic_lib.pipeline.profiles", args.profile], root, env)
        repro = ["dvc", "repro", *(args.target or [])]
        cold, _ = run_timed(repro, root, env, log=tmp / "cold.log")
        noop, _ = run_timed(repro, root, env, log=tmp / "noop.log")
        print(f"profile: {args.profile or 'default'}; target: {', '.join(args.target or ['all stages'])}")
        print(f"cold dvc repro: {cold:.1f} s")
        for stage, secs in stage_seconds(root).items():
            print(f"  {stage:<24} {secs:8.1f} s")
        print(f"no-op dvc repro: {noop:.2f} s")
        if args.out is not None:
            import datetime as dt

            from ragcritic_lib.pipeline.stage_metrics import cpu_class

            record = repro_record(root, sorted(stage_seconds(root)), targets=args.target, profile=args.profile,
                                  cold=cold, noop=noop, cpu_class=cpu_class("cpu"), date=dt.date.today().isoformat())
            record["host"] = host
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            print(f"-> {args.out}: the stages' own times sum to {record['stages_sum_seconds']:.1f} s")
        if args.compare:
            print_comparison(compare_results(ROOT, root))


if __name__ == "__main__":
    main()
