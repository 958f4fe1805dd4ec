"""RePAIR: a taxonomy-free response-to-action planner trained with DPO from execution rewards.

Reproduces Zhang, Peng and Weng (RePAIR) in our harness. A *plan* is a short program over the
same five actions RAG-Critic uses (Retrieval, RewriteQuery, DecomposeQuery, RefineDoc,
GenerateAnswer), run by the same restricted executor
(:func:`ragcritic_lib.agent.executor.run_program` with
:class:`ragcritic_lib.agent.actions.ActionSet`). No error taxonomy is involved:

- **State.** Off-policy: question, passages, previous answer, the *oracle* correctness c of that
  answer and its (failed) reasoning r0. On-policy and at inference: question, passages,
  previous answer and a judge's coarse correctness estimate only.
- **Candidates.** Off-policy: plans enumerated from a small action grammar (the "teacher"),
  optionally plus plans sampled from the planner. On-policy: plans sampled from the current
  planner (optionally plus the grammar).
- **Reward.** Token F1 of the revised answer against the gold answers; a plan the executor
  rejects or that fails keeps the previous answer, so it earns that answer's F1.
- **Preferences.** Within one state, plan a is preferred to plan b when R(a) - R(b) >= margin
  and R(a) > R(b) (margin 0 is the paper's plain "higher F1 wins").
- **Training.** DPO (``ragcritic_lib.critic.training.train_dpo``) first on off-policy pairs, then on
  on-policy pairs starting from the off-policy adapter. Paper setting: beta 0.1, lr 5e-6, one
  epoch; ours takes its recipe from params.
- **Inference.** The planner writes a plan for each test answer (greedy); the plan is executed;
  a rejected or failed plan keeps the standard RAG answer.
- **Decoding** (``decoding``). "free": the planner writes any text, as in the paper, and the
  executor rejects what is not a valid program (the packaged 135M model almost never writes one:
  1 of 140 test plans ran). "constrained": the planner's output is restricted to the candidate
  plans of the grammar, the same texts DPO ranked: at test time greedy decoding inside their
  token trie (``LLM.choose``); on-policy, plans drawn from the planner's own distribution over
  them (log-probabilities from ``LLM.score``, sampled without replacement at ``temperature``).
  "calibrated" (the default) trains the same way and picks at test time the plan with the highest
  whole log-probability minus that plan's mean over train answers (:func:`plan_prior`): the trie's
  first diverging token, and a plan the planner favours everywhere, no longer decide alone (on
  the 23 dev states of the planner trained before this rule, the trie rule gave one plan 74% of
  the picks at reward 0.133, the rule calibrated on its 108 failed train answers 17% at 0.121, a
  difference well inside its interval;
  ``benchmarks/bench_repair_decoding.py``). Which plan is chosen is still the trained policy's
  decision, and no error label is involved.

Action usage (the paper's Table 3): the stage counts the calls written in its executed test
plans (:func:`ragcritic_lib.agent.actions.count_action_calls`, the final GenerateAnswer left out)
and the analysis stage sets them beside RAG-Critic's, which notebook 08 counts the same way, so
this stage does not depend on RAG-Critic's run.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from contextlib import contextmanager
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ragcritic_lib.baselines import dataset_name, is_wrong


# ----------------------------------------------------------------------------- grammar
def plan_grammar(*, topk: int = 5, supplement_k: int = 3, deep_topk: int | None = None) -> list[tuple[str, str]]:
    """The enumerated candidate plans, (name, program), in a fixed order that covers every action
    early (so taking the first N still varies the actions).

    "retrieve" searches the question again ``deep_topk`` deep (default 2 x topk): with the same
    query and depth it would only return the passages the answer already came from.
    """
    deep = deep_topk or 2 * topk
    gen = "final_answer = GenerateAnswer(query=question, docs=new_docs)"
    return [
        ("regenerate", "final_answer = GenerateAnswer(query=question, docs=docs)"),
        ("retrieve_deeper", f"new_docs = Retrieval(query=question, topk={deep})\n{gen}"),
        ("clarify_retrieve", f"queries = RewriteQuery(query=question, instruction=\"clarify\")\n"
                             f"new_docs = Retrieval(query=queries[0], topk={topk})\n{gen}"),
        ("refine_docs", "new_docs = [RefineDoc(query=question, doc=d, instruction=\"refine\") for d in docs]\n" + gen),
        ("decompose_retrieve", f"subs = DecomposeQuery(query=question)\n"
                               f"new_docs = Retrieval(query=subs[0], topk={supplement_k}) + "
                               f"Retrieval(query=subs[-1], topk={supplement_k})\n{gen}"),
        ("short_answer", "final_answer = GenerateAnswer(query=question, docs=docs, "
                         "additional_instruction=\"Reply with the exact name, number or date from the passages.\")"),
        ("expand_supplement", f"queries = RewriteQuery(query=question, instruction=\"expand\")\n"
                              f"new_docs = docs + Retrieval(query=queries[0], topk={supplement_k})\n{gen}"),
        ("summarize_docs", "new_docs = [RefineDoc(query=question, doc=d, instruction=\"summarize\") for d in docs]\n" + gen),
    ]


# ------------------------------------------------------------------------------- state
def planner_variables(record: Mapping[str, Any], *, max_docs: int = 5, doc_words: int = 80) -> dict[str, Any]:
    """The variables a plan may read: question, docs (passage texts), prediction (the previous
    answer); the same names RAG-Critic's planner programs use (``ragcritic_lib.agent.workflow``)."""
    docs = []
    for p in (record.get("passages") or [])[:max_docs]:
        words = str(p.get("contents", "")).split(" ")
        docs.append(" ".join(words[:doc_words]))
    return {"question": str(record["question"]), "docs": docs, "prediction": str(record.get("prediction") or "")}


