"""Tests of the persistent LLM cache: keys, persistence, crash safety, concurrent access."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ragcritic_lib.llm.cache import DB_FILENAME, CacheError, LLMCache, make_key

ROOT = Path(__file__).resolve().parent.parent


def _value(key: str) -> dict:
    """The value every test process stores under ``key``, so readers can verify it exactly."""
    return {"text": f"answer for {key} " * 20, "prompt_tokens": len(key), "completion_tokens": 7, "finish_reason": "stop"}


def test_make_key_is_canonical_and_sensitive():
    ident = {"backend": "hf", "model": "m", "dtype": "float32"}
    params = {"max_new_tokens": 8, "temperature": 0.0, "stop": []}
    key = make_key(ident, [{"role": "user", "content": "hi"}], params)
    assert len(key) == 64 and all(c in "0123456789abcdef" for c in key)
    # Dict order does not matter ...
    assert key == make_key(dict(reversed(list(ident.items()))), [{"content": "hi", "role": "user"}], params)
    # ... but every component does.
    assert key != make_key({**ident, "model": "m2"}, [{"role": "user", "content": "hi"}], params)
    assert key != make_key({**ident, "dtype": "bfloat16"}, [{"role": "user", "content": "hi"}], params)
    assert key != make_key(ident, [{"role": "user", "content": "hi!"}], params)
    assert key != make_key(ident, "hi", params)
    assert key != make_key(ident, [{"role": "user", "content": "hi"}], {**params, "max_new_tokens": 9})
    assert key != make_key(ident, [{"role": "user", "content": "hi"}], {**params, "stop": ["\n"]})


def test_put_get_roundtrip_and_persistence(tmp_path):
    cache = LLMCache(tmp_path)
    assert cache.path == tmp_path / DB_FILENAME
    assert cache.get("nope") is None and len(cache) == 0 and "nope" not in cache
    cache.put("a", {"text": "é ✓", "n": 1})
    assert cache.put_many([("b", {"text": "B"}), ("c", {"text": "C"})]) == 2
    assert cache.put_many([]) == 0
    assert cache.get("a") == {"text": "é ✓", "n": 1}
    assert cache.get_many(["a", "c", "zz", "a"]) == {"a": {"text": "é ✓", "n": 1}, "c": {"text": "C"}}
    cache.put("a", {"text": "new"})  # replace
    cache.close()

    reopened = LLMCache(tmp_path)
    assert len(reopened) == 3
    assert reopened.get("a") == {"text": "new"} and "b" in reopened
    assert reopened.integrity_ok()
    reopened.clear()
    assert len(reopened) == 0


def test_get_many_handles_more_keys_than_one_query(tmp_path):
    cache = LLMCache(tmp_path)
    keys = [f"k{i}" for i in range(1234)]
    cache.put_many((k, {"i": i}) for i, k in enumerate(keys))
    got = cache.get_many(keys + ["missing"])
    assert len(got) == 1234 and got["k1000"] == {"i": 1000}


def test_undecodable_row_is_a_miss_and_gets_overwritten(tmp_path):
    cache = LLMCache(tmp_path)
    with sqlite3.connect(cache.path) as conn:
        conn.execute("INSERT INTO generations (key, value, created) VALUES ('bad', '{\"text\": ', 0)")
        conn.execute("INSERT INTO generations (key, value, created) VALUES ('list', '[1, 2]', 0)")
    assert cache.get("bad") is None and cache.get("list") is None
    assert cache.corrupt_entries == 2
    cache.put("bad", {"text": "fixed"})
    assert cache.get("bad") == {"text": "fixed"}


def test_a_cache_folder_that_is_a_file_names_the_path(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    with pytest.raises(CacheError, match="afile: cannot make the LLM cache folder"):
        LLMCache(tmp_path / "afile")


def test_unreadable_database_names_the_file(tmp_path):
    (tmp_path / DB_FILENAME).write_bytes(b"this is not a sqlite database at all" * 100)
    with pytest.raises(CacheError, match=DB_FILENAME):
        LLMCache(tmp_path)


_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from ragcritic_lib.llm.cache import LLMCache
    cache = LLMCache({cache_dir!r})
    batch = {batch}
    for b in range(100000):
        keys = [f"b{{b}}-{{i}}" for i in range(batch)]
        cache.put_many((k, {{"text": f"answer for {{k}} " * 20, "prompt_tokens": len(k),
                            "completion_tokens": 7, "finish_reason": "stop"}}) for k in keys)
    """
)


def test_killed_writer_leaves_only_whole_transactions(tmp_path):
    """SIGKILL a process that keeps writing 200-entry transactions: every surviving entry is
    intact and the count is a whole number of transactions (nothing half-written)."""
    batch = 200
    script = _WRITER.format(root=str(ROOT), cache_dir=str(tmp_path), batch=batch)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        watcher = LLMCache(tmp_path)
        deadline = time.monotonic() + 120
        while len(watcher) < 3 * batch:
            assert proc.poll() is None, "writer exited early"
            assert time.monotonic() < deadline, "writer made no progress"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL

    cache = LLMCache(tmp_path)
    assert cache.integrity_ok()
    n = len(cache)
    assert n >= 3 * batch and n % batch == 0
    with sqlite3.connect(cache.path) as conn:
        keys = [row[0] for row in conn.execute("SELECT key FROM generations")]
    got = cache.get_many(keys)
    assert len(got) == n and cache.corrupt_entries == 0
    assert all(got[k] == _value(k) for k in keys)
    # The cache stays writable after the crash.
    cache.put("after", _value("after"))
    assert cache.get("after") == _value("after")


def _reader(cache_dir: str, keys: list[str], rounds: int, out: mp.Queue) -> None:
    cache = LLMCache(cache_dir)
    bad = 0
    for _ in range(rounds):
        got = cache.get_many(keys)
        bad += sum(got.get(k) != _value(k) for k in keys)
    out.put(bad)


def _writer(cache_dir: str, keys: list[str]) -> None:
    cache = LLMCache(cache_dir)
    for start in range(0, len(keys), 20):
        cache.put_many((k, _value(k)) for k in keys[start : start + 20])


def test_concurrent_readers_and_a_writer(tmp_path):
    old = [f"old{i}" for i in range(300)]
    new = [f"new{i}" for i in range(300)]
    LLMCache(tmp_path).put_many((k, _value(k)) for k in old)

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    out: mp.Queue = ctx.Queue()
    readers = [ctx.Process(target=_reader, args=(str(tmp_path), old, 10, out)) for _ in range(3)]
    writer = ctx.Process(target=_writer, args=(str(tmp_path), new))
    for p in [*readers, writer]:
        p.start()
    results = [out.get(timeout=120) for _ in readers]
    for p in [*readers, writer]:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert results == [0, 0, 0]
    cache = LLMCache(tmp_path)
    assert len(cache) == 600
    assert cache.get_many(new) == {k: _value(k) for k in new}


def test_cache_shared_across_threads(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    cache = LLMCache(tmp_path)
    keys = [f"t{i}" for i in range(100)]

    def work(k: str) -> bool:
        cache.put(k, _value(k))
        return cache.get(k) == _value(k)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, keys))
    assert len(cache) == 100
