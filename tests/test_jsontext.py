"""The shared tolerant JSON scanner (ragcritic_lib.lenient_json) against the two scanners it replaced.

The critic's ``_repair_json`` and the teachers' ``loads_lenient`` each had a scanner of their own.
Both now use :func:`ragcritic_lib.lenient_json.repair_json`, the critic with :data:`FULL` repairs, the
teachers with :data:`LIGHT` ones. The old scanners are kept below exactly as they were (only
renamed), and every test here checks that each caller's output is unchanged: the critic's
candidates and repair notes, the teachers' (value, error) pair, on malformed model output
(truncation, single quotes, trailing commas, code fences, prose, bare words, bad escapes) written
out by hand, cut at every character, and generated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragcritic_lib.critic import critics as critic
from ragcritic_lib.mining import teachers
from ragcritic_lib.lenient_json import FULL, LIGHT, loads_lenient, repair_json, strip_fences

# --------------------------------------------------------------------------------------------
# The scanners as they were: ragcritic_lib/critic/critics.py and ragcritic_lib/mining/teachers.py before the
# shared scanner (names prefixed, the module constants they read defined here).
# --------------------------------------------------------------------------------------------
_OLD_CRITIC_MAX_DEPTH = 32
_OLD_TEACHERS_MAX_PARSE_CHARS = 20_000


def _old_critic_closes_single_quote(s: str, j: int) -> bool:
    """A ``'`` closes a single-quoted string only when followed by a JSON delimiter."""
    k = j + 1
    while k < len(s) and s[k] in " \t\r\n":
        k += 1
    return k >= len(s) or s[k] in ",:}]"


_OLD_CRITIC_LITERALS = {"True": "true", "true": "true", "False": "false", "false": "false",
             "None": "null", "null": "null", "none": "null"}
_OLD_CRITIC_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_OLD_CRITIC_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OLD_CRITIC_COLON_AHEAD = re.compile(r"[ \t]*:")
_OLD_CRITIC_BARE_VALUE = re.compile(r"[^,}\]\n]*")


def _old_critic_close(text: str, stack: Sequence[str]) -> str:
    return text + "".join("}" if c == "{" else "]" for c in reversed(stack))


def _old_critic_repair_json(s: str) -> tuple[list[str], set[str]]:
    """Rewrite a JSON-like object text into candidate JSON texts, best first.

    The scanner walks ``s`` from its first ``{`` and stops where that object closes. Strings in
    either quote style become double-quoted JSON strings; Python literals and bare words are
    translated; trailing commas dropped; a truncated tail is closed, and shorter cuts at earlier
    commas are offered in case the tail itself is damaged.
    """
    out: list[str] = []
    stack: list[str] = []
    notes: set[str] = set()
    cuts: list[tuple[int, tuple[str, ...]]] = []
    i, n = 0, len(s)
    done = False
    while i < n and not done:
        c = s[i]
        if c in "\"'":
            quote, j, buf, closed = c, i + 1, [], False
            if c == "'":
                notes.add("single_quotes")
            while j < n:
                d = s[j]
                if d == "\\" and j + 1 < n:
                    nxt = s[j + 1]
                    if nxt == "'":
                        buf.append("'")
                    elif nxt in "\"\\/bfnrtu":
                        buf.append(d + nxt)
                    else:  # an invalid JSON escape: keep the character itself
                        buf.append(nxt)
                    j += 2
                    continue
                if d == quote and (quote == '"' or _old_critic_closes_single_quote(s, j)):
                    closed = True
                    break
                if d == '"':
                    buf.append('\\"')
                elif d in _OLD_CRITIC_ESCAPES:
                    buf.append(_OLD_CRITIC_ESCAPES[d])
                elif ord(d) < 0x20:
                    buf.append(" ")
                else:
                    buf.append(d)
                j += 1
            if not closed:
                # Drop a dangling backslash so the closing quote we add is not escaped.
                text = "".join(buf)
                if text.endswith("\\") and not text.endswith("\\\\"):
                    text = text[:-1]
                out.append('"' + text + '"')
                notes.add("truncated")
                break
            out.append('"' + "".join(buf) + '"')
            i = j + 1
        elif c in "{[":
            if len(stack) >= _OLD_CRITIC_MAX_DEPTH:
                return [], notes | {"too_deep"}
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
                done = True
                break
            opener = stack.pop()
            if (opener == "{") != (c == "}"):
                notes.add("mismatched_bracket")
            out.append("}" if opener == "{" else "]")
            i += 1
            if not stack:
                done = True
        elif c == ",":
            cuts.append((len(out), tuple(stack)))
            out.append(c)
            i += 1
        elif c.isalpha() or c == "_":
            m = _OLD_CRITIC_WORD.match(s, i)
            word = m.group(0) if m else c
            colon_next = _OLD_CRITIC_COLON_AHEAD.match(s, i + len(word)) is not None
            if word in _OLD_CRITIC_LITERALS and not colon_next:
                out.append(_OLD_CRITIC_LITERALS[word])
                if word[0].isupper():
                    notes.add("python_literal")
                i += len(word)
            elif colon_next:
                out.append(json.dumps(word))
                notes.add("unquoted_key")
                i += len(word)
            else:
                # A bare value such as {"Judgement": Correct}: quote up to the next delimiter.
                m2 = _OLD_CRITIC_BARE_VALUE.match(s, i)
                raw = m2.group(0) if m2 and m2.group(0) else word
                out.append(json.dumps(raw.strip()))
                notes.add("unquoted_value")
                i += len(raw)
        else:
            out.append(c)
            i += 1
    text = "".join(out)
    if not stack:
        return [text], notes
    notes.add("truncated")
    tail = text.rstrip()
    if tail.endswith(","):
        tail = tail[:-1]
    if tail.endswith(":"):
        tail += " null"
    elif stack[-1] == "{" and re.search(r'[{,]\s*"(?:[^"\\]|\\.)*"\s*$', tail):
        tail += ": null"  # the cut fell right after a key
    candidates = [_old_critic_close(tail, stack)]
    for pos, st in reversed(cuts[-50:]):
        candidates.append(_old_critic_close("".join(out[:pos]), st))
    return candidates, notes


