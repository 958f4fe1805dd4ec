"""Every stage's metrics file against its typed schema: the committed files validate, broken
copies are rejected with the key path in the message, and a rejected write leaves no file."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from ragcritic_lib.pipeline import metrics_schema as ms
from ragcritic_lib import paths
from ragcritic_lib.pipeline import stage_metrics
from ragcritic_lib.io import read_json, write_json
from ragcritic_lib.pipeline.params import notebook_paths

REAL_METRICS = paths.METRICS_DIR  # the committed files (some tests point METRICS_DIR elsewhere)
COMMITTED = sorted(REAL_METRICS.glob("*.json"))
ENV = {"python": "3.11.7", "generator": {"backend": "served", "device": "cpu", "dtype": "auto"}}


def committed(stem: str) -> dict:
    return json.loads((REAL_METRICS / f"{stem}.json").read_text(encoding="utf-8"))


@pytest.fixture()
def tmp_metrics(tmp_path, monkeypatch):
    """METRICS_DIR and DATA_DIR in tmp_path, and a fixed environment block (no model imports)."""
    monkeypatch.setattr(paths, "METRICS_DIR", tmp_path / "reports" / "metrics")
    monkeypatch.setattr(paths, "DATA_DIR", tmp_path / "data")
    monkeypatch.setattr(stage_metrics, "environment", lambda generator=None: copy.deepcopy(ENV))
    return paths.METRICS_DIR


# --------------------------------------------------------------------------------------------
# Coverage and the committed files
# --------------------------------------------------------------------------------------------
def test_every_notebook_and_every_committed_file_has_a_schema():
    stems = {nb.stem for nb in notebook_paths().values()} | {p.stem for p in COMMITTED}
    assert stems and stems <= set(ms.SCHEMAS), sorted(stems - set(ms.SCHEMAS))
    assert all(ms.schema_for(stem) is not ms.StageMetrics for stem in stems)


@pytest.mark.parametrize("path", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_committed_metrics_validate(path):
    assert ms.problems(path.stem, read_json(path)) == []
    assert stage_metrics.load_stage_metrics(path.stem) == read_json(path)


def test_the_contracts_of_notebooks_08_and_14():
    """The keys the README and issues quote: ladder rows, the ladder's MDE, the comparison rows."""
    assert ms.LadderRow.__required_keys__ == {"n", "em", "f1", "acc", "delta_f1", "ci_low", "ci_high", "p_value"}
    assert ms.MethodComparison.__required_keys__ == {"n", "em", "f1", "acc", "delta_f1", "ci_low", "ci_high",
                                                     "p_holm", "calls_per_question"}
    assert {"ladder", "degenerate"} <= ms.CorrectionMetrics.__required_keys__
    assert {"comparison", "degenerate"} <= ms.ComparisonMetrics.__required_keys__
    m08, m14 = committed("08_correction"), committed("14_comparison")
    assert m08["ladder"]["testbed"]["fixed action"].keys() >= ms.LadderRow.__required_keys__
    assert isinstance(m08["ladder"]["testbed_mde_f1"], float)
    assert all(row.keys() >= ms.MethodComparison.__required_keys__ for row in m14["comparison"]["testbed"].values())


# --------------------------------------------------------------------------------------------
# Broken copies
# --------------------------------------------------------------------------------------------
def _set(path, value):
    def mutate(data):
        *head, last = path
        for k in head:
            data = data[k]
        if value is KeyError:
            del data[last]
        else:
            data[last] = value
    return mutate


def _set_many(prefix, **values):
    """Set several keys of one row, so a message quoting all of them does not depend on the run."""
    def mutate(data):
        for k in prefix:
            data = data[k]
        data.update(values)
    return mutate


