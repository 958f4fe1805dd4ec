"""Trained artifacts travel through a DVC remote: push from one clone, pull into another."""

import os
import shutil
import subprocess
import sys
from pathlib import Path


def _run(cmd, cwd):
    env = dict(os.environ, DVC_NO_ANALYTICS="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def test_push_then_pull_restores_stage_outputs(tmp_path):
    repo, remote = tmp_path / "repo", tmp_path / "remote"
    repo.mkdir()
    _run(["git", "init", "-q"], repo)
    _run(["git", "config", "user.email", "t@example.org"], repo)
    _run(["git", "config", "user.name", "t"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["dvc", "config", "core.analytics", "false"], repo)
    _run(["dvc", "remote", "add", "-d", "storage", str(remote)], repo)
    (repo / "dvc.yaml").write_text(
        "stages:\n  train:\n    cmd: mkdir -p out && echo weights-v1 > out/adapter.bin\n    outs:\n      - out\n"
    )
    _run(["dvc", "repro", "-q"], repo)
    _run(["dvc", "push", "-q"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "trained"], repo)

    clone = tmp_path / "clone"
    _run(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    assert not (clone / "out").exists()
    _run(["dvc", "pull", "-q"], clone)
    assert (clone / "out" / "adapter.bin").read_text() == "weights-v1\n"
    status = _run(["dvc", "status"], clone)
    assert "up to date" in status.lower()
    shutil.rmtree(remote)
