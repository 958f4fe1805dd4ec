"""Grounded evidence about a RAG answer, computed without any LLM.

For each sampled response we record facts a reader (or a weak teacher's reviewer) can check:
where the gold answer occurs in the retrieved passages, whether the prediction does, whether the
model abstained, copied a title, rambled or was cut off, and, on the synthetic testbed, which
error causes are known from the way the question was constructed (supporting passage not
retrieved, a near-duplicate entity's value, an outdated statement, ...).

Known causes describe conditions that explain an error; they are computed for every record and
are meaningful for the wrong ones. :func:`error_causes` adds causes inferred from the evidence
alone, so the grounded teacher can label datasets without construction metadata (trivia).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.evaluation.scoring import contains_answer, normalize_words

# Phrases that mean "I cannot answer" (matched on the normalized prediction as whole words).
ABSTAIN_PHRASES: tuple[str, ...] = (
    "insufficient information", "not enough information", "no information", "no relevant information",
    "i don t know", "i do not know", "dont know", "cannot be determined", "can t be determined",
    "cannot determine", "can not be determined", "cannot answer", "can t answer", "unable to answer",
    "unable to determine", "not mentioned", "not provided", "not specified", "not stated",
    "does not mention", "doesn t mention", "do not mention", "don t mention", "no answer",
    "not possible to determine", "not available", "unanswerable", "none of passages",
)
# A prediction equal to one of these words is also an abstention.
ABSTAIN_WORDS: frozenset[str] = frozenset({"unknown", "none", "na", "unclear", "insufficient"})

# A prediction of more than this many words is "in the passages" when one passage holds at least
# SUPPORT_SHARE of its words (a sentence-long answer paraphrases; exact containment never holds).
SUPPORT_MIN_WORDS = 4
SUPPORT_SHARE = 0.6
_FUNCTION_WORDS = frozenset("a an the of in on at to for by with from and or is are was were be it its as that this".split())

VERBOSE_MIN_TOKENS = 20      # a short-form answer longer than this is verbose ...
VERBOSE_GOLD_FACTOR = 3      # ... and longer than 3x the longest gold answer

# Construction-known causes (testbed) and evidence-inferred causes (any dataset).
KNOWN_CAUSES: tuple[str, ...] = (
    "supporting_not_retrieved", "partial_support", "split_fact", "distractor_entity",
    "outdated_statement", "unanswerable_answered", "abstained_when_answerable",
    "answer_not_extracted", "verbose_or_truncated",
)
EVIDENCE_CAUSES: tuple[str, ...] = (
    "gold_not_retrieved", "unsupported_answer", "wrong_span_from_context", "title_copy",
    "empty_answer", "numeric_error", "temporal_error", "comparison_error", "incomplete_summary",
    "entity_mismatch", "off_topic_answer", "wrong_answer",
)


def is_abstention(prediction: str) -> bool:
    """Whether a prediction declines to answer ("insufficient information", "I don't know", ...)."""
    if str(prediction).strip().strip(".").lower() in ("n/a", "n.a"):
        return True
    norm = normalize_words(prediction)
    if not norm:
        return False
    if norm in ABSTAIN_WORDS:
        return True
    hay = f" {norm} "
    return any(f" {phrase} " in hay for phrase in ABSTAIN_PHRASES)


def passage_title(contents: str) -> str:
    """Title line of a FlashRAG passage (``"Title\\ntext"``)."""
    return str(contents).split("\n", 1)[0].strip()


def _ranks(passages: Sequence[Mapping[str, Any]], needles: Sequence[str]) -> list[int]:
    return [i for i, p in enumerate(passages) if contains_answer(str(p.get("contents", "")), needles)]


def _support_ranks(passages: Sequence[Mapping[str, Any]], prediction: str) -> list[int]:
    """Passages that state the prediction: contain it, or (for a long prediction) hold at least
    :data:`SUPPORT_SHARE` of its words other than function words."""
    exact = _ranks(passages, [prediction])
    words = [w for w in normalize_words(prediction).split() if w not in _FUNCTION_WORDS]
    if len(words) <= SUPPORT_MIN_WORDS:
        return exact
    out = set(exact)
    for i, p in enumerate(passages):
        have = set(normalize_words(str(p.get("contents", ""))).split())
        if sum(w in have for w in words) >= SUPPORT_SHARE * len(words):
            out.add(i)
    return sorted(out)


def _meta(record: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = record.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _strings(value: Any) -> list[str]:
    """A metadata value as a flat list of strings (str, list, or dict values)."""
    if value is None or isinstance(value, bool):
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, Mapping):
        out: list[str] = []
        for v in value.values():
            out.extend(_strings(v))
        return out
    if isinstance(value, Sequence):
        out = []
        for v in value:
            out.extend(_strings(v))
        return out
    return []


def _first(meta: Mapping[str, Any], *keys: str) -> Any:
    knobs = meta.get("knobs") if isinstance(meta.get("knobs"), Mapping) else {}
    for key in keys:
        if key in meta:
            return meta[key]
        if key in knobs:
            return knobs[key]
    return None


def _knob_on(meta: Mapping[str, Any], name: str) -> bool:
    knobs = meta.get("knobs") if isinstance(meta.get("knobs"), Mapping) else {}
    value = knobs.get(name)
    if isinstance(value, Mapping):
        return bool(value)
    return bool(value) and value not in (0, "none", "off")


def _passage_entities(passage: Mapping[str, Any], passage_meta: Mapping[str, Mapping[str, Any]] | None) -> set[str]:
    meta = passage.get("metadata") if isinstance(passage.get("metadata"), Mapping) else None
    if meta is None and passage_meta is not None:
        meta = passage_meta.get(str(passage.get("id")))
    return set(_strings((meta or {}).get("entity_ids")))


def compute_evidence(
    record: Mapping[str, Any],
    *,
    passage_meta: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Grounded facts about one RAG answer (see CONTRACT.md "Grounded evidence").

    Args:
        record: a RAG result record (question, golden_answers, metadata, passages, prediction,
            followed_prefix, truncated).
        passage_meta: optional corpus metadata by passage id ({"entity_ids", ...}); needed on the
            testbed to tell whether a distractor entity's passage was retrieved when the question
            metadata does not list distractor passage ids itself.

    Returns:
        dict with gold_in_passages, gold_passage_ranks, prediction_in_passages,
        prediction_passage_ranks, abstained, prediction_empty, prediction_tokens, is_title_copy,
        verbose, followed_prefix, truncated, supporting_recall, distractor_retrieved,
        key_point_coverage, known_causes.
    """
    meta = _meta(record)
    passages = [p for p in (record.get("passages") or []) if isinstance(p, Mapping)]
    golds = [str(g) for g in (record.get("golden_answers") or [])]
    prediction = str(record.get("prediction") or "")
    norm_pred = normalize_words(prediction)
    abstained = is_abstention(prediction)
    answerable = meta.get("answerable")
    # The testbed's unanswerable questions have the gold "insufficient information": not evidence.
    content_golds = [g for g in golds if not is_abstention(g)]

    gold_ranks = _ranks(passages, content_golds) if content_golds else []
    pred_ranks = _support_ranks(passages, prediction) if norm_pred and not abstained else []
    titles = {normalize_words(passage_title(p.get("contents", ""))) for p in passages}
    pred_tokens = len(prediction.split())
    longest_gold = max((len(g.split()) for g in golds), default=1)
    verbose = pred_tokens > max(VERBOSE_MIN_TOKENS, VERBOSE_GOLD_FACTOR * longest_gold)

    supporting = [str(s) for s in _strings(meta.get("supporting_ids"))]
    retrieved_ids = [str(p.get("id")) for p in passages]
    supporting_recall = (
        len(set(supporting) & set(retrieved_ids)) / len(set(supporting)) if supporting else None
    )

    distractor_retrieved, distractor_hit = _distractor(meta, passages, prediction, passage_meta)
    outdated_values = _strings(_first(meta, "outdated_answers", "superseded_answers", "outdated_values",
                                      "superseded_values", "stale_answers"))
    outdated_hit = bool(norm_pred) and bool(outdated_values) and contains_answer(prediction, outdated_values) \
        and not contains_answer(prediction, content_golds or ["\0"])

    key_points = _strings(meta.get("key_points"))
    coverage = (
        sum(contains_answer(prediction, [kp]) for kp in key_points) / len(key_points) if key_points else None
    )

    ev: dict[str, Any] = {
        "gold_in_passages": bool(gold_ranks),
        "gold_passage_ranks": gold_ranks,
        "prediction_in_passages": bool(pred_ranks),
        "prediction_passage_ranks": pred_ranks,
        "abstained": abstained,
        "prediction_empty": not norm_pred,
        "prediction_tokens": pred_tokens,
        "is_title_copy": bool(norm_pred) and norm_pred in titles,
        "verbose": verbose,
        "followed_prefix": bool(record.get("followed_prefix", True)),
        "truncated": bool(record.get("truncated", False)),
        "supporting_recall": supporting_recall,
        "distractor_retrieved": distractor_retrieved,
        "key_point_coverage": coverage,
    }
    ev["known_causes"] = _known_causes(record, meta, ev, answerable, supporting, distractor_hit, outdated_hit)
    return ev


