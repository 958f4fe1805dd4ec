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
# # 05 · The error-critic's data
# The critic learns to tell a right answer from a wrong one and to name the error, from question,
# passages and answer alone (never the reference). RAG-Critic §3.2 trains it on D_Error^QA plus
# as many correct answers; a 135M critic needs thousands of examples, so four sources from the
# *train* questions are pooled and counted apart: the generator's own answers, the LLM pool's
# answers, each question's reference presented as the answer (a right example), and wrong answers
# built from question and passages. Every label comes from the project's audited judge
# (`error_sampling.judge_metric`), and every wrong sample is labelled from the observed cause of
# its error. The critic reads the sentences that decide (not the first words of each passage),
# and is scored on the real answers the generator gave to the *dev* questions.
#
# This stage builds the data only; notebook `05_critic_sft` trains on it. The two are apart
# because their inputs differ: this one runs the generator over the train questions, the
# training reads what this one wrote.

# %% tags=["parameters"]
critic_dataset = "data/taxonomy/build/error_qa.jsonl"
correct_pool = "data/error_sampling/correct.jsonl"
known_causes_file = "data/taxonomy/known_causes.yaml"
generator_answers = "testbed=700"
train_questions = "testbed=700,trivia=400"
counterfactuals = 1
min_correct_share = 0.45
max_train_samples = 4000
top_k = 5
passage_words = 30
evidence_words = 48
label_list = False
max_analysis_words = 12

# %%
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.critic import corpus as critic_corpus
from ragcritic_lib.critic.critics import build_critic_messages
from ragcritic_lib.critic.data import critic_data_metrics, label_counts, sft_examples
from ragcritic_lib.critic.evidence import evidence_coverage
from ragcritic_lib.io import read_jsonl, write_json, write_jsonl
from ragcritic_lib.pipeline.params import parse_dataset_counts
from ragcritic_lib.pipeline.stage_models import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.retrieval.rag import answer_gen_params, run_standard_rag
from ragcritic_lib.mining.taxonomy import load_known_causes, load_taxonomy

setup = setup_stage("critic_data")  # params and data/critic_data; the generator and retrievers load for the train questions
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
taxonomy = load_taxonomy()
known_causes = load_known_causes(paths.resolve(known_causes_file), taxonomy=taxonomy)
prompt = {"variant": "trained", "top_k": top_k, "passage_words": passage_words, "evidence_words": evidence_words,
          "label_list": label_list}
prompt

# %% [markdown]
# ## Training samples from the train questions
# The generator's own answers to `generator_answers` train questions (standard RAG exactly as
# stage `retrieval_rag` runs it, judged by the project's rule), the pool's answers (wrong ones
# relabelled from their observed causes), then per train question its reference as a right
# answer and `counterfactuals` wrong answers of the same shape (another option the question
# names, another number or name from the passages, a shifted number), each labelled from its
# observed cause. Wrong samples are then dropped, counterfactual ones first, until right ones
# make at least `min_correct_share`.

# %%
judge, rag_cfg = params["error_sampling"], params["retrieval_rag"]
samples = []
for ds, n in parse_dataset_counts(generator_answers).items():
    answered = run_standard_rag(setup.llm, runtime.load_split(params, ds, "train", limit=n), retriever=setup.retriever(ds),
                                k=rag_cfg["top_k"], variant=rag_cfg["prompt_variant"],
                                gen_params=answer_gen_params(rag_cfg["prompt_variant"], rag_cfg["max_new_tokens"]),
                                max_passage_words=rag_cfg["max_passage_words"], desc=f"{ds}/train answers")
    samples += critic_corpus.answer_samples(answered, known_causes, source="generator", metric=judge["judge_metric"],
                                            threshold=judge["judge_threshold"])
samples += critic_corpus.pool_samples(read_jsonl(paths.resolve(critic_dataset)), read_jsonl(paths.resolve(correct_pool)),
                                     known_causes, max_analysis_words=max_analysis_words)