_SYSTEM = (
    "You improve the output of a question-answering system that retrieves passages and then answers. "
    "You write a short Python-style program that calls these functions:\n{signatures}\n"
    "The variables question, docs and prediction (the previous answer) are given. Use as few calls as needed. "
    "The last line must be: final_answer = GenerateAnswer(...). Output only the program."
)
_EXAMPLE_USER = (
    'question = "Which river flows through Vienna?"\n'
    'docs = ["Salzburg: Salzburg is a city in Austria on the Salzach river."]\n'
    'prediction = "Salzach"\n'
    "Check: the previous answer is wrong."
)
_EXAMPLE_PLAN = (
    'queries = RewriteQuery(query=question, instruction="clarify")\n'
    "new_docs = Retrieval(query=queries[0], topk=5)\n"
    "final_answer = GenerateAnswer(query=question, docs=new_docs)"
)


def _doc_preview(docs: Sequence[str], words: int) -> str:
    shown = []
    for d in docs:
        w = " ".join(str(d).split())
        parts = w.split(" ")
        shown.append(" ".join(parts[:words]) + (" ..." if len(parts) > words else ""))
    return "[" + ", ".join(repr(s) for s in shown) + "]"


def build_planner_messages(
    record: Mapping[str, Any],
    *,
    correct: bool | None,
    reasoning: str | None = None,
    oracle: bool = False,
    max_docs: int = 5,
    doc_words: int = 15,
    reasoning_chars: int = 200,
    example: bool = True,
    prompt: str = "full",
) -> list[dict[str, str]]:
    """Planner prompt for one state (about 430 tokens in the "full" form with five passages shown by
    their first ``doc_words`` words and no example, about 310 in the "compact" form).

    Args:
        prompt: "full" lists the five functions with their typed signatures and comments (about 200
            tokens of system prompt); "compact" lists them on one line
            (:data:`ragcritic_lib.agent.actions.COMPACT_SIGNATURES`), which shortens every DPO
            sequence and every planner call by about 120 tokens.
        example: open with a worked example (a question and its plan). Free decoding needs it to
            learn the program format; constrained decoding leaves it out: its choices are the
            grammar's programs already, and an example equal to one of them only pulls the choice
            towards that program.
        correct: correctness of the previous answer (oracle c off-policy, the judge's estimate
            on-policy); None leaves the line out.
        reasoning: the failed reasoning r0 (off-policy only).
        oracle: word the correctness as an oracle check rather than a judge's estimate.
    """
    from ragcritic_lib.agent.actions import COMPACT_SIGNATURES, FUNCTION_SIGNATURES

    signatures = {"full": FUNCTION_SIGNATURES, "compact": COMPACT_SIGNATURES}.get(check_prompt(prompt))
    v = planner_variables(record, max_docs=max_docs, doc_words=10_000)
    lines = [f"question = {v['question']!r}", f"docs = {_doc_preview(v['docs'], doc_words)}",
             f"prediction = {v['prediction']!r}"]
    if correct is not None:
        verdict = "right" if correct else "wrong"
        lines.append(f"Check: the previous answer is {verdict}." if oracle
                     else f"A judge thinks the previous answer is probably {verdict}.")
    if reasoning:
        lines.append("Reasoning behind the previous answer: " + " ".join(str(reasoning).split())[:reasoning_chars])
    shots = [{"role": "user", "content": _EXAMPLE_USER}, {"role": "assistant", "content": _EXAMPLE_PLAN}]
    return [
        {"role": "system", "content": _SYSTEM.format(signatures=signatures)},
        *(shots if example else []),
        {"role": "user", "content": "\n".join(lines)},
    ]


# ------------------------------------------------------------------------------ execution
def execute_plans(
    jobs: Sequence[tuple[str, Mapping[str, Any]]],
    action_set: Any,
    *,
    max_calls: int = 12,
    timeout_s: float = 60.0,
    prefetch_rounds: int = 6,
) -> list[dict[str, Any]]:
    """Run (program, variables) jobs with one ActionSet, batching LLM calls across jobs.

    First every program runs in the ActionSet's prefetch mode, repeatedly, so the generations
    they need are produced in batched calls; then each program runs for real, reading them from
    the memo. Rejected or failing programs are reported, never raised.

    Returns:
        per job: {"answer" (str or None), "ok", "error" (reason code or None), "n_calls", "trace"}.
    """
    from ragcritic_lib.agent.executor import ProgramError, run_program

    fns = action_set.functions()
    if hasattr(action_set, "begin_prefetch"):
        action_set.begin_prefetch()
        try:
            for r in range(prefetch_rounds):
                for src, variables in jobs:
                    try:
                        run_program(src, fns, variables=variables, max_calls=max_calls, timeout_s=timeout_s)
                    except Exception:  # noqa: BLE001 - markers make programs fail in many ways; the real run reports
                        pass
                if action_set.flush_prefetch(desc=f"repair plans (prefetch {r + 1})") == 0:
                    break
        finally:
            action_set.end_prefetch()
    out = []
    for src, variables in jobs:
        try:
            res = run_program(src, fns, variables=variables, max_calls=max_calls, timeout_s=timeout_s)
            answer = res.final_answer
            out.append({"answer": answer, "ok": answer is not None, "error": None if answer is not None else "none_answer",
                        "n_calls": res.n_calls, "trace": res.trace})
        except ProgramError as err:
            out.append({"answer": None, "ok": False, "error": err.reason_code,
                        "n_calls": getattr(err, "n_calls", 0), "trace": getattr(err, "trace", [])})
    return out


