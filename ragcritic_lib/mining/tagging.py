"""Label normalization of open-set error tags (RAG-Critic section 3.1.2, "Label Normalization").

The paper removes tags from outputs that are not valid JSON, tags longer than 25 tokens and
long-tail tags below a frequency threshold alpha (>20,000 atomic labels down to ~4,000). It does
not say how surface variants are handled; we merge tags that differ only in case, whitespace or
punctuation before counting, so "Missing evidence." and "missing  evidence" count as one label.

Order of the filters: malformed outputs -> empty tags -> merge variants -> length -> per-record
de-duplication -> frequency (document frequency: number of records carrying the tag).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

_TRIM = " \t\r\n\"'`.,;:!?*-_#()[]{}<>"


def surface_form(tag: str) -> str:
    """A tag as displayed: NFKC, whitespace collapsed, stray quotes/punctuation trimmed."""
    text = unicodedata.normalize("NFKC", str(tag))
    text = " ".join(text.split())
    return text.strip(_TRIM)


def tag_key(tag: str) -> str:
    """The merge key: lowercase, punctuation treated as space, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", str(tag)).lower()
    text = re.sub(r"[^\w\s]|_", " ", text)
    return " ".join(text.split())


def count_words(text: str) -> int:
    """Whitespace tokens; the default tokenizer for the 25-token length limit."""
    return len(str(text).split())


def normalize_tags(
    tag_lists: Sequence[Sequence[str] | None],
    alpha: int,
    max_tokens: int = 25,
    *,
    count_tokens: Callable[[str], int] = count_words,
) -> tuple[list[list[str]], dict[str, Any]]:
    """Normalize per-record open-set tags.

    Args:
        tag_lists: one entry per error record: its tags, or None when the teacher output was
            malformed (not parseable into a tag list). Non-string tags count as malformed tags.
        alpha: minimum number of records a merged tag must appear in to be kept.
        max_tokens: tags with more tokens than this are dropped (paper: 25).
        count_tokens: token counter (whitespace words by default; pass a tokenizer's count to
            follow a model's tokens instead).

    Returns:
        (normalized tag lists aligned with the input, report). Each kept tag is displayed with
        its most frequent surface variant (ties: alphabetically first), so output is
        deterministic. The report has counts before and after each filter.
    """
    if alpha < 1:
        raise ValueError(f"alpha must be >= 1, got {alpha}")
    report: dict[str, Any] = {
        "outputs": len(tag_lists),
        "malformed_outputs": sum(1 for t in tag_lists if t is None),
    }
    raw = [list(t) if t is not None else [] for t in tag_lists]
    report["raw_tags"] = sum(len(t) for t in raw)
    report["raw_unique"] = len({t for ts in raw for t in ts if isinstance(t, str)})

    # Empty / non-string tags.
    cleaned: list[list[str]] = []
    dropped_empty = 0
    for ts in raw:
        keep = []
        for t in ts:
            if isinstance(t, str) and tag_key(t):
                keep.append(surface_form(t))
            else:
                dropped_empty += 1
        cleaned.append(keep)
    report["dropped_empty_or_non_string"] = dropped_empty

    # Merge surface variants.
    variants: dict[str, Counter[str]] = {}
    for ts in cleaned:
        for t in ts:
            variants.setdefault(tag_key(t), Counter())[t] += 1
    display = {
        key: sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for key, c in variants.items()
    }
    report["unique_after_merge"] = len(display)

    # Length filter (on the displayed form).
    too_long = {k for k, d in display.items() if count_tokens(d) > max_tokens}
    report["too_long_unique"] = len(too_long)
    report["too_long_occurrences"] = sum(1 for ts in cleaned for t in ts if tag_key(t) in too_long)

    merged: list[list[str]] = []
    for ts in cleaned:
        keys = [tag_key(t) for t in ts]
        merged.append([k for k in dict.fromkeys(keys) if k not in too_long])
    report["tags_after_length"] = sum(len(ks) for ks in merged)
    report["unique_after_length"] = len({k for ks in merged for k in ks})

    # Frequency filter (records carrying the tag).
    doc_freq = Counter(k for ks in merged for k in ks)
    rare = {k for k, n in doc_freq.items() if n < alpha}
    report["below_alpha_unique"] = len(rare)
    report["below_alpha_occurrences"] = sum(doc_freq[k] for k in rare)

    out = [[display[k] for k in ks if k not in rare] for ks in merged]
    report["final_tags"] = sum(len(ts) for ts in out)
    report["final_unique"] = len({t for ts in out for t in ts})
    report["records_without_tags"] = sum(1 for ts in out if not ts)
    report["alpha"] = alpha
    report["max_tokens"] = max_tokens
    return out, report


def tag_counts(tag_lists: Sequence[Sequence[str]]) -> Counter[str]:
    """Occurrences of each tag over records."""
    return Counter(t for ts in tag_lists for t in ts)


def tagging_metrics(
    errors: Sequence[Any],
    norm_report: dict[str, Any],
    *,
    primary: Any,
    llm_teacher: Any | None,
    llm_teacher_agreement: dict[str, Any],
    grounded_vocabulary: int,
) -> dict[str, Any]:
    """Notebook 03's metrics: how many wrong answers were tagged, by which tagger, the label
    normalization's counts (:func:`normalize_tags`'s report) and how the taggers' output parsed.

    Args:
        errors: the tagged error records.
        norm_report: :func:`normalize_tags`'s report.
        primary, llm_teacher: the tagger used and the LLM teacher run on a subset (each with
            ``name`` and ``parse_report()``); ``llm_teacher`` None when none ran.
        llm_teacher_agreement: the LLM tags' agreement with the grounded ones on the subset.
        grounded_vocabulary: the grounded teacher's number of tag phrasings.
    """
    return {
        "error_records": len(errors),
        "tagger": primary.name,
        "normalization": norm_report,
        "tags_before_normalization": norm_report["raw_tags"],
        "unique_tags_before_normalization": norm_report["raw_unique"],
        "unique_tags_after_normalization": norm_report["final_unique"],
        "parse_failure_rate": primary.parse_report()["tags"]["failure_rate"],
        "parse": primary.parse_report()["tags"],
        "llm_subset_parse": llm_teacher.parse_report()["tags"] if llm_teacher else None,
        "llm_teacher_agreement": llm_teacher_agreement,
        "grounded_vocabulary": grounded_vocabulary,
    }
