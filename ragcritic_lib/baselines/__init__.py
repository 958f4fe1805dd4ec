"""The methods RAG-Critic is compared with, run in the same harness (notebooks 09-13, compared in 14).

Submodules, one per paper: :mod:`.self_refine` (Self-Refine, notebook 09), :mod:`.crag` (CRAG, 10),
:mod:`.simrag` (SIM-RAG, 11), :mod:`.repair` (RePAIR, 12) and :mod:`.ragec` (RAGEC error
classification, 13); :mod:`.stage_setup` opens every method stage, :mod:`.harness` saves and
loads their runs, :mod:`.compare` builds notebook 14's table.
This module holds what they share: light text helpers, cost accounting around LLM calls, and
the comparison table with paired bootstrap intervals against standard RAG.

Nothing heavy is imported here; each function imports what it needs.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ragcritic_lib.text import CONCEPT_STOPWORDS

STOPWORDS = CONCEPT_STOPWORDS
"""The stopwords of :func:`content_words` (:data:`ragcritic_lib.text.CONCEPT_STOPWORDS`)."""

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits)."""
    return _TOKEN.findall((text or "").lower())


def content_words(text: str) -> list[str]:
    """Distinct non-stopword tokens of ``text`` in order of first appearance.

    Used as the query "concepts" of RAGEC's coverage rule and as CRAG's keyword query.
    """
    seen: OrderedDict[str, None] = OrderedDict()
    for tok in tokens(text):
        tok = tok.split("'")[0]
        if len(tok) < 2 and not tok.isdigit():
            continue
        if tok in STOPWORDS:
            continue
        seen.setdefault(tok, None)
    return list(seen)


def overlap_fraction(query: str, text: str) -> float:
    """Share of the query's content words that occur in ``text`` (0 when the query has none)."""
    concepts = content_words(query)
    if not concepts:
        return 0.0
    have = set(tokens(text))
    return sum(1 for c in concepts if c in have) / len(concepts)


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences on ., ! or ? followed by a capital or digit (no model)."""
    parts = [p.strip() for p in _SENT_SPLIT.split((text or "").strip())]
    return [p for p in parts if p]


def split_title(contents: str) -> tuple[str, str]:
    """FlashRAG ``contents`` is "Title\\ntext"; return (title, text) (title "" when absent)."""
    if "\n" in contents:
        title, body = contents.split("\n", 1)
        return title.strip(), body.strip()
    return "", contents.strip()


def contains_answer(text: str, golds: Sequence[str]) -> bool:
    """True when a normalized gold answer occurs in ``text`` as whole words (FlashRAG style)."""
    from ragcritic_lib.evaluation.scoring import contains_answer as _contains

    return _contains(text, list(golds))


def is_wrong(record: Mapping[str, Any]) -> bool:
    """Whether an answer counts as an error: the negation of its judged ``correct`` flag.

    No baseline decides right and wrong for itself: the flag comes from the project's one judge
    (:func:`mark_correct`, i.e. :func:`ragcritic_lib.mining.sampling.is_correct` at
    ``error_sampling.judge_metric`` / ``judge_threshold``). A record without the flag is an error
    of the caller, named with the record's id.
    """
    if record.get("correct") is None:
        raise ValueError(
            f"record {record.get('id')!r} has no judged 'correct' flag: judge the records first with "
            "baselines.mark_correct(records, metric=error_sampling.judge_metric, threshold=error_sampling.judge_threshold)")
    return not bool(record["correct"])


def mark_correct(records: Iterable[Mapping[str, Any]], *, metric: str, threshold: float) -> list[dict[str, Any]]:
    """Copies of ``records`` with ``correct`` set by the project's judge
    (:func:`ragcritic_lib.mining.sampling.is_correct`; pass ``error_sampling.judge_metric`` and
    ``judge_threshold`` from params). Every baseline that needs to know which answers are wrong
    reads this flag through :func:`is_wrong`."""
    from ragcritic_lib.mining.sampling import is_correct

    out = []
    for rec in records:
        row = dict(rec)
        row["correct"] = is_correct(row, metric=metric, threshold=threshold)
        out.append(row)
    return out


def judge_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``{"metric", "threshold"}`` of the project's judge from a params mapping
    (``error_sampling.judge_metric`` / ``judge_threshold``), named in the error when absent."""
    section = params.get("error_sampling") or {}
    missing = [k for k in ("judge_metric", "judge_threshold") if k not in section]
    if missing:
        raise KeyError(f"params.yaml: error_sampling.{missing[0]} is missing (the project's judge of a right answer)")
    return {"metric": str(section["judge_metric"]), "threshold": float(section["judge_threshold"])}


