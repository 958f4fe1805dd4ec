"""setup_stage, the opening every stage notebook shares, and setup_method, the one the method
stages 09-13 build on it: on tiny standard-RAG outputs written to a temporary data folder and a
stand-in generator and retriever (no model is loaded)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ragcritic_lib import paths, runtime
from ragcritic_lib.baselines.harness import shared_test_sets
from ragcritic_lib.baselines.stage_setup import MethodSetup, setup_method
from ragcritic_lib.io import write_jsonl
from ragcritic_lib.llm import GenParams
from ragcritic_lib.pipeline.deps import import_closure
from ragcritic_lib.pipeline.setup import StageSetup, setup_stage
from ragcritic_lib.pipeline.stage_models import ModelStageSetup
from ragcritic_lib.pipeline.stage_models import setup_stage as model_setup_stage
from ragcritic_lib.retrieval.rag import answer_gen_params

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
STAGES = {"09_self_refine": "self_refine", "10_crag": "crag", "11_simrag": "simrag", "12_repair": "repair",
          "13_ragec": "ragec"}


def _params(datasets: str = "beta, alpha", n: int = 3) -> dict:
    return {
        "common": {"seed": 13, "datasets": {"alpha": {}, "beta": {}, "gamma": {}}},
        "retrieval_rag": {"max_new_tokens": 21, "top_k": 3, "prompt_variant": "prefill", "max_passage_words": 80},
        "comparison": {"datasets": datasets, "test_questions": n},
    }


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "DATA_DIR", tmp_path)
    for ds in ("alpha", "beta"):
        write_jsonl(tmp_path / "retrieval_rag" / ds / "test.jsonl",
                    [{"id": f"{ds}-{i}", "question": f"q{i}?", "prediction": f"a{i}", "f1": 0.5} for i in range(5)])
    return tmp_path


@pytest.fixture()
def generator(monkeypatch):
    loaded = []

    def fake_load_generator(params, **overrides):
        loaded.append((copy.deepcopy(params), overrides))
        return "the generator"

    monkeypatch.setattr(runtime, "load_generator", fake_load_generator)
    return loaded


def test_setup_stage_gives_params_paths_and_loads_nothing(data_dir, generator):
    params = {**_params(), "retrieval_rag": {"top_k": 3}}
    setup = setup_stage("retrieval_rag", params)
    assert setup.params is params and setup.section is params["retrieval_rag"] and setup.seed == 13
    assert setup.datasets == ["alpha", "beta", "gamma"]  # common.datasets, in params order
    assert setup.out_dir == data_dir / "retrieval_rag"
    assert not setup_stage("correction", params).out_dir.exists()  # named, not created
    assert setup.stem == "01_retrieval_rag" and setup.metrics_path == paths.METRICS_DIR / "01_retrieval_rag.json"
    # Figures and tables folders where dvc.yaml declares them as the stage's outputs.
    assert setup.figures_dir == paths.FIGURES_DIR / "01_retrieval_rag" and setup.tables_dir is None
    both = setup_stage("error_sampling", params)
    assert both.figures_dir == paths.FIGURES_DIR / "02_error_sampling"
    assert both.tables_dir == paths.TABLES_DIR / "02_error_sampling"
    assert setup_stage("assets", params).figures_dir is None
    assert generator == [], "no model is loaded before it is used"


def test_setup_stage_loads_the_generator_once_on_first_use(data_dir, generator):
    params = _params()
    setup = model_setup_stage("correction", params)
    assert isinstance(setup, ModelStageSetup) and setup.out_dir == data_dir / "correction"
    assert "not loaded" in repr(setup) and generator == []
    assert setup.llm == "the generator" and setup.llm == "the generator"
    assert generator == [(params, {})] and "generator loaded" in repr(setup)


def test_setup_stage_retrievers_on_demand(data_dir, generator, monkeypatch):
    calls = []
    monkeypatch.setattr(runtime, "load_retriever", lambda params, ds, **kw: calls.append((ds, kw)) or f"r-{ds}")
    setup = model_setup_stage("crag", _params())
    assert calls == []
    assert setup.retriever("beta", kind="bm25", rerank=False) == "r-beta"
    assert setup.load_retrievers() == {"alpha": "r-alpha", "beta": "r-beta", "gamma": "r-gamma"}
    assert calls == [("beta", {"kind": "bm25", "rerank": False}), ("alpha", {}), ("beta", {}), ("gamma", {})]
    assert generator == []


def test_a_stage_without_models_does_not_run_through_the_model_code():
    assert not hasattr(setup_stage("testbed", _params()), "llm")
    closure = import_closure(Path(paths.ROOT) / "ragcritic_lib/pipeline/setup.py")
    assert not {"ragcritic_lib/runtime.py", "ragcritic_lib/llm/__init__.py", "ragcritic_lib/retrieval/__init__.py"} & closure
    for stem in ("00_assets", "00_testbed", "14_comparison", "15_analysis"):
        assert "ragcritic_lib/runtime.py" not in import_closure(NOTEBOOKS / f"{stem}.py"), stem


def test_model_setup_errors_name_the_function_that_checks():
    with pytest.raises(ValueError, match="setup_stage: stage must be a stage name"):
        model_setup_stage("a/b", _params())


def test_setup_stage_reads_params_yaml_by_default(monkeypatch):
    import ragcritic_lib.pipeline.params as params_module

    monkeypatch.setattr(params_module, "load_params", lambda: _params("alpha", 2))
    assert setup_stage("analysis").params == _params("alpha", 2)


def test_setup_stage_errors():
    for bad in ("", "  ", "a/b", None, 3):
        with pytest.raises(ValueError, match="setup_stage: stage must be a stage name"):
            setup_stage(bad, _params())
    setup = setup_stage("no_such_stage", _params())
    with pytest.raises(KeyError, match="no section 'no_such_stage'"):
        setup.section  # noqa: B018
    with pytest.raises(KeyError, match="no notebook NN_no_such_stage.py"):
        setup.metrics_path  # noqa: B018


def test_setup_method_loads_what_the_notebooks_loaded(data_dir, generator):
    params = _params()
    setup = setup_method("crag", params)
    assert isinstance(setup, MethodSetup) and isinstance(setup, ModelStageSetup) and isinstance(setup, StageSetup)
    assert setup.params is params and setup.rag is params["retrieval_rag"] and setup.seed == 13
    # The answer setting of item "one answer-generation setting": the default variant's.
    assert setup.gen == answer_gen_params("default", 21)
    assert setup.gen == GenParams(max_new_tokens=21, stop=("\nQuestion:", "\n\n\n", "<|im_end|>"))
    # Final answers: standard RAG's variant and its answer setting (prefill: one line).
    assert setup.variant == "prefill" and setup.answer_gen == answer_gen_params("prefill", 21)
    assert setup.answer_gen == GenParams(max_new_tokens=21, stop=("\n",))
    # The generator, loaded once from the params as runtime.load_generator(params).
    assert setup.llm == "the generator" and generator == [(params, {})]
    # The same questions in the same order as shared_test_sets: comparison.datasets order, first N.
    assert setup.test == shared_test_sets(params)
    assert setup.datasets == ["beta", "alpha"]
    assert [r["id"] for r in setup.test["beta"]] == ["beta-0", "beta-1", "beta-2"]
    assert all(r["dataset"] == ds for ds, recs in setup.test.items() for r in recs)
    assert setup.out_dir == data_dir / "crag"


def test_setup_method_reads_params_yaml_by_default(data_dir, generator, monkeypatch):
    import ragcritic_lib.pipeline.params as params_module

    monkeypatch.setattr(params_module, "load_params", lambda: _params("alpha", 2))
    setup = setup_method("repair")
    assert setup.datasets == ["alpha"] and len(setup.test["alpha"]) == 2 and setup.stage == "repair"


def test_load_retrievers_gives_standard_rags_retriever_per_dataset(data_dir, generator, monkeypatch):
    calls = []
    monkeypatch.setattr(runtime, "load_retriever", lambda params, ds, **kw: calls.append((ds, kw)) or f"r-{ds}")
    setup = setup_method("simrag", _params())
    assert setup.load_retrievers() == {"beta": "r-beta", "alpha": "r-alpha"}
    assert calls == [("beta", {}), ("alpha", {})]


def test_setup_method_errors(data_dir, generator):
    with pytest.raises(KeyError, match="delta"):
        setup_method("crag", _params("alpha, delta"))
    for bad in ("", "  ", "a/b", None):
        with pytest.raises(ValueError, match="stage"):
            setup_method(bad, _params())
    with pytest.raises(FileNotFoundError):
        setup_method("crag", _params("gamma"))  # no standard-RAG answers for it


@pytest.mark.parametrize("stem", sorted(STAGES))
def test_method_notebooks_open_with_setup_method(stem):
    source = (NOTEBOOKS / f"{stem}.py").read_text(encoding="utf-8")
    assert f'setup_method("{STAGES[stem]}")' in source
    for hand_built in ("runtime.load_generator(", "shared_test_sets(", "GenParams(", "load_params()"):
        assert hand_built not in source, (stem, hand_built)


def test_self_refine_answers_with_standard_rags_variant():
    # Its final answers use standard RAG's prompt variant and its answer setting.
    source = (NOTEBOOKS / "09_self_refine.py").read_text(encoding="utf-8")
    assert "setup.answer_gen" in source and "setup.variant" in source


def test_simrag_answers_with_standard_rags_variant():
    # The SIM-RAG notebook takes its loop settings from simrag.loop_settings(setup, ...), which
    # passes standard RAG's answer setting, prompt variant and passage length on.
    import types

    from ragcritic_lib.baselines import simrag
    from ragcritic_lib.llm.base import GenParams

    source = (NOTEBOOKS / "11_simrag.py").read_text(encoding="utf-8")
    assert "simrag.loop_settings(setup," in source
    answer_gen = GenParams(max_new_tokens=17)
    setup = types.SimpleNamespace(gen=GenParams(max_new_tokens=99), answer_gen=answer_gen,
                                  variant="short", rag={"max_passage_words": 33})
    kw = simrag.loop_settings(setup, max_turns=2, docs_per_turn=1, initial_docs=3)
    assert kw["answer_params"] is answer_gen and kw["rag_variant"] == "short"
    assert kw["max_passage_words"] == 33 and kw["gen_params"].max_new_tokens == 99
    assert kw["query_params"].max_new_tokens == 24 and kw["query_params"].stop == ("\n",)


@pytest.mark.parametrize("stem", ["08_correction", "08_planner_data", "12_repair"])
def test_correction_actions_answer_with_standard_rags_settings(stem):
    # RAG-Critic's two stages and RePAIR build their actions with workflow.correction_actions (its
    # own test checks the answer setting it derives), none with an ActionSet of its own, so the
    # planner learns from the actions it is used with and RePAIR's plans run on them too; here,
    # also that they hand it standard RAG's settings.
    import ast

    source = (NOTEBOOKS / f"{stem}.py").read_text(encoding="utf-8")
    assert "ActionSet(" not in source, stem
    tree = ast.parse(source)
    assigned = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                names = t.elts if isinstance(t, ast.Tuple) else [t]
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value] * len(names)
                assigned.update({n.id: ast.unparse(v) for n, v in zip(names, values) if isinstance(n, ast.Name)})
    rags = [ast.unparse(kw.value) for call in ast.walk(tree) if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name) and call.func.id == "correction_actions"
            for kw in call.keywords if kw.arg == "rag"]
    assert rags, stem
    standard = ('params["retrieval_rag"]', "setup.rag")  # MethodSetup.rag is params["retrieval_rag"]
    assert all(assigned.get(r, r).replace("'", '"') in standard for r in rags), (stem, rags)
