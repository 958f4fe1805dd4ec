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
# # 07 · The RAG-Error benchmark
# Real answers to the *test* questions, none of them a training question, balanced between right
# and wrong: the generator's answers with and without retrieval (stage `retrieval_rag`) and the
# answers of `test_pool_members` from the LLM pool. Wrong ones carry the labels of their observed
# causes. Several critics are scored on it: verdict AUROC, error identification, tier-1/tier-2
# label F1, each with a bootstrap 95% CI, beside two baselines that read no passage: a style-only
# one that reads nothing but the answer's surface, and a question-only one that reads nothing but
# the question. This reproduces RAG-Critic §3.4 and §4.3 (Table 5).

# %% tags=["parameters"]
per_class = 150
test_pool_members = "sampled-bm25-k3,greedy-hybrid-k5"
test_questions = 280
bootstrap = 2000
max_new_tokens = 64
include_zeroshot = True
include_heuristic = True
extra_critic_model = ""
extra_critic_backend = "openai"
extra_critic_urls = ""
extra_critic_variant = "zeroshot"
known_causes_file = "data/taxonomy/known_causes.yaml"

# %%
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.critic import corpus as critic_corpus
from ragcritic_lib.mining import sampling as mining
from ragcritic_lib.critic.critics import (
    HeuristicCritic, LLMCritic, calibrate_verdicts, critiques_to_records, load_trained_critic,
)
from ragcritic_lib.critic.probe import ProbeScorer
from ragcritic_lib.critic.baseline_flags import (
    baseline_critics_degenerate, label_set_concentration, one_label_set_flags,
)
from ragcritic_lib.critic.benchmark import (
    benchmark_metrics, benchmark_table, plot_per_label, score_critic, score_known_causes, verdict_scores,
    with_confidence,
)
from ragcritic_lib.critic.label_prior import fit_label_prior, label_prior_comparison, label_prior_flags
from ragcritic_lib.io import read_json, read_jsonl, write_jsonl
from ragcritic_lib.pipeline.outputs import save_figure, save_table
from ragcritic_lib.pipeline.stage_models import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.mining.taxonomy import load_known_causes, load_taxonomy
from ragcritic_lib.retrieval.encoders import load_encoder

setup = setup_stage("benchmark")  # params and data/benchmark; the generator loads for the test pool and the zero-shot critic
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
taxonomy = load_taxonomy()
known_causes = load_known_causes(paths.resolve(known_causes_file), taxonomy=taxonomy)
prompt = read_json(paths.stage_dir("critic_sft") / "critic_prompt.json")
judge = params["error_sampling"]
view = {k: prompt[k] for k in ("top_k", "passage_words", "evidence_words")}

# %% [markdown]
# ## Real answers to the test questions
# The generator's answers (with the passages it read; closed-book answers are shown the passages
# retrieved for the same question), plus the test-pool members' answers to the testbed test
# questions. One sample per question and answer text.

# %%
answers = []
for ds in setup.datasets:
    rag = read_jsonl(paths.stage_dir("retrieval_rag") / ds / "test.jsonl")
    answers += critic_corpus.answer_samples(rag, known_causes, source="rag", metric=judge["judge_metric"],
                                            threshold=judge["judge_threshold"])
    closed = critic_corpus.with_passages_of(read_jsonl(paths.stage_dir("retrieval_rag") / ds / "test_closed_book.jsonl"), rag)
    answers += critic_corpus.answer_samples(closed, known_causes, source="closed_book", metric=judge["judge_metric"],
                                            threshold=judge["judge_threshold"])
members = [m for m in mining.load_pool(params["error_sampling"]["pool_file"], base_llm=runtime.generator_config(params),
                                       base_retriever=params["common"]["retriever"])
           if m.name in test_pool_members.split(",")]
