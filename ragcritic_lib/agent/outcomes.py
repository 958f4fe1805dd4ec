"""Planners learned from executed outcomes: which program made a wrong answer right.

A planner trained to copy the rule planner's program learns the table, not what works: on the
testbed the rule programs moved the critic's corrections by almost nothing. Here the programs
are *run*. For wrong answers to training questions (never a test question), each with its
critique from the error-mining stages, several candidate programs of the error-action table go
through the restricted executor with the real actions, and each run is recorded as an executed
outcome: the critique, the program, the new answer, whether the audited judge calls it right
(``ragcritic_lib.mining.sampling.is_correct``) and its F1 change. The planner is then trained
on the programs that helped.

* :func:`candidate_jobs`: per record, the critique's own rule program plus programs drawn at
  random from the rest of the table (``per_record`` in all), the same draw for the same seed.
* :func:`execute_jobs`: one correction round per job (:func:`ragcritic_lib.agent.workflow.run_correction`
  with the record's own critique and the job's program), scored.
* :func:`outcome_targets`: per record, the program whose answer ranks best (judged right first,
  then the larger F1 change), kept only when it helped: the answer became right, or stayed on
  the same side of the judge with a higher F1.
* :func:`outcome_sft_examples`: planner SFT examples from those targets, balanced over the
  programs so that no program dominates what the planner sees.
* :func:`outcome_summary`: what each program did, for the stage's metrics and its flags.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.agent.planner import (
    ErrorActionTable, Plan, PlannerContext, RuleBasedPlanner, build_planner_messages, critic_feedback,
)
from ragcritic_lib.evaluation.scoring import token_f1
from ragcritic_lib.mining.sampling import judge_answer

PLANNER_TARGETS: tuple[str, ...] = ("outcomes", "rule")
"""What the planner is trained on: the executed programs that helped, or the rule planner's programs."""
OUTCOME_DOMINANT_SHARE = 0.6
"""A program that is the target of more than this share of the planner's examples is flagged."""


