"""Stage import closures against dvc.yaml deps."""

import textwrap

import pytest
import yaml

from ragcritic_lib import paths
from ragcritic_lib.pipeline.deps import (
    TemplateError, add_missing, collapse_packages, drop_extra, extra_deps, import_closure, literal_duplicates, load_pipeline, main,
    missing_deps, resolve_dvc, stage_closure, unproduced_deps,
)


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
            cmd: python -m ragcritic_lib.pipeline.stage notebooks/01_x.py
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
    _, dvc, _ = load_pipeline()
    assert missing_deps(dvc) == {}, "run `python -m ragcritic_lib.pipeline.deps fix`"
    assert extra_deps(dvc) == {}, "run `python -m ragcritic_lib.pipeline.deps fix`"


def test_check_only_imports_are_not_dependencies(tmp_path):
    _toy_repo(tmp_path)
    _write(tmp_path, "ragcritic_lib/d.py", "x = 1\ndef check():\n    from .unused import y  # deps: check-only\n")
    assert "ragcritic_lib/unused.py" not in import_closure("notebooks/01_x.py", root=tmp_path)
    _write(tmp_path, "ragcritic_lib/d.py", "x = 1\ndef check():\n    from .unused import y  # validates\n")
    assert "ragcritic_lib/unused.py" in import_closure("notebooks/01_x.py", root=tmp_path)


