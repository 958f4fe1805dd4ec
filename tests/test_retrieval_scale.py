"""Tests for the large-corpus paths of retrieval: memory-mapped corpus store, FAISS factory
strings and memory-mapped indexes, bm25s token ids, and opening prebuilt FlashRAG indexes.

Everything runs on a few thousand synthetic passages with a hashing encoder (no model).
"""

from __future__ import annotations

import json
import sys
import types
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragcritic_lib.data import corpus_store
from ragcritic_lib.data.corpus_store import StringColumn, build_corpus_store, load_corpus_store, open_corpus
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.retrieval import (
    BM25Retriever,
    Corpus,
    DenseRetriever,
    HybridRetriever,
    TextEncoder,
    auto_train_size,
    build_retriever,
    corpus_fingerprint,
    factory_string,
    needs_training,
    open_flashrag,
    read_faiss_index,
    tokenize_to_ids,
    validate_retriever_cfg,
)

WORDS = (
    "river mountain castle harbor violin comet glacier orchard lantern falcon meadow canyon "
    "bridge desert engine island jungle kernel library marble nebula oasis piano quartz "
    "reactor saddle temple tunnel valley walnut"
).split()
STOP = ["the", "of", "and", "a", "in", "is"]


def _synthetic_records(n: int, seed: int = 7) -> list[dict[str, str]]:
    """n passages: a title word pair and 12 Zipf-ish words, some stopwords, deterministic."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    weights /= weights.sum()
    out = []
    for i in range(n):
        words = [WORDS[j] for j in rng.choice(len(WORDS), size=12, p=weights)]
        words[3:3] = [STOP[i % len(STOP)]]
        title = f"{WORDS[i % len(WORDS)]} {WORDS[(i // len(WORDS)) % len(WORDS)]} {i}"
        out.append({"id": str(i), "contents": f"{title}\n{' '.join(words)}."})
    return out


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


class HashingEncoder(TextEncoder):
    """Hashed bag of words times a fixed Gaussian matrix: a deterministic stand-in for a model.

    The projection makes vectors dense, as real embeddings are (sparse count vectors have
    mostly-zero PQ sub-vectors, which k-means handles very slowly).
    """

    name = "hashing"

    def __init__(self, dim: int = 64, buckets: int = 1024) -> None:
        super().__init__()
        self.dim = dim
        self.buckets = buckets
        self._proj = np.random.default_rng(0).standard_normal((buckets, dim)).astype(np.float32)

    def identity(self) -> dict[str, Any]:
        return {"type": "hashing-projection", "dim": self.dim, "buckets": self.buckets}

    def _encode(self, texts: list[str]) -> np.ndarray:
        counts = np.zeros((len(texts), self.buckets), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().replace(".", " ").split():
                counts[i, zlib.crc32(word.encode()) % self.buckets] += 1.0
        out = counts @ self._proj
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


@pytest.fixture(autouse=True)
def _one_blas_thread() -> Any:
    """faiss k-means calls BLAS on tiny matrices: threaded BLAS on a busy machine is ~60x slower."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def records() -> list[dict[str, str]]:
    return _synthetic_records(3000)


@pytest.fixture()
def jsonl(tmp_path: Path, records: list[dict[str, str]]) -> Path:
    return _write_jsonl(tmp_path / "corpus.jsonl", records)


def _ids(results: list[list[Any]]) -> list[list[str]]:
    return [[h.doc_id for h in hs] for hs in results]


# ---------------------------------------------------------------------------------- corpus store


