# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · The other methods in the same harness: Self-Refine, CRAG, SIM-RAG, RePAIR, RAGEC
# Every method answers the same test questions of both datasets with the same generator,
# retriever, prompt and metrics as standard RAG (notebook 01) and RAG-Critic (notebook 08), and one
# table compares them with paired bootstrap intervals and their cost (RAG-Critic Table 3, RePAIR
# Table 2). RAGEC does not answer questions: it diagnoses standard RAG's wrong answers by pipeline
# stage and error type (RAGEC Tables 2 and 4) and is compared with RAG-Critic's tier-1 labels.

# %% tags=["parameters"]
max_test_questions = 16
n_boot = 1000
ci_alpha = 0.05
rag_critic_results = "data/correction/{dataset}/rag_critic_test.jsonl"
rag_critic_pred_key = "final_prediction"
self_refine_rounds = 2
crag_train_questions = 60
crag_dev_questions = 40
crag_use_reranker = True
crag_secondary = "bm25"
crag_k_secondary = 3
crag_top_strips = 4
crag_min_strip_score = -0.5
crag_rewriter = "keywords"
simrag_train_questions = 34
simrag_min_examples = 200
simrag_max_turns = 3
simrag_docs_per_turn = 2
simrag_initial_docs = 0
simrag_match = "em"
simrag_critic = "classifier"
simrag_critic_recipe = "configs/train/critic_sft.yaml"
simrag_critic_steps = 30
simrag_heldout_frac = 0.3
ragec_votes = 10
ragec_temperature = 0.7
ragec_coverage_threshold = 0.8
ragec_first_stage_depth = 20
ragec_rerank = True
repair_train_questions = 8
repair_grammar_plans = 4
repair_sampled_plans = 2
repair_temperature = 0.8
repair_margin = 0.0
repair_max_pairs = 4
repair_dpo_recipe = "configs/train/critic_dpo.yaml"
repair_dpo_beta = 0.1
repair_offpolicy_steps = 4
repair_onpolicy_steps = 2
repair_init_adapter = "data/correction/planner_adapter"
repair_base_model = ""
simrag_critic_base_model = ""

# %%
import dataclasses
from collections import Counter

import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.agent.actions import ActionSet
from ragcritic_lib.baselines import (
    MeteredLLM, add_costs, comparison_table, cost_from_per_sample, crag, dataset_costs, is_wrong, jsonable,
    load_method_results, markdown_table, per_dataset, ragec, records_cost, repair, score_records, self_refine, simrag,
    stopwatch,
)
from ragcritic_lib.critic import HeuristicCritic
from ragcritic_lib.io import read_json, read_jsonl, write_jsonl
from ragcritic_lib.llm import GenParams
from ragcritic_lib.params import load_params
from ragcritic_lib.rag import run_standard_rag
from ragcritic_lib.stage_metrics import write_stage_metrics
from ragcritic_lib.taxonomy import load_taxonomy
from ragcritic_lib.training import dpo_start

params = load_params()
seed = params["common"]["seed"]
rr = params["retrieval_rag"]  # standard RAG's settings: every method reuses them
datasets = runtime.dataset_names(params)
gen = GenParams(max_new_tokens=rr["max_new_tokens"], stop=("\nQuestion:", "<|im_end|>"))
short = dataclasses.replace(gen, max_new_tokens=24, stop=("\n",))  # search queries
out_dir = paths.stage_dir("baselines")
llm = runtime.load_generator(params)
taxonomy = load_taxonomy()
retrievers = {ds: runtime.load_retriever(params, ds) for ds in datasets}
split = lambda ds, name, n: runtime.load_split(params, ds, name, limit=n)  # noqa: E731
# costs: method -> cost over all datasets; ds_costs: method -> dataset -> cost (every LLM call of the
# method's test-time run; training and tuning calls as "training_calls"); degenerate: method -> lines
results, costs, ds_costs, degenerate = {}, {}, {}, {}
{"datasets": datasets, "generator": runtime.generator_config(params)["model"],
 "retriever": runtime.retriever_config(params)["kind"]}

