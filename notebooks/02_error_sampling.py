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
# # 02 · Error response sampling and judging
# A pool of LLM configurations answers the training questions of both datasets with retrieval
# (`questions_per_dataset` each, or the counts `dataset_questions` names, e.g. "testbed=128,trivia=32":
# a dataset whose answers are almost never right adds errors but no right answer to balance them);
# each answer is judged against the gold answers, given grounded evidence and an error rationale,
# and split into the error pool D_error and the correct pool. This reproduces RAG-Critic §3.1.1
# (Step 1: error response sampling) and the Stage-1 rationale of §3.1.2.

# %% tags=["parameters"]
pool_file = "configs/pools/embedded.yaml"
split = "train"
questions_per_dataset = 64
dataset_questions = "testbed=128,trivia=32"
chunk_size = 32
judge_metric = "truth"
judge_threshold = 0.5
teacher = "grounded"
teacher_config = ""
llm_teacher_subset = 24
audit_teacher_rows = -1
teacher_few_shot = 2
teacher_max_new_tokens = 160
teacher_prefix = "shared"

# %%
import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths, runtime
from ragcritic_lib.evaluation import audit
from ragcritic_lib.mining import sampling as mining
from ragcritic_lib.data.flashrag import dataset_paths, load_corpus_records
from ragcritic_lib.io import write_jsonl
from ragcritic_lib.pipeline.outputs import save_figure, save_table
from ragcritic_lib.pipeline.params import parse_dataset_counts
from ragcritic_lib.pipeline.stage_models import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.mining.teachers import build_teachers, teacher_agreement

setup = setup_stage("error_sampling")  # params, data/error_sampling; the pool members load their own models
params, seed, datasets, out_dir = setup.params, setup.seed, setup.datasets, setup.out_dir
n_questions = {ds: parse_dataset_counts(dataset_questions).get(ds, questions_per_dataset) for ds in datasets}
pool = mining.load_pool(pool_file, base_llm=runtime.generator_config(params),
                        base_retriever=params["common"]["retriever"])
pd.DataFrame([m.describe() for m in pool])

# %% [markdown]
# ## Sampling
# Every pool member answers the same questions. The log under `samples/` is append-only and
# resumable: an interrupted run continues where it stopped (and the LLM cache makes repeated
# prompts free).

# %%
samples = []
for ds in datasets:
    records = runtime.load_split(params, ds, split, limit=n_questions[ds])
    # BEGIN SOLUTION hint: sample answers from every pool member (resumable log under out_dir / 'samples')
    samples += mining.sample_error_responses(
        records, pool, lambda m, ds=ds: setup.retriever(ds, **m.retriever),
        out_path=out_dir / "samples" / f"{ds}.jsonl", chunk_size=chunk_size, progress=True)
    # END SOLUTION
print(f"{len(samples)} sampled answers from {len(pool)} pool members on {datasets}")
pd.DataFrame(samples)[["dataset", "pool_member", "question", "prediction", "golden_answers", "f1"]].head(8)

# %% [markdown]
# ## Judging and grounded evidence
# Correct means `judge_metric >= judge_threshold` against the gold answers (an abstention on an
# unanswerable testbed question counts as correct). `judge_metric = "truth"` is the truth judge
# (`ragcritic_lib.evaluation.truth`): the answer asserts a gold answer and no competing value
# from the question's metadata (superseded, near-duplicate, a comparison's other option). Evidence is computed without any LLM.

# %%
judged = []
for ds in datasets:
    corpus_file = dataset_paths(params["common"]["datasets"], ds)["corpus"]
    # BEGIN SOLUTION hint: judge this dataset's samples with judge_metric and judge_threshold
    judged += mining.judge_records([s for s in samples if s["dataset"] == ds], metric=judge_metric,
                                   threshold=judge_threshold, passage_meta=mining.passage_metadata(load_corpus_records(corpus_file)))
    # END SOLUTION
by_member = mining.pool_summary(judged)
pd.DataFrame(by_member).T

# %% [markdown]
# Table-1-style source statistics: questions, sampled answers and errors per dataset and type.

# %%
source_stats = pd.DataFrame(mining.source_statistics(judged))
save_table(source_stats, "02_error_sampling", "source_statistics")
source_stats

# %%
rates = pd.DataFrame({ds: {m: v["error_rate"] for m, v in mining.pool_summary(
    [r for r in judged if r["dataset"] == ds]).items()} for ds in datasets})
ax = rates.plot.bar(figsize=(7, 3.5), rot=20, ylim=(0, 1), ylabel="error rate", title="Error rate per pool member")
ax.figure.tight_layout()
save_figure(ax.figure, "02_error_sampling", "error_rate_by_member");

# %% [markdown]
# ## Error rationales (Stage 1)
# The grounded teacher writes a rationale for every wrong answer from the evidence (and, on the
# testbed, the causes known by construction). With `teacher = "llm"` the LLM teacher writes them
# and the grounded teacher backs up every output that does not parse.

# %%
primary, grounded, llm_teacher = build_teachers(
    params, teacher=teacher, teacher_config=teacher_config, llm_subset=llm_teacher_subset,
    few_shot=teacher_few_shot, max_new_tokens=teacher_max_new_tokens, prefix=teacher_prefix)
