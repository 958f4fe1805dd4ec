"""One stage's cold wall time on this CPU, in a restored copy of the repository, the committed
outputs left as they are.

The committed run of each stage was made on one CPU class (its metrics' `environment.cpu_class`),
and the budget speaks of every class: this times a stage on the class of the machine at hand
without shipping anything. It copies the files git sees into a temporary folder, restores every
shipped output there (`python -m ragcritic_lib.pipeline.shipping restore`, as `make restore`),
deletes the stage's own `persist: true` outputs (the logs it appends to and would resume from,
restored with the rest; `clear-persisted --stage`), then runs `dvc repro -s -f STAGE` with empty
LLM and index caches and reads the stage runner's
`environment.wall_seconds` from the copy's metrics file. The stage's inputs are the committed
outputs of its upstream stages, whatever class made them. The copy's metrics are set beside the
committed file's (`vs_committed`: how many numbers are equal or within 0.01, the largest
differences, the texts that changed), so a record says whether the class reproduces the results
as well as how long it took.

With `--record` the time goes to `reports/benchmarks/stage_copies.json` with the stage's
fingerprint (its command, dependencies and params in the copy's `dvc.lock`):
docs/reproduce.md's stage-time table shows it beside the committed times, marked as a copy, for
as long as the committed `dvc.lock` gives the stage the same fingerprint (a change to its code,
inputs or params retires it). Numbers only; nothing is asserted.

    .venv/bin/python benchmarks/bench_stage_copy.py critic_sft --record
    .venv/bin/python benchmarks/bench_stage_copy.py comparison --keep   # keep the copy to read it
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragcritic_lib.pipeline.workspace import (  # noqa: E402
    STAGE_COPIES_FILE,
    compare_metrics,
    lock_fingerprints,
    persisted_outputs,
    probe_host,
    record_copy,
    run_timed,
    temporary_copy,
)


# The main results of a stage's metrics file, set first in the comparison with the committed run.
HEADLINES: dict[str, tuple[str, ...]] = {
    "01_retrieval_rag": ("rag.testbed.test.f1", "closed_book.testbed.test.f1"),
    "02_error_sampling": ("error_rate", "llm_teacher_agreement.judgement_agreement"),
    "05_critic_body": ("verdict_body.best_dev_auroc",),
    "05_critic_sft": ("verdict_calibration.threshold", "dev_tags.tag1.f1"),
    "06_critic_dpo": ("dev_auroc.after", "pairs.total"),
    "07_benchmark": ("critics.SFT critic.verdict_auroc", "critics.SFT critic.identification.acc_avg",
                     "critics.SFT critic.classification.tag1_f1"),
    "08_correction": ("ladder.testbed.RAG-Critic (1 iter).delta_f1", "ladder.testbed.oracle verdict.delta_f1"),
    "08_planner_data": ("outcomes.helped", "outcomes.made_right", "outcomes.mean_delta_f1"),
    "09_self_refine": ("scores.testbed.f1",),
    "10_crag": ("scores.testbed.f1",),
    "11_simrag": ("scores.testbed.f1",),
    "12_repair": ("scores.testbed.f1", "test.top_share"),
    "13_ragec": ("answers.testbed.diagnosed",),
}


def stage_stem(root: Path, stage: str) -> str:
    """The notebook stem a dvc.yaml stage runs (its metrics file's name); one clear error otherwise."""
    import yaml

    stages = (yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8")) or {}).get("stages") or {}
    if stage not in stages:
        raise SystemExit(f"stage {stage!r} is not in dvc.yaml; stages: {', '.join(stages)}")
    cmd = str(stages[stage].get("cmd", ""))
    notebook = next((w for w in cmd.split() if w.startswith("notebooks/") and w.endswith(".py")), None)
    if notebook is None:
        raise SystemExit(f"dvc.yaml: stage {stage!r} runs no notebook ({cmd!r}), so it writes no stage metrics")
    return Path(notebook).stem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("stage", help="a dvc.yaml stage name, e.g. critic_sft")
    parser.add_argument("--record", action="store_true", help=f"append the time to {STAGE_COPIES_FILE}")
    parser.add_argument("--note", default="", help="a line kept with the record (the machine, what else ran)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    args = parser.parse_args()
    stem = stage_stem(ROOT, args.stage)
    host = probe_host(ROOT)  # before the copy: nothing else of this benchmark runs beside it
    print(f"host probe: {host.get('generate_seconds')} s ({host.get('cpu_model')})", flush=True)
    with temporary_copy("ragcritic-copy-", keep=args.keep) as (tmp, root, env):
        restore_s, _ = run_timed([sys.executable, "-m", "ragcritic_lib.pipeline.shipping", "restore"], root, env,
                                 log=tmp / "restore.log")
        _, cleared = run_timed([sys.executable, "-m", "ragcritic_lib.pipeline.shipping", "clear-persisted",
                                "--stage", args.stage], root, env)
        print(f"restored the shipped outputs in {restore_s:.0f} s; {cleared.strip()}; the stage's output goes to "
              f"{tmp / 'repro.log'} as it runs", flush=True)
        repro_s, _ = run_timed(["dvc", "repro", "-s", "-f", args.stage], root, env, log=tmp / "repro.log")
        metrics = json.loads((root / "reports" / "metrics" / f"{stem}.json").read_text(encoding="utf-8"))
        envm = metrics.get("environment") or {}
        committed_file = ROOT / "reports" / "metrics" / f"{stem}.json"
        committed = json.loads(committed_file.read_text(encoding="utf-8")) if committed_file.is_file() else {}
        entry = {
            "stage": args.stage, "stem": stem, "date": dt.date.today().isoformat(),
            "cpu_class": envm.get("cpu_class"), "dtype": (envm.get("generator") or {}).get("dtype"),
            "wall_seconds": envm.get("wall_seconds"), "repro_seconds": round(repro_s, 1),
            "fingerprint": lock_fingerprints(root).get(args.stage),
            "cleared": persisted_outputs(root).get(args.stage, []),
            "committed_fingerprint": lock_fingerprints(ROOT).get(args.stage),
            "note": args.note, "host": host,
            "vs_committed": compare_metrics(committed, metrics, headline=HEADLINES.get(stem, ())),
        }
        print(json.dumps(entry, indent=1))
        if entry["fingerprint"] != entry["committed_fingerprint"]:
            print("the copy's run read other code, inputs or params than the committed run "
                  "(uncommitted changes?): its time will not be shown beside the committed ones")
        if args.record:
            record_copy(ROOT / STAGE_COPIES_FILE, entry)
            print(f"recorded in {STAGE_COPIES_FILE}")


if __name__ == "__main__":
    main()
