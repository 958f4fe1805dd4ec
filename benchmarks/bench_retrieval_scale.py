"""Retrieval at scale on a generated corpus: build time, query speed, recall and memory.

Generates N synthetic passages (words drawn from a seeded vocabulary with Zipf frequencies),
writes them as a FlashRAG JSONL, and measures, each phase with its own peak RSS:

* the memory-mapped corpus store (one pass over the JSONL) and the RSS of opening it;
* dense vectors from a cheap deterministic embedding: hashed bag of words times a fixed
  Gaussian projection (384-d). Encoding 1M passages with MiniLM on 2 CPU cores would take
  hours, so the vectors are not a model's; FAISS speed and memory depend on N and d only, and
  recall is measured against exact search over the same vectors;
* exact search (Flat) as ground truth, then IVF-PQ, IVF-SQ8 and HNSW: build time, q/s,
  recall@10 against Flat, index bytes;
* bm25s over the stored corpus (token ids): build and query time;
* a linear extrapolation of memory and build time to 21M passages (stated assumptions).

    nice -n 10 .venv/bin/python benchmarks/bench_retrieval_scale.py --n 200000 --nlist 256 --hnsw-n 100000 --threads 1
    nice -n 10 .venv/bin/python benchmarks/bench_retrieval_scale.py            # 1M

The 200k command took ~11 min on a shared 2-core machine (load ~10); HNSW construction and
bm25s tokenization dominate, so --hnsw-n caps the HNSW build and 1M runs take longer.

Numbers only, no asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
SYLLABLES = "ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro ru ta te ti to tu".split()
TARGET_N = 21_000_000


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="passages to generate")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--words", type=int, default=60, help="words per passage (mean)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--pq", type=int, default=48, help="PQ sub-quantizers (bytes per vector)")
    ap.add_argument("--nprobe", type=int, default=32)
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--hnsw-n", type=int, default=200_000, help="HNSW is built on the first N only (0 = skip)")
    ap.add_argument("--ef-search", type=int, default=64)
    ap.add_argument("--train-size", type=int, default=65536, help="IVF/PQ training sample")
    ap.add_argument("--threads", type=int, default=0, help="faiss OpenMP threads (0 = faiss default)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--workdir", default="", help="where to write the corpus (default: a temp dir, removed)")
    return ap.parse_args()


# ------------------------------------------------------------------------------ measurement


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    # Linux: writing 5 to clear_refs resets VmHWM, so each phase reports its own peak.
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _phase(name: str, fn: Callable[[], T]) -> tuple[T, float, float]:
    _reset_peak()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    peak = _peak_mb()
    print(f"{name:<34} {dt:8.1f} s   peak RSS {peak:8.0f} MB", flush=True)
    return out, dt, peak


# ------------------------------------------------------------------------------ data


def _vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    out: list[str] = []
    while len(out) < size:
        w = "".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 5))))
        if w not in words:
            words.add(w)
            out.append(w)
    return out


def _passage_words(n: int, args: argparse.Namespace, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Word ids of all passages (flat) and each passage's start offset (Zipf, exponent 1.1)."""
    p = 1.0 / np.arange(1, args.vocab + 1) ** 1.1
    p /= p.sum()
    lengths = rng.integers(args.words // 2, args.words * 3 // 2 + 1, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    cdf = np.cumsum(p)
    flat = np.searchsorted(cdf, rng.random(int(offsets[-1]))).astype(np.int32)
    return np.minimum(flat, args.vocab - 1), offsets


def _write_jsonl(path: Path, vocab: list[str], flat: np.ndarray, offsets: np.ndarray) -> None:
    v = np.array(vocab, dtype=object)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(len(offsets) - 1):
            words = v[flat[offsets[i] : offsets[i + 1]]]
            fh.write(json.dumps({"id": str(i), "contents": f"{words[0].title()} {i}\n{' '.join(words)}"}) + "\n")


def _embed(rows: list[np.ndarray], proj: np.ndarray) -> np.ndarray:
    """Bag of words (word ids) times a fixed projection, L2-normalized: the cheap embedding."""
    from scipy.sparse import csr_matrix

    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    idx = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int32)
    m = csr_matrix((np.ones(len(idx), dtype=np.float32), idx, indptr), shape=(len(rows), proj.shape[0]))
    x = np.asarray(m @ proj, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _embed_corpus(path: Path, flat: np.ndarray, offsets: np.ndarray, proj: np.ndarray, chunk: int = 50_000) -> np.ndarray:
    n = len(offsets) - 1
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, proj.shape[1]))
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        out[s:e] = _embed([flat[offsets[i] : offsets[i + 1]] for i in range(s, e)], proj)
    out.flush()
    return np.load(path, mmap_mode="r")


