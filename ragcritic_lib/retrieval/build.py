"""From the ``retriever`` params section to a retriever: validation, the content-addressed
index cache and :func:`build_retriever`; :func:`open_flashrag` opens FlashRAG's own indexes."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.data.corpus import Corpus, corpus_fingerprint
from ragcritic_lib.io import read_json, write_json
from ragcritic_lib.retrieval.base import (
    ENCODER_TYPES,
    INDEX_TYPES,
    KINDS,
    RETRIEVER_DEFAULTS,
    HybridRetriever,
    Retriever,
)
from ragcritic_lib.retrieval.bm25 import (
    BM25Retriever,
    _stemmer,
)
from ragcritic_lib.retrieval.dense import (
    DenseRetriever,
    _auto_nlist,
    auto_train_size,
    factory_string,
    read_faiss_index,
)
from ragcritic_lib.retrieval.encoders import (
    TextEncoder,
    load_encoder,
)
from ragcritic_lib.retrieval.rerank import (
    CrossEncoderReranker,
    RerankedRetriever,
)

logger = logging.getLogger(__name__)

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


def index_folder_name(key: Mapping[str, Any]) -> str:
    """The content-addressed folder name of the index stored under ``key``."""
    return f"{key['kind']}-{_key_digest(key)}"


def _load_shipped(shipped_dirs: Sequence[Path], key: dict[str, Any],
                  load: Callable[[Path], Retriever]) -> Retriever | None:
    """The index under ``key`` from the first read-only folder that holds a loadable copy, else None
    (a copy that fails to load is left in place and skipped, never deleted)."""
    for base in shipped_dirs:
        folder = Path(base) / index_folder_name(key)
        if not folder.exists():
            continue
        try:
            if read_json(folder / "meta.json").get("key") != key:
                raise ValueError("key mismatch")
            retriever = load(folder)
        except Exception as exc:  # unusable copies fail in library-specific ways; all mean "look further"
            logger.warning("shipped index %s unusable (%s: %s); skipped", folder, type(exc).__name__, exc)
            continue
        retriever.loaded_from_cache = True
        logger.info("loaded %s index from %s", key["kind"], folder)
        return retriever
    return None


def _cached_build(
    cache_dir: Path | None,
    key: dict[str, Any],
    build: Callable[[], Retriever],
    load: Callable[[Path], Retriever],
    shipped_dirs: Sequence[Path] = (),
) -> Retriever:
    """Load the index stored under ``key`` from a shipped folder or the cache, or build and store
    it in the cache (atomically, by rename).

    A cache folder that fails to load (missing, truncated, mismatched key) is discarded and rebuilt.
    """
    shipped = _load_shipped(shipped_dirs, key, load)
    if shipped is not None:
        return shipped
    if cache_dir is None:
        return build()
    folder = Path(cache_dir) / index_folder_name(key)
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
    shipped_dirs: Sequence[str | os.PathLike[str]] = (),
) -> Retriever:
    """Build (or load from shipped indexes or the index cache) the retriever described by ``cfg``.

    Args:
        cfg: the ``retriever`` params section; keys and defaults in :data:`RETRIEVER_DEFAULTS`.
        corpus: the passages to index.
        cache_dir: where content-addressed indexes live; None (or cfg ``cache: false``) disables.
        encoder: an already opened encoder to use instead of ``cfg["encoder"]``.
        shipped_dirs: read-only folders of content-addressed indexes (:func:`export_indexes`),
            looked in first; with cfg ``cache: false`` they are not read either.

    Returns:
        A :class:`Retriever`; its ``loaded_from_cache`` says whether any index was rebuilt.
    """
    c = validate_retriever_cfg(cfg)
    cache = Path(cache_dir) if (cache_dir is not None and c["cache"]) else None
    shipped = [Path(d) for d in shipped_dirs] if c["cache"] else []
    fingerprint = corpus_fingerprint(corpus)
    base: Retriever
    if c["kind"] == "bm25":
        base = _build_bm25(c, corpus, fingerprint, cache, shipped)
    elif c["kind"] == "dense":
        base = _build_dense(c, corpus, fingerprint, cache, encoder, shipped)
    else:
        members = [
            _build_bm25(c, corpus, fingerprint, cache, shipped),
            _build_dense(c, corpus, fingerprint, cache, encoder, shipped),
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


def _bm25_key(c: Mapping[str, Any], fingerprint: str) -> dict[str, Any]:
    import bm25s

    _, stemmer_name = _stemmer()
    return {
        "kind": "bm25",
        "corpus": fingerprint,
        "k1": float(c["bm25_k1"]),
        "b": float(c["bm25_b"]),
        "method": c["bm25_method"],
        "stopwords": "en",
        "stemmer": stemmer_name,
        "bm25s": bm25s.__version__,
    }


def _build_bm25(c: Mapping[str, Any], corpus: Corpus, fingerprint: str, cache: Path | None,
                shipped: Sequence[Path] = ()) -> Retriever:
    key = _bm25_key(c, fingerprint)
    return _cached_build(
        cache,
        key,
        lambda: BM25Retriever.build(
            corpus, k1=c["bm25_k1"], b=c["bm25_b"], method=c["bm25_method"], num_threads=c["num_threads"]
        ),
        lambda folder: BM25Retriever.load(folder, corpus, num_threads=c["num_threads"], mmap=c["mmap"]),
        shipped,
    )


def _open_encoder(c: Mapping[str, Any]) -> TextEncoder:
    return load_encoder(
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


def _dense_index_params(c: Mapping[str, Any], n_passages: int) -> dict[str, Any]:
    index_type = c["index_factory"] or c["index"]
    index_params: dict[str, Any] = {"index": index_type}
    if c["index_factory"]:
        # Factory strings carry their own sizes; sampling and HNSW build depth still matter.
        factory = factory_string(c["index_factory"])
        index_params.update(train_size=c["train_size"] or auto_train_size(n_passages, factory))
        if "HNSW" in factory:
            index_params.update(ef_construction=c["hnsw_ef_construction"])
    elif c["index"] == "hnsw":
        index_params.update(hnsw_m=c["hnsw_m"], ef_construction=c["hnsw_ef_construction"])
    elif c["index"] == "ivf":
        index_params.update(nlist=c["nlist"] if c["nlist"] > 0 else _auto_nlist(n_passages))
        if c["train_size"]:
            index_params.update(train_size=c["train_size"])
    return index_params


def _build_dense(
    c: Mapping[str, Any], corpus: Corpus, fingerprint: str, cache: Path | None, encoder: TextEncoder | None,
    shipped: Sequence[Path] = (),
) -> Retriever:
    if encoder is None:
        encoder = _open_encoder(c)
    index_type = c["index_factory"] or c["index"]
    index_params = _dense_index_params(c, len(corpus))
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
        shipped,
    )


def index_keys(cfg: Mapping[str, Any], corpus: Corpus, *, encoder: TextEncoder | None = None) -> list[dict[str, Any]]:
    """The cache keys of the indexes the retriever ``cfg`` describes reads over ``corpus`` (one
    for bm25 or dense, two for hybrid; a reranker has no index)."""
    c = validate_retriever_cfg(cfg)
    fingerprint = corpus_fingerprint(corpus)
    keys = []
    if c["kind"] in ("bm25", "hybrid"):
        keys.append(_bm25_key(c, fingerprint))
    if c["kind"] in ("dense", "hybrid"):
        enc = encoder if encoder is not None else _open_encoder(c)
        keys.append({"kind": "dense", "corpus": fingerprint, "encoder": enc.identity(),
                     **_dense_index_params(c, len(corpus))})
    return keys


def _holds(folder: Path, key: Mapping[str, Any]) -> bool:
    """Whether ``folder`` is an index stored under ``key`` (by its meta.json)."""
    try:
        return read_json(folder / "meta.json").get("key") == key
    except Exception:  # missing or unreadable metadata: not that index
        return False


def export_indexes(
    cfg: Mapping[str, Any],
    corpus: Corpus,
    dest: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] = paths.INDEX_CACHE_DIR,
    encoder: TextEncoder | None = None,
) -> list[Path]:
    """Put the indexes of the retriever ``cfg`` over ``corpus`` into ``dest`` as the same
    content-addressed folders as the index cache, for :func:`build_retriever`'s ``shipped_dirs``:
    a stage ships them and later stages load them instead of re-encoding the corpus.

    Each index is copied from the cache; one the cache lacks is kept as ``dest`` holds it, or
    built into the cache and copied. Returns the folders, one per index of ``cfg``.
    """
    c = {**validate_retriever_cfg(cfg), "cache": True}
    out = []
    for key in index_keys(c, corpus, encoder=encoder):
        src, target = Path(cache_dir) / index_folder_name(key), Path(dest) / index_folder_name(key)
        if not _holds(src, key):
            if _holds(target, key):
                out.append(target)
                continue
            build_retriever(c, corpus, cache_dir=cache_dir, encoder=encoder)
            if not _holds(src, key):
                raise OSError(f"index cache {cache_dir}: could not store the {key['kind']} index to export it")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        _remove_dir(tmp)
        shutil.copytree(src, tmp)
        _remove_dir(target)
        os.rename(tmp, target)
        out.append(target)
    return out


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