if members:
    pooled = mining.sample_error_responses(
        runtime.load_split(params, "testbed", "test", limit=test_questions), members,
        lambda m: setup.retriever("testbed", **m.retriever), out_path=out_dir / "test_pool" / "testbed.jsonl")
    answers += critic_corpus.answer_samples(pooled, known_causes, source="test_pool", metric=judge["judge_metric"],
                                            threshold=judge["judge_threshold"])
answers = critic_corpus.dedupe(answers)
train_questions = [{"qkey": k} for k in read_json(paths.stage_dir("critic_data") / "train_questions.json")]
dev_questions = read_jsonl(paths.stage_dir("critic_data") / "dev_samples.jsonl")
disjoint = critic_corpus.check_disjoint(train=train_questions, dev=dev_questions, test=answers)
pd.DataFrame(critic_corpus.data_report(answers)["sources"]).T

# %% [markdown]
# ## The balanced benchmark
# Up to `per_class` right and as many wrong answers, drawn at random (the paper draws N samples
# per tier-2 label; here the verdict is balanced and the labels fall as the errors do).

# %%
bench, degenerate = critic_corpus.benchmark_answers(answers, seed=seed, per_class=per_class)
write_jsonl(out_dir / "benchmark.jsonl", bench)
report = {**critic_corpus.data_report(bench), "n_correct": sum(s["judgement"] == "Correct" for s in bench),
          "n_error": sum(s["judgement"] == "Error" for s in bench), "available": critic_corpus.data_report(answers),
          "questions": disjoint}
print(f"{report['n_error']} wrong + {report['n_correct']} right answers from {report['questions']['test']} test questions")
pd.Series(critic_corpus.data_report(bench)["datasets"], name="samples")

# %% [markdown]
# ## The critics
# The SFT and SFT+DPO critics as RAG-Critic uses them (verdict read off the dev-fitted threshold,
# then the critique), the base model zero-shot with the benchmark prompt (Prompt E in our words)
# under the same protocol, the grounded heuristic critic (rules, no LLM), and any model named in
# params. Left to write its own JSON, the 135M base model continues the prompt instead (99% of its
# critiques did not parse), so it reads its verdict off its own margin at a threshold fitted on the
# dev samples the trained critics were calibrated on, and continues each Error critique from the
# opening the trained critics get: what training adds is then measured, not the format.

# %%
critics = {
    "SFT critic": load_trained_critic(params, paths.stage_dir("critic_sft"), taxonomy, max_new_tokens=max_new_tokens,
                                      name="sft:calibrated"),
    "SFT+DPO critic": load_trained_critic(params, paths.stage_dir("critic_dpo"), taxonomy,
                                          max_new_tokens=max_new_tokens, name="sft+dpo:calibrated"),
}
# 06 keeps 05's verdict probe, so the two trained critics read the same one: one scorer (and its
# memory of the answers it has read) then serves both, and each answer meets the frozen model once.
sft_scorer, dpo_scorer = critics["SFT critic"].verdict_scorer, critics["SFT+DPO critic"].verdict_scorer
if isinstance(sft_scorer, ProbeScorer) and isinstance(dpo_scorer, ProbeScorer) and dpo_scorer.probe == sft_scorer.probe:
    critics["SFT+DPO critic"].verdict_scorer = sft_scorer
if include_zeroshot:
    critics["base zero-shot"] = LLMCritic(setup.llm, taxonomy, "zeroshot", max_new_tokens=max_new_tokens, name="zeroshot",
                                          verdict="calibrated", **view)
    zeroshot_calibration = calibrate_verdicts(critics["base zero-shot"], dev_questions,
                                              desc="zero-shot dev verdict margins")
    critics["base zero-shot"].threshold = zeroshot_calibration["threshold"]
    report["zeroshot_calibration"] = zeroshot_calibration
    print(f"zero-shot verdict threshold {zeroshot_calibration['threshold']} "
          f"(dev AUROC {zeroshot_calibration['auroc']}, {zeroshot_calibration['n']} dev samples)")
