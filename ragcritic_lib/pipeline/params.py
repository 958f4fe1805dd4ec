"""params.yaml: loading and validation before any compute.

Layout: a ``common`` section (seed, generator, retriever, dataset registry) and one flat section
per pipeline stage, named after the stage (notebook ``NN_<stage>.py``). A stage section's schema
*is* its notebook's ``parameters`` cell: the same names, scalar literals whose types give the
expected types. On top of the types, :func:`rules` holds one declarative table of value rules per
section (ranges, choices, comma lists, input paths) and :data:`CROSS_RULES` the rules between
keys (split fractions that share one set, min <= max, ...). Unknown sections or keys, missing
keys, wrong types, out-of-range values, unknown choices, missing input files, YAML errors and
duplicate YAML keys are reported together in one :class:`ParamsError`, one line per problem,
each naming ``section.key`` (or ``file:line``), before anything runs.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import DataFormatError, read_yaml

_NB_NAME = re.compile(r"^(\d\d)_([a-z0-9_]+)\.py$")


class ParamsError(ValueError):
    """params.yaml does not match the schema; the message lists every problem, one per line."""


# The nested sections of `common` have their own rule tables below (generator, retriever,
# datasets); their unknown-key lists come from the modules that consume them.
COMMON_KEYS: dict[str, tuple[type, ...]] = {
    "seed": (int,), "generator": (dict,), "retriever": (dict,), "datasets": (dict,),
}
DATASET_KEYS: dict[str, tuple[type, ...]] = {"corpus": (str,), "splits": (str,)}


def notebook_paths(notebooks_dir: Path = paths.NOTEBOOKS_DIR) -> dict[str, Path]:
    """Stage name -> notebook ``.py`` twin, for every ``NN_<stage>.py`` in the folder."""
    out = {}
    for f in sorted(notebooks_dir.glob("*.py")):
        m = _NB_NAME.match(f.name)
        if m:
            out[m.group(2)] = f
    return out


def notebook_parameters(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The names and literal defaults of the cell tagged ``parameters`` in a jupytext notebook.

    Raises:
        ParamsError: no such cell, more than one, invalid Python, or a non-literal / non-scalar
            assignment.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    cells = re.split(r"^# %%", text, flags=re.MULTILINE)
    tagged = [c for c in cells if re.match(r"[^\n]*tags=\[[^\]]*[\"']parameters[\"']", c)]
    if len(tagged) != 1:
        raise ParamsError(f"{path}: expected exactly one cell tagged 'parameters', found {len(tagged)}")
    body = tagged[0].split("\n", 1)[1] if "\n" in tagged[0] else ""
    out: dict[str, Any] = {}
    try:
        tree = ast.parse(body)
    except SyntaxError as exc:
        raise ParamsError(f"{path}: the parameters cell is not valid Python ({exc.msg})") from None
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise ParamsError(f"{path}: the parameters cell may only hold `name = literal` lines")
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            raise ParamsError(f"{path}: parameter {node.targets[0].id!r} is not a literal") from None
        if not isinstance(value, (int, float, str, bool)):
            raise ParamsError(f"{path}: parameter {node.targets[0].id!r} must be a scalar literal")
        out[node.targets[0].id] = value
    return out


# ---------------------------------------------------------------------------------------------
# Value rules: each rule maps (value, context) to a problem text or None
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Context:
    """What the path rules need to know: the repository root and what dvc.yaml produces."""

    root: Path
    produced: tuple[Path, ...]  # absolute outs / metrics / plots of every dvc.yaml stage
    datasets: tuple[str, ...]  # names in common.datasets (for path templates)

    def resolve(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.root / p

    def produced_by_stage(self, path: Path) -> bool:
        return any(path == out or out in path.parents for out in self.produced)


Rule = Callable[[Any, Context], "str | None"]  # (value, context) -> problem or None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(low: int | None = None) -> Rule:
    """An int, at least ``low`` when given."""
    def rule(value: Any, ctx: Context) -> str | None:
        if not _is_int(value):
            return f"expected int, got {type(value).__name__} ({value!r})"
        return None if low is None or value >= low else f"must be >= {low}, got {value}"
    return rule


def number(low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False) -> Rule:
    """An int or float inside the interval; ``*_open`` excludes that end."""
    if high is None:
        wanted = "a number" if low is None else f"{'>' if low_open else '>='} {low:g}"
    else:
        lo = "(-inf" if low is None else f"{'(' if low_open else '['}{low:g}"
        wanted = f"in {lo}, {high:g}{')' if high_open else ']'}"

    def rule(value: Any, ctx: Context) -> str | None:
        if not _is_number(value):
            return f"expected a number, got {type(value).__name__} ({value!r})"
        ok = ((low is None or (value > low if low_open else value >= low))
              and (high is None or (value < high if high_open else value <= high)))
        return None if ok else f"must be {wanted}, got {value!r}"
    return rule


FRACTION = number(0, 1)  # a probability, share or rate


def steps() -> Rule:
    """A trainer step count: -1 keeps the recipe's own max_steps/epochs, else >= 1."""
    def rule(value: Any, ctx: Context) -> str | None:
        if not _is_int(value):
            return f"expected int, got {type(value).__name__} ({value!r})"
        return None if value == -1 or value >= 1 else f"must be -1 (the recipe's) or >= 1, got {value}"
    return rule


