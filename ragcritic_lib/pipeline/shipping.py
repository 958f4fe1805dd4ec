"""Stage outputs that travel with the repository: restore them in a clone, ship them after a run.

The store is a DVC remote (``store`` in ``.dvc/config``) whose default URL is ``dvc-store/``, a
folder of this repository that git tracks, so a clone carries every shipped output as DVC's
content-addressed objects (``files/md5/xx/...``). One line points it elsewhere
(``dvc remote add -d -f store s3://...``); nothing here assumes a local folder.

* ``restore`` puts every output that ``dvc.lock`` records back into the workspace: cached outputs
  from the local DVC cache or the store, git-ignored ``cache: false`` outputs that the set-up
  rebuilds (``data/assets``, from pinned wheels) by calling the library and checking the result
  against the hash in ``dvc.lock``, and git-tracked ``cache: false`` outputs (metrics, tables)
  that a hand run modified are named and kept, or put back with ``--force``.
* ``ship`` refuses unless every stage is up to date, refuses a file over 50 MB or more than
  100 MB of new objects, pushes every cached output to the store, prunes store objects that no
  output in ``dvc.lock`` names and stages the store with ``git add`` (it does not commit).
  ``--partial`` ships a run that spans sittings: the outputs of the stages that are up to date,
  naming the others, whose objects already in the store stay there.
* ``status`` prints what ``restore`` would find, changing nothing.
* ``clear-persisted`` deletes the ``persist: true`` outputs (logged samples that ``dvc repro
  --force`` would reuse): ``make pipeline-cold`` runs it before a forced repro; ``--stage S``
  deletes only stage S's (``benchmarks/bench_stage_copy.py`` times a stage cold in a restored copy).

``python -m ragcritic_lib.pipeline.shipping {restore,ship,status}`` (``make restore``, ``make ship``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STORE = "store"
ASSETS = "data/assets"
PROJECT_FILE = "dvc.yaml"
MAX_FILE_BYTES = 50 * 10**6
MAX_NEW_BYTES = 100 * 10**6
# What a clone of the embedded default should weigh in git objects. Pruning keeps the store's
# tree small, but every object a ship committed stays in git history: past this, ship says so.
GIT_OBJECTS_BUDGET_KIB = 150 * 1024
_RUNNING = re.compile(r"Running stage '([^']+)'")


class ShippingError(RuntimeError):
    """A refusal or a failure, one message naming what to do."""


# ---------------------------------------------------------------------------------------------
# What dvc.yaml and dvc.lock say


@dataclass(frozen=True)
class Output:
    stage: str
    path: str           # relative to the repository root, as dvc.yaml writes it
    cached: bool        # DVC cache (shipped through the store) or cache: false
    md5: str | None     # as dvc.lock records it; None when the lock has no entry
    nfiles: int | None
    size: int | None
    persist: bool = False  # kept by `dvc repro --force` (logs a stage appends to)


def _repo(root: Path):
    """DVC's Repo of ``root``, with the working directory moved there until ``_close``: DVC
    resolves some paths (``dvc.yaml`` among them) against the working directory."""
    from dvc.repo import Repo

    previous = os.getcwd()
    os.chdir(root)
    try:
        repo = Repo(str(root))
    except BaseException:
        os.chdir(previous)
        raise
    repo._shipping_previous_cwd = previous
    return repo


def _close(repo) -> None:
    try:
        repo.close()
    finally:
        os.chdir(repo._shipping_previous_cwd)


def outputs(repo) -> list[Output]:
    """Every output of every stage of ``dvc.yaml``, with the hash ``dvc.lock`` records."""
    found = []
    root = Path(repo.root_dir)
    for stage in repo.index.stages:
        for out in stage.outs:
            rel = Path(out.fs_path).relative_to(root).as_posix()
            md5 = out.hash_info.value if out.hash_info else None
            found.append(Output(stage.name, rel, bool(out.use_cache), md5,
                                out.meta.nfiles if out.meta else None, out.meta.size if out.meta else None,
                                bool(out.persist)))
    return found


def _dvc_targets(root: Path, every: Sequence[Output], chosen: Sequence[Output]) -> list[list[str]]:
    """DVC targets for ``chosen`` outputs, in at most two groups for one DVC call each:
    ``dvc.yaml`` alone when every cached output is chosen (a fresh clone's restore), else
    ``dvc.yaml:<stage>`` for a stage all of whose cached outputs are chosen, then the paths of
    the rest. DVC reads dvc.yaml and dvc.lock again for every target (about half a second once
    dvc.lock is large), so the file alone costs one read and a stage's name one read for all its
    outputs; a call that mixes stage and path targets takes DVC's slower path for all of them,
    hence the two groups."""
    wanted = {o.path for o in chosen}
    by_stage: dict[str, list[str]] = {}
    for o in every:
        if o.cached:
            by_stage.setdefault(o.stage, []).append(o.path)
    whole = sorted(stage for stage, paths in by_stage.items() if all(p in wanted for p in paths))
    if by_stage and len(whole) == len(by_stage):
        return [[str(root / PROJECT_FILE)]]
    rest = [str(root / o.path) for o in chosen if o.stage not in whole]
    return [group for group in ([f"{root / PROJECT_FILE}:{stage}" for stage in whole], rest) if group]


def clear_persisted(root: Path, stages: Sequence[str] | None = None) -> list[str]:
    """Delete every ``persist: true`` output (what ``dvc repro --force`` would keep and reuse):
    the first step of a cold run. With ``stages``, only those stages' (a cold run of one stage in a
    restored copy: its own logs restored with the shipped outputs would make it a warm one).
    Returns the paths deleted; a stage that dvc.yaml does not name is a :class:`ShippingError`."""
    import shutil

    repo = _repo(root)
    try:
        every = outputs(repo)
        names = {stage.name for stage in repo.index.stages}
    finally:
        _close(repo)
    unknown = sorted(set(stages or ()) - names)
    if unknown:
        raise ShippingError(f"{PROJECT_FILE} has no stage {', '.join(map(repr, unknown))}; stages: {', '.join(sorted(names))}")
    persisted = [o.path for o in every if o.persist and (stages is None or o.stage in stages)]
    gone = []
    for rel in persisted:
        path = Path(root) / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        gone.append(rel)
    return gone


def downstream_stages(root: Path, stage: str) -> set[str]:
    """The stages that depend, directly or through others, on ``stage``'s outputs (not itself)."""
    repo = _repo(root)
    try:
        by_name = {s.name: s for s in repo.index.stages}
        if stage not in by_name:
            raise ShippingError(f"dvc.yaml has no stage {stage!r} (stages: {', '.join(sorted(by_name))})")
        graph = repo.index.graph  # an edge runs from a stage to a stage it depends on
        import networkx as nx

        return {s.name for s in nx.ancestors(graph, by_name[stage])}
    finally:
        _close(repo)


