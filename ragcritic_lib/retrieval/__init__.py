"""Passage retrieval: BM25, dense (FAISS), hybrid fusion and cross-encoder reranking.

Every retriever answers a batch of queries with ranked :class:`Hit` lists over one
:class:`Corpus` in FlashRAG format (``{"id", "contents": "Title\\ntext"}``).
:func:`build_retriever` turns the ``retriever`` params section into a retriever and keeps each
index in a content-addressed folder under ``cache_dir``, keyed by the corpus content, the
retriever kind, the model and the index parameters, so a re-run loads instead of re-embedding.

Heavy libraries (bm25s, faiss, sentence-transformers, onnxruntime, tokenizers) are imported
inside the functions that use them: importing this module stays fast and torch-free.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragcritic_lib import paths
from ragcritic_lib.data.corpus import Corpus, corpus_fingerprint  # noqa: F401 (retrieval.Corpus is part of its interface)
from ragcritic_lib.io import read_json, write_json

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


# --------------------------------------------------------------------------------------------
# BM25
# --------------------------------------------------------------------------------------------


def _stemmer() -> tuple[Any, str]:
    """PyStemmer's English stemmer when installed, else none (no extra dependency).

    The stemmer object itself is returned: bm25s calls its ``stemWords`` on the unique tokens.
    """
    try:
        import Stemmer  # PyStemmer
    except ImportError:
        return None, "none"
    return Stemmer.Stemmer("english"), "snowball-english"


def tokenize_to_ids(
    texts: Sequence[str], stemmer: Any, *, chunk_size: int = 100_000
) -> tuple[list[array], dict[str, int]]:
    """bm25s token ids of every text, tokenized ``chunk_size`` texts at a time.

    Each chunk goes through ``bm25s.tokenize(..., return_ids=True)`` (same tokens as the
    string form) and its ids are renumbered into one vocabulary. Documents are kept as compact
    ``array('I')`` rows instead of lists of strings: no token string is held per document, and
    a memory-mapped corpus is read one chunk at a time.

    Returns:
        ``(ids per text, token -> id)``, ready for ``bm25s.BM25.index((ids, vocab))``.
    """
    import bm25s

    vocab: dict[str, int] = {}
    docs: list[array] = []
    for start in range(0, len(texts), chunk_size):
        chunk = texts[start : start + chunk_size]
        local = bm25s.tokenize(list(chunk), stopwords="en", stemmer=stemmer, return_ids=True, show_progress=False)
        remap = np.zeros(len(local.vocab), dtype=np.int64)
        for token, local_id in local.vocab.items():
            remap[local_id] = vocab.setdefault(token, len(vocab))
        for row in local.ids:
            docs.append(array("I", remap[row].tolist() if row else []))
    return docs, vocab


class BM25Retriever(Retriever):
    """Lexical retrieval with bm25s (its tokenizer, English stopwords, optional stemming).

    Queries are tokenized to strings and mapped through the index vocabulary, or, for an
    index whose folder holds a bm25s ``Tokenizer`` vocabulary (e.g. FlashRAG's bm25s
    indexes), through that tokenizer's ids.
    """

    name = "bm25"

    def __init__(self, corpus: Corpus, index: Any, *, num_threads: int = 0, tokenizer: Any = None) -> None:
        self.corpus = corpus
        self.index = index
        self.num_threads = num_threads
        self.tokenizer = tokenizer
        self._stem, self.stemmer_name = _stemmer()

    @staticmethod
    def tokenize(texts: Sequence[str], stemmer: Any) -> list[list[str]]:
        import bm25s

        return bm25s.tokenize(
            list(texts), stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )

    @classmethod
    def build(
        cls,
        corpus: Corpus,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        num_threads: int = 0,
    ) -> BM25Retriever:
        """Tokenize (to token ids, chunk by chunk) and index the corpus."""
        import bm25s

        if len(corpus) == 0:
            raise ValueError("cannot index an empty corpus")
        stem, _ = _stemmer()
        ids, vocab = tokenize_to_ids(corpus.contents, stem)
        index = bm25s.BM25(k1=k1, b=b, method=method)
        index.index((ids, vocab), show_progress=False)
        return cls(corpus, index, num_threads=num_threads)

    def save(self, folder: str | os.PathLike[str]) -> None:
        self.index.save(str(folder), show_progress=False)
        if self.tokenizer is not None:
            self.tokenizer.save_vocab(str(folder))
            self.tokenizer.save_stopwords(str(folder))

    @classmethod
    def load(
        cls, folder: str | os.PathLike[str], corpus: Corpus, *, num_threads: int = 0, mmap: bool = True
    ) -> BM25Retriever:
        """Open a saved bm25s index; ``mmap`` maps its score matrix from disk (read-only).

        A folder holding ``vocab.tokenizer.json`` (a saved bm25s ``Tokenizer``) gets that
        tokenizer for its queries, with the stopwords saved beside it when present.
        """
        import bm25s

        folder = Path(folder)
        index = bm25s.BM25.load(str(folder), load_corpus=False, mmap=mmap, show_progress=False)
        if int(index.scores["num_docs"]) != len(corpus):
            raise ValueError(f"{folder}: index has {index.scores['num_docs']} docs, corpus {len(corpus)}")
        tokenizer = None
        if (folder / "vocab.tokenizer.json").exists():
            from bm25s.tokenization import Tokenizer

            stem, _ = _stemmer()
            tokenizer = Tokenizer(stopwords="en", stemmer=stem)
            tokenizer.load_vocab(str(folder))
            if (folder / "stopwords.tokenizer.json").exists():
                tokenizer.load_stopwords(str(folder))
        return cls(corpus, index, num_threads=num_threads, tokenizer=tokenizer)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-k by BM25 score. Always k hits (corpus permitting): zero-score ones come last."""
        _check_k(k)
        if not queries:
            return []
        k = min(k, len(self.corpus))
        tokens: Any
        if self.tokenizer is not None:
            tokens = self.tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids", show_progress=False)
        else:
            tokens = self.tokenize(queries, self._stem)
        docs, scores = self.index.retrieve(
            tokens, k=k, show_progress=False, n_threads=self.num_threads, return_as="tuple"
        )
        ids, contents = self.corpus.ids, self.corpus.contents
        return [
            [Hit(ids[int(d)], float(s), contents[int(d)]) for d, s in zip(row_d, row_s)]
            for row_d, row_s in zip(docs, scores)
        ]