def boolean() -> Rule:
    def rule(value: Any, ctx: Context) -> str | None:
        return None if isinstance(value, bool) else f"expected bool, got {type(value).__name__} ({value!r})"
    return rule


def text(*, empty_ok: bool = False) -> Rule:
    """A string (non-empty unless ``empty_ok``)."""
    def rule(value: Any, ctx: Context) -> str | None:
        if not isinstance(value, str):
            return f"expected str, got {type(value).__name__} ({value!r})"
        return None if empty_ok or value.strip() else "must be a non-empty string"
    return rule


def one_of(choices: Iterable[str]) -> Rule:
    """One of a fixed set of strings (the set comes from the module that consumes the value)."""
    allowed = tuple(choices)

    def rule(value: Any, ctx: Context) -> str | None:
        return None if value in allowed else f"must be one of {' | '.join(allowed)}, got {value!r}"
    return rule


_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def device(*, auto: bool) -> Rule:
    """A torch device the code handles: cpu, cuda, cuda:N (and auto where the code resolves it).

    mps is not offered: the generator forks and seeds only the CPU and CUDA random generators,
    so sampling on mps would not be reproducible.
    """
    names = "cpu | cuda | cuda:N" + (" | auto" if auto else "")

    def rule(value: Any, ctx: Context) -> str | None:
        ok = isinstance(value, str) and (bool(_DEVICE.match(value)) or (auto and value == "auto"))
        return None if ok else f"must be {names}, got {value!r}"
    return rule


def comma_list(item: Callable[[str], str | None], what: str, *, unique: bool = True) -> Rule:
    """A comma-separated list of items (``"1,3,5"``): no empty item, each passing ``item``."""
    def rule(value: Any, ctx: Context) -> str | None:
        if not isinstance(value, str):
            return f"expected a comma-separated string of {what}, got {type(value).__name__} ({value!r})"
        items = [x.strip() for x in value.split(",")]
        if any(not x for x in items):
            return f"empty item in {value!r} (expected a comma-separated list of {what})"
        bad = [f"{x!r} ({why})" for x in items if (why := item(x))]
        if bad:
            return f"{', '.join(bad)} in {value!r} (expected a comma-separated list of {what})"
        if unique and len(set(items)) < len(items):
            return f"repeated item in {value!r}"
        return None
    return rule


def empty_or(inner: Rule) -> Rule:
    """``""`` (the feature is off) or a value that passes ``inner``."""
    def rule(value: Any, ctx: Context) -> str | None:
        return None if value == "" else inner(value, ctx)
    return rule


def _positive_int_item(x: str) -> str | None:
    return None if x.isdigit() and int(x) >= 1 else "not an integer >= 1"


def _url_item(x: str) -> str | None:
    return None if re.match(r"^https?://[^\s/]+", x) else "not an http(s):// URL"


def _choice_item(choices: Iterable[str]) -> Callable[[str], str | None]:
    allowed = tuple(choices)
    return lambda x: None if x in allowed else f"not one of {','.join(allowed)}"


def _path_problem(value: str, ctx: Context) -> str | None:
    p = ctx.resolve(value)
    if p.exists() or ctx.produced_by_stage(p):
        return None
    return f"{value}: no such file or folder, and no dvc.yaml stage produces it"


def input_path(*, empty_ok: bool = False) -> Rule:
    """A path that exists now or is an output of a dvc.yaml stage (relative to the repo root)."""
    def rule(value: Any, ctx: Context) -> str | None:
        if not isinstance(value, str):
            return f"expected str, got {type(value).__name__} ({value!r})"
        if not value:
            return None if empty_ok else "must name a file or folder"
        return _path_problem(value, ctx)
    return rule


def under(folder: Path) -> Rule:
    """A file name under ``folder`` that exists or that a stage produces."""
    def rule(value: Any, ctx: Context) -> str | None:
        if not isinstance(value, str) or not value:
            return f"expected a file name, got {value!r}"
        return _path_problem(str(folder / value), ctx)
    return rule


def registered_datasets() -> Rule:
    """A comma list of dataset names, each registered in ``common.datasets``."""
    def rule(value: Any, ctx: Context) -> str | None:
        why = comma_list(lambda x: None, "dataset names")(value, ctx)
        if why:
            return why
        unknown = [x.strip() for x in value.split(",") if ctx.datasets and x.strip() not in ctx.datasets]
        return f"{', '.join(map(repr, unknown))} not in common.datasets ({', '.join(ctx.datasets)})" if unknown else None
    return rule


def parse_dataset_counts(value: str) -> dict[str, int]:
    """``"testbed=128,trivia=32"`` -> {"testbed": 128, "trivia": 32}; ``""`` -> {}.

    Raises:
        ValueError: naming the item that is not ``name=N`` with N an integer >= 0, or a repeated name.
    """
    out: dict[str, int] = {}
    for item in [x.strip() for x in str(value).split(",")] if str(value).strip() else []:
        name, sep, n = (part.strip() for part in item.partition("="))
        if not sep or not name or not n.isdigit():
            raise ValueError(f"{item!r} is not name=N with N an integer >= 0")
        if name in out:
            raise ValueError(f"{name!r} is given twice")
        out[name] = int(n)
    return out


