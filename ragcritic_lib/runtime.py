"""Build the run-time objects a notebook needs from params.yaml: datasets, retrievers, LLMs.

Notebooks call these so that swapping a model, a server or a FlashRAG dataset is a params
change only. Retrievers and LLMs are memoized per process (a notebook builds each once).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from . import paths
from .data import dataset_paths, load_corpus_records, load_dataset_split


def dataset_names(params: Mapping[str, Any]) -> list[str]:
    """Names of the datasets in ``common.datasets`` (in params order)."""
    return list(params["common"]["datasets"])


def load_split(params: Mapping[str, Any], dataset: str, split: str, *, limit: int | None = None) -> list[dict]:
    """One split of a registered dataset; every record's metadata names its dataset."""
    records = load_dataset_split(dataset_paths(params["common"]["datasets"], dataset)[split], limit=limit)
    for r in records:
        r["metadata"].setdefault("dataset", dataset)
    return records


@lru_cache(maxsize=8)
def _corpus(path: str):
    from .retrieval import Corpus

    return Corpus.from_records(load_corpus_records(path))


def load_corpus(params: Mapping[str, Any], dataset: str):
    """The :class:`~ragcritic_lib.retrieval.Corpus` of a registered dataset (memoized)."""
    return _corpus(str(dataset_paths(params["common"]["datasets"], dataset)["corpus"]))


def retriever_config(params: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """``common.retriever`` with model paths resolved against the repository root."""
    cfg = dict(params["common"]["retriever"])
    cfg.update(overrides)
    for key in ("encoder", "reranker"):
        if isinstance(cfg.get(key), str):
            cfg[key] = str(paths.resolve(cfg[key]))
    return cfg


_RETRIEVERS: dict[tuple, Any] = {}


def load_retriever(params: Mapping[str, Any], dataset: str, **overrides: Any):
    """A retriever over the dataset's corpus built from ``common.retriever`` plus overrides."""
    from .retrieval import build_retriever

    cfg = retriever_config(params, **overrides)
    corpus_path = str(dataset_paths(params["common"]["datasets"], dataset)["corpus"])
    # Keyed by the corpus file too: the same dataset name may point at another corpus later.
    key = (dataset, corpus_path, tuple(sorted((k, str(v)) for k, v in cfg.items())))
    if key not in _RETRIEVERS:
        retriever = build_retriever(cfg, load_corpus(params, dataset))
        # What built it, so that samples drawn with it are keyed by config and corpus content.
        retriever.provenance = {"config": cfg, "corpus_path": corpus_path}
        _RETRIEVERS[key] = retriever
    return _RETRIEVERS[key]


def generator_config(params: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """``common.generator`` with local model/adapter paths resolved (server names are kept)."""
    cfg = dict(params["common"]["generator"])
    cfg.update({k: v for k, v in overrides.items()})
    for key in ("model", "adapter"):
        value = cfg.get(key)
        if isinstance(value, str) and value and cfg.get("backend", "hf") != "openai":
            resolved = paths.resolve(value)
            if resolved.exists():
                cfg[key] = str(resolved)
    return cfg


_LLMS: dict[tuple, Any] = {}


def load_generator(params: Mapping[str, Any], **overrides: Any):
    """The generator LLM of ``common.generator`` (memoized per config)."""
    from .llm import load_llm

    cfg = generator_config(params, **overrides)
    key = tuple(sorted((k, str(v)) for k, v in cfg.items()))
    if key not in _LLMS:
        _LLMS[key] = load_llm(cfg)
    return _LLMS[key]
