"""The five action functions of the correction programs (RAG-Critic Table 2, section 3.3.2).

``ActionSet(llm, retriever, ...).functions()`` returns the callables a planner program may use:

    Retrieval(query, topk=5) -> list[str]
    RewriteQuery(query, instruction) -> list[str]
    DecomposeQuery(query) -> list[str]
    RefineDoc(query, doc, instruction) -> str
    GenerateAnswer(query, docs, additional_instruction=None) -> str

Together they cover the 15 correction sub-actions of Table 12: the ``instruction`` argument
selects expand / refine / summarize / clarify for a query and explain / refine / correct /
delete / exemplify / summarize for a passage; supplementary retrieval is ``docs + Retrieval(...)``
and replacement retrieval is ``Retrieval(...)`` alone. They use the same retriever and generator
as standard RAG, and :meth:`ActionSet.generate_answer` builds its prompt with
:func:`ragcritic_lib.retrieval.rag.build_rag_messages` and reads the answer with
:func:`ragcritic_lib.retrieval.rag.extract_answer`, so corrected answers are comparable with standard RAG.

The embedded generator is a 135M model, so every LLM-based action is grounded: its output is
checked against the query or passage it came from and replaced by a rule-based result when it is
empty or unrelated (for an "expand" rewrite, the keyword query plus pseudo-relevance-feedback
terms from the passages, :func:`prf_terms`; keywords for the other rewrites; a pattern split for a
decomposition; the passage itself for a refinement). Passage deletion, refinement and summarization are extractive and cost
no LLM call. Every call is logged in :attr:`ActionSet.events` with its fallback, if any.

Per-sample context: before running a sample's program, the workflow calls
:meth:`ActionSet.begin_sample` with the passages the answer was generated from, the answer being
corrected and the critique. With it, Retrieval skips passages already in that context (so a
supplementary retrieval adds new passages instead of repeating the top hits); GenerateAnswer is
told which answer was rejected where the error-action table gives the critique's labels an
answer-rewriting strategy, and abstains ("insufficient information") when the critique says the
answer was unsupported and the new answer is still not found in its passages. None of this reads
a gold answer or question metadata: only the sample's own passages, answer and critique.

With a cross-encoder (``reranker``), Retrieval reranks ``rerank_depth`` candidates, RefineDoc's
refine / summarize / delete keep the sentences (passages) the cross-encoder scores best for the
question instead of counting shared words, and GenerateAnswer keeps the ``max_docs`` passages it
scores best when a program hands it more (the embedded reader gets worse past a few passages).

Prefetching: correction programs call the generator one action at a time. To batch those calls
across samples, the workflow first runs all programs in *prefetch* mode, where an LLM call that
is not yet known returns a marker instead of generating, and any action fed a marker returns a
marker; the prompts collected that way do not depend on unknown outputs, so they are generated
in one batched call (:meth:`ActionSet.flush_prefetch`) and memoized. Repeating until nothing is
pending makes the final, real run read every generation from the memo.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ragcritic_lib.mining.evidence import is_abstention
from ragcritic_lib.llm import GenParams
from ragcritic_lib.evaluation.scoring import normalize_words
from ragcritic_lib.retrieval.rag import ABSTAIN_ANSWER, ANSWER_PREFIX, build_rag_messages, extract_answer
from ragcritic_lib.text import NOT_NAME_WORDS, QUERY_STOPWORDS

ACTION_NAMES: tuple[str, ...] = ("Retrieval", "RewriteQuery", "DecomposeQuery", "RefineDoc", "GenerateAnswer")
# The actions before the answer (RePAIR's Table 3 counts these; every program ends in GenerateAnswer).
AUX_ACTIONS: tuple[str, ...] = ACTION_NAMES[:-1]
_CALL_RE = re.compile(r"\b(" + "|".join(ACTION_NAMES) + r")\s*\(")


def count_action_calls(programs: Iterable[str | None], *, include_generate: bool = False) -> dict[str, int]:
    """Calls per action written in correction programs (RAG-Critic's or RePAIR's), as RePAIR's
    Table 3 counts them: GenerateAnswer left out unless asked, and a call inside a list
    comprehension counted once per program text, not per element (the executor's event log,
    :func:`ragcritic_lib.agent.workflow.action_usage`, counts executed calls instead).
    """
    names = AUX_ACTIONS + (("GenerateAnswer",) if include_generate else ())
    c = Counter(m.group(1) for p in programs for m in _CALL_RE.finditer(p or ""))
    return {a: int(c[a]) for a in names}

REWRITE_INSTRUCTIONS: dict[str, str] = {
    "expand": "Add related terms and context so that a search engine finds more relevant pages.",
    "refine": "Make the query tighter: keep the words that matter for search, drop the rest.",
    "summarize": "Shorten the query to its key terms.",
    "clarify": "Make the query explicit and unambiguous about what is asked.",
}
REFINE_INSTRUCTIONS: dict[str, str] = {
    "explain": "Explain in one sentence what the passage says that matters for the question.",
    "refine": "Keep only the sentences of the passage that relate to the question.",
    "correct": "Restate the facts of the passage that answer the question, leaving out anything else.",
    "delete": "Remove the passage if it has nothing to do with the question.",
    "exemplify": "Give one concrete example from the passage that relates to the question.",
    "summarize": "Summarize the passage in at most two sentences relevant to the question.",
}
# One-shot examples (our own) so a small model writes a query rather than an answer.
_EXAMPLE_QUERY = "Where was the painter of The Night Watch born?"
_REWRITE_EXAMPLES: dict[str, str] = {
    "expand": "birthplace of the painter of The Night Watch, Dutch artist, city of birth",
    "refine": "painter of The Night Watch birthplace",
    "summarize": "Night Watch painter birthplace",
    "clarify": "In which city was the artist who painted The Night Watch born?",
}
# Refinements that ask the generator; the others are extractive and free.
LLM_REFINE_MODES = frozenset({"explain", "correct", "exemplify"})
NOTE_SOURCES = ("llm", "extractive")
"""Who writes the notes of RefineDoc's explain / exemplify / correct: the generator (one call per
passage) or the cross-encoder, which picks the passage's sentences that score best for the
question (no generator call; the ``refine_notes`` key of stage correction)."""
NOTE_KEEP_SENTENCES = {"explain": 1, "exemplify": 1, "correct": 2}
"""Sentences an extractive note keeps (explain / exemplify: the one that matters most; correct:
the facts, as RefineDoc(summarize) keeps them)."""
EXPAND_SOURCES = ("llm", "prf")
"""Who expands a query for RewriteQuery(expand): the generator, falling back to pseudo-relevance
feedback when its rewrite is unusable, or pseudo-relevance feedback alone (no generator call; the
``rewrite_expand`` key of stage correction). The other rewrite modes always ask the generator."""

FUNCTION_SIGNATURES = """\
Retrieval(query: str, topk: int = 5) -> list[str]  # search the corpus, best passages first
RewriteQuery(query: str, instruction: str) -> list[str]  # instruction: "expand" | "refine" | "summarize" | "clarify"
DecomposeQuery(query: str) -> list[str]  # simpler sub-questions
RefineDoc(query: str, doc: str, instruction: str) -> str  # instruction: "explain" | "refine" | "correct" | "delete" | "exemplify" | "summarize"; "delete" returns "" for an unrelated passage
GenerateAnswer(query: str, docs: list[str], additional_instruction: str | None = None) -> str  # the short answer"""

