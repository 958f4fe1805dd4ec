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
# # 15 · Analysis: the papers' tables and figures
# This stage gathers the metrics of every earlier stage into the tables and figures of the papers,
# each labelled with its counterpart (RAG-Critic Tables 1, 3-8, 10 and Figs. 5-11; RePAIR Tables 2-3;
# RAGEC Tables 2 and 4; SIM-RAG Fig. 3), and lists every input it could not find instead of
# filling it in. It reproduces the evaluation sections of the papers (RAG-Critic §4 and Appendix A).

# %% tags=["parameters"]
percent = True
digits = 1
main_metric = "f1"
top_tier2 = 5
figure_dpi = 120
error_qa_file = "data/taxonomy/build/error_qa.jsonl"
ragec_types_table = "13_ragec/ragec_types.csv"
trained_critic = "SFT+DPO critic (calibrated)"

# %%
from ragcritic_lib import paths
from ragcritic_lib.evaluation import analysis
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics

setup = setup_stage("analysis")  # params and the metrics file; it loads no model: every input is a file
fmt = {"percent": percent, "digits": digits}
inputs = analysis.Inputs(paths.METRICS_DIR, paths.TABLES_DIR)
out = analysis.Outputs(paths.REPORTS_DIR / "analysis", dpi=figure_dpi)
{stage: inputs.metrics_path(stage).exists() for stage in analysis.STAGE_FILES}

# %% [markdown]
# ## Data: datasets (Table 10) and error sampling (Table 1)

# %%
out.table("table10_datasets", analysis.datasets_table(inputs))

# %%
out.table("table1_source_statistics", analysis.source_statistics_table(inputs, **fmt))

# %% [markdown]
# ## Retrieval and standard RAG (stage 01)

# %%
recall = analysis.retrieval_recall_table(inputs, **fmt)
out.figure("stage01_retrieval_recall", analysis.plot_retrieval_recall(recall))
out.table("stage01_retrieval_recall", recall)

# %%
out.table("stage01_standard_rag", analysis.standard_rag_table(inputs, **fmt))

# %% [markdown]
# ## Main comparison (RAG-Critic Table 3 / RePAIR Table 2)
# Every method on the same test questions (stage 14); F1 with its bootstrap interval, the paired
# change against standard RAG and its Holm-corrected p-value. Small test sets give wide intervals:
# read the intervals, not the points.

# %%
# BEGIN SOLUTION hint: build `main` with analysis.main_comparison_table, then save its figure and table with `out`
main = analysis.main_comparison_table(inputs, **fmt)
out.figure("table3_main_comparison", analysis.plot_main_comparison(main))
out.table("table3_main_comparison", main)
# END SOLUTION

# %%
out.table("table3_by_question_type", analysis.by_type_table(inputs, metric=main_metric, **fmt))

# %% [markdown]
# ## Ablations (Table 4) and iterations (Table 6)

# %%
ablations = analysis.ablation_table(inputs, **fmt)
out.figure("table4_ablations", analysis.plot_ablations(ablations))
out.table("table4_ablations", ablations)

# %%
iterations = analysis.iterations_table(inputs, **fmt)
out.figure("table6_iterations", analysis.plot_iterations(iterations))
out.table("table6_iterations", iterations)

# %% [markdown]
# ## The error-critic: training and the RAG-Error benchmark (Tables 5, 7; Figs. 5, 7)

# %%
out.table("critic_training", analysis.critic_training_table(inputs))

# %%
bench = analysis.critic_benchmark_table(inputs, **fmt)
out.figure("fig5_critic_benchmark", analysis.plot_critic_benchmark(bench))
out.table("table5_7_critic_benchmark", bench)

# %%
per_label = analysis.critic_per_label_table(inputs, **fmt)
out.figure("fig7_critic_per_label", analysis.plot_critic_per_label(per_label))
out.table("fig7_critic_per_label", per_label)

# %%
out.table("critic_known_causes", analysis.known_causes_table(inputs, **fmt))

# %% [markdown]
# ## Cost (Table 8)
# Calls and tokens per question of each correction phase (stage 08), and of every method of
# stage 14 on its shared questions (tokens from each method's stage, 09-12), with training cost.

# %%
critic_acc = analysis.trained_critic_accuracy(inputs, critic=trained_critic)
out.table("table8_cost", analysis.correction_cost_table(inputs, critic_accuracy=critic_acc, digits=digits))

# %%
out.table("table8_cost_methods", analysis.method_cost_table(inputs, digits=digits))

# %% [markdown]
# ## Error distributions per pool member and dataset (Fig. 6, Figs. 8-11)
# Labels of the error pool D_Error^QA: tier-1 shares (Fig. 6) and the most frequent tier-2
# labels of each pool member (the paper shows one figure per model).

# %%
# BEGIN SOLUTION hint: tier-1 label shares per pool member and dataset (error_distribution_table with tier 1), figure and table
tier1 = analysis.error_distribution_table(inputs, 1, error_qa_file=error_qa_file, **fmt)
out.figure("fig6_tier1_errors", analysis.plot_tier1_distribution(tier1))
out.table("fig6_tier1_errors", tier1)
# END SOLUTION

# %%
tier2 = analysis.error_distribution_table(inputs, 2, error_qa_file=error_qa_file, top=top_tier2, **fmt)
out.figure("fig8_11_tier2_errors", analysis.plot_tier2_top(tier2, top=top_tier2))
out.table("fig8_11_tier2_errors", tier2)

# %% [markdown]
# ## RAGEC: stages and error types (RAGEC Tables 2 and 4, stage 13)

# %%
ragec_types = analysis.ragec_types_table(inputs, table_file=ragec_types_table, **fmt)
out.figure("ragec_table2_types", analysis.plot_ragec_types(ragec_types))
out.table("ragec_table2_types", ragec_types)

# %%
out.table("ragec_table4_mode_frequency", analysis.ragec_mode_frequency_table(inputs))

# %%
out.table("ragec_stages_agreement", analysis.ragec_stage_table(inputs))

# %% [markdown]
# ## SIM-RAG Fig. 3: the sufficiency critic (stage 11); RePAIR Table 3: action usage (stages 08 and 12)

# %%
confusion = analysis.simrag_confusion_table(inputs, **fmt)
out.figure("simrag_fig3_confusion", analysis.plot_simrag_confusion(confusion))
out.table("simrag_fig3_confusion", confusion)

# %%
out.table("repair_table3_action_usage", analysis.repair_action_usage_table(inputs))

# %% [markdown]
# ## Index: each paper table and figure and the file that reproduces it
# Items marked "partial" were built with some inputs missing; "missing" items could not be built.

# %%
index = out.write_index(inputs)
analysis.status_frame(index)

# %%
agreement = analysis.standard_rag_agreement(inputs)  # one chain, one standard RAG: 01, 08 and 14 agree
metrics = analysis.summary_metrics(index, inputs, main, agreement=agreement)
write_stage_metrics("15_analysis", metrics)
[f"{m['paper']}: {m['input']} {m['key'] or ''} ({m['reason']})" for m in metrics["missing"]]

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_analysis  # noqa: E402

Markdown("\n\n".join(reading_analysis(read_json(setup.metrics_path))))
