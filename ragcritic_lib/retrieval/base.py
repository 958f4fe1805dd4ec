"""What every retriever shares: the config defaults, :class:`Hit`, the :class:`Retriever`
interface, reciprocal rank fusion and the hybrid retriever built on it, and model fingerprints."""

from __future__ import annotations

import hashlib
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragcritic_lib.data.corpus import Corpus

logger = logging.getLogger(__name__)

BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "
DEFAULT_ENCODER = "data/assets/models/all-minilm-l6-v2"
DEFAULT_RERANKER = "data/assets/models/ms-marco-minilm-l12-reranker"
INDEX_TYPES = ("flat", "hnsw", "ivf")
KINDS = ("bm25", "dense", "hybrid")
ENCODER_TYPES = ("auto", "sentence_transformers", "onnx")

# Every key build_retriever understands, with its default; params validation can reuse this.
RETRIEVER_DEFAULTS: dict[str, Any] = {
    "kind": "bm25",  # "bm25" | "dense" | "hybrid" (RRF over bm25 + dense)
    "encoder": DEFAULT_ENCODER,  # sentence-transformers folder, or folder with model.onnx
    "encoder_type": "auto",  # "auto" | "sentence_transformers" | "onnx"
    "query_prefix": "auto",  # "auto": the bge prefix for onnx encoders, none otherwise
    "pooling": "cls",  # onnx encoders: "cls" | "mean"
    "max_length": 512,  # onnx encoders: token limit per text
    "index": "flat",  # "flat" (exact) | "hnsw" | "ivf" (approximate, for large corpora)
    "index_factory": "",  # a FAISS factory string ("IVF4096,PQ64", "IVF1024,SQ8"); overrides index
    "train_size": 0,  # passages sampled to train IVF/PQ/SQ indexes; 0 = auto_train_size
    "hnsw_m": 32,
    "hnsw_ef_construction": 200,
    "hnsw_ef_search": 128,
    "nlist": 0,  # ivf lists; 0 picks about 4*sqrt(N)
    "nprobe": 16,
    "device": "cpu",  # "cpu" | "cuda" | "cuda:N"
    "gpu_shard": False,  # faiss-gpu: split the index over all visible GPUs
    "gpu_float16": False,  # faiss-gpu: store vectors as float16 on the GPU
    "mmap": True,  # open cached FAISS / bm25s indexes memory-mapped (read-only)
    "batch_size": 64,  # encoder batch size
    "num_threads": 0,  # onnxruntime intra-op / bm25s retrieval threads; 0 = library default
    "bm25_k1": 1.5,
    "bm25_b": 0.75,
    "bm25_method": "lucene",
    "rrf_k": 60,
    "fusion_depth": 100,  # candidates each hybrid member contributes
    "rerank": False,
    "reranker": DEFAULT_RERANKER,
    "rerank_depth": 20,
    "rerank_batch_size": 32,
    "show_progress": False,
    "cache": True,
}



# --------------------------------------------------------------------------------------------
# Corpus and hits
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One retrieved passage."""

    doc_id: str
    score: float
    contents: str

    def to_record(self) -> dict[str, Any]:
        """The ``{"id", "contents", "score"}`` form stored in RAG result records."""
        return {"id": self.doc_id, "contents": self.contents, "score": float(self.score)}


def model_fingerprint(folder: str | os.PathLike[str]) -> str:
    """Content hash of a model folder, independent of where it lives.

    Small files are hashed whole; large weight files by size plus their first and last MiB,
    which changes with any re-export but costs milliseconds instead of seconds.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: model folder not found")
    h = hashlib.sha256()
    chunk = 1 << 20
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        rel = p.relative_to(folder).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue
        size = p.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        with p.open("rb") as fh:
            if size <= 4 * chunk:
                h.update(fh.read())
            else:
                h.update(fh.read(chunk))
                fh.seek(size - chunk)
                h.update(fh.read(chunk))
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Retriever interface and fusion
# --------------------------------------------------------------------------------------------


class Retriever(ABC):
    """Batch top-k search over a corpus."""

    name: str = "retriever"
    corpus: Corpus
    loaded_from_cache: bool = False

    @abstractmethod
    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-``k`` hits per query, best first (fewer only when the corpus is smaller)."""

    def search_one(self, query: str, k: int) -> list[Hit]:
        """Top-``k`` hits for a single query."""
        return self.search([query], k)[0]


def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")


def reciprocal_rank_fusion(
    ranked_lists: Sequence[Sequence[str]], k: int = 60
) -> list[tuple[str, float]]:
    """Fuse ranked id lists with reciprocal rank fusion (Cormack et al., 2009).

    score(d) = sum over lists containing d of 1 / (k + rank), rank starting at 1. A repeated id
    within one list counts at its first rank only. Ties are broken by the earliest rank at which
    an id first appears in any list (list order within a rank), so the output is deterministic.

    Args:
        ranked_lists: ids per ranking, best first.
        k: the RRF smoothing constant (60 in the original paper).

    Returns:
        ``(id, fused score)`` for every id seen, best first.
    """
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    scores: dict[str, float] = {}
    first_seen: dict[str, int] = {}
    seen_in: list[set[str]] = [set() for _ in ranked_lists]
    depth = max((len(r) for r in ranked_lists), default=0)
    # Rank-major walk so that first_seen orders ids by their best rank.
    for rank in range(depth):
        for li, ranking in enumerate(ranked_lists):
            if rank >= len(ranking):
                continue
            doc_id = ranking[rank]
            if doc_id in seen_in[li]:
                continue
            seen_in[li].add(doc_id)
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank + 1)
            first_seen.setdefault(doc_id, len(first_seen))
    return sorted(scores.items(), key=lambda item: (-item[1], first_seen[item[0]]))


class HybridRetriever(Retriever):
    """Reciprocal rank fusion of several retrievers over the same corpus."""

    def __init__(self, retrievers: Sequence[Retriever], *, rrf_k: int = 60, depth: int = 100) -> None:
        if not retrievers:
            raise ValueError("HybridRetriever needs at least one retriever")
        self.retrievers = list(retrievers)
        self.corpus = self.retrievers[0].corpus
        self.rrf_k = rrf_k
        self.depth = depth
        self.name = "hybrid(" + "+".join(r.name for r in self.retrievers) + ")"
        self.loaded_from_cache = all(r.loaded_from_cache for r in self.retrievers)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        _check_k(k)
        depth = max(k, self.depth)
        per_member = [r.search(queries, depth) for r in self.retrievers]
        out: list[list[Hit]] = []
        for qi in range(len(queries)):
            ranked = [[h.doc_id for h in member[qi]] for member in per_member]
            contents = {h.doc_id: h.contents for member in per_member for h in member[qi]}
            fused = reciprocal_rank_fusion(ranked, self.rrf_k)[:k]
            out.append([Hit(d, s, contents[d]) for d, s in fused])
        return out


