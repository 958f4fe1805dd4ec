"""The RAG error-critic: prompts, the critique JSON, a tolerant parser and three critics.

A critic reads a question, the retrieved passages and a model's prediction (never the gold
answer) and writes one JSON object, the critic schema of RAG-Critic section 3.2:

    {"Judgement": "Correct"}
    {"Judgement": "Error", "tag1": [...], "tag2": [...], "tag3": [...], "Error_analysis": "..."}

Our training targets put the three tag lists before the free-text analysis: key order carries no
meaning in JSON, and a generation cut off by the token budget then still carries its labels.

Model output is data: :func:`parse_critic_output` extracts the first JSON object with the
scanner of :mod:`ragcritic_lib.lenient_json` (its FULL repairs), which repairs the usual damage (code
fences, prose around the object, single quotes, trailing commas, Python literals, unquoted keys,
truncation) and never evaluates anything. Labels go through the taxonomy's ``canonical``;
unknown ones are dropped and listed.

Critics:
- :class:`LLMCritic` prompts any :mod:`ragcritic_lib.llm` backend, batched, with passages cut to
  a word budget and a short ``max_new_tokens``.
- :class:`HeuristicCritic` applies grounded rules to question, passages and prediction only (no
  LLM, no gold answer); it is the floor every trained critic must beat.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ragcritic_lib.critic.verdict import CORRECT, ERROR, VERDICT_PREFIX  # noqa: F401 - re-exported
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.lenient_json import FULL, repair_json
from ragcritic_lib.text import FEATURE_STOPWORDS, clean_text, clean_value

Message = dict[str, str]

TARGET_KEYS = ("Judgement", "tag1", "tag2", "tag3", "Error_analysis")
VERDICT_MODES = ("generate", "calibrated")
# Openings a calibrated critic is scored on (VERDICT_PREFIX) and, for an Error verdict, continues from.
# (cut where the tokenizer splits the trained target, so the continuation tokenizes as in training)
ERROR_PREFILL = '{"Judgement": "Error", "tag1":'
CORRECT_TEXT = '{"Judgement": "Correct"}'

# Why: long or adversarial generations must not make parsing slow; a critique is a few hundred
# characters, so anything past this is noise.
MAX_PARSE_CHARS = 20_000
MAX_TAG3 = 10
MAX_TAG3_CHARS = 120
MAX_ANALYSIS_CHARS = 2_000


class TaxonomyLike(Protocol):
    """What the critic needs from :class:`ragcritic_lib.mining.taxonomy.Taxonomy`."""

    tier1: list[str]
    tier2: list[str]

    def parent(self, tier2: str) -> str: ...

    def children(self, tier1: str) -> list[str]: ...

    def canonical(self, label: str) -> str | None: ...


# --------------------------------------------------------------------------------------------
# The parsed critique
# --------------------------------------------------------------------------------------------
@dataclass
class CriticParse:
    """One critique as data.

    Attributes:
        judgement: "Correct", "Error", or None when no judgement could be recovered.
        analysis: the free-text error analysis ("" when absent).
        tag1, tag2: canonical tier-1 / tier-2 labels (unknown ones dropped).
        tag3: free-text atomic tags.
        valid_json: the object decoded as strict JSON without any repair.
        parse_error: None when a judgement was recovered, else a short reason code.
        repairs: what had to be fixed (e.g. "truncated", "single_quotes", "trailing_comma").
        unknown_labels: tag1/tag2 entries the taxonomy does not know (dropped).
        raw: the model text (cut to MAX_PARSE_CHARS).
        margin: calibrated critics only: log P("Error") - log P("Correct") at the verdict.
    """

    judgement: str | None
    analysis: str = ""
    tag1: list[str] = field(default_factory=list)
    tag2: list[str] = field(default_factory=list)
    tag3: list[str] = field(default_factory=list)
    valid_json: bool = False
    parse_error: str | None = None
    repairs: list[str] = field(default_factory=list)
    unknown_labels: list[str] = field(default_factory=list)
    raw: str = ""
    margin: float | None = None

    @property
    def ok(self) -> bool:
        """Whether a judgement was recovered."""
        return self.judgement is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CriticParse:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_critique(self) -> dict[str, Any]:
        """The critic-schema dict (what a downstream planner reads)."""
        if self.judgement == CORRECT:
            return {"Judgement": CORRECT}
        return {
            "Judgement": self.judgement or ERROR,
            "Error_analysis": self.analysis,
            "tag1": list(self.tag1),
            "tag2": list(self.tag2),
            "tag3": list(self.tag3),
        }


# --------------------------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------------------------
def format_critique(
    critique: Mapping[str, Any], *, max_analysis_words: int | None = None, max_tag3: int | None = None
) -> str:
    """Serialize a critique dict in the training key order (tags before analysis).

    Args:
        critique: a dict in the critic schema (keys spelled as in the contract; "Error analysis"
            and lower-case variants are accepted).
        max_analysis_words: cut the analysis to this many words (short targets train faster).
        max_tag3: keep at most this many atomic tags.
    """
    norm = {_norm_key(k): v for k, v in critique.items()}
    judgement = _norm_judgement(norm.get("judgement"))
    if judgement is None:
        raise DataFormatError(f"critique has no valid 'Judgement': {dict(critique)!r:.200}")
    if judgement == CORRECT:
        return json.dumps({"Judgement": CORRECT}, ensure_ascii=False)
    analysis = " ".join(str(norm.get("analysis") or "").split())
    if max_analysis_words is not None:
        words = analysis.split()
        analysis = " ".join(words[:max_analysis_words])
    out = {
        "Judgement": ERROR,
        "tag1": [str(t) for t in _as_str_list(norm.get("tag1"))],
        "tag2": [str(t) for t in _as_str_list(norm.get("tag2"))],
        "tag3": [str(t) for t in _as_str_list(norm.get("tag3"))][:max_tag3],
        "Error_analysis": analysis,
    }
    return json.dumps(out, ensure_ascii=False)


def redact_reference(critique: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """The critique with every reference answer in its analysis and tags replaced by "the answer".

    A critic judges without the reference, so a training target that quotes it teaches the critic
    to invent references (and hand them to the planner). Teachers that saw the reference (an LLM
    judge) may quote it; this removes it. A reference that is part of the prediction is kept, since
    the analysis may quote the prediction.
    """
    from ragcritic_lib.mining.evidence import is_abstention

    prediction = str(record.get("prediction") or "").lower()
    golds = sorted({str(g).strip() for g in record.get("golden_answers") or []
                    if str(g).strip() and not is_abstention(str(g))}, key=len, reverse=True)
    patterns = [re.compile(rf"(?<!\w){re.escape(g)}(?!\w)", re.IGNORECASE) for g in golds
                if g.lower() not in prediction]

    def clean(text: Any) -> Any:
        if not isinstance(text, str):
            return text
        for pat in patterns:
            text = pat.sub("the answer", text)
        return text

    out = dict(critique)
    if patterns:
        out["Error_analysis"] = clean(out.get("Error_analysis", ""))
        for key in ("tag1", "tag2", "tag3"):
            if isinstance(out.get(key), list):
                out[key] = [clean(t) for t in out[key]]
    return out


def critic_target(
    record: Mapping[str, Any], *, max_analysis_words: int | None = None, max_tag3: int | None = None
) -> str:
    """The critique JSON text a perfect critic would write for one record.

    Reads, in order: ``record["critic_target"]`` (dict or JSON text, from stage 04);
    ``record["correct"] is True`` -> {"Judgement": "Correct"}; otherwise the record's own
    ``tag1``/``tag2``/``tag3`` and ``Error_analysis`` (or ``rationale``).

    Raises:
        DataFormatError: naming the record id when none of these is present.
    """
    rid = record.get("id", "?")
    target = record.get("critic_target")
    if target is not None:
        if isinstance(target, str):
            try:
                target = json.loads(target)
            except json.JSONDecodeError:
                raise DataFormatError(f"record {rid}: 'critic_target' is not valid JSON") from None
        if not isinstance(target, Mapping):
            raise DataFormatError(f"record {rid}: 'critic_target' must be an object")
        target = redact_reference(target, record)
        return format_critique(target, max_analysis_words=max_analysis_words, max_tag3=max_tag3)
    if record.get("correct") is True:
        return json.dumps({"Judgement": CORRECT})
    if "tag1" in record or "tag2" in record:
        critique = {
            "Judgement": ERROR,
            "tag1": record.get("tag1", []),
            "tag2": record.get("tag2", []),
            "tag3": record.get("tag3", []),
            "Error_analysis": record.get("Error_analysis", record.get("rationale", "")),
        }
        critique = redact_reference(critique, record)
        return format_critique(critique, max_analysis_words=max_analysis_words, max_tag3=max_tag3)
    raise DataFormatError(
        f"record {rid}: no 'critic_target', no 'correct': true and no 'tag1'/'tag2' keys"
    )


# --------------------------------------------------------------------------------------------
# Prompts (our own wording of RAG-Critic Prompts D and E)
# --------------------------------------------------------------------------------------------
def passage_texts(passages: Sequence[Any]) -> list[str]:
    """Passage strings from either plain strings or {"contents": ...} records."""
    out = []
    for p in passages or []:
        if isinstance(p, Mapping):
            out.append(str(p.get("contents", "")))
        else:
            out.append(str(p))
    return out


def format_passages(passages: Sequence[Any], *, top_k: int = 3, passage_words: int = 30, evidence_words: int = 0,
                    question: str = "", prediction: str = "") -> str:
    """Number the first ``top_k`` passages, each cut to ``passage_words`` words.

    A passage in the FlashRAG "Title\\ntext" form is shown as "Title: text". With
    ``evidence_words`` > 0 the passages are shown as their sentences that best match ``question``
    and ``prediction``, ``evidence_words`` words in all (:mod:`ragcritic_lib.critic.evidence`).
    """
    if evidence_words > 0:
        from ragcritic_lib.critic.evidence import render_evidence

        return render_evidence(question, prediction, passage_texts(passages), top_k=top_k, budget_words=evidence_words)
    lines = []
    for i, text in enumerate(passage_texts(passages)[:top_k], start=1):
        title, _, body = text.partition("\n")
        words = (body if body else title).split()
        cut = " ".join(words[:passage_words]) + (" ..." if len(words) > passage_words else "")
        lines.append(f"[{i}] {title.strip()}: {cut}" if body else f"[{i}] {cut}")
    return "\n".join(lines) if lines else "(no passages)"


def label_menu(taxonomy: TaxonomyLike) -> str:
    """One line per tier-1 label with its tier-2 labels: the compact label list of our prompts."""
    return "\n".join(f"- {t1}: " + " | ".join(taxonomy.children(t1)) for t1 in taxonomy.tier1)


_TRAINED_SYSTEM = "You check the answers of a retrieval-augmented QA system. Reply with one JSON object."

_TRAINED_USER = """Question: {question}
Passages:
{passages}
Answer to check: {prediction}
{labels}
Reply {{"Judgement": "Correct"}} or {{"Judgement": "Error"}} with tag1, tag2, tag3 and Error_analysis."""

_ZEROSHOT_SYSTEM = (
    "You are an error critic for retrieval-augmented generation (RAG). You help improve AI "
    "assistants by pinpointing exactly what went wrong in their answers."
)

_ZEROSHOT_USER = """You are given a [Question], the top retrieved [Passages] and the [Model's Prediction] of a RAG system.

Step 1: decide whether the prediction correctly answers the question. If it does, reply exactly:
{{"Judgement": "Correct"}}

Step 2: if it does not, label the error at three levels, from coarse to fine, and explain it. Every tier-2 label belongs to the tier-1 label written before it:
{labels}
tag3 holds your own short, specific tags. Reply with JSON only, in this shape:
{{"Judgement": "Error", "Error_analysis": "...", "tag1": [...], "tag2": [...], "tag3": [...]}}

Worked example.
[Question]: Which river flows through the capital of Lumeria?
[Passages]:
[1] Lumeria: Lumeria is a coastal country whose largest port is Sandvik ...
[Model's Prediction]: Sandvik
Reply: {{"Judgement": "Error", "Error_analysis": "The passages never say which river crosses the capital, and the answer names the port city instead of a river.", "tag1": ["{ex_t1a}", "{ex_t1b}"], "tag2": ["{ex_t2a}", "{ex_t2b}"], "tag3": ["missing evidence about the river", "answered with a city instead of a river"]}}

Now the real case.
[Question]: {question}
[Passages]:
{passages}
[Model's Prediction]: {prediction}
Reply:"""


def build_critic_messages(
    question: str,
    passages: Sequence[Any],
    prediction: str,
    *,
    taxonomy: TaxonomyLike,
    variant: str = "trained",
    top_k: int = 3,
    passage_words: int = 30,
    label_list: bool = True,
    evidence_words: int = 0,
) -> list[Message]:
    """The chat prompt of the critic. The gold answer is never part of it.

    Args:
        question, passages, prediction: the RAG input and output under review; passages may be
            strings or {"contents": ...} records.
        taxonomy: supplies the label list shown to the model.
        variant: "trained" (compact, used for SFT/DPO and the trained critics) or "zeroshot"
            (the benchmark prompt, RAG-Critic Prompt E in our words, with one worked example).
        top_k, passage_words: passage budget (the first ``top_k`` passages, each cut to
            ``passage_words`` words).
        evidence_words: when > 0, the passages are shown as their best-matching sentences,
            this many words in all, instead of each passage's first words (see
            :func:`format_passages`).
        label_list: show the tier-1/tier-2 label names in the trained prompt (about 200 tokens
            with the SmolLM2 tokenizer; a fine-tuned critic learns them from its targets, so
            turning this off roughly halves the training cost per example). The zero-shot
            prompt always lists them.
    """
    pred = " ".join(str(prediction).split()) or "(empty)"
    ptxt = format_passages(passages, top_k=top_k, passage_words=passage_words, evidence_words=evidence_words,
                           question=question, prediction=pred)
    labels = label_menu(taxonomy)
    if variant == "trained":
        menu = f"\nError labels (tier-1: tier-2 choices):\n{labels}\n" if label_list else ""
        user = _TRAINED_USER.format(question=question, passages=ptxt, prediction=pred, labels=menu)
        return [{"role": "system", "content": _TRAINED_SYSTEM}, {"role": "user", "content": user}]
    if variant == "zeroshot":
        t1a, t1b = taxonomy.tier1[0], taxonomy.tier1[min(3, len(taxonomy.tier1) - 1)]
        c_a, c_b = taxonomy.children(t1a), taxonomy.children(t1b)
        user = _ZEROSHOT_USER.format(
            labels=labels, question=question, passages=ptxt, prediction=pred,
            ex_t1a=t1a, ex_t1b=t1b, ex_t2a=c_a[0] if c_a else t1a, ex_t2b=c_b[-1] if c_b else t1b,
        )
        return [{"role": "system", "content": _ZEROSHOT_SYSTEM}, {"role": "user", "content": user}]
    raise ValueError(f"unknown critic prompt variant {variant!r} (expected 'trained' or 'zeroshot')")


# --------------------------------------------------------------------------------------------
# Tolerant parsing
# --------------------------------------------------------------------------------------------
def _norm_key(key: Any) -> str:
    k = re.sub(r"[^a-z0-9]", "", str(key).lower())
    if k in ("judgement", "judgment", "verdict", "judge"):
        return "judgement"
    if k in ("erroranalysis", "analysis", "erroranalyses", "explanation", "rationale"):
        return "analysis"
    m = re.fullmatch(r"(?:tag|tier|level)(?:s)?([123])(?:tags|labels|label)?", k)
    if m:
        return "tag" + m.group(1)
    return k


_CORRECT_WORDS = frozenset({"correct", "right", "true"})
_ERROR_WORDS = frozenset({"error", "errors", "erroneous", "incorrect", "wrong", "false"})
# Shortest cut-off "Correct" / "Error" still read as the word (a generation stopped mid-word).
_MIN_TRUNCATED = 3


def _norm_judgement(value: Any) -> str | None:
    """Map a written verdict to CORRECT or ERROR by its first whole word; None when unclear.

    Case and punctuation are ignored. The first word must be one of ``_CORRECT_WORDS`` or
    ``_ERROR_WORDS`` ("Correct, but short" is Correct), or "not" followed by a correct-word
    ("not correct" is Error). A value that is nothing but a cut-off start of "correct" or
    "error" of at least three letters ("Corr", "Err") is read as that word. Anything else is
    None: "Corrupted" and "Errorless" are other words, "not wrong" is a double negative, and a
    non-string (JSON ``true``) is not a written verdict.
    """
    if not isinstance(value, str):
        return None
    words = re.findall(r"[a-z]+", value.lower())
    if not words:
        return None
    first = words[0]
    if first in _ERROR_WORDS:
        return ERROR
    if first in _CORRECT_WORDS:
        return CORRECT
    if first == "not":
        return ERROR if len(words) > 1 and words[1] in _CORRECT_WORDS else None
    if len(words) == 1 and len(first) >= _MIN_TRUNCATED:
        if "error".startswith(first):
            return ERROR
        if "correct".startswith(first):
            return CORRECT
    return None


def _repair_json(s: str) -> tuple[list[str], set[str]]:
    """Candidate JSON texts for the object at the start of ``s`` (best first) and the repairs made.

    The shared scanner of :mod:`ragcritic_lib.lenient_json` with all its repairs (:data:`~ragcritic_lib.
    jsontext.FULL`): either quote style, Python literals and bare words, trailing commas, a
    truncated tail closed, and shorter cuts at earlier commas in case the tail itself is damaged.
    """
    repaired = repair_json(s, FULL)
    return list(repaired.candidates), set(repaired.notes)


def _object_starts(text: str, limit: int = 8) -> list[int]:
    return [m.start() for m in re.finditer(r"\{", text)][:limit]


def _decode_first_object(text: str) -> tuple[dict[str, Any] | None, bool, set[str]]:
    """(object, strict, repairs) for the first object that holds a judgement key."""
    fallback: tuple[dict[str, Any] | None, bool, set[str]] = (None, False, set())
    decoder = json.JSONDecoder()
    for start in _object_starts(text):
        try:
            obj, _ = decoder.raw_decode(text, start)
            if isinstance(obj, dict):
                if _find_judgement_dict(obj) is not None:
                    return obj, True, set()
                fallback = fallback if fallback[0] is not None else (obj, True, set())
                continue
        except (ValueError, RecursionError):  # ValueError: JSONDecodeError or a > 4,300-digit integer
            pass
        candidates, notes = _repair_json(text[start:])
        for cand in candidates:
            try:
                obj = json.loads(cand)
            except (ValueError, RecursionError):
                continue
            if isinstance(obj, dict):
                if _find_judgement_dict(obj) is not None:
                    return obj, False, notes
                if fallback[0] is None:
                    fallback = (obj, False, notes)
                break
    return fallback


def _find_judgement_dict(obj: Mapping[str, Any], depth: int = 0) -> Mapping[str, Any] | None:
    """The dict that holds the judgement: the object itself or one level down."""
    if any(_norm_key(k) == "judgement" for k in obj):
        return obj
    if depth == 0:
        for v in obj.values():
            if isinstance(v, Mapping):
                found = _find_judgement_dict(v, 1)
                if found is not None:
                    return found
    return None


def _as_str_list(value: Any) -> list[str]:
    """A label list from a list, a JSON-ish list in a string, or a delimited string."""
    if value is None:
        return []
    if isinstance(value, str):
        v = value.strip()
        if not v:
            return []
        if v.startswith("["):
            cands, _ = _repair_json('{"x":' + v + "}")
            for cand in cands:
                try:
                    inner = clean_value(json.loads(cand).get("x"))  # "\\ud83d" decodes to a lone surrogate
                except (ValueError, AttributeError, RecursionError):
                    continue
                if isinstance(inner, list):
                    return [str(x).strip() for x in inner if isinstance(x, (str, int, float)) and str(x).strip()]
        return [v]
    if isinstance(value, (list, tuple)):
        return [str(x).strip() for x in value if isinstance(x, (str, int, float)) and str(x).strip()]
    return []


def _split_labels(items: list[str]) -> list[str]:
    out = []
    for it in items:
        out.extend(p.strip() for p in re.split(r"[;,|\n]", it) if p.strip())
    return out


def _canonical_labels(
    items: list[str], taxonomy: TaxonomyLike | None, tier: int, unknown: list[str], repairs: set[str]
) -> list[str]:
    if taxonomy is None:
        return list(dict.fromkeys(i for i in items if i))
    allowed = set(taxonomy.tier1 if tier == 1 else taxonomy.tier2)
    other = set(taxonomy.tier2 if tier == 1 else taxonomy.tier1)
    out: list[str] = []
    for item in items:
        canon = taxonomy.canonical(item)
        if canon is None and re.search(r"[;,|\n]", item):
            # A string holding several labels ("A, B"): resolve the pieces one by one.
            out.extend(_canonical_labels(_split_labels([item]), taxonomy, tier, unknown, repairs))
            continue
        if canon in allowed:
            out.append(canon)
        elif canon in other:
            repairs.add(f"tier{3 - tier}_label_in_tag{tier}")
            unknown.append(item)
        else:
            unknown.append(item)
    return list(dict.fromkeys(out))


# One way to read the whitespace after the separator (a quote, if any, then more whitespace): the
# form with two adjacent \s* runs backtracked quadratically on a long run of spaces.
_REGEX_JUDGEMENT = re.compile(r"""judge?ment["'\s]*[:=]\s*(?:["']\s*)?([A-Za-z]+)""", re.IGNORECASE)
_REGEX_BARE = re.compile(r"^\W*(correct|incorrect|error|wrong)\b", re.IGNORECASE)


def _regex_tags(text: str, name: str) -> list[str]:
    m = re.search(name + r"""["'\s]*[:=]\s*\[([^\]]*)\]?""", text, re.IGNORECASE)
    if not m:
        return []
    return [t.strip().strip("'\"").strip() for t in re.split(r"""["']\s*,\s*["']|,(?=\s*["'])""", m.group(1))
            if t.strip().strip("'\"").strip()]


def parse_critic_output(text: str | None, taxonomy: TaxonomyLike | None = None) -> CriticParse:
    """Parse a critic generation into a :class:`CriticParse`; never raises on model text.

    Args:
        text: the raw generation.
        taxonomy: canonicalizes tag1/tag2 labels (None keeps them as written).

    Returns:
        A CriticParse; ``judgement`` is None and ``parse_error`` names the reason ("empty",
        "no_json", "no_judgement", "bad_judgement") when no judgement could be recovered.
    """
    raw = clean_text((text or "")[:MAX_PARSE_CHARS])
    if not raw.strip():
        return CriticParse(judgement=None, parse_error="empty", raw=raw)
    obj, strict, repairs = _decode_first_object(raw)
    # A JSON string cut inside an escaped surrogate pair ("\\ud83d") decodes to a lone surrogate.
    obj = clean_value(obj)
    repairs = set(repairs)
    unknown: list[str] = []
    if obj is None:
        # No object at all: fall back to regular expressions over the text.
        m = _REGEX_JUDGEMENT.search(raw)
        judgement = _norm_judgement(m.group(1)) if m else None
        if judgement is None and m is None:
            bare = _REGEX_BARE.match(raw)
            judgement = _norm_judgement(bare.group(1)) if bare else None
            if judgement is not None:
                repairs.add("bare_word")
        if judgement is None:
            return CriticParse(judgement=None, parse_error="no_json" if m is None else "bad_judgement",
                               raw=raw, repairs=sorted(repairs))
        repairs.add("regex")
        tag1 = _canonical_labels(_regex_tags(raw, "tag1"), taxonomy, 1, unknown, repairs)
        tag2 = _canonical_labels(_regex_tags(raw, "tag2"), taxonomy, 2, unknown, repairs)
        return CriticParse(judgement=judgement, tag1=tag1, tag2=tag2,
                           tag3=_clean_tag3(_regex_tags(raw, "tag3")), valid_json=False,
                           repairs=sorted(repairs), unknown_labels=unknown, raw=raw)
    holder = _find_judgement_dict(obj) or obj
    norm: dict[str, Any] = {}
    for k, v in holder.items():
        norm.setdefault(_norm_key(k), v)
    if "judgement" not in norm:
        return CriticParse(judgement=None, parse_error="no_judgement", valid_json=strict,
                           repairs=sorted(repairs), raw=raw)
    judgement = _norm_judgement(norm["judgement"])
    tag1 = _canonical_labels(_as_str_list(norm.get("tag1")), taxonomy, 1, unknown, repairs)
    tag2 = _canonical_labels(_as_str_list(norm.get("tag2")), taxonomy, 2, unknown, repairs)
    tag3 = _clean_tag3(_split_labels(_as_str_list(norm.get("tag3"))) if isinstance(norm.get("tag3"), str)
                       else _as_str_list(norm.get("tag3")))
    analysis = norm.get("analysis")
    analysis = " ".join(str(analysis).split())[:MAX_ANALYSIS_CHARS] if isinstance(analysis, (str, int, float)) else ""
    return CriticParse(
        judgement=judgement, analysis=analysis, tag1=tag1, tag2=tag2, tag3=tag3, valid_json=strict,
        parse_error=None if judgement else "bad_judgement", repairs=sorted(repairs),
        unknown_labels=unknown, raw=raw,
    )


def _clean_tag3(items: Iterable[str]) -> list[str]:
    out = [" ".join(t.split())[:MAX_TAG3_CHARS] for t in items if str(t).strip()]
    return list(dict.fromkeys(out))[:MAX_TAG3]


# --------------------------------------------------------------------------------------------
# Critics
# --------------------------------------------------------------------------------------------
def record_input(record: Mapping[str, Any]) -> tuple[str, list[str], str]:
    """(question, passage texts, prediction): the only fields a critic may read."""
    for key in ("question", "prediction"):
        if key not in record:
            raise DataFormatError(f"record {record.get('id', '?')}: missing key {key!r}")
    return str(record["question"]), passage_texts(record.get("passages", [])), str(record["prediction"] or "")


class LLMCritic:
    """A critic backed by any :mod:`ragcritic_lib.llm` backend.

    Args:
        llm: an ``LLM`` (HF with a merged critic, vLLM, OpenAI-compatible, CallableLLM).
        taxonomy: label set for prompts and canonicalization.
        variant: "trained" or "zeroshot" prompt (see :func:`build_critic_messages`).
        max_new_tokens: generation budget (a critique with tags first fits in ~96 tokens).
        top_k, passage_words, label_list, evidence_words: prompt options (use the ones the critic
            was trained with).
        max_prompt_tokens: if set, passages are shortened (halving ``passage_words``) until the
            user message fits, using ``llm.count_tokens``.
        name: label in tables.
        verdict: "generate" (the verdict is whatever the critic writes first) or "calibrated":
            the verdict is read off the critic's log-probabilities, Error iff
            log P("Error") - log P("Correct") > ``threshold`` right after ``{"Judgement": "``,
            and only Error critiques are generated, from a prefilled ``"Error"`` opening. A
            small critic trained on few correct answers puts most of its mass on one verdict;
            a threshold fitted on held-out data (:func:`fit_verdict_threshold`) recovers the
            ranking it learned. Needs a backend with ``score`` (hf, vllm).
        threshold: the margin threshold of the calibrated verdict.
        verdict_scorer: another body for the verdict score (the probe of
            :mod:`ragcritic_lib.critic.probe`, the encoder verifier of
            :mod:`ragcritic_lib.critic.verifier`): called with the critic's conversations (system
            and user turns), it returns one score per record (higher: more likely wrong) that
            replaces the margin, so the calibrated verdict thresholds it; the critic still writes
            the tags and critique.
    """

    def __init__(
        self,
        llm: Any,
        taxonomy: TaxonomyLike,
        variant: str = "trained",
        *,
        max_new_tokens: int = 96,
        top_k: int = 3,
        passage_words: int = 30,
        label_list: bool = True,
        evidence_words: int = 0,
        max_prompt_tokens: int | None = None,
        name: str | None = None,
        verdict: str = "generate",
        threshold: float = 0.0,
        verdict_scorer: Any = None,
    ) -> None:
        if variant not in ("trained", "zeroshot"):
            raise ValueError(f"unknown critic prompt variant {variant!r}")
        if verdict not in VERDICT_MODES:
            raise ValueError(f"unknown critic verdict mode {verdict!r}; choose from {VERDICT_MODES}")
        self.verdict, self.threshold = verdict, float(threshold)
        self.verdict_scorer = verdict_scorer
        self.llm, self.taxonomy, self.variant = llm, taxonomy, variant
        self.max_new_tokens, self.top_k, self.passage_words = max_new_tokens, top_k, passage_words
        self.label_list, self.evidence_words = label_list, int(evidence_words)
        self.max_prompt_tokens = max_prompt_tokens
        self.name = name or f"{getattr(llm, 'model', 'llm')}:{variant}"
        self.last_generations: list[Any] = []

    def messages(self, record: Mapping[str, Any]) -> list[Message]:
        question, passages, prediction = record_input(record)
        words, evidence = self.passage_words, self.evidence_words
        while True:
            msgs = build_critic_messages(question, passages, prediction, taxonomy=self.taxonomy,
                                         variant=self.variant, top_k=self.top_k, passage_words=words,
                                         label_list=self.label_list, evidence_words=evidence)
            if self.max_prompt_tokens is None or max(words, evidence) <= 8:
                return msgs
            n = sum(self.llm.count_tokens(m["content"]) for m in msgs)
            if n <= self.max_prompt_tokens:
                return msgs
            words, evidence = words // 2, evidence // 2

    def verdict_margins(self, records: Sequence[Mapping[str, Any]], *, desc: str | None = None) -> list[float]:
        """log P("Error") - log P("Correct") of the verdict, per record (one scoring pass); the
        ``verdict_scorer``'s scores instead when the critic has one."""
        if self.verdict_scorer is not None:
            return [float(v) for v in self.verdict_scorer([self.messages(r) for r in records])]
        prompts = [[*self.messages(r), {"role": "assistant", "content": VERDICT_PREFIX}] for r in records]
        scores = self.llm.score(prompts, [[CORRECT, ERROR]] * len(prompts), desc=desc)
        return [float(e) - float(c) for c, e in scores]

    def critique(self, records: Sequence[Mapping[str, Any]], *, desc: str | None = None) -> list[CriticParse]:
        """Critique all records in one batched ``generate`` call (greedy); calibrated critics
        score every verdict first and generate the Error critiques only."""
        label = desc or f"critic {self.name}"
        if self.verdict == "generate":
            prompts = [self.messages(r) for r in records]
            prefills = [""] * len(prompts)
            margins: list[float | None] = [None] * len(prompts)
            todo = list(range(len(prompts)))
        else:
            margins = list(self.verdict_margins(records, desc=f"{label} (verdicts)"))
            todo = [i for i, m in enumerate(margins) if m > self.threshold]
            prefills = [ERROR_PREFILL] * len(todo)
            prompts = [[*self.messages(records[i]), {"role": "assistant", "content": ERROR_PREFILL}] for i in todo]
        out = [CriticParse(judgement=CORRECT, valid_json=True, raw=CORRECT_TEXT, margin=m) for m in margins]
        for i, parsed in zip(todo, self._generate_critiques(prompts, prefills, label)):
            parsed.margin = margins[i]
            out[i] = parsed
        return out

    def critique_errors(self, records: Sequence[Mapping[str, Any]], *, desc: str | None = None) -> list[CriticParse]:
        """Error critiques (labels and analysis) of answers already known to be wrong: the
        critic continues a prefilled ``"Error"`` verdict, whatever its verdict would be."""
        prompts = [[*self.messages(r), {"role": "assistant", "content": ERROR_PREFILL}] for r in records]
        return self._generate_critiques(prompts, [ERROR_PREFILL] * len(prompts), desc or f"critic {self.name}")

    def _generate_critiques(self, prompts: list[Any], prefills: list[str], desc: str) -> list[CriticParse]:
        from ragcritic_lib.llm import GenParams

        params = GenParams(max_new_tokens=self.max_new_tokens, temperature=0.0)
        gens = self.llm.generate(prompts, params, desc=desc) if prompts else []
        self.last_generations = list(gens)
        out = []
        for g, prefill in zip(gens, prefills):
            parsed = parse_critic_output(prefill + g.text, self.taxonomy)
            if getattr(g, "finish_reason", "stop") == "length" and "hit_token_limit" not in parsed.repairs:
                parsed.repairs = sorted([*parsed.repairs, "hit_token_limit"])
            out.append(parsed)
        return out


def calibrate_verdicts(critic: LLMCritic, records: Sequence[Mapping[str, Any]], *,
                       desc: str | None = None) -> dict[str, Any]:
    """Fit ``critic``'s verdict threshold on held-out critic samples and return the report.

    ``records`` are critic samples with a gold ``judgement`` ("Correct"/"Error"); the critic's
    ``threshold`` is not changed (set it from the report's ``threshold``).
    """
    labels = []
    for i, r in enumerate(records):
        j = _norm_judgement(r.get("judgement"))
        if j is None:
            raise DataFormatError(f"calibration record {r.get('id', i)}: no valid 'judgement'")
        labels.append(j == ERROR)
    margins = critic.verdict_margins(records, desc=desc)
    return {**fit_verdict_threshold(margins, labels), "n": len(records)}


def load_verdict_threshold(path: str | Any) -> float:
    """The fitted threshold stored by a training stage (``verdict_calibration.json``)."""
    from pathlib import Path

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        return float(data["threshold"])
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: verdict calibration not found (run the critic training stage)") from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise DataFormatError(f"{p}: expected a JSON object with a numeric 'threshold'") from None


def fit_verdict_threshold(margins: Sequence[float], is_error: Sequence[bool]) -> dict[str, Any]:
    """The margin threshold with the best balanced accuracy on held-out critic samples.

    Candidates are the midpoints between consecutive distinct margins (plus both ends); ties go
    to the threshold closest to 0 (the uncalibrated argmax). Returns the threshold with the
    held-out accuracy on error and on correct samples, their average, the same numbers for the
    uncalibrated argmax and the AUROC of the margin; with only one class present the threshold
    stays 0 and ``fitted`` is False.
    """
    m = [float(x) for x in margins]
    y = [bool(v) for v in is_error]
    if len(m) != len(y):
        raise ValueError(f"{len(m)} margins but {len(y)} labels")
    n_err, n_ok = sum(y), len(y) - sum(y)

    def rates(t: float) -> tuple[float | None, float | None]:
        err = sum(1 for a, b in zip(m, y) if b and a > t) / n_err if n_err else None
        ok = sum(1 for a, b in zip(m, y) if not b and a <= t) / n_ok if n_ok else None
        return err, ok

    def avg(err: float | None, ok: float | None) -> float | None:
        return None if err is None or ok is None else (err + ok) / 2

    base_err, base_ok = rates(0.0)
    report: dict[str, Any] = {"n_error": n_err, "n_correct": n_ok, "argmax_error_acc": base_err,
                              "argmax_correct_acc": base_ok, "argmax_avg_acc": avg(base_err, base_ok)}
    if not n_err or not n_ok:
        return {**report, "threshold": 0.0, "fitted": False, "error_acc": base_err, "correct_acc": base_ok,
                "avg_acc": avg(base_err, base_ok), "auroc": None}
    pos = [a for a, b in zip(m, y) if b]
    neg = [a for a, b in zip(m, y) if not b]
    auroc = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))
    values = sorted(set(m))
    cands = [values[0] - 1.0] + [(a + b) / 2 for a, b in zip(values, values[1:])] + [values[-1] + 1.0]
    best = max(cands, key=lambda t: (avg(*rates(t)), -abs(t)))
    err, ok = rates(best)
    return {**report, "threshold": round(best, 6), "fitted": True, "error_acc": err, "correct_acc": ok,
            "avg_acc": avg(err, ok), "auroc": auroc}


def _content(tokens: Iterable[str]) -> set[str]:
    return {t for t in tokens if t not in FEATURE_STOPWORDS}


def gold_free_features(question: str, passages: Sequence[str], prediction: str) -> dict[str, Any]:
    """Grounded features that need no gold answer (what a deployed critic could compute).

    Returns keys: prediction_empty, abstained, prediction_tokens, prediction_in_passages,
    prediction_support (share of the prediction's content words found in the passages),
    question_coverage (share of the question's content words found in the passages),
    restates_question, is_title_copy, repetitive.
    """
    from ragcritic_lib.mining.evidence import is_abstention, passage_title
    from ragcritic_lib.evaluation.scoring import normalize_words

    pred_norm = normalize_words(prediction)
    pred_toks = pred_norm.split()
    pas_text = " " + " ".join(normalize_words(p) for p in passages) + " "
    pas_words = set(pas_text.split())
    q_content = _content(normalize_words(question).split())
    p_content = _content(pred_toks)
    titles = {normalize_words(passage_title(p)) for p in passages if "\n" in p}
    ngrams = [tuple(pred_toks[i:i + 2]) for i in range(max(0, len(pred_toks) - 1))]
    return {
        "prediction_empty": not pred_toks,
        "abstained": is_abstention(prediction),
        "prediction_tokens": len(pred_toks),
        "prediction_in_passages": bool(pred_norm) and f" {pred_norm} " in pas_text,
        "prediction_support": (len(p_content & pas_words) / len(p_content)) if p_content else 0.0,
        "question_coverage": (len(q_content & pas_words) / len(q_content)) if q_content else 0.0,
        "restates_question": bool(p_content) and len(p_content - q_content) == 0,
        "is_title_copy": bool(pred_norm) and pred_norm in titles,
        "repetitive": len(ngrams) >= 5 and len(set(ngrams)) <= len(ngrams) // 2,
    }


@dataclass(frozen=True)
class _Rule:
    tag1: str
    tag2: str
    tag3: str
    analysis: str


class HeuristicCritic:
    """A grounded, rule-based critic: no LLM and no gold answer.

    It reads question, passages and prediction only (plus the generator's own ``truncated``
    flag when a record carries it) and applies, in order: empty answer; abstention; looping
    or overlong answer; an answer that only restates the question; an answer not supported by
    the passages (split by whether the passages cover the question at all). Anything else is
    judged Correct. The labels come from the taxonomy and are checked when it is built.

    Args:
        taxonomy: resolves the rule labels to canonical names.
        verbose_tokens: answers longer than this are "overly verbose".
        coverage_threshold: below this share of question words in the passages, retrieval is
            blamed rather than generation.
        support_threshold: an answer whose content words are found in the passages at least
            this often counts as grounded.
    """

    name = "heuristic"

    RULES: dict[str, _Rule] = {
        "empty": _Rule("Incomplete or Missing Response", "Omission of Key Information",
                       "empty answer", "The response gives no answer at all."),
        "abstain_no_evidence": _Rule(
            "Incomplete Information", "Insufficient or Incomplete Information Retrieval",
            "declined to answer", "The response declines to answer and the passages barely touch the question, "
            "so the needed evidence was probably not retrieved."),
        "abstain_with_evidence": _Rule(
            "Incomplete or Missing Response", "Omission of Key Information", "declined to answer",
            "The response declines to answer although the passages discuss the question."),
        "verbose": _Rule("Overly Verbose Response", "Overly Complex and Redundant Response",
                         "overlong answer", "The response is far longer than a short answer and buries or loses it."),
        "repetitive": _Rule("Irrelevant or Off-Topic Response", "Off-Topic and Redundant Responses",
                            "repetitive answer", "The response repeats itself instead of answering."),
        "restates": _Rule("Incomplete or Missing Response", "Lack of Practicality",
                          "restates the question", "The response only repeats words of the question."),
        "unsupported_offtopic_passages": _Rule(
            "Irrelevant Information", "Irrelevant Information Retrieval", "passages off topic",
            "The passages do not cover the question and the answer is not supported by them."),
        "unsupported": _Rule("Inaccurate or Misunderstood Response", "Factual Inaccuracies",
                             "answer not supported by passages",
                             "The answer is not stated in the retrieved passages, so it is likely invented."),
    }

    def __init__(
        self,
        taxonomy: TaxonomyLike,
        *,
        verbose_tokens: int = 40,
        coverage_threshold: float = 0.5,
        support_threshold: float = 0.5,
    ) -> None:
        self.taxonomy = taxonomy
        self.verbose_tokens = verbose_tokens
        self.coverage_threshold = coverage_threshold
        self.support_threshold = support_threshold
        self._labels: dict[str, tuple[str, str]] = {}
        for key, rule in self.RULES.items():
            t1, t2 = taxonomy.canonical(rule.tag1), taxonomy.canonical(rule.tag2)
            if t1 not in taxonomy.tier1 or t2 not in taxonomy.tier2:
                raise ValueError(f"HeuristicCritic rule {key!r}: labels {rule.tag1!r}/{rule.tag2!r} not in taxonomy")
            self._labels[key] = (t1, t2)

    def rule_for(self, record: Mapping[str, Any]) -> str | None:
        """The name of the first rule that fires, or None (judged Correct)."""
        question, passages, prediction = record_input(record)
        f = gold_free_features(question, passages, prediction)
        covered = f["question_coverage"] >= self.coverage_threshold
        if f["prediction_empty"]:
            return "empty"
        if f["abstained"]:
            return "abstain_with_evidence" if covered else "abstain_no_evidence"
        if f["repetitive"]:
            return "repetitive"
        if record.get("truncated") is True or f["prediction_tokens"] > self.verbose_tokens:
            return "verbose"
        if f["restates_question"]:
            return "restates"
        if not f["prediction_in_passages"] and f["prediction_support"] < self.support_threshold:
            return "unsupported" if covered else "unsupported_offtopic_passages"
        return None

    def critique(self, records: Sequence[Mapping[str, Any]]) -> list[CriticParse]:
        out = []
        for r in records:
            key = self.rule_for(r)
            if key is None:
                out.append(CriticParse(judgement=CORRECT, valid_json=True))
                continue
            rule = self.RULES[key]
            t1, t2 = self._labels[key]
            out.append(CriticParse(judgement=ERROR, analysis=rule.analysis, tag1=[t1], tag2=[t2],
                                   tag3=[rule.tag3], valid_json=True))
        return out


def critiques_to_records(parses: Sequence[CriticParse], records: Sequence[Mapping[str, Any]],
                         critic: str) -> list[dict[str, Any]]:
    """Rows for a JSONL file: record id, critic name and the parse (for case studies)."""
    return [{"id": r.get("id"), "critic": critic, **p.to_dict()} for p, r in zip(parses, records)]


def load_trained_critic(params: Mapping[str, Any], critic_dir: str | Any, taxonomy: TaxonomyLike, *,
                        prompt_file: str | Any | None = None, verdict: str = "calibrated",
                        max_new_tokens: int = 96, name: str | None = None) -> LLMCritic:
    """The trained critic exactly as its training stage calibrated it: one loader for every user.

    A critic is three things that must travel together: the checkpoint, the prompt settings it
    was trained with, and the verdict threshold fitted on that checkpoint. The training stages
    ship the critic to ``<critic_dir>/model`` and fit the threshold on it: a LoRA adapter on the
    base it was trained on, or a full fine-tune's compact form rebuilt on that base (both name
    the base by hash; see :mod:`ragcritic_lib.critic.forms`). An older stage output's
    ``<critic_dir>/merged`` checkpoint, else ``<critic_dir>/adapter``, is loaded when there is no
    ``model``. See :func:`ragcritic_lib.runtime.load_trained_model` (a served generator runs
    trained weights on the hf backend).

    Args:
        params: the loaded params.yaml (for the generator backend, device and dtype).
        critic_dir: a critic training stage's output folder, e.g. ``data/critic_dpo``.
        taxonomy: the label set.
        prompt_file: the prompt settings (default: ``data/critic_sft/critic_prompt.json``, which
            the DPO stage trains with too).
        verdict: "calibrated" (threshold from ``<critic_dir>/verdict_calibration.json``) or
            "generate".
        max_new_tokens: generation budget of a critique.
        name: label in tables.

    Raises:
        FileNotFoundError: naming the stage to run when an output is missing.
    """
    from ragcritic_lib import paths, runtime

    critic_dir = paths.require(critic_dir)
    prompt = json.loads(paths.require(prompt_file or paths.stage_dir("critic_sft") / "critic_prompt.json")
                        .read_text(encoding="utf-8"))
    checkpoint = next((critic_dir / d for d in ("model", "merged") if (critic_dir / d).is_dir()), None) \
        or paths.require(critic_dir / "adapter")
    llm = runtime.load_trained_model(params, checkpoint)  # a shipped form, a full checkpoint, or LoRA on its base
    scorer = None  # the verdict's own body, fitted in stage 05_critic_body (critic_body.verdict_body)
    if (critic_dir / "probe").is_dir():
        from ragcritic_lib.critic.probe import ProbeScorer

        scorer = ProbeScorer(critic_dir / "probe")
    elif (critic_dir / "verifier").is_dir():
        from ragcritic_lib.critic.verifier import VerifierScorer

        scorer = VerifierScorer(critic_dir / "verifier")
    threshold = load_verdict_threshold(paths.require(critic_dir / "verdict_calibration.json")) \
        if verdict == "calibrated" else 0.0
    return LLMCritic(llm, taxonomy, "trained",
                     top_k=prompt["top_k"], passage_words=prompt["passage_words"], label_list=prompt["label_list"],
                     evidence_words=int(prompt.get("evidence_words", 0)), max_new_tokens=max_new_tokens, name=name or critic_dir.name, verdict=verdict,
                     threshold=threshold, verdict_scorer=scorer)
