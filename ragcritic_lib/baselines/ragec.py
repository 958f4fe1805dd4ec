"""RAGEC: blame each wrong answer on one pipeline stage, then pick an error type by LLM votes.

Reproduces Leung et al. (RAGEC), section 5 and appendix B, on our four-stage pipeline: passage
chunking (corpus preparation), first-stage retrieval, cross-encoder reranking, generation.

Which answers are wrong: the paper asks GPT-4o to compare answer and ground truth; we use the
record's ``correct`` flag from the project's judge (``baselines.mark_correct``, read by
``baselines.is_wrong``), the same judge every other label uses.

Stage attribution (rules, no LLM; run only on wrong answers), checked in this order:

1. find the ground-truth chunks (testbed: the question's ``supporting_ids``; trivia: corpus
   passages that contain a gold answer and share a content word with the question);
2. no ground-truth chunk -> Generation (likely an unanswerable question: abstention);
3. more than half of the ground-truth chunks reached the generator -> Generation;
4. a ground-truth chunk was retrieved by the first stage but dropped by the reranker -> Reranking;
5. share of query concepts found in the ground-truth chunks below 0.8 -> Chunking;
6. otherwise -> Retrieval.

The paper extracts concepts and checks their presence with GPT-4o-mini; we use the question's
content words (stopwords removed, plural "s" folded) and word presence, which a 135M model cannot
do more reliably. Type classification then asks an LLM K times (K = 10 in the paper) to choose
one type of the blamed stage, with sampling and a different seed per vote; the modal type and
its frequency (Table 4) measure self-consistency. Votes naming no type of that stage are counted
as invalid; when all K are invalid a grounded rule picks the type (``source = "grounded"``).

Voting (``voting``): "free" samples K short generations and reads a type from each, as in the
paper; the packaged 135M model names no type of the blamed stage in most of them (63% of 400 votes
were invalid). "constrained" (the default) reads the model's distribution over the stage's type
ids instead (one scoring call: the log-probability of each id as the reply) and draws the K votes
from it at the same temperature and top-p, so every vote is a type of the stage and the mode
frequency still measures how peaked the model's choice is. Either way the vote is the model's.

The reranking stage (and so E7/E8) exists only for a pipeline with a reranker. When standard RAG
runs without one, :func:`reranked_records` answers the questions again with the cross-encoder
reranker over the first-stage candidates and attaches those candidates, and RAGEC diagnoses that
run. :func:`ragec_summary` reports the invalid-vote rate and flags a run in which more than half
of the votes are invalid or the reranking stage is missing (``degenerate``).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib.retrieval.rag import passages_of
from ragcritic_lib.baselines import (
    content_words,
    contains_answer,
    dataset_name,
    is_wrong,
    overlap_fraction,
    question_type,
    tokens,
)

STAGES = ("Chunking", "Retrieval", "Reranking", "Generation")
SIDES = ("retrieval", "response")


# ------------------------------------------------------------------------- type table
@dataclass(frozen=True)
class ErrorType:
    """One RAGEC error type (E1-E16)."""

    id: str
    name: str
    stage: str
    definition: str
    tier1: str

    @property
    def label(self) -> str:
        return f"{self.id} {self.name}"


@dataclass(frozen=True)
class RagecTypes:
    """The E1-E16 table with its stage and tier-1 mappings (``data/taxonomy/ragec_types.yaml``)."""

    types: tuple[ErrorType, ...]
    stage_side: dict[str, str] = field(default_factory=dict)
    tier1_side: dict[str, str] = field(default_factory=dict)

    def by_id(self, type_id: str) -> ErrorType:
        for t in self.types:
            if t.id == type_id:
                return t
        raise KeyError(f"unknown RAGEC type id {type_id!r}")

    def of_stage(self, stage: str) -> list[ErrorType]:
        if stage not in STAGES:
            raise KeyError(f"unknown RAGEC stage {stage!r}; expected one of {STAGES}")
        return [t for t in self.types if t.stage == stage]

    def tier1_of(self, type_id: str) -> str:
        return self.by_id(type_id).tier1


def default_types_path() -> Path:
    from ragcritic_lib import paths

    return paths.TAXONOMY_DIR / "ragec_types.yaml"


def load_ragec_types(path: str | Path | None = None) -> RagecTypes:
    """Load and validate the RAGEC type table.

    Raises:
        DataFormatError: naming the file and the offending key or entry.
    """
    from ragcritic_lib.io import DataFormatError, read_yaml

    path = Path(path) if path is not None else default_types_path()
    data = read_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("types"), list):
        raise DataFormatError(f"{path}: expected a mapping with a 'types' list")
    out: list[ErrorType] = []
    for i, entry in enumerate(data["types"]):
        if not isinstance(entry, dict):
            raise DataFormatError(f"{path}: types[{i}] is not a mapping")
        for key in ("id", "name", "stage", "definition", "tier1"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise DataFormatError(f"{path}: types[{i}] lacks a non-empty string '{key}'")
        if entry["stage"] not in STAGES:
            raise DataFormatError(f"{path}: types[{i}] ({entry['id']}) has unknown stage {entry['stage']!r}")
        if not re.fullmatch(r"E\d{1,2}", entry["id"]):
            raise DataFormatError(f"{path}: types[{i}] has a malformed id {entry['id']!r}")
        out.append(ErrorType(**{k: entry[k].strip() for k in ("id", "name", "stage", "definition", "tier1")}))
    ids = [t.id for t in out]
    if len(set(ids)) != len(ids):
        raise DataFormatError(f"{path}: duplicate type ids {sorted(i for i in set(ids) if ids.count(i) > 1)}")
    stage_side = dict(data.get("stage_side") or {})
    tier1_side = dict(data.get("tier1_side") or {})
    for stage in STAGES:
        if stage_side.get(stage) not in SIDES:
            raise DataFormatError(f"{path}: stage_side.{stage} must be one of {SIDES}")
    for t in out:
        if t.tier1 not in tier1_side:
            raise DataFormatError(f"{path}: {t.id} maps to tier-1 {t.tier1!r}, which tier1_side lacks")
    return RagecTypes(tuple(out), stage_side, tier1_side)


# ---------------------------------------------------------------- ground-truth chunks
def _stem(word: str) -> str:
    """Fold a plural/possessive ending so "typhoons" matches "typhoon"."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def concept_coverage(question: str, chunks: Sequence[str]) -> float:
    """Share of the question's concepts (content words) present in at least one chunk.

    A question without content words has nothing to miss: coverage 1.0.
    """
    concepts = {_stem(c) for c in content_words(question)}
    if not concepts:
        return 1.0
    present = {_stem(t) for text in chunks for t in tokens(text)}
    return sum(1 for c in concepts if c in present) / len(concepts)


