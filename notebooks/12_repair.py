# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 12 · RePAIR: a planner trained by preference optimization to correct answers, without a taxonomy
# RePAIR corrects a RAG answer by writing a short plan over the same action functions RAG-Critic's
# planner uses (notebook 08), run by the same restricted executor on the same action layer (08's
# passages per answer, rerank depth, notes and query expansion). Its planner never sees an error
# category: the state is the question, the passages, the answer and (in training) whether the
# answer is right. The reward of a plan is the token F1 of the answer it produces.
#
# Training follows the paper's two phases:
# 1. **off-policy**: for each train answer the project's judge (`error_sampling.judge_metric`) calls
#    wrong, candidate plans (`offpolicy_plans` of the first `grammar_plans` of a small action
#    grammar, drawn per state, plus `sampled_plans` samples from the current planner under free
#    decoding) are executed and rewarded; pairs of a better and a worse plan train the planner by
#    DPO. The state carries the oracle correctness of the answer.
# 2. **on-policy**: the off-policy planner samples `sampled_plans` plans for every train answer with
#    only a judge's estimate of correctness in the state (the grounded heuristic critic, which reads
#    no gold answer); a second DPO round continues from the off-policy adapter.
#
# **Decoding.** The paper's planner writes its plan freely (`decoding: free`). The packaged 135M
# model almost never writes a program the executor accepts (1 of 140 test plans ran in that
# setting), so its output is restricted to the grammar's candidate plans, the texts DPO ranked, and
# on-policy plans are drawn from the planner's own distribution over them. At test time
# `decoding: constrained` decodes greedily inside the plans' token trie, where the first token at
# which two plans part decides between them; `decoding: calibrated` (the default) picks the plan
# with the highest whole log-probability, the quantity DPO trained, minus that plan's mean over the
# first `calibration_states` train answers (their test-time prompts), so a plan the planner
# favours on every state does not win by that alone. Which plan runs is still the trained policy's
# choice; no error label and no test question enters.
#
# **Dev score.** The next `dev_questions` train questions are held out of both phases: every
# grammar plan is executed once on each of their failed answers, and after each phase the planner
# picks one plan per state from the prompt it sees at test time. The mean reward of its picks,
# beside the best single plan's and the per-state best (`dev` in the metrics), is the method's own
# score on data it never trained on: what a recipe or a setting costs is read there, never on test.
#
# The planner starts **taxonomy-free**: from the base model (`init_adapter: ""`), not from
# notebook 08's planner, which was fine-tuned on plans chosen from RAG-Critic's error labels.
# Setting `init_adapter` to that adapter reproduces the earlier, taxonomy-informed variant. At
# test time the final planner writes one plan per answer (greedy); a rejected or failing plan
# keeps the standard RAG answer. Fewer than `min_states` training states in either phase, a DPO phase without
# pairs or short of one epoch over its pairs, no executed test plan, one plan above 60% of
# executed plans, or a trained planner that picks the untrained one's plan on every dev state
# (DPO moved nothing the test reads) are flagged as degenerate. `offpolicy_steps` / `onpolicy_steps` of -1 train each
# phase for one epoch (the paper's setting); each state gives at most `max_pairs` pairs, its best
# plan against its worst first. One deviation from the paper, against a planner that writes one
# plan for every answer: no plan is the chosen side of more than `max_chosen_share` of a phase's
# pairs (the surplus is dropped at random), so what DPO learns depends on the state, not only on
# which plan wins most often; 1.0 keeps every pair, as the paper does.
#
# **Cost.** The planner reads the compact prompt (`prompt: compact`: the five functions on one line,
# about 120 tokens shorter than their typed signatures) and DPO adapts the top 8 layers
# (`configs/train/repair_dpo.yaml`); `prompt: full` and a recipe without `lora_top_layers` are the
# slower forms (`benchmarks/bench_repair_dpo.py` measures a step of each). Each off-policy state
# executes `offpolicy_plans` of the grammar plans and gives `max_pairs` pair (its best plan against
# its worst), and the prior reads `calibration_states` answers: on the dev states, replaying the
# executed plans (`benchmarks/bench_repair_replay.py`) gave every planner the same picks with all
# eight plans, two pairs and 48 calibration states as with this recipe, at about half the stage's
# cost. Scoring the plans encodes the planner's instruction, the same for every state, once a call
# (`repair.shared_prompt_prefix`). The executed states and plans are written to `data/repair`, so
# a recipe can be compared on the same dev states later.

