"""Teachers for error mining: rationales (Stage 1), open-set tags (Stage 2) and cluster names.

RAG-Critic uses a strong LLM (Qwen2.5-72B, GPT-4o) for three roles. We keep one interface,
:class:`Teacher`, with two implementations for every role:

* :class:`LLMTeacher` prompts any backend of :mod:`ragcritic_lib.llm` (our own prompts following
  the paper's Prompt B and Prompt C structure, with rotating few-shot examples), parses its
  output tolerantly and counts every parse failure by reason; nothing is ever eval'ed.
* :class:`GroundedTeacher` writes rationales and atomic tags from the grounded evidence
  (:mod:`ragcritic_lib.mining.evidence`) and, on the testbed, from the causes known by construction. It
  varies its wording (synonym pools, templates, case and punctuation variants, all seeded per
  record) so that normalization and clustering see realistic open-set labels.

:func:`teacher_agreement` compares the two on the same records.
"""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib.mining.evidence import compute_evidence, error_causes
from ragcritic_lib.mining.teacher_prompts import (
    NAME_SYSTEM, NAME_TASK, RATIONALE_EXAMPLES, RATIONALE_SYSTEM, RATIONALE_TASK, TAG_EXAMPLES, TAG_SYSTEM, TAG_TASK,
)
from ragcritic_lib.io import read_yaml
from ragcritic_lib.lenient_json import MAX_PARSE_CHARS, loads_lenient, strip_fences
from ragcritic_lib.text import TAG_STOPWORDS

MAX_TAGS_PER_OUTPUT = 10
# New tokens of LLMTeacher.verdicts: the verdict and the opening of the analysis. On the hand
# audit's choosing rows it gave every verdict of the full 160-token rationales in 0.58x their time
# (benchmarks/bench_answer_prefix.py --prompts teacher, reports/benchmarks/teacher_prefix.json).
VERDICT_TOKENS = 48


# ============================================================================================
# Tolerant JSON parsing (model output is data, never code): ragcritic_lib.lenient_json with its
# LIGHT repairs, so a tag output that needs more than those is counted as invalid.
# ============================================================================================


def _all_objects(text: str) -> list[Any]:
    """Every top-level JSON value in the text, in order (for outputs like ``{..}\\n{..}``)."""
    body = strip_fences(text[:MAX_PARSE_CHARS])
    out: list[Any] = []
    pos = 0
    while len(out) < MAX_TAGS_PER_OUTPUT:
        starts = [i for i in (body.find("{", pos), body.find("[", pos)) if i >= 0]
        if not starts:
            break
        start = min(starts)
        value, err = loads_lenient(body[start:])
        if err is not None:
            break
        out.append(value)
        # Advance past this value: find its end by re-serializing is unreliable, so scan brackets.
        pos = _value_end(body, start)
        if pos <= start:
            break
    return out


def _value_end(text: str, start: int) -> int:
    depth, quote, i = 0, None, start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


# ============================================================================================
# Results of the three roles
# ============================================================================================


@dataclass
class Rationale:
    """Stage-1 output: a judgement and an error analysis."""

    judgement: str | None  # "Error" | "Correct" | None (unparseable)
    analysis: str
    valid: bool
    error: str | None = None
    raw: str = ""


@dataclass
class TagOutput:
    """Stage-2 output: open-set tags with explanations."""

    tags: list[dict[str, str]]
    valid: bool
    error: str | None = None
    raw: str = ""

    def tag_names(self) -> list[str] | None:
        """Tag strings, or None for a malformed output (what :func:`normalize_tags` expects)."""
        return [t["tag"] for t in self.tags] if self.valid else None


@dataclass
class ClusterName:
    name: str
    valid: bool
    error: str | None = None
    raw: str = ""