def _is_unanswerable(record: Mapping[str, Any]) -> bool:
    meta = record.get("metadata") or {}
    return meta.get("answerable") is False or meta.get("type") == "unanswerable"


def _corpus_pairs(corpus: Any) -> tuple[list[str], list[str]]:
    if corpus is None:
        return [], []
    if hasattr(corpus, "ids") and hasattr(corpus, "contents"):
        return list(corpus.ids), list(corpus.contents)
    ids, texts = [], []
    for rec in corpus:
        ids.append(str(rec["id"]))
        texts.append(str(rec["contents"]))
    return ids, texts


def make_chunk_gold_fn(
    corpus: Any = None, *, min_query_overlap: int = 1, max_chunks: int = 20
) -> Callable[[Mapping[str, Any]], list[dict[str, str]]]:
    """Build the ground-truth-chunk finder used by :func:`attribute_stage`.

    Args:
        corpus: a ``retrieval.Corpus`` or an iterable of {"id", "contents"} records; needed for
            the trivia rule and to fill in texts of supporting ids.
        min_query_overlap: trivia rule: a gold-containing passage counts only if it shares at
            least this many content words with the question (a bare "Paris" elsewhere is not
            evidence for this question).
        max_chunks: keep at most this many trivia chunks, highest overlap first.

    Returns:
        ``fn(record) -> [{"id", "contents"}]``: supporting passages when the record's metadata
        lists ``supporting_ids``; none for unanswerable questions; else the trivia rule.
    """
    from ragcritic_lib.evaluation.scoring import normalize_words

    ids, texts = _corpus_pairs(corpus)
    by_id = dict(zip(ids, texts))
    norm_texts = [f" {normalize_words(t)} " for t in texts]
    token_sets = [None] * len(texts)  # filled lazily: only passages that contain a gold

    def fn(record: Mapping[str, Any]) -> list[dict[str, str]]:
        meta = record.get("metadata") or {}
        supporting = [str(x) for x in (meta.get("supporting_ids") or [])]
        if supporting:
            seen = {str(p.get("id")): str(p.get("contents", "")) for p in record.get("passages") or []}
            return [{"id": s, "contents": by_id.get(s, seen.get(s, ""))} for s in supporting]
        if _is_unanswerable(record):
            return []
        golds = [g for g in (normalize_words(x) for x in record.get("golden_answers") or []) if g]
        if not golds:
            return []
        concepts = {_stem(c) for c in content_words(record.get("question", ""))}
        hits: list[tuple[int, int]] = []
        for i, nt in enumerate(norm_texts):
            if not any(f" {g} " in nt for g in golds):
                continue
            if token_sets[i] is None:
                token_sets[i] = {_stem(t) for t in tokens(texts[i])}
            ov = len(concepts & token_sets[i])
            if ov >= min_query_overlap:
                hits.append((-ov, i))
        hits.sort()
        return [{"id": ids[i], "contents": texts[i]} for _, i in hits[:max_chunks]]

    return fn


def dropped_by_reranker(record: Mapping[str, Any], gold_ids: set[str]) -> bool:
    """True when a ground-truth chunk is in the first-stage list (``record["retrieved"]``) but
    not among the passages given to the generator. No ``retrieved`` list: no reranking stage."""
    retrieved = {str(p.get("id")) for p in record.get("retrieved") or []}
    passed = {str(p.get("id")) for p in record.get("passages") or []}
    return any(g in retrieved and g not in passed for g in gold_ids)


