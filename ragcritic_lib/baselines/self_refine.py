"""Self-Refine: the generator critiques its own answer and rewrites it, for up to N rounds.

Reproduces Madaan et al. (Self-Refine) as RAG-Critic and RePAIR run it as a baseline: start from
the standard RAG answer; each round the same model (1) writes feedback on the answer given the
question and the same passages, and (2) unless the feedback says the answer is fine, writes a
new answer using that feedback. A question stops as soon as its feedback finds no problem.

Batched: each round is one feedback call and one refine call over the questions still open.
The refined answer is read with the standard answer phrase first, then a few looser patterns;
when nothing usable comes out, the previous answer is kept (a failed rewrite never blanks an
answer).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

OK_MARKER = "NO ISSUES"

_OK_RE = re.compile(
    r"\bno issues?\b|\bno problems?\b|\bnothing to (?:fix|change|improve)\b|\blooks (?:good|right|fine)\b"
    r"|\b(?:answer|it) is (?:correct|right|fine|accurate)\b|\bis already correct\b",
    re.IGNORECASE,
)
_PROBLEM_RE = re.compile(
    r"\bincorrect\b|\bwrong\b|\bnot (?:correct|right|accurate|supported|mentioned)\b|\bmissing\b|\binstead\b"
    r"|\bshould\b|\bmistake\b|\bdoes not\b|\bdoesn'?t\b",
    re.IGNORECASE,
)
_LOOSE_ANSWER_RE = re.compile(
    r"(?:improved|revised|new|corrected|better)?\s*answer\s*(?:is)?\s*[:\-]\s*(?P<a>[^\n]+)", re.IGNORECASE
)


def _passage_block(passages: Sequence[str], max_words: int) -> str:
    from ragcritic_lib.rag import format_passages

    return format_passages(list(passages), max_words=max_words) if passages else "(no passages)"


def build_feedback_messages(question: str, passages: Sequence[str], answer: str, *, max_words: int = 60) -> list[dict[str, str]]:
    """Feedback prompt: judge the answer against the passages, or reply with the OK marker."""
    return [
        {"role": "system", "content": "You review short answers to questions for mistakes."},
        {"role": "user", "content": f"Passages:\n{_passage_block(passages, max_words)}\n\nQuestion: {question}\n"
                                    f"Proposed answer: {answer or '(empty)'}\n\n"
                                    "Is the proposed answer correct, short and supported by the passages? If it is, "
                                    f"reply exactly '{OK_MARKER}'. If not, say in one sentence what is wrong."},
    ]


def build_refine_messages(
    question: str, passages: Sequence[str], answer: str, feedback: str, *, max_words: int = 60
) -> list[dict[str, str]]:
    """Refine prompt: rewrite the answer using the feedback, ending with the answer phrase."""
    from ragcritic_lib.rag import ANSWER_PREFIX

    return [
        {"role": "system", "content": "You improve answers to questions using review feedback and the passages."},
        {"role": "user", "content": f"Passages:\n{_passage_block(passages, max_words)}\n\nQuestion: {question}\n"
                                    f"Previous answer: {answer or '(empty)'}\nFeedback: {feedback.strip()}\n\n"
                                    "Write a better short answer (a name, number, date or short phrase). "
                                    f"End with: {ANSWER_PREFIX} <answer>"},
    ]


def feedback_is_ok(text: str) -> bool:
    """Whether feedback declares the answer fine: it starts with the OK marker or uses an
    approving phrase, and has no wording that points at a problem ("no issues, but it is
    missing ..." is not approval). Empty feedback is not approval."""
    t = (text or "").strip()
    if not t:
        return False
    approves = t.upper().lstrip("'\"*` ").startswith(OK_MARKER) or bool(_OK_RE.search(t))
    return approves and not _PROBLEM_RE.search(t)


def extract_refined_answer(text: str, previous: str) -> tuple[str, str]:
    """Read the refined answer; returns (answer, how) with how in prefix / loose / line / kept.

    The standard answer phrase wins; else an "Answer: ..." style line; else the first line when
    it is short (at most 12 words); else the previous answer is kept.
    """
    from ragcritic_lib.rag import extract_answer

    answer, followed = extract_answer(text or "")
    if followed and answer:
        return answer, "prefix"
    m = _LOOSE_ANSWER_RE.search(text or "")
    if m:
        loose, _ = extract_answer(m.group("a"), prefilled=True)
        if loose:
            return loose, "loose"
    if answer and len(answer.split()) <= 12:
        return answer, "line"
    return previous, "kept"


def self_refine(
    llm: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    rounds: int,
    gen_params: Any,
    feedback_params: Any | None = None,
    max_words: int = 60,
) -> list[dict[str, Any]]:
    """Run Self-Refine from standard RAG results (question, passages, prediction).

    Args:
        rounds: N, the most feedback-refine rounds per question.
        gen_params: decoding of the refine step (standard RAG's settings).
        feedback_params: decoding of the feedback step (default: gen_params).

    Returns:
        copies of the records with prediction (the final answer), raw_output (last refine
        output, or the original), self_refine_rounds (refinements made), self_refine_stopped
        (feedback approved an answer) and self_refine_history ([{feedback, ok, output, answer,
        how}] per round).
    """
    fb_params = feedback_params or gen_params
    states = []
    for rec in records:
        passages = [str(p.get("contents", "")) for p in rec.get("passages") or []]
        states.append({"rec": rec, "passages": passages, "answer": str(rec.get("prediction") or ""),
                       "raw": rec.get("raw_output", ""), "history": [], "stopped": False, "n": 0})
    open_idx = list(range(len(states)))
    for _ in range(rounds):
        if not open_idx:
            break
        cur = [states[i] for i in open_idx]
        fbs = llm.generate([build_feedback_messages(s["rec"]["question"], s["passages"], s["answer"],
                                                    max_words=max_words) for s in cur], fb_params,
                           desc="self-refine feedback")
        to_refine = []
        for i, s, g in zip(open_idx, cur, fbs):
            ok = feedback_is_ok(g.text)
            s["history"].append({"feedback": g.text, "ok": ok})
            if ok:
                s["stopped"] = True
            else:
                to_refine.append(i)
        if not to_refine:
            break
        gens = llm.generate([build_refine_messages(states[i]["rec"]["question"], states[i]["passages"],
                                                   states[i]["answer"], states[i]["history"][-1]["feedback"],
                                                   max_words=max_words) for i in to_refine], gen_params,
                            desc="self-refine rewrite")
        for i, g in zip(to_refine, gens):
            s = states[i]
            answer, how = extract_refined_answer(g.text, s["answer"])
            s["history"][-1].update(output=g.text, answer=answer, how=how)
            s["answer"], s["raw"], s["n"] = answer, g.text, s["n"] + 1
        open_idx = to_refine
    out = []
    for s in states:
        r = dict(s["rec"])
        r.update(prediction=s["answer"], raw_output=s["raw"], self_refine_rounds=s["n"],
                 self_refine_stopped=s["stopped"], self_refine_history=s["history"])
        out.append(r)
    return out