def test_store_reads_like_the_jsonl(tmp_path: Path) -> None:
    recs = [
        {"id": "a", "contents": "Zürich\nCity on the Limmat — ünïcode ✓"},
        {"id": 7, "title": "T", "text": "title and text joined"},
        {"id": "e", "contents": ""},
        {"id": "n", "title": "", "text": "no title"},
    ]
    path = _write_jsonl(tmp_path / "c.jsonl", recs)
    with path.open("a") as fh:
        fh.write("\n")  # a blank line is skipped, as by Corpus.from_jsonl
    stored = open_corpus(path, tmp_path / "store")
    plain = Corpus.from_jsonl(path)
    assert stored.is_stored and not plain.is_stored
    assert list(stored.ids) == ["a", "7", "e", "n"] == plain.ids
    assert list(stored.contents) == plain.contents
    assert stored.contents[1] == "T\ntitle and text joined"
    assert stored.contents[-1] == "no title" and stored.contents[2] == ""
    assert stored.contents[1:3] == plain.contents[1:3]
    assert stored.title(0) == "Zürich" and stored.body(0) == "City on the Limmat — ünïcode ✓"
    assert stored.text_of("7") == "T\ntitle and text joined"
    assert stored.position("n") == 3
    with pytest.raises(KeyError):
        stored.position("zz")
    with pytest.raises(IndexError):
        stored.contents[4]
    assert corpus_fingerprint(stored) == corpus_fingerprint(plain)


def test_store_fingerprint_equals_list_corpus_and_is_the_folder_name(jsonl: Path, tmp_path: Path) -> None:
    folder = build_corpus_store(jsonl, tmp_path / "store")
    plain = Corpus.from_jsonl(jsonl)
    assert folder.name == corpus_fingerprint(plain)
    stored = load_corpus_store(folder)
    assert len(stored) == 3000
    assert stored.ids[2999] == "2999" and stored.contents[123] == plain.contents[123]
    assert np.load(folder / "contents.offsets.npy", mmap_mode="r").dtype == np.uint64
    # Every id maps back to its row through the hashed lookup.
    assert all(stored.position(plain.ids[i]) == i for i in range(0, 3000, 37))


def test_store_is_reused_while_the_file_is_unchanged(jsonl: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    first = build_corpus_store(jsonl, root)

    def refuse(*args: Any) -> Any:
        raise AssertionError("the JSONL was read again")

    monkeypatch.setattr(corpus_store, "_write_store", refuse)
    assert build_corpus_store(jsonl, root) == first
    monkeypatch.undo()
    # An edited file gets a new store under its new fingerprint; the old one stays.
    with jsonl.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "extra", "contents": "X\nmore"}) + "\n")
    second = build_corpus_store(jsonl, root)
    assert second != first and first.exists()
    assert len(load_corpus_store(second)) == 3001
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]


def test_store_shared_by_equal_files(jsonl: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(jsonl.read_bytes())
    assert build_corpus_store(jsonl, tmp_path / "s") == build_corpus_store(copy, tmp_path / "s")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "z", "contents": ', "invalid JSON"),
        ('{"contents": "A\\nB"}', "missing key 'id'"),
        ('{"id": "z"}', "missing key 'contents'"),
        ('{"id": "5", "contents": "dup\\nx"}', "duplicate id '5'"),
        ('["id", "contents"]', "expected a JSON object"),
    ],
)
def test_store_bad_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl", _synthetic_records(10))
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n" + json.dumps({"id": "5", "contents": "later\nduplicate"}) + "\n")
    with pytest.raises(DataFormatError) as err:
        build_corpus_store(path, tmp_path / "store")
    assert f"{path}:11:" in str(err.value) and message in str(err.value)
    assert not [p for p in (tmp_path / "store").iterdir() if p.name != "sources"]


def test_string_column_pickles_by_path(jsonl: Path, tmp_path: Path) -> None:
    import pickle

    stored = open_corpus(jsonl, tmp_path / "store")
    col = pickle.loads(pickle.dumps(stored.contents))
    assert isinstance(col, StringColumn) and col[17] == stored.contents[17] and len(col) == 3000


# ---------------------------------------------------------------------------------- bm25s ids