def plan_reward(answer: str | None, record: Mapping[str, Any]) -> float:
    """Token F1 of the revised answer; a failed plan keeps the previous answer and its F1."""
    from ragcritic_lib.evaluation.scoring import token_f1

    final = answer if answer is not None else str(record.get("prediction") or "")
    return token_f1(final, list(record.get("golden_answers") or []))


# ---------------------------------------------------------------------------- preferences
def _norm_plan(plan: str) -> str:
    return "\n".join(" ".join(line.split()) for line in plan.strip().splitlines() if line.strip())


def build_preference_pairs(
    candidates: Sequence[Mapping[str, Any]], *, margin: float = 0.0, max_pairs: int = 4
) -> list[tuple[int, int]]:
    """Preference pairs (chosen index, rejected index) among one state's scored candidates.

    Identical programs (up to whitespace) count once (the first). Candidates are ranked by
    reward (ties keep input order); the best is paired with every sufficiently worse one, worst
    first, then the second best, and so on, until ``max_pairs``. A pair needs
    reward_chosen - reward_rejected >= margin and reward_chosen > reward_rejected.
    """
    seen: set[str] = set()
    uniq = []
    for i, c in enumerate(candidates):
        key = _norm_plan(str(c["plan"]))
        if key in seen:
            continue
        seen.add(key)
        uniq.append(i)
    ranked = sorted(uniq, key=lambda i: (-float(candidates[i]["reward"]), i))
    pairs: list[tuple[int, int]] = []
    for a_pos, a in enumerate(ranked):
        ra = float(candidates[a]["reward"])
        for b in reversed(ranked[a_pos + 1:]):
            rb = float(candidates[b]["reward"])
            if ra > rb and ra - rb >= margin - 1e-12:
                pairs.append((a, b))
                if len(pairs) >= max_pairs:
                    return pairs
    return pairs


DECODINGS = ("free", "constrained", "calibrated")
GRAMMAR_DECODINGS = ("constrained", "calibrated")  # the planner picks among the grammar's programs
PROMPTS = ("full", "compact")


def check_prompt(prompt: str) -> str:
    if prompt not in PROMPTS:
        raise ValueError(f"repair.prompt must be one of {', '.join(PROMPTS)}; got {prompt!r}")
    return prompt


def check_decoding(decoding: str) -> str:
    if decoding not in DECODINGS:
        raise ValueError(f"repair.decoding must be one of {', '.join(DECODINGS)}; got {decoding!r}")
    return decoding


@contextmanager
def shared_prompt_prefix(model: Any):
    """Within the block, ``model``'s backend scores the prompts of one call by encoding their
    common token prefix once (the planner's instruction, the same for every state) and reusing its
    key-value cache (:class:`ragcritic_lib.llm.hf.HFBackend`'s ``share_prompt_prefix``). The scores
    equal a full encoding's up to float rounding (about 1e-4 of a plan's log-probability); a
    backend without the option (a server, a test double) is left as it is. Wrappers that keep the
    backend as ``llm`` (``MeteredLLM``) are looked through."""
    target = model
    for _ in range(4):
        if target is None or hasattr(target, "share_prompt_prefix"):
            break
        target = getattr(target, "llm", None)
    if target is None or not hasattr(target, "share_prompt_prefix"):
        yield model
        return
    before = target.share_prompt_prefix
    target.share_prompt_prefix = True
    try:
        yield model
    finally:
        target.share_prompt_prefix = before


def plan_prior(planner: Any, records: Sequence[Mapping[str, Any]], *, judged_correct: Sequence[bool],
               programs: Sequence[str], prompt: str = "full") -> list[float]:
    """Each program's mean log-probability under ``planner`` over calibration states: the plan's
    prior, which calibrated decoding subtracts (:func:`pick_plans`).

    The states are train questions' answers, right or wrong as at test time, each in the prompt the
    planner sees at test time (the judge's estimate, no reasoning), so the prior holds no test
    information.

    Raises:
        ValueError: no records, or ``judged_correct`` is not one flag per record.
    """
    if not records:
        raise ValueError("calibrated decoding needs at least one calibration state")
    if len(judged_correct) != len(records):
        raise ValueError(f"{len(judged_correct)} judge flags for {len(records)} calibration states")
    prompts = [build_planner_messages(r, correct=bool(f), example=False, prompt=prompt)
               for r, f in zip(records, judged_correct)]
    with shared_prompt_prefix(planner):
        scores = planner.score(prompts, [list(programs)] * len(prompts), desc="repair plan prior")
    return [sum(float(row[j]) for row in scores) / len(scores) for j in range(len(programs))]


def pick_plans(planner: Any, prompts: Sequence[Any], programs: Sequence[str], *, decoding: str,
               prior: Sequence[float] | None = None, desc: str = "repair plans") -> list[str]:
    """One of ``programs`` per prompt, by the planner.

    "constrained": greedy decoding inside the programs' token trie (``planner.choose``): the first
    token where two programs part decides between them. "calibrated": the program with the highest
    whole log-probability (``planner.score``, the quantity DPO trained) minus its ``prior``
    (:func:`plan_prior`), so a plan the planner favours on every state does not win on each by
    that alone; ties go to the earlier program.

    Raises:
        ValueError: a grammar decoding without programs, or "calibrated" without one prior value
            per program.
    """
    if decoding not in GRAMMAR_DECODINGS:
        raise ValueError(f"pick_plans: decoding must be one of {', '.join(GRAMMAR_DECODINGS)}; got {decoding!r}")
    if not programs:
        raise ValueError(f"{decoding} decoding needs the candidate programs")
    if not prompts:
        return []
    if decoding == "constrained":
        return [c.text for c in planner.choose(list(prompts), [list(programs)] * len(prompts), desc=desc)]
    if prior is None or len(prior) != len(programs):
        raise ValueError(f"calibrated decoding needs one prior value per program ({len(programs)}); "
                         f"got {None if prior is None else len(prior)}")
    with shared_prompt_prefix(planner):
        scores = planner.score(list(prompts), [list(programs)] * len(prompts), desc=desc)
    out = []
    for row in scores:
        adj = [float(v) - float(b) for v, b in zip(row, prior)]
        out.append(programs[max(range(len(adj)), key=lambda j: (adj[j], -j))])
    return out


