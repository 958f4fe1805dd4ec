"""BM25 retrieval with bm25s: stemmed token ids, a memory-mappable index."""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragcritic_lib.data.corpus import Corpus
from ragcritic_lib.retrieval.base import (
    Hit,
    Retriever,
    _check_k,
)

logger = logging.getLogger(__name__)

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


