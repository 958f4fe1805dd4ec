"""Model replies read in linear time, with the same readings as the regexes they replace.

A degenerate reply (a long run of spaces, dots or "J. " initials) made four scans quadratic: a
200,000-character run of "!" took minutes in ``extract_answer``. Each rewrite is checked here
against the definition it replaces on generated text built from the characters that matter, and a
JSON integer past Python's 4,300-digit conversion limit is a parse failure, not an exception.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ragcritic_lib.critic import critics as critic
from ragcritic_lib.retrieval import rag
from ragcritic_lib.baselines import ragec
from ragcritic_lib.lenient_json import loads_lenient
from ragcritic_lib.mining.teachers import parse_rationale, parse_tag_output

# The definitions the rewrites replace.
OLD_TRAIL = re.compile(r"[\s\.\,\;\:\!\*\"'`]+$")
OLD_JUDGEMENT = re.compile(r"""judge?ment["'\s]*[:=]\s*["']?\s*([A-Za-z]+)""", re.IGNORECASE)
OLD_ID = re.compile(r"\bE\s*-?\s*(\d{1,2})\b", re.IGNORECASE)


def old_first_sentence(text: str) -> str:
    for m in rag._SENTENCE_END_RE.finditer(text + " "):
        before = text[: m.start()].split()
        word = before[-1].lower().rstrip(".") if before else ""
        if word in rag._ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
            continue
        return text[: m.start()]
    return text


SETTINGS = settings(max_examples=1500, deadline=None, derandomize=True, database=None)
def _texts(pieces: list[str], max_pieces: int):
    """Text made of the characters and words that decide the scan."""
    return st.lists(st.sampled_from(pieces), max_size=max_pieces).map("".join)


ANSWERISH = _texts(list("ab J.Dr,;:!*\"'`\t\n\u00a0\u2003") + ["Dr.", "St. ", "3.5", "e.g."], 40)
_SEPARATOR = _texts(list(" \t\n\"':=-"), 8)
_KEYWORD = st.sampled_from(["Judgement", "judgment", "JUDGEMENT", "judgemen"])
VERDICTISH = st.lists(st.tuples(_texts(list("ab1 "), 3), _KEYWORD, _SEPARATOR, _texts(list("xE1 \""), 4)),
                      max_size=3).map(lambda parts: "".join("".join(p) for p in parts))
VOTEISH = _texts(list("Ee -\t\n0123456789x,") + ["E7", "E 12", "e-3"], 30)


@SETTINGS
@given(ANSWERISH)
def test_trailing_strip_reads_as_the_regex_did(text):
    assert rag._strip_trailing(text) == OLD_TRAIL.sub("", text)


@SETTINGS
@given(ANSWERISH)
def test_first_sentence_reads_as_the_whole_prefix_split_did(text):
    assert rag.first_sentence(text) == old_first_sentence(text)


@SETTINGS
@given(VERDICTISH)
def test_judgement_fallback_reads_as_before(text):
    old, new = OLD_JUDGEMENT.search(text), critic._REGEX_JUDGEMENT.search(text)
    assert (old and (old.span(), old.group(1))) == (new and (new.span(), new.group(1)))


@SETTINGS
@given(VOTEISH)
def test_ragec_type_ids_read_as_before(text):
    assert [m.group(1) for m in OLD_ID.finditer(text)] == [m.group(1) for m in ragec._ID_RE.finditer(text)]


def test_degenerate_runs_still_read_sensibly():
    assert rag.extract_answer("So the final answer is: Oslo" + "!" * 5000)[0] == "Oslo"
    assert rag.first_sentence("J. " * 3000 + "Smith left. Later") == ("J. " * 3000 + "Smith left")
    assert critic.parse_critic_output("Judgement:" + " " * 5000 + "Error").judgement == "Error"
    assert [m.group(1) for m in ragec._ID_RE.finditer("E" + " " * 5000 + "7")] == ["7"]


def test_an_integer_past_the_conversion_limit_is_a_parse_failure_not_an_exception():
    huge = "9" * 4400
    assert loads_lenient("[" + huge + "]") == (None, "invalid_json")
    parsed = critic.parse_critic_output('{"Judgement": "Error", "n": ' + huge + "}")
    assert parsed.judgement == "Error"  # read by the regex fallback, the object being unreadable
    assert critic.parse_critic_output('{"Judgement": "Error", "tag1": "[' + "1" * 4400 + ']"}').judgement == "Error"
    rationale = parse_rationale('{"Judgement": "Error", "Error_analysis": ' + huge + "}")
    tags = parse_tag_output('{"tags": [' + huge + "]}")
    assert (rationale.valid, rationale.error, tags.valid, tags.error) == (False, "invalid_json", False, "invalid_json")
