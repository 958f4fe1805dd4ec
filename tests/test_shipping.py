"""Shipping stage outputs with the repository (ragcritic_lib.pipeline.shipping), on small throwaway
DVC repositories: three stages, a directory output, a git-tracked metrics file and an output the
set-up rebuilds instead of shipping, as data/assets is in the real pipeline."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragcritic_lib.pipeline import shipping

DVC_YAML = """\
stages:
  make_a:
    cmd: python mk_a.py
    deps: [mk_a.py]
    params: [a]
    outs:
      - out/a
      - built:
          cache: false
  make_b:
    cmd: python mk_b.py
    deps: [mk_b.py, out/a]
    params: [b]
    outs: [b.txt]
    metrics:
      - m.json:
          cache: false
  make_c:
    cmd: python mk_c.py
    deps: [mk_c.py, b.txt]
    outs: [c.txt]
  side:
    cmd: python -c "open('side.txt', 'w').write(open('out/a/x.txt').read())"
    deps: [out/a]
    outs: [side.txt]
"""
MK_A = """\
import os, yaml
p = yaml.safe_load(open("params.yaml"))["a"]
os.makedirs("out/a", exist_ok=True)
open("out/a/x.txt", "w").write("a=%s\\n" % p["k"])
open("out/a/blob.bin", "wb").write(bytes(range(256)) * 4 * p["blob_kb"])
open("built", "w").write("rebuilt from pinned inputs\\n")
"""
MK_B = """\
import json, yaml
p = yaml.safe_load(open("params.yaml"))["b"]
open("b.txt", "w").write(open("out/a/x.txt").read() * p["times"])
json.dump({"times": p["times"]}, open("m.json", "w"))
"""
MK_C = 'open("c.txt", "w").write(open("b.txt").read().upper())\n'


def _env() -> dict[str, str]:
    env = dict(os.environ, DVC_NO_ANALYTICS="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def _run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout + proc.stderr


def _rebuild_built(root: Path, dest: Path) -> None:
    dest.write_text("rebuilt from pinned inputs\n")


REBUILD = {"built": _rebuild_built}


@pytest.fixture(scope="module")
def _built(tmp_path_factory) -> Path:
    return _make_repo(tmp_path_factory.mktemp("base") / "repo")


@pytest.fixture
def repo(_built, tmp_path) -> Path:
    """A fresh copy of a repository whose three stages have run (nothing shipped or committed)."""
    dest = tmp_path / "repo"
    shutil.copytree(_built, dest, symlinks=True)
    return dest


def _make_repo(root: Path, blob_kb: int = 256) -> Path:
    """out/a/blob.bin holds ``blob_kb`` KiB (256: 262,144 bytes)."""
    root.mkdir(parents=True)
    _run(["git", "init", "-q"], root)
    _run(["git", "config", "user.email", "t@example.org"], root)
    _run(["git", "config", "user.name", "t"], root)
    _run(["dvc", "init", "-q"], root)
    with (root / ".dvc" / "config").open("a") as f:
        f.write("[core]\n    remote = store\n['remote \"store\"']\n    url = ../dvc-store\n")
    (root / "dvc-store").mkdir()
    (root / "dvc-store" / "README.md").write_text("the store\n")
    (root / ".dvcignore").write_text("/dvc-store/\n")
    (root / ".gitignore").write_text("/built\n")
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "params.yaml").write_text(f"a:\n  k: 1\n  blob_kb: {blob_kb}\nb:\n  times: 2\n")
    for name, text in (("mk_a.py", MK_A), ("mk_b.py", MK_B), ("mk_c.py", MK_C)):
        (root / name).write_text(text)
    _repro(root)
    return root


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _repro(root: Path) -> list[str]:
    """``dvc repro`` in this process (a subprocess costs a second of imports): the stages it ran."""
    from dvc.repo import Repo

    with contextlib.chdir(root), Repo(str(root)) as repo:
        return [stage.name for stage in repo.reproduce()]


def _clean(root: Path) -> bool:
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return repo.status() == {}


def _store_objects(root: Path) -> set[str]:
    return {p.relative_to(root / "dvc-store").as_posix() for p in (root / "dvc-store" / "files").rglob("*") if p.is_file()}


@pytest.fixture
def shipped(repo, tmp_path):
    """A repository whose run is shipped and committed, and a clone of it."""
    report = shipping.ship(repo)
    assert report.outputs == 4 and report.new_objects > 0
    shipping.commit_all(repo, "a shipped run")
    clone = shipping.clone_repository(repo, tmp_path / "clone")
    return repo, clone


def test_ship_then_clone_then_restore_is_up_to_date(shipped):
    repo, clone = shipped
    assert not (clone / "out" / "a").exists() and not (clone / "built").exists()
    report = shipping.restore(clone, rebuilders=REBUILD)
    assert sorted(report.restored) == ["b.txt", "c.txt", "out/a", "side.txt"]
    assert report.rebuilt == ["built"]
    assert report.status == {} and report.not_shipped == {} and report.problems == []
    assert (clone / "out" / "a" / "blob.bin").read_bytes() == (repo / "out" / "a" / "blob.bin").read_bytes()
    assert _clean(clone)
    assert _repro(clone) == []
    # A second restore finds everything in place and changes nothing.
    again = shipping.restore(clone, rebuilders=REBUILD)
    assert again.restored == [] and again.rebuilt == [] and "out/a" in again.present


def test_a_changed_parameter_reruns_its_stage_and_the_downstream_ones_only(shipped):
    _, clone = shipped
    shipping.restore(clone, rebuilders=REBUILD)
    assert shipping.downstream_stages(clone, "make_b") == {"make_c"}
    assert shipping.upstream_stages(clone, "make_b") == {"make_a"}
    old = shipping.set_param(clone, "b.times", 3)
    assert old == 2
    ran = shipping.stages_run(_run(["dvc", "repro"], clone))
    assert shipping.check_rerun(clone, "make_b", ran) == []
    assert ran == ["make_b", "make_c"]
    assert _clean(clone)


def test_check_rerun_names_an_upstream_or_unrelated_stage_that_ran(shipped):
    repo, _ = shipped
    problems = shipping.check_rerun(repo, "make_b", ["make_a", "make_b", "side"])
    assert any("make_a" in p and "upstream" in p for p in problems)
    assert any("side" in p for p in problems)
    assert shipping.check_rerun(repo, "make_b", ["make_c"]) and "make_b" in shipping.check_rerun(repo, "make_b", ["make_c"])[0]


def test_set_param_refuses_a_key_params_yaml_lacks(tmp_path):
    (tmp_path / "params.yaml").write_text("b:\n  times: 2\n")
    with pytest.raises(shipping.ShippingError, match="b.nope"):
        shipping.set_param(tmp_path, "b.nope", 1)


def test_a_stale_stage_refuses_to_ship(repo):
    shipping.set_param(repo, "b.times", 5)
    with pytest.raises(shipping.ShippingError, match="make_b"):
        shipping.ship(repo)
    assert _store_objects(repo) == set()


def test_the_size_limits_refuse(repo):  # out/a/blob.bin: 262,144 bytes
    with pytest.raises(shipping.ShippingError, match=r"out/a/blob\.bin"):
        shipping.ship(repo, max_file_bytes=200_000)
    with pytest.raises(shipping.ShippingError, match="new objects"):
        shipping.ship(repo, max_file_bytes=None, max_new_bytes=100_000)
    assert _store_objects(repo) == set()
    report = shipping.ship(repo, max_file_bytes=300_000, max_new_bytes=400_000)
    assert report.largest == ("out/a/blob.bin", 262_144)
    # Objects already in the store are not new: shipping the same run again adds nothing.
    assert shipping.ship(repo, max_new_bytes=0).new_bytes == 0


def test_ship_prunes_objects_no_output_names_and_stages_the_store(repo):
    shipping.ship(repo)
    first = _store_objects(repo)
    shipping.set_param(repo, "a.k", 2)
    assert set(_repro(repo)) == {"make_a", "make_b", "make_c", "side"}
    report = shipping.ship(repo)
    second = _store_objects(repo)
    # The new x.txt, the new listing of out/a and every file derived from it replace the old ones;
    # blob.bin is the same bytes, so its object stays.
    assert report.pruned_objects == len(first - second) > 0
    assert first & second and second - first
    old_x, new_x = _md5(b"a=1\n"), _md5(b"a=2\n")
    assert f"files/md5/{old_x[:2]}/{old_x[2:]}" in first - second
    assert f"files/md5/{new_x[:2]}/{new_x[2:]}" in second
    staged = _run(["git", "diff", "--cached", "--name-only"], repo).split()
    assert sorted(p for p in staged if p.startswith("dvc-store/files/")) == sorted(f"dvc-store/{p}" for p in second)


def test_ship_reads_the_git_objects_and_says_when_they_pass_the_budget(repo):
    report = shipping.ship(repo)
    # A small repository: the size is read as a number and nothing is over budget.
    assert isinstance(report.git_objects_kib, int) and report.git_objects_kib >= 0
    assert "over budget" not in report.summary()
    heavy = shipping.ShipReport(git_objects_before="loose 0 bytes, packed 242.13 MiB",
                                git_objects_kib=shipping.GIT_OBJECTS_BUDGET_KIB + 1)
    assert "over budget: git objects 150 MiB" in heavy.summary()
    assert "over budget" not in shipping.ShipReport(git_objects_kib=shipping.GIT_OBJECTS_BUDGET_KIB).summary()


def test_restore_names_a_modified_tracked_output_and_force_puts_it_back(shipped):
    _, clone = shipped
    shipping.restore(clone, rebuilders=REBUILD)
    (clone / "m.json").write_text('{"times": 99}')
    (clone / "c.txt").unlink()
    (clone / "b.txt").write_text("a hand run\n")
    report = shipping.restore(clone, rebuilders=REBUILD)
    assert report.kept_modified == ["m.json", "b.txt"] or sorted(report.kept_modified) == ["b.txt", "m.json"]
    assert report.restored == ["c.txt"]
    assert json.loads((clone / "m.json").read_text()) == {"times": 99}
    assert "kept" in report.summary() and "m.json" in report.summary()
    forced = shipping.restore(clone, force=True, rebuilders=REBUILD)
    assert sorted(forced.reset) == ["m.json"] and forced.restored == ["b.txt"]
    assert json.loads((clone / "m.json").read_text()) == {"times": 2}
    assert (clone / "b.txt").read_text() == "a=1\na=1\n"
    assert _clean(clone)


def test_outputs_the_store_lacks_are_reported_by_stage(shipped, tmp_path):
    repo, _ = shipped
    # Take c.txt's object out of the store (a run shipped without it) and clone afresh.
    md5 = _md5(b"A=1\nA=1\n")
    (repo / "dvc-store" / "files" / "md5" / md5[:2] / md5[2:]).unlink()
    shipping.commit_all(repo, "store without some objects")
    clone = shipping.clone_repository(repo, tmp_path / "clone2")
    report = shipping.restore(clone, rebuilders=REBUILD)
    assert report.not_shipped == {"make_c": ["c.txt"]}, report.summary()
    assert "not shipped" in report.summary()
    assert report.status  # dvc status names what is missing
    assert "out/a" in report.restored  # the rest is restored


def test_a_rebuilt_output_that_differs_from_the_lock_is_a_problem(shipped):
    _, clone = shipped

    def other(root: Path, dest: Path) -> None:
        dest.write_text("built on another machine\n")

    report = shipping.restore(clone, rebuilders={"built": other})
    assert len(report.problems) == 1 and "built" in report.problems[0] and "dvc.lock records" in report.problems[0]
    assert "PROBLEM" in report.summary()


def test_the_command_line_restores_and_reports(shipped):
    _, clone = shipped
    out = _run([sys.executable, "-m", "ragcritic_lib.pipeline.shipping", "--root", str(clone), "status"], clone)
    assert "store" in out and "b.txt" in out
    proc = subprocess.run([sys.executable, "-m", "ragcritic_lib.pipeline.shipping", "--root", str(clone), "restore"],
                          cwd=clone, env=_env(), capture_output=True, text=True)
    # `built` has no rebuilder outside the project's own outputs: named by stage, not a crash.
    assert proc.returncode == 0, proc.stderr
    assert "not shipped (make_a): built" in proc.stdout
    assert "restored: out/a" in proc.stdout


def test_clear_persisted_deletes_exactly_the_persist_outputs(repo):
    text = (repo / "dvc.yaml").read_text().replace("    outs: [side.txt]\n",
                                                     "    outs:\n      - side.txt:\n          persist: true\n")
    (repo / "dvc.yaml").write_text(text)
    assert shipping.clear_persisted(repo, stages=["make_c"]) == []   # another stage's log stays
    assert (repo / "side.txt").exists()
    assert shipping.clear_persisted(repo) == ["side.txt"]
    assert not (repo / "side.txt").exists() and (repo / "c.txt").exists()
    assert shipping.clear_persisted(repo) == []


def test_clear_persisted_of_one_stage_deletes_its_logs_only_and_names_an_unknown_stage(repo):
    text = (repo / "dvc.yaml").read_text().replace("    outs: [side.txt]\n",
                                                     "    outs:\n      - side.txt:\n          persist: true\n")
    (repo / "dvc.yaml").write_text(text)
    with pytest.raises(shipping.ShippingError, match="no stage 'sdie'.*side"):
        shipping.clear_persisted(repo, stages=["sdie"])
    assert (repo / "side.txt").exists()
    out = _run([sys.executable, "-m", "ragcritic_lib.pipeline.shipping", "--root", str(repo), "clear-persisted",
                "--stage", "side"], repo)
    assert "deleted: side.txt" in out and not (repo / "side.txt").exists()


def test_the_project_persists_the_sample_logs_a_cold_run_must_forget():
    # Two readers of the persisted logs: DVC's (clear-persisted) and a plain YAML read that does
    # not load DVC (workspace.persisted_outputs: the README's stage times and the timed copies).
    # They must agree, stage by stage, on the project's dvc.yaml.
    from ragcritic_lib import paths
    from ragcritic_lib.pipeline.workspace import persisted_outputs

    repo = shipping._repo(paths.ROOT)
    try:
        by_dvc: dict[str, list[str]] = {}
        for o in shipping.outputs(repo):
            if o.persist:
                by_dvc.setdefault(o.stage, []).append(o.path)
    finally:
        shipping._close(repo)
    assert persisted_outputs(paths.ROOT) == by_dvc != {}


def test_the_assets_rebuild_reads_params_yaml_and_names_a_missing_section(tmp_path, monkeypatch):
    from ragcritic_lib.data import assets

    calls = []
    monkeypatch.setattr(assets, "build_assets", lambda dest, **kw: calls.append((dest, kw)))
    (tmp_path / "params.yaml").write_text("assets:\n  seed: 7\n  model_dtype: float32\n")
    shipping.REBUILDERS["data/assets"](tmp_path, tmp_path / "data" / "assets")
    assert calls == [(tmp_path / "data" / "assets",
                      {"requirements": tmp_path / "requirements-assets.txt", "seed": 7, "model_dtype": "float32"})]
    (tmp_path / "params.yaml").write_text("common: {}\n")
    with pytest.raises(shipping.ShippingError, match="params.yaml: no 'assets' section"):
        shipping.REBUILDERS["data/assets"](tmp_path, tmp_path / "data" / "assets")


def test_a_partial_ship_carries_the_stages_that_are_up_to_date_and_keeps_the_others_restorable(repo, tmp_path):
    shipping.ship(repo)
    first = _store_objects(repo)
    shipping.commit_all(repo, "a shipped run")
    # A run that spans sittings: make_a re-ran, make_b, make_c and side have not yet.
    shipping.set_param(repo, "a.k", 2)
    from dvc.repo import Repo

    with contextlib.chdir(repo), Repo(str(repo)) as dvc_repo:
        dvc_repo.reproduce("make_a", single_item=True)
    with pytest.raises(shipping.ShippingError, match="--partial"):
        shipping.ship(repo)
    report = shipping.ship(repo, partial=True)
    # dvc status calls make_c up to date: its input b.txt has not changed yet.
    assert report.not_up_to_date == ["make_b", "side"]
    assert report.outputs == 2 and report.new_objects > 0
    assert "left out, not up to date (2 stage(s)" in report.summary()
    second = _store_objects(repo)
    new_x = _md5(b"a=2\n")
    assert f"files/md5/{new_x[:2]}/{new_x[2:]}" in second
    # The old listing of out/a is named by no lock entry any more and goes (its x.txt, the same
    # bytes as side.txt, which side's lock entry names, stays); what make_b and make_c locked stays.
    old_dir, new_dir = ({p for p in objs if p.endswith(".dir")} for objs in (first, second))
    assert len(old_dir) == len(new_dir) == 1 and not old_dir & new_dir and report.pruned_objects == 1
    side = _md5(b"a=1\n")
    assert f"files/md5/{side[:2]}/{side[2:]}" in second
    b_obj, c_obj = _md5(b"a=1\na=1\n"), _md5(b"A=1\nA=1\n")
    for oid in (b_obj, c_obj):
        assert f"files/md5/{oid[:2]}/{oid[2:]}" in first and f"files/md5/{oid[:2]}/{oid[2:]}" in second
    shipping.commit_all(repo, "make_a shipped; the rest to follow")
    clone = shipping.clone_repository(repo, tmp_path / "clone2")
    restored = shipping.restore(clone, rebuilders=REBUILD)
    assert not restored.problems and not restored.not_shipped
    assert (clone / "out/a/x.txt").read_text() == "a=2\n" and (clone / "c.txt").read_text() == "A=1\nA=1\n"
    assert not _clean(clone)  # make_b and the stages after it are still to run, as dvc status says


def test_a_partial_ship_with_nothing_up_to_date_refuses(repo):
    for name in ("mk_b.py", "mk_c.py"):
        (repo / name).write_text((repo / name).read_text() + "# edited\n")
    (repo / "out/a/x.txt").write_text("a=edited by hand\n")  # make_a's output and side's input
    with pytest.raises(shipping.ShippingError, match="no stage is up to date"):
        shipping.ship(repo, partial=True)


def test_dvc_targets_name_the_file_then_whole_stages_then_single_paths(tmp_path):
    out = lambda stage, path, cached=True: shipping.Output(stage, path, cached, "0" * 32, None, None)  # noqa: E731
    every = [out("a", "out/a"), out("a", "built", cached=False), out("b", "b1"), out("b", "b2"), out("c", "c.txt")]
    a, b1, b2, c = (o for o in every if o.cached)
    project = str(tmp_path / "dvc.yaml")
    # Every cached output: the file itself, one read of dvc.yaml and dvc.lock.
    assert shipping._dvc_targets(tmp_path, every, [a, b1, b2, c]) == [[project]]
    # Whole stages by name, then a stage of which only some outputs are chosen, by path, apart.
    assert shipping._dvc_targets(tmp_path, every, [a, b2, c]) == [[f"{project}:a", f"{project}:c"], [str(tmp_path / "b2")]]
    assert shipping._dvc_targets(tmp_path, every, [b1, b2]) == [[f"{project}:b"]]
    assert shipping._dvc_targets(tmp_path, every, [b1]) == [[str(tmp_path / "b1")]]
    assert shipping._dvc_targets(tmp_path, every, []) == []