# --------------------------------------------------------------------------------------------
# Text encoders
# --------------------------------------------------------------------------------------------


class TextEncoder(ABC):
    """Maps texts to L2-normalized float32 vectors; counts what it encoded."""

    name: str = "encoder"

    def __init__(self) -> None:
        self.n_passages_encoded = 0
        self.n_queries_encoded = 0

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What determines the passage vectors (goes into the index cache key)."""

    @abstractmethod
    def _encode(self, texts: list[str]) -> np.ndarray:
        """Encode raw texts to an ``[n, d]`` float32 array of unit vectors."""

    query_prefix: str = ""

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        self.n_passages_encoded += len(texts)
        return self._encode(list(texts))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        self.n_queries_encoded += len(texts)
        return self._encode([self.query_prefix + t for t in texts])


def _l2_normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


class SentenceTransformerEncoder(TextEncoder):
    """A sentence-transformers model folder (e.g. all-MiniLM-L6-v2), normalized embeddings."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        device: str = "cpu",
        batch_size: int = 64,
        query_prefix: str = "",
        show_progress: bool = False,
    ) -> None:
        super().__init__()
        self.folder = Path(folder)
        if not (self.folder / "modules.json").exists() and not (self.folder / "config.json").exists():
            raise FileNotFoundError(f"{self.folder}: not a sentence-transformers model folder")
        self.device = device
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.show_progress = show_progress
        self.name = self.folder.name
        self._model: Any = None

    def identity(self) -> dict[str, Any]:
        return {"type": "sentence_transformers", "model": model_fingerprint(self.folder)}

    def _encode(self, texts: list[str]) -> np.ndarray:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(self.folder), device=self.device)
        if not texts:
            dim = self._model.get_sentence_embedding_dimension()
            return np.zeros((0, dim), dtype=np.float32)
        emb = self._model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=self.show_progress,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)