def _distractor(
    meta: Mapping[str, Any],
    passages: Sequence[Mapping[str, Any]],
    prediction: str,
    passage_meta: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[bool | None, bool]:
    """(a distractor entity's passage was retrieved, the prediction matches a distractor value)."""
    ids = _strings(_first(meta, "distractor_ids", "distractor_passage_ids"))
    entities = set(_strings(_first(meta, "distractor_entity_ids", "distractor_entities")))
    values = _strings(_first(meta, "distractor_answers", "distractor_values"))
    if not (ids or entities or values):
        # Testbed questions without distractors: nothing to retrieve; other datasets: unknown.
        return (False if "knobs" in meta else None), False
    hit_ranks = []
    for i, p in enumerate(passages):
        if str(p.get("id")) in ids or (entities and _passage_entities(p, passage_meta) & entities):
            hit_ranks.append(i)
    retrieved = bool(hit_ranks)
    if values:
        matches = bool(normalize_words(prediction)) and contains_answer(prediction, values)
    else:
        # Without the distractor's value, a prediction found only in a distractor passage counts.
        matches = retrieved and bool(normalize_words(prediction)) and any(
            contains_answer(str(passages[i].get("contents", "")), [prediction]) for i in hit_ranks
        )
    return retrieved, bool(matches)


def _known_causes(
    record: Mapping[str, Any],
    meta: Mapping[str, Any],
    ev: Mapping[str, Any],
    answerable: Any,
    supporting: Sequence[str],
    distractor_hit: bool,
    outdated_hit: bool,
) -> list[str]:
    """Causes known from construction; empty for datasets without testbed metadata.

    Only records carrying the testbed's construction metadata (``knobs`` or ``supporting_ids``)
    get known causes: elsewhere (trivia) ``answerable`` only says whether a gold string occurs
    in the corpus, not what the right response is.
    """
    if "knobs" not in meta and "supporting_ids" not in meta:
        return []
    causes: list[str] = []
    golds = [str(g) for g in record.get("golden_answers") or []]
    if answerable is False or (golds and all(is_abstention(g) for g in golds)):
        if not ev["abstained"]:
            causes.append("unanswerable_answered")
    else:
        if ev["abstained"]:
            causes.append("abstained_when_answerable")
        recall = ev["supporting_recall"]
        if recall is not None and recall == 0:
            causes.append("supporting_not_retrieved")
        elif recall is not None and recall < 1:
            causes.append("split_fact" if _knob_on(meta, "split_fact") else "partial_support")
        if distractor_hit:
            causes.append("distractor_entity")
        if outdated_hit:
            causes.append("outdated_statement")
    if not ev["followed_prefix"]:
        causes.append("answer_not_extracted")
    # Cut at the token limit is a fault of form only when the answer is not a partial answer: one
    # that already states some of the expected points was cut short, and is incomplete instead.
    partial = ev.get("key_point_coverage") is not None and 0 < ev["key_point_coverage"] < 1
    if ev["verbose"] or (ev["truncated"] and not partial):
        causes.append("verbose_or_truncated")
    return causes


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december")


def _numbers(text: str) -> set[str]:
    """The numbers a text states, thousands separators dropped (``1,200`` and ``1200`` agree)."""
    return {m.group(0).replace(",", "") for m in _NUMBER.finditer(text)}


def _looks_like_date(text: str) -> bool:
    words = set(re.findall(r"[a-z]+", text.lower()))
    return any(m in words for m in _MONTHS) or any(
        1000 <= int(n.split(".")[0]) <= 2100 for n in _numbers(text) if n.split(".")[0].isdigit())


def _picked_other_option(question: str, prediction: str, golds: Sequence[str]) -> bool:
    """The question names the options and the answer is one of them, but not the reference one."""
    q = f" {normalize_words(question)} "
    pred = normalize_words(prediction)
    if not pred or f" {pred} " not in q:
        return False
    return any(normalize_words(g) and f" {normalize_words(g)} " in q and normalize_words(g) != pred for g in golds)


def error_causes(record: Mapping[str, Any], evidence: Mapping[str, Any] | None = None) -> list[str]:
    """Causes of a wrong answer: the known ones (testbed) plus those the evidence implies.

    Used by the grounded teacher on every dataset. Evidence-inferred causes are listed in
    :data:`EVIDENCE_CAUSES`; at least one cause is always returned (``wrong_answer`` last resort).
    """
    ev = evidence if evidence is not None else compute_evidence(record)
    causes = list(ev.get("known_causes") or [])
    prediction = str(record.get("prediction") or "")
    golds = [str(g) for g in record.get("golden_answers") or []]
    # "Unanswerable" in the testbed's sense: the expected response is an abstention.
    unanswerable = bool(golds) and all(is_abstention(g) for g in golds)
    has_support_info = ev.get("supporting_recall") is not None

    if ev["prediction_empty"]:
        causes.append("empty_answer")
    if not unanswerable and not has_support_info and not ev["gold_in_passages"]:
        causes.append("gold_not_retrieved")
    if ev["abstained"] and ev["gold_in_passages"] and "abstained_when_answerable" not in causes:
        causes.append("abstained_when_answerable")  # the answer was in the passages (any dataset)
    if ev["is_title_copy"]:
        causes.append("title_copy")
    if not ev["abstained"] and not ev["prediction_empty"]:
        if ev["gold_in_passages"] and ev["prediction_in_passages"] and "distractor_entity" not in causes:
            causes.append("wrong_span_from_context")
        if not ev["prediction_in_passages"] and "outdated_statement" not in causes:
            causes.append("unsupported_answer")
        # What went wrong is read from the answer against the reference and the question, not
        # from the question's type: a wrong number, a wrong date, the other option of a choice.
        content_golds = [g for g in golds if not is_abstention(g)]
        pred_nums = _numbers(prediction)
        gold_nums = set().union(*(_numbers(g) for g in content_golds)) if content_golds else set()
        if pred_nums and gold_nums and not pred_nums & gold_nums:
            dated = any(_looks_like_date(g) for g in content_golds) and _looks_like_date(prediction)
            causes.append("temporal_error" if dated else "numeric_error")
        elif _picked_other_option(str(record.get("question") or ""), prediction, content_golds):
            causes.append("comparison_error")
        # Incomplete: the answer states some of the expected points, not all. One that states
        # none of them is wrong, not incomplete (its other causes say how).
        if ev.get("key_point_coverage") is not None and 0 < ev["key_point_coverage"] < 1:
            causes.append("incomplete_summary")
        if ev.get("distractor_retrieved") and "distractor_entity" not in causes:
            causes.append("entity_mismatch")
        if not ev["prediction_in_passages"] and ev["verbose"] and not ev["gold_in_passages"]:
            causes.append("off_topic_answer")
    if not causes:
        causes.append("wrong_answer")
    return list(dict.fromkeys(causes))
