"""One judge of a right answer: every consumer reads `is_correct` at the configured setting.

The judge is `error_sampling.judge_metric` at `judge_threshold`, read by
`ragcritic_lib.mining.sampling.is_correct`. These tests check that no module decides right and
wrong for itself (no direct call of the truth judge outside it, no fallback to exact match in the
baselines) and that docs/method.md's table of consumers names every module that reads it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ragcritic_lib.baselines import is_wrong, judge_params, mark_correct
from ragcritic_lib.mining.sampling import is_correct, judge_answer

ROOT = Path(__file__).resolve().parents[1]
JUDGE_CALLS = {"is_correct", "judge_answer", "judge_records", "mark_correct", "is_wrong", "make_match_fn"}
TRUTH_CALLS = {"truth_score", "truth_correct"}
# The judge itself: the truth rules, and is_correct / judge_answer / judge_records beside them.
JUDGE_HOME = {"ragcritic_lib/evaluation/truth.py", "ragcritic_lib/mining/sampling.py"}
# Definitions and re-exports, not readers of a setting.
NOT_CONSUMERS = JUDGE_HOME | {"ragcritic_lib/baselines/__init__.py", "ragcritic_lib/mining/__init__.py"}


def _called_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Call):
            fn = node.func
            names.add(fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", ""))
    return names


def _sources() -> dict[str, set[str]]:
    files = sorted((ROOT / "ragcritic_lib").rglob("*.py")) + sorted((ROOT / "notebooks").glob("*.py"))
    return {str(p.relative_to(ROOT)): _called_names(p) for p in files}


def test_no_module_outside_the_judge_calls_the_truth_rules_directly():
    direct = {path for path, names in _sources().items() if names & TRUTH_CALLS}
    assert direct <= JUDGE_HOME, f"call is_correct / judge_answer instead of the truth rules in {sorted(direct - JUDGE_HOME)}"


def test_method_md_names_every_library_consumer_of_the_judge():
    table = (ROOT / "docs" / "method.md").read_text(encoding="utf-8")
    section = table[table.index("## The judge of `correct` and who reads it"):table.index("## The correction ladder")]
    consumers = {path for path, names in _sources().items()
                 if names & JUDGE_CALLS and path.startswith("ragcritic_lib/") and path not in NOT_CONSUMERS}
    assert consumers, "the scan found no consumer at all: the test would pass vacuously"
    dotted = {p: p[:-3].replace("/", ".") for p in consumers}
    missing = sorted(p for p, d in dotted.items() if f"`{d}`" not in section)
    assert not missing, f"docs/method.md's table of judge consumers lacks {missing}"


def test_is_wrong_reads_the_judged_flag_and_never_falls_back_to_exact_match():
    record = {"id": "q7", "question": "Which river?", "golden_answers": ["the Danube"], "prediction": "Danube",
              "metadata": {}, "em": 0.0, "f1": 0.8}
    with pytest.raises(ValueError, match="record 'q7' has no judged 'correct' flag"):
        is_wrong(record)
    (judged,) = mark_correct([record], metric="truth", threshold=0.5)
    assert judged["correct"] is True and not is_wrong(judged) and "correct" not in record  # em 0 but right
    (strict,) = mark_correct([record], metric="em", threshold=1.0)
    assert is_wrong(strict)


def test_judge_answer_ignores_the_scores_a_record_carries_for_its_own_answer():
    record = {"question": "Which river?", "golden_answers": ["Danube"], "prediction": "Danube", "metadata": {},
              "em": 1.0, "f1": 1.0, "acc": 1.0}
    assert is_correct(record, metric="f1", threshold=0.5)
    assert not judge_answer(record, "the Rhine", metric="f1", threshold=0.5)
    assert not judge_answer(record, "the Rhine", metric="truth", threshold=0.5)
    assert judge_answer(record, "It is the Danube.", metric="truth", threshold=0.5)


def test_judge_params_name_the_missing_key():
    assert judge_params({"error_sampling": {"judge_metric": "truth", "judge_threshold": 0.5}}) == {
        "metric": "truth", "threshold": 0.5}
    with pytest.raises(KeyError, match="error_sampling.judge_threshold is missing"):
        judge_params({"error_sampling": {"judge_metric": "truth"}})


def test_the_shipped_params_judge_every_consumer_by_truth():
    from ragcritic_lib.pipeline.params import load_params

    params = load_params()
    assert judge_params(params)["metric"] == "truth"
    assert params["simrag"]["match"] == "judge"
