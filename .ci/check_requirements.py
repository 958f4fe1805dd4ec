#!/usr/bin/env python3
"""Check that each pinned requirement set resolves: pip's resolver in dry-run mode, no install.

    python .ci/check_requirements.py            # both sets
    python .ci/check_requirements.py gpu        # one set: cpu | gpu

Needs only pip and the package index (no GPU; nothing is installed, though pip may build the
metadata of source-only packages). Both environments target CPython 3.11 on Linux x86_64.
Neither set is wheels only: deepspeed (GPU set) is published as a source archive only, and dvc
(both sets) needs antlr4-python3-runtime 4.9.x through hydra-core/omegaconf, also source only.
pip refuses ``--python-version/--platform`` unless every package is a wheel, so each set is
resolved for this interpreter, and the script refuses to run on any other than the target.

* cpu (requirements-cpu.txt) resolves with the machine's pip configuration, so local wheel
  folders (such as a CPU-only torch build) count, as they do for ``make install``.
* gpu (requirements-gpu.txt) resolves with ``--isolated`` (the default index alone), so no local
  CPU-only torch wheel can stand in for the CUDA build a GPU machine installs.

A conflict is one message naming the file, followed by pip's own explanation; exit status 1.
A summary of what was resolved (package count, key versions, seconds) goes to stdout.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETS: dict[str, tuple[str, list[str]]] = {
    "cpu": ("requirements-cpu.txt", []),
    "gpu": ("requirements-gpu.txt", ["--isolated"]),
}
SHOWN = ("torch", "transformers", "numpy", "trl", "vllm", "deepspeed", "faiss-cpu", "faiss-gpu")


def host_is_target() -> bool:
    """Whether this interpreter is the one both sets target (CPython 3.11, Linux x86_64)."""
    return (sys.version_info[:2] == (3, 11) and sys.platform == "linux"
            and platform.machine() == "x86_64" and platform.python_implementation() == "CPython")


def _pip_explanation(output: str) -> str:
    """pip's explanation of a failure: the conflict's causes when pip names them, and its ERROR
    lines; not the progress lines and per-location warnings around them."""
    lines = [ln for ln in output.splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    cause = next((i for i, ln in enumerate(lines) if "conflict is caused by" in ln), None)
    picked = [ln for ln in lines[cause:] if not ln.startswith(("INFO:", "To fix this", "1. ", "2. "))] if cause is not None else []
    picked = [ln for ln in picked if not ln.lstrip().startswith("Collecting")][:20]
    errors = [ln for ln in lines if ln.startswith("ERROR") and ln not in picked]
    return "\n    ".join(picked + errors or lines[-30:])


def resolve(name: str) -> dict[str, str]:
    """Run pip's resolver on one set; return {package: version} or exit with one clear message."""
    filename, extra = SETS[name]
    req = ROOT / filename
    if not req.exists():
        sys.exit(f"check_requirements: {filename} does not exist")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        # Not --quiet: pip then leaves out its explanation of a conflict ("The conflict is caused by").
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--progress-bar", "off",
               "--disable-pip-version-check", "--report", str(report), *extra, "-r", str(req)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not report.exists():
            detail = _pip_explanation(proc.stdout + "\n" + proc.stderr) or f"pip exited with status {proc.returncode}"
            sys.exit(f"check_requirements: {filename} does not resolve (pip's resolver, dry run):\n    {detail}")
        data = json.loads(report.read_text())
    return {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
            for item in data.get("install", [])}


def main(argv: list[str]) -> int:
    names = argv or list(SETS)
    unknown = [n for n in names if n not in SETS]
    if unknown:
        sys.exit(f"check_requirements: unknown set {unknown[0]!r} (expected one of {sorted(SETS)})")
    if not host_is_target():
        sys.exit("check_requirements: the pinned sets target CPython 3.11 on Linux x86_64 and must be resolved "
                 f"there (source-only packages rule out pip's --platform); this is {platform.python_implementation()} "
                 f"{platform.python_version()} on {sys.platform} {platform.machine()}")
    for name in names:
        t0 = time.perf_counter()
        versions = resolve(name)
        shown = ", ".join(f"{k}=={versions[k]}" for k in SHOWN if k in versions)
        print(f"{SETS[name][0]}: resolves, {len(versions)} packages ({shown}) in {time.perf_counter() - t0:.0f} s",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
