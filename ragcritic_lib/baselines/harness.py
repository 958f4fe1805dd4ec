"""What every baseline stage shares: the question set, and how a run is written and read back.

Each method has its own notebook and DVC stage (09-13). They all answer the same questions: the
first ``comparison.test_questions`` test questions of each dataset in ``comparison.datasets``, in
the order of standard RAG's test answers (notebook 01), which is also the order and the set of
the correction ladder (notebook 08). A method stage writes

- ``data/<stage>/test.jsonl``: one scored record per question (``prediction`` is its answer),
  plus optional extra runs (an oracle ceiling, an ablation) as ``data/<stage>/<run>.jsonl``;
- ``reports/metrics/<NN>_<stage>.json``: ``method`` (display name), ``n`` per dataset, mean
  ``scores`` per dataset, ``cost`` and ``cost_by_dataset`` (test-time LLM calls and tokens),
  ``training`` (calls and seconds spent on training or tuning, per dataset where known),
  ``runs`` (extra runs: their display name and file), ``degenerate`` (reasons, empty when none),
  ``seconds`` (wall time of the method's phases on this machine), and the method's own block.

The notebook writes the answers with :func:`save_method_answers` and the metrics with its one
``write_stage_metrics`` call; the comparison stage (notebook 14) reads both back with
:func:`load_method_run`. Both directions check the metrics against their schema
(``ragcritic_lib.pipeline.metrics_schema.MethodRunMetrics`` and the method's own, e.g.
``SimRagMetrics``). A method stage opens with
:func:`ragcritic_lib.baselines.stage_setup.setup_method` (params, the answer setting, the generator
and these questions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.baselines import dataset_name, jsonable, score_records

METRIC_KEYS = ("em", "f1", "acc")


def shared_test_sets(params: Mapping[str, Any]) -> dict[str, list[dict]]:
    """{dataset: the first ``comparison.test_questions`` standard-RAG test records}.

    Every record keeps standard RAG's answer (``prediction``), passages and cost fields: the
    methods that start from the standard answer (Self-Refine, RePAIR) revise exactly these.

    Raises:
        KeyError: a dataset of ``comparison.datasets`` that ``common.datasets`` does not register.
    """
    from ragcritic_lib import paths
    from ragcritic_lib.io import read_jsonl

    section = params["comparison"]
    known = list(params["common"]["datasets"])
    out = {}
    for ds in (x.strip() for x in str(section["datasets"]).split(",")):
        if ds not in known:
            raise KeyError(f"comparison.datasets: {ds!r} is not in common.datasets ({known})")
        recs = read_jsonl(paths.require(paths.stage_dir("retrieval_rag") / ds / "test.jsonl"))
        out[ds] = recs[: int(section["test_questions"])]
        for r in out[ds]:
            r.setdefault("dataset", ds)
    return out


def _scores(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    by_ds: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_ds.setdefault(dataset_name(r), []).append(r)
    return {ds: {k: sum(float(r.get(k, 0.0)) for r in rs) / len(rs) for k in METRIC_KEYS} for ds, rs in by_ds.items()}


def save_method_answers(
    stage: str,
    stem: str,
    method: str,
    records: Sequence[Mapping[str, Any]],
    *,
    cost: Mapping[str, float],
    cost_by_dataset: Mapping[str, Mapping[str, float]],
    training: Mapping[str, Any] | None = None,
    degenerate: Sequence[str] = (),
    seconds: Mapping[str, float] | None = None,
    extra_runs: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]] | None = None,
    info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score and write a method's test answers; returns its metrics, checked but not written.

    The notebook writes them once, ``write_stage_metrics(stem, jsonable(metrics))`` (what
    :func:`save_method_run` does). The metrics are checked against the stem's schema
    (``ragcritic_lib.pipeline.metrics_schema``) first: when they do not match,
    ``MetricsSchemaError`` names the key path and no file is written.

    Args:
        stage: the DVC stage (folder under ``data/``), e.g. ``"self_refine"``.
        stem: the notebook stem, e.g. ``"09_self_refine"`` (metrics file name).
        method: display name used in the comparison ("Self-Refine").
        records: the method's records with ``id``, a dataset and ``prediction``.
        extra_runs: {file stem: (display name, records)}, e.g. an oracle ceiling.
        info: the method's own block (action shares, practice summary, ...); its keys must not
            clash with the common ones.

    Returns:
        The metrics as computed (floats unrounded; :func:`ragcritic_lib.baselines.jsonable`
        gives the file's form).
    """
    from ragcritic_lib import paths
    from ragcritic_lib.io import write_jsonl
    from ragcritic_lib.pipeline.metrics_schema import validate

    out_dir = paths.stage_dir(stage)
    scored = score_records(records)
    runs, extras = {}, {}
    for name, (label, recs) in (extra_runs or {}).items():
        extras[name] = score_records(recs)
        runs[label] = {"file": f"data/{stage}/{name}.jsonl", "scores": _scores(extras[name])}
    n_by_ds: dict[str, int] = {}
    for r in scored:
        n_by_ds[dataset_name(r)] = n_by_ds.get(dataset_name(r), 0) + 1
    metrics = {
        "method": method, "n": n_by_ds, "scores": _scores(scored), "cost": dict(cost),
        "cost_by_dataset": {ds: dict(c) for ds, c in cost_by_dataset.items()},
        "training": dict(training or {}), "runs": runs, "degenerate": list(degenerate),
        "seconds": {k: round(float(v), 1) for k, v in (seconds or {}).items()},
    }
    clash = sorted(set(info or {}) & set(metrics))
    if clash:
        raise ValueError(f"metrics of {stem}: the method block uses reserved keys {clash}")
    metrics.update(info or {})
    validate(stem, jsonable(metrics))  # before any file is written: a failed check leaves the stage's outputs alone
    write_jsonl(out_dir / "test.jsonl", scored)
    for name, extra in extras.items():
        write_jsonl(out_dir / f"{name}.jsonl", extra)
    return metrics


def save_method_run(stage: str, stem: str, method: str, records: Sequence[Mapping[str, Any]],
                    **kwargs: Any) -> dict[str, Any]:
    """:func:`save_method_answers`, then the metrics file ``reports/metrics/<stem>.json``
    (``write_stage_metrics(stem, jsonable(metrics))``); returns the metrics as computed.

    Takes :func:`save_method_answers`'s arguments. A method notebook calls the two steps itself,
    so that its one ``write_stage_metrics`` call is in sight.
    """
    from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics

    metrics = save_method_answers(stage, stem, method, records, **kwargs)
    write_stage_metrics(stem, jsonable(metrics))
    return metrics


def load_method_run(stem: str, stage: str, *, run: str = "test") -> tuple[dict[str, Any], list[dict]]:
    """(metrics, records) of a method stage; ``run`` names an extra run's file stem.

    Raises:
        FileNotFoundError: naming the file and the stage that writes it.
        ragcritic_lib.pipeline.metrics_schema.MetricsSchemaError: the metrics do not match their schema.
    """
    from ragcritic_lib import paths
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.pipeline.stage_metrics import load_stage_metrics

    metrics = load_stage_metrics(stem)
    records = read_jsonl(paths.require(paths.stage_dir(stage) / f"{run}.jsonl"))
    return metrics, records
