"""The correction ladder on dev questions, set up as stage 08 sets it up, for the benchmarks and
pilots that try a change on dev before any stage adopts it (never on test questions).

:func:`dev_ladder` reads the stage's settings, the first dev questions of a dataset as stage 01
answered them, the taxonomy, the error-action table and the rule planner; :func:`run_dev_methods`
runs ladder rows over them on the stage's own action layer (``correction_actions`` with the
``correction`` settings, any of them overridden).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragcritic_lib import paths

__all__ = ["ACTION_SETTINGS", "DevLadder", "dev_ladder", "run_dev_methods"]

ACTION_SETTINGS = ("answer_mode", "refine_notes", "rewrite_expand", "action_rerank_depth", "answer_prefix")
"""The ``correction`` keys that build the action layer (``agent.workflow.correction_actions``)."""


@dataclass
class DevLadder:
    """What a dev run of the ladder reads: the stage's settings and the dev questions."""

    params: Mapping[str, Any]
    cfg: Mapping[str, Any]  # params["correction"]
    rag_cfg: Mapping[str, Any]  # params["retrieval_rag"]
    gold: dict[str, Any]  # the audited judge: {"metric", "threshold"}
    dataset: str
    records: list[dict[str, Any]]
    taxonomy: Any
    table: Any
    rule_planner: Any


def dev_ladder(params: Mapping[str, Any], *, questions: int = 0, dataset: str | None = None) -> DevLadder:
    """The first ``questions`` dev questions of ``dataset`` (0: ``correction.dev_questions``; the
    first configured dataset, the ladder's, when None) with stage 01's answers, and the stage's setup.

    Raises:
        FileNotFoundError: stage 01 has not written that dataset's dev answers (names the file).
    """
    from ragcritic_lib.agent.planner import RuleBasedPlanner, load_error_actions
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.mining.taxonomy import load_taxonomy

    cfg, judge = params["correction"], params["error_sampling"]
    ds = dataset or next(iter(params["common"]["datasets"]))
    n = questions or int(cfg["dev_questions"])
    records = read_jsonl(paths.require(paths.stage_dir("retrieval_rag") / ds / "dev.jsonl"))[:n]
    taxonomy = load_taxonomy()
    table = load_error_actions(taxonomy=taxonomy)
    return DevLadder(params=params, cfg=cfg, rag_cfg=params["retrieval_rag"],
                     gold={"metric": judge["judge_metric"], "threshold": judge["judge_threshold"]},
                     dataset=ds, records=records, taxonomy=taxonomy, table=table,
                     rule_planner=RuleBasedPlanner(table, topk=cfg["action_topk"], deep_topk=cfg["deep_topk"]))


def run_dev_methods(ladder: DevLadder, methods: Mapping[str, Mapping[str, Any]], *, generator: Any = None,
                    settings: Mapping[str, Any] | None = None) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], float]:
    """Run ``methods`` (``agent.workflow.run_methods`` specs) over the ladder's records on the
    stage's action layer; ``settings`` overrides ``correction`` keys of :data:`ACTION_SETTINGS`.
    Returns the runs, their costs and the wall seconds."""
    from ragcritic_lib import runtime
    from ragcritic_lib.agent.workflow import correction_actions, run_methods
    from ragcritic_lib.retrieval import CrossEncoderReranker

    unknown = sorted(set(settings or {}) - set(ACTION_SETTINGS))
    if unknown:
        raise KeyError(f"correction.{unknown[0]}: not an action-layer setting (known: {', '.join(ACTION_SETTINGS)})")
    params, cfg = ladder.params, ladder.cfg
    retriever_cfg = runtime.retriever_config(params)
    actions = correction_actions(generator if generator is not None else runtime.load_generator(params),
                                 runtime.load_retriever(params, ladder.dataset),
                                 settings={**{k: cfg[k] for k in ACTION_SETTINGS}, **(settings or {})},
                                 rag=ladder.rag_cfg, reranker=CrossEncoderReranker(retriever_cfg["reranker"]),
                                 table=ladder.table, default_rerank_depth=retriever_cfg["rerank_depth"])
    start = time.perf_counter()
    runs, costs = run_methods(ladder.records, methods, actions=actions, max_calls=cfg["max_calls"],
                              timeout_s=cfg["timeout_s"], table=ladder.table)
    return runs, costs, time.perf_counter() - start
