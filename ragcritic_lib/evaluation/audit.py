"""The judge audit: hand labels of real answers, and every judge's agreement with them.

``data/audit/audit.jsonl`` holds answers drawn by :mod:`ragcritic_lib.evaluation.audit_draw`,
each labelled ``correct`` or ``wrong`` by a reader with a one-line reason (data/audit/README.md
says how). This module reads and checks that file and measures the judges against it: the gold
rules (``f1``, ``em``, ``acc``, ``truth``, each through :func:`ragcritic_lib.mining.sampling.is_correct`)
and the LLM teacher where its output parses. Rows of the train and dev splits are *choosing*
rows (they may pick the default judge); test rows only report.

A row's *kind* (:func:`answer_kind`) is read from the answer's form against the question's gold
answers and metadata, never from a label or a judge, so the draw can be stratified before anyone
labels it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib.evaluation.scoring import contains_answer, normalize_words
from ragcritic_lib.evaluation.stats import paired_comparison, wilson_interval
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.mining.evidence import is_abstention, passage_title

ROLES = ("choosing", "test")
LABELS = ("correct", "wrong")
SPLIT_ROLE = {"train": "choosing", "dev": "choosing", "test": "test"}
# In the order answer_kind tries them; the first that fits names the row.
KINDS: tuple[str, ...] = (
    "empty", "abstain_unanswerable", "abstain_answerable", "answer_unanswerable", "both_options",
    "superseded", "near_duplicate", "title_copy", "truncated", "terse_gold", "verbose_gold",
    "number_mismatch", "other",
)
# Kinds the draw must hold at least ``min_kind`` times where the answers offer them.
REQUIRED_KINDS: tuple[str, ...] = (
    "verbose_gold", "terse_gold", "abstain_answerable", "abstain_unanswerable", "both_options",
    "superseded", "near_duplicate", "title_copy", "truncated",
)
# An answer holding a gold is terse when it has at most this many words beyond the gold's.
TERSE_EXTRA_WORDS = 2
REQUIRED_KEYS: dict[str, type | tuple[type, ...]] = {
    "audit_id": str, "role": str, "kind": str, "question": str, "golden_answers": list,
    "prediction": str, "label": str, "reason": str,
}


class AuditFormatError(DataFormatError):
    """A labelled audit file is malformed; the message names the file and the line."""


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [str(v) for v in value or [] if str(v).strip()]


def answer_kind(record: Mapping[str, Any]) -> str:
    """The row's kind from its answer's form against its golds and metadata (see :data:`KINDS`).

    Looks at: an empty answer; an abstention, on a question whose golds are abstentions
    (unanswerable) or not; an answer on an unanswerable question; a comparison answer naming the
    gold and a metadata ``other_options`` entry; an ``outdated_answers`` or
    ``distractor_answers`` value in the answer; an answer equal to a retrieved passage's title;
    a generation cut off at its token limit; an answer holding a gold in at most
    :data:`TERSE_EXTRA_WORDS` more words (terse) or more (verbose); a number where the gold has a
    number but no gold. Containment is the scorer's whole-word match; no label is read.
    """
    prediction = str(record.get("prediction") or "")
    golds = _strings(record.get("golden_answers"))
    meta = record.get("metadata") if isinstance(record.get("metadata"), Mapping) else {}
    if not normalize_words(prediction):
        return "empty"
    unanswerable = bool(golds) and all(is_abstention(g) for g in golds)
    if is_abstention(prediction):
        return "abstain_unanswerable" if unanswerable else "abstain_answerable"
    if unanswerable:
        return "answer_unanswerable"
    has_gold = contains_answer(prediction, golds)
    others = _strings(meta.get("other_options"))
    if has_gold and others and contains_answer(prediction, others):
        return "both_options"
    if contains_answer(prediction, _strings(meta.get("outdated_answers"))):
        return "superseded"
    if contains_answer(prediction, _strings(meta.get("distractor_answers"))):
        return "near_duplicate"
    titles = {normalize_words(passage_title(str(p.get("contents", ""))))
              for p in record.get("passages") or [] if isinstance(p, Mapping)}
    if normalize_words(prediction) in titles:
        return "title_copy"
    if record.get("truncated"):
        return "truncated"
    if has_gold:
        shortest = min(len(normalize_words(g).split()) for g in golds if normalize_words(g))
        return "terse_gold" if len(normalize_words(prediction).split()) <= shortest + TERSE_EXTRA_WORDS else "verbose_gold"
    if any(ch.isdigit() for g in golds for ch in g) and any(ch.isdigit() for ch in prediction):
        return "number_mismatch"
    return "other"


# --------------------------------------------------------------------------------------------
# Reading a labelled audit
# --------------------------------------------------------------------------------------------


def check_row(row: Any, *, labelled: bool = True) -> str | None:
    """The first problem of one audit row (None when it is well formed)."""
    if not isinstance(row, dict):
        return f"a row must be a JSON object, got {type(row).__name__}"
    for key, kind in REQUIRED_KEYS.items():
        if key in ("label", "reason") and not labelled:
            continue
        if key not in row:
            return f"missing key {key!r}"
        if not isinstance(row[key], kind):
            return f"{key} must be a {kind.__name__}, got {type(row[key]).__name__}"
    if row["role"] not in ROLES:
        return f"role must be one of {' | '.join(ROLES)}, got {row['role']!r}"
    if row["kind"] not in KINDS:
        return f"kind must be one of {' | '.join(KINDS)}, got {row['kind']!r}"
    if not row["golden_answers"] or not all(isinstance(g, str) for g in row["golden_answers"]):
        return "golden_answers must be a non-empty list of strings"
    if "metadata" in row and not isinstance(row["metadata"], dict):
        return f"metadata must be an object, got {type(row['metadata']).__name__}"
    if labelled:
        if row["label"] not in LABELS:
            return f"label must be one of {' | '.join(LABELS)}, got {row['label']!r}"
        if not row["reason"].strip():
            return "reason must be a one-line reason, got an empty string"
        if "\n" in row["reason"]:
            return "reason must be one line"
    return None


def read_audit(path: str | Path, *, labelled: bool = True) -> list[dict[str, Any]]:
    """The rows of an audit JSONL, each checked by :func:`check_row`; audit ids are unique.

    Raises:
        AuditFormatError: naming the file and line of the first bad row (or an empty file).
    """
    path = Path(path)
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AuditFormatError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        problem = check_row(row, labelled=labelled)
        if problem is None and row["audit_id"] in seen:
            problem = f"audit_id {row['audit_id']!r} already on line {seen[row['audit_id']]}"
        if problem:
            raise AuditFormatError(f"{path}:{lineno}: {problem}")
        seen[row["audit_id"]] = lineno
        rows.append(row)
    if not rows:
        raise AuditFormatError(f"{path}: no audit rows")
    return rows


# --------------------------------------------------------------------------------------------
# Judges against the labels
# --------------------------------------------------------------------------------------------


def rule_verdicts(rows: Sequence[Mapping[str, Any]], metric: str, threshold: float) -> list[bool]:
    """A gold rule's verdict (True = correct) on every row, as ``correct`` is set in notebook 02."""
    from ragcritic_lib.mining.sampling import is_correct

    return [is_correct(r, metric=metric, threshold=threshold) for r in rows]


