"""Critic-guided planning (RAG-Critic section 3.3.1-3.3.2): the error-action table and planners.

* :func:`load_error_actions` reads ``data/taxonomy/error_actions.yaml`` (Table 11: recommended
  sub-actions per tier-1 label, refined for some tier-2 labels) and checks it against the
  taxonomy and the executor's rules.
* :class:`RuleBasedPlanner` turns a critique into a program from that table, with the answer
  instruction and retrieval depths filled in per sample. It is the "w/o auto-planning"
  ablation and the source of the trained planner's SFT targets (:func:`planner_sft_examples`).
* :class:`LLMPlanner` prompts a model with :func:`build_planner_messages` (Prompt F in our own
  words) and extracts the program with :func:`ragcritic_lib.agent.executor.extract_program`;
  model output is data, validated and run only by the restricted executor.
  :func:`load_trained_planner` builds one on a trained checkpoint (full or LoRA adapter).
"""

from __future__ import annotations

import ast
import json
import random
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.agent.actions import (
    ACTION_NAMES,
    COMPACT_SIGNATURES,
    FUNCTION_SIGNATURES,
    REFINE_INSTRUCTIONS,
    REWRITE_INSTRUCTIONS,
    action_stubs,
)
from ragcritic_lib.agent.executor import UnsafeProgramError, extract_program, validate_program
from ragcritic_lib.io import DataFormatError, read_yaml

DEFAULT_ERROR_ACTIONS_FILE = paths.TAXONOMY_DIR / "error_actions.yaml"
PROGRAM_VARIABLES = ("question", "docs", "prediction")
PLANNER_VARIANTS = ("compact", "full")

# Table 12 functionalities per action function: how many sub-actions each must provide.
_TABLE12_COUNTS = {"Retrieval": 4, "RewriteQuery": 4, "DecomposeQuery": 1, "RefineDoc": 6}
_TOP_KEYS = {"version", "defaults", "final_step", "sub_actions", "answer_strategies", "tier1", "tier2"}
_RULE_KEYS = {"paper_actions", "sub_actions", "plan", "answer_instruction", "answer_strategy", "note"}
_PLACEHOLDERS = ("topk", "deep_topk", "instruction")


# --------------------------------------------------------------------------------------------
# The error-action table
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SubAction:
    """One of the 15 correction sub-actions of Table 12."""

    id: str
    function: str
    instruction: str | None
    description: str


@dataclass(frozen=True)
class ActionRule:
    """Recommended correction for one error label.

    Attributes:
        label: canonical tier-1 or tier-2 label.
        tier: 1 or 2.
        sub_actions: ids of the recommended sub-actions.
        plan: program lines (with ``${topk}``/``${deep_topk}`` placeholders) assigning
            ``new_docs``; empty for a tier-2 entry that only changes the answer instruction.
        answer_instruction: the final GenerateAnswer's additional instruction (or None).
        answer_strategy: Table 11's "rewrite the reasoning answer" variant, if any.
        paper_actions: Table 11's actions for the label, in our words.
    """

    label: str
    tier: int
    sub_actions: tuple[str, ...] = ()
    plan: tuple[str, ...] = ()
    answer_instruction: str | None = None
    answer_strategy: str | None = None
    paper_actions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ErrorActionTable:
    """The validated error-action mapping (see :func:`load_error_actions`)."""

    source: str
    topk: int
    deep_topk: int
    default_tier1: str
    final_step: str
    sub_actions: dict[str, SubAction]
    answer_strategies: dict[str, str]
    tier1: dict[str, ActionRule]
    tier2: dict[str, ActionRule]
    taxonomy: Any = field(repr=False)

    def rule(self, label: str) -> ActionRule | None:
        """The rule of a tier-1 or tier-2 label (aliases accepted), None if it has none."""
        name = self.taxonomy.canonical(label) if isinstance(label, str) else None
        if name is None:
            return None
        return self.tier1.get(name) or self.tier2.get(name)

    def rows(self) -> list[dict[str, Any]]:
        """The table as rows (one per label) for display."""
        return [{"label": r.label, "tier": r.tier, "sub_actions": ", ".join(r.sub_actions),
                 "plan_lines": len(r.plan), "answer_instruction": r.answer_instruction or ""}
                for r in [*self.tier1.values(), *self.tier2.values()]]

    def guide_lines(self, labels: Sequence[str] | None = None, *,
                    answers_for: Sequence[str] | None = None) -> list[str]:
        """One short line per rule (all tier-1 rules, or only the given labels' rules).

        Each line names the recommended sub-actions and, for labels in ``answers_for`` (default:
        every label shown), the answer instruction.
        """
        names = list(self.tier1) if labels is None else [n for n in labels if self.rule(n)]
        with_answer = None if answers_for is None else {self.taxonomy.canonical(a) for a in answers_for}
        lines = []
        for name in names:
            rule = self.rule(name)
            assert rule is not None
            acts = "; ".join(self.sub_actions[s].description.rstrip(".") for s in rule.sub_actions)
            text = f"- {rule.label}: {acts}" if acts else f"- {rule.label}:"
            if rule.answer_instruction and (with_answer is None or rule.label in with_answer):
                text += f" | answer: {rule.answer_instruction}"
            lines.append(text)
        return lines


