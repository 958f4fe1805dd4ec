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
# # 05 · Error-critic SFT
# The critic learns to tell a right answer from a wrong one and to name the error, from question,
# passages and answer alone (never the reference). RAG-Critic §3.2 trains it on D_Error^QA plus
# as many correct answers; a 135M critic needs thousands of examples, so four sources from the
# *train* questions are pooled and counted apart: the generator's own answers, the LLM pool's
# answers, each question's reference presented as the answer (a right example), and wrong answers
# built from question and passages. Every wrong sample is labelled from the observed cause of its error. The critic reads
# the sentences that decide (not the first words of each passage), and is scored on the real
# answers the generator gave to the *dev* questions.

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
max_tag3 = 1
trainer = "cached"
method = "best"
default_method = "full"
lora_ranks = "32,64"
compare_examples = 1000
train_layers = 30
epochs = 3.0
learning_rate = 0.0001
lora_learning_rate = 0.0003
batch_size = 16
eval_every = 400
patience = 3
max_length = 384
verdict_weight = 10.0
recipe = "configs/train/critic_sft.yaml"
max_steps = -1
launcher = "inprocess"
accelerate_config = "configs/accelerate/deepspeed_zero3.yaml"
num_processes = 0
merge_dtype = "bfloat16"
ship_max_mb = 24.0
preview_samples = 4
base_model = ""

# %%
import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.critic import corpus as critic_corpus
from ragcritic_lib.critic.critics import build_critic_messages, calibrate_verdicts, load_trained_critic
from ragcritic_lib.critic.data import critic_sft_metrics, label_counts, sft_examples
from ragcritic_lib.critic.evidence import evidence_coverage
from ragcritic_lib.critic.train import TrainSettings, learning_curve, run_cached_sft, run_trl_sft
from ragcritic_lib.io import read_jsonl, write_json, write_jsonl
from ragcritic_lib.pipeline.outputs import save_figure
from ragcritic_lib.pipeline.params import parse_dataset_counts
from ragcritic_lib.pipeline.stage_models import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.retrieval.rag import answer_gen_params, run_standard_rag
from ragcritic_lib.mining.taxonomy import load_known_causes, load_taxonomy

setup = setup_stage("critic_sft")  # params and data/critic_sft; the generator and retrievers load for the train questions
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
# The local model folder trained from: base_model, or the generator's model ("" and a local generator).
train_base = runtime.resolve_base_model(params, base_model, key="critic_sft.base_model")
taxonomy = load_taxonomy()
known_causes = load_known_causes(paths.resolve(known_causes_file), taxonomy=taxonomy)
prompt = {"variant": "trained", "top_k": top_k, "passage_words": passage_words, "evidence_words": evidence_words,
          "label_list": label_list}
train_base

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
examples = sft_examples(train, taxonomy, top_k=top_k, passage_words=passage_words, label_list=label_list,
                        evidence_words=evidence_words)
dev_examples = sft_examples(dev, taxonomy, top_k=top_k, passage_words=passage_words, label_list=label_list,
                            evidence_words=evidence_words)
write_jsonl(out_dir / "sft_train.jsonl", examples)
print(pd.DataFrame(evidence).T.to_string(), f"\nstyle-only AUROC on the training set: {style_shortcut}\n")
for m in examples[0]["messages"]:
    print(f"--- {m['role']}\n{m['content']}")

# %% [markdown]
# ## Training
# `trainer = "cached"`: the lower layers are frozen and run once over every example; the top
# `train_layers` layers learn on the critique tokens (full weights or LoRA on every linear map).
# With `method = "best"`, full fine-tuning and LoRA at each of `lora_ranks` first train one
# epoch on the same `compare_examples` examples; each gets its dev AUROC with a bootstrap CI,
# and the paired bootstrap CI of its difference to `default_method`. The default trains on
# unless another method's advantage has a CI wholly above 0. Dev AUROC is measured every
# `eval_every` examples: that is the learning curve, and training stops when it has not
# improved for `patience` evaluations, keeping the best weights. The critic then ships in a
# compact form (`data/critic_sft/model`): LoRA as its adapter, full fine-tuning as what changed
# against the base within `ship_max_mb`, and the shipped form is scored on dev against the
# trained model (`ship`; flagged when it loses more than 0.02 AUROC). `trainer = "trl"` runs the
# TRL recipe instead (GPUs, DeepSpeed ZeRO-3 via `launcher = "accelerate"`).

