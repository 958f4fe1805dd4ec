"""Text shared across the library: sanitising model output, and the stopword lists.

Sanitising. 
Python strings may hold code points that UTF-8 cannot encode: lone UTF-16 surrogates
(U+D800..U+DFFF). Model output produces them in several ways: a JSON string cut inside an escaped
surrogate pair (``"\\ud83d"`` decoded by :func:`json.loads`), a planner program literal
``'\\ud83d'``, an f-string ``f'{55357:c}'``. Such a string is harmless in memory but makes every
UTF-8 writer raise :class:`UnicodeEncodeError`, so a stage would lose its work when it saves it.
:func:`clean_text` and :func:`clean_value` make model output encodable where it becomes data; the
JSON writers in :mod:`ragcritic_lib.io` apply :func:`clean_text` again as the last line of defence.

Stopwords. :data:`ENGLISH_STOPWORDS` is the base list of English function words. The lists the
modules filter with are named after what they filter, and built from the base where they are the
base plus words of a kind (:data:`QUESTION_FILLER_WORDS`, :data:`CONTRACTION_PIECES`, ...). Each
list is exactly the set its module used before the lists moved here (tests/test_text.py pins them),
so no filter changed; :data:`FEATURE_STOPWORDS`, :data:`TAG_STOPWORDS` and :data:`NOT_NAME_WORDS`
are narrower lists of their own, kept as written.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "CONCEPT_STOPWORDS", "CONTRACTION_PIECES", "ENGLISH_STOPWORDS", "FEATURE_STOPWORDS", "NOT_NAME_WORDS",
    "PROMPT_WORDS", "QUERY_STOPWORDS", "QUESTION_FILLER_WORDS", "REPLACEMENT", "TAG_STOPWORDS",
    "clean_text", "clean_value", "has_unencodable",
]

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


# --------------------------------------------------------------------------------------------
# Stopwords
# --------------------------------------------------------------------------------------------
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


ENGLISH_STOPWORDS = _words(
    """a an the and or but nor so of in on at to for by with from into about after before during
    over under between as than then there this that these those it its i me my we our you your he
    him his she her hers they them their theirs what which who whom whose when where why how is
    are was were be been being am do does did doing has have had having can could should will
    would not no all any both each some such more most many much only just also too very"""
)
"""The base list: English function words (articles, prepositions, conjunctions, pronouns,
auxiliaries, question words, quantifiers). Every list below that filters "content words" holds it."""

QUESTION_FILLER_WORDS = _words("name named called one tell give find list")
"""Words a question uses to ask ("Name the film...", "What is it called?", "Tell me one...")
that say nothing about what it asks for."""

CONTRACTION_PIECES = _words("s t ll ve d re m")
"""What splitting on non-letters leaves of a contraction or possessive ("don't" -> "don", "t")."""

PROMPT_WORDS = _words("question answer passage passages final")
"""Words of the RAG prompt's own layout ("Passage 2", "Question:", "Final answer:")."""

QUERY_STOPWORDS = (
    ENGLISH_STOPWORDS | QUESTION_FILLER_WORDS | CONTRACTION_PIECES | _words("question answer please")
    | _words("done either every neither may might must shall us yes")
)
"""What the agent's actions drop to get a query's content words and keyword query, and to
compare a passage line with a question (:mod:`ragcritic_lib.agent.actions`). Tokens there are
``[a-z0-9]+`` runs, hence the contraction pieces."""

CONCEPT_STOPWORDS = (
    ENGLISH_STOPWORDS | QUESTION_FILLER_WORDS | _words("known first")
    | _words(
        """above below up down out off through again against further once here now if because
        while until few other own same itself myself herself himself themselves ours ourselves
        yours yourself yourselves"""
    )
)
"""What the baselines drop to turn a question into "concepts" (RAGEC's coverage rule, CRAG's
keyword query; :func:`ragcritic_lib.baselines.content_words`): the base with the question filler
and a wider set of function words (NLTK-style reflexives and adverbs)."""

FEATURE_STOPWORDS = _words(
    """of in on at to for by with from and or is are was were be been being what which who whom
    whose when where why how did does do this that these those it its as than then there their his
    her they he she has have had not no yes into about after before during over under between most
    more many much"""
)
"""What the critic's gold-free features ignore when they compare the prediction's and the
question's words with the passages (:func:`ragcritic_lib.critic.critics.gold_free_features`). Narrower
than the base (articles and first/second-person pronouns are kept) plus "yes"."""

TAG_STOPWORDS = _words("a an the of to in on for and or by with from is was not no as at be it its than")
"""Glue words left out when two error-tag names are compared by their words (teacher agreement,
:mod:`ragcritic_lib.mining.teachers`); a small subset of the base."""

NOT_NAME_WORDS = _words(
    """the a an it its in on at he she they this that these those there his her their what which
    who when where how why was is are were did does do for from by with and or but as of so"""
) | PROMPT_WORDS
"""Words that end no name: the agent's span mode strips them from the end of a candidate answer
span ("1956 and" -> "1956") and drops a span made only of them (:func:`ragcritic_lib.agent.
actions.answer_candidates`). Function words that precede a name, plus the prompt's own words."""
