"""Params profiles written into params.yaml's own text: ``python -m ragcritic_lib.pipeline.profiles NAME``.

A profile (``configs/profiles/NAME.yaml``) lists the keys it changes. Applying it edits the value
of each of those keys where params.yaml writes it, and nothing else: comments, blank lines, key
order, quoting of the other values and the alignment of end-of-line comments stay as they were.
DVC reads params.yaml itself for the ``params:`` dependencies of the stages, so the profile has to
land in that file (an overlay file next to it would be invisible to ``dvc repro``).

Rules:

- a key the profile sets must already be in params.yaml; otherwise the profile file and the
  dotted key are named in the error and nothing is written. The exception is the open sections
  (:data:`OPEN_SECTIONS`), whose keys are optional and take the loader's defaults when absent
  (the GPU profile sets ``common.generator.gpu_memory_utilization``, for instance): there a new
  key is added after the section's last line, and the usual validation rejects a misspelt one;
- the merged params are validated (:func:`ragcritic_lib.pipeline.params.validate_params`) and the edited
  text is read back and compared with the merge of the profile over params.yaml before anything
  is written; any difference is an error;
- the file is replaced atomically (temporary file, fsync, rename): an interrupted or failed
  write leaves the old params.yaml whole.

``python -m ragcritic_lib.pipeline.profiles --reset`` writes back the params.yaml of git's HEAD (as ``git checkout params.yaml``
does, it also drops edits made by hand).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ragcritic_lib import paths
from ragcritic_lib.io import UniqueKeyLoader, atomic_write_text
from ragcritic_lib.pipeline.params import (
    ParamsError,
    deep_merge,
    profile_file,
    read_params_file,
    validate_params,
)

# Sections whose keys are optional (the generator's and the retriever's loaders fill in defaults):
# a profile may add a key there that params.yaml does not write.
OPEN_SECTIONS = ("common.generator", "common.retriever")


@dataclass(frozen=True)
class _Edit:
    """Replace text[start:end] with ``new`` (an insertion when start == end)."""

    start: int
    end: int
    new: str
    order: int  # keeps insertions at one position in the profile's order


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types, recursively (so 1, 1.0 and True differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _round_trips(rendered: str, value: Any) -> bool:
    try:
        loaded = yaml.safe_load(f"k: {rendered}\n")
    except yaml.YAMLError:
        return False
    return isinstance(loaded, dict) and _same(loaded.get("k"), value)


def render_value(value: Any, style: str | None = None) -> str:
    """``value`` as one line of YAML that reads back as the same value and type.

    A string keeps the quoting of the value it replaces (``style``: ``'"'``, ``"'"`` or None).
    """
    candidates = []
    if isinstance(value, str) and style == '"':
        candidates.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, str) and style == "'":
        candidates.append("'" + value.replace("'", "''") + "'")
    dumped = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True)
    candidates.append(dumped.removesuffix("\n").removesuffix("\n...").strip())
    if isinstance(value, str):
        candidates.append(json.dumps(value, ensure_ascii=True))
    for text in candidates:
        if "\n" not in text and "\r" not in text and _round_trips(text, value):
            return text
    raise ParamsError(f"cannot write {value!r} as a single-line YAML value")


def _line_end(text: str, index: int) -> int:
    """Index just past the end of the line holding ``index`` (a newline is added if missing)."""
    nl = text.find("\n", index)
    return len(text) if nl < 0 else nl + 1


def _replacement(text: str, node: yaml.Node, value: Any, order: int) -> _Edit:
    """Replace a value node's text; an end-of-line comment keeps its column where it can."""
    start, end = node.start_mark.index, node.end_mark.index
    style = node.style if isinstance(node, yaml.ScalarNode) else None
    new = render_value(value, style)
    if start == end:  # `key:` with nothing after it (null)
        return _Edit(start, end, " " + new, order)
    gap = re.match(r"[ \t]+(?=#)", text[end:_line_end(text, end)])
    if gap:
        width = max(1, len(gap.group()) - (len(new) - (end - start)))
        return _Edit(start, end + len(gap.group()), new + " " * width, order)
    return _Edit(start, end, new, order)


def _plan(text: str, root: yaml.Node, override: Mapping[str, Any], *, params_name: str,
          profile_name: str) -> list[_Edit]:
    """The edits that set every value of ``override`` in ``text``; ParamsError lists what cannot be set."""
    edits: list[_Edit] = []
    problems: list[str] = []
    inserted_at: set[int] = set()
    newline = "\r\n" if "\r\n" in text else "\n"

    def walk(node: yaml.MappingNode, values: Mapping[Any, Any], prefix: str) -> None:
        keys = {k.value: (k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)}
        for key, value in values.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if not isinstance(key, str):
                problems.append(f"{dotted}: keys must be strings, got {type(key).__name__}")
                continue
            if key not in keys:
                if prefix in OPEN_SECTIONS and not isinstance(value, (Mapping, list)) and node.flow_style is False:
                    last_key, last_value = node.value[-1]
                    at = _line_end(text, last_value.end_mark.index)
                    # At the end of a file without a final newline, the first new line starts one.
                    lead = "" if text.endswith("\n") or at < len(text) or at in inserted_at else newline
                    inserted_at.add(at)
                    line = f"{lead}{' ' * last_key.start_mark.column}{key}: {render_value(value)}{newline}"
                    edits.append(_Edit(at, at, line, len(edits)))
                else:
                    problems.append(f"{dotted}: not in {params_name} (a profile sets values of keys "
                                    f"params.yaml already has)")
                continue
            _, child = keys[key]
            if isinstance(value, Mapping):
                if isinstance(child, yaml.MappingNode) and child.flow_style is False:
                    walk(child, value, dotted)
                else:
                    problems.append(f"{dotted}: a mapping in the profile but not in {params_name}")
            elif isinstance(child, yaml.ScalarNode) or (
                    isinstance(child, (yaml.MappingNode, yaml.SequenceNode)) and child.flow_style):
                edits.append(_replacement(text, child, value, len(edits)))
            else:
                problems.append(f"{dotted}: a {'mapping' if isinstance(child, yaml.MappingNode) else 'list'} "
                                f"in {params_name}, a single value in the profile")

    if not isinstance(root, yaml.MappingNode) or root.flow_style:
        problems.append(f"{params_name} must be a block mapping of sections")
    else:
        walk(root, override, "")
    if problems:
        raise ParamsError(f"{profile_name} cannot be applied to {params_name}:\n  - " + "\n  - ".join(problems))
    return edits


