"""Text sanitising at the model-output boundary.

Python strings may hold code points that UTF-8 cannot encode: lone UTF-16 surrogates
(U+D800..U+DFFF). Model output produces them in several ways: a JSON string cut inside an escaped
surrogate pair (``"\\ud83d"`` decoded by :func:`json.loads`), a planner program literal
``'\\ud83d'``, an f-string ``f'{55357:c}'``. Such a string is harmless in memory but makes every
UTF-8 writer raise :class:`UnicodeEncodeError`, so a stage would lose its work when it saves it.
:func:`clean_text` and :func:`clean_value` make model output encodable where it becomes data; the
JSON writers in :mod:`ragcritic_lib.io` apply :func:`clean_text` again as the last line of defence.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REPLACEMENT", "clean_text", "clean_value", "has_unencodable"]

REPLACEMENT = "\ufffd"
"""What an unencodable code point becomes (U+FFFD REPLACEMENT CHARACTER)."""

# Surrogates are the only code points a Python str can hold that UTF-8 cannot encode.
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def has_unencodable(text: str) -> bool:
    """True if ``text`` holds a code point UTF-8 cannot encode (a surrogate)."""
    return _SURROGATE_RE.search(text) is not None


def clean_text(text: str) -> str:
    """Return ``text`` with every lone surrogate replaced by U+FFFD.

    A high surrogate directly followed by a low one (``'\\ud83d\\ude00'``, as a program literal
    or Java/JavaScript-style output spells an astral character) is joined into the character it
    encodes; every other surrogate becomes one U+FFFD. Text without surrogates is returned as is.

    Args:
        text: Any str.

    Returns:
        A str that encodes to UTF-8 without error.

    Raises:
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"clean_text expects a str, got {type(text).__name__}")
    if _SURROGATE_RE.search(text) is None:
        return text
    # UTF-16 with 'surrogatepass' writes each surrogate as its own code unit; decoding it back
    # pairs valid high+low units into one character and turns each unpaired unit into U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_value(value: Any) -> Any:
    """Apply :func:`clean_text` to every str inside a JSON-like value (keys included).

    Lists, tuples and dicts are copied (as list, tuple and dict) with their strings cleaned;
    other values are returned unchanged. The walk is iterative, so deeply nested model JSON
    cannot exhaust the stack; a sub-value reached twice is copied twice, as JSON would.

    Args:
        value: A str, number, None, or lists/tuples/dicts of these.

    Returns:
        An equal value whose strings all encode to UTF-8.

    Raises:
        ValueError: ``value`` contains itself.
    """
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, (list, tuple, dict)):
        return value
    root: list[Any] = [value]
    on_path: set[int] = set()  # containers being copied: meeting one again means a cycle
    # Frames: (slot, index, None) cleans slot[index]; (slot, index, original) finishes the copy
    # in slot[index] once all its children are clean (it is pushed below them on the stack).
    stack: list[tuple[list[Any], int, Any]] = [(root, 0, None)]
    while stack:
        slot, index, original = stack.pop()
        if original is not None:
            on_path.discard(id(original))
            if isinstance(original, dict):
                slot[index] = {key: val for key, val in slot[index]}
            elif isinstance(original, tuple):
                slot[index] = tuple(slot[index])
            continue
        item = slot[index]
        if isinstance(item, str):
            slot[index] = clean_text(item)
            continue
        if not isinstance(item, (list, tuple, dict)):
            continue
        if id(item) in on_path:
            raise ValueError("clean_value: the value contains itself")
        on_path.add(id(item))
        stack.append((slot, index, item))
        if isinstance(item, dict):
            pairs = [[key, val] for key, val in item.items()]
            slot[index] = pairs
            stack.extend((pair, j, None) for pair in pairs for j in (0, 1))
        else:
            copy = list(item)
            slot[index] = copy
            stack.extend((copy, j, None) for j in range(len(copy)))
    return root[0]