def dataset_counts() -> Rule:
    """``""`` or a comma list ``name=N`` over datasets registered in ``common.datasets``."""
    def rule(value: Any, ctx: Context) -> str | None:
        if not isinstance(value, str):
            return f"expected a string like \"testbed=128,trivia=32\", got {type(value).__name__} ({value!r})"
        try:
            counts = parse_dataset_counts(value)
        except ValueError as exc:
            return f"{exc} in {value!r}"
        unknown = [x for x in counts if ctx.datasets and x not in ctx.datasets]
        return f"{', '.join(map(repr, unknown))} not in common.datasets ({', '.join(ctx.datasets)})" if unknown else None
    return rule


def dataset_template() -> Rule:
    """A path with a ``{dataset}`` placeholder, valid for every dataset in common.datasets."""
    def rule(value: Any, ctx: Context) -> str | None:
        if not isinstance(value, str):
            return f"expected str, got {type(value).__name__} ({value!r})"
        try:
            filled = [value.format(dataset=ds) for ds in ctx.datasets]
        except (KeyError, IndexError, ValueError) as exc:
            return f"{value!r}: only the placeholder {{dataset}} is allowed ({type(exc).__name__}: {exc})"
        problems = [why for f in filled if (why := _path_problem(f, ctx))]
        return problems[0] if problems else None
    return rule


# Torch dtypes a checkpoint can be written in, and those a generator can be loaded in.
SAVE_DTYPES = ("float32", "bfloat16", "float16")
LOAD_DTYPES = ("auto", *SAVE_DTYPES)
LAUNCHERS = ("inprocess", "accelerate")  # ragcritic_lib.critic.training.run_training
CRITIC_PROMPTS = ("trained", "zeroshot")  # ragcritic_lib.critic.critics.LLMCritic
CRAG_REWRITERS = ("keywords", "llm")  # ragcritic_lib.baselines.crag
SIMRAG_CRITICS = ("classifier", "llm", "probe")  # notebook 11: a feature classifier, a LoRA-tuned LLM or a probe of the frozen LLM
REPAIR_DECODINGS = ("calibrated", "constrained", "free")  # ragcritic_lib.baselines.repair.DECODINGS
REPAIR_PROMPTS = ("full", "compact")  # ragcritic_lib.baselines.repair.PROMPTS
RAGEC_VOTINGS = ("constrained", "free")  # ragcritic_lib.baselines.ragec.VOTINGS
SIMRAG_BALANCE = ("oversample", "downsample")  # notebook 11: how the critic's labels are balanced
# The base model a critic or planner is trained from: a local folder (or a stage's output), or ""
# for the generator's model (see runtime.resolve_base_model; a served name cannot be trained).
BASE_MODEL = input_path(empty_ok=True)