def attach_first_stage(records: Sequence[Mapping[str, Any]], retriever: Any, depth: int) -> list[dict]:
    """Copy records adding ``retrieved``: the first-stage (pre-rerank) top-``depth`` hits."""
    results = retriever.search([r["question"] for r in records], depth)
    out = []
    for rec, hits in zip(records, results):
        r = dict(rec)
        r["retrieved"] = passages_of(hits)
        out.append(r)
    return out


_DATASET_FIELDS = ("id", "question", "golden_answers", "metadata", "dataset")


def reranked_records(
    llm: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    reranked: Any,
    first_stage: Any,
    depth: int,
    k: int,
    **rag_kw: Any,
) -> list[dict[str, Any]]:
    """Answer the questions of ``records`` with a pipeline that has a reranking stage.

    Only the dataset fields of ``records`` are kept (an earlier run's answer, scores or judged
    ``correct`` flag would describe another pipeline). The answers come from
    ``rag.run_standard_rag`` with ``reranked`` (a retriever whose reranker keeps the top ``k``
    of the first stage's candidates), and ``retrieved`` is the first stage's top ``depth``, so
    :func:`dropped_by_reranker` can see what the reranker dropped.

    Args:
        rag_kw: the other ``run_standard_rag`` options (variant, gen_params, max_passage_words).
    """
    from ragcritic_lib.retrieval.rag import run_standard_rag

    clean = [{f: r[f] for f in _DATASET_FIELDS if f in r} for r in records]
    answered = run_standard_rag(llm, clean, retriever=reranked, k=k, desc="ragec reranked rag", **rag_kw)
    return attach_first_stage(answered, first_stage, depth)


def same_answer_keys(
    a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]
) -> set[tuple[str, str]]:
    """(dataset, id) of the questions that two runs answered with the same (normalized) answer:
    where labels given to one run's answers also describe the other's."""
    from ragcritic_lib.evaluation.scoring import normalize_words

    first = {(dataset_name(r), str(r.get("id"))): normalize_words(str(r.get("prediction") or "")) for r in a}
    return {(dataset_name(r), str(r.get("id"))) for r in b
            if first.get((dataset_name(r), str(r.get("id")))) == normalize_words(str(r.get("prediction") or ""))}


def attribute_stage(
    record: Mapping[str, Any],
    *,
    chunk_gold_fn: Callable[[Mapping[str, Any]], list[dict[str, str]]],
    reranker_dropped: Callable[[Mapping[str, Any], set[str]], bool] | bool = dropped_by_reranker,
    coverage_threshold: float = 0.8,
) -> dict[str, Any]:
    """Blame one wrong answer on a pipeline stage with RAGEC's rules (see module docstring).

    Args:
        record: a RAG result record (question, golden_answers, metadata, passages given to the
            generator; optionally ``retrieved``, the first-stage list before reranking).
        chunk_gold_fn: returns the ground-truth chunks of a record (:func:`make_chunk_gold_fn`).
        reranker_dropped: ``fn(record, gold_ids) -> bool`` (default :func:`dropped_by_reranker`),
            or a precomputed bool.
        coverage_threshold: concept-coverage level below which chunking is blamed (0.8).

    Returns:
        {"stage", "reason", "gold_chunk_ids", "gold_chunks_to_generator", "reranker_dropped",
        "coverage"}; stage is None (reason "not_an_error") for a record judged correct.
    """
    out: dict[str, Any] = {
        "stage": None, "reason": "", "gold_chunk_ids": [], "gold_chunks_to_generator": 0,
        "reranker_dropped": None, "coverage": None,
    }
    if not is_wrong(record):
        out["reason"] = "not_an_error"
        return out
    gold = chunk_gold_fn(record)
    gold_ids = [str(c["id"]) for c in gold]
    passed = {str(p.get("id")) for p in record.get("passages") or []}
    n_passed = sum(1 for g in gold_ids if g in passed)
    out["gold_chunk_ids"], out["gold_chunks_to_generator"] = gold_ids, n_passed
    if not gold_ids:
        out.update(stage="Generation", reason="no_gold_chunks")
        return out
    if 2 * n_passed > len(gold_ids):
        out.update(stage="Generation", reason="most_gold_chunks_reached_generator")
        return out
    dropped = reranker_dropped(record, set(gold_ids)) if callable(reranker_dropped) else bool(reranker_dropped)
    out["reranker_dropped"] = bool(dropped)
    if dropped:
        out.update(stage="Reranking", reason="reranker_dropped_gold_chunk")
        return out
    cov = concept_coverage(str(record.get("question", "")), [str(c.get("contents", "")) for c in gold])
    out["coverage"] = cov
    if cov < coverage_threshold:
        out.update(stage="Chunking", reason="low_concept_coverage")
    else:
        out.update(stage="Retrieval", reason="gold_chunks_not_retrieved")
    return out


