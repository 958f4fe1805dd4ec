"""Shipped stages stay up to date: a stage whose committed metrics come from the current stage
runner (its ``environment`` records ``wall_seconds``) ran on the code dvc.lock records, and its
outputs ship. Any change to one of its file dependencies makes `dvc status` call it stale on every
clone, so such a change must re-run the stage (or, when the change cannot move its outputs, be
re-recorded with `dvc commit STAGE`, saying why in the commit)."""

import hashlib
import json

import yaml

from ragcritic_lib import paths


def _run_by_current_runner(stage: dict) -> bool:
    for metric in stage.get("outs", []):
        path = paths.ROOT / metric["path"]
        if path.suffix == ".json" and path.parent == paths.METRICS_DIR and path.exists():
            env = json.loads(path.read_text(encoding="utf-8")).get("environment") or {}
            return isinstance(env.get("wall_seconds"), (int, float))
    return False


def test_the_file_dependencies_of_every_shipped_stage_are_as_dvc_lock_recorded_them():
    lock = yaml.safe_load((paths.ROOT / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    shipped = [name for name, stage in lock.items() if _run_by_current_runner(stage)]
    assert shipped, "no stage's committed metrics come from the current stage runner"
    changed = []
    for name in shipped:
        for dep in lock[name].get("deps", []):
            path = paths.ROOT / dep["path"]
            if dep.get("md5", "").endswith(".dir") or not path.is_file():
                continue     # folders (DVC's own listing hash) and upstream outputs, which restore checks
            if hashlib.md5(path.read_bytes()).hexdigest() != dep["md5"]:
                changed.append(f"{name}: {dep['path']}")
    assert changed == [], ("changed since the shipped run (re-run the stage, or re-record a change that "
                           f"cannot move its outputs with `dvc commit STAGE`): {changed}")