def test_extra_library_deps_are_found_and_dropped(tmp_path):
    _toy_repo(tmp_path)
    _write(tmp_path, "ragcritic_lib/pipeline/stage.py", "from . import d\n")
    text = textwrap.dedent("""\
        stages:
          x:
            cmd: python -m ragcritic_lib.pipeline.stage notebooks/01_x.py
            deps:
              - ragcritic_lib/pipeline/stage.py
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
    assert "ragcritic_lib/pipeline/stage.py" in stage_closure(dvc["stages"]["x"]["cmd"], root=tmp_path)
    # Packages run through whole are listed as their folders, so their files are extra.
    assert missing_deps(dvc, root=tmp_path) == {"x": ["ragcritic_lib/pipeline", "ragcritic_lib/sub"]}
    assert extra_deps(dvc, root=tmp_path) == {"x": [
        "ragcritic_lib/pipeline/stage.py", "ragcritic_lib/sub/__init__.py", "ragcritic_lib/sub/c.py",
        "ragcritic_lib/unused.py"]}
    text = drop_extra(add_missing(text, missing_deps(dvc, root=tmp_path)), extra_deps(dvc, root=tmp_path))
    fixed = yaml.safe_load(text)
    assert missing_deps(fixed, root=tmp_path) == {} and extra_deps(fixed, root=tmp_path) == {}
    assert "data/x_in" in fixed["stages"]["x"]["deps"] and "ragcritic_lib/sub" in fixed["stages"]["x"]["deps"]


def test_a_package_is_collapsed_only_when_run_through_whole(tmp_path):
    _toy_repo(tmp_path)
    _write(tmp_path, "ragcritic_lib/sub/other.py", "y = 2\n")
    closure = import_closure("notebooks/01_x.py", root=tmp_path)
    assert collapse_packages(closure, root=tmp_path) == closure  # sub/other.py is never imported
    _write(tmp_path, "ragcritic_lib/sub/__init__.py", "from . import other\n")
    closure = import_closure("notebooks/01_x.py", root=tmp_path)
    collapsed = collapse_packages(closure, root=tmp_path)
    assert "ragcritic_lib/sub" in collapsed and not any(p.startswith("ragcritic_lib/sub/") for p in collapsed)
    assert "ragcritic_lib/__init__.py" in collapsed  # the package root is never collapsed
    (tmp_path / "ragcritic_lib/sub/__pycache__").mkdir()
    (tmp_path / "ragcritic_lib/sub/__pycache__/c.cpython-311.pyc").write_bytes(b"\0")
    assert collapse_packages(closure, root=tmp_path) == collapsed  # bytecode caches are not files of the package


_TEMPLATED = """\
stages:
  train:
    cmd: python -m ragcritic_lib.pipeline.stage notebooks/01_x.py
    deps:
      - ragcritic_lib/a.py
      - ${train.recipe}          # the recipe
      - ${train.critic_dir}/merged
      - data/other
    params:
      - train
    outs:
      - data/train
"""


def test_templates_resolve_from_params_and_name_a_missing_key():
    params = {"train": {"recipe": "configs/r.yaml", "critic_dir": "data/critic"}}
    deps = resolve_dvc(yaml.safe_load(_TEMPLATED), params)["stages"]["train"]["deps"]
    assert deps == ["ragcritic_lib/a.py", "configs/r.yaml", "data/critic/merged", "data/other"]
    with pytest.raises(TemplateError, match=r"stage train: \$\{train\.recipe\}: params.yaml has no key train.recipe"):
        resolve_dvc(yaml.safe_load(_TEMPLATED), {"train": {"critic_dir": "data/critic"}})
    with pytest.raises(TemplateError, match=r"train\.recipe is dict"):
        resolve_dvc(yaml.safe_load(_TEMPLATED), {"train": {"recipe": {"a": 1}, "critic_dir": "x"}})


def test_fix_keeps_templates_as_written(tmp_path, monkeypatch):
    _toy_repo(tmp_path)
    (tmp_path / "params.yaml").write_text("train:\n  recipe: configs/r.yaml\n  critic_dir: data/critic\n")
    (tmp_path / "dvc.yaml").write_text(_TEMPLATED)
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setattr(paths, "DVC_FILE", tmp_path / "dvc.yaml")
    monkeypatch.setattr(paths, "PARAMS_FILE", tmp_path / "params.yaml")
    main(["fix"])
    text = (tmp_path / "dvc.yaml").read_text()
    assert "      - ${train.recipe}          # the recipe\n      - ${train.critic_dir}/merged\n" in text
    assert "      - ragcritic_lib/b.py\n" in text  # the closure was completed around them


def test_literal_copies_of_a_stage_path_param_are_found():
    params = {"train": {"recipe": "configs/r.yaml", "critic_dir": "data/critic", "table": "t/x.csv"},
              "common": {"model": "data/models/m"}}
    dvc = yaml.safe_load(textwrap.dedent("""\
        stages:
          train:
            deps: [configs/r.yaml, data/critic/merged, reports/tables/t/x.csv, data/models/m, '${train.recipe}']
            params: [common, train]
          other:
            deps: [configs/r.yaml]   # reads no train params: a path of its own
            params: [other]
        """))
    assert literal_duplicates(dvc, params) == {"train": [
        "configs/r.yaml (write ${train.recipe})", "data/critic/merged (write ${train.critic_dir}/merged)",
        "reports/tables/t/x.csv (write reports/tables/${train.table})"]}


def test_inter_stage_paths_are_declared_once_in_params():
    # A path a stage reads from its params (a recipe, the critic it loads, ...) is written in dvc.yaml
    # as ${section.key}; a literal copy would stay behind when params.yaml (or a profile) changes it.
    raw, _, params = load_pipeline()
    assert literal_duplicates(raw, params) == {}, "write the paths as ${...} templates in dvc.yaml"


def test_resolved_deps_exist_or_come_out_of_another_stage():
    _, dvc, _ = load_pipeline()
    assert unproduced_deps(dvc) == {}


def test_data_files_named_by_a_module_join_the_closure(tmp_path):
    _toy_repo(tmp_path)
    _write(tmp_path, "ragcritic_lib/d.py", 'DATA_FILES = ("words.yaml",)\nx = 1\n')
    _write(tmp_path, "ragcritic_lib/words.yaml", "a: 1\n")
    closure = import_closure("notebooks/01_x.py", root=tmp_path)
    assert "ragcritic_lib/words.yaml" in closure and "ragcritic_lib/d.py" in closure
    _write(tmp_path, "ragcritic_lib/d.py", "DATA_FILES = tuple(sorted(['words.yaml']))\n")
    with pytest.raises(ValueError, match="DATA_FILES must be a literal"):
        import_closure("notebooks/01_x.py", root=tmp_path)


def test_testbed_stage_depends_on_the_vocabulary_file():
    assert "ragcritic_lib/testbed/vocabulary.yaml" in import_closure("notebooks/00_testbed.py")
