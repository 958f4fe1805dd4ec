"""A memory-mapped on-disk copy of a FlashRAG corpus JSONL, so a process holds offsets, not text.

:func:`build_corpus_store` streams the JSONL once into a folder named by the corpus content
fingerprint (the same sha256 as ``retrieval.corpus_fingerprint``)::

    contents.bin  contents.offsets.npy   UTF-8 passage texts, uint64 byte offsets (n + 1)
    ids.bin       ids.offsets.npy        passage ids, likewise
    id_hash.npy   id_rows.npy            sorted 64-bit id hashes and their rows (id -> row)
    meta.json                            format, passage count, fingerprint

:func:`open_corpus` returns a ``retrieval.Corpus`` whose ``ids`` and ``contents`` are
:class:`StringColumn` views: passages are decoded from the page cache on access, so 21M
passages cost each process about 0.5 GB of mapped offsets instead of ~50 GB of Python strings.
A small pointer file per source path (size + mtime) lets later opens skip reading the JSONL.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import tempfile
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

from ragcritic_lib import paths
from ragcritic_lib.data.corpus import Corpus, fingerprint_update, record_fields
from ragcritic_lib.io import DataFormatError, read_json, write_json

STORE_FORMAT = 1
DEFAULT_STORE_DIR = paths.CACHE_DIR / "corpora"


def id_hash(doc_id: str) -> int:
    """Stable 64-bit hash of a passage id (the store's id -> row lookup key)."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "little")


class StringColumn(Sequence[str]):
    """Read-only sequence of strings backed by a memory-mapped byte file and uint64 offsets."""

    def __init__(self, data_path: Path, offsets_path: Path) -> None:
        self._offsets = np.load(offsets_path, mmap_mode="r")
        self._size = len(self._offsets) - 1
        self._fh = open(data_path, "rb")  # noqa: SIM115 - kept open for the mapping's lifetime
        nbytes = os.fstat(self._fh.fileno()).st_size
        # mmap refuses empty files; a corpus of empty strings reads from an empty buffer instead.
        self._buf: Any = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if nbytes else b""
        if self._size < 0 or int(self._offsets[-1]) != nbytes:
            raise DataFormatError(f"{data_path}: size {nbytes} does not match {offsets_path}")

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(self._size))]
        i = int(i)
        if i < 0:
            i += self._size
        if not 0 <= i < self._size:
            raise IndexError(f"row {i} out of range for {self._size} strings")
        return self._get(i)

    def _get(self, i: int) -> str:
        a, b = int(self._offsets[i]), int(self._offsets[i + 1])
        return bytes(self._buf[a:b]).decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        for i in range(self._size):
            yield self._get(i)

    def __reduce__(self) -> Any:  # picklable by path (mmap objects are not)
        return (StringColumn, (Path(self._fh.name), Path(self._offsets.filename)))