# %% tags=["parameters"]
train_questions = 125
dev_questions = 30
min_states = 100
grammar_plans = 8
offpolicy_plans = 2
sampled_plans = 2
temperature = 0.8
margin = 0.0
max_pairs = 1
max_chosen_share = 0.4
dpo_recipe = "configs/train/repair_dpo.yaml"
dpo_beta = 0.1
offpolicy_steps = -1
onpolicy_steps = -1
init_adapter = ""
base_model = ""
decoding = "calibrated"
calibration_states = 16
prompt = "compact"

# %%
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.agent.actions import count_action_calls
from ragcritic_lib.agent.workflow import correction_actions
from ragcritic_lib.baselines import (MeteredLLM, add_costs, dataset_costs, epochs_trained, is_wrong, jsonable,
                                     judge_params, mark_correct, per_dataset, records_cost, repair, stopwatch)
from ragcritic_lib.io import write_jsonl
from ragcritic_lib.baselines.harness import save_method_answers
from ragcritic_lib.baselines.stage_setup import setup_method
from ragcritic_lib.critic.critics import HeuristicCritic
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.retrieval import CrossEncoderReranker
from ragcritic_lib.retrieval.rag import run_standard_rag
from ragcritic_lib.mining.taxonomy import load_taxonomy
from ragcritic_lib.critic.training import dpo_start

setup = setup_method("repair")  # params, standard RAG's settings, the answer setting, generator, questions
params, seed, rr, llm, test = setup.params, setup.seed, setup.rag, setup.llm, setup.test
datasets, retrievers, out_dir = setup.datasets, setup.load_retrievers(), setup.out_dir
judge = HeuristicCritic(load_taxonomy())  # grounded rules only: reads passages and answer, no gold
judge_flags = lambda recs: [p.judgement == "Correct" for p in judge.critique(recs)]  # noqa: E731
# The correction stage's action layer (workflow.correction_actions with its settings), so RePAIR's plans
# and RAG-Critic's programs run on the same actions: GenerateAnswer reads at most standard RAG's top_k
# passages, the cross-encoder reranks retrievals and selects RefineDoc's sentences, expansion is
# pseudo-relevance feedback. Only the shared prompt prefix, a speed setting, stays off: the
# generator's prompts are encoded whole, as standard RAG's answers to the train and dev states are.
retriever_cfg = runtime.retriever_config(params)
reranker = CrossEncoderReranker(retriever_cfg["reranker"])
action_settings = {**params["correction"], "answer_prefix": "whole"}


def repair_actions(gen, ds: str):
    """The action layer over dataset ``ds``'s retriever, its generator calls metered by ``gen``."""
    return correction_actions(gen, retrievers[ds], settings=action_settings, rag=rr, reranker=reranker, table=None,
                              default_rerank_depth=retriever_cfg["rerank_depth"])


rag_kw = dict(k=rr["top_k"], variant=rr["prompt_variant"], gen_params=setup.answer_gen, max_passage_words=rr["max_passage_words"])
# The candidate plans constrained decoding chooses among: the same texts the off-policy phase executes.
programs = repair.grammar_programs(grammar_plans, topk=rr["top_k"])
pref_kw = dict(temperature=temperature, margin=margin, max_pairs=max_pairs, topk=rr["top_k"], decoding=decoding,
               programs=programs, prompt=prompt)
# Off-policy, constrained draws could only repeat the grammar plans every state already runs.
off_sampled = 0 if decoding in repair.GRAMMAR_DECODINGS else sampled_plans
{ds: len(recs) for ds, recs in test.items()}

# %% [markdown]
# ## Where the planner starts

# %%
key = "repair.base_model"
init_path = paths.resolve(init_adapter) if init_adapter else None
if init_path is not None and not init_path.exists():
    raise FileNotFoundError(f"repair.init_adapter: {init_adapter} does not exist (run its stage, or set it to \"\")")
if init_path is not None:
    start = runtime.training_start(str(init_path), base_model=base_model, key=key)
else:
    start = {"base_model": runtime.resolve_base_model(params, base_model, key=key), "init_adapter": None}