LADDER_ROW = ("ladder", "testbed", "fixed action")
CRAG = ("comparison", "testbed", "CRAG")
ANSWERABLE_CRAG = ("answerability", "testbed", "answerable", "rows", "CRAG")
BROKEN = [
    # (stem, mutation, text the message must contain)
    ("08_correction", _set(LADDER_ROW + ("f1",), KeyError), "ladder.testbed.fixed action.f1 is missing"),
    ("08_correction", _set(("ladder", "testbed_mde_f1"), KeyError), "ladder.testbed_mde_f1 is missing"),
    ("08_correction", _set(("degenerate",), KeyError), "degenerate is missing"),
    ("08_correction", _set(LADDER_ROW + ("f1",), 1.3), "ladder.testbed.fixed action.f1 = 1.3 is not in [0, 1]"),
    ("08_correction", _set(LADDER_ROW + ("p_value",), -0.5), "ladder.testbed.fixed action.p_value = -0.5 is not in [0, 1]"),
    ("08_correction", _set(LADDER_ROW + ("n",), 140.5), "ladder.testbed.fixed action.n = 140.5 is not an integer"),
    ("08_correction", _set_many(LADDER_ROW, ci_low=0.5, delta_f1=-0.01, ci_high=0.02),
     "ladder.testbed.fixed action: ci_low = 0.5, delta_f1 = -0.01, ci_high = 0.02 are not ordered"),
    ("08_correction", _set_many(LADDER_ROW, ci_low=-0.043, delta_f1=-0.01, ci_high=-0.2),
     "ladder.testbed.fixed action: ci_low = -0.043"),
    ("08_correction", _set(("degenerate",), "planner:testbed/RAG-Critic"),
     "degenerate = 'planner:testbed/RAG-Critic' is not a list"),
    ("08_correction", _set(("comparison", "testbed", "standard RAG", "em"), float("nan")),
     "comparison.testbed.standard RAG.em = nan is not a finite number"),
    ("14_comparison", _set(CRAG + ("p_holm",), KeyError), "comparison.testbed.CRAG.p_holm is missing"),
    ("14_comparison", _set(CRAG + ("calls_per_question",), KeyError), "comparison.testbed.CRAG.calls_per_question is missing"),
    ("14_comparison", _set(CRAG + ("f1",), 21.9), "comparison.testbed.CRAG.f1 = 21.9 is not in [0, 1]"),
    ("14_comparison", _set(ANSWERABLE_CRAG + ("share_f1",), 1.5),
     "answerability.testbed.answerable.rows.CRAG.share_f1 = 1.5 is not in [-1, 1]"),
    ("14_comparison", _set(("answerability", "testbed", "answerable", "n"), KeyError),
     "answerability.testbed.answerable.n is missing"),
    ("14_comparison", _set_many(ANSWERABLE_CRAG, ci_low=0.2, delta_f1=-0.06, ci_high=0.3),
     "answerability.testbed.answerable.rows.CRAG: ci_low = 0.2, delta_f1 = -0.06, ci_high = 0.3 are not ordered"),
    ("14_comparison", _set_many(CRAG, ci_low=-0.076, delta_f1=-0.0168, ci_high=-0.5),
     "comparison.testbed.CRAG: ci_low = -0.076, delta_f1 = -0.0168, ci_high = -0.5 are not ordered (ci_low <= delta_f1 <= ci_high)"),
    ("14_comparison", _set(("degenerate",), {"CRAG": []}), "degenerate = {'CRAG': []} is not a list"),
    ("14_comparison", _set(("degenerate", 0), 3), "degenerate[0] = 3 is not a string"),
    ("14_comparison", _set(("rows", 0, "n"), -1), "rows[0].n = -1 is not >= 0"),
    ("14_comparison", _set_many(("rows", 0), f1_low=0.9, f1=0.2358), "rows[0]: f1_low = 0.9, f1 = 0.2358"),
    # A schema used in two places is checked in both (pydantic shares one definition between them).
    ("14_comparison", _set_many(("oracle_and_ablation_rows", "testbed", "SIM-RAG (oracle critic)"),
                                ci_low=0.007, delta_f1=0.0482, ci_high=-0.5),
     ("oracle_and_ablation_rows.testbed.SIM-RAG (oracle critic): ci_low = 0.007, delta_f1 = 0.0482, "
      "ci_high = -0.5 are not ordered (ci_low <= delta_f1 <= ci_high)")),
    ("08_correction", _set_many(("ladder", "testbed_by_type", "summary", "RAG-Critic (1 iter)"),
                                ci_low=0.9, delta_f1=0.0, ci_high=0.0),
     "ladder.testbed_by_type.summary.RAG-Critic (1 iter): ci_low = 0.9, delta_f1 = 0.0, ci_high = 0.0 are not ordered"),
    ("08_correction", _set(("ladder", "testbed_mde_f1"), -0.1), "ladder.testbed_mde_f1 = -0.1 is not >= 0"),
    ("08_correction", _set(("planner_training", "device"), 3), "planner_training.device = 3 is not a string"),
    ("05_critic_sft", _set(("verdict_calibration", "fitted"), 1), "verdict_calibration.fitted = 1 is not true or false"),
    ("15_analysis", _set(("missing",), {"a": 1}), "missing = {'a': 1} is not a list"),
    ("15_analysis", _set(("missing", 0), "x"), "missing[0] = 'x' is not an object"),
    ("01_retrieval_rag", _set(("rag", "testbed", "test", "f1"), "0.2"), "rag.testbed.test.f1 = '0.2' is not a number"),
    ("07_benchmark", _set(("critics", "heuristic", "identification"), KeyError), "critics.heuristic.identification is missing"),
    ("09_self_refine", _set(("scores", "testbed", "f1"), 16.35), "scores.testbed.f1 = 16.35 is not in [0, 1]"),
    ("11_simrag", _set(("heldout_confusion", "wrong_reject"), KeyError), "heldout_confusion.wrong_reject is missing"),
    ("11_simrag", _set(("practice", "balanced_train"), 2.5), "practice.balanced_train = 2.5 is not an integer"),
    ("05_critic_sft", _set(("train", "seconds"), -3.0), "train.seconds = -3.0 is not >= 0"),
    ("06_critic_dpo", _set(("train", "seconds"), "12s"), "train.seconds = '12s' is not a number"),
    ("08_correction", _set(("planner_training", "seconds"), -1), "planner_training.seconds = -1 is not >= 0"),
    ("14_comparison", _set(("rag_critic_training", "seconds"), -1.0), "rag_critic_training.seconds = -1.0 is not >= 0"),
    ("12_repair", _set(("action_calls", "Retrieval"), -1), "action_calls.Retrieval = -1 is not >= 0"),
    ("12_repair", _set(("action_calls",), KeyError), "action_calls is missing"),
    ("08_correction", _set(("program_calls", "testbed", "RAG-Critic", "RefineDoc"), 2.5),
     "program_calls.testbed.RAG-Critic.RefineDoc = 2.5 is not an integer"),
    ("13_ragec", _set(("mode_frequency", "1"), True), "mode_frequency.1 = True is not a number"),
    ("15_analysis", _set(("missing", 0, "reason"), KeyError), "missing[0].reason is missing"),
]


