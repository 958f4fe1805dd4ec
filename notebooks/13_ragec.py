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
# # 13 · RAGEC: which pipeline stage failed, and how
# RAGEC does not answer questions: it diagnoses a RAG pipeline's wrong answers. Each error is
# first **attributed to a stage** by rules over what each stage passed on (chunking, retrieval,
# reranking, generation: are the gold-bearing chunks in the corpus, in the first stage's results,
# still there after reranking, and does the answer cover the question's concepts at
# `coverage_threshold`), then the LLM **votes** `votes` times (K = 10 in the paper) among that
# stage's error types, and the modal type is the diagnosis (RAGEC Tables 2-4).
#
# The reranking stage (types E7/E8) exists only when a reranker sits between the first stage and
# the generator. When standard RAG has none (`common.retriever.rerank` off) and `rerank` is on,
# the test questions are answered again with the cross-encoder reranking the first stage's top
# `first_stage_depth`, and RAGEC diagnoses that run's wrong answers, so all four stages can be
# blamed. Every wrong answer is diagnosed (`max_errors: 0`); a cap (the small profiles) takes an
# evenly spread random subset per dataset, and the metrics count the wrong answers left
# undiagnosed per reason (`undiagnosed`). The modal types per blamed stage come with that
# stage's n (`stage_types`), so a distribution over five errors reads as what it is.
# More than half invalid votes, no reranking stage, or one modal type for every error of a stage
# (at least 5) are flagged as degenerate.
#
# **Voting.** The paper samples K free replies and reads a type from each (`voting: free`); the
# packaged 135M model names no type of the stage in most of them (63% of 400 votes were invalid in
# that setting). By default (`voting: constrained`) the K votes are drawn, at the same temperature
# and top-p, from the model's own distribution over the stage's type ids, read from one scoring
# call: every vote is a type of the stage, and the mode frequency still shows how sure the model is.
#
# RAGEC's diagnoses are set beside RAG-Critic's tier-1 labels (notebook 08's critic) on the same
# wrong answers.

# %% tags=["parameters"]
votes = 10
temperature = 0.7
coverage_threshold = 0.8
first_stage_depth = 20
rerank = True
max_errors = 0
voting = "constrained"

# %%
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.baselines import MeteredLLM, is_wrong, jsonable, judge_params, load_method_results, mark_correct, ragec, stopwatch
from ragcritic_lib.baselines.stage_setup import setup_method
from ragcritic_lib.io import write_jsonl
from ragcritic_lib.pipeline.outputs import save_table
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.mining.taxonomy import load_taxonomy

setup = setup_method("ragec")  # params, standard RAG's settings, the answer setting, generator, questions
params, seed, rr, llm, test = setup.params, setup.seed, setup.rag, setup.llm, setup.test
rag_kw = dict(k=rr["top_k"], variant=rr["prompt_variant"], gen_params=setup.answer_gen, max_passage_words=rr["max_passage_words"])
types = ragec.load_ragec_types()
rerank_on = bool(runtime.retriever_config(params).get("rerank"))
judge = judge_params(params)  # error_sampling.judge_metric / judge_threshold: which answers are wrong
{ds: len(recs) for ds, recs in test.items()}

# %% [markdown]
# ## Stage attribution and type votes