judged, rationale_report = mining.attach_rationales(judged, primary, fallback=grounded)
# BEGIN SOLUTION hint: split the judged records into the error pool and the correct pool
errors, correct = mining.split_pools(judged)
# END SOLUTION
print(f"D_error: {len(errors)}  correct pool: {len(correct)}  rationale sources: {rationale_report}")
print(errors[0]["question"], "|", errors[0]["prediction"], "|", errors[0]["golden_answers"])
print(errors[0]["rationale"])

# %% [markdown]
# ## The LLM teacher on a small subset
# The packaged 135M model is exercised as a Stage-1 judge on a stratified subset (half wrong,
# half correct answers) and compared with the gold-based judgement.

# %%
subset = mining.stratified_subset(judged, llm_teacher_subset, seed=seed)
llm_rationales = llm_teacher.rationales(subset) if (llm_teacher and subset) else []
agreement = teacher_agreement(subset, llm_rationales, [], []) if llm_rationales else {}
write_jsonl(out_dir / "llm_teacher_subset.jsonl", [
    {"dataset": r["dataset"], "id": r["id"], "pool_member": r["pool_member"], "correct": r["correct"],
     "llm_judgement": x.judgement, "llm_analysis": x.analysis, "valid": x.valid, "error": x.error, "raw": x.raw}
    for r, x in zip(subset, llm_rationales)])
agreement

# %%
keys = ["judgement_agreement_on_errors", "judgement_agreement_on_correct", "rationale_parse_failure_rate"]
fig, ax = plt.subplots(figsize=(6, 3))
ax.bar(["agree on wrong", "agree on correct", "parse failures"], [agreement.get(k) or 0 for k in keys])
ax.set(ylim=(0, 1), title=f"LLM teacher (Stage 1) vs gold judgement, n={agreement.get('records', 0)}")
fig.tight_layout()
save_figure(fig, "02_error_sampling", "llm_teacher_agreement")
for r, x in list(zip(subset, llm_rationales))[:2]:
    print(f"{r['prediction']!r} (correct={r['correct']}) -> {x.raw[:240]!r}")

# %% [markdown]
# ## The judges against the hand audit
# `data/audit/audit.jsonl` holds real answers labelled by a reader (data/audit/README.md). Every
# judge of `correct` (F1, EM, accuracy and truth at `judge_threshold`, and the LLM teacher where it
# runs and its output parses) is compared with those labels: on the choosing rows (train and dev
# answers, which may pick the default judge) and on the test rows (which only report), with
# Wilson 95% intervals. The LLM teacher judges `audit_teacher_rows` rows spread over the file
# (all by default, about 0.7 s a row on 2 bf16 cores; the smoke and workshop profiles take a few).
# Only its verdict is read, which it writes first, so it writes `LLMTeacher.verdicts`: its
# rationales cut at 48 new tokens (greedy decoding writes the same first tokens under any cap).
# Without a labelled audit the metrics say that none exists.

# %%
audit_file = paths.DATA_DIR / "audit" / "audit.jsonl"
audit_source = audit_file.relative_to(paths.ROOT).as_posix()
if audit_file.exists():
    judge_audit = audit.judge_audit(audit.read_audit(audit_file), metrics=mining.JUDGE_METRICS,
                                    threshold=judge_threshold, source=audit_source,
                                    teacher=llm_teacher.verdicts if llm_teacher else None,
                                    teacher_rows=audit_teacher_rows)
    print(f"audit: {judge_audit['n']} rows ({judge_audit['n_test']} test); best on the choosing rows: "
          f"{judge_audit['best_choosing']} (configured: {judge_metric})")
    print("its lead on the choosing rows (agreement difference, paired 95% CI):",
          {j: (v["delta"], v["ci_low"], v["ci_high"]) for j, v in judge_audit["choosing"]["best_versus"].items()})
    display_audit = pd.DataFrame({"choosing": judge_audit["choosing"]["agreement"], "test": judge_audit["agreement"],
                                  "test CI low": judge_audit["agreement_ci_low"], "test CI high": judge_audit["agreement_ci_high"]})
else:
    judge_audit = audit.no_audit(audit_source)
    display_audit = pd.DataFrame()
    print(f"no labelled audit at {audit_source}: judge agreement not measured")
display_audit

# %% [markdown]
# ## Outputs

# %%
write_jsonl(out_dir / "d_error.jsonl", errors)
write_jsonl(out_dir / "correct.jsonl", correct)
metrics = mining.error_sampling_metrics(
    pool, judged, errors, correct, judge_metric=judge_metric, judge_threshold=judge_threshold,
    rationale_sources=rationale_report, teacher=teacher, primary=primary, llm_teacher=llm_teacher,
    llm_teacher_agreement=agreement, judge_audit=judge_audit)
write_stage_metrics("02_error_sampling", metrics)
{k: metrics[k] for k in ("pool_size", "samples", "errors", "error_rate", "error_rate_by_member")}

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_error_sampling  # noqa: E402

Markdown("\n\n".join(reading_error_sampling(read_json(setup.metrics_path))))