@pytest.mark.parametrize(("stem", "mutate", "text"), BROKEN, ids=[f"{s}:{t[:40]}" for s, _, t in BROKEN])
def test_broken_copies_are_rejected_with_the_key_path(stem, mutate, text):
    data = committed(stem)
    mutate(data)
    with pytest.raises(ms.MetricsSchemaError) as err:
        ms.validate(stem, data)
    assert f"reports/metrics/{stem}.json: {text}" in str(err.value)
    assert err.value.source == f"reports/metrics/{stem}.json" and len(err.value.problems) == 1


def test_the_message_is_one_line_per_problem():
    data = committed("08_correction")
    data["ladder"]["testbed"]["fixed action"]["f1"] = 1.3
    with pytest.raises(ms.MetricsSchemaError) as err:
        ms.validate("08_correction", data)
    assert str(err.value) == "reports/metrics/08_correction.json: ladder.testbed.fixed action.f1 = 1.3 is not in [0, 1]"
    del data["degenerate"]
    data["ladder"]["trivia"]["standard RAG"]["acc"] = -1
    with pytest.raises(ms.MetricsSchemaError) as err:
        ms.validate("08_correction", data)
    assert str(err.value).splitlines() == [
        "reports/metrics/08_correction.json: ladder.testbed.fixed action.f1 = 1.3 is not in [0, 1]",
        "reports/metrics/08_correction.json: ladder.trivia.standard RAG.acc = -1 is not in [0, 1]",
        "reports/metrics/08_correction.json: degenerate is missing"]


def test_null_is_allowed_only_where_the_schema_says_so():
    data = committed("14_comparison")
    data["comparison"]["testbed"]["CRAG"].update(p_holm=None, calls_per_question=None, mde=float("nan"))
    assert ms.problems("14_comparison", data) == []
    data["comparison"]["testbed"]["CRAG"]["f1"] = None
    assert ms.problems("14_comparison", data) == ["comparison.testbed.CRAG.f1 is null (a value is required)"]