if include_heuristic:
    critics["heuristic"] = HeuristicCritic(taxonomy)
if extra_critic_model:
    extra_cfg = {"backend": extra_critic_backend, "model": extra_critic_model}
    extra_cfg.update({"urls": extra_critic_urls} if extra_critic_urls else {})
    critics[f"{extra_critic_model} ({extra_critic_variant})"] = LLMCritic(
        runtime.build_llm(extra_cfg), taxonomy, extra_critic_variant, max_new_tokens=max_new_tokens, name="extra",
        label_list=prompt["label_list"], **view)
list(critics)

# %%
golds = [s["target"] for s in bench]
kinds = [critic_corpus.question_kind(s) for s in bench]  # read only to score within kinds of question
predictions, results, verdict_score = {}, {}, {}
for name, critic in critics.items():
    # BEGIN SOLUTION hint: critique bench with this critic into predictions[name], then score those parses against golds with score_critic into results[name]
    predictions[name] = critic.critique(bench)
    results[name] = score_critic(predictions[name], golds, taxonomy)
    # END SOLUTION
    # a calibrated critic's score is its verdict margin (or its probe's score), kept in each parse
    verdict_score[name] = verdict_scores(predictions[name])
    # intervals resample questions (every answer to a drawn question), not answers
    results[name] = with_confidence(results[name], predictions[name], golds, taxonomy, seed=seed,
                                    n_boot=bootstrap, groups=[s["qkey"] for s in bench], kinds=kinds)
    write_jsonl(out_dir / "predictions" / f"{name.replace(' ', '_').replace('/', '_')}.jsonl",
                critiques_to_records(predictions[name], bench, name))
style_baseline = critic_corpus.style_baseline(dev_questions, bench, seed=seed, n_boot=bootstrap)
# the question-only baseline fits on the train answers the verdict probe fits on (critic_body.verdict_sources)
sources = {x.strip() for x in str(params["critic_body"]["verdict_sources"]).split(",") if x.strip()}
question_fit = [s for s in read_jsonl(paths.stage_dir("critic_data") / "train_samples.jsonl")
                if not sources or s["source"] in sources]
question_baseline = critic_corpus.question_only_baseline(
    question_fit, bench, encode=load_encoder(params["common"]["retriever"]["encoder"]).encode_queries, seed=seed,
    n_boot=bootstrap, critic_scores=verdict_score)  # each critic's AUROC minus the baseline's, paired
table = pd.DataFrame(benchmark_table(results)).set_index("critic")
table

# %% [markdown]
# Columns as in Table 5 (identification on right and wrong answers and their mean; tier-1 and
# tier-2 micro-F1 over wrong answers), plus the verdict AUROC with its 95% CI. The kinds of question
# are answered right at very different rates, so each critic's AUROC is also read *within* kinds
# (only pairs of answers to questions of one kind). The two baselines have only AUROCs: style-only
# (a logistic regression on answer length, digits, abstention, cut-off and punctuation, fit on the
# dev answers) and question-only (a logistic regression on the sentence encoder's embedding of the
# question, fit on the train answers the verdict probe fits on). Each critic's AUROC minus the
# question-only baseline's, with a paired interval (both scored on the same resampled questions),
# says whether it reads more than the question:

# %%
save_table(table, "07_benchmark", "benchmark", index=True)
fig = plot_per_label(results, taxonomy)
save_figure(fig, "07_benchmark", "benchmark_per_label")
within = {name: {k: r.get(f"verdict_auroc{k}") for k in ("", "_within_kind", "_within_kind_ci_low",
                                                             "_within_kind_ci_high")}
          for name, r in results.items()}
pd.DataFrame({**within, "style-only baseline": style_baseline, "question-only baseline": question_baseline}).T[
    ["verdict_auroc", "verdict_auroc_ci_low", "verdict_auroc_ci_high", "verdict_auroc_within_kind"]]