_OLD_TEACHERS_FENCE = re.compile(r"```(?:json|JSON|javascript)?\s*\n?(.*?)(?:```|$)", re.S)
_OLD_TEACHERS_LITERALS = {"True": "true", "False": "false", "None": "null"}


def _old_teachers_strip_fences(text: str) -> str:
    match = _OLD_TEACHERS_FENCE.search(text)
    return match.group(1) if match and match.group(1).strip() else text


def _old_teachers_repair(fragment: str) -> str:
    """Rewrite near-JSON into JSON: single quotes, Python literals, trailing commas, truncation.

    A single pass over the characters tracks string state, so quotes and brackets inside strings
    are left alone. An apostrophe between two letters inside a single-quoted string is kept as an
    apostrophe ("model's"), which is what LLMs mean by it.
    """
    out: list[str] = []
    stack: list[str] = []
    quote: str | None = None  # the quote char of the string we are in
    i, n = 0, len(fragment)
    while i < n:
        ch = fragment[i]
        if quote is not None:
            if ch == "\\" and i + 1 < n:
                nxt = fragment[i + 1]
                if quote == "'" and nxt == "'":
                    out.append("'")
                else:
                    out.append(ch + nxt)
                i += 2
                continue
            if ch == quote:
                prev_alpha = i > 0 and fragment[i - 1].isalpha()
                next_alpha = i + 1 < n and fragment[i + 1].isalpha()
                if quote == "'" and prev_alpha and next_alpha:
                    out.append("'")
                else:
                    out.append('"')
                    quote = None
            elif ch == '"' and quote == "'":
                out.append('\\"')
            elif ch == "\n":
                out.append("\\n")
            else:
                out.append(ch)
            i += 1
            continue
        if ch in "\"'":
            quote = ch
            out.append('"')
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            out.append(ch)
        elif ch in "}]":
            # Drop a trailing comma before a closer.
            while out and out[-1].isspace():
                out.pop()
            if out and out[-1] == ",":
                out.pop()
            if stack:
                stack.pop()
            out.append(ch)
            if not stack:
                break  # the first complete value is what we want; prose after it is ignored
        elif ch.isalpha():
            j = i
            while j < n and (fragment[j].isalnum() or fragment[j] == "_"):
                j += 1
            word = fragment[i:j]
            out.append(_OLD_TEACHERS_LITERALS.get(word, word))
            i = j
            continue
        else:
            out.append(ch)
        i += 1
    if quote is not None:
        out.append('"')
    # Close what truncation left open: drop a dangling comma/colon/key first.
    text = "".join(out).rstrip()
    while stack:
        text = text.rstrip()
        if text.endswith(","):
            text = text[:-1]
        elif text.endswith(":"):
            text += " null"
        elif stack[-1] == "}" and re.search(r'[{,]\s*"(?:[^"\\]|\\.)*"$', text):
            text = re.sub(r',?\s*"(?:[^"\\]|\\.)*"$', "", text)  # a key without a value
        text += stack.pop()
    return text


