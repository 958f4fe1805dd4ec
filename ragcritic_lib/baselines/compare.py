"""The method-comparison block of the comparison stage (``reports/metrics/<NN>_comparison.json``).

Every method is compared with one baseline on exactly the same questions of one dataset: the
F1 change with a paired bootstrap interval, a paired sign-flip permutation p-value and that
p-value Holm-corrected across the compared methods, plus the cost of each method.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.baselines import METRICS, dataset_name


def holm_adjust(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm-Bonferroni step-down adjusted p-values, keyed like ``pvalues``.

    With the m non-NaN p-values sorted ascending, the i-th (0-based) becomes
    ``p_(i) * (m - i)``, made non-decreasing by a running maximum and capped at 1. NaN p-values
    stay NaN and do not count in m.

    Raises:
        ValueError: naming the key of a p-value that is not a number in [0, 1].
    """
    checked: dict[str, float] = {}
    for key, p in pvalues.items():
        try:
            val = float(p)
        except (TypeError, ValueError):
            raise ValueError(f"p-value of {key!r} is not a number: {p!r}") from None
        if not math.isnan(val) and not 0.0 <= val <= 1.0:
            raise ValueError(f"p-value of {key!r} is outside [0, 1]: {val}")
        checked[key] = val
    out = {k: float("nan") for k, v in checked.items() if math.isnan(v)}
    ranked = sorted((k for k, v in checked.items() if not math.isnan(v)), key=lambda k: checked[k])
    m, running = len(ranked), 0.0
    for i, key in enumerate(ranked):
        running = max(running, min(1.0, checked[key] * (m - i)))
        out[key] = running
    return {k: out[k] for k in pvalues}


