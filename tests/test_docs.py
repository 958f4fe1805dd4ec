"""Docs that cannot drift: every file path, module, make target and params key that README.md and
docs/ name in code spans exists, and every generated block in them equals what the metrics give.

What counts as existing, for a path: a file or folder in the repository (relative to the root, the
page's folder or ``ragcritic_lib/``); a stage output that dvc.yaml declares (or a path inside one);
a place a documented command makes (:data:`MADE_BY_COMMANDS`); or, for a bare file name, a file of
that name in the repository or a name the library writes (a string literal in its code).
Placeholders (``NN_name``, ``<stem>``, globs) are not paths.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from ragcritic_lib import paths
from ragcritic_lib.pipeline import readme
from ragcritic_lib.pipeline.workspace import _listed_files

ROOT = paths.ROOT
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Made by a command the docs name, so possibly absent from a fresh clone: caches and environments,
# the HTML report (`make report`), the exercise notebooks (`make exercises`), executed notebooks (a
# stage run), and what benchmarks and `ci_budget record` write under reports/benchmarks/.
MADE_BY_COMMANDS = (".cache/", ".venv/", "reports/html/", "notebooks/exercises/", "reports/notebooks/",
                    "reports/benchmarks/")
_SPAN = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^(?:\.?[\w\-]+/)+[\w\-.]*$|^[\w\-.]+\.(?:py|md|yaml|yml|json|jsonl|txt|toml|sh|ipynb|lock)$")
_MODULE = re.compile(r"^ragcritic_lib(?:\.\w+)+$")
_PARAM = re.compile(r"^([a-z_]+)\.([a-z_0-9]+)(?:\.([a-z_0-9]+))?$")
_PLACEHOLDER = re.compile(r"NN_|[<>*{}$]|\.\.\.|/NN")


def _spans(page: Path) -> list[str]:
    return [m.group(1).strip() for m in _SPAN.finditer(page.read_text(encoding="utf-8"))]


@lru_cache(maxsize=1)
def _tree() -> tuple[set[str], set[str]]:
    """The repository's visible files and their names."""
    files = set(_listed_files(ROOT))
    return files, {Path(f).name for f in files}


@lru_cache(maxsize=1)
def _stage_outputs() -> tuple[str, ...]:
    stages = yaml.safe_load(paths.DVC_FILE.read_text(encoding="utf-8"))["stages"]
    outs = []
    for stage in stages.values():
        for out in stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", []):
            outs.append((out if isinstance(out, str) else next(iter(out))).rstrip("/"))
    return tuple(outs)


@lru_cache(maxsize=1)
def _library_literals() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "ragcritic_lib").rglob("*.py"))


@lru_cache(maxsize=1)
def _make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.\-/]+)\s*:(?!=)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))


def path_exists(name: str, page: Path) -> bool:
    """Whether a path a page names is there, or is made by the pipeline or a documented command."""
    rel = name.rstrip("/")
    if any((base / rel).exists() for base in (ROOT, page.parent, ROOT / "ragcritic_lib")):
        return True
    if any(rel == out or rel.startswith(out + "/") for out in _stage_outputs()):
        return True
    if any((rel + "/").startswith(made) for made in MADE_BY_COMMANDS):
        return True
    if "/" not in rel:
        return rel in _tree()[1] or f'"{rel}"' in _library_literals() or f"'{rel}'" in _library_literals()
    return False


def module_exists(name: str) -> bool:
    """A module of the library, or a name defined at the top of one (``module.function``)."""
    def spec(n: str):
        try:
            return importlib.util.find_spec(n)
        except (ImportError, AttributeError, ValueError):
            return None

    if spec(name) is not None:
        return True
    module, _, attr = name.rpartition(".")
    found = spec(module)
    if found is None or not found.origin or not found.origin.endswith(".py"):
        return False
    source = Path(found.origin).read_text(encoding="utf-8")
    return re.search(rf"^(?:def|class|async def) {re.escape(attr)}\b|^{re.escape(attr)}\s*[:=]", source, re.M) is not None


def param_exists(section: str, key: str, sub: str | None) -> bool:
    params = yaml.safe_load(paths.PARAMS_FILE.read_text(encoding="utf-8"))
    value = params.get(section)
    if not isinstance(value, dict) or key not in value:
        return False
    return sub is None or (isinstance(value[key], dict) and sub in value[key])


