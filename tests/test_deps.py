"""Stage import closures against dvc.yaml deps."""

import textwrap

import yaml

from ragcritic_lib import paths
from ragcritic_lib.deps import add_missing, drop_extra, extra_deps, import_closure, missing_deps, stage_closure


def _write(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))


def _toy_repo(root):
    _write(root, "ragcritic_lib/__init__.py", "")
    _write(root, "ragcritic_lib/a.py", "from . import b\n")
    _write(root, "ragcritic_lib/b.py", "def f():\n    from .sub.c import g\n    return g\n")
    _write(root, "ragcritic_lib/sub/__init__.py", "")
    _write(root, "ragcritic_lib/sub/c.py", "from ..d import x\nimport numpy\n")
    _write(root, "ragcritic_lib/d.py", "x = 1\n")
    _write(root, "ragcritic_lib/unused.py", "")
    _write(root, "notebooks/01_x.py", "import os\nfrom ragcritic_lib.a import b\n")


def test_closure_follows_relative_lazy_and_package_imports(tmp_path):
    _toy_repo(tmp_path)
    assert import_closure("notebooks/01_x.py", root=tmp_path) == {
        "ragcritic_lib/__init__.py", "ragcritic_lib/a.py", "ragcritic_lib/b.py",
        "ragcritic_lib/sub/__init__.py", "ragcritic_lib/sub/c.py", "ragcritic_lib/d.py",
    }


def test_missing_deps_and_fix_keep_comments(tmp_path):
    _toy_repo(tmp_path)
    text = textwrap.dedent("""\
        # pipeline
        stages:
          x:
            cmd: python -m ragcritic_lib.stage notebooks/01_x.py
            deps:
              - notebooks/01_x.py
              - ragcritic_lib/a.py   # the entry module
              - ragcritic_lib/sub
            outs:
              - data/x
        """)
    missing = missing_deps(yaml.safe_load(text), root=tmp_path)
    assert missing == {"x": ["ragcritic_lib/__init__.py", "ragcritic_lib/b.py", "ragcritic_lib/d.py"]}
    fixed = add_missing(text, missing)
    assert "# the entry module" in fixed and fixed.startswith("# pipeline\n")
    assert missing_deps(yaml.safe_load(fixed), root=tmp_path) == {}
    assert yaml.safe_load(fixed)["stages"]["x"]["outs"] == ["data/x"]


def test_dvc_yaml_deps_cover_every_stage_import_closure():
    dvc = yaml.safe_load(paths.DVC_FILE.read_text(encoding="utf-8"))
    assert missing_deps(dvc) == {}, "run `python -m ragcritic_lib.deps fix`"
    assert extra_deps(dvc) == {}, "run `python -m ragcritic_lib.deps fix`"


def test_check_only_imports_are_not_dependencies(tmp_path):
    _toy_repo(tmp_path)
    _write(tmp_path, "ragcritic_lib/d.py", "x = 1\ndef check():\n    from .unused import y  # deps: check-only\n")
    assert "ragcritic_lib/unused.py" not in import_closure("notebooks/01_x.py", root=tmp_path)
    _write(tmp_path, "ragcritic_lib/d.py", "x = 1\ndef check():\n    from .unused import y  # validates\n")
    assert "ragcritic_lib/unused.py" in import_closure("notebooks/01_x.py", root=tmp_path)


def test_extra_library_deps_are_found_and_dropped(tmp_path):
    _toy_repo(tmp_path)
    _write(tmp_path, "ragcritic_lib/stage.py", "from . import d\n")
    text = textwrap.dedent("""\
        stages:
          x:
            cmd: python -m ragcritic_lib.stage notebooks/01_x.py
            deps:
              - ragcritic_lib/stage.py
              - ragcritic_lib/__init__.py
              - ragcritic_lib/a.py
              - ragcritic_lib/b.py
              - ragcritic_lib/unused.py   # never imported
              - ragcritic_lib/sub/__init__.py
              - ragcritic_lib/sub/c.py
              - ragcritic_lib/d.py
              - data/x_in
        """)
    dvc = yaml.safe_load(text)
    assert "ragcritic_lib/stage.py" in stage_closure(dvc["stages"]["x"]["cmd"], root=tmp_path)
    assert missing_deps(dvc, root=tmp_path) == {}
    assert extra_deps(dvc, root=tmp_path) == {"x": ["ragcritic_lib/unused.py"]}
    fixed = yaml.safe_load(drop_extra(text, extra_deps(dvc, root=tmp_path)))
    assert extra_deps(fixed, root=tmp_path) == {} and "data/x_in" in fixed["stages"]["x"]["deps"]