# ------------------------------------------------------------------ type classification
_STAGE_TASK = {
    "Chunking": "The corpus was cut into chunks before indexing, and that cutting is to blame. "
    "Below are the chunks that hold the ground truth.",
    "Retrieval": "The retriever is to blame: the chunks holding the ground truth were not found. "
    "Below are the chunks it did return.",
    "Reranking": "The reranker is to blame: it re-ordered the retrieved chunks and kept only the "
    "top ones. Below are the chunks it passed on.",
    "Generation": "The generator is to blame: it saw the chunks below and still answered wrongly.",
}

_SYSTEM = (
    "You diagnose failures of a question-answering system that works in four steps: chunking "
    "documents, retrieving chunks for the question, reranking them, and generating an answer "
    "from the top chunks."
)


def _clip(text: str, max_chars: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def build_type_messages(
    record: Mapping[str, Any],
    stage: str,
    types: RagecTypes,
    *,
    gold_chunks: Sequence[Mapping[str, str]] = (),
    max_chunks: int = 4,
    max_chars: int = 300,
) -> list[dict[str, str]]:
    """Chat prompt asking for the one error type of ``stage`` that best explains the failure.

    Each stage sees only what matters for it (as in the paper): chunking the ground-truth
    chunks; retrieval the first-stage list; reranking and generation the generator's passages;
    only generation sees the wrong answer.
    """
    if stage == "Chunking":
        shown = list(gold_chunks)
    elif stage == "Retrieval":
        shown = list(record.get("retrieved") or record.get("passages") or [])
    else:
        shown = list(record.get("passages") or [])
    chunk_lines = [f"[{i + 1}] {_clip(p.get('contents', ''), max_chars)}" for i, p in enumerate(shown[:max_chunks])]
    options = "\n".join(f"{t.id} {t.name}: {t.definition}" for t in types.of_stage(stage))
    parts = [
        _STAGE_TASK[stage],
        f"Question: {record.get('question', '')}",
        f"Correct answer: {' / '.join(record.get('golden_answers') or [])}",
    ]
    if stage in ("Retrieval", "Reranking") and gold_chunks:
        parts.append("Ground-truth chunk ids: " + ", ".join(str(c["id"]) for c in gold_chunks[:max_chunks]))
    if stage == "Generation":
        parts.append(f"System answer (wrong): {record.get('prediction', '')}")
    parts.append("Chunks:\n" + ("\n".join(chunk_lines) if chunk_lines else "(none)"))
    parts.append(f"Which error type fits best?\n{options}")
    ids = ", ".join(t.id for t in types.of_stage(stage))
    parts.append(f"Reply with one id only ({ids}).")
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


_ID_RE = re.compile(r"\bE(?:\s*-)?\s*(\d{1,2})\b", re.IGNORECASE)  # one reading of the spaces: linear


def _name_pattern(name: str) -> re.Pattern[str]:
    words = [re.escape(w) for w in re.split(r"[\s-]+", name.strip()) if w]
    return re.compile(r"\b" + r"[\s-]*".join(words) + r"\b", re.IGNORECASE)


def parse_type_vote(text: str, allowed: Sequence[ErrorType]) -> str | None:
    """Read one vote: the first type id of the stage (``E7``, ``e 7``, ``E-7``) in ``text``, else
    the earliest-mentioned type name of the stage; None when neither occurs (an invalid vote).

    Ids of other stages are skipped, not accepted: a chunking vote of "E10" is invalid.
    """
    text = text or ""
    allowed_ids = {t.id for t in allowed}
    for m in _ID_RE.finditer(text):
        cand = f"E{int(m.group(1))}"
        if cand in allowed_ids:
            return cand
    best: tuple[int, str] | None = None
    for t in allowed:
        m = _name_pattern(t.name).search(text)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), t.id)
    return best[1] if best else None


def aggregate_votes(votes: Sequence[str | None]) -> dict[str, Any]:
    """Modal type and its frequency over K votes (None = invalid vote).

    Ties break towards the type voted first, so the result does not depend on dict order.

    Returns:
        {"mode", "mode_freq", "second_mode", "second_freq", "n_valid", "n_invalid", "counts"}.
    """
    valid = [v for v in votes if v]
    counts = Counter(valid)
    first = {}
    for i, v in enumerate(valid):
        first.setdefault(v, i)
    ranked = sorted(counts, key=lambda t: (-counts[t], first[t]))
    return {
        "mode": ranked[0] if ranked else None,
        "mode_freq": counts[ranked[0]] if ranked else 0,
        "second_mode": ranked[1] if len(ranked) > 1 else None,
        "second_freq": counts[ranked[1]] if len(ranked) > 1 else 0,
        "n_valid": len(valid),
        "n_invalid": len(votes) - len(valid),
        "counts": dict(sorted(counts.items(), key=lambda kv: (-kv[1], first[kv[0]]))),
    }