def _fail(path: str, where: str, message: str) -> DataFormatError:
    return DataFormatError(f"{path}: {where}: {message}")


def _str_list(value: Any, path: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _fail(path, where, "must be a list of non-empty strings")
    return tuple(v.strip() for v in value)


def render_template(text: str, **values: Any) -> str:
    """Fill ``${name}`` placeholders; an unknown placeholder raises KeyError naming it."""
    return string.Template(text).substitute(**values)


def _check_plan(lines: tuple[str, ...], final_step: str, sub_actions: Sequence[str],
                table_subs: Mapping[str, SubAction], path: str, where: str) -> None:
    try:
        body = [render_template(line, topk=3, deep_topk=8) for line in lines]
        final = render_template(final_step, instruction=json.dumps("x"))
    except (KeyError, ValueError) as exc:
        raise _fail(path, where, f"unknown or malformed placeholder {exc}; allowed: {_PLACEHOLDERS}") from None
    program = "\n".join([*body, final])
    try:
        tree = validate_program(program, action_stubs(), variables=PROGRAM_VARIABLES)
    except UnsafeProgramError as exc:
        raise _fail(path, where, f"plan rejected by the executor ({exc})") from None
    assigned = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    if "new_docs" not in assigned:
        raise _fail(path, where, "plan must assign new_docs")
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    for sid in sub_actions:
        if table_subs[sid].function not in called:
            raise _fail(path, where, f"sub-action {sid!r} needs {table_subs[sid].function}() but the plan does not call it")


def _parse_sub_actions(raw: Any, path: str) -> dict[str, SubAction]:
    if not isinstance(raw, Mapping):
        raise _fail(path, "sub_actions", "must be a mapping id -> {function, description}")
    subs: dict[str, SubAction] = {}
    for sid, spec in raw.items():
        where = f"sub_actions -> {sid!r}"
        if not isinstance(spec, Mapping) or not isinstance(spec.get("description"), str):
            raise _fail(path, where, "needs 'function' and 'description'")
        fn = spec.get("function")
        if fn not in ACTION_NAMES or fn == "GenerateAnswer":
            raise _fail(path, where, f"function must be one of {ACTION_NAMES[:4]}, got {fn!r}")
        instr = spec.get("instruction")
        allowed = {"RewriteQuery": REWRITE_INSTRUCTIONS, "RefineDoc": REFINE_INSTRUCTIONS}.get(fn)
        if allowed is not None and instr not in allowed:
            raise _fail(path, where, f"instruction must be one of {sorted(allowed)}, got {instr!r}")
        subs[str(sid)] = SubAction(str(sid), fn, instr, " ".join(spec["description"].split()))
    per_fn = Counter(s.function for s in subs.values())
    distinct = {fn: len({s.instruction for s in subs.values() if s.function == fn}) for fn in per_fn}
    for fn, n in _TABLE12_COUNTS.items():
        if per_fn.get(fn, 0) != n or (fn in ("RewriteQuery", "RefineDoc") and distinct.get(fn) != n):
            raise _fail(path, "sub_actions", f"Table 12 has {n} distinct {fn} sub-actions, found {per_fn.get(fn, 0)}")
    return subs


def _parse_rule(name: Any, spec: Any, tier: int, taxonomy: Any, subs: Mapping[str, SubAction],
                strategies: Mapping[str, str], final_step: str, path: str) -> ActionRule:
    where = f"tier{tier} -> {name!r}"
    known = taxonomy.tier1 if tier == 1 else taxonomy.tier2
    canonical = taxonomy.canonical(name) if isinstance(name, str) else None
    if canonical is None or canonical not in known:
        raise _fail(path, where, f"unknown tier-{tier} label (taxonomy has: {', '.join(known)})")
    if canonical != name:
        raise _fail(path, where, f"use the canonical spelling {canonical!r}")
    if not isinstance(spec, Mapping):
        raise _fail(path, where, "must be a mapping")
    unknown = sorted(set(spec) - _RULE_KEYS)
    if unknown:
        raise _fail(path, where, f"unknown key {unknown[0]!r} (allowed: {sorted(_RULE_KEYS)})")
    sub_ids = _str_list(spec.get("sub_actions"), path, f"{where} -> sub_actions")
    for sid in sub_ids:
        if sid not in subs:
            raise _fail(path, f"{where} -> sub_actions", f"unknown sub-action {sid!r}")
    plan = _str_list(spec.get("plan"), path, f"{where} -> plan")
    instruction = spec.get("answer_instruction")
    if instruction is not None and (not isinstance(instruction, str) or not instruction.strip()):
        raise _fail(path, f"{where} -> answer_instruction", "must be a non-empty string")
    strategy = spec.get("answer_strategy")
    if strategy is not None and strategy not in strategies:
        raise _fail(path, f"{where} -> answer_strategy", f"unknown strategy {strategy!r} (known: {sorted(strategies)})")
    if tier == 1 and (not plan or not instruction):
        raise _fail(path, where, "a tier-1 entry needs a plan and an answer_instruction")
    if tier == 2 and not plan and not instruction:
        raise _fail(path, where, "a tier-2 entry needs a plan or an answer_instruction")
    if plan:
        _check_plan(plan, final_step, sub_ids, subs, path, f"{where} -> plan")
    return ActionRule(
        label=canonical, tier=tier, sub_actions=sub_ids, plan=plan,
        answer_instruction=" ".join(instruction.split()) if instruction else None,
        answer_strategy=strategy, paper_actions=_str_list(spec.get("paper_actions"), path, f"{where} -> paper_actions"),
    )


def load_error_actions(path: str | Path = DEFAULT_ERROR_ACTIONS_FILE, taxonomy: Any = None) -> ErrorActionTable:
    """Load and validate the error-action mapping table.

    Args:
        path: the YAML file (default ``data/taxonomy/error_actions.yaml``).
        taxonomy: a :class:`ragcritic_lib.mining.taxonomy.Taxonomy` (loaded from its default file when
            None); every tier-1 label must have an entry, and every key must be a canonical label.

    Raises:
        DataFormatError: naming the file and the offending key (unknown label, unknown
            sub-action, a plan the executor would reject, missing fields, ...).
    """
    if taxonomy is None:
        from ragcritic_lib.mining.taxonomy import load_taxonomy

        taxonomy = load_taxonomy()
    p = paths.resolve(path)
    src = str(p)
    raw = read_yaml(p)
    if not isinstance(raw, Mapping):
        raise _fail(src, "top level", "must be a mapping")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise _fail(src, "top level", f"unknown key {unknown[0]!r} (allowed: {sorted(_TOP_KEYS)})")
    defaults = raw.get("defaults") or {}
    for key in ("topk", "deep_topk"):
        if not isinstance(defaults.get(key), int) or isinstance(defaults.get(key), bool) or defaults[key] < 1:
            raise _fail(src, f"defaults -> {key}", "must be an int >= 1")
    default_t1 = defaults.get("default_tier1")
    if taxonomy.canonical(str(default_t1)) not in taxonomy.tier1:
        raise _fail(src, "defaults -> default_tier1", f"unknown tier-1 label {default_t1!r}")
    final_step = raw.get("final_step")
    if not isinstance(final_step, str) or "GenerateAnswer" not in final_step or "${instruction}" not in final_step:
        raise _fail(src, "final_step", "must be a GenerateAnswer(...) line using ${instruction}")
    subs = _parse_sub_actions(raw.get("sub_actions"), src)
    strategies = raw.get("answer_strategies") or {}
    if not isinstance(strategies, Mapping) or not all(isinstance(v, str) for v in strategies.values()):
        raise _fail(src, "answer_strategies", "must map ids to strings")
    tier1_raw, tier2_raw = raw.get("tier1"), raw.get("tier2") or {}
    if not isinstance(tier1_raw, Mapping) or not isinstance(tier2_raw, Mapping):
        raise _fail(src, "tier1/tier2", "must be mappings keyed by label")
    tier1 = {r.label: r for r in (_parse_rule(k, v, 1, taxonomy, subs, strategies, final_step, src)
                                  for k, v in tier1_raw.items())}
    missing = [t for t in taxonomy.tier1 if t not in tier1]
    if missing:
        raise _fail(src, "tier1", f"no entry for tier-1 label(s) {missing}")
    tier2 = {r.label: r for r in (_parse_rule(k, v, 2, taxonomy, subs, strategies, final_step, src)
                                  for k, v in tier2_raw.items())}
    return ErrorActionTable(
        source=src, topk=defaults["topk"], deep_topk=defaults["deep_topk"],
        default_tier1=taxonomy.canonical(str(default_t1)), final_step=final_step, sub_actions=subs,
        answer_strategies=dict(strategies), tier1=tier1, tier2=tier2, taxonomy=taxonomy,
    )


# --------------------------------------------------------------------------------------------
# Planner inputs and outputs
# --------------------------------------------------------------------------------------------
def critic_feedback(value: Any) -> dict[str, Any]:
    """A critique in one shape: ``{"judgement", "analysis", "tag1", "tag2", "tag3"}``.

    Accepts a ``CriticParse``, a critic-schema dict (``Judgement``, ``Error_analysis``, ...), a
    dict already in this shape, or a record carrying one under ``critic`` / ``critic_target``.
    """
    if value is None:
        return {"judgement": None, "analysis": "", "tag1": [], "tag2": [], "tag3": []}
    if hasattr(value, "to_dict") and not isinstance(value, Mapping):
        value = value.to_dict()
    if not isinstance(value, Mapping):
        raise TypeError(f"cannot read a critique from {type(value).__name__}")
    if "question" in value:  # a record: its critique sits under one of these keys
        for key in ("critic", "critic_target", "target"):
            if key in value:
                inner = value[key]
                if isinstance(inner, str):  # critic SFT samples keep the target as JSON text
                    try:
                        inner = json.loads(inner)
                    except json.JSONDecodeError:
                        inner = None
                return critic_feedback(inner if isinstance(inner, Mapping) else None)
    judgement = value.get("judgement", value.get("Judgement"))
    analysis = value.get("analysis", value.get("Error_analysis", value.get("Error analysis", "")))

    def labels(key: str) -> list[str]:
        v = value.get(key) or []
        return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]

    return {"judgement": judgement, "analysis": str(analysis or ""),
            "tag1": labels("tag1"), "tag2": labels("tag2"), "tag3": labels("tag3")}