def grammar_programs(n: int, *, topk: int = 5) -> list[str]:
    """The first ``n`` programs of :func:`plan_grammar`: the candidate set of constrained decoding."""
    grammar = plan_grammar(topk=topk)
    if not 1 <= n <= len(grammar):
        raise ValueError(f"repair.grammar_plans must be between 1 and {len(grammar)}; got {n}")
    return [src for _, src in grammar[:n]]


def draw_state_plans(plans: Sequence[str], k: int, *, seed: int, dataset: str, qid: str) -> set[str]:
    """``k`` of ``plans`` (compared with whitespace normalized) drawn for one state, seeded by the
    state (``seed``, ``dataset``, ``qid``), so the same state keeps the same plans in every run
    and every recipe with the same ``k``; ``k`` <= 0 or ``k`` >= the number of plans keeps them
    all."""
    distinct = sorted({_norm_plan(p) for p in plans})
    if k <= 0 or k >= len(distinct):
        return set(distinct)
    return set(random.Random(f"{seed}:{dataset}:{qid}").sample(distinct, k))


def sample_from_scores(
    logprobs: Sequence[Sequence[float]], *, n: int, temperature: float, seed: int
) -> list[list[int]]:
    """Indices of ``n`` distinct options per row drawn from softmax(logprob / temperature), without
    replacement (Gumbel top-k, seeded per row), in the order drawn; temperature 0 is the arg-max."""
    import numpy as np

    out = []
    for row, lps in enumerate(logprobs):
        lp = np.asarray(list(lps), dtype=np.float64)
        k = min(n, len(lp))
        if temperature <= 0:
            out.append([int(np.argmax(lp))][:k])
            continue
        rng = np.random.default_rng([int(seed), row])
        keys = lp / float(temperature) + rng.gumbel(size=len(lp))
        out.append([int(i) for i in np.argsort(-keys, kind="stable")[:k]])
    return out


def sample_grammar_plans(
    planner: Any,
    prompts: Sequence[Any],
    programs: Sequence[str],
    *,
    n: int,
    temperature: float = 0.8,
    seed: int = 0,
) -> list[list[str]]:
    """``n`` distinct candidate programs per prompt from the planner's distribution over
    ``programs`` (the on-policy draws of constrained decoding)."""
    if not prompts or n <= 0:
        return [[] for _ in prompts]
    with shared_prompt_prefix(planner):
        scores = planner.score(list(prompts), [list(programs)] * len(prompts), desc="repair on-policy scores")
    return [[programs[i] for i in idx] for idx in sample_from_scores(scores, n=n, temperature=temperature, seed=seed)]


def sample_plans(
    planner: Any,
    prompts: Sequence[Any],
    *,
    n: int,
    temperature: float = 0.8,
    top_p: float = 0.95,
    max_new_tokens: int = 96,
    seed: int = 0,
) -> tuple[list[list[str]], int]:
    """Draw ``n`` plans per prompt (greedy when temperature is 0: then one draw).

    Returns:
        (programs per prompt, with outputs holding no program dropped; number dropped).
    """
    from ragcritic_lib.agent.executor import extract_program
    from ragcritic_lib.llm import GenParams

    draws = 1 if temperature == 0 else n
    out: list[list[str]] = [[] for _ in prompts]
    dropped = 0
    for j in range(draws if prompts else 0):
        params = GenParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed + j)
        for i, g in enumerate(planner.generate(list(prompts), params, desc=f"repair sample {j + 1}/{draws}")):
            prog = extract_program(g.text)
            if prog:
                out[i].append(prog)
            else:
                dropped += 1
    return out, dropped