def test_token_id_index_scores_equal_string_token_index(records: list[dict[str, str]]) -> None:
    import bm25s

    texts = [r["contents"] for r in records] + ["the of and", "", "a"]  # stopword-only and empty
    ids, vocab = tokenize_to_ids(texts, None, chunk_size=700)  # several chunks, one vocabulary
    by_ids = bm25s.BM25()
    by_ids.index((ids, vocab), show_progress=False)
    by_strings = bm25s.BM25()
    by_strings.index(bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False), show_progress=False)
    queries = bm25s.tokenize(["river castle", "nebula quartz walnut", "the zzz", "temple 42"], stopwords="en",
                             return_ids=False, show_progress=False)
    d1, s1 = by_ids.retrieve(queries, k=25, show_progress=False)
    d2, s2 = by_strings.retrieve(queries, k=25, show_progress=False)
    assert np.array_equal(s1, s2)
    assert np.array_equal(d1, d2)
    # bm25s adds its empty token to the vocabulary it is given; the words are the same.
    assert sorted(t for t in vocab if t) == sorted(t for t in by_strings.vocab_dict if t)


def test_bm25_on_stored_corpus_equals_list_corpus_and_loads_mmapped(jsonl: Path, tmp_path: Path) -> None:
    plain = Corpus.from_jsonl(jsonl)
    stored = open_corpus(jsonl, tmp_path / "store")
    queries = ["river castle harbor", "comet glacier", "falcon 1234", "violin"]
    expected = BM25Retriever.build(plain).search(queries, 10)
    got = BM25Retriever.build(stored).search(queries, 10)
    assert [[(h.doc_id, h.score, h.contents) for h in hs] for hs in got] == [
        [(h.doc_id, h.score, h.contents) for h in hs] for hs in expected
    ]
    cache = tmp_path / "idx"
    build_retriever({"kind": "bm25"}, plain, cache_dir=cache)
    loaded = build_retriever({"kind": "bm25"}, stored, cache_dir=cache)  # same key: same content
    assert loaded.loaded_from_cache
    assert isinstance(loaded.index.scores["data"], np.memmap)
    assert _ids(loaded.search(queries, 10)) == _ids(expected)
    eager = build_retriever({"kind": "bm25", "mmap": False}, stored, cache_dir=cache)
    assert not isinstance(eager.index.scores["data"], np.memmap)


def test_bm25_passes_pystemmer_object_to_bm25s(monkeypatch: pytest.MonkeyPatch) -> None:
    """bm25s.tokenize stems the list of unique tokens (``stemWords``), never one word."""

    class FakeStemmer:
        def __init__(self, lang: str) -> None:
            assert lang == "english"

        def stemWord(self, word: str) -> str:
            return word[:-1] if word.endswith("s") else word

        def stemWords(self, words: list[str]) -> list[str]:
            return [self.stemWord(w) for w in words]

    monkeypatch.setitem(sys.modules, "Stemmer", types.SimpleNamespace(Stemmer=FakeStemmer))
    corpus = Corpus(["a", "b"], ["Castles\nstone castles on hills", "Rivers\nwide rivers in valleys"])
    bm25 = BM25Retriever.build(corpus)
    assert bm25.stemmer_name == "snowball-english"
    assert bm25.search_one("castle", 1)[0].doc_id == "a"  # matches "castles" through the stem
    assert bm25.search_one("river valley", 1)[0].doc_id == "b"


# ---------------------------------------------------------------------------------- faiss factory


def test_factory_strings_for_named_types() -> None:
    assert factory_string("flat") == "Flat"
    assert factory_string("hnsw", hnsw_m=16) == "HNSW16,Flat"
    assert factory_string("ivf", nlist=40) == "IVF40,Flat"
    assert factory_string("IVF4096,PQ64") == "IVF4096,PQ64"
    with pytest.raises(ValueError, match="FAISS factory string"):
        factory_string(" IVF8,Flat")
    assert [needs_training(f) for f in ("Flat", "HNSW32,Flat", "HNSW32", "IVF8,Flat", "SQ8", "IVF8,PQ4")] == [
        False, False, False, True, True, True,
    ]
    assert auto_train_size(10**6, "IVF100,Flat") == 25600  # 256 per list, as the ivf type always did
    assert auto_train_size(10**6, "IVF10,PQ16") == 16384  # PQ codebooks need a floor
    assert auto_train_size(5000, "IVF1024,SQ8") == 5000


