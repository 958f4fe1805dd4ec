"""Every path the project uses, in one place.

All paths are absolute and derived from the repository root, which is found from this file's
location, or from the ``RAGCRITIC_ROOT`` environment variable when set (the smoke test runs a
copy of the repository elsewhere). The persistent LLM-call and index caches live outside the
DVC-managed outputs so that ``dvc repro`` deleting a stage's outputs never loses them; their
location can be moved with ``RAGCRITIC_CACHE_DIR``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(os.environ.get("RAGCRITIC_ROOT", Path(__file__).resolve().parent.parent)).resolve()

PARAMS_FILE = ROOT / "params.yaml"
DVC_FILE = ROOT / "dvc.yaml"
NOTEBOOKS_DIR = ROOT / "notebooks"
CONFIGS_DIR = ROOT / "configs"
REPORTS_DIR = ROOT / "reports"
EXECUTED_NOTEBOOKS_DIR = REPORTS_DIR / "notebooks"
METRICS_DIR = REPORTS_DIR / "metrics"
FIGURES_DIR = REPORTS_DIR / "figures"
TABLES_DIR = REPORTS_DIR / "tables"

DATA_DIR = ROOT / "data"
ASSETS_DIR = DATA_DIR / "assets"
MODELS_DIR = ASSETS_DIR / "models"
TAXONOMY_DIR = DATA_DIR / "taxonomy"
TESTBED_DIR = DATA_DIR / "testbed"
INDEXES_DIR = DATA_DIR / "indexes"  # the configured retriever's indexes, shipped by stage retrieval_rag

CACHE_DIR = Path(os.environ.get("RAGCRITIC_CACHE_DIR", ROOT / ".cache")).resolve()
LLM_CACHE_DIR = CACHE_DIR / "llm"
INDEX_CACHE_DIR = CACHE_DIR / "indexes"
WHEELS_DIR = Path(os.environ.get("RAGCRITIC_WHEELS_DIR", CACHE_DIR / "wheels")).resolve()


def resolve(path: str | os.PathLike[str]) -> Path:
    """Resolve a path from params.yaml: relative paths are relative to the repository root."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (ROOT / p)


def stage_dir(name: str) -> Path:
    """Output folder of one pipeline stage under ``data/``."""
    return DATA_DIR / name


class MissingUpstreamError(FileNotFoundError):
    """A file another pipeline stage writes is missing; the message names that stage."""


def producing_stage(path: str | os.PathLike[str]) -> str | None:
    """The dvc.yaml stage whose outputs contain ``path`` (None when no stage writes it)."""
    import yaml

    try:
        rel = resolve(path).resolve().relative_to(ROOT).as_posix()
        stages = yaml.safe_load(DVC_FILE.read_text(encoding="utf-8")).get("stages", {})
    except (ValueError, OSError, AttributeError, yaml.YAMLError):
        return None
    for name, stage in stages.items():
        for out in stage.get("outs", []) + stage.get("metrics", []) + stage.get("plots", []):
            out = out if isinstance(out, str) else next(iter(out))
            if rel == out or rel.startswith(out.rstrip("/") + "/"):
                return name
    return None


def missing_file_error(path: str | os.PathLike[str]) -> FileNotFoundError:
    """The error for a file that does not exist, naming the stage to run when one writes it."""
    stage = producing_stage(path)
    if stage is None:
        return FileNotFoundError(f"{path}: no such file")
    return MissingUpstreamError(
        f"{path}: no such file; it is an output of pipeline stage '{stage}': run `dvc repro {stage}` "
        "(or `make pipeline`) from the repository root first")


def require(path: str | os.PathLike[str]) -> Path:
    """``path`` resolved from the repository root; raises :func:`missing_file_error` if absent."""
    p = resolve(path)
    if not p.exists():
        raise missing_file_error(p)
    return p


# Keys of an LLM config that may name a local file or folder.
LLM_PATH_KEYS = ("model", "adapter", "tokenizer", "cache_dir")


def resolve_llm_paths(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """An LLM config with its repository-relative paths made absolute: the one place that does it.

    ``model``, ``adapter`` and ``tokenizer`` are resolved where such a local path exists, except a
    served model's ``model`` (``backend: openai``), which is the server's name for it;
    ``cache_dir`` always (it is created on first use). Backends take the result as given.
    """
    cfg = dict(cfg)
    for key in LLM_PATH_KEYS:
        value = cfg.get(key)
        if not isinstance(value, str) or not value:
            continue
        resolved = resolve(value)
        if key == "cache_dir":
            cfg[key] = str(resolved)
        elif key == "model" and cfg.get("backend", "hf") == "openai":
            continue
        elif resolved.exists():
            cfg[key] = str(resolved)
    return cfg


def method_slug(name: str) -> str:
    """File-name form of a method or ladder row name, as stage 08 names its run files and the
    comparison stage reads them: "RAG-Critic" -> "rag_critic", "w/o X" -> "w_o_x"."""
    return "_".join(re.findall(r"[a-z0-9]+", name.lower())) or "method"
