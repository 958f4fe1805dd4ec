"""The methods RAG-Critic is compared with, run in the same harness (notebook 09).

Submodules, one per paper: :mod:`.ragec` (RAGEC error classification), :mod:`.crag` (CRAG),
:mod:`.simrag` (SIM-RAG), :mod:`.self_refine` (Self-Refine) and :mod:`.repair` (RePAIR).
This module holds what they share: light text helpers, cost accounting around LLM calls, and
the comparison table with paired bootstrap intervals against standard RAG.

Nothing heavy is imported here; each function imports what it needs.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

# A compact English stopword list: enough to turn questions into "concepts" and keywords.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom whose why will with would you your yours yourself
    yourselves name named called known one first many much did does tell give find list""".split()
)

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits)."""
    return _TOKEN.findall((text or "").lower())


def content_words(text: str) -> list[str]:
    """Distinct non-stopword tokens of ``text`` in order of first appearance.

    Used as the query "concepts" of RAGEC's coverage rule and as CRAG's keyword query.
    """
    seen: OrderedDict[str, None] = OrderedDict()
    for tok in tokens(text):
        tok = tok.split("'")[0]
        if len(tok) < 2 and not tok.isdigit():
            continue
        if tok in STOPWORDS:
            continue
        seen.setdefault(tok, None)
    return list(seen)


def overlap_fraction(query: str, text: str) -> float:
    """Share of the query's content words that occur in ``text`` (0 when the query has none)."""
    concepts = content_words(query)
    if not concepts:
        return 0.0
    have = set(tokens(text))
    return sum(1 for c in concepts if c in have) / len(concepts)


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences on ., ! or ? followed by a capital or digit (no model)."""
    parts = [p.strip() for p in _SENT_SPLIT.split((text or "").strip())]
    return [p for p in parts if p]


def split_title(contents: str) -> tuple[str, str]:
    """FlashRAG ``contents`` is "Title\\ntext"; return (title, text) (title "" when absent)."""
    if "\n" in contents:
        title, body = contents.split("\n", 1)
        return title.strip(), body.strip()
    return "", contents.strip()


def contains_answer(text: str, golds: Sequence[str]) -> bool:
    """True when a normalized gold answer occurs in ``text`` as whole words (FlashRAG style)."""
    from ragcritic_lib.metrics import contains_answer as _contains

    return _contains(text, list(golds))


def is_wrong(record: Mapping[str, Any], *, metric: str = "em", threshold: float = 1.0) -> bool:
    """Whether a scored answer counts as an error: the judged ``correct`` flag when present,
    else ``record[metric] < threshold``."""
    if "correct" in record and record["correct"] is not None:
        return not bool(record["correct"])
    return float(record.get(metric, 0.0)) < threshold


def score_records(records: Iterable[Mapping[str, Any]], *, pred_key: str = "prediction") -> list[dict]:
    """Copy records adding FlashRAG metrics em / f1 / acc of ``record[pred_key]`` vs the golds."""
    from ragcritic_lib.metrics import score_prediction

    out = []
    for rec in records:
        r = dict(rec)
        r.update(score_prediction(str(r.get(pred_key) or ""), list(r.get("golden_answers") or [])))
        out.append(r)
    return out


def question_type(record: Mapping[str, Any]) -> str:
    """The question type from metadata ("trivia" for the trivia set), "unknown" when absent."""
    meta = record.get("metadata") or {}
    return str(meta.get("type") or "unknown")


def dataset_name(record: Mapping[str, Any]) -> str:
    meta = record.get("metadata") or {}
    return str(record.get("dataset") or meta.get("dataset") or "unknown")


# ----------------------------------------------------------------------------------- cost
_COST_KEYS = ("calls", "cached_calls", "prompt_tokens", "completion_tokens", "seconds")


def _snapshot(llm: Any) -> dict[str, float]:
    stats = getattr(llm, "stats", None)
    snap = stats.snapshot() if stats is not None and hasattr(stats, "snapshot") else {}
    return {k: float(snap.get(k, 0) or 0) for k in _COST_KEYS}


@contextmanager
def track_cost(llms: Sequence[Any] | Any, into: dict[str, Any]):
    """Accumulate the LLM usage and wall time of a block into ``into``.

    ``into`` gets calls, cached_calls, prompt_tokens, completion_tokens, llm_seconds and
    wall_seconds, added to any values already there (so a method run in parts sums up).
    """
    group = list(llms) if isinstance(llms, (list, tuple)) else [llms]
    # Several names may point at one backend object: count each once.
    unique = list({id(x): x for x in group if x is not None}.values())
    before = [_snapshot(x) for x in unique]
    t0 = time.perf_counter()
    try:
        yield into
    finally:
        wall = time.perf_counter() - t0
        for llm, b in zip(unique, before):
            a = _snapshot(llm)
            for k in _COST_KEYS:
                key = "llm_seconds" if k == "seconds" else k
                into[key] = into.get(key, 0) + (a[k] - b[k])
        into["wall_seconds"] = into.get("wall_seconds", 0.0) + wall


# ------------------------------------------------------------------------- comparison
METRICS = ("em", "f1", "acc")


def _key(rec: Mapping[str, Any]) -> tuple[str, str]:
    return dataset_name(rec), str(rec["id"])


def comparison_table(
    results: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    baseline: str = "standard_rag",
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    by_type: bool = True,
    costs: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per (dataset, question type, method) with EM/F1/acc and the change vs baseline.

    Each method's records must carry em/f1/acc (see :func:`score_records`), an ``id`` and a
    dataset name. Differences are paired on the questions both the method and the baseline
    answered, with a bootstrap interval over those questions. Rows for question type "all"
    come first per dataset; per-type rows follow when ``by_type``.

    Raises:
        KeyError: when ``baseline`` is not among ``results``.
    """
    from ragcritic_lib.stats import bootstrap_ci, paired_bootstrap_diff

    if baseline not in results:
        raise KeyError(f"baseline method {baseline!r} missing from results ({sorted(results)})")
    base = {_key(r): r for r in results[baseline]}
    datasets = sorted({k[0] for k in base})
    rows: list[dict[str, Any]] = []
    for ds in datasets:
        types = sorted({question_type(r) for k, r in base.items() if k[0] == ds})
        groups = ["all"] + (types if by_type and len(types) > 1 else [])
        for qtype in groups:
            for method, recs in results.items():
                sel = [
                    r for r in recs
                    if dataset_name(r) == ds and (qtype == "all" or question_type(r) == qtype)
                ]
                if not sel:
                    continue
                row: dict[str, Any] = {"dataset": ds, "type": qtype, "method": method, "n": len(sel)}
                for m in METRICS:
                    row[m] = sum(float(r.get(m, 0.0)) for r in sel) / len(sel)
                ci = bootstrap_ci([float(r.get("f1", 0.0)) for r in sel], n_boot, alpha, seed)
                row["f1_low"], row["f1_high"] = ci["low"], ci["high"]
                paired = [(r, base[_key(r)]) for r in sel if _key(r) in base]
                for m in ("em", "f1"):
                    if method == baseline or not paired:
                        row[f"d_{m}"] = row[f"d_{m}_low"] = row[f"d_{m}_high"] = 0.0 if method == baseline else float("nan")
                        continue
                    d = paired_bootstrap_diff(
                        [float(x.get(m, 0.0)) for x, _ in paired],
                        [float(y.get(m, 0.0)) for _, y in paired],
                        n_boot, alpha, seed,
                    )
                    row[f"d_{m}"], row[f"d_{m}_low"], row[f"d_{m}_high"] = d["diff"], d["low"], d["high"]
                    if m == "f1":
                        row["p_f1"] = d["p_value"]
                rows.append(row)
    if costs:
        for row in rows:
            if row["type"] == "all":
                c = costs.get(row["method"], {})
                for k in ("calls", "prompt_tokens", "completion_tokens", "wall_seconds"):
                    if k in c:
                        row[k] = c[k]
    return rows


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, digits: int = 3) -> str:
    """Render rows as a GitHub Markdown table (floats rounded), without extra dependencies."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if v != v else f"{v:.{digits}f}"
        return "" if v is None else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


__all__ = [
    "STOPWORDS", "tokens", "content_words", "overlap_fraction", "split_sentences", "split_title",
    "contains_answer", "is_wrong", "score_records", "question_type", "dataset_name", "track_cost",
    "comparison_table", "markdown_table", "METRICS",
]