def test_named_types_build_the_same_indexes_as_explicit_constructors() -> None:
    import faiss

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:50] + 0.1 * rng.standard_normal((50, 32)).astype(np.float32)
    explicit_ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(32), 32, 20, faiss.METRIC_INNER_PRODUCT)
    explicit_ivf.train(x)
    explicit_ivf.add(x)
    named_ivf = DenseRetriever.new_index(32, "ivf", nlist=20)
    named_ivf.train(x)
    named_ivf.add(x)
    explicit_ivf.nprobe = named_ivf.nprobe = 4
    assert type(named_ivf) is faiss.IndexIVFFlat
    assert np.array_equal(named_ivf.search(q, 10)[1], explicit_ivf.search(q, 10)[1])
    flat = DenseRetriever.new_index(32, "flat")
    assert type(flat) is faiss.IndexFlatIP
    hnsw = DenseRetriever.new_index(32, "hnsw", hnsw_m=16, ef_construction=77)
    assert type(hnsw) is faiss.IndexHNSWFlat and hnsw.hnsw.efConstruction == 77
    assert hnsw.metric_type == faiss.METRIC_INNER_PRODUCT
    with pytest.raises(ValueError, match="faiss cannot build 'IVF8,PQ5'"):
        DenseRetriever.new_index(32, "IVF8,PQ5")  # 32 dims do not split into 5 sub-vectors


@pytest.fixture(scope="module")
def vectors(records: list[dict[str, str]]) -> np.ndarray:
    return HashingEncoder().encode_passages([r["contents"] for r in records])


def _recall_at_10(approx: list[list[str]], exact: list[list[str]]) -> float:
    return float(np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(approx, exact)]))


def test_compressed_indexes_recall_against_flat(records: list[dict[str, str]], vectors: np.ndarray) -> None:
    corpus = Corpus([r["id"] for r in records], [r["contents"] for r in records])
    enc = HashingEncoder()
    queries = [records[i]["contents"].split("\n")[1] for i in range(0, 3000, 60)]
    exact = _ids(DenseRetriever.from_embeddings(corpus, enc, vectors).search(queries, 10))
    recall = {}
    for factory in ("IVF16,PQ8np", "IVF16,SQ8", "HNSW16,Flat", "SQ8"):
        r = DenseRetriever.from_embeddings(corpus, enc, vectors, index_type=factory, nprobe=16, ef_search=64)
        assert r.name == f"dense-{factory}" and r.index.ntotal == 3000
        recall[factory] = _recall_at_10(_ids(r.search(queries, 10)), exact)
    # Scalar quantization and the graph keep almost all neighbours; 8-byte PQ codes fewer.
    # ("np": no polysemous training, which costs a minute and only matters for Hamming filtering.)
    assert recall["IVF16,SQ8"] >= 0.9 and recall["SQ8"] >= 0.9 and recall["HNSW16,Flat"] >= 0.9
    assert 0.3 <= recall["IVF16,PQ8np"] < 0.95
    # Visiting every list makes IVF-Flat exact (same scores; equal scores may swap ids).
    ivf = DenseRetriever.from_embeddings(corpus, enc, vectors, index_type="IVF16,Flat", nprobe=16)
    flat = DenseRetriever.from_embeddings(corpus, enc, vectors)
    assert [[round(h.score, 5) for h in hs] for hs in ivf.search(queries, 10)] == [
        [round(h.score, 5) for h in hs] for hs in flat.search(queries, 10)
    ]


def test_from_embeddings_accepts_a_memmap_in_chunks(records: list[dict[str, str]], vectors: np.ndarray, tmp_path: Path) -> None:
    corpus = Corpus([r["id"] for r in records], [r["contents"] for r in records])
    np.save(tmp_path / "emb.npy", vectors)
    mm = np.load(tmp_path / "emb.npy", mmap_mode="r")
    enc = HashingEncoder()
    whole = DenseRetriever.from_embeddings(corpus, enc, vectors, index_type="IVF8,SQ8", nprobe=8)
    chunked = DenseRetriever.from_embeddings(corpus, enc, mm, index_type="IVF8,SQ8", nprobe=8, chunk_size=512)
    q = ["river castle", "comet glacier orchard"]
    assert _ids(chunked.search(q, 10)) == _ids(whole.search(q, 10))


