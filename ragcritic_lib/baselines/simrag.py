"""SIM-RAG: self-practice data, an information-sufficiency critic, multi-round RAG.

Reproduces Yang et al. (SIM-RAG, SIGIR 2025) in our harness:

- **Self-practice** (Algorithm 1). For each training question, with an empty context at turn 0:
  the generator answers, then writes a short rationale for that answer; the tuple (question,
  context, answer, rationale) is labelled Accept when the answer matches a gold answer
  (:func:`make_match_fn`: the paper's A' = A is exact match; notebook 11 defaults to the
  project's correctness judge, ``error_sampling.judge_metric``, as every other label uses) and
  Reject otherwise; then the reasoner writes a
  search query, the retriever returns documents, and "query + documents" is appended to the
  context. T turns give T labelled examples per question. The paper's loop also retrieves after
  the last answer; that retrieval is never used, so we skip it.
- **Answers as standard RAG writes them.** Every turn's answer comes from standard RAG's prompt
  (:func:`ragcritic_lib.retrieval.rag.build_rag_messages`, in standard RAG's prompt variant) over the
  documents in the context so far, read with :func:`ragcritic_lib.retrieval.rag.extract_answer`; with the
  same passages a SIM-RAG answer is standard RAG's answer (at turn 0 the context is empty and
  the prompt lists no passage). The rationale the critic reads has SIM-RAG's own reasoning
  prompt (:func:`build_rationale_messages`) and is free text; the paper's reasoner writes
  rationale and answer in one output, here the rationale explains the answer just given.
- **Critic training.** Examples are split by question id; on the training side the labels are
  balanced by repeating the rarer label's examples (or, optionally, by downsampling the other).
  The paper fine-tunes Flan-T5. Here three critics can take that role (notebook 11's ``critic``):
  :func:`train_llm_critic` fine-tunes the packaged model with LoRA through
  ``ragcritic_lib.critic.training.train_sft``; :class:`ProbeSufficiencyCritic` reads the frozen
  model's hidden states with a logistic probe (one forward pass per example); and
  :class:`ClassifierCritic` is a TF-IDF logistic regression (question / context / answer /
  rationale plus a few grounded features). ``benchmarks/bench_simrag_critic.py`` measures all
  three on the same self-practice data. The critic never sees the turn index (nor the
  number of searches, which equals it): later turns are right more often, and a critic that
  learns "accept at turn t" judges the turn, not the information.
  :func:`practice_summary` counts the self-practice examples per label and turn and flags a
  training set that lacks a label or has too few distinct examples, or too few of the rarer label; :func:`critic_report` gives the
  held-out confusion matrix and the accept rate per turn, and flags a critic that accepts every
  answer at some turn and held-out examples without a correct answer.
- **Inference.** Answer, ask the critic; stop when it accepts, else query, retrieve, append and
  answer again, up to T turns (the last answer is returned when the critic never accepts). The
  oracle critic (accepts exactly the correct answers) gives the ceiling of the paper's Fig. 5.

Batched: every turn is one ``generate`` call per step (answers, rationales, queries) over all
questions still running.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragcritic_lib.baselines import dataset_name, tokens
from ragcritic_lib.baselines.simrag_critics import (  # noqa: F401 - re-exported: the critics belong to the method
    DENSE_FEATURES, ClassifierCritic, LLMSufficiencyCritic, OracleCritic, ProbeSufficiencyCritic, build_critic_messages,
    critic_sft_examples, critic_text, dense_features, make_match_fn, parse_verdict, render_context, train_llm_critic,
)
from ragcritic_lib.evaluation.stats import wilson_interval

LABELS = ("Accept", "Reject")


# --------------------------------------------------------------------------- prompts
def context_passages(context: Sequence[Mapping[str, Any]]) -> list[str]:
    """The passages gathered so far, in the order they were found (each search's ``docs``; a
    context entry without them counts its ``doc`` text as one passage)."""
    out: list[str] = []
    for c in context:
        if c.get("docs") is not None:
            out.extend(str(d) for d in c["docs"])
        elif c.get("doc"):
            out.append(str(c["doc"]))
    return out


def build_answer_messages(question: str, context: Sequence[Mapping[str, Any]], *, variant: str = "default",
                          max_passage_words: int = 80) -> list[dict[str, str]]:
    """A turn's answer prompt: standard RAG's (:func:`ragcritic_lib.retrieval.rag.build_rag_messages`) over
    :func:`context_passages`."""
    from ragcritic_lib.retrieval.rag import build_rag_messages

    return build_rag_messages(question, context_passages(context), variant=variant,
                              max_passage_words=max_passage_words)


def build_rationale_messages(question: str, context: Sequence[Mapping[str, str]], answer: str, *,
                             max_chars: int = 700) -> list[dict[str, str]]:
    """SIM-RAG's reasoning prompt: explain the turn's answer from what has been found."""
    return [
        {"role": "system", "content": "You explain answers to questions using what has been found by searching."},
        {"role": "user", "content": f"{render_context(context, max_chars)}\n\nQuestion: {question}\n"
                                    f"Proposed answer: {answer or '(empty)'}\n\n"
                                    "In one or two sentences, explain what the information above says about "
                                    "this answer."},
    ]


def build_query_messages(question: str, context: Sequence[Mapping[str, str]], *, max_chars: int = 700) -> list[dict[str, str]]:
    """Reasoner prompt for the next search query (what is still missing)."""
    return [
        {"role": "system", "content": "You decide what to search for next."},
        {"role": "user", "content": f"{render_context(context, max_chars)}\n\nQuestion: {question}\n\n"
                                    "The information above is not enough to answer. Write one short search query "
                                    "for what is missing. Output only the query."},
    ]


def parse_rationale(text: str) -> str:
    """The rationale: the output stripped, cut before an answer phrase the model may add."""
    from ragcritic_lib.retrieval.rag import ANSWER_PREFIX

    text = text or ""
    pos = text.find(ANSWER_PREFIX)
    return (text[:pos] if pos >= 0 else text).strip()


def parse_query(text: str, question: str) -> str:
    """First non-empty line of the query output without labels or quotes; the question if none."""
    for line in (text or "").splitlines():
        line = re.sub(r"^\s*(?:search\s*)?query\s*[:\-]\s*", "", line, flags=re.I).strip().strip("\"'`").strip()
        if tokens(line):
            return line
    return question


def stage_match_fn(params: Mapping[str, Any], match: str, threshold: float) -> Callable[..., bool]:
    """The SIM-RAG stage's label: ``match: judge`` is the project's one judge of correct
    (``error_sampling.judge_metric`` at ``judge_threshold``); a metric name (em | f1 | acc |
    truth) uses that metric at ``threshold`` instead."""
    if match == "judge":
        judge = params["error_sampling"]
        return make_match_fn(judge["judge_metric"], judge["judge_threshold"])
    return make_match_fn(match, threshold)


def loop_settings(setup: Any, *, max_turns: int, docs_per_turn: int, initial_docs: int) -> dict[str, Any]:
    """The keyword arguments :func:`self_practice` and :func:`simrag_infer` share in the SIM-RAG
    stage (and its benchmark), from a method stage's setup (``setup_method("simrag")``): answers
    as standard RAG writes them (its answer setting, prompt variant and passage length), the
    default variant's setting for rationales and a one-line setting for search queries."""
    import dataclasses

    return dict(max_turns=max_turns, gen_params=setup.gen,
                query_params=dataclasses.replace(setup.gen, max_new_tokens=24, stop=("\n",)),
                docs_per_turn=docs_per_turn, initial_docs=initial_docs, answer_params=setup.answer_gen,
                rag_variant=setup.variant, max_passage_words=setup.rag["max_passage_words"])


