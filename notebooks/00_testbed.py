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
# # 00 · A controlled RAG testbed
# This stage generates, from a seed and without any LLM, a fictional world (companies, court
# cases, patients and hospitals, towns and people, sports clubs), renders it into a FlashRAG
# corpus with near-duplicate entities, outdated statements and facts split across chunks, and
# asks DragonBall-style questions whose evidence and difficulty knobs are known. It provides the
# controlled data on which RAG-Critic's error mining (§3.1) and correction (§3.3) can be read.

# %% tags=["parameters"]
seed = 13
domains = "finance,law,medical,places,sports"
n_entities_per_domain = 40
frac_dev = 0.15
frac_test = 0.25
passage_words = 60
distractor_rate = 0.35
n_distractors = 1
conflict_rate = 0.35
split_fact_rate = 0.35
filler_rate = 0.35
fact_sheet_rate = 0.15
name_mention_rate = 0.75
knob_focus = 0.35
withheld_per_entity = 1
withheld_focus = 0.0
questions_per_type_train = 100
questions_per_type_dev = 20
questions_per_type_test = 40
weight_factual = 1.0
weight_multi_hop = 1.0
weight_comparison = 1.0
weight_numerical = 1.0
weight_temporal = 1.0
weight_summary = 1.0
weight_unanswerable = 1.0

# %%
import pandas as pd

from ragcritic_lib import paths
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics
from ragcritic_lib.testbed import TestbedConfig, example_per_type, generate_testbed, testbed_stats, write_testbed

setup = setup_stage("testbed")  # params and the stage's folder, data/testbed; no LLM: the world comes from the seed
cfg = TestbedConfig(
    seed=seed, domains=domains, n_entities_per_domain=n_entities_per_domain, frac_dev=frac_dev,
    frac_test=frac_test, passage_words=passage_words, distractor_rate=distractor_rate,
    n_distractors=n_distractors, conflict_rate=conflict_rate, split_fact_rate=split_fact_rate,
    filler_rate=filler_rate, fact_sheet_rate=fact_sheet_rate, name_mention_rate=name_mention_rate,
    knob_focus=knob_focus, withheld_per_entity=withheld_per_entity, withheld_focus=withheld_focus,
    questions_per_type_train=questions_per_type_train, questions_per_type_dev=questions_per_type_dev,
    questions_per_type_test=questions_per_type_test, weight_factual=weight_factual,
    weight_multi_hop=weight_multi_hop, weight_comparison=weight_comparison,
    weight_numerical=weight_numerical, weight_temporal=weight_temporal, weight_summary=weight_summary,
    weight_unanswerable=weight_unanswerable,
)
testbed = generate_testbed(cfg)
stats = testbed_stats(testbed)
pd.Series({**stats["corpus"], "entities": sum(stats["entities"].values()), "near-duplicates": stats["twins"],
           "outdated reports": stats["conflicts"], "split facts": stats["split_facts"]})

# %% [markdown]
# Questions per type and split (the split is by entity: every split has its own entities, the
# corpus is shared):

# %%
pd.DataFrame({split: q["by_type"] for split, q in stats["questions"].items()})

# %% [markdown]
# How many questions each difficulty knob touches (a question can carry several):

# %%
pd.DataFrame({split: {**q["knobs"], "questions": q["n"], "mean supporting passages": q["mean_supporting_passages"]}
              for split, q in stats["questions"].items()})

# %% [markdown]
# One test question of each type with its gold answers, knobs and supporting passages:

# %%
for row in example_per_type(testbed, "test"):
    knobs = {k: v for k, v in row["knobs"].items() if v and k not in ("passage_words", "n_facts")}
    print(f"[{row['type']}] {row['question']}\n  gold: {row['golden_answers']}\n  knobs: {knobs}")
    for passage in row["supporting"]:
        print("   ", passage.replace("\n", " || "))
    print()

# %%
written = write_testbed(testbed, setup.out_dir)
write_stage_metrics("00_testbed", stats)
{name: str(path.relative_to(paths.ROOT)) for name, path in written.items()}

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_testbed  # noqa: E402

Markdown("\n\n".join(reading_testbed(read_json(setup.metrics_path))))