def upstream_stages(root: Path, stage: str) -> set[str]:
    """The stages whose outputs ``stage`` reads, directly or through others (not itself)."""
    repo = _repo(root)
    try:
        by_name = {s.name: s for s in repo.index.stages}
        import networkx as nx

        return {s.name for s in nx.descendants(repo.index.graph, by_name[stage])}
    finally:
        _close(repo)


def stages_run(log: str) -> list[str]:
    """The stages a ``dvc repro`` log says it ran, in order."""
    return _RUNNING.findall(log)


def pipeline_status(repo) -> dict[str, Any]:
    """``dvc status`` as a dict: stage -> what changed; empty when every stage is up to date."""
    return repo.status()


def _listed(items: list[str], keep: int = 3) -> str:
    more = f" +{len(items) - keep} more" if len(items) > keep else ""
    return ", ".join(items[:keep]) + more


def _format_status(status: Mapping[str, Any]) -> str:
    """``dvc status`` in one line a stage (the first few paths of each kind of change)."""
    if not status:
        return "dvc status: every stage is up to date"
    lines = [f"dvc status: {len(status)} stage(s) not up to date:"]
    for name, changes in status.items():
        parts = []
        for change in changes:
            if isinstance(change, dict):
                for kind, what in change.items():
                    items = [f"{p} {s}" for p, s in what.items()] if isinstance(what, dict) else [str(what)]
                    parts.append(f"{kind}: {_listed(items)}")
            else:
                parts.append(str(change))
        lines.append(f"  {name.split(':')[-1]}: " + "; ".join(parts))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Objects in a DVC object database (the local cache or the store)


