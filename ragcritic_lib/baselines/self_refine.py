"""Self-Refine: the generator critiques its own answer and rewrites it, for up to N rounds.

Reproduces Madaan et al. (Self-Refine) as RAG-Critic and RePAIR run it as a baseline: start from
the standard RAG answer; each round the same model (1) writes feedback on the answer given the
question and the same passages, and (2) unless the feedback says the answer is fine, writes a
new answer using that feedback. A question stops as soon as its feedback finds no problem.
As in the paper, both steps see the history of the question's earlier rounds: every earlier
answer with the feedback it got, so the model does not repeat an answer already found wrong.
:func:`self_refine_summary` reports how often feedback approves, and flags a run in which it
never does (Self-Refine then just rewrites every answer N times) or approves every first answer
(nothing is refined).

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


def _history_block(history: Sequence[Mapping[str, Any]]) -> str:
    """Earlier rounds as "Attempt i: answer / Feedback: ..." lines ("" when there are none)."""
    if not history:
        return ""
    lines = ["Earlier attempts and the feedback they got:"]
    for i, h in enumerate(history, 1):
        lines.append(f"Attempt {i}: {h.get('reviewed') or '(empty)'}")
        lines.append(f"Feedback {i}: {' '.join(str(h.get('feedback', '')).split())}")
    return "\n".join(lines) + "\n\n"


def build_feedback_messages(
    question: str, passages: Sequence[str], answer: str, *, history: Sequence[Mapping[str, Any]] = (),
    max_words: int = 60,
) -> list[dict[str, str]]:
    """Feedback prompt: judge the answer against the passages, or reply with the OK marker.

    ``history`` holds the earlier rounds ({"reviewed": answer, "feedback": text}), shown before
    the answer under review.
    """
    return [
        {"role": "system", "content": "You review short answers to questions for mistakes."},
        {"role": "user", "content": f"Passages:\n{_passage_block(passages, max_words)}\n\nQuestion: {question}\n\n"
                                    f"{_history_block(history)}Proposed answer: {answer or '(empty)'}\n\n"
                                    "Is the proposed answer correct, short and supported by the passages? If it is, "
                                    f"reply exactly '{OK_MARKER}'. If not, say in one sentence what is wrong."},
    ]


def build_refine_messages(
    question: str, passages: Sequence[str], answer: str, feedback: str, *,
    history: Sequence[Mapping[str, Any]] = (), max_words: int = 60,
) -> list[dict[str, str]]:
    """Refine prompt: rewrite the answer using the feedback, ending with the answer phrase.

    ``history`` holds the rounds before this one ({"reviewed", "feedback"}), shown before the
    current answer and its feedback so earlier mistakes are not repeated.
    """
    from ragcritic_lib.rag import ANSWER_PREFIX

    return [
        {"role": "system", "content": "You improve answers to questions using review feedback and the passages."},
        {"role": "user", "content": f"Passages:\n{_passage_block(passages, max_words)}\n\nQuestion: {question}\n\n"
                                    f"{_history_block(history)}"
                                    f"Previous answer: {answer or '(empty)'}\nFeedback: {feedback.strip()}\n\n"
                                    "Write a better short answer (a name, number, date or short phrase) that "
                                    "avoids the mistakes named in the feedback. "
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
        (feedback approved an answer) and self_refine_history ([{reviewed, feedback, ok, output,
        answer, how}] per round; the last three only for rounds that refined).
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
                                                    history=s["history"], max_words=max_words) for s in cur],
                           fb_params, desc="self-refine feedback")
        to_refine = []
        for i, s, g in zip(open_idx, cur, fbs):
            ok = feedback_is_ok(g.text)
            s["history"].append({"reviewed": s["answer"], "feedback": g.text, "ok": ok})
            if ok:
                s["stopped"] = True
            else:
                to_refine.append(i)
        if not to_refine:
            break
        gens = llm.generate([build_refine_messages(states[i]["rec"]["question"], states[i]["passages"],
                                                   states[i]["answer"], states[i]["history"][-1]["feedback"],
                                                   history=states[i]["history"][:-1], max_words=max_words)
                             for i in to_refine], gen_params, desc="self-refine rewrite")
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


def self_refine_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How often feedback approved, from :func:`self_refine` results.

    Returns:
        {"questions", "approved" (questions whose feedback approved an answer), "approval_rate",
        "feedback_calls", "approval_rate_by_round": {round: {"n", "approval_rate"}} (round 1 =
        feedback on the original answer), "refinements", "degenerate": a line when feedback
        never approves, or when it approves every original answer (nothing refined)}.
    """
    n = len(records)
    by_round: dict[int, list[bool]] = {}
    for r in records:
        for i, h in enumerate(r.get("self_refine_history") or [], 1):
            by_round.setdefault(i, []).append(bool(h.get("ok")))
    approved = sum(1 for r in records if r.get("self_refine_stopped"))
    calls = sum(len(v) for v in by_round.values())
    degenerate = []
    if calls and approved == 0:
        degenerate.append(f"self_refine: feedback never approves ({calls} feedback calls on {n} questions)")
    first = by_round.get(1, [])
    if first and len(first) == n and all(first):
        degenerate.append(f"self_refine: feedback approves every original answer ({n} questions), nothing refined")
    return {
        "questions": n, "approved": approved, "approval_rate": approved / n if n else float("nan"),
        "feedback_calls": calls,
        "approval_rate_by_round": {i: {"n": len(v), "approval_rate": sum(v) / len(v)} for i, v in sorted(by_round.items())},
        "refinements": sum(int(r.get("self_refine_rounds") or 0) for r in records),
        "degenerate": degenerate,
    }
