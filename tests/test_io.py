"""JSONL logs: characters that str.splitlines() would split at, torn multi-byte tails, kill -9."""

import hashlib
import json
import signal
import subprocess
import sys

import pytest

from ragcritic_lib import paths
from ragcritic_lib.io import (
    DataFormatError, append_jsonl, file_sha256, iter_jsonl, read_jsonl, read_jsonl_tolerant, write_jsonl,
)

# U+2028/U+2029/U+0085 are written raw by json.dumps(ensure_ascii=False); \x0b, \x0c and
# \x1c-\x1e are escaped by json but are line breaks for str.splitlines() too.
TRICKY = ["line\u2028sep", "para\u2029sep", "nel\u0085x", "ctl\x0b\x0c\x1c\x1d\x1e",
          "東京タワー", "🙂👍🏽", "é"]


def _records(n):
    return [{"i": i, "text": TRICKY[i % len(TRICKY)] + f" #{i}"} for i in range(n)]


def test_line_separator_characters_round_trip(tmp_path):
    path = tmp_path / "log.jsonl"
    recs = _records(7)
    write_jsonl(path, recs[:3])
    append_jsonl(path, recs[3:])
    raw = path.read_bytes()
    assert raw.count(b"\n") == 7 and "\u2028".encode() in raw and "\u0085".encode() in raw
    assert read_jsonl_tolerant(path) == recs
    assert read_jsonl_tolerant(path, repair=True) == recs and path.read_bytes() == raw
    assert read_jsonl(path) == recs == list(iter_jsonl(path))


def test_torn_multibyte_tail_is_dropped_and_cut(tmp_path):
    path = tmp_path / "log.jsonl"
    write_jsonl(path, _records(2))
    whole = path.read_bytes()
    torn = json.dumps({"i": 2, "text": "東京"}, ensure_ascii=False).encode()
    cut = torn.index("東".encode()) + 2  # two of the three bytes of 東
    path.write_bytes(whole + torn[:cut])
    assert read_jsonl_tolerant(path) == _records(2)
    assert path.read_bytes() == whole + torn[:cut]  # reading alone never changes the file
    assert read_jsonl_tolerant(path, repair=True) == _records(2)
    assert path.read_bytes() == whole


def test_complete_last_line_without_newline_gets_one(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes('{"i": 0}\n{"i": 1, "t": "\u2028"}'.encode())
    assert read_jsonl_tolerant(path, repair=True) == [{"i": 0}, {"i": 1, "t": "\u2028"}]
    assert path.read_bytes() == '{"i": 0}\n{"i": 1, "t": "\u2028"}\n'.encode()


def test_torn_or_invalid_line_before_the_end_is_corruption(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"i": 0}\n\n{"i": "\xe6\x9d"}\n{"i": 3}\n')
    with pytest.raises(DataFormatError, match=r"log\.jsonl:3: invalid UTF-8"):
        read_jsonl_tolerant(path, repair=True)
    assert path.read_bytes() == b'{"i": 0}\n\n{"i": "\xe6\x9d"}\n{"i": 3}\n'
    with pytest.raises(DataFormatError, match=r"log\.jsonl:3: invalid UTF-8"):
        read_jsonl(path)
    path.write_bytes(b'{"i": 0}\n[1]\n{"i": 2}\n')
    with pytest.raises(DataFormatError, match=r"log\.jsonl:2: expected a JSON object"):
        read_jsonl_tolerant(path)


def test_file_sha256_streams_content(tmp_path):
    path = tmp_path / "f.bin"
    data = bytes(range(256)) * 5000
    path.write_bytes(data)
    assert file_sha256(path, chunk=4096) == hashlib.sha256(data).hexdigest()
    path.write_bytes(data[:-1] + b"x")  # new mtime and content: the memo does not answer
    assert file_sha256(path) == hashlib.sha256(data[:-1] + b"x").hexdigest()


# A writer that appends records with multi-byte text and, at record `tear_at`, writes only part
# of the line (ending inside a multi-byte character) and waits to be killed with SIGKILL.
WRITER = r"""
import json, os, sys, time
from ragcritic_lib.io import append_jsonl, read_jsonl_tolerant
path, total, tear_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
done = {r["i"] for r in read_jsonl_tolerant(path, repair=True)}
for i in range(total):
    if i in done:
        continue
    rec = {"i": i, "text": f"東京\u2028🙂 record {i} " + "é" * (i % 5)}
    if i == tear_at:
        line = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, line[: line.index("京".encode()) + 1])
        os.fsync(fd)
        print("torn", flush=True)
        time.sleep(600)
    append_jsonl(path, [rec])
print("finished", flush=True)
"""


def _expected(i):
    return {"i": i, "text": f"東京\u2028🙂 record {i} " + "é" * (i % 5)}


def test_kill_9_mid_character_then_resume(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER, encoding="utf-8")
    path = tmp_path / "log.jsonl"
    env = {"PYTHONPATH": str(paths.ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, str(script), str(path), "30", "17"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "torn\n", proc.stderr.read()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    raw = path.read_bytes()
    assert not raw.endswith(b"\n") and raw.count(b"\n") == 17
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")  # the tear is inside a multi-byte character
    # Every complete line is read back; the torn one is not.
    assert read_jsonl_tolerant(path) == [_expected(i) for i in range(17)]
    done = subprocess.run([sys.executable, str(script), str(path), "30", "-1"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "finished\n", done.stderr[-2000:]
    assert read_jsonl(path) == [_expected(i) for i in range(30)]  # nothing lost, nothing twice
    assert path.read_bytes().decode("utf-8").count("\n") == 30


def test_atomic_writes_keep_bytes_and_the_old_file_on_failure(tmp_path, monkeypatch):
    from ragcritic_lib import io as rio

    target = tmp_path / "sub" / "f.bin"
    rio.atomic_write_bytes(target, b"\x00\x89PNG\r\n")
    assert target.read_bytes() == b"\x00\x89PNG\r\n"
    rio.atomic_write_text(target, "a\nb\u2028c")  # UTF-8, line ends as given
    assert target.read_bytes() == "a\nb\u2028c".encode("utf-8")

    def fail(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(rio.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        rio.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == "a\nb\u2028c".encode("utf-8")
    assert [p.name for p in target.parent.iterdir()] == ["f.bin"]  # no temporary file left