@lru_cache(maxsize=1)
def rules() -> dict[str, dict[str, Rule]]:
    """The value rules, one table per section (``common.generator`` etc. for nested ones).

    Choice lists are read from the modules that consume the values, so adding a prompt
    variant or a metric there is enough. Keys without a rule here are checked by type only.
    """
    from ragcritic_lib import llm, retrieval, testbed  # deps: check-only
    from ragcritic_lib.mining import sampling as mining, teachers  # deps: check-only
    from ragcritic_lib.retrieval import rag  # deps: check-only
    from ragcritic_lib.agent import actions, outcomes, planner  # deps: check-only
    from ragcritic_lib.agent.ladder import VERIFY_MODES  # deps: check-only
    from ragcritic_lib.critic.critics import VERDICT_MODES  # deps: check-only
    from ragcritic_lib.data.flashrag import SPLITS  # deps: check-only

    answer_variants = tuple(v for v in rag.PROMPT_VARIANTS if v != "closed_book")  # closed book: its own switch
    teacher = one_of(teachers.TEACHER_CHOICES)
    count, some = integer(1), integer(0)
    tokens = integer(1)
    return {
        "common": {"seed": integer(0)},
        "common.generator": {
            "backend": one_of(sorted(llm._BACKEND_KEYS)),
            "model": text(),
            "adapter": input_path(empty_ok=True),
            "dtype": one_of(LOAD_DTYPES),
            "device": device(auto=True),
            "cache": boolean(),
            "batch_size": count,
            "max_input_tokens": tokens,
            "repetition_penalty": number(0, low_open=True),
            "no_repeat_ngram_size": some,
            "seed": integer(0),
            "gpu_memory_utilization": number(0, 1, low_open=True),
            "tensor_parallel_size": count,
            "max_model_len": tokens,
            "enforce_eager": boolean(),
            "max_in_flight": count,
            "timeout_s": number(0, low_open=True),
            "max_retries": some,
            "backoff_s": number(0),
        },
        "common.retriever": {
            "kind": one_of(retrieval.KINDS),
            "index": one_of(retrieval.INDEX_TYPES),
            "encoder_type": one_of(retrieval.ENCODER_TYPES),
            "device": device(auto=False),
            "batch_size": count, "rerank_depth": count, "rerank_batch_size": count,
            "fusion_depth": count, "hnsw_m": count, "max_length": count,
            "hnsw_ef_construction": count, "hnsw_ef_search": count,
            "nlist": some, "nprobe": count, "num_threads": some, "rrf_k": some,
            "bm25_k1": number(0), "bm25_b": FRACTION,
        },
        "common.datasets.*": {"corpus": input_path(), "splits": input_path()},
        "assets": {
            "passage_words": count, "seed": integer(0), "dev_fraction": FRACTION,
            "test_fraction": FRACTION, "model_dtype": one_of(SAVE_DTYPES), "corpus_articles": some,
        },
        "retrieval_rag": {
            "recall_questions": count, "eval_questions": count, "dataset_questions": dataset_counts(),
            "top_k": count,
            "recall_ks": comma_list(_positive_int_item, "integers >= 1"),
            "prompt_variant": one_of(answer_variants),
            "variant_probe_questions": count, "max_new_tokens": tokens, "max_passage_words": count,
        },
        "testbed": {
            "seed": integer(0),
            "domains": comma_list(_choice_item(testbed.DOMAINS), f"domains from {','.join(testbed.DOMAINS)}"),
            "n_entities_per_domain": integer(4), "frac_dev": FRACTION, "frac_test": FRACTION,
            "passage_words": integer(30),
            **{k: FRACTION for k in ("distractor_rate", "conflict_rate", "split_fact_rate", "filler_rate",
                                     "fact_sheet_rate", "name_mention_rate", "knob_focus",
                                     "withheld_focus")},
            **{k: some for k in ("n_distractors", "withheld_per_entity", "questions_per_type_train",
                                 "questions_per_type_dev", "questions_per_type_test")},
            **{f"weight_{t}": number(0) for t in testbed.QUESTION_TYPES},
        },
        "error_sampling": {
            "pool_file": input_path(), "split": one_of(SPLITS), "questions_per_dataset": count,
            "dataset_questions": dataset_counts(),
            "chunk_size": count, "judge_metric": one_of(mining.JUDGE_METRICS), "judge_threshold": FRACTION,
            "teacher": teacher, "teacher_config": input_path(empty_ok=True), "llm_teacher_subset": some,
            "audit_teacher_rows": integer(-1),
            "teacher_few_shot": some, "teacher_max_new_tokens": tokens,
        },
        "tagging": {
            "teacher": teacher, "teacher_config": input_path(empty_ok=True), "min_tags": count,
            "max_tags": count, "surface_noise": FRACTION, "alpha": count, "max_tag_tokens": tokens,
            "llm_teacher_subset": some, "teacher_few_shot": some, "teacher_max_new_tokens": tokens,
        },
        "taxonomy": {
            "n_clusters": integer(2), "max_tags_per_cluster": count, "cluster_namer": teacher,
            "teacher_config": input_path(empty_ok=True), "name_weight": FRACTION,
            "encoder": input_path(), "examples_per_label": some,
        },
        "critic_data": {
            "critic_dataset": input_path(), "correct_pool": input_path(), "known_causes_file": input_path(),
            "generator_answers": dataset_counts(), "train_questions": dataset_counts(), "counterfactuals": some, "min_correct_share": FRACTION,
            "max_train_samples": count, "top_k": count, "passage_words": count, "evidence_words": some,
            "label_list": boolean(), "max_analysis_words": count,
        },
        "critic_sft": {
            "trainer": one_of(("cached", "trl")),
            "method": one_of(("full", "lora", "best")), "default_method": one_of(("full", "lora")),
            "lora_ranks": comma_list(_positive_int_item, "integers >= 1"), "compare_examples": count,
            "train_layers": count, "ship_max_mb": number(0, low_open=True),
            "epochs": number(0, low_open=True),
            "learning_rate": number(0, low_open=True), "lora_learning_rate": number(0, low_open=True), "batch_size": count,
            "eval_every": count, "patience": count, "max_length": tokens, "verdict_weight": number(0),
            "select": one_of(("dev_auroc", "dev_loss")),  # dev_pairs is DPO's (critic_dpo.select)
            "recipe": input_path(), "max_steps": steps(),
            "launcher": one_of(LAUNCHERS), "accelerate_config": input_path(empty_ok=True),
            "num_processes": some, "merge_dtype": one_of(SAVE_DTYPES), "preview_samples": some, "tag_check": some,
            "base_model": BASE_MODEL,
        },
        "critic_body": {  # the verdict's own body, fitted on the frozen base of critic_sft.base_model
            "verdict_body": one_of(("generative", "probe", "verifier")), "verdict_sources": text(empty_ok=True),
            "probe_layer": integer(1), "probe_answer_layer": integer(0),
            "verifier_model": input_path(), "verifier_epochs": number(0, low_open=True),
            "verifier_learning_rate": number(0, low_open=True), "verifier_max_length": tokens,
            "batch_size": count, "eval_every": count,
        },
        "critic_dpo": {
            "k_coarse": some, "k_fine": some, "max_train_samples": count, "max_pairs": count,
            "beta": number(0, low_open=True), "epochs": number(0, low_open=True), "train_layers": some,
            "learning_rate": number(0, low_open=True), "batch_size": count,
            "eval_every": count, "patience": count,
            "select": one_of(("dev_auroc", "dev_loss", "dev_pairs")), "max_dev_pairs": count, "tag_check": some,
            "recipe": input_path(), "max_steps": steps(), "launcher": one_of(LAUNCHERS),
            "accelerate_config": input_path(empty_ok=True), "num_processes": some,
            "merge_dtype": one_of(SAVE_DTYPES), "ship_max_mb": number(0, low_open=True),
        },
        "benchmark": {
            "per_class": count, "test_pool_members": text(), "test_questions": count, "bootstrap": count,
            "max_new_tokens": tokens,
            "extra_critic_backend": one_of(sorted(llm._BACKEND_KEYS)),
            "extra_critic_urls": empty_or(comma_list(_url_item, "http(s):// URLs")),
            "extra_critic_variant": one_of(CRITIC_PROMPTS), "known_causes_file": input_path(),
        },
        "correction": {
            "n_questions": count, "trivia_questions": count, "iterations": count, "critic_dir": input_path(),
            "critic_max_new_tokens": tokens, "critic_verdict": one_of((*VERDICT_MODES, "dev_f1")), "dev_questions": count,
            "verify_corrections": one_of(VERIFY_MODES), "planner_dir": input_path(),
            "planner_max_new_tokens": tokens,
            "planner_decoding": one_of(planner.PLANNER_DECODINGS),
            "planner_candidates": one_of(planner.PLANNER_CANDIDATE_SCOPES),
            "answer_mode": one_of(actions.ANSWER_MODES), "refine_notes": one_of(actions.NOTE_SOURCES),
            "rewrite_expand": one_of(actions.EXPAND_SOURCES), "action_rerank_depth": integer(0),
            "answer_prefix": one_of(("whole", "shared")),
            "action_topk": count, "deep_topk": count,
            "max_calls": count, "timeout_s": number(0, low_open=True), "case_studies": some,
        },
        "planner_data": {
            "train_file": input_path(), "records": dataset_counts(), "programs_per_record": count,
            "targets": one_of(outcomes.PLANNER_TARGETS), "max_examples": count,
            "prompt": one_of(planner.PLANNER_VARIANTS), "recipe": input_path(), "max_steps": steps(),
            "launcher": one_of(LAUNCHERS), "accelerate_config": input_path(empty_ok=True), "base_model": BASE_MODEL,
            "min_examples": some,
        },
        "self_refine": {"rounds": count},
        "crag": {
            "train_questions": count, "dev_questions": count, "use_reranker": boolean(),
            "secondary": one_of(retrieval.KINDS), "k_secondary": count, "top_strips": count,
            "min_strip_score": number(),  # a cross-encoder logit: any sign
            "rewriter": one_of(CRAG_REWRITERS),
        },
        "simrag": {
            "train_questions": count, "min_examples": count, "max_turns": count, "docs_per_turn": count,
            "initial_docs": some, "match": one_of(("judge", *mining.JUDGE_METRICS)), "match_threshold": FRACTION,
            "min_minority": some, "balance": one_of(SIMRAG_BALANCE), "critic": one_of(SIMRAG_CRITICS),
            "critic_recipe": input_path(), "critic_steps": steps(), "critic_base_model": BASE_MODEL,
            "heldout_frac": number(0, 1, low_open=True, high_open=True), "classifier_ablation": boolean(),
            "oracle_ceiling": boolean(), "probe_layer": integer(1),
        },
        "repair": {
            "train_questions": count, "dev_questions": some, "min_states": some, "grammar_plans": count, "offpolicy_plans": some,
            "sampled_plans": some,
            "temperature": number(0), "margin": number(0), "max_pairs": count,
            "max_chosen_share": number(0, 1, low_open=True), "dpo_recipe": input_path(),
            "dpo_beta": number(0, low_open=True), "offpolicy_steps": steps(), "onpolicy_steps": steps(),
            "init_adapter": input_path(empty_ok=True), "base_model": BASE_MODEL,
            "decoding": one_of(REPAIR_DECODINGS), "prompt": one_of(REPAIR_PROMPTS), "calibration_states": count,
        },
        "ragec": {
            "votes": count, "temperature": number(0), "coverage_threshold": FRACTION, "first_stage_depth": count,
            "rerank": boolean(), "max_errors": some, "voting": one_of(RAGEC_VOTINGS),
        },
        "comparison": {
            "datasets": registered_datasets(), "test_questions": count,
            "n_boot": count, "n_perm": count, "ci_alpha": number(0, 1, low_open=True, high_open=True),
            "rag_critic_results": dataset_template(), "rag_critic_pred_key": text(),
        },
        "analysis": {
            "digits": some, "main_metric": one_of(mining.METRICS), "top_tier2": count, "figure_dpi": count,
            "error_qa_file": input_path(), "ragec_types_table": under(paths.TABLES_DIR.relative_to(paths.ROOT)),
            "trained_critic": text(),
        },
    }


