"""What every stage's metrics file holds: one typed schema per ``reports/metrics/<stem>.json``.

Each schema is a ``TypedDict`` that pydantic validates: its required keys are the ones a reader
relies on (notebook 15's :mod:`ragcritic_lib.evaluation.analysis`, the comparison stage, the
contracts the README quotes), its ``NotRequired`` keys are typed where they are present, and
every schema allows keys it does not name. Field types carry their ranges through ``Annotated``
aliases (:data:`Fraction` for EM, F1, accuracy and rates in [0, 1], :data:`Count` for integers
>= 0, :data:`Delta` for a change of a 0-1 score); ``X | None`` allows JSON null, and a float NaN
or infinity counts as null, which is what :func:`ragcritic_lib.baselines.jsonable` writes for it.
Types are strict (no ``"0.2"`` for a number, no ``1`` for true); an int is a number. Intervals are
checked in order (``ci_low <= delta_f1 <= ci_high``) wherever their ends are numbers.

:func:`validate` checks a metrics dict against its stem's schema and raises one
:class:`MetricsSchemaError` naming the file and the key path of every problem, e.g.
``reports/metrics/08_correction.json: ladder.testbed.fixed action.f1 = 1.3 is not in [0, 1]``.
``ragcritic_lib.pipeline.stage_metrics.write_stage_metrics`` validates before it writes and
``ragcritic_lib.pipeline.stage_metrics.load_stage_metrics`` after it reads; a stem without a schema of
its own gets :class:`StageMetrics` (any keys; a present ``environment`` block typed).

With ``partial=True`` absent keys are not problems (present ones are still checked): notebook 15
reads that way, since it reports each absent input itself, per table, instead of failing.
"""

import math
import os
from collections.abc import Mapping, Sequence
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired

from pydantic import AfterValidator, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError, core_schema
from typing_extensions import TypedDict  # pydantic reads typing's TypedDict only from Python 3.12

MAX_SHOWN = 20  # problems listed in one error message


class MetricsSchemaError(ValueError):
    """A metrics dict does not match its schema.

    Attributes:
        source: the file it was read from or is meant for (relative to the repository root).
        problems: one line per problem, each starting with its key path.
    """

    def __init__(self, source: str, problems: Sequence[str]):
        self.source, self.problems = source, list(problems)
        lines = [f"{source}: {p}" for p in self.problems[:MAX_SHOWN]]
        if len(self.problems) > MAX_SHOWN:
            lines.append(f"{source}: ... and {len(self.problems) - MAX_SHOWN} more")
        super().__init__("\n".join(lines))