COMPACT_SIGNATURES = (
    "Retrieval(query, topk) -> list[str]; RewriteQuery(query, instruction) -> list[str] with instruction "
    "expand|refine|summarize|clarify; DecomposeQuery(query) -> list[str]; RefineDoc(query, doc, instruction) -> str "
    "with instruction explain|refine|correct|delete|exemplify|summarize; "
    "GenerateAnswer(query, docs, additional_instruction) -> str"
)
"""The same five functions in one line, for prompts of small planners."""

UNSUPPORTED_LABELS: frozenset[str] = frozenset({"Factual Inaccuracies"})
"""Taxonomy labels saying the answer asserts what the passages do not support (abstain path)."""
REFINE_KEEP_SENTENCES = {"refine": 3, "summarize": 2}
"""Sentences a cross-encoder refinement keeps per passage (text order kept)."""
DELETE_MIN_LOGIT = 0.0
"""RefineDoc(delete) with a cross-encoder drops a passage whose best sentence scores below this
relevance logit (ms-marco cross-encoders put unrelated text well below 0, related text above)."""

PRF_DOCS = 3
"""Pseudo-relevance feedback: passages the expansion terms come from (the sample's context, else
the query's top hits)."""
PRF_POOL = 20
"""... and how many of the query's hits give the background that discounts common words."""
PRF_TERMS = 4
"""... and how many terms are added to the keyword query."""

PENDING = "\u2063pending\u2063"
"""Marker returned by actions in prefetch mode in place of a not-yet-generated output."""