# --------------------------------------------------------------------- turn machinery
@dataclass
class _State:
    record: Mapping[str, Any]
    context: list[dict[str, Any]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _Loop:
    """How a SIM-RAG loop generates and searches (shared by self-practice and inference)."""

    llm: Any
    retriever: Any
    gen_params: Any
    answer_params: Any
    query_params: Any
    rag_variant: str
    max_passage_words: int
    docs_per_turn: int
    max_chars: int


def _loop(llm: Any, retriever: Any, *, gen_params: Any, answer_params: Any | None, query_params: Any,
          rag_variant: str, max_passage_words: int, docs_per_turn: int, max_chars: int) -> _Loop:
    from ragcritic_lib.retrieval.rag import answer_gen_params

    answer = answer_params or answer_gen_params(rag_variant, gen_params.max_new_tokens)
    return _Loop(llm, retriever, gen_params, answer, query_params, rag_variant, max_passage_words, docs_per_turn,
                 max_chars)


def _answer_turn(loop: _Loop, states: Sequence[_State]) -> list[dict[str, Any]]:
    """Each state's answer (standard RAG's prompt and extraction over its context), then its
    rationale; [{"answer", "rationale", "raw", "followed"}] in state order."""
    from ragcritic_lib.retrieval.rag import extract_answer

    if not states:
        return []
    prompts = [build_answer_messages(s.record["question"], s.context, variant=loop.rag_variant,
                                     max_passage_words=loop.max_passage_words) for s in states]
    gens = loop.llm.generate(prompts, loop.answer_params, desc="simrag answer")
    read = [extract_answer(g.text, prefilled=loop.rag_variant == "prefill") for g in gens]
    why = loop.llm.generate([build_rationale_messages(s.record["question"], s.context, a, max_chars=loop.max_chars)
                             for s, (a, _) in zip(states, read)], loop.gen_params, desc="simrag rationale")
    return [{"answer": a.strip(), "rationale": parse_rationale(w.text), "raw": g.text, "followed": followed}
            for (a, followed), w, g in zip(read, why, gens)]


def _context_entry(query: str, hits: Sequence[Any]) -> dict[str, Any]:
    return {"query": query, "doc": "\n".join(h.contents for h in hits), "docs": [h.contents for h in hits],
            "doc_ids": [h.doc_id for h in hits]}


def _search_turn(loop: _Loop, states: Sequence[_State]) -> None:
    if not states:
        return
    prompts = [build_query_messages(s.record["question"], s.context, max_chars=loop.max_chars) for s in states]
    gens = loop.llm.generate(prompts, loop.query_params, desc="simrag query")
    queries = [parse_query(g.text, s.record["question"]) for g, s in zip(gens, states)]
    # Ask for extra hits so documents already in the context can be skipped.
    depth = loop.docs_per_turn + max(len(s.seen) for s in states)
    for s, q, hits in zip(states, queries, loop.retriever.search(queries, depth)):
        new = [h for h in hits if h.doc_id not in s.seen][: loop.docs_per_turn]
        s.seen.update(h.doc_id for h in new)
        s.context.append(_context_entry(q, new))


def _initial_states(records: Sequence[Mapping[str, Any]], retriever: Any, initial_docs: int) -> list[_State]:
    states = [_State(r) for r in records]
    if initial_docs > 0 and states:
        for s, hits in zip(states, retriever.search([r["question"] for r in records], initial_docs)):
            s.seen.update(h.doc_id for h in hits)
            s.context.append(_context_entry(s.record["question"], hits))
    return states


def _example(s: _State, turn: int, answer: str, rationale: str) -> dict[str, Any]:
    r = s.record
    return {"qid": str(r.get("id")), "dataset": dataset_name(r), "question": r["question"],
            "golden_answers": list(r.get("golden_answers") or []),
            "metadata": dict(r.get("metadata") or {}), "turn": turn,
            "context": [dict(c) for c in s.context], "answer": answer, "rationale": rationale}


# ---------------------------------------------------------------------- self-practice
def self_practice(
    llm: Any,
    retriever: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    max_turns: int,
    gen_params: Any,
    query_params: Any,
    answer_params: Any | None = None,
    rag_variant: str = "default",
    max_passage_words: int = 80,
    docs_per_turn: int = 2,
    initial_docs: int = 0,
    match_fn: Callable[..., bool] | None = None,
    max_chars: int = 700,
) -> list[dict[str, Any]]:
    """SIM-RAG Algorithm 1: T labelled (question, context, answer, rationale) tuples per question.

    Args:
        max_turns: T, answers per question.
        gen_params: decoding of the free-text rationale (the ``default`` variant's setting).
        query_params: decoding of the search queries.
        answer_params: decoding of the answers: standard RAG's setting for ``rag_variant``,
            ``rag.answer_gen_params(rag_variant, max_new_tokens)`` (default: that with
            ``gen_params.max_new_tokens``).
        rag_variant: standard RAG's prompt variant (``retrieval_rag.prompt_variant``) for the
            answer prompt and its extraction.
        max_passage_words: words kept per passage in the answer prompt (standard RAG's).
        docs_per_turn: new documents appended per search (already-seen ids skipped).
        initial_docs: documents retrieved with the question itself before turn 0 (0 = the
            paper's empty starting context).
        match_fn: Accept test, default exact match against any gold answer.
        max_chars: characters of a search's documents shown in the rationale and query prompts.

    Returns:
        examples with qid, dataset, question, golden_answers, turn, context, answer, rationale,
        label ("Accept"/"Reject"), in question order then turn order.
    """
    match = match_fn or make_match_fn("em")
    loop = _loop(llm, retriever, gen_params=gen_params, answer_params=answer_params, query_params=query_params,
                 rag_variant=rag_variant, max_passage_words=max_passage_words, docs_per_turn=docs_per_turn,
                 max_chars=max_chars)
    states = _initial_states(records, retriever, initial_docs)
    for turn in range(max_turns):
        for s, a in zip(states, _answer_turn(loop, states)):
            ex = _example(s, turn, a["answer"], a["rationale"])
            ex["label"] = "Accept" if match(a["answer"], ex["golden_answers"], ex["metadata"]) else "Reject"
            s.history.append(ex)
        if turn < max_turns - 1:
            _search_turn(loop, states)
    return [ex for s in states for ex in s.history]


BALANCE_MODES = ("oversample", "downsample")


def balance_labels(examples: Sequence[Mapping[str, Any]], *, seed: int = 0,
                   mode: str = "oversample") -> list[dict[str, Any]]:
    """Balance the Accept and Reject examples the critic trains on.

    ``oversample`` (default): every example is kept, and the minority label's examples are
    repeated, each as often as the others (a seeded order decides which get one repeat more), until
    both labels count as many as the majority; appended after the originals. The critic sees every
    distinct example and neither label dominates its loss. ``downsample``: the majority label is cut
    to the minority's count (original order kept), so the set is 2 x the minority.

    With only one label present nothing can be balanced and the examples are returned as is
    (:func:`practice_summary` flags that case).

    Raises:
        ValueError: for a ``mode`` not in :data:`BALANCE_MODES`.
    """
    if mode not in BALANCE_MODES:
        raise ValueError(f"simrag.balance must be one of {list(BALANCE_MODES)}, got {mode!r}")
    by_label: dict[str, list[int]] = {}
    for i, ex in enumerate(examples):
        by_label.setdefault(str(ex["label"]), []).append(i)
    if len(by_label) < 2:
        return [dict(e) for e in examples]
    rng = random.Random(seed)
    if mode == "downsample":
        n = min(len(v) for v in by_label.values())
        keep: set[int] = set()
        for label in sorted(by_label):
            idx = by_label[label]
            keep.update(idx if len(idx) == n else rng.sample(idx, n))
        return [dict(examples[i]) for i in sorted(keep)]
    n = max(len(v) for v in by_label.values())
    out = [dict(e) for e in examples]
    for label in sorted(by_label):
        order = list(by_label[label])
        rng.shuffle(order)
        out += [dict(examples[order[j % len(order)]]) for j in range(n - len(order))]
    return out


def split_by_question(
    examples: Sequence[Mapping[str, Any]], *, heldout_frac: float = 0.3, seed: int = 0, stratify: bool = True,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split examples so that all turns of a question land on the same side.

    With ``stratify`` the questions with at least one Accept example and the others are split
    separately, each at ``heldout_frac``: Accept examples are rare (about one in ten), and an
    unstratified split can leave the held-out side with so few that the critic's accept rate on
    right answers is not measured.

    Returns:
        (train, heldout); with two or more questions each side gets at least one, and with
        ``stratify`` each group of two or more questions gives at least one to each side.
    """
    qids = sorted({str(e["qid"]) for e in examples})
    accepted = {str(e["qid"]) for e in examples if e.get("label") == "Accept"}
    groups = [[q for q in qids if q in accepted], [q for q in qids if q not in accepted]] if stratify else [qids]
    rng = random.Random(seed)
    held: set[str] = set()
    for group in groups:
        rng.shuffle(group)
        n_held = round(len(group) * heldout_frac)
        if len(group) >= 2:
            n_held = min(max(n_held, 1), len(group) - 1)
        held.update(group[:n_held])
    if len(qids) >= 2 and len(held) in (0, len(qids)):  # one-question groups: keep both sides non-empty
        held = set(qids[:1]) if not held else held - {sorted(held)[0]}
    train = [dict(e) for e in examples if str(e["qid"]) not in held]
    heldout = [dict(e) for e in examples if str(e["qid"]) in held]
    return train, heldout


def _by_turn(rows: Sequence[tuple[int, bool]]) -> dict[int, dict[str, Any]]:
    """{turn: {"n", "accept_rate"}} from (turn, accepted) pairs."""
    turns: dict[int, list[bool]] = {}
    for t, ok in rows:
        turns.setdefault(int(t), []).append(bool(ok))
    return {t: {"n": len(v), "accept_rate": sum(v) / len(v)} for t, v in sorted(turns.items())}


def practice_summary(
    examples: Sequence[Mapping[str, Any]], *, min_examples: int = 200, min_minority: int = 20,
    balance: str = "oversample", train: Sequence[Mapping[str, Any]] | None = None, strict: bool = False,
) -> dict[str, Any]:
    """How much self-practice data there is, per label and turn, and whether it can train a critic.

    The critic trains on the training side of the question split, balanced by
    :func:`balance_labels` in mode ``balance``. What is checked is the number of *distinct*
    examples the critic learns from (all training examples when oversampling, 2 x the minority
    label when downsampling) and the number of distinct minority-label examples: repeating a
    handful of Accept examples many times balances the loss but teaches little.

    Args:
        examples: every self-practice example.
        min_examples: the fewest distinct training examples that count as enough.
        min_minority: the fewest distinct examples of the rarer label that count as enough.
        balance: ``oversample`` or ``downsample`` (see :func:`balance_labels`).
        train: the examples the critic is fitted on, before balancing (the training side of
            :func:`split_by_question`); default: all ``examples``.
        strict: raise instead of flagging when a label is missing.

    Returns:
        {"examples", "questions", "accept", "reject", "train_examples", "train_accept",
        "train_reject", "balance", "distinct_train" (distinct examples the critic learns from),
        "balanced_train" (the size of the balanced training set, repeats included),
        "label_accept_rate_by_turn": {turn: {"n", "accept_rate"}}, "degenerate": a line when
        the examples or the training examples lack a label, else one line each when the distinct
        training examples are fewer than ``min_examples`` or the minority label's fewer than
        ``min_minority``; each line gives the counts}.

    Raises:
        ValueError: with ``strict``, when the (training) examples lack the Accept or the Reject
            label; for an unknown ``balance``.
    """
    if balance not in BALANCE_MODES:
        raise ValueError(f"simrag.balance must be one of {list(BALANCE_MODES)}, got {balance!r}")
    train = examples if train is None else train
    n_accept = sum(1 for e in examples if e["label"] == "Accept")
    n_reject = sum(1 for e in examples if e["label"] == "Reject")
    t_accept = sum(1 for e in train if e["label"] == "Accept")
    t_reject = sum(1 for e in train if e["label"] == "Reject")
    lo, hi = min(t_accept, t_reject), max(t_accept, t_reject)
    if lo == 0:
        distinct = balanced = 0
    elif balance == "oversample":
        distinct, balanced = t_accept + t_reject, 2 * hi
    else:
        distinct = balanced = 2 * lo
    out: dict[str, Any] = {
        "examples": len(examples), "questions": len({(str(e.get("dataset")), str(e["qid"])) for e in examples}),
        "accept": n_accept, "reject": n_reject, "train_examples": len(train), "train_accept": t_accept,
        "train_reject": t_reject, "balance": balance, "distinct_train": distinct, "balanced_train": balanced,
        "label_accept_rate_by_turn": _by_turn([(e.get("turn", 0), e["label"] == "Accept") for e in examples]),
        "degenerate": [],
    }
    missing = [lab for lab, n in (("Accept", n_accept), ("Reject", n_reject)) if n == 0]
    missing_train = [lab for lab, n in (("Accept", t_accept), ("Reject", t_reject)) if n == 0]
    msg = None
    if missing:
        msg = (f"simrag: self-practice produced no {missing[0]} example ({len(examples)} examples: {n_accept} "
               f"Accept, {n_reject} Reject): the critic can only predict one label")
    elif missing_train:
        msg = (f"simrag: the critic's training examples have no {missing_train[0]} example ({len(train)} of "
               f"{len(examples)} self-practice examples: {t_accept} Accept, {t_reject} Reject): the critic can only "
               "predict one label")
    if msg:
        if strict:
            raise ValueError(msg)
        out["degenerate"].append(msg)
        return out
    minority = "Accept" if t_accept <= t_reject else "Reject"
    if distinct < min_examples:
        how = ("" if balance == "oversample" else f", the {hi} {'Reject' if minority == 'Accept' else 'Accept'} "
               f"downsampled to the {lo} {minority}")
        out["degenerate"].append(
            f"simrag: the critic learns from {distinct} distinct examples ({t_accept} Accept, {t_reject} Reject "
            f"among {len(train)} training examples{how}; {len(examples)} self-practice examples in all), fewer than "
            f"{min_examples}")
    if lo < min_minority:
        out["degenerate"].append(
            f"simrag: the critic's training examples hold {lo} {minority} examples (of {len(train)}), fewer than "
            f"{min_minority}" + (f": each is repeated about {hi / lo:.0f} times to balance" if balance == "oversample"
                                 else ""))
    return out


def confusion_matrix(labels: Sequence[str], accepted: Sequence[bool]) -> dict[str, Any]:
    """Critic confusion on held-out examples, as in the paper's Fig. 3.

    Rows are the true label (Accept = the answer was correct), columns the critic's verdict.

    Returns:
        {"correct_accept", "correct_reject", "wrong_accept", "wrong_reject", "n", "accuracy",
        "shares": same four keys as fractions of n, "n_correct", "n_wrong",
        "accept_rate_correct" / "accept_rate_wrong": how often it accepts a right / a wrong answer
        (None without such answers), each with a Wilson 95% interval ``*_ci`` ([low, high])}.
    """
    if len(labels) != len(accepted):
        raise ValueError(f"labels ({len(labels)}) and predictions ({len(accepted)}) differ in length")
    cells = {"correct_accept": 0, "correct_reject": 0, "wrong_accept": 0, "wrong_reject": 0}
    for y, a in zip(labels, accepted):
        cells[f"{'correct' if y == 'Accept' else 'wrong'}_{'accept' if a else 'reject'}"] += 1
    n = len(labels)
    out: dict[str, Any] = dict(cells)
    out["n"] = n
    out["accuracy"] = (cells["correct_accept"] + cells["wrong_reject"]) / n if n else float("nan")
    out["shares"] = {k: (v / n if n else float("nan")) for k, v in cells.items()}
    for side in ("correct", "wrong"):
        k, total = cells[f"{side}_accept"], cells[f"{side}_accept"] + cells[f"{side}_reject"]
        ci = wilson_interval(k, total)
        out[f"n_{side}"] = total
        out[f"accept_rate_{side}"] = k / total if total else None
        out[f"accept_rate_{side}_ci"] = list(ci) if ci else None
    return out


# ------------------------------------------------------------------------------ inference
def simrag_infer(
    llm: Any,
    retriever: Any,
    records: Sequence[Mapping[str, Any]],
    critic: Any,
    *,
    max_turns: int,
    gen_params: Any,
    query_params: Any,
    answer_params: Any | None = None,
    rag_variant: str = "default",
    max_passage_words: int = 80,
    docs_per_turn: int = 2,
    initial_docs: int = 0,
    max_chars: int = 700,
) -> list[dict[str, Any]]:
    """Multi-round inference: answer, stop when ``critic.accept`` says so, else search again.

    The arguments are :func:`self_practice`'s (without ``match_fn``), plus the critic.

    Returns:
        copies of the records with prediction, raw_output and followed_prefix (of the returned
        answer's generation), simrag_turns (answers produced), simrag_accepted (the critic
        accepted the returned answer), simrag_context and simrag_history (per turn: answer,
        rationale, accepted).
    """
    loop = _loop(llm, retriever, gen_params=gen_params, answer_params=answer_params, query_params=query_params,
                 rag_variant=rag_variant, max_passage_words=max_passage_words, docs_per_turn=docs_per_turn,
                 max_chars=max_chars)
    states = _initial_states(records, retriever, initial_docs)
    final: dict[int, dict[str, Any]] = {}
    active = list(range(len(states)))
    for turn in range(max_turns):
        if not active:
            break
        cur = [states[i] for i in active]
        answers = _answer_turn(loop, cur)
        verdicts = critic.accept([_example(s, turn, a["answer"], a["rationale"]) for s, a in zip(cur, answers)])
        still = []
        for i, s, a, ok in zip(active, cur, answers, verdicts):
            s.history.append({"turn": turn, "answer": a["answer"], "rationale": a["rationale"], "accepted": bool(ok)})
            if ok or turn == max_turns - 1:
                final[i] = {"prediction": a["answer"], "raw_output": a["raw"], "followed_prefix": a["followed"],
                            "simrag_turns": turn + 1, "simrag_accepted": bool(ok)}
            else:
                still.append(i)
        if turn < max_turns - 1:
            _search_turn(loop, [states[i] for i in still])
        active = still
    out = []
    for i, s in enumerate(states):
        r = dict(s.record)
        r.update(final.get(i, {"prediction": "", "raw_output": "", "followed_prefix": False, "simrag_turns": 0,
                               "simrag_accepted": False}))
        r["simrag_context"] = [dict(c) for c in s.context]
        r["simrag_history"] = s.history
        out.append(r)
    return out


def critic_report(
    critic: Any,
    heldout: Sequence[Mapping[str, Any]],
    inference: Sequence[Mapping[str, Any]] = (),
    *,
    accepted: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """The sufficiency critic's held-out quality and how it behaves per turn.

    Args:
        critic: anything with ``accept(examples) -> [bool]``.
        heldout: labelled self-practice examples of held-out questions.
        inference: :func:`simrag_infer` results, whose per-turn verdicts are summarised too.
        accepted: the critic's verdicts on ``heldout`` when already computed (an LLM critic is
            then not asked again).

    Returns:
        {"confusion": :func:`confusion_matrix` on ``heldout``, "heldout_accept_rate_by_turn":
        {turn: {"n", "accept_rate", "label_accept_rate"}}, "inference_accept_rate_by_turn":
        {turn: {"n", "accept_rate"}}, "degenerate": one line per turn at which the critic
        accepts every answer (held out or at inference), one when it never accepts, and one when
        no held-out example has a correct answer (its accept rate on right answers is unmeasured)}.
    """
    if accepted is None:
        accepted = critic.accept(list(heldout)) if heldout else []
    elif len(accepted) != len(heldout):
        raise ValueError(f"accepted ({len(accepted)}) and heldout ({len(heldout)}) differ in length")
    confusion = confusion_matrix([str(e["label"]) for e in heldout], accepted)
    held = _by_turn([(e.get("turn", 0), a) for e, a in zip(heldout, accepted)])
    gold = _by_turn([(e.get("turn", 0), e["label"] == "Accept") for e in heldout])
    for t, row in held.items():
        row["label_accept_rate"] = gold[t]["accept_rate"]
    infer = _by_turn([(h["turn"], h["accepted"]) for r in inference for h in r.get("simrag_history") or []])
    degenerate = []
    for where, table in (("held-out", held), ("inference", infer)):
        for t, row in table.items():
            if row["n"] and row["accept_rate"] == 1.0:
                degenerate.append(f"simrag: the critic accepts every {where} answer at turn {t} ({row['n']} answers)")
    verdicts = list(accepted) + [h["accepted"] for r in inference for h in r.get("simrag_history") or []]
    if verdicts and not any(verdicts):
        degenerate.append(f"simrag: the critic never accepts ({len(verdicts)} verdicts)")
    if confusion["correct_accept"] + confusion["correct_reject"] == 0:
        degenerate.append(f"simrag: no held-out example has a correct answer ({len(heldout)} held-out examples), so "
                          "how often the critic accepts right answers is not measured")
    return {"confusion": confusion, "heldout_accept_rate_by_turn": held, "inference_accept_rate_by_turn": infer,
            "degenerate": degenerate}


def simrag_training(training: Mapping[str, Any], *, practice_meter: Any, practice_seconds: float,
                    critic_seconds: float, critic: str, critic_result: Any = None) -> dict[str, Any]:
    """The SIM-RAG stage's ``training`` block (``reports/metrics/11_simrag.json``): self-practice
    and the critics' training.

    Args:
        training: {"llm_critic": {..., "heldout_calls"}, "classifier_critic": {"seconds", ...}},
            each critic trained, copied after the common keys.
        practice_meter: the ``MeteredLLM`` self-practice ran through.
        practice_seconds, critic_seconds: wall time of self-practice and of the critics' training
            (with the held-out check); their sum is rounded to 0.1 s.
        critic: the critic the test run uses, "llm", "probe" or "classifier".
        critic_result: the LLM critic's ``TrainResult`` (read when ``critic`` is "llm").

    Returns:
        {"calls" (self-practice plus the LLM critic's held-out calls), "seconds", "by_dataset":
        {dataset: {"calls"}} of self-practice, "what", "optimizer_seconds" (the LLM critic's
        training, rounded to 0.1 s, or the probe's or the classifier's fit), then ``training``'s keys}.
    """
    return {"calls": practice_meter.cost()["calls"] + training.get("llm_critic", {}).get("heldout_calls", 0),
            "seconds": round(practice_seconds + critic_seconds, 1),
            "by_dataset": {ds: {"calls": c["calls"]} for ds, c in practice_meter.cost_by_dataset().items()},
            "what": "self-practice answers and queries, critic fine-tuning and its held-out check",
            "optimizer_seconds": round(critic_result.seconds, 1) if critic == "llm"
            else training[f"{critic}_critic"]["seconds"],
            **training}


def simrag_info(*, critic: str, practice: Sequence[Any], practice_info: Mapping[str, Any], balanced: Sequence[Any],
                confusions: Mapping[str, Any], report: Mapping[str, Any]) -> dict[str, Any]:
    """The SIM-RAG stage's own metrics block (``reports/metrics/11_simrag.json``, schema
    ``SimRagMetrics``), given to ``save_method_answers`` as ``info``.

    Args:
        critic: the critic the test run uses; its confusion comes first.
        practice: the self-practice examples (counted); practice_info: :func:`practice_summary`.
        balanced: the balanced training examples (counted).
        confusions: {critic name: :func:`confusion_matrix` on the held-out examples}.
        report: :func:`critic_report` of ``critic``, whose two per-turn accept-rate tables are kept.

    ``critic`` in the result describes the test run's critic: its name, what it learned from
    (balanced and distinct training examples, per label) and its held-out accept rates on right
    and on wrong answers.
    """
    conf = confusions[critic]
    held = {k: conf.get(k) for k in ("n", "n_correct", "n_wrong", "accept_rate_correct", "accept_rate_correct_ci",
                                     "accept_rate_wrong", "accept_rate_wrong_ci", "accuracy")}
    about = {"name": critic, "balanced_train": len(balanced), "distinct_train": practice_info.get("distinct_train", 0),
             "train_accept": practice_info.get("train_accept", 0), "train_reject": practice_info.get("train_reject", 0),
             "heldout": held}
    return {"critic": about, "practice_examples": len(practice), "practice": practice_info,
            "balanced_train": len(balanced), "heldout_confusion": conf,
            "heldout_confusion_by_critic": confusions,
            "accept_rate_by_turn": {k: report[k] for k in ("heldout_accept_rate_by_turn",
                                                           "inference_accept_rate_by_turn")}}