for ds, n in parse_dataset_counts(train_questions).items():
    questions = critic_corpus.with_retrieved_passages(runtime.load_split(params, ds, "train", limit=n),
                                                      setup.retriever(ds), k=top_k, dataset=ds)
    samples += critic_corpus.question_samples(questions, known_causes, seed=seed, counterfactuals=counterfactuals,
                                              max_analysis_words=max_analysis_words)
train = critic_corpus.cap_to_correct_share(critic_corpus.dedupe(samples), min_correct_share=min_correct_share, seed=seed)
train = train[:max_train_samples]
data = critic_corpus.data_report(train)
pd.DataFrame(data["sources"]).T

# %% [markdown]
# Right answers come in every wording: the generator's and the pool's sentences and spans as well
# as the references. Counted by the answer's length in words, right and wrong samples should both
# span short and long answers, or answer length alone would give the verdict away.

# %%
pd.DataFrame(data["by_length"]).T

# %%
pd.Series(label_counts(train, 2), name="tier-2 labels of the wrong samples").to_frame()

# %% [markdown]
# ## Dev: the generator's real answers to the dev questions
# Stage `retrieval_rag` answered the dev questions; they are judged with the project's rule
# (`error_sampling.judge_*`). Early stopping, the learning curve and the verdict threshold all
# read these answers, never a test question.

# %%
dev = critic_corpus.answer_samples(
    [r for ds in setup.datasets for r in read_jsonl(paths.stage_dir("retrieval_rag") / ds / "dev.jsonl")],
    known_causes, source="rag", metric=judge["judge_metric"], threshold=judge["judge_threshold"])
questions = critic_corpus.check_disjoint(train=train, dev=dev)
dev_counts = {"n": len(dev), "correct": sum(s["judgement"] == "Correct" for s in dev),
              "errors": sum(s["judgement"] == "Error" for s in dev)}
write_jsonl(out_dir / "train_samples.jsonl", train)
write_jsonl(out_dir / "dev_samples.jsonl", dev)
write_json(out_dir / "train_questions.json", sorted({s["qkey"] for s in train}))
write_json(out_dir / "critic_prompt.json", prompt)
{**questions, **dev_counts}

# %% [markdown]
# ## What the critic sees
# The deciding sentence of an answer is the passage sentence that states the reference: it
# supports a right answer and refutes a wrong one. How often is it in the prompt, with the
# first words of each passage (the old prompt) and with the selected sentences? And can answer
# surface alone (length, digits, abstention, cut-off) separate right from wrong training
# samples? A value near 0.5 means it cannot: no shortcut to learn.

# %%
def render(r, **kw):
    return build_critic_messages(r["question"], r["passages"], r["prediction"], taxonomy=taxonomy, **kw)[1]["content"]


# BEGIN SOLUTION hint: evidence_coverage of the dev answers under the critic's prompt ("current": top_k, passage_words, evidence_words) and under the old one ("first_words": top_k=3, passage_words=30)
evidence = {
    "current": evidence_coverage(dev, lambda r: render(r, top_k=top_k, passage_words=passage_words,
                                                         evidence_words=evidence_words, label_list=label_list)),
    "first_words": evidence_coverage(dev, lambda r: render(r, top_k=3, passage_words=30, label_list=label_list)),
}
# END SOLUTION
style_shortcut = critic_corpus.style_cv_auroc(train, seed=seed)
view = {k: prompt[k] for k in ("top_k", "passage_words", "label_list", "evidence_words")}
examples = sft_examples(train, taxonomy, **view)
write_jsonl(out_dir / "sft_train.jsonl", examples)
write_jsonl(out_dir / "sft_dev.jsonl", sft_examples(dev, taxonomy, **view))
print(pd.DataFrame(evidence).T.to_string(), f"\nstyle-only AUROC on the training set: {style_shortcut}\n")
for m in examples[0]["messages"]:
    print(f"--- {m['role']}\n{m['content']}")

# %%
metrics = critic_data_metrics(data=data, evidence=evidence, style_shortcut_auroc=style_shortcut, dev=dev_counts,
                              questions=questions, prompt=prompt)
write_json(out_dir / "data_report.json", metrics)
write_stage_metrics("05_critic_data", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_critic_data  # noqa: E402

Markdown("\n\n".join(reading_critic_data(read_json(setup.metrics_path))))
