"""Where the time of one `.ci/run` went: its parts' seconds and the CPU class, printed as one line.

``.ci/run`` appends one line per part to a parts file as it goes (``NAME SECONDS`` for a part on
the critical path, ``NAME SECONDS beside`` for one that ran beside the others, such as the
requirement sets that pip resolves while the tests run), then calls::

    python3 -m ragcritic_lib.pipeline.ci_budget line PARTS_FILE --total SECONDS [--json OUT] [--failed]

which prints the budget line (every part, the total, CI's 90-minute limit and the 60-minute budget
on the slowest CPU class) and writes the same record as JSON. With ``--log`` (the run's whole
output) it then closes with one line that adds up every pytest summary in it, ``ci: N passed, N
failed, N skipped``, so that the last line of a CI log still says how many tests ran. A run measured on a fresh clone is
kept for the docs with ``record``, which adds it to ``reports/benchmarks/ci_runs.json`` (one run
per CPU class, the latest replacing the earlier); docs/reproduce.md's ``ci_times`` block is
written from that file (``make readme``). Standard library only: it runs before the virtual
environment exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.pipeline.stage_metrics import CPU_CLASSES, cpu_class

__all__ = ["stage_seconds", "pytest_totals", "closing_line", "CI_LIMIT_S", "BUDGET_S", "BudgetError", "read_parts", "make_record", "budget_line", "add_run",
           "load_runs", "RUNS_FILE", "main"]

CI_LIMIT_S = 5400          # CI's hard limit for one `.ci/run`
BUDGET_S = {"avx2": 3600, "avx512_bf16": 1500, "amx": 1500}   # the project's budget per CPU class
RUNS_FILE = paths.ROOT / "reports" / "benchmarks" / "ci_runs.json"


class BudgetError(ValueError):
    """A parts file or runs file that cannot be read as this module writes it."""


def read_parts(path: str | Path) -> list[dict[str, Any]]:
    """The parts of a parts file, in order: ``[{"name", "seconds", "beside"}]``.

    Raises:
        BudgetError: naming the file and line of a line that is not ``NAME SECONDS [beside]``.
    """
    parts = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            if len(fields) not in (2, 3) or (len(fields) == 3 and fields[2] != "beside"):
                raise ValueError
            seconds = float(fields[1])
            if seconds < 0:
                raise ValueError
        except ValueError:
            raise BudgetError(f"{path}, line {number}: expected 'NAME SECONDS' or 'NAME SECONDS beside', "
                              f"got {line!r}") from None
        parts.append({"name": fields[0], "seconds": seconds, "beside": len(fields) == 3})
    return parts


def make_record(parts: Sequence[Mapping[str, Any]], total_s: float, *, cls: str | None = None,
                cores: int | None = None, failed: bool = False, day: str | None = None) -> dict[str, Any]:
    """One run's record: its parts, total, CPU class, cores, date and whether it failed."""
    cls = cls or cpu_class()
    return {
        "date": day or date.today().isoformat(),
        "cpu_class": cls,
        "cores": cores if cores is not None else os.cpu_count(),
        "total_s": round(float(total_s), 1),
        "failed": bool(failed),
        "parts": [{"name": p["name"], "seconds": round(float(p["seconds"]), 1), "beside": bool(p.get("beside"))}
                  for p in parts],
    }


def budget_line(record: Mapping[str, Any]) -> str:
    """The record as one line: each part's seconds, the total against CI's limit and the class's budget."""
    cls = record["cpu_class"]
    shown = " | ".join(f"{p['name']} {p['seconds']:.0f} s" + (" (beside the rest)" if p["beside"] else "")
                       for p in record["parts"])
    total = record["total_s"]
    budget = BUDGET_S.get(cls)
    against = f"budget {budget // 60} min on {cls}" if budget else f"no budget set for {cls}"
    state = "FAILED, " if record.get("failed") else ""
    return (f"CI budget [{state}cpu_class {cls}, {record['cores']} cores]: {shown} | total {total:.0f} s "
            f"({total / 60:.1f} min; {against}, CI's limit {CI_LIMIT_S // 60} min)")


# pytest's closing line, with -q or without: "1808 passed, 3 skipped, 589 warnings in 461.67s (0:07:41)",
# "==== 2 failed, 6 passed in 12.0s ====", "==== no tests ran in 0.01s ====".
_SUMMARY = re.compile(r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)"
                      r"(?:, )?)+|no tests ran) in [\d.]+s(?: \([\d:]+\))?\s*=*\s*$")
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


