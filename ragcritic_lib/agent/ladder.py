"""The ablation ladder of the correction stage: which part of RAG-Critic moves the answers.

Rows, all on the same questions: standard RAG; a *fixed action* (one program applied to every
answer, no critic: does targeting matter?); RAG-Critic with its trained critic and planner after
1 and 2 rounds; an *oracle verdict* (gold correctness, the trained critic's labels); an *oracle
critique* (gold correctness and labels from the error's known causes, rule-based planner: the
ceiling of the action layer). Two rows change one thing at a time between them: *RAG-Critic +
rule planner* (the critic's verdict and labels, the oracle critique's planner) and *oracle verdict
+ rule planner* (gold correctness, the critic's labels, the rule planner), so the step from the
critic to the ceiling splits into verdict, labels and planner. Each row reports EM / F1 /
accuracy and its F1 difference to standard RAG with a paired bootstrap interval and a paired
sign-flip permutation p-value (:mod:`ragcritic_lib.evaluation.stats`), the same for the share the
judge calls right (``delta_judge_acc``), and how many answers it changed (``corrected``) and of
those how many were right before (``corrected_right``); the minimum detectable F1 effect says
what the sample size can see.

The two oracles read gold answers and the testbed's construction metadata: they are labelled as
oracles and exist only as ceilings; the actions they drive never see either.

:func:`correction_metrics` gathers the stage's metrics file from the ladder, the runs and their costs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.agent.actions import count_action_calls
from ragcritic_lib.agent.planner import LLMPlanner
from ragcritic_lib.agent.workflow import (
    action_usage, comparison_rows, iteration_table, records_at_iteration, rejection_counts, stable_costs, status_counts,
)
from ragcritic_lib.evaluation.scoring import score_prediction
from ragcritic_lib.evaluation.stats import paired_comparison, paired_mde
from ragcritic_lib.mining.sampling import JUDGE_METRICS, is_correct, judge_answer

LADDER_ROWS: tuple[str, ...] = (
    "standard RAG", "fixed action", "RAG-Critic (1 iter)", "RAG-Critic (2 iter)", "RAG-Critic + rule planner",
    "oracle verdict", "oracle verdict + rule planner", "oracle critique",
)
DEGENERATE_PLAN_SHARE = 0.6
"""A planner whose most frequent plan exceeds this share of its plans is flagged degenerate."""


class AlwaysErrorCritic:
    """Judges every answer wrong and names no label, so a rule-based planner applies the table's
    default program to every answer: the "fixed action" row (no critic)."""

    name = "always-error"
    llm = None

    def __init__(self) -> None:
        self.last_generations: list[Any] = []

    def critique(self, records: Sequence[Mapping[str, Any]]) -> list[Any]:
        from ragcritic_lib.critic.critics import ERROR, CriticParse

        return [CriticParse(judgement=ERROR, analysis="", valid_json=True) for _ in records]


ORACLE_DROPPED_WHEN_ANSWERABLE: frozenset[str] = frozenset({"unsupported_answer"})
"""Causes the oracle critique leaves out on an answerable question (:meth:`KnownCauseCritic.answerable`):
their labels steer GenerateAnswer to abstain (:data:`ragcritic_lib.agent.actions.UNSUPPORTED_LABELS`)."""


class KnownCauseCritic:
    """Oracle critique: gold correctness, labels from the known causes of each error.

    Causes come from :func:`ragcritic_lib.mining.evidence.error_causes` (the testbed's construction
    causes first, then those the grounded evidence implies) and map to labels through
    ``data/taxonomy/known_causes.yaml`` (:func:`ragcritic_lib.mining.taxonomy.load_known_causes`).

    Args:
        known_causes: ``{cause: {"tier1": [...], "tier2": [...]}}``.
        source_records: the standard-RAG records with their passage ids; a state whose id and
            answer match one of them is diagnosed on it (the workflow's state records carry
            passage texts only, and supporting-passage recall needs the ids).
        passage_meta: corpus metadata by passage id (distractor entities), optional.
        metric, threshold: the judge of correctness, as :class:`OracleCritic`.
        answerable_aware: leave out :data:`ORACLE_DROPPED_WHEN_ANSWERABLE` on answerable
            questions (default); False reports every cause (the dev pilot compares both).
    """

    name = "oracle-critique"
    llm = None

    def __init__(self, known_causes: Mapping[str, Mapping[str, Any]], source_records: Sequence[Mapping[str, Any]] = (),
                 passage_meta: Mapping[str, Mapping[str, Any]] | None = None, metric: str = "acc",
                 answerable_aware: bool = True, threshold: float = 1.0) -> None:
        if metric not in JUDGE_METRICS:
            raise ValueError(f"KnownCauseCritic metric must be one of {JUDGE_METRICS}, got {metric!r}")
        self.threshold = threshold
        self.known_causes = known_causes
        self.sources = {str(r.get("id")): r for r in source_records}
        self.passage_meta = passage_meta
        self.metric = metric
        self.answerable_aware = answerable_aware
        self.last_generations: list[Any] = []

    @staticmethod
    def answerable(record: Mapping[str, Any]) -> bool | None:
        """Whether the question is answerable: the dataset's ``metadata.answerable`` when it says,
        else whether some reference answer is not an abstention (None without references)."""
        from ragcritic_lib.mining.evidence import is_abstention

        flag = (record.get("metadata") or {}).get("answerable")
        if isinstance(flag, bool):
            return flag
        golds = [str(g) for g in record.get("golden_answers") or []]
        return None if not golds else not all(is_abstention(g) for g in golds)

    def causes(self, record: Mapping[str, Any]) -> list[str]:
        """Error causes of one record (diagnosed on its source record when that is the same answer).

        The oracle knows whether the question is answerable. On an answerable one it does not
        report :data:`ORACLE_DROPPED_WHEN_ANSWERABLE` ("the answer occurs in no passage"): that
        cause's remedy is to abstain, which can only lose there (a partly right number or summary
        becomes "insufficient information"); the other causes of the same error remain, and
        ``wrong_answer`` stands in when none does.
        """
        from ragcritic_lib.mining.evidence import compute_evidence, error_causes

        src = self.sources.get(str(record.get("id")))
        if src is not None and str(src.get("prediction") or "") == str(record.get("prediction") or ""):
            record = src
        causes = error_causes(record, compute_evidence(record, passage_meta=self.passage_meta))
        if self.answerable_aware and self.answerable(record):
            causes = [c for c in causes if c not in ORACLE_DROPPED_WHEN_ANSWERABLE] or ["wrong_answer"]
        return causes

    def labels(self, causes: Sequence[str]) -> tuple[list[str], list[str]]:
        """(tier-1, tier-2) labels of the causes, in cause order, without repeats."""
        t1: list[str] = []
        t2: list[str] = []
        for cause in causes:
            spec = self.known_causes.get(cause)
            if spec:
                t1 += [x for x in spec.get("tier1", []) if x not in t1]
                t2 += [x for x in spec.get("tier2", []) if x not in t2]
        return t1, t2

    def critique(self, records: Sequence[Mapping[str, Any]]) -> list[Any]:
        from ragcritic_lib.critic.critics import CORRECT, ERROR, CriticParse

        out = []
        for rec in records:
            if is_correct(rec, metric=self.metric, threshold=self.threshold):
                out.append(CriticParse(judgement=CORRECT, valid_json=True))
                continue
            causes = self.causes(rec)
            t1, t2 = self.labels(causes)
            out.append(CriticParse(judgement=ERROR, analysis="Known causes: " + ", ".join(causes) + ".",
                                   tag1=t1, tag2=t2, valid_json=True))
        return out


def ladder_records(runs: Mapping[str, Sequence[Mapping[str, Any]]], rows: Mapping[str, tuple[str, int]], *,
                   judge_metric: str | None = None, judge_threshold: float = 0.5) -> dict[str, list[dict[str, Any]]]:
    """Scored records per ladder row: ``rows`` maps a row name to (method run name, round);
    round 0 of any run is standard RAG. With ``judge_metric`` every record also carries
    ``correct``, the judge's verdict on that row's answer (:func:`ragcritic_lib.mining.sampling.is_correct`,
    the one judge of "right" every stage reads)."""
    out = {}
    for row, (method, iteration) in rows.items():
        if method not in runs:
            raise KeyError(f"ladder row {row!r}: no run named {method!r} (runs: {sorted(runs)})")
        out[row] = records_at_iteration(runs[method], iteration)
        if judge_metric is not None:
            for r in out[row]:
                r["correct"] = is_correct(r, metric=judge_metric, threshold=judge_threshold)
    return out


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _row(recs: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]], n_boot: int, n_perm: int,
         seed: int) -> dict[str, Any]:
    f1 = [float(r["f1"]) for r in recs]
    base_f1 = [float(r["f1"]) for r in base]
    cmp = paired_comparison(f1, base_f1, n_boot=n_boot, n_perm=n_perm, seed=seed)
    n = len(recs)
    row: dict[str, Any] = {
        "n": n,
        "em": round(sum(r["em"] for r in recs) / n, 4), "f1": round(sum(f1) / n, 4),
        "acc": round(sum(r["acc"] for r in recs) / n, 4),
        "delta_f1": round(cmp["delta"], 4), "ci_low": round(cmp["ci_low"], 4), "ci_high": round(cmp["ci_high"], 4),
        "p_value": round(cmp["p_value"], 4),
    }
    if all("correct" in r for r in (*recs, *base)):
        right = [float(bool(r["correct"])) for r in recs]
        judged = paired_comparison(right, [float(bool(r["correct"])) for r in base], n_boot=n_boot, n_perm=n_perm,
                                   seed=seed)
        row.update(judge_acc=round(sum(right) / n, 4), delta_judge_acc=round(judged["delta"], 4),
                   delta_judge_acc_ci_low=round(judged["ci_low"], 4),
                   delta_judge_acc_ci_high=round(judged["ci_high"], 4),
                   delta_judge_acc_p_value=round(judged["p_value"], 4))
    if all("prediction" in r for r in (*recs, *base)):
        changed = [i for i, (r, b) in enumerate(zip(recs, base))
                   if str(r["prediction"]).strip() != str(b["prediction"]).strip()]
        row.update(corrected=len(changed), corrected_delta_f1=_mean([f1[i] - base_f1[i] for i in changed]))
        if all("correct" in b for b in base):
            was_right = [i for i in changed if base[i]["correct"]]
            row.update(corrected_right=len(was_right),
                       corrected_right_delta_f1=_mean([f1[i] - base_f1[i] for i in was_right]))
    return row


def ladder_table(rows: Mapping[str, Sequence[Mapping[str, Any]]], *, baseline: str = "standard RAG",
                 group: str = "type", n_boot: int = 1000, n_perm: int = 10000, seed: int = 0) -> dict[str, Any]:
    """The ladder's numbers: every row against ``baseline``, overall and per ``metadata[group]``.

    Args:
        rows: row name -> scored records (``em``/``f1``/``acc`` per record), every row over the
            same questions in the same order (checked by ``id``).

    Returns:
        {"all": {row: {n, em, f1, acc, delta_f1, ci_low, ci_high, p_value, and, when the records
                 carry ``correct`` (the judge's verdict, :func:`ladder_records`): judge_acc,
                 delta_judge_acc with its paired CI and p-value; when they carry ``prediction``:
                 corrected (answers the row changed against the baseline), corrected_right (of
                 those, answers the judge called right before) and the mean F1 change of each
                 group}},
         "by_type": {type: {row: {...}}},
         "paired_mde_f1": {row: MDE of that row's paired differences at its n},
         "mde_f1": MDE at n from standard RAG's per-question F1 SD (pilot formula, conservative)}.
    """
    if baseline not in rows:
        raise KeyError(f"baseline row {baseline!r} missing (rows: {list(rows)})")
    base = list(rows[baseline])
    ids = [str(r.get("id")) for r in base]
    for name, recs in rows.items():
        if [str(r.get("id")) for r in recs] != ids:
            raise ValueError(f"ladder row {name!r} does not cover the same questions as {baseline!r}")
    if len(base) < 2:
        raise ValueError(f"the ladder needs at least 2 questions, got {len(base)}")
    out: dict[str, Any] = {"all": {name: _row(recs, base, n_boot, n_perm, seed) for name, recs in rows.items()}}
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(base):
        groups.setdefault(str(r.get("metadata", {}).get(group, r.get(group))), []).append(i)
    out["by_type"] = {
        g: {name: _row([recs[i] for i in idx], [base[i] for i in idx], n_boot, n_perm, seed)
            for name, recs in rows.items()}
        for g, idx in sorted(groups.items()) if len(idx) >= 2
    }
    base_f1 = [float(r["f1"]) for r in base]
    out["paired_mde_f1"] = {name: round(paired_mde([float(r["f1"]) for r in recs], base_f1), 4)
                            for name, recs in rows.items() if name != baseline}
    mean = sum(base_f1) / len(base_f1)
    sd = (sum((x - mean) ** 2 for x in base_f1) / (len(base_f1) - 1)) ** 0.5
    out["mde_f1"] = round(paired_mde(pilot_sd=sd, n=len(base_f1)), 4)
    return out


def plan_shares(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How concentrated a method's plans are: programs run, distinct ones, the top one's share.

    Programs read the sample through variables (question, docs, prediction), so two samples get
    the same program text exactly when the planner chose the same plan for them.
    """
    plans = [step["program"] for r in results for step in r.get("steps", []) if step.get("program")]
    counts = Counter(plans)
    top = counts.most_common(1)[0][1] if counts else 0
    share = top / len(plans) if plans else 0.0
    return {"plans": len(plans), "distinct": len(counts), "top_share": round(share, 4),
            "degenerate": bool(plans) and share > DEGENERATE_PLAN_SHARE}


def verdict_shares(results: Sequence[Mapping[str, Any]], *, iteration: int = 1) -> dict[str, Any]:
    """How a critic's verdicts split in one round: counts of Error / Correct / unparsed, and a
    ``degenerate`` flag when every parsed verdict is the same (a critic that flags everything
    turns correction into a fixed action; one that flags nothing changes no answer)."""
    counts: Counter[str] = Counter()
    for r in results:
        for step in r.get("steps", []):
            if step.get("iteration") == iteration:
                critic = step.get("critic") or {}
                counts[str(critic.get("judgement") or "unparsed")] += 1
    parsed = {k: v for k, v in counts.items() if k != "unparsed"}
    return {"counts": dict(counts), "error_share": round(parsed.get("Error", 0) / sum(parsed.values()), 4) if parsed else None,
            "degenerate": len(parsed) == 1 and sum(parsed.values()) > 1}


def verdict_quality(results: Sequence[Mapping[str, Any]], *, judge_metric: str, judge_threshold: float,
                    seed: int = 0, n_boot: int = 2000, iteration: int = 1) -> dict[str, Any] | None:
    """How well the critic's round-``iteration`` verdicts separate right from wrong test answers,
    and what the corrections it triggered did to them (an evaluation with gold answers, after the
    run: nothing here feeds back into the method).

    Two notions of "right" are reported, because they disagree on verbose answers: the judge's
    (``judge_metric >= judge_threshold``, the label the critic was trained and benchmarked on) and
    accuracy (a reference answer occurs in the answer). A wordy answer that contains the reference
    is right by accuracy and may be wrong by an F1 judge; a critic that flags it and a correction
    that turns it into an abstention lose F1 even though the critic "agreed with its judge".

    Returns:
        None when no round-``iteration`` critique carries a verdict margin; else {"n",
        "auroc_judge" and "auroc_acc" (margin log P(Error) - log P(Correct) against the wrong
        label; ties count half) with their bootstrap 95% CIs, "wrong_judge" / "wrong_acc" (counts),
        "acted" (answers the round corrected), "acted_right_judge" / "acted_right_acc",
        "abstained_after" (corrected answers that became an abstention from a non-abstention),
        "not_verified" (corrections the verifying critic did not prefer; their old answers stay),
        "delta_f1_acted_right_acc" / "delta_f1_acted_wrong_acc" (mean F1 change of the corrected
        answers right / wrong by accuracy)}.
    """
    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci
    from ragcritic_lib.mining.evidence import is_abstention

    margins, wrong_judge, wrong_acc = [], [], []
    acted = acted_right_judge = acted_right_acc = abstained = not_verified = 0
    deltas: dict[bool, list[float]] = {True: [], False: []}
    for r in results:
        step = next((s for s in r.get("steps", []) if s.get("iteration") == iteration), None)
        margin = ((step or {}).get("critic") or {}).get("margin")
        if margin is None:
            continue
        golds = list(r.get("golden_answers") or [])
        before = str(step.get("answer_before") if step.get("answer_before") is not None else r.get("prediction") or "")
        s0 = score_prediction(before, golds)
        right_judge = judge_answer(r, before, metric=judge_metric, threshold=judge_threshold)
        right_acc = s0["acc"] > 0
        margins.append(float(margin))
        wrong_judge.append(not right_judge)
        wrong_acc.append(not right_acc)
        not_verified += step.get("status") == "not_verified"
        if step.get("status") == "corrected" and step.get("answer_after") is not None:
            after = str(step["answer_after"])
            acted += 1
            acted_right_judge += right_judge
            acted_right_acc += right_acc
            abstained += is_abstention(after) and not is_abstention(before)
            deltas[right_acc].append(score_prediction(after, golds)["f1"] - s0["f1"])
    if not margins:
        return None

    def _auc(labels: list[bool]) -> dict[str, Any]:
        value = auroc(margins, labels)
        lo, hi = bootstrap_auroc_ci(margins, labels, seed=seed, n_boot=n_boot) if value is not None else (None, None)
        return {"value": None if value is None else round(value, 4), "ci": [lo, hi]}

    aj, aa = _auc(wrong_judge), _auc(wrong_acc)
    mean = lambda xs: round(sum(xs) / len(xs), 4) if xs else None  # noqa: E731
    return {"n": len(margins), "judge": f"{judge_metric} >= {judge_threshold}",
            "auroc_judge": aj["value"], "auroc_judge_ci": aj["ci"], "auroc_acc": aa["value"], "auroc_acc_ci": aa["ci"],
            "wrong_judge": sum(wrong_judge), "wrong_acc": sum(wrong_acc), "acted": acted,
            "acted_right_judge": acted_right_judge, "acted_right_acc": acted_right_acc, "abstained_after": abstained,
            "delta_f1_acted_right_acc": mean(deltas[True]), "delta_f1_acted_wrong_acc": mean(deltas[False]),
            "not_verified": not_verified}


# ---------------------------------------------------------------------- acting threshold (dev)
def fit_act_threshold(margins: Sequence[float], f1_before: Sequence[float], f1_after: Sequence[float]) -> dict[str, Any]:
    """The verdict-margin threshold at which correcting the answers above it gives the best mean F1.

    Each held-out answer i has the critic's margin m_i = log P("Error") - log P("Correct"), its
    F1 as it is and its F1 after one correction round. Correcting exactly the answers with
    m_i > t gives mean F1(t); candidates are +inf (correct nothing), the midpoints between
    consecutive distinct margins and -inf (correct everything). Ties go to the larger threshold:
    the critic acts on fewer answers for the same F1.

    Returns:
        {"threshold" (float; inf when acting never helps), "acted" (answers above it), "n",
        "f1_before", "f1_at_threshold", "f1_all" (acting on every answer), "acts" (bool: acting
        on some answers beats acting on none)}.
    """
    m = [float(x) for x in margins]
    b = [float(x) for x in f1_before]
    a = [float(x) for x in f1_after]
    if not (len(m) == len(b) == len(a)):
        raise ValueError(f"{len(m)} margins, {len(b)} F1 before and {len(a)} F1 after")
    if not m:
        raise ValueError("fit_act_threshold needs at least one held-out answer")
    n = len(m)
    distinct = sorted(set(m))
    candidates = [float("inf")] + [(hi + lo) / 2 for lo, hi in reversed(list(zip(distinct, distinct[1:])))]
    candidates.append(float("-inf"))
    best_t, best_f1 = float("inf"), sum(b) / n
    for t in candidates[1:]:
        f1 = sum(ai if mi > t else bi for mi, ai, bi in zip(m, a, b)) / n
        if f1 > best_f1 + 1e-12:
            best_t, best_f1 = t, f1
    return {"threshold": best_t, "acted": sum(1 for mi in m if mi > best_t), "n": n,
            "f1_before": round(sum(b) / n, 4), "f1_at_threshold": round(best_f1, 4),
            "f1_all": round(sum(a) / n, 4), "acts": best_t != float("inf")}


VERIFY_MODES = ("never", "always", "dev_f1")


def fit_critic_act_threshold(records: Sequence[Mapping[str, Any]], *, critic: Any, planner: Any, actions: Any,
                             verify: str = "never", n_boot: int = 1000, seed: int = 0,
                             **kwargs: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Fit the trained critic's acting threshold on held-out (dev) answers: every answer is
    critiqued as an error (threshold -inf: the critic writes its labels), planned and corrected
    once, and :func:`fit_act_threshold` picks the margin above which correcting pays on F1. The
    critic's own ``threshold`` is restored; the caller sets the chosen one.

    A fit chosen as the best of many thresholds on a few dev questions is partly luck, so it is
    checked twice, each time by the paired bootstrap 95% CI of the per-question dev F1
    difference. First against acting on none (``vs_none``): the best threshold
    (``best_threshold``) is the fit's only when that CI lies above 0, else the fit acts on none
    (``fitted_threshold`` inf). Then against the default: the fitted threshold replaces the
    critic's calibrated one (stage critic_dpo's) only when the CI of fitted minus calibrated lies
    above 0 (``vs_default``).

    ``verify`` decides whether the critic also verifies its corrections (``run_correction``'s
    ``verifier``: a new answer is kept only when the critic's margin for it, on the same question
    and passages, is below the old answer's): "never", "always", or "dev_f1" (fit both and keep
    verification only when the CI of its dev F1 difference against keeping every answer, as
    Algorithm 1 does, lies above 0: ``verify_vs_default``). The dev corrections are run once,
    unverified; the verified fit reads the same corrections with the critic's margin for each new
    answer, which each step records as ``verification``.

    Returns:
        (the chosen fit's report plus "best_threshold", "f1_at_best", "vs_none" ({"delta", "ci_low",
        "ci_high", "acts"}), "calibrated_threshold", "f1_at_calibrated", "fitted_threshold",
        "f1_at_fitted", "vs_default" ({"delta", "ci_low", "ci_high", "kept_default"}) and "verify"
        (bool), and with verification considered "fits": {"unverified", "verified"} and
        "verify_vs_default"; the correction results).
    """
    from ragcritic_lib.agent.planner import passage_strings
    from ragcritic_lib.agent.workflow import run_correction, state_record, verification

    if verify not in VERIFY_MODES:
        raise ValueError(f"verify must be one of {' | '.join(VERIFY_MODES)}, got {verify!r}")
    calibrated = float(critic.threshold)
    critic.threshold = float("-inf")
    try:
        results = run_correction(records, critic=critic, planner=planner, actions=actions, iterations=1, **kwargs)
    finally:
        critic.threshold = calibrated
    margins, before, after = [], [], []
    for r in results:
        step = r["steps"][0] if r.get("steps") else {}
        margin = (step.get("critic") or {}).get("margin")
        if margin is None:
            raise ValueError("fit_critic_act_threshold needs a calibrated critic (its critiques carry a verdict margin)")
        golds = list(r.get("golden_answers") or [])
        margins.append(float(margin))
        before.append(score_prediction(str(r["predictions"][0]), golds)["f1"])
        after.append(score_prediction(str(r["final_prediction"]), golds)["f1"])

    def at(threshold: float, after_f1: list[float]) -> list[float]:
        return [ai if mi > threshold else bi for mi, ai, bi in zip(margins, after_f1, before)]

    def _fit(after_f1: list[float]) -> tuple[dict[str, Any], list[float]]:
        rep = fit_act_threshold(margins, before, after_f1)
        best = rep["threshold"]
        # The best threshold must beat acting on none beyond its CI, or the fit acts on none: a
        # gain inside the noise of the dev questions is a choice they cannot make.
        none_cmp = paired_comparison(at(best, after_f1), before, n_boot=n_boot, n_perm=n_boot, seed=seed)
        pays = bool(rep["acts"]) and none_cmp["ci_low"] > 0
        rep.update(best_threshold=best, f1_at_best=rep["f1_at_threshold"],
                   vs_none={"delta": round(none_cmp["delta"], 4), "ci_low": round(none_cmp["ci_low"], 4),
                            "ci_high": round(none_cmp["ci_high"], 4), "acts": pays})
        if not pays:
            rep.update(threshold=float("inf"), f1_at_threshold=rep["f1_before"], acted=0, acts=False)
        fitted, default = at(rep["threshold"], after_f1), at(calibrated, after_f1)
        cmp = paired_comparison(fitted, default, n_boot=n_boot, n_perm=n_boot, seed=seed)
        kept = not cmp["ci_low"] > 0  # the fitted threshold must beat the default beyond its CI
        rep.update(calibrated_threshold=calibrated, f1_at_calibrated=round(sum(default) / len(default), 4),
                   fitted_threshold=rep["threshold"], f1_at_fitted=rep["f1_at_threshold"],
                   vs_default={"delta": round(cmp["delta"], 4), "ci_low": round(cmp["ci_low"], 4),
                               "ci_high": round(cmp["ci_high"], 4), "kept_default": kept})
        if kept:
            rep.update(threshold=calibrated, f1_at_threshold=rep["f1_at_calibrated"],
                       acted=sum(1 for m in margins if m > calibrated))
            rep["acts"] = rep["acted"] > 0
        return rep, (default if kept else fitted)

    plain, plain_f1 = _fit(after)
    if verify == "never":
        return {**plain, "verify": False}, results
    changed = [i for i, r in enumerate(results) if str(r["final_prediction"]) != str(r["predictions"][0])]
    states = [state_record(results[i], passage_strings(results[i].get("passages", [])), str(results[i]["final_prediction"]),
                           first=False) for i in changed]
    gated = list(after)
    for i, m_new in zip(changed, critic.verdict_margins(states) if states else []):
        check = results[i]["steps"][0]["verification"] = verification(margins[i], m_new)
        if not check["kept"]:
            gated[i] = before[i]
    verified, verified_f1 = _fit(gated)
    cmp = paired_comparison(verified_f1, plain_f1, n_boot=n_boot, n_perm=n_boot, seed=seed)
    # Algorithm 1 keeps every new answer: verification is the change that must win beyond its CI.
    use = verify == "always" or cmp["ci_low"] > 0
    report = {**(verified if use else plain), "verify": use, "fits": {"unverified": plain, "verified": verified},
              "verify_vs_default": {"delta": round(cmp["delta"], 4), "ci_low": round(cmp["ci_low"], 4),
                                    "ci_high": round(cmp["ci_high"], 4), "kept_default": not cmp["ci_low"] > 0}}
    return report, results


# ---------------------------------------------------------------------- the stage's metrics
def _finite_or_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _finite_or_none(v) for k, v in value.items()}
    return None if isinstance(value, float) and abs(value) == float("inf") else value


def correction_metrics(*, test_sets: Mapping[str, Sequence[Mapping[str, Any]]],
                       runs: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]], costs: Mapping[str, Any],
                       methods: Mapping[str, Mapping[str, Any]], ladders: Mapping[str, Mapping[str, Any]],
                       answer_recall: Mapping[str, float], shares: Mapping[str, Any], verdicts: Mapping[str, Any],
                       degenerate: Sequence[str], planner_run: Any, planner_sft_examples: int, critic_verdict: str,
                       threshold: float, act_fit: Mapping[str, Any] | None, planner_decoding: str,
                       verdict_quality: Mapping[str, Any] | None = None, verify: bool = False,
                       verify_mode: str = "never", executed_records: int | None = None,
                       planner_targets: str | None = None) -> dict[str, Any]:
    """The correction stage's metrics (``reports/metrics/08_correction.json``, schema
    ``CorrectionMetrics``) from what the stage computed.

    Args:
        test_sets: {dataset: standard RAG's test records the methods corrected}; its order is the
            datasets' order.
        runs: {dataset: {method: the correction results}} (``run_methods``).
        costs: {dataset: {method: cost per phase}} (``run_methods``); wall times and generated-call
            counts are dropped (:func:`~ragcritic_lib.agent.workflow.stable_costs`).
        methods: the first dataset's methods ({name: {"critic", "planner", ...}}): the statistics
            of each LLM planner among them are reported.
        ladders: {dataset: :func:`ladder_table`}; answer_recall: {dataset: share of questions
            whose gold answer is in standard RAG's passages}.
        shares: {dataset: {method: :func:`plan_shares`}}; verdicts: {dataset:
            :func:`verdict_shares` of RAG-Critic}; degenerate: the flags.
        planner_run: the planner's training result (``run_training``'s, or its ``to_dict()`` as the
            planner stage wrote it); executed_records: how many executed (critique, program,
            outcome) records the planner's data stage ran; planner_targets: what it was trained
            on (``planner_data.targets``).
        planner_sft_examples: how many examples the planner was trained on.
        critic_verdict: the verdict mode (``correction.critic_verdict``); threshold: the critic's
            threshold as used on test (an infinite one is written as None); act_fit: the dev fit
            (:func:`fit_critic_act_threshold`'s report) or None.
        planner_decoding: ``correction.planner_decoding``.
        verdict_quality: {dataset: :func:`verdict_quality` of RAG-Critic's test run}, optional.
        verify: whether RAG-Critic's critic verified its corrections on test (``run_correction``'s
            ``verifier``); verify_mode: ``correction.verify_corrections`` (how that was decided).
    """
    datasets = list(test_sets)
    rows = {ds: comparison_rows(runs[ds]) for ds in datasets}
    run = planner_run.to_dict() if hasattr(planner_run, "to_dict") else dict(planner_run)
    return {
        "n_questions": {ds: len(r) for ds, r in test_sets.items()},
        "comparison": {ds: {row["method"]: {k: row[k] for k in ("em", "f1", "acc", "n")}
                            for row in rows[ds] if row["group"] == "all"} for ds in datasets},
        "by_type": {ds: [row for row in rows[ds] if row["group"] != "all"] for ds in datasets},
        "iterations": {ds: iteration_table(runs[ds]["RAG-Critic"]) for ds in datasets},
        "cost": stable_costs(costs),
        "status": {ds: {name: status_counts(r) for name, r in by_method.items()} for ds, by_method in runs.items()},
        "rejections": {ds: {name: rejection_counts(r) for name, r in by_method.items()} for ds, by_method in runs.items()},
        "action_usage": {ds: {name: action_usage(r) for name, r in by_method.items()} for ds, by_method in runs.items()},
        # Calls written in the programs, every round, as RePAIR's Table 3 counts them (the analysis
        # stage sets RAG-Critic's beside RePAIR's).
        "program_calls": {ds: {name: count_action_calls(s.get("program") for x in r for s in x.get("steps", []))
                               for name, r in by_method.items()} for ds, by_method in runs.items()},
        # seconds: wall time of the planner's training run, the comparison's training cost (varies per run)
        "planner_training": {**{k: v for k, v in run.items() if k not in ("log_history", "recipe") and "second" not in k},
                             "seconds": round(float(run["seconds"]), 1),
                             **({"executed_records": int(executed_records)} if executed_records is not None else {}),
                             **({"targets": planner_targets} if planner_targets else {})},
        "planner_sft_examples": planner_sft_examples,
        "critic_verdict": {"mode": critic_verdict, "threshold": round(threshold, 4) if abs(threshold) != float("inf") else None,
                           "verify": bool(verify), "verify_mode": verify_mode,
                           **({"dev_fit": {k: _finite_or_none(v) for k, v in act_fit.items()}} if act_fit else {}),
                           **({"test": {ds: q for ds, q in verdict_quality.items() if q is not None}}
                              if verdict_quality else {})},
        "planner_decoding": planner_decoding,
        # Per planner: plans written, plans without a program (free decoding) and, for constrained
        # decoding, how often the pick was the critique's own rule-based program.
        "planner_stats": {m["planner"].name: dict(m["planner"].stats) for m in methods.values()
                          if isinstance(m["planner"], LLMPlanner)},
        "plan_shares": shares,
        "verdict_shares": verdicts,
        # ladder.<dataset>.<row> = {n, em, f1, acc, delta_f1, ci_low, ci_high, p_value} (F1 on a 0-1 scale)
        "ladder": {key: value for ds in datasets for key, value in {
            ds: ladders[ds]["all"], f"{ds}_by_type": ladders[ds]["by_type"], f"{ds}_mde_f1": ladders[ds]["mde_f1"],
            f"{ds}_paired_mde_f1": ladders[ds]["paired_mde_f1"], f"{ds}_answer_recall": answer_recall[ds]}.items()},
        "degenerate": list(degenerate),
    }
