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
# # 11 · SIM-RAG: a sufficiency critic learned from self-practice decides when to stop searching
# SIM-RAG (Yang et al.) answers in turns. At each turn the generator answers from what it has
# gathered so far, with a rationale; a small **critic** judges whether that information was
# sufficient (Accept) or not (Reject); on Reject the generator writes a search query, the
# retriever adds passages, and the next turn answers again, up to `max_turns` turns.
#
# The critic is trained on **self-practice** data (the paper's Algorithm 1): the system runs the
# same loop on train questions without a critic, and every (question, context, answer, rationale)
# it produces is labelled Accept when the answer matches a gold answer and Reject otherwise. The
# paper's match is exact; `match: judge` (the default) uses the project's correctness judge
# (`error_sampling.judge_metric` at its threshold, as every other label does), because a 135M
# reader's free answers are rarely exact (at `match: em`, 11 of 204 practice answers were labelled
# Accept). The examples are split by
# question, so no held-out question was seen in training, and the training side is balanced by
# repeating the rarer label's examples (`balance: oversample`; `downsample` cuts the other label
# instead), so the critic learns from every distinct example.
#
# In the paper the critic is Flan-T5 fine-tuned on those examples. Here the default critic is a
# logistic regression on TF-IDF of the question, context, answer and rationale and a few grounding
# features such as whether the answer occurs in the context (`critic: classifier`):
# on held-out self-practice it is the one critic that accepts right answers more often than
# wrong ones with Wilson intervals apart (`benchmarks/bench_simrag_critic.py`, which measures
# every critic with its training time on the same data). The packaged LLM can play the paper's
# role instead, fine-tuned with LoRA (`critic: llm`, recipe `critic_recipe`) or frozen and read by
# a logistic probe on its hidden states where the reply would begin (`critic: probe`, layer
# `probe_layer` and the last; the classes weighed equally); with either, the classifier runs as
# an ablation (`classifier_ablation`). No critic sees the turn index. The oracle
# critic (Accept exactly when the answer is right; it reads the gold answers) gives the ceiling of
# the loop and is labelled as an oracle. A balanced training set smaller than `min_examples`, a
# missing label, held-out examples without a correct answer, or a critic that accepts every answer
# at some turn are flagged as degenerate; so are fewer than `min_examples` distinct training
# examples or fewer than `min_minority` of the rarer label. `critic_steps: -1` trains one epoch
# over the balanced set.
#
# Each turn's answer is standard RAG's: its prompt (variant `retrieval_rag.prompt_variant`) over
# the passages gathered so far, read with its answer extraction; the rationale the critic reads
# has SIM-RAG's own prompt and explains that answer. With `answer_prefix: shared` the opening every
# answer prompt shares (standard RAG's instruction and worked examples) is encoded once.

# %% tags=["parameters"]
train_questions = 100
min_examples = 200
min_minority = 20
max_turns = 3
docs_per_turn = 2
initial_docs = 0
match = "judge"
match_threshold = 0.5
balance = "oversample"
critic = "classifier"
probe_layer = 24
critic_recipe = "configs/train/critic_sft.yaml"
critic_steps = -1
critic_base_model = ""
heldout_frac = 0.3
classifier_ablation = True
oracle_ceiling = True
answer_prefix = "shared"

# %%
import pandas as pd

from ragcritic_lib import runtime
from ragcritic_lib.baselines import (MeteredLLM, add_costs, dataset_costs, epochs_trained, jsonable, per_dataset, simrag,
                                     stopwatch)
from ragcritic_lib.baselines.answer_prefix import set_answer_prefix
from ragcritic_lib.baselines.harness import save_method_answers
from ragcritic_lib.baselines.stage_setup import setup_method
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics

setup = setup_method("simrag")  # params, standard RAG's settings, the answer setting, generator, questions
params, seed, llm, test = setup.params, setup.seed, setup.llm, setup.test
set_answer_prefix(llm, answer_prefix, key="simrag.answer_prefix")  # standard RAG's opening encoded once (shared) or not
datasets, retrievers, out_dir = setup.datasets, setup.load_retrievers(), setup.out_dir
# answers as standard RAG writes them; rationales and search queries in SIM-RAG's own prompts
sim_kw = simrag.loop_settings(setup, max_turns=max_turns, docs_per_turn=docs_per_turn, initial_docs=initial_docs)
match_fn = simrag.stage_match_fn(params, match, match_threshold)  # judge: the project's one judge of correct
{ds: len(recs) for ds, recs in test.items()}