# ---------------------------------------------------------------------------------------------
# Rules between keys of one section
# ---------------------------------------------------------------------------------------------
CrossRule = tuple[tuple[str, ...], Callable[[str, Mapping[str, Any]], "str | None"]]


def split_fractions(dev: str, test: str) -> CrossRule:
    """Two fractions cut from one set (the rest is train) must leave something for train."""
    def rule(section: str, values: Mapping[str, Any]) -> str | None:
        total = values[dev] + values[test]
        if total < 1:
            return None
        return (f"{section}.{dev} + {section}.{test}: {values[dev]:g} + {values[test]:g} = {total:g}, "
                "must be < 1 (nothing would be left for train)")
    return (dev, test), rule


def ordered(low: str, high: str) -> CrossRule:
    def rule(section: str, values: Mapping[str, Any]) -> str | None:
        if values[low] <= values[high]:
            return None
        return f"{section}.{low}: {values[low]} is above {section}.{high} ({values[high]})"
    return (low, high), rule


def required_when(key: str, value: str, needed: str) -> CrossRule:
    def rule(section: str, values: Mapping[str, Any]) -> str | None:
        if values[key] != value or values[needed]:
            return None
        return f"{section}.{needed}: required when {section}.{key} is {value!r}"
    return (key, needed), rule