class _ColumnWriter:
    """Appends strings to ``<name>.bin`` and records their byte offsets."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder, self.name = folder, name
        self._fh = (folder / f"{name}.bin").open("wb")
        self._offsets = array("Q", [0])
        self._pos = 0

    def append(self, b: bytes) -> None:
        self._fh.write(b)
        self._pos += len(b)
        self._offsets.append(self._pos)

    def close(self) -> None:
        self._fh.close()
        np.save(self.folder / f"{self.name}.offsets.npy", np.frombuffer(self._offsets, dtype=np.uint64))


def _write_store(jsonl: Path, folder: Path) -> tuple[str, int]:
    """Stream ``jsonl`` into ``folder``; returns (fingerprint, passage count)."""
    ids_w, contents_w = _ColumnWriter(folder, "ids"), _ColumnWriter(folder, "contents")
    hashes = array("Q")
    lines = array("Q")  # physical line of each row, for duplicate-id messages
    h = hashlib.sha256()
    try:
        with jsonl.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                where = f"{jsonl}:{lineno}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataFormatError(f"{where}: invalid JSON ({exc.msg})") from None
                doc_id, text = record_fields(rec, where)
                fingerprint_update(h, doc_id, text)
                ids_w.append(doc_id.encode("utf-8"))
                contents_w.append(text.encode("utf-8"))
                hashes.append(id_hash(doc_id))
                lines.append(lineno)
    finally:
        ids_w.close()
        contents_w.close()
    hash_arr = np.frombuffer(hashes, dtype=np.uint64)
    order = np.argsort(hash_arr, kind="stable")
    sorted_hash = hash_arr[order]
    _check_duplicates(folder, jsonl, sorted_hash, order, lines)
    np.save(folder / "id_hash.npy", sorted_hash)
    np.save(folder / "id_rows.npy", order.astype(np.int64))
    return h.hexdigest(), len(hash_arr)


def _check_duplicates(folder: Path, jsonl: Path, sorted_hash: np.ndarray, order: np.ndarray, lines: array) -> None:
    same = np.flatnonzero(sorted_hash[1:] == sorted_hash[:-1])
    if not len(same):
        return
    ids = StringColumn(folder / "ids.bin", folder / "ids.offsets.npy")
    # Stable sort: within a hash group rows ascend, so the later row is the repeat.
    repeats = sorted(
        (int(order[j + 1]), int(order[j])) for j in same if ids[int(order[j + 1])] == ids[int(order[j])]
    )
    if repeats:
        row, _ = repeats[0]
        raise DataFormatError(f"{jsonl}:{lines[row]}: duplicate id {ids[row]!r}")


def _pointer_path(root: Path, jsonl: Path) -> Path:
    key = hashlib.sha256(str(jsonl.resolve()).encode()).hexdigest()[:24]
    return root / "sources" / f"{key}.json"


def _source_stat(jsonl: Path) -> dict[str, Any]:
    st = jsonl.stat()
    return {"path": str(jsonl.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def build_corpus_store(jsonl: str | os.PathLike[str], root: str | os.PathLike[str] = DEFAULT_STORE_DIR) -> Path:
    """Build (or find) the store of a corpus JSONL under ``root``; returns its folder.

    The folder is named by the content fingerprint, so two files with equal content share one
    store. A pointer file records the source's size and mtime: while they are unchanged the
    JSONL is not read again. Builds go to a temporary folder renamed into place (atomic).

    Raises:
        FileNotFoundError: the JSONL does not exist.
        DataFormatError: naming the file and line of the first malformed record.
    """
    jsonl, root = Path(jsonl), Path(root)
    if not jsonl.exists():
        raise FileNotFoundError(f"{jsonl}: no such file")
    stat = _source_stat(jsonl)
    pointer = _pointer_path(root, jsonl)
    if pointer.exists():
        try:
            saved = read_json(pointer)
            folder = root / str(saved["fingerprint"])
            if {k: saved.get(k) for k in stat} == stat and (folder / "meta.json").exists():
                return folder
        except (OSError, ValueError, KeyError):
            pass  # an unreadable pointer only costs a rebuild
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".store.", suffix=".tmp", dir=root))
    try:
        fingerprint, n = _write_store(jsonl, tmp)
        write_json(tmp / "meta.json", {"format": STORE_FORMAT, "n": n, "fingerprint": fingerprint})
        folder = root / fingerprint
        if not (folder / "meta.json").exists():
            try:
                os.rename(tmp, folder)
            except OSError:
                if not (folder / "meta.json").exists():  # not a concurrent builder winning the rename
                    raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    tmp_ptr = pointer.with_name(f".{pointer.name}.{os.getpid()}.tmp")
    write_json(tmp_ptr, {**stat, "fingerprint": fingerprint})
    os.replace(tmp_ptr, pointer)
    return folder


class _IdLookup:
    """id -> row by binary search over the memory-mapped sorted id hashes."""

    def __init__(self, folder: Path, ids: StringColumn) -> None:
        self._hash = np.load(folder / "id_hash.npy", mmap_mode="r")
        self._rows = np.load(folder / "id_rows.npy", mmap_mode="r")
        self._ids = ids

    def __call__(self, doc_id: str) -> int:
        h = np.uint64(id_hash(doc_id))
        j = int(np.searchsorted(self._hash, h, side="left"))
        while j < len(self._hash) and self._hash[j] == h:
            row = int(self._rows[j])
            if self._ids[row] == doc_id:
                return row
            j += 1
        raise KeyError(doc_id)


def load_corpus_store(folder: str | os.PathLike[str]) -> Any:
    """Open a store folder as a memory-mapped ``retrieval.Corpus`` (fingerprint precomputed).

    Raises:
        DataFormatError: the folder is not a store of this format or its files disagree.
    """
    folder = Path(folder)
    meta = read_json(folder / "meta.json")
    if meta.get("format") != STORE_FORMAT:
        raise DataFormatError(f"{folder / 'meta.json'}: key 'format' must be {STORE_FORMAT}, got {meta.get('format')!r}")
    ids = StringColumn(folder / "ids.bin", folder / "ids.offsets.npy")
    contents = StringColumn(folder / "contents.bin", folder / "contents.offsets.npy")
    if len(ids) != meta["n"] or len(contents) != meta["n"]:
        raise DataFormatError(f"{folder}: meta.json says {meta['n']} passages, files hold {len(ids)}/{len(contents)}")
    return Corpus.stored(ids, contents, fingerprint=str(meta["fingerprint"]), lookup=_IdLookup(folder, ids))


def open_corpus(jsonl: str | os.PathLike[str], root: str | os.PathLike[str] = DEFAULT_STORE_DIR) -> Any:
    """The memory-mapped ``Corpus`` of a FlashRAG JSONL, building its store on first use."""
    return load_corpus_store(build_corpus_store(jsonl, root))
