"""Wall time of a cold and of a no-op `dvc repro`, in a fresh copy of the repository.

    python benchmarks/bench_repro.py                 # the embedded default (params.yaml as is)
    python benchmarks/bench_repro.py --profile smoke # a params profile from configs/profiles/

Cold = empty LLM and index caches (the asset wheels already downloaded are reused). Prints the
total, each stage's wall time (from papermill's record in the executed notebooks) and the no-op
time. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ragcritic_lib.workspace import copy_repository, pipeline_env, run_timed  # noqa: E402


def stage_seconds(root: Path) -> dict[str, float]:
    out = {}
    for nb in sorted((root / "reports" / "notebooks").glob("*.ipynb")):
        meta = json.loads(nb.read_text()).get("metadata", {}).get("papermill", {})
        if meta.get("duration") is not None:
            out[nb.stem] = round(float(meta["duration"]), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=None, help="params profile to apply first")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ragcritic-repro-"))
    root = copy_repository(tmp / "repo")
    env = pipeline_env(root, tmp / "cache")
    try:
        if args.profile:
            run_timed([sys.executable, "-m", "ragcritic_lib.params", "profile", args.profile], root, env)
        cold, _ = run_timed(["dvc", "repro"], root, env, log=tmp / "cold.log")
        noop, _ = run_timed(["dvc", "repro"], root, env, log=tmp / "noop.log")
        print(f"profile: {args.profile or 'default'}")
        print(f"cold dvc repro: {cold:.1f} s")
        for stage, secs in stage_seconds(root).items():
            print(f"  {stage:<24} {secs:8.1f} s")
        print(f"no-op dvc repro: {noop:.2f} s")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