def key_path(path: Sequence[Any]) -> str:
    """``("ladder", "testbed", "fixed action", "f1")`` -> ``ladder.testbed.fixed action.f1``;
    list positions as ``rows[3]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bound(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


# --------------------------------------------------------------------------------------------
# What pydantic's types do not say: ranges with both ends in the message, ordered intervals,
# objects keyed by dataset and by <dataset><suffix>
# --------------------------------------------------------------------------------------------
def in_range(lo: float | None = None, hi: float | None = None) -> AfterValidator:
    """A number in [lo, hi] (an open end when None)."""
    wanted = (f"in [{_bound(lo)}, {_bound(hi)}]" if lo is not None and hi is not None
              else f">= {_bound(lo)}" if lo is not None else f"<= {_bound(hi)}")

    def check(value: float) -> float:
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise PydanticCustomError("range", f"is not {wanted}")
        return value

    return AfterValidator(check)


def ordered(*chains: tuple[str, ...]):
    """Class decorator: fields of a schema ``TypedDict`` whose numeric values must not decrease,
    e.g. ``("ci_low", "delta_f1", "ci_high")``; null or absent ends are skipped."""

    def disorder(row: Any) -> list[str]:
        out = []
        for chain in chains if isinstance(row, dict) else ():
            present = [(k, v) for k in chain if isinstance(v := row.get(k), int | float) and not isinstance(v, bool)]
            if any(a[1] > b[1] for a, b in pairwise(present)):
                shown = ", ".join(f"{k} = {_show(v)}" for k, v in present)
                out.append(f"{shown} are not ordered ({' <= '.join(k for k, _ in present)})")
        return out

    def check(row: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Any:
        found = disorder(row)
        if not found:
            return handler(row)
        try:
            handler(row)
            errors = []
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
        raise _nested([*errors, *({"type": "ordered", "loc": (), "msg": text} for text in found)])

    def schema(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        inner = handler(source)  # the TypedDict's own schema; the check takes over its ref, so that
        ref = inner.pop("ref", None)  # a second use of the class gets the check too
        return core_schema.no_info_wrap_validator_function(check, inner, ref=ref)

    def mark(cls):
        cls.__get_pydantic_core_schema__ = classmethod(schema)
        return cls

    return mark


def _nested(errors: list[Any]) -> PydanticCustomError:
    """One pydantic error that carries several, with key paths relative to its own (see _lines)."""
    return PydanticCustomError("nested", "{count} problems", {"count": len(errors), "errors": errors})


def by_suffix(per_dataset: Any, suffixed: Mapping[str, Any], required: Sequence[str]) -> AfterValidator:
    """An object keyed by dataset name and by ``<dataset><suffix>`` (notebook 08's ``ladder``).

    A key ending in a suffix of ``suffixed`` is checked with that suffix's type; any other key is
    a dataset, checked with ``per_dataset``, and each suffix in ``required`` must then be present
    as ``<dataset><suffix>``.
    """
    longest_first = sorted(suffixed, key=len, reverse=True)

    def check(value: dict[str, Any]) -> dict[str, Any]:
        errors: list[dict[str, Any]] = []
        for key, item in value.items():
            suffix = next((s for s in longest_first if key.endswith(s) and len(key) > len(s)), None)
            try:
                _adapter(per_dataset if suffix is None else suffixed[suffix]).validate_python(item, strict=True)
            except ValidationError as exc:
                errors += [{**e, "loc": (key, *e["loc"])} for e in exc.errors(include_url=False)]
            if suffix is None:
                errors += [{"type": "missing", "loc": (key + s,)} for s in required if key + s not in value]
        if errors:
            raise _nested(errors)
        return value

    return AfterValidator(check)


# --------------------------------------------------------------------------------------------
# Field types
# --------------------------------------------------------------------------------------------
Fraction = Annotated[float, in_range(0, 1)]          # EM, F1, accuracy, a rate or share
Count = Annotated[int, in_range(0)]                  # questions, samples, steps, counts
NonNegative = Annotated[float, in_range(0)]          # calls, tokens, seconds, an MDE
Real = float                                         # a loss, a margin, a threshold
Delta = Annotated[float, in_range(-1, 1)]            # a change of a 0-1 score, an interval end
Reasons = list[str]                                  # ``degenerate``: one string per reason


class Generator(TypedDict):
    backend: str
    device: str
    dtype: str


CpuClass = Literal["amx", "avx512_bf16", "avx2", "cuda", "other"]


class Upstream(TypedDict):
    """A producing stage this one read: the paths read, and that stage's generator dtype and CPU
    class from its metrics file (None where that file predates the field)."""
    read: list[str]
    dtype: str | None
    cpu_class: CpuClass | None


class Environment(TypedDict):
    """``write_stage_metrics``'s block; package versions are further string keys. Files written
    before ``cpu_class``, ``upstream`` and ``wall_seconds`` were recorded lack them."""
    python: str
    generator: Generator
    cpu_class: NotRequired[CpuClass]
    wall_seconds: NotRequired[NonNegative]
    upstream: NotRequired[dict[str, Upstream]]
    provenance: NotRequired[list[str]]


class StageMetrics(TypedDict):
    """What every metrics file may hold; the schema of a stem without one of its own."""
    environment: NotRequired[Environment]


class Scores(TypedDict):
    em: Fraction
    f1: Fraction
    acc: Fraction


class Aggregate(Scores):
    """``ragcritic_lib.evaluation.scoring.aggregate``: mean EM/F1/acc over ``n`` records."""
    n: Count


# --------------------------------------------------------------------------------------------
# 00: assets and testbed
# --------------------------------------------------------------------------------------------
class SplitSizes(TypedDict):
    train: Count
    dev: Count
    test: Count


class AssetsMetrics(StageMetrics):
    """``00_assets.json`` (``ragcritic_lib.data.assets``)."""
    corpus_passages: Count
    trivia_split_sizes: SplitSizes
    corpus_articles: NotRequired[Count]
    corpus_mean_words: NotRequired[NonNegative]
    trivia_questions: NotRequired[Count]
    trivia_lists_kept: NotRequired[Count]
    trivia_lists_skipped: NotRequired[list[str]]
    trivia_answerable_rate: NotRequired[Fraction]


class TestbedCorpus(TypedDict):
    passages: Count
    documents: NotRequired[Count]
    reports: NotRequired[Count]
    words_mean: NotRequired[NonNegative]
    words_min: NotRequired[Count]
    words_max: NotRequired[Count]


class TestbedSplit(TypedDict):
    n: Count
    by_type: NotRequired[dict[str, Count]]
    by_domain: NotRequired[dict[str, Count]]
    knobs: NotRequired[dict[str, Count]]
    mean_supporting_passages: NotRequired[NonNegative]
    n_entities: NotRequired[Count]


class TestbedMetrics(StageMetrics):
    """``00_testbed.json`` (``ragcritic_lib.testbed.testbed_stats``)."""
    corpus: TestbedCorpus
    questions: dict[str, TestbedSplit]
    seed: NotRequired[int]
    entities: NotRequired[dict[str, Count]]
    twins: NotRequired[Count]
    conflicts: NotRequired[Count]
    split_facts: NotRequired[Count]


# --------------------------------------------------------------------------------------------
# 01: retrieval and standard RAG
# --------------------------------------------------------------------------------------------
class RecallGroup(TypedDict):
    """``ragcritic_lib.evaluation.summaries.recall_at_k`` for one group: recall per k (null without questions)."""
    n: Count
    answer_recall: dict[str, Fraction | None]
    support_recall: NotRequired[dict[str, Fraction | None]]


class RecallSummary(RecallGroup):
    by_type: NotRequired[dict[str, RecallGroup]]


class RagSummary(TypedDict):
    """``ragcritic_lib.evaluation.summaries.summarize_rag`` (only ``n`` when there was no question)."""
    n: Count
    em: NotRequired[Fraction]
    f1: NotRequired[Fraction]
    acc: NotRequired[Fraction]
    prefix_rate: NotRequired[Fraction]
    truncation_rate: NotRequired[Fraction]
    abstain_rate: NotRequired[Fraction]
    by_answerable: NotRequired[dict[str, Aggregate]]
    by_type: NotRequired[dict[str, Aggregate]]


class PromptVariantRow(Aggregate):
    dataset: str
    variant: str
    prefix_rate: NotRequired[Fraction]
    truncation_rate: NotRequired[Fraction]


class RetrievalRagMetrics(StageMetrics):
    """``01_retrieval_rag.json``: {dataset: {retriever: recall}}, {dataset: {split: summary}}."""
    retrieval: dict[str, dict[str, RecallSummary]]
    rag: dict[str, dict[str, RagSummary]]
    closed_book: dict[str, dict[str, RagSummary]]
    prompt_variants: NotRequired[list[PromptVariantRow]]


# --------------------------------------------------------------------------------------------
# 02-04: error sampling, tagging, taxonomy
# --------------------------------------------------------------------------------------------
class SourceStatisticsRow(TypedDict):
    """One row of ``ragcritic_lib.mining.sampling.source_statistics`` (RAG-Critic Table 1)."""
    dataset: str
    type: str
    questions: Count
    samples: Count
    errors: Count
    correct: Count
    error_rate: NotRequired[Fraction | None]


class PoolSummary(TypedDict, total=False):
    n: Count
    errors: Count
    error_rate: Fraction | None
    em: Fraction | None
    f1: Fraction | None
    abstained: Fraction | None
    followed_prefix: Fraction | None
    gold_in_passages: Fraction | None
    truncated: Fraction | None


class ParseReport(TypedDict, total=False):
    calls: Count
    failures: Count
    failure_rate: Fraction | None
    by_reason: dict[str, Count]


class TeacherParse(TypedDict, total=False):
    primary: ParseReport | None
    llm_subset: ParseReport | None


class AuditConfusion(TypedDict):
    """One judge's verdicts against the hand labels: its verdict, then the label."""
    credited_right: Count
    credited_wrong: Count
    rejected_right: Count
    rejected_wrong: Count


class AuditVersus(TypedDict):
    """The best judge's agreement minus another's on the same rows (paired bootstrap 95% CI)."""
    n: Count
    delta: float
    ci_low: float
    ci_high: float
    p_value: Fraction


class AuditRows(TypedDict, total=False):
    """Every judge against the audit's rows of one role (``ragcritic_lib.evaluation.audit``),
    each dict keyed by judge (``f1``, ``em``, ``acc``, ``truth``, ``llm_teacher``)."""
    n: Count
    labels: dict[str, Count]
    kinds: dict[str, Count]
    agreement: dict[str, Fraction | None]
    agreement_ci_low: dict[str, Fraction | None]
    agreement_ci_high: dict[str, Fraction | None]
    judged: dict[str, Count]
    confusion: dict[str, AuditConfusion]
    wrong_by_kind: dict[str, dict[str, Count]]
    wrong_rows: dict[str, list[str]]
    best_versus: dict[str, AuditVersus]


class JudgeAudit(AuditRows):
    """``judge.audit``: the test rows at the top level, the choosing rows under ``choosing``;
    ``exists`` false (and nothing else but ``source``) when no labelled audit exists."""
    exists: bool
    source: NotRequired[str]
    n_test: NotRequired[Count]
    choosing: NotRequired[AuditRows]
    best_choosing: NotRequired[str | None]


class JudgeSetting(TypedDict):
    """``judge``: the judge of ``correct`` and, where notebook 02 measured it, its audit."""
    metric: str
    threshold: Fraction
    audit: NotRequired[JudgeAudit]


class ErrorSamplingMetrics(StageMetrics):
    """``02_error_sampling.json``."""
    judge: NotRequired[JudgeSetting]
    samples: Count
    source_statistics: list[SourceStatisticsRow]
    error_rate_by_member: dict[str, Fraction | None]
    pool_size: NotRequired[Count]
    errors: NotRequired[Count]
    correct: NotRequired[Count]
    error_rate: NotRequired[Fraction | None]
    by_member: NotRequired[dict[str, PoolSummary]]
    by_dataset: NotRequired[dict[str, PoolSummary]]
    teacher: NotRequired[str]
    teacher_parse: NotRequired[TeacherParse]


class TagNormalization(TypedDict, total=False):
    raw_tags: Count
    raw_unique: Count
    final_tags: Count
    final_unique: Count


class TaggingMetrics(StageMetrics):
    """``03_tagging.json``."""
    normalization: TagNormalization
    error_records: NotRequired[Count]
    tagger: NotRequired[str]
    tags_before_normalization: NotRequired[Count]
    unique_tags_before_normalization: NotRequired[Count]
    unique_tags_after_normalization: NotRequired[Count]
    parse_failure_rate: NotRequired[Fraction | None]
    parse: NotRequired[ParseReport]
    llm_subset_parse: NotRequired[ParseReport | None]


class TaxonomyMetrics(StageMetrics):
    """``04_taxonomy.json``: label counts of D_Error^QA."""
    tier1_by_dataset: dict[str, dict[str, Count]]
    tier2_distribution: dict[str, Count]
    tier1_distribution: NotRequired[dict[str, Count]]
    clusters: NotRequired[Count]
    tags_clustered: NotRequired[Count]
    mapping_sources: NotRequired[dict[str, Count]]
    tier2_labels_used: NotRequired[list[str]]
    taxonomy: NotRequired[dict[str, Count]]
    cluster_name_parse: NotRequired[ParseReport | None]


# --------------------------------------------------------------------------------------------
# 05-07: critic training and the benchmark
# --------------------------------------------------------------------------------------------
class TrainSummary(TypedDict, total=False):
    steps: Count
    seconds: NonNegative | None  # wall time of the run (the comparison sums it into training_seconds)
    examples: Count
    dropped_too_long: Count
    device: str
    first_loss: Real | None
    last_loss: Real | None


class VerdictCalibration(TypedDict, total=False):
    n: Count
    n_correct: Count
    n_error: Count
    fitted: bool
    threshold: Real | None
    auroc: Fraction | None
    avg_acc: Fraction | None
    correct_acc: Fraction | None
    error_acc: Fraction | None


class CriticSource(TypedDict):
    correct: Count
    error: Count


class CriticData(TypedDict):
    """``data`` of ``05_critic_data.json`` (copied into ``05_critic_sft.json``): the training set
    (``critic_corpus.data_report``)."""
    examples: Count
    correct_share: Fraction | None
    sources: dict[str, CriticSource]
    evidence_in_prompt: Fraction | None  # dev answers whose deciding sentence is in the prompt
    questions: NotRequired[Count]
    style_shortcut_auroc: NotRequired[Fraction | None]
    by_length: NotRequired[dict[str, CriticSource]]  # right and wrong samples by answer length in words


class CriticDataMetrics(StageMetrics):
    """``05_critic_data.json``."""
    data: CriticData
    dev: dict[str, Count]
    questions: dict[str, Count]
    prompt: NotRequired[dict[str, Any]]


class LearningPoint(TypedDict):
    examples: Count
    dev_auroc: Fraction | None
    examples_seen: NotRequired[Count]


class ShipCheck(TypedDict, total=False):
    """``ship`` of 05/06: the compact form the critic ships in (``ragcritic_lib.critic.forms``) and
    its dev AUROC against the trained model's (``flag``: more than 0.02 lower)."""
    form: Literal["adapter", "layers", "delta8", "lowrank"]
    rank: Count
    mb: NonNegative
    max_mb: NonNegative | None
    dev_auroc_trained: Fraction | None
    dev_auroc_shipped: Fraction | None
    auroc_loss: Real | None
    mean_abs_margin_diff: NonNegative | None
    flag: bool


class MethodDecision(TypedDict):
    """``method_decision`` of 05: the method trained after ``critic_sft.method: best``'s comparison."""
    method: str
    default: str
    reason: str


class VerdictBodySummary(TypedDict, total=False):
    """``verdict_body`` of 05_critic_body and 05_critic_sft: the verdict's own body
    (``critic_body.verdict_body``: probe or verifier; generative, in 05_critic_body only,
    when the critic's own margin scores the verdict)."""
    body: Literal["probe", "verifier", "generative"]
    layer: Count
    answer_layer: Count   # the probe's answer-span layer (critic_body.probe_answer_layer), when it reads one
    C: NonNegative
    model: str
    examples: Count
    epochs: NonNegative
    learning_rate: NonNegative
    steps: Count
    seconds: NonNegative
    best_dev_auroc: Fraction | None
    best_at_examples: Count
    sources: list[str] | str   # the training samples' sources ("all": every source)


class CriticBodyMetrics(StageMetrics):
    """``05_critic_body.json``."""
    verdict_body: VerdictBodySummary
    learning_curve: list[LearningPoint]
    dev: dict[str, Count]
    degenerate: Reasons


class TierTags(TypedDict):
    precision: Fraction
    recall: Fraction
    f1: Fraction
    named_share: Fraction   # critiques naming any label of the tier


class TagQuality(TypedDict):
    """The critic's Error critiques of wrong dev answers against the gold labels, per tier."""
    n: Count
    tag1: TierTags
    tag2: TierTags


class CriticSftMetrics(StageMetrics):
    """``05_critic_sft.json``."""
    train: TrainSummary
    data: CriticData
    learning_curve: list[LearningPoint]
    verdict_calibration: VerdictCalibration
    method_comparison: NotRequired[dict[str, dict[str, Any]]]
    method_decision: NotRequired[MethodDecision | None]
    ship: NotRequired[ShipCheck]
    untrained_dev_auroc: NotRequired[Fraction | None]
    preview_parse_failures: NotRequired[Count]
    degenerate: NotRequired[Reasons]
    verdict_body: NotRequired[VerdictBodySummary]
    critique_learning_curve: NotRequired[list[LearningPoint]]
    dev_tags: NotRequired[TagQuality]


class DpoTrainSummary(TrainSummary, total=False):
    beta: NonNegative
    pairs_used: Count
    last_reward_margin: Real | None
    last_reward_accuracy: Fraction | None


class DevAurocChange(TypedDict, total=False):
    before: Fraction | None
    after: Fraction | None
    lowered: bool | None
    kept_sft_weights: bool


class DevPairs(TypedDict):
    """Held-out preference pairs from dev samples: the DPO loss against the SFT reference before
    (log 2) and at the kept weights, and the share ranked right there."""
    n: Count
    loss_before: NonNegative | None
    loss_after: NonNegative | None
    accuracy_after: Fraction | None


class CriticDpoMetrics(StageMetrics):
    """``06_critic_dpo.json``."""
    train: DpoTrainSummary
    pairs: dict[str, Count]
    verdict_calibration: VerdictCalibration
    balance: NotRequired[dict[str, Count]]
    dev_auroc: NotRequired[DevAurocChange]
    dev_pairs: NotRequired[DevPairs]
    dev_tags: NotRequired[TagQuality]
    ship: NotRequired[ShipCheck]
    degenerate: NotRequired[Reasons]


class Identification(TypedDict, total=False):
    acc_correct: Fraction | None
    acc_error: Fraction | None
    acc_avg: Fraction | None


class Classification(TypedDict, total=False):
    tag1_f1: Fraction | None
    tag2_f1: Fraction | None
    avg_f1: Fraction | None


class PrecisionRecall(TypedDict, total=False):
    precision: Fraction | None
    recall: Fraction | None
    f1: Fraction | None


class LabelScore(PrecisionRecall, total=False):
    support: Count
    predicted: Count


class TierScores(TypedDict, total=False):
    macro: PrecisionRecall
    micro: PrecisionRecall
    per_label: dict[str, LabelScore]


class CriticScore(TypedDict):
    """``ragcritic_lib.critic.benchmark.score_critic``."""
    identification: Identification
    classification: Classification
    n: NotRequired[Count]
    parse_failure_rate: NotRequired[Fraction | None]
    valid_json_rate: NotRequired[Fraction | None]
    tag1: NotRequired[TierScores]
    tag2: NotRequired[TierScores]
    verdict_auroc: NotRequired[Fraction | None]
    verdict_auroc_ci_low: NotRequired[Fraction | None]
    verdict_auroc_ci_high: NotRequired[Fraction | None]
    verdict_auroc_within_kind: NotRequired[Fraction | None]
    verdict_auroc_within_kind_ci_low: NotRequired[Fraction | None]
    verdict_auroc_within_kind_ci_high: NotRequired[Fraction | None]


class KnownCauseScore(TypedDict, total=False):
    pairs: Count
    records: Count
    tier1_hit_rate: Fraction | None
    tier2_hit_rate: Fraction | None
    records_all_tier1_hit: Fraction | None


class BenchmarkMetrics(StageMetrics):
    """``07_benchmark.json``: {critic: scores}, {critic: {dataset: identification}}."""
    critics: dict[str, CriticScore]
    known_causes: dict[str, KnownCauseScore]
    by_dataset: dict[str, dict[str, Identification]]
    benchmark: NotRequired[dict[str, Any]]
    table: NotRequired[list[dict[str, Any]]]
    style_baseline: NotRequired[dict[str, Any]]
    question_baseline: NotRequired[dict[str, Any]]
    degenerate: NotRequired[Reasons]
    llm_usage: NotRequired[dict[str, dict[str, Count]]]


# --------------------------------------------------------------------------------------------
# 08: correction and its ladder
# --------------------------------------------------------------------------------------------
@ordered(("ci_low", "delta_f1", "ci_high"), ("delta_judge_acc_ci_low", "delta_judge_acc", "delta_judge_acc_ci_high"))
class LadderRow(TypedDict):
    """``ladder.<dataset>.<row>`` (``ragcritic_lib.agent.ladder.ladder_table``): F1 on a 0-1 scale,
    its paired change against standard RAG with a bootstrap interval and a permutation p-value."""
    n: Count
    em: Fraction
    f1: Fraction
    acc: Fraction
    delta_f1: Delta
    ci_low: Delta
    ci_high: Delta
    p_value: Fraction
    # the judge's verdicts (ladder_records with judge_metric): the share called right and its paired change
    judge_acc: NotRequired[Fraction]
    delta_judge_acc: NotRequired[Delta]
    delta_judge_acc_ci_low: NotRequired[Delta]
    delta_judge_acc_ci_high: NotRequired[Delta]
    delta_judge_acc_p_value: NotRequired[Fraction]
    # answers the row changed against standard RAG, those of them the judge called right before,
    # and the mean F1 change of each group (None for an empty group)
    corrected: NotRequired[Count]
    corrected_delta_f1: NotRequired[Delta | None]
    corrected_right: NotRequired[Count]
    corrected_right_delta_f1: NotRequired[Delta | None]


LADDER = by_suffix(dict[str, LadderRow],
                   {"_mde_f1": NonNegative | None, "_paired_mde_f1": dict[str, NonNegative | None],
                    "_by_type": dict[str, dict[str, LadderRow]], "_answer_recall": Fraction | None},
                   required=("_mde_f1",))


class ByTypeRow(Aggregate):
    method: str
    group: str
    iteration: NotRequired[Count]


class PlanShares(TypedDict, total=False):
    plans: Count
    distinct: Count
    top_share: Fraction
    degenerate: bool


class PlannerTraining(TrainSummary, total=False):
    """``planner_training``: the planner's SFT run (stage planner_data), as the critic's, with the
    executed (critique, program, outcome) records its data came from and what it trained on."""
    executed_records: Count
    targets: str


class ProgramOutcomes(TypedDict):
    executed: Count
    made_right: Count
    helped: Count
    mean_delta_f1: Delta | None
    targets: NotRequired[Count]


class OutcomeSummary(TypedDict):
    """``outcomes`` of ``08_planner_data.json`` (``ragcritic_lib.agent.outcomes.outcome_summary``)."""
    executed_records: Count
    records: Count
    statuses: dict[str, Count]
    made_right: Count
    helped: Count
    records_helped: Count
    mean_delta_f1: Delta | None
    own_program: ProgramOutcomes
    by_program: dict[str, ProgramOutcomes]
    examples: Count
    top_target_share: Fraction | None


class PlannerDataMetrics(StageMetrics):
    """``08_planner_data.json``: the executed programs on wrong answers to train questions and the
    planner trained on those that helped."""
    records: dict[str, Count]
    targets: Literal["outcomes", "rule"]
    programs_per_record: Count
    outcomes: OutcomeSummary
    train: dict[str, Any]
    questions: dict[str, Count]
    degenerate: Reasons


class VerdictQuality(TypedDict, total=False):
    n: Count
    judge: str
    auroc_judge: Fraction | None
    auroc_judge_ci: list[Fraction | None]
    auroc_acc: Fraction | None
    auroc_acc_ci: list[Fraction | None]
    wrong_judge: Count
    wrong_acc: Count
    acted: Count
    acted_right_judge: Count
    acted_right_acc: Count
    abstained_after: Count
    delta_f1_acted_right_acc: Delta | None
    delta_f1_acted_wrong_acc: Delta | None
    not_verified: NotRequired[Count]  # corrections the verifying critic did not prefer (old answer kept)


class CriticVerdict(TypedDict, total=False):
    mode: str
    threshold: Real | None
    verify: bool  # RAG-Critic's critic verified its corrections on test
    verify_mode: str  # correction.verify_corrections: dev_f1 | always | never
    dev_fit: dict[str, Any]  # mode dev_f1: agent.ladder.fit_critic_act_threshold's report (None for an infinite threshold)
    test: dict[str, VerdictQuality]  # per dataset: agent.ladder.verdict_quality of RAG-Critic's test run


class CorrectionMetrics(StageMetrics):
    """``08_correction.json``. ``ladder`` holds, per dataset, ``<dataset>``: {row: :class:`LadderRow`}
    and ``<dataset>_mde_f1`` (both required), ``<dataset>_paired_mde_f1``, ``<dataset>_by_type``
    and ``<dataset>_answer_recall``; ``cost`` is {dataset: {method: {phase: {field: number}}}}."""
    n_questions: dict[str, Count]
    comparison: dict[str, dict[str, Aggregate]]
    by_type: dict[str, list[ByTypeRow]]
    iterations: dict[str, dict[str, Aggregate]]
    cost: dict[str, dict[str, dict[str, dict[str, NonNegative | None]]]]
    planner_training: PlannerTraining
    ladder: Annotated[dict[str, Any], LADDER]
    degenerate: Reasons
    plan_shares: NotRequired[dict[str, dict[str, PlanShares]]]
    action_usage: NotRequired[dict[str, dict[str, dict[str, Count]]]]
    program_calls: dict[str, dict[str, dict[str, Count]]]   # {dataset: {method: calls written in its programs}}
    planner_sft_examples: NotRequired[Count]
    planner_decoding: NotRequired[str]
    critic_verdict: NotRequired[CriticVerdict]


# --------------------------------------------------------------------------------------------
# 09-12: baseline method runs (ragcritic_lib.baselines.harness.save_method_run)
# --------------------------------------------------------------------------------------------
class ExtraRun(TypedDict):
    file: str
    scores: dict[str, Scores]


class PlanRewards(TypedDict, total=False):
    states: Count
    by_plan: dict[str, Fraction]
    best_single: str
    best_single_reward: Fraction
    per_state_best_reward: Fraction
    tied_states: Count


class Training(TypedDict, total=False):
    calls: NonNegative | None
    seconds: NonNegative | None
    what: str
    by_dataset: dict[str, dict[str, NonNegative | None]]
    dpo_steps: list[Count]
    offpolicy_states: Count              # RePAIR: training states per phase, and those that gave a pair
    onpolicy_states: Count
    offpolicy_states_with_pair: Count
    onpolicy_states_with_pair: Count
    offpolicy_rewards: PlanRewards       # RePAIR: mean reward per candidate plan and the per-state best


class MethodRunMetrics(StageMetrics):
    """What ``save_method_run`` writes for every method, before the method's own block."""
    method: str
    n: dict[str, Count]
    scores: dict[str, Scores]
    cost: dict[str, NonNegative | None]
    cost_by_dataset: dict[str, dict[str, NonNegative | None]]
    training: Training
    runs: dict[str, ExtraRun]
    degenerate: Reasons
    seconds: dict[str, NonNegative]


class SelfRefineMetrics(MethodRunMetrics):
    """``09_self_refine.json``."""
    self_refine: NotRequired[dict[str, Any]]


class CragMetrics(MethodRunMetrics):
    """``10_crag.json``."""
    crag: NotRequired[dict[str, Any]]


class Confusion(TypedDict):
    """The sufficiency critic against the truth on held-out examples (SIM-RAG Fig. 3)."""
    n: Count
    correct_accept: Count
    correct_reject: Count
    wrong_accept: Count
    wrong_reject: Count
    accuracy: NotRequired[Fraction | None]
    shares: NotRequired[dict[str, Fraction | None]]
    n_correct: NotRequired[Count]
    n_wrong: NotRequired[Count]
    accept_rate_correct: NotRequired[Fraction | None]
    accept_rate_wrong: NotRequired[Fraction | None]
    accept_rate_correct_ci: NotRequired[list[Fraction] | None]
    accept_rate_wrong_ci: NotRequired[list[Fraction] | None]


class Practice(TypedDict, total=False):
    accept: Count
    reject: Count
    examples: Count
    questions: Count
    train_examples: Count
    train_accept: Count
    train_reject: Count
    balanced_train: Count
    degenerate: Reasons


class SimRagHeldout(TypedDict):
    """The test run's critic on the held-out self-practice examples: accept rates on right and on
    wrong answers, each with a Wilson 95% interval (``simrag.confusion_matrix``)."""
    n: Count
    n_correct: Count
    n_wrong: Count
    accept_rate_correct: Fraction | None
    accept_rate_wrong: Fraction | None
    accept_rate_correct_ci: NotRequired[list[Fraction] | None]
    accept_rate_wrong_ci: NotRequired[list[Fraction] | None]
    accuracy: NotRequired[Fraction | None]


class SimRagCritic(TypedDict):
    """``11_simrag.json``'s ``critic``: the test run's critic and what it learned from."""
    name: str
    balanced_train: Count
    distinct_train: Count
    train_accept: Count
    train_reject: Count
    heldout: SimRagHeldout


class SimRagMetrics(MethodRunMetrics):
    """``11_simrag.json``."""
    heldout_confusion: Confusion
    balanced_train: Count
    practice: Practice
    practice_examples: Count
    critic: NotRequired[SimRagCritic]
    heldout_confusion_by_critic: NotRequired[dict[str, Confusion]]
    accept_rate_by_turn: NotRequired[dict[str, Any]]


class RepairTestPlans(TypedDict):
    """``12_repair.json``'s ``test``: the executed test plans' distribution (``repair.plan_shares``)."""
    executed: Count
    distinct: Count
    top_share: Fraction | None
    plan_shares: dict[str, Fraction]


class RepairMetrics(MethodRunMetrics):
    """``12_repair.json``."""
    action_calls: dict[str, Count]   # calls written in the executed test plans (RePAIR Table 3's column)
    repair: NotRequired[dict[str, Any]]
    test: NotRequired[RepairTestPlans]
    dev: NotRequired[dict[str, Any]]  # the planner's picks on held-out dev states after each phase (repair.dev_choice)


# --------------------------------------------------------------------------------------------
# 13-15: RAGEC, the comparison, the analysis
# --------------------------------------------------------------------------------------------
class RagecAgreement(TypedDict, total=False):
    n: Count
    side_agreement: Fraction | None
    type_agreement: Fraction | None
    n_critic_correct: Count
    n_missing: Count
    by_stage: dict[str, dict[str, Count]]


class RagecMetrics(StageMetrics):
    """``13_ragec.json`` (``ragcritic_lib.baselines.ragec.ragec_summary`` and notebook 13's keys)."""
    mode_frequency: dict[str, Count]
    stages: dict[str, Count]
    agreement: RagecAgreement
    degenerate: Reasons
    errors: NotRequired[Count]
    votes: NotRequired[Count]
    invalid_votes: NotRequired[Count]
    invalid_vote_rate: NotRequired[Fraction | None]
    invalid_vote_rate_by_dataset: NotRequired[dict[str, Fraction | None]]
    grounded_fallbacks: NotRequired[Count]
    reranking_stage: NotRequired[bool]
    answers: NotRequired[dict[str, dict[str, Count]]]
    undiagnosed: NotRequired[dict[str, Count]]
    stage_types: NotRequired[dict[str, dict[str, Any]]]
    critic_source: NotRequired[str]
    same_answer_questions: NotRequired[Count]
    cost: NotRequired[dict[str, NonNegative | None]]
    cost_by_dataset: NotRequired[dict[str, dict[str, NonNegative | None]]]
    seconds: NotRequired[dict[str, NonNegative]]


@ordered(("ci_low", "delta_f1", "ci_high"), ("judge_ci_low", "delta_judge_acc", "judge_ci_high"))
class MethodComparison(TypedDict):
    """``comparison.<dataset>.<method>`` (``ragcritic_lib.baselines.compare.method_comparison``)."""
    n: Count
    em: Fraction
    f1: Fraction
    acc: Fraction
    delta_f1: Delta
    ci_low: Delta
    ci_high: Delta
    p_holm: Fraction | None
    calls_per_question: NonNegative | None
    p: NotRequired[Fraction | None]
    mde: NotRequired[NonNegative | None]
    f1_sd: NotRequired[NonNegative | None]
    training_calls: NotRequired[NonNegative | None]
    training_seconds: NotRequired[NonNegative | None]
    training_steps: NotRequired[Count | None]
    # the audited judge (method_comparison with judge_metric): the share judged right, its paired change
    judge_acc: NotRequired[Fraction]
    delta_judge_acc: NotRequired[Delta]
    judge_ci_low: NotRequired[Delta]
    judge_ci_high: NotRequired[Delta]
    judge_p: NotRequired[Fraction]
    judge_p_holm: NotRequired[Fraction | None]


@ordered(("f1_low", "f1", "f1_high"), ("d_em_low", "d_em", "d_em_high"), ("d_f1_low", "d_f1", "d_f1_high"),
         ("d_acc_low", "d_acc", "d_acc_high"))
class ComparisonRow(Aggregate):
    """One row of ``ragcritic_lib.baselines.comparison_table`` (per dataset, question type, method)."""
    dataset: str
    type: str
    method: str
    f1_low: NotRequired[Fraction | None]
    f1_high: NotRequired[Fraction | None]
    d_em: NotRequired[Delta | None]
    d_em_low: NotRequired[Delta | None]
    d_em_high: NotRequired[Delta | None]
    d_f1: NotRequired[Delta | None]
    d_f1_low: NotRequired[Delta | None]
    d_f1_high: NotRequired[Delta | None]
    d_acc: NotRequired[Delta | None]
    d_acc_low: NotRequired[Delta | None]
    d_acc_high: NotRequired[Delta | None]
    p_f1: NotRequired[Fraction | None]


class ComparisonSummary(TypedDict, total=False):
    mde_conservative: NonNegative | None
    significant_after_holm: list[str]


class RagCriticTraining(TypedDict, total=False):
    """``rag_critic_training`` (``ragcritic_lib.baselines.compare.rag_critic_training``)."""
    sampled_answers: Count | None
    llm_teacher_calls: Count
    calls: Count
    steps: dict[str, Count | None]
    seconds: NonNegative | None
    seconds_by_run: dict[str, NonNegative | None]


@ordered(("ci_low", "delta_f1", "ci_high"), ("judge_ci_low", "delta_judge_acc", "judge_ci_high"))
class AnswerabilityRow(TypedDict):
    """``answerability.<dataset>.<part>.rows.<row>`` (``ragcritic_lib.baselines.compare.answerability_split``):
    a row's change on one part of the questions, and the part's share of its whole change."""
    delta_f1: Delta
    ci_low: Delta
    ci_high: Delta
    p: Fraction | None
    share_f1: Delta
    delta_judge_acc: NotRequired[Delta]
    judge_ci_low: NotRequired[Delta]
    judge_ci_high: NotRequired[Delta]
    share_judge_acc: NotRequired[Delta]


class AnswerabilityPart(TypedDict):
    """``answerability.<dataset>.<part>``: the part's questions and every row's change on them."""
    n: Count
    rows: dict[str, AnswerabilityRow]


class ComparisonMetrics(StageMetrics):
    """``14_comparison.json``."""
    comparison: dict[str, dict[str, MethodComparison]]
    rows: list[ComparisonRow]
    degenerate: Reasons
    stage_seconds: dict[str, dict[str, NonNegative] | None]
    oracle_and_ablation_rows: NotRequired[dict[str, dict[str, MethodComparison]]]
    summary: NotRequired[dict[str, ComparisonSummary]]
    degenerate_by_method: NotRequired[dict[str, Reasons]]
    rag_critic_training: NotRequired[RagCriticTraining]
    answerability: NotRequired[dict[str, dict[Literal["answerable", "unanswerable"], AnswerabilityPart]]]


class MissingInput(TypedDict):
    item: str
    paper: str
    input: str
    reason: str
    key: NotRequired[str | None]


@ordered(("d_f1_low", "d_f1", "d_f1_high"))
class Headline(TypedDict, total=False):
    f1: Fraction | None
    em: Fraction | None
    d_f1: Delta | None
    d_f1_low: Delta | None
    d_f1_high: Delta | None
    p_holm: Fraction | None


class AnalysisMetrics(StageMetrics):
    """``15_analysis.json`` (``ragcritic_lib.evaluation.analysis.summary_metrics``)."""
    items: Count
    built: list[str]
    partial: list[str]
    not_built: list[str]
    files: Count
    missing: list[MissingInput]
    headline: NotRequired[dict[str, dict[str, Headline]]]
    standard_rag_agreement: NotRequired[dict[str, Any]]  # analysis.standard_rag_agreement
    degenerate: NotRequired[list[str]]


SCHEMAS: dict[str, type] = {
    "00_assets": AssetsMetrics,
    "00_testbed": TestbedMetrics,
    "01_retrieval_rag": RetrievalRagMetrics,
    "02_error_sampling": ErrorSamplingMetrics,
    "03_tagging": TaggingMetrics,
    "04_taxonomy": TaxonomyMetrics,
    "05_critic_data": CriticDataMetrics,
    "05_critic_body": CriticBodyMetrics,
    "05_critic_sft": CriticSftMetrics,
    "06_critic_dpo": CriticDpoMetrics,
    "07_benchmark": BenchmarkMetrics,
    "08_planner_data": PlannerDataMetrics,
    "08_correction": CorrectionMetrics,
    "09_self_refine": SelfRefineMetrics,
    "10_crag": CragMetrics,
    "11_simrag": SimRagMetrics,
    "12_repair": RepairMetrics,
    "13_ragec": RagecMetrics,
    "14_comparison": ComparisonMetrics,
    "15_analysis": AnalysisMetrics,
}


def schema_for(stem: str) -> type:
    """The schema ``TypedDict`` of a metrics file (:class:`StageMetrics` for an unknown stem)."""
    return SCHEMAS.get(stem, StageMetrics)




@cache
def _adapter(schema: Any) -> TypeAdapter:
    return TypeAdapter(schema)


def _plain(value: Any) -> Any:
    """JSON's shapes: string keys, lists for tuples, None for a NaN or an infinity, and a value
    no type accepts for what JSON cannot hold (pydantic would take numpy's int64 as a number)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value if value is None or isinstance(value, (str, int)) else object()


def _at(data: Any, loc: Sequence[Any]) -> Any:
    """The value at a key path of the data as given (keys compared as strings)."""
    for part in loc:
        if isinstance(data, Mapping):
            data = next((v for k, v in data.items() if str(k) == str(part)), None)
        elif isinstance(data, (list, tuple)) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


_WANTED = {"string_type": "a string", "bool_type": "true or false", "list_type": "a list", "dict_type": "an object"}


def _lines(error: Mapping[str, Any], data: Any, partial: bool) -> list[str]:
    """One pydantic error as problem lines: ``<key path> = <value found> is not <what was expected>``."""
    loc, kind = tuple(error["loc"]), error["type"]
    where = key_path(loc) or "(top level)"
    if kind == "nested":
        return [line for e in error["ctx"]["errors"]
                for line in _lines({**e, "loc": loc + tuple(e["loc"])}, data, partial)]
    if kind == "missing":
        return [] if partial else [f"{where} is missing"]
    if kind == "ordered":
        return [f"{key_path(loc)}: {error['msg']}" if loc else error["msg"]]
    value = _at(data, loc)
    if value is None:
        return [f"{where} is null (a value is required)"]
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where} = {_show(value)} is not a finite number"]
    if kind == "range":
        return [f"{where} = {_show(value)} {error['msg']}"]
    if kind.startswith("int_") and isinstance(value, float):
        return [f"{where} = {_show(value)} is not an integer"]
    if kind.startswith(("int_", "float_")):
        return [f"{where} = {_show(value)} is not a number"]
    wanted = _WANTED.get(kind)
    return [f"{where} = {_show(value)} " + (f"is not {wanted}" if wanted else error["msg"])]


def problems(stem: str, data: Any, *, partial: bool = False) -> list[str]:
    """Every mismatch of ``data`` with the stem's schema, each starting with its key path."""
    try:
        _adapter(schema_for(stem)).validate_python(_plain(data), strict=True)
    except ValidationError as exc:
        return [line for e in exc.errors(include_url=False) for line in _lines(e, data, partial)]
    return []


def source_name(path: str | os.PathLike[str]) -> str:
    """``path`` relative to the repository root where it lies inside it (for messages)."""
    from ragcritic_lib import paths

    p = Path(path)
    try:
        return p.resolve().relative_to(paths.ROOT).as_posix()
    except ValueError:
        return p.as_posix()


def validate(stem: str, data: Any, *, source: str | os.PathLike[str] | None = None, partial: bool = False) -> None:
    """Raise :class:`MetricsSchemaError` unless ``data`` matches the stem's schema.

    Args:
        source: the file named in the message (default ``reports/metrics/<stem>.json``).
        partial: allow absent keys (see the module docstring).
    """
    found = problems(stem, data, partial=partial)
    if found:
        if source is None:
            from ragcritic_lib import paths

            source = paths.METRICS_DIR / f"{stem}.json"
        raise MetricsSchemaError(source_name(source), found)