# %%
settings = TrainSettings(method=method, train_layers=train_layers, epochs=epochs, learning_rate=learning_rate,
                         batch_size=batch_size, eval_every=eval_every, patience=patience, max_length=max_length,
                         verdict_weight=verdict_weight, seed=seed)
ranks = [int(r) for r in lora_ranks.split(",")]
if trainer == "cached":
    fit = run_cached_sft(examples, dev_examples, train_base, out_dir, settings=settings,
                         compare=("full", *(f"lora_r{r}" for r in ranks)) if method == "best" else (),
                         compare_examples=compare_examples, lora_learning_rate=lora_learning_rate,
                         default_method=default_method, lora_ranks=ranks, ship_max_mb=ship_max_mb,
                         merge_dtype=merge_dtype, progress=print)
else:
    fit = run_trl_sft(examples, dev_examples, train_base, out_dir, recipe=recipe, max_steps=max_steps,
                      launcher=launcher, accelerate_config=accelerate_config, num_processes=num_processes,
                      merge_dtype=merge_dtype, max_length=max_length, ship_max_mb=ship_max_mb)
write_json(out_dir / "train_result.json", fit)
write_json(out_dir / "loss.json", fit["run"]["curve"])
pd.DataFrame(fit["comparison"]).T if fit["comparison"] else {k: fit[k] for k in ("examples", "method", "seconds")}

# %%
{"decision": fit["decision"], "ship": fit["ship"]}

# %%
curve = pd.DataFrame(learning_curve(fit["run"], fit["examples"]))
losses = pd.DataFrame(fit["run"]["curve"])
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
if not curve.empty:
    ax1.plot(curve["examples_seen"], curve["dev_auroc"], marker="o")
    ax1.axhline(0.5, color="grey", lw=0.8, ls="--")
if "loss" in losses:
    ax2.plot(losses["examples_seen"], losses["loss"], marker=".")
ax1.set(xlabel="training examples seen", ylabel="dev verdict AUROC", title="Learning curve")
ax2.set(xlabel="training examples seen", ylabel="loss (critique tokens)", title="Training loss")
for ax in (ax1, ax2):
    ax.grid(alpha=0.3)
fig.tight_layout()
save_figure(fig, "05_critic_sft", "critic_sft_loss");

# %% [markdown]
# ## The saved critic, its first critiques and its verdict threshold
# The shipped critic is loaded the way every later stage loads it; a few dev answers show what it
# writes. The margin log P("Error") - log P("Correct") right after `{"Judgement": "` is scored
# on the dev answers, and the threshold with the best balanced accuracy is stored next to the
# shipped critic (`verdict="calibrated"` in later stages).

# %%
critic = load_trained_critic(params, out_dir, taxonomy, verdict="generate", name="sft", max_new_tokens=64)
preview = dev[:preview_samples]
parses = critic.critique(preview)
pd.DataFrame([{"gold": s["target"], "critic": g.text, "judgement": p.judgement, "parse_error": p.parse_error}
              for s, g, p in zip(preview, critic.last_generations, parses)])

# %%
calibration = calibrate_verdicts(critic, dev, desc="dev verdict margins")
write_json(out_dir / "verdict_calibration.json", calibration)
pd.Series(calibration)

# %%
metrics = critic_sft_metrics(data=data, evidence=evidence, style_shortcut_auroc=style_shortcut, dev=dev_counts,
                             fit=fit, preview=parses, calibration=calibration, questions=questions)
write_stage_metrics("05_critic_sft", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_critic_sft  # noqa: E402

Markdown("\n\n".join(reading_critic_sft(read_json(setup.metrics_path))))
