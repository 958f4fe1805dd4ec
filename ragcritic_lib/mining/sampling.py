"""Error response mining (RAG-Critic section 3.1.1, Step 1): pool sampling and judging.

A *pool* of LLM configurations answers the training questions with retrieval. On the embedded
default the pool is several configurations of the packaged model and our retrievers (decoding
temperature, prompt variant, retriever kind, top-k); with GPUs it is the paper's models through
vLLM or OpenAI-compatible servers (``configs/pools/paper_vllm.yaml``). Sampling is resumable:
each finished record is appended to a JSONL log keyed by (dataset, question id, pool member), so
a killed run restarts where it stopped with nothing lost and nothing duplicated.

Judging marks each answer correct or wrong from the gold answers (configurable metric and
threshold), attaches grounded evidence and a teacher's error rationale, and splits the result
into the error pool D_error and the correct pool.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.mining.evidence import compute_evidence, is_abstention
from ragcritic_lib.io import DataFormatError, append_jsonl, read_jsonl_tolerant, read_yaml, write_jsonl

log = logging.getLogger(__name__)

PLACEHOLDER = "USER_TO_FILL"
DEFAULT_STOP = ("\nQuestion:", "<|im_end|>")
_MEMBER_KEYS = {
    "name", "llm", "temperature", "top_p", "max_new_tokens", "prompt_variant", "retriever",
    "top_k", "seed", "stop", "max_passage_words",
}
_POOL_KEYS = {"inherit_generator", "defaults", "members", "description"}


# ============================================================================================
# The pool
# ============================================================================================


@dataclass(frozen=True)
class PoolMember:
    """One sampling configuration of the pool.

    Attributes:
        name: unique name, stored in every record as ``pool_member``.
        llm: config for :func:`ragcritic_lib.llm.load_llm`.
        temperature / top_p / max_new_tokens / seed / stop: decoding parameters.
        prompt_variant: a variant of :func:`ragcritic_lib.retrieval.rag.build_rag_messages`.
        retriever: overrides of the retriever config (e.g. ``{"kind": "bm25"}``); ignored for the
            ``closed_book`` variant.
        top_k: passages given to the model.
        max_passage_words: each passage is cut to this many words in the prompt.
    """

    name: str
    llm: dict[str, Any]
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    prompt_variant: str = "default"
    retriever: dict[str, Any] = field(default_factory=dict)
    top_k: int = 5
    seed: int = 0
    stop: tuple[str, ...] = DEFAULT_STOP
    max_passage_words: int = 60

    @property
    def retriever_key(self) -> str:
        """Identity of the retriever this member uses (members with equal keys share searches)."""
        return json.dumps(self.retriever, sort_keys=True)

    @property
    def fingerprint(self) -> str:
        """Hash of everything that changes this member's answers (name excluded).

        A local model or adapter folder enters by its base name, not its path: its weights are
        hashed by content in :func:`sampling_context`, so a clone at another path matches.
        """
        cfg = {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}
        if self.llm.get("backend") != "openai":
            cfg["llm"] = {k: (Path(str(v)).name if k in ("model", "adapter") and v and Path(str(v)).is_dir() else v)
                          for k, v in self.llm.items()}
        return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @property
    def needs_retrieval(self) -> bool:
        return self.prompt_variant != "closed_book"

    def gen_params(self) -> Any:
        from ragcritic_lib.llm import GenParams

        return GenParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                         top_p=self.top_p, stop=self.stop, seed=self.seed)

    @property
    def model_label(self) -> str:
        """The model's name for tables: a served name, or a local folder's base name."""
        model = str(self.llm.get("model", ""))
        return model if self.llm.get("backend") == "openai" else Path(model).name

    def describe(self) -> dict[str, Any]:
        """A flat summary for tables."""
        return {
            "name": self.name, "model": self.model_label, "backend": self.llm.get("backend", ""),
            "temperature": self.temperature, "prompt_variant": self.prompt_variant,
            "retriever": self.retriever.get("kind", "default") if self.needs_retrieval else "none",
            "top_k": self.top_k if self.needs_retrieval else 0,
        }


def _merge(*dicts: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for d in dicts:
        out.update(d or {})
    return out


def _resolve_model(llm: dict[str, Any]) -> dict[str, Any]:
    """Local model/adapter paths relative to the repository root (server names are kept)."""
    llm = dict(llm)
    if llm.get("backend", "hf") != "openai":
        for key in ("model", "adapter"):
            value = llm.get(key)
            if isinstance(value, str) and value and PLACEHOLDER not in value:
                resolved = paths.resolve(value)
                if resolved.exists():
                    llm[key] = str(resolved)
    return llm


def _find_placeholder(obj: Any) -> bool:
    if isinstance(obj, str):
        return PLACEHOLDER in obj
    if isinstance(obj, Mapping):
        return any(_find_placeholder(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_find_placeholder(v) for v in obj)
    return False


def pool_from_dict(
    raw: Mapping[str, Any],
    *,
    base_llm: Mapping[str, Any] | None = None,
    base_retriever: Mapping[str, Any] | None = None,
    source: str = "<pool>",
    check_placeholders: bool = True,
) -> list[PoolMember]:
    """Build pool members from a parsed pool file.

    ``defaults`` apply to every member; with ``inherit_generator: true`` each member's ``llm``
    starts from ``base_llm`` (params ``common.generator``). Member ``retriever`` overrides are
    merged over ``defaults.retriever`` only; the caller applies them to its base retriever config
    (``base_retriever`` is used to validate the merged keys when given).

    Raises:
        DataFormatError: naming the file, member and key of the first problem; also for
            ``USER_TO_FILL`` placeholders left in a file meant to run.
    """
    from ragcritic_lib.llm import check_llm_config
    from ragcritic_lib.retrieval.rag import PROMPT_VARIANTS

    if not isinstance(raw, Mapping) or not isinstance(raw.get("members"), list) or not raw["members"]:
        raise DataFormatError(f"{source}: a pool file needs a non-empty 'members' list")
    unknown = sorted(set(raw) - _POOL_KEYS)
    if unknown:
        raise DataFormatError(f"{source}: unknown top-level key {unknown[0]!r} (allowed: {sorted(_POOL_KEYS)})")
    if not isinstance(raw.get("defaults") or {}, Mapping):
        raise DataFormatError(f"{source}: 'defaults' must be a mapping")
    defaults = dict(raw.get("defaults") or {})
    bad = sorted(set(defaults) - (_MEMBER_KEYS - {"name"}))
    if bad:
        raise DataFormatError(f"{source}: defaults: unknown key {bad[0]!r}")
    _check_nested(defaults, f"{source}: defaults")
    inherit = raw.get("inherit_generator", False)
    if not isinstance(inherit, bool):
        raise DataFormatError(f"{source}: 'inherit_generator' must be true or false, got {inherit!r}")
    members: list[PoolMember] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw["members"]):
        where = f"{source}: members[{i}]"
        if not isinstance(entry, Mapping):
            raise DataFormatError(f"{where}: must be a mapping")
        bad = sorted(set(entry) - _MEMBER_KEYS)
        if bad:
            raise DataFormatError(f"{where}: unknown key {bad[0]!r} (allowed: {sorted(_MEMBER_KEYS)})")
        _check_nested(entry, where)
        spec = _merge(defaults, entry)
        spec["llm"] = _merge(base_llm if inherit else None, defaults.get("llm"), entry.get("llm"))
        spec["retriever"] = _merge(defaults.get("retriever"), entry.get("retriever"))
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip():
            raise DataFormatError(f"{where}: 'name' must be a non-empty string")
        where = f"{source}: member {name!r}"
        if name in seen:
            raise DataFormatError(f"{where}: duplicate name")
        seen.add(name)
        if not spec["llm"].get("model"):
            raise DataFormatError(f"{where}: llm.model is missing")
        if check_placeholders and _find_placeholder(spec["llm"]):
            raise DataFormatError(f"{where}: llm config still contains {PLACEHOLDER}; fill in your model paths/servers")
        variant = spec.get("prompt_variant", "default")
        if variant not in PROMPT_VARIANTS:
            raise DataFormatError(f"{where}: prompt_variant {variant!r} not in {PROMPT_VARIANTS}")
        try:
            # The model folder may be one a stage builds later; the rest is checked before any sampling.
            check_llm_config(spec["llm"], f"{where}: llm", check_model_path=False)
        except (TypeError, ValueError) as exc:
            raise DataFormatError(str(exc)) from None
        stop = spec.get("stop", DEFAULT_STOP)
        if not isinstance(stop, (list, tuple)) or not all(isinstance(x, str) for x in stop):
            raise DataFormatError(f"{where}: 'stop' must be a list of strings, got {stop!r}")
        for key in ("seed", "top_k", "max_new_tokens", "max_passage_words"):
            if key in spec and (isinstance(spec[key], bool) or not isinstance(spec[key], int)):
                raise DataFormatError(f"{where}: {key!r} must be an integer, got {spec[key]!r}")
        try:
            member = PoolMember(
                name=name, llm=_resolve_model(spec["llm"]),
                temperature=float(spec.get("temperature", 0.0)), top_p=float(spec.get("top_p", 1.0)),
                max_new_tokens=int(spec.get("max_new_tokens", 48)), prompt_variant=variant,
                retriever=dict(spec["retriever"]), top_k=int(spec.get("top_k", 5)),
                seed=int(spec.get("seed", 0)), stop=tuple(spec.get("stop", DEFAULT_STOP)),
                max_passage_words=int(spec.get("max_passage_words", 60)),
            )
        except (TypeError, ValueError) as exc:
            raise DataFormatError(f"{where}: {exc}") from None
        if member.top_k < 1 or member.max_new_tokens < 1 or member.temperature < 0:
            raise DataFormatError(f"{where}: top_k and max_new_tokens must be >= 1, temperature >= 0")
        if not 0.0 < member.top_p <= 1.0:
            raise DataFormatError(f"{where}: top_p must lie in (0, 1], got {member.top_p!r}")
        if base_retriever is not None and member.needs_retrieval:
            from ragcritic_lib.retrieval import validate_retriever_cfg

            try:
                validate_retriever_cfg(_merge(base_retriever, member.retriever))
            except ValueError as exc:
                raise DataFormatError(f"{where}: retriever: {exc}") from None
        members.append(member)
    return members


def _check_nested(spec: Mapping[str, Any], where: str) -> None:
    """A member's (or the defaults') ``llm`` and ``retriever`` blocks are mappings."""
    for key in ("llm", "retriever"):
        if spec.get(key) is not None and not isinstance(spec[key], Mapping):
            raise DataFormatError(f"{where}: {key!r} must be a mapping of settings, got {spec[key]!r}")


def load_pool(
    path: str | Path,
    *,
    base_llm: Mapping[str, Any] | None = None,
    base_retriever: Mapping[str, Any] | None = None,
    check_placeholders: bool = True,
) -> list[PoolMember]:
    """Load a pool file (``configs/pools/*.yaml``); see :func:`pool_from_dict`."""
    path = paths.resolve(path)
    return pool_from_dict(read_yaml(path) or {}, base_llm=base_llm, base_retriever=base_retriever,
                          source=str(path), check_placeholders=check_placeholders)


# ============================================================================================
# Resumable sampling
# ============================================================================================


def dataset_of(record: Mapping[str, Any]) -> str:
    meta = record.get("metadata") if isinstance(record.get("metadata"), Mapping) else {}
    return str(record.get("dataset") or meta.get("dataset") or "")


def record_key(record: Mapping[str, Any], member: str | None = None) -> tuple[str, str, str]:
    """(dataset, question id, pool member): the unit of resumption."""
    return dataset_of(record), str(record["id"]), str(member if member is not None else record.get("pool_member", ""))


RetrieverSource = Mapping[str, Any] | Callable[[PoolMember], Any]


def _retriever_for(retrievers: RetrieverSource, member: PoolMember) -> Any:
    if callable(retrievers) and not isinstance(retrievers, Mapping):
        return retrievers(member)
    for key in (member.retriever_key, member.retriever.get("kind"), "default"):
        if key is not None and key in retrievers:
            return retrievers[key]
    raise KeyError(f"no retriever for pool member {member.name!r} (key {member.retriever_key})")


# Fixed inputs for rendering a prompt variant: the rendered messages change exactly when the
# prompt builder's own text (system prompt, worked examples, layout) changes.
_TEMPLATE_PROBE_QUESTION = "Template probe: which river flows through Porto?"
_TEMPLATE_PROBE_PASSAGES = ("Probe title one\nProbe passage one.", "Probe title two\nProbe passage two.")
# Retriever settings that cannot change which passages come back.
_RETRIEVER_COSMETIC = ("show_progress", "cache", "num_threads")


def prompt_template_fingerprint(variant: str, max_passage_words: int) -> str:
    """Hash of a prompt variant rendered on fixed probe inputs (the template, not the question)."""
    from ragcritic_lib.retrieval.rag import build_rag_messages

    messages = build_rag_messages(_TEMPLATE_PROBE_QUESTION, list(_TEMPLATE_PROBE_PASSAGES), variant=variant,
                                  max_passage_words=max_passage_words)
    return hashlib.sha256(json.dumps(messages, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]


def weights_fingerprint(llm_cfg: Mapping[str, Any]) -> dict[str, str | None]:
    """Content fingerprints of a member's local model and adapter folders.

    Uses the LLM cache's fingerprint, so weights replaced at the same path count as a new model.
    Served models (``backend: openai``) have no local weights: their name is all we can see.
    """
    from ragcritic_lib.llm import _fingerprint

    if llm_cfg.get("backend") == "openai":
        return {"weights": None, "adapter_weights": None}
    resolved = paths.resolve_llm_paths(llm_cfg)
    model, adapter = resolved.get("model"), resolved.get("adapter")
    return {"weights": _fingerprint(model) if model else None,
            "adapter_weights": _fingerprint(adapter) if adapter else None}


def _model_folder_fingerprint(name: str) -> str:
    """A retrieval model folder by content (wherever the repository lives), or its name."""
    from ragcritic_lib.retrieval import model_fingerprint

    return model_fingerprint(name) if Path(name).is_dir() else f"name:{name}"


def retriever_identity(retriever: Any) -> dict[str, Any]:
    """What shapes a retriever's hits: its full config and its corpus content.

    Retrievers from :func:`ragcritic_lib.runtime.load_retriever` carry ``provenance``
    (``{"config": ..., "corpus_path": ...}``): the config is completed with the defaults, its
    encoder/reranker folders are replaced by content fingerprints, and the corpus file is hashed
    (streamed, once per file version and process). Other retrievers are identified by their
    type and, when they expose a ``corpus``, its content fingerprint.
    """
    from ragcritic_lib.io import file_sha256
    from ragcritic_lib.retrieval import corpus_fingerprint, validate_retriever_cfg

    ident: dict[str, Any] = {"type": type(retriever).__name__}
    provenance = getattr(retriever, "provenance", None)
    if isinstance(provenance, Mapping):
        if provenance.get("config") is not None:
            cfg = validate_retriever_cfg(provenance["config"])
            for key in _RETRIEVER_COSMETIC:
                cfg.pop(key, None)
            if cfg["kind"] in ("dense", "hybrid"):
                cfg["encoder"] = _model_folder_fingerprint(str(cfg["encoder"]))
            else:
                cfg.pop("encoder")  # unused by bm25: moving or replacing it changes nothing
            cfg["reranker"] = _model_folder_fingerprint(str(cfg["reranker"])) if cfg["rerank"] else None
            ident["config"] = cfg
        if provenance.get("corpus_path") is not None:
            ident["corpus"] = file_sha256(provenance["corpus_path"])
    elif getattr(retriever, "corpus", None) is not None:
        ident["corpus"] = corpus_fingerprint(retriever.corpus)
    return ident


def sampling_context(member: PoolMember, retriever: Any | None = None) -> str:
    """Hash of everything besides the question that shapes a member's samples.

    The member's config, its model weights (by content), its prompt template and, for members
    that retrieve, the retriever's identity (see :func:`retriever_identity`).
    """
    payload = {
        "member": member.fingerprint,
        "weights": weights_fingerprint(member.llm),
        "template": prompt_template_fingerprint(member.prompt_variant, member.max_passage_words),
        "retriever": retriever_identity(retriever) if retriever is not None else None,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def sample_fingerprint(record: Mapping[str, Any], member: PoolMember, context: str | None = None) -> str:
    """What a logged sample must match to be reused: the sampling context and the question.

    Args:
        record: the dataset record (question and golds are hashed).
        member: the pool member.
        context: :func:`sampling_context` for this member and its retriever (computed without
            a retriever when omitted).
    """
    context = context if context is not None else sampling_context(member)
    payload = json.dumps([context, record.get("question"), record.get("golden_answers")],
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


_SHARED_LLMS: dict[str, Any] = {}


def shared_llm(cfg: Mapping[str, Any]) -> Any:
    """:func:`ragcritic_lib.llm.load_llm`, memoized per config for the life of the process."""
    from ragcritic_lib.llm import load_llm

    key = json.dumps(cfg, sort_keys=True, default=str)
    if key not in _SHARED_LLMS:
        _SHARED_LLMS[key] = load_llm(paths.resolve_llm_paths(cfg))
    return _SHARED_LLMS[key]


def sample_error_responses(
    records: Sequence[Mapping[str, Any]],
    pool: Sequence[PoolMember],
    retrievers: RetrieverSource,
    *,
    out_path: str | Path,
    chunk_size: int = 32,
    llm_factory: Callable[[Mapping[str, Any]], Any] | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Let every pool member answer every question, appending finished records to a log.

    The log at ``out_path`` is read first (a torn last line from a killed run is dropped); a
    (dataset, question id, pool member) key already present is skipped when its logged
    ``sample_fingerprint`` still matches (see :func:`sampling_context`: same member config,
    model weights, prompt template, retriever config and corpus; same question and golds), so
    changing any of them re-samples instead of reusing stale answers. Each member
    works through its pending questions in chunks of ``chunk_size`` (one batched retrieval and
    one batched ``generate`` call per chunk) and appends the chunk's records as soon as they
    are done. When the run completes and the log holds stale or foreign records, it is
    compacted (atomically) to exactly the returned records.

    Args:
        records: dataset records (each with id, question, golden_answers, metadata.dataset).
        pool: the pool members.
        retrievers: ``{member.retriever_key or kind or "default": Retriever}`` or a function
            ``member -> Retriever``.
        out_path: the JSONL log (also the stage output).
        llm_factory: builds an LLM from a member's config (default :func:`shared_llm`); tests
            pass one returning a ``CallableLLM``.

    Returns:
        The records for the requested (question, member) pairs, in question order within member
        order, exactly once each.
    """
    from ragcritic_lib.retrieval.rag import run_standard_rag

    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    ids = [record_key(r, "") for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError("sample_error_responses: duplicate (dataset, id) among the input records")
    names = [m.name for m in pool]
    if len(set(names)) != len(names):
        raise ValueError("sample_error_responses: duplicate pool member names")
    out_path = Path(out_path)
    logged = read_jsonl_tolerant(out_path, repair=True)  # a torn tail is cut before appending
    # The retriever is part of a sample's identity, so it is opened even when all is logged.
    member_retrievers = {m.name: _retriever_for(retrievers, m) if m.needs_retrieval else None for m in pool}
    contexts = {m.name: sampling_context(m, member_retrievers[m.name]) for m in pool}
    wanted = {record_key(r, m.name): sample_fingerprint(r, m, contexts[m.name]) for m in pool for r in records}
    done: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in logged:
        key = record_key(row)
        # A prompt the server refused has no answer to keep: it is asked again on a re-run.
        if wanted.get(key) == row.get("sample_fingerprint") and "generation_error" not in row:
            done.setdefault(key, row)
    llm_factory = llm_factory or shared_llm
    llms: dict[str, Any] = {}

    for member in pool:
        pending = [r for r in records if record_key(r, member.name) not in done]
        if not pending:
            continue
        log.info("pool member %s: %d of %d questions to sample", member.name, len(pending), len(records))
        llm_key = json.dumps(member.llm, sort_keys=True, default=str)
        if llm_key not in llms:
            llms[llm_key] = llm_factory(member.llm)
        llm = llms[llm_key]
        retriever = member_retrievers[member.name]
        for start in range(0, len(pending), chunk_size):
            chunk = pending[start:start + chunk_size]
            hits = (retriever.search([r["question"] for r in chunk], member.top_k)
                    if retriever is not None else None)
            rows = run_standard_rag(
                llm, chunk, retriever=None, k=member.top_k, variant=member.prompt_variant,
                gen_params=member.gen_params(), max_passage_words=member.max_passage_words,
                hits=hits, desc=f"{member.name}" if progress else None,
            )
            for src, row in zip(chunk, rows):
                row["dataset"] = dataset_of(row)
                row["pool_member"] = member.name
                row["sample_fingerprint"] = wanted[record_key(src, member.name)]
                row["sampling"] = {"temperature": member.temperature, "top_k": member.top_k,
                                   "retriever": member.retriever.get("kind", "default") if retriever else "none",
                                   "model": member.model_label}
            append_jsonl(out_path, rows)
            for row in rows:
                done[record_key(row)] = row
    result = [done[record_key(r, m.name)] for m in pool for r in records]
    if len(result) != sum(1 for _ in read_jsonl_tolerant(out_path)):
        write_jsonl(out_path, result)  # drop stale / foreign rows once everything is done
    return result


# ============================================================================================
# Judging
# ============================================================================================

METRICS = ("em", "f1", "acc")
# Judges of ``correct``: the scorer's metrics and the truth judge (ragcritic_lib.evaluation.truth),
# which also reads the question's metadata for competing values.
JUDGE_METRICS = (*METRICS, "truth")


def is_correct(record: Mapping[str, Any], *, metric: str = "f1", threshold: float = 0.5,
               abstain_ok_if_unanswerable: bool = True) -> bool:
    """Gold-based correctness: ``record[metric] >= threshold``.

    With ``abstain_ok_if_unanswerable`` an abstention counts as correct whatever its wording
    ("I don't know" vs "insufficient information") when the gold answer itself is an abstention
    (the testbed's unanswerable questions). Trivia questions whose gold merely does not occur in
    the corpus keep their real gold, so abstaining on them is wrong.

    ``metric="truth"`` is the truth judge (1 or 0 from gold and metadata, computed here whether or
    not the record carries a score), so any threshold in (0, 1] reads it the same way.
    """
    if metric not in JUDGE_METRICS:
        raise ValueError(f"metric must be one of {JUDGE_METRICS}, got {metric!r}")
    golds = [str(g) for g in record.get("golden_answers") or []]
    if abstain_ok_if_unanswerable and golds and all(is_abstention(g) for g in golds):
        if is_abstention(str(record.get("prediction") or "")):
            return True
    if metric == "truth":
        from ragcritic_lib.evaluation.truth import truth_score

        return truth_score(str(record.get("prediction") or ""), golds, record.get("metadata")) >= threshold
    if metric not in record:
        from ragcritic_lib.evaluation.scoring import score_prediction

        return score_prediction(str(record.get("prediction") or ""), record.get("golden_answers") or [])[metric] >= threshold
    return float(record[metric]) >= threshold


def judge_answer(record: Mapping[str, Any], prediction: str, *, metric: str, threshold: float) -> bool:
    """:func:`is_correct` of another answer to ``record``'s question: the record's gold answers and
    metadata with ``prediction``, never the scores the record carries for its own answer."""
    fresh = {"prediction": str(prediction or ""), "golden_answers": list(record.get("golden_answers") or []),
             "metadata": record.get("metadata") or {}}
    return is_correct(fresh, metric=metric, threshold=threshold)


def judge_records(
    records: Sequence[Mapping[str, Any]],
    *,
    metric: str = "f1",
    threshold: float = 0.5,
    passage_meta: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Add ``correct`` (gold-based) and grounded ``evidence`` to every record (no LLM)."""
    out = []
    for rec in records:
        row = dict(rec)
        row["correct"] = is_correct(rec, metric=metric, threshold=threshold)
        row["evidence"] = compute_evidence(rec, passage_meta=passage_meta)
        out.append(row)
    return out


def attach_rationales(
    judged: Sequence[Mapping[str, Any]],
    teacher: Any,
    *,
    fallback: Any | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Ask the teacher for an error rationale on every wrong record.

    A teacher output that does not parse (or that judges the wrong answer "Correct") is replaced
    by the fallback teacher's rationale when one is given, so every error record has a
    rationale; ``rationale_source`` says which teacher wrote it, ``teacher_judgement`` keeps the
    primary teacher's verdict. Correct records get an empty rationale (source ``"none"``).

    Returns:
        (records, report with counts of rationales per source and of fallbacks by reason).
    """
    out = [dict(r) for r in judged]
    errors = [r for r in out if not r.get("correct")]
    report: Counter[str] = Counter()
    if errors:
        primary = teacher.rationales(errors)
        need_fallback = []
        for rec, rat in zip(errors, primary):
            rec["teacher_judgement"] = rat.judgement
            if rat.valid and rat.judgement == "Error":
                rec["rationale"], rec["rationale_source"] = rat.analysis, teacher.name
            else:
                report[f"fallback_{rat.error or 'judged_correct'}"] += 1
                need_fallback.append(rec)
        if need_fallback and fallback is not None:
            for rec, rat in zip(need_fallback, fallback.rationales(need_fallback)):
                rec["rationale"], rec["rationale_source"] = rat.analysis, fallback.name
        for rec in need_fallback:
            rec.setdefault("rationale", "")
            rec.setdefault("rationale_source", "none")
    for rec in out:
        if rec.get("correct"):
            rec["rationale"], rec["rationale_source"] = "", "none"
        report[f"source_{rec['rationale_source']}"] += 1
    return out, dict(sorted(report.items()))


def split_pools(judged: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(D_error, correct pool). A sample whose prompt the server refused (``generation_error``)
    holds no answer, so it joins neither."""
    answered = [r for r in judged if "generation_error" not in r]
    errors = [dict(r) for r in answered if not r.get("correct")]
    correct = [dict(r) for r in answered if r.get("correct")]
    return errors, correct


# ============================================================================================
# Summaries
# ============================================================================================


def _rate(num: float, den: float) -> float | None:
    return round(num / den, 4) if den else None


def pool_summary(judged: Sequence[Mapping[str, Any]], by: str = "pool_member") -> dict[str, dict[str, Any]]:
    """Per group (pool member by default): n, errors, error rate, EM/F1, prefix and truncation rates."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in judged:
        value = r.get(by, (r.get("metadata") or {}).get(by))
        groups.setdefault(str(value), []).append(r)
    out = {}
    for name, rows in sorted(groups.items()):
        n = len(rows)
        errs = sum(1 for r in rows if not r.get("correct"))
        out[name] = {
            "n": n, "errors": errs, "error_rate": _rate(errs, n),
            "em": _rate(sum(float(r.get("em", 0)) for r in rows), n),
            "f1": _rate(sum(float(r.get("f1", 0)) for r in rows), n),
            "followed_prefix": _rate(sum(bool(r.get("followed_prefix")) for r in rows), n),
            "truncated": _rate(sum(bool(r.get("truncated")) for r in rows), n),
            "abstained": _rate(sum(bool((r.get("evidence") or {}).get("abstained")) for r in rows), n),
            "gold_in_passages": _rate(sum(bool((r.get("evidence") or {}).get("gold_in_passages")) for r in rows), n),
        }
    return out


def source_statistics(judged: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Table-1-style rows: per dataset and question type, questions, samples, errors, correct."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    questions: dict[tuple[str, str], set[str]] = {}
    for r in judged:
        key = (dataset_of(r), str((r.get("metadata") or {}).get("type", "unknown")))
        row = rows.setdefault(key, {"dataset": key[0], "type": key[1], "questions": 0, "samples": 0,
                                    "errors": 0, "correct": 0})
        questions.setdefault(key, set()).add(str(r["id"]))
        row["samples"] += 1
        row["errors" if not r.get("correct") else "correct"] += 1
    for key, row in rows.items():
        row["questions"] = len(questions[key])
        row["error_rate"] = _rate(row["errors"], row["samples"])
    return [rows[k] for k in sorted(rows)]


def passage_metadata(corpus_records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Passage id -> its ``metadata`` dict (for testbed evidence), skipping passages without one."""
    return {str(r["id"]): dict(r["metadata"]) for r in corpus_records if isinstance(r.get("metadata"), Mapping)}


def stratified_subset(judged: Sequence[Mapping[str, Any]], n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """A seeded subset of ``n`` records, half wrong and half correct where possible, spread over
    datasets and pool members (round-robin over the groups), for exercising an LLM teacher."""
    rng = random.Random(f"{seed}|subset")
    groups: dict[tuple[str, str, bool], list[Mapping[str, Any]]] = {}
    for r in judged:
        groups.setdefault((dataset_of(r), str(r.get("pool_member")), bool(r.get("correct"))), []).append(r)
    for key in groups:
        rng.shuffle(groups[key])
    order = sorted(groups, key=lambda k: (k[2], k[0], k[1]))  # wrong answers first
    out: list[dict[str, Any]] = []
    while len(out) < n and any(groups[k] for k in order):
        for key in order:
            if groups[key] and len(out) < n:
                out.append(dict(groups[key].pop()))
    return out


def error_sampling_metrics(
    pool: Sequence[Any],
    judged: Sequence[Mapping[str, Any]],
    errors: Sequence[Mapping[str, Any]],
    correct: Sequence[Mapping[str, Any]],
    *,
    judge_metric: str,
    judge_threshold: float,
    rationale_sources: Mapping[str, Any],
    teacher: str,
    primary: Any,
    llm_teacher: Any | None,
    llm_teacher_agreement: Mapping[str, Any],
    judge_audit: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Notebook 02's metrics: the pool, the judged samples and both pools, per member and dataset,
    Table-1 source statistics, where the rationales came from and how the teachers parsed.

    Args:
        pool: the pool members (each with ``describe()``).
        judged: every judged sample; ``errors`` and ``correct`` are its two pools.
        judge_metric, judge_threshold: the judge's setting.
        rationale_sources: :func:`attach_rationales`'s report.
        teacher: the configured teacher (``"grounded"`` or ``"llm"``).
        primary, llm_teacher: the teachers used (each with ``parse_report()``); ``llm_teacher``
            None when no LLM teacher ran.
        llm_teacher_agreement: the LLM teacher's agreement with the gold judgement on its subset.
        judge_audit: every judge against the hand-labelled audit
            (:func:`ragcritic_lib.evaluation.audit.judge_audit`, or ``no_audit``), kept as
            ``judge.audit``; omitted when None.
    """
    by_member = pool_summary(judged)
    return {
        "pool_size": len(pool),
        "pool_members": [m.describe() for m in pool],
        "samples": len(judged),
        "errors": len(errors),
        "correct": len(correct),
        "error_rate": round(len(errors) / max(1, len(judged)), 4),
        "judge": {"metric": judge_metric, "threshold": judge_threshold,
                  **({"audit": dict(judge_audit)} if judge_audit is not None else {})},
        "error_rate_by_member": {m: v["error_rate"] for m, v in by_member.items()},
        "by_member": by_member,
        "by_dataset": pool_summary(judged, by="dataset"),
        "source_statistics": source_statistics(judged),
        "rationale_sources": rationale_sources,
        "teacher": teacher,
        "teacher_parse": {"primary": primary.parse_report()["rationale"],
                          "llm_subset": llm_teacher.parse_report()["rationale"] if llm_teacher else None},
        "llm_teacher_agreement": llm_teacher_agreement,
    }