# %% [markdown]
# ## The shared test questions: standard RAG (notebook 01) and RAG-Critic (notebook 08)
# The first `max_test_questions` test answers of each dataset from notebook 01 are the questions
# every method answers. RAG-Critic's answers on them come from notebook 08, and its cost is
# notebook 08's per-question mean scaled to these questions.

# %%
test = {ds: read_jsonl(paths.stage_dir("retrieval_rag") / ds / "test.jsonl")[:max_test_questions] for ds in datasets}
all_test = [r for ds in datasets for r in test[ds]]
results["standard_rag"], costs["standard_rag"] = score_records(all_test), records_cost(all_test)
ds_costs["standard_rag"] = {ds: records_cost(test[ds]) for ds in datasets}
critic_runs = {ds: load_method_results(rag_critic_results.format(dataset=ds), ids=[r["id"] for r in test[ds]],
                                       pred_key=rag_critic_pred_key) for ds in datasets}
results["rag_critic"] = [r for ds in datasets for r in critic_runs[ds]]
m08_cost = read_json(paths.require(paths.METRICS_DIR / "08_correction.json")).get("cost", {})
per_question = {ds: c.get("RAG-Critic", {}).get("total", {}) for ds, c in m08_cost.items()}
estimate = cost_from_per_sample(per_question, {ds: len(critic_runs[ds]) for ds in datasets})
if estimate is not None:
    costs["rag_critic"] = add_costs(costs["standard_rag"], estimate)
    ds_costs["rag_critic"] = dataset_costs(ds_costs["standard_rag"], {
        ds: cost_from_per_sample(per_question, {ds: len(critic_runs[ds])}) for ds in datasets})
{ds: {"questions": len(test[ds]), "rag_critic": len(critic_runs[ds])} for ds in datasets}

# %% [markdown]
# ## Self-Refine
# The generator reviews its own answer against the same passages and rewrites it, up to
# `self_refine_rounds` times, stopping as soon as its feedback finds no problem. Feedback and
# rewrite both see the earlier answers of the question with the feedback they got. Feedback that
# never approves (or approves every original answer) is reported as degenerate.

# %%
m, refined = MeteredLLM(llm), []
with stopwatch() as t:
    for ds in datasets:
        with m.dataset(ds):
            refined += self_refine.self_refine(m, test[ds], rounds=self_refine_rounds, gen_params=gen,
                                               max_words=rr["max_passage_words"])
results["self_refine"] = score_records(refined)
costs["self_refine"] = {**add_costs(costs["standard_rag"], m.cost()), "wall_seconds": t["seconds"]}
ds_costs["self_refine"] = dataset_costs(ds_costs["standard_rag"], m.cost_by_dataset())
refine_info = self_refine.self_refine_summary(refined)
degenerate["self_refine"] = refine_info["degenerate"]
print({k: refine_info[k] for k in ("approval_rate", "approval_rate_by_round", "refinements", "degenerate")})
pd.DataFrame([{"rounds_used": r["self_refine_rounds"], "stopped_by_feedback": r["self_refine_stopped"]}
              for r in refined]).value_counts().rename("questions").to_frame()

# %% [markdown]
# ## CRAG
# A logistic-regression retrieval evaluator on (question, passage) pairs of the train split
# (cross-encoder score, rank, lexical overlap; label = supporting passage or contains a gold
# answer), then Correct / Ambiguous / Incorrect actions on test. The paper's web search becomes a
# second retrieval over the corpus with a rewritten query: the `crag_secondary` retriever, queried
# with a keyword rewrite of the question. The thresholds are tuned on dev answer F1: each dev
# question is answered once with each action's knowledge, and the (upper, lower) pair with the
# best mean F1 wins, so Ambiguous is credited with what it actually achieves. `degenerate` names
# an action the dev optimum never chooses.

# %%
reranker = None
if crag_use_reranker:
    from ragcritic_lib.retrieval import CrossEncoderReranker

    reranker = CrossEncoderReranker(runtime.retriever_config(params)["reranker"])
