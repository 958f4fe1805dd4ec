"""Critic training data at the scale a small critic needs, and the real answers it is judged on.

Three sources of training samples, all from *train* questions and counted separately:

- ``pool``: the answers the LLM pool wrote in stage ``error_sampling`` (right and wrong ones).
- ``reference``: the question's reference answer presented as the answer under review, a right
  example. Training data only: no reference answer is ever shown to a critic at test time.
- ``counterfactual``: a wrong answer built from the question and its passages without any
  dataset-specific rule: another option the question names, another number of the same shape
  from the passages (or the reference's number shifted), or another name-like span of the
  passages. It is the kind of error a reader of those passages could make.

Every wrong sample is labelled from the *observed* cause of its error
(:func:`ragcritic_lib.mining.evidence.error_causes`, mapped to taxonomy labels by
``data/taxonomy/known_causes.yaml``): the first tier-1 and tier-2 label of each cause. No
target quotes a reference answer.

Real answers for dev and test come from stage ``retrieval_rag`` (the generator's answers to the
dev and test questions, with and without retrieval), judged by the project's correctness rule.

Style guard: :func:`style_features` describes an answer by its surface only (length, digits,
abstention, cut-off, punctuation); :func:`style_auroc` measures how well those features alone
separate right from wrong answers, on the training set (a shortcut check) and on the benchmark
(the style-only baseline the critics must beat).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.critic.critics import CORRECT, ERROR, format_critique, passage_texts
from ragcritic_lib.critic.data import check_no_leakage, make_sample, question_key
from ragcritic_lib.evaluation.scoring import contains_answer, normalize_words, score_prediction
from ragcritic_lib.mining.evidence import compute_evidence, error_causes, is_abstention
from ragcritic_lib.io import DataFormatError

SOURCES = ("pool", "reference", "counterfactual")

_ANALYSIS = {
    "option": "The answer picks an option the passages do not support for what the question asks.",
    "number": "The answer gives a number that the passages do not state for what the question asks.",
    "span": "The answer takes a value from the passages that belongs to something other than what the question asks.",
}
_NUM = re.compile(r"\d[\d,]*(?:\.\d+)?")
_NAME = re.compile(r"\b[A-Z][\w'-]*(?: (?:of |de |the )?[A-Z][\w'-]*){0,3}")


def _name_spans(text: str) -> list[str]:
    """Name-like spans (capitalized word runs) of a text; a one-word span only where it also
    occurs inside a sentence (so sentence-initial words like "Some" are not names)."""
    out = []
    for line in str(text).split("\n"):
        for m in _NAME.finditer(line):
            span = m.group(0)
            if " " not in span and not re.search(r"[a-z,;]\s+" + re.escape(span) + r"\b", line):
                continue
            out.append(span)
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------------------------------
# Labels from observed causes
# --------------------------------------------------------------------------------------------
def cause_labels(causes: Sequence[str], known_causes: Mapping[str, Mapping[str, Any]],
                 *, max_labels: int = 2) -> tuple[list[str], list[str]]:
    """(tag1, tag2): the first tier-1 and tier-2 label of each cause, in cause order, deduplicated."""
    tag1: list[str] = []
    tag2: list[str] = []
    for cause in causes:
        spec = known_causes.get(cause)
        if spec is None:
            raise DataFormatError(f"cause {cause!r} has no entry in the known-causes file")
        for tier, out in ((1, tag1), (2, tag2)):
            labels = spec.get(f"tier{tier}") or []
            if labels and labels[0] not in out:
                out.append(labels[0])
    return tag1[:max_labels], tag2[:max_labels]


def observed_causes(record: Mapping[str, Any]) -> list[str]:
    """The causes of a wrong answer as the evidence shows them (reads the reference: labels only)."""
    return error_causes(record, compute_evidence(record))


def labelled_target(record: Mapping[str, Any], known_causes: Mapping[str, Mapping[str, Any]], *,
                    analysis: str = "", max_analysis_words: int | None = None) -> tuple[str, list[str]]:
    """(critique JSON text, causes) of a wrong answer, labelled from its observed causes."""
    causes = observed_causes(record)
    tag1, tag2 = cause_labels(causes, known_causes)
    text = format_critique({"Judgement": ERROR, "tag1": tag1, "tag2": tag2, "tag3": [],
                            "Error_analysis": analysis}, max_analysis_words=max_analysis_words, max_tag3=0)
    return text, causes


# --------------------------------------------------------------------------------------------
# Counterfactual answers
# --------------------------------------------------------------------------------------------
def question_options(question: str) -> list[str]:
    """Options a question names: "..., X or Y?" or a list after the question mark ("? A, B, C")."""
    q = " ".join(str(question).split())
    head, mark, tail = q.rpartition("?")
    if mark and tail.strip() and "," in tail:
        return [o.strip(" .") for o in tail.split(",") if o.strip(" .")]
    m = re.search(r"(?:[:,]|\b(?:between|earlier|later|larger|smaller|more|fewer|older|younger|first))\s+"
                  r"([^,?:]+?)\s+or\s+([^,?]+?)\s*\?", q)
    if m:
        return [m.group(1).strip(), m.group(2).strip()]
    return []


def _shift_number(text: str, rng: random.Random) -> str | None:
    m = _NUM.search(text)
    if not m:
        return None
    raw = m.group(0).replace(",", "")
    try:
        value = float(raw)
    except ValueError:
        return None
    if raw.isdigit() and len(raw) == 4 and 1000 <= value <= 2100:
        new = str(int(value) + rng.choice([-1, 1]) * rng.randint(1, 15))
    elif "." in raw:
        new = f"{value * rng.uniform(0.5, 1.6):.{len(raw.split('.')[1])}f}"
    else:
        new = str(max(1, int(round(value * rng.choice([0.6, 0.75, 0.8, 1.2, 1.25, 1.5])))))
    return None if new == raw else text[:m.start()] + new + text[m.end():]


def counterfactual_answers(question: str, golds: Sequence[str], passages: Sequence[str], *,
                           rng: random.Random, max_answers: int = 1) -> list[tuple[str, str]]:
    """Up to ``max_answers`` wrong answers ``(answer, kind)`` of the same shape as the reference.

    Kinds: ``option`` (another option the question names), ``span`` (another number or
    name-like span of the passages, not in the question), ``number`` (the reference's number
    shifted). None of them contains a reference answer.
    """
    golds = [g for g in golds if normalize_words(g)]
    if not golds:
        return []
    ref = golds[0]
    qnorm = f" {normalize_words(question)} "

    def wrong(a: str) -> bool:
        return bool(normalize_words(a)) and not contains_answer(a, golds) and \
            not any(contains_answer(g, [a]) for g in golds) and not is_abstention(a)

    cands: list[tuple[str, str]] = []
    options = question_options(question)
    if options and any(contains_answer(o, golds) or contains_answer(ref, [o]) for o in options):
        cands += [(o, "option") for o in options if wrong(o)]
    text = " ".join(passage_texts(passages))
    if _NUM.search(ref):
        shape = len(_NUM.search(ref).group(0).replace(",", ""))
        nums = [n for n in dict.fromkeys(_NUM.findall(text)) if len(n.replace(",", "")) == shape]
        spans = [ref.replace(_NUM.search(ref).group(0), n, 1) for n in nums]
        shifted = _shift_number(ref, rng)
        cands += [(s, "span") for s in spans if wrong(s) and f" {normalize_words(s)} " not in qnorm]
        if shifted and wrong(shifted):
            cands.append((shifted, "number"))
    elif not options:
        n_words = len(ref.split())
        titles = {normalize_words(p.partition("\n")[0]) for p in passage_texts(passages)}
        names = [n for n in _name_spans("\n".join(passage_texts(passages)))
                 if f" {normalize_words(n)} " not in qnorm and normalize_words(n) not in titles]
        same = [n for n in names if len(n.split()) == n_words] or names
        cands += [(n, "span") for n in same if wrong(n)]
    seen: set[str] = set()
    unique = [(a, k) for a, k in cands if not (normalize_words(a) in seen or seen.add(normalize_words(a)))]
    by_kind: dict[str, list[tuple[str, str]]] = {}
    for a, k in unique:
        by_kind.setdefault(k, []).append((a, k))
    out: list[tuple[str, str]] = []
    kinds = [k for k in ("option", "span", "number") if k in by_kind]
    while kinds and len(out) < max_answers:  # one of each kind before a second of any
        for k in list(kinds):
            if len(out) >= max_answers:
                break
            pool = by_kind[k]
            out.append(pool.pop(rng.randrange(len(pool))))
            if not pool:
                kinds.remove(k)
    return out


# --------------------------------------------------------------------------------------------
# Samples
# --------------------------------------------------------------------------------------------
def _base(record: Mapping[str, Any], source: str, prediction: str) -> dict[str, Any]:
    meta = record.get("metadata") or {}
    return {
        "qkey": question_key(record), "id": str(record["id"]), "source": source,
        "dataset": record.get("dataset") or meta.get("dataset") or "", "type": meta.get("type", ""),
        "question": str(record["question"]), "passages": passage_texts(record.get("passages") or []),
        "golden_answers": [str(g) for g in record.get("golden_answers") or []],
        "prediction": prediction, "truncated": bool(record.get("truncated", False)),
    }


def _error_sample(record: Mapping[str, Any], source: str, prediction: str, known_causes: Mapping[str, Any], *,
                  analysis: str = "", max_analysis_words: int | None = None, **extra: Any) -> dict[str, Any]:
    row = {**record, "prediction": prediction}
    row.setdefault("followed_prefix", True)
    target, causes = labelled_target(row, known_causes, analysis=analysis, max_analysis_words=max_analysis_words)
    parsed = json.loads(target)
    return {**_base(record, source, prediction), "judgement": ERROR, "target": target,
            "tag1": parsed["tag1"], "tag2": parsed["tag2"], "known_causes": causes, **extra}


def _correct_sample(record: Mapping[str, Any], source: str, prediction: str, **extra: Any) -> dict[str, Any]:
    return {**_base(record, source, prediction), "judgement": CORRECT,
            "target": json.dumps({"Judgement": CORRECT}), "tag1": [], "tag2": [], "known_causes": [], **extra}


def pool_samples(error_records: Sequence[Mapping[str, Any]], correct_records: Sequence[Mapping[str, Any]],
                 known_causes: Mapping[str, Any], *, max_analysis_words: int | None = None) -> list[dict[str, Any]]:
    """The pool's answers: wrong ones relabelled from their observed causes (the teacher's
    analysis is kept, reference redacted), right ones as ``{"Judgement": "Correct"}``."""
    out = []
    for r in error_records:
        analysis = json.loads(make_sample(r, correct=False)["target"]).get("Error_analysis", "")
        out.append(_error_sample(r, "pool", str(r.get("prediction") or ""), known_causes, analysis=analysis,
                                 max_analysis_words=max_analysis_words))
    out += [_correct_sample(r, "pool", str(r.get("prediction") or "")) for r in correct_records]
    return out


def question_samples(questions: Sequence[Mapping[str, Any]], known_causes: Mapping[str, Any], *, seed: int,
                     counterfactuals: int = 1, max_analysis_words: int | None = None) -> list[dict[str, Any]]:
    """Per train question (with its retrieved ``passages``): the reference answer as a right
    sample and up to ``counterfactuals`` wrong answers built from question and passages."""
    rng = random.Random(seed)
    out = []
    for q in questions:
        golds = [str(g) for g in q.get("golden_answers") or []]
        if not golds:
            raise DataFormatError(f"question {q.get('id', '?')}: no golden_answers")
        out.append(_correct_sample(q, "reference", golds[0]))
        for answer, kind in counterfactual_answers(q["question"], golds, passage_texts(q.get("passages") or []),
                                                   rng=rng, max_answers=counterfactuals):
            out.append(_error_sample(q, "counterfactual", answer, known_causes, analysis=_ANALYSIS[kind],
                                     max_analysis_words=max_analysis_words, counterfactual_kind=kind))
    return out


def answer_samples(records: Sequence[Mapping[str, Any]], known_causes: Mapping[str, Any], *, source: str,
                   metric: str = "f1", threshold: float = 0.5) -> list[dict[str, Any]]:
    """Real generator answers (stage ``retrieval_rag``) judged right or wrong by the project's
    rule (:func:`ragcritic_lib.mining.sampling.is_correct`); wrong ones labelled from observed causes."""
    from ragcritic_lib.mining.sampling import is_correct

    out = []
    for r in records:
        pred = str(r.get("prediction") or "")
        if is_correct(r, metric=metric, threshold=threshold):
            out.append(_correct_sample(r, source, pred))
        else:
            out.append(_error_sample(r, source, pred, known_causes))
    return out


def with_passages_of(records: Sequence[Mapping[str, Any]], donors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Closed-book answers given the passages retrieved for the same question (``donors``), so a
    critic can check them; records without a donor are dropped."""
    by_id = {str(d["id"]): d.get("passages") or [] for d in donors}
    return [{**r, "passages": by_id[str(r["id"])]} for r in records if str(r["id"]) in by_id]


