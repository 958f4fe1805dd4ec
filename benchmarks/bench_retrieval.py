"""Retrieval speed and recall on a FlashRAG corpus + dataset.

Prints, per retriever (bm25, dense flat, dense hnsw, dense ivf, hybrid, reranked): index build
time, queries per second over a batch of questions, and answer recall@k (a gold answer occurs
in one of the top-k passages). Dense indexes share one embedding pass, timed on its own; every
index is built in memory (never loaded from the index cache). Numbers only, no asserts.

    nice -n 10 .venv/bin/python benchmarks/bench_retrieval.py --quick
    nice -n 10 .venv/bin/python benchmarks/bench_retrieval.py --max-queries 500
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from ragcritic_lib import paths
from ragcritic_lib.io import read_jsonl
from ragcritic_lib.evaluation.scoring import retrieval_recall
from ragcritic_lib.retrieval import (
    BM25Retriever,
    Corpus,
    CrossEncoderReranker,
    DenseRetriever,
    HybridRetriever,
    RerankedRetriever,
    Retriever,
    load_encoder,
)

T = TypeVar("T")
ALL = ("bm25", "dense-flat", "dense-hnsw", "dense-ivf", "hybrid", "reranked")


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="data/assets/wiki/corpus.jsonl")
    ap.add_argument("--dataset", default="data/assets/trivia/dev.jsonl")
    ap.add_argument("--encoder", default="data/assets/models/all-minilm-l6-v2")
    ap.add_argument("--reranker", default="data/assets/models/ms-marco-minilm-l12-reranker")
    ap.add_argument("--retrievers", default=",".join(ALL), help=f"comma list from {ALL}")
    ap.add_argument("--ks", default="1,5,20", help="recall cut-offs")
    ap.add_argument("--max-passages", type=int, default=0, help="first N passages (0 = all)")
    ap.add_argument("--max-queries", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rerank-depth", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3, help="timed search repeats (median)")
    ap.add_argument("--quick", action="store_true", help="500 passages, 30 queries, 1 repeat")
    args = ap.parse_args()
    if args.quick:
        args.max_passages, args.max_queries, args.repeats = 500, 30, 1
    return args


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _report(name: str, retriever: Retriever, build_s: float, questions: Sequence[str],
            golds: Sequence[Sequence[str]], ks: Sequence[int], repeats: int) -> None:
    kmax = max(ks)
    retriever.search(questions[:2], kmax)  # warm-up: lazy model loads are not search time
    times = []
    hits = []
    for _ in range(repeats):
        hits, dt = _timed(lambda: retriever.search(questions, kmax))
        times.append(dt)
    qps = len(questions) / statistics.median(times)
    recalls = [
        statistics.fmean(retrieval_recall([h.contents for h in hs[:k]], g) for hs, g in zip(hits, golds))
        for k in ks
    ]
    cols = "  ".join(f"R@{k}={r:.3f}" for k, r in zip(ks, recalls))
    print(f"{name:<22} build {build_s:8.2f} s   {qps:9.1f} q/s   {cols}", flush=True)


def main() -> None:
    args = _parse()
    wanted = [w.strip() for w in args.retrievers.split(",") if w.strip()]
    unknown = sorted(set(wanted) - set(ALL))
    if unknown:
        raise SystemExit(f"unknown retriever(s) {unknown}; choose from {ALL}")
    ks = sorted({int(k) for k in args.ks.split(",")})

    corpus = Corpus.from_jsonl(paths.resolve(args.corpus))
    if args.max_passages:
        corpus = Corpus(corpus.ids[: args.max_passages], corpus.contents[: args.max_passages])
    records = read_jsonl(paths.resolve(args.dataset))[: args.max_queries]
    questions = [r["question"] for r in records]
    golds = [r["golden_answers"] for r in records]
    print(f"corpus {len(corpus)} passages ({args.corpus}); {len(questions)} questions ({args.dataset})")

    built: dict[str, Retriever] = {}
    fused = "hybrid" in wanted or "reranked" in wanted
    if "bm25" in wanted or fused:
        built["bm25"], dt = _timed(lambda: BM25Retriever.build(corpus))
        if "bm25" in wanted:
            _report("bm25", built["bm25"], dt, questions, golds, ks, args.repeats)

    dense_wanted = [w for w in wanted if w.startswith("dense-")]
    if dense_wanted or fused:
        encoder = load_encoder(args.encoder, device=args.device, batch_size=args.batch_size)
        encoder.encode_passages(corpus.contents[:2])  # model load is not embedding time
        emb, embed_s = _timed(lambda: encoder.encode_passages(corpus.contents))
        print(f"{'embed passages':<22} {embed_s:8.2f} s   {len(corpus) / embed_s:9.1f} passages/s", flush=True)
        for index_type in ("flat", "hnsw", "ivf"):
            name = f"dense-{index_type}"
            if name in dense_wanted or (index_type == "flat" and fused):
                built[name], dt = _timed(
                    lambda it=index_type: DenseRetriever.from_embeddings(
                        corpus, encoder, emb, index_type=it, device=args.device
                    )
                )
                if name in dense_wanted:
                    _report(f"{name} (+embed)", built[name], dt + embed_s, questions, golds, ks, args.repeats)
                    print(f"{'':<22} index only {dt:.2f} s")

    if fused:
        built["hybrid"] = HybridRetriever([built["bm25"], built["dense-flat"]])
        if "hybrid" in wanted:
            _report("hybrid (rrf)", built["hybrid"], 0.0, questions, golds, ks, args.repeats)
    if "reranked" in wanted:
        reranker = CrossEncoderReranker(args.reranker, device=args.device)
        rr = RerankedRetriever(built["hybrid"], reranker, depth=args.rerank_depth)
        _report(f"hybrid+rerank@{args.rerank_depth}", rr, 0.0, questions, golds, ks, args.repeats)


if __name__ == "__main__":
    main()
