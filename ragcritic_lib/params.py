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


# The nested sections that are not notebook parameters, with the types of their keys.
GENERATOR_KEYS: dict[str, tuple[type, ...]] = {
    "backend": (str,), "model": (str,), "adapter": (str, type(None)), "dtype": (str,),
    "device": (str,), "batch_size": (int,), "max_input_tokens": (int,), "urls": (str, list),
    "api_key_env": (str, type(None)), "max_in_flight": (int,), "timeout_s": (int, float),
    "cache": (bool,), "repetition_penalty": (int, float), "no_repeat_ngram_size": (int,),
}
RETRIEVER_KEYS: dict[str, tuple[type, ...]] = {
    "kind": (str,), "encoder": (str,), "encoder_type": (str,), "index": (str,), "rerank": (bool,),
    "reranker": (str,), "rerank_depth": (int,), "rrf_k": (int,), "batch_size": (int,),
    "device": (str,), "nlist": (int,), "nprobe": (int,), "hnsw_m": (int,), "query_prefix": (str,),
}
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
            _check_keys("common.generator", common["generator"], GENERATOR_KEYS, problems, required=False)
        if isinstance(common.get("retriever"), Mapping):
            _check_keys("common.retriever", common["retriever"], RETRIEVER_KEYS, problems, required=False)
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
