"""A FlashRAG corpus in memory or memory-mapped: :class:`Corpus`, its records and its fingerprint.

Retrieval (:mod:`ragcritic_lib.retrieval`) searches a ``Corpus``; the on-disk store
(:mod:`ragcritic_lib.data.corpus_store`) opens one over memory-mapped columns. Both build on this
module, which depends on neither.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib.io import DataFormatError


def record_fields(rec: Any, where: str) -> tuple[str, str]:
    """``(id, contents)`` of one FlashRAG record; ``{"title", "text"}`` records are joined.

    Raises:
        DataFormatError: naming ``where`` and the missing or mistyped key.
    """
    if not isinstance(rec, Mapping):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    if "id" not in rec:
        raise DataFormatError(f"{where}: missing key 'id'")
    doc_id = rec["id"]
    if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool):
        raise DataFormatError(f"{where}: key 'id' must be a string, got {type(doc_id).__name__}")
    if "contents" in rec:
        text = rec["contents"]
        if not isinstance(text, str):
            raise DataFormatError(f"{where}: key 'contents' must be a string")
    elif isinstance(rec.get("text"), str):
        # BEIR-style records: the FlashRAG convention puts the title on the first line.
        title = rec.get("title") or ""
        text = f"{title}\n{rec['text']}" if isinstance(title, str) and title else rec["text"]
    else:
        raise DataFormatError(f"{where}: missing key 'contents'")
    return str(doc_id), text


def fingerprint_update(h: Any, doc_id: str, text: str) -> None:
    """Feed one passage into a sha256 corpus fingerprint (length prefixes keep fields apart)."""
    b_id, b_text = doc_id.encode("utf-8"), text.encode("utf-8")
    h.update(len(b_id).to_bytes(8, "little"))
    h.update(b_id)
    h.update(len(b_text).to_bytes(8, "little"))
    h.update(b_text)


@dataclass
class Corpus:
    """Passages in FlashRAG order: ``contents[i]`` is ``"Title\\ntext"`` of passage ``ids[i]``.

    ``ids`` and ``contents`` are lists, or memory-mapped sequences for a corpus opened from an
    on-disk store (:func:`ragcritic_lib.data.corpus_store.open_corpus`); both read the same way.
    """

    ids: Sequence[str]
    contents: Sequence[str]
    _pos: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)
    # Set only for immutable stored corpora: the fingerprint computed at build time and an
    # id -> row lookup that does not need a dict of every id.
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)
    _lookup: Callable[[str], int] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.contents):
            raise ValueError(f"Corpus: {len(self.ids)} ids but {len(self.contents)} contents")

    @classmethod
    def stored(
        cls, ids: Sequence[str], contents: Sequence[str], *, fingerprint: str, lookup: Callable[[str], int]
    ) -> Corpus:
        """A read-only corpus over memory-mapped columns, with its precomputed fingerprint."""
        corpus = cls(ids, contents)
        corpus._fingerprint = fingerprint
        corpus._lookup = lookup
        return corpus

    @property
    def is_stored(self) -> bool:
        """True for a corpus backed by an on-disk store (texts read on demand)."""
        return self._lookup is not None

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]], *, source: str = "corpus") -> Corpus:
        """Build from FlashRAG records; ``{"title", "text"}`` records are joined as contents.

        Raises:
            DataFormatError: a record lacks an id or text, or an id repeats (names the record).
        """
        ids: list[str] = []
        contents: list[str] = []
        seen: set[str] = set()
        for n, rec in enumerate(records, start=1):
            doc_id, text = record_fields(rec, f"{source}: record {n}")
            if doc_id in seen:
                raise DataFormatError(f"{source}: record {n}: duplicate id {doc_id!r}")
            seen.add(doc_id)
            ids.append(doc_id)
            contents.append(text)
        return cls(ids, contents)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> Corpus:
        """Read a FlashRAG corpus JSONL file.

        Raises:
            DataFormatError: naming the file and line of the first malformed record.
        """
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file")
        ids: list[str] = []
        contents: list[str] = []
        seen: set[str] = set()
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataFormatError(f"{where}: invalid JSON ({exc.msg})") from None
                doc_id, text = record_fields(rec, where)
                if doc_id in seen:
                    raise DataFormatError(f"{where}: duplicate id {doc_id!r}")
                seen.add(doc_id)
                ids.append(doc_id)
                contents.append(text)
        return cls(ids, contents)

    def __len__(self) -> int:
        return len(self.ids)

    def position(self, doc_id: str) -> int:
        """Row of ``doc_id``; raises KeyError for an unknown id."""
        if self._lookup is not None:
            return self._lookup(doc_id)
        if self._pos is None or len(self._pos) != len(self.ids):
            self._pos = {d: i for i, d in enumerate(self.ids)}
        return self._pos[doc_id]

    def text_of(self, doc_id: str) -> str:
        """Contents of the passage with this id."""
        return self.contents[self.position(doc_id)]

    def title(self, i: int) -> str:
        """Title line of passage ``i`` (FlashRAG's surrounding quotes removed; "" when none)."""
        head, sep, _ = self.contents[i].partition("\n")
        return head.strip().strip('"') if sep else ""

    def body(self, i: int) -> str:
        """Text of passage ``i`` without its title line."""
        head, sep, rest = self.contents[i].partition("\n")
        return rest if sep else head


def corpus_fingerprint(corpus: Corpus) -> str:
    """sha256 over ids and contents in order: equal iff the corpus content is equal.

    A stored corpus returns the value computed when its store was built (same formula), so
    opening 21M passages does not re-hash them in every process.
    """
    if corpus._fingerprint is not None:
        return corpus._fingerprint
    h = hashlib.sha256()
    for doc_id, text in zip(corpus.ids, corpus.contents):
        fingerprint_update(h, doc_id, text)
    return h.hexdigest()