def _objects(odb, md5: str) -> dict[str, int] | None:
    """oid -> size of every object an output of hash ``md5`` consists of (a directory: its
    listing and every file), or None when ``odb`` does not hold them all."""
    from dvc_data.hashfile import load
    from dvc_data.hashfile.hash_info import HashInfo

    if not odb.exists(md5):
        return None
    sizes = {md5: odb.fs.size(odb.oid_to_path(md5))}
    if not md5.endswith(".dir"):
        return sizes
    try:
        tree = load(odb, HashInfo("md5", md5))
    except Exception:  # noqa: BLE001 - an unreadable listing is a missing one
        return None
    entries = {hi.value: (meta.size if meta and meta.size is not None else None) for _, meta, hi in tree}
    present = odb.oids_exist(list(entries))
    if set(present) != set(entries):
        return None
    for oid, size in entries.items():
        sizes[oid] = size if size is not None else odb.fs.size(odb.oid_to_path(oid))
    return sizes


def _tree_files(odb, md5: str) -> dict[str, tuple[str, int]]:
    """relpath -> (oid, size) of a directory output's files, from its listing in ``odb``."""
    from dvc_data.hashfile import load
    from dvc_data.hashfile.hash_info import HashInfo

    tree = load(odb, HashInfo("md5", md5))
    return {"/".join(key): (hi.value, meta.size if meta else None) for key, meta, hi in tree}


def _store_odb(repo, remote: str):
    try:
        return repo.cloud.get_remote_odb(remote)
    except Exception as exc:  # noqa: BLE001 - DVC's own message names the remote
        raise ShippingError(f".dvc/config: no usable DVC remote {remote!r} ({exc}); "
                            f"add one with `dvc remote add -d -f {remote} <url>`") from exc


def _default_remote(repo) -> str:
    return repo.config.get("core", {}).get("remote") or STORE


# ---------------------------------------------------------------------------------------------
# Outputs the set-up rebuilds instead of shipping (cache: false, git-ignored)


def _build_assets(root: Path, dest: Path) -> None:
    import yaml

    from ragcritic_lib.data import assets

    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8")) or {}
    section = params.get("assets")
    if not isinstance(section, dict):
        raise ShippingError("params.yaml: no 'assets' section to rebuild data/assets from")
    assets.build_assets(dest, requirements=root / "requirements-assets.txt", **section)


REBUILDERS: dict[str, Callable[[Path, Path], None]] = {ASSETS: _build_assets}


def manifest_path(root: Path, rel: str) -> Path:
    return root / f"{rel}.manifest.json"


def workspace_hash(repo, rel: str) -> tuple[str, dict[str, str]]:
    """DVC's md5 of a workspace output (a directory's is ``<md5>.dir``) and, for a directory,
    relpath -> md5 of its files. Computed by DVC's own hashing (its state database remembers
    unchanged files); a symlinked folder is hashed where it points."""
    from dvc_data.hashfile.build import build

    path = Path(repo.root_dir) / rel
    real = os.path.realpath(path)
    odb = repo.cache.local
    _, _, obj = build(odb, real, odb.fs, "md5", ignore=None, state=getattr(repo, "state", None))
    md5 = obj.hash_info.value
    files = {}
    if md5.endswith(".dir"):
        files = {"/".join(key): hi.value for key, _, hi in obj}
    return md5, files