def _urls_for_openai_critic(section: str, values: Mapping[str, Any]) -> str | None:
    if values["extra_critic_model"] and values["extra_critic_backend"] == "openai" and not values["extra_critic_urls"]:
        return f"{section}.extra_critic_urls: required when {section}.extra_critic_backend is 'openai'"
    return None


CROSS_RULES: dict[str, list[CrossRule]] = {
    "assets": [split_fractions("dev_fraction", "test_fraction")],
    "testbed": [split_fractions("frac_dev", "frac_test")],
    "tagging": [ordered("min_tags", "max_tags")],
    "critic_sft": [required_when("launcher", "accelerate", "accelerate_config")],
    "critic_dpo": [required_when("launcher", "accelerate", "accelerate_config")],
    "benchmark": [(("extra_critic_model", "extra_critic_backend", "extra_critic_urls"), _urls_for_openai_critic)],
    "planner_data": [required_when("launcher", "accelerate", "accelerate_config")],
}


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------
def _type_ok(value: Any, expected: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in expected:
        return False
    if float in expected and isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, expected)


def _check_keys(where: str, section: Mapping[str, Any], schema: Mapping[str, tuple[type, ...]],
                problems: list[str], *, required: bool) -> set[str]:
    """Unknown keys, wrong types and (when ``required``) missing keys; returns the keys at fault."""
    flagged: set[str] = set()
    for key, value in section.items():
        if key not in schema:
            problems.append(f"{where}.{key}: unknown key (allowed: {', '.join(sorted(schema))})")
            flagged.add(key)
        elif not _type_ok(value, schema[key]):
            names = "/".join(t.__name__ for t in schema[key])
            problems.append(f"{where}.{key}: expected {names}, got {type(value).__name__} ({value!r})")
            flagged.add(key)
    if required:
        for key in schema:
            if key not in section:
                problems.append(f"{where}.{key}: missing")
                flagged.add(key)
    return flagged


def _apply_rules(where: str, section: Mapping[str, Any], table: Mapping[str, Rule], ctx: Context,
                 problems: list[str], *, skip: set[str]) -> set[str]:
    """Run the value rules of one section; returns the keys at fault (``skip`` ones are not run)."""
    flagged = set(skip)
    for key, rule in table.items():
        if key in section and key not in skip:
            why = rule(section[key], ctx)
            if why:
                problems.append(f"{where}.{key}: {why}")
                flagged.add(key)
    return flagged


def _generator_problems(cfg: Mapping[str, Any], ctx: Context) -> list[str]:
    from ragcritic_lib.llm import (  # deps: check-only
        _BACKEND_KEYS, _COMMON_KEYS, _INACTIVE, _PORTABLE_KEYS, vllm_engine_options,
    )

    where = "common.generator"
    known = _COMMON_KEYS.union(*_BACKEND_KEYS.values())
    # As load_llm: with backend vllm any other vllm.LLM engine option passes through to the engine.
    engine = set(vllm_engine_options()) - known if cfg.get("backend") == "vllm" else set()
    out = [f"{where}.{k}: unknown key (allowed: {', '.join(sorted(known))}"
           f"{', or a vllm.LLM engine option' if cfg.get('backend') == 'vllm' else ''})"
           for k in cfg if k not in known | engine]
    for key in ("backend", "model"):
        if key not in cfg:
            out.append(f"{where}.{key}: missing")
    flagged = _apply_rules(where, cfg, rules()["common.generator"], ctx, out, skip=set())
    backend = cfg.get("backend")
    if "backend" not in flagged and backend in _BACKEND_KEYS:
        # As load_llm: a key that changes outputs but that this backend cannot honour is an error.
        unsupported = sorted(k for k in set(cfg) & known - _COMMON_KEYS - _BACKEND_KEYS[backend] - _PORTABLE_KEYS
                             if cfg[k] not in _INACTIVE.get(k, (None,)))
        out += [f"{where}.{k}: not supported by backend {backend!r}" for k in unsupported]
    return out