ce = crag.make_ce_scorer(reranker)
crag_kw = dict(gen_params=gen, k_secondary=crag_k_secondary, top_strips=crag_top_strips,
               min_strip_score=crag_min_strip_score, rewriter=crag_rewriter, rag_variant=rr["prompt_variant"],
               max_passage_words=rr["max_passage_words"])
m, tune_m, crag_out, crag_info = MeteredLLM(llm), MeteredLLM(llm), [], {}
with stopwatch() as t:
    for ds in datasets:
        train = crag.attach_passages(split(ds, "train", crag_train_questions), retrievers[ds], rr["top_k"])
        dev = crag.attach_passages(split(ds, "dev", crag_dev_questions), retrievers[ds], rr["top_k"])
        evaluator = crag.fit_evaluator(train, ce, seed=seed)
        secondary = runtime.load_retriever(params, ds, kind=crag_secondary, rerank=False)
        with tune_m.dataset(ds):
            best = crag.tune_on_dev(tune_m, dev, evaluator=evaluator, ce_scorer=ce, secondary=secondary, **crag_kw)
        with m.dataset(ds):
            out_ds = crag.run_crag(m, test[ds], evaluator=evaluator, ce_scorer=ce, secondary=secondary,
                                   upper=best["upper"], lower=best["lower"], **crag_kw)
        crag_out += out_ds
        crag_info[ds] = {**{k: v for k, v in best.items() if k != "action_f1_per_question"},
                         "train_pairs": evaluator.train_size, "train_positive_rate": evaluator.positive_rate,
                         "test_actions": dict(Counter(r["crag_action"] for r in out_ds))}
results["crag"] = score_records(crag_out)
degenerate["crag"] = [f"{ds}: {d}" for ds in datasets for d in crag_info[ds]["degenerate"]]
costs["crag"] = {**m.cost(), "wall_seconds": t["seconds"], "training_calls": tune_m.cost()["calls"]}
ds_costs["crag"] = dataset_costs(m.cost_by_dataset(),
                                 {ds: {"training_calls": c["calls"]} for ds, c in tune_m.cost_by_dataset().items()})
pd.DataFrame(crag_info).T[["upper", "lower", "dev_f1", "action_f1", "actions", "test_actions", "degenerate"]]

# %% [markdown]
# ## SIM-RAG
# Self-practice on train questions (Algorithm 1: answer + rationale, Accept/Reject against the
# gold answer, then search and append, for `simrag_max_turns` turns), label balancing, a split by
# question id, a sufficiency critic that never sees the turn index, and multi-round inference on
# test with that critic and with the oracle critic (the ceiling). Fewer than
# `simrag_min_examples` self-practice examples, a missing label, or a critic that accepts every
# answer at some turn are reported as degenerate.

# %%
sim_kw = dict(max_turns=simrag_max_turns, gen_params=gen, query_params=short, docs_per_turn=simrag_docs_per_turn,
              initial_docs=simrag_initial_docs)
match = simrag.make_match_fn(simrag_match)
practice_m, practice = MeteredLLM(llm), []
for ds in datasets:
    with practice_m.dataset(ds):
        practice += simrag.self_practice(practice_m, retrievers[ds], split(ds, "train", simrag_train_questions),
                                         match_fn=match, **sim_kw)
practice_info = simrag.practice_summary(practice, min_examples=simrag_min_examples)
train_ex, heldout_ex = simrag.split_by_question(practice, heldout_frac=simrag_heldout_frac, seed=seed)
heldout_ex = sorted(heldout_ex, key=lambda e: datasets.index(e["dataset"]))  # grouped by dataset, order kept
balanced = simrag.balance_labels(train_ex, seed=seed)
pd.DataFrame([{"examples": len(practice), "accepted": practice_info["accept"], "train_balanced": len(balanced),
               "heldout": len(heldout_ex), "degenerate": practice_info["degenerate"]}])

