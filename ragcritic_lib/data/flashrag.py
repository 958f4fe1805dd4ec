"""FlashRAG-format corpora and datasets: loading with validation, and the dataset registry.

A corpus is JSONL of ``{"id", "contents": "Title\\ntext"}``; a dataset split is JSONL of
``{"id", "question", "golden_answers": [..], "metadata": {..}}``. Any such files work: point the
``datasets`` section of params.yaml at them (NQ or HotpotQA exported by FlashRAG load unchanged).
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import DataFormatError, iter_jsonl_numbered

SPLITS = ("train", "dev", "test")


def _check(cond: bool, path: Path, lineno: int, msg: str) -> None:
    if not cond:
        raise DataFormatError(f"{path}:{lineno}: {msg}")


def load_dataset_split(path: str | os.PathLike[str], *, limit: int | None = None) -> list[dict[str, Any]]:
    """Load and validate one FlashRAG dataset split.

    Args:
        path: JSONL file.
        limit: keep only the first ``limit`` records (splits are stored shuffled by seed, so the
            head is a seeded sample).

    Raises:
        DataFormatError: ``<path>:<line>: ...`` for the first invalid record (physical line,
            blank lines counted), invalid JSON or invalid UTF-8.
    """
    path = Path(path)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for lineno, rec in iter_jsonl_numbered(path):  # physical line numbers
        _check("id" in rec, path, lineno, "record has no 'id'")
        _check(isinstance(rec.get("question"), str) and rec["question"].strip() != "", path, lineno,
               "'question' must be a non-empty string")
        golds = rec.get("golden_answers")
        _check(isinstance(golds, list) and all(isinstance(g, str) for g in golds), path, lineno,
               "'golden_answers' must be a list of strings")
        meta = rec.setdefault("metadata", {})
        _check(isinstance(meta, dict), path, lineno, "'metadata' must be an object")
        rid = str(rec["id"])
        _check(rid not in seen, path, lineno, f"duplicate id {rid!r}")
        seen.add(rid)
        rec["id"] = rid
        out.append(rec)
        if limit is not None and len(out) >= limit:
            break
    return out


def load_corpus_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Load and validate a FlashRAG corpus JSONL (``id`` and ``contents`` required).

    Raises:
        DataFormatError: ``<path>:<line>: ...`` naming the physical line of the first problem.
    """
    path = Path(path)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for lineno, rec in iter_jsonl_numbered(path):  # physical line numbers
        _check("id" in rec, path, lineno, "passage has no 'id'")
        contents = rec.get("contents")
        if contents is None and isinstance(rec.get("text"), str):  # tolerate {"title","text"}
            contents = f"{rec.get('title', '')}\n{rec['text']}"
            rec["contents"] = contents
        _check(isinstance(contents, str) and contents.strip() != "", path, lineno,
               "'contents' must be a non-empty string")
        rid = str(rec["id"])
        _check(rid not in seen, path, lineno, f"duplicate id {rid!r}")
        seen.add(rid)
        rec["id"] = rid
        out.append(rec)
    return out


def split_title(contents: str) -> tuple[str, str]:
    """Split FlashRAG ``contents`` into (title, text)."""
    title, _, text = contents.partition("\n")
    return title.strip(), text.strip()


def dataset_paths(datasets: Mapping[str, Mapping[str, str]], name: str) -> dict[str, Path]:
    """Resolve a registry entry of params ``common.datasets`` to corpus and split file paths."""
    if name not in datasets:
        raise KeyError(f"params.yaml common.datasets has no dataset {name!r} (known: {sorted(datasets)})")
    entry = datasets[name]
    splits_dir = paths.resolve(entry["splits"])
    out = {"corpus": paths.resolve(entry["corpus"])}
    out.update({s: splits_dir / f"{s}.jsonl" for s in SPLITS})
    return out


def seeded_split(items: Sequence[Any], fractions: Mapping[str, float], seed: int) -> dict[str, list[Any]]:
    """Shuffle ``items`` with ``seed`` and cut them into named splits by fraction (last takes the rest).

    Raises:
        ValueError: naming the fractions when one is negative or they add up to more than 1
            (the cut points would run backwards and hand one split's items to another).
    """
    negative = [f"{name}={value}" for name, value in fractions.items() if value < 0]
    if negative:
        raise ValueError(f"split fractions must be >= 0: {', '.join(negative)}")
    if sum(fractions.values()) > 1 + 1e-9:
        listed = " + ".join(f"{name}={value}" for name, value in fractions.items())
        raise ValueError(f"split fractions add up to more than 1: {listed}")
    order = list(items)
    random.Random(seed).shuffle(order)
    names = list(fractions)
    out: dict[str, list[Any]] = {}
    start = 0
    for i, name in enumerate(names):
        end = len(order) if i == len(names) - 1 else start + round(fractions[name] * len(order))
        out[name] = order[start:end]
        start = end
    return out