planner = MeteredLLM(runtime.load_start_model(params, start))
{"planner_start": start["init_adapter"] or f"base model {start['base_model']} (taxonomy-free)"}

# %% [markdown]
# ## Off-policy phase: candidate plans for failed train answers

# %%
gen_m = MeteredLLM(llm)
actions = {ds: repair_actions(gen_m, ds) for ds in datasets}
train, off = {}, []
with stopwatch() as t_off:
    for ds in datasets:
        with per_dataset(ds, gen_m, planner):
            train[ds] = mark_correct(run_standard_rag(gen_m, runtime.load_split(params, ds, "train", limit=train_questions),
                                                      retriever=retrievers[ds], **rag_kw), **judge_params(params))
            off.append(repair.collect_preferences(train[ds], actions[ds], phase="off", planner=planner,
                                                  n_grammar=grammar_plans, plans_per_state=offpolicy_plans,
                                                  n_sampled=off_sampled, seed=seed,
                                                  **pref_kw))
# BEGIN SOLUTION hint: flatten off's (pairs, candidates) tuples into off_pairs and off_log; off_states: distinct (dataset, qid) in off_log
off_pairs, off_log = [p for ps, _ in off for p in ps], [c for _, cs in off for c in cs]
off_states = len({(c["dataset"], c["qid"]) for c in off_log})
# END SOLUTION
unbalanced = len(off_pairs)
off_pairs = repair.balance_chosen(off_pairs, max_share=max_chosen_share, seed=seed)  # no plan wins everywhere
{"states": off_states, "candidates": len(off_log), "pairs": len(off_pairs), "pairs_before_balance": unbalanced,
 "mean_reward": round(sum(c["reward"] for c in off_log) / max(1, len(off_log)), 3)}

# %% [markdown]
# ## Held-out dev states
# The failed answers of the `dev_questions` train questions after the training ones, with every
# grammar plan executed once; no pair from them is trained on. `dev_score` reads the planner's pick
# on each against those rewards.

# %%
dev_recs, dev_log = {}, []
with stopwatch() as t_dev:
    for ds in datasets:
        with per_dataset(ds, gen_m):
            held = runtime.load_split(params, ds, "train", limit=train_questions + dev_questions)[train_questions:]
            dev_recs[ds] = mark_correct(run_standard_rag(gen_m, held, retriever=retrievers[ds], **rag_kw),
                                        **judge_params(params))
            dev_log += repair.collect_preferences(dev_recs[ds], actions[ds], phase="off", n_grammar=grammar_plans,
                                                  n_sampled=0, seed=seed, **pref_kw)[1]
dev_all = [r for recs in dev_recs.values() for r in recs]
dev_flags = judge_flags(dev_all)
# Calibration states (calibrated decoding): the first train answers, right or wrong as at test time,
# each in its test-time prompt.
calib = [r for recs in train.values() for r in recs][:calibration_states]
calib_flags = judge_flags(calib)

dev_m, calib_m, priors, calib_seconds = [], [], {}, []  # the dev scores' and the priors' calls, apart from test


def plan_prior(model, phase):
    """The plans' prior under ``model`` (calibrated decoding; None otherwise), kept in ``priors``."""
    if decoding != "calibrated":
        return None
    calib_m.append(MeteredLLM(model.llm if isinstance(model, MeteredLLM) else model))
    with stopwatch() as t_prior:
        priors[phase] = repair.plan_prior(calib_m[-1], calib, judged_correct=calib_flags, programs=programs,
                                          prompt=prompt)
    calib_seconds.append(t_prior["seconds"])
    return priors[phase]


def dev_score(model, phase):
    """The planner's picks on the held-out dev states by the test rule, scored by their executed
    rewards (None under free decoding)."""
    if decoding not in repair.GRAMMAR_DECODINGS or not dev_log:
        return None
    prior = plan_prior(model, phase)
    dev_m.append(MeteredLLM(model.llm if isinstance(model, MeteredLLM) else model))
    return repair.dev_choice(dev_m[-1], dev_all, dev_log, judged_correct=dev_flags, programs=programs, prompt=prompt,
                             decoding=decoding, prior=prior)


dev = {"start": dev_score(planner, "start")}
{k: dev["start"][k] for k in ("states", "chosen_reward", "best_single", "best_single_reward",
                              "per_state_best_reward", "top_share")} if dev["start"] else "no dev states"