def _by_id(method: str, records: Sequence[Mapping[str, Any]], dataset: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for r in records:
        if dataset_name(r) != dataset:
            continue
        qid = str(r["id"])
        if qid in out:
            raise ValueError(f"{method}: question id {qid!r} appears twice on dataset {dataset!r}")
        missing = [m for m in METRICS if m not in r]
        if missing:
            raise ValueError(f"{method}: record {qid!r} has no {missing} (score it with score_records)")
        out[qid] = r
    return out


def method_comparison(
    results: Mapping[str, Sequence[Mapping[str, Any]]], *, baseline: str = "standard RAG",
    dataset: str = "testbed", costs: Mapping[str, Mapping[str, Any]] | None = None,
    n_boot: int = 1000, n_perm: int = 10000, alpha: float = 0.05, seed: int = 0,
    judge_metric: str | None = None, judge_threshold: float = 0.5,
) -> dict[str, dict[str, Any]]:
    """Each method against ``baseline`` on ``dataset``, one row per method (baseline first).

    ``results`` maps a method's display name to its scored records ("id", a dataset name, and
    "em", "f1", "acc"); ``costs`` maps a method to {"calls": test-time LLM calls on this
    dataset, optional "training_calls", "training_seconds"}. Row fields:

    - ``n``: questions compared; ``em``, ``f1``, ``acc``: the method's means over them;
      ``f1_sd``: sample SD of its per-question F1 (NaN below 2 questions).
    - ``delta_f1``: mean F1 minus the baseline's, paired per question; ``ci_low``/``ci_high``:
      its paired percentile bootstrap interval (level 1 - alpha).
    - ``p``: two-sided sign-flip permutation p-value of ``delta_f1``; ``p_holm``: ``p``
      Holm-corrected across the non-baseline methods (:func:`holm_adjust`).
    - ``mde``: smallest F1 change detectable at 80% power from the SD of this method's paired
      differences at this n (NaN for the baseline, and below 2 questions).
    - ``calls_per_question``: ``calls / n`` (None without a cost entry); ``training_calls``,
      ``training_seconds``: as given (None when absent).

    - With ``judge_metric`` (the project's judge, e.g. ``truth``; read by
      :func:`ragcritic_lib.mining.sampling.is_correct` from each record's ``prediction``, gold
      answers and metadata): ``judge_acc``, the share judged right; ``delta_judge_acc`` with its
      paired interval ``judge_ci_low``/``judge_ci_high``, its permutation p ``judge_p`` and
      ``judge_p_holm``, Holm-corrected across the same methods.

    The baseline row has delta 0, CI 0..0, p and p_holm 1.

    Raises:
        KeyError: ``baseline`` not in ``results``.
        ValueError: the baseline has no question on ``dataset``; a method did not answer exactly
            the baseline's questions (naming it and how many ids are missing and extra); a
            duplicated id or an unscored record.
    """
    from ragcritic_lib.evaluation.stats import paired_comparison

    if baseline not in results:
        raise KeyError(f"baseline {baseline!r} missing from results ({sorted(results)})")
    base = _by_id(baseline, results[baseline], dataset)
    if not base:
        raise ValueError(f"baseline {baseline!r} has no question on dataset {dataset!r}")
    ids = list(base)
    base_f1 = [float(base[i]["f1"]) for i in ids]

    def judged(recs: Mapping[str, Mapping[str, Any]]) -> list[float]:
        from ragcritic_lib.mining.sampling import is_correct

        return [float(is_correct(recs[i], metric=str(judge_metric), threshold=judge_threshold)) for i in ids]

    base_right = judged(base) if judge_metric else []
    rows: dict[str, dict[str, Any]] = {}
    for method in [baseline] + [m for m in results if m != baseline]:
        recs = _by_id(method, results[method], dataset)
        missing, extra = set(ids) - set(recs), set(recs) - set(ids)
        if missing or extra:
            raise ValueError(
                f"{method}: answered a different question set than {baseline!r} on {dataset!r} "
                f"({len(missing)} ids missing, {len(extra)} extra, e.g. {sorted(missing or extra)[:3]})")
        f1 = [float(recs[i]["f1"]) for i in ids]
        n = len(ids)
        row: dict[str, Any] = {"n": n}
        for m in METRICS:
            row[m] = sum(float(recs[i][m]) for i in ids) / n
        mean = row["f1"]
        row["f1_sd"] = math.sqrt(sum((x - mean) ** 2 for x in f1) / (n - 1)) if n > 1 else float("nan")
        if method == baseline:
            row.update(delta_f1=0.0, ci_low=0.0, ci_high=0.0, p=1.0, p_holm=1.0, mde=float("nan"))
        else:
            pc = paired_comparison(f1, base_f1, n_boot=n_boot, n_perm=n_perm, alpha=alpha, seed=seed)
            row.update(delta_f1=pc["delta"], ci_low=pc["ci_low"], ci_high=pc["ci_high"], p=pc["p_value"],
                       mde=pc["mde"])
        if judge_metric:
            right = judged(recs)
            row["judge_acc"] = sum(right) / n
            if method == baseline:
                row.update(delta_judge_acc=0.0, judge_ci_low=0.0, judge_ci_high=0.0, judge_p=1.0, judge_p_holm=1.0)
            else:
                jc = paired_comparison(right, base_right, n_boot=n_boot, n_perm=n_perm, alpha=alpha, seed=seed)
                row.update(delta_judge_acc=jc["delta"], judge_ci_low=jc["ci_low"], judge_ci_high=jc["ci_high"],
                           judge_p=jc["p_value"])
        cost = (costs or {}).get(method) or {}
        calls = cost.get("calls")
        row["calls_per_question"] = None if calls is None else float(calls) / n
        row["training_calls"] = cost.get("training_calls")
        row["training_seconds"] = cost.get("training_seconds")
        rows[method] = row
    adjusted = holm_adjust({m: r["p"] for m, r in rows.items() if m != baseline})
    for m, p in adjusted.items():
        rows[m]["p_holm"] = p
    if judge_metric:
        for m, p in holm_adjust({m: r["judge_p"] for m, r in rows.items() if m != baseline}).items():
            rows[m]["judge_p_holm"] = p
    return rows


def comparison_summary(block: Mapping[str, Mapping[str, Any]], *, baseline: str = "standard RAG",
                       alpha: float = 0.05) -> dict[str, Any]:
    """What a :func:`method_comparison` block says as a whole.

    - ``mde_conservative``: F1 change detectable at 80% power from the baseline's per-question
      F1 SD at its n, treating paired scores as uncorrelated (difference SD ``sqrt(2) * sd``,
      :func:`ragcritic_lib.evaluation.stats.paired_mde`); NaN below 2 questions.
    - ``significant_after_holm``: methods with ``p_holm < alpha``, baseline excluded, sorted.
    """
    from ragcritic_lib.evaluation.stats import paired_mde

    if baseline not in block:
        raise KeyError(f"baseline {baseline!r} missing from the comparison block ({sorted(block)})")
    row = block[baseline]
    sd, n = float(row["f1_sd"]), int(row["n"])
    mde = paired_mde(pilot_sd=sd, n=n, alpha=alpha) if n >= 2 else float("nan")
    significant = sorted(m for m, r in block.items()
                         if m != baseline and r.get("p_holm") is not None and float(r["p_holm"]) < alpha)
    return {"mde_conservative": mde, "significant_after_holm": significant}


ANSWERABILITY_PARTS = ("answerable", "unanswerable")


def _answerability_of(method: str, records: Sequence[Mapping[str, Any]], dataset: str) -> dict[str, str]:
    """{question id: "answerable" | "unanswerable"} from each record's gold answers (unanswerable
    when every gold answer is an abstention, :func:`ragcritic_lib.evaluation.truth.is_unanswerable`).

    Raises:
        ValueError: a record without gold answers (naming ``method`` and the id), as :func:`_by_id`.
    """
    from ragcritic_lib.evaluation.truth import is_unanswerable

    part_of = {}
    for qid, rec in _by_id(method, records, dataset).items():
        golds = rec.get("golden_answers")
        if not golds:
            raise ValueError(f"{method}: record {qid!r} has no golden_answers to tell whether it is answerable")
        part_of[qid] = ANSWERABILITY_PARTS[int(is_unanswerable(list(golds)))]
    return part_of


def answerability_split(
    results: Mapping[str, Sequence[Mapping[str, Any]]], *, baseline: str = "standard RAG",
    dataset: str = "testbed", n_boot: int = 1000, n_perm: int = 10000, alpha: float = 0.05, seed: int = 0,
    judge_metric: str | None = None, judge_threshold: float = 0.5,
) -> dict[str, dict[str, Any]]:
    """Each row's change against ``baseline`` on the answerable and on the unanswerable questions
    apart, and how much of its whole change each part carries.

    A question is unanswerable when every gold answer is an abstention
    (:func:`ragcritic_lib.evaluation.truth.is_unanswerable`); there the only right answer is to
    abstain, so a method that abstains more gains there whatever it does elsewhere. This is an
    evaluation after the run: the gold answers split the questions, no method sees the split.

    Returns:
        {part: {"n": questions in the part, "rows": {row: {"delta_f1", "ci_low", "ci_high", "p",
        and with ``judge_metric`` "delta_judge_acc", "judge_ci_low", "judge_ci_high"; plus
        "share_f1" (the part's contribution to the row's change over all questions: ``n_part / n
        * delta_f1``) and "share_judge_acc" alike}}}} for the parts in :data:`ANSWERABILITY_PARTS`
        that hold at least 2 questions. Rows and intervals come from :func:`method_comparison` on
        the part's questions (no Holm correction across rows: descriptive).

    Raises:
        ValueError: as :func:`method_comparison`, and a baseline record without gold answers.
    """
    if baseline not in results:
        raise KeyError(f"baseline {baseline!r} missing from results ({sorted(results)})")
    part_of = _answerability_of(baseline, results[baseline], dataset)
    if not part_of:
        raise ValueError(f"baseline {baseline!r} has no question on dataset {dataset!r}")
    n_all = len(part_of)
    out: dict[str, dict[str, Any]] = {}
    for part in ANSWERABILITY_PARTS:
        ids = {q for q, p in part_of.items() if p == part}
        if len(ids) < 2:
            continue
        subset = {name: [r for r in recs if dataset_name(r) == dataset and str(r["id"]) in ids]
                  for name, recs in results.items()}
        block = method_comparison(subset, baseline=baseline, dataset=dataset, n_boot=n_boot, n_perm=n_perm,
                                  alpha=alpha, seed=seed, judge_metric=judge_metric, judge_threshold=judge_threshold)
        rows = {}
        for name, row in block.items():
            if name == baseline:
                continue
            keep = {k: row[k] for k in ("delta_f1", "ci_low", "ci_high", "p")}
            keep["share_f1"] = len(ids) / n_all * row["delta_f1"]
            if judge_metric:
                keep.update({k: row[k] for k in ("delta_judge_acc", "judge_ci_low", "judge_ci_high")})
                keep["share_judge_acc"] = len(ids) / n_all * row["delta_judge_acc"]
            rows[name] = keep
        out[part] = {"n": len(ids), "rows": rows}
    return out


LADDER_STEPS: tuple[tuple[str, str, str], ...] = (
    ("verdict", "RAG-Critic + rule planner", "oracle verdict + rule planner"),
    ("labels", "oracle verdict + rule planner", "oracle critique"),
    ("planner", "oracle verdict", "oracle verdict + rule planner"),
)
"""The correction ladder's one-part steps, ``(what changes, the row before, the row after)``
(:data:`ragcritic_lib.agent.ladder.LADDER_ROWS`): the critic's verdict becomes the judge's (the
critic's labels and the rule planner stay); the critic's labels become the known causes (the
judge's verdict and the rule planner stay); the trained planner becomes the rule planner (the
judge's verdict and the critic's labels stay)."""


def ladder_steps(
    results: Mapping[str, Sequence[Mapping[str, Any]]], *, steps: Sequence[tuple[str, str, str]] = LADDER_STEPS,
    dataset: str = "testbed", n_boot: int = 1000, n_perm: int = 10000, alpha: float = 0.05, seed: int = 0,
    judge_metric: str | None = None, judge_threshold: float = 0.5,
) -> dict[str, Any]:
    """What each one-part step of the correction ladder does: the row after it against the row
    before it, paired per question, on all questions and on the answerable and unanswerable ones
    apart, and how often each row's answer is an abstention.

    Two ladder rows that differ in one part (``steps``) answer the same questions, so the paired
    difference between them is what that part alone does; split by answerability (as
    :func:`answerability_split`, after the run: no method sees the split) it says whether a step
    gains by abstaining where the question is unanswerable or by answering where it is not.

    Returns:
        {"steps": [{"changes", "from", "to", "parts": {"all" | "answerable" | "unanswerable": {"n",
        "delta_f1", "ci_low", "ci_high", "p", and with ``judge_metric`` "delta_judge_acc",
        "judge_ci_low", "judge_ci_high"}}}], "abstentions": {row of ``results``: {part: answers
        that are abstentions}}, "missing": [steps left out because a row is absent from ``results``, as
        "changes: row"]}. A part with fewer than 2 questions is left out.

    Raises:
        ValueError: as :func:`method_comparison` (rows that answered different questions), and a
            record without gold answers.
    """
    from ragcritic_lib.mining.evidence import is_abstention

    out: dict[str, Any] = {"steps": [], "abstentions": {}, "missing": []}
    part_of: dict[str, str] = {}
    for changes, before, after in steps:
        absent = [row for row in (before, after) if row not in results]
        if absent:
            out["missing"] += [f"{changes}: {row}" for row in absent]
            continue
        part_of = part_of or _answerability_of(before, results[before], dataset)
        parts: dict[str, Any] = {}
        for part in ("all", *ANSWERABILITY_PARTS):
            ids = {q for q, p in part_of.items() if part in ("all", p)}
            if len(ids) < 2:
                continue
            subset = {row: [r for r in results[row] if dataset_name(r) == dataset and str(r["id"]) in ids]
                      for row in (before, after)}
            block = method_comparison(subset, baseline=before, dataset=dataset, n_boot=n_boot, n_perm=n_perm,
                                      alpha=alpha, seed=seed, judge_metric=judge_metric, judge_threshold=judge_threshold)
            row = block[after]
            keep = {"n": row["n"], **{k: row[k] for k in ("delta_f1", "ci_low", "ci_high", "p")}}
            if judge_metric:
                keep.update({k: row[k] for k in ("delta_judge_acc", "judge_ci_low", "judge_ci_high")})
            parts[part] = keep
        out["steps"].append({"changes": changes, "from": before, "to": after, "parts": parts})
    for row in results if part_of else ():
        recs = _by_id(row, results[row], dataset)
        if set(recs) != set(part_of):
            raise ValueError(f"{row}: answered a different question set than the ladder's steps on {dataset!r}")
        out["abstentions"][row] = {part: sum(1 for q, p in part_of.items()
                                             if part in ("all", p) and is_abstention(str(recs[q].get("prediction", ""))))
                                   for part in ("all", *ANSWERABILITY_PARTS)}
    return out


def planner_choices(records: Sequence[Mapping[str, Any]], *, dataset: str | None = None) -> dict[str, Any]:
    """Where one correction row's plans come from: its critic's labels or its planner's choice.

    A planner that writes one program for most answers (notebook 08's ``plan_shares``, flagged
    above 60%) may do so because the critique leaves it one program to run, because the critic
    names one label set for most answers, or because it picks one program whatever it is offered.
    This counts each: the plans (every round's, as ``plan_shares``) with their distinct programs
    and the top one's share; the label sets the critiques named (each step's critique's tier-1
    and tier-2 labels) and the top set's share; the share of plans that are their label set's
    most frequent program (1.0: the program is a function of the labels alone); and, for a planner
    that chooses among candidates (``planner_info.n_options``), the plans it had one option for
    (``forced``), those it chose among several for (``chosen``) and the top program's share of the
    chosen ones. A rule planner's program follows the labels by construction: it has no
    ``forced`` or ``chosen`` (None).

    Args:
        records: the row's result records, each with its ``steps`` (notebook 08's files).
        dataset: only records of this dataset (``dataset_name``); None: all.

    Returns:
        {"plans", "distinct", "top_share", "label_sets", "top_label_share", "label_fixed_share",
        "chooses", "forced", "chosen", "chosen_top_share"}; shares None where nothing was counted.
    """
    steps = [step for r in records if dataset is None or dataset_name(r) == dataset
             for step in r.get("steps") or () if isinstance(step, Mapping) and step.get("program")]
    plans = [(str(step["program"]), step.get("planner_info") or {}) for step in steps]

    def top_share(items: Sequence[Any]) -> float | None:
        return round(Counter(items).most_common(1)[0][1] / len(items), 4) if items else None

    def named(critique: Any, key: str) -> tuple[str, ...]:
        value = critique.get(key) if isinstance(critique, Mapping) else None
        return tuple(sorted({str(v) for v in ([value] if isinstance(value, str) else value or ())}))

    labels = [(named(step.get("critic"), "tag1"), named(step.get("critic"), "tag2")) for step in steps]
    by_labels: dict[tuple, Counter] = {}
    for (program, _), key in zip(plans, labels):
        by_labels.setdefault(key, Counter())[program] += 1
    options = [info.get("n_options") for _, info in plans]
    chooses = any(isinstance(n, int) and not isinstance(n, bool) for n in options)
    chosen = [program for (program, _), n in zip(plans, options) if isinstance(n, int) and n > 1]
    return {
        "plans": len(plans), "distinct": len({p for p, _ in plans}), "top_share": top_share([p for p, _ in plans]),
        "label_sets": len(by_labels), "top_label_share": top_share(labels),
        "label_fixed_share": (round(sum(c.most_common(1)[0][1] for c in by_labels.values()) / len(plans), 4)
                              if plans else None),
        "chooses": chooses, "forced": sum(1 for n in options if n == 1) if chooses else None,
        "chosen": len(chosen) if chooses else None, "chosen_top_share": top_share(chosen) if chooses else None,
    }


def degenerate_list(flags: Mapping[str, Sequence[str] | None]) -> list[str]:
    """``{method: [reason, ...]}`` as sorted "method: reason" strings, each once (empty when none).

    Each method's reasons are its own stage's ``degenerate`` list; a reason given twice is listed
    once.
    """
    out = set()
    for method, reasons in flags.items():
        if isinstance(reasons, str):
            raise ValueError(f"degenerate flags of {method!r} must be a list of reasons, got a string")
        out.update(f"{method}: {reason}" for reason in reasons or ())
    return sorted(out)


def comparison_metrics(*, comparison: Mapping[str, Any], extra_rows: Mapping[str, Any], summaries: Mapping[str, Any],
                       rows: Sequence[Mapping[str, Any]], flags: Mapping[str, Sequence[str] | None],
                       training: Mapping[str, Any], run_metrics: Mapping[str, Mapping[str, Any]],
                       answerability: Mapping[str, Any] | None = None,
                       steps: Mapping[str, Any] | None = None,
                       planners: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The comparison stage's metrics (``reports/metrics/14_comparison.json``, schema
    ``ComparisonMetrics``) before ``jsonable`` (the reading takes them as they are).

    Args:
        comparison: {dataset: :func:`method_comparison`}; extra_rows: {dataset: the oracle and
            ablation rows}; summaries: {dataset: :func:`comparison_summary`}.
        rows: the per-question-type rows (``comparison_table``), copied.
        flags: {method: degenerate reasons}, kept as they are and listed by :func:`degenerate_list`.
        training: :func:`rag_critic_training`.
        run_metrics: {method: its stage's metrics}, whose ``seconds`` are gathered.
        answerability: {dataset: :func:`answerability_split`} over the comparison's rows, the
            oracle and ablation rows and the correction ladder's rows (absent when None).
        steps: {dataset: :func:`ladder_steps`} over the correction ladder's rows, kept as
            ``ladder_steps`` (absent when None).
        planners: {dataset: {row: :func:`planner_choices`}} over the correction rows that plan,
            kept as ``planner_choices`` (absent when None).
    """
    return {
        "comparison": comparison, "oracle_and_ablation_rows": extra_rows, "summary": summaries,
        "rows": [dict(r) for r in rows], "degenerate": degenerate_list(flags), "degenerate_by_method": flags,
        "rag_critic_training": training,
        "stage_seconds": {name: mt.get("seconds") for name, mt in run_metrics.items()},
        **({"answerability": answerability} if answerability is not None else {}),
        **({"ladder_steps": steps} if steps is not None else {}),
        **({"planner_choices": planners} if planners is not None else {}),
    }


def reading(dataset: str, block: Mapping[str, Mapping[str, Any]], summary: Mapping[str, Any],
            flags: Mapping[str, Sequence[str]] | None = None, *, baseline: str = "standard RAG",
            alpha: float = 0.05) -> str:
    """A short Markdown reading of one dataset's comparison, written from its numbers
    (:func:`ragcritic_lib.evaluation.readings.comparison_block`; notebook 14 reads all datasets
    with :func:`~ragcritic_lib.evaluation.readings.reading_comparison`).

    Args:
        block: :func:`method_comparison`'s rows; summary: :func:`comparison_summary`'s dict;
        flags: {method: degenerate reasons}, quoted after the method's line.
    """
    from ragcritic_lib.evaluation.readings import comparison_block

    return comparison_block(dataset, block, summary, flags, baseline=baseline, alpha=alpha)


RAG_CRITIC_RUNS = ("critic_sft", "critic_dpo", "planner_sft")


def rag_critic_training(error_sampling: Mapping[str, Any], tagging: Mapping[str, Any], critic_sft: Mapping[str, Any],
                        critic_dpo: Mapping[str, Any], correction: Mapping[str, Any]) -> dict[str, Any]:
    """RAG-Critic's training cost, from the metrics of notebooks 02, 03, 05, 06 and 08.

    What is counted:

    - ``calls`` (the comparison's ``training_calls``): LLM calls before test time, that is the
      answers sampled for the error pool (02 ``samples``, as ``sampled_answers``) plus the LLM
      teacher's calls on its subsets (02 ``teacher_parse.llm_subset.calls`` and 03
      ``llm_subset_parse.calls``, as ``llm_teacher_calls``).
    - ``steps``: optimizer steps of each training run, {"critic_sft": 05 ``train.steps``,
      "critic_dpo": 06 ``train.steps``, "planner_sft": 08 ``planner_training.steps``}.
    - ``seconds`` (the comparison's ``training_seconds``): the wall time of those three training
      runs (``trainer.train()`` each: 05 ``train.seconds``, 06 ``train.seconds``, 08
      ``planner_training.seconds``), summed; ``seconds_by_run`` gives each. It is None unless
      all three are recorded, so a missing run never makes the total look smaller.

    Not in ``seconds``: the time spent sampling answers and running the LLM teacher (notebooks
    02 and 03 record their calls, counted above, but no wall time), the taxonomy, merging the
    adapters and calibrating the verdicts.
    """
    def seconds(block: Mapping[str, Any] | None) -> float | None:
        value = (block or {}).get("seconds")
        return None if value is None else float(value)

    sampled = error_sampling.get("samples")
    teacher = (((error_sampling.get("teacher_parse") or {}).get("llm_subset") or {}).get("calls", 0)
               + (tagging.get("llm_subset_parse") or {}).get("calls", 0))
    blocks = dict(zip(RAG_CRITIC_RUNS, (critic_sft.get("train"), critic_dpo.get("train"),
                                        correction.get("planner_training"))))
    by_run = {run: seconds(block) for run, block in blocks.items()}
    return {
        "sampled_answers": sampled, "llm_teacher_calls": teacher, "calls": (sampled or 0) + teacher,
        "steps": {run: (block or {}).get("steps") for run, block in blocks.items()},
        "seconds": None if None in by_run.values() else round(sum(by_run.values()), 1),
        "seconds_by_run": by_run,
    }
