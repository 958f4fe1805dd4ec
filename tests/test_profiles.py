"""Params profiles applied in place: params.yaml keeps its comments and layout, only the
profile's keys change, the values equal the merge of the profile over params.yaml, a key that
params.yaml lacks is an error, and a failed write leaves the old file whole."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ragcritic_lib import paths
from ragcritic_lib.pipeline.params import ParamsError, deep_merge, profile_params
from ragcritic_lib.pipeline.profiles import (
    OPEN_SECTIONS,
    apply_profile,
    overlay_text,
    render_value,
    reset_params,
)

PROFILES = paths.CONFIGS_DIR / "profiles"
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):")


def _line_paths(text: str) -> dict[int, str]:
    """Line index -> dotted key of every ``key:`` line of a block-style YAML mapping."""
    out, stack = {}, []  # stack of (indent, key)
    for i, line in enumerate(text.splitlines()):
        m = _KEY_LINE.match(line)
        if not m:
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group("key")))
        out[i] = ".".join(k for _, k in stack)
    return out


def _leaves(mapping, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}" if prefix else key
        out.update(_leaves(value, dotted) if isinstance(value, dict) else {dotted: value})
    return out


def _get(mapping, dotted: str):
    for part in dotted.split("."):
        mapping = mapping[part]
    return mapping


def _comment(line: str) -> str | None:
    m = re.search(r"\s#(.*)$", line)
    return m.group(1) if m else None


@pytest.fixture()
def params_copy(tmp_path) -> Path:
    target = tmp_path / "params.yaml"
    target.write_bytes(paths.PARAMS_FILE.read_bytes())
    return target


@pytest.mark.parametrize("name", ["smoke", "workshop"])
def test_profile_changes_only_its_keys_and_keeps_every_comment(params_copy, name):
    before = params_copy.read_text(encoding="utf-8")
    old_merge, _ = profile_params(name, params_path=params_copy)  # the merge the old command dumped
    returned = apply_profile(name, params_path=params_copy)
    after = params_copy.read_text(encoding="utf-8")

    assert yaml.safe_load(after) == old_merge == returned
    old_lines, new_lines = before.splitlines(), after.splitlines()
    assert len(new_lines) == len(old_lines)
    line_paths = _line_paths(before)
    profile = _leaves(yaml.safe_load((PROFILES / f"{name}.yaml").read_text(encoding="utf-8")))
    base = yaml.safe_load(before)
    changed = {i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b}
    # Exactly the lines of the profile's keys whose value differs from params.yaml's.
    assert {line_paths[i] for i in changed} == {k for k, v in profile.items() if _get(base, k) != v}
    for i, (old, new) in enumerate(zip(old_lines, new_lines)):
        if i not in changed:
            continue
        assert _KEY_LINE.match(new).group() == _KEY_LINE.match(old).group()
        assert _comment(new) == _comment(old)
        if _comment(old) is not None and len(new.split("#")[0].rstrip()) < old.index("#"):
            assert new.index("#") == old.index("#"), new  # comment column kept where there is room
    # Comments and blank lines are all still there, in place.
    for old, new in zip(old_lines, new_lines):
        if not old.strip() or old.lstrip().startswith("#"):
            assert new == old


def test_profile_is_idempotent_and_matches_the_merge_for_every_profile(params_copy):
    for prof in sorted(PROFILES.glob("*.yaml")):
        params_copy.write_bytes(paths.PARAMS_FILE.read_bytes())
        old_merge, _ = profile_params(prof.stem, params_path=params_copy)
        apply_profile(prof.stem, params_path=params_copy)
        once = params_copy.read_text(encoding="utf-8")
        assert yaml.safe_load(once) == old_merge, prof.name
        apply_profile(prof.stem, params_path=params_copy)
        assert params_copy.read_text(encoding="utf-8") == once, prof.name


def test_gpu_profile_adds_optional_generator_keys_inside_their_section(params_copy):
    apply_profile("gpu", params_path=params_copy)
    text = params_copy.read_text(encoding="utf-8")
    line_paths = _line_paths(text)
    lines = text.splitlines()
    at = {p: i for i, p in line_paths.items()}
    for key in ("gpu_memory_utilization", "max_model_len", "tensor_parallel_size"):
        i = at[f"common.generator.{key}"]
        assert lines[i].startswith(f"    {key}: ")
        assert at["common.generator.max_input_tokens"] < i < at["common.retriever"]
    assert at["common.retriever.batch_size"] < at["common.retriever.device"] < at["common.datasets"]
    # Every comment line of the committed file is still there.
    comments = [line for line in paths.PARAMS_FILE.read_text(encoding="utf-8").splitlines()
                if line.lstrip().startswith("#")]
    assert [line for line in lines if line.lstrip().startswith("#")] == comments


def _profile(tmp_path, monkeypatch, body: str) -> Path:
    configs = tmp_path / "configs"
    (configs / "profiles").mkdir(parents=True)
    prof = configs / "profiles" / "mine.yaml"
    prof.write_text(body, encoding="utf-8")
    monkeypatch.setattr(paths, "CONFIGS_DIR", configs)
    return prof


@pytest.mark.parametrize("body, needles", [
    ("retrieval_rag:\n  top_k: 4\n  top_kk: 5\n", ["retrieval_rag.top_kk: not in"]),
    ("nosuch:\n  a: 1\n", ["nosuch: not in"]),
    ("common:\n  seed: {a: 1}\n", ["common.seed: a mapping in the profile"]),
    ("common:\n  generator: 3\n", ["common.generator: a mapping in", "a single value in the profile"]),
])
def test_key_params_yaml_lacks_is_an_error_and_nothing_is_written(tmp_path, monkeypatch, params_copy, body, needles):
    prof = _profile(tmp_path, monkeypatch, body)
    before = params_copy.read_bytes()
    with pytest.raises(ParamsError) as err:
        apply_profile("mine", params_path=params_copy)
    assert str(prof) in str(err.value)
    for needle in needles:
        assert needle in str(err.value)
    assert params_copy.read_bytes() == before
    assert sorted(p.name for p in params_copy.parent.iterdir()) == ["configs", "params.yaml"]


def test_misspelt_key_in_an_open_section_fails_validation_and_nothing_is_written(tmp_path, monkeypatch, params_copy):
    assert "common.generator" in OPEN_SECTIONS
    _profile(tmp_path, monkeypatch, "common:\n  generator:\n    batchsize: 4\n")
    before = params_copy.read_bytes()
    with pytest.raises(ParamsError, match=r"common\.generator\.batchsize: unknown key") as err:
        apply_profile("mine", params_path=params_copy)
    assert "mine.yaml" in str(err.value)
    assert params_copy.read_bytes() == before


def test_invalid_value_fails_validation_and_nothing_is_written(tmp_path, monkeypatch, params_copy):
    _profile(tmp_path, monkeypatch, "retrieval_rag:\n  top_k: -3\n")
    before = params_copy.read_bytes()
    with pytest.raises(ParamsError, match=r"retrieval_rag\.top_k: must be >= 1"):
        apply_profile("mine", params_path=params_copy)
    assert params_copy.read_bytes() == before


def test_failed_write_leaves_the_old_file_whole(params_copy, monkeypatch):
    before = params_copy.read_bytes()

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        apply_profile("workshop", params_path=params_copy)
    assert params_copy.read_bytes() == before
    assert [p.name for p in params_copy.parent.iterdir()] == ["params.yaml"]  # no temporary file left


def test_overlay_text_keeps_quoting_nulls_and_alignment():
    text = ('# head\n'
            'a:\n'
            '  ks: "1,3,5"        # quoted\n'
            "  s: 'x'\n"
            '  n:\n'
            '  long: 7            # aligned\n'
            '\n'
            '# tail\n'
            'b:\n'
            '  flow: [1, 2]\n'
            '  x: 1')  # no newline at the end
    out = overlay_text(text, {"a": {"ks": "2,4", "s": "it's", "n": 5, "long": 123456789012345678},
                              "b": {"flow": [3], "x": 2.5}})
    assert out == ('# head\n'
                   'a:\n'
                   '  ks: "2,4"          # quoted\n'
                   "  s: 'it''s'\n"
                   '  n: 5\n'
                   '  long: 123456789012345678 # aligned\n'
                   '\n'
                   '# tail\n'
                   'b:\n'
                   '  flow: [3]\n'
                   '  x: 2.5')
    assert yaml.safe_load(out) == deep_merge(yaml.safe_load(text), {
        "a": {"ks": "2,4", "s": "it's", "n": 5, "long": 123456789012345678}, "b": {"flow": [3], "x": 2.5}})


def test_overlay_text_adds_to_an_open_section_at_the_end_of_a_file():
    text = "common:\n  seed: 1\n  generator:\n    backend: hf   # which\n    model: m"
    out = overlay_text(text, {"common": {"generator": {"device": "cuda", "max_model_len": 8}}})
    assert out == ("common:\n  seed: 1\n  generator:\n    backend: hf   # which\n    model: m\n"
                   "    device: cuda\n    max_model_len: 8\n")
    with pytest.raises(ParamsError, match=r"common\.device: not in"):
        overlay_text(text, {"common": {"device": "cuda"}})


@pytest.mark.parametrize("value", ["yes", "12", "", "a: b", "#x", "null", "1e3", "tab\tand \"q\"", "é", 0.1, -1,
                                   True, None, 1e-5])
def test_rendered_values_read_back_with_their_type(value):
    for style in (None, '"', "'"):
        loaded = yaml.safe_load(f"k: {render_value(value, style)}\n")["k"]
        assert loaded == value and type(loaded) is type(value)


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAGCRITIC_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", "ragcritic_lib.pipeline.profiles", *args], cwd=paths.ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_profile_and_reset_in_a_git_checkout(tmp_path):
    root = tmp_path / "repo"
    (root / "data").mkdir(parents=True)
    for rel in ("notebooks", "configs", "data/taxonomy"):
        (root / rel).symlink_to(paths.ROOT / rel)
    (root / "dvc.yaml").write_text(paths.DVC_FILE.read_text(encoding="utf-8"))
    committed = paths.PARAMS_FILE.read_bytes()
    (root / "params.yaml").write_bytes(committed)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "params.yaml"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "params"], cwd=root, check=True)

    res = _cli(root, "workshop")
    assert res.returncode == 0, res.stderr
    text = (root / "params.yaml").read_text(encoding="utf-8")
    assert "corpus_articles: 2000     # 0 = every article" in text
    assert text.startswith("# Every tunable of the pipeline.")

    res = _cli(root, "--reset")
    assert res.returncode == 0 and "restored from git HEAD" in res.stdout, res.stderr
    assert (root / "params.yaml").read_bytes() == committed

    res = _cli(root)
    assert res.returncode == 2 and "give a profile NAME or --reset" in res.stderr


def test_reset_outside_git_is_one_clear_error(tmp_path):
    target = tmp_path / "params.yaml"
    target.write_text("common: {}\n", encoding="utf-8")
    env_dir = tmp_path  # not a repository (tmp folders are outside any checkout)
    if subprocess.run(["git", "rev-parse"], cwd=env_dir, capture_output=True).returncode == 0:
        pytest.skip("the temporary folder is inside a git repository")
    with pytest.raises(ParamsError, match="no committed version to go back to"):
        reset_params(target)
    assert target.read_text(encoding="utf-8") == "common: {}\n"


def test_overlay_text_sets_a_trailing_null_and_adds_after_it():
    text = "common:\n  generator:\n    backend: hf\n    device:"
    out = overlay_text(text, {"common": {"generator": {"device": "cpu", "max_model_len": 8}}})
    assert out == "common:\n  generator:\n    backend: hf\n    device: cpu\n    max_model_len: 8\n"
