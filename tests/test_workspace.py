"""Repository copies for pipeline runs, and the hand-over of the smoke run's built copy: a built copy
is reused only for the very source and profile it was built from."""

import json
import subprocess

from ragcritic_lib.pipeline import workspace
from ragcritic_lib.pipeline.workspace import built_workspace, copy_built, mark_built, source_fingerprint


def _source(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    (src / "params.yaml").write_text("x: 1\n")
    (src / ".gitignore").write_text("/data/\n")
    (src / "data").mkdir()
    (src / "data" / "big.bin").write_text("ignored output")
    subprocess.run(["git", "init", "-q"], cwd=src, check=True)
    subprocess.run(["git", "add", "pkg/a.py", ".gitignore"], cwd=src, check=True)
    return src


def test_the_fingerprint_follows_what_a_copy_holds_and_nothing_else(tmp_path):
    src = _source(tmp_path)
    first = source_fingerprint(src)
    assert first == source_fingerprint(src)
    (src / "data" / "big.bin").write_text("another ignored output")   # not copied: same fingerprint
    assert source_fingerprint(src) == first
    (src / "params.yaml").write_text("x: 2\n")                          # untracked, not ignored: copied
    assert source_fingerprint(src) != first
    (src / "params.yaml").write_text("x: 1\n")
    assert source_fingerprint(src) == first
    (src / "pkg" / "a.py").rename(src / "pkg" / "b.py")                 # same bytes, other name
    assert source_fingerprint(src) != first


def test_a_copy_holds_the_visible_files_only(tmp_path):
    src = _source(tmp_path)
    dest = workspace.copy_repository(tmp_path / "copy", src)
    assert (dest / "pkg" / "a.py").read_text() == "A = 1\n" and (dest / "params.yaml").exists()
    assert not (dest / "data").exists() and (dest / ".git").is_dir()


def test_a_built_copy_is_reused_only_for_its_source_and_profile(tmp_path):
    src = _source(tmp_path)
    fp = source_fingerprint(src)
    built = workspace.copy_repository(tmp_path / "built", src)
    assert built_workspace(built, profile="smoke", fingerprint=fp) is None        # not marked: a build that failed
    mark_built(built, fingerprint=fp, profile="smoke")
    assert built_workspace(built, profile="smoke", fingerprint=fp) == built
    assert built_workspace(str(built), profile="smoke", fingerprint=fp) == built
    assert built_workspace(built, profile="workshop", fingerprint=fp) is None
    assert built_workspace(built, profile="smoke", fingerprint="0" * 64) is None
    assert built_workspace(None, profile="smoke", fingerprint=fp) is None
    assert built_workspace("", profile="smoke", fingerprint=fp) is None
    assert built_workspace(tmp_path / "nowhere", profile="smoke", fingerprint=fp) is None
    mark_built(built, fingerprint=fp, profile="smoke", targets=["critic_dpo"])     # only part of the stages
    assert built_workspace(built, profile="smoke", fingerprint=fp) is None
    (built / workspace.BUILT_MARKER).write_text("{not json")
    assert built_workspace(built, profile="smoke", fingerprint=fp) is None
    (built / workspace.BUILT_MARKER).write_text(json.dumps(["a list"]))
    assert built_workspace(built, profile="smoke", fingerprint=fp) is None


def test_the_marker_is_out_of_the_copys_commits_and_out_of_its_copies(tmp_path):
    src = _source(tmp_path)
    built = workspace.copy_repository(tmp_path / "built", src)
    (built / "data").mkdir()
    (built / "data" / "out.txt").write_text("a stage output")
    (built / "link").symlink_to("data/out.txt")
    mark_built(built, fingerprint=source_fingerprint(src), profile="smoke")
    status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=built, capture_output=True,
                            text=True, check=True).stdout
    assert "ragcritic-built" not in status
    dest = copy_built(built, tmp_path / "reused")
    assert (dest / "data" / "out.txt").read_text() == "a stage output"
    assert (dest / "link").is_symlink() and (dest / "link").read_text() == "a stage output"
    assert not (dest / workspace.BUILT_MARKER).exists() and (built / workspace.BUILT_MARKER).exists()
    assert (dest / ".git" / "HEAD").exists()


_LOCK = """schema: '2.0'
stages:
  a:
    cmd: python -m x notebooks/01_a.py
    deps:
    - path: notebooks/01_a.py
      md5: 111
    params:
      params.yaml:
        a.k: 1
    outs:
    - path: data/a
      md5: aaa.dir
"""


def test_a_stage_fingerprint_follows_what_its_run_read_not_what_it_wrote(tmp_path):
    (tmp_path / "dvc.lock").write_text(_LOCK)
    first = workspace.lock_fingerprints(tmp_path)["a"]
    (tmp_path / "dvc.lock").write_text(_LOCK.replace("aaa.dir", "bbb.dir"))   # another output: same run
    assert workspace.lock_fingerprints(tmp_path)["a"] == first
    (tmp_path / "dvc.lock").write_text(_LOCK.replace("md5: 111", "md5: 112"))  # other code
    assert workspace.lock_fingerprints(tmp_path)["a"] != first
    (tmp_path / "dvc.lock").write_text(_LOCK.replace("a.k: 1", "a.k: 2"))      # other params
    assert workspace.lock_fingerprints(tmp_path)["a"] != first
    assert workspace.lock_fingerprints(tmp_path / "none") == {}