def dedupe(samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One sample per (question, normalized answer): the first one."""
    seen: set[tuple[str, str]] = set()
    out = []
    for s in samples:
        key = (s["qkey"], normalize_words(s["prediction"]))
        if key not in seen:
            seen.add(key)
            out.append(dict(s))
    return out


def cap_to_correct_share(samples: Sequence[Mapping[str, Any]], *, min_correct_share: float, seed: int,
                         drop_first: Sequence[str] = ("counterfactual",)) -> list[dict[str, Any]]:
    """Drop wrong samples until right ones make at least ``min_correct_share``: randomly drawn
    ones of the ``drop_first`` sources before any other (real answers are kept longest)."""
    rng = random.Random(seed)
    cor = [dict(s) for s in samples if s["judgement"] == CORRECT]
    err = [dict(s) for s in samples if s["judgement"] == ERROR]
    keep = len(err) if not min_correct_share else min(len(err), int(len(cor) * (1 - min_correct_share) / min_correct_share))
    rng.shuffle(err)
    err.sort(key=lambda s: s.get("source") in drop_first)  # stable: the shuffled order within each group
    out = cor + err[:keep]
    rng.shuffle(out)
    return out


def data_report(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts per source and verdict, the correct share and the questions behind them."""
    by = Counter((s["source"], s["judgement"]) for s in samples)
    sources = sorted({s["source"] for s in samples})
    n_cor = sum(s["judgement"] == CORRECT for s in samples)
    return {
        "examples": len(samples),
        "correct": n_cor,
        "errors": len(samples) - n_cor,
        "correct_share": round(n_cor / len(samples), 4) if samples else None,
        "questions": len({s["qkey"] for s in samples}),
        "sources": {src: {"correct": by[(src, CORRECT)], "error": by[(src, ERROR)]} for src in sources},
        "counterfactual_kinds": dict(Counter(s.get("counterfactual_kind") for s in samples
                                             if s["source"] == "counterfactual")),
        "datasets": dict(Counter(s["dataset"] for s in samples)),
        "by_length": by_length(samples),
    }


LENGTH_BUCKETS = ((1, 3, "1-3 words"), (4, 10, "4-10 words"), (11, None, "11+ words"))


def by_length(samples: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Right and wrong samples by the answer's length in words (an empty answer counts as 1-3):
    if right answers were all short and wrong ones long, length alone would give the verdict."""
    out = {name: {"correct": 0, "error": 0} for _, _, name in LENGTH_BUCKETS}
    for s in samples:
        n = max(1, len(str(s.get("prediction", "")).split()))
        name = next(b for lo, hi, b in LENGTH_BUCKETS if lo <= n and (hi is None or n <= hi))
        out[name]["correct" if s["judgement"] == CORRECT else "error"] += 1
    return out


def check_disjoint(**splits: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Raise ValueError when a question is in two of the named sample sets; return question counts."""
    check_no_leakage(splits)
    return {name: len({s["qkey"] for s in rows}) for name, rows in splits.items()}


# --------------------------------------------------------------------------------------------
# Style guard
# --------------------------------------------------------------------------------------------
STYLE_FEATURES = ("words", "chars", "digit_share", "has_digit", "abstains", "truncated", "ends_with_period",
                  "capitalized", "commas", "uppercase_words")


def style_features(sample: Mapping[str, Any]) -> list[float]:
    """Surface features of the answer alone (no question, no passages)."""
    a = " ".join(str(sample.get("prediction") or "").split())
    words = a.split()
    return [
        float(len(words)), float(len(a)), sum(c.isdigit() for c in a) / max(1, len(a)), float(any(c.isdigit() for c in a)),
        float(is_abstention(a)), float(bool(sample.get("truncated"))), float(a.endswith(".")),
        float(a[:1].isupper()), float(a.count(",")), float(sum(w[:1].isupper() for w in words)),
    ]


def style_classifier(train: Sequence[Mapping[str, Any]]) -> Any:
    """A logistic regression on :func:`style_features` predicting "wrong answer" (scikit-learn)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X = [style_features(s) for s in train]
    y = [s["judgement"] == ERROR for s in train]
    if len(set(y)) < 2:
        raise ValueError("style classifier: the training samples hold only one verdict")
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(X, y)


def style_scores(model: Any, samples: Sequence[Mapping[str, Any]]) -> list[float]:
    """P(wrong) from the style classifier, per sample."""
    return [float(p) for p in model.predict_proba([style_features(s) for s in samples])[:, 1]]


def style_cv_auroc(samples: Sequence[Mapping[str, Any]], *, seed: int, folds: int = 5) -> float | None:
    """Cross-validated AUROC of the style-only classifier inside one set (grouped by question):
    how far answer surface alone separates its right from its wrong samples (0.5 = not at all).
    None when the set has one verdict only or fewer questions than folds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import GroupKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X = [style_features(s) for s in samples]
    y = [s["judgement"] == ERROR for s in samples]
    groups = [s["qkey"] for s in samples]
    if len(set(y)) < 2 or len(set(groups)) < folds:
        return None
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    proba = cross_val_predict(model, X, y, groups=groups, cv=GroupKFold(n_splits=folds), method="predict_proba")
    return round(float(roc_auc_score(y, proba[:, 1])), 4)


def answer_f1(sample: Mapping[str, Any]) -> float:
    """Token F1 of a sample's answer against its reference (for reports only)."""
    return score_prediction(sample["prediction"], sample.get("golden_answers") or [])["f1"]


def with_retrieved_passages(questions: Sequence[Mapping[str, Any]], retriever: Any, *, k: int, dataset: str
                            ) -> list[dict[str, Any]]:
    """The questions with the top-``k`` passages ``retriever`` finds for them (one batched search)."""
    hits = retriever.search([q["question"] for q in questions], k) if questions else []
    return [{**q, "dataset": dataset, "passages": [h.to_record() for h in hs]} for q, hs in zip(questions, hits)]



def question_kind(sample: Mapping[str, Any]) -> str:
    """A sample's kind of question, its dataset and question type (``testbed/comparison``): question
    metadata, read only to report scores within kinds, never by a critic."""
    return f"{sample.get('dataset', '')}/{sample.get('type', '')}"


def baseline_scores(scores: Sequence[float], bench: Sequence[Mapping[str, Any]], *, seed: int,
                    n_boot: int = 2000) -> dict[str, Any]:
    """A baseline's "wrong" ``scores`` on ``bench`` scored as stage 07 scores a critic: verdict AUROC
    with a percentile bootstrap 95% CI (resampling questions when every sample names its own) and
    the same within kinds of question (:func:`question_kind`)."""
    from ragcritic_lib.critic.benchmark import verdict_auroc_summary

    groups = [s.get("qkey") for s in bench]
    return verdict_auroc_summary(scores, [s["judgement"] == ERROR for s in bench], seed=seed, n_boot=n_boot,
                                 groups=groups if all(g is not None for g in groups) else None,
                                 kinds=[question_kind(s) for s in bench])


def _no_baseline(out: Mapping[str, Any], why: str) -> dict[str, Any]:
    keys = ("verdict_auroc", "verdict_auroc_ci_low", "verdict_auroc_ci_high", "verdict_auroc_within_kind",
            "verdict_auroc_within_kind_ci_low", "verdict_auroc_within_kind_ci_high")
    return {**out, **dict.fromkeys(keys), "why_none": why}


def style_baseline(fit_on: Sequence[Mapping[str, Any]], bench: Sequence[Mapping[str, Any]], *, seed: int,
                   n_boot: int = 2000) -> dict[str, Any]:
    """The style-only baseline on a benchmark: :func:`style_classifier` fit on ``fit_on`` (dev
    answers), scored on ``bench`` by :func:`baseline_scores`. AUROC None (and the reason) when
    ``fit_on`` lacks one of the verdicts."""
    out: dict[str, Any] = {"fit_on": len(fit_on), "features": list(STYLE_FEATURES)}
    if len({s["judgement"] for s in fit_on}) < 2 or len({s["judgement"] for s in bench}) < 2:
        return _no_baseline(out, "the dev answers or the benchmark hold only one verdict")
    return {**out, **baseline_scores(style_scores(style_classifier(fit_on), bench), bench, seed=seed, n_boot=n_boot)}


def question_only_baseline(fit_on: Sequence[Mapping[str, Any]], bench: Sequence[Mapping[str, Any]], *,
                           encode: Any, seed: int, n_boot: int = 2000,
                           critic_scores: Mapping[str, Sequence[float]] | None = None) -> dict[str, Any]:
    """The question-only baseline: a logistic regression (the verdict probe's,
    :func:`ragcritic_lib.critic.probe.fit_probe`) on ``encode``'s vectors of the question text
    alone (no answer, no passages), fitted on ``fit_on`` (train answers), scored on ``bench`` by
    :func:`baseline_scores`. It shows how much of a verdict AUROC the wording of the questions
    carries; its within-kind AUROC how much of that is only the kind of question. AUROC None (and
    the reason) when ``fit_on`` or ``bench`` lacks one of the verdicts.

    ``encode``: question texts -> one vector each (e.g. the retriever's sentence encoder).
    ``critic_scores``: {critic: its "wrong" score per ``bench`` sample}; each gets
    ``critics_minus_baseline[critic]``, its AUROC minus the baseline's on the same answers with the
    paired interval (:func:`ragcritic_lib.evaluation.stats.paired_auroc_diff`, resampling questions):
    whether the critic reads more than the question; all three None where the baseline is undefined.
    """
    import numpy as np

    from ragcritic_lib.critic.probe import fit_probe, probe_scores

    out: dict[str, Any] = {"fit_on": len(fit_on), "features": "question embedding"}
    for name, cs in (critic_scores or {}).items():
        if len(cs) != len(bench):
            raise ValueError(f"critic_scores[{name!r}] has {len(cs)} scores for {len(bench)} benchmark samples")
    if len({s["judgement"] for s in fit_on}) < 2 or len({s["judgement"] for s in bench}) < 2:
        out = _no_baseline(out, "the train answers or the benchmark hold only one verdict")
        if critic_scores:  # every critic keeps its entry, undefined like the baseline
            undefined = ("diff", "ci_low", "ci_high")
            out["critics_minus_baseline"] = {name: dict.fromkeys(undefined) for name in critic_scores}
        return out

    def vectors(rows: Sequence[Mapping[str, Any]]) -> Any:
        return np.asarray(encode([" ".join(str(s["question"]).split()) for s in rows]), dtype=np.float64)

    probe = fit_probe(vectors(fit_on), [s["judgement"] == ERROR for s in fit_on], seed=seed)
    scores = probe_scores(probe, vectors(bench))
    out = {**out, "C": probe["C"], **baseline_scores(scores, bench, seed=seed, n_boot=n_boot)}
    if critic_scores:
        from ragcritic_lib.evaluation.stats import paired_auroc_diff

        groups = [s.get("qkey") for s in bench]
        groups = groups if all(g is not None for g in groups) else None
        wrong = [s["judgement"] == ERROR for s in bench]
        out["critics_minus_baseline"] = {name: paired_auroc_diff(list(cs), scores, wrong, seed=seed, n_boot=n_boot,
                                                                 groups=groups)
                                         for name, cs in critic_scores.items()}
    return out


def benchmark_answers(answers: Sequence[Mapping[str, Any]], *, seed: int, per_class: int
                      ) -> tuple[list[dict[str, Any]], list[str]]:
    """(benchmark samples, degenerate reasons): up to ``per_class`` right and as many wrong
    answers; when one verdict is missing (tiny runs), the available answers up to
    ``2 * per_class`` and a reason saying the verdict scores are undefined."""
    from ragcritic_lib.critic.data import balance_correct

    n_cor = sum(a["judgement"] == CORRECT for a in answers)
    if n_cor and n_cor < len(answers):
        return balance_correct(answers, seed=seed, max_samples=2 * per_class)[0], []
    out = [dict(a) for a in answers]
    random.Random(seed).shuffle(out)
    missing = "right" if not n_cor else "wrong"
    return out[: 2 * per_class], [f"benchmark: no {missing} test answer, so verdict AUROC and identification are undefined"]
