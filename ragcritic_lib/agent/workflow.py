"""The critic-guided agentic workflow (RAG-Critic Algorithm 1): Generate -> Critic -> Plan -> Execute.

:func:`run_correction` starts from standard-RAG results (the "Generate" step) and, for up to
``iterations`` rounds, asks the critic about every sample still open, skips those judged correct,
plans a program for the others and runs it with the restricted executor. A rejected or failing
program keeps the previous answer; so does a new answer that a verifier (optional: the critic
itself) does not judge less likely wrong than the old one, on the same question and passages.
Every step is recorded per sample (critique, program, trace of action calls, action log, new
answer, status and rejection reason) for the case-study tables.

Ablation switches are objects, not flags: any critic with ``critique(records)`` (the trained
``LLMCritic``, the zero-shot one, :class:`OracleCritic` using gold correctness, or
:class:`TierFilterCritic` keeping tier-1 labels only) and any planner with ``plan(contexts)``
(``LLMPlanner`` trained or zero-shot, ``RuleBasedPlanner``). :class:`CostMeter` counts LLM
calls, tokens and wall time per phase for the cost table (Table 8).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ragcritic_lib.agent.actions import ActionSet
from ragcritic_lib.agent.executor import ProgramError, ProgramRuntimeError, run_program
from ragcritic_lib.agent.planner import PlannerContext, critic_feedback, passage_strings
from ragcritic_lib.evaluation.scoring import aggregate, aggregate_by, score_prediction
from ragcritic_lib.retrieval.rag import answer_gen_params
from ragcritic_lib.paths import method_slug  # noqa: F401  (notebook 08 names its run files with it)

STATUSES = (
    "corrected",         # the program ran and produced a new non-empty answer
    "skipped_correct",   # the critic judged the answer correct
    "skipped_unparsed",  # the critic's output held no judgement
    "no_program",        # the planner's output held no program
    "rejected",          # the executor rejected the program (UnsafeProgramError)
    "runtime_error",     # the program failed on its values (ProgramRuntimeError)
    "empty_answer",      # the program ran but its final answer was empty
    "not_verified",      # the program's answer was not preferred by the verifier; the old one stays
)
FAILED = frozenset({"no_program", "rejected", "runtime_error", "empty_answer"})


ANSWER_PREFIXES = ("shared", "whole")


def generating_model(llm: Any) -> Any:
    """The model under any wrappers that hold it as their ``llm`` attribute (a
    :class:`ragcritic_lib.baselines.MeteredLLM` counting a method's cost); ``llm`` itself when it
    is not wrapped."""
    seen: set[int] = set()
    while id(llm) not in seen and "llm" in getattr(llm, "__dict__", {}):
        seen.add(id(llm))
        llm = llm.__dict__["llm"]
    return llm


def correction_actions(llm: Any, retriever: Any, *, settings: Mapping[str, Any], rag: Mapping[str, Any],
                       reranker: Any, table: Any, default_rerank_depth: int) -> ActionSet:
    """The correction stage's action layer over one dataset's retriever, built from its settings.

    Stage 08_correction corrects with it and stage 08_planner_data runs the planner's candidate
    programs through the same call, so the outcomes the planner learns from come from the actions
    it is used with; stage 12_repair runs RePAIR's plans on it (with ``answer_prefix: whole``), so
    the two planners are compared on the same actions. ``settings`` holds the ``correction`` keys ``answer_mode``, ``refine_notes``,
    ``rewrite_expand``, ``action_rerank_depth`` (0: ``default_rerank_depth``, the common
    retriever's) and ``answer_prefix``; ``rag`` the ``retrieval_rag`` keys GenerateAnswer answers
    with (its prompt variant and answer setting, ``top_k`` passages of at most
    ``max_passage_words`` words). ``answer_prefix: shared`` turns on ``share_generation_prefix``
    (the opening every GenerateAnswer prompt shares is encoded once); ``whole`` turns it off. The
    switch is set on the model that generates: through a wrapper that holds it as its ``llm``
    attribute (a cost meter, as RePAIR's stage passes), where a flag on the wrapper would be ignored.
    """
    missing = [k for k in ("answer_mode", "refine_notes", "rewrite_expand", "action_rerank_depth", "answer_prefix")
               if k not in settings]
    if missing:
        raise KeyError(f"correction.{missing[0]}: missing from the correction settings")
    if settings["answer_prefix"] not in ANSWER_PREFIXES:
        raise ValueError(f"correction.answer_prefix: must be one of {' | '.join(ANSWER_PREFIXES)}, "
                         f"got {settings['answer_prefix']!r}")
    depth = settings["action_rerank_depth"]
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise ValueError(f"correction.action_rerank_depth: must be an integer >= 0, got {depth!r}")
    generating_model(llm).share_generation_prefix = settings["answer_prefix"] == "shared"
    return ActionSet(llm, retriever, gen_params=answer_gen_params(rag["prompt_variant"], rag["max_new_tokens"]),
                     topk=rag["top_k"], max_doc_words=rag["max_passage_words"], rag_variant=rag["prompt_variant"],
                     reranker=reranker, rerank_depth=depth or default_rerank_depth, max_docs=rag["top_k"],
                     table=table, answer_mode=settings["answer_mode"], notes=settings["refine_notes"],
                     expand=settings["rewrite_expand"])


# --------------------------------------------------------------------------------------------
# Critic variants owned by the workflow
# --------------------------------------------------------------------------------------------
class OracleCritic:
    """Gold correctness as the judgement: the ceiling of what a critic can add.

    Args:
        metric, threshold: the judge of correctness (:func:`ragcritic_lib.mining.sampling.is_correct`):
            "acc" (gold answer contained in the prediction) or "em" at 1.0, or the project's
            judge (``error_sampling.judge_metric`` and ``judge_threshold``, e.g. "truth").
        tagger: optional critic (e.g. ``HeuristicCritic``) whose tags and analysis are attached
            to the samples the oracle judges wrong; without it error critiques carry no labels
            and the rule-based planner uses the table's default.
    """

    name = "oracle"

    def __init__(self, metric: str = "acc", tagger: Any | None = None, threshold: float = 1.0) -> None:
        from ragcritic_lib.mining.sampling import JUDGE_METRICS

        if metric not in JUDGE_METRICS:
            raise ValueError(f"OracleCritic metric must be one of {JUDGE_METRICS}, got {metric!r}")
        self.metric, self.tagger, self.threshold = metric, tagger, threshold
        self.llm = getattr(tagger, "llm", None)  # the tagger's calls are this critic's cost
        self.last_generations: list[Any] = []

    def critique(self, records: Sequence[Mapping[str, Any]]) -> list[Any]:
        from ragcritic_lib.critic.critics import CORRECT, ERROR, CriticParse

        from ragcritic_lib.mining.sampling import is_correct

        wrong = [i for i, r in enumerate(records) if not is_correct(r, metric=self.metric, threshold=self.threshold)]
        tags: dict[int, Any] = {}
        self.last_generations = []
        if self.tagger is not None and wrong:
            wrong_records = [records[i] for i in wrong]
            # A critic that can be told the answer is wrong writes its error critique directly.
            tag_fn = getattr(self.tagger, "critique_errors", None) or self.tagger.critique
            tags = dict(zip(wrong, tag_fn(wrong_records)))
            self.last_generations = list(getattr(self.tagger, "last_generations", []))
        out = []
        wrong_set = set(wrong)
        for i in range(len(records)):
            if i not in wrong_set:
                out.append(CriticParse(judgement=CORRECT, valid_json=True))
                continue
            fb = critic_feedback(tags.get(i))
            out.append(CriticParse(judgement=ERROR, analysis=fb["analysis"] or "The answer does not match the gold answer.",
                                   tag1=fb["tag1"], tag2=fb["tag2"], tag3=fb["tag3"], valid_json=True))
        return out


class TierFilterCritic:
    """Wraps a critic and keeps only its tier-1 labels ("w/o data-driven labels" ablation)."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.name = f"{getattr(base, 'name', type(base).__name__)}:tier1"
        self.llm = getattr(base, "llm", None)

    @property
    def last_generations(self) -> list[Any]:
        return getattr(self.base, "last_generations", [])

    def critique(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for parse in self.base.critique(records):
            fb = critic_feedback(parse)
            fb["tag2"], fb["tag3"] = [], []
            out.append(fb)
        return out


# --------------------------------------------------------------------------------------------
# Cost accounting (Table 8)
# --------------------------------------------------------------------------------------------
_STAT_KEYS = ("calls", "cached_calls", "prompt_tokens", "completion_tokens", "seconds")


class CostMeter:
    """LLM usage and wall time per phase (critic, planner, actions) of one method.

    ``calls`` / ``prompt_tokens`` / ``completion_tokens`` count every logical model call, served
    from the cache or not (what the method costs on a cold run); ``generated_calls`` and
    ``generation_s`` are what the backends actually generated in this run.
    """

    def __init__(self) -> None:
        self.phases: dict[str, Counter[str]] = {}

    @contextmanager
    def phase(self, name: str, llms: Sequence[Any]) -> Iterator[Counter[str]]:
        distinct = list({id(m): m for m in llms if m is not None and hasattr(m, "stats")}.values())
        before = [m.stats.snapshot() for m in distinct]
        start = time.perf_counter()
        counter = self.phases.setdefault(name, Counter())
        try:
            yield counter
        finally:
            counter["wall_s"] += time.perf_counter() - start
            for m, snap in zip(distinct, before):
                now = m.stats.snapshot()
                counter["generated_calls"] += now["calls"] - snap["calls"]
                counter["generation_s"] += now["seconds"] - snap["seconds"]

    def summary(self, n_samples: int | None = None) -> dict[str, dict[str, float]]:
        """Per phase and in total; with ``n_samples``, per-sample means are added."""
        out: dict[str, dict[str, float]] = {}
        total: Counter[str] = Counter()
        for name, c in self.phases.items():
            out[name] = {k: round(float(v), 3) for k, v in sorted(c.items())}
            total.update(c)
        out["total"] = {k: round(float(v), 3) for k, v in sorted(total.items())}
        if n_samples:
            for row in list(out.values()):
                for key in ("calls", "prompt_tokens", "completion_tokens", "wall_s"):
                    if key in row:
                        row[f"{key}_per_sample"] = round(row[key] / n_samples, 3)
        return out


_RUN_DEPENDENT = ("wall_s", "generation_s", "generated_calls")


def stable_costs(costs: Any) -> Any:
    """The cost numbers with wall times and this run's generated-call counts removed.

    Those depend on the machine and on what the cache already held; metrics files keep only the
    counts that a re-run of the same configuration reproduces exactly (wall times stay in the
    Markdown cost table).
    """
    if isinstance(costs, Mapping):
        return {k: stable_costs(v) for k, v in costs.items() if not str(k).startswith(_RUN_DEPENDENT)}
    return costs


def _count_generations(counter: Counter[str], gens: Sequence[Any]) -> None:
    for g in gens:
        counter["calls"] += 1
        counter["prompt_tokens"] += int(getattr(g, "prompt_tokens", 0))
        counter["completion_tokens"] += int(getattr(g, "completion_tokens", 0))


def _answered(llm: Any) -> int | None:
    """Prompts a backend has answered so far (generate, score and choose; cached or not), or None
    for a model without usage statistics."""
    stats = getattr(llm, "stats", None)
    requests = getattr(stats, "requests", None)
    return int(requests) if isinstance(requests, (int, float)) else None


def _count_component(counter: Counter[str], component: Any, llm: Any, answered_before: int | None) -> None:
    """A critic's or planner's calls in one phase: the calls it lists (``last_generations``) plus
    every other prompt its model answered meanwhile, such as a calibrated critic's verdict scoring
    (``score_calls``; a scored option carries no token counts)."""
    gens = list(getattr(component, "last_generations", []) or [])
    _count_generations(counter, gens)
    after = _answered(llm)
    if answered_before is not None and after is not None and after - answered_before > len(gens):
        extra = after - answered_before - len(gens)
        counter["calls"] += extra
        counter["score_calls"] += extra


def rag_cost(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Cost of the standard-RAG generation step from its result records."""
    return {
        "calls": float(len(records)),
        "prompt_tokens": float(sum(int(r.get("prompt_tokens", 0)) for r in records)),
        "completion_tokens": float(sum(int(r.get("completion_tokens", 0)) for r in records)),
    }


# --------------------------------------------------------------------------------------------
# Algorithm 1
# --------------------------------------------------------------------------------------------
def state_record(rec: Mapping[str, Any], passages: list[str], prediction: str, first: bool) -> dict[str, Any]:
    """What the critic (and a verifier) sees in a round: the sample with its current passages and answer."""
    row = dict(rec)
    row["passages"] = [{"id": "", "contents": p, "score": 0.0} for p in passages]
    row["prediction"] = prediction
    if not first:
        row["truncated"] = False  # set by the generator on the first answer only
    return row


def _execute(program: str, actions: Any, fns: Mapping[str, Any], variables: Mapping[str, Any],
             max_calls: int, timeout_s: float, critique: Any = None) -> dict[str, Any]:
    """Run one program for real; never raises for the program's own faults.

    ``run_program`` reports every fault a program can cause (including ones no check foresaw,
    as ``evaluation_error``) as a :class:`ProgramError`; each becomes the step's status and
    reason, so one bad program costs its sample's correction, not the stage.
    """
    if hasattr(actions, "drain_events"):
        actions.drain_events()
    _begin_sample(actions, variables, critique)
    out: dict[str, Any] = {"answer": None, "trace": [], "reason": None, "message": None, "n_calls": 0}
    try:
        res = run_program(program, fns, variables=variables, max_calls=max_calls, timeout_s=timeout_s)
    except ProgramError as err:
        status = "runtime_error" if isinstance(err, ProgramRuntimeError) else "rejected"
        out.update(status=status, reason=err.reason_code, message=err.message, trace=err.trace, n_calls=err.n_calls)
    else:
        answer = (res.final_answer or "").strip()
        out.update(trace=res.trace, n_calls=res.n_calls)
        if answer:
            out.update(status="corrected", answer=answer)
        else:
            out.update(status="empty_answer", reason="empty_answer")
    out["events"] = actions.drain_events() if hasattr(actions, "drain_events") else []
    return out


def _begin_sample(actions: Any, variables: Mapping[str, Any], critique: Any) -> None:
    """Tell the actions which passages, answer and critique the next program corrects."""
    if hasattr(actions, "begin_sample"):
        actions.begin_sample(variables.get("docs", []), variables.get("prediction", ""), critique,
                             question=variables.get("question", ""))


def _prefetch(jobs: Sequence[tuple[Any, ...]], actions: Any, fns: Mapping[str, Any],
              max_calls: int, timeout_s: float, max_rounds: int) -> int:
    """Batch the programs' generator calls across samples (see ragcritic_lib.agent.actions)."""
    if not hasattr(actions, "begin_prefetch"):
        return 0
    total = 0
    for _ in range(max_rounds):
        actions.begin_prefetch()
        try:
            for program, variables, *critique in jobs:
                _begin_sample(actions, variables, critique[0] if critique else None)
                try:
                    run_program(program, fns, variables=variables, max_calls=max_calls, timeout_s=timeout_s)
                except ProgramError:
                    pass  # the real run reports it
            n = actions.flush_prefetch()
        finally:
            actions.end_prefetch()
        total += n
        if n == 0:
            break
    return total


def run_correction(
    records: Sequence[Mapping[str, Any]],
    *,
    critic: Any,
    planner: Any,
    actions: Any,
    iterations: int = 1,
    max_calls: int = 16,
    timeout_s: float = 30.0,
    table: Any | None = None,
    meter: CostMeter | None = None,
    prefetch: bool = True,
    max_prefetch_rounds: int = 6,
    verifier: Any | None = None,
) -> list[dict[str, Any]]:
    """Critic-guided correction of standard-RAG results (Algorithm 1, repeated ``iterations`` times).

    Args:
        records: standard-RAG result records (question, passages, prediction, golden_answers, ...).
        critic: object with ``critique(records) -> list[CriticParse | dict]``.
        planner: object with ``plan(list[PlannerContext]) -> list[Plan]``.
        actions: an ``ActionSet`` (its ``functions()`` are what programs may call).
        iterations: rounds of critic -> plan -> execute; a sample judged correct, or whose
            step failed, leaves the loop (with greedy decoding a retry would see the same inputs).
        max_calls, timeout_s: executor limits per program.
        table: error-action table shown to LLM planners (default: ``planner.table`` if any).
        meter: accumulates per-phase cost when given.
        prefetch: batch the generator calls of all programs of a round (same results, fewer
            and larger generate calls).
        verifier: None (every new answer replaces the old one, as Algorithm 1 reads) or an object
            with ``verdict_margins(records)`` (log P(Error) - log P(Correct), e.g. the trained
            critic): a new answer is kept only when its margin is lower than the old answer's,
            both judged with the question and passages the round started from; otherwise the
            step's status is "not_verified", the old answer stays and the sample leaves the loop.
            Each such step records ``verification`` (both margins, kept) and its
            ``candidate_answer``.

    Returns:
        One dict per record: the record's fields plus ``predictions`` (the answer after each
        round, index 0 = standard RAG), ``final_prediction`` and ``steps`` (one dict per round
        the sample took part in: iteration, critic, status, reason, program, trace, events,
        answer_before, answer_after).
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    table = table if table is not None else getattr(planner, "table", None)
    meter = meter or CostMeter()
    fns = actions.functions()
    n = len(records)
    docs = [passage_strings(r.get("passages", [])) for r in records]
    preds = [str(r.get("prediction") or "") for r in records]
    history = [[p] for p in preds]
    steps: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    open_ids = list(range(n))
    critic_llm, planner_llm = getattr(critic, "llm", None), getattr(planner, "llm", None)
    gen_llm = getattr(actions, "llm", None)

    for it in range(1, iterations + 1):
        if not open_ids:
            for i in range(n):
                history[i].append(preds[i])
            continue
        # Critic
        with meter.phase("critic", [critic_llm]) as cost:
            states = [state_record(records[i], docs[i], preds[i], first=it == 1) for i in open_ids]
            answered = _answered(critic_llm)
            parses = list(critic.critique(states))
            if len(parses) != len(states):
                raise ValueError(f"critic returned {len(parses)} critiques for {len(states)} records")
            if critic_llm is not None:
                _count_component(cost, critic, critic_llm, answered)
        feedback = {i: critic_feedback(p) for i, p in zip(open_ids, parses)}
        raw_critic = {i: (p.to_dict() if hasattr(p, "to_dict") else dict(p)) for i, p in zip(open_ids, parses)}
        to_fix = []
        for i in open_ids:
            judgement = feedback[i]["judgement"]
            if judgement == "Error":
                to_fix.append(i)
                continue
            status = "skipped_correct" if judgement == "Correct" else "skipped_unparsed"
            steps[i].append({"iteration": it, "critic": raw_critic[i], "status": status, "reason": None,
                             "answer_before": preds[i], "answer_after": preds[i]})
        # Plan
        with meter.phase("planner", [planner_llm]) as cost:
            contexts = [PlannerContext(records[i]["question"], docs[i], preds[i], feedback[i], table) for i in to_fix]
            answered = _answered(planner_llm)
            plans = list(planner.plan(contexts)) if contexts else []
            if len(plans) != len(contexts):
                raise ValueError(f"planner returned {len(plans)} plans for {len(contexts)} contexts")
            if planner_llm is not None and contexts:
                _count_component(cost, planner, planner_llm, answered)
        # Execute
        with meter.phase("actions", [gen_llm]) as cost:
            before = Counter(getattr(actions, "counts", Counter()))
            jobs = {i: (plan.program, {"question": str(records[i]["question"]), "docs": list(docs[i]),
                                       "prediction": preds[i]}, feedback[i])
                    for i, plan in zip(to_fix, plans) if plan.program}
            if prefetch and jobs:
                _prefetch(list(jobs.values()), actions, fns, max_calls, timeout_s, max_prefetch_rounds)
            results = {i: _execute(prog, actions, fns, var, max_calls, timeout_s, fb)
                       for i, (prog, var, fb) in jobs.items()}
            after = Counter(getattr(actions, "counts", Counter()))
            cost["calls"] += after["llm_calls"] - before["llm_calls"]
            cost["prompt_tokens"] += after["prompt_tokens"] - before["prompt_tokens"]
            cost["completion_tokens"] += after["completion_tokens"] - before["completion_tokens"]
            cost["action_calls"] += sum(r["n_calls"] for r in results.values())
        verdicts = _verify(verifier, {i: res["answer"] for i, res in results.items() if res["status"] == "corrected"},
                           records, docs, preds, raw_critic, first=it == 1, critic=critic, meter=meter)
        next_open = []
        for i, plan in zip(to_fix, plans):
            step: dict[str, Any] = {"iteration": it, "critic": raw_critic[i], "program": plan.program,
                                    "planner_raw": plan.raw, "planner_info": plan.info, "answer_before": preds[i]}
            res = results.get(i)
            if res is None:
                step.update(status="no_program", reason=plan.error or "no_program", trace=[], events=[])
            else:
                step.update({k: v for k, v in res.items() if k != "answer"})
            if i in verdicts:
                step["verification"] = verdicts[i]
                if not verdicts[i]["kept"]:
                    step.update(status="not_verified", reason="not_verified", candidate_answer=res["answer"])  # type: ignore[index]
            if step["status"] == "corrected":
                preds[i] = res["answer"]  # type: ignore[index]
                answered = [e for e in step["events"] if e.get("action") == "GenerateAnswer"]
                if answered:
                    docs[i] = list(answered[-1]["docs"])
                next_open.append(i)
            step["answer_after"] = preds[i]
            steps[i].append(step)
        open_ids = next_open
        for i in range(n):
            history[i].append(preds[i])

    out = []
    for i, rec in enumerate(records):
        row = dict(rec)
        row.update(predictions=history[i], final_prediction=preds[i], steps=steps[i],
                   final_passages=docs[i])
        out.append(row)
    return out


def _verify(verifier: Any, answers: Mapping[int, str], records: Sequence[Mapping[str, Any]], docs: Sequence[list[str]],
            preds: Sequence[str], raw_critic: Mapping[int, Mapping[str, Any]], *, first: bool, critic: Any,
            meter: CostMeter) -> dict[int, dict[str, Any]]:
    """The verifier's margins for the old and the new answer of each corrected sample (see
    :func:`run_correction`); the old answer's margin is the round's critique margin when the
    verifier is the critic that wrote it."""
    if verifier is None or not answers:
        return {}
    ids = list(answers)
    llm = getattr(verifier, "llm", None)
    with meter.phase("critic", [llm]) as cost:  # verifying is the critic's work
        answered = _answered(llm)
        reuse = verifier is critic and all(raw_critic[i].get("margin") is not None for i in ids)
        if reuse:
            before = [float(raw_critic[i]["margin"]) for i in ids]
        else:
            before = list(verifier.verdict_margins([state_record(records[i], docs[i], preds[i], first) for i in ids]))
        after = list(verifier.verdict_margins([state_record(records[i], docs[i], answers[i], False) for i in ids]))
        now = _answered(llm)
        scored = now - answered if answered is not None and now is not None else len(ids) * (1 if reuse else 2)
        cost["calls"] += scored
        cost["score_calls"] += scored
    if len(before) != len(ids) or len(after) != len(ids):
        raise ValueError(f"verifier returned {len(before)}/{len(after)} margins for {len(ids)} answers")
    return {i: verification(b, a) for i, b, a in zip(ids, before, after)}


def verification(margin_before: float, margin_after: float) -> dict[str, Any]:
    """The verifier's record of one correction: both margins and whether the new answer is kept
    (its margin strictly lower than the old answer's; a tie keeps the old answer)."""
    return {"margin_before": round(float(margin_before), 4), "margin_after": round(float(margin_after), 4),
            "kept": float(margin_after) < float(margin_before)}


# --------------------------------------------------------------------------------------------
# Evaluation helpers
# --------------------------------------------------------------------------------------------
def records_at_iteration(results: Sequence[Mapping[str, Any]], iteration: int) -> list[dict[str, Any]]:
    """Copies of the records with the answer after ``iteration`` rounds (0 = standard RAG) scored."""
    out = []
    for r in results:
        preds = r["predictions"]
        pred = preds[min(iteration, len(preds) - 1)]
        row = {k: v for k, v in r.items() if k not in ("steps", "predictions")}
        row["prediction"] = pred
        row.update(score_prediction(pred, r["golden_answers"]))
        out.append(row)
    return out


def unverified_round(results: Sequence[Mapping[str, Any]], *, threshold: float | None = None) -> list[dict[str, Any]]:
    """A verified run's first round as Algorithm 1 reads it: every new answer kept.

    The first round's critiques, plans and programs do not depend on verification (it only
    decides which answer a round ends with) nor on the acting threshold (the critic's margin for
    an answer is the same at any threshold), so the answer each round-1 program produced is exact:
    a "not_verified" step's ``candidate_answer``, otherwise the step's answer.

    Args:
        threshold: None (act where the run acted) or another acting threshold on the round-1
            critique margin: an answer whose margin is not above it keeps standard RAG's answer;
            one above it must have been acted on in the run (a lower threshold than the run's
            cannot be read from it).

    Returns:
        Copies holding ``predictions`` [standard RAG, that answer], ``final_prediction`` and the
        round-1 steps of the answers acted on (``final_passages`` dropped: they belong to the run).

    Raises:
        ValueError: ``threshold`` asks for an answer the run did not correct.
    """
    out = []
    for r in results:
        preds = list(r.get("predictions") or [r.get("prediction") or ""])
        first = next((s for s in r.get("steps", []) if s.get("iteration") == 1), None)
        answer, steps = preds[0], [s for s in r.get("steps", []) if s.get("iteration") == 1]
        margin = ((first or {}).get("critic") or {}).get("margin")
        if threshold is not None and (margin is None or float(margin) <= threshold):
            steps = []
        elif first is not None:
            if threshold is not None and first.get("status") in ("skipped_correct", "skipped_unparsed"):
                raise ValueError(f"unverified_round: {r.get('id')!r} has margin {margin} above threshold {threshold} "
                                 "but the run did not correct it")
            answer = first.get("candidate_answer") if first.get("status") == "not_verified" else first.get("answer_after", answer)
        row = {k: v for k, v in r.items() if k != "final_passages"}
        row.update(predictions=[preds[0], answer], final_prediction=answer, steps=steps)
        out.append(row)
    return out


def iteration_table(results: Sequence[Mapping[str, Any]], *, group: str | None = None) -> dict[str, Any]:
    """EM/F1/acc after each round (Table 6), overall or per ``metadata[group]``."""
    n_rounds = len(results[0]["predictions"]) if results else 0
    table = {}
    for t in range(n_rounds):
        recs = records_at_iteration(results, t)
        table[f"iter{t}"] = aggregate_by(recs, group) if group else aggregate(recs)
    return table


def status_counts(results: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Step statuses per round, e.g. {"iter1": {"corrected": 12, "skipped_correct": 30}}."""
    out: dict[str, Counter[str]] = {}
    for r in results:
        for s in r["steps"]:
            out.setdefault(f"iter{s['iteration']}", Counter())[s["status"]] += 1
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def rejection_counts(results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How often a step fell back to the previous answer, by status and reason code."""
    counts: Counter[str] = Counter()
    for r in results:
        for s in r["steps"]:
            if s["status"] in FAILED:
                counts[f"{s['status']}:{s.get('reason') or s['status']}"] += 1
    return dict(sorted(counts.items()))


def action_usage(results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Action calls made by the executed programs, with fallbacks (e.g. ``RewriteQuery.fallback``)."""
    counts: Counter[str] = Counter()
    for r in results:
        for s in r["steps"]:
            for e in s.get("events", []):
                counts[e["action"]] += 1
                if e.get("fallback"):
                    counts[f"{e['action']}.fallback:{e['fallback']}"] += 1
    return dict(sorted(counts.items()))


# --------------------------------------------------------------------------------------------
# Case studies (Tables 13-14)
# --------------------------------------------------------------------------------------------
def pick_case_studies(results: Sequence[Mapping[str, Any]], n: int = 2) -> list[Mapping[str, Any]]:
    """Samples worth showing: fixed by the correction first, then changed, then any corrected."""
    def rank(r: Mapping[str, Any]) -> tuple[int, int]:
        golds = r["golden_answers"]
        gain = score_prediction(r["final_prediction"], golds)["acc"] - score_prediction(r["predictions"][0], golds)["acc"]
        corrected = any(s["status"] == "corrected" for s in r["steps"])
        changed = r["final_prediction"] != r["predictions"][0]
        return (-int(gain > 0), -int(changed) - int(corrected))

    candidates = [r for r in results if any(s.get("program") for s in r["steps"])]
    return sorted(candidates, key=rank)[:n]


def _md(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_case_study(sample: Mapping[str, Any], step: int | None = None, *, doc_words: int = 25) -> str:
    """Markdown of one sample's workflow, laid out like RAG-Critic Tables 13-14.

    Args:
        sample: one :func:`run_correction` result.
        step: index into ``sample["steps"]``; default the first step that ran a program.
        doc_words: words shown per retrieved passage.
    """
    steps = sample["steps"]
    if step is None:
        step = next((k for k, s in enumerate(steps) if s.get("program")), 0 if steps else None)
    s = steps[step] if step is not None and steps else {}
    fb = critic_feedback(s.get("critic")) if s else critic_feedback(None)
    lines = [f"**Question:** {_md(sample['question'])}", "", "**Retrieved Docs:**", ""]
    for k, p in enumerate(passage_strings(sample.get("passages", [])), start=1):
        title, _, body = p.partition("\n")
        words = (body or title).split()
        lines.append(f"- [{k}] {_md(title) + ': ' if body else ''}{_md(' '.join(words[:doc_words]))}"
                     f"{' ...' if len(words) > doc_words else ''}")
    lines += ["", f"**Original Answer:** {_md(s.get('answer_before', sample.get('prediction', '')))}", ""]
    verdict = {"Correct": "The answer is correct.", "Error": "The answer is incorrect."}.get(fb["judgement"] or "", "No judgement.")
    lines += [f"**Judgement Result ({s.get('iteration', 1)}):** {verdict} {_md(fb['analysis'])}".rstrip(), ""]
    lines += ["**Critic Tags:**", "", f"- Tag1: {fb['tag1']}", f"- Tag2: {fb['tag2']}", f"- Tag3: {fb['tag3']}", ""]
    if "program" in s:
        lines += ["**Agent Output:**", "", "```python", s["program"] or "# (no program)", "```", ""]
        if s.get("trace"):
            lines += ["**Execution Trace:**", ""]
            for t in s["trace"]:
                args = ", ".join(f"{k}=[{len(v)} passages]" if isinstance(v, list) else f"{k}={_md(v)[:80]}"
                                 for k, v in t.get("args", {}).items())
                lines.append(f"1. `{t['call']}({args})` -> {_md(t.get('result_summary', ''))[:120]}")
            lines.append("")
        lines += [f"**Status:** {s['status']}" + (f" ({s['reason']})" if s.get("reason") else ""), ""]
    lines += [f"**New Answer:** {_md(s.get('answer_after', ''))}", "",
              f"**Final Answer:** {_md(sample.get('final_prediction', ''))}", "",
              f"**Gold Answer:** {_md(' / '.join(sample.get('golden_answers', [])))}"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Several methods on one test set (main table, ablations, cost table)
# --------------------------------------------------------------------------------------------
def run_methods(
    records: Sequence[Mapping[str, Any]],
    methods: Mapping[str, Mapping[str, Any]],
    *,
    actions: Any,
    **kwargs: Any,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, dict[str, float]]]]:
    """Run :func:`run_correction` once per method on the same records and actions.

    Args:
        methods: name -> {"critic": ..., "planner": ..., "iterations": int, "verifier": optional}.
        kwargs: passed on to :func:`run_correction` (max_calls, timeout_s, table, prefetch).

    Returns:
        (results per method, cost summary per method from a fresh :class:`CostMeter`).
    """
    results, costs = {}, {}
    for name, spec in methods.items():
        meter = CostMeter()
        results[name] = run_correction(records, critic=spec["critic"], planner=spec["planner"], actions=actions,
                                       iterations=int(spec.get("iterations", 1)), meter=meter,
                                       verifier=spec.get("verifier"), **kwargs)
        costs[name] = meter.summary(n_samples=len(records))
    return results, costs


def comparison_rows(results: Mapping[str, Sequence[Mapping[str, Any]]], *, baseline: str | None = None,
                    group: str = "type") -> list[dict[str, Any]]:
    """EM/F1/acc rows per method and round, overall (group "all") and per ``metadata[group]``.

    Round 0 of ``baseline`` (default: the first method) is reported as "standard RAG"; every
    method contributes its rounds 1..N as "<method>" (N = 1) or "<method> (k iter)".
    """
    names = list(results)
    baseline = baseline or (names[0] if names else None)
    rows: list[dict[str, Any]] = []

    def add(method: str, recs: list[dict[str, Any]], iteration: int) -> None:
        rows.append({"method": method, "iteration": iteration, "group": "all", **aggregate(recs)})
        for value, agg in aggregate_by(recs, group).items():
            rows.append({"method": method, "iteration": iteration, "group": value, **agg})

    if baseline is not None:
        add("standard RAG", records_at_iteration(results[baseline], 0), 0)
    for name in names:
        n_rounds = len(results[name][0]["predictions"]) - 1 if results[name] else 0
        for t in range(1, n_rounds + 1):
            label = name if n_rounds == 1 else f"{name} ({t} iter)"
            add(label, records_at_iteration(results[name], t), t)
    return rows


def cost_rows(costs: Mapping[str, Mapping[str, Mapping[str, float]]],
              rag: Mapping[str, float] | None = None, n_samples: int | None = None) -> list[dict[str, Any]]:
    """Table 8 rows: model calls and tokens per sample of each phase, plus wall time.

    ``rag`` is :func:`rag_cost` of the standard-RAG step (shared by every method).
    """
    rows = []
    for name, phases in costs.items():
        row: dict[str, Any] = {"method": name}
        if rag is not None and n_samples:
            row["generate_calls_per_sample"] = round(rag["calls"] / n_samples, 3)
        for phase in ("critic", "planner", "actions"):
            p = phases.get(phase, {})
            row[f"{phase}_calls_per_sample"] = p.get("calls_per_sample", 0.0)
            row[f"{phase}_tokens_per_sample"] = round(
                p.get("prompt_tokens_per_sample", 0.0) + p.get("completion_tokens_per_sample", 0.0), 1)
        row["action_calls"] = phases.get("actions", {}).get("action_calls", 0.0)
        row["wall_s"] = phases.get("total", {}).get("wall_s", 0.0)
        row["generated_calls"] = phases.get("total", {}).get("generated_calls", 0.0)
        rows.append(row)
    return rows