# %% [markdown]
# ## DPO off-policy, then on-policy candidates and a second DPO round

# %%
dpo = {"beta": dpo_beta, "max_length": 1024}
dpo_steps = lambda n: {"max_steps": -1, "num_train_epochs": 1} if n == -1 else {"max_steps": n}  # noqa: E731
with stopwatch() as t_dpo:
    res_off = repair.train_planner(off_pairs, dpo_recipe, out_dir / "planner_off", **start,
                                   overrides={**dpo, **dpo_steps(offpolicy_steps)})
    start_on = dpo_start(res_off) if res_off else start  # continue the off-policy planner
    planner_off = MeteredLLM(runtime.load_start_model(params, start_on)) if res_off else planner
    on = []
    for ds in datasets:
        with per_dataset(ds, gen_m, planner_off):
            on.append(repair.collect_preferences(train[ds], actions[ds], phase="on", planner=planner_off,
                                                 n_grammar=0, n_sampled=sampled_plans, judged_correct=judge_flags(train[ds]),
                                                 seed=seed + 1, **pref_kw))
    on_pairs, on_log = [p for ps, _ in on for p in ps], [c for _, cs in on for c in cs]
    on_pairs = repair.balance_chosen(on_pairs, max_share=max_chosen_share, seed=seed + 1)
    res_on = repair.train_planner(on_pairs, dpo_recipe, out_dir / "planner", **start_on,
                                  overrides={**dpo, **dpo_steps(onpolicy_steps)})
final_start = dpo_start(res_on) if res_on else start_on
dev["offpolicy"] = dev_score(planner_off, "offpolicy") if res_off else dev["start"]
on_states = len({(c["dataset"], c["qid"]) for c in on_log})
training_cost = add_costs(gen_m.cost(), planner.cost(), planner_off.cost() if planner_off is not planner else {})
pd.DataFrame([{"phase": phase, "states": states, "candidates": len(log), "pairs": len(pairs),
               "dpo_steps": res.steps if res else 0, "epochs": epochs_trained(res) if res else 0.0,
               "s_per_step": round(res.seconds_per_step, 1) if res else None}
              for phase, states, log, pairs, res in [("off-policy", off_states, off_log, off_pairs, res_off),
                                                     ("on-policy", on_states, on_log, on_pairs, res_on)]])

# %% [markdown]
# ## The dev score after each phase
# Mean reward of the planner's picks on the held-out dev states (`chosen_reward`), the share of
# them given its most frequent pick, the best single plan's reward and the per-state best (the
# ceiling of any choice among these plans).

# %%
final_planner = MeteredLLM(runtime.load_start_model(params, final_start))
dev["final"] = dev_score(final_planner, "final")
if decoding == "calibrated" and "final" not in priors:  # no dev states: the test still needs the prior
    plan_prior(final_planner, "final")
pd.DataFrame({phase: {k: d[k] for k in ("chosen_reward", "top_share", "best_single_reward", "per_state_best_reward")}
              for phase, d in dev.items() if d}).T

# %% [markdown]
# ## Test: one plan per answer

# %%
gen_test, out = MeteredLLM(llm), []
with stopwatch() as t:
    for ds in datasets:
        test_actions = repair_actions(gen_test, ds)
        with per_dataset(ds, final_planner, gen_test):
            out += repair.repair_infer(final_planner, test[ds], test_actions, judged_correct=judge_flags(test[ds]),
                                       decoding=decoding, programs=programs, prompt=prompt,
                                       prior=priors.get("final"))
info = repair.repair_summary(off_pairs, on_pairs, out)
# BEGIN SOLUTION hint: executed: repair_plan of the records with repair_ok; test_plans: repair.plan_shares of them; top_share: its top_share
executed = [r["repair_plan"] for r in out if r["repair_ok"]]
test_plans = repair.plan_shares(executed)
top_share = test_plans["top_share"]
# END SOLUTION
degenerate = list(info["degenerate"])
if (unmoved := repair.unmoved_picks_line(dev)) is not None:
    degenerate.append(unmoved)
if executed and top_share > 0.6:
    degenerate.append(f"repair: one plan is {top_share:.0%} of the {len(executed)} executed test plans")
for phase, n_states in (("off-policy", off_states), ("on-policy", on_states)):
    if n_states < min_states:
        degenerate.append(f"repair: {n_states} {phase} training states (< {min_states})")