def pytest_totals(log: str) -> dict[str, int]:
    """passed, failed (errors included), skipped (xfailed included) and xpassed, added up over
    every pytest closing line of ``log``, and ``runs``: how many closing lines there were."""
    totals = {"passed": 0, "failed": 0, "skipped": 0, "runs": 0}
    for line in log.splitlines():
        m = _SUMMARY.match(line.strip())
        if not m:
            continue
        totals["runs"] += 1
        for n, kind in _COUNT.findall(m.group(1)):
            key = {"error": "failed", "errors": "failed", "xfailed": "skipped", "xpassed": "passed"}.get(kind, kind)
            totals[key] += int(n)
    return totals


def closing_line(totals: Mapping[str, int]) -> str:
    """The plain closing line: ``ci: N passed, N failed, N skipped``."""
    return f"ci: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped"


def stage_seconds(root: str | Path) -> dict[str, float]:
    """Each executed notebook's seconds under ``root``/reports/notebooks, as papermill recorded them
    (a notebook without the record is left out)."""
    found = {}
    for nb in sorted(Path(root, "reports", "notebooks").glob("*.ipynb")):
        try:
            duration = json.loads(nb.read_text(encoding="utf-8"))["metadata"]["papermill"]["duration"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(duration, (int, float)) and not isinstance(duration, bool):
            found[nb.stem] = round(float(duration), 1)
    return found


def load_runs(path: str | Path = RUNS_FILE) -> list[dict[str, Any]]:
    """The recorded runs of ``path`` (none when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise BudgetError(f"{path}: not JSON ({exc})") from None
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise BudgetError(f"{path}: key 'runs' missing or not a list")
    for i, run in enumerate(runs):
        missing = [k for k in ("date", "cpu_class", "cores", "total_s", "parts") if k not in run]
        if missing:
            raise BudgetError(f"{path}: runs[{i}] lacks {', '.join(missing)}")
        if run["cpu_class"] not in CPU_CLASSES:
            raise BudgetError(f"{path}: runs[{i}].cpu_class {run['cpu_class']!r} is not one of {', '.join(CPU_CLASSES)}")
    return runs


def add_run(record: Mapping[str, Any], path: str | Path = RUNS_FILE, note: str = "") -> list[dict[str, Any]]:
    """Keep ``record`` in ``path``: one run per CPU class, this one replacing its class's earlier run.

    A failed run is refused: the docs quote runs that passed.
    """
    if record.get("failed"):
        raise BudgetError("a failed run is not recorded: the docs quote runs that passed")
    runs = [r for r in load_runs(path) if r["cpu_class"] != record["cpu_class"]]
    runs.append({**record, "note": note})
    runs.sort(key=lambda r: CPU_CLASSES.index(r["cpu_class"]))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"runs": runs}, indent=1) + "\n", encoding="utf-8")
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.ci_budget",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    line = sub.add_parser("line", help="print the budget line of a parts file (and write its record)")
    line.add_argument("parts", type=Path)
    line.add_argument("--total", type=float, required=True, help="the whole run's seconds")
    line.add_argument("--json", type=Path, help="write the record here")
    line.add_argument("--failed", action="store_true", help="the run stopped on a failure")
    line.add_argument("--log", type=Path, help="the run's output: close with the sum of its pytest summaries")
    line.add_argument("--smoke", type=Path, help="the smoke run's copy: print (and record) its stages' seconds")
    rec = sub.add_parser("record", help=f"keep a record written by `line --json` in {RUNS_FILE.relative_to(paths.ROOT)}")
    rec.add_argument("record", type=Path)
    rec.add_argument("--note", default="", help="what the run was, e.g. 'fresh clone, nothing else running'")
    rec.add_argument("--runs", type=Path, default=RUNS_FILE)
    args = parser.parse_args(argv)
    try:
        if args.command == "line":
            record = make_record(read_parts(args.parts), args.total, failed=args.failed)
            if args.smoke and (stages := stage_seconds(args.smoke)):
                record["smoke_stages"] = stages
                print(f"smoke run's stages, papermill s [cpu_class {record['cpu_class']}]: "
                      + ", ".join(f"{k} {v:.0f}" for k, v in stages.items()) + f" (sum {sum(stages.values()):.0f})")
            print(budget_line(record))
            if args.log:
                try:
                    totals = pytest_totals(args.log.read_text(encoding="utf-8", errors="replace"))
                except OSError as exc:
                    raise BudgetError(f"{args.log}: {exc}") from None
                record["tests"] = totals
            if args.json:
                args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            if args.log:
                print(closing_line(record["tests"]))
        else:
            try:
                record = json.loads(args.record.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise BudgetError(f"{args.record}: {exc}") from None
            add_run(record, args.runs, args.note)
            print(f"{args.runs}: {record['cpu_class']} run of {record['total_s']:.0f} s kept")
    except BudgetError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
