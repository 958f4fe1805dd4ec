"""How fast this machine is at the pipeline's own work, in about half a minute.

Hosts of one CPU class run the same stage up to about twice as fast as each other (a `10_crag`
copy took 147 s on one AMD EPYC with AVX512-BF16 and 287 s on another), so a stage time read
alone does not say whether the code or the machine changed. This answers 16 fixed standard RAG
prompts with the generator of params.yaml (its CPU class's dtype, no LLM cache), three times after
a warm-up call, and prints the fastest beside the CPU model and class: lower is faster. The
timing benchmarks keep the same probe with their records (`host` in
`reports/benchmarks/stage_copies.json` and in `bench_repro.py --out`), and docs/reproduce.md's
stage-time table lists the probes behind each class's copies. Numbers only; nothing is asserted.

    .venv/bin/python benchmarks/bench_host_speed.py          # a line for a reader
    .venv/bin/python benchmarks/bench_host_speed.py --json   # the record the benchmarks keep
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragcritic_lib.pipeline.workspace import host_speed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the record as one JSON object")
    args = parser.parse_args()
    probe = host_speed()
    if args.json:
        print(json.dumps(probe))
        return
    if probe["generate_seconds"] is None:
        print(f"{probe['cpu_model']} ({probe['cpu_class']}): the generator did not load ({probe['why']}); "
              "run `make restore` first")
        return
    print(f"{probe['cpu_model']} ({probe['cpu_class']}, {probe['dtype']}): {probe['prompts']} standard RAG prompts "
          f"({probe['prompt_tokens']} prompt tokens, up to {probe['new_tokens']} new each) in "
          f"{probe['generate_seconds']:.2f} s (fastest of {', '.join(f'{r:.2f}' for r in probe['runs'])} s)")


if __name__ == "__main__":
    main()