_JUDGEMENTS = {
    "error": "Error", "incorrect": "Error", "wrong": "Error", "false": "Error", "no": "Error",
    "correct": "Correct", "right": "Correct", "true": "Correct", "yes": "Correct",
}
_ANALYSIS_KEYS = ("Error_analysis", "Error analysis", "error_analysis", "error analysis", "analysis",
                  "Analysis", "explanation", "Explanation", "rationale", "reason")
_TAG_KEYS = ("tag", "Tag", "title", "Title", "name", "label", "error_tag", "error_type", "type")
_RESERVED_KEYS = frozenset({"judgement", "judgment", "verdict", "error_analysis", "error analysis", "analysis",
                            "explanation", "rationale", "answer", "result", "status", "error"})
_EXPL_KEYS = ("explanation", "Explanation", "description", "reason", "detail", "details")


def parse_rationale(text: str) -> Rationale:
    """Parse a Stage-1 teacher output into a :class:`Rationale` (never raises)."""
    obj, err = loads_lenient(text)
    if err is not None:
        return Rationale(None, "", False, err, text or "")
    if isinstance(obj, list) and obj and isinstance(obj[0], Mapping):
        obj = obj[0]
    if not isinstance(obj, Mapping):
        return Rationale(None, "", False, "wrong_shape", text)
    raw_j = next((obj[k] for k in ("Judgement", "judgement", "Judgment", "judgment", "verdict") if k in obj), None)
    judgement = _JUDGEMENTS.get(str(raw_j).strip().lower()) if raw_j is not None else None
    analysis = next((obj[k] for k in _ANALYSIS_KEYS if k in obj), "")
    analysis = " ".join(str(analysis).split()) if isinstance(analysis, (str, int, float)) else ""
    if judgement is None:
        return Rationale(None, analysis, False, "bad_judgement", text)
    if judgement == "Error" and (not analysis or analysis.lower() in ("none", "null", "n/a")):
        return Rationale(judgement, "", False, "missing_analysis", text)
    if judgement == "Correct":
        analysis = ""
    return Rationale(judgement, analysis, True, None, text)


def _tag_item(item: Any) -> dict[str, str] | None:
    if isinstance(item, str):
        tag, expl = item, ""
    elif isinstance(item, Mapping):
        tag = next((item[k] for k in _TAG_KEYS if isinstance(item.get(k), str)), None)
        if tag is None and len(item) == 1 and str(next(iter(item))).lower() not in _RESERVED_KEYS:
            (k, v), = item.items()
            tag, expl = str(k), v if isinstance(v, str) else ""
        else:
            expl = next((item[k] for k in _EXPL_KEYS if isinstance(item.get(k), str)), "")
    else:
        return None
    if not isinstance(tag, str) or not tag.strip():
        return None
    return {"tag": " ".join(tag.split()), "explanation": " ".join(str(expl).split())}


def parse_tag_output(text: str) -> TagOutput:
    """Parse a Stage-2 teacher output (a JSON list of ``{"tag","explanation"}``), never raising.

    Accepted shapes: a list of objects or strings; a single object; an object wrapping the list
    (``{"tags": [...]}``); several objects one after another. Failure reasons: ``empty``,
    ``no_json``, ``invalid_json``, ``too_deep``, ``wrong_shape``, ``empty_list``, ``no_valid_tags``.
    """
    obj, err = loads_lenient(text)
    if err is not None:
        return TagOutput([], False, err, text or "")
    items: Any
    if isinstance(obj, list):
        items = obj
    elif isinstance(obj, Mapping):
        wrapped = next((obj[k] for k in ("tags", "Tags", "error_tags", "labels", "errors") if isinstance(obj.get(k), list)), None)
        if wrapped is not None:
            items = wrapped
        elif any(isinstance(obj.get(k), str) for k in _TAG_KEYS):
            items = [o for o in _all_objects(text) if isinstance(o, Mapping)] or [obj]
        elif (len(obj) == 1 and isinstance(next(iter(obj.values())), str)
              and str(next(iter(obj))).lower() not in _RESERVED_KEYS):
            items = [obj]  # {"Missing evidence": "why"}
        else:
            return TagOutput([], False, "wrong_shape", text)
    else:
        return TagOutput([], False, "wrong_shape", text)
    if not items:
        return TagOutput([], False, "empty_list", text)
    tags: list[dict[str, str]] = []
    seen: set[str] = set()
    for item in items[:MAX_TAGS_PER_OUTPUT]:
        parsed = _tag_item(item)
        if parsed is not None and parsed["tag"].lower() not in seen:
            seen.add(parsed["tag"].lower())
            tags.append(parsed)
    if not tags:
        return TagOutput([], False, "no_valid_tags", text)
    return TagOutput(tags, True, None, text)