def test_extra_keys_are_allowed_and_partial_allows_absent_keys():
    data = committed("14_comparison")
    data["new_block"] = {"anything": [1, "two"]}
    data["comparison"]["testbed"]["CRAG"]["new_field"] = "x"
    assert ms.problems("14_comparison", data) == []
    del data["rows"], data["comparison"]["testbed"]["CRAG"]["p_holm"]
    assert len(ms.problems("14_comparison", data)) == 2
    assert ms.problems("14_comparison", data, partial=True) == []
    data["comparison"]["testbed"]["CRAG"]["f1"] = 2.0  # present values are still checked
    assert ms.problems("14_comparison", data, partial=True) == ["comparison.testbed.CRAG.f1 = 2.0 is not in [0, 1]"]


def test_an_unordered_interval_is_reported_beside_the_row_s_other_problems():
    data = committed("14_comparison")
    data["comparison"]["testbed"]["CRAG"].update(ci_low=0.5, f1="high")
    found = ms.problems("14_comparison", data)
    assert found[0] == "comparison.testbed.CRAG.f1 = 'high' is not a number"
    assert found[1].startswith("comparison.testbed.CRAG: ci_low = 0.5, delta_f1 = ") and len(found) == 2


def test_values_in_their_python_shapes_before_writing():
    """Tuples for lists, int keys, numpy floats: what json.dumps writes as the JSON the schema reads."""
    np = pytest.importorskip("numpy")
    data = committed("14_comparison")
    data["degenerate"] = ("a", "b")
    data["rows"] = tuple(data["rows"])
    data["stage_seconds"] = {1: {"test": np.float64(2.5)}}
    assert ms.problems("14_comparison", data) == []
    data["stage_seconds"][1]["test"] = np.int64(2)  # not an int: json.dumps would refuse it
    assert ms.problems("14_comparison", data) == ["stage_seconds.1.test = np.int64(2) is not a number"]


def test_a_stem_without_a_schema_takes_any_keys():
    assert ms.problems("99_x", {"f1": 7, "anything": None}) == []
    assert ms.problems("99_x", {"environment": {"python": 3}}) == [
        "environment.python = 3 is not a string", "environment.generator is missing"]
    assert ms.problems("99_x", [1]) == ["(top level) = [1] is not an object"]


# --------------------------------------------------------------------------------------------
# Writing and reading
# --------------------------------------------------------------------------------------------
def test_a_failed_validation_writes_nothing(tmp_metrics):
    data = committed("08_correction")
    del data["environment"]
    data["ladder"]["testbed"]["fixed action"]["f1"] = 1.3
    target = tmp_metrics / "08_correction.json"
    with pytest.raises(ms.MetricsSchemaError, match=r"08_correction\.json: ladder\.testbed\.fixed action\.f1 = 1\.3 "
                                                    r"is not in \[0, 1\]"):
        stage_metrics.write_stage_metrics("08_correction", data)
    assert not target.exists() and not tmp_metrics.exists()
    # An earlier file stays as it was.
    write_json(target, {"old": True})
    with pytest.raises(ms.MetricsSchemaError):
        stage_metrics.write_stage_metrics("08_correction", data)
    assert read_json(target) == {"old": True}
    assert sorted(p.name for p in tmp_metrics.iterdir()) == ["08_correction.json"]  # no temporary left behind


def test_write_then_load_round_trip(tmp_metrics):
    data = committed("14_comparison")
    del data["environment"]
    out = stage_metrics.write_stage_metrics("14_comparison", data)
    assert out == tmp_metrics / "14_comparison.json"
    # no upstream metrics file in tmp_metrics: nothing read from them is recorded
    assert stage_metrics.load_stage_metrics("14_comparison") == {**data, "environment": {**ENV, "upstream": {}}}


def test_load_names_the_stage_to_run_when_the_file_is_missing(tmp_path, monkeypatch):
    root = tmp_path.resolve()
    shutil.copy(paths.DVC_FILE, root / "dvc.yaml")  # the real pipeline, in a root without its outputs
    monkeypatch.setattr(paths, "ROOT", root)
    monkeypatch.setattr(paths, "DVC_FILE", root / "dvc.yaml")
    monkeypatch.setattr(paths, "METRICS_DIR", root / "reports" / "metrics")
    with pytest.raises(paths.MissingUpstreamError, match=r"08_correction\.json: no such file.*`dvc repro correction`"):
        stage_metrics.load_stage_metrics("08_correction")