def teacher_verdicts(rationales: Sequence[Any]) -> list[bool | None]:
    """An LLM teacher's verdict per row from its rationales: None where the output did not parse."""
    return [(r.judgement == "Correct") if r.valid and r.judgement in ("Correct", "Error") else None
            for r in rationales]


def agreement(rows: Sequence[Mapping[str, Any]], verdicts: Sequence[bool | None]) -> dict[str, Any]:
    """One judge against the labels on ``rows`` (a None verdict: the judge could not judge it).

    Returns:
        {"n" (rows judged), "agree", "agreement", "ci_low", "ci_high" (Wilson 95%), "confusion"
        ({"credited_right", "credited_wrong", "rejected_right", "rejected_wrong"}: the judge's
        verdict, then the label), "wrong_by_kind" (disagreements per kind), "wrong_rows"
        (their audit ids)}.
    """
    if len(rows) != len(verdicts):
        raise ValueError(f"{len(rows)} rows but {len(verdicts)} verdicts")
    confusion = {"credited_right": 0, "credited_wrong": 0, "rejected_right": 0, "rejected_wrong": 0}
    wrong_by_kind: dict[str, int] = {}
    wrong_rows: list[str] = []
    for row, verdict in zip(rows, verdicts):
        if verdict is None:
            continue
        right = row["label"] == "correct"
        confusion[f"{'credited' if verdict else 'rejected'}_{'right' if right else 'wrong'}"] += 1
        if bool(verdict) != right:
            wrong_by_kind[row["kind"]] = wrong_by_kind.get(row["kind"], 0) + 1
            wrong_rows.append(row["audit_id"])
    n = sum(confusion.values())
    agree = confusion["credited_right"] + confusion["rejected_wrong"]
    ci = wilson_interval(agree, n)
    return {"n": n, "agree": agree, "agreement": round(agree / n, 4) if n else None,
            "ci_low": round(ci[0], 4) if ci else None, "ci_high": round(ci[1], 4) if ci else None,
            "confusion": confusion, "wrong_by_kind": dict(sorted(wrong_by_kind.items())), "wrong_rows": wrong_rows}