def parse_cluster_name(text: str, max_words: int = 12) -> ClusterName:
    """Parse ``{"name": ...}``; a bare short line is accepted too (counted as ``plain_text``)."""
    obj, err = loads_lenient(text)
    if err is None:
        if isinstance(obj, Mapping):
            name = next((obj[k] for k in ("name", "Name", "title", "label", "category") if isinstance(obj.get(k), str)), None)
        elif isinstance(obj, list) and obj and isinstance(obj[0], str):
            name = obj[0]
        else:
            name = None
        if name and name.strip() and len(name.split()) <= max_words:
            return ClusterName(" ".join(name.split()).strip(" .\"'"), True, None, text)
        return ClusterName("", False, "wrong_shape", text)
    line = (text or "").strip().splitlines()[0].strip(" .\"'*#:") if (text or "").strip() else ""
    if line and len(line.split()) <= max_words and "{" not in line:
        return ClusterName(line, False, "plain_text", text)
    return ClusterName("", False, err, text or "")


# ============================================================================================
# The interface
# ============================================================================================


@dataclass
class _RoleStats:
    calls: int = 0
    failures: Counter = field(default_factory=Counter)

    def report(self) -> dict[str, Any]:
        n_fail = sum(self.failures.values())
        return {
            "calls": self.calls,
            "failures": n_fail,
            "failure_rate": round(n_fail / self.calls, 4) if self.calls else None,
            "by_reason": dict(sorted(self.failures.items())),
        }


class Teacher(ABC):
    """One teacher for all three roles; each role is batched over records."""

    name: str = "teacher"

    def __init__(self) -> None:
        self._stats = {role: _RoleStats() for role in ("rationale", "tags", "cluster_name")}

    def _count(self, role: str, error: str | None) -> None:
        st = self._stats[role]
        st.calls += 1
        if error is not None:
            st.failures[error] += 1

    def parse_report(self) -> dict[str, dict[str, Any]]:
        """Per role: calls, failures, failure_rate and failures by reason."""
        return {role: st.report() for role, st in self._stats.items()}

    @abstractmethod
    def rationales(self, records: Sequence[Mapping[str, Any]]) -> list[Rationale]:
        """Stage 1: judgement and error analysis per record (the teacher sees the gold answer)."""

    @abstractmethod
    def tags(self, records: Sequence[Mapping[str, Any]]) -> list[TagOutput]:
        """Stage 2: open-set error tags per error record (from ``record["rationale"]``)."""

    @abstractmethod
    def name_clusters(self, member_tags: Sequence[Sequence[str]]) -> list[ClusterName]:
        """Step 3: a short name per cluster from its sampled member tags."""


# ============================================================================================
# LLM teacher (its prompts: ragcritic_lib.mining.teacher_prompts)
# ============================================================================================


def _stable_index(key: str, n: int) -> int:
    # Python's str hash is salted per process; use a seeded RNG on the key instead.
    return random.Random(key).randrange(n)