# %%
if simrag_critic == "llm":
    simrag_base = runtime.resolve_base_model(params, simrag_critic_base_model, key="baselines.simrag_critic_base_model")
    res = simrag.train_llm_critic(balanced, simrag_critic_recipe, out_dir / "simrag_critic", base_model=simrag_base,
                                  overrides={"max_steps": simrag_critic_steps})
    critic_model = runtime.load_trained_model(params, res.adapter_dir, base_model=res.base_model)
    critic_llm, critic_eval_m = MeteredLLM(critic_model), MeteredLLM(critic_model)  # test run / held-out check
    sufficiency, held_critic = simrag.LLMSufficiencyCritic(critic_llm), simrag.LLMSufficiencyCritic(critic_eval_m)
else:
    critic_llm = critic_eval_m = None
    sufficiency = held_critic = simrag.ClassifierCritic(seed=seed).fit(balanced)
held_accept = []
for ds in datasets:
    with per_dataset(ds, critic_eval_m):
        held_accept += held_critic.accept([e for e in heldout_ex if e["dataset"] == ds])
confusion = simrag.confusion_matrix([e["label"] for e in heldout_ex], held_accept)
shares = confusion["shares"]
pd.DataFrame([[shares["correct_accept"], shares["correct_reject"]], [shares["wrong_accept"], shares["wrong_reject"]]],
             index=["answer correct", "answer wrong"], columns=["critic: Accept", "critic: Reject"]).round(3)

# %%
m, oracle_m, oracle, sim_out, sim_oracle = MeteredLLM(llm), MeteredLLM(llm), simrag.OracleCritic(match), [], []
with stopwatch() as t:
    for ds in datasets:
        with per_dataset(ds, m, critic_llm):
            sim_out += simrag.simrag_infer(m, retrievers[ds], test[ds], sufficiency, **sim_kw)
with stopwatch() as t_oracle:
    for ds in datasets:
        with oracle_m.dataset(ds):
            sim_oracle += simrag.simrag_infer(oracle_m, retrievers[ds], test[ds], oracle, **sim_kw)
results["simrag"], results["simrag_oracle_critic"] = score_records(sim_out), score_records(sim_oracle)
sim_training = dataset_costs(practice_m.cost_by_dataset(), critic_eval_m.cost_by_dataset() if critic_eval_m else {})
costs["simrag"] = {**add_costs(m.cost(), critic_llm.cost() if critic_llm else {}), "wall_seconds": t["seconds"],
                   "training_calls": sum(c["calls"] for c in sim_training.values())}
ds_costs["simrag"] = dataset_costs(m.cost_by_dataset(), critic_llm.cost_by_dataset() if critic_llm else {},
                                   {ds: {"training_calls": c["calls"]} for ds, c in sim_training.items()})
costs["simrag_oracle_critic"] = {**oracle_m.cost(), "wall_seconds": t_oracle["seconds"]}
ds_costs["simrag_oracle_critic"] = oracle_m.cost_by_dataset()
sim_report = simrag.critic_report(sufficiency, heldout_ex, sim_out, accepted=held_accept)
degenerate["simrag"] = practice_info["degenerate"] + sim_report["degenerate"]
held, tested = sim_report["heldout_accept_rate_by_turn"], sim_report["inference_accept_rate_by_turn"]
pd.DataFrame({"held-out accept rate": {t_: r["accept_rate"] for t_, r in held.items()},
              "test answers": {t_: r["n"] for t_, r in tested.items()},
              "test accept rate": {t_: r["accept_rate"] for t_, r in tested.items()}}).rename_axis("turn").round(3)

# %% [markdown]
# ## RePAIR
# Failed train answers get candidate plans (the first `repair_grammar_plans` of a small action
# grammar plus samples from the planner), executed by the same restricted executor and actions as
# RAG-Critic; reward = token F1; preference pairs by reward; DPO first off-policy (state with the
# oracle correctness and the failed reasoning), then on-policy (state with a judge's estimate,
# candidates sampled from the current planner). The judge is the grounded heuristic critic. The
# planner starts from notebook 08's SFT planner adapter when it exists (the base model writes
# almost no valid programs), else from the base model.

