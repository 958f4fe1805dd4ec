"""Tests for ragcritic_lib.retrieval on a small corpus written by the tests.

Model-backed tests skip when the packaged model folders are absent (the assets stage creates
them under data/assets/models/); RAGCRITIC_TEST_MINILM_DIR, RAGCRITIC_TEST_BGE_DIR and
RAGCRITIC_TEST_RERANKER_DIR point them at another copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragcritic_lib import paths
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.retrieval import (
    BM25Retriever,
    Corpus,
    CrossEncoderReranker,
    DenseRetriever,
    Hit,
    HybridRetriever,
    RerankedRetriever,
    Retriever,
    TextEncoder,
    build_retriever,
    corpus_fingerprint,
    export_indexes,
    index_keys,
    load_encoder,
    reciprocal_rank_fusion,
    validate_retriever_cfg,
)
from ragcritic_lib.retrieval.build import index_folder_name

PASSAGES = [
    ("p01", "Mount Kilimanjaro", "Mount Kilimanjaro is a dormant volcano in Tanzania and the highest mountain in Africa."),
    ("p02", "Amazon River", "The Amazon River in South America carries more water than any other river on Earth."),
    ("p03", "Marie Curie", "Marie Curie was a physicist who won Nobel Prizes in both physics and chemistry."),
    ("p04", "Saturn", "Saturn is the sixth planet from the Sun and is famous for its bright ring system."),
    ("p05", "Penicillin", "Alexander Fleming discovered penicillin in 1928 after noticing mould killing bacteria."),
    ("p06", "Great Wall of China", "The Great Wall of China is a series of fortifications built across northern China."),
    ("p07", "Honey bee", "Honey bees collect nectar from flowers and turn it into honey inside the hive."),
    ("p08", "Mona Lisa", "The Mona Lisa is a portrait painted by Leonardo da Vinci, now kept in the Louvre."),
    ("p09", "Chess", "Chess is a board game for two players in which each side tries to checkmate the king."),
    ("p10", "Photosynthesis", "Photosynthesis lets green plants turn sunlight, water and carbon dioxide into sugar."),
    ("p11", "Titanic", "The Titanic was a British passenger liner that sank in 1912 after striking an iceberg."),
    ("p12", "Espresso", "Espresso is a concentrated coffee brewed by forcing hot water through ground beans."),
    ("p13", "Emperor penguin", "Emperor penguins breed during the Antarctic winter and males incubate the eggs."),
    ("p14", "Violin", "The violin is a wooden string instrument played with a bow and has four strings."),
    ("p15", "Sahara", "The Sahara is the largest hot desert in the world, covering much of North Africa."),
]

# Keyword queries and the passage that must rank first under BM25.
KEYWORD_QUERIES = [
    ("Kilimanjaro volcano Tanzania", "p01"),
    ("Fleming penicillin", "p05"),
    ("Saturn rings", "p04"),
    ("Titanic iceberg", "p11"),
    ("espresso coffee", "p12"),
]

# Paraphrases sharing (almost) no keyword with their passage: only a dense model finds them.
PARAPHRASE_QUERIES = [
    ("Which scientist received two Nobel awards in different sciences?", "p03"),
    ("famous ocean liner that went down after hitting ice", "p11"),
    ("insects that make a sweet food from blossoms", "p07"),
    ("tallest peak on the African continent", "p01"),
    ("how vegetation makes food from light", "p10"),
]


def _write_corpus(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for doc_id, title, text in PASSAGES:
            fh.write(json.dumps({"id": doc_id, "contents": f"{title}\n{text}"}) + "\n")
    return path


@pytest.fixture()
def corpus(tmp_path: Path) -> Corpus:
    return Corpus.from_jsonl(_write_corpus(tmp_path / "corpus.jsonl"))


def _model_dir(env: str, default: Path, required: Sequence[str]) -> Path:
    folder = Path(os.environ.get(env, default))
    if not all((folder / f).exists() for f in required):
        pytest.skip(f"model folder {folder} absent (created by the assets stage)")
    return folder


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    return _model_dir("RAGCRITIC_TEST_MINILM_DIR", paths.MODELS_DIR / "all-minilm-l6-v2", ["modules.json"])


@pytest.fixture(scope="module")
def bge_dir() -> Path:
    return _model_dir("RAGCRITIC_TEST_BGE_DIR", paths.MODELS_DIR / "bge-small-en", ["model.onnx", "tokenizer.json"])


@pytest.fixture(scope="module")
def reranker_dir() -> Path:
    return _model_dir(
        "RAGCRITIC_TEST_RERANKER_DIR", paths.MODELS_DIR / "ms-marco-minilm-l12-reranker", ["model.onnx", "tokenizer.json"]
    )


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> TextEncoder:
    import torch

    torch.set_num_threads(1)
    return load_encoder(minilm_dir, batch_size=16)


STOPWORDS = {"a", "an", "and", "by", "for", "from", "in", "is", "it", "of", "on", "the", "to", "was", "which", "with"}


class HashingEncoder(TextEncoder):
    """Deterministic bag-of-words hashing encoder: dense machinery without a model."""

    name = "hashing"

    def __init__(self, dim: int = 1024) -> None:
        super().__init__()
        self.dim = dim

    def identity(self) -> dict[str, Any]:
        return {"type": "hashing", "dim": self.dim}

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().replace(".", " ").replace(",", " ").split():
                if word not in STOPWORDS:
                    out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class StaticRetriever(Retriever):
    """Returns fixed rankings, recording the k it was asked for."""

    def __init__(self, name: str, corpus: Corpus, rankings: list[list[str]]) -> None:
        self.name = name
        self.corpus = corpus
        self.rankings = rankings
        self.asked_k: list[int] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.asked_k.append(k)
        return [
            [Hit(d, 1.0 / (r + 1), self.corpus.text_of(d)) for r, d in enumerate(self.rankings[i][:k])]
            for i in range(len(queries))
        ]


# ---------------------------------------------------------------------------------- corpus


def test_corpus_reads_flashrag_jsonl(corpus: Corpus) -> None:
    assert len(corpus) == 15
    assert corpus.ids[:2] == ["p01", "p02"]
    assert corpus.title(3) == "Saturn"
    assert corpus.body(3).startswith("Saturn is the sixth planet")
    assert corpus.text_of("p08").startswith("Mona Lisa\nThe Mona Lisa")
    with pytest.raises(KeyError):
        corpus.text_of("nope")


def test_corpus_title_quotes_and_missing_title() -> None:
    c = Corpus(["a", "b"], ['"Aaron"\nAaron was a prophet.', "no title line here"])
    assert c.title(0) == "Aaron"
    assert c.body(0) == "Aaron was a prophet."
    assert c.title(1) == ""
    assert c.body(1) == "no title line here"


def test_corpus_from_records_accepts_title_text_and_int_ids() -> None:
    c = Corpus.from_records([{"id": 7, "title": "T", "text": "body"}, {"id": "x", "contents": "A\nB"}])
    assert c.ids == ["7", "x"]
    assert c.contents == ["T\nbody", "A\nB"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "z", "contents": ', "invalid JSON"),
        ('{"contents": "A\\nB"}', "missing key 'id'"),
        ('{"id": "z"}', "missing key 'contents'"),
        ('{"id": "p01", "contents": "dup\\nx"}', "duplicate id 'p01'"),
        ('["id", "contents"]', "expected a JSON object"),
    ],
)
def test_corpus_malformed_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = _write_corpus(tmp_path / "bad.jsonl")
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n" + line + "\n")  # a blank line first: line numbers count it
    with pytest.raises(DataFormatError) as err:
        Corpus.from_jsonl(path)
    assert f"{path}:17:" in str(err.value)
    assert message in str(err.value)


def test_corpus_fingerprint_tracks_content_and_order(corpus: Corpus) -> None:
    same = Corpus(list(corpus.ids), list(corpus.contents))
    assert corpus_fingerprint(same) == corpus_fingerprint(corpus)
    edited = Corpus(list(corpus.ids), list(corpus.contents))
    edited.contents[4] = edited.contents[4].replace("1928", "1929")
    assert corpus_fingerprint(edited) != corpus_fingerprint(corpus)
    swapped = Corpus(corpus.ids[::-1], corpus.contents[::-1])
    assert corpus_fingerprint(swapped) != corpus_fingerprint(corpus)
    assert corpus_fingerprint(Corpus(["ab"], ["c"])) != corpus_fingerprint(Corpus(["a"], ["bc"]))


# ---------------------------------------------------------------------------------- BM25


def test_bm25_keyword_queries_rank_known_answer_first(corpus: Corpus) -> None:
    bm25 = BM25Retriever.build(corpus)
    results = bm25.search([q for q, _ in KEYWORD_QUERIES], k=3)
    assert [hits[0].doc_id for hits in results] == [gold for _, gold in KEYWORD_QUERIES]
    for hits in results:
        assert len(hits) == 3
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert hits[0].score > hits[1].score
        assert hits[0].contents == corpus.text_of(hits[0].doc_id)


def test_bm25_edge_cases(corpus: Corpus) -> None:
    bm25 = BM25Retriever.build(corpus)
    assert bm25.search([], k=3) == []
    assert len(bm25.search_one("river", k=100)) == len(corpus)
    assert bm25.search_one("Amazon river water", 1)[0].doc_id == "p02"
    # Only stopwords or unseen words: k hits, all scored zero, no crash.
    hits = bm25.search_one("the of and zzzunseen", k=2)
    assert len(hits) == 2 and all(h.score == 0.0 for h in hits)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        bm25.search(["x"], 0)


def test_hit_record_form() -> None:
    assert Hit("a", np.float32(1.5), "T\nx").to_record() == {"id": "a", "contents": "T\nx", "score": 1.5}


# ---------------------------------------------------------------------------------- fusion


def test_rrf_exact_scores_and_order() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "c", "d"]], k=60)
    assert [d for d, _ in fused] == ["b", "c", "a", "d"]
    expected = {"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 63 + 1 / 62, "d": 1 / 63}
    assert dict(fused) == pytest.approx(expected, rel=1e-12)


def test_rrf_ties_duplicates_and_k() -> None:
    # x and y tie (1/61 + 1/62); x was seen first at rank 1 (list 0), so it leads.
    assert [d for d, _ in reciprocal_rank_fusion([["x", "y"], ["y", "x"]])] == ["x", "y"]
    # A repeated id counts once per list, at its first rank.
    assert dict(reciprocal_rank_fusion([["a", "a", "b"]], k=0)) == {"a": 1.0, "b": 1 / 3}
    # A small k lets single first places beat an id found twice lower down; k=60 does not.
    lists = [["a"], ["b", "m"], ["c", "d", "m"]]
    assert [d for d, _ in reciprocal_rank_fusion(lists, k=0)] == ["a", "b", "c", "m", "d"]
    assert [d for d, _ in reciprocal_rank_fusion(lists, k=60)] == ["m", "a", "b", "c", "d"]
    assert reciprocal_rank_fusion([], k=60) == []
    assert reciprocal_rank_fusion([[], ["q"]]) == [("q", 1 / 61)]


def test_hybrid_fuses_members_with_depth(corpus: Corpus) -> None:
    one = StaticRetriever("one", corpus, [["p01", "p02", "p03", "p04"]])
    two = StaticRetriever("two", corpus, [["p03", "p05", "p01", "p06"]])
    hybrid = HybridRetriever([one, two], rrf_k=60, depth=4)
    hits = hybrid.search(["q"], k=3)[0]
    # p02 and p05 tie at 1/62; p02 comes from the earlier list at that rank.
    assert [h.doc_id for h in hits] == ["p01", "p03", "p02"]
    assert hits[0].score == pytest.approx(1 / 61 + 1 / 63)
    assert hits[1].contents == corpus.text_of("p03")
    assert one.asked_k == [4] and two.asked_k == [4]
    assert hybrid.name == "hybrid(one+two)"


def test_hybrid_bm25_plus_dense_finds_keyword_answers(corpus: Corpus) -> None:
    bm25 = BM25Retriever.build(corpus)
    dense = DenseRetriever.build(corpus, HashingEncoder())
    hybrid = HybridRetriever([bm25, dense], depth=10)
    results = hybrid.search([q for q, _ in KEYWORD_QUERIES], k=5)
    assert [hits[0].doc_id for hits in results] == [gold for _, gold in KEYWORD_QUERIES]


class ReverseReranker:
    """Scores candidates by reversed rank, so reranking visibly reorders them."""

    def rerank(self, queries: Sequence[str], hits: Sequence[Sequence[Hit]], k: int) -> list[list[Hit]]:
        return [[Hit(h.doc_id, float(i), h.contents) for i, h in reversed(list(enumerate(hs)))][:k] for hs in hits]


def test_reranked_retriever_reads_depth_then_cuts_to_k(corpus: Corpus) -> None:
    base = StaticRetriever("base", corpus, [["p01", "p02", "p03", "p04", "p05"]])
    rr = RerankedRetriever(base, ReverseReranker(), depth=4)  # type: ignore[arg-type]
    assert [h.doc_id for h in rr.search_one("q", 2)] == ["p04", "p03"]
    assert base.asked_k == [4]
    assert rr.name == "base+rerank"


# ---------------------------------------------------------------------------------- dense


def test_dense_index_types_agree_with_hashing_encoder(corpus: Corpus) -> None:
    queries = [q for q, _ in KEYWORD_QUERIES]
    tops = {}
    for index_type in ("flat", "hnsw", "ivf"):
        dense = DenseRetriever.build(corpus, HashingEncoder(), index_type=index_type, nlist=2, nprobe=2)
        assert dense.index.ntotal == len(corpus)
        tops[index_type] = [hits[0].doc_id for hits in dense.search(queries, k=3)]
    assert tops["flat"] == [gold for _, gold in KEYWORD_QUERIES]
    assert tops["hnsw"] == tops["flat"]
    assert tops["ivf"] == tops["flat"]


def test_dense_chunked_build_equals_single_chunk(corpus: Corpus) -> None:
    enc = HashingEncoder()
    a = DenseRetriever.build(corpus, enc, chunk_size=4)
    b = DenseRetriever.build(corpus, enc)
    qa, qb = a.search(["Saturn ring planet"], 5)[0], b.search(["Saturn ring planet"], 5)[0]
    assert [h.doc_id for h in qa] == [h.doc_id for h in qb]
    assert enc.n_passages_encoded == 2 * len(corpus)


def test_dense_from_embeddings_matches_build(corpus: Corpus) -> None:
    enc = HashingEncoder()
    vecs = enc.encode_passages(corpus.contents)
    queries = [q for q, _ in KEYWORD_QUERIES]
    for index_type in ("flat", "hnsw", "ivf"):
        built = DenseRetriever.build(corpus, enc, index_type=index_type, nlist=1)
        given = DenseRetriever.from_embeddings(corpus, enc, vecs, index_type=index_type, nlist=1)
        assert [[h.doc_id for h in hs] for hs in given.search(queries, 4)] == [
            [h.doc_id for h in hs] for hs in built.search(queries, 4)
        ]
    with pytest.raises(ValueError, match="do not match 15 passages"):
        DenseRetriever.from_embeddings(corpus, enc, vecs[:3])


def test_dense_minilm_finds_paraphrases(corpus: Corpus, minilm: TextEncoder) -> None:
    dense = DenseRetriever.build(corpus, minilm)
    results = dense.search([q for q, _ in PARAPHRASE_QUERIES], k=3)
    assert [hits[0].doc_id for hits in results] == [gold for _, gold in PARAPHRASE_QUERIES]
    for hits in results:
        assert -1.0 <= hits[-1].score <= hits[0].score <= 1.0 + 1e-5


def test_dense_minilm_flat_and_hnsw_agree_on_top1(corpus: Corpus, minilm: TextEncoder) -> None:
    queries = [q for q, _ in PARAPHRASE_QUERIES + KEYWORD_QUERIES]
    flat = DenseRetriever.build(corpus, minilm, index_type="flat")
    hnsw = DenseRetriever.build(corpus, minilm, index_type="hnsw")
    assert [h[0].doc_id for h in hnsw.search(queries, 1)] == [h[0].doc_id for h in flat.search(queries, 1)]


def test_bge_onnx_encoder_finds_paraphrases(corpus: Corpus, bge_dir: Path) -> None:
    enc = load_encoder(bge_dir, batch_size=8, num_threads=1)
    assert type(enc).__name__ == "OnnxEncoder"
    assert enc.query_prefix.startswith("Represent this sentence")
    vecs = enc.encode_passages(corpus.contents[:3])
    assert vecs.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    dense = DenseRetriever.build(corpus, enc)
    results = dense.search([q for q, _ in PARAPHRASE_QUERIES], k=3)
    assert [hits[0].doc_id for hits in results] == [gold for _, gold in PARAPHRASE_QUERIES]


# ---------------------------------------------------------------------------------- reranker


def test_cross_encoder_moves_relevant_passage_to_top(corpus: Corpus, reranker_dir: Path) -> None:
    reranker = CrossEncoderReranker(reranker_dir, batch_size=4, num_threads=1)
    query = "Who discovered penicillin?"
    order = ["p09", "p12", "p02", "p14", "p05"]  # the answer last
    hits = [Hit(d, 0.0, corpus.text_of(d)) for d in order]
    long_hit = Hit("long", 0.0, "Unrelated filler text. " * 400)  # far over 512 tokens: truncated
    reranked = reranker.rerank([query, "Saturn rings"], [hits + [long_hit], hits[:3]], k=3)
    assert reranked[0][0].doc_id == "p05"
    assert len(reranked[0]) == 3 and len(reranked[1]) == 3
    assert reranked[0][0].score > reranked[0][1].score
    assert reranker.n_pairs_scored == 9


def test_reranked_retriever_with_real_reranker(corpus: Corpus, reranker_dir: Path) -> None:
    base = StaticRetriever("base", corpus, [["p15", "p06", "p01", "p13"]])
    rr = RerankedRetriever(base, CrossEncoderReranker(reranker_dir, num_threads=1), depth=4)
    assert rr.search_one("What is the highest mountain in Africa?", 1)[0].doc_id == "p01"


# ---------------------------------------------------------------------------------- cache and cfg


def test_build_retriever_bm25_cache_roundtrip_and_corruption(corpus: Corpus, tmp_path: Path) -> None:
    cache = tmp_path / "indexes"
    cfg = {"kind": "bm25"}
    first = build_retriever(cfg, corpus, cache_dir=cache)
    assert first.loaded_from_cache is False
    folders = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(folders) == 1 and folders[0].name.startswith("bm25-")
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temp folder left
    expected = [[h.doc_id for h in hs] for hs in first.search([q for q, _ in KEYWORD_QUERIES], 3)]

    second = build_retriever(cfg, corpus, cache_dir=cache)
    assert second.loaded_from_cache is True
    assert [[h.doc_id for h in hs] for hs in second.search([q for q, _ in KEYWORD_QUERIES], 3)] == expected

    # Corrupt one index file: the folder is discarded and rebuilt.
    victim = sorted(folders[0].glob("*.npy"))[0]
    victim.write_bytes(b"not a numpy file")
    third = build_retriever(cfg, corpus, cache_dir=cache)
    assert third.loaded_from_cache is False
    assert [[h.doc_id for h in hs] for hs in third.search([q for q, _ in KEYWORD_QUERIES], 3)] == expected
    assert build_retriever(cfg, corpus, cache_dir=cache).loaded_from_cache is True

    # A folder missing its metadata, and a cache dir deleted outright, both rebuild.
    (folders[0] / "meta.json").unlink()
    assert build_retriever(cfg, corpus, cache_dir=cache).loaded_from_cache is False
    import shutil

    shutil.rmtree(cache)
    assert build_retriever(cfg, corpus, cache_dir=cache).loaded_from_cache is False

    # Different parameters or a different corpus get their own folder.
    build_retriever({"kind": "bm25", "bm25_k1": 1.2}, corpus, cache_dir=cache)
    smaller = Corpus(corpus.ids[:5], corpus.contents[:5])
    assert build_retriever(cfg, smaller, cache_dir=cache).loaded_from_cache is False
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 3


def test_build_retriever_dense_cache_skips_encoding(corpus: Corpus, tmp_path: Path) -> None:
    cache = tmp_path / "indexes"
    for index_type in ("flat", "hnsw", "ivf"):
        cfg = {"kind": "dense", "index": index_type, "nlist": 2, "nprobe": 2}
        enc = HashingEncoder()
        first = build_retriever(cfg, corpus, cache_dir=cache, encoder=enc)
        assert enc.n_passages_encoded == len(corpus)
        enc2 = HashingEncoder()
        second = build_retriever(cfg, corpus, cache_dir=cache, encoder=enc2)
        assert second.loaded_from_cache is True
        assert enc2.n_passages_encoded == 0  # the corpus was not embedded again
        assert isinstance(second, DenseRetriever) and second.index_type == index_type
        q = [q for q, _ in KEYWORD_QUERIES]
        assert [[h.doc_id for h in hs] for hs in second.search(q, 3)] == [
            [h.doc_id for h in hs] for hs in first.search(q, 3)
        ]
    # A different encoder identity is a different index.
    enc3 = HashingEncoder(dim=512)
    assert build_retriever({"kind": "dense"}, corpus, cache_dir=cache, encoder=enc3).loaded_from_cache is False
    # Truncated FAISS file: rebuilt with one more encoding pass.
    folder = next(p for p in cache.iterdir() if p.name.startswith("dense-") and (p / "index.faiss").exists())
    data = (folder / "index.faiss").read_bytes()
    (folder / "index.faiss").write_bytes(data[: len(data) // 2])
    meta = json.loads((folder / "meta.json").read_text())
    enc4 = HashingEncoder(dim=meta["key"]["encoder"]["dim"])
    cfg4 = {"kind": "dense", "index": meta["key"]["index"], "nlist": 2, "nprobe": 2}
    rebuilt = build_retriever(cfg4, corpus, cache_dir=cache, encoder=enc4)
    assert rebuilt.loaded_from_cache is False and enc4.n_passages_encoded == len(corpus)


def test_build_retriever_minilm_cache(corpus: Corpus, tmp_path: Path, minilm_dir: Path) -> None:
    cfg = {"kind": "dense", "encoder": str(minilm_dir), "batch_size": 16}
    first = build_retriever(cfg, corpus, cache_dir=tmp_path)
    second = build_retriever(cfg, corpus, cache_dir=tmp_path)
    assert isinstance(second, DenseRetriever) and second.loaded_from_cache
    assert second.encoder.n_passages_encoded == 0
    q = PARAPHRASE_QUERIES[0][0]
    assert [h.doc_id for h in second.search_one(q, 3)] == [h.doc_id for h in first.search_one(q, 3)]


def test_build_retriever_hybrid_and_rerank(corpus: Corpus, tmp_path: Path, reranker_dir: Path) -> None:
    cfg = {"kind": "hybrid", "rerank": True, "reranker": str(reranker_dir), "rerank_depth": 6, "fusion_depth": 10}
    retriever = build_retriever(cfg, corpus, cache_dir=tmp_path, encoder=HashingEncoder())
    assert isinstance(retriever, RerankedRetriever)
    assert retriever.name == "hybrid(bm25+dense-flat)+rerank"
    hits = retriever.search_one("Who painted the Mona Lisa portrait?", 2)
    assert hits[0].doc_id == "p08" and len(hits) == 2


def test_exported_indexes_load_without_encoding_and_bad_copies_are_skipped(corpus: Corpus, tmp_path: Path) -> None:
    cache, shipped = tmp_path / "cache", tmp_path / "shipped"
    cfg = {"kind": "hybrid"}
    folders = export_indexes(cfg, corpus, shipped, cache_dir=cache, encoder=HashingEncoder())
    assert sorted(f.name.split("-")[0] for f in folders) == ["bm25", "dense"]
    assert sorted(p.name for p in shipped.iterdir()) == sorted(f.name for f in folders)  # no temp folder left
    assert [f.name for f in folders] == [index_folder_name(k) for k in index_keys(cfg, corpus, encoder=HashingEncoder())]
    q = [q for q, _ in KEYWORD_QUERIES]
    reference = [[h.doc_id for h in hs] for hs in build_retriever(cfg, corpus, cache_dir=None,
                                                                 encoder=HashingEncoder()).search(q, 3)]
    # Another machine: an empty cache, the shipped folders read-only; nothing is encoded or written.
    enc, other_cache = HashingEncoder(), tmp_path / "other"
    loaded = build_retriever(cfg, corpus, cache_dir=other_cache, encoder=enc, shipped_dirs=[shipped])
    assert enc.n_passages_encoded == 0 and not other_cache.exists()
    assert [[h.doc_id for h in hs] for hs in loaded.search(q, 3)] == reference
    # A shipped copy that does not load is skipped (and kept); the index is built in the cache instead.
    dense = next(f for f in folders if f.name.startswith("dense-"))
    (dense / "index.faiss").write_bytes(b"truncated")
    enc2 = HashingEncoder()
    rebuilt = build_retriever(cfg, corpus, cache_dir=other_cache, encoder=enc2, shipped_dirs=[shipped])
    assert enc2.n_passages_encoded == len(corpus) and (dense / "index.faiss").read_bytes() == b"truncated"
    assert [[h.doc_id for h in hs] for hs in rebuilt.search(q, 3)] == reference
    # Exporting again replaces the bad copy; cache: false reads no shipped index either.
    export_indexes(cfg, corpus, shipped, cache_dir=cache, encoder=HashingEncoder())
    assert (dense / "index.faiss").read_bytes() != b"truncated"
    enc3 = HashingEncoder()
    build_retriever({**cfg, "cache": False}, corpus, encoder=enc3, shipped_dirs=[shipped])
    assert enc3.n_passages_encoded == len(corpus)
    # With an empty cache, an export keeps what the destination already holds and encodes nothing.
    enc4 = HashingEncoder()
    assert export_indexes(cfg, corpus, shipped, cache_dir=tmp_path / "empty", encoder=enc4) == folders
    assert enc4.n_passages_encoded == 0


def test_build_retriever_without_cache(corpus: Corpus, tmp_path: Path) -> None:
    r = build_retriever({"kind": "bm25", "cache": False}, corpus, cache_dir=tmp_path / "c")
    assert r.search_one("Sahara desert", 1)[0].doc_id == "p15"
    assert not (tmp_path / "c").exists()
    assert build_retriever({"kind": "bm25"}, corpus, cache_dir=None).loaded_from_cache is False


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"kind": "bm25", "topk": 5}, "unknown key 'topk'"),
        ({"kind": "sparse"}, "key 'kind' must be one of"),
        ({"index": "lsh"}, "key 'index' must be one of"),
        ({"batch_size": "64"}, "key 'batch_size' must be int"),
        ({"rerank": 1}, "key 'rerank' must be bool"),
        ({"rerank_depth": 0}, "key 'rerank_depth' must be >= 1"),
    ],
)
def test_cfg_errors_name_the_key(cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_retriever_cfg(cfg)


def test_cfg_defaults_and_int_for_float() -> None:
    c = validate_retriever_cfg({"kind": "dense", "bm25_k1": 2})
    assert c["bm25_k1"] == 2 and c["index"] == "flat" and c["rrf_k"] == 60 and c["device"] == "cpu"


def test_import_stays_light() -> None:
    code = (
        "import sys, ragcritic_lib.retrieval; "
        "print(sorted(m for m in ('bm25s', 'faiss', 'sentence_transformers', 'onnxruntime', 'torch', "
        "'tokenizers', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=paths.ROOT)
    assert out.stdout.strip() == "[]"