def test_persisted_outputs_are_read_per_stage_from_dvc_yaml(tmp_path):
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n"
        "  sample:\n    cmd: x\n    outs:\n    - data/log:\n        persist: true\n    - data/out\n"
        "    - data/table:\n        cache: false\n"
        "  other:\n    cmd: y\n    outs: [data/o]\n")
    assert workspace.persisted_outputs(tmp_path) == {"sample": ["data/log"]}
    assert workspace.persisted_outputs(tmp_path / "none") == {}
    project = workspace.persisted_outputs()   # the project's: the logs a cold copy must delete first
    assert project.get("error_sampling") == ["data/error_sampling/samples"]
    assert project.get("benchmark") == ["data/benchmark/test_pool"]


def test_timed_copies_are_appended_and_a_bad_record_names_its_entry(tmp_path):
    import pytest

    f = tmp_path / "b" / "stage_copies.json"
    assert workspace.load_copies(f) == []
    entry = {"stage": "a", "stem": "01_a", "date": "2026-12-05", "cpu_class": "avx2", "dtype": "float32",
             "wall_seconds": 61.0, "fingerprint": "f"}
    workspace.record_copy(f, entry)
    assert [e["wall_seconds"] for e in workspace.record_copy(f, {**entry, "wall_seconds": 62.0})] == [61.0, 62.0]
    with pytest.raises(workspace.CopyRecordError, match="lacks fingerprint"):
        workspace.record_copy(f, {k: v for k, v in entry.items() if k != "fingerprint"})
    f.write_text(json.dumps({"copies": [entry, {**entry, "wall_seconds": "long"}]}))
    with pytest.raises(workspace.CopyRecordError, match=r"copies\[1\]\.wall_seconds"):
        workspace.load_copies(f)
    f.write_text("{")
    with pytest.raises(workspace.CopyRecordError, match="not JSON"):
        workspace.load_copies(f)


def test_a_timed_run_writes_its_log_as_it_goes_and_fails_with_its_tail(tmp_path):
    import os
    import sys

    import pytest

    env = dict(os.environ)
    log = tmp_path / "run.log"
    script = "import sys; print('to stdout', flush=True); print('to stderr', file=sys.stderr, flush=True)"
    seconds, out = workspace.run_timed([sys.executable, "-c", script], tmp_path, env, log=log)
    assert seconds >= 0
    assert "to stdout" in out and "to stderr" in out
    assert log.read_text(encoding="utf-8") == out
    _, quiet = workspace.run_timed([sys.executable, "-c", "print('no log kept')"], tmp_path, env)
    assert quiet.strip() == "no log kept"
    failing = "import sys; print('the last words'); sys.exit(3)"
    with pytest.raises(RuntimeError, match=r"failed \(3\):\n(.|\n)*the last words"):
        workspace.run_timed([sys.executable, "-c", failing], tmp_path, env, log=tmp_path / "failed.log")
    assert "the last words" in (tmp_path / "failed.log").read_text(encoding="utf-8")


def test_a_copys_metrics_are_compared_with_the_committed_ones_times_left_out():
    committed = {"environment": {"wall_seconds": 100.0, "cpu_class": "avx512_bf16"},
                 "critic": {"auroc": 0.776, "n": 280, "train": {"seconds": 12.0}, "flag": False},
                 "seconds": {"test": 5.0},
                 "rows": [{"f1": 0.25}, {"f1": 0.30}], "mode": "dev_f1", "gone": 1.0}
    copy = {"environment": {"wall_seconds": 300.0, "cpu_class": "avx2"},
            "critic": {"auroc": 0.781, "n": 280, "train": {"seconds": 40.0}, "flag": True},
            "seconds": {"test": 9.0},
            "rows": [{"f1": 0.25}, {"f1": 0.34}], "mode": "dev_f1", "new": 2}
    vs = workspace.compare_metrics(committed, copy)
    assert vs["numbers"] == 4 and vs["equal"] == 2 and vs["within_0.01"] == 3   # auroc, n, rows[0], rows[1]
    assert vs["max_abs_diff"] == 0.04
    assert [d["key"] for d in vs["largest"]] == ["rows[1].f1", "critic.auroc"]   # ranked by relative change
    assert vs["largest"][0] == {"key": "rows[1].f1", "committed": 0.30, "copy": 0.34, "relative": 0.1176}
    assert vs["texts"] == 2 and vs["texts_equal"] == 1
    assert vs["changed_texts"] == [{"key": "critic.flag", "committed": False, "copy": True}]
    assert vs["only_committed"] == 1 and vs["only_copy"] == 1
    assert vs["headline"] == []
    named = workspace.compare_metrics(committed, copy, headline=("critic.auroc", "critic.n", "gone", "absent"))
    assert named["headline"] == [{"key": "critic.auroc", "committed": 0.776, "copy": 0.781},
                                 {"key": "critic.n", "committed": 280, "copy": 280}]   # only keys both hold
    same = workspace.compare_metrics(committed, committed)
    assert same["equal"] == same["numbers"] == 5 and same["largest"] == [] and same["max_abs_diff"] == 0.0