def overlay_text(text: str, override: Mapping[str, Any], *, params_name: str = "params.yaml",
                 profile_name: str = "profile") -> str:
    """``text`` (a params.yaml) with the values of ``override`` set in place.

    Raises:
        ParamsError: keys the profile sets that params.yaml lacks (outside :data:`OPEN_SECTIONS`),
            a mapping where params.yaml has a single value or the reverse; each problem names
            ``profile_name`` and the dotted key. Also raised when the edited text would not read
            back as the merge of ``override`` over ``text``.
    """
    try:
        root = yaml.compose(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ParamsError(f"{params_name}: invalid YAML ({exc})") from None
    edits = _plan(text, root, override, params_name=params_name, profile_name=profile_name)
    out = text
    for e in sorted(edits, key=lambda e: (e.start, e.order), reverse=True):
        out = out[:e.start] + e.new + out[e.end:]
    expected = deep_merge(yaml.safe_load(text) or {}, override)
    got = yaml.load(out, Loader=UniqueKeyLoader)  # noqa: S506
    if not _same(got, expected):
        raise ParamsError(f"{profile_name}: applying it to {params_name} in place would not give the merged "
                          f"values (anchors or aliases in {params_name}?); nothing written")
    return out


def apply_profile(profile: str, *, params_path: Path | None = None) -> dict[str, Any]:
    """Set the values of ``configs/profiles/<profile>.yaml`` in params.yaml, in place; returns
    the params now in the file.

    Nothing is written unless every key can be set and the result validates.

    Raises:
        ParamsError: no such profile, a key params.yaml lacks (naming the profile file and the
            key), a value of the wrong shape, or every validation problem of the merged params.
    """
    params_path = Path(params_path or paths.PARAMS_FILE)
    prof = profile_file(profile)
    base, override = read_params_file(params_path) or {}, read_params_file(prof) or {}
    if not isinstance(override, Mapping):
        raise ParamsError(f"{prof}: expected a mapping of sections")
    if not isinstance(base, Mapping):
        raise ParamsError(f"{params_path}: expected a mapping of sections")
    text = params_path.read_bytes().decode("utf-8")
    new_text = overlay_text(text, override, params_name=str(params_path), profile_name=str(prof))
    merged = deep_merge(base, override)
    validate_params(merged, source=f"{params_path} + {prof.name}")
    if new_text != text:
        atomic_write_text(params_path, new_text)
    return merged


def reset_params(params_path: Path | None = None) -> Path:
    """Write back params.yaml as committed at git's HEAD (edits made by hand are dropped too).

    Raises:
        ParamsError: git is missing, the folder is not in a repository, or HEAD has no such file.
    """
    params_path = Path(params_path or paths.PARAMS_FILE)
    try:
        res = subprocess.run(["git", "show", f"HEAD:./{params_path.name}"], cwd=params_path.parent,
                             capture_output=True, check=False)
    except OSError as exc:
        raise ParamsError(f"{params_path}: cannot run git ({exc.strerror or exc}); restore the file by hand") from None
    if res.returncode != 0:
        why = res.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ParamsError(f"{params_path}: no committed version to go back to "
                          f"({why[-1] if why else 'git show failed'})")
    atomic_write_text(params_path, res.stdout.decode("utf-8"))
    return params_path


def main(argv: list[str] | None = None) -> int:
    """``NAME`` or ``--reset``; exit code 2 with one line per problem."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.profiles",
                                     description="Set params.yaml's values from a profile in configs/profiles/ "
                                                 "(comments and layout kept), or go back to the committed file.")
    parser.add_argument("name", nargs="?", help="profile name (configs/profiles/NAME.yaml)")
    parser.add_argument("--reset", action="store_true",
                        help="write back params.yaml as committed at git HEAD (drops hand edits too)")
    args = parser.parse_args(argv)
    if (args.name is None) == (not args.reset):
        parser.error("give a profile NAME or --reset (not both)")
    try:
        if args.reset:
            print(f"{reset_params()}: restored from git HEAD")
        else:
            apply_profile(args.name)
            print(f"params.yaml now holds profile {args.name!r} (return with `--reset`)")
    except ParamsError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