def write_manifest(repo, rel: str) -> Path:
    """``<rel>.manifest.json`` (git-tracked): the output's DVC hash and every file's md5, so a
    rebuild that differs names the files that differ."""
    md5, files = workspace_hash(repo, rel)
    target = manifest_path(Path(repo.root_dir), rel)
    target.write_text(json.dumps({"path": rel, "md5": md5, "nfiles": len(files), "files": files},
                                 indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return target


def _manifest_diff(root: Path, rel: str, files: Mapping[str, str]) -> list[str]:
    target = manifest_path(root, rel)
    if not target.exists():
        return []
    recorded = json.loads(target.read_text(encoding="utf-8")).get("files", {})
    names = sorted(set(recorded) | set(files))
    return [n for n in names if recorded.get(n) != files.get(n)]


# ---------------------------------------------------------------------------------------------
# git


def _git(root: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ShippingError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def _git_ignored(root: Path, rel: str) -> bool:
    return subprocess.run(["git", "check-ignore", "-q", rel], cwd=root).returncode == 0


def _git_changes(root: Path, rel: str) -> list[str]:
    """Files under a git-tracked output that differ from the commit (modified, deleted, new)."""
    out = _git(root, "status", "--porcelain", "--untracked-files=all", "--", rel)
    return [line[3:] for line in out.splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# restore


@dataclass
class RestoreReport:
    restored: list[str] = field(default_factory=list)        # put back from the cache or the store
    present: list[str] = field(default_factory=list)         # already as dvc.lock records
    rebuilt: list[str] = field(default_factory=list)
    not_shipped: dict[str, list[str]] = field(default_factory=dict)  # stage -> outputs
    not_locked: dict[str, list[str]] = field(default_factory=dict)   # stage -> outputs
    kept_modified: list[str] = field(default_factory=list)   # a hand run's changes, kept
    reset: list[str] = field(default_factory=list)           # --force put back
    problems: list[str] = field(default_factory=list)        # hash mismatches, failed rebuilds
    status: dict[str, Any] = field(default_factory=dict)
    present_cached: int = 0                                  # cached outputs already in place

    def summary(self) -> str:
        lines = [f"restored {len(self.restored)} output(s) from the DVC cache or the store; "
                 f"{len(self.present)} already in place"]
        lines += [f"  restored: {p}" for p in self.restored]
        lines += [f"rebuilt: {p} (matches dvc.lock)" for p in self.rebuilt]
        if self.not_shipped and not self.restored and not self.present_cached:
            lines.append("the store holds none of the outputs dvc.lock records (no run shipped yet): "
                         "`make pipeline` computes them")
        for stage, paths in sorted(self.not_shipped.items()):
            lines.append(f"not shipped ({stage}): {_listed(paths)}  -> `dvc repro {stage}` computes them")
        for stage, paths in sorted(self.not_locked.items()):
            lines.append(f"not in dvc.lock ({stage}): {', '.join(paths)}  -> the stage has not run")
        if self.kept_modified:
            lines.append("kept (a hand run changed them; `make restore RESTORE_ARGS=--force` puts them back):")
            lines += [f"  {p}" for p in self.kept_modified]
        lines += [f"put back: {p}" for p in self.reset]
        lines += [f"PROBLEM: {p}" for p in self.problems]
        lines.append(_format_status(self.status))
        return "\n".join(lines)


def _restore_rebuilt(repo, root: Path, out: Output, report: RestoreReport,
                     rebuilders: Mapping[str, Callable[[Path, Path], None]]) -> None:
    path = root / out.path
    if out.md5 is None:
        report.not_locked.setdefault(out.stage, []).append(out.path)
        return
    if not path.exists():
        build = rebuilders.get(out.path)
        if build is None:
            report.not_shipped.setdefault(out.stage, []).append(out.path)
            return
        print(f"rebuilding {out.path} (stage {out.stage}) ...", flush=True)
        try:
            build(root, path)
        except Exception as exc:  # noqa: BLE001 - reported, the rest is still restored
            report.problems.append(f"{out.path}: rebuild failed: {exc}")
            return
        rebuilt = True
    else:
        rebuilt = False
    md5, files = workspace_hash(repo, out.path)
    if md5 != out.md5:
        differ = _manifest_diff(root, out.path, files)
        which = f"; files that differ from {manifest_path(root, out.path).name}: {', '.join(differ[:8])}" if differ else ""
        report.problems.append(
            f"{out.path}: hash {md5} but dvc.lock records {out.md5}{which}; every stage that reads it "
            f"reads as stale (rebuild it with `dvc repro {out.stage}` if its inputs changed)")
    elif rebuilt:
        report.rebuilt.append(out.path)
    else:
        report.present.append(out.path)


def _restore_tracked(root: Path, out: Output, force: bool, report: RestoreReport) -> None:
    changed = _git_changes(root, out.path)
    if not changed:
        report.present.append(out.path)
        return
    if not force:
        report.kept_modified.extend(changed)
        return
    tracked = _git(root, "ls-files", "--", out.path).split()
    if tracked:
        _git(root, "checkout", "--", out.path)
    _git(root, "clean", "-fq", "--", out.path)  # files a hand run added inside the output
    report.reset.extend(changed)


def restore(root: Path, *, force: bool = False, remote: str | None = None,
            rebuilders: Mapping[str, Callable[[Path, Path], None]] | None = None) -> RestoreReport:
    root = Path(root).resolve()
    rebuilders = REBUILDERS if rebuilders is None else rebuilders
    report = RestoreReport()
    repo = _repo(root)
    try:
        remote = remote or _default_remote(repo)
        cache = repo.cache.local
        store = None
        fetch, checkout = [], []
        every = outputs(repo)
        for out in every:
            if not out.cached:
                if _git_ignored(root, out.path):
                    _restore_rebuilt(repo, root, out, report, rebuilders)
                else:
                    _restore_tracked(root, out, force, report)
                continue
            if out.md5 is None:
                report.not_locked.setdefault(out.stage, []).append(out.path)
                continue
            if _objects(cache, out.md5) is None:
                store = store or _store_odb(repo, remote)
                if _objects(store, out.md5) is None:
                    report.not_shipped.setdefault(out.stage, []).append(out.path)
                    continue
                fetch.append(out)
            checkout.append(out)
        if fetch:
            print(f"fetching {len(fetch)} output(s) from DVC remote {remote!r} ...", flush=True)
            for targets in _dvc_targets(root, every, fetch):
                repo.fetch(targets=targets, remote=remote)
        put = []
        for out in checkout:
            state = _workspace_state(repo, out)
            if state == "same":
                report.present.append(out.path)
                report.present_cached += 1
                continue
            if state == "modified" and not force:
                report.kept_modified.append(out.path)
                continue
            put.append(out.path)
        if put:  # few checkouts: each call re-reads dvc.yaml and dvc.lock (seconds a call)
            chosen = [out for out in checkout if out.path in set(put)]
            for targets in _dvc_targets(root, every, chosen):
                repo.checkout(targets=targets, force=True)
            report.restored.extend(put)
        report.status = pipeline_status(repo)
    finally:
        _close(repo)
    return report


def _workspace_state(repo, out: Output) -> str:
    """'same', 'missing' or 'modified': the workspace copy of a cached output against dvc.lock."""
    path = Path(repo.root_dir) / out.path
    if not path.exists():
        return "missing"
    md5, _ = workspace_hash(repo, out.path)
    return "same" if md5 == out.md5 else "modified"


# ---------------------------------------------------------------------------------------------
# ship


@dataclass
class ShipReport:
    outputs: int = 0
    referenced_bytes: int = 0
    new_objects: int = 0
    new_bytes: int = 0
    pruned_objects: int = 0
    pruned_bytes: int = 0
    largest: tuple[str, int] = ("", 0)
    staged: list[str] = field(default_factory=list)
    git_objects_before: str = ""
    git_objects_kib: int | None = None   # loose + packed, `git count-objects -v`
    not_up_to_date: list[str] = field(default_factory=list)  # stages a partial ship left out

    def summary(self) -> str:
        mb = 1e6
        lines = [
            f"shipped {self.outputs} cached output(s): {self.referenced_bytes / mb:.1f} MB in the store, "
            f"of which new {self.new_objects} object(s), {self.new_bytes / mb:.1f} MB",
            *([f"left out, not up to date ({len(self.not_up_to_date)} stage(s); what the store already "
               f"held of them stays): {', '.join(self.not_up_to_date)}"] if self.not_up_to_date else []),
            f"largest file: {self.largest[0]} ({self.largest[1] / mb:.1f} MB)",
            f"pruned {self.pruned_objects} object(s) no output in dvc.lock names ({self.pruned_bytes / mb:.1f} MB)",
            f"staged for commit: {', '.join(self.staged) or 'nothing'} (not committed)",
        ]
        if self.git_objects_before:
            lines.append("git objects before this ship (`git count-objects -v`): " + self.git_objects_before
                         + f"; a commit adds at most {self.new_bytes / mb:.1f} MB before compression")
        if self.git_objects_kib is not None and self.git_objects_kib > GIT_OBJECTS_BUDGET_KIB:
            lines.append(f"over budget: git objects {self.git_objects_kib / 1024:.0f} MiB, past the "
                         f"{GIT_OBJECTS_BUDGET_KIB / 1024:.0f} MiB a clone should weigh; objects pruned "
                         "from the store stay in git history (docs/reproduce.md, 'What a clone weighs')")
        return "\n".join(lines)


def _count_objects(root: Path) -> tuple[str, int | None]:
    """Loose and packed git objects as the report prints them, and their KiB (None if unread)."""
    out = _git(root, "count-objects", "-v", check=False)
    fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    try:
        loose, packed = int(fields["size"]), int(fields["size-pack"])
    except (KeyError, ValueError):
        return "unread", None
    return f"loose {loose / 1024:.2f} MiB, packed {packed / 1024:.2f} MiB", loose + packed


def ship(root: Path, *, remote: str | None = None, max_file_bytes: int | None = MAX_FILE_BYTES,
         max_new_bytes: int | None = MAX_NEW_BYTES, git_add: bool = True, partial: bool = False) -> ShipReport:
    """Push every cached output of ``dvc.lock`` to the store, within the limits (None lifts one).

    ``partial``: a run that spans sittings ships the stages that are up to date and leaves out the
    others (named in the report); store objects that their ``dvc.lock`` entries name are kept."""
    root = Path(root).resolve()
    objects_text, objects_kib = _count_objects(root)
    report = ShipReport(git_objects_before=objects_text, git_objects_kib=objects_kib)
    repo = _repo(root)
    try:
        remote = remote or _default_remote(repo)
        status = pipeline_status(repo)
        stale = {name.split(":")[-1] for name in status}
        if status and not partial:
            raise ShippingError("refusing to ship: not every stage is up to date (run `dvc repro`, or ship "
                                "the stages that are with --partial)\n" + _format_status(status))
        if partial and stale >= {s.name for s in repo.index.stages}:
            raise ShippingError("refusing to ship: no stage is up to date (run `dvc repro`)\n" + _format_status(status))
        report.not_up_to_date = sorted(stale)
        cache = repo.cache.local
        store = _store_odb(repo, remote)
        shipped, referenced, too_big = [], {}, []
        every = outputs(repo)
        for out in every:
            if not out.cached:
                continue
            if out.stage in stale:
                # Not shipped now; what the store holds of its locked outputs is still restorable.
                held = _objects(store, out.md5) if out.md5 else None
                referenced.update(held or {})
                continue
            objs = _objects(cache, out.md5)
            if objs is None:
                raise ShippingError(f"refusing to ship: {out.path} (stage {out.stage}) is not in the local "
                                    f"DVC cache; `make restore` or `dvc repro {out.stage}` puts it there")
            names = {out.md5: out.path}
            if out.md5.endswith(".dir"):
                names.update({oid: f"{out.path}/{rel}" for rel, (oid, _) in _tree_files(cache, out.md5).items()})
            for oid, size in objs.items():
                referenced[oid] = size
                if size > report.largest[1]:
                    report.largest = (names.get(oid, out.path), size)
                if max_file_bytes is not None and size > max_file_bytes:
                    too_big.append(f"{names.get(oid, out.path)} ({size / 1e6:.1f} MB)")
            shipped.append(out)
        if too_big:
            raise ShippingError(f"refusing to ship: file(s) over {max_file_bytes / 1e6:.0f} MB: " + ", ".join(too_big))
        have = set(store.oids_exist(list(referenced)))
        new = {oid: size for oid, size in referenced.items() if oid not in have}
        report.outputs = len(shipped)
        report.referenced_bytes = sum(referenced.values())
        report.new_objects, report.new_bytes = len(new), sum(new.values())
        if max_new_bytes is not None and report.new_bytes > max_new_bytes:
            raise ShippingError(f"refusing to ship: {report.new_bytes / 1e6:.1f} MB of new objects, over the "
                                f"{max_new_bytes / 1e6:.0f} MB a shipped run may add to the repository")
        if shipped:
            for targets in _dvc_targets(root, every, shipped):
                repo.push(targets=targets, remote=remote)
        for oid in list(store.all()):
            if oid in referenced:
                continue
            path = store.oid_to_path(oid)
            report.pruned_bytes += store.fs.size(path)
            store.fs.remove(path)
            report.pruned_objects += 1
        for out in outputs(repo):
            if not out.cached and out.path in REBUILDERS and out.stage not in stale and (root / out.path).exists():
                report.staged.append(write_manifest(repo, out.path).relative_to(root).as_posix())
    finally:
        _close(repo)
    store_dir = _local_store_dir(root, store)
    if store_dir is not None:
        _remove_empty_dirs(store_dir)
        report.staged.insert(0, store_dir.relative_to(root).as_posix())
    if git_add and report.staged:
        _git(root, "add", "-A", "--", *report.staged)
    return report


def _local_store_dir(root: Path, store) -> Path | None:
    """The store's folder when it lies inside the repository (the default ``dvc-store/``)."""
    if getattr(store.fs, "protocol", None) not in ("local", ("file", "local"), ("file",)) and \
            type(store.fs).__name__ != "LocalFileSystem":
        return None
    base = Path(store.path).resolve()
    # the odb's path is <store>/files/md5
    top = base.parent.parent if base.name == "md5" and base.parent.name == "files" else base
    try:
        top.relative_to(root)
    except ValueError:
        return None
    return top


def _remove_empty_dirs(top: Path) -> None:
    for dirpath, _, _ in sorted(os.walk(top), key=lambda t: -len(t[0])):
        p = Path(dirpath)
        if p != top and not any(p.iterdir()):
            p.rmdir()


# ---------------------------------------------------------------------------------------------
# A shipped run, cloned, and one stage re-run (the smoke test and tests/test_shipping.py)


def commit_all(root: Path, message: str) -> None:
    """Commit everything git sees in ``root`` (a throwaway copy: the author is set here)."""
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=shipping", "-c", "user.email=shipping@localhost",
         "commit", "-q", "--no-verify", "-m", message)


def clone_repository(src: Path, dest: Path, carry: Iterable[str] = ()) -> Path:
    """``git clone`` ``src`` into ``dest``; each git-ignored path in ``carry`` (a rebuilt output
    such as data/assets) comes along as hard links where the file system allows, else copies."""
    _git(Path(src).parent, "clone", "-q", str(src), str(dest))
    for rel in carry:
        source, target = Path(src) / rel, Path(dest) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        real = Path(os.path.realpath(source))
        proc = subprocess.run(["cp", "-al", str(real), str(target)], capture_output=True, text=True)
        if proc.returncode != 0:
            subprocess.run(["cp", "-a", str(real), str(target)], check=True)
    return Path(dest)


def set_param(root: Path, dotted: str, value: Any) -> Any:
    """Set one existing key of ``params.yaml`` (``section.key``); returns the old value."""
    import yaml

    path = Path(root) / "params.yaml"
    params = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    node, keys = params, dotted.split(".")
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict) or keys[-1] not in node:
        raise ShippingError(f"{path}: no key {dotted}")
    old, node[keys[-1]] = node[keys[-1]], value
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return old


def check_rerun(root: Path, stage: str, ran: Iterable[str]) -> list[str]:
    """What is wrong with a ``dvc repro`` after one of ``stage``'s inputs changed, given the
    stages it ran: ``stage`` must have run and nothing but ``stage`` and its downstream stages
    (from DVC's graph). Which downstream stages run depends on which outputs changed, so that
    every needed one ran is for ``dvc status`` to say afterwards."""
    ran = list(ran)
    down, up = downstream_stages(root, stage), upstream_stages(root, stage)
    problems = [] if stage in ran else [f"{stage} did not run"]
    for name in ran:
        if name in up:
            problems.append(f"{name} ran, upstream of {stage}")
        elif name != stage and name not in down:
            problems.append(f"{name} ran, neither {stage} nor downstream of it")
    return problems


# ---------------------------------------------------------------------------------------------
# command line


def _print_status(root: Path, remote: str | None) -> int:
    repo = _repo(root)
    try:
        remote = remote or _default_remote(repo)
        store = _store_odb(repo, remote)
        for out in outputs(repo):
            if out.cached:
                where = ("local cache" if out.md5 and _objects(repo.cache.local, out.md5) is not None
                         else "store" if out.md5 and _objects(store, out.md5) is not None
                         else "not shipped" if out.md5 else "not in dvc.lock")
            else:
                where = "rebuilt by the set-up" if _git_ignored(root, out.path) else "git"
            print(f"{out.stage:16} {out.path:55} {where}")
        print(_format_status(pipeline_status(repo)))
    finally:
        _close(repo)
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    from ragcritic_lib import paths

    ap = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.shipping", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=paths.ROOT, help="repository root (default: this one)")
    ap.add_argument("--remote", default=None, help="DVC remote (default: core.remote of .dvc/config)")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("restore", help="put every output dvc.lock records into the workspace")
    r.add_argument("--force", action="store_true",
                   help="also overwrite outputs a hand run modified (git checkout / dvc checkout)")
    r.add_argument("--strict", action="store_true", help="exit 1 when an output is not shipped or a hash differs")
    s = sub.add_parser("ship", help="push every cached output to the store and git-add it (no commit)")
    s.add_argument("--max-file-mb", type=float, default=MAX_FILE_BYTES / 1e6)
    s.add_argument("--max-new-mb", type=float, default=MAX_NEW_BYTES / 1e6)
    s.add_argument("--partial", action="store_true",
                   help="ship the stages that are up to date and name the others (a run that spans sittings)")
    sub.add_parser("status", help="where each output would come from; changes nothing")
    c = sub.add_parser("clear-persisted", help="delete the persist: true outputs (before a cold `dvc repro --force`)")
    c.add_argument("--stage", action="append", default=None, help="only this stage's (repeatable)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    root = args.root.resolve()
    try:
        if args.command == "restore":
            report = restore(root, force=args.force, remote=args.remote)
            print(report.summary())
            bad = report.problems or (args.strict and (report.not_shipped or report.not_locked))
            return 1 if bad else 0
        if args.command == "ship":
            report = ship(root, remote=args.remote, max_file_bytes=int(args.max_file_mb * 1e6),
                          max_new_bytes=int(args.max_new_mb * 1e6), partial=args.partial)
            print(report.summary())
            return 0
        if args.command == "clear-persisted":
            gone = clear_persisted(root, args.stage)
            print("deleted: " + (", ".join(gone) if gone else "nothing (no persisted output in the workspace)"))
            return 0
        return _print_status(root, args.remote)
    except ShippingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