def problems(page: Path, root: Path = ROOT) -> list[str]:
    """What a page (under ``root``, for the names in messages) names in code spans that does not exist."""
    params = yaml.safe_load(paths.PARAMS_FILE.read_text(encoding="utf-8"))
    shown = page.relative_to(root).as_posix()
    found = []
    for span in _spans(page):
        if span.startswith("make ") and len(span.split()) >= 2:
            target = span.split()[1]
            if "=" not in target and target not in _make_targets():
                found.append(f"{shown}: `{span}`: no make target {target!r} in the Makefile")
        elif _MODULE.match(span):
            if not module_exists(span):
                found.append(f"{shown}: `{span}`: no such module (or name in a module) in the library")
        elif _PATH.match(span) and not _PLACEHOLDER.search(span) and "://" not in span:
            if not path_exists(span, page):
                found.append(f"{shown}: `{span}`: no such file or folder, stage output or command-made path")
        elif (m := _PARAM.match(span)) and m.group(1) in params:
            if not param_exists(*m.groups()):
                found.append(f"{shown}: `{span}`: no such key in params.yaml")
    return found


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchors(text: str) -> set[str]:
    """The anchors a Markdown renderer gives a page's headings (GitHub's rule: lower case, spaces to
    hyphens, punctuation other than hyphens and underscores dropped)."""
    anchors = set()
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            title = re.sub(r"[`*]", "", m.group(1)).strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def link_problems(page: Path, root: Path = ROOT) -> list[str]:
    """Relative links of a page whose file, or whose #anchor in it, does not exist."""
    shown = page.relative_to(root).as_posix()
    text = page.read_text(encoding="utf-8")
    found = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            found.append(f"{shown}: link ({target}): no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest.read_text(encoding="utf-8")):
            found.append(f"{shown}: link ({target}): no heading with that anchor in {dest.name}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_path_module_target_and_param_a_page_names_exists(page):
    assert problems(page) == []


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_of_a_page_reaches_its_file_and_heading(page):
    assert link_problems(page) == []


def test_a_link_to_a_moved_heading_or_file_is_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## What ships and how to restore\n\n## The judge of `correct`\n")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md#what-ships-and-how-to-restore) [b](other.md#the-judge-of-correct) "
                    "[c](other.md#shipped-outputs) [d](gone.md) [e](https://example.org/x#y) [f](#title)\n# Title\n")
    found = link_problems(page, tmp_path)
    assert found == ["page.md: link (other.md#shipped-outputs): no heading with that anchor in other.md",
                     "page.md: link (gone.md): no such file"]


def test_the_checks_catch_what_drifted():
    page = ROOT / "docs" / "drift.md"   # never written: the checks read the spans given below
    assert not path_exists("ragcritic_lib/mining.py", page)          # a module that moved
    assert path_exists("mining/sampling.py", page)                    # relative to ragcritic_lib/
    assert path_exists("data/critic_sft", page)                       # a stage output
    assert path_exists("reports/html/index.html", page)               # made by `make report`
    assert not path_exists("reports/nowhere.md", page)
    assert path_exists("ship_manifest.json", page)                    # a name the library writes
    assert not path_exists("never_written_anywhere.json", page)
    assert module_exists("ragcritic_lib.pipeline.readme")
    assert module_exists("ragcritic_lib.baselines.simrag.stage_match_fn")
    assert not module_exists("ragcritic_lib.critic_data")
    assert not module_exists("ragcritic_lib.baselines.simrag.no_such_function")
    assert param_exists("critic_sft", "epochs", None)
    assert not param_exists("critic_sft", "no_such_key", None)
    assert "test" in _make_targets() and "restore" in _make_targets() and "PHONY" not in _make_targets()


def test_a_page_with_stale_names_is_reported_name_by_name(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "stale.md"
    page.write_text("Run `make nothing-like-this`, read `ragcritic_lib/rag.py` and `ragcritic_lib.critic_data`, "
                    "set `critic_sft.no_such_key`; `make test`, `ragcritic_lib.mining` and `critic_sft.epochs` "
                    "are fine.\n")
    found = problems(page, tmp_path)
    assert len(found) == 4, found
    assert any("make target 'nothing-like-this'" in f for f in found)
    assert any("`ragcritic_lib/rag.py`" in f for f in found)
    assert any("`ragcritic_lib.critic_data`" in f for f in found)
    assert all(f.startswith("docs/stale.md: ") for f in found)
    assert any("`critic_sft.no_such_key`" in f for f in found)


def test_every_page_with_generated_blocks_is_checked_against_the_metrics():
    with_blocks = [p for p in PAGES if "<!-- BEGIN generated:" in p.read_text(encoding="utf-8")]
    assert set(with_blocks) <= set(readme.target_files()), "a page with generated blocks that `make readme` skips"
    assert readme.check(with_blocks) == []