def grounded_type(record: Mapping[str, Any], stage: str, gold_chunks: Sequence[Mapping[str, str]] = ()) -> str:
    """Type chosen by evidence rules when every LLM vote was invalid (no model involved).

    Chunking: E2 if a ground-truth chunk is long (> 150 words), E1 if all are short (< 25
    words), else E3. Retrieval: E6 if the best returned chunk covers >= half the query concepts
    (keyword match without the answer), E5 if it covers >= a quarter, else E4. Reranking: E7 if a
    ground-truth chunk was dropped, else E8. Generation: E9 unanswerable but answered; E16 a
    numeric gold and a numeric answer; E15 temporal question; E12 abstained or partly right
    (token F1 > 0); E13 the answer copies text from the passages; else E10.
    """
    if stage == "Chunking":
        lengths = [len(str(c.get("contents", "")).split()) for c in gold_chunks]
        if any(n > 150 for n in lengths):
            return "E2"
        if lengths and all(n < 25 for n in lengths):
            return "E1"
        return "E3"
    if stage == "Retrieval":
        shown = record.get("retrieved") or record.get("passages") or []
        best = max((overlap_fraction(record.get("question", ""), p.get("contents", "")) for p in shown), default=0.0)
        return "E6" if best >= 0.5 else ("E5" if best >= 0.25 else "E4")
    if stage == "Reranking":
        gold_ids = {str(c["id"]) for c in gold_chunks}
        return "E7" if dropped_by_reranker(record, gold_ids) else "E8"
    from ragcritic_lib.mining.evidence import is_abstention
    from ragcritic_lib.evaluation.scoring import token_f1

    pred = str(record.get("prediction") or "")
    golds = list(record.get("golden_answers") or [])
    abstained = not pred.strip() or is_abstention(pred)
    if _is_unanswerable(record) and not abstained:
        return "E9"
    if any(re.search(r"\d", g) for g in golds) and re.search(r"\d", pred):
        return "E16"
    if question_type(record) == "temporal":
        return "E15"
    if abstained or token_f1(pred, golds) > 0:
        return "E12"
    passages = " ".join(str(p.get("contents", "")) for p in record.get("passages") or [])
    if contains_answer(passages, [pred]):
        return "E13"
    return "E10"


VOTINGS = ("constrained", "free")


def draw_votes(logprobs: Sequence[float], ids: Sequence[str], *, k: int, temperature: float, top_p: float,
               seed: int) -> list[str]:
    """K votes drawn with replacement from softmax(logprob / temperature) over ``ids``, cut to the
    smallest set of ids whose probability reaches ``top_p`` (nucleus); temperature 0 repeats the
    arg-max. Seeded, so a run is reproducible."""
    import numpy as np

    lp = np.asarray(list(logprobs), dtype=np.float64)
    if len(lp) != len(ids) or not len(ids):
        raise ValueError(f"{len(lp)} scores for {len(ids)} type ids")
    if temperature <= 0:
        return [ids[int(np.argmax(lp))]] * k
    z = lp / float(temperature)
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep = order[: int(np.searchsorted(np.cumsum(p[order]), float(top_p) - 1e-12)) + 1]
    q = np.zeros_like(p)
    q[keep] = p[keep]
    q /= q.sum()
    rng = np.random.default_rng(int(seed))
    return [ids[int(i)] for i in rng.choice(len(ids), size=k, p=q)]


def _check_prefix_free(ids: Sequence[str], stage: str) -> None:
    for a in ids:
        for b in ids:
            if a != b and b.startswith(a):
                raise ValueError(f"RAGEC constrained voting: type id {a!r} of stage {stage} is a prefix of {b!r}, "
                                 "so its score would include the longer id's; rename one in the types file")


def classify_types(
    llm: Any,
    items: Sequence[Mapping[str, Any]],
    types: RagecTypes,
    *,
    k: int = 10,
    temperature: float = 0.7,
    top_p: float = 0.95,
    max_new_tokens: int = 8,
    seed: int = 0,
    max_chunks: int = 4,
    max_chars: int = 300,
    voting: str = "free",
) -> list[dict[str, Any]]:
    """Vote K times per item on the error type of its blamed stage.

    Args:
        items: dicts with "record", "stage" and "gold_chunks" (as built by :func:`run_ragec`).
        k: votes per item (10 in the paper); 0 skips the LLM and uses :func:`grounded_type`.
        voting: "free" (K sampled generations, parsed) or "constrained" (K draws from the model's
            scored distribution over the stage's type ids; see the module docstring).

    Returns:
        per item: the :func:`aggregate_votes` fields plus "votes", "raw_votes" and "source"
        ("llm" or "grounded").
    """
    if k > 0:
        from ragcritic_lib.llm import GenParams

    prompts = [
        build_type_messages(it["record"], it["stage"], types, gold_chunks=it.get("gold_chunks") or [],
                            max_chunks=max_chunks, max_chars=max_chars)
        for it in items
    ]
    if voting not in VOTINGS:
        raise ValueError(f"ragec.voting must be one of {', '.join(VOTINGS)}; got {voting!r}")
    raw: list[list[str]] = [[] for _ in items]
    votes: list[list[str | None]] = [[] for _ in items]
    if voting == "constrained" and k > 0 and prompts:
        options = [[t.id for t in types.of_stage(it["stage"])] for it in items]
        for it, ids in zip(items, options):
            _check_prefix_free(ids, it["stage"])
        scores = llm.score(prompts, options, desc="ragec type scores")
        for j, (ids, lps) in enumerate(zip(options, scores)):
            drawn = draw_votes(lps, ids, k=k, temperature=temperature, top_p=top_p, seed=seed * 100_003 + j)
            raw[j], votes[j] = list(drawn), list(drawn)
    for i in range(k if voting == "free" else 0):
        params = GenParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed + i)
        gens = llm.generate(prompts, params, desc=f"ragec vote {i + 1}/{k}") if prompts else []
        for j, (it, g) in enumerate(zip(items, gens)):
            raw[j].append(g.text)
            votes[j].append(parse_type_vote(g.text, types.of_stage(it["stage"])))
    out = []
    for it, v, r in zip(items, votes, raw):
        agg = aggregate_votes(v)
        agg.update(votes=v, raw_votes=r, source="llm")
        if agg["n_valid"] == 0:
            agg.update(mode=grounded_type(it["record"], it["stage"], it.get("gold_chunks") or []),
                       mode_freq=0, source="grounded")
        out.append(agg)
    return out


