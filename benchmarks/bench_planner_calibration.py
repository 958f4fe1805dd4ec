"""Would batch-calibrated choices spread stage 08's trained planner over more programs, and at what
dev F1? Replayed on the shipped dev corrections of stage 08's acting-threshold fit; only the
plans that change are executed again.

Stage 08's trained planner chooses among the programs for the labels a critique names by
constrained greedy decoding, and it flags itself when one program takes more than 60% of its
plans (the oracle-verdict row's took 66% on test). Part of that is its own preference: where a
critique offers three programs it chooses the same position every time. Batch calibration is the
general remedy for a model that favours some options whatever the input: score every program of
the table (and every combined program a critique of the batch offers) on every prompt of the
batch (no labels, no gold: the planner's inputs only), take each
program's mean as its prior, and choose the candidate with the highest total log-probability
minus its prior, so a program the planner likes everywhere does not win everywhere by that alone.

On the first ``correction.dev_questions`` testbed dev answers of ``data/correction/testbed/
dev_act_threshold_runs.jsonl`` (every answer critiqued as wrong by the shipped critic, planned
by the shipped planner, corrected once), this prints the planner's choices both ways (constrained
as shipped, and calibrated: distinct programs, the top program's share), executes the calibrated
plans that differ (a planner that returns them, through the stage's own
:func:`ragcritic_lib.agent.ladder.fit_critic_act_threshold`, which critiques again and verifies),
and prints the dev F1 both ways: correcting every answer as run, and at the critic's calibrated
threshold with verification (the stage's setting), each with the paired bootstrap 95% CI of
calibrated minus shipped. Numbers only, no asserts. Dev answers only, never test.

    .venv/bin/python benchmarks/bench_planner_calibration.py   # about 20 min on 2 AVX2 cores, cold
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import read_json, read_jsonl


def batch_prior(table_scores: Sequence[Sequence[float]]) -> list[float]:
    """Each program's mean score over the batch (rows: prompts, columns: every table program).

    Raises:
        ValueError: no rows, or rows of different lengths.
    """
    if not table_scores:
        raise ValueError("batch_prior: no scores")
    width = len(table_scores[0])
    if any(len(row) != width for row in table_scores):
        raise ValueError("batch_prior: every prompt needs a score for every program")
    return [sum(float(row[j]) for row in table_scores) / len(table_scores) for j in range(width)]


def calibrated_pick(candidates: Sequence[str], programs: Sequence[str], row: Sequence[float],
                    prior: Sequence[float]) -> int:
    """The index in ``candidates`` with the highest score minus prior (``row`` and ``prior`` are
    over ``programs``, the table's); ties go to the earlier candidate.

    Raises:
        KeyError: a candidate that is not one of ``programs``.
    """
    where = {p: j for j, p in enumerate(programs)}
    missing = [c for c in candidates if c not in where]
    if missing:
        raise KeyError(f"calibrated_pick: candidate not among the table's programs: {missing[0][:60]!r}")
    adj = [float(row[where[c]]) - float(prior[where[c]]) for c in candidates]
    return max(range(len(adj)), key=lambda i: (adj[i], -i))


def shares(programs: Sequence[str]) -> dict[str, Any]:
    """Plans, distinct programs and the top program's share."""
    counts = Counter(programs)
    top = counts.most_common(1)[0][1] if counts else 0
    return {"plans": len(programs), "distinct": len(counts), "top_share": round(top / len(programs), 4) if programs else 0.0}


def dev_f1(records: Sequence[Mapping[str, Any]], *, threshold: float, verified: bool) -> list[float]:
    """Per record of a dev-fit run: the F1 after correcting where the critic's margin is above
    ``threshold`` (and, with ``verified``, the verification kept the new answer), else before."""
    from ragcritic_lib.evaluation.scoring import score_prediction

    out = []
    for r in records:
        step = (r.get("steps") or [{}])[0]
        golds = list(r.get("golden_answers") or [])
        before = score_prediction(str(r["predictions"][0]), golds)["f1"]
        after = score_prediction(str(r["final_prediction"]), golds)["f1"]
        margin = (step.get("critic") or {}).get("margin")
        kept = (step.get("verification") or {}).get("kept", True) if verified else True
        out.append(after if margin is not None and float(margin) > threshold and kept else before)
    return out


class _FixedPlanner:
    """Returns the program chosen beforehand for each question (the calibrated picks)."""

    def __init__(self, by_question: Mapping[str, str]) -> None:
        self.by_question = dict(by_question)

    def plan(self, contexts: Sequence[Any], **_: Any) -> list[Any]:
        from ragcritic_lib.agent.planner import Plan

        return [Plan(program=self.by_question[c.question], raw=self.by_question[c.question], source="llm",
                     info={"decoding": "calibrated"}) for c in contexts]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=2000)
    args = ap.parse_args()

    from ragcritic_lib import runtime
    from ragcritic_lib.agent.ladder import fit_critic_act_threshold
    from ragcritic_lib.agent.workflow import correction_actions
    from ragcritic_lib.agent.planner import (
        PlannerContext, RuleBasedPlanner, build_planner_messages, load_error_actions, load_trained_planner,
        passage_strings,
    )
    from ragcritic_lib.critic.critics import load_trained_critic, load_verdict_threshold
    from ragcritic_lib.evaluation.stats import paired_comparison
    from ragcritic_lib.mining.taxonomy import load_taxonomy
    from ragcritic_lib.pipeline.stage_models import setup_stage
    from ragcritic_lib.retrieval import CrossEncoderReranker

    setup = setup_stage("correction")
    params, cfg = setup.params, setup.params["correction"]
    runs_file = paths.resolve("data/correction/testbed/dev_act_threshold_runs.jsonl")
    if not runs_file.exists():
        raise SystemExit(f"no {runs_file} (run or restore stage 08 first)")
    shipped = read_jsonl(runs_file)
    taxonomy = load_taxonomy()
    table = load_error_actions(taxonomy=taxonomy)
    rule = RuleBasedPlanner(table, topk=cfg["action_topk"], deep_topk=cfg["deep_topk"])
    result = read_json(paths.resolve(cfg["planner_dir"]) / "planner_train_result.json")
    planner = load_trained_planner(params, paths.resolve(result["adapter_dir"]), variant=params["planner_data"]["prompt"],
                                   decoding="constrained", candidates=rule, scope=cfg["planner_candidates"])

    contexts = [PlannerContext(question=str(r["question"]), passages=passage_strings(r.get("passages", [])),
                               prediction=str(r["predictions"][0]), critic=dict(r["steps"][0]["critic"]), table=table)
                for r in shipped]
    programs = [p for p, _ in rule.candidate_programs({"judgement": "Error"}, "", scope="table")]
    candidates = [[p for p, _ in rule.candidate_programs(c.critic, c.prediction, scope=cfg["planner_candidates"])]
                  for c in contexts]
    # A critique's own program may join one label's plan to another's instruction: not one of the
    # table's single-label programs, so those are scored on every prompt too.
    extras = list(dict.fromkeys(p for cands in candidates for p in cands if p not in programs))
    prompts = [build_planner_messages(c, variant=planner.variant) for c in contexts]
    table_scores = planner.llm.score(prompts, [programs] * len(prompts), desc="table programs")
    if extras:
        extra_scores = planner.llm.score(prompts, [extras] * len(prompts), desc="combined programs")
        table_scores = [list(t) + list(e) for t, e in zip(table_scores, extra_scores)]
        programs = programs + extras
    prior = batch_prior(table_scores)
    as_run = [str(r["steps"][0]["program"]) for r in shipped]
    picks = [cands[calibrated_pick(cands, programs, row, prior)] for cands, row in zip(candidates, table_scores)]
    print(f"{len(shipped)} dev answers, {len(programs)} programs ({len(extras)} of them combined); prior per program: "
          + ", ".join(f"{v:.1f}" for v in prior))
    print(f"  shipped (constrained): {shares(as_run)}")
    print(f"  calibrated:            {shares(picks)}; differs on {sum(a != b for a, b in zip(as_run, picks))}")

    changed = [i for i, (a, b) in enumerate(zip(as_run, picks)) if a != b]
    merged = list(shipped)
    if changed:
        rag_cfg, retriever_cfg = params["retrieval_rag"], runtime.retriever_config(params)
        # The correction stage's own actions (its notes, expansion, rerank depth and prompt prefix)
        actions = correction_actions(setup.llm, setup.retriever("testbed"), settings=cfg, rag=rag_cfg,
                                     reranker=CrossEncoderReranker(retriever_cfg["reranker"]), table=table,
                                     default_rerank_depth=retriever_cfg["rerank_depth"])
        critic = load_trained_critic(params, paths.resolve(cfg["critic_dir"]), taxonomy, verdict="calibrated",
                                     max_new_tokens=cfg["critic_max_new_tokens"], name="trained")
        originals = {str(r["id"]): r for r in read_jsonl(paths.stage_dir("retrieval_rag") / "testbed" / "dev.jsonl")}
        _, rerun = fit_critic_act_threshold([originals[str(shipped[i]["id"])] for i in changed], critic=critic,
                                            planner=_FixedPlanner({contexts[i].question: picks[i] for i in changed}),
                                            actions=actions, max_calls=cfg["max_calls"], timeout_s=cfg["timeout_s"],
                                            table=table, verify="dev_f1", seed=params["common"]["seed"])
        for i, r in zip(changed, rerun):
            merged[i] = r
    threshold = load_verdict_threshold(paths.resolve(cfg["critic_dir"]) / "verdict_calibration.json")
    for label, t, verified in (("correcting every answer, unverified", float("-inf"), False),
                               (f"above the calibrated threshold {threshold:+.3f}, verified", threshold, True)):
        a, b = dev_f1(shipped, threshold=t, verified=verified), dev_f1(merged, threshold=t, verified=verified)
        cmp = paired_comparison(b, a, n_boot=args.n_boot, n_perm=args.n_boot, seed=0)
        print(f"  dev F1 {label}: shipped {sum(a) / len(a):.4f}, calibrated {sum(b) / len(b):.4f}; "
              f"difference {cmp['delta']:+.4f} ({cmp['ci_low']:+.4f}, {cmp['ci_high']:+.4f}), MDE {cmp['mde']:.4f}", flush=True)


if __name__ == "__main__":
    main()
