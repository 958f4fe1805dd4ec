"""The ``truth`` judge: an answer is right when it asserts a gold answer and no competing value.

The F1 >= 0.5 judge fails both ways: a whole right sentence scores under 0.5, and a wrong number
sharing a unit word with the gold ("20 days" for 627 days) scores 0.5. Accuracy (the gold occurs
in the answer) credits answers that name the gold beside a value that contradicts it. This judge
sees the gold answers and the question's metadata, never the question text or a method's
internals, and knows no dataset's sentence templates:

* **Unanswerable questions** (every gold answer is itself an abstention, as on the testbed): right
  when the answer abstains (:func:`ragcritic_lib.mining.evidence.is_abstention`) and asserts no
  competing value ("insufficient information, maybe 12" offers a near-duplicate's value). On any
  other question an abstention is wrong, whatever else the answer says.
* **Asserting a value**: the value's words occur in the answer as whole words (the scorer's
  short-answer safeguard: "a" is not in "banana"), with numbers read as numbers ("1,200" ==
  "1200", "$45 million" == "45,000,000"; "200" is not in "1,200", "20" not in "20.5", and "20
  days" is not "627 days"). An occurrence right after a word that denies or subordinates it
  (``not``, ``than``, ``unlike``, ``instead of``, ``formerly``, ``previously``, ``nor``) is
  mentioned, not asserted: "A has more staff than B" and "A, not B" assert A only.
* **Competing values** come from the metadata: ``outdated_answers`` (superseded values),
  ``distractor_answers`` (a near-duplicate entity's value) and ``other_options`` (a comparison's
  other option). An answer asserting one of them is wrong even when it also asserts the gold
  ("A or B", "the CEO is X or Y"). A competing value found only inside an occurrence of the gold
  ("Ruddale" inside "Ruddale Mills") does not count, nor does a short form inside a denied long
  one ("Livia Ostrander" in "not Dr Livia Ostrander").

Where the metadata holds no competing values (other datasets), the judge is accuracy with the
safeguards above. Its known blind spot: an answer that asserts the gold through the losing side
of a comparison ("B has fewer staff than A" for gold A) is judged wrong, since reading it right
needs the question's direction, which the judge does not parse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.evaluation.scoring import normalize_answer
from ragcritic_lib.mining.evidence import is_abstention

COMPETING_KEYS: tuple[str, ...] = ("outdated_answers", "distractor_answers", "other_options")

# A mention right after one of these is denied or subordinated, not asserted.
_DEMOTE_ONE = frozenset({"not", "than", "unlike", "formerly", "previously", "nor"})
_DEMOTE_TWO = frozenset({("instead", "of"), ("no", "longer"), ("rather", "than")})
_ARTICLES = frozenset({"a", "an", "the"})
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
# A number (thousands separators or a decimal part allowed), or a run of letters/digits.
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*(?![^\W_])|[^\W_]+")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")

Token = str | float


def _number(text: str) -> float | None:
    if _THOUSANDS.fullmatch(text):
        return float(text.replace(",", ""))
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    return None  # "1,2" or "1.2.3": not one number


def _number_parts(tok: str) -> list[Token]:
    """The numbers of a token that is not one number ("1,2" -> 1.0, 2.0); a token with letters
    inside ("02t00" of a timestamp, a superscript "²") stays one word."""
    try:
        return [float(p) for p in re.split(r"[.,]", tok) if p]
    except ValueError:
        return [tok]


def _tokens(text: str) -> list[Token]:
    """Lowercased words and numbers (as floats, scale words folded in), articles dropped.

    A number glued to letters ("1990s", "5km") is one word, so it never equals a bare number.
    """
    out: list[Token] = []
    for tok in _TOKEN.findall(str(text).lower()):
        if tok in _ARTICLES:
            continue
        if tok[0].isdigit() and not tok[-1].isalpha():
            value = _number(tok)
            out.extend([value] if value is not None else _number_parts(tok))
        elif tok in _SCALES and out and isinstance(out[-1], float):
            out[-1] = out[-1] * _SCALES[tok]
        else:
            out.append(tok)
    return out


def _plain_tokens(text: str) -> list[Token]:
    """The scorer's official normalization split into words ("U.S." == "US"), for digit-free values."""
    return list(normalize_answer(text).split())


