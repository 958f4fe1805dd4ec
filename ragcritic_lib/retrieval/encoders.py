"""Text encoders for dense retrieval: sentence-transformers, or an ONNX model run with
onnxruntime (CLS or mean pooling, length-sorted batches)."""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragcritic_lib import paths
from ragcritic_lib.retrieval.base import (
    BGE_QUERY_PREFIX,
    ENCODER_TYPES,
    model_fingerprint,
)

logger = logging.getLogger(__name__)

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