def run_ragec(
    llm: Any,
    records: Sequence[Mapping[str, Any]],
    types: RagecTypes,
    *,
    chunk_gold_fn: Callable[[Mapping[str, Any]], list[dict[str, str]]],
    reranker_dropped: Callable[[Mapping[str, Any], set[str]], bool] | bool = dropped_by_reranker,
    coverage_threshold: float = 0.8,
    k: int = 10,
    temperature: float = 0.7,
    seed: int = 0,
    max_new_tokens: int = 8,
    voting: str = "free",
) -> list[dict[str, Any]]:
    """Stage attribution then type voting for every wrong answer in ``records``.

    Returns:
        one dict per wrong answer: id, dataset, question_type, stage, reason, coverage,
        gold_chunk_ids, gold_chunks_to_generator, reranker_dropped, mode, mode_freq, second_mode,
        second_freq, n_valid, n_invalid, counts, votes, source.
    """
    items = []
    for rec in records:
        if not is_wrong(rec):
            continue
        found: list[list[dict[str, str]]] = []

        def remember(r: Mapping[str, Any]) -> list[dict[str, str]]:
            found.append(chunk_gold_fn(r))  # the trivia scan is not free: run it once per record
            return found[-1]

        att = attribute_stage(rec, chunk_gold_fn=remember, reranker_dropped=reranker_dropped,
                              coverage_threshold=coverage_threshold)
        items.append({"record": rec, "stage": att["stage"], "gold_chunks": found[0], "attribution": att})
    # Without an LLM every item falls back to the grounded rules.
    votes = classify_types(llm, items, types, k=k if llm is not None else 0, temperature=temperature,
                           seed=seed, max_new_tokens=max_new_tokens, voting=voting)
    out = []
    for it, v in zip(items, votes):
        rec, att = it["record"], it["attribution"]
        row = {"id": str(rec.get("id")), "dataset": dataset_name(rec), "question_type": question_type(rec)}
        row.update({k_: att[k_] for k_ in ("stage", "reason", "coverage", "gold_chunk_ids",
                                            "gold_chunks_to_generator", "reranker_dropped")})
        row.update({k_: v[k_] for k_ in ("mode", "mode_freq", "second_mode", "second_freq", "n_valid",
                                          "n_invalid", "counts", "votes", "source")})
        out.append(row)
    return out


# ----------------------------------------------------------------------------- reports
def distribution_table(
    results: Sequence[Mapping[str, Any]], types: RagecTypes, *, group_key: str | None = None
) -> list[dict[str, Any]]:
    """Counts of modal and second-modal types with per-stage percentages (the paper's Table 2;
    with ``group_key`` = "question_type" or "dataset", one extra count column per group, as in
    its Table 3). Rows: one per type, a "Percentage <stage>" row after each stage, a "Total" row.
    """
    groups = sorted({str(r.get(group_key)) for r in results}) if group_key else []
    mode_c = Counter(r["mode"] for r in results if r.get("mode"))
    second_c = Counter(r["second_mode"] for r in results if r.get("second_mode"))
    group_c = {g: Counter(r["mode"] for r in results if r.get("mode") and str(r.get(group_key)) == g) for g in groups}
    tot_mode, tot_second = sum(mode_c.values()), sum(second_c.values())
    tot_group = {g: sum(c.values()) for g, c in group_c.items()}

    def pct(num: int, den: int) -> float:
        return 100.0 * num / den if den else 0.0

    rows: list[dict[str, Any]] = []
    for stage in STAGES:
        stage_types = types.of_stage(stage)
        for t in stage_types:
            row = {"label": t.label, "stage": stage, "mode": mode_c[t.id], "second_mode": second_c[t.id]}
            row.update({g: group_c[g][t.id] for g in groups})
            rows.append(row)
        ids = [t.id for t in stage_types]
        row = {"label": f"Percentage {stage}", "stage": stage,
               "mode": pct(sum(mode_c[i] for i in ids), tot_mode),
               "second_mode": pct(sum(second_c[i] for i in ids), tot_second)}
        row.update({g: pct(sum(group_c[g][i] for i in ids), tot_group[g]) for g in groups})
        rows.append(row)
    total = {"label": "Total", "stage": "", "mode": tot_mode, "second_mode": tot_second}
    total.update({g: tot_group[g] for g in groups})
    rows.append(total)
    return rows