def _find(hay: Sequence[Token], needle: Sequence[Token]) -> list[int]:
    n = len(needle)
    if not n:
        return []
    return [i for i in range(len(hay) - n + 1) if list(hay[i:i + n]) == list(needle)]


def _demoted(hay: Sequence[Token], start: int) -> bool:
    before = [t for t in hay[max(0, start - 2):start]]
    if before and before[-1] in _DEMOTE_ONE:
        return True
    return len(before) == 2 and tuple(before) in _DEMOTE_TWO


def _occurrences(prediction: str, values: Sequence[str]) -> dict[str, list[tuple[int, int, bool]]]:
    """Per tokenization, the (start, end, demoted) spans where a value occurs in the prediction."""
    views = {"numbers": _tokens(prediction), "plain": _plain_tokens(prediction)}
    out: dict[str, list[tuple[int, int, bool]]] = {k: [] for k in views}
    for value in values:
        value_views = {"numbers": _tokens(value)}
        if not any(ch.isdigit() for ch in str(value)):
            value_views["plain"] = _plain_tokens(value)
        for name, needle in value_views.items():
            hay = views[name]
            for i in _find(hay, needle):
                out[name].append((i, i + len(needle), _demoted(hay, i)))
    return out


def competing_values(golds: Sequence[str], metadata: Mapping[str, Any] | None) -> list[str]:
    """The metadata's competing values (:data:`COMPETING_KEYS`) that differ from every gold."""
    meta = metadata if isinstance(metadata, Mapping) else {}
    gold_norm = {normalize_answer(g) for g in golds}
    out: list[str] = []
    for key in COMPETING_KEYS:
        value = meta.get(key)
        items = ([] if value is None else [value] if isinstance(value, (str, int, float))
                 else list(value.values()) if isinstance(value, Mapping) else list(value))
        for item in items:
            text = str(item)
            if normalize_answer(text) and normalize_answer(text) not in gold_norm and text not in out:
                out.append(text)
    return out


def is_unanswerable(golds: Sequence[str]) -> bool:
    """Whether the right response is to abstain: every gold answer is itself an abstention."""
    return bool(golds) and all(is_abstention(g) for g in golds)


def asserts(prediction: str, values: Sequence[str], *, besides: Sequence[str] = ()) -> bool:
    """Whether the prediction asserts one of ``values``: an occurrence that is not denied or
    subordinated and not part of a longer occurrence of a value or of one of ``besides`` ("Jonas
    Lowell" inside "not Dr Jonas Lowell"; a competing "Ruddale" inside the gold "Ruddale Mills")."""
    found = _occurrences(prediction, values)
    every = _occurrences(prediction, [*values, *besides])
    for view, spans in found.items():
        for start, end, demoted in spans:
            if demoted:
                continue
            if any(s <= start and end <= e and (e - s) > (end - start) for s, e, _ in every[view]):
                continue
            return True
    return False


def truth_correct(prediction: str, golds: Sequence[str], metadata: Mapping[str, Any] | None = None) -> bool:
    """The truth judge's verdict on one answer (see the module docstring)."""
    golds = [str(g) for g in golds or []]
    prediction = str(prediction or "")
    rivals = competing_values(golds, metadata)
    if is_unanswerable(golds):
        # Abstaining is the answer; offering a competing value beside it asserts that value.
        return is_abstention(prediction) and not (rivals and asserts(prediction, rivals))
    if not golds or is_abstention(prediction):
        return False
    if not asserts(prediction, golds):
        return False
    return not (rivals and asserts(prediction, rivals, besides=golds))


def truth_score(prediction: str, golds: Sequence[str], metadata: Mapping[str, Any] | None = None) -> float:
    """:func:`truth_correct` as 1.0 / 0.0, beside em, f1 and acc."""
    return float(truth_correct(prediction, golds, metadata))
