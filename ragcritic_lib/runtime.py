"""Build the run-time objects a notebook needs from params.yaml: datasets, retrievers, LLMs.

Notebooks call these so that swapping a model, a server or a FlashRAG dataset is a params
change only. Retrievers and LLMs are memoized per process (a notebook builds each once).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
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
_RETRIEVERS_LOCK = threading.RLock()  # pool members sampled in threads share the memo


def load_retriever(params: Mapping[str, Any], dataset: str, **overrides: Any):
    """A retriever over the dataset's corpus built from ``common.retriever`` plus overrides."""
    from .retrieval import build_retriever

    cfg = retriever_config(params, **overrides)
    corpus_path = str(dataset_paths(params["common"]["datasets"], dataset)["corpus"])
    # Keyed by the corpus file too: the same dataset name may point at another corpus later.
    key = (dataset, corpus_path, tuple(sorted((k, str(v)) for k, v in cfg.items())))
    with _RETRIEVERS_LOCK:
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


def release_llms() -> bool:
    """Free the process's vLLM engine and its GPU memory (before training in the same process, or
    when a stage is done with its model). Memoized LLMs stay usable: a vLLM backend rebuilds its
    engine on its next call. Returns True when an engine was freed."""
    import gc

    from .llm import release_vllm_engine

    freed = release_vllm_engine()
    gc.collect()
    return freed


def _locked(factory: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]], Any]:
    lock = threading.Lock()

    def build(cfg: Mapping[str, Any]) -> Any:
        with lock:  # one backend per config even when members start at the same moment
            return factory(cfg)

    return build


def sample_pool(
    records: Sequence[Mapping[str, Any]],
    pool: Sequence[Any],
    retrievers: Any,
    *,
    out_path: str | Path,
    chunk_size: int = 32,
    parallel_members: int = 4,
    progress: bool = False,
    llm_factory: Callable[[Mapping[str, Any]], Any] | None = None,
) -> list[dict[str, Any]]:
    """:func:`ragcritic_lib.mining.sample_error_responses` with served pool members sampled at
    the same time.

    Members on an OpenAI-compatible server (``backend: openai``) spend their time waiting for
    the servers, so up to ``parallel_members`` of them run in threads, each writing its own
    resumable side log next to ``out_path`` (seeded with its rows already in ``out_path``).
    The side logs are then appended to ``out_path`` and ``sample_error_responses`` runs once over
    the whole pool: it finds the served members done (their fingerprints match), samples the
    local-model members (hf, vllm: one model at a time, so a vLLM engine is freed between base
    models), and compacts the log to exactly one record per (question, member). The vLLM engine
    is freed at the end.

    Returns:
        The records of every (question, member) pair, in member order, as
        ``sample_error_responses`` returns them.
    """
    from concurrent.futures import ThreadPoolExecutor

    from . import mining
    from .io import append_jsonl, read_jsonl_tolerant, write_jsonl

    if isinstance(parallel_members, bool) or not isinstance(parallel_members, int) or parallel_members < 1:
        raise ValueError(f"parallel_members must be an int >= 1, got {parallel_members!r}")
    out_path = Path(out_path)
    factory = _locked(llm_factory or mining.shared_llm)
    served = [m for m in pool if m.llm.get("backend") == "openai"]
    parts: dict[str, Path] = {}
    if parallel_members > 1 and len(served) > 1:
        existing = read_jsonl_tolerant(out_path, repair=True)
        for i, m in enumerate(served):
            # Index + sanitised name: two members never share a side log.
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", m.name)
            parts[m.name] = out_path.with_name(f"{out_path.stem}.member{i}-{safe}.jsonl")
            if not parts[m.name].exists():
                write_jsonl(parts[m.name], [r for r in existing if r.get("pool_member") == m.name])
        with ThreadPoolExecutor(max_workers=min(parallel_members, len(served)), thread_name_prefix="pool") as ex:
            futures = [ex.submit(mining.sample_error_responses, records, [m], retrievers, out_path=parts[m.name],
                                 chunk_size=chunk_size, llm_factory=factory, progress=progress) for m in served]
            for fut in futures:
                fut.result()
        for m in served:
            append_jsonl(out_path, read_jsonl_tolerant(parts[m.name]))
    result = mining.sample_error_responses(records, pool, retrievers, out_path=out_path, chunk_size=chunk_size,
                                           llm_factory=factory, progress=progress)
    for part in parts.values():
        part.unlink(missing_ok=True)
    if any(m.llm.get("backend") == "vllm" for m in pool):
        release_llms()
    return result