def ragec_summary(
    results: Sequence[Mapping[str, Any]], k: int, *, reranking_stage: bool, max_invalid_rate: float = 0.5,
    min_stage_errors: int = 5,
) -> dict[str, Any]:
    """Vote validity and coverage of one RAGEC run.

    Args:
        k: votes asked per error.
        reranking_stage: whether the diagnosed pipeline had a reranker (else E7/E8 are out of reach).
        max_invalid_rate: a larger share of invalid votes marks the run as degenerate.
        min_stage_errors: a stage with at least this many voted errors, all with one modal type
            (one answer whatever the error), marks the run as degenerate.

    Returns:
        {"errors", "votes", "invalid_votes", "invalid_vote_rate", "invalid_vote_rate_by_dataset",
        "grounded_fallbacks", "stages", "reranking_stage", "degenerate": [...]}.
    """
    votes = sum(int(r.get("n_valid", 0)) + int(r.get("n_invalid", 0)) for r in results)
    invalid = sum(int(r.get("n_invalid", 0)) for r in results)
    by_ds: dict[str, list[int]] = {}
    for r in results:
        row = by_ds.setdefault(str(r.get("dataset")), [0, 0])
        row[0] += int(r.get("n_invalid", 0))
        row[1] += int(r.get("n_valid", 0)) + int(r.get("n_invalid", 0))
    rate = invalid / votes if votes else float("nan")
    degenerate = []
    if votes and rate > max_invalid_rate:
        degenerate.append(f"ragec: {invalid} of {votes} votes ({rate:.0%}) name no type of the blamed stage")
    if not reranking_stage:
        degenerate.append("ragec: the diagnosed pipeline has no reranking stage, so E7/E8 cannot be chosen")
    if results and k > 0 and not votes:
        degenerate.append("ragec: no votes were cast")
    by_stage: dict[str, Counter[str]] = {}
    for r in results:
        if r.get("source") == "llm" and r.get("mode"):
            by_stage.setdefault(str(r.get("stage")), Counter())[str(r["mode"])] += 1
    for stage, modes in sorted(by_stage.items()):
        n = sum(modes.values())
        if n >= min_stage_errors and len(modes) == 1:
            degenerate.append(f"ragec: all {n} {stage} errors get the same modal type {next(iter(modes))}")
    return {
        "errors": len(results), "votes": votes, "invalid_votes": invalid, "invalid_vote_rate": rate,
        "invalid_vote_rate_by_dataset": {ds: (n / t if t else float("nan")) for ds, (n, t) in sorted(by_ds.items())},
        "grounded_fallbacks": sum(1 for r in results if r.get("source") == "grounded"),
        "stages": stage_counts(results), "stage_types": stage_type_counts(results),
        "reranking_stage": bool(reranking_stage), "degenerate": degenerate,
    }


