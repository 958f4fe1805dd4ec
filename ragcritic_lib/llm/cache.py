"""Persistent cache of LLM generations, shared by every backend and every stage.

One SQLite database in WAL mode (``llm_cache.sqlite`` inside the cache folder, by default
``paths.LLM_CACHE_DIR``, which lives outside the DVC-managed outputs). SQLite gives us what a
folder of JSON files would have to rebuild by hand: each write is an atomic transaction, so a
process killed mid-write leaves the previous state (never a half entry); WAL lets any number of
readers run while one process writes; and lookups of thousands of keys stay one query.

Keys are the sha256 of a canonical JSON of (backend identity, prompt, generation parameters), so
changing the model, the adapter, the dtype, the prompt or any sampling parameter is a miss.

SQLite's locking needs a local filesystem; on NFS point ``cache_dir`` at a local disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths

DB_FILENAME = "llm_cache.sqlite"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS generations ("
    " key TEXT PRIMARY KEY,"
    " value TEXT NOT NULL,"
    " created REAL NOT NULL)"
)
# SQLite caps the number of host parameters per statement; stay well below every build's limit.
_QUERY_CHUNK = 500


class CacheError(RuntimeError):
    """The cache database cannot be opened or read; the message names the file."""


def make_key(identity: Mapping[str, Any], prompt: Any, params: Mapping[str, Any]) -> str:
    """Hex sha256 of the canonical JSON of ``{"identity", "prompt", "params"}``.

    Args:
        identity: what makes a backend produce different text (backend, model, adapter, dtype...).
        prompt: the prompt as the backend sees it (a rendered string or a list of messages).
        params: the generation parameters, as plain JSON values.
    """
    payload = {"identity": dict(identity), "prompt": prompt, "params": dict(params)}
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class LLMCache:
    """Key -> JSON-object store backed by SQLite (WAL), safe across threads and processes.

    Connections are opened lazily, one per (process, thread), so an instance survives ``fork``
    and can be shared by worker threads.

    Args:
        cache_dir: folder holding the database; created when missing. Defaults to
            ``paths.LLM_CACHE_DIR``.
        timeout_s: how long a writer waits for another process's write lock before failing.
    """

    def __init__(self, cache_dir: str | os.PathLike[str] | None = None, *, timeout_s: float = 60.0):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else paths.LLM_CACHE_DIR
        self.path = self.cache_dir / DB_FILENAME
        self.timeout_s = timeout_s
        self._local = threading.local()
        self.corrupt_entries = 0  # rows whose value could not be decoded (treated as misses)
        # Open once now so a broken database fails at construction, naming the file.
        self._conn()

    # -- connection handling -------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            return conn
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(f"{self.cache_dir}: cannot make the LLM cache folder here ({exc})") from None
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
            # WAL: readers never block the writer and vice versa; NORMAL sync is still
            # crash-safe for the application (a killed process loses at most its open transaction).
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise CacheError(
                f"{self.path}: LLM cache database is unreadable ({exc}); delete the file to start "
                "a fresh cache"
            ) from None
        self._local.conn = conn
        self._local.pid = os.getpid()
        return conn

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            conn.close()
        self._local.conn = None

    def __enter__(self) -> LLMCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # Connections and thread-locals do not pickle; a worker process reopens lazily.
        state = self.__dict__.copy()
        del state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    # -- reads ---------------------------------------------------------------------------------
    def get(self, key: str) -> dict[str, Any] | None:
        """The stored object for ``key``, or None (missing or undecodable)."""
        return self.get_many([key]).get(key)

    def get_many(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Look up many keys at once; missing or undecodable entries are simply absent."""
        found: dict[str, dict[str, Any]] = {}
        unique = list(dict.fromkeys(keys))
        conn = self._conn()
        for start in range(0, len(unique), _QUERY_CHUNK):
            chunk = unique[start : start + _QUERY_CHUNK]
            marks = ",".join("?" * len(chunk))
            try:
                rows = conn.execute(
                    f"SELECT key, value FROM generations WHERE key IN ({marks})", chunk
                ).fetchall()
            except sqlite3.DatabaseError as exc:
                raise CacheError(f"{self.path}: cannot read the LLM cache ({exc})") from None
            for key, value in rows:
                try:
                    obj = json.loads(value)
                except (TypeError, json.JSONDecodeError):
                    obj = None
                if isinstance(obj, dict):
                    found[key] = obj
                else:
                    # A foreign or damaged row is a miss; the next put overwrites it.
                    self.corrupt_entries += 1
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM generations").fetchone()[0])

    # -- writes --------------------------------------------------------------------------------
    def put(self, key: str, value: Mapping[str, Any]) -> None:
        """Store one object (replacing any previous value for ``key``)."""
        self.put_many([(key, value)])

    def put_many(self, items: Iterable[tuple[str, Mapping[str, Any]]]) -> int:
        """Store many objects in ONE transaction: after a crash either all or none are there.

        Returns:
            The number of rows written.
        """
        now = time.time()
        rows = [(k, json.dumps(dict(v), ensure_ascii=False), now) for k, v in items]
        if not rows:
            return 0
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO generations (key, value, created) VALUES (?, ?, ?)",
                    rows,
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise CacheError(f"{self.path}: cannot write the LLM cache ({exc})") from None
        return len(rows)

    def clear(self) -> None:
        """Delete every entry (the file stays)."""
        self._conn().execute("DELETE FROM generations")

    def integrity_ok(self) -> bool:
        """True when SQLite's own integrity check passes."""
        row = self._conn().execute("PRAGMA integrity_check").fetchone()
        return bool(row) and row[0] == "ok"
