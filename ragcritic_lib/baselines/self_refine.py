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

Answers are written exactly as standard RAG writes them (:mod:`ragcritic_lib.retrieval.rag`): the initial
answer (when a record does not already carry standard RAG's) and every refined answer come from
:func:`ragcritic_lib.retrieval.rag.build_rag_messages` in standard RAG's prompt variant, the refined one
with the earlier answers and the feedback as its ``additional_instruction``, and are read with
:func:`ragcritic_lib.retrieval.rag.extract_answer`. Without feedback a Self-Refine answer is therefore
standard RAG's answer for the same passages. Only the feedback has a prompt of its own
(:func:`build_feedback_messages`), generated as free text.

Batched: each round is one feedback call and one refine call over the questions still open.
When a refined generation yields no answer, the previous answer is kept (a failed rewrite never
blanks an answer).
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
REFINE_INSTRUCTION = ("Write a better short answer (a name, number, date or short phrase) that avoids the "
                      "mistakes named in the feedback below.")


def _passage_block(passages: Sequence[str], max_words: int) -> str:
    from ragcritic_lib.retrieval.rag import format_passages

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


def refine_instruction(answer: str, feedback: str, *, history: Sequence[Mapping[str, Any]] = ()) -> str:
    """The ``additional_instruction`` of a refine step: what to do, the earlier rounds
    ({"reviewed", "feedback"}), then the current answer and its feedback."""
    return (f"{REFINE_INSTRUCTION}\n{_history_block(history)}"
            f"Previous answer: {answer or '(empty)'}\nFeedback: {' '.join(str(feedback).split())}")


def build_refine_messages(
    question: str, passages: Sequence[str], answer: str, feedback: str, *,
    history: Sequence[Mapping[str, Any]] = (), max_words: int = 60, variant: str = "default",
) -> list[dict[str, str]]:
    """Refine prompt: standard RAG's prompt (:func:`ragcritic_lib.retrieval.rag.build_rag_messages`, in
    ``variant``) over the same passages, with :func:`refine_instruction` as its additional
    instruction.

    ``history`` holds the rounds before this one ({"reviewed", "feedback"}), shown before the
    current answer and its feedback so earlier mistakes are not repeated.
    """
    from ragcritic_lib.retrieval.rag import build_rag_messages

    return build_rag_messages(question, list(passages), variant=variant, max_passage_words=max_words,
                              additional_instruction=refine_instruction(answer, feedback, history=history))


def feedback_is_ok(text: str) -> bool:
    """Whether feedback declares the answer fine: it starts with the OK marker or uses an
    approving phrase, and has no wording that points at a problem ("no issues, but it is
    missing ..." is not approval). Empty feedback is not approval."""
    t = (text or "").strip()
    if not t:
        return False
    approves = t.upper().lstrip("'\"*` ").startswith(OK_MARKER) or bool(_OK_RE.search(t))
    return approves and not _PROBLEM_RE.search(t)


def extract_refined_answer(text: str, previous: str, *, prefilled: bool = False) -> tuple[str, str]:
    """Read a refined answer with standard RAG's extraction; returns (answer, how).

    ``how`` is "prefix" when :func:`ragcritic_lib.retrieval.rag.extract_answer` found the answer after the
    answer phrase (always so for a ``prefilled`` prompt), "line" when it fell back to the text
    without the phrase, and "kept" when it found nothing: the ``previous`` answer is kept.
    """
    from ragcritic_lib.retrieval.rag import extract_answer

    answer, followed = extract_answer(text or "", prefilled=prefilled)
    if not answer:
        return previous, "kept"
    return answer, "prefix" if followed else "line"


def _initial_answers(llm: Any, states: Sequence[dict[str, Any]], gen_params: Any, variant: str,
                     max_words: int) -> None:
    """Answer the states without a starting answer exactly as standard RAG does."""
    from ragcritic_lib.retrieval.rag import build_rag_messages, extract_answer

    todo = [s for s in states if s["answer"] is None]
    if not todo:
        return
    gens = llm.generate([build_rag_messages(s["rec"]["question"], s["passages"], variant=variant,
                                            max_passage_words=max_words) for s in todo],
                        gen_params, desc="self-refine initial answer")
    for s, g in zip(todo, gens):
        s["answer"], s["followed"] = extract_answer(g.text, prefilled=variant == "prefill")
        s["raw"] = g.text


def self_refine(
    llm: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    rounds: int,
    gen_params: Any,
    feedback_params: Any | None = None,
    rag_variant: str = "default",
    max_words: int = 60,
) -> list[dict[str, Any]]:
    """Run Self-Refine from standard RAG results (question, passages, prediction).

    A record without a ``prediction`` is first answered with standard RAG's prompt and
    extraction; one that has it (standard RAG's answer) starts from it.

    Args:
        rounds: N, the most feedback-refine rounds per question.
        gen_params: decoding of the answers (initial and refined): standard RAG's answer
            setting, ``rag.answer_gen_params(rag_variant, max_new_tokens)``.
        feedback_params: decoding of the free-text feedback (default: the ``default`` variant's
            answer setting with ``gen_params.max_new_tokens``).
        rag_variant: standard RAG's prompt variant (``retrieval_rag.prompt_variant``), used for
            every answer prompt and its extraction.
        max_words: words kept per passage (standard RAG's ``max_passage_words``).

    Returns:
        copies of the records with prediction (the final answer), raw_output (last answer
        generation, or the original), followed_prefix (of that generation), self_refine_rounds
        (refinements made), self_refine_stopped (feedback approved an answer) and
        self_refine_history ([{reviewed, feedback, ok, output, answer, how}] per round; the last
        three only for rounds that refined).
    """
    from ragcritic_lib.retrieval.rag import answer_gen_params

    fb_params = feedback_params or answer_gen_params("default", gen_params.max_new_tokens)
    prefilled = rag_variant == "prefill"
    states = []
    for rec in records:
        passages = [str(p.get("contents", "")) for p in rec.get("passages") or []]
        given = rec.get("prediction")
        states.append({"rec": rec, "passages": passages, "answer": None if given is None else str(given),
                       "raw": rec.get("raw_output", ""), "followed": rec.get("followed_prefix"), "history": [],
                       "stopped": False, "n": 0})
    _initial_answers(llm, states, gen_params, rag_variant, max_words)
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
                                                   history=states[i]["history"][:-1], max_words=max_words,
                                                   variant=rag_variant)
                             for i in to_refine], gen_params, desc="self-refine rewrite")
        for i, g in zip(to_refine, gens):
            s = states[i]
            answer, how = extract_refined_answer(g.text, s["answer"], prefilled=prefilled)
            s["history"][-1].update(output=g.text, answer=answer, how=how)
            s["answer"], s["raw"], s["followed"], s["n"] = answer, g.text, how == "prefix", s["n"] + 1
        open_idx = to_refine
    out = []
    for s in states:
        r = dict(s["rec"])
        r.update(prediction=s["answer"], raw_output=s["raw"], self_refine_rounds=s["n"],
                 self_refine_stopped=s["stopped"], self_refine_history=s["history"])
        if s["followed"] is not None:
            r["followed_prefix"] = bool(s["followed"])
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


