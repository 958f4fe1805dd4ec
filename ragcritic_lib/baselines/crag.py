"""CRAG: a lightweight retrieval evaluator that triggers corrective knowledge actions.

Reproduces Corrective RAG (Yan et al.) in our harness:

- **Retrieval evaluator.** CRAG fine-tunes T5-large on (question, passage) relevance. Ours is a
  logistic regression over features every pipeline here already computes: the cross-encoder
  reranker's score, the passage's retrieval rank, and lexical overlap with the question. Labels
  come from our data: a passage is relevant when it is a supporting passage (testbed) or
  contains a gold answer (trivia). Scores are mapped to [-1, 1] (``2 p - 1``), the scale on which
  the paper reports its thresholds (PopQA: upper 0.59, lower -0.99).
- **Action trigger.** Any passage scoring >= upper -> Correct; else any >= lower -> Ambiguous;
  else Incorrect. Both thresholds are tuned on dev: every dev question is answered three times,
  once with the knowledge of each action, and the grid search picks the (upper, lower) pair
  whose actions the project's judge (``error_sampling.judge_metric``) calls right most often,
  mean F1 breaking ties. Each action is thus credited with what it really achieves (Ambiguous: refined internal strips plus the second retrieval), not
  with a fixed share; when the optimum never uses an action, the tuning says so (``degenerate``).
- **Correct -> knowledge refinement** (decompose-then-recompose): split the passages into
  sentence strips, score each strip with the same evaluator, keep the top strips, recompose
  them in document order.
- **Incorrect -> a second retrieval.** The paper searches the web; this harness has no web, so
  the secondary source is a second retrieval over the same corpus with a rewritten query: the
  retriever named in params (default: BM25, the keyword engine that the primary hybrid
  retriever is not), queried with a keyword rewrite of the question (rule-based by default: its
  content words; optionally the LLM writes the keywords).
- **Ambiguous -> both**, internal knowledge first.

Generation then uses the standard RAG prompt of :mod:`ragcritic_lib.retrieval.rag` on the new knowledge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragcritic_lib.retrieval.rag import passages_of
from ragcritic_lib.baselines import (
    content_words,
    contains_answer,
    overlap_fraction,
    split_sentences,
    split_title,
    tokens,
)

ACTIONS = ("Correct", "Ambiguous", "Incorrect")
FEATURES = ("ce_score", "rank_reciprocal", "overlap", "bigram_overlap", "title_overlap")
PAPER_POPQA_THRESHOLDS = (0.59, -0.99)  # (upper, lower) on the +-1 scale

CEScorer = Callable[[Sequence[tuple[str, str]]], list[float]]


# ------------------------------------------------------------------------- labels, features
def relevance_label(record: Mapping[str, Any], passage: Mapping[str, Any]) -> int:
    """1 when ``passage`` is a supporting passage of the question (testbed) or, for questions
    without supporting ids, contains a gold answer (trivia); else 0. Unanswerable -> 0."""
    meta = record.get("metadata") or {}
    supporting = {str(x) for x in (meta.get("supporting_ids") or [])}
    if supporting:
        return int(str(passage.get("id")) in supporting)
    if meta.get("answerable") is False or meta.get("type") == "unanswerable":
        return 0
    return int(contains_answer(str(passage.get("contents", "")), list(record.get("golden_answers") or [])))


def _bigrams(text: str) -> set[tuple[str, str]]:
    toks = tokens(text)
    return set(zip(toks, toks[1:]))


def pair_features(question: str, text: str, *, ce_score: float, rank: int, title: str = "") -> list[float]:
    """Feature vector (order = :data:`FEATURES`) of one (question, passage-or-strip) pair.

    Args:
        ce_score: cross-encoder logit of the pair (0.0 when no reranker is configured).
        rank: 0-based rank of the passage (of the strip's parent passage) in the retrieved list.
        title: the passage title, when known.
    """
    qb = _bigrams(question)
    bigram = len(qb & _bigrams(text)) / len(qb) if qb else 0.0
    return [float(ce_score), 1.0 / (1.0 + rank), overlap_fraction(question, text), bigram,
            overlap_fraction(question, title) if title else 0.0]


def make_ce_scorer(reranker: Any | None) -> CEScorer:
    """Wrap a ``retrieval.CrossEncoderReranker`` as ``fn([(query, text)]) -> [logit]``.

    ``None`` gives a scorer of zeros, which leaves the evaluator with lexical features only.
    """
    if reranker is None:
        return lambda pairs: [0.0] * len(pairs)

    def score(pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        scores = reranker.score_pairs([q for q, _ in pairs], [t for _, t in pairs])
        return [float(x) for x in scores]

    return score


def featurize_records(
    records: Sequence[Mapping[str, Any]], ce_scorer: CEScorer, *, max_passages: int | None = None
) -> tuple[list[list[list[float]]], list[list[int]]]:
    """Features and relevance labels of every (question, retrieved passage) pair.

    Returns:
        (features, labels), each a list per record of a list per passage.
    """
    pairs, where = [], []
    for i, rec in enumerate(records):
        for j, p in enumerate((rec.get("passages") or [])[:max_passages]):
            pairs.append((str(rec["question"]), str(p.get("contents", ""))))
            where.append((i, j))
    ce = ce_scorer(pairs) if pairs else []
    feats: list[list[list[float]]] = [[] for _ in records]
    labels: list[list[int]] = [[] for _ in records]
    for (i, j), score in zip(where, ce):
        rec, p = records[i], records[i]["passages"][j]
        title, _ = split_title(str(p.get("contents", "")))
        feats[i].append(pair_features(rec["question"], str(p.get("contents", "")), ce_score=score, rank=j, title=title))
        labels[i].append(relevance_label(rec, p))
    return feats, labels


# ---------------------------------------------------------------------------- evaluator
@dataclass
class RetrievalEvaluator:
    """Relevance scorer on the +-1 scale; ``model`` is a fitted sklearn pipeline, or None for the
    lexical fallback used when training data had a single class."""

    model: Any = None
    train_size: int = 0
    positive_rate: float = 0.0

    def score(self, features: Sequence[Sequence[float]]) -> list[float]:
        if not features:
            return []
        if self.model is None:
            return [2.0 * f[FEATURES.index("overlap")] - 1.0 for f in features]
        import numpy as np

        p = self.model.predict_proba(np.asarray(features, dtype=float))[:, 1]
        return [float(2.0 * x - 1.0) for x in p]


def train_evaluator(
    features: Sequence[Sequence[float]], labels: Sequence[int], *, c: float = 1.0, seed: int = 0
) -> RetrievalEvaluator:
    """Fit the evaluator (standardised features -> class-balanced logistic regression)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y = np.asarray(list(labels), dtype=int)
    n, pos = int(y.size), float(y.mean()) if y.size else 0.0
    if n == 0 or len(set(y.tolist())) < 2:
        return RetrievalEvaluator(None, n, pos)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=c, class_weight="balanced", max_iter=1000,
                                                               random_state=seed))
    model.fit(np.asarray(features, dtype=float), y)
    return RetrievalEvaluator(model, n, pos)