def _old_teachers_loads_lenient(text: Any) -> tuple[Any, str | None]:
    """Parse the first JSON value in model output, tolerating common defects.

    Handles code fences, prose before/after, single quotes, Python literals (True/None), trailing
    commas and truncated output (open strings and brackets are closed). Never evaluates code.

    Returns:
        (value, None) on success, or (None, reason) with reason one of ``empty``, ``no_json``,
        ``invalid_json``, ``too_deep``.
    """
    if not isinstance(text, str) or not text.strip():
        return None, "empty"
    body = _old_teachers_strip_fences(text[:_OLD_TEACHERS_MAX_PARSE_CHARS])
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if not starts:
        return None, "no_json"
    start = min(starts)
    decoder = json.JSONDecoder()
    try:
        try:
            return decoder.raw_decode(body, start)[0], None
        except json.JSONDecodeError:
            pass
        try:
            return decoder.raw_decode(_old_teachers_repair(body[start:]))[0], None
        except json.JSONDecodeError:
            return None, "invalid_json"
    except RecursionError:
        return None, "too_deep"


# --------------------------------------------------------------------------------------------
# Malformed model output
# --------------------------------------------------------------------------------------------
TRUNCATED = [
    '{"Judgement": "Error", "tag1": ["Missing evidence", "Wrong ent',
    '{"Judgement": "Error", "tag1": ["A"], "tag2":',
    '{"Judgement": "Error", "tag1": ["A"], "tag2"',
    '{"Judgement": "Error", "tag1": ["A"],',
    '{"a": 1, "b":,',
    '{"a": 1, "b",',
    '{"a": {"b": [1, 2',
    '{"a": "ends in a backslash \\',
    '{"a": "escaped backslash then cut \\\\\\',
    '[{"tag": "x", "explanation": "cut',
    '[{"tag": "x"}, {"tag": "y", ',
    '{"Judgement": "Err',
    '{',
    '[',
    '{"',
]
SINGLE_QUOTES = [
    "{'Judgement': 'Error', 'tag1': ['Missing evidence'], 'tag3': ['the model's answer']}",
    "{'a': 'it's fine', 'b': None, 'c': True}",
    "{'a': 'say \"hi\"', 'b': 'x' , 'c':'y'}",
    "{'a': 'don\\'t', 'b': \"it\\'s\"}",
    "{'a': 'O'Brien's', 'b': 'x'}",
    "{'a': 'tail ends here'",
    "[{'tag': 'A', 'explanation': 'trunc",
    "{'a': '', 'b': ' '}",
]
TRAILING_COMMAS = [
    '{"a": [1, 2,],}',
    '{"a": 1,}',
    '[1, 2, ]',
    '{"Judgement": "Error", "tag1": ["A", "B",], "tag2": [],}',
    '{"a": {"b": 1,},}',
]
FENCED = [
    '```json\n{"a": [1, 2,],}\n```',
    '```\n{"Judgement": "Correct"}\n```',
    '```JSON\n{\'a\': True}\n```\nMore text.',
    '```json\n{"a": [1,\n',
    '```json\n```\n{"a": 1}',
    'Here it is:\n```javascript\n[{"tag": "A"}, {"tag": "B"},]\n```',
]
PROSE = [
    'Sure! Here is the critique: {"Judgement": "Error", "tag1": ["A"]} Hope this helps.',
    'The answer {"Judgement": Correct} is right.',
    'Result:\n{Judgement: Error, tag1: [Missing evidence]}\nEnd',
    'First {"a": "x"} then {"b": 2}',
    'no json here at all',
    'Judgement: Correct',
    'A list [1, 2] and an object {"a": 1}',
]
OTHER_DEFECTS = [
    '{"a": none, "b": null, "c": True, "d": false}',
    '{"a": [1, 2}, "b": 3}',
    '[{"a": 1]]',
    '{"a": "tab\there", "b": "cr\rhere", "c": "bell\x07here", "d": "nl\nhere"}',
    '{"a": "bad \\x escape", "b": "ok \\u00e9"}',
    '{"a": "it\\\'s"}',
    '{"a": 1e5, "b": -2.5E-3, "c": 1True}',
    '{"a": _None, "b": xTrue, "c": café}',
    '{True: 1, None: 2}',
    '{"a": 1 "b": 2}',
    '{"a": "x"} trailing } and ]',
    '{"judgement": "Error", "tag1": "[\'A\', \'B\']"}',
    '{"a": [' * 20 + '1',
    '[' * 40 + '1',
    '{"a": ' * 40 + '1',
    '{"a": [' + "1, " * 60 + '"tail',  # more commas than the 50 cuts offered
    '{"a": "\\ud83d"}',
    '{"a": "\\ud83d',
]
CASES = TRUNCATED + SINGLE_QUOTES + TRAILING_COMMAS + FENCED + PROSE + OTHER_DEFECTS


def _critic_inputs(text: str) -> list[str]:
    """What the critic's parser hands the scanner: the text from each of its first 8 ``{``."""
    return [text[m.start():] for m in re.finditer(r"\{", text)][:8]