def passage_strings(passages: Sequence[Any]) -> list[str]:
    """Passage texts from strings or ``{"contents": ...}`` records."""
    return [str(p.get("contents", "")) if isinstance(p, Mapping) else str(p) for p in passages or []]


@dataclass
class PlannerContext:
    """What the planner sees (Eq. 2): question, passages, prediction, critique, table, functions."""

    question: str
    passages: list[str]
    prediction: str
    critic: dict[str, Any]
    table: ErrorActionTable | None = None
    signatures: str = FUNCTION_SIGNATURES

    @classmethod
    def from_record(cls, record: Mapping[str, Any], critic: Any = None,
                    table: ErrorActionTable | None = None) -> PlannerContext:
        """Build from a RAG result record; the critique defaults to the record's own."""
        return cls(
            question=str(record["question"]),
            passages=passage_strings(record.get("passages", [])),
            prediction=str(record.get("prediction") or ""),
            critic=critic_feedback(critic if critic is not None else record),
            table=table,
        )


@dataclass
class Plan:
    """A planner's output for one sample.

    Attributes:
        program: the program text ("" when none could be extracted).
        raw: the model output (rule-based: the program itself).
        source: "llm" or "rule".
        error: None, or "no_program" when the model output held no program.
        info: rule-based details (labels that chose the plan and the instruction, sub-actions).
    """

    program: str
    raw: str
    source: str
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Rule-based planner
# --------------------------------------------------------------------------------------------
class RuleBasedPlanner:
    """Programs from the error-action table, filled in from each sample's critique.

    The plan comes from the first label with a plan and the answer instruction from the first
    label with one, looking at the critique's tier-2 labels (most specific) before its tier-1
    labels, each in the critic's order; tier-2 labels also contribute their tier-1 parents.
    Without any usable label the table's ``default_tier1`` applies.

    Args:
        table: the error-action table.
        topk, deep_topk: override the table's retrieval depths.
        mention_prediction: append 'The earlier answer "..." was judged wrong.' to the
            instruction (off by default: a small generator tends to copy what it is shown).
    """

    name = "rule"

    def __init__(self, table: ErrorActionTable, *, topk: int | None = None, deep_topk: int | None = None,
                 mention_prediction: bool = False) -> None:
        self.table = table
        self.topk = topk or table.topk
        self.deep_topk = deep_topk or table.deep_topk
        self.mention_prediction = mention_prediction

    def labels(self, critic: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """Canonical (tier-1, tier-2) labels of a critique, in the order the plan looks at them."""
        tax = self.table.taxonomy
        fb = critic_feedback(critic)
        t2 = [n for n in (tax.canonical(x) for x in fb["tag2"]) if n in tax.tier2]
        t1 = [n for n in (tax.canonical(x) for x in fb["tag1"]) if n in tax.tier1]
        for name in t2:
            parent = tax.parent(name)
            if parent not in t1:
                t1.append(parent)
        return list(dict.fromkeys(t1)), list(dict.fromkeys(t2))

    def program_for(self, critic: Mapping[str, Any], prediction: str = "") -> tuple[str, dict[str, Any]]:
        """(program text, info) for one critique."""
        t1, t2 = self.labels(critic)
        order = [self.table.rule(n) for n in t2 + (t1 or [self.table.default_tier1])]
        rules = [r for r in order if r is not None]
        plan_rule = next(r for r in rules + [self.table.tier1[self.table.default_tier1]] if r.plan)
        instr_rule = next((r for r in rules if r.answer_instruction), plan_rule)
        instruction = instr_rule.answer_instruction or ""
        if self.mention_prediction and prediction.strip():
            instruction += f' The earlier answer "{" ".join(prediction.split()[:20])}" was judged wrong.'
        lines = [render_template(line, topk=self.topk, deep_topk=self.deep_topk) for line in plan_rule.plan]
        lines.append(render_template(self.table.final_step, instruction=json.dumps(instruction, ensure_ascii=False)))
        info = {"plan_label": plan_rule.label, "instruction_label": instr_rule.label,
                "sub_actions": list(plan_rule.sub_actions), "tier1": t1, "tier2": t2}
        return "\n".join(lines), info

    def candidate_programs(self, critic: Mapping[str, Any], prediction: str = "", *,
                           scope: str = "critique") -> list[tuple[str, dict[str, Any]]]:
        """The distinct programs a planner may choose from for one sample, each with its info.

        The critique's own rule-based program comes first, then the program of each label the
        critique names, alone (tier-2 labels, then tier-1, in the critique's order): with
        ``scope="critique"`` that is all, so the choice follows the diagnosis and two samples
        with different critiques get different options. ``scope="table"`` adds the program of
        every rule with a plan (tier-1 rules, then tier-2, in table order), as if the critic had
        named that label: any program the table recommends for some error.
        """
        if scope not in PLANNER_CANDIDATE_SCOPES:
            raise ValueError(f"unknown candidate scope {scope!r}; choose from {PLANNER_CANDIDATE_SCOPES}")
        out: dict[str, dict[str, Any]] = {}
        program, info = self.program_for(critic, prediction)
        out[program] = info
        for tier in ("tag2", "tag1"):
            named = critic.get(tier) or []
            for label in [named] if isinstance(named, str) else list(named):
                program, info = self.program_for({"judgement": "Error", tier: [str(label)]}, prediction)
                out.setdefault(program, info)
        if scope == "critique":
            return list(out.items())
        for tier, rules in (("tag1", self.table.tier1), ("tag2", self.table.tier2)):
            for label, rule in rules.items():
                if rule.plan:
                    program, info = self.program_for({"judgement": "Error", tier: [label]}, prediction)
                    out.setdefault(program, info)
        return list(out.items())

    def plan(self, contexts: Sequence[PlannerContext]) -> list[Plan]:
        out = []
        for ctx in contexts:
            program, info = self.program_for(ctx.critic, ctx.prediction)
            out.append(Plan(program=program, raw=program, source="rule", info=info))
        return out


# --------------------------------------------------------------------------------------------
# Prompt F (our wording) and the LLM planner
# --------------------------------------------------------------------------------------------
_SYSTEM = (
    "You repair the answers of a question answering system that reads retrieved passages. "
    "You get the question, the passages, the answer and a critic's diagnosis of the error. "
    "Write a short Python program that calls the functions below to fix that error. Use only "
    "these functions and the variables question, docs (the passages) and prediction (the "
    "answer); no imports, loops or attribute access. The last line must be "
    "final_answer = GenerateAnswer(...). Reply with the program only."
)

_SYSTEM_COMPACT = (
    "Write a short Python program that fixes the answer a critic flagged, using only the listed "
    "functions and the variables question, docs and prediction. End with final_answer = GenerateAnswer(...)."
)

# Worked examples (our own invented cases); their programs come from the rule-based planner so
# prompt and table never disagree.
_EXAMPLES: tuple[dict[str, Any], ...] = (
    {
        "question": "In which year was the Aldor river bridge completed?",
        "passages": ["Aldor\nThe Aldor is a river in the northern lowlands, 210 km long."],
        "prediction": "insufficient information",
        "critic": {"judgement": "Error", "tag1": ["Incomplete Information"],
                   "tag2": ["Insufficient or Incomplete Information Retrieval"],
                   "analysis": "No passage says when the bridge was finished."},
    },
    {
        "question": "Which river is longer, the Velta or the Orun?",
        "passages": ["Velta\nThe Velta flows 640 km to the sea.", "Orun (band)\nOrun is a folk band."],
        "prediction": "Orun is a folk band formed in 1999 and it released many albums",
        "critic": {"judgement": "Error", "tag1": ["Irrelevant or Off-Topic Response"],
                   "tag2": ["Irrelevant Content and Topic Drift"],
                   "analysis": "The answer talks about a band instead of comparing two rivers."},
    },
)


def _critic_line(fb: Mapping[str, Any], *, analysis_words: int) -> str:
    parts = [f"judgement: {fb.get('judgement') or 'Error'}"]
    if fb.get("tag1"):
        parts.append("tier-1: " + ", ".join(fb["tag1"]))
    if fb.get("tag2"):
        parts.append("tier-2: " + ", ".join(fb["tag2"]))
    analysis = " ".join(str(fb.get("analysis") or "").split()[:analysis_words])
    if analysis:
        parts.append(f"analysis: {analysis}")
    return "; ".join(parts)


def _case_text(question: str, passages: Sequence[str], prediction: str, fb: Mapping[str, Any],
               *, max_passages: int, passage_words: int, analysis_words: int = 40) -> str:
    shown = []
    for i, p in enumerate(passages[:max_passages], start=1):
        title, _, body = str(p).partition("\n")
        words = (body or title).split()
        text = " ".join(words[:passage_words]) + (" ..." if len(words) > passage_words else "")
        shown.append(f"[{i}] {title.strip()}: {text}" if body else f"[{i}] {text}")
    pred = " ".join(str(prediction).split()[:40])
    return (f"Question: {question.strip()}\nPassages:\n" + ("\n".join(shown) or "(none)")
            + f"\nAnswer: {pred}\nCritic: {_critic_line(fb, analysis_words=analysis_words)}")


def build_planner_messages(ctx: PlannerContext, *, variant: str = "compact", max_passages: int = 2,
                           passage_words: int = 25) -> list[dict[str, str]]:
    """Chat messages asking for a correction program (Prompt F in our words).

    ``compact`` (for the 135M planner, trained on these prompts; about 500 tokens) lists the
    functions on one line, the table's rows for the critique's labels and the case. ``full``
    (zero-shot planners) gives ``ctx.signatures`` with comments, every tier-1 row and two
    worked examples.
    """
    if variant not in PLANNER_VARIANTS:
        raise ValueError(f"unknown planner prompt variant {variant!r}; choose from {PLANNER_VARIANTS}")
    table = ctx.table
    compact = variant == "compact"
    parts = [f"Functions: {COMPACT_SIGNATURES}" if compact else f"Functions:\n{ctx.signatures}"]
    if table is not None:
        rule_planner = RuleBasedPlanner(table)
        t1, t2 = rule_planner.labels(ctx.critic)
        relevant = t2 + t1
        labels = list(dict.fromkeys((list(table.tier1) if variant == "full" else []) + relevant))
        guide = table.guide_lines(labels or [table.default_tier1], answers_for=relevant or [table.default_tier1])
        parts.append("Error-action guide:\n" + "\n".join(guide))
        if variant == "full":
            shots = []
            for ex in _EXAMPLES:
                program, _ = rule_planner.program_for(ex["critic"], ex["prediction"])
                case = _case_text(ex["question"], ex["passages"], ex["prediction"], ex["critic"],
                                  max_passages=max_passages, passage_words=12, analysis_words=15)
                shots.append(f"{case}\nProgram:\n{program}")
            parts.append("Examples:\n\n" + "\n\n".join(shots))
    case = _case_text(ctx.question, ctx.passages, ctx.prediction, ctx.critic, max_passages=max_passages,
                      passage_words=passage_words, analysis_words=25 if compact else 40)
    parts.append(f"{case}\nProgram:")
    return [{"role": "system", "content": _SYSTEM_COMPACT if compact else _SYSTEM},
            {"role": "user", "content": "\n\n".join(parts)}]


PLANNER_DECODINGS = ("free", "constrained", "scored")
PLANNER_CANDIDATE_SCOPES = ("critique", "table")
"""Options of constrained/scored decoding: the programs for the critique's labels, or the whole table's."""


@dataclass
class _Only:
    """The choice of a sample with one candidate program (no model call)."""

    text: str
    index: int = 0
    raw: str = ""
    constrained: bool = True


class LLMPlanner:
    """A planner model: one batched call, programs extracted from the outputs.

    Args:
        llm: any ``ragcritic_lib.llm`` backend (the SFT-trained planner adapter, the base model
            zero-shot, or a capable served model).
        variant: prompt variant of :func:`build_planner_messages`.
        max_new_tokens: generation budget of a program (free decoding).
        name: label in tables.
        decoding: "free" (the model writes any text; the program is extracted from it, as in
            the paper with a 70B planner) or "constrained" (decoding can only write one of
            the sample's candidate programs, :meth:`RuleBasedPlanner.candidate_programs`, so
            every plan is a valid program over the five actions; the model's choice among them
            depends on the whole prompt: case, critique and table rows; greedy, so the pick is
            made token by token at the first point where candidates differ) or "scored" (the
            same candidates ranked by the model's mean log-probability per token of the whole
            program; one scoring pass per candidate, so a few times slower than "constrained").
        candidates: the rule-based planner whose candidates constrained or scored decoding
            chooses from (required for both).
        scope: which candidates (:meth:`RuleBasedPlanner.candidate_programs`): "critique" (the
            programs for the labels the critique names) or "table" (every program of the table).
            A sample with a single candidate is planned without calling the model.
    """

    def __init__(self, llm: Any, *, variant: str = "compact", max_new_tokens: int = 160,
                 name: str | None = None, decoding: str = "free",
                 candidates: RuleBasedPlanner | None = None, scope: str = "critique") -> None:
        if scope not in PLANNER_CANDIDATE_SCOPES:
            raise ValueError(f"unknown planner candidate scope {scope!r}; choose from {PLANNER_CANDIDATE_SCOPES}")
        self.scope = scope
        if variant not in PLANNER_VARIANTS:
            raise ValueError(f"unknown planner prompt variant {variant!r}")
        if decoding not in PLANNER_DECODINGS:
            raise ValueError(f"unknown planner decoding {decoding!r}; choose from {PLANNER_DECODINGS}")
        if decoding != "free" and candidates is None:
            raise ValueError(f"{decoding} planner decoding needs candidates=RuleBasedPlanner(table)")
        self.llm, self.variant, self.max_new_tokens = llm, variant, max_new_tokens
        self.decoding, self.candidates = decoding, candidates
        self.name = name or f"llm:{variant}"
        self.stats: Counter[str] = Counter()
        self.last_generations: list[Any] = []

    def _plan_constrained(self, contexts: Sequence[PlannerContext], prompts: list[Any],
                          desc: str | None) -> list[Plan]:
        assert self.candidates is not None
        options = [self.candidates.candidate_programs(c.critic, c.prediction, scope=self.scope) for c in contexts]
        ask = [i for i, opts in enumerate(options) if len(opts) > 1]
        asked = self.llm.choose([prompts[i] for i in ask], [[p for p, _ in options[i]] for i in ask], desc=desc) if ask else []
        self.last_generations = list(asked)
        by_index = dict(zip(ask, asked))
        choices = [by_index.get(i) or _Only(options[i][0][0]) for i in range(len(options))]
        out = []
        for opts, ch in zip(options, choices):
            self.stats["plans"] += 1
            self.stats["same_as_rule"] += int(ch.index == 0)
            info = {**opts[ch.index][1], "decoding": "constrained", "option": ch.index, "n_options": len(opts),
                    "constrained": ch.constrained}
            out.append(Plan(program=ch.text, raw=ch.raw or ch.text, source="llm", info=info))
        return out

    def _plan_scored(self, contexts: Sequence[PlannerContext], prompts: list[Any],
                     desc: str | None) -> list[Plan]:
        assert self.candidates is not None
        options = [self.candidates.candidate_programs(c.critic, c.prediction, scope=self.scope) for c in contexts]
        texts = [[p for p, _ in opts] for opts in options]
        ask = [i for i, t in enumerate(texts) if len(t) > 1]
        asked = self.llm.score([prompts[i] for i in ask], [texts[i] for i in ask], desc=desc) if ask else []
        self.last_generations = list(asked)
        by_index = dict(zip(ask, asked))
        scores = [by_index[i] if i in by_index else [0.0] for i in range(len(texts))]
        out = []
        for opts, text, total in zip(options, texts, scores):
            mean = [lp / max(1, self.llm.count_tokens(t)) for lp, t in zip(total, text)]
            k = max(range(len(mean)), key=lambda i: (mean[i], -i))
            self.stats["plans"] += 1
            self.stats["same_as_rule"] += int(k == 0)
            info = {**opts[k][1], "decoding": "scored", "option": k, "n_options": len(opts),
                    "mean_logprob": round(mean[k], 4),
                    "margin": round(mean[k] - max((m for i, m in enumerate(mean) if i != k), default=mean[k]), 4)}
            out.append(Plan(program=text[k], raw=text[k], source="llm", info=info))
        return out

    def plan(self, contexts: Sequence[PlannerContext], *, desc: str | None = None) -> list[Plan]:
        from ragcritic_lib.llm import GenParams

        if not contexts:
            return []
        prompts = [build_planner_messages(c, variant=self.variant) for c in contexts]
        if self.decoding == "constrained":
            return self._plan_constrained(contexts, prompts, desc)
        if self.decoding == "scored":
            return self._plan_scored(contexts, prompts, desc)
        params = GenParams(max_new_tokens=self.max_new_tokens, temperature=0.0, stop=("\nQuestion:",))
        gens = self.llm.generate(prompts, params, desc=desc)
        self.last_generations = list(gens)
        out = []
        for gen in gens:
            program = extract_program(gen.text)
            self.stats["plans"] += 1
            if not program:
                self.stats["no_program"] += 1
            out.append(Plan(program=program, raw=gen.text, source="llm", error=None if program else "no_program"))
        return out


def load_trained_planner(params: Mapping[str, Any], checkpoint: str | Path, **planner_kwargs: Any) -> LLMPlanner:
    """The trained planner: a fully fine-tuned checkpoint, or a LoRA adapter on the base it was
    trained on (recorded in its training result, see
    :func:`ragcritic_lib.runtime.load_trained_model`), wrapped in :class:`LLMPlanner`.

    ``planner_kwargs`` go to :class:`LLMPlanner` (variant, decoding, candidates, ...).

    Raises:
        FileNotFoundError: the checkpoint is missing, is neither an adapter nor a model, or its
            recorded base is no local folder.
    """
    from ragcritic_lib import runtime

    return LLMPlanner(runtime.load_trained_model(params, paths.require(checkpoint)), **planner_kwargs)


def planner_sft_examples(records: Sequence[Mapping[str, Any]], table: ErrorActionTable, *,
                         variant: str = "compact", planner: RuleBasedPlanner | None = None,
                         max_examples: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """SFT examples ``{"messages": [system, user, assistant]}`` with rule-based target programs.

    Records are RAG results carrying a critique under ``critic``, ``critic_target`` (D_Error^QA)
    or ``target`` (critic SFT samples, JSON text); records judged Correct or without a critique
    are skipped. With ``max_examples`` the examples are balanced over the plan that answers them
    (round-robin over plan labels, each shuffled with ``seed``), so rare error types are learned
    too; without it they keep input order.
    """
    planner = planner or RuleBasedPlanner(table)
    labelled: list[tuple[str, dict[str, Any]]] = []
    for rec in records:
        fb = critic_feedback(rec)
        if fb["judgement"] != "Error":
            continue
        ctx = PlannerContext.from_record(rec, fb, table)
        program, info = planner.program_for(ctx.critic, ctx.prediction)
        messages = build_planner_messages(ctx, variant=variant)
        labelled.append((info["plan_label"], {"messages": [*messages, {"role": "assistant", "content": program}]}))
    if max_examples is None:
        return [ex for _, ex in labelled]
    rng = random.Random(seed)
    groups: dict[str, list[dict[str, Any]]] = {}
    for label, ex in labelled:
        groups.setdefault(label, []).append(ex)
    ordered = [groups[k] for k in sorted(groups)]
    for g in ordered:
        rng.shuffle(g)
    out: list[dict[str, Any]] = []
    for i in range(max(map(len, ordered), default=0)):
        out.extend(g[i] for g in ordered if i < len(g))
    return out[:max_examples]