# %% [markdown]
# ## Self-practice on train questions

# %%
practice_m, practice = MeteredLLM(llm), []
with stopwatch() as t_practice:
    for ds in datasets:
        with practice_m.dataset(ds):
            practice += simrag.self_practice(practice_m, retrievers[ds],
                                             runtime.load_split(params, ds, "train", limit=train_questions),
                                             match_fn=match_fn, **sim_kw)
# BEGIN SOLUTION hint: split practice into train_ex, heldout_ex with simrag.split_by_question (heldout_frac, seed), then summarize it with simrag.practice_summary (min_examples, train=train_ex)
train_ex, heldout_ex = simrag.split_by_question(practice, heldout_frac=heldout_frac, seed=seed)
practice_info = simrag.practice_summary(practice, min_examples=min_examples, min_minority=min_minority,
                                        balance=balance, train=train_ex)
# END SOLUTION
heldout_ex = sorted(heldout_ex, key=lambda e: datasets.index(e["dataset"]))  # grouped by dataset, order kept
balanced = simrag.balance_labels(train_ex, seed=seed, mode=balance)
pd.DataFrame([{"examples": len(practice), "accepted": practice_info["accept"], "train_distinct": len(train_ex),
               "train_accept": practice_info["train_accept"], "train_balanced": len(balanced),
               "heldout": len(heldout_ex), "degenerate": practice_info["degenerate"]}])

# %% [markdown]
# ## The critics, and their held-out confusion (SIM-RAG Fig. 3)
# Each critic's verdicts on the held-out examples against their labels: `simrag.confusion_matrix`
# gives the four cells (counts and shares of all examples) and the accuracy.

# %%
def heldout_verdicts(critic_obj, meter=None):
    accepted = []
    for ds in datasets:
        with per_dataset(ds, meter):
            accepted += critic_obj.accept([e for e in heldout_ex if e["dataset"] == ds])
    return accepted


critics, meters, held, training, res = {}, {}, {}, {}, None
with stopwatch() as t_critic:
    if critic == "llm":
        base = runtime.resolve_base_model(params, critic_base_model, key="simrag.critic_base_model")
        steps = {"max_steps": -1, "num_train_epochs": 1} if critic_steps == -1 else {"max_steps": critic_steps}
        res = simrag.train_llm_critic(balanced, critic_recipe, out_dir / "critic", base_model=base, overrides=steps)
        critic_model = runtime.load_trained_model(params, res.adapter_dir, base_model=res.base_model)
        meters["llm"], held_m = MeteredLLM(critic_model), MeteredLLM(critic_model)
        critics["llm"] = simrag.LLMSufficiencyCritic(meters["llm"])
        held["llm"] = heldout_verdicts(simrag.LLMSufficiencyCritic(held_m), held_m)
        training["llm_critic"] = {"steps": res.steps, "seconds_per_step": round(res.seconds_per_step, 2),
                                  "epochs": epochs_trained(res), "rows": res.examples,
                                  "heldout_calls": held_m.cost()["calls"]}
    if critic == "probe":
        base = runtime.resolve_base_model(params, critic_base_model, key="simrag.critic_base_model")
        with stopwatch() as t_fit:  # one forward pass per distinct training example; the classes weigh equally
            critics["probe"] = simrag.ProbeSufficiencyCritic(base, layer=probe_layer, seed=seed).fit(train_ex)
        if critics["probe"].probe is not None:
            critics["probe"].save(out_dir / "critic")
        training["probe_critic"] = {"seconds": round(t_fit["seconds"], 1), "rows": len(train_ex), "layer": probe_layer}
        held["probe"] = heldout_verdicts(critics["probe"])
    if critic == "classifier" or classifier_ablation:
        with stopwatch() as t_fit:
            critics["classifier"] = simrag.ClassifierCritic(seed=seed).fit(balanced)
        training["classifier_critic"] = {"seconds": round(t_fit["seconds"], 3), "rows": len(balanced)}
        held["classifier"] = heldout_verdicts(critics["classifier"])
