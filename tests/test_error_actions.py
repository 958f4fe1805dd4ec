"""The error-action mapping table (Table 11): the shipped file and its validation errors."""

from __future__ import annotations

import copy

import pytest
import yaml

from ragcritic_lib.agent.actions import action_stubs
from ragcritic_lib.agent.executor import run_program
from ragcritic_lib.agent.planner import DEFAULT_ERROR_ACTIONS_FILE, RuleBasedPlanner, load_error_actions
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.mining.taxonomy import load_taxonomy


@pytest.fixture(scope="module")
def taxonomy():
    return load_taxonomy()


@pytest.fixture(scope="module")
def raw():
    return yaml.safe_load(DEFAULT_ERROR_ACTIONS_FILE.read_text(encoding="utf-8"))


def test_shipped_table_covers_taxonomy_and_table12(taxonomy):
    table = load_error_actions(DEFAULT_ERROR_ACTIONS_FILE, taxonomy)
    assert list(table.tier1) == taxonomy.tier1
    assert set(table.tier2) <= set(taxonomy.tier2)
    assert len(table.sub_actions) == 15
    by_fn: dict[str, set] = {}
    for sub in table.sub_actions.values():
        by_fn.setdefault(sub.function, set()).add(sub.instruction)
    assert by_fn["RewriteQuery"] == {"expand", "refine", "summarize", "clarify"}
    assert by_fn["RefineDoc"] == {"explain", "refine", "correct", "delete", "exemplify", "summarize"}
    # every sub-action is recommended somewhere except the ones Table 11 never names
    used = {s for rule in [*table.tier1.values(), *table.tier2.values()] for s in rule.sub_actions}
    assert set(table.sub_actions) - used == {"rewrite_refine", "rewrite_summarize"}
    assert table.default_tier1 == "Incomplete Information"
    assert table.rule("Incomplete Response") is table.tier1["Incomplete or Missing Response"]
    assert table.rule("Golden Answer Misalignment") is None  # alias of a tier-2 label without an entry
    assert table.rule("no such label") is None


def test_every_tier1_program_runs_in_the_executor(taxonomy):
    table = load_error_actions(DEFAULT_ERROR_ACTIONS_FILE, taxonomy)
    planner = RuleBasedPlanner(table)
    for label in [*taxonomy.tier1, *table.tier2]:
        program, info = planner.program_for({"judgement": "Error", "tag1": [label] if label in taxonomy.tier1 else [],
                                             "tag2": [label] if label in taxonomy.tier2 else []})
        res = run_program(program, action_stubs(), variables={"question": "q", "docs": ["a", "b"], "prediction": "p"})
        assert res.final_answer == "", label
        assert res.trace[-1]["call"] == "GenerateAnswer", label


def write(tmp_path, raw) -> str:
    path = tmp_path / "error_actions.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return str(path)


def broken(raw, edit):
    data = copy.deepcopy(raw)
    edit(data)
    return data


CASES = [
    ("unknown tier-1 label",
     lambda d: d["tier1"].__setitem__("Bad Vibes", d["tier1"]["Overly Verbose Response"]),
     "tier1 -> 'Bad Vibes': unknown tier-1 label"),
    ("alias instead of canonical name",
     lambda d: d["tier1"].__setitem__("Verbose Response", d["tier1"].pop("Overly Verbose Response")),
     "tier1 -> 'Verbose Response': use the canonical spelling 'Overly Verbose Response'"),
    ("missing tier-1 entry",
     lambda d: d["tier1"].pop("Erroneous Information"),
     "tier1: no entry for tier-1 label(s) ['Erroneous Information']"),
    ("tier-1 name used as tier-2",
     lambda d: d["tier2"].__setitem__("Incomplete Information", {"answer_instruction": "x"}),
     "tier2 -> 'Incomplete Information': unknown tier-2 label"),
    ("unknown sub-action",
     lambda d: d["tier1"]["Incomplete Information"]["sub_actions"].append("teleport"),
     "tier1 -> 'Incomplete Information' -> sub_actions: unknown sub-action 'teleport'"),
    ("plan the executor rejects",
     lambda d: d["tier1"]["Overly Verbose Response"]["plan"].insert(0, "import os"),
     "tier1 -> 'Overly Verbose Response' -> plan: plan rejected by the executor (import:"),
    ("unknown placeholder",
     lambda d: d["tier2"]["Relevance Gaps in Retrieval"]["plan"].__setitem__(1, "new_docs = Retrieval(query=question, topk=${depth})"),
     "tier2 -> 'Relevance Gaps in Retrieval' -> plan: unknown or malformed placeholder 'depth'"),
    ("plan without new_docs",
     lambda d: d["tier1"]["Overly Verbose Response"]["plan"].__setitem__(0, "docs2 = docs"),
     "plan: plan rejected by the executor (unknown_name:"),
    ("sub-action not called by the plan",
     lambda d: d["tier1"]["Overly Verbose Response"]["sub_actions"].append("decompose_query"),
     "sub-action 'decompose_query' needs DecomposeQuery() but the plan does not call it"),
    ("Table 12 coverage",
     lambda d: d["sub_actions"].pop("rewrite_summarize"),
     "sub_actions: Table 12 has 4 distinct RewriteQuery sub-actions, found 3"),
    ("bad refine instruction",
     lambda d: d["sub_actions"]["doc_delete"].__setitem__("instruction", "shred"),
     "sub_actions -> 'doc_delete': instruction must be one of"),
    ("unknown top-level key",
     lambda d: d.__setitem__("tier3", {}),
     "top level: unknown key 'tier3'"),
    ("tier-1 entry without instruction",
     lambda d: d["tier1"]["Overly Verbose Response"].pop("answer_instruction"),
     "tier1 -> 'Overly Verbose Response': a tier-1 entry needs a plan and an answer_instruction"),
    ("unknown answer strategy",
     lambda d: d["tier1"]["Erroneous Information"].__setitem__("answer_strategy", "pray"),
     "tier1 -> 'Erroneous Information' -> answer_strategy: unknown strategy 'pray'"),
    ("bad default label",
     lambda d: d["defaults"].__setitem__("default_tier1", "Nope"),
     "defaults -> default_tier1: unknown tier-1 label 'Nope'"),
]


@pytest.mark.parametrize("name, edit, message", CASES, ids=[c[0] for c in CASES])
def test_validation_errors_name_file_and_key(tmp_path, taxonomy, raw, name, edit, message):
    path = write(tmp_path, broken(raw, edit))
    with pytest.raises(DataFormatError) as info:
        load_error_actions(path, taxonomy)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_plan_without_new_docs_assignment(tmp_path, taxonomy, raw):
    def edit(d):
        d["tier1"]["Overly Verbose Response"]["plan"] = ["docs2 = docs", "new_list = docs2"]
        d["final_step"] = "final_answer = GenerateAnswer(query=question, docs=docs, additional_instruction=${instruction})"
    path = write(tmp_path, broken(raw, edit))
    with pytest.raises(DataFormatError, match="'Overly Verbose Response' -> plan: plan must assign new_docs"):
        load_error_actions(path, taxonomy)


def test_malformed_yaml_names_the_line(tmp_path, taxonomy):
    path = tmp_path / "error_actions.yaml"
    path.write_text("tier1:\n  - [unclosed\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"error_actions.yaml:\d+: invalid YAML"):
        load_error_actions(path, taxonomy)