def score_records(records: Iterable[Mapping[str, Any]], *, pred_key: str = "prediction") -> list[dict]:
    """Copy records adding FlashRAG metrics em / f1 / acc of ``record[pred_key]`` vs the golds."""
    from ragcritic_lib.evaluation.scoring import score_prediction

    out = []
    for rec in records:
        r = dict(rec)
        r.update(score_prediction(str(r.get(pred_key) or ""), list(r.get("golden_answers") or [])))
        out.append(r)
    return out


def question_type(record: Mapping[str, Any]) -> str:
    """The question type from metadata ("trivia" for the trivia set), "unknown" when absent."""
    meta = record.get("metadata") or {}
    return str(meta.get("type") or "unknown")


def dataset_name(record: Mapping[str, Any]) -> str:
    meta = record.get("metadata") or {}
    return str(record.get("dataset") or meta.get("dataset") or "unknown")


# ----------------------------------------------------------------------------------- cost
_COST_KEYS = ("calls", "generate_calls", "score_calls", "choose_calls", "prompt_tokens", "completion_tokens",
              "cached_calls")


class MeteredLLM:
    """Wrap an LLM to count what a method costs: every logical call of ``generate``, ``score`` and
    ``choose`` (cache hits included, so the numbers are those of a cold run and do not depend on
    the cache), its prompt and completion tokens, and the backend's time. Everything else is
    passed through.

    Counts go to the total and, inside ``with meter.dataset(name):``, to that dataset as well
    (:meth:`cost_by_dataset`); calls made outside any dataset scope are listed under "(none)".
    ``score`` returns log-probabilities only: its prompt tokens are counted with the backend's
    tokenizer (prompt plus each option, what the model reads) and it has no completion tokens.
    """

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.totals: dict[str, float] = dict.fromkeys(_COST_KEYS, 0)
        self.totals["llm_seconds"] = 0.0
        self.by_dataset: dict[str, dict[str, float]] = {}
        self._scope: str | None = None

    # the old attribute names, read by callers of the first version
    calls = property(lambda self: self.totals["calls"])
    prompt_tokens = property(lambda self: self.totals["prompt_tokens"])
    completion_tokens = property(lambda self: self.totals["completion_tokens"])
    cached_calls = property(lambda self: self.totals["cached_calls"])
    seconds = property(lambda self: self.totals["llm_seconds"])

    @contextmanager
    def dataset(self, name: str):
        """Attribute the calls made inside the block to dataset ``name`` (scopes may not nest)."""
        if self._scope is not None:
            raise RuntimeError(f"MeteredLLM.dataset({name!r}) inside dataset({self._scope!r})")
        self._scope = str(name)
        try:
            yield self
        finally:
            self._scope = None

    def _add(self, op: str, n: int, *, cached: int, prompt_tokens: int, completion_tokens: int,
             seconds: float) -> None:
        key = self._scope if self._scope is not None else "(none)"
        row = self.by_dataset.setdefault(key, {**dict.fromkeys(_COST_KEYS, 0), "llm_seconds": 0.0})
        for target in (self.totals, row):
            target["calls"] += n
            target[f"{op}_calls"] += n
            target["cached_calls"] += cached
            target["prompt_tokens"] += prompt_tokens
            target["completion_tokens"] += completion_tokens
            target["llm_seconds"] += seconds

    def generate(self, prompts: Sequence[Any], params: Any = None, *, desc: str | None = None) -> list[Any]:
        t0 = time.perf_counter()
        gens = self.llm.generate(prompts, params, desc=desc) if params is not None else self.llm.generate(prompts, desc=desc)
        self._add("generate", len(gens), cached=sum(int(bool(getattr(g, "cached", False))) for g in gens),
                  prompt_tokens=sum(int(getattr(g, "prompt_tokens", 0)) for g in gens),
                  completion_tokens=sum(int(getattr(g, "completion_tokens", 0)) for g in gens),
                  seconds=time.perf_counter() - t0)
        return gens

    def choose(self, prompts: Sequence[Any], options: Sequence[Sequence[str]], *, desc: str | None = None) -> list[Any]:
        t0 = time.perf_counter()
        picks = self.llm.choose(prompts, options, desc=desc)
        self._add("choose", len(picks), cached=sum(int(bool(getattr(c, "cached", False))) for c in picks),
                  prompt_tokens=sum(int(getattr(c, "prompt_tokens", 0)) for c in picks),
                  completion_tokens=sum(int(getattr(c, "completion_tokens", 0)) for c in picks),
                  seconds=time.perf_counter() - t0)
        return picks

    def _tokens(self, prompt: Any) -> int:
        count = getattr(self.llm, "count_tokens", None)
        if count is None:
            return 0
        if isinstance(prompt, str):
            return int(count(prompt))
        render = getattr(self.llm, "render", None)
        if render is not None:
            return int(count(render(prompt)))
        return int(count("\n".join(str(m.get("content", "")) for m in prompt)))

    def score(self, prompts: Sequence[Any], options: Sequence[Sequence[str]], *, desc: str | None = None) -> list[Any]:
        stats = getattr(self.llm, "stats", None)
        before = stats.snapshot()["cached_calls"] if stats is not None else 0
        t0 = time.perf_counter()
        out = self.llm.score(prompts, options, desc=desc)
        seconds = time.perf_counter() - t0
        cached = (stats.snapshot()["cached_calls"] - before) if stats is not None else 0
        tokens = sum(self._tokens(p) + sum(self._tokens(o) for o in opts) for p, opts in zip(prompts, options))
        self._add("score", len(out), cached=int(cached), prompt_tokens=tokens, completion_tokens=0, seconds=seconds)
        return out

    @staticmethod
    def _public(row: Mapping[str, float]) -> dict[str, float]:
        out = {k: row[k] for k in _COST_KEYS}
        out["llm_seconds"] = round(float(row["llm_seconds"]), 3)
        return out

    def cost(self) -> dict[str, float]:
        """{"calls", "generate_calls", "score_calls", "choose_calls", "prompt_tokens",
        "completion_tokens", "cached_calls", "llm_seconds"} over every call."""
        return self._public(self.totals)

    def cost_by_dataset(self) -> dict[str, dict[str, float]]:
        """:meth:`cost` per dataset scope (calls outside a scope under "(none)")."""
        return {ds: self._public(row) for ds, row in sorted(self.by_dataset.items())}

    def __getattr__(self, name: str) -> Any:
        if name == "llm":
            raise AttributeError(name)
        return getattr(self.llm, name)


