"""How many Self-Refine rounds pay, measured on dev: F1 and the judged share after every round.

Stage 09 runs Self-Refine for ``self_refine.rounds`` rounds, and its feedback almost never
approves an answer (0.7% of the test questions, ``09_self_refine.json``), so nearly every question
goes through every round: each round is a feedback call and a rewrite call, both over standard
RAG's passages (about 530 prompt tokens a call). Whether the last round earns its cost is a
cost-quality question like any recipe's. This runs the stage's own Self-Refine (same prompts,
settings and generator, :func:`ragcritic_lib.baselines.self_refine.self_refine`) on the testbed
dev questions, from standard RAG's dev answers (stage 01's ``data/retrieval_rag/testbed/dev.jsonl``),
for ``--rounds`` rounds, and reads each question's answer after every round from its history
(:func:`answers_by_round`). Per round r (0 = standard RAG's answer) it prints and writes to
``--out``: F1 and the share the project's judge calls right; the paired bootstrap 95% CI of round
r minus round r-1 and minus round 0 (resampling questions); and the generator calls, prompt and
completion tokens and seconds the round cost (:class:`RoundMeter`). Dev questions only, never
test. Numbers only, no asserts. Run it alone: other load on the cores changes the seconds.

    .venv/bin/python benchmarks/bench_self_refine_rounds.py      # about 7 min on 2 avx512_bf16 cores
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths


def answers_by_round(record: Mapping[str, Any], rounds: int) -> list[str]:
    """The answer after each round 0..``rounds`` of one Self-Refine result: round 0 is the answer
    it started from (``self_refine_history[0]["reviewed"]``, else its final prediction when it has
    no history); a round whose feedback approved, or that a question never reached, keeps the
    answer before it.

    Raises:
        ValueError: ``rounds`` < 0.
    """
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    history = list(record.get("self_refine_history") or [])
    current = str(history[0].get("reviewed") or "") if history else str(record.get("prediction") or "")
    out = [current]
    for r in range(rounds):
        if r < len(history) and "answer" in history[r]:
            current = str(history[r]["answer"])
        out.append(current)
    return out


class RoundMeter:
    """A generator wrapper that records every ``generate`` call (its ``desc``, prompts, tokens and
    seconds) in order, so the calls of each Self-Refine round can be told apart; the rest passes
    through a :class:`ragcritic_lib.baselines.MeteredLLM`."""

    def __init__(self, llm: Any) -> None:
        from ragcritic_lib.baselines import MeteredLLM

        self.meter = MeteredLLM(llm)
        self.calls: list[dict[str, Any]] = []

    def generate(self, prompts: Sequence[Any], params: Any, desc: str | None = None) -> Any:
        before = dict(self.meter.totals)
        start = time.perf_counter()
        out = self.meter.generate(prompts, params, desc=desc)
        after = self.meter.totals
        self.calls.append({"desc": desc or "", "prompts": len(prompts), "seconds": round(time.perf_counter() - start, 2),
                           **{k: int(after[k] - before[k]) for k in ("prompt_tokens", "completion_tokens")}})
        return out

    def __getattr__(self, name: str) -> Any:
        if name == "meter":
            raise AttributeError(name)
        return getattr(self.meter, name)


def round_costs(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Sum :class:`RoundMeter` calls into rounds: a round opens with a feedback call, and every call
    up to the next feedback call belongs to it (its rewrite). Calls before the first feedback call
    (initial answers) are left out."""
    rounds: list[dict[str, Any]] = []
    for c in calls:
        if "feedback" in c["desc"]:
            rounds.append({"calls": 0, "prompts": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0})
        if not rounds:
            continue
        row = rounds[-1]
        row["calls"] += 1
        for k in ("prompts", "prompt_tokens", "completion_tokens"):
            row[k] += int(c[k])
        row["seconds"] = round(row["seconds"] + float(c["seconds"]), 2)
    return rounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=0, help="rounds to run (0 = self_refine.rounds of params.yaml)")
    ap.add_argument("--questions", type=int, default=0, help="first N dev questions (0 = every one stage 01 answered)")
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=paths.ROOT / "reports" / "benchmarks" / "self_refine_rounds.json")
    args = ap.parse_args()

    from ragcritic_lib.baselines import judge_params, self_refine
    from ragcritic_lib.baselines.stage_setup import setup_method
    from ragcritic_lib.evaluation.scoring import score_prediction
    from ragcritic_lib.evaluation.stats import paired_bootstrap_diff
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.mining.sampling import is_correct
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    setup = setup_method("self_refine")
    params, seed = setup.params, int(setup.params["common"]["seed"])
    rounds = args.rounds or int(params["self_refine"]["rounds"])
    judge = judge_params(params)
    dev = read_jsonl(paths.stage_dir("retrieval_rag") / "testbed" / "dev.jsonl")
    if args.questions:
        dev = dev[: args.questions]
    llm = RoundMeter(setup.llm)
    start = time.perf_counter()
    refined = self_refine.self_refine(llm, dev, rounds=rounds, gen_params=setup.answer_gen,
                                      rag_variant=setup.variant, feedback_params=setup.gen,
                                      max_words=setup.rag["max_passage_words"])
    seconds = round(time.perf_counter() - start, 1)
    f1: list[list[float]] = [[] for _ in range(rounds + 1)]
    right: list[list[float]] = [[] for _ in range(rounds + 1)]
    answers = [answers_by_round(rec, rounds) for rec in refined]
    for rec, per_round in zip(refined, answers):
        for r, answer in enumerate(per_round):
            row = {**rec, "prediction": answer, **score_prediction(answer, list(rec.get("golden_answers") or []))}
            f1[r].append(float(row["f1"]))
            right[r].append(float(is_correct(row, metric=judge["metric"], threshold=judge["threshold"])))
    costs = round_costs(llm.calls)
    summary = self_refine.self_refine_summary(refined)

    def ci(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
        d = paired_bootstrap_diff(a, b, n_boot=args.boot, seed=seed)
        return {k: round(float(d[k]), 4) for k in ("diff", "low", "high")}

    n = len(refined)
    rows = []
    for r in range(rounds + 1):
        row: dict[str, Any] = {"round": r, "f1": round(sum(f1[r]) / n, 4), "judged": round(sum(right[r]) / n, 4),
                               "changed_from_previous": 0 if r == 0 else sum(a[r] != a[r - 1] for a in answers)}
        if r:
            row.update(f1_vs_previous=ci(f1[r], f1[r - 1]), f1_vs_standard=ci(f1[r], f1[0]),
                       judged_vs_previous=ci(right[r], right[r - 1]), judged_vs_standard=ci(right[r], right[0]),
                       cost=costs[r - 1] if r - 1 < len(costs) else None)
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"questions": n, "dataset": "testbed", "split": "dev", "rounds": rounds, "seconds": seconds,
           "cpu_class": cpu_class(), "judge": judge, "n_boot": args.boot,
           "approval_rate_by_round": summary["approval_rate_by_round"], "per_round": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"{n} dev questions, {rounds} rounds, {seconds} s on {doc['cpu_class']} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