# BEGIN SOLUTION hint: confusions: simrag.confusion_matrix of the held-out labels (e['label']) against each critic's verdicts in held; show shares and accuracy per critic
confusions = {name: simrag.confusion_matrix([e["label"] for e in heldout_ex], acc) for name, acc in held.items()}
pd.DataFrame({name: {**c["shares"], "accuracy": c["accuracy"]} for name, c in confusions.items()}).T.round(3)
# END SOLUTION

# %% [markdown]
# ## Multi-turn inference on the test questions

# %%
def infer(critic_obj, critic_meter=None):
    meter, out = MeteredLLM(llm), []
    with stopwatch() as t:
        for ds in datasets:
            with per_dataset(ds, meter, critic_meter):
                out += simrag.simrag_infer(meter, retrievers[ds], test[ds], critic_obj, **sim_kw)
    cost = add_costs(meter.cost(), critic_meter.cost() if critic_meter else {})
    by_ds = dataset_costs(meter.cost_by_dataset(), critic_meter.cost_by_dataset() if critic_meter else {})
    return out, cost, by_ds, t["seconds"]


main_out, main_cost, main_by_ds, t_main = infer(critics[critic], meters.get(critic))
runs, seconds = {}, {"practice": t_practice["seconds"], "critic": t_critic["seconds"], "test": t_main}
if critic != "classifier" and classifier_ablation:
    runs["classifier_critic"] = ("SIM-RAG (classifier critic, ablation)", infer(critics["classifier"])[0])
if oracle_ceiling:
    runs["oracle_critic"] = ("SIM-RAG (oracle critic)", infer(simrag.OracleCritic(match_fn))[0])
report = simrag.critic_report(critics[critic], heldout_ex, main_out, accepted=held[critic])
# BEGIN SOLUTION hint: a table by turn: held-out accept rate (report['heldout_accept_rate_by_turn']), test answers n and test accept rate (report['inference_accept_rate_by_turn'])
held_t, test_t = report["heldout_accept_rate_by_turn"], report["inference_accept_rate_by_turn"]
pd.DataFrame({"held-out accept rate": {t_: r["accept_rate"] for t_, r in held_t.items()},
              "test answers": {t_: r["n"] for t_, r in test_t.items()},
              "test accept rate": {t_: r["accept_rate"] for t_, r in test_t.items()}}).rename_axis("turn").round(3)
# END SOLUTION

# %%
degenerate = practice_info["degenerate"] + report["degenerate"]
if "llm_critic" in training and training["llm_critic"]["epochs"] < 1:
    degenerate.append(f"simrag: the critic made {training['llm_critic']['steps']} steps, "
                      f"{training['llm_critic']['epochs']:.2f} epochs over its {training['llm_critic']['rows']} rows (< 1)")
metrics = save_method_answers(  # the scored answers under data/simrag, and the metrics checked
    "simrag", "11_simrag", "SIM-RAG", main_out, cost=main_cost, cost_by_dataset=main_by_ds,
    training=simrag.simrag_training(training, practice_meter=practice_m, practice_seconds=t_practice["seconds"],
                                    critic_seconds=t_critic["seconds"], critic=critic, critic_result=res),
    degenerate=degenerate, seconds=seconds, extra_runs=runs,
    info=simrag.simrag_info(critic=critic, practice=practice, practice_info=practice_info, balanced=balanced,
                            confusions=confusions, report=report),
)
write_stage_metrics("11_simrag", jsonable(metrics))
metrics["scores"]

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written and its test answers, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.evaluation.readings import reading_simrag  # noqa: E402
from ragcritic_lib.evaluation.readings import provenance_sentences  # noqa: E402
from ragcritic_lib.io import read_json  # noqa: E402

Markdown("\n\n".join(reading_simrag(metrics, main_out, extra_runs=runs)
                      + provenance_sentences(read_json(setup.metrics_path))))