def attach_passages(records: Sequence[Mapping[str, Any]], retriever: Any, k: int) -> list[dict[str, Any]]:
    """Copy dataset records adding the retriever's top-``k`` ``passages`` (for evaluator data)."""
    hits = retriever.search([str(r["question"]) for r in records], k) if records else []
    out = []
    for rec, hl in zip(records, hits):
        r = dict(rec)
        r["passages"] = passages_of(hl)
        out.append(r)
    return out


def fit_evaluator(records: Sequence[Mapping[str, Any]], ce_scorer: CEScorer, *, seed: int = 0) -> RetrievalEvaluator:
    """Train the evaluator on every (question, retrieved passage) pair of ``records``."""
    feats, labels = featurize_records(records, ce_scorer)
    return train_evaluator([f for fs in feats for f in fs], [y for ys in labels for y in ys], seed=seed)


# ------------------------------------------------------------------------ action trigger
def retrieval_action(scores: Sequence[float], upper: float, lower: float) -> str:
    """CRAG's confidence: Correct if any score >= upper, else Ambiguous if any >= lower, else
    Incorrect (also for an empty list)."""
    if any(s >= upper for s in scores):
        return "Correct"
    if any(s >= lower for s in scores):
        return "Ambiguous"
    return "Incorrect"


def default_threshold_grid() -> list[float]:
    """-1.0, -0.9, ..., 1.0 plus the paper's PopQA values."""
    grid = {round(-1.0 + 0.1 * i, 2) for i in range(21)} | set(PAPER_POPQA_THRESHOLDS)
    return sorted(grid)