# %%
# each critic's AUROC minus the question-only baseline's on the same answers (paired interval)
pd.DataFrame(question_baseline.get("critics_minus_baseline") or {}).T

# %% [markdown]
# ## Labels against the label prior
# Tier F1 counts only the wrong answers a critic calls wrong, so naming the labels most wrong
# answers carry scores well whatever was read. The label prior keeps each critic's verdicts and
# names, on every answer it calls wrong, the labels the *training* targets name most often (per
# tier, as many as give the best micro F1 on those targets; no dev or test answer enters the fit).
# Each critic's micro F1 minus the prior's, with a 95% interval over resampled questions, says what
# its labels add; a difference wholly below 0 is flagged in `degenerate`.

# %%
label_prior = fit_label_prior([s["target"] for s in read_jsonl(paths.stage_dir("critic_data") / "train_samples.jsonl")],
                              taxonomy)
prior_comparison = {name: label_prior_comparison(preds, golds, taxonomy, label_prior, seed=seed, n_boot=bootstrap,
                                                 groups=[s["qkey"] for s in bench])
                    for name, preds in predictions.items()}
report["label_prior"] = {"fit": label_prior, "critics": prior_comparison}
print({tier: label_prior[tier]["labels"] for tier in ("tag1", "tag2")})
pd.DataFrame([{"critic": name, "tier": tier, **row} for name, c in prior_comparison.items()
              for tier, row in c.items() if tier in ("tag1", "tag2")]).set_index(["critic", "tier"])

# %% [markdown]
# ## Per dataset and source, and against the causes known from construction (testbed)

# %%
by_dataset = {name: {ds: score_critic([p for p, s in zip(preds, bench) if s["dataset"] == ds],
                                      [s["target"] for s in bench if s["dataset"] == ds], taxonomy)["identification"]
                     for ds in sorted({s["dataset"] for s in bench})} for name, preds in predictions.items()}
known = {name: score_known_causes(preds, bench, known_causes) for name, preds in predictions.items()}
pd.DataFrame([{"critic": name, "dataset": ds, **acc} for name, per in by_dataset.items() for ds, acc in per.items()])

# %%
example = next((i for i, s in enumerate(bench) if s["judgement"] == "Error"), None)
if example is not None:
    s = bench[example]
    print(f"Q: {s['question']}\nanswer: {s['prediction']}\ngold: {s['target']}\n")
    for name, preds in predictions.items():
        print(f"[{name}] {preds[example].to_critique()}  (parse_error={preds[example].parse_error})")

# %%
# The benchmark, the table, each critic's scores and CIs, the two baselines and token counts
# (call timings and cache hits vary between runs, so they stay out). `degenerate` holds the
# benchmark's own reasons, the trained critics' flags, those of the critics trained elsewhere or
# not at all (mostly unparsed critiques, a verdict at chance), and any critic, trained or not, that
# names one tier-1 label set in most of its critiques (its labels then do not follow the answer;
# `benchmark.label_sets` gives each critic's most common set and its share) or whose labels score
# below the label prior on its own verdicts (`benchmark.label_prior`).
trained = ["SFT critic", "SFT+DPO critic"]
report["label_sets"] = {name: label_set_concentration(preds) for name, preds in predictions.items()}
metrics = benchmark_metrics(report=report, table=table.reset_index().to_dict(orient="records"), results=results,
                            by_dataset=by_dataset, known_causes=known, critics=critics, style_baseline=style_baseline,
                            question_baseline=question_baseline, trained=trained,
                            degenerate=degenerate + baseline_critics_degenerate(results, trained)
                            + one_label_set_flags(report["label_sets"])
                            + label_prior_flags(prior_comparison, label_prior, "tag1")
                            + label_prior_flags(prior_comparison, label_prior, "tag2"))
write_stage_metrics("07_benchmark", metrics)

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.evaluation.readings import reading_benchmark  # noqa: E402

Markdown("\n\n".join(reading_benchmark(read_json(setup.metrics_path))))