def _same_critic_repair(text: str) -> None:
    for s in _critic_inputs(text):
        assert critic._repair_json(s) == _old_critic_repair_json(s), s


def _same_teachers_parse(text: str) -> None:
    assert teachers.loads_lenient(text) == _old_teachers_loads_lenient(text), text


@pytest.mark.parametrize("text", CASES)
def test_each_caller_reads_malformed_output_as_before(text: str) -> None:
    _same_critic_repair(text)
    _same_teachers_parse(text)


@pytest.mark.parametrize("text", CASES)
def test_each_caller_reads_every_cut_of_malformed_output_as_before(text: str) -> None:
    for end in range(len(text) + 1):
        _same_critic_repair(text[:end])
        _same_teachers_parse(text[:end])


def test_the_critics_label_lists_are_read_as_before() -> None:
    # _as_str_list wraps a list written inside a string as {"x": ...}.
    for value in ["['A', 'B']", '["A", "B",]', "[A, B]", '["A", "B', "[[[", "['it's', \"x\"]"]:
        assert critic._repair_json('{"x":' + value + "}") == _old_critic_repair_json('{"x":' + value + "}")


_ALPHABET = list("{}[]\"':,\\ \n\t\x01-.0123456789eEabxTrueFalsNonl_\u00e9")


@settings(max_examples=3000, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(["{", "[", '{"a": ', "{'a': ", '[{"tag": "']), st.text(alphabet=_ALPHABET, max_size=40))
def test_generated_near_json_is_read_as_before(opening: str, rest: str) -> None:
    text = opening + rest
    _same_critic_repair(text)
    _same_teachers_parse(text)
    _same_teachers_parse("Output:\n```json\n" + text)


def test_parse_outputs_of_both_callers_on_examples() -> None:
    # What each caller makes of typical damage (the differential tests above show it is unchanged).
    parse = critic.parse_critic_output
    assert parse("{'Judgement': 'Error', 'tag1': ['A',], 'tag2': [],}").judgement == "Error"
    assert parse('Critique: {Judgement: Correct}').judgement == "Correct"
    cut = parse('{"Judgement": "Error", "tag1": ["A", "B"], "tag2": ["C", "D')
    assert cut.judgement == "Error" and cut.tag1 == ["A", "B"] and "truncated" in cut.repairs
    assert teachers.loads_lenient('```json\n[{"tag": "A",},]\n```') == ([{"tag": "A"}], None)
    assert teachers.loads_lenient("{'a': 'model's view'}") == ({"a": "model's view"}, None)
    assert teachers.loads_lenient('{"a": none}') == (None, "invalid_json")  # LIGHT leaves bare words
    assert loads_lenient('{"a": none}', FULL) == ({"a": None}, None)


# --------------------------------------------------------------------------------------------
# The shared module itself
# --------------------------------------------------------------------------------------------
def test_repair_json_reports_its_repairs() -> None:
    out = repair_json("{'a': True, b: x,", FULL)
    assert json.loads(out.candidates[0]) == {"a": True, "b": "x"}
    assert out.notes == {"single_quotes", "python_literal", "unquoted_key", "unquoted_value", "truncated"}
    assert repair_json("[" * 40, FULL) == repair_json("[" * 33, FULL)
    assert repair_json("[" * 40, FULL).candidates == () and "too_deep" in repair_json("[" * 40, FULL).notes
    assert len(repair_json("[" * 40, LIGHT).candidates) == 1


def test_only_full_offers_shorter_cuts() -> None:
    text = '{"a": 1, "b": 2, "c": "x\\'
    assert repair_json(text, LIGHT).candidates == ('{"a": 1, "b": 2, "c": "x\\"}',)
    full = repair_json(text, FULL).candidates
    assert full[0] == '{"a": 1, "b": 2, "c": "x"}'
    assert full[1:] == ('{"a": 1, "b": 2}', '{"a": 1}')


def test_model_output_is_never_evaluated() -> None:
    text = "{'a': __import__('os').system('exit 1')}"
    value, err = loads_lenient(text, FULL)
    assert err is None and value["a"] == "__import__('os').system('exit 1')"
    assert loads_lenient(text) == (None, "invalid_json")


def test_strip_fences() -> None:
    assert strip_fences('x ```json\n{"a": 1}\n``` y') == '{"a": 1}\n'
    assert strip_fences("```\n```") == "```\n```"
    assert strip_fences("no fence") == "no fence"


def test_loads_lenient_bounds_its_input() -> None:
    value, err = loads_lenient('[{"tag": "' + "x" * 1_000_000)
    assert err is None and len(value[0]["tag"]) < 20_001
    assert loads_lenient(None) == (None, "empty")
    assert loads_lenient("[" * 5000) == (None, "too_deep")
    assert loads_lenient("[" * 5000, FULL) == (None, "too_deep")