def _max_score(scores: Sequence[float]) -> float | None:
    return max(scores) if scores else None


def tune_thresholds(
    scores: Sequence[Sequence[float]],
    action_f1: Sequence[Mapping[str, float]],
    *,
    action_right: Sequence[Mapping[str, float]] | None = None,
    grid: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Grid search of (upper, lower), lower <= upper, maximising the dev score of the chosen actions.

    Args:
        scores: per dev question, the evaluator scores of its retrieved passages.
        action_f1: per dev question, {"Correct", "Ambiguous", "Incorrect"} -> the F1 of the answer
            generated with that action's knowledge (:func:`measure_action_f1`).
        action_right: per dev question, {action: 1.0 when the project's judge calls that answer
            right, else 0.0}. When given, the search maximises the share of right dev answers
            first and mean F1 second; without it, mean F1 alone.
        grid: candidate thresholds; default :func:`default_threshold_grid`. The questions' best
            passage scores are always added, so every split of the questions by score is tried.

    Ties (within 1e-12) go to the pair that uses more distinct actions on dev, then to the first
    pair in grid order (upper ascending, then lower ascending).

    Returns:
        {"upper", "lower", "dev_f1", "dev_judge_acc" (None without ``action_right``), "objective"
        ("judge_acc" or "f1"), "actions": {action: count}, "n", "degenerate": [one line per action
        the optimum never chooses], "action_f1" / "action_judge_acc": {action: mean when always
        taken}, "oracle_f1" / "oracle_judge_acc": mean of the best action per question,
        "all_actions": the best pair that chooses every action at least once ({"upper", "lower",
        "dev_f1", "dev_judge_acc"}, None when no pair does)}.

    Raises:
        ValueError: when the lists differ in length or an action's F1 or judgement is missing.
    """
    rows = {"action_f1": action_f1, **({"action_right": action_right} if action_right is not None else {})}
    for name, table in rows.items():
        if len(scores) != len(table):
            raise ValueError(f"scores ({len(scores)}) and {name} ({len(table)}) differ in length")
        for i, row in enumerate(table):
            missing = [a for a in ACTIONS if a not in row]
            if missing:
                raise ValueError(f"{name}[{i}] lacks the value of {missing}")
    observed = {m for m in (_max_score(s) for s in scores) if m is not None}
    grid = sorted(set(grid if grid is not None else default_threshold_grid()) | observed)
    n = len(scores)

    def mean_of(table: Sequence[Mapping[str, float]] | None, acts: Sequence[str]) -> float | None:
        if table is None:
            return None
        return sum(float(row[a]) for a, row in zip(acts, table)) / max(1, n)

    def key(cand: Mapping[str, Any]) -> tuple[float, float]:
        return (cand["dev_judge_acc"] if action_right is not None else 0.0, cand["dev_f1"])

    def better(a: tuple[float, float], b: tuple[float, float]) -> int:
        for x, y in zip(a, b):
            if x > y + 1e-12:
                return 1
            if x < y - 1e-12:
                return -1
        return 0

    best: dict[str, Any] | None = None
    full: dict[str, Any] | None = None
    for upper in grid:
        for lower in grid:
            if lower > upper:
                break
            acts = [retrieval_action(s, upper, lower) for s in scores]
            cand = {"upper": upper, "lower": lower, "dev_f1": mean_of(action_f1, acts),
                    "dev_judge_acc": mean_of(action_right, acts)}
            used = len(set(acts))
            order = 1 if best is None else better(key(cand), key(best))
            if order > 0 or (order == 0 and used > len([a for a in ACTIONS if best["actions"][a]])):
                best = {**cand, "actions": {a: acts.count(a) for a in ACTIONS}, "n": n}
            if used == len(ACTIONS) and (full is None or better(key(cand), key(full)) > 0):
                full = dict(cand)
    assert best is not None
    objective = "judge_acc" if action_right is not None else "f1"
    best["objective"] = objective
    best["degenerate"] = [f"crag: {a} never chosen on dev at the best thresholds ({objective})"
                          for a in ACTIONS if n and best["actions"][a] == 0]
    for name, table in (("f1", action_f1), ("judge_acc", action_right)):
        best[f"action_{name}"] = ({a: sum(float(row[a]) for row in table) / n if n else float("nan") for a in ACTIONS}
                                  if table is not None else None)
        best[f"oracle_{name}"] = ((sum(max(float(row[a]) for a in ACTIONS) for row in table) / n if n else float("nan"))
                                  if table is not None else None)
    best["all_actions"] = full
    return best


def split_strips(contents: str, *, min_words: int = 8) -> list[str]:
    """Decompose one passage into knowledge strips: its sentences, a short sentence (< min_words
    words) merged into the next one (the last into the previous) so no strip is a fragment."""
    _, body = split_title(contents)
    strips: list[str] = []
    carry = ""
    for sent in split_sentences(body):
        sent = f"{carry} {sent}".strip() if carry else sent
        if len(sent.split()) < min_words:
            carry = sent
            continue
        strips.append(sent)
        carry = ""
    if carry:
        if strips:
            strips[-1] = f"{strips[-1]} {carry}"
        else:
            strips.append(carry)
    return strips


def select_strips(
    scored: Sequence[tuple[int, int, float]], *, top_strips: int, min_score: float
) -> list[tuple[int, int]]:
    """Pick strips to keep from (passage_index, strip_index, score) triples: the ``top_strips``
    best with score >= min_score (ties: earlier passage, earlier strip), at least the single best
    one; returned in document order."""
    if not scored:
        return []
    ranked = sorted(scored, key=lambda t: (-t[2], t[0], t[1]))
    keep = [t for t in ranked if t[2] >= min_score][:top_strips] or ranked[:1]
    return sorted((p, s) for p, s, _ in keep)


def recompose(passages: Sequence[str], strips: Sequence[Sequence[str]], keep: Sequence[tuple[int, int]]) -> list[str]:
    """Rebuild knowledge as one passage per source passage ("Title\\nkept strips"), in order."""
    out = []
    ordered = sorted(keep)
    for p in sorted({p for p, _ in ordered}):
        title, _ = split_title(passages[p])
        body = " ".join(strips[p][s] for q, s in ordered if q == p)
        out.append(f"{title}\n{body}" if title else body)
    return out


def refine_knowledge(
    questions: Sequence[str],
    passage_lists: Sequence[Sequence[str]],
    evaluator: RetrievalEvaluator,
    ce_scorer: CEScorer,
    *,
    top_strips: int = 4,
    min_score: float = -0.5,
    min_words: int = 8,
) -> list[list[str]]:
    """Decompose-then-recompose for a batch of questions (one cross-encoder call for all strips)."""
    strips = [[split_strips(p, min_words=min_words) for p in plist] for plist in passage_lists]
    pairs, where = [], []
    for qi, q in enumerate(questions):
        for pi, plist in enumerate(strips[qi]):
            for si, s in enumerate(plist):
                pairs.append((q, s))
                where.append((qi, pi, si))
    ce = ce_scorer(pairs) if pairs else []
    feats = []
    for (qi, pi, si), c in zip(where, ce):
        title, _ = split_title(passage_lists[qi][pi])
        feats.append(pair_features(questions[qi], strips[qi][pi][si], ce_score=c, rank=pi, title=title))
    scores = evaluator.score(feats)
    per_q: list[list[tuple[int, int, float]]] = [[] for _ in questions]
    for (qi, pi, si), s in zip(where, scores):
        per_q[qi].append((pi, si, s))
    out = []
    for qi in range(len(questions)):
        keep = select_strips(per_q[qi], top_strips=top_strips, min_score=min_score)
        out.append(recompose(passage_lists[qi], strips[qi], keep))
    return out


# --------------------------------------------------------------------- query rewriting
def keyword_query(question: str, *, max_keywords: int = 8) -> str:
    """Rule-based keyword rewrite: the question's first ``max_keywords`` content words."""
    words = content_words(question)[:max_keywords]
    return " ".join(words) if words else question.strip()


def build_rewrite_messages(question: str) -> list[dict[str, str]]:
    """Prompt for an LLM keyword rewrite of the question (CRAG's query rewriter, our words)."""
    return [
        {"role": "system", "content": "You turn questions into short search-engine queries."},
        {"role": "user", "content": "Write at most six keywords that a search engine needs to find the answer "
                                    "to this question. Output only the keywords on one line.\n\n"
                                    "Question: Which river flows through the capital of Hungary?\n"
                                    "Keywords: river Budapest Hungary capital\n\n"
                                    f"Question: {question}\nKeywords:"},
    ]


def parse_keywords(text: str, question: str, *, max_keywords: int = 8) -> str:
    """First non-empty line of the rewriter output, cleaned; the rule-based rewrite if empty."""
    for line in (text or "").splitlines():
        line = line.strip().strip("\"'`").removeprefix("Keywords:").strip()
        words = tokens(line)
        if words:
            return " ".join(words[:max_keywords])
    return keyword_query(question, max_keywords=max_keywords)


# ------------------------------------------------------------------------------ pipeline
def _rewrite_queries(llm: Any, questions: Sequence[str], rewriter: str) -> list[str]:
    if rewriter == "llm":
        from ragcritic_lib.llm import GenParams

        gens = llm.generate([build_rewrite_messages(q) for q in questions],
                            GenParams(max_new_tokens=24, stop=("\n",)), desc="crag rewrite") if questions else []
        return [parse_keywords(g.text, q) for q, g in zip(questions, gens)]
    if rewriter == "keywords":
        return [keyword_query(q) for q in questions]
    raise ValueError(f"crag rewriter must be 'keywords' or 'llm', got {rewriter!r}")


def gather_knowledge(
    llm: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    internal_for: Sequence[int],
    external_for: Sequence[int],
    evaluator: RetrievalEvaluator,
    ce_scorer: CEScorer,
    secondary: Any,
    k_secondary: int = 3,
    top_strips: int = 4,
    min_strip_score: float = -0.5,
    rewriter: str = "keywords",
    refine_external: bool = True,
) -> tuple[list[list[str]], list[list[str]], list[str | None]]:
    """The two knowledge sources of CRAG for chosen records.

    Args:
        internal_for: indices of records whose retrieved passages are refined (Correct, Ambiguous).
        external_for: indices of records that get the second retrieval over the corpus with a
            rewritten query (Incorrect, Ambiguous).

    Returns:
        (internal, external, queries): per record the refined internal strips, the (refined)
        passages of the second retrieval, and the rewritten query (None where not searched).
    """
    passages = [[str(p.get("contents", "")) for p in rec.get("passages") or []] for rec in records]
    questions = [str(rec["question"]) for rec in records]
    internal: list[list[str]] = [[] for _ in records]
    idx = list(internal_for)
    for i, ref in zip(idx, refine_knowledge([questions[i] for i in idx], [passages[i] for i in idx], evaluator,
                                            ce_scorer, top_strips=top_strips, min_score=min_strip_score)):
        internal[i] = ref
    external: list[list[str]] = [[] for _ in records]
    queries: list[str | None] = [None] * len(records)
    idx = list(external_for)
    if idx:
        rewritten = _rewrite_queries(llm, [questions[i] for i in idx], rewriter)
        found = [[h.contents for h in hl] for hl in secondary.search(rewritten, k_secondary)]
        if refine_external:
            found = refine_knowledge([questions[i] for i in idx], found, evaluator, ce_scorer,
                                     top_strips=top_strips, min_score=min_strip_score)
        for i, q, f in zip(idx, rewritten, found):
            queries[i], external[i] = q, f
    return internal, external, queries


def knowledge_of(action: str, internal: Sequence[str], external: Sequence[str]) -> list[str]:
    """What the generator reads after ``action``: refined internal strips (Correct), the second
    retrieval (Incorrect), or both, internal first (Ambiguous)."""
    if action == "Correct":
        return list(internal)
    if action == "Incorrect":
        return list(external)
    if action == "Ambiguous":
        return list(internal) + list(external)
    raise ValueError(f"unknown CRAG action {action!r}; expected one of {ACTIONS}")


def _answer(llm: Any, questions: Sequence[str], knowledge: Sequence[Sequence[str]], gen_params: Any,
            rag_variant: str, max_passage_words: int, desc: str) -> list[tuple[Any, str, bool]]:
    from ragcritic_lib.retrieval.rag import build_rag_messages, extract_answer

    prompts = [build_rag_messages(q, list(kn), variant=rag_variant, max_passage_words=max_passage_words)
               for q, kn in zip(questions, knowledge)]
    gens = llm.generate(prompts, gen_params, desc=desc) if prompts else []
    return [(g, *extract_answer(g.text, prefilled=rag_variant == "prefill")) for g in gens]


def evaluator_scores(
    records: Sequence[Mapping[str, Any]], evaluator: RetrievalEvaluator, ce_scorer: CEScorer
) -> list[list[float]]:
    """The evaluator's score of every retrieved passage, per record."""
    feats, _ = featurize_records(records, ce_scorer)
    return [evaluator.score(f) for f in feats]


def measure_action_f1(
    llm: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    evaluator: RetrievalEvaluator,
    ce_scorer: CEScorer,
    secondary: Any,
    gen_params: Any,
    k_secondary: int = 3,
    top_strips: int = 4,
    min_strip_score: float = -0.5,
    rewriter: str = "keywords",
    refine_external: bool = True,
    rag_variant: str = "default",
    max_passage_words: int = 80,
    judge: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Answer every (dev) question once per action and score each answer against the golds.

    The knowledge of each action is built exactly as :func:`run_crag` builds it, so the F1 an
    action gets here is the F1 it would get at test time on the same question. ``judge``
    (``{"metric", "threshold"}``, :func:`ragcritic_lib.baselines.judge_params`) also has the
    project's judge say which answers are right.

    Returns:
        {"scores": evaluator scores per question, "action_f1": per question {action: token F1},
        "action_right": per question {action: 1.0 / 0.0 by the judge} (None without ``judge``),
        "predictions": per question {action: answer}}.
    """
    from ragcritic_lib.evaluation.scoring import token_f1

    every = list(range(len(records)))
    internal, external, _ = gather_knowledge(
        llm, records, internal_for=every, external_for=every, evaluator=evaluator, ce_scorer=ce_scorer,
        secondary=secondary, k_secondary=k_secondary, top_strips=top_strips, min_strip_score=min_strip_score,
        rewriter=rewriter, refine_external=refine_external)
    questions, knowledge = [], []
    for i, rec in enumerate(records):
        for a in ACTIONS:
            questions.append(str(rec["question"]))
            knowledge.append(knowledge_of(a, internal[i], external[i]))
    answers = _answer(llm, questions, knowledge, gen_params, rag_variant, max_passage_words, "crag dev actions")
    f1s, preds = [], []
    for i, rec in enumerate(records):
        golds = list(rec.get("golden_answers") or [])
        row = answers[i * len(ACTIONS):(i + 1) * len(ACTIONS)]
        preds.append({a: ans for a, (_, ans, _) in zip(ACTIONS, row)})
        f1s.append({a: float(token_f1(ans, golds)) for a, (_, ans, _) in zip(ACTIONS, row)})
    right = None
    if judge is not None:
        from ragcritic_lib.mining.sampling import judge_answer

        right = [{a: float(judge_answer(rec, by_action[a], metric=str(judge["metric"]),
                                        threshold=float(judge["threshold"]))) for a in ACTIONS}
                 for rec, by_action in zip(records, preds)]
    return {"scores": evaluator_scores(records, evaluator, ce_scorer), "action_f1": f1s, "action_right": right,
            "predictions": preds}


def tune_on_dev(
    llm: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    evaluator: RetrievalEvaluator,
    ce_scorer: CEScorer,
    secondary: Any,
    gen_params: Any,
    grid: Sequence[float] | None = None,
    judge: Mapping[str, Any] | None = None,
    **knowledge_kw: Any,
) -> dict[str, Any]:
    """:func:`measure_action_f1` on dev records, then :func:`tune_thresholds` on the project's
    judge (``judge``: ``{"metric", "threshold"}``; F1 breaks ties) or, without it, on F1.

    ``knowledge_kw`` are :func:`run_crag`'s knowledge and prompt options (k_secondary,
    top_strips, min_strip_score, rewriter, refine_external, rag_variant, max_passage_words).

    Returns:
        :func:`tune_thresholds`' dict plus "positive_rate" (dev questions with a relevant
        retrieved passage) and "action_f1_per_question".
    """
    measured = measure_action_f1(llm, records, evaluator=evaluator, ce_scorer=ce_scorer, secondary=secondary,
                                 gen_params=gen_params, judge=judge, **knowledge_kw)
    best = tune_thresholds(measured["scores"], measured["action_f1"], action_right=measured["action_right"], grid=grid)
    _, labels = featurize_records(records, ce_scorer)
    best["positive_rate"] = sum(any(ys) for ys in labels) / max(1, len(labels))
    best["action_f1_per_question"] = measured["action_f1"]
    return best


def run_crag(
    llm: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    evaluator: RetrievalEvaluator,
    ce_scorer: CEScorer,
    secondary: Any,
    upper: float,
    lower: float,
    gen_params: Any,
    k_secondary: int = 3,
    top_strips: int = 4,
    min_strip_score: float = -0.5,
    rewriter: str = "keywords",
    refine_external: bool = True,
    rag_variant: str = "default",
    max_passage_words: int = 80,
) -> list[dict[str, Any]]:
    """Run CRAG on standard-RAG records (question + retrieved ``passages``).

    Args:
        secondary: the retriever of the second retrieval over the corpus (any ``Retriever``,
            ``.search(queries, k)``), queried with a rewrite of the question.
        rewriter: "keywords" (rule-based) or "llm" (the generator writes the keywords).
        refine_external: also decompose-then-recompose the second retrieval's passages.

    Returns:
        copies of the records with prediction, raw_output, followed_prefix, crag_action,
        crag_scores, crag_query (or None) and knowledge (the passages given to the generator).
    """
    scores = evaluator_scores(records, evaluator, ce_scorer)
    actions = [retrieval_action(s, upper, lower) for s in scores]
    internal, external, queries = gather_knowledge(
        llm, records, internal_for=[i for i, a in enumerate(actions) if a in ("Correct", "Ambiguous")],
        external_for=[i for i, a in enumerate(actions) if a in ("Incorrect", "Ambiguous")], evaluator=evaluator,
        ce_scorer=ce_scorer, secondary=secondary, k_secondary=k_secondary, top_strips=top_strips,
        min_strip_score=min_strip_score, rewriter=rewriter, refine_external=refine_external)
    knowledge = [knowledge_of(a, internal[i], external[i]) for i, a in enumerate(actions)]
    answers = _answer(llm, [str(r["question"]) for r in records], knowledge, gen_params, rag_variant,
                      max_passage_words, "crag generate")
    out = []
    for rec, (g, answer, followed), a, s, q, kn in zip(records, answers, actions, scores, queries, knowledge):
        r = dict(rec)
        r.update(prediction=answer, raw_output=g.text, followed_prefix=followed, prompt_tokens=g.prompt_tokens,
                 completion_tokens=g.completion_tokens, crag_action=a,
                 crag_scores=[round(x, 4) for x in s], crag_query=q, knowledge=kn)
        out.append(r)
    return out



def crag_training(meter: Any, *, tuning_seconds: float) -> dict[str, Any]:
    """The CRAG stage's ``training`` block (``reports/metrics/10_crag.json``): what tuning the
    thresholds on dev cost.

    Args:
        meter: the ``MeteredLLM`` the dev answers ran through (its ``cost`` and ``cost_by_dataset``).
        tuning_seconds: wall time of fitting the evaluators and tuning, rounded to 0.1 s.

    Returns:
        {"calls", "seconds", "by_dataset": {dataset: {"calls"}}, "what"}.
    """
    return {"calls": meter.cost()["calls"], "seconds": round(tuning_seconds, 1),
            "by_dataset": {ds: {"calls": c["calls"]} for ds, c in meter.cost_by_dataset().items()},
            "what": "dev answers for threshold tuning (the evaluator's fit makes no LLM call)"}


def actions_by_type(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """How often each action was chosen per question type (``crag_action`` of :func:`run_crag`'s
    records; the type is read from metadata for this report only), every action listed."""
    from ragcritic_lib.baselines import question_type

    out: dict[str, dict[str, int]] = {}
    for r in records:
        row = out.setdefault(question_type(r), {a: 0 for a in ACTIONS})
        row[str(r.get("crag_action"))] = row.get(str(r.get("crag_action")), 0) + 1
    return {t: out[t] for t in sorted(out)}


def action_usage(test_actions: Mapping[str, int], tuned: Mapping[str, Any] | None = None, *,
                 min_share: float = 0.10) -> dict[str, Any]:
    """Each action's share of the test questions, and for every action taken on fewer than
    ``min_share`` of them the reason the dev tuning gives: how many dev questions the tuned
    thresholds sent there, and what always taking it scored on dev against the routing.

    Args:
        test_actions: {action: test questions} (actions absent count 0).
        tuned: :func:`tune_thresholds`' result for the same dataset (its ``actions``, ``n``,
            ``objective`` and per-action scores), or None.

    Returns:
        {"shares": {action: share}, "min_share", "below_min": [actions], "why": {action: one line}}.
    """
    n = sum(int(v) for v in test_actions.values())
    shares = {a: (int(test_actions.get(a, 0)) / n if n else 0.0) for a in ACTIONS}
    below = [a for a in ACTIONS if shares[a] < min_share]
    why: dict[str, str] = {}
    for a in below:
        if not tuned:
            why[a] = "no dev tuning recorded"
            continue
        key = "judge_acc" if tuned.get("objective") == "judge_acc" else "f1"
        alone = (tuned.get(f"action_{key}") or {}).get(a)
        routed = tuned.get("dev_judge_acc" if key == "judge_acc" else "dev_f1")
        line = f"the dev-tuned thresholds sent {int((tuned.get('actions') or {}).get(a, 0))} of {int(tuned.get('n') or 0)} dev questions there"
        if alone is not None and routed is not None:
            line += f"; always taking it scores {float(alone):.3f} dev {key} against the routing's {float(routed):.3f}"
        why[a] = line
    return {"shares": shares, "min_share": min_share, "below_min": below, "why": why}

