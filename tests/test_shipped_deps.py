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


def _awaiting_rerun(name: str, lock: dict) -> bool:
    """An upstream stage re-ran and shipped since this stage ran: an output it read is recorded in
    its upstream's lock entry with another hash. Such a stage is stale on every clone by design
    until it re-runs in a later sitting (`dvc status` names it), whatever its own files did."""
    outs = {o["path"]: o.get("md5") for stage in lock.values() for o in stage.get("outs", [])}
    for dep in lock[name].get("deps", []):
        path, md5 = dep["path"], dep.get("md5", "")
        if path in outs:
            if outs[path] != md5:
                return True
        else:  # a file inside an upstream output folder: its md5 in that folder's listing in dvc-store
            for out, out_md5 in outs.items():
                if path.startswith(out.rstrip("/") + "/") and str(out_md5).endswith(".dir") and not md5.endswith(".dir"):
                    listing = paths.ROOT / "dvc-store" / "files" / "md5" / out_md5[:2] / out_md5[2:]
                    if listing.is_file():
                        now = {e["relpath"]: e["md5"] for e in json.loads(listing.read_text(encoding="utf-8"))}
                        rel = path[len(out.rstrip("/")) + 1:]
                        if rel in now and now[rel] != md5:
                            return True
    return False


def _awaiting(lock: dict) -> set[str]:
    """The stages awaiting a re-run: :func:`_awaiting_rerun`, and every stage reading an output of one."""
    waiting = {name for name in lock if _awaiting_rerun(name, lock)}
    while True:
        outs = [o["path"].rstrip("/") for name in waiting for o in lock[name].get("outs", [])]
        more = {name for name, stage in lock.items() if name not in waiting and any(
            dep["path"] == out or dep["path"].startswith(out + "/") for dep in stage.get("deps", []) for out in outs)}
        if not more:
            return waiting
        waiting |= more


def test_the_file_dependencies_of_every_shipped_stage_are_as_dvc_lock_recorded_them():
    lock = yaml.safe_load((paths.ROOT / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    shipped = [name for name, stage in lock.items() if _run_by_current_runner(stage) and name not in _awaiting(lock)]
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


def test_a_stage_whose_upstream_output_changed_awaits_its_rerun():
    lock = {"up": {"outs": [{"path": "data/up", "md5": "new.dir"}]},
            "down": {"deps": [{"path": "data/up", "md5": "old.dir"}, {"path": "code.py", "md5": "x"}]},
            "same": {"deps": [{"path": "data/up", "md5": "new.dir"}]}}
    assert _awaiting_rerun("down", lock) and not _awaiting_rerun("same", lock) and not _awaiting_rerun("up", lock)
    lock["after"] = {"deps": [{"path": "data/down/x.json", "md5": "y"}]}
    lock["down"]["outs"] = [{"path": "data/down", "md5": "d.dir"}]
    assert _awaiting(lock) == {"down", "after"}