def select_errors(records: Sequence[Mapping[str, Any]], max_errors: int, *, seed: int = 0
                  ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The wrong answers of ``records`` to diagnose, and why the others are left undiagnosed.

    ``max_errors`` 0 diagnoses every wrong answer. A cap takes an evenly spread random subset
    (order kept), not the first ones: test sets are often sorted by question type, and the first
    wrong answers would all be of one type.

    Returns:
        (chosen wrong records, {reason: count} of the wrong answers left out; {} when none is).
    """
    if max_errors < 0:
        raise ValueError(f"ragec.max_errors must be >= 0 (0 = every wrong answer), got {max_errors}")
    wrong = [dict(r) for r in records if is_wrong(r)]
    if not max_errors or len(wrong) <= max_errors:
        return wrong, {}
    keep = set(random.Random(seed).sample(range(len(wrong)), max_errors))
    return [r for i, r in enumerate(wrong) if i in keep], {f"over max_errors ({max_errors})": len(wrong) - max_errors}


def undiagnosed_reasons(left_out: Mapping[str, int], results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Wrong answers without a diagnosis, per reason: the ones :func:`select_errors` left out, and
    diagnosed ones whose votes gave no modal type (all votes invalid and no grounded fallback)."""
    out = {k: int(v) for k, v in left_out.items() if v}
    no_mode = sum(1 for r in results if not r.get("mode"))
    if no_mode:
        out["no valid vote"] = no_mode
    return out


def stage_type_counts(results: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per blamed stage: how many errors (``n``) and their modal types ({type: count}), so that a
    distribution over five errors reads as what it is."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        row = out.setdefault(str(r.get("stage")), {"n": 0, "types": Counter()})
        row["n"] += 1
        if r.get("mode"):
            row["types"][str(r["mode"])] += 1
    return {s: {"n": row["n"], "types": dict(row["types"].most_common())} for s, row in sorted(out.items())}


def ragec_metrics(summary: Mapping[str, Any], *, answers: Mapping[str, Any], mode_frequency: Mapping[int, int],
                  agreement: Mapping[str, Any], same_answer: Collection[Any], meter: Any,
                  diagnosis_seconds: float, undiagnosed: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The RAGEC stage's metrics (``reports/metrics/13_ragec.json``, schema ``RagecMetrics``)
    before ``jsonable`` (the reading takes them as they are).

    Args:
        summary: :func:`ragec_summary`, whose keys come first.
        answers: {dataset: {"answers", "wrong", "diagnosed"}}.
        undiagnosed: {reason: count} of the wrong answers without a diagnosis
            (:func:`undiagnosed_reasons`, summed over datasets); {} when every one has one.
        mode_frequency: :func:`mode_frequency_table`; agreement: :func:`tier1_agreement`.
        same_answer: :func:`same_answer_keys` (the questions compared with the critic), counted.
        meter: the ``MeteredLLM`` the diagnosis ran through (its ``cost`` and ``cost_by_dataset``).
        diagnosis_seconds: wall time of the diagnosis, rounded to 0.1 s.
    """
    return {**summary, "answers": answers, "undiagnosed": dict(undiagnosed or {}),
            "mode_frequency": mode_frequency, "agreement": agreement,
            "critic_source": "notebook 08 critic", "same_answer_questions": len(same_answer),
            "cost": meter.cost(), "cost_by_dataset": meter.cost_by_dataset(),
            "seconds": {"diagnosis": round(diagnosis_seconds, 1)}}


def stage_counts(results: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Number of wrong answers blamed on each stage (all four stages present)."""
    c = Counter(r.get("stage") for r in results)
    return {s: int(c[s]) for s in STAGES}


def mode_frequency_table(results: Iterable[Mapping[str, Any]], k: int) -> dict[int, int]:
    """How many LLM-classified errors had a modal type with each frequency 1..k (Table 4)."""
    c = Counter(int(r["mode_freq"]) for r in results if r.get("source") == "llm")
    return {f: int(c[f]) for f in range(1, k + 1)}


def critic_tier1_labels(
    records: Sequence[Mapping[str, Any]], critiques: Sequence[Any]
) -> dict[tuple[str, str], list[str] | None]:
    """(dataset, id) -> the critic's tag1 list, or None when it did not flag an error.

    ``critiques`` are ``critic.CriticParse`` objects or their dicts (as stored per step by the
    correction workflow), aligned with ``records``.
    """
    out: dict[tuple[str, str], list[str] | None] = {}
    for rec, c in zip(records, critiques):
        d = c.to_dict() if hasattr(c, "to_dict") else dict(c or {})
        judgement = d.get("judgement", d.get("Judgement"))
        out[(dataset_name(rec), str(rec.get("id")))] = list(d.get("tag1") or []) if judgement == "Error" else None
    return out


def first_round_critiques(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The critique each correction-workflow result got in its first round ({} when none)."""
    out = []
    for r in results:
        steps = r.get("steps") or []
        out.append(dict(steps[0].get("critic") or {}) if steps else {})
    return out


def tier1_agreement(
    results: Sequence[Mapping[str, Any]],
    critic_tag1: Mapping[tuple[str, str], Sequence[str] | None],
    types: RagecTypes,
    *,
    canonical: Callable[[str], str | None] | None = None,
) -> dict[str, Any]:
    """Agreement of RAGEC with RAG-Critic tier-1 labels on the same wrong answers.

    ``critic_tag1`` maps (dataset, id) to the critic's tag1 list (None or [] when the critic
    judged the answer correct). Two rates over records where the critic flagged an error:

    - side agreement: the RAGEC stage's side (chunking/retrieval/reranking -> retrieval side,
      generation -> response side) equals the side of at least one critic tier-1 label;
    - type agreement: the tier-1 label mapped from the modal E-type is among the critic's.

    Returns:
        {"n", "n_critic_correct", "n_missing", "side_agreement", "type_agreement", "by_stage":
        {stage: {tier1: count}}} (rates are NaN when n = 0).
    """
    canon = canonical or (lambda s: s)
    n = agree_side = agree_type = critic_ok = missing = 0
    by_stage: dict[str, Counter] = {s: Counter() for s in STAGES}
    for r in results:
        key = (str(r.get("dataset")), str(r.get("id")))
        if key not in critic_tag1:
            missing += 1
            continue
        tags = [t for t in (canon(x) for x in (critic_tag1[key] or [])) if t]
        if not tags:
            critic_ok += 1
            continue
        n += 1
        stage = r.get("stage")
        sides = {types.tier1_side.get(t) for t in tags}
        agree_side += int(types.stage_side.get(stage) in sides)
        agree_type += int(bool(r.get("mode")) and types.tier1_of(r["mode"]) in tags)
        for t in tags:
            by_stage.setdefault(stage, Counter())[t] += 1
    nan = float("nan")
    return {
        "n": n,
        "n_critic_correct": critic_ok,
        "n_missing": missing,
        "side_agreement": agree_side / n if n else nan,
        "type_agreement": agree_type / n if n else nan,
        "by_stage": {s: dict(c) for s, c in by_stage.items()},
    }