def test_factory_index_through_build_retriever_cache_and_mmap(jsonl: Path, tmp_path: Path) -> None:
    stored = open_corpus(jsonl, tmp_path / "store")
    cfg = {"kind": "dense", "index_factory": "IVF16,SQ8", "nprobe": 4, "train_size": 1000}
    first = build_retriever(cfg, stored, cache_dir=tmp_path / "idx", encoder=HashingEncoder())
    enc = HashingEncoder()
    second = build_retriever(cfg, stored, cache_dir=tmp_path / "idx", encoder=enc)
    assert second.loaded_from_cache and enc.n_passages_encoded == 0
    assert second.name == "dense-IVF16,SQ8"
    import faiss

    assert faiss.extract_index_ivf(second.index).nprobe == 4
    q = ["river castle", "falcon meadow canyon", "temple 2999"]
    assert _ids(second.search(q, 10)) == _ids(first.search(q, 10))
    # Another nprobe is a search setting, not another index.
    third = build_retriever({**cfg, "nprobe": 16}, stored, cache_dir=tmp_path / "idx", encoder=HashingEncoder())
    assert third.loaded_from_cache and faiss.extract_index_ivf(third.index).nprobe == 16
    # train_size is part of the index identity.
    assert not build_retriever({**cfg, "train_size": 500}, stored, cache_dir=tmp_path / "idx",
                               encoder=HashingEncoder()).loaded_from_cache


def test_hnsw_factory_sets_ef_search_after_mmap_load(jsonl: Path, tmp_path: Path) -> None:
    corpus = Corpus.from_jsonl(jsonl)
    r = DenseRetriever.build(corpus, HashingEncoder(), index_type="HNSW8,Flat", ef_construction=40, ef_search=33)
    r.save(tmp_path)
    loaded = DenseRetriever.load(tmp_path, corpus, HashingEncoder(), index_type="HNSW8,Flat", ef_search=21)
    import faiss

    assert faiss.downcast_index(loaded.index).hnsw.efSearch == 21
    assert faiss.downcast_index(loaded.index).hnsw.efConstruction == 40
    assert _ids(loaded.search(["orchard lantern"], 5)) == _ids(r.search(["orchard lantern"], 5))


def test_cuda_device_without_faiss_gpu_searches_on_cpu(records: list[dict[str, str]], vectors: np.ndarray) -> None:
    import faiss

    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        pytest.skip("a GPU is present: this test covers the CPU fallback")
    corpus = Corpus([r["id"] for r in records], [r["contents"] for r in records])
    r = DenseRetriever.from_embeddings(corpus, HashingEncoder(), vectors, device="cuda", gpu_shard=True, gpu_float16=True)
    assert r._search_index is r.index
    assert r.search_one("river", 3)[0].doc_id == DenseRetriever.from_embeddings(
        corpus, HashingEncoder(), vectors).search_one("river", 3)[0].doc_id


def test_cfg_new_keys() -> None:
    c = validate_retriever_cfg({"index_factory": "IVF1024,SQ8", "gpu_shard": True})
    assert c["mmap"] is True and c["train_size"] == 0 and c["gpu_float16"] is False
    with pytest.raises(ValueError, match="key 'index_factory' has surrounding spaces"):
        validate_retriever_cfg({"index_factory": "IVF8,Flat "})
    with pytest.raises(ValueError, match="key 'train_size' must be >= 0"):
        validate_retriever_cfg({"train_size": -1})
    with pytest.raises(ValueError, match="key 'mmap' must be bool"):
        validate_retriever_cfg({"mmap": "yes"})


# ---------------------------------------------------------------------------------- FlashRAG import


