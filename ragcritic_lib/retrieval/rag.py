"""Standard RAG: prompt construction, answer extraction and the batch runner.

The generator is asked to reason briefly and finish with the fixed phrase
``So the final answer is: <answer>`` (the RAG-Critic answer convention). Small models follow
that convention only part of the time, so :func:`extract_answer` is tolerant, and the
``prefill`` variant writes the phrase into the start of the assistant turn so the model only
has to continue it. Which variant a run used and how often the model followed the phrase are
recorded per answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.evaluation.scoring import score_prediction

ANSWER_PREFIX = "So the final answer is:"
ABSTAIN_ANSWER = "insufficient information"
PROMPT_VARIANTS = ("default", "prefill", "terse", "closed_book")

_SYSTEM = (
    "You answer questions using the numbered passages you are given. Keep the answer short: a "
    "name, a number, a date or a short phrase. If the passages do not contain the answer, say "
    f"'{ABSTAIN_ANSWER}'. End with: {ANSWER_PREFIX} <answer>"
)
_SYSTEM_CLOSED = (
    "Answer the question from your own knowledge with a short phrase (a name, a number, a date). "
    f"End with: {ANSWER_PREFIX} <answer>"
)

# One worked example in our own words, short enough to keep prompts near 500 tokens.
_EXAMPLE_PASSAGES = [
    "Lake Baikal\nLake Baikal is a rift lake in southern Siberia, Russia. It is the deepest lake in "
    "the world, reaching 1,642 metres.",
    "Caspian Sea\nThe Caspian Sea is the largest inland body of water on Earth by area.",
]
_EXAMPLE_QUESTION = "Which lake is the deepest in the world?"
_EXAMPLE_ANSWER = f"Passage [1] says Lake Baikal is the deepest lake. {ANSWER_PREFIX} Lake Baikal"
# A second example in which the passages lack the asked fact: without it the small model never
# abstains (measured: abstain rate 0 on the testbed's unanswerable questions).
_ABSTAIN_PASSAGES = [
    "Caspian Sea\nThe Caspian Sea is the largest inland body of water on Earth by area.",
]
_ABSTAIN_QUESTION = "How salty is Lake Baikal?"
_ABSTAIN_ANSWER = f"No passage gives the salinity of Lake Baikal. {ANSWER_PREFIX} {ABSTAIN_ANSWER}"


def format_passages(passages: Sequence[str], *, max_words: int = 80) -> str:
    """Number passages as ``[i] Title: text`` with each cut to ``max_words`` words."""
    lines = []
    for i, p in enumerate(passages, start=1):
        title, _, text = str(p).partition("\n")
        words = (text or title).split()
        body = " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")
        lines.append(f"[{i}] {title.strip()}: {body}" if text else f"[{i}] {body}")
    return "\n".join(lines)


def build_rag_messages(
    question: str,
    passages: Sequence[str],
    *,
    variant: str = "default",
    max_passage_words: int = 80,
    additional_instruction: str | None = None,
) -> list[dict[str, str]]:
    """Chat messages for one RAG question.

    Variants: ``default`` (two worked examples, an answer and an abstention; the model writes
    the answer phrase), ``prefill`` (same, and the assistant turn starts with the answer
    phrase), ``terse`` (no example), ``closed_book`` (no passages).
    """
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"unknown RAG prompt variant {variant!r}; choose from {PROMPT_VARIANTS}")
    extra = f"\nInstruction: {additional_instruction.strip()}" if additional_instruction else ""
    if variant == "closed_book":
        return [
            {"role": "system", "content": _SYSTEM_CLOSED},
            {"role": "user", "content": f"Question: {question.strip()}{extra}"},
        ]
    messages = [{"role": "system", "content": _SYSTEM}]
    if variant in ("default", "prefill"):
        messages += [
            {"role": "user", "content": f"Passages:\n{format_passages(_EXAMPLE_PASSAGES)}\n\n"
                                        f"Question: {_EXAMPLE_QUESTION}"},
            {"role": "assistant", "content": _EXAMPLE_ANSWER},
            {"role": "user", "content": f"Passages:\n{format_passages(_ABSTAIN_PASSAGES)}\n\n"
                                        f"Question: {_ABSTAIN_QUESTION}"},
            {"role": "assistant", "content": _ABSTAIN_ANSWER},
        ]
    messages.append({
        "role": "user",
        "content": f"Passages:\n{format_passages(passages, max_words=max_passage_words)}\n\n"
                   f"Question: {question.strip()}{extra}",
    })
    if variant == "prefill":
        messages.append({"role": "assistant", "content": ANSWER_PREFIX})
    return messages


_PREFIX_RE = re.compile(
    r"(?:so\s+)?(?:the\s+)?final\s+answer\s*(?:is)?\s*[:\-]?\s*", re.IGNORECASE
)
_LEAD_RE = re.compile(
    r"^(?:(?:so\s+)?the\s+answer(?:\s+to\s+(?:this|the)\s+question)?\s+is|answer)\s*:?\s*", re.IGNORECASE
)
# Looser spellings ("So the answer is: X") are used for extraction but do not count as following.
_LOOSE_RE = re.compile(r"\banswer\s+is\s*:\s*", re.IGNORECASE)
_TRAIL_CHARS = frozenset(".,;:!*\"'`")


# Words after which a period does not end a sentence ("Dr. Nils Larkin", "St. Louis").
_ABBREVIATIONS = frozenset(
    "dr mr mrs ms prof st mt ft jr sr inc ltd co corp bros no vs etc approx est gen gov lt col sgt "
    "capt rev jan feb mar apr jun jul aug sep sept oct nov dec u.s e.g i.e".split()
)
_SENTENCE_END_RE = re.compile(r"\.\s")


def first_sentence(text: str) -> str:
    """``text`` up to the first period that ends a sentence.

    A period followed by whitespace ends the sentence unless it closes a known abbreviation
    ("Dr.", "St.", "Inc.") or a single capital initial ("J. Smith"); decimals ("3.5") never
    match because no space follows their point.
    """
    for m in _SENTENCE_END_RE.finditer(text + " "):
        word = _last_word(text, m.start()).lower().rstrip(".")
        if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
            continue
        return text[: m.start()]
    return text


def _last_word(text: str, end: int) -> str:
    """``text[:end].split()[-1]`` (or "") without splitting the whole prefix, which made a reply of
    many short sentences quadratic."""
    j = end
    while j > 0 and text[j - 1].isspace():
        j -= 1
    k = j
    while k > 0 and not text[k - 1].isspace():
        k -= 1
    return text[k:j]


def _strip_trailing(answer: str) -> str:
    """Drop trailing whitespace and punctuation (a right-to-left scan: a regex anchored at the end
    retried every start of a long run)."""
    i = len(answer)
    while i > 0 and (answer[i - 1].isspace() or answer[i - 1] in _TRAIL_CHARS):
        i -= 1
    return answer[:i]


def _clean(answer: str, max_words: int) -> str:
    answer = answer.strip().split("\n")[0]
    answer = answer.replace("<|im_end|>", "").strip()
    answer = answer.strip(" *\"'`")
    # Answers are short phrases: keep the first sentence.
    answer = first_sentence(answer)
    answer = _strip_trailing(answer)
    words = answer.split()
    return " ".join(words[:max_words])


def extract_answer(raw: str, *, prefilled: bool = False, max_words: int = 16) -> tuple[str, bool]:
    """Pull the short answer out of a generation.

    Returns ``(answer, followed_prefix)``. With ``prefilled=True`` the text is already the
    continuation of the answer phrase. Otherwise the last occurrence of the answer phrase (in a
    few spellings) wins; without it the first line is used, after dropping a leading "The
    answer is". Never raises.
    """
    text = (raw or "").replace("<|im_end|>", "").strip()
    if prefilled:
        return _clean(text, max_words), True
    matches = list(_PREFIX_RE.finditer(text))
    if matches:
        tail = text[matches[-1].end():]
        ans = _clean(tail, max_words)
        if ans:
            return ans, True
        # The phrase was written but nothing followed it: answer from the text before it.
        text = text[: matches[-1].start()]
    loose = list(_LOOSE_RE.finditer(text))
    if loose:
        ans = _clean(text[loose[-1].end():], max_words)
        if ans:
            return ans, False
    first = next((line for line in text.splitlines() if line.strip()), "")
    return _clean(_LEAD_RE.sub("", first.strip()), max_words), False


ANSWER_STOP = ("\nQuestion:", "\n\n\n", "<|im_end|>")
"""Where an answer generation is cut: a new question (the model continuing the few-shot
pattern), a run of blank lines (how most of the small model's loops start), or the chat turn's
end marker (for a backend that prints it rather than stopping at it)."""
PREFILL_STOP = ("\n",)
"""A prefilled answer is one line, so it is cut at the first newline."""


def answer_gen_params(variant: str = "default", max_new_tokens: int = 48):
    """The answer-generation setting: greedy, ``max_new_tokens``, cut at :data:`ANSWER_STOP`
    (the ``prefill`` variant: :data:`PREFILL_STOP`).

    The one setting for answers: standard RAG (notebook 01), the correction agent's answers (08)
    and the compared methods (09-13). The methods' answer settings also drive free-form
    generations (Self-Refine's feedback, SIM-RAG's reasoning), so they use the default variant's.

    Args:
        variant: a prompt variant of :data:`PROMPT_VARIANTS`.
        max_new_tokens: cap on generated tokens.

    Raises:
        ValueError: an unknown variant.
    """
    from ragcritic_lib.llm import GenParams

    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"unknown RAG prompt variant {variant!r}; choose from {PROMPT_VARIANTS}")
    stop = PREFILL_STOP if variant == "prefill" else ANSWER_STOP
    return GenParams(max_new_tokens=max_new_tokens, stop=stop)


def passages_of(hits: Sequence[Any]) -> list[dict[str, Any]]:
    """Retriever hits as JSON-ready passage dicts."""
    return [{"id": h.doc_id, "contents": h.contents, "score": round(float(h.score), 6)} for h in hits]


def run_standard_rag(
    llm: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    retriever: Any | None,
    k: int = 5,
    variant: str = "default",
    gen_params: Any | None = None,
    max_passage_words: int = 80,
    hits: Sequence[Sequence[Any]] | None = None,
    desc: str | None = None,
) -> list[dict[str, Any]]:
    """Retrieve (unless ``hits`` are given or the variant is closed-book), generate, extract, score.

    Returns one result record per input record: the dataset fields plus passages, messages,
    raw_output, prediction, followed_prefix, truncated, em, f1, acc, and ``generation_error``
    where a served model refused the prompt (its empty prediction is no answer of the system).
    """
    params = gen_params or answer_gen_params(variant)
    questions = [r["question"] for r in records]
    if variant == "closed_book":
        hit_lists: Sequence[Sequence[Any]] = [[] for _ in records]
    elif hits is not None:
        hit_lists = hits
    else:
        if retriever is None:
            raise ValueError("run_standard_rag needs a retriever or precomputed hits")
        hit_lists = retriever.search(questions, k)
    prompts = [
        build_rag_messages(q, [h.contents for h in hl[:k]], variant=variant, max_passage_words=max_passage_words)
        for q, hl in zip(questions, hit_lists)
    ]
    gens = llm.generate(prompts, params, desc=desc)
    out = []
    for rec, hl, msgs, gen in zip(records, hit_lists, prompts, gens):
        pred, followed = extract_answer(gen.text, prefilled=(variant == "prefill"))
        row = dict(rec)
        row.update({
            "passages": passages_of(hl[:k]),
            "messages": msgs,
            "prompt_variant": variant,
            "raw_output": gen.text,
            "prediction": pred,
            "followed_prefix": followed,
            "truncated": gen.finish_reason == "length",
            "prompt_tokens": gen.prompt_tokens,
            "completion_tokens": gen.completion_tokens,
        })
        if gen.error is not None:  # a served model refused this prompt: no answer was given
            row["generation_error"] = gen.error
        row.update(score_prediction(pred, rec["golden_answers"]))
        out.append(row)
    return out