_WORD_RE = re.compile(r"[a-z0-9]+")
_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_BULLET_RE = re.compile(r"^\s*(?:[-*\u2022]+|\(?\d{1,2}[.):]|[a-z][.)])\s*")
_LABEL_RE = re.compile(
    r"^\s*(?:rewritten|refined|expanded|clarified|summarized|new|search|sub[- ]?)?\s*"
    r"(?:query|queries|question|questions|sub-questions?)\s*(?:\d+)?\s*[:\-]\s*",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------------------------
# Small text helpers (grounding checks and rule-based fallbacks)
# --------------------------------------------------------------------------------------------
def _stem(word: str) -> str:
    # Crude plural folding so "films"/"film" match; enough for overlap tests.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def content_words(text: str) -> list[str]:
    """Lower-cased content words of ``text`` in order (stopwords dropped, plurals folded)."""
    return [_stem(w) for w in _WORD_RE.findall(str(text).lower()) if w not in QUERY_STOPWORDS]


def keyword_query(query: str) -> str:
    """The query reduced to its content words (original spelling, first occurrence order)."""
    seen: set[str] = set()
    kept: list[str] = []
    for token in re.findall(r"[A-Za-z0-9][A-Za-z0-9'\-]*", str(query)):
        key = _stem(token.lower())
        if token.lower() in QUERY_STOPWORDS or key in seen:
            continue
        seen.add(key)
        kept.append(token)
    return " ".join(kept) if kept else str(query).strip()


def split_sentences(text: str) -> list[str]:
    """Sentences of a passage body (a simple punctuation split)."""
    return [s.strip() for s in _SENT_RE.split(str(text).strip()) if s.strip()]


def split_title(doc: str) -> tuple[str, str]:
    """(title, body) of a FlashRAG ``"Title\\ntext"`` passage; title is "" without a newline."""
    title, sep, body = str(doc).partition("\n")
    return (title.strip(), body.strip()) if sep else ("", title.strip())


def _join_title(title: str, body: str) -> str:
    return f"{title}\n{body}" if title else body


def truncate_words(text: str, max_words: int | None) -> str:
    """Cut the body of a passage to ``max_words`` words (title kept); None or 0 keeps all."""
    if not max_words:
        return str(text)
    title, body = split_title(text)
    words = body.split()
    if len(words) <= max_words:
        return str(text)
    return _join_title(title, " ".join(words[:max_words]))


def overlap(a: Iterable[str], b: Iterable[str]) -> int:
    """Number of distinct content words shared by two word lists."""
    return len(set(a) & set(b))


def _clean_line(line: str) -> str:
    line = _BULLET_RE.sub("", line.strip())
    line = _LABEL_RE.sub("", line)
    return line.strip().strip("\"'`*").strip()


def _candidate_lines(text: str) -> list[str]:
    return [c for c in (_clean_line(x) for x in str(text).splitlines()) if c]


# Comparison and conjunction patterns for the rule-based decomposition.
_CHOICE_RE = re.compile(r"^(?P<head>.+?),\s*(?P<a>[^,]+?)\s+or\s+(?P<b>[^,?]+?)\s*\??$", re.IGNORECASE)
_BOTH_RE = re.compile(
    r"^(?:are|were|is|was|do|did|does|have|has)\s+(?P<a>.+?)\s+and\s+(?P<b>.+?)\s+both\s+(?P<rest>.+?)\s*\??$",
    re.IGNORECASE,
)
_THAN_RE = re.compile(
    r"^(?:is|was|are|were|did|does|do)\s+(?P<a>.+?)\s+(?P<rel>(?:more|less)\s+\w+|\w+er)\s+than\s+(?P<b>.+?)\s*\??$",
    re.IGNORECASE,
)
_NESTED_RE = re.compile(r"\b(?:of|for|by)\s+(?P<inner>(?:the|a|an)\s+\w+(?:\s+\w+)?\s+(?:of|for|by)\s+.+?)\s*\??$", re.IGNORECASE)
_RELATIVE_RE = re.compile(r"^(?P<outer>.+?\b(?:the|a|an)\s+\w+(?:\s+\w+)?)\s+(?:where|which|that|who|whose)\s+(?P<inner>.+?)\s*\??$", re.IGNORECASE)
_AND_RE = re.compile(r"^(?P<a>.+?)\s+and\s+(?P<b>(?:what|who|when|where|which|how|why|is|was|did)\b.+?)\s*\??$", re.IGNORECASE)


def rule_decompose(question: str) -> list[str]:
    """Split a question into sub-queries with surface patterns; [] when none applies.

    Handles choices ("Which came first, A or B?"), "Are A and B both X?", comparatives
    ("Is A older than B?"), nested relations ("the spouse of the director of film F"), relative
    clauses ("the city where X was born") and two questions joined by "and".
    """
    q = " ".join(str(question).split())
    m = _CHOICE_RE.match(q)
    if m:
        head = keyword_query(m.group("head"))
        return [f"{m.group('a').strip()} {head}".strip(), f"{m.group('b').strip()} {head}".strip()]
    m = _BOTH_RE.match(q)
    if m:
        rest = m.group("rest").strip()
        return [f"{m.group('a').strip()} {rest}", f"{m.group('b').strip()} {rest}"]
    m = _THAN_RE.match(q)
    if m:
        rel = m.group("rel").strip()
        return [f"{m.group('a').strip()} {rel}", f"{m.group('b').strip()} {rel}"]
    m = _NESTED_RE.search(q)
    if m:
        return [m.group("inner").strip(), q]
    m = _RELATIVE_RE.match(q)
    if m and len(m.group("inner").split()) >= 2:
        return [m.group("inner").strip(), q]
    m = _AND_RE.match(q)
    if m and len(m.group("a").split()) >= 2 and len(m.group("b").split()) >= 2:
        return [m.group("a").strip(), m.group("b").strip()]
    return []


_TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")


def prf_terms(query: str, feedback: Sequence[str], background: Sequence[str] = (), *,
              n_terms: int = PRF_TERMS, exclude: str = "") -> list[str]:
    """Expansion terms by pseudo-relevance feedback: words the feedback passages use often that
    the background passages do not, and that the query lacks.

    A term's score sums, over the feedback passages (best first, rank r from 0), ``1 / (r + 1)``
    times its share of the passage's words, times a local inverse document frequency
    ``log((N + 1) / (df + 0.5))`` over the N background passages (1 without a background): words
    every passage about the topic uses ("company", "founded") score low, the names and terms of
    the top passages high. Stopwords, the query's own words, pure numbers and words shorter than
    three characters are never added, nor the words of ``exclude`` (the answer a critique
    rejected: its passages name it, and searching for it again would steer back to it). Ties keep
    the order of first occurrence; surface forms are kept as first seen (titles included).
    """
    q_keys = {_stem(t.lower()) for t in _TOKEN_RE.findall(f"{query} {exclude}")}
    def keys(text: str) -> list[tuple[str, str]]:
        return [(_stem(t.lower()), t) for t in _TOKEN_RE.findall(str(text))]

    bg = [set(k for k, _ in keys(d)) for d in background]
    n_bg = len(bg)
    score: dict[str, float] = {}
    surface: dict[str, str] = {}
    order: dict[str, int] = {}
    for r, doc in enumerate(feedback):
        toks = keys(doc)
        if not toks:
            continue
        counts = Counter(k for k, _ in toks)
        for k, t in toks:
            if k in q_keys or t.lower() in QUERY_STOPWORDS or len(k) < 3 or k.isdigit():
                continue
            if k not in surface:
                surface[k], order[k] = t, len(order)
        for k, c in counts.items():
            if k not in surface:
                continue
            idf = math.log((n_bg + 1) / (sum(k in b for b in bg) + 0.5)) if n_bg else 1.0
            score[k] = score.get(k, 0.0) + (c / len(toks)) * max(idf, 0.0) / (r + 1)
    ranked = sorted((k for k in score if score[k] > 0), key=lambda k: (-score[k], order[k]))
    return [surface[k] for k in ranked[:max(0, n_terms)]]


def _looks_invented(line: str, query: str) -> bool:
    """A rewrite must not add numbers the query lacks (the small model tends to answer instead
    of rewriting, inventing dates) nor loop (a word repeated three or more times)."""
    q_numbers = set(re.findall(r"\d+", query))
    if any(n not in q_numbers for n in re.findall(r"\d+", line)):
        return True
    counts = Counter(w for w in _WORD_RE.findall(line.lower()) if w not in QUERY_STOPWORDS)
    return bool(counts) and max(counts.values()) >= 3


def _has_marker(value: Any) -> bool:
    if isinstance(value, str):
        return PENDING in value
    if isinstance(value, (list, tuple)):
        return any(_has_marker(v) for v in value)
    return False


def _flatten_docs(docs: Any) -> list[str]:
    """Docs as a flat list of non-empty strings (one level of nesting, as from a comprehension
    over Retrieval calls, is flattened; exact duplicates are dropped, order kept)."""
    if isinstance(docs, str):
        docs = [docs]
    out: list[str] = []
    for item in docs or []:
        items = item if isinstance(item, (list, tuple)) else [item]
        for d in items:
            text = str(d).strip() if d is not None else ""
            if text and text not in out:
                out.append(text)
    return out


def _as_query(query: Any) -> str:
    if isinstance(query, (list, tuple)):
        query = next((q for q in query if str(q).strip()), "")
    return " ".join(str(query if query is not None else "").split())


# --------------------------------------------------------------------------------------------
# The action set
# --------------------------------------------------------------------------------------------
class ActionSet:
    """The five action functions bound to one generator and one retriever.

    Args:
        llm: generator backend (``ragcritic_lib.llm.LLM``), the same as standard RAG's.
        retriever: ``ragcritic_lib.retrieval.Retriever`` (``search(queries, k)``).
        gen_params: decoding parameters of GenerateAnswer (use standard RAG's). The query and
            passage actions derive shorter budgets from it (``aux_max_new_tokens``, greedy).
        topk: default ``topk`` of Retrieval.
        max_doc_words: passage body word budget in prompts (standard RAG's
            ``max_passage_words``).
        reranker: optional ``CrossEncoderReranker``; Retrieval then reranks ``rerank_depth``
            candidates down to ``topk``.
        rag_variant: prompt variant of :func:`ragcritic_lib.retrieval.rag.build_rag_messages`.
        max_topk: upper bound on a program's ``topk``.
        max_docs: at most this many passages go into GenerateAnswer.
        aux_max_new_tokens: generation budget of RewriteQuery, DecomposeQuery and RefineDoc.
        table: optional error-action table (``ragcritic_lib.agent.planner.ErrorActionTable``):
            where a critique's label has an ``answer_strategy``, GenerateAnswer gets that
            strategy and the rejected answer.
        exclude_context: Retrieval skips passages of the sample's context (see begin_sample).
        answer_mode: "free" (GenerateAnswer writes the answer) or "spans" (it writes one, then the
            model chooses, by constrained decoding over its log-probabilities, among that answer,
            the candidate spans of the passages and the question (:func:`answer_candidates`) and
            the abstention; a free answer longer than :data:`SPAN_MODE_MAX_WORDS` is kept).
        max_candidates: at most this many options in span mode.
        notes: who writes RefineDoc's explain / exemplify / correct (:data:`NOTE_SOURCES`):
            "llm" (the generator, one call per passage) or "extractive" (the cross-encoder's best
            sentences of the passage, no generator call; needs ``reranker``).
        expand: who writes RewriteQuery(expand)'s query (:data:`EXPAND_SOURCES`): "llm" (the
            generator; pseudo-relevance feedback when its line is unusable) or "prf" (the keyword
            query plus pseudo-relevance-feedback terms, no generator call).
    """

    def __init__(
        self,
        llm: Any,
        retriever: Any,
        *,
        gen_params: GenParams,
        topk: int = 5,
        max_doc_words: int = 80,
        reranker: Any | None = None,
        rerank_depth: int = 20,
        rag_variant: str = "default",
        max_topk: int = 20,
        max_docs: int = 10,
        aux_max_new_tokens: int = 40,
        table: Any | None = None,
        exclude_context: bool = True,
        answer_mode: str = "free",
        max_candidates: int = 24,
        notes: str = "llm",
        expand: str = "llm",
    ) -> None:
        if expand not in EXPAND_SOURCES:
            raise ValueError(f"unknown expand source {expand!r}; choose from {EXPAND_SOURCES}")
        self.expand = expand
        if notes not in NOTE_SOURCES:
            raise ValueError(f"unknown note source {notes!r}; choose from {NOTE_SOURCES}")
        if notes == "extractive" and reranker is None:
            raise ValueError("notes='extractive' needs a reranker (the cross-encoder picks the sentences)")
        self.notes = notes
        if answer_mode not in ANSWER_MODES:
            raise ValueError(f"unknown answer mode {answer_mode!r}; choose from {ANSWER_MODES}")
        self.answer_mode, self.max_candidates = answer_mode, max_candidates
        if not isinstance(gen_params, GenParams):
            raise TypeError(f"gen_params must be a GenParams, got {type(gen_params).__name__}")
        if topk < 1 or max_topk < topk:
            raise ValueError(f"need 1 <= topk <= max_topk, got topk={topk}, max_topk={max_topk}")
        self.llm = llm
        self.retriever = retriever
        self.reranker = reranker
        self.rerank_depth = rerank_depth
        self.gen_params = gen_params
        self.aux_params = dataclasses.replace(
            gen_params, max_new_tokens=aux_max_new_tokens, temperature=0.0, stop=("\n\n",)
        )
        self.topk = topk
        self.max_topk = max_topk
        self.max_doc_words = max_doc_words
        self.max_docs = max_docs
        self.rag_variant = rag_variant
        self.events: list[dict[str, Any]] = []
        self.counts: Counter[str] = Counter()
        self.table = table
        self.exclude_context = exclude_context
        self._memo: dict[str, Any] = {}
        self._search_memo: dict[tuple[Any, ...], list[str]] = {}
        self._score_memo: dict[tuple[str, str], float] = {}
        self._span_memo: dict[str, str] = {}
        self.begin_sample()
        self._prefetching = False
        self._pending: dict[str, tuple[Any, GenParams]] = {}

    # -- the program-facing functions ----------------------------------------------------------
    def functions(self) -> dict[str, Callable[..., Any]]:
        """Name -> callable for the executor, with the exact signatures of the contract."""
        default_topk = self.topk

        def Retrieval(query: str, topk: int = default_topk) -> list[str]:
            return self.retrieval(query, topk)

        def RewriteQuery(query: str, instruction: str) -> list[str]:
            return self.rewrite_query(query, instruction)

        def DecomposeQuery(query: str) -> list[str]:
            return self.decompose_query(query)

        def RefineDoc(query: str, doc: str, instruction: str) -> str:
            return self.refine_doc(query, doc, instruction)

        def GenerateAnswer(query: str, docs: list[str], additional_instruction: str | None = None) -> str:
            return self.generate_answer(query, docs, additional_instruction)

        return {
            "Retrieval": Retrieval,
            "RewriteQuery": RewriteQuery,
            "DecomposeQuery": DecomposeQuery,
            "RefineDoc": RefineDoc,
            "GenerateAnswer": GenerateAnswer,
        }

    # -- per-sample context ----------------------------------------------------------------------
    def begin_sample(self, docs: Sequence[str] = (), prediction: str = "", critique: Any = None,
                     question: str = "") -> None:
        """Set the context of the next program: its passages, the answer it corrects, the critique.

        Args:
            docs: the passages the answer was generated from (Retrieval skips them).
            prediction: the answer being corrected.
            critique: the critic's feedback (``{"tag1": [...], "tag2": [...]}`` or a CriticParse);
                its labels pick the answer-rewriting strategy and the abstain path.
            question: the sample's question. When given, only a GenerateAnswer for that question
                is the corrected answer (strategy note, abstain path, keeping the earlier answer
                over an abstention); one for another query, such as the first hop of a bridging
                program, is a plain answer from its passages. Without it every GenerateAnswer is
                treated as the corrected answer.
        """
        self._question = normalize_words(str(question or ""))
        self._context_list = tuple(_flatten_docs(list(docs)))
        self._context_docs = frozenset(self._context_list)
        self._rejected = " ".join(str(prediction or "").split())
        labels: list[str] = []
        if critique is not None:
            get = critique.get if isinstance(critique, Mapping) else (lambda k, d=None: getattr(critique, k, d))
            for key in ("tag2", "tag1"):  # most specific first, as the rule-based planner reads them
                value = get(key, None) or []
                labels += [value] if isinstance(value, str) else [str(x) for x in value]
        canonical = self.table.taxonomy.canonical if self.table is not None else (lambda x: x)
        names = [n for n in (canonical(x) for x in labels) if n]
        self._abstain = bool(set(names) & UNSUPPORTED_LABELS)
        self._strategy = None
        if self.table is not None:
            for name in names:
                rule = self.table.rule(name)
                if rule is not None and rule.answer_strategy:
                    self._strategy = self.table.answer_strategies[rule.answer_strategy]
                    break

    # -- bookkeeping -----------------------------------------------------------------------------
    def drain_events(self) -> list[dict[str, Any]]:
        """Return and clear the call log (one dict per action call)."""
        out, self.events = self.events, []
        return out

    def _log(self, action: str, **detail: Any) -> None:
        if self._prefetching:
            return
        self.counts[action] += 1
        if detail.get("fallback"):
            self.counts[f"{action}.fallback"] += 1
        self.events.append({"action": action, **detail})

    def _generate(self, prompt: Any, params: GenParams) -> str:
        """One generation through the memo; in prefetch mode an unknown prompt returns PENDING."""
        key = json.dumps([prompt, params.cache_dict()], sort_keys=True, ensure_ascii=False)
        gen = self._memo.get(key)
        if gen is None:
            if self._prefetching:
                self._pending.setdefault(key, (prompt, params))
                return PENDING
            gen = self.llm.generate([prompt], params)[0]
            self._memo[key] = gen
        if not self._prefetching:
            self.counts["llm_calls"] += 1
            self.counts["prompt_tokens"] += int(getattr(gen, "prompt_tokens", 0))
            self.counts["completion_tokens"] += int(getattr(gen, "completion_tokens", 0))
        return str(gen.text)

    # -- prefetch ----------------------------------------------------------------------------------
    def begin_prefetch(self) -> None:
        """Enter prefetch mode (see the module docstring); nothing is logged or counted."""
        self._prefetching = True

    def end_prefetch(self) -> None:
        self._prefetching = False
        self._pending.clear()

    @property
    def prefetching(self) -> bool:
        return self._prefetching

    def flush_prefetch(self, desc: str | None = None) -> int:
        """Generate every pending prompt, batched per decoding setting; returns how many."""
        groups: dict[GenParams, list[tuple[str, Any]]] = {}
        for key, (prompt, params) in self._pending.items():
            groups.setdefault(params, []).append((key, prompt))
        n = 0
        for params, items in groups.items():
            gens = self.llm.generate([p for _, p in items], params, desc=desc)
            for (key, _), gen in zip(items, gens):
                self._memo[key] = gen
            n += len(items)
        self._pending.clear()
        return n

    # -- Retrieval -------------------------------------------------------------------------------
    def retrieval(self, query: str, topk: int | None = None) -> list[str]:
        """Top-``topk`` passages for ``query`` (reranked when a reranker is set)."""
        query = _as_query(query)
        if _has_marker(query):
            return [PENDING]
        try:
            k = int(topk) if topk is not None else self.topk
        except (TypeError, ValueError):
            k = self.topk
        k = min(max(k, 1), self.max_topk)
        if not query:
            self._log("Retrieval", query=query, topk=k, n=0, fallback="empty_query")
            return []
        seen = self._context_docs if self.exclude_context else frozenset()
        memo_key = (query, k, seen)
        docs = self._search_memo.get(memo_key)
        if docs is None:
            # Deep enough that k passages remain after skipping the ones already in the context.
            depth = k + len(seen)
            if self.reranker is not None:
                depth = max(depth, self.rerank_depth)
                cands = self.retriever.search([query], depth)
                hits = self.reranker.rerank([query], cands, depth)[0]
            else:
                hits = self.retriever.search([query], depth)[0]
            # Full passages, as standard RAG's `docs` hold them, so duplicates are recognized;
            # prompts cut them to max_doc_words.
            docs = [h.contents for h in hits if h.contents not in seen][:k]
            self._search_memo[memo_key] = docs
        self._log("Retrieval", query=query, topk=k, n=len(docs), skipped_context=len(seen))
        return list(docs)

    # -- RewriteQuery ------------------------------------------------------------------------------
    def rewrite_messages(self, query: str, instruction: str) -> list[dict[str, str]]:
        task = REWRITE_INSTRUCTIONS.get(instruction, instruction)
        example = _REWRITE_EXAMPLES.get(instruction, _REWRITE_EXAMPLES["clarify"])
        return [
            {"role": "system", "content": "You rewrite search queries. Reply with the new query on one line. "
                                          "Never answer the question."},
            {"role": "user", "content": f"Task: {task}\nQuery: {_EXAMPLE_QUERY}"},
            {"role": "assistant", "content": example},
            {"role": "user", "content": f"Task: {task}\nQuery: {query}"},
        ]

    def rewrite_query(self, query: str, instruction: str) -> list[str]:
        """Rewritten queries (model output that shares a content word with the query); when none
        is usable and the instruction is "expand", the keyword query plus pseudo-relevance-feedback
        terms (:meth:`prf_expansion`), which is also the whole expansion, without a generator call,
        when ``expand="prf"``; the keyword query is always the last element."""
        query = _as_query(query)
        mode = _normalize_mode(instruction, REWRITE_INSTRUCTIONS, default="clarify")
        if _has_marker(query) or _has_marker(instruction):
            return [PENDING]
        keywords = keyword_query(query)
        if not query:
            self._log("RewriteQuery", instruction=mode, output=[], fallback="empty_query")
            return [keywords] if keywords else []
        if mode == "expand" and self.expand == "prf":
            terms = self.prf_expansion(query, keywords)
            out = ([f"{keywords} {' '.join(terms)}"] if terms else []) + [keywords]
            self._log("RewriteQuery", instruction=mode, output=out, source="prf",
                      fallback=None if terms else "keywords", **({"prf_terms": terms} if terms else {}))
            return out
        text = self._generate(self.rewrite_messages(query, mode), self.aux_params)
        if text == PENDING:
            return [PENDING]
        q_words = set(content_words(query))
        seen = {query.lower(), keywords.lower()}
        rewrites: list[str] = []
        for line in _candidate_lines(text):
            words = line.split()
            if not 2 <= len(words) <= 40 or line.lower() in seen or _looks_invented(line, query):
                continue
            if q_words and not overlap(content_words(line), q_words):
                continue  # unrelated to the question: a hallucinated query
            seen.add(line.lower())
            rewrites.append(line)
            if len(rewrites) == 3:
                break
        fallback, terms = (None, []) if rewrites else ("keywords", [])
        if not rewrites and mode == "expand":
            # The grounded form of "add related terms": pseudo-relevance feedback from the passages.
            terms = self.prf_expansion(query, keywords)
            if terms:
                rewrites, fallback = [f"{keywords} {' '.join(terms)}"], "prf"
        out = rewrites + [keywords]
        self._log("RewriteQuery", instruction=mode, output=out, raw=text, fallback=fallback,
                  **({"prf_terms": terms} if terms else {}))
        return out

    def prf_expansion(self, query: str, keywords: str) -> list[str]:
        """:func:`prf_terms` for ``query``: the feedback passages are the sample's context (the
        passages the answer came from), else the keyword query's top hits; the background is the
        query's top :data:`PRF_POOL` hits; the rejected answer's words are never added. One
        retriever search, memoized; no LLM call."""
        memo_key = ("prf", query)
        pool = self._search_memo.get(memo_key)
        if pool is None:
            pool = [h.contents for h in self.retriever.search([keywords or query], PRF_POOL)[0]]
            self._search_memo[memo_key] = pool
        feedback = list(self._context_list[:PRF_DOCS]) or list(pool[:PRF_DOCS])
        return prf_terms(query, feedback, pool, exclude=self._rejected)

    # -- DecomposeQuery ------------------------------------------------------------------------------
    def decompose_messages(self, query: str) -> list[dict[str, str]]:
        ask = "Write two short sub-questions that together answer it."
        return [
            {"role": "system", "content": "You split a question into simpler questions, one per line."},
            {"role": "user", "content": f"Question: Which city is older, Lyon or Porto?\n{ask}"},
            {"role": "assistant", "content": "When was Lyon founded?\nWhen was Porto founded?"},
            {"role": "user", "content": f"Question: {query}\n{ask}"},
        ]

    def decompose_query(self, query: str) -> list[str]:
        """Two to four sub-questions from the model when they are about the question; otherwise a
        pattern split (choices, comparisons, nested relations); otherwise the keyword form of the
        query, alone. A sub-question is never the question itself (up to case and punctuation):
        GenerateAnswer treats an answer to the sample's question as the corrected answer, so a
        bridging hop must ask something else."""
        query = _as_query(query)
        if _has_marker(query):
            return [PENDING]
        if not query:
            self._log("DecomposeQuery", output=[], fallback="empty_query")
            return []
        text = self._generate(self.decompose_messages(query), self.aux_params)
        if text == PENDING:
            return [PENDING]
        q_words = set(content_words(query))
        subs: list[str] = []
        for line in _candidate_lines(text):
            if (len(line.split()) < 2 or normalize_words(line) == normalize_words(query) or line in subs
                    or _looks_invented(line, query)):
                continue
            if q_words and not overlap(content_words(line), q_words):
                continue
            subs.append(line)
            if len(subs) == 4:
                break
        fallback = None
        if len(subs) < 2:
            subs = [x for x in rule_decompose(query) if normalize_words(x) != normalize_words(query)]
            fallback = "pattern_split" if subs else "keywords"
            subs = subs or [keyword_query(query)]
        self._log("DecomposeQuery", output=subs, raw=text, fallback=fallback)
        return subs

    # -- RefineDoc ---------------------------------------------------------------------------------
    def refine_messages(self, query: str, doc: str, mode: str) -> list[dict[str, str]]:
        title, body = split_title(truncate_words(doc, self.max_doc_words))
        shown = f"{title}: {body}" if title else body
        return [
            {"role": "system", "content": "You help answer a question from one passage. Be brief and stick to the passage."},
            {"role": "user", "content": f"Question: {query}\nPassage: {shown}\nTask: {REFINE_INSTRUCTIONS[mode]}"},
        ]

    def refine_doc(self, query: str, doc: str, instruction: str) -> str:
        """Refine one passage for the question (see REFINE_INSTRUCTIONS for the modes)."""
        query = _as_query(query)
        doc = "\n".join(_flatten_docs(doc)) if isinstance(doc, (list, tuple)) else str(doc or "")
        mode = _normalize_mode(instruction, REFINE_INSTRUCTIONS, default="refine")
        if _has_marker(query) or _has_marker(doc) or _has_marker(instruction):
            return PENDING
        q_words = set(content_words(query))
        title, body = split_title(doc)
        scorer = getattr(self.reranker, "score_pairs", None)
        if mode == "delete":
            if scorer is not None and query:
                best = max(self._sentence_scores(query, title, body), default=float("-inf"))
                keep = best >= DELETE_MIN_LOGIT
            else:
                keep = not q_words or bool(overlap(content_words(doc), q_words))
            self._log("RefineDoc", instruction=mode, kept=keep)
            return doc if keep else ""
        if mode in ("refine", "summarize") and scorer is not None and query:
            out = _join_title(title, self._select_sentences(query, title, body, REFINE_KEEP_SENTENCES[mode]))
            self._log("RefineDoc", instruction=mode, output=out, selector="cross-encoder")
            return out
        if mode in ("refine", "summarize"):
            out = _join_title(title, self._extract(body, q_words, mode))
            self._log("RefineDoc", instruction=mode, output=out)
            return out
        if self.notes == "extractive" and scorer is not None and query:
            picked = self._select_sentences(query, title, body, NOTE_KEEP_SENTENCES[mode])
            if mode == "correct":
                out = _join_title(title, picked)
            else:
                label = "Explanation" if mode == "explain" else "Example"
                note = " ".join(picked.split()[:60])
                out = f"{truncate_words(doc, self.max_doc_words)}\n{label}: {note}"
            self._log("RefineDoc", instruction=mode, output=out, selector="cross-encoder")
            return out
        text = self._generate(self.refine_messages(query, doc, mode), self.aux_params)
        if text == PENDING:
            return PENDING
        note = " ".join(text.split()[:60])
        doc_words = set(content_words(doc))
        note_words = content_words(note)
        grounded = len(note.split()) >= 3 and bool(overlap(note_words, doc_words))
        if mode == "correct":
            # A rewrite of the facts must come from the passage: most of its words are in it.
            grounded = grounded and sum(w in doc_words for w in note_words) >= 0.5 * len(note_words)
            out = _join_title(title, note) if grounded else _join_title(title, self._extract(body, q_words, "refine"))
        else:
            label = "Explanation" if mode == "explain" else "Example"
            base = truncate_words(doc, self.max_doc_words)
            out = f"{base}\n{label}: {note}" if grounded else doc
        self._log("RefineDoc", instruction=mode, output=out, raw=text,
                  fallback=None if grounded else ("extractive" if mode == "correct" else "unchanged"))
        return out

    def _pair_scores(self, query: str, texts: Sequence[str]) -> list[float]:
        """Cross-encoder logits of (query, text) pairs, memoized (prefetch runs repeat them)."""
        todo = [t for t in dict.fromkeys(texts) if (query, t) not in self._score_memo]
        if todo:
            scores = self.reranker.score_pairs([query] * len(todo), list(todo))
            for t, v in zip(todo, scores):
                self._score_memo[(query, t)] = float(v)
        return [self._score_memo[(query, t)] for t in texts]

    def _sentence_scores(self, query: str, title: str, body: str) -> list[float]:
        # The title goes with each sentence: "It was completed in 1887." names no entity itself.
        sents = split_sentences(body) or [body]
        return self._pair_scores(query, [f"{title}. {s}" if title else s for s in sents])

    def _select_sentences(self, query: str, title: str, body: str, keep: int) -> str:
        """The ``keep`` sentences the cross-encoder scores best for the query, in text order."""
        sents = split_sentences(body)
        if len(sents) <= keep:
            return body
        scores = self._sentence_scores(query, title, body)
        best = sorted(range(len(sents)), key=lambda i: (-scores[i], i))[:keep]
        return " ".join(sents[i] for i in sorted(best))

    @staticmethod
    def _extract(body: str, q_words: set[str], mode: str) -> str:
        """Extractive refinement: sentences sharing words with the question, in text order.

        ``refine`` keeps every such sentence, ``summarize`` the two with the most overlap; both
        keep the first sentence when none matches, so a passage never becomes empty.
        """
        sents = split_sentences(body)
        if not sents:
            return body
        scores = [overlap(content_words(s), q_words) for s in sents]
        if mode == "summarize":
            ranked = sorted(range(len(sents)), key=lambda i: (-scores[i], i))[:2]
            chosen = sorted(i for i in ranked if scores[i] > 0)
        else:
            chosen = [i for i, s in enumerate(scores) if s > 0]
        return " ".join(sents[i] for i in (chosen or [0]))

    # -- GenerateAnswer -------------------------------------------------------------------------------
    def answer_messages(self, query: str, docs: Sequence[str], additional_instruction: str | None) -> list[dict[str, str]]:
        return build_rag_messages(
            query, list(docs), variant=self.rag_variant, max_passage_words=self.max_doc_words,
            additional_instruction=additional_instruction or None,
        )

    def generate_answer(self, query: str, docs: list[str], additional_instruction: str | None = None) -> str:
        """The standard-RAG prompt over ``docs`` (flattened, de-duplicated, empty ones dropped,
        at most ``max_docs``), plus the instruction; returns the extracted short answer."""
        query = _as_query(query)
        instruction = " ".join(str(additional_instruction).split()) if additional_instruction else None
        if _has_marker(query) or _has_marker(docs) or _has_marker(instruction or ""):
            return PENDING
        used = _flatten_docs(docs)
        if not used and self._context_docs:
            # Every passage was deleted or nothing new was found: answer from what was there.
            used = list(self._context_list)
        if len(used) > self.max_docs and getattr(self.reranker, "score_pairs", None) is not None and query:
            # Keep the passages the cross-encoder scores best (best first), not simply the first ones.
            scores = self._pair_scores(query, used)
            used = [used[i] for i in sorted(range(len(used)), key=lambda i: (-scores[i], i))]
        used = used[: self.max_docs]
        final = not self._question or normalize_words(query) == self._question
        if final and self._strategy and self._rejected:
            # The table says the answer itself must be rewritten: say which answer was rejected.
            note = f'{self._strategy} The earlier answer "{" ".join(self._rejected.split()[:20])}" was judged wrong.'
            instruction = f"{instruction} {note}" if instruction else note
        text = self._generate(self.answer_messages(query, used, instruction), self.gen_params)
        if text == PENDING:
            return PENDING
        answer, followed = extract_answer(text, prefilled=self.rag_variant == "prefill")
        free_answer = answer
        if self.answer_mode == "spans" and len(answer.split()) <= SPAN_MODE_MAX_WORDS:
            answer = self._choose_span(query, used, instruction, answer, exclude_rejected=final)
        abstained = kept_previous = False
        if not final:
            # An intermediate answer (a sub-question's): nothing of the critique applies, and an
            # abstention is no answer to pass on (it would only add noise to the next search).
            answer = "" if is_abstention(answer) else answer
        elif self._abstain and answer and not _grounded(answer, used, self._rejected):
            answer, abstained = ABSTAIN_ANSWER, True
        elif (not self._abstain and self._rejected and is_abstention(answer)
              and not is_abstention(self._rejected)):
            # Only a critique saying the answer is unsupported may turn it into an abstention;
            # otherwise a reader that gives up on the new context keeps the answer it had.
            answer, kept_previous = self._rejected, True
        self._log("GenerateAnswer", docs=used, instruction=instruction, raw=text, answer=answer,
                  followed_prefix=followed, abstained=abstained, kept_previous=kept_previous,
                  **({} if final else {"intermediate": True}),
                  **({"free_answer": free_answer} if self.answer_mode == "spans" else {}))
        return answer

    def _choose_span(self, query: str, docs: Sequence[str], instruction: str | None, free_answer: str, *,
                     exclude_rejected: bool = True) -> str:
        """Span mode: the option the model's constrained decoding picks after the answer phrase."""
        # The answer the critique rejected is no option (the free answer may repeat it).
        rejected = normalize_words(self._rejected) if exclude_rejected else ""
        options = [f" {c}" for c in answer_candidates(query, docs, first=free_answer, max_candidates=self.max_candidates)
                   if not rejected or normalize_words(c) != rejected]
        if len(options) < 2:
            return free_answer
        prompt = _span_prompt(self.answer_messages(query, docs, instruction))
        key = json.dumps([prompt, options], sort_keys=True, ensure_ascii=False)
        if key not in self._span_memo:
            (choice,) = self.llm.choose([prompt], [options])
            self._span_memo[key] = choice.text.strip()
        if not self._prefetching:
            self.counts["llm_calls"] += 1
            self.counts["choose_calls"] += 1
        return self._span_memo[key]


GROUNDED_MIN_SHARE = 0.5
"""Share of an answer's content words that must occur in the passages for it to count as
grounded on the abstain path. Not all: a correct long answer paraphrases (a summary that keeps
most words but not every one would otherwise be replaced by an abstention)."""


def _span_prompt(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The answer prompt ending in an open assistant turn that the chosen span continues."""
    if messages and messages[-1]["role"] == "assistant":
        return messages
    return [*messages, {"role": "assistant", "content": ANSWER_PREFIX}]


def _grounded(answer: str, docs: Sequence[str], rejected: str) -> bool:
    """Whether an answer is supported by the passages: at least :data:`GROUNDED_MIN_SHARE` of its
    content words occur in them and it is not the answer the critique rejected as unsupported
    (an abstention counts as grounded, so it is never replaced)."""
    words = content_words(answer)
    if not words or normalize_words(answer) in {normalize_words(ABSTAIN_ANSWER)}:
        return True
    if rejected and normalize_words(answer) == normalize_words(rejected):
        return False
    doc_words = set(content_words(" ".join(docs)))
    return sum(w in doc_words for w in words) >= GROUNDED_MIN_SHARE * len(words)


ANSWER_MODES = ("free", "spans")
"""GenerateAnswer modes: free generation, or a choice among candidate spans of the passages."""
SPAN_MODE_MAX_WORDS = 8
"""Span mode reads a short answer only: a free answer longer than this (a summary) is kept."""

_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
_DATE_SPAN_RE = re.compile(rf"\b\d{{1,2}} {_MONTH} \d{{4}}\b|\b{_MONTH} \d{{1,2}}, \d{{4}}\b|\b{_MONTH} \d{{4}}\b|\b\d{{4}}-\d{{2}}-\d{{2}}\b")
_NUMBER_SPAN_RE = re.compile(
    r"(?:[$\u20ac\u00a3] ?)?\b\d[\d,]*(?:\.\d+)?(?: ?(?:%|percent\b|million\b|billion\b|thousand\b|[a-z]+\b))?"
)
_NAME_SPAN_RE = re.compile(r"\b[A-Z][\w'\u2019-]*(?:(?: (?:of|the|de|del|da|van|von|and|on|upon|v))* [A-Z][\w'\u2019-]*)*")
_MONTH_NAMES = frozenset("january february march april may june july august september october november december".split())


def answer_candidates(question: str, docs: Sequence[str], *, first: str = "", max_candidates: int = 24) -> list[str]:
    """Short answers a passage states or the question names, for GenerateAnswer's span mode.

    In order, without duplicates (case-insensitive): ``first`` (the free answer), the options the
    question names (capitalized spans, as in "Which is older, A or B?"), then from each passage
    in turn its dates, numbers with their unit and names (capitalized word sequences), and the
    abstention last. Generic over corpora: no pattern knows a dataset's templates.
    """
    out: dict[str, str] = {}

    def add(span: str) -> None:
        words = span.strip(" .,;:()[]\"'").split()
        while words and words[-1].lower() in NOT_NAME_WORDS:  # "1956 and" -> "1956"
            words.pop()
        span = " ".join(words)
        low = [w.lower() for w in words]
        if (not span or len(words) > SPAN_MODE_MAX_WORDS or all(w in NOT_NAME_WORDS for w in low)
                or all(w in _MONTH_NAMES for w in low)):
            return
        out.setdefault(span.lower(), span)

    if first:
        add(first)
    q = " ".join(str(question).split())
    for m in _NAME_SPAN_RE.finditer(q):
        if m.start() > 0:  # the first word of a question is capitalized anyway
            add(m.group(0))
    for doc in docs:
        title, body = split_title(str(doc))
        text = " ".join(body.split())
        spans = [m.group(0) for m in _DATE_SPAN_RE.finditer(text)]
        dated = " ".join(spans)
        spans += [m.group(0) for m in _NUMBER_SPAN_RE.finditer(text) if m.group(0).split()[0] not in dated]
        spans += [m.group(0) for m in _NAME_SPAN_RE.finditer(text)]
        if title:
            spans.append(title)
        for span in spans:
            add(span)
    found = list(out.values())[: max(1, max_candidates - 1)]
    if ABSTAIN_ANSWER.lower() not in {c.lower() for c in found}:
        found.append(ABSTAIN_ANSWER)
    return found


def _normalize_mode(instruction: Any, modes: Mapping[str, str], *, default: str) -> str:
    """Map a free-form instruction onto a known mode ("Summarize the query" -> "summarize")."""
    text = str(instruction or "").lower()
    if text.strip() in modes:
        return text.strip()
    for word in _WORD_RE.findall(text):
        for mode in modes:
            if word.startswith(mode[:5]):  # explain/explanation, clarify/clarification, ...
                return mode
    if "remove" in text or "drop" in text or "irrelevant" in text:
        return "delete" if "delete" in modes else default
    if "example" in text:
        return "exemplify" if "exemplify" in modes else default
    return default


def action_stubs() -> dict[str, Callable[..., Any]]:
    """Functions with the five actions' exact signatures that do nothing.

    For static checks (``executor.validate_program``) of programs when no generator or
    retriever is at hand, e.g. validating the error-action table.
    """

    def Retrieval(query: str, topk: int = 5) -> list[str]:
        return []

    def RewriteQuery(query: str, instruction: str) -> list[str]:
        return [query]

    def DecomposeQuery(query: str) -> list[str]:
        return [query]

    def RefineDoc(query: str, doc: str, instruction: str) -> str:
        return doc

    def GenerateAnswer(query: str, docs: list[str], additional_instruction: str | None = None) -> str:
        return ""

    return {
        "Retrieval": Retrieval,
        "RewriteQuery": RewriteQuery,
        "DecomposeQuery": DecomposeQuery,
        "RefineDoc": RefineDoc,
        "GenerateAnswer": GenerateAnswer,
    }
