"""Reading and writing JSON/JSONL/YAML with clear errors and atomic writes.

Every writer goes through :func:`atomic_write_text` (write to a temporary file in the same
folder, fsync, then ``os.replace``), so an interrupted stage never leaves a half-written file
that a later stage would read as complete.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from ragcritic_lib.text import clean_text


class DataFormatError(ValueError):
    """A data file is malformed; the message names the file and, where known, the line."""


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` so that readers see either the old or the new file, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # mkstemp creates 0600 files; give the result the permissions a plain open() would.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSONL file; blank lines are skipped.

    Raises:
        DataFormatError: naming the file and line of the first malformed record.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise DataFormatError(
                    f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}"
                )
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
    """Append records and fsync; used by resumable stages (a torn last line is dropped on read
    by :func:`read_jsonl_tolerant`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(dumps_jsonl(records))
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl_tolerant(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read an append-only JSONL log, dropping a torn final line left by a killed writer.

    A malformed line anywhere but the end is still an error: that is corruption, not a crash.
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if lineno == len(lines):
                break
            raise DataFormatError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
    return out


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Atomically write pretty, key-sorted JSON (stable bytes for DVC metrics); lone surrogates
    in strings or keys are written as U+FFFD, as in :func:`dumps_jsonl`."""
    return atomic_write_text(path, clean_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)) + "\n")


def read_yaml(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise DataFormatError(f"{path}{where}: invalid YAML ({exc})") from None


def write_yaml(path: str | os.PathLike[str], obj: Any) -> Path:
    return atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False, allow_unicode=True))