# %%
judge = HeuristicCritic(taxonomy)
judge_flags = lambda recs: [p.judgement == "Correct" for p in judge.critique(recs)]  # noqa: E731
act_kw = dict(gen_params=gen, topk=rr["top_k"], max_doc_words=rr["max_passage_words"], rag_variant=rr["prompt_variant"])
rag_kw = dict(k=rr["top_k"], variant=rr["prompt_variant"], gen_params=gen, max_passage_words=rr["max_passage_words"])
pref_kw = dict(n_sampled=repair_sampled_plans, temperature=repair_temperature, margin=repair_margin,
               max_pairs=repair_max_pairs, topk=rr["top_k"])
gen_m = MeteredLLM(llm)
actions = {ds: ActionSet(gen_m, retrievers[ds], **act_kw) for ds in datasets}
init_path = paths.resolve(repair_init_adapter) if repair_init_adapter else None
init_adapter = str(init_path) if init_path is not None and init_path.exists() else None
# An init adapter continues on its recorded base (a full checkpoint is its own base); without one
# the planner starts as repair_base_model, or the generator's model.
repair_key = "baselines.repair_base_model"
if init_adapter:
    repair_start = runtime.training_start(init_adapter, base_model=repair_base_model, key=repair_key)
else:
    repair_start = {"base_model": runtime.resolve_base_model(params, repair_base_model, key=repair_key),
                    "init_adapter": None}
planner = MeteredLLM(runtime.load_start_model(params, repair_start))
repair_train, off = {}, []
with stopwatch() as t_train:
    for ds in datasets:
        with per_dataset(ds, gen_m, planner):
            repair_train[ds] = run_standard_rag(gen_m, split(ds, "train", repair_train_questions),
                                                retriever=retrievers[ds], **rag_kw)
            off.append(repair.collect_preferences(repair_train[ds], actions[ds], phase="off", planner=planner,
                                                  n_grammar=repair_grammar_plans, seed=seed, **pref_kw))
off_pairs, off_log = [p for ps, _ in off for p in ps], [c for _, cs in off for c in cs]
{"planner_start": init_adapter or "base model", "candidates": len(off_log), "pairs": len(off_pairs),
 "failed_train_answers": len({(c["dataset"], c["qid"]) for c in off_log}),
 "mean_reward": round(sum(c["reward"] for c in off_log) / max(1, len(off_log)), 3)}

# %% [markdown]
# Off-policy DPO, then on-policy candidates sampled from the off-policy planner with only the
# judge's estimate in the state, and a second DPO round continuing the off-policy adapter.

# %%
dpo = {"beta": repair_dpo_beta, "max_length": 1024}
with stopwatch() as t_dpo:
    res_off = repair.train_planner(off_pairs, repair_dpo_recipe, out_dir / "repair_planner_off", **repair_start,
                                   overrides={**dpo, "max_steps": repair_offpolicy_steps})
    start_on = dpo_start(res_off) if res_off else repair_start  # continue the off-policy planner
    planner_off = MeteredLLM(runtime.load_start_model(params, start_on)) if res_off else planner
    on = []
    for ds in datasets:
        with per_dataset(ds, gen_m, planner_off):
            on.append(repair.collect_preferences(repair_train[ds], actions[ds], phase="on", planner=planner_off,
                                                 n_grammar=0, judged_correct=judge_flags(repair_train[ds]),
                                                 seed=seed + 1, **pref_kw))
    on_pairs, on_log = [p for ps, _ in on for p in ps], [c for _, cs in on for c in cs]
    res_on = repair.train_planner(on_pairs, repair_dpo_recipe, out_dir / "repair_planner", **start_on,
                                  overrides={**dpo, "max_steps": repair_onpolicy_steps})
