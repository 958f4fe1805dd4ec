"""Dense retrieval over a FAISS index (flat, HNSW, IVF or any factory string), on CPU or GPU."""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragcritic_lib.data.corpus import Corpus
from ragcritic_lib.retrieval.base import (
    INDEX_TYPES,
    Hit,
    Retriever,
    _check_k,
)
from ragcritic_lib.retrieval.encoders import (
    TextEncoder,
)

logger = logging.getLogger(__name__)

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