def test_load_rejects_a_file_off_its_schema(tmp_metrics):
    data = committed("11_simrag")
    data["heldout_confusion"]["accuracy"] = 80.0
    write_json(tmp_metrics / "11_simrag.json", data)
    with pytest.raises(ms.MetricsSchemaError, match=r"11_simrag\.json: heldout_confusion\.accuracy = 80\.0 is not in"):
        stage_metrics.load_stage_metrics("11_simrag")


def test_partial_load_still_rejects_wrong_values(tmp_metrics):
    write_json(tmp_metrics / "11_simrag.json", {"heldout_confusion": {"accuracy": 80.0}})
    with pytest.raises(ms.MetricsSchemaError, match="heldout_confusion.accuracy = 80.0"):
        stage_metrics.load_stage_metrics("11_simrag", partial=True)
    write_json(tmp_metrics / "11_simrag.json", {"heldout_confusion": {"accuracy": 0.8}})
    assert stage_metrics.load_stage_metrics("11_simrag", partial=True) == {"heldout_confusion": {"accuracy": 0.8}}


# --------------------------------------------------------------------------------------------
# Baseline runs (save_method_run)
# --------------------------------------------------------------------------------------------
def _records():
    return [{"id": str(i), "dataset": "testbed", "golden_answers": ["paris"], "prediction": p}
            for i, p in enumerate(["paris", "rome", "paris"])]


def test_save_method_run_writes_nothing_when_its_metrics_break_the_schema(tmp_metrics):
    from ragcritic_lib.baselines.harness import save_method_run

    with pytest.raises(ms.MetricsSchemaError) as err:
        save_method_run("simrag", "11_simrag", "SIM-RAG", _records(), cost={"calls": 3}, cost_by_dataset={},
                        extra_runs={"oracle": ("SIM-RAG (oracle critic)", _records())},
                        info={"heldout_confusion": {"n": 2, "correct_accept": 1, "correct_reject": 0,
                                                    "wrong_accept": 1, "wrong_reject": 0, "accuracy": 1.5}})
    source = f"{tmp_metrics}/11_simrag.json"
    assert err.value.source == source
    assert str(err.value).splitlines() == [f"{source}: {p}" for p in (
        "heldout_confusion.accuracy = 1.5 is not in [0, 1]", "balanced_train is missing", "practice is missing",
        "practice_examples is missing")]
    assert not tmp_metrics.exists() and not paths.stage_dir("simrag").exists()


def test_save_method_run_then_load_method_run(tmp_metrics):
    from ragcritic_lib.baselines.harness import load_method_run, save_method_run

    metrics = save_method_run("self_refine", "09_self_refine", "Self-Refine", _records(),
                              cost={"calls": 6, "prompt_tokens": 600}, cost_by_dataset={"testbed": {"calls": 6}},
                              degenerate=["self_refine: approved everything"], seconds={"test": 1.234},
                              extra_runs={"oracle": ("Self-Refine (oracle)", _records()[:2])},
                              info={"self_refine": {"approval_rate": 1.0}})
    assert metrics["scores"]["testbed"]["f1"] == pytest.approx(2 / 3)
    loaded, records = load_method_run("09_self_refine", "self_refine")
    assert loaded["runs"] == {"Self-Refine (oracle)": {"file": "data/self_refine/oracle.jsonl",
                                                       "scores": {"testbed": {"em": 0.5, "f1": 0.5, "acc": 0.5}}}}
    assert loaded["seconds"] == {"test": 1.2} and loaded["environment"] == {**ENV, "upstream": {}}
    assert [r["f1"] for r in records] == [1.0, 0.0, 1.0]
    assert len(load_method_run("09_self_refine", "self_refine", run="oracle")[1]) == 2


def test_training_seconds_are_optional_and_may_be_null():
    for stem, block in (("05_critic_sft", "train"), ("06_critic_dpo", "train"), ("08_correction", "planner_training")):
        data = committed(stem)
        data[block].pop("seconds", None)
        assert ms.problems(stem, data) == [], stem  # metrics written before the seconds were recorded
        data[block]["seconds"] = None
        assert ms.problems(stem, data) == [], stem
        data[block]["seconds"] = 812.4
        assert ms.problems(stem, data) == [], stem
