"""params.yaml: loading and validation before any compute.

Layout: a ``common`` section (seed, generator, retriever, dataset registry) and one flat section
per pipeline stage, named after the stage (notebook ``NN_<stage>.py``). A stage section's schema
*is* its notebook's ``parameters`` cell: the same names, scalar literals whose types give the
expected types. Unknown sections or keys, missing keys and wrong types are reported together in
one :class:`ParamsError` that names each offending key, before anything runs.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import paths
from .io import read_yaml

_NB_NAME = re.compile(r"^(\d\d)_([a-z0-9_]+)\.py$")


class ParamsError(ValueError):
    """params.yaml does not match the schema; the message lists every problem."""


# The nested sections of `common` are checked by the modules that consume them
# (ragcritic_lib.llm and ragcritic_lib.retrieval), so there is one definition of each schema.
COMMON_KEYS: dict[str, tuple[type, ...]] = {
    "seed": (int,), "generator": (dict,), "retriever": (dict,), "datasets": (dict,),
}
DATASET_KEYS: dict[str, tuple[type, ...]] = {"corpus": (str,), "splits": (str,)}


def notebook_paths(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> dict[str, Path]:
    """Stage name -> notebook ``.py`` twin, for every ``NN_<stage>.py`` in the folder."""
    out = {}
    for f in sorted(notebooks_dir.glob("*.py")):
        m = _NB_NAME.match(f.name)
        if m:
            out[m.group(2)] = f
    return out


def notebook_parameters(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The names and literal defaults of the cell tagged ``parameters`` in a jupytext notebook.

    Raises:
        ParamsError: no such cell, more than one, or a non-literal / non-scalar assignment.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    cells = re.split(r"^# %%", text, flags=re.MULTILINE)
    tagged = [c for c in cells if re.match(r"[^\n]*tags=\[[^\]]*[\"']parameters[\"']", c)]
    if len(tagged) != 1:
        raise ParamsError(f"{path}: expected exactly one cell tagged 'parameters', found {len(tagged)}")
    body = tagged[0].split("\n", 1)[1] if "\n" in tagged[0] else ""
    out: dict[str, Any] = {}
    for node in ast.parse(body).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise ParamsError(f"{path}: the parameters cell may only hold `name = literal` lines")
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            raise ParamsError(f"{path}: parameter {node.targets[0].id!r} is not a literal") from None
        if not isinstance(value, (int, float, str, bool)):
            raise ParamsError(f"{path}: parameter {node.targets[0].id!r} must be a scalar literal")
        out[node.targets[0].id] = value
    return out


def _type_ok(value: Any, expected: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in expected:
        return False
    if float in expected and isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, expected)


def _check_keys(where: str, section: Mapping[str, Any], schema: Mapping[str, tuple[type, ...]],
                problems: list[str], *, required: bool) -> None:
    for key, value in section.items():
        if key not in schema:
            problems.append(f"{where}.{key}: unknown key (allowed: {', '.join(sorted(schema))})")
        elif not _type_ok(value, schema[key]):
            names = "/".join(t.__name__ for t in schema[key])
            problems.append(f"{where}.{key}: expected {names}, got {type(value).__name__} ({value!r})")
    if required:
        for key in schema:
            if key not in section:
                problems.append(f"{where}.{key}: missing")


def _generator_problems(cfg: Mapping[str, Any]) -> list[str]:
    from .llm import _BACKEND_KEYS, _COMMON_KEYS

    known = _COMMON_KEYS.union(*_BACKEND_KEYS.values())
    out = [f"common.generator.{k}: unknown key (allowed: {', '.join(sorted(known))})"
           for k in cfg if k not in known]
    if cfg.get("backend") not in _BACKEND_KEYS:
        out.append(f"common.generator.backend: must be one of {sorted(_BACKEND_KEYS)}, got {cfg.get('backend')!r}")
    if not isinstance(cfg.get("model"), str) or not cfg.get("model"):
        out.append("common.generator.model: must be a non-empty string")
    for key in ("batch_size", "max_input_tokens", "max_in_flight", "no_repeat_ngram_size"):
        if key in cfg and (not isinstance(cfg[key], int) or isinstance(cfg[key], bool)):
            out.append(f"common.generator.{key}: expected int, got {type(cfg[key]).__name__} ({cfg[key]!r})")
    return out


def validate_params(params: Mapping[str, Any], notebooks: Mapping[str, Path] | None = None,
                    *, source: str = "params.yaml") -> None:
    """Check a params mapping against the common schema and every notebook's parameters cell.

    Raises:
        ParamsError: listing every problem, each naming ``section.key``.
    """
    notebooks = notebook_paths() if notebooks is None else notebooks
    problems: list[str] = []
    if not isinstance(params, Mapping):
        raise ParamsError(f"{source}: top level must be a mapping of sections")
    common = params.get("common")
    if not isinstance(common, Mapping):
        problems.append("common: missing section")
    else:
        _check_keys("common", common, COMMON_KEYS, problems, required=True)
        if isinstance(common.get("generator"), Mapping):
            problems += _generator_problems(common["generator"])
        if isinstance(common.get("retriever"), Mapping):
            from .retrieval import validate_retriever_cfg

            try:
                validate_retriever_cfg(common["retriever"])
            except (ValueError, TypeError) as exc:
                problems.append(f"common.retriever: {exc}")
        if isinstance(common.get("datasets"), Mapping):
            for name, entry in common["datasets"].items():
                if not isinstance(entry, Mapping):
                    problems.append(f"common.datasets.{name}: expected a mapping with corpus and splits")
                    continue
                _check_keys(f"common.datasets.{name}", entry, DATASET_KEYS, problems, required=True)
    for section, values in params.items():
        if section == "common":
            continue
        if section not in notebooks:
            problems.append(f"{section}: unknown section (stages: {', '.join(sorted(notebooks))})")
            continue
        if not isinstance(values, Mapping):
            problems.append(f"{section}: expected a mapping")
            continue
        schema = {k: (type(v),) if not isinstance(v, float) else (float,)
                  for k, v in notebook_parameters(notebooks[section]).items()}
        _check_keys(section, values, schema, problems, required=True)
    for stage in notebooks:
        if stage not in params:
            problems.append(f"{stage}: missing section for notebook {notebooks[stage].name}")
    if problems:
        raise ParamsError(f"{source} is invalid:\n  - " + "\n  - ".join(problems))


def load_params(path: str | os.PathLike[str] | None = None, *, validate: bool = True) -> dict[str, Any]:
    """Load params.yaml (validated by default). The path defaults to the repository's."""
    path = Path(path) if path is not None else paths.PARAMS_FILE
    params = read_yaml(path) or {}
    if validate:
        validate_params(params, source=str(path))
    return params


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into ``base`` (used for params profiles)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def apply_profile(profile: str, *, params_path: Path | None = None) -> dict[str, Any]:
    """Merge ``configs/profiles/<profile>.yaml`` over params.yaml and write the result back.

    The merged params are validated before anything is written; ``git checkout params.yaml``
    returns to the default.
    """
    from .io import write_yaml

    params_path = params_path or paths.PARAMS_FILE
    prof = paths.CONFIGS_DIR / "profiles" / f"{profile}.yaml"
    if not prof.exists():
        raise ParamsError(f"{prof}: no such params profile")
    merged = deep_merge(read_yaml(params_path) or {}, read_yaml(prof) or {})
    validate_params(merged, source=f"{params_path} + {prof.name}")
    write_yaml(params_path, merged)
    return merged


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.params",
                                     description="Validate params.yaml or switch params profile.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="validate params.yaml")
    prof = sub.add_parser("profile", help="write params.yaml from a profile in configs/profiles/")
    prof.add_argument("name")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "check":
            load_params()
            print(f"{paths.PARAMS_FILE}: ok")
        else:
            apply_profile(args.name)
            print(f"params.yaml now holds profile {args.name!r}")
    except ParamsError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