# %%
m, out, inputs, answered, undiagnosed = MeteredLLM(llm), [], [], {}, {}
with stopwatch() as t:
    for ds, recs in test.items():
        first_stage = setup.retriever(ds, rerank=False)
        gold_fn = ragec.make_chunk_gold_fn(runtime.load_corpus(params, ds))
        with m.dataset(ds):
            if not rerank_on and rerank:
                reranked = setup.retriever(ds, rerank=True, rerank_depth=first_stage_depth)
                recs = ragec.reranked_records(m, recs, reranked=reranked, first_stage=first_stage,
                                              depth=first_stage_depth, **rag_kw)
            elif rerank_on:
                recs = ragec.attach_first_stage(recs, first_stage, first_stage_depth)
            recs = mark_correct(recs, **judge)  # the project's judge on the answers RAGEC diagnoses
            # BEGIN SOLUTION hint: chosen, dropped: ragec.select_errors(recs, max_errors, seed=seed); answered[ds]: answers, wrong (is_wrong), and diagnosed
            chosen, dropped = ragec.select_errors(recs, max_errors, seed=seed)
            answered[ds] = {"answers": len(recs), "wrong": sum(1 for r in recs if is_wrong(r)), "diagnosed": len(chosen)}
            # END SOLUTION
            diagnosed = ragec.run_ragec(m, chosen, types, chunk_gold_fn=gold_fn, k=votes,
                                        coverage_threshold=coverage_threshold, temperature=temperature, seed=seed,
                                        voting=voting)
            for reason, n in ragec.undiagnosed_reasons(dropped, diagnosed).items():
                undiagnosed[reason] = undiagnosed.get(reason, 0) + n
            out += diagnosed
        inputs += recs
info = ragec.ragec_summary(out, votes, reranking_stage=rerank_on or rerank)
table = pd.DataFrame(ragec.distribution_table(out, types, group_key="dataset"))
print("undiagnosed wrong answers by reason:", undiagnosed or "none")
pd.DataFrame(answered).T

# %%
table

# %% [markdown]
# Modal types per question type (RAGEC Table 3) and how many of the K votes agreed with the
# modal type (RAGEC Table 4).

# %%
mode_freq = ragec.mode_frequency_table(out, votes)
print("mode frequency (Table 4):", mode_freq)
print("modal types per blamed stage, with n:", info["stage_types"])
pd.DataFrame(ragec.distribution_table(out, types, group_key="question_type")).drop(columns=["stage"])

# %% [markdown]
# ## Agreement with RAG-Critic's tier-1 labels
# The critic's first-round critique in notebook 08 judged standard RAG's answers, so when RAGEC
# diagnosed a re-answered run only the questions answered the same way in both runs are compared.
# Side agreement: both blame the same side (retrieval vs response); type agreement: the tier-1
# label mapped from the modal E-type is among the critic's.

# %%
taxonomy = load_taxonomy()
critic_file = paths.stage_dir("correction") / "{dataset}" / "rag_critic_test.jsonl"
critic_recs = [r for ds, recs in test.items()
               for r in load_method_results(str(critic_file).format(dataset=ds), ids=[x["id"] for x in recs],
                                            pred_key="final_prediction")]
# BEGIN SOLUTION hint: critiques and labels from ragec.first_round_critiques / ragec.critic_tier1_labels, labels kept for ragec.same_answer_keys(test records, inputs), then ragec.tier1_agreement(out, labels, types, canonical=taxonomy.canonical)
critiques = ragec.first_round_critiques(critic_recs)
labels = ragec.critic_tier1_labels(critic_recs, critiques)
same = ragec.same_answer_keys([r for recs in test.values() for r in recs], inputs)
labels = {key: v for key, v in labels.items() if key in same}
agreement = ragec.tier1_agreement(out, labels, types, canonical=taxonomy.canonical)
# END SOLUTION
{"same_answer_questions": len(same), **{k: v for k, v in agreement.items() if k != "by_stage"}}

# %%
write_jsonl(setup.out_dir / "diagnoses.jsonl", out)
save_table(table, "13_ragec", "ragec_types", formats=("csv",))
metrics = ragec.ragec_metrics(info, answers=answered, mode_frequency=mode_freq, agreement=agreement, same_answer=same,
                              meter=m, diagnosis_seconds=t["seconds"], undiagnosed=undiagnosed)
write_stage_metrics("13_ragec", jsonable(metrics))
sorted(metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.evaluation.readings import reading_ragec  # noqa: E402
from ragcritic_lib.evaluation.readings import provenance_sentences  # noqa: E402
from ragcritic_lib.io import read_json  # noqa: E402

Markdown("\n\n".join(reading_ragec(metrics)
                      + provenance_sentences(read_json(setup.metrics_path))))
