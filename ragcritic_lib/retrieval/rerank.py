"""Cross-encoder reranking of another retriever's candidates."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragcritic_lib import paths
from ragcritic_lib.retrieval.base import (
    DEFAULT_RERANKER,
    Hit,
    Retriever,
    _check_k,
)
from ragcritic_lib.retrieval.encoders import (
    _batch_arrays,
    _length_sorted_batches,
    _onnx_session,
    _onnx_tokenizer,
)

logger = logging.getLogger(__name__)

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