def feedback_kind(text: str) -> str:
    """Why one feedback text does or does not approve: "approves", "approves but names a
    problem" (an approving phrase next to problem wording), "names a problem", "empty", or
    "neither" (no approving phrase and no problem wording: the model wrote something else)."""
    t = (text or "").strip()
    if not t:
        return "empty"
    approves = t.upper().lstrip("'\"*` ").startswith(OK_MARKER) or bool(_OK_RE.search(t))
    problem = bool(_PROBLEM_RE.search(t))
    if approves:
        return "approves but names a problem" if problem else "approves"
    return "names a problem" if problem else "neither"


def feedback_by_type(records: Sequence[Mapping[str, Any]], *, samples: int = 2, max_chars: int = 240
                     ) -> dict[str, dict[str, Any]]:
    """The first-round feedback per question type, for reading why it (rarely) approves.

    The question type is read from the records' metadata for this report only; the method never
    sees it.

    Returns:
        {question type: {"n", "approved" (first-round approvals), "approval_rate", "kinds":
        {:func:`feedback_kind`: count}, "samples": the first ``samples`` feedback texts, each cut
        to ``max_chars`` characters}}, types sorted.
    """
    from ragcritic_lib.baselines import question_type

    out: dict[str, dict[str, Any]] = {}
    for r in records:
        history = r.get("self_refine_history") or []
        if not history:
            continue
        first = history[0]
        row = out.setdefault(question_type(r), {"n": 0, "approved": 0, "kinds": {}, "samples": []})
        row["n"] += 1
        row["approved"] += int(bool(first.get("ok")))
        kind = feedback_kind(str(first.get("feedback") or ""))
        row["kinds"][kind] = row["kinds"].get(kind, 0) + 1
        if len(row["samples"]) < samples:
            text = " ".join(str(first.get("feedback") or "").split())
            row["samples"].append(text if len(text) <= max_chars else text[: max_chars - 1] + "…")
    for row in out.values():
        row["approval_rate"] = row["approved"] / row["n"]
        row["kinds"] = dict(sorted(row["kinds"].items(), key=lambda kv: -kv[1]))
    return {t: {k: out[t][k] for k in ("n", "approved", "approval_rate", "kinds", "samples")} for t in sorted(out)}

