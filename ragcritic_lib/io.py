"""Reading and writing JSON/JSONL/YAML with clear errors and atomic writes.

Every writer goes through :func:`atomic_write_text` (write to a temporary file in the same
folder, fsync, then ``os.replace``), so an interrupted stage never leaves a half-written file
that a later stage would read as complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from ragcritic_lib import paths
from ragcritic_lib.text import clean_text


class DataFormatError(ValueError):
    """A data file is malformed; the message names the file and, where known, the line."""


def _existing(path: str | os.PathLike[str]) -> Path:
    """``path`` resolved from the repository root (wherever a notebook kernel started), or the
    error naming the pipeline stage that writes it (:func:`paths.missing_file_error`)."""
    p = paths.resolve(path)
    if not p.exists():
        raise paths.missing_file_error(p)
    return p


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see either the old or the new file, never half.

    A relative path is taken from the repository root, as by the readers."""
    path = paths.resolve(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # mkstemp creates 0600 files; give the result the permissions a plain open() would.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8 (line ends as given, on every platform)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _decode_line(raw: bytes, path: Path, lineno: int) -> str:
    """One physical line as text; invalid UTF-8 is an error naming the file and line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(
            f"{path}:{lineno}: invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
        ) from None


def _parse_line(raw: bytes, path: Path, lineno: int) -> dict[str, Any]:
    """Decode and parse one physical JSONL line into an object (errors name ``path:lineno``)."""
    text = _decode_line(raw, path, lineno)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise DataFormatError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    return obj


def iter_jsonl_numbered(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(physical line number, object)`` for each record of a JSONL file.

    The file is read as bytes and split at newline bytes only: ``json.dumps`` with
    ``ensure_ascii=False`` writes U+2028, U+0085 and other characters that ``str.splitlines``
    would treat as line breaks. Blank lines are skipped but still counted, so numbers match an editor's.

    Raises:
        FileNotFoundError: the file does not exist.
        DataFormatError: ``<path>:<line>: ...`` for invalid UTF-8, invalid JSON or a non-object.
    """
    path = _existing(path)
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if raw.strip():
                yield lineno, _parse_line(raw, path, lineno)


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSONL file; blank lines are skipped.

    Raises:
        DataFormatError: naming the file and line of the first malformed record.
    """
    for _, obj in iter_jsonl_numbered(path):
        yield obj


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a whole JSONL file (see :func:`iter_jsonl`)."""
    return list(iter_jsonl(path))


def dumps_jsonl(records: Iterable[Mapping[str, Any]]) -> str:
    """Records as JSONL text; a lone surrogate in any string or key is written as U+FFFD.

    Model output reaches the records, and a surrogate would make the UTF-8 write fail at the end
    of a stage; cleaning the serialised text is the last line of defence (see ragcritic_lib.text).
    """
    return clean_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n" for r in records))


def write_jsonl(path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]]) -> Path:
    """Atomically write records as JSONL (UTF-8, one object per line)."""
    return atomic_write_text(path, dumps_jsonl(records))