def format_passages(passages: Sequence[Mapping[str, Any]], max_chars: int = 400) -> str:
    """Numbered passages for teacher prompts, each cut to ``max_chars`` characters."""
    lines = []
    for i, p in enumerate(passages, start=1):
        text = str(p.get("contents", "")).strip()
        if len(text) > max_chars:
            text = text[:max_chars].rstrip() + " ..."
        lines.append(f"[{i}] {text}")
    return "\n".join(lines) if lines else "(no passages)"


class LLMTeacher(Teacher):
    """A teacher backed by any :class:`ragcritic_lib.llm.LLM`.

    Args:
        llm: the backend.
        few_shot: worked examples per prompt (0-3), rotated per record.
        max_new_tokens: generation cap for rationales and tags (names use 32).
        max_passage_chars: passages are cut to this length in Stage-1 prompts.
        share_prefix: encode the turns before a prompt's last user turn (the instruction and the
            worked examples, shared by every prompt of one rotation) once per call, where the
            backend offers it (``share_generation_prefix``); off, every prompt is encoded whole.
            ``benchmarks/bench_answer_prefix.py --prompts teacher`` measures both.
    """

    name = "llm"

    def __init__(self, llm: Any, *, few_shot: int = 2, max_new_tokens: int = 160, max_passage_chars: int = 400,
                 share_prefix: bool = False):
        super().__init__()
        self.llm = llm
        self.few_shot = few_shot
        self.max_new_tokens = max_new_tokens
        self.max_passage_chars = max_passage_chars
        self.share_prefix = share_prefix

    def _params(self, max_new_tokens: int) -> Any:
        from ragcritic_lib.llm import GenParams

        return GenParams(max_new_tokens=max_new_tokens, temperature=0.0)

    @contextmanager
    def _prefix_setting(self) -> Iterator[None]:
        # The backend may be shared with other work of the stage (the pool's generator), so the
        # setting holds for the teacher's own calls only.
        if not hasattr(self.llm, "share_generation_prefix"):
            yield
            return
        before = self.llm.share_generation_prefix
        self.llm.share_generation_prefix = self.share_prefix
        try:
            yield
        finally:
            self.llm.share_generation_prefix = before

    def _generate(self, prompts: list[Any], max_new_tokens: int, desc: str) -> list[Any]:
        with self._prefix_setting():
            return list(self.llm.generate(prompts, self._params(max_new_tokens), desc=desc))

    def _shots(self, examples: Sequence[tuple[str, str]], key: str, wrap: str) -> list[dict[str, str]]:
        msgs: list[dict[str, str]] = []
        if self.few_shot <= 0:
            return msgs
        start = _stable_index(key, len(examples))
        for j in range(min(self.few_shot, len(examples))):
            user, assistant = examples[(start + j) % len(examples)]
            msgs.append({"role": "user", "content": wrap.format(body=user, analysis=user)})
            msgs.append({"role": "assistant", "content": assistant})
        return msgs

    def rationale_messages(self, record: Mapping[str, Any]) -> list[dict[str, str]]:
        body = (
            f"Question: {record['question']}\nPassages:\n"
            f"{format_passages(record.get('passages') or [], self.max_passage_chars)}\n"
            f"Model answer: {record.get('prediction', '')}\n"
            f"Reference answer: {' | '.join(record.get('golden_answers') or [])}"
        )
        key = f"{record.get('id')}|{record.get('pool_member', '')}"
        return (
            [{"role": "system", "content": RATIONALE_SYSTEM}]
            + self._shots(RATIONALE_EXAMPLES, key, RATIONALE_TASK)
            + [{"role": "user", "content": RATIONALE_TASK.format(body=body)}]
        )

    def tag_messages(self, record: Mapping[str, Any]) -> list[dict[str, str]]:
        key = f"{record.get('id')}|{record.get('pool_member', '')}"
        return (
            [{"role": "system", "content": TAG_SYSTEM}]
            + self._shots(TAG_EXAMPLES, key, TAG_TASK)
            + [{"role": "user", "content": TAG_TASK.format(analysis=record.get("rationale", ""))}]
        )

    def name_messages(self, tags: Sequence[str]) -> list[dict[str, str]]:
        listing = "\n".join(f"- {t}" for t in tags)
        return [{"role": "system", "content": NAME_SYSTEM},
                {"role": "user", "content": NAME_TASK.format(tags=listing)}]

    def rationales(self, records: Sequence[Mapping[str, Any]], max_new_tokens: int | None = None) -> list[Rationale]:
        """Stage-1 rationales of ``records``, at most ``max_new_tokens`` (default: the teacher's cap)."""
        gens = self._generate([self.rationale_messages(r) for r in records],
                              max_new_tokens or self.max_new_tokens, "teacher: rationales")
        out = []
        for g in gens:
            parsed = parse_rationale(g.text)
            self._count("rationale", parsed.error)
            out.append(parsed)
        return out

    def verdicts(self, records: Sequence[Mapping[str, Any]]) -> list[Rationale]:
        """:meth:`rationales` cut at :data:`VERDICT_TOKENS` (or the teacher's cap, if smaller), for a
        caller that reads only the verdict, such as the judge audit. The prompt asks for the verdict
        first and greedy decoding writes the same first tokens under any cap, so every verdict
        written within the cap is the one the full rationale holds; the analysis is cut short."""
        return self.rationales(records, max_new_tokens=min(VERDICT_TOKENS, self.max_new_tokens))

    def tags(self, records: Sequence[Mapping[str, Any]]) -> list[TagOutput]:
        gens = self._generate([self.tag_messages(r) for r in records], self.max_new_tokens, "teacher: tags")
        out = []
        for g in gens:
            parsed = parse_tag_output(g.text)
            self._count("tags", parsed.error)
            out.append(parsed)
        return out

    def name_clusters(self, member_tags: Sequence[Sequence[str]]) -> list[ClusterName]:
        gens = self._generate([self.name_messages(t) for t in member_tags], 32, "teacher: cluster names")
        out = []
        for g, tags in zip(gens, member_tags):
            parsed = parse_cluster_name(g.text)
            self._count("cluster_name", parsed.error)
            if not parsed.name:  # fall back to the most common member so every cluster has a name
                parsed.name = _fallback_name(tags)
            out.append(parsed)
        return out