def _retriever_problems(cfg: Mapping[str, Any], ctx: Context) -> list[str]:
    from ragcritic_lib.retrieval import RETRIEVER_DEFAULTS, validate_retriever_cfg  # deps: check-only

    where = "common.retriever"
    out: list[str] = []
    schema = {k: (float,) if isinstance(v, float) else (type(v),) for k, v in RETRIEVER_DEFAULTS.items()}
    flagged = _check_keys(where, cfg, schema, out, required=False)
    _apply_rules(where, cfg, rules()["common.retriever"], ctx, out, skip=flagged)
    if not out:
        try:  # the retriever's own check, for any rule not in the table above
            validate_retriever_cfg(cfg)
        except (ValueError, TypeError) as exc:
            out.append(f"{where}: {exc}")
    return out


def _library_check(section: str, values: Mapping[str, Any]) -> str | None:
    """A stage's own config check, for rules that need more than one key (run on a clean section)."""
    if values.get("teacher_config"):
        why = _teacher_config_problem(section, values["teacher_config"])
        if why:
            return why
    if section == "testbed":
        from ragcritic_lib.testbed import TestbedConfig  # deps: check-only

        try:
            TestbedConfig.from_params(values)
        except (ValueError, TypeError) as exc:
            return str(exc) if str(exc).startswith("testbed") else f"testbed: {exc}"
    return None


def _teacher_config_problem(section: str, teacher_config: str) -> str | None:
    """The LLM config in a stage's ``teacher_config`` file, checked as load_llm will read it (its
    model folder aside, which a stage may build), so a typo fails before the stage samples."""
    from ragcritic_lib.llm import check_llm_config  # deps: check-only

    path = paths.resolve(teacher_config)
    if not path.is_file():
        return None  # a stage output not built yet: the path rule has judged it
    try:
        cfg = read_yaml(path)
        check_llm_config(cfg, f"{section}.teacher_config ({teacher_config})", check_model_path=False)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


# Keys naming the base model a stage trains from, with the (key, values) under which it trains
# from it at all; "" there means the generator's model, so a served generator needs them set.
BASE_MODEL_KEYS: dict[tuple[str, str], tuple[str, tuple[Any, ...]] | None] = {
    ("critic_sft", "base_model"): None,
    ("planner_data", "base_model"): None,
    ("repair", "base_model"): ("init_adapter", ("",)),  # an init checkpoint brings its base
    ("simrag", "critic_base_model"): ("critic", ("llm", "probe")),
}


def _served_base_problems(params: Mapping[str, Any]) -> list[str]:
    """With a served generator (backend openai), every stage that trains needs a local base model."""
    common = params.get("common")
    gen = common.get("generator") if isinstance(common, Mapping) else None
    if not isinstance(gen, Mapping) or gen.get("backend") != "openai":
        return []
    out = []
    for (section, key), when in BASE_MODEL_KEYS.items():
        values = params.get(section)
        if not isinstance(values, Mapping) or values.get(key) != "":
            continue
        if when is not None and values.get(when[0]) not in when[1]:
            continue
        out.append(f"{section}.{key}: required when common.generator.backend is 'openai' (a served model "
                   f"{gen.get('model')!r} cannot be trained; set a local checkpoint folder)")
    return out


def _context(params: Mapping[str, Any], problems: list[str]) -> Context:
    """Paths that dvc.yaml stages produce, and the dataset names of common.datasets."""
    produced: list[Path] = []
    if paths.DVC_FILE.exists():
        try:
            dvc = read_yaml(paths.DVC_FILE) or {}
        except DataFormatError as exc:
            problems.extend(str(exc).splitlines())
            dvc = {}
        stages = dvc.get("stages") if isinstance(dvc, Mapping) else None
        for stage in (stages or {}).values():
            for field in ("outs", "metrics", "plots"):
                for entry in (stage or {}).get(field) or []:
                    out = entry if isinstance(entry, str) else next(iter(entry), None)
                    if isinstance(out, str):
                        produced.append(paths.resolve(out))
    common = params.get("common")
    datasets = common.get("datasets") if isinstance(common, Mapping) else None
    names = tuple(datasets) if isinstance(datasets, Mapping) else ()
    return Context(root=paths.ROOT, produced=tuple(produced), datasets=names)


