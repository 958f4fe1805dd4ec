"""Which library files a pipeline stage runs through, read from the import statements.

A stage must re-run when any code it executes changes, so every library module in the import
closure of its notebook is a DVC dependency. ``import_closure`` follows ``import`` and ``from ...
import`` statements (at module level and inside functions, since lazy imports of heavy modules
still run) from a notebook's ``.py`` twin through ``ragcritic_lib``, including each package's
``__init__.py``. ``python -m ragcritic_lib.pipeline.deps check`` lists what dvc.yaml lacks, ``fix`` adds it, and
``closure NOTEBOOK`` prints one notebook's closure, and ``cycles`` lists the library's import
cycles (there are none; a test keeps it so).

An import whose line ends with the marker ``# deps: check-only`` is left out of the closure. It is
for imports that only validate parameters before a stage runs (``params.rules`` reads choice lists
from the modules that use them): such code can refuse a run but cannot change what a stage writes,
so editing, say, the planner's list of prompt variants does not re-run the retrieval stage.
``check`` also lists library files that dvc.yaml names but a stage never runs through, and ``fix``
removes them, so the deps are the closure exactly. A subpackage whose every file is in a
stage's closure is listed as its folder (``ragcritic_lib/llm``), which DVC hashes whole: the same
files in one line (``collapse_packages``). A module that reads a data file kept beside it
(the testbed's vocabulary) names it in a module-level tuple ``DATA_FILES``; those files are part
of the closure wherever the module is.

Paths that pass from one stage to the next and that a notebook reads from params.yaml (a recipe,
the critic a later stage loads, ...) are declared once, in params.yaml, and dvc.yaml names them
by DVC's templating, e.g. ``${correction.critic_dir}``. Everything here reads dvc.yaml with those
templates resolved from params.yaml (as DVC does: ``resolve_templates``), and ``check`` lists a
stage's dep or out written as a literal copy of one of its own path params (``literal_duplicates``)
and deps that neither exist nor come out of another stage (``unproduced_deps``). ``fix`` edits
lines, so templates stay as they are written.
"""

from __future__ import annotations

import argparse
import ast
import functools
import posixpath
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragcritic_lib import paths

PACKAGE = "ragcritic_lib"
CHECK_ONLY = "# deps: check-only"
# DVC's ``${key}`` (dotted keys, ``[n]`` list items); ``\${`` is DVC's escape for a literal ``${``.
TEMPLATE = re.compile(r"(?<!\\)\$\{\s*([^{}\s]+?)\s*\}")
# Sections whose path keys are not templated into dvc.yaml: ``common`` names the generator (a
# served model name for the openai backend, not a path DVC could hash) and an open set of datasets.
UNTEMPLATED_SECTIONS = ("common",)


class TemplateError(ValueError):
    """A ``${...}`` in dvc.yaml that params.yaml cannot fill."""


def param_value(params: Mapping[str, Any], key: str) -> Any:
    """The value of a dotted params key (``a.b.c``, ``a.list[0]``); KeyError naming the first missing part."""
    node: Any = params
    done: list[str] = []
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(node, list) or index >= len(node):
                raise KeyError(f"{'.'.join(done) or 'params.yaml'} has no item {part}")
            node = node[index]
        else:
            if not isinstance(node, Mapping) or part not in node:
                raise KeyError(f"{'.'.join(done) or 'params.yaml'} has no key {part!r}")
            node = node[part]
        done.append(part)
    return node


def _resolve_str(text: str, params: Mapping[str, Any], where: str) -> str:
    def fill(match: re.Match) -> str:
        key = match.group(1)
        try:
            value = param_value(params, key)
        except KeyError as exc:
            raise TemplateError(f"dvc.yaml {where}: ${{{key}}}: params.yaml has no key {key} "
                                f"({exc.args[0]})") from None
        if isinstance(value, (Mapping, list)) or value is None:
            raise TemplateError(f"dvc.yaml {where}: ${{{key}}}: params.yaml {key} is "
                                f"{type(value).__name__}, not a string or number")
        return str(value).lower() if isinstance(value, bool) else str(value)

    return TEMPLATE.sub(fill, text).replace("\\${", "${")


