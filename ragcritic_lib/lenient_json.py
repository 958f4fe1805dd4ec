"""Tolerant reading of JSON written by a model (model output is data, never code: nothing is eval'ed).

One scanner, :func:`repair_json`, rewrites near-JSON into JSON texts that :func:`json.loads` can
read: strings in either quote style become double-quoted, Python literals are translated,
trailing commas dropped, and a truncated tail is closed. :func:`loads_lenient` finds the first
JSON value in a whole generation (code fences and prose around it) and repairs it if it must.

How far a repair goes is a :class:`Leniency`. Two are in use, and each caller's outputs are the
ones it had when it owned a scanner of its own (tests/test_jsontext.py checks this against those
scanners, kept there as written):

* :data:`FULL` -- the critic's parser (:func:`ragcritic_lib.critic.critics.parse_critic_output`): also
  quotes bare keys and values, fixes invalid escapes and control characters in strings, closes
  a mismatched bracket as it was opened, gives a key cut off before its value a ``null``, and
  offers shorter cuts at earlier commas when the tail itself is damaged.
* :data:`LIGHT` -- the teachers' parser (:mod:`ragcritic_lib.mining.teachers`, the error-tagging stage):
  leaves those defects for :func:`json.loads` to reject, so an output that needs them is counted
  as invalid, not guessed at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["FULL", "LIGHT", "MAX_DEPTH", "MAX_PARSE_CHARS", "Leniency", "Repair", "loads_lenient",
           "repair_json", "strip_fences"]

MAX_PARSE_CHARS = 20_000
""":func:`loads_lenient` reads at most this many characters (adversarial or runaway text)."""
MAX_DEPTH = 32
"""Nesting :data:`FULL` accepts: a critique nests two levels; deeper text is not one."""


@dataclass(frozen=True)
class Leniency:
    """Which defects :func:`repair_json` repairs beyond the ones it always repairs.

    Always: single-quoted strings, Python's True/False/None, trailing commas, raw newlines in
    strings, an unclosed string and unclosed brackets at the end.

    Attributes:
        apostrophe: when a ``'`` inside a single-quoted string ends it: ``"before_delimiter"``
            (only when followed by ``, : } ]`` or the end) or ``"unless_between_letters"``
            (always, except between two letters as in ``model's``).
        string_bodies: also make string bodies valid: ``\\'`` becomes ``'``, an invalid escape
            keeps its character, CR and TAB are escaped, other control characters become a space,
            and a backslash left dangling by a cut is dropped.
        bare_words: quote bare keys (``{Judgement: ...}``) and bare values (``{"x": Correct}``),
            and read lower-case ``none`` as null.
        structure: close a mismatched bracket as it was opened, and give a key cut off before its
            value a ``null`` (otherwise the key is dropped).
        max_depth: refuse text nested deeper than this (None: no limit of its own; very deep
            text then fails in :mod:`json` with RecursionError).
        cut_candidates: for truncated text, also offer cuts at earlier commas (last 50).
    """

    apostrophe: Literal["before_delimiter", "unless_between_letters"]
    string_bodies: bool
    bare_words: bool
    structure: bool
    max_depth: int | None
    cut_candidates: bool


FULL = Leniency("before_delimiter", string_bodies=True, bare_words=True, structure=True,
                max_depth=MAX_DEPTH, cut_candidates=True)
"""The critic's repairs: everything :class:`Leniency` names."""

LIGHT = Leniency("unless_between_letters", string_bodies=False, bare_words=False, structure=False,
                 max_depth=None, cut_candidates=False)
"""The teachers' repairs: only the ones :func:`repair_json` always makes."""


@dataclass(frozen=True)
class Repair:
    """What :func:`repair_json` made of a text.

    Attributes:
        candidates: JSON texts to try in order (empty when the text was refused as too deep).
        notes: the repairs made: ``single_quotes``, ``python_literal``, ``trailing_comma``,
            ``truncated``, ``unquoted_key``, ``unquoted_value``, ``mismatched_bracket``,
            ``too_deep``.
    """

    candidates: tuple[str, ...]
    notes: frozenset[str]


_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_ALL_LITERALS = {**_PY_LITERALS, "true": "true", "false": "false", "null": "null", "none": "null"}
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COLON_AHEAD = re.compile(r"[ \t]*:")
_BARE_VALUE = re.compile(r"[^,}\]\n]*")
_KEY_AT_END = re.compile(r'[{,]\s*"(?:[^"\\]|\\.)*"\s*$')
_KEY_WITH_COMMA_AT_END = re.compile(r',?\s*"(?:[^"\\]|\\.)*"$')
_FENCE = re.compile(r"```(?:json|JSON|javascript)?\s*\n?(.*?)(?:```|$)", re.S)


def strip_fences(text: str) -> str:
    """The body of the first Markdown code fence in ``text`` (``text`` itself when none or empty)."""
    match = _FENCE.search(text)
    return match.group(1) if match and match.group(1).strip() else text


def _apostrophe_closes(s: str, j: int, rule: str) -> bool:
    """Whether the ``'`` at ``s[j]`` ends the single-quoted string it is in."""
    if rule == "before_delimiter":
        k = j + 1
        while k < len(s) and s[k] in " \t\r\n":
            k += 1
        return k >= len(s) or s[k] in ",:}]"
    return not (j > 0 and s[j - 1].isalpha() and j + 1 < len(s) and s[j + 1].isalpha())


def _scan_string(s: str, i: int, how: Leniency, notes: set[str]) -> tuple[str, int, bool]:
    """(the JSON string, index after it, closed) for the string whose quote is ``s[i]``."""
    quote, j, n, buf = s[i], i + 1, len(s), []
    if quote == "'":
        notes.add("single_quotes")
    while j < n:
        d = s[j]
        if d == "\\" and j + 1 < n:
            nxt = s[j + 1]
            if nxt == "'" and (how.string_bodies or quote == "'"):
                buf.append("'")
            elif how.string_bodies and nxt not in "\"\\/bfnrtu":
                buf.append(nxt)  # an invalid JSON escape: keep the character itself
            else:
                buf.append(d + nxt)
            j += 2
            continue
        if d == quote and (quote == '"' or _apostrophe_closes(s, j, how.apostrophe)):
            return '"' + "".join(buf) + '"', j + 1, True
        if d == '"':
            buf.append('\\"')
        elif d == "\n" or (how.string_bodies and d in _ESCAPES):
            buf.append(_ESCAPES[d])
        elif how.string_bodies and ord(d) < 0x20:
            buf.append(" ")
        else:
            buf.append(d)
        j += 1
    body = "".join(buf)
    if how.string_bodies and body.endswith("\\") and not body.endswith("\\\\"):
        body = body[:-1]  # so the closing quote we add is not escaped
    return '"' + body + '"', n, False


def _scan_word(s: str, i: int, how: Leniency, notes: set[str]) -> tuple[str, int]:
    """(its JSON text, index after it) for the bare word starting at ``s[i]``."""
    m = _WORD.match(s, i)
    word = m.group(0) if m else s[i]
    if not how.bare_words:
        if word in _PY_LITERALS:
            notes.add("python_literal")
        return _PY_LITERALS.get(word, word), i + len(word)
    colon_next = _COLON_AHEAD.match(s, i + len(word)) is not None
    if word in _ALL_LITERALS and not colon_next:
        if word[0].isupper():
            notes.add("python_literal")
        return _ALL_LITERALS[word], i + len(word)
    if colon_next:
        notes.add("unquoted_key")
        return json.dumps(word), i + len(word)
    # A bare value such as {"Judgement": Correct}: quote up to the next delimiter.
    m2 = _BARE_VALUE.match(s, i)
    raw = m2.group(0) if m2 and m2.group(0) else word
    notes.add("unquoted_value")
    return json.dumps(raw.strip()), i + len(raw)


def _close(text: str, stack: Sequence[str]) -> str:
    return text + "".join("}" if c == "{" else "]" for c in reversed(stack))


def _close_truncated(text: str, stack: Sequence[str], how: Leniency) -> str:
    """Close what a cut left open, after mending the tail: a dangling comma, colon or key."""
    tail = text.rstrip()
    if how.structure:
        if tail.endswith(","):
            tail = tail[:-1]
        if tail.endswith(":"):
            tail += " null"
        elif stack[-1] == "{" and _KEY_AT_END.search(tail):
            tail += ": null"  # the cut fell right after a key
    elif tail.endswith(","):
        tail = tail[:-1]
    elif tail.endswith(":"):
        tail += " null"
    elif stack[-1] == "{" and _KEY_AT_END.search(tail):
        tail = _KEY_WITH_COMMA_AT_END.sub("", tail)  # a key without a value is dropped
    return _close(tail, stack)


def repair_json(s: str, how: Leniency = FULL) -> Repair:
    """Rewrite the JSON-like value at the start of ``s`` into candidate JSON texts, best first.

    The scanner walks ``s`` from its start (a ``{`` or ``[``, as the callers pass it) and stops
    where that value closes, so prose after it is ignored; quotes and brackets inside strings are
    left alone. What it repairs is set by ``how`` (see :class:`Leniency`).

    Args:
        s: the text, starting at the value's opening bracket.
        how: :data:`FULL` or :data:`LIGHT` (or another :class:`Leniency`).

    Returns:
        A :class:`Repair`. Its candidates may still fail :func:`json.loads`; try them in order.
    """
    out: list[str] = []
    stack: list[str] = []
    notes: set[str] = set()
    cuts: list[tuple[int, tuple[str, ...]]] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in "\"'":
            piece, i, closed = _scan_string(s, i, how, notes)
            out.append(piece)
            if not closed:
                notes.add("truncated")
                break
        elif c in "{[":
            if how.max_depth is not None and len(stack) >= how.max_depth:
                return Repair((), frozenset(notes | {"too_deep"}))
            stack.append(c)
            out.append(c)
            i += 1
        elif c in "}]":
            while out and out[-1].strip() == "":
                out.pop()
            if out and out[-1] == ",":
                out.pop()
                notes.add("trailing_comma")
            if not stack:
                break
            closer = "}" if stack.pop() == "{" else "]"
            if closer != c:
                notes.add("mismatched_bracket")
                closer = closer if how.structure else c
            out.append(closer)
            i += 1
            if not stack:
                break
        elif c == ",":
            cuts.append((len(out), tuple(stack)))
            out.append(c)
            i += 1
        elif c.isalpha() or c == "_":
            piece, i = _scan_word(s, i, how, notes)
            out.append(piece)
        else:
            out.append(c)
            i += 1
    text = "".join(out)
    if not stack:
        return Repair((text,), frozenset(notes))
    notes.add("truncated")
    candidates = [_close_truncated(text, stack, how)]
    if how.cut_candidates:
        candidates.extend(_close("".join(out[:pos]), st) for pos, st in reversed(cuts[-50:]))
    return Repair(tuple(candidates), frozenset(notes))


def loads_lenient(text: Any, how: Leniency = LIGHT) -> tuple[Any, str | None]:
    """Parse the first JSON value (object or array) in a model's output, tolerating its defects.

    The first :data:`MAX_PARSE_CHARS` characters are read; a code fence is unwrapped and prose
    before the value and after it is ignored. The value is decoded as it stands when it is valid
    JSON, else through :func:`repair_json` (first candidate). Never evaluates code.

    Args:
        text: the model output (anything that is not a non-blank str is ``empty``).
        how: the repairs allowed; :data:`LIGHT` (the teachers') by default.

    Returns:
        (value, None) on success, or (None, reason) with reason one of ``empty``, ``no_json``,
        ``invalid_json``, ``too_deep``.
    """
    if not isinstance(text, str) or not text.strip():
        return None, "empty"
    body = strip_fences(text[:MAX_PARSE_CHARS])
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if not starts:
        return None, "no_json"
    start = min(starts)
    decoder = json.JSONDecoder()
    try:
        try:
            return decoder.raw_decode(body, start)[0], None
        except ValueError:  # JSONDecodeError, or an integer past Python's 4,300-digit limit
            pass
        repaired = repair_json(body[start:], how)
        if not repaired.candidates:
            return None, "too_deep"
        try:
            return decoder.raw_decode(repaired.candidates[0])[0], None
        except ValueError:
            return None, "invalid_json"
    except RecursionError:
        return None, "too_deep"