epochs = {"off": epochs_trained(res_off) if res_off else 0.0, "on": epochs_trained(res_on) if res_on else 0.0}
for phase, pairs, res in (("off-policy", off_pairs, res_off), ("on-policy", on_pairs, res_on)):
    if pairs and res and epochs_trained(res) < 1:
        degenerate.append(f"repair: the {phase} DPO phase made {res.steps} steps, {epochs_trained(res):.2f} epochs "
                          f"over its {res.examples} pairs (< 1)")
info.update(distinct_plans=test_plans["distinct"], top_plan_share=top_share, states={"off": off_states, "on": on_states},
            dpo_epochs=epochs, decoding=decoding,
            candidate_plans=len(programs) if decoding in repair.GRAMMAR_DECODINGS else None)
calib_cost = add_costs(*[m.cost() for m in calib_m])  # the priors' planner calls (counted with training)
if decoding == "calibrated":  # the plans' priors the test picks subtracted, and what computing them cost
    info["calibration"] = {"states": len(calib), "seconds": round(sum(calib_seconds), 1),
                           "calls": calib_cost.get("calls", 0),
                           "prior": {name: round(v, 3) for (name, _), v in
                                     zip(repair.plan_grammar(topk=rr["top_k"]), priors["final"])}}
print("plans by outcome:", pd.Series([r["repair_error"] or "ok" for r in out]).value_counts().to_dict())
pd.Series(test_plans["plan_shares"], name="share of executed test plans").round(3)

# %% [markdown]
# Action calls written in the executed plans, excluding the final GenerateAnswer (RePAIR's column of
# its Table 3). The analysis stage (notebook 15) sets them beside RAG-Critic's, which notebook 08
# counts the same way, so this stage does not depend on RAG-Critic's run.

# %%
action_calls = count_action_calls(executed)
pd.Series(action_calls, name="calls in the executed test plans")

# %%
base_cost = {ds: records_cost(recs) for ds, recs in test.items()}
metrics = save_method_answers(  # the scored answers under data/repair, and the metrics checked
    "repair", "12_repair", "RePAIR", out,
    cost=add_costs(*base_cost.values(), final_planner.cost(), gen_test.cost()),
    cost_by_dataset=dataset_costs(base_cost, final_planner.cost_by_dataset(), gen_test.cost_by_dataset()),
    training=repair.repair_training(add_costs(training_cost, calib_cost), offpolicy_seconds=t_off["seconds"], dpo_seconds=t_dpo["seconds"],
                                    offpolicy_result=res_off, onpolicy_result=res_on,
                                    offpolicy_candidates=off_log, onpolicy_candidates=on_log,
                                    offpolicy_pairs=off_pairs, onpolicy_pairs=on_pairs),
    degenerate=degenerate, seconds={"offpolicy": t_off["seconds"], "dev": t_dev["seconds"],
                                    "dpo_and_onpolicy": t_dpo["seconds"], "test": t["seconds"]},
    info=repair.repair_info(info, offpolicy_pairs=off_pairs, onpolicy_pairs=on_pairs, planner_start=start,
                            action_calls=action_calls, test_plans=test_plans,
                            dev=dev, dev_questions=dev_questions, dev_meters=dev_m),
)
write_stage_metrics("12_repair", jsonable(metrics))
# The executed states and plans, for training and scoring another recipe without executing a plan again.
off_states_recs = [r for recs in train.values() for r in recs if is_wrong(r)]
for name, rows in (("offpolicy_states", off_states_recs), ("offpolicy_candidates", off_log),
                   ("dev_states", [dict(r, judged_correct=f) for r, f in zip(dev_all, dev_flags)]),
                   ("calibration_states", [dict(r, judged_correct=f) for r, f in zip(calib, calib_flags)]),
                   ("dev_candidates", dev_log)):
    write_jsonl(out_dir / f"{name}.jsonl", jsonable(rows))
metrics["scores"]

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written and its test answers, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.evaluation.readings import reading_repair  # noqa: E402
from ragcritic_lib.evaluation.readings import provenance_sentences  # noqa: E402
from ragcritic_lib.io import read_json  # noqa: E402

Markdown("\n\n".join(reading_repair(metrics, out, standard=test)
                      + provenance_sentences(read_json(setup.metrics_path))))