def resolve_templates(value: Any, params: Mapping[str, Any], *, where: str = "") -> Any:
    """``value`` (a dvc.yaml node) with every ``${key}`` in its strings and mapping keys filled from ``params``.

    Raises:
        TemplateError: naming the key when params.yaml lacks it or holds a mapping or list there.
    """
    if isinstance(value, str):
        return _resolve_str(value, params, where)
    if isinstance(value, list):
        return [resolve_templates(v, params, where=where) for v in value]
    if isinstance(value, Mapping):
        return {resolve_templates(k, params, where=where): resolve_templates(v, params, where=where)
                for k, v in value.items()}
    return value


def resolve_dvc(dvc: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """dvc.yaml's content with its templates resolved from params.yaml, stage by stage."""
    if "vars" in dvc or any(isinstance(s, Mapping) and "vars" in s for s in (dvc.get("stages") or {}).values()):
        raise TemplateError("dvc.yaml: `vars` is not supported here; templates are filled from params.yaml")
    out = {key: resolve_templates(value, params, where=key) for key, value in dvc.items() if key != "stages"}
    out["stages"] = {name: resolve_templates(stage, params, where=f"stage {name}")
                     for name, stage in (dvc.get("stages") or {}).items()}
    return out


def load_pipeline(root: Path | None = None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """dvc.yaml as written, the same with its templates resolved, and params.yaml (under ``root``)."""
    import yaml

    root = Path(root or paths.ROOT)
    raw = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8")) or {}
    params = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8")) or {}
    return raw, resolve_dvc(raw, params), params


def _entry_path(entry: Any) -> str:
    return entry if isinstance(entry, str) else next(iter(entry))


def _stage_paths(stage: Mapping[str, Any], fields=("deps", "outs", "metrics", "plots")) -> list[str]:
    return [_entry_path(e) for f in fields for e in (stage.get(f) or [])]


def stage_path_params(stage: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, str]:
    """``{dotted key: value}`` of the path-shaped strings (with a ``/``) among a stage's declared params,
    leaving out ``UNTEMPLATED_SECTIONS``."""
    found: dict[str, str] = {}

    def walk(key: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{key}.{k}", v)
        elif isinstance(value, str) and "/" in value and "{" not in value and "://" not in value:
            found[key] = posixpath.normpath(value)

    for entry in stage.get("params") or []:
        if not isinstance(entry, str) or entry.split(".")[0] in UNTEMPLATED_SECTIONS:
            continue  # a mapping entry names another params file
        try:
            walk(entry, param_value(params, entry))
        except KeyError:
            continue  # `params check` and DVC report a missing key
    return found


def literal_duplicates(dvc: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per stage, its deps and outs written as a literal copy of one of its own path params.

    ``dvc`` is dvc.yaml as written. A literal equal to a param's value, inside it, or ending with it
    (a param relative to a folder, e.g. ``analysis.ragec_types_table`` under reports/tables/) is a
    second declaration of the path: when params.yaml changes, DVC would go on tracking the old one.
    """
    out: dict[str, list[str]] = {}
    for name, stage in (dvc.get("stages") or {}).items():
        values = stage_path_params(stage, params)
        found = []
        for path in _stage_paths(stage):
            if TEMPLATE.search(path):
                continue
            norm = posixpath.normpath(path)
            for key, value in values.items():
                if norm == value or norm.startswith(value + "/"):
                    found.append(f"{path} (write ${{{key}}}{norm[len(value):]})")
                elif norm.endswith("/" + value):
                    found.append(f"{path} (write {norm[: -len(value)]}${{{key}}})")
        if found:
            out[name] = found
    return out


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def stage_reads(dvc: Mapping[str, Any], stage: str) -> dict[str, list[str]]:
    """``{producing stage: [deps of stage that are, or lie under, its outputs]}`` (resolved dvc.yaml);
    empty for a stage dvc.yaml does not have."""
    stages = dvc.get("stages") or {}
    if stage not in stages:
        return {}
    deps = [posixpath.normpath(d) for d in _stage_paths(stages[stage], ("deps",))]
    out: dict[str, list[str]] = {}
    for other, spec in stages.items():
        outs = [posixpath.normpath(p) for p in _stage_paths(spec, ("outs", "metrics", "plots"))]
        read = [d for d in deps if other != stage and any(_under(d, o) or _under(o, d) for o in outs)]
        if read:
            out[other] = read
    return out


def unproduced_deps(dvc: Mapping[str, Any], *, root: Path | None = None) -> dict[str, list[str]]:
    """Per stage, resolved deps that do not exist under ``root`` and that no other stage writes."""
    root = Path(root or paths.ROOT)
    stages = dvc.get("stages") or {}
    outs = {name: [posixpath.normpath(p) for p in _stage_paths(s, ("outs", "metrics", "plots"))]
            for name, s in stages.items()}
    out: dict[str, list[str]] = {}
    for name, stage in stages.items():
        others = [o for other, paths_ in outs.items() if other != name for o in paths_]
        bad = [d for d in _stage_paths(stage, ("deps",))
               if not (root / d).exists() and not any(_under(posixpath.normpath(d), o) for o in others)]
        if bad:
            out[name] = bad
    return out


def _module_file(module: str, root: Path) -> Path | None:
    """The file that defines ``module`` (a dotted name inside the package), or None."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    base = root.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _package_of(file: Path, root: Path) -> str:
    # Both a/b/__init__.py and a/b/c.py resolve relative imports against package a.b.
    return ".".join(file.relative_to(root).parts[:-1])


def _imported_modules(file: Path, root: Path, *, check_only: bool = False) -> set[str]:
    """Dotted names of package modules that ``file`` imports (absolute or relative); imports marked
    ``# deps: check-only`` are left out unless ``check_only``."""
    in_package = file.is_relative_to(root / PACKAGE)
    package = _package_of(file, root) if in_package else None
    return set(_modules_in_source(file.read_text(encoding="utf-8"), str(file), package, check_only))


@functools.lru_cache(maxsize=4096)
def _modules_in_source(source: str, filename: str, package: str | None, check_only: bool) -> frozenset[str]:
    """:func:`_imported_modules` of one file's text (``package``: the package a relative import
    resolves against, None outside the package). Keyed by the text itself, so an edited file is
    parsed again; a check of every stage's closure parses each module once instead of once a
    stage."""
    lines = source.splitlines()
    tree = ast.parse(source, filename=filename)
    found: set[str] = set()
    for node in ast.walk(tree):
        if (not check_only and isinstance(node, (ast.Import, ast.ImportFrom))
                and lines[node.lineno - 1].rstrip().endswith(CHECK_ONLY)):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if package is None:
                    continue
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            # ``from pkg import module`` names a submodule; ``from module import name`` does not.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return frozenset(m for m in found if m == PACKAGE or m.startswith(PACKAGE + "."))


def _data_files(file: Path) -> list[Path]:
    """The files a module names in its module-level ``DATA_FILES`` tuple, beside the module."""
    return [file.with_name(n) for n in _data_file_names(file.read_text(encoding="utf-8"), str(file))]


@functools.lru_cache(maxsize=4096)
def _data_file_names(source: str, filename: str) -> tuple[str, ...]:
    """:func:`_data_files`'s names, from one file's text (cached by the text, as
    :func:`_modules_in_source` is)."""
    tree = ast.parse(source, filename=filename)
    for node in tree.body:
        if (isinstance(node, (ast.Assign, ast.AnnAssign))
                and any(isinstance(t, ast.Name) and t.id == "DATA_FILES"
                        for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))):
            try:
                names = ast.literal_eval(node.value)
            except ValueError:
                raise ValueError(f"{filename}: DATA_FILES must be a literal tuple of file names") from None
            return tuple(str(n) for n in names)
    return ()


def import_closure(source: str | Path, *, root: Path | None = None) -> set[str]:
    """Repository-relative paths of every package file ``source`` runs through.

    Args:
        source: a notebook ``.py`` twin or a library module.
        root: the repository root (default: this checkout's).

    Returns:
        POSIX paths relative to ``root``, e.g. ``{"ragcritic_lib/__init__.py", ...}``.
    """
    root = Path(root or paths.ROOT)
    start = Path(source)
    start = start if start.is_absolute() else root / start
    seen: set[Path] = set()
    todo = [start]
    while todo:
        file = todo.pop()
        for module in _imported_modules(file, root):
            parts = module.split(".")
            # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
            for i in range(1, len(parts) + 1):
                target = _module_file(".".join(parts[:i]), root)
                if target is not None and target not in seen:
                    seen.add(target)
                    todo.append(target)
    data = {d for f in seen for d in _data_files(f)}
    return {p.relative_to(root).as_posix() for p in seen | data}


def _module_name(file: Path, root: Path) -> str:
    parts = list(file.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path | None = None) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}`` over every module of the package.

    Every import counts, lazy and check-only ones included: a cycle through a function-level
    import is still a cycle of the design. A module importing its own parent package's
    ``__init__`` (which Python runs first anyway) is not an edge.
    """
    root = Path(root or paths.ROOT)
    graph: dict[str, set[str]] = {}
    for file in sorted((root / PACKAGE).rglob("*.py")):
        name = _module_name(file, root)
        edges = set()
        for module in _imported_modules(file, root, check_only=True):
            target = _module_file(module, root)
            if target is None:
                continue
            other = _module_name(target, root)
            if other != name and not name.startswith(other + "."):
                edges.add(other)
        graph[name] = edges
    return graph


def import_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of two or more modules
    (or one that imports itself), each sorted, found with Tarjan's algorithm (iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1 or node in graph.get(node, ()):
                    found.append(sorted(comp))
    return sorted(found)


def stage_closure(cmd: str, *, root: Path | None = None) -> set[str]:
    """The closure of a stage command: its ``python -m`` module (itself included) and its notebook."""
    root = Path(root or paths.ROOT)
    words = cmd.split()
    out = import_closure(words[-1], root=root)
    if "-m" in words[:-1]:
        module = words[words.index("-m") + 1]
        file = _module_file(module, root)
        if file is not None:
            out |= {file.relative_to(root).as_posix()} | import_closure(file, root=root)
    return out


def _package_files(folder: Path, root: Path) -> set[str]:
    """Every file DVC would hash in a package folder (bytecode caches left out, as .dvcignore does)."""
    return {f.relative_to(root).as_posix() for f in folder.rglob("*")
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"}


def collapse_packages(closure: set[str], *, root: Path | None = None) -> set[str]:
    """``closure`` with each subpackage folder whose every file is in it written as the folder.

    A stage that runs through the whole ``llm`` package then depends on ``ragcritic_lib/llm``
    (DVC hashes the folder) instead of one line per module: the same files, fewer lines. The
    package root itself is never collapsed.
    """
    root = Path(root or paths.ROOT)
    out = set(closure)
    folders = sorted({posixpath.dirname(p) for p in closure if p.startswith(PACKAGE + "/")}, key=len)
    for folder in folders:
        if folder == PACKAGE or any(folder.startswith(done + "/") for done in out if (root / done).is_dir()):
            continue
        files = _package_files(root / folder, root)
        if files and files <= closure:
            out = {p for p in out if not p.startswith(folder + "/")} | {folder}
    return out


def stage_entries(cmd: str, *, root: Path | None = None) -> set[str]:
    """The library deps a stage should list: its closure with whole packages as folders."""
    return collapse_packages(stage_closure(cmd, root=root), root=root)


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def missing_deps(dvc: dict, *, root: Path | None = None) -> dict[str, list[str]]:
    """Per stage, the files of its notebook's import closure that dvc.yaml does not list.

    ``dvc`` has its templates resolved (``resolve_dvc``); so has ``dvc`` of ``extra_deps``.
    """
    root = Path(root or paths.ROOT)
    out: dict[str, list[str]] = {}
    for name, stage in dvc.get("stages", {}).items():
        deps = [d if isinstance(d, str) else next(iter(d)) for d in stage.get("deps", [])]
        missing = sorted(p for p in stage_entries(stage["cmd"], root=root) if not _covered(p, deps))
        if missing:
            out[name] = missing
    return out


def _library_deps(stage: dict) -> list[str]:
    deps = [d if isinstance(d, str) else next(iter(d)) for d in stage.get("deps", [])]
    return [d for d in deps if d.startswith(PACKAGE + "/")]


def extra_deps(dvc: dict, *, root: Path | None = None) -> dict[str, list[str]]:
    """Per stage, the library deps dvc.yaml lists that are not its entries: files its notebook never
    runs through, files of a package it lists as a whole folder, and folders it does not run
    through whole (:func:`stage_entries`)."""
    root = Path(root or paths.ROOT)
    out: dict[str, list[str]] = {}
    for name, stage in dvc.get("stages", {}).items():
        closure = stage_entries(stage["cmd"], root=root)
        extra = sorted(d for d in _library_deps(stage) if d not in closure)
        if extra:
            out[name] = extra
    return out


def drop_extra(dvc_text: str, extra: dict[str, list[str]]) -> str:
    """dvc.yaml text without each stage's extra library deps (other lines kept as they are)."""
    out, stage = [], None
    for line in dvc_text.splitlines(keepends=True):
        stripped = line.strip()
        if line.startswith("  ") and not line.startswith("   ") and stripped.endswith(":"):
            stage = stripped[:-1]
        elif stage in extra and stripped.startswith("- ") and stripped[2:].split(" #")[0].strip() in extra[stage]:
            continue
        out.append(line)
    return "".join(out)


def add_missing(dvc_text: str, missing: dict[str, list[str]]) -> str:
    """dvc.yaml text with each stage's missing files inserted after its last library dep.

    Edits lines rather than re-dumping the YAML, so comments and layout are kept.
    """
    lines = dvc_text.splitlines(keepends=True)
    stage, last_lib, inserts = None, {}, {}
    for i, line in enumerate(lines):
        stripped = line.strip()
        if line.startswith("  ") and not line.startswith("   ") and stripped.endswith(":"):
            stage = stripped[:-1]
        elif stage and stripped.startswith("- ragcritic_lib/"):
            last_lib[stage] = (i, line[: len(line) - len(line.lstrip())])
    for name, files in missing.items():
        if name not in last_lib:
            raise ValueError(f"dvc.yaml: stage {name} has no ragcritic_lib dependency to insert after")
        i, indent = last_lib[name]
        inserts[i] = "".join(f"{indent}- {f}\n" for f in files)
    return "".join(line + inserts.get(i, "") for i, line in enumerate(lines))


def main(argv: list[str] | None = None) -> int:
    import yaml

    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.deps", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="list stages whose dvc.yaml library deps differ from what they import")
    sub.add_parser("fix", help="add missing and drop extra library deps in dvc.yaml (comments and layout kept)")
    one = sub.add_parser("closure", help="print the import closure of a notebook or module")
    one.add_argument("source")
    sub.add_parser("cycles", help="list the library's import cycles (lazy and check-only imports included)")
    args = parser.parse_args(argv)
    if args.cmd == "closure":
        print("\n".join(sorted(import_closure(args.source))))
        return 0
    if args.cmd == "cycles":
        cycles = import_cycles(import_graph())
        for cycle in cycles:
            print("import cycle: " + " <-> ".join(cycle))
        return 1 if cycles else 0
    try:
        params = yaml.safe_load(paths.PARAMS_FILE.read_text(encoding="utf-8")) or {}
        text = paths.DVC_FILE.read_text(encoding="utf-8")
        resolved = resolve_dvc(yaml.safe_load(text), params)
        missing, extra = missing_deps(resolved), extra_deps(resolved)
        # Twice: a folder dropped because its package is no longer run through whole leaves
        # the package's files that are still run through to add.
        for _ in range(2 if args.cmd == "fix" else 0):
            paths.DVC_FILE.write_text(drop_extra(add_missing(text, missing), extra), encoding="utf-8")
            text = paths.DVC_FILE.read_text(encoding="utf-8")
            resolved = resolve_dvc(yaml.safe_load(text), params)
            missing, extra = missing_deps(resolved), extra_deps(resolved)
    except TemplateError as exc:
        print(exc)
        return 1
    twice, unproduced = literal_duplicates(yaml.safe_load(text), params), unproduced_deps(resolved)
    for stage, files in missing.items():
        print(f"dvc.yaml: stage {stage} runs through but does not depend on: {', '.join(files)}")
    for stage, files in extra.items():
        print(f"dvc.yaml: stage {stage} depends on but never runs through: {', '.join(files)}")
    for stage, files in twice.items():
        print(f"dvc.yaml: stage {stage} repeats a path of its params literally: {', '.join(files)}")
    for stage, files in unproduced.items():
        print(f"dvc.yaml: stage {stage} depends on paths that neither exist nor come out of another stage: "
              f"{', '.join(files)}")
    return 1 if missing or extra or twice or unproduced else 0


if __name__ == "__main__":
    sys.exit(main())
