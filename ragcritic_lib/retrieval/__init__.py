"""Passage retrieval: BM25, dense (FAISS), hybrid fusion and cross-encoder reranking.

Every retriever answers a batch of queries with ranked :class:`Hit` lists over one
:class:`Corpus` in FlashRAG format (``{"id", "contents": "Title\\ntext"}``).
:func:`build_retriever` turns the ``retriever`` params section into a retriever and keeps each
index in a content-addressed folder under ``cache_dir``, keyed by the corpus content, the
retriever kind, the model and the index parameters, so a re-run loads instead of re-embedding.

The package's parts: ``base`` (defaults, hits, the interface, fusion), ``bm25``, ``encoders``,
``dense`` (FAISS), ``rerank`` and ``build`` (validation, the index cache, the factory).

Heavy libraries (bm25s, faiss, sentence-transformers, onnxruntime, tokenizers) are imported
inside the functions that use them: importing this module stays fast and torch-free.
"""

from __future__ import annotations

from ragcritic_lib.data.corpus import Corpus, corpus_fingerprint  # noqa: F401 (retrieval.Corpus is part of its interface)
from ragcritic_lib.retrieval.base import (  # noqa: F401 (the package's public interface)
    BGE_QUERY_PREFIX,
    DEFAULT_ENCODER,
    DEFAULT_RERANKER,
    ENCODER_TYPES,
    Hit,
    HybridRetriever,
    INDEX_TYPES,
    KINDS,
    RETRIEVER_DEFAULTS,
    Retriever,
    model_fingerprint,
    reciprocal_rank_fusion,
)
from ragcritic_lib.retrieval.bm25 import (  # noqa: F401 (the package's public interface)
    BM25Retriever,
    tokenize_to_ids,
)
from ragcritic_lib.retrieval.encoders import (  # noqa: F401 (the package's public interface)
    OnnxEncoder,
    SentenceTransformerEncoder,
    TextEncoder,
    load_encoder,
)
from ragcritic_lib.retrieval.dense import (  # noqa: F401 (the package's public interface)
    DenseRetriever,
    auto_train_size,
    factory_nlist,
    factory_string,
    needs_training,
    read_faiss_index,
)
from ragcritic_lib.retrieval.rerank import (  # noqa: F401 (the package's public interface)
    CrossEncoderReranker,
    RerankedRetriever,
)
from ragcritic_lib.retrieval.build import (  # noqa: F401 (the package's public interface)
    build_retriever,
    export_indexes,
    index_keys,
    open_flashrag,
    validate_retriever_cfg,
)