def _role_report(rows: Sequence[Mapping[str, Any]], verdicts: Mapping[str, Sequence[bool | None]], role: str) -> dict[str, Any]:
    idx = [i for i, r in enumerate(rows) if r["role"] == role]
    part = [rows[i] for i in idx]
    per = {j: agreement(part, [v[i] for i in idx]) for j, v in verdicts.items()}
    return {
        "n": len(part),
        "labels": {lab: sum(r["label"] == lab for r in part) for lab in LABELS},
        "kinds": {k: c for k in KINDS if (c := sum(r["kind"] == k for r in part))},
        "agreement": {j: a["agreement"] for j, a in per.items()},
        "agreement_ci_low": {j: a["ci_low"] for j, a in per.items()},
        "agreement_ci_high": {j: a["ci_high"] for j, a in per.items()},
        "judged": {j: a["n"] for j, a in per.items()},
        "confusion": {j: a["confusion"] for j, a in per.items()},
        "wrong_by_kind": {j: a["wrong_by_kind"] for j, a in per.items()},
        "wrong_rows": {j: a["wrong_rows"] for j, a in per.items()},
    }


def best_versus(rows: Sequence[Mapping[str, Any]], verdicts: Mapping[str, Sequence[bool | None]], role: str,
                best: str | None, *, n_boot: int = 2000, seed: int = 0) -> dict[str, dict[str, Any]]:
    """The agreement of ``best`` minus every other judge's on the rows of ``role`` that both judged,
    paired by row: ``{judge: {"n", "delta", "ci_low", "ci_high" (paired bootstrap 95%), "p_value"
    (sign-flip permutation)}}``. A choice of judge stands on it only where ``ci_low`` > 0."""
    if best is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for judge, other in verdicts.items():
        if judge == best:
            continue
        pairs = [(r["label"] == "correct", verdicts[best][i], other[i]) for i, r in enumerate(rows)
                 if r["role"] == role and verdicts[best][i] is not None and other[i] is not None]
        if len(pairs) < 2:
            continue
        c = paired_comparison([float(bool(a) == right) for right, a, _ in pairs],
                              [float(bool(b) == right) for right, _, b in pairs], n_boot=n_boot, seed=seed)
        out[judge] = {"n": c["n"], **{k: round(float(c[k]), 4) for k in ("delta", "ci_low", "ci_high", "p_value")}}
    return out


def audit_report(rows: Sequence[Mapping[str, Any]], verdicts: Mapping[str, Sequence[bool | None]],
                 *, source: str = "") -> dict[str, Any]:
    """Every judge against the audit: the test rows at the top level, the choosing rows under
    ``choosing`` (each as :func:`_role_report`), ``n`` all rows, ``best_choosing`` the judge
    with the highest agreement on the choosing rows among those that judged every one of them,
    and in each part ``best_versus`` (:func:`best_versus`): by how much it beats each other judge."""
    test = _role_report(rows, verdicts, "test")
    choosing = _role_report(rows, verdicts, "choosing")
    full = {j: a for j, a in choosing["agreement"].items()
            if a is not None and choosing["judged"][j] == choosing["n"]}
    best = max(full, key=lambda j: (full[j], -list(verdicts).index(j))) if full else None
    test["best_versus"] = best_versus(rows, verdicts, "test", best)
    choosing["best_versus"] = best_versus(rows, verdicts, "choosing", best)
    return {"exists": True, "source": source, "n": len(rows), "n_test": test["n"], **{k: v for k, v in test.items() if k != "n"},
            "choosing": choosing, "best_choosing": best}


def no_audit(source: str) -> dict[str, Any]:
    """What notebook 02 records when no labelled audit exists."""
    return {"exists": False, "source": source}


def spread_rows(n: int, k: int) -> list[int]:
    """``k`` row indices spread evenly over ``n`` rows (all of them when ``k`` < 0 or ``k`` >= ``n``)."""
    if k < 0 or k >= n:
        return list(range(n))
    return sorted({(i * n) // k for i in range(k)})


def judge_audit(rows: Sequence[Mapping[str, Any]], *, metrics: Sequence[str], threshold: float,
                teacher: Callable[[Sequence[Mapping[str, Any]]], Sequence[Any]] | None = None,
                teacher_rows: int = -1, source: str = "") -> dict[str, Any]:
    """:func:`audit_report` of the gold rules ``metrics`` at ``threshold`` and, when ``teacher``
    is given (a teacher's ``rationales``), the LLM teacher as ``llm_teacher`` on ``teacher_rows``
    rows spread over the file (-1: all; the others count as not judged)."""
    verdicts: dict[str, Sequence[bool | None]] = {m: rule_verdicts(rows, m, threshold) for m in metrics}
    if teacher is not None:
        idx = spread_rows(len(rows), teacher_rows)
        judged: list[bool | None] = [None] * len(rows)
        for i, v in zip(idx, teacher_verdicts(teacher([rows[i] for i in idx]) if idx else [])):
            judged[i] = v
        verdicts["llm_teacher"] = judged
    return audit_report(rows, verdicts, source=source)