# ------------------------------------------------------------------------------ search


def _search(index: Any, q: np.ndarray, k: int = 10) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    _, rows = index.search(q, k)
    return rows, len(q) / (time.perf_counter() - t0)


def _recall(approx: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(approx, exact)]))


def _index_bytes(index: Any, folder: Path, name: str) -> int:
    import faiss

    path = folder / f"{name}.faiss"
    faiss.write_index(index, str(path))
    return path.stat().st_size


def main() -> None:
    from threadpoolctl import threadpool_limits

    # faiss k-means calls BLAS on small blocks; threaded OpenBLAS on a shared 2-core machine
    # spins (IVF-PQ training ran ~60x slower). faiss's own OpenMP threads are kept.
    with threadpool_limits(1, user_api="blas"):
        _run()


def _run() -> None:
    import faiss

    from ragcritic_lib.data.corpus_store import build_corpus_store, load_corpus_store
    from ragcritic_lib.retrieval import BM25Retriever, auto_train_size

    args = _parse()
    if args.threads:
        # On a shared, oversubscribed machine one thread avoids OpenMP spin-waiting (PQ
        # training measured 3x faster with 1 thread than 2 at load 12 on 2 cores).
        faiss.omp_set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_scale."))
    work.mkdir(parents=True, exist_ok=True)
    n = args.n
    print(f"generated corpus: {n} passages, {args.words} words mean, vocabulary {args.vocab} (Zipf 1.1), seed {args.seed}")
    print(f"embedding: hashed bag of words x fixed Gaussian projection, {args.dim}-d (NOT a model: MiniLM over "
          f"{n} passages would take hours on this CPU; index cost depends on N and d only)")
    print(f"cores {os.cpu_count()}, faiss {faiss.__version__} ({faiss.omp_get_max_threads()} OpenMP threads, "
          f"BLAS 1 thread); workdir {work}")
    results: dict[str, Any] = {}
    try:
        vocab = _vocabulary(args.vocab, rng)
        (flat, offsets), _, _ = _phase("generate word ids", lambda: _passage_words(n, args, rng))
        jsonl = work / "corpus.jsonl"
        _phase("write JSONL", lambda: _write_jsonl(jsonl, vocab, flat, offsets))
        print(f"{'':<34} JSONL {jsonl.stat().st_size / 1e6:.0f} MB")
        store, store_s, store_peak = _phase("build corpus store", lambda: build_corpus_store(jsonl, work / "store"))
        rss0 = _rss_mb()
        corpus = load_corpus_store(store)
        print(f"{'open stored corpus':<34} +{_rss_mb() - rss0:7.1f} MB RSS for {len(corpus)} passages "
              f"(passage 123456 % n: {corpus.contents[123456 % n][:40]!r})")
        results["store"] = {"seconds": store_s, "peak_mb": store_peak}

        proj = np.random.default_rng(0).standard_normal((args.vocab, args.dim)).astype(np.float32)
        emb, embed_s, _ = _phase("embed passages (cheap embedding)", lambda: _embed_corpus(work / "emb.npy", flat, offsets, proj))
        qrows = rng.choice(n, size=args.queries, replace=False)
        # A query: 8 words of its source passage, so neighbours are meaningful.
        q = _embed([rng.choice(flat[offsets[i] : offsets[i + 1]], size=8) for i in qrows], proj)

        def build_flat() -> Any:
            index = faiss.IndexFlatIP(args.dim)
            for s in range(0, n, 262144):
                index.add(np.ascontiguousarray(emb[s : s + 262144]))
            return index

        flat_index, flat_s, flat_peak = _phase("Flat: build", build_flat)
        (exact, flat_qps), _, _ = _phase("Flat: exact search (ground truth)", lambda: _search(flat_index, q))
        results["Flat"] = {"build_s": flat_s, "qps": flat_qps, "recall": 1.0, "bytes": n * args.dim * 4 + 45,
                           "peak_mb": flat_peak}
        del flat_index

        train_s: dict[str, float] = {}

        def build(factory: str, sub_n: int) -> Any:
            index = faiss.index_factory(args.dim, factory, faiss.METRIC_INNER_PRODUCT)
            t0 = time.perf_counter()
            if not index.is_trained:
                size = min(sub_n, args.train_size or auto_train_size(sub_n, factory))
                rows = np.sort(np.random.default_rng(0).choice(sub_n, size=size, replace=False))
                index.train(np.ascontiguousarray(emb[rows]))
            train_s[factory] = time.perf_counter() - t0
            for s in range(0, sub_n, 262144):
                index.add(np.ascontiguousarray(emb[s : min(sub_n, s + 262144)]))
            return index

        plans = [(f"IVF{args.nlist},PQ{args.pq}np", n), (f"IVF{args.nlist},SQ8", n)]
        if args.hnsw_n:
            plans.append((f"HNSW{args.hnsw_m},Flat", min(n, args.hnsw_n)))
        for factory, sub_n in plans:
            index, build_s, peak = _phase(f"{factory}: build ({sub_n})", lambda f=factory, m=sub_n: build(f, m))
            ivf = faiss.try_extract_index_ivf(index)
            if ivf is not None:
                ivf.nprobe = args.nprobe
            if hasattr(faiss.downcast_index(index), "hnsw"):
                faiss.downcast_index(index).hnsw.efSearch = args.ef_search
            truth = exact
            if sub_n < n:  # exact neighbours within the subset
                sub = faiss.IndexFlatIP(args.dim)
                sub.add(np.ascontiguousarray(emb[:sub_n]))
                truth, _ = _search(sub, q)
                del sub
            rows, qps = _search(index, q)
            rec = _recall(rows, truth)
            nbytes = _index_bytes(index, work, "idx")
            print(f"{'':<34} {qps:8.0f} q/s   recall@10 {rec:.3f}   index {nbytes / 1e6:7.0f} MB "
                  f"(nprobe {args.nprobe}, efSearch {args.ef_search})", flush=True)
            print(f"{'':<34} of which training {train_s[factory]:.1f} s", flush=True)
            results[factory] = {"n": sub_n, "build_s": build_s, "train_s": train_s[factory], "qps": qps, "recall": rec, "bytes": nbytes, "peak_mb": peak}
            del index

        bm25, bm25_s, bm25_peak = _phase("bm25s: build (token ids, stored corpus)", lambda: BM25Retriever.build(corpus))
        qtexts = [" ".join(vocab[w] for w in rng.choice(flat[offsets[i] : offsets[i + 1]], size=4)) for i in qrows]
        _, bm25_q_s, _ = _phase("bm25s: search", lambda: bm25.search(qtexts, 10))
        bm25.save(work / "bm25")
        bm25_bytes = sum(p.stat().st_size for p in (work / "bm25").iterdir())
        print(f"{'':<34} {len(qtexts) / bm25_q_s:8.0f} q/s   index {bm25_bytes / 1e6:7.0f} MB", flush=True)
        results["bm25"] = {"build_s": bm25_s, "qps": len(qtexts) / bm25_q_s, "bytes": bm25_bytes, "peak_mb": bm25_peak}
        _extrapolate(results, n, args, store.stat().st_size if store.is_file() else _dir_bytes(store), embed_s)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def _dir_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _extrapolate(results: dict[str, Any], n: int, args: argparse.Namespace, store_bytes: int, embed_s: float) -> None:
    f = TARGET_N / n
    print(f"\nextrapolated to {TARGET_N / 1e6:.0f}M passages (x{f:.0f}); assumptions: index bytes and add time linear in N,")
    print("training time constant (fixed sample), HNSW build N log N, same d and hardware; real Wikipedia passages")
    print("(~100 words) are longer than these, so store and bm25s sizes scale by length too. e5-base (768-d) doubles")
    print("the Flat/SQ8 sizes; PQ codes keep their size.")
    print(f"  corpus store        {store_bytes * f / 1e9:7.1f} GB on disk; a process maps ~{16 * TARGET_N / 1e9:.1f} GB of offsets")
    for name, r in results.items():
        if name in ("store",) or "bytes" not in r:
            continue
        m = r.get("n", n)
        g = TARGET_N / m
        scale = g * (math.log(TARGET_N) / math.log(m) if name.startswith("HNSW") else 1.0)
        fixed = r.get("train_s", 0.0)
        hours = (fixed + (r["build_s"] - fixed) * scale) / 3600
        print(f"  {name:<18} {r['bytes'] * g / 1e9:7.1f} GB index   build ~{hours:6.1f} h "
              f"(from {r['build_s']:.0f} s at {m}, training {fixed:.0f} s kept constant)")
    print(f"  Flat 768-d (e5-base) {TARGET_N * 768 * 4 / 1e9:6.1f} GB; IVF,PQ64 768-d {TARGET_N * (64 + 8) / 1e9:.1f} GB; "
          f"cheap embedding here {embed_s * f / 3600:.1f} h (a real encoder needs a GPU)")


if __name__ == "__main__":
    main()