def _onnx_session(model_path: Path, device: str, num_threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if num_threads > 0:
        opts.intra_op_num_threads = num_threads
        opts.inter_op_num_threads = 1
    providers = ["CPUExecutionProvider"]
    if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        dev_id = int(device.split(":", 1)[1]) if ":" in device else 0
        providers = [("CUDAExecutionProvider", {"device_id": dev_id}), "CPUExecutionProvider"]
    return ort.InferenceSession(str(model_path), sess_options=opts, providers=providers)


def _onnx_tokenizer(path: Path, max_length: int) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    # Shipped tokenizer.json files may pad every input to 512; we pad per batch instead.
    tok.no_padding()
    tok.enable_truncation(max_length=max_length, strategy="longest_first")
    return tok


def _batch_arrays(encodings: Sequence[Any], input_names: set[str]) -> dict[str, np.ndarray]:
    """Right-pad token encodings of one batch into the ONNX model's int64 inputs."""
    width = max(len(e.ids) for e in encodings)
    n = len(encodings)
    ids = np.zeros((n, width), dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    types = np.zeros((n, width), dtype=np.int64)
    for i, e in enumerate(encodings):
        m = len(e.ids)
        ids[i, :m] = e.ids
        mask[i, :m] = 1
        types[i, :m] = e.type_ids
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return {name: arr for name, arr in feeds.items() if name in input_names}


def _length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Index batches of similar length, so that padding (and compute) stays small."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


class OnnxEncoder(TextEncoder):
    """A BERT-style ONNX encoder (e.g. bge-small-en) run with onnxruntime + tokenizers."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        device: str = "cpu",
        batch_size: int = 64,
        query_prefix: str = BGE_QUERY_PREFIX,
        pooling: str = "cls",
        max_length: int = 512,
        num_threads: int = 0,
    ) -> None:
        super().__init__()
        self.folder = Path(folder)
        for fname in ("model.onnx", "tokenizer.json"):
            if not (self.folder / fname).exists():
                raise FileNotFoundError(f"{self.folder / fname}: ONNX encoder file missing")
        if pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {pooling!r}")
        self.device = device
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.pooling = pooling
        self.max_length = max_length
        self.num_threads = num_threads
        self.name = self.folder.name
        self._session: Any = None
        self._tok: Any = None

    def identity(self) -> dict[str, Any]:
        return {
            "type": "onnx",
            "model": model_fingerprint(self.folder),
            "pooling": self.pooling,
            "max_length": self.max_length,
        }

    def _encode(self, texts: list[str]) -> np.ndarray:
        if self._session is None:
            self._session = _onnx_session(self.folder / "model.onnx", self.device, self.num_threads)
            self._tok = _onnx_tokenizer(self.folder / "tokenizer.json", self.max_length)
        inputs = {i.name for i in self._session.get_inputs()}
        encodings = self._tok.encode_batch(texts)
        out: np.ndarray | None = None
        for idx in _length_sorted_batches([len(e.ids) for e in encodings], self.batch_size):
            feeds = _batch_arrays([encodings[i] for i in idx], inputs)
            hidden = self._session.run(["last_hidden_state"], feeds)[0]
            if self.pooling == "cls":
                vec = hidden[:, 0]
            else:
                mask = feeds["attention_mask"][..., None].astype(np.float32)
                vec = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1.0)
            if out is None:
                out = np.zeros((len(texts), vec.shape[1]), dtype=np.float32)
            out[idx] = _l2_normalize(vec)
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def load_encoder(
    folder: str | os.PathLike[str],
    *,
    encoder_type: str = "auto",
    device: str = "cpu",
    batch_size: int = 64,
    query_prefix: str = "auto",
    pooling: str = "cls",
    max_length: int = 512,
    num_threads: int = 0,
    show_progress: bool = False,
) -> TextEncoder:
    """Open an encoder folder; ``"auto"`` picks ONNX when the folder holds model.onnx only."""
    folder = paths.resolve(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: encoder folder not found")
    if encoder_type not in ENCODER_TYPES:
        raise ValueError(f"encoder_type must be one of {ENCODER_TYPES}, got {encoder_type!r}")
    if encoder_type == "auto":
        is_st = (folder / "modules.json").exists()
        encoder_type = "onnx" if (folder / "model.onnx").exists() and not is_st else "sentence_transformers"
    if encoder_type == "onnx":
        prefix = BGE_QUERY_PREFIX if query_prefix == "auto" else query_prefix
        return OnnxEncoder(
            folder,
            device=device,
            batch_size=batch_size,
            query_prefix=prefix,
            pooling=pooling,
            max_length=max_length,
            num_threads=num_threads,
        )
    prefix = "" if query_prefix == "auto" else query_prefix
    return SentenceTransformerEncoder(
        folder, device=device, batch_size=batch_size, query_prefix=prefix, show_progress=show_progress
    )


# --------------------------------------------------------------------------------------------
# Dense retrieval
# --------------------------------------------------------------------------------------------


def _auto_nlist(n: int) -> int:
    # faiss warns below ~39 training points per list; 4*sqrt(N) is the usual starting point.
    return max(1, min(int(round(4 * math.sqrt(n))), n // 39))


# Factory strings whose index needs no training (everything else is trained on a sample).
_UNTRAINED_FACTORY = re.compile(r"Flat|HNSW\d+(,Flat)?")


def factory_string(index_type: str, *, hnsw_m: int = 32, nlist: int = 1) -> str:
    """The FAISS index-factory string of a named index type; other strings pass through.

    ``flat`` -> ``"Flat"``, ``hnsw`` -> ``"HNSW{m},Flat"``, ``ivf`` -> ``"IVF{nlist},Flat"``;
    e.g. ``"IVF4096,PQ64"``, ``"IVF1024,SQ8"`` or ``"HNSW32,Flat"`` are returned unchanged.
    """
    if index_type == "flat":
        return "Flat"
    if index_type == "hnsw":
        return f"HNSW{hnsw_m},Flat"
    if index_type == "ivf":
        return f"IVF{nlist},Flat"
    if not index_type or index_type != index_type.strip():
        raise ValueError(f"index must be one of {INDEX_TYPES} or a FAISS factory string, got {index_type!r}")
    return index_type


def factory_nlist(factory: str) -> int:
    """Number of inverted lists in a factory string (``"IVF1024,SQ8"`` -> 1024; 0 without IVF)."""
    m = re.search(r"IVF(\d+)", factory)
    return int(m.group(1)) if m else 0


def auto_train_size(n: int, factory: str) -> int:
    """Training sample for a factory string: 256 points per IVF list, at least 16384 for codecs.

    PQ codebooks have 256 centroids per sub-quantizer and faiss wants ~39 points per centroid,
    hence the floor for PQ/SQ-type codecs; a plain ``IVFn,Flat`` keeps ``256 * n`` exactly.
    """
    size = 256 * factory_nlist(factory)
    if not re.fullmatch(r"IVF\d+,Flat", factory):
        size = max(size, 16384)
    return min(n, size)


def needs_training(factory: str) -> bool:
    """Whether indexes of this factory string are trained before vectors are added."""
    return _UNTRAINED_FACTORY.fullmatch(factory) is None


def _train_rows(n: int, size: int, seed: int) -> np.ndarray:
    if size >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


class DenseRetriever(Retriever):
    """Inner-product search over normalized passage embeddings in a FAISS index.

    ``index_type`` is ``flat`` | ``hnsw`` | ``ivf`` (today's names) or any FAISS index-factory
    string, e.g. ``"IVF4096,PQ64"`` (21M e5-base vectors in ~1.5 GB instead of 64 GB flat),
    ``"IVF1024,SQ8"`` or ``"HNSW32,Flat"``. ``nprobe`` applies to IVF indexes, ``ef_search`` to HNSW.
    """

    def __init__(
        self,
        corpus: Corpus,
        encoder: TextEncoder,
        index: Any,
        *,
        index_type: str = "flat",
        ef_search: int = 128,
        nprobe: int = 16,
        device: str = "cpu",
        gpu_shard: bool = False,
        gpu_float16: bool = False,
    ) -> None:
        if index.ntotal != len(corpus):
            raise ValueError(f"index holds {index.ntotal} vectors, corpus has {len(corpus)} passages")
        self.corpus = corpus
        self.encoder = encoder
        self.index = index
        self.index_type = index_type
        self.name = f"dense-{index_type}"
        self._set_search_params(ef_search, nprobe)
        self._search_index = self._maybe_to_gpu(index, device, shard=gpu_shard, float16=gpu_float16)

    def _set_search_params(self, ef_search: int, nprobe: int) -> None:
        import faiss

        ivf = faiss.try_extract_index_ivf(self.index)
        if ivf is not None:
            ivf.nprobe = nprobe
        inner = faiss.downcast_index(self.index)
        if hasattr(inner, "hnsw"):
            inner.hnsw.efSearch = ef_search

    def _maybe_to_gpu(self, index: Any, device: str, *, shard: bool, float16: bool) -> Any:
        """The index to search: the CPU one, or a GPU copy (sharded over all GPUs if asked).

        Sharding splits the vectors over the GPUs (each holds 1/ngpu, results are merged);
        float16 halves GPU memory for Flat/IVF-Flat. Needs faiss-gpu (conda, environment.yml);
        with faiss-cpu or no GPU the CPU index is searched and a log line says so.
        """
        import faiss

        # faiss-gpu has no HNSW; the CPU index stays the one that is saved.
        if not device.startswith("cuda") or hasattr(faiss.downcast_index(index), "hnsw"):
            return index
        if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
            logger.info("device %s asked but faiss has no GPU support; searching on CPU", device)
            return index
        if shard and faiss.get_num_gpus() > 1:
            co = faiss.GpuMultipleClonerOptions()
            co.shard = True
            co.useFloat16 = float16
            return faiss.index_cpu_to_all_gpus(index, co=co)
        dev_id = int(device.split(":", 1)[1]) if ":" in device else 0
        self._gpu_res = faiss.StandardGpuResources()
        co1 = faiss.GpuClonerOptions()
        co1.useFloat16 = float16
        return faiss.index_cpu_to_gpu(self._gpu_res, dev_id, index, co1)

    @staticmethod
    def new_index(
        dim: int, index_type: str, *, hnsw_m: int = 32, ef_construction: int = 200, nlist: int = 1
    ) -> Any:
        """An empty inner-product FAISS index from a named type or a factory string."""
        import faiss

        factory = factory_string(index_type, hnsw_m=hnsw_m, nlist=nlist)
        if factory == "Flat":
            return faiss.IndexFlatIP(dim)  # what index_factory makes, under its own class name
        try:
            index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"index {index_type!r}: faiss cannot build {factory!r} for dim {dim} ({first})") from None
        inner = faiss.downcast_index(index)
        if hasattr(inner, "hnsw"):
            inner.hnsw.efConstruction = ef_construction
        return index

    @classmethod
    def build(
        cls,
        corpus: Corpus,
        encoder: TextEncoder,
        *,
        index_type: str = "flat",
        hnsw_m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 128,
        nlist: int = 0,
        nprobe: int = 16,
        device: str = "cpu",
        chunk_size: int = 16384,
        seed: int = 0,
        train_size: int = 0,
        show_progress: bool = False,
        gpu_shard: bool = False,
        gpu_float16: bool = False,
    ) -> DenseRetriever:
        """Embed the corpus chunk by chunk (bounded memory) into a new index.

        An index that needs training (IVF, PQ, SQ, ...) is trained first on a seeded random
        sample of ``train_size`` passages (0: :func:`auto_train_size`; for ``ivf``, 256 per list).
        """
        n = len(corpus)
        if n == 0:
            raise ValueError("cannot index an empty corpus")
        nlist = min(nlist if nlist > 0 else _auto_nlist(n), n)
        factory = factory_string(index_type, hnsw_m=hnsw_m, nlist=nlist)
        index: Any = None
        starts: Iterable[int] = range(0, n, chunk_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc=f"embed {n} passages", unit="chunk")
        if needs_training(factory):
            sample = _train_rows(n, train_size or auto_train_size(n, factory), seed)
            x = encoder.encode_passages([corpus.contents[int(i)] for i in sample])
            index = cls.new_index(x.shape[1], index_type, hnsw_m=hnsw_m, ef_construction=ef_construction, nlist=nlist)
            index.train(x)
            if len(sample) == n:
                # Small corpus: the sample is the corpus, so do not embed it twice.
                index.add(x)
                starts = range(0)
        for start in starts:
            x = encoder.encode_passages(corpus.contents[start : start + chunk_size])
            if index is None:
                index = cls.new_index(x.shape[1], index_type, hnsw_m=hnsw_m, ef_construction=ef_construction)
            index.add(x)
        return cls(
            corpus, encoder, index, index_type=index_type, ef_search=ef_search, nprobe=nprobe, device=device,
            gpu_shard=gpu_shard, gpu_float16=gpu_float16,
        )

    @classmethod
    def from_embeddings(
        cls,
        corpus: Corpus,
        encoder: TextEncoder,
        embeddings: np.ndarray,
        *,
        index_type: str = "flat",
        hnsw_m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 128,
        nlist: int = 0,
        nprobe: int = 16,
        device: str = "cpu",
        seed: int = 0,
        train_size: int = 0,
        chunk_size: int = 262144,
        gpu_shard: bool = False,
        gpu_float16: bool = False,
    ) -> DenseRetriever:
        """Index passage vectors computed elsewhere (row i = passage i, unit-normalized).

        ``embeddings`` may be a ``np.memmap`` (e.g. a saved ``.npy`` opened with
        ``mmap_mode="r"``): only the training sample and one chunk are in memory at a time.
        """
        if embeddings.ndim != 2 or embeddings.shape[0] != len(corpus):
            raise ValueError(f"embeddings of shape {embeddings.shape} do not match {len(corpus)} passages")
        n, dim = embeddings.shape
        if n == 0:
            raise ValueError("cannot index an empty corpus")
        nlist = min(nlist if nlist > 0 else _auto_nlist(n), n)
        factory = factory_string(index_type, hnsw_m=hnsw_m, nlist=nlist)
        index = cls.new_index(dim, index_type, hnsw_m=hnsw_m, ef_construction=ef_construction, nlist=nlist)
        if needs_training(factory):
            rows = _train_rows(n, train_size or auto_train_size(n, factory), seed)
            index.train(np.ascontiguousarray(embeddings[rows], dtype=np.float32))
        for start in range(0, n, chunk_size):
            index.add(np.ascontiguousarray(embeddings[start : start + chunk_size], dtype=np.float32))
        return cls(
            corpus, encoder, index, index_type=index_type, ef_search=ef_search, nprobe=nprobe, device=device,
            gpu_shard=gpu_shard, gpu_float16=gpu_float16,
        )

    def save(self, folder: str | os.PathLike[str]) -> None:
        import faiss

        faiss.write_index(self.index, str(Path(folder) / "index.faiss"))

    @classmethod
    def load(
        cls,
        folder: str | os.PathLike[str],
        corpus: Corpus,
        encoder: TextEncoder,
        *,
        index_type: str = "flat",
        ef_search: int = 128,
        nprobe: int = 16,
        device: str = "cpu",
        mmap: bool = True,
        gpu_shard: bool = False,
        gpu_float16: bool = False,
        filename: str = "index.faiss",
    ) -> DenseRetriever:
        """Open a saved index; ``mmap`` maps its vectors/codes from disk instead of reading them.

        A memory-mapped index is read-only and shares the page cache between processes, so
        several stage processes over one 21M-passage index hold it once.
        """
        return cls(
            corpus, encoder, read_faiss_index(Path(folder) / filename, mmap=mmap), index_type=index_type,
            ef_search=ef_search, nprobe=nprobe, device=device, gpu_shard=gpu_shard, gpu_float16=gpu_float16,
        )

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        _check_k(k)
        if not queries:
            return []
        k = min(k, len(self.corpus))
        q = self.encoder.encode_queries(queries)
        scores, rows = self._search_index.search(q, k)
        ids, contents = self.corpus.ids, self.corpus.contents
        # Approximate indexes may return -1 when too few candidates were visited.
        return [
            [Hit(ids[i], float(s), contents[i]) for s, i in zip(row_s, row_i) if i >= 0]
            for row_s, row_i in zip(scores, rows)
        ]


def read_faiss_index(path: str | os.PathLike[str], *, mmap: bool = True) -> Any:
    """Read a FAISS index file, memory-mapped (read-only) when ``mmap`` is true.

    ``IO_FLAG_MMAP_IFC`` maps flat codes (Flat, SQ, PQ, HNSW storage) and inverted lists
    alike in faiss >= 1.9; older faiss builds fall back to ``IO_FLAG_MMAP`` (IVF lists only).
    """
    import faiss

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such FAISS index file")
    if not mmap:
        return faiss.read_index(str(path))
    flag = getattr(faiss, "IO_FLAG_MMAP_IFC", faiss.IO_FLAG_MMAP)
    return faiss.read_index(str(path), flag | faiss.IO_FLAG_READ_ONLY)


# --------------------------------------------------------------------------------------------
# Cross-encoder reranking
# --------------------------------------------------------------------------------------------


class CrossEncoderReranker:
    """An ONNX cross-encoder (ms-marco MiniLM) scoring (query, passage) pairs by relevance logit."""

    def __init__(
        self,
        model_dir: str | os.PathLike[str] = DEFAULT_RERANKER,
        *,
        batch_size: int = 32,
        max_length: int = 512,
        device: str = "cpu",
        num_threads: int = 0,
    ) -> None:
        self.model_dir = paths.resolve(model_dir)
        for fname in ("model.onnx", "tokenizer.json"):
            if not (self.model_dir / fname).exists():
                raise FileNotFoundError(f"{self.model_dir / fname}: reranker file missing")
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.num_threads = num_threads
        self.n_pairs_scored = 0
        self._session: Any = None
        self._tok: Any = None

    def score_pairs(self, queries: Sequence[str], passages: Sequence[str]) -> np.ndarray:
        """Relevance logit of each ``(queries[i], passages[i])`` pair (pairs cut to max_length)."""
        if len(queries) != len(passages):
            raise ValueError(f"{len(queries)} queries but {len(passages)} passages")
        if not queries:
            return np.zeros(0, dtype=np.float32)
        if self._session is None:
            self._session = _onnx_session(self.model_dir / "model.onnx", self.device, self.num_threads)
            self._tok = _onnx_tokenizer(self.model_dir / "tokenizer.json", self.max_length)
        inputs = {i.name for i in self._session.get_inputs()}
        encodings = self._tok.encode_batch(list(zip(queries, passages)))
        scores = np.zeros(len(queries), dtype=np.float32)
        for idx in _length_sorted_batches([len(e.ids) for e in encodings], self.batch_size):
            feeds = _batch_arrays([encodings[i] for i in idx], inputs)
            logits = self._session.run(["logits"], feeds)[0]
            scores[idx] = logits.reshape(len(idx), -1)[:, 0]
        self.n_pairs_scored += len(queries)
        return scores

    def rerank(self, queries: Sequence[str], hits: Sequence[Sequence[Hit]], k: int) -> list[list[Hit]]:
        """Reorder each query's hits by cross-encoder score and keep the top ``k``.

        All pairs of the batch are scored together; a returned hit's score is the logit.
        """
        _check_k(k)
        if len(queries) != len(hits):
            raise ValueError(f"{len(queries)} queries but {len(hits)} hit lists")
        flat_q = [q for q, hs in zip(queries, hits) for _ in hs]
        flat_p = [h.contents for hs in hits for h in hs]
        flat_scores = self.score_pairs(flat_q, flat_p)
        out: list[list[Hit]] = []
        pos = 0
        for hs in hits:
            s = flat_scores[pos : pos + len(hs)]
            pos += len(hs)
            order = np.argsort(-s, kind="stable")[:k]
            out.append([Hit(hs[i].doc_id, float(s[i]), hs[i].contents) for i in order])
        return out


class RerankedRetriever(Retriever):
    """Retrieve ``depth`` candidates with ``base``, then keep the reranker's top ``k``."""

    def __init__(self, base: Retriever, reranker: CrossEncoderReranker, depth: int = 20) -> None:
        self.base = base
        self.reranker = reranker
        self.depth = depth
        self.corpus = base.corpus
        self.name = f"{base.name}+rerank"
        self.loaded_from_cache = base.loaded_from_cache

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        _check_k(k)
        if not queries:
            return []
        candidates = self.base.search(queries, max(k, self.depth))
        return self.reranker.rerank(queries, candidates, k)


# --------------------------------------------------------------------------------------------
# Config, index cache and the factory
# --------------------------------------------------------------------------------------------


def validate_retriever_cfg(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults filled in; one clear error for an unknown key, wrong type or bad choice."""
    unknown = sorted(set(cfg) - set(RETRIEVER_DEFAULTS))
    if unknown:
        raise ValueError(
            f"retriever config: unknown key {unknown[0]!r}; known keys: {sorted(RETRIEVER_DEFAULTS)}"
        )
    out = dict(RETRIEVER_DEFAULTS)
    for key, value in cfg.items():
        default = RETRIEVER_DEFAULTS[key]
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (str, os.PathLike))
        if not ok:
            raise ValueError(
                f"retriever config: key {key!r} must be {type(default).__name__}, "
                f"got {type(value).__name__} {value!r}"
            )
        out[key] = value
    choices = {"kind": KINDS, "index": INDEX_TYPES, "encoder_type": ENCODER_TYPES, "pooling": ("cls", "mean")}
    for key, allowed in choices.items():
        if out[key] not in allowed:
            raise ValueError(f"retriever config: key {key!r} must be one of {allowed}, got {out[key]!r}")
    if out["index_factory"] != str(out["index_factory"]).strip():
        raise ValueError(f"retriever config: key 'index_factory' has surrounding spaces: {out['index_factory']!r}")
    if out["train_size"] < 0:
        raise ValueError(f"retriever config: key 'train_size' must be >= 0, got {out['train_size']}")
    for key in ("batch_size", "rerank_depth", "rerank_batch_size", "fusion_depth", "hnsw_m", "max_length"):
        if out[key] < 1:
            raise ValueError(f"retriever config: key {key!r} must be >= 1, got {out[key]}")
    return out


def _key_digest(key: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


def _cached_build(
    cache_dir: Path | None,
    key: dict[str, Any],
    build: Callable[[], Retriever],
    load: Callable[[Path], Retriever],
) -> Retriever:
    """Load the index stored under ``key`` or build and store it (atomically, by rename).

    A folder that fails to load (missing, truncated, mismatched key) is discarded and rebuilt.
    """
    if cache_dir is None:
        return build()
    folder = Path(cache_dir) / f"{key['kind']}-{_key_digest(key)}"
    if folder.exists():
        try:
            meta = read_json(folder / "meta.json")
            if meta.get("key") != key:
                raise ValueError("cache key mismatch")
            retriever = load(folder)
            retriever.loaded_from_cache = True
            logger.info("loaded %s index from %s", key["kind"], folder)
            return retriever
        except Exception as exc:  # corrupt caches fail in library-specific ways; all mean rebuild
            logger.warning("index cache %s unusable (%s: %s); rebuilding", folder, type(exc).__name__, exc)
            _remove_dir(folder)
    t0 = time.perf_counter()
    retriever = build()
    build_s = time.perf_counter() - t0
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
        try:
            retriever.save(tmp)  # type: ignore[attr-defined]
            meta = {"key": key, "build_seconds": round(build_s, 3), "name": retriever.name}
            write_json(tmp / "meta.json", meta)
            os.rename(tmp, folder)
        except OSError:
            _remove_dir(tmp)
            if not folder.exists():  # not a concurrent builder winning the rename: a real failure
                raise
    except OSError as exc:
        logger.warning("could not store index in %s (%s); continuing uncached", folder, exc)
    return retriever


def _remove_dir(folder: Path) -> None:
    # Rename first so that a half-deleted folder is never mistaken for an index.
    if not folder.exists():
        return
    trash = folder.with_name(f".{folder.name}.{os.getpid()}.{time.time_ns()}.trash")
    try:
        os.rename(folder, trash)
    except OSError:
        trash = folder
    shutil.rmtree(trash, ignore_errors=True)


def build_retriever(
    cfg: Mapping[str, Any],
    corpus: Corpus,
    *,
    cache_dir: str | os.PathLike[str] | None = paths.INDEX_CACHE_DIR,
    encoder: TextEncoder | None = None,
) -> Retriever:
    """Build (or load from the index cache) the retriever described by ``cfg``.

    Args:
        cfg: the ``retriever`` params section; keys and defaults in :data:`RETRIEVER_DEFAULTS`.
        corpus: the passages to index.
        cache_dir: where content-addressed indexes live; None (or cfg ``cache: false``) disables.
        encoder: an already opened encoder to use instead of ``cfg["encoder"]``.

    Returns:
        A :class:`Retriever`; its ``loaded_from_cache`` says whether any index was rebuilt.
    """
    c = validate_retriever_cfg(cfg)
    cache = Path(cache_dir) if (cache_dir is not None and c["cache"]) else None
    fingerprint = corpus_fingerprint(corpus)
    base: Retriever
    if c["kind"] == "bm25":
        base = _build_bm25(c, corpus, fingerprint, cache)
    elif c["kind"] == "dense":
        base = _build_dense(c, corpus, fingerprint, cache, encoder)
    else:
        members = [
            _build_bm25(c, corpus, fingerprint, cache),
            _build_dense(c, corpus, fingerprint, cache, encoder),
        ]
        base = HybridRetriever(members, rrf_k=c["rrf_k"], depth=c["fusion_depth"])
    if c["rerank"]:
        reranker = CrossEncoderReranker(
            c["reranker"],
            batch_size=c["rerank_batch_size"],
            device=c["device"],
            num_threads=c["num_threads"],
        )
        return RerankedRetriever(base, reranker, depth=c["rerank_depth"])
    return base


def _build_bm25(c: Mapping[str, Any], corpus: Corpus, fingerprint: str, cache: Path | None) -> Retriever:
    import bm25s

    _, stemmer_name = _stemmer()
    key = {
        "kind": "bm25",
        "corpus": fingerprint,
        "k1": float(c["bm25_k1"]),
        "b": float(c["bm25_b"]),
        "method": c["bm25_method"],
        "stopwords": "en",
        "stemmer": stemmer_name,
        "bm25s": bm25s.__version__,
    }
    return _cached_build(
        cache,
        key,
        lambda: BM25Retriever.build(
            corpus, k1=c["bm25_k1"], b=c["bm25_b"], method=c["bm25_method"], num_threads=c["num_threads"]
        ),
        lambda folder: BM25Retriever.load(folder, corpus, num_threads=c["num_threads"], mmap=c["mmap"]),
    )


def _build_dense(
    c: Mapping[str, Any], corpus: Corpus, fingerprint: str, cache: Path | None, encoder: TextEncoder | None
) -> Retriever:
    if encoder is None:
        encoder = load_encoder(
            c["encoder"],
            encoder_type=c["encoder_type"],
            device=c["device"],
            batch_size=c["batch_size"],
            query_prefix=c["query_prefix"],
            pooling=c["pooling"],
            max_length=c["max_length"],
            num_threads=c["num_threads"],
            show_progress=c["show_progress"],
        )
    index_type = c["index_factory"] or c["index"]
    index_params: dict[str, Any] = {"index": index_type}
    if c["index_factory"]:
        # Factory strings carry their own sizes; sampling and HNSW build depth still matter.
        factory = factory_string(c["index_factory"])
        index_params.update(train_size=c["train_size"] or auto_train_size(len(corpus), factory))
        if "HNSW" in factory:
            index_params.update(ef_construction=c["hnsw_ef_construction"])
    elif c["index"] == "hnsw":
        index_params.update(hnsw_m=c["hnsw_m"], ef_construction=c["hnsw_ef_construction"])
    elif c["index"] == "ivf":
        index_params.update(nlist=c["nlist"] if c["nlist"] > 0 else _auto_nlist(len(corpus)))
        if c["train_size"]:
            index_params.update(train_size=c["train_size"])
    key = {"kind": "dense", "corpus": fingerprint, "encoder": encoder.identity(), **index_params}
    search_kw = {
        "index_type": index_type,
        "ef_search": c["hnsw_ef_search"],
        "nprobe": c["nprobe"],
        "device": c["device"],
        "gpu_shard": c["gpu_shard"],
        "gpu_float16": c["gpu_float16"],
    }
    return _cached_build(
        cache,
        key,
        lambda: DenseRetriever.build(
            corpus,
            encoder,
            hnsw_m=c["hnsw_m"],
            ef_construction=c["hnsw_ef_construction"],
            nlist=index_params.get("nlist", 0),
            train_size=c["train_size"],
            show_progress=c["show_progress"],
            **search_kw,
        ),
        lambda folder: DenseRetriever.load(folder, corpus, encoder, mmap=c["mmap"], **search_kw),
    )


# --------------------------------------------------------------------------------------------
# Existing FlashRAG indexes
# --------------------------------------------------------------------------------------------


def open_flashrag(
    corpus_jsonl: str | os.PathLike[str],
    *,
    faiss_index: str | os.PathLike[str] | None = None,
    encoder: TextEncoder | None = None,
    bm25_dir: str | os.PathLike[str] | None = None,
    store_dir: str | os.PathLike[str] | None = None,
    mmap: bool = True,
    nprobe: int = 16,
    ef_search: int = 128,
    device: str = "cpu",
    gpu_shard: bool = False,
    gpu_float16: bool = False,
    rrf_k: int = 60,
    fusion_depth: int = 100,
) -> Retriever:
    """Use a FlashRAG corpus and its prebuilt indexes as they are, without re-embedding.

    FlashRAG's ``index_builder`` writes a FAISS file (e.g. ``e5_Flat.index``: inner product over
    the corpus rows in file order) and, for BM25 with the bm25s backend, a bm25s folder (with
    the tokenizer vocabulary beside the index). Both are opened memory-mapped by default, and
    the corpus through a memory-mapped store (:mod:`ragcritic_lib.data.corpus_store`), so a 21M-
    passage Wikipedia costs offsets plus page cache, not 50 GB of strings.

    Args:
        corpus_jsonl: the FlashRAG corpus the indexes were built from (same rows, same order).
        faiss_index: the ``.index`` file; needs ``encoder``, the same model with the same pooling
            and query instruction the index was built with (for e5: mean pooling, ``"query: "``).
        encoder: query encoder for ``faiss_index``.
        bm25_dir: a bm25s index folder.
        store_dir: where the corpus store lives (default ``.cache/corpora``).
        mmap: memory-map the FAISS and bm25s files.
        nprobe, ef_search: IVF / HNSW search depth, when the index is one.
        device, gpu_shard, gpu_float16: GPU placement of the FAISS index (faiss-gpu only).
        rrf_k, fusion_depth: reciprocal rank fusion when both indexes are given.

    Returns:
        A dense, BM25, or (both given) hybrid retriever.

    Raises:
        ValueError: neither index given, a FAISS index without an encoder, or an index whose
            size differs from the corpus (names the file).
    """
    from ragcritic_lib.data.corpus_store import DEFAULT_STORE_DIR, open_corpus

    if faiss_index is None and bm25_dir is None:
        raise ValueError("open_flashrag: give faiss_index (with encoder), bm25_dir, or both")
    if faiss_index is not None and encoder is None:
        raise ValueError(f"open_flashrag: faiss_index {faiss_index} needs the encoder it was built with")
    corpus = open_corpus(corpus_jsonl, store_dir if store_dir is not None else DEFAULT_STORE_DIR)
    members: list[Retriever] = []
    if bm25_dir is not None:
        members.append(BM25Retriever.load(bm25_dir, corpus, mmap=mmap))
    if faiss_index is not None:
        assert encoder is not None
        import faiss

        index = read_faiss_index(faiss_index, mmap=mmap)
        if index.ntotal != len(corpus):
            raise ValueError(f"{faiss_index}: index holds {index.ntotal} vectors, {corpus_jsonl} has {len(corpus)} passages")
        if index.metric_type != faiss.METRIC_INNER_PRODUCT:
            logger.warning("%s: metric %s is not inner product; scores are distances", faiss_index, index.metric_type)
        members.append(
            DenseRetriever(
                corpus, encoder, index, index_type=Path(faiss_index).stem, ef_search=ef_search, nprobe=nprobe,
                device=device, gpu_shard=gpu_shard, gpu_float16=gpu_float16,
            )
        )
    if len(members) == 1:
        return members[0]
    return HybridRetriever(members, rrf_k=rrf_k, depth=fusion_depth)