def append_jsonl(path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]]) -> None:
    """Append records and fsync; used by resumable stages (a torn last line is dropped, and
    cut off with ``repair=True``, by :func:`read_jsonl_tolerant`)."""
    path = paths.resolve(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dumps_jsonl(records).encode("utf-8")
    # Binary mode: the bytes on disk are exactly the UTF-8 of the records, whatever the platform.
    with path.open("ab") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl_tolerant(path: str | os.PathLike[str], *, repair: bool = False) -> list[dict[str, Any]]:
    """Read an append-only JSONL log, dropping a torn final line left by a killed writer.

    The file is split at newline bytes and decoded line by line, so a writer killed in the
    middle of a multi-byte character only tears its own (last) line. A malformed line anywhere
    but the end is still an error: that is corruption, not a crash.

    Args:
        path: the log; a missing file reads as empty.
        repair: also fix the file for appending: cut a torn final line off (truncate to the end
            of the last complete record) and add the newline a complete last record may lack.

    Raises:
        DataFormatError: ``<path>:<line>: ...`` for a malformed line that is not the last one.
    """
    path = paths.resolve(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the file ends with a newline: no partial line after it
    out: list[dict[str, Any]] = []
    offset = 0  # byte offset of the current line's start
    for lineno, raw in enumerate(lines, start=1):
        if raw.strip():
            try:
                out.append(_parse_line(raw, path, lineno))
            except DataFormatError:
                if lineno < len(lines):
                    raise
                if repair:  # torn record: drop it (its caller never counted it as done)
                    with path.open("r+b") as fh:
                        fh.truncate(offset)
                return out
        offset += len(raw) + 1
    if repair and data and not data.endswith(b"\n"):
        with path.open("ab") as fh:  # a complete record that only lacks its newline: keep it
            fh.write(b"\n")
    return out


def read_json(path: str | os.PathLike[str]) -> Any:
    """Parse a JSON file (relative paths from the repository root)."""
    path = _existing(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Atomically write pretty, key-sorted JSON (stable bytes for DVC metrics); lone surrogates
    in strings or keys are written as U+FFFD, as in :func:`dumps_jsonl`."""
    return atomic_write_text(path, clean_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)) + "\n")


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping repeats a key; ``duplicates`` holds (line, dotted key, first line)."""

    def __init__(self, duplicates: list[tuple[int, str, int]]):
        super().__init__(f"{len(duplicates)} duplicate key(s)")
        self.duplicates = duplicates


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key repeated in one mapping (PyYAML silently keeps the last).

    The whole document is checked before it is built, so every duplicate is reported at once,
    each with its dotted key path and 1-based lines.
    """

    def construct_document(self, node: yaml.Node) -> Any:
        found: list[tuple[int, str, int]] = []
        stack: list[tuple[yaml.Node, str]] = [(node, "")]
        while stack:
            current, prefix = stack.pop()
            if isinstance(current, yaml.SequenceNode):
                stack.extend((child, f"{prefix}[{i}]") for i, child in enumerate(current.value))
            elif isinstance(current, yaml.MappingNode):
                first: dict[str, int] = {}
                for key_node, value_node in current.value:
                    key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
                    dotted = f"{prefix}.{key}" if prefix else key
                    line = key_node.start_mark.line + 1
                    if key == "<<":  # merge key: its repeats are YAML's own business
                        pass
                    elif key in first:
                        found.append((line, dotted, first[key]))
                    else:
                        first[key] = line
                    stack.append((value_node, dotted))
        if found:
            raise DuplicateKeyError(sorted(found))
        return super().construct_document(node)


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """Parse a YAML file, rejecting duplicate keys.

    Raises:
        FileNotFoundError: the file does not exist.
        DataFormatError: one line per problem, ``<path>:<line>: ...``, for invalid UTF-8,
            invalid YAML or a duplicate key.
    """
    path = _existing(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataFormatError(f"{path}:{line}: invalid UTF-8 (byte 0x{data[exc.start]:02x})") from None
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except DuplicateKeyError as exc:
        raise DataFormatError("\n".join(f"{path}:{line}: duplicate key {key!r} (first at line {first})"
                                         for line, key, first in exc.duplicates)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        what = "; ".join(str(x) for x in (getattr(exc, "problem", None), getattr(exc, "context", None)) if x)
        raise DataFormatError(f"{path}{where}: invalid YAML ({what or type(exc).__name__})") from None


def write_yaml(path: str | os.PathLike[str], obj: Any) -> Path:
    return atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False, allow_unicode=True))


_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: str | os.PathLike[str], *, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes, streamed; memoized per (path, inode, size, mtime) in-process.

    The memo only saves re-reading an unchanged file within one run; equality of the digest,
    not of the stat, is what callers compare.
    """
    path = Path(path).resolve()
    st = path.stat()
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(chunk), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]
