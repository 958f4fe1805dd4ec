"""What the critic reads of the passages: the sentences that decide, within a word budget.

A critic judges an answer by the sentence that states it or contradicts it. Cutting each passage
to its first words (the old prompt: 30 words of each of 3 passages) often leaves that sentence
out. Here the passages are split into sentences, every sentence is scored by its overlap with the
question and with the answer under review, and the best ones are kept, in their passage order,
until ``budget_words`` is reached. Nothing but the critic's own input (question, passages,
answer) is read, so the same rendering serves training and test time.

Measurement (never part of a prompt): :func:`deciding_sentences` are the passage sentences that
hold a reference answer; :func:`evidence_in_prompt` asks whether one of them is in a rendered
prompt. For a right answer that sentence supports it, for a wrong one it is what refutes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.evaluation.scoring import contains_answer, normalize_words

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_STOP = frozenset(
    "a an the of in on at to for by with from and or is are was were be been which who whom whose what "
    "when where why how did does do has have had its it this that these those as than then there their "
    "his her he she they them one".split()
)


def split_passage(text: str) -> tuple[str, list[str]]:
    """(title, sentences) of a passage in the "Title\\nbody" form (title "" when absent)."""
    title, sep, body = str(text).partition("\n")
    if not sep:
        title, body = "", title
    sentences = [s.strip() for s in _SENTENCE_END.split(" ".join(body.split())) if s.strip()]
    return title.strip(), sentences


def _content_words(text: str) -> set[str]:
    return {w for w in normalize_words(text).split() if w not in _STOP}


def select_evidence(
    question: str,
    prediction: str,
    passages: Sequence[str],
    *,
    top_k: int,
    budget_words: int,
) -> list[tuple[int, str, list[str]]]:
    """The sentences of the first ``top_k`` passages that best match question and answer.

    Score of a sentence: the number of the question's content words it holds (title words count
    for every sentence of the passage), plus 2 when it states the whole answer, plus the share of
    the answer's content words it holds; ties go to the earlier passage and sentence. Sentences
    are taken best first while they fit ``budget_words`` (the first one always fits, cut if
    needed).

    Returns:
        [(passage index, title, kept sentences in passage order)] for passages with a kept
        sentence, in passage order.
    """
    q_words = _content_words(question)
    a_words = _content_words(prediction)
    pred_norm = normalize_words(prediction)
    scored: list[tuple[float, int, int, str]] = []
    split = [split_passage(p) for p in list(passages)[:top_k]]
    for pi, (title, sentences) in enumerate(split):
        title_words = _content_words(title)
        for si, sent in enumerate(sentences):
            words = _content_words(sent)
            score = len(q_words & (words | title_words))
            if pred_norm and contains_answer(sent, [prediction]):
                score += 2.0
            if a_words:
                score += len(a_words & words) / len(a_words)
            scored.append((score, pi, si, sent))
    scored.sort(key=lambda t: (-t[0], t[1], t[2]))
    kept: dict[int, dict[int, str]] = {}
    used = 0
    for _, pi, si, sent in scored:
        n = len(sent.split())
        if used and used + n > budget_words:
            continue
        if not used and n > budget_words:
            sent = " ".join(sent.split()[:budget_words]) + " ..."
            n = budget_words
        kept.setdefault(pi, {})[si] = sent
        used += n
        if used >= budget_words:
            break
    return [(pi, split[pi][0], [kept[pi][si] for si in sorted(kept[pi])]) for pi in sorted(kept)]


def render_evidence(question: str, prediction: str, passages: Sequence[str], *, top_k: int,
                    budget_words: int) -> str:
    """The selected sentences as numbered lines ``[i] Title: sentence ... sentence``."""
    chosen = select_evidence(question, prediction, passages, top_k=top_k, budget_words=budget_words)
    lines = [f"[{pi + 1}] {title}: {' '.join(sents)}" if title else f"[{pi + 1}] {' '.join(sents)}"
             for pi, title, sents in chosen]
    return "\n".join(lines) if lines else "(no passages)"


def deciding_sentences(passages: Sequence[str], golds: Sequence[str], *, top_k: int | None = None) -> list[str]:
    """Sentences of the passages (the first ``top_k``) that state a reference answer."""
    golds = [g for g in golds if normalize_words(g)]
    out = []
    for text in list(passages)[:top_k]:
        out += [s for s in split_passage(text)[1] if contains_answer(s, golds)]
    return out


def evidence_in_prompt(prompt_text: str, passages: Sequence[str], golds: Sequence[str], *,
                       top_k: int | None = None) -> bool | None:
    """Whether a deciding sentence is (whole) in ``prompt_text``; None when the passages hold none."""
    deciding = deciding_sentences(passages, golds, top_k=top_k)
    if not deciding:
        return None
    flat = " " + normalize_words(prompt_text) + " "
    return any(f" {normalize_words(s)} " in flat for s in deciding)


def evidence_coverage(records: Sequence[Mapping[str, Any]], render: Any, *, top_k: int | None = None) -> dict[str, Any]:
    """Share of records whose deciding sentence is in the prompt ``render(record)`` writes.

    ``records`` carry ``passages`` (strings) and ``golden_answers``; the reference is read for
    this measurement only. Returns ``{"n", "with_deciding", "in_prompt", "share"}`` where share is
    over the records whose passages hold a deciding sentence at all.
    """
    hits, with_deciding = 0, 0
    for r in records:
        ok = evidence_in_prompt(render(r), r["passages"], r.get("golden_answers") or [], top_k=top_k)
        if ok is None:
            continue
        with_deciding += 1
        hits += bool(ok)
    return {"n": len(records), "with_deciding": with_deciding, "in_prompt": hits,
            "share": round(hits / with_deciding, 4) if with_deciding else None}
