"""Copies of the repository for isolated pipeline runs (the smoke test and the repro benchmark)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from ragcritic_lib import paths


def copy_repository(dest: Path, src: Path = paths.ROOT) -> Path:
    """Copy the files git would see (tracked + untracked-not-ignored) into ``dest`` and make it a
    git repository of its own, so DVC runs there exactly as in a fresh clone."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=src,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        s = src / rel
        if not s.is_file():
            continue
        d = dest / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


def pipeline_env(root: Path, cache_dir: Path) -> dict[str, str]:
    """Environment for running the pipeline of a repository copy with its own caches; the
    asset wheels already downloaded are shared."""
    env = dict(os.environ)
    venv_bin = Path(os.sys.executable).parent
    env.update({
        "RAGCRITIC_ROOT": str(root),
        "RAGCRITIC_CACHE_DIR": str(cache_dir),
        "RAGCRITIC_WHEELS_DIR": str(paths.WHEELS_DIR),
        "DVC_NO_ANALYTICS": "1",
        "PYTHONUNBUFFERED": "1",
        "PATH": f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(root),
    })
    return env


def run_timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path | None = None) -> tuple[float, str]:
    """Run a command, return (seconds, combined output); raises with the output tail on failure."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    if log is not None:
        log.write_text(output)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-6000:]}")
    return seconds, output