final_start = dpo_start(res_on) if res_on else start_on
training_cost = add_costs(gen_m.cost(), planner.cost(), planner_off.cost() if planner_off is not planner else {})
repair_training = dataset_costs(gen_m.cost_by_dataset(), planner.cost_by_dataset(),
                                planner_off.cost_by_dataset() if planner_off is not planner else {})
pd.DataFrame([{"phase": phase, "candidates": len(log), "pairs": len(pairs), "dpo_steps": res.steps if res else 0,
               "s_per_step": round(res.seconds_per_step, 1) if res else None}
              for phase, log, pairs, res in [("off-policy", off_log, off_pairs, res_off),
                                             ("on-policy", on_log, on_pairs, res_on)]])

# %% [markdown]
# Inference: the final planner writes one plan per test answer (greedy) from the reduced state;
# a rejected or failing plan keeps the standard RAG answer.

# %%
final_planner = MeteredLLM(runtime.load_start_model(params, final_start))
gen_m_test = MeteredLLM(llm)
test_actions = {ds: ActionSet(gen_m_test, retrievers[ds], **act_kw) for ds in datasets}
repair_out = []
with stopwatch() as t:
    for ds in datasets:
        with per_dataset(ds, final_planner, gen_m_test):
            repair_out += repair.repair_infer(final_planner, test[ds], test_actions[ds],
                                              judged_correct=judge_flags(test[ds]))
results["repair"] = score_records(repair_out)
costs["repair"] = {**add_costs(costs["standard_rag"], final_planner.cost(), gen_m_test.cost()),
                   "wall_seconds": t["seconds"], "training_calls": training_cost["calls"],
                   "training_seconds": t_train["seconds"] + t_dpo["seconds"]}
ds_costs["repair"] = dataset_costs(ds_costs["standard_rag"], final_planner.cost_by_dataset(),
                                   gen_m_test.cost_by_dataset(),
                                   {ds: {"training_calls": c["calls"]} for ds, c in repair_training.items()})
repair_info = repair.repair_summary(off_pairs, on_pairs, repair_out)
degenerate["repair"] = repair_info["degenerate"]
pd.Series([r["repair_error"] or "ok" for r in repair_out]).value_counts().rename("plans by outcome")

# %% [markdown]
# Action usage of the executed plans, excluding the final GenerateAnswer (RePAIR Table 3): the
# RAG-Critic planner's programs (with error categories) against RePAIR's (without).

# %%
rc_programs = [s.get("program") or "" for r in (results.get("rag_critic") or []) for s in r.get("steps", [])]
repair_programs = [r["repair_plan"] for r in repair_out if r["repair_ok"]]
usage = repair.action_usage_table(repair.count_actions(rc_programs), repair.count_actions(repair_programs))
pd.DataFrame(usage)

# %% [markdown]
# ## RAGEC on the wrong answers of a pipeline with a reranker
# Stage attribution by rules (ground-truth chunks, more-than-half, reranker drop, concept coverage
# 0.8), then `ragec_votes` LLM votes per error among the blamed stage's types (K = 10 in the
# paper). The reranking stage (types E7/E8) exists only when a reranker sits between the first
# stage and the generator: when standard RAG has none (`common.retriever.rerank` off) and
# `ragec_rerank` is on, the test questions are answered again with the cross-encoder reranking
# the first stage's top `ragec_first_stage_depth`, and RAGEC diagnoses that run's wrong answers.
# More than half invalid votes, or no reranking stage, is reported as degenerate.
# Table like RAGEC Table 2 (modal and second-modal type), one column per dataset.