@contextmanager
def per_dataset(name: str, *meters: Any):
    """``with per_dataset(ds, m1, m2): ...`` attributes the calls of every given
    :class:`MeteredLLM` (None and repeated meters skipped) to dataset ``name``."""
    from contextlib import ExitStack

    seen: set[int] = set()
    with ExitStack() as stack:
        for m in meters:
            if m is None or id(m) in seen:
                continue
            seen.add(id(m))
            stack.enter_context(m.dataset(name))
        yield


def dataset_costs(*parts: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Dataset-wise :func:`add_costs` of several ``{dataset: cost}`` maps (e.g. the
    :meth:`MeteredLLM.cost_by_dataset` of a method's meters)."""
    out: dict[str, dict[str, float]] = {}
    for part in parts:
        for ds, c in part.items():
            out[ds] = add_costs(out.get(ds, {}), c)
    return out


def add_costs(*costs: Mapping[str, float]) -> dict[str, float]:
    """Key-wise sum of cost dicts (a method whose parts ran on several metered models)."""
    out: dict[str, float] = {}
    for c in costs:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


def records_cost(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Cost of one generation per record from the token counts stored in result records."""
    return {"calls": len(records), "prompt_tokens": sum(int(r.get("prompt_tokens", 0) or 0) for r in records),
            "completion_tokens": sum(int(r.get("completion_tokens", 0) or 0) for r in records)}


def records_cost_by_dataset(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """:func:`records_cost` per dataset (:func:`dataset_name` of each record)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(dataset_name(r), []).append(r)
    return {ds: records_cost(rs) for ds, rs in sorted(groups.items())}


@contextmanager
def stopwatch():
    """``with stopwatch() as t: ...`` then ``t["seconds"]`` is the block's wall time."""
    box = {"seconds": 0.0}
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box["seconds"] = time.perf_counter() - t0


def epochs_trained(result: Any) -> float:
    """Passes over the training rows a run made: steps x batch x accumulation / rows used.

    ``result`` is a :class:`ragcritic_lib.critic.training.TrainResult` (``steps``, ``examples`` and the
    resolved ``recipe``); 0.0 when it trained on nothing. With several processes the batch is
    per device, so this counts one process's share and is a lower bound.
    """
    recipe = getattr(result, "recipe", None) or {}
    batch = int(recipe.get("per_device_train_batch_size", 1) or 1) * int(recipe.get("gradient_accumulation_steps", 1) or 1)
    rows = int(getattr(result, "examples", 0) or 0)
    return round(int(getattr(result, "steps", 0) or 0) * batch / rows, 2) if rows else 0.0


# ---------------------------------------------------------------------- prior results
def load_method_results(
    path: Any, *, ids: Iterable[str] | None = None, pred_key: str = "prediction"
) -> list[dict]:
    """Result records of another stage (e.g. RAG-Critic's from notebook 08), rescored.

    Args:
        path: a JSONL file, relative to the repository root or absolute.
        ids: keep only these question ids, in this order (those present).
        pred_key: the field holding the method's answer (``final_prediction`` for the
            correction workflow); copied to ``prediction`` before scoring.
    """
    from ragcritic_lib import paths
    from ragcritic_lib.io import read_jsonl

    # Resolved from the repository root (a JupyterLab kernel starts in notebooks/); a missing
    # file is an error naming the stage that writes it, never a silently dropped method.
    rows = read_jsonl(paths.require(path))
    for r in rows:
        if pred_key != "prediction" and pred_key in r:
            r["prediction"] = r[pred_key]
    if ids is not None:
        by_id = {str(r.get("id")): r for r in rows}
        rows = [by_id[i] for i in (str(x) for x in ids) if i in by_id]
    return score_records(rows)


def cost_from_per_sample(
    per_sample: Mapping[str, Mapping[str, float]], n_by_dataset: Mapping[str, int]
) -> dict[str, float] | None:
    """Total cost of ``n`` questions per dataset from per-question means of another stage.

    ``per_sample`` maps a dataset to {"calls_per_sample", "prompt_tokens_per_sample",
    "completion_tokens_per_sample"} (notebook 08's cost summary); None when a dataset is missing.
    Means over that stage's questions, scaled: an estimate when the question sets differ.
    """
    out = {"calls": 0.0, "prompt_tokens": 0.0, "completion_tokens": 0.0}
    for ds, n in n_by_dataset.items():
        row = per_sample.get(ds)
        if not row:
            return None
        for k in out:
            out[k] += float(row.get(f"{k}_per_sample", 0.0)) * n
    return {k: round(v, 1) for k, v in out.items()}


# ------------------------------------------------------------------------- comparison
METRICS = ("em", "f1", "acc")


def _key(rec: Mapping[str, Any]) -> tuple[str, str]:
    return dataset_name(rec), str(rec["id"])


def comparison_table(
    results: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    baseline: str = "standard_rag",
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    by_type: bool = True,
    costs: Mapping[str, Mapping[str, Any]] | None = None,
    dataset_costs: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """One row per (dataset, question type, method) with EM/F1/acc and the change vs baseline.

    Cost columns go on the "all" rows: a method's cost on that dataset from ``dataset_costs``
    ({method: {dataset: cost}}) when it has one, else from ``costs`` ({method: cost}, the
    method's total over every dataset; wall time always comes from there).

    Each method's records must carry em/f1/acc (see :func:`score_records`), an ``id`` and a
    dataset name. Differences are paired on the questions both the method and the baseline
    answered, with a bootstrap interval over those questions and ``p_f1``, the paired sign-flip
    permutation p of the F1 change. Rows for question type "all"
    come first per dataset; per-type rows follow when ``by_type``.

    Raises:
        KeyError: when ``baseline`` is not among ``results``.
    """
    from ragcritic_lib.evaluation.stats import bootstrap_ci, paired_bootstrap_diff, paired_permutation_p

    if baseline not in results:
        raise KeyError(f"baseline method {baseline!r} missing from results ({sorted(results)})")
    base = {_key(r): r for r in results[baseline]}
    datasets = sorted({k[0] for k in base})
    rows: list[dict[str, Any]] = []
    for ds in datasets:
        types = sorted({question_type(r) for k, r in base.items() if k[0] == ds})
        groups = ["all"] + (types if by_type and len(types) > 1 else [])
        for qtype in groups:
            for method, recs in results.items():
                sel = [
                    r for r in recs
                    if dataset_name(r) == ds and (qtype == "all" or question_type(r) == qtype)
                ]
                if not sel:
                    continue
                row: dict[str, Any] = {"dataset": ds, "type": qtype, "method": method, "n": len(sel)}
                for m in METRICS:
                    row[m] = sum(float(r.get(m, 0.0)) for r in sel) / len(sel)
                ci = bootstrap_ci([float(r.get("f1", 0.0)) for r in sel], n_boot, alpha, seed)
                row["f1_low"], row["f1_high"] = ci["low"], ci["high"]
                paired = [(r, base[_key(r)]) for r in sel if _key(r) in base]
                for m in ("em", "f1"):
                    if method == baseline or not paired:
                        row[f"d_{m}"] = row[f"d_{m}_low"] = row[f"d_{m}_high"] = 0.0 if method == baseline else float("nan")
                        continue
                    d = paired_bootstrap_diff(
                        [float(x.get(m, 0.0)) for x, _ in paired],
                        [float(y.get(m, 0.0)) for _, y in paired],
                        n_boot, alpha, seed,
                    )
                    row[f"d_{m}"], row[f"d_{m}_low"], row[f"d_{m}_high"] = d["diff"], d["low"], d["high"]
                    if m == "f1":
                        # the sign-flip permutation p, as Holm and the readings use: the bootstrap share
                        # read 0 whenever every resample of a small group fell on one side of zero
                        row["p_f1"] = paired_permutation_p([float(x.get("f1", 0.0)) for x, _ in paired],
                                                           [float(y.get("f1", 0.0)) for _, y in paired],
                                                           seed=seed)
                rows.append(row)
    if costs or dataset_costs:
        for row in rows:
            if row["type"] == "all":
                c = dict((costs or {}).get(row["method"], {}))
                c.update(((dataset_costs or {}).get(row["method"]) or {}).get(row["dataset"], {}))
                for k in ("calls", "prompt_tokens", "completion_tokens", "wall_seconds"):
                    if k in c:
                        row[k] = c[k]
    return rows


def jsonable(obj: Any, *, digits: int = 4) -> Any:
    """Metrics-ready copy: floats rounded, NaN/inf replaced by None (strict JSON), tuples as lists."""
    if isinstance(obj, float):
        return None if obj != obj or obj in (float("inf"), float("-inf")) else round(obj, digits)
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v, digits=digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, digits=digits) for v in obj]
    return obj


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, digits: int = 3) -> str:
    """Render rows as a GitHub Markdown table (floats rounded), without extra dependencies."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if v != v else f"{v:.{digits}f}"
        return "" if v is None else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


__all__ = [
    "STOPWORDS", "tokens", "content_words", "overlap_fraction", "split_sentences", "split_title",
    "contains_answer", "is_wrong", "mark_correct", "judge_params", "score_records", "question_type", "dataset_name", "MeteredLLM", "add_costs",
    "per_dataset", "dataset_costs", "records_cost", "records_cost_by_dataset", "stopwatch", "epochs_trained",
    "load_method_results",
    "jsonable", "cost_from_per_sample", "comparison_table", "markdown_table", "METRICS",
]
