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
# # 03 · Open-set error tagging and label normalization
# A teacher writes several free-text error tags (with explanations) for every error rationale of
# D_error; the tags are then normalized: malformed outputs, over-long tags and tags rarer than
# alpha are dropped and case/punctuation variants merged. This reproduces RAG-Critic §3.1.2
# (Step 2: open-set annotation and label normalization).

# %% tags=["parameters"]
teacher = "grounded"
teacher_config = ""
min_tags = 2
max_tags = 4
surface_noise = 0.2
alpha = 3
max_tag_tokens = 25
llm_teacher_subset = 24
teacher_few_shot = 2
teacher_max_new_tokens = 160
teacher_prefix = "shared"

# %%
import matplotlib.pyplot as plt
import pandas as pd

from ragcritic_lib import paths
from ragcritic_lib.mining import sampling as mining
from ragcritic_lib.io import read_jsonl, write_jsonl
from ragcritic_lib.pipeline.outputs import save_figure
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.mining.tagging import normalize_tags, tag_counts, tagging_metrics
from ragcritic_lib.mining.teachers import build_teachers, teacher_agreement, vocabulary_size

setup = setup_stage("tagging")  # params and data/tagging; an LLM teacher loads its own model
params, seed, out_dir = setup.params, setup.seed, setup.out_dir
errors = read_jsonl(paths.stage_dir("error_sampling") / "d_error.jsonl")
primary, grounded, llm_teacher = build_teachers(
    params, teacher=teacher, teacher_config=teacher_config, llm_subset=llm_teacher_subset,
    few_shot=teacher_few_shot, max_new_tokens=teacher_max_new_tokens, prefix=teacher_prefix,
    min_tags=min_tags, max_tags=max_tags, surface_noise=surface_noise)
print(f"{len(errors)} error records; primary tagger: {primary.name}; grounded vocabulary: {vocabulary_size()} phrasings")

# %% [markdown]
# ## Open-set tags (Stage 2)
# One JSON list of `{"tag", "explanation"}` per error rationale. Unparseable outputs are kept as
# malformed (they are dropped by normalization, as in the paper) and counted.

# %%
# BEGIN SOLUTION hint: ask the primary teacher for open-set tags of every error record
outputs = primary.tags(errors)
# END SOLUTION
grounded_outputs = outputs if primary is grounded else grounded.tags(errors)
example = errors[0]
print(example["rationale"])
pd.DataFrame(outputs[0].tags)

# %% [markdown]
# ## The LLM tagger on a small subset
# The packaged model tags the same rationales as the grounded teacher on a stratified subset of
# D_error; we report how often its output parses and how much its tags overlap with the grounded
# ones after normalization (exact tags and content words).

# %%
subset = mining.stratified_subset(errors, llm_teacher_subset, seed=seed)
llm_tags = llm_teacher.tags(subset) if (llm_teacher and subset) else []
by_key = {mining.record_key(r): o for r, o in zip(errors, grounded_outputs)}
grounded_sub = [by_key[mining.record_key(r)] for r in subset]
agreement = teacher_agreement(subset, [], llm_tags, grounded_sub) if llm_tags else {}
write_jsonl(out_dir / "llm_teacher_subset.jsonl", [
    {"dataset": r["dataset"], "id": r["id"], "pool_member": r["pool_member"], "llm_tags": o.tags,
     "valid": o.valid, "error": o.error, "raw": o.raw, "grounded_tags": g.tags}
    for r, o, g in zip(subset, llm_tags, grounded_sub)])
{k: agreement.get(k) for k in ("tagged_records", "tag_parse_failure_rate", "tag_exact_jaccard", "tag_word_jaccard")}

# %%
keys = ["tag_parse_failure_rate", "tag_exact_jaccard", "tag_word_jaccard"]
fig, ax = plt.subplots(figsize=(6, 3))
ax.bar(["parse failures", "exact-tag overlap", "word overlap"], [agreement.get(k) or 0 for k in keys])
ax.set(ylim=(0, 1), title=f"LLM tagger vs grounded tagger, n={agreement.get('tagged_records', 0)}")
fig.tight_layout()
save_figure(fig, "03_tagging", "llm_teacher_tag_agreement")
for o in llm_tags[:2]:
    print(repr(o.raw[:240]), "->", o.error or o.tag_names())

# %% [markdown]
# ## Label normalization
# Counts before and after each filter; the paper went from more than 20,000 raw atomic labels to
# about 4,000.

# %%
# BEGIN SOLUTION hint: normalize the tag lists with the frequency threshold alpha and max_tag_tokens
normalized, norm_report = normalize_tags([o.tag_names() for o in outputs], alpha=alpha, max_tokens=max_tag_tokens)
# END SOLUTION
steps = {"raw tags": norm_report["raw_tags"], "raw unique": norm_report["raw_unique"],
         "unique after merge": norm_report["unique_after_merge"], "unique after length": norm_report["unique_after_length"],
         "final unique": norm_report["final_unique"], "final tags": norm_report["final_tags"]}
fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(list(steps), list(steps.values()))
ax.set(title=f"Label normalization (alpha={alpha}, max {max_tag_tokens} tokens)", ylabel="count")
ax.tick_params(axis="x", rotation=20)
fig.tight_layout()
save_figure(fig, "03_tagging", "normalization")
norm_report

# %%
pd.DataFrame(tag_counts(normalized).most_common(15), columns=["tag", "records"])

# %% [markdown]
# ## Outputs

# %%
write_jsonl(out_dir / "tags.jsonl", [
    {"dataset": r["dataset"], "id": r["id"], "pool_member": r["pool_member"], "raw_tags": o.tags,
     "valid": o.valid, "error": o.error, "tags": t}
    for r, o, t in zip(errors, outputs, normalized)])
metrics = tagging_metrics(errors, norm_report, primary=primary, llm_teacher=llm_teacher,
                          llm_teacher_agreement=agreement, grounded_vocabulary=vocabulary_size())
write_stage_metrics("03_tagging", metrics)
{k: metrics[k] for k in ("error_records", "tags_before_normalization", "unique_tags_after_normalization", "parse_failure_rate")}

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_tagging  # noqa: E402

Markdown("\n\n".join(reading_tagging(read_json(setup.metrics_path))))