# %%
types = ragec.load_ragec_types()
rerank_on = bool(runtime.retriever_config(params).get("rerank"))
m, ragec_out, ragec_inputs = MeteredLLM(llm), [], []
with stopwatch() as t:
    for ds in datasets:
        recs, first_stage = test[ds], runtime.load_retriever(params, ds, rerank=False)
        gold_fn = ragec.make_chunk_gold_fn(runtime.load_corpus(params, ds))
        with m.dataset(ds):
            if not rerank_on and ragec_rerank:
                reranked = runtime.load_retriever(params, ds, rerank=True, rerank_depth=ragec_first_stage_depth)
                recs = ragec.reranked_records(m, recs, reranked=reranked, first_stage=first_stage,
                                              depth=ragec_first_stage_depth, **rag_kw)
            elif rerank_on:
                recs = ragec.attach_first_stage(recs, first_stage, ragec_first_stage_depth)
            ragec_out += ragec.run_ragec(m, recs, types, chunk_gold_fn=gold_fn, k=ragec_votes,
                                         coverage_threshold=ragec_coverage_threshold, temperature=ragec_temperature,
                                         seed=seed)
        ragec_inputs += recs
costs["ragec (diagnosis)"] = {**m.cost(), "wall_seconds": t["seconds"]}
ds_costs["ragec (diagnosis)"] = m.cost_by_dataset()
ragec_info = ragec.ragec_summary(ragec_out, ragec_votes, reranking_stage=rerank_on or ragec_rerank)
degenerate["ragec"] = ragec_info["degenerate"]
ragec_table = pd.DataFrame(ragec.distribution_table(ragec_out, types, group_key="dataset"))
ragec_table

# %% [markdown]
# Modal types per question type (RAGEC Table 3) and how many of the K votes agreed with the
# modal type (RAGEC Table 4).

# %%
mode_freq = ragec.mode_frequency_table(ragec_out, ragec_votes)
print("mode frequency (Table 4):", mode_freq, "| stages:", ragec.stage_counts(ragec_out))
pd.DataFrame(ragec.distribution_table(ragec_out, types, group_key="question_type")).drop(columns=["stage"])

# %% [markdown]
# Agreement with RAG-Critic's tier-1 labels on the same wrong answers (the critic's first-round
# critique in notebook 08; the grounded heuristic critic when notebook 08's results are absent).
# The critic judged standard RAG's answers, so when RAGEC diagnosed a re-answered run only the
# questions answered the same way in both runs are compared (the others count as missing).
# Side agreement: RAGEC's stage and the critic's labels blame the same side (retrieval vs
# response); type agreement: the tier-1 label mapped from the modal E-type is among the critic's.

# %%
wrong = [r for r in all_test if is_wrong(r)]
if "rag_critic" in results:
    critic_source, critiques = "notebook 08 critic", ragec.first_round_critiques(results["rag_critic"])
    labels = ragec.critic_tier1_labels(results["rag_critic"], critiques)
else:
    critic_source = "heuristic critic (notebook 08 results absent)"
    labels = ragec.critic_tier1_labels(wrong, judge.critique(wrong))
same = ragec.same_answer_keys(all_test, ragec_inputs)
labels = {key: v for key, v in labels.items() if key in same}
agreement = ragec.tier1_agreement(ragec_out, labels, types, canonical=taxonomy.canonical)
{"critic": critic_source, "same_answer_questions": len(same), **{k: v for k, v in agreement.items() if k != "by_stage"}}

# %% [markdown]
# ## One comparison table
# EM / F1 / acc per method and dataset (then per question type), the F1 change against standard
# RAG with a paired bootstrap interval over questions, and the cost of each method on that
# dataset's test questions: every logical LLM call (generate, score and choose; cache hits
# included) and its tokens, end to end, so methods that start from the standard RAG answer
# (Self-Refine, RePAIR, RAG-Critic) include its generation; RAG-Critic's cost is notebook 08's
# per-question mean scaled to these questions; wall time is this run's, over both datasets. Calls
# spent on training or tuning (SIM-RAG self-practice, CRAG's dev answers, RePAIR's preference
# data) are counted per dataset as `training_calls`. The cost cell lists the degenerate regimes.

# %%
rows = comparison_table(results, n_boot=n_boot, alpha=ci_alpha, seed=seed, costs=costs, dataset_costs=ds_costs)
table = pd.DataFrame(rows)
table[table.type == "all"][["dataset", "method", "n", "em", "f1", "acc", "d_f1", "d_f1_low", "d_f1_high", "calls"]].round(3)