def _fallback_name(tags: Sequence[str]) -> str:
    return Counter(t.lower() for t in tags).most_common(1)[0][0].capitalize() if tags else "Unnamed cluster"


# ============================================================================================
# Grounded teacher: vocabulary (data in teacher_vocabulary.yaml)
# ============================================================================================

# Read at import; listed so that the stages that use the teachers depend on it (pipeline.deps).
DATA_FILES = ("teacher_vocabulary.yaml",)


def _frozen(value: Any) -> Any:
    """Lists as tuples, at any depth (mappings keep the file's order)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


_VOCAB = _frozen(read_yaml(Path(__file__).with_name(DATA_FILES[0])))
# Atomic phrasings per cause.
TAG_VOCABULARY: dict[str, tuple[str, ...]] = _VOCAB["tag_vocabulary"]
CAUSE_NAMES: dict[str, str] = _VOCAB["cause_names"]
_EXPLANATIONS: dict[str, tuple[str, ...]] = _VOCAB["explanations"]
_OPENINGS: tuple[str, ...] = _VOCAB["openings"]
_OPENINGS_EMPTY: tuple[str, ...] = _VOCAB["openings_empty"]
_OPENINGS_UNANSWERABLE: tuple[str, ...] = _VOCAB["openings_unanswerable"]
_CAUSE_SENTENCES: dict[str, tuple[str, ...]] = _VOCAB["cause_sentences"]
_CLOSINGS: tuple[str, ...] = _VOCAB["closings"]


def _restyle(tag: str, rng: random.Random, noise: float) -> str:
    """Surface variants an LLM would produce: Title Case, Sentence case, a trailing period."""
    if rng.random() >= noise:
        return tag
    style = rng.randrange(3)
    if style == 0:
        tag = " ".join(w[:1].upper() + w[1:] for w in tag.split())
    elif style == 1:
        tag = tag[:1].upper() + tag[1:]
    else:
        tag = tag + "."
    return tag


class _SafeDict(dict):
    def __missing__(self, key: str) -> str:
        return ""


class GroundedTeacher(Teacher):
    """Rationales, tags and cluster names from grounded evidence, without an LLM.

    Wording is drawn from synonym pools and templates with an RNG seeded by
    (seed, record id, pool member, role), so the same input always gives the same output and
    different records get different phrasings.

    Args:
        seed: base seed.
        min_tags / max_tags: atomic tags per error record.
        surface_noise: probability that a tag gets a case/punctuation variant.
    """

    name = "grounded"

    def __init__(self, seed: int = 0, *, min_tags: int = 2, max_tags: int = 4, surface_noise: float = 0.2):
        super().__init__()
        if not 1 <= min_tags <= max_tags:
            raise ValueError("need 1 <= min_tags <= max_tags")
        self.seed = seed
        self.min_tags = min_tags
        self.max_tags = max_tags
        self.surface_noise = surface_noise
        self._tag_to_cause = {t: c for c, ts in TAG_VOCABULARY.items() for t in ts}

    def _rng(self, record: Mapping[str, Any], role: str) -> random.Random:
        return random.Random(f"{self.seed}|{record.get('dataset', '')}|{record.get('id')}|{record.get('pool_member', '')}|{role}")

    @staticmethod
    def _evidence(record: Mapping[str, Any]) -> dict[str, Any]:
        ev = record.get("evidence")
        return dict(ev) if isinstance(ev, Mapping) else compute_evidence(record)

    def causes(self, record: Mapping[str, Any]) -> list[str]:
        return error_causes(record, self._evidence(record))

    def rationales(self, records: Sequence[Mapping[str, Any]]) -> list[Rationale]:
        out = []
        for rec in records:
            if rec.get("correct") is True:
                r = Rationale("Correct", "", True)
            else:
                r = Rationale("Error", self._write_rationale(rec), True)
            self._count("rationale", None)
            out.append(r)
        return out

    def _write_rationale(self, rec: Mapping[str, Any]) -> str:
        rng = self._rng(rec, "rationale")
        ev = self._evidence(rec)
        causes = error_causes(rec, ev)
        golds = [str(g) for g in rec.get("golden_answers") or []]
        pred = " ".join(str(rec.get("prediction") or "").split())
        if len(pred) > 120:
            pred = pred[:117].rstrip() + "..."
        ranks = ev.get("gold_passage_ranks") or []
        supporting = (rec.get("metadata") or {}).get("supporting_ids") or []
        recall = ev.get("supporting_recall")
        slots = _SafeDict(
            pred=pred, k=len(rec.get("passages") or []),
            rank=ranks[0] + 1 if ranks else "?",
            where=f"passage [{ranks[0] + 1}]" if ranks else "the knowledge source",
            total=len(supporting), found=round((recall or 0) * len(supporting)),
            trunc=" and was cut off at the length limit" if ev.get("truncated") else "",
            cov=f"{round(100 * (ev.get('key_point_coverage') or 0))}%",
        )
        if "unanswerable_answered" in causes:
            opening = rng.choice(_OPENINGS_UNANSWERABLE)
        elif ev.get("prediction_empty"):
            opening = rng.choice(_OPENINGS_EMPTY)
        else:
            opening = rng.choice(_OPENINGS)
        parts = [opening.format_map(slots)]
        for cause in causes[:3]:
            parts.append(rng.choice(_CAUSE_SENTENCES[cause]).format_map(slots))
        closing = rng.choice(_CLOSINGS).format_map(slots)
        if closing and "unanswerable_answered" not in causes:
            parts.append(closing)
        return " ".join(parts)

    def tags(self, records: Sequence[Mapping[str, Any]]) -> list[TagOutput]:
        out = []
        for rec in records:
            out.append(self._write_tags(rec))
            self._count("tags", None)
        return out

    def _write_tags(self, rec: Mapping[str, Any]) -> TagOutput:
        rng = self._rng(rec, "tags")
        causes = self.causes(rec)
        n = rng.randint(self.min_tags, self.max_tags)
        # Round-robin over causes so the main cause gets most tags but every cause is named.
        picks: list[tuple[str, str]] = []
        pools = {c: list(TAG_VOCABULARY[c]) for c in causes}
        for pool in pools.values():
            rng.shuffle(pool)
        i = 0
        while len(picks) < n and any(pools.values()):
            cause = causes[i % len(causes)]
            if pools[cause]:
                picks.append((cause, pools[cause].pop()))
            i += 1
        tags = [{"tag": _restyle(tag, rng, self.surface_noise),
                 "explanation": rng.choice(_EXPLANATIONS[cause])} for cause, tag in picks]
        return TagOutput(tags, True, None, json.dumps(tags))

    def name_clusters(self, member_tags: Sequence[Sequence[str]]) -> list[ClusterName]:
        out = []
        for tags in member_tags:
            votes = Counter(self._tag_to_cause.get(_plain(t)) for t in tags)
            votes.pop(None, None)
            if votes:
                cause = sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
                out.append(ClusterName(CAUSE_NAMES[cause], True))
            else:
                out.append(ClusterName(_fallback_name(tags), True))
            self._count("cluster_name", None)
        return out


def _plain(tag: str) -> str:
    return " ".join(str(tag).lower().strip(" .").split())


def vocabulary_size() -> int:
    """Distinct atomic phrasings of the grounded teacher."""
    return len({t for ts in TAG_VOCABULARY.values() for t in ts})


# ============================================================================================
# Agreement between teachers
# ============================================================================================

def _content_words(tags: Sequence[str]) -> set[str]:
    from ragcritic_lib.mining.tagging import tag_key

    return {w for t in tags for w in tag_key(t).split() if w not in TAG_STOPWORDS}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if (a or b) else 1.0


def teacher_agreement(
    judged: Sequence[Mapping[str, Any]],
    llm_rationales: Sequence[Rationale],
    llm_tags: Sequence[TagOutput | None],
    grounded_tags: Sequence[TagOutput | None],
) -> dict[str, Any]:
    """How far the LLM teacher agrees with the gold-based judgement and the grounded tags.

    Args:
        judged: the records (with ``correct``), aligned with the other lists.
        llm_rationales: Stage-1 outputs of the LLM teacher.
        llm_tags / grounded_tags: Stage-2 outputs per record (None where not tagged, e.g.
            correct records).

    Returns:
        judgement agreement (overall, on errors, on correct answers), rationale and tag parse
        failure rates, and tag overlap after normalization: exact-tag Jaccard and content-word
        Jaccard, averaged over records both teachers tagged successfully.
    """
    from ragcritic_lib.mining.tagging import tag_key

    n = len(judged)
    agree = {"all": [], "error": [], "correct": []}
    for rec, rat in zip(judged, llm_rationales):
        expected = "Correct" if rec.get("correct") else "Error"
        hit = float(rat.judgement == expected)
        agree["all"].append(hit)
        agree["correct" if rec.get("correct") else "error"].append(hit)
    exact, words = [], []
    tagged = failed = 0
    for lt, gt in zip(llm_tags, grounded_tags):
        if lt is None or gt is None:
            continue
        tagged += 1
        if not lt.valid:
            failed += 1
            continue
        la, ga = [t["tag"] for t in lt.tags], [t["tag"] for t in gt.tags]
        exact.append(_jaccard({tag_key(t) for t in la}, {tag_key(t) for t in ga}))
        words.append(_jaccard(_content_words(la), _content_words(ga)))

    def mean(xs: list[float]) -> float | None:
        return round(sum(xs) / len(xs), 4) if xs else None

    return {
        "records": n,
        "judgement_agreement": mean(agree["all"]),
        "judgement_agreement_on_errors": mean(agree["error"]),
        "judgement_agreement_on_correct": mean(agree["correct"]),
        "rationale_parse_failure_rate": mean([float(not r.valid) for r in llm_rationales]),
        "tagged_records": tagged,
        "tag_parse_failure_rate": round(failed / tagged, 4) if tagged else None,
        "tag_exact_jaccard": mean(exact),
        "tag_word_jaccard": mean(words),
    }



# ============================================================================================
# Construction from params
# ============================================================================================

TEACHER_CHOICES = ("grounded", "llm")
PREFIX_CHOICES = ("whole", "shared")  # how the LLM teacher's prompts are encoded (LLMTeacher.share_prefix)


def teacher_llm(params: Mapping[str, Any], teacher_config: str = "") -> Any:
    """The LLM behind :class:`LLMTeacher`: ``common.generator`` when ``teacher_config`` is empty,
    else the :func:`ragcritic_lib.llm.load_llm` config in that YAML file (e.g. a capable model
    behind an OpenAI-compatible server)."""
    from ragcritic_lib import paths, runtime
    from ragcritic_lib.io import DataFormatError, read_yaml
    from ragcritic_lib.llm import check_llm_config
    from ragcritic_lib.mining.sampling import shared_llm

    if not teacher_config:
        return runtime.load_generator(params)
    path = paths.resolve(teacher_config)
    cfg = read_yaml(path)
    if not isinstance(cfg, Mapping):
        raise DataFormatError(f"{path}: expected a mapping with an LLM config (backend, model, ...)")
    cfg = dict(cfg)
    try:
        check_llm_config(cfg, str(path), check_model_path=False)
    except (TypeError, ValueError) as exc:
        raise DataFormatError(str(exc)) from None
    if cfg.get("backend", "hf") != "openai" and isinstance(cfg.get("model"), str) and paths.resolve(cfg["model"]).exists():
        cfg["model"] = str(paths.resolve(cfg["model"]))
    return shared_llm(cfg)


def build_teachers(
    params: Mapping[str, Any],
    *,
    teacher: str,
    teacher_config: str = "",
    llm_subset: int = 0,
    few_shot: int = 2,
    max_new_tokens: int = 160,
    prefix: str = "whole",
    **grounded_options: Any,
) -> tuple[Teacher, GroundedTeacher, LLMTeacher | None]:
    """(primary teacher, grounded teacher, LLM teacher or None) for a notebook.

    The LLM is loaded only when it is the primary teacher or ``llm_subset > 0``; ``prefix``
    (``whole`` or ``shared``) sets :class:`LLMTeacher`'s ``share_prefix``; ``grounded_options`` go
    to :class:`GroundedTeacher` (min_tags, max_tags, surface_noise).
    """
    if teacher not in TEACHER_CHOICES:
        raise ValueError(f"teacher must be one of {TEACHER_CHOICES}, got {teacher!r}")
    if prefix not in PREFIX_CHOICES:
        raise ValueError(f"teacher_prefix must be one of {PREFIX_CHOICES}, got {prefix!r}")
    grounded = GroundedTeacher(seed=int(params["common"]["seed"]), **grounded_options)
    llm_t = None
    if teacher == "llm" or llm_subset > 0:
        llm_t = LLMTeacher(teacher_llm(params, teacher_config), few_shot=few_shot, max_new_tokens=max_new_tokens,
                           share_prefix=prefix == "shared")
    primary: Teacher = llm_t if teacher == "llm" and llm_t is not None else grounded
    return primary, grounded, llm_t