class GivenCritique:
    """A critic that returns each record's own critique (``critic``, ``critic_target`` or
    ``target``): the diagnosis the error-mining stages wrote for a training answer."""

    name = "given"
    llm = None

    def critique(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [critic_feedback(r) for r in records]


class GivenPrograms:
    """A planner that returns the programs it was handed, one per context, in order (one round)."""

    name = "given"
    llm = None

    def __init__(self, programs: Sequence[str], infos: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.programs = list(programs)
        self.infos = [dict(i) for i in infos] if infos is not None else [{} for _ in self.programs]

    def plan(self, contexts: Sequence[PlannerContext]) -> list[Plan]:
        if len(contexts) != len(self.programs):
            raise ValueError(f"GivenPrograms holds {len(self.programs)} programs for {len(contexts)} contexts")
        return [Plan(program=p, raw=p, source="given", info=i) for p, i in zip(self.programs, self.infos)]


def candidate_jobs(records: Sequence[Mapping[str, Any]], planner: RuleBasedPlanner, *, per_record: int,
                   seed: int = 0) -> list[dict[str, Any]]:
    """The (record, program) pairs to execute.

    Args:
        records: wrong answers with a critique judged "Error" (others are skipped).
        planner: the rule planner whose table supplies the programs.
        per_record: programs per record: the critique's own rule program first, then others of
            the table drawn without replacement (fewer when the table has fewer).

    Returns:
        One dict per job: ``record`` (the record), ``critique`` (its feedback), ``program``,
        ``plan_label`` and ``own`` (True for the critique's own rule program).
    """
    if per_record < 1:
        raise ValueError(f"per_record must be >= 1, got {per_record}")
    rng = random.Random(seed)
    table = planner.candidate_programs({"judgement": "Error"}, scope="table")
    jobs = []
    for rec in records:
        fb = critic_feedback(rec)
        if fb["judgement"] != "Error":
            continue
        own, own_info = planner.program_for(fb, str(rec.get("prediction") or ""))
        others = [(p, i) for p, i in table if p != own]
        picked = [(own, own_info, True)] + [(p, i, False) for p, i in rng.sample(others, min(per_record - 1, len(others)))]
        jobs += [{"record": rec, "critique": fb, "program": p, "plan_label": info["plan_label"], "own": is_own}
                 for p, info, is_own in picked]
    return jobs


def execute_jobs(jobs: Sequence[Mapping[str, Any]], *, actions: Any, judge_metric: str, judge_threshold: float,
                 max_calls: int = 16, timeout_s: float = 60.0, table: ErrorActionTable | None = None
                 ) -> list[dict[str, Any]]:
    """Run every job's program once on its record and score the answer it leaves.

    Returns:
        One executed outcome per job: ``id``, ``dataset``, ``question``, ``tag1``/``tag2`` (the
        critique's labels), ``program``, ``plan_label``, ``own``, ``status`` (the executor's:
        "corrected", "rejected", ...), ``answer_before``/``answer_after``, ``right_before``/
        ``right_after`` (the judge's verdicts), ``f1_before``/``f1_after``/``delta_f1`` and
        ``helped`` (see :func:`helped`). A program that fails keeps the old answer.
    """
    from ragcritic_lib.agent.workflow import run_correction

    if not jobs:
        return []
    records = [dict(j["record"]) for j in jobs]
    planner = GivenPrograms([j["program"] for j in jobs], [{"plan_label": j["plan_label"]} for j in jobs])
    results = run_correction(records, critic=GivenCritique(), planner=planner, actions=actions, iterations=1,
                             max_calls=max_calls, timeout_s=timeout_s, table=table)
    out = []
    for job, res in zip(jobs, results):
        rec, step = job["record"], (res["steps"] or [{}])[0]
        golds = [str(g) for g in rec.get("golden_answers") or []]
        before, after = str(res["predictions"][0]), str(res["predictions"][-1])
        right = [judge_answer(rec, p, metric=judge_metric, threshold=judge_threshold) for p in (before, after)]
        f1 = [round(token_f1(p, golds), 4) for p in (before, after)]
        row = {"id": rec.get("id"), "dataset": rec.get("dataset"), "question": rec.get("question"),
               "tag1": job["critique"]["tag1"], "tag2": job["critique"]["tag2"], "program": job["program"],
               "plan_label": job["plan_label"], "own": bool(job["own"]), "status": step.get("status"),
               "reason": step.get("reason"), "answer_before": before, "answer_after": after,
               "right_before": right[0], "right_after": right[1], "f1_before": f1[0], "f1_after": f1[1],
               "delta_f1": round(f1[1] - f1[0], 4)}
        row["helped"] = helped(row)
        out.append(row)
    return out


def helped(outcome: Mapping[str, Any]) -> bool:
    """Whether a program helped: its answer became right by the judge, or stayed on the same side
    of the judge with a higher F1. An answer the judge called right before that turns wrong never helped."""
    before, after = bool(outcome["right_before"]), bool(outcome["right_after"])
    if after != before:
        return after
    return float(outcome["delta_f1"]) > 0


def _rank(outcome: Mapping[str, Any]) -> tuple[bool, float, bool]:
    # judged right first, then the F1 change; between equals the record's own rule program
    return bool(outcome["right_after"]), float(outcome["delta_f1"]), bool(outcome.get("own"))


def outcome_targets(outcomes: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per record id, the best executed outcome when it helped (records where nothing helped are left out)."""
    best: dict[str, Mapping[str, Any]] = {}
    for o in outcomes:
        key = str(o["id"])
        if key not in best or _rank(o) > _rank(best[key]):
            best[key] = o
    return {k: dict(o) for k, o in best.items() if helped(o)}


def outcome_sft_examples(records: Sequence[Mapping[str, Any]], targets: Mapping[str, Mapping[str, Any]],
                         table: ErrorActionTable, *, variant: str = "compact", max_examples: int | None = None,
                         seed: int = 0) -> list[dict[str, Any]]:
    """Planner SFT examples ``{"messages": [system, user, assistant], "plan_label"}``: each record
    with a target shows its question, passages, answer and critique, and the program that helped.

    With ``max_examples`` the examples are taken round-robin over the target programs (each
    shuffled with ``seed``), so a program that helps often does not crowd out the others.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        target = targets.get(str(rec.get("id")))
        if target is None:
            continue
        ctx = PlannerContext.from_record(rec, critic_feedback(rec), table)
        messages = build_planner_messages(ctx, variant=variant)
        groups.setdefault(str(target["plan_label"]), []).append(
            {"messages": [*messages, {"role": "assistant", "content": target["program"]}],
             "plan_label": target["plan_label"]})
    if max_examples is None:
        return [ex for rec_group in groups.values() for ex in rec_group]
    rng = random.Random(seed)
    ordered = [groups[k] for k in sorted(groups)]
    for g in ordered:
        rng.shuffle(g)
    out: list[dict[str, Any]] = []
    for i in range(max((len(g) for g in ordered), default=0)):
        out.extend(g[i] for g in ordered if i < len(g))
    return out[:max_examples]


def outcome_summary(outcomes: Sequence[Mapping[str, Any]], targets: Mapping[str, Mapping[str, Any]],
                    examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the executed programs did.

    Returns:
        {"executed_records", "records", "statuses" (executor statuses counted), "made_right"
        (outcomes that turned a wrong answer right), "helped", "records_helped" (records with a
        target), "own_program": {"executed", "made_right", "mean_delta_f1"} (the critique's own
        rule program), "by_program": {plan_label: {"executed", "made_right", "helped",
        "mean_delta_f1", "targets"}}, "examples", "top_target_share"}.
    """
    def group(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        n = len(rows)
        return {"executed": n, "made_right": sum(1 for r in rows if r["right_after"] and not r["right_before"]),
                "helped": sum(1 for r in rows if helped(r)),
                "mean_delta_f1": round(sum(float(r["delta_f1"]) for r in rows) / n, 4) if n else None}

    by_label: dict[str, list[Mapping[str, Any]]] = {}
    for o in outcomes:
        by_label.setdefault(str(o["plan_label"]), []).append(o)
    target_counts = Counter(str(t["plan_label"]) for t in targets.values())
    example_counts = Counter(str(e["plan_label"]) for e in examples)
    overall = group(outcomes)
    return {
        "executed_records": overall["executed"], "records": len({str(o["id"]) for o in outcomes}),
        "statuses": dict(Counter(str(o["status"]) for o in outcomes)),
        "made_right": overall["made_right"], "helped": overall["helped"], "records_helped": len(targets),
        "mean_delta_f1": overall["mean_delta_f1"],
        "own_program": group([o for o in outcomes if o.get("own")]),
        "by_program": {k: {**group(v), "targets": target_counts.get(k, 0)} for k, v in sorted(by_label.items())},
        "examples": len(examples),
        "top_target_share": round(max(example_counts.values()) / len(examples), 4) if examples else None,
    }


def outcome_flags(summary: Mapping[str, Any], *, min_examples: int = 20,
                  dominant_share: float = OUTCOME_DOMINANT_SHARE) -> list[str]:
    """The planner data's ``degenerate`` flags: too few examples to learn from, or one program
    the target of more than ``dominant_share`` of them (a planner trained on it would write one plan)."""
    flags = []
    n = int(summary.get("examples") or 0)
    if n < min_examples:
        flags.append(f"planner_data: {n} examples from programs that helped (fewer than {min_examples})")
    share = summary.get("top_target_share")
    if share is not None and float(share) > dominant_share:
        flags.append(f"planner_data: one program is the target of {float(share):.0%} of the examples "
                     f"(over {dominant_share:.0%})")
    return flags


def planner_data_metrics(*, records: Sequence[Mapping[str, Any]], datasets: Sequence[str], targets: str,
                         programs_per_record: int, summary: Mapping[str, Any], train_result: Mapping[str, Any],
                         test_overlap: int, min_examples: int) -> dict[str, Any]:
    """``08_planner_data.json`` (schema ``PlannerDataMetrics``): the records drawn per dataset,
    what the executed programs did (:func:`outcome_summary`), the planner's training run (its
    ``to_dict()``; wall times, log and recipe left out), the train questions and the flags
    (:func:`outcome_flags`, only when the planner learns from outcomes)."""
    keep = ("steps", "examples", "dropped_too_long", "device", "is_adapter")
    return {
        "records": {ds: sum(1 for r in records if r.get("dataset") == ds) for ds in datasets},
        "targets": targets, "programs_per_record": int(programs_per_record), "outcomes": dict(summary),
        "train": {k: train_result[k] for k in keep if k in train_result},
        "questions": {"train": len({str(r.get("question")) for r in records}), "test_overlap": int(test_overlap)},
        "degenerate": outcome_flags(summary, min_examples=min_examples) if targets == "outcomes" else [],
    }