def collect_preferences(
    records: Sequence[Mapping[str, Any]],
    action_set: Any,
    *,
    phase: str,
    judged_correct: Sequence[bool] | None = None,
    planner: Any | None = None,
    n_grammar: int = 4,
    plans_per_state: int = 0,
    n_sampled: int = 0,
    margin: float = 0.0,
    max_pairs: int = 4,
    temperature: float = 0.8,
    max_new_tokens: int = 96,
    seed: int = 0,
    topk: int = 5,
    max_calls: int = 12,
    timeout_s: float = 60.0,
    decoding: str = "free",
    programs: Sequence[str] | None = None,
    prompt: str = "full",
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Candidate plans, rewards and DPO pairs for one training phase.

    Args:
        phase: "off" (state has the oracle correctness and the reasoning; only failed records
            are used) or "on" (state has ``judged_correct``; every record is used).
        planner: the current planner LLM, needed when ``n_sampled`` > 0.
        n_grammar: how many grammar plans per state (first N of :func:`plan_grammar`).
        plans_per_state: execute only this many of those grammar plans on each state, drawn per
            state by :func:`draw_state_plans` with ``seed`` (0 = all of them). Executing plans is
            most of the phase's cost; each state still gives its best plan against its worst.
        decoding: "free" samples any text from the planner; "constrained" and "calibrated" draw
            the sampled plans from the planner's own distribution over ``programs``
            (:func:`sample_grammar_plans`; calibration is a test-time rule only).
        programs: the candidate programs of the grammar decodings (needed with them).
        prompt: the planner prompt's form (:func:`build_planner_messages`).

    Returns:
        (pairs for ``train_dpo``: {"prompt", "chosen", "rejected", "qid", "dataset", "phase",
        "chosen_reward", "rejected_reward"}, candidates: one dict per executed plan).
    """
    if phase not in ("off", "on"):
        raise ValueError(f"phase must be 'off' or 'on', got {phase!r}")
    check_decoding(decoding)
    if decoding in GRAMMAR_DECODINGS and not programs:
        raise ValueError(f"{decoding} decoding needs the candidate programs")
    if phase == "on" and (judged_correct is None or len(judged_correct) != len(records)):
        raise ValueError("the on-policy phase needs one judged_correct flag per record")
    if phase == "off":
        chosen_idx = [i for i, r in enumerate(records) if is_wrong(r)]
    else:
        chosen_idx = list(range(len(records)))
    states = []
    for i in chosen_idx:
        rec = records[i]
        if phase == "off":
            msgs = build_planner_messages(rec, correct=False, reasoning=str(rec.get("raw_output") or ""), oracle=True,
                                          example=decoding == "free", prompt=prompt)
        else:
            msgs = build_planner_messages(rec, correct=bool(judged_correct[i]), example=decoding == "free",
                                          prompt=prompt)
        states.append((rec, msgs))
    grammar = plan_grammar(topk=topk)[:n_grammar]
    sampled: list[list[str]] = [[] for _ in states]
    if n_sampled > 0 and planner is not None and decoding in GRAMMAR_DECODINGS:
        sampled = sample_grammar_plans(planner, [m for _, m in states], list(programs or []), n=n_sampled,
                                       temperature=temperature, seed=seed)
    elif n_sampled > 0 and planner is not None:
        sampled, _ = sample_plans(planner, [m for _, m in states], n=n_sampled, temperature=temperature,
                                  max_new_tokens=max_new_tokens, seed=seed)
    per_state: list[list[dict[str, Any]]] = []
    jobs: list[tuple[str, Mapping[str, Any]]] = []
    for (rec, _), samples in zip(states, sampled):
        variables = planner_variables(rec)
        cands, seen = [], set()
        kept = draw_state_plans([src for _, src in grammar], plans_per_state, seed=seed,
                                dataset=dataset_name(rec), qid=str(rec.get("id")))
        for name, src in grammar:
            if _norm_plan(src) not in kept:
                continue
            cands.append({"plan": src, "source": f"grammar:{name}"})
            seen.add(_norm_plan(src))
        for src in samples:
            if _norm_plan(src) not in seen:
                seen.add(_norm_plan(src))
                cands.append({"plan": src, "source": "sampled"})
        for c in cands:
            jobs.append((c["plan"], variables))
        per_state.append(cands)
    results = execute_plans(jobs, action_set, max_calls=max_calls, timeout_s=timeout_s)
    pairs: list[dict[str, Any]] = []
    log: list[dict[str, Any]] = []
    pos = 0
    for (rec, msgs), cands in zip(states, per_state):
        for c in cands:
            res = results[pos]
            pos += 1
            c.update(answer=res["answer"], ok=res["ok"], error=res["error"], n_calls=res["n_calls"],
                     reward=plan_reward(res["answer"], rec))
            log.append({"qid": str(rec.get("id")), "dataset": dataset_name(rec), "phase": phase,
                        **{k: c[k] for k in ("source", "plan", "answer", "ok", "error", "n_calls", "reward")}})
        for a, b in build_preference_pairs(cands, margin=margin, max_pairs=max_pairs):
            pairs.append({"prompt": msgs, "chosen": cands[a]["plan"], "rejected": cands[b]["plan"],
                          "qid": str(rec.get("id")), "dataset": dataset_name(rec), "phase": phase,
                          "chosen_reward": cands[a]["reward"], "rejected_reward": cands[b]["reward"]})
    return pairs, log


def balance_chosen(pairs: Sequence[Mapping[str, Any]], *, max_share: float = 1.0, seed: int = 0
                   ) -> list[Mapping[str, Any]]:
    """Pairs with no chosen plan above ``max_share`` of them (1.0: all kept), surplus dropped at random.

    A plan that wins on most states teaches DPO to prefer it everywhere, and the planner then
    writes it for every answer (one plan for 99% of the test answers in a November 2026 run). Capping
    how often one plan is the chosen side keeps the pairs where the ranking depends on the state.
    The cap is the largest count ``c`` with ``c <= max_share * sum(min(n_plan, c))``; when no cap
    can meet the share (too few distinct winners) the most frequent winner is cut to the count of
    the next one. Input order is kept.
    """
    if not 0 < max_share <= 1:
        raise ValueError(f"max_share must be in (0, 1], got {max_share}")
    by_plan: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        by_plan.setdefault(_norm_plan(str(p["chosen"])), []).append(i)
    counts = sorted((len(v) for v in by_plan.values()), reverse=True)
    if max_share >= 1 or not counts:
        return list(pairs)
    feasible = [c for c in range(counts[0], 0, -1) if c <= max_share * sum(min(n, c) for n in counts) + 1e-9]
    cap = feasible[0] if feasible else (counts[1] if len(counts) > 1 else counts[0])
    rng = random.Random(seed)
    keep: set[int] = set()
    for key in sorted(by_plan):
        idx = by_plan[key]
        keep.update(idx if len(idx) <= cap else rng.sample(idx, cap))
    return [p for i, p in enumerate(pairs) if i in keep]


def dpo_rows(pairs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Only the keys ``train_dpo`` reads (prompt messages, chosen and rejected programs)."""
    return [{"prompt": list(p["prompt"]), "chosen": str(p["chosen"]), "rejected": str(p["rejected"])} for p in pairs]


def train_planner(
    pairs: Sequence[Mapping[str, Any]],
    recipe: Any,
    output_dir: Any,
    *,
    base_model: str,
    init_adapter: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Any:
    """One DPO phase on the planner (``ragcritic_lib.critic.cached_dpo.train_dpo``: the recipe's
    ``trainer`` says whether TRL or the cached trainer runs it).

    ``overrides`` replace recipe keys (e.g. RePAIR's beta 0.1 and a step budget). Returns None,
    leaving the planner as it was, when there are no pairs or none fits the recipe's
    ``max_length`` (logged): a phase without data is a result to report, not a crash.
    """
    if not pairs:
        return None
    from ragcritic_lib.critic.cached_dpo import train_dpo

    try:
        return train_dpo(dpo_rows(pairs), recipe, output_dir, base_model=base_model, init_adapter=init_adapter,
                         overrides=overrides)
    except ValueError as exc:
        if "no DPO pair fits" not in str(exc):
            raise
        logging.getLogger(__name__).warning("RePAIR DPO phase skipped: %s", exc)
        return None


# ------------------------------------------------------------------------------- inference
def repair_infer(
    planner: Any,
    records: Sequence[Mapping[str, Any]],
    action_set: Any,
    *,
    judged_correct: Sequence[bool],
    max_new_tokens: int = 96,
    skip_judged_correct: bool = False,
    max_calls: int = 12,
    timeout_s: float = 60.0,
    decoding: str = "free",
    programs: Sequence[str] | None = None,
    prompt: str = "full",
    prior: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """Plan (greedy) and execute one correction per record; failures keep the previous answer.

    ``decoding`` "constrained" or "calibrated" picks one of ``programs`` (:func:`pick_plans`;
    "calibrated" needs the plans' ``prior``); "free" lets the planner write any text. ``prompt``
    is the planner prompt's form, the one the planner was trained on (:func:`build_planner_messages`).

    Returns:
        copies of the records with prediction, repair_plan, repair_ok, repair_error,
        repair_n_calls and repair_judged_correct.
    """
    if len(judged_correct) != len(records):
        raise ValueError(f"{len(judged_correct)} judge flags for {len(records)} records")
    check_decoding(decoding)
    if decoding in GRAMMAR_DECODINGS and not programs:
        raise ValueError(f"{decoding} decoding needs the candidate programs")
    if decoding == "calibrated" and (prior is None or len(prior) != len(programs or [])):
        raise ValueError("calibrated decoding needs one prior value per program")
    todo = [i for i in range(len(records)) if not (skip_judged_correct and judged_correct[i])]
    prompts = [build_planner_messages(records[i], correct=bool(judged_correct[i]), example=decoding == "free",
                                      prompt=prompt) for i in todo]
    if decoding in GRAMMAR_DECODINGS:
        plans = [[p] for p in pick_plans(planner, prompts, list(programs or []), decoding=decoding, prior=prior)]
    else:
        plans, _ = sample_plans(planner, prompts, n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    jobs = [(p[0] if p else "", planner_variables(records[i])) for i, p in zip(todo, plans)]
    runnable = [j for j, (src, _) in enumerate(jobs) if src]
    results = execute_plans([jobs[j] for j in runnable], action_set, max_calls=max_calls, timeout_s=timeout_s)
    by_job = dict(zip(runnable, results))
    out = [dict(r, repair_plan="", repair_ok=False, repair_error="skipped", repair_n_calls=0,
                repair_judged_correct=bool(jc)) for r, jc in zip(records, judged_correct)]
    for j, i in enumerate(todo):
        res = by_job.get(j, {"answer": None, "ok": False, "error": "no_program", "n_calls": 0})
        row = out[i]
        row.update(repair_plan=jobs[j][0], repair_ok=res["ok"], repair_error=res["error"], repair_n_calls=res["n_calls"])
        if res["ok"] and res["answer"] is not None:
            row["prediction"] = res["answer"]
    return out


# ---------------------------------------------------------------------------- reports
def repair_summary(
    offpolicy_pairs: Sequence[Any], onpolicy_pairs: Sequence[Any], results: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """What RePAIR's training and inference amounted to, with a ``degenerate`` line for a DPO
    phase that had no preference pairs (the planner was not trained in it) and for a test run in
    which no plan executed (every answer stays standard RAG's).

    Returns:
        {"offpolicy_pairs", "onpolicy_pairs", "plans" (records planned for), "executed" (plans
        that ran to an answer), "executed_rate", "errors": {error or "ok": count}, "degenerate": [...]}.
    """
    from collections import Counter

    planned = [r for r in results if r.get("repair_error") != "skipped"]
    executed = sum(1 for r in planned if r.get("repair_ok"))
    degenerate = [f"repair: no {name} preference pairs, so the {name} DPO phase did not train the planner"
                  for name, pairs in (("off-policy", offpolicy_pairs), ("on-policy", onpolicy_pairs)) if not pairs]
    if planned and not executed:
        degenerate.append(f"repair: none of the {len(planned)} test plans executed; every answer is standard RAG's")
    return {
        "offpolicy_pairs": len(offpolicy_pairs), "onpolicy_pairs": len(onpolicy_pairs), "plans": len(planned),
        "executed": executed, "executed_rate": executed / len(planned) if planned else float("nan"),
        "errors": dict(Counter(str(r.get("repair_error") or "ok") for r in planned)),
        "degenerate": degenerate,
    }


JudgeFn = Callable[[Sequence[Mapping[str, Any]]], list[bool]]


def _states(rows: Sequence[Mapping[str, Any]]) -> int:
    return len({(str(r.get("dataset")), str(r.get("qid"))) for r in rows})


def plan_rewards(candidates: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """How much a state-dependent choice of plan could earn, from one phase's executed candidates
    (:func:`collect_preferences`' second value): the mean reward of each candidate plan (by its
    ``source``), the one plan that earns most over all states, the mean of each state's best reward
    (the oracle choice: the ceiling of any planner over these candidates) and the states where
    every plan earned the same.

    Returns:
        None without scored candidates; else {"states", "by_plan": {source: mean reward}, "best_single":
        source, "best_single_reward", "per_state_best_reward", "tied_states"}.
    """
    candidates = [c for c in candidates if "source" in c and c.get("reward") is not None]
    by_state: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for c in candidates:
        by_state.setdefault((str(c.get("dataset")), str(c.get("qid"))), []).append(c)
    if not by_state:
        return None
    sums: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for c in candidates:
        sums[str(c["source"])] += float(c["reward"])
        counts[str(c["source"])] += 1
    by_plan = {src: round(sums[src] / counts[src], 4) for src in counts}
    best = max(by_plan, key=lambda src: (by_plan[src], -list(by_plan).index(src)))
    rewards = [[float(c["reward"]) for c in cs] for cs in by_state.values()]
    return {"states": len(by_state), "by_plan": by_plan, "best_single": best, "best_single_reward": by_plan[best],
            "per_state_best_reward": round(sum(max(r) for r in rewards) / len(rewards), 4),
            "tied_states": sum(max(r) == min(r) for r in rewards)}


def dev_choice(planner: Any, records: Sequence[Mapping[str, Any]], candidates: Sequence[Mapping[str, Any]], *,
               judged_correct: Sequence[bool], programs: Sequence[str], prompt: str = "full",
               decoding: str = "constrained", prior: Sequence[float] | None = None) -> dict[str, Any] | None:
    """RePAIR's own dev score: on held-out train questions whose answers failed, the reward of the
    plan the planner picks, read from every grammar plan's executed reward on that state
    (``candidates``: :func:`collect_preferences`' second value on those questions), so nothing is
    executed again. The planner sees the prompt it sees at test time (the judge's estimate, no
    reasoning, in the ``prompt`` form it was trained on) and picks one of ``programs`` by the test
    rule (:func:`pick_plans` with ``decoding`` and, for "calibrated", ``prior``), as
    :func:`repair_infer` does.

    Returns:
        None without scored candidates; else {"states", "chosen_reward" (mean reward of the
        planner's picks), "top_share" (share of the states given its most frequent pick), "picks":
        {grammar source: states}, "state_picks" (the pick's source on each state, in record order), then :func:`plan_rewards` of the candidates: "by_plan",
        "best_single", "best_single_reward", "per_state_best_reward", "tied_states"}.

    Raises:
        ValueError: ``judged_correct`` is not one flag per record.
    """
    if len(judged_correct) != len(records):
        raise ValueError(f"{len(judged_correct)} judge flags for {len(records)} records")
    rewards = plan_rewards(candidates)
    if rewards is None:
        return None
    table: dict[tuple[str, str], dict[str, tuple[str, float]]] = {}
    for c in candidates:
        if c.get("reward") is not None and "source" in c:
            table.setdefault((str(c.get("dataset")), str(c.get("qid"))), {})[_norm_plan(str(c["plan"]))] = (
                str(c["source"]), float(c["reward"]))
    states = [(i, (dataset_name(r), str(r.get("id")))) for i, r in enumerate(records)
              if (dataset_name(r), str(r.get("id"))) in table]
    prompts = [build_planner_messages(records[i], correct=bool(judged_correct[i]), example=False, prompt=prompt)
               for i, _ in states]
    picks = pick_plans(planner, prompts, programs, decoding=decoding, prior=prior, desc="repair dev plans")
    got, sources, state_picks = [], Counter(), []
    for (_, key), pick in zip(states, picks):
        source, reward = table[key].get(_norm_plan(pick), ("unexecuted", 0.0))
        got.append(reward)
        sources[source] += 1
        state_picks.append(source)
    n = len(got)
    return {"states": n, "chosen_reward": round(sum(got) / n, 4) if n else None,
            "top_share": round(max(sources.values()) / n, 4) if n else None, "picks": dict(sources.most_common()),
            "state_picks": state_picks,
            **{k: v for k, v in rewards.items() if k != "states"}}


def dev_pick_changes(dev: Mapping[str, Mapping[str, Any] | None]) -> dict[str, int]:
    """For each phase after "start" in ``dev`` ({phase: :func:`dev_choice`}), how many held-out
    dev states the planner picks differently from the untrained planner: what training moved."""
    start = (dev.get("start") or {}).get("state_picks")
    if start is None:
        return {}
    return {phase: sum(a != b for a, b in zip(start, d["state_picks"]))
            for phase, d in dev.items() if phase != "start" and d and d.get("state_picks") is not None}


def unmoved_picks_line(dev: Mapping[str, Mapping[str, Any] | None], *, final: str = "final") -> str | None:
    """A ``degenerate`` line when preference training moved no pick: the ``final`` planner picks
    the untrained planner's plan on every held-out dev state, so DPO changed nothing the test rule
    reads. None otherwise, or without dev scores."""
    changes = dev_pick_changes(dev)
    if final not in changes or changes[final]:
        return None
    n = len(dev[final]["state_picks"])  # type: ignore[index]
    return (f"repair: DPO moved none of the planner's picks; the trained planner picks the untrained "
            f"one's plan on all {n} held-out dev states")


def repair_training(training_cost: Mapping[str, Any], *, offpolicy_seconds: float, dpo_seconds: float,
                    offpolicy_result: Any, onpolicy_result: Any,
                    offpolicy_candidates: Sequence[Mapping[str, Any]] = (),
                    onpolicy_candidates: Sequence[Mapping[str, Any]] = (),
                    offpolicy_pairs: Sequence[Mapping[str, Any]] = (),
                    onpolicy_pairs: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The RePAIR stage's ``training`` block (``reports/metrics/12_repair.json``).

    Args:
        training_cost: the LLM cost of the train answers and candidate plans (``add_costs``).
        offpolicy_seconds, dpo_seconds: wall time of the off-policy phase and of the two DPO
            rounds with the on-policy candidates; their sum is rounded to 0.1 s.
        offpolicy_result, onpolicy_result: each DPO round's ``TrainResult``, or None when it had
            no pairs.
        offpolicy_candidates, onpolicy_candidates: each phase's executed candidate plans
            (:func:`collect_preferences`' second value), whose distinct states are counted.
        offpolicy_pairs, onpolicy_pairs: each phase's preference pairs; a state whose candidates
            all earned the same reward gives none.

    Returns:
        {"calls", "seconds", "dpo_steps": [off-policy, on-policy] (0 for a round not run),
        "what", "optimizer_seconds" (the rounds' training, summed, rounded to 0.1 s),
        "offpolicy_states", "onpolicy_states" (training states per phase),
        "offpolicy_states_with_pair", "onpolicy_states_with_pair" (states that gave at least one
        preference pair), "offpolicy_rewards" (:func:`plan_rewards` of the off-policy candidates,
        when there are any)}.
    """
    results = (offpolicy_result, onpolicy_result)
    return {"calls": training_cost["calls"], "seconds": round(offpolicy_seconds + dpo_seconds, 1),
            "dpo_steps": [r.steps if r else 0 for r in results],
            "what": "train answers, executed candidate plans (the held-out dev states' included) and two DPO rounds",
            "optimizer_seconds": round(sum(r.seconds for r in results if r), 1),
            "offpolicy_states": _states(offpolicy_candidates), "onpolicy_states": _states(onpolicy_candidates),
            "offpolicy_states_with_pair": _states(offpolicy_pairs),
            "onpolicy_states_with_pair": _states(onpolicy_pairs),
            **({"offpolicy_rewards": rewards} if (rewards := plan_rewards(offpolicy_candidates)) else {})}


def plan_shares(programs: Sequence[str]) -> dict[str, Any]:
    """The test-time plan distribution: {"executed": n, "distinct": k, "top_share", "plan_shares":
    {plan (whitespace-normalized): share of the executed plans}, most common first}."""
    counts = Counter(" ".join(str(p).split()) for p in programs)
    n = sum(counts.values())
    shares = {plan: c / n for plan, c in counts.most_common()}
    return {"executed": n, "distinct": len(counts), "top_share": max(shares.values()) if shares else float("nan"),
            "plan_shares": shares}


def repair_info(summary: Mapping[str, Any], *, offpolicy_pairs: Sequence[Any], onpolicy_pairs: Sequence[Any],
                planner_start: Mapping[str, Any], action_calls: Mapping[str, int],
                test_plans: Mapping[str, Any] | None = None, dev: Mapping[str, Any] | None = None,
                dev_questions: int = 0, dev_meters: Sequence[Any] = ()) -> dict[str, Any]:
    """The RePAIR stage's own metrics blocks (``reports/metrics/12_repair.json``), given to
    ``save_method_answers`` as ``info``.

    Args:
        summary: :func:`repair_summary` with the notebook's additions (plans, states, epochs,
            decoding); its keys come first in the ``repair`` block.
        offpolicy_pairs, onpolicy_pairs: each phase's preference pairs (counted).
        planner_start: where the planner started ({"base_model", "init_adapter"}).
        action_calls: :func:`ragcritic_lib.agent.actions.count_action_calls` of the executed test
            plans (RePAIR's column of its Table 3).
        dev: {phase: :func:`dev_choice` or None}, the dev score after each phase; it is written with
            ``dev_questions``, the LLM calls of ``dev_meters`` (the ``MeteredLLM`` each score ran
            through) and ``changed_picks`` (:func:`dev_pick_changes`).

    Returns:
        {"repair": {**summary, "offpolicy_pairs", "onpolicy_pairs", "planner_start": "adapter" or
        "base model"}, "action_calls": action_calls}, with "test" when ``test_plans`` is given and
        "dev" when ``dev`` is.
    """
    out = {"repair": {**summary, "offpolicy_pairs": len(offpolicy_pairs), "onpolicy_pairs": len(onpolicy_pairs),
                      "planner_start": "adapter" if planner_start["init_adapter"] else "base model"},
           "action_calls": dict(action_calls)}
    if test_plans is not None:  # :func:`plan_shares` of the executed test plans
        out["test"] = dict(test_plans)
    if dev is not None:
        out["dev"] = {**dev, "questions": int(dev_questions), "calls": sum(m.cost()["calls"] for m in dev_meters),
                      "changed_picks": dev_pick_changes(dev)}
    return out