def params_problems(params: Any, notebooks: Mapping[str, Path] | None = None) -> list[str]:
    """Every problem of a params mapping, one line each naming ``section.key`` (empty: valid)."""
    notebooks = notebook_paths() if notebooks is None else notebooks
    if not isinstance(params, Mapping):
        return [f"top level: expected a mapping of sections, got {type(params).__name__}"]
    problems: list[str] = []
    ctx = _context(params, problems)
    table = rules()
    common = params.get("common")
    if not isinstance(common, Mapping):
        problems.append("common: missing section" if common is None else "common: expected a mapping")
    else:
        flagged = _check_keys("common", common, COMMON_KEYS, problems, required=True)
        _apply_rules("common", common, table["common"], ctx, problems, skip=flagged)
        if isinstance(common.get("generator"), Mapping):
            problems += _generator_problems(common["generator"], ctx)
        if isinstance(common.get("retriever"), Mapping):
            problems += _retriever_problems(common["retriever"], ctx)
        if isinstance(common.get("datasets"), Mapping):
            if not common["datasets"]:
                problems.append("common.datasets: register at least one dataset")
            for name, entry in common["datasets"].items():
                where = f"common.datasets.{name}"
                if not isinstance(entry, Mapping):
                    problems.append(f"{where}: expected a mapping with corpus and splits")
                    continue
                flagged = _check_keys(where, entry, DATASET_KEYS, problems, required=True)
                _apply_rules(where, entry, table["common.datasets.*"], ctx, problems, skip=flagged)
    for section, values in params.items():
        if section == "common":
            continue
        if section not in notebooks:
            problems.append(f"{section}: unknown section (stages: {', '.join(sorted(notebooks))})")
            continue
        if not isinstance(values, Mapping):
            problems.append(f"{section}: expected a mapping")
            continue
        schema = {k: (type(v),) if not isinstance(v, float) else (float,)
                  for k, v in notebook_parameters(notebooks[section]).items()}
        before = len(problems)
        flagged = _check_keys(section, values, schema, problems, required=True)
        flagged = _apply_rules(section, values, table.get(section, {}), ctx, problems, skip=flagged)
        for keys, rule in CROSS_RULES.get(section, []):
            if not flagged.intersection(keys) and all(k in values for k in keys):
                why = rule(section, values)
                if why:
                    problems.append(why)
        if len(problems) == before:
            why = _library_check(section, values)
            if why:
                problems.append(why)
    for stage in notebooks:
        if stage not in params:
            problems.append(f"{stage}: missing section for notebook {notebooks[stage].name}")
    return problems + _served_base_problems(params)


def _raise(source: str, problems: list[str]) -> None:
    if problems:
        raise ParamsError(f"{source} is invalid:\n  - " + "\n  - ".join(problems))


def validate_params(params: Mapping[str, Any], notebooks: Mapping[str, Path] | None = None,
                    *, source: str = "params.yaml") -> None:
    """Check a params mapping: types from the notebooks, value rules, rules between keys.

    Raises:
        ParamsError: listing every problem, one line each, naming ``section.key``.
    """
    _raise(source, params_problems(params, notebooks))


def read_params_file(path: Path) -> Any:
    """A YAML file's content; a missing or unreadable file, invalid UTF-8, invalid YAML and
    duplicate keys are a :class:`ParamsError` (one line per problem)."""
    try:
        return read_yaml(path)
    except FileNotFoundError:
        raise ParamsError(f"{path}: no such file") from None
    except OSError as exc:
        raise ParamsError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except DataFormatError as exc:
        raise ParamsError(f"{path} is invalid:\n  - " + "\n  - ".join(str(exc).splitlines())) from None


def load_params(path: str | os.PathLike[str] | None = None, *, validate: bool = True) -> dict[str, Any]:
    """Load params.yaml (validated by default). The path defaults to the repository's.

    Raises:
        ParamsError: every problem at once, one line each (YAML errors as ``file:line``).
    """
    import yaml

    path = Path(path) if path is not None else paths.PARAMS_FILE
    try:
        params = read_params_file(path) or {}
    except ParamsError as exc:
        if not validate:
            raise
        # Duplicate keys stop the strict reader; read again last-wins only to report the rest too.
        try:
            fallback = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            raise exc from None
        lines = str(exc).split("\n  - ")[1:]
        raise ParamsError(f"{path} is invalid:\n  - " + "\n  - ".join(lines + params_problems(fallback or {}))) from None
    if validate:
        _raise(str(path), params_problems(params))
    return params


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into ``base`` (used for params profiles)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def profile_file(profile: str) -> Path:
    """``configs/profiles/<profile>.yaml``; ParamsError naming the known profiles if it is missing."""
    prof = paths.CONFIGS_DIR / "profiles" / f"{profile}.yaml"
    if not prof.exists():
        known = ", ".join(sorted(p.stem for p in prof.parent.glob("*.yaml")))
        raise ParamsError(f"{prof}: no such params profile (known: {known})")
    return prof


def profile_params(profile: str, *, params_path: Path | None = None) -> tuple[dict[str, Any], str]:
    """``configs/profiles/<profile>.yaml`` merged over params.yaml, validated; and its source label.

    Raises:
        ParamsError: no such profile, unreadable YAML, or every problem of the merged params.
    """
    params_path = params_path or paths.PARAMS_FILE
    prof = profile_file(profile)
    base, override = read_params_file(params_path) or {}, read_params_file(prof) or {}
    if not isinstance(override, Mapping):
        raise ParamsError(f"{prof}: expected a mapping of sections")
    source = f"{params_path} + {prof.name}"
    merged = deep_merge(base, override) if isinstance(base, Mapping) else base
    validate_params(merged, source=source)
    return merged, source


def main(argv: list[str] | None = None) -> int:
    """``check [--profile NAME]``; exit code 2 with one line per problem.

    Setting a profile's values in params.yaml is :mod:`ragcritic_lib.pipeline.profiles`'s command.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.params",
                                     description="Validate params.yaml (alone or with a profile merged over it).")
    sub = parser.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="validate params.yaml")
    check.add_argument("--profile", help="validate params.yaml merged with configs/profiles/PROFILE.yaml "
                                         "(nothing is written)")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "check" and args.profile:
            _, source = profile_params(args.profile)
            print(f"{source}: ok")
        else:
            load_params()
            print(f"{paths.PARAMS_FILE}: ok")
    except ParamsError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