def _flashrag_folder(tmp_path: Path, records: list[dict[str, str]], enc: TextEncoder) -> dict[str, Path]:
    """A tiny FlashRAG layout: corpus JSONL, e5_Flat.index, and a bm25s folder with its tokenizer."""
    import bm25s
    import faiss
    from bm25s.tokenization import Tokenizer

    corpus_path = _write_jsonl(tmp_path / "wiki.jsonl", records)
    texts = [r["contents"] for r in records]
    index = faiss.index_factory(enc.dim, "Flat", faiss.METRIC_INNER_PRODUCT)  # type: ignore[attr-defined]
    index.add(enc.encode_passages(texts))
    faiss.write_index(index, str(tmp_path / "e5_Flat.index"))
    tokenizer = Tokenizer(stopwords="en")
    bm = bm25s.BM25()
    bm.index(tokenizer.tokenize(texts, return_as="tuple", show_progress=False), show_progress=False)
    (tmp_path / "bm25").mkdir()
    bm.save(str(tmp_path / "bm25"), show_progress=False)
    tokenizer.save_vocab(str(tmp_path / "bm25"))
    tokenizer.save_stopwords(str(tmp_path / "bm25"))
    return {"corpus": corpus_path, "faiss": tmp_path / "e5_Flat.index", "bm25": tmp_path / "bm25"}


def test_open_flashrag_indexes_without_rebuilding(records: list[dict[str, str]], tmp_path: Path) -> None:
    files = _flashrag_folder(tmp_path, records[:1500], HashingEncoder())
    queries = ["river castle harbor", "nebula quartz", "walnut 1499"]
    enc = HashingEncoder()
    dense = open_flashrag(files["corpus"], faiss_index=files["faiss"], encoder=enc, store_dir=tmp_path / "s")
    assert isinstance(dense, DenseRetriever) and dense.corpus.is_stored and enc.n_passages_encoded == 0
    rebuilt = DenseRetriever.build(Corpus.from_jsonl(files["corpus"]), HashingEncoder())
    assert [[(h.doc_id, h.contents) for h in hs] for hs in dense.search(queries, 10)] == [
        [(h.doc_id, h.contents) for h in hs] for hs in rebuilt.search(queries, 10)
    ]
    bm25 = open_flashrag(files["corpus"], bm25_dir=files["bm25"], store_dir=tmp_path / "s")
    assert isinstance(bm25, BM25Retriever) and bm25.tokenizer is not None
    assert isinstance(bm25.index.scores["data"], np.memmap)
    ours = BM25Retriever.build(Corpus.from_jsonl(files["corpus"]))
    for got, want in zip(bm25.search(queries, 10), ours.search(queries, 10)):
        assert [h.doc_id for h in got] == [h.doc_id for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-6)
    both = open_flashrag(files["corpus"], faiss_index=files["faiss"], encoder=enc, bm25_dir=files["bm25"],
                         store_dir=tmp_path / "s")
    assert isinstance(both, HybridRetriever) and both.name == "hybrid(bm25+dense-e5_Flat)"


def test_open_flashrag_errors_name_the_problem(records: list[dict[str, str]], tmp_path: Path) -> None:
    files = _flashrag_folder(tmp_path, records[:300], HashingEncoder())
    with pytest.raises(ValueError, match="give faiss_index"):
        open_flashrag(files["corpus"], store_dir=tmp_path / "s")
    with pytest.raises(ValueError, match="needs the encoder"):
        open_flashrag(files["corpus"], faiss_index=files["faiss"], store_dir=tmp_path / "s")
    shorter = _write_jsonl(tmp_path / "short.jsonl", records[:200])
    with pytest.raises(ValueError, match=r"e5_Flat.index: index holds 300 vectors, .*short.jsonl has 200"):
        open_flashrag(shorter, faiss_index=files["faiss"], encoder=HashingEncoder(), store_dir=tmp_path / "s")
    with pytest.raises(FileNotFoundError, match="no such FAISS index file"):
        read_faiss_index(tmp_path / "missing.index")