# %%
fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 3.4), squeeze=False)
for ax, ds in zip(axes[0], datasets):
    sub = table[(table.type == "all") & (table.dataset == ds) & (table.method != "standard_rag")]
    ax.errorbar(sub.d_f1, range(len(sub)), xerr=[sub.d_f1 - sub.d_f1_low, sub.d_f1_high - sub.d_f1], fmt="o", capsize=3)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set(yticks=range(len(sub)), yticklabels=sub.method, xlabel="F1 change vs standard RAG", title=ds)
fig.tight_layout()
paths.FIGURES_DIR.mkdir(parents=True, exist_ok=True)
fig.savefig(paths.FIGURES_DIR / "09_delta_f1.png", dpi=120)
fig.savefig(paths.FIGURES_DIR / "09_delta_f1.svg")

# %%
cost_table = pd.DataFrame(costs).T.fillna(0).round(2)
cost_by_dataset = pd.DataFrame([{"method": k, "dataset": ds, **c} for k, d in ds_costs.items() for ds, c in d.items()])
print("degenerate regimes:", {k: v for k, v in degenerate.items() if v} or "none")
cost_by_dataset.fillna(0).round(2)

# %%
for name, recs in results.items():
    write_jsonl(out_dir / f"{name}_test.jsonl", recs)
write_jsonl(out_dir / "ragec_test.jsonl", ragec_out)
write_jsonl(out_dir / "simrag_practice.jsonl", practice)
write_jsonl(out_dir / "repair_pairs.jsonl", off_pairs + on_pairs)
write_jsonl(out_dir / "repair_candidates.jsonl", off_log + on_log)
paths.TABLES_DIR.mkdir(parents=True, exist_ok=True)
cols = ["dataset", "type", "method", "n", "em", "f1", "acc", "d_f1", "d_f1_low", "d_f1_high", "d_em", "calls", "prompt_tokens",
        "completion_tokens", "wall_seconds"]
table.to_csv(paths.TABLES_DIR / "09_comparison.csv", index=False)
(paths.TABLES_DIR / "09_comparison.md").write_text(markdown_table(rows, cols))
ragec_table.to_csv(paths.TABLES_DIR / "09_ragec_types.csv", index=False)
cost_table.to_csv(paths.TABLES_DIR / "09_costs.csv")
pd.DataFrame(usage).to_csv(paths.TABLES_DIR / "09_repair_action_usage.csv", index=False)
deterministic = ("calls", "generate_calls", "score_calls", "choose_calls", "prompt_tokens", "completion_tokens",
                 "training_calls")
metrics = {
    "comparison": [{k: v for k, v in r.items() if k != "wall_seconds"} for r in rows],
    "cost": {k: {c: v for c, v in d.items() if c in deterministic} for k, d in costs.items()},
    "cost_by_dataset": {k: {ds: {c: v for c, v in row.items() if c in deterministic} for ds, row in d.items()}
                        for k, d in ds_costs.items()},
    "degenerate": degenerate,
    "self_refine": refine_info,
    "crag": crag_info,
    "simrag": {"practice_examples": len(practice), "practice": practice_info, "balanced_train": len(balanced),
               "heldout_confusion": confusion, "accept_rate_by_turn": {k: sim_report[k] for k in (
                   "heldout_accept_rate_by_turn", "inference_accept_rate_by_turn")},
               "degenerate": degenerate["simrag"]},
    "repair": {"offpolicy_pairs": len(off_pairs), "onpolicy_pairs": len(on_pairs), "action_usage": usage,
               "dpo_steps": [res_off.steps if res_off else 0, res_on.steps if res_on else 0],
               "planner_start": "adapter" if init_adapter else "base model", "summary": repair_info,
               "degenerate": repair_info["degenerate"]},
    "ragec": {**ragec_info, "mode_frequency": mode_freq, "agreement": agreement, "critic_source": critic_source,
              "same_answer_questions": len(same)},
}
write_stage_metrics("09_baselines", jsonable(metrics))
sorted(metrics)
