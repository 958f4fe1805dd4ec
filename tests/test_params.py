"""params.yaml value rules, YAML reading errors and the `check` command line (exit code 2)."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ragcritic_lib import paths
from ragcritic_lib.data.flashrag import seeded_split
from ragcritic_lib.io import DataFormatError, read_yaml
from ragcritic_lib.pipeline.params import (
    ParamsError, load_params, notebook_parameters, notebook_paths, params_problems, profile_params, rules,
    validate_params,
)


@pytest.fixture(scope="module")
def params():
    return load_params()


def _bad(params, section, values):
    """A deep copy of params with ``values`` set in the (dotted) section."""
    bad = copy.deepcopy(params)
    target = bad
    for part in section.split("."):
        target = target[part]
    target.update(values)
    return bad


# Each defect of the issue: (section, values, the start of the one problem line expected).
REJECTED = [
    ("retrieval_rag", {"top_k": -3}, "retrieval_rag.top_k: must be >= 1, got -3"),
    ("retrieval_rag", {"eval_questions": 0}, "retrieval_rag.eval_questions: must be >= 1, got 0"),
    ("retrieval_rag", {"recall_ks": "a,b,,"}, "retrieval_rag.recall_ks: empty item in 'a,b,,'"),
    ("retrieval_rag", {"recall_ks": "1,x,5"}, "retrieval_rag.recall_ks: 'x' (not an integer >= 1)"),
    ("retrieval_rag", {"prompt_variant": "nonexistent"},
     "retrieval_rag.prompt_variant: must be one of default | prefill | terse, got 'nonexistent'"),
    ("common.generator", {"dtype": "float128"}, "common.generator.dtype: must be one of auto | float32"),
    ("common.generator", {"device": "tpu9"}, "common.generator.device: must be cpu | cuda | cuda:N | auto, got 'tpu9'"),
    ("common.generator", {"batch_size": -5}, "common.generator.batch_size: must be >= 1, got -5"),
    ("common.datasets.trivia", {"corpus": "data/nowhere/corpus.jsonl"},
     "common.datasets.trivia.corpus: data/nowhere/corpus.jsonl: no such file or folder, and no dvc.yaml stage"),
    ("assets", {"dev_fraction": 0.6, "test_fraction": 0.6},
     "assets.dev_fraction + assets.test_fraction: 0.6 + 0.6 = 1.2, must be < 1"),
    ("testbed", {"frac_dev": 0.5, "frac_test": 0.5}, "testbed.frac_dev + testbed.frac_test: 0.5 + 0.5 = 1, must be < 1"),
    ("critic_data", {"min_correct_share": 1.5}, "critic_data.min_correct_share: must be in [0, 1], got 1.5"),
    ("critic_sft", {"method": "adapters"}, "critic_sft.method: must be one of full | lora | best, got 'adapters'"),
    ("critic_data", {"train_questions": "testbed=many"}, "critic_data.train_questions"),
    ("testbed", {"domains": "finance,,law"}, "testbed.domains: empty item in 'finance,,law'"),
    ("testbed", {"domains": "finance,mars"}, "testbed.domains: 'mars' (not one of finance,law,medical,places,sports)"),
    ("common.retriever", {"kind": "sparse"}, "common.retriever.kind: must be one of bm25 | dense | hybrid, got 'sparse'"),
    ("common.retriever", {"index": "lsh"}, "common.retriever.index: must be one of flat | hnsw | ivf, got 'lsh'"),
    ("common.generator", {"backend": "tgi"}, "common.generator.backend: must be one of hf | openai | vllm, got 'tgi'"),
    ("error_sampling", {"judge_metric": "bleu"}, "error_sampling.judge_metric: must be one of em | f1 | acc | truth, got 'bleu'"),
    ("error_sampling", {"judge_threshold": 1.5}, "error_sampling.judge_threshold: must be in [0, 1], got 1.5"),
    ("error_sampling", {"teacher": "gpt"}, "error_sampling.teacher: must be one of grounded | llm, got 'gpt'"),
    ("error_sampling", {"dataset_questions": "testbed=many"},
     "error_sampling.dataset_questions: 'testbed=many' is not name=N with N an integer >= 0 in 'testbed=many'"),
    ("error_sampling", {"dataset_questions": "testbed=8,nowhere=2"},
     "error_sampling.dataset_questions: 'nowhere' not in common.datasets (testbed, trivia)"),
    ("simrag", {"balance": "smote"}, "simrag.balance: must be one of oversample | downsample, got 'smote'"),
    ("simrag", {"match_threshold": 2.0}, "simrag.match_threshold: must be in [0, 1], got 2.0"),
    ("error_sampling", {"pool_file": "configs/pools/missing.yaml"},
     "error_sampling.pool_file: configs/pools/missing.yaml: no such file or folder"),
    ("error_sampling", {"teacher_config": "configs/teacher_missing.yaml"}, "error_sampling.teacher_config: "),
    ("critic_sft", {"launcher": "slurm"}, "critic_sft.launcher: must be one of inprocess | accelerate, got 'slurm'"),
    ("critic_sft", {"launcher": "accelerate", "accelerate_config": ""},
     "critic_sft.accelerate_config: required when critic_sft.launcher is 'accelerate'"),
    ("critic_sft", {"recipe": "configs/train/missing.yaml"}, "critic_sft.recipe: configs/train/missing.yaml: no such file"),
    ("critic_sft", {"max_steps": 0}, "critic_sft.max_steps: must be -1 (the recipe's) or >= 1, got 0"),
    ("critic_dpo", {"merge_dtype": "int8"}, "critic_dpo.merge_dtype: must be one of float32 | bfloat16 | float16"),
    ("tagging", {"min_tags": 5, "max_tags": 4}, "tagging.min_tags: 5 is above tagging.max_tags (4)"),
    ("benchmark", {"known_causes_file": "data/taxonomy/missing.yaml"}, "benchmark.known_causes_file: data/taxonomy/missing"),
    ("benchmark", {"extra_critic_model": "served-critic", "extra_critic_backend": "openai", "extra_critic_urls": ""},
     "benchmark.extra_critic_urls: required when benchmark.extra_critic_backend is 'openai'"),
    ("benchmark", {"extra_critic_urls": "localhost:8000"}, "benchmark.extra_critic_urls: 'localhost:8000' (not an http(s)"),
    ("correction", {"critic_verdict": "vote"}, "correction.critic_verdict: must be one of generate | calibrated"),
    ("correction", {"verify_corrections": "sometimes"}, "correction.verify_corrections: must be one of never | always | dev_f1"),
    ("correction", {"planner_decoding": "beam"}, "correction.planner_decoding: must be one of free | constrained | scored"),
    ("planner_data", {"launcher": "mpi"}, "planner_data.launcher: must be one of inprocess | accelerate"),
    ("planner_data", {"targets": "luck"}, "planner_data.targets: must be one of outcomes | rule, got 'luck'"),
    ("correction", {"timeout_s": 0.0}, "correction.timeout_s: must be > 0, got 0.0"),
    ("comparison", {"ci_alpha": 1.0}, "comparison.ci_alpha: must be in (0, 1), got 1.0"),
    ("comparison", {"rag_critic_results": "data/correction/{ds}/x.jsonl"},
     "comparison.rag_critic_results: 'data/correction/{ds}/x.jsonl': only the placeholder {dataset} is allowed"),
    ("comparison", {"datasets": "testbed,nowhere"}, "comparison.datasets: 'nowhere' not in common.datasets (testbed, trivia)"),
    ("crag", {"rewriter": "t5"}, "crag.rewriter: must be one of keywords | llm, got 't5'"),
    ("analysis", {"main_metric": "rouge"}, "analysis.main_metric: must be one of em | f1 | acc, got 'rouge'"),
]


@pytest.mark.parametrize(("section", "values", "expected"), REJECTED, ids=[r[2].split(":")[0] for r in REJECTED])
def test_each_bad_value_is_one_problem_naming_its_key(params, section, values, expected):
    problems = params_problems(_bad(params, section, values))
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems[0]


def test_all_problems_reported_together(params):
    bad = _bad(params, "retrieval_rag", {"top_k": -3, "eval_questions": 0, "recall_ks": "a,b,,",
                                          "prompt_variant": "nonexistent"})
    bad["common"]["generator"].update(dtype="float128", device="tpu9", batch_size=-5)
    bad["assets"].update(dev_fraction=0.6, test_fraction=0.6)
    with pytest.raises(ParamsError) as err:
        validate_params(bad)
    lines = str(err.value).splitlines()
    assert lines[0] == "params.yaml is invalid:"
    keys = [line.removeprefix("  - ").split(":")[0] for line in lines[1:]]
    assert keys == ["common.generator.dtype", "common.generator.device", "common.generator.batch_size",
                    "assets.dev_fraction + assets.test_fraction", "retrieval_rag.eval_questions",
                    "retrieval_rag.top_k", "retrieval_rag.recall_ks", "retrieval_rag.prompt_variant"]


def test_accepted_values(params):
    ok = _bad(params, "common.generator", {"device": "cuda:1", "dtype": "bfloat16", "backend": "vllm"})
    ok["common"]["generator"].pop("device")
    ok["critic_sft"].update(launcher="accelerate", max_steps=-1)
    ok["retrieval_rag"]["recall_ks"] = "1, 5,50"
    ok["benchmark"].update(extra_critic_model="critic", extra_critic_urls="http://a:8000,https://b/v1")
    ok["error_sampling"]["teacher_config"] = ""
    assert params_problems(ok) == []


def test_stage_outputs_need_not_exist_yet(params):
    # Anything under data/critic_sft (an out of stage critic_sft) is valid before the stage ran.
    ok = _bad(params, "correction", {"critic_dir": "data/critic_sft/not_built_yet"})
    assert not (paths.ROOT / "data/critic_sft/not_built_yet").exists()
    assert params_problems(ok) == []
    bad = _bad(params, "correction", {"critic_dir": "data/no_stage_writes_here"})
    assert [p.split(":")[0] for p in params_problems(bad)] == ["correction.critic_dir"]


def test_backend_unsupported_key_is_reported(params):
    # as load_llm: a setting that changes outputs but that the backend cannot honour
    bad = _bad(params, "common.generator", {"backend": "openai", "no_repeat_ngram_size": 3, "urls": "http://x:1"})
    local = "data/assets/models/smollm2-135m-instruct"  # a served generator: trained models need a local base
    bad["critic_sft"]["base_model"] = bad["planner_data"]["base_model"] = local
    bad["repair"]["base_model"] = bad["simrag"]["critic_base_model"] = local
    assert params_problems(bad) == ["common.generator.no_repeat_ngram_size: not supported by backend 'openai'"]
    bad["common"]["generator"]["no_repeat_ngram_size"] = 0  # off: harmless
    assert params_problems(bad) == []


def test_testbed_library_check_runs_on_a_clean_section(params):
    # Every key in range, but the split fractions leave dev with fewer than 2 entities per domain.
    bad = _bad(params, "testbed", {"n_entities_per_domain": 4, "frac_dev": 0.1})
    problems = params_problems(bad)
    assert len(problems) == 1 and problems[0].startswith("testbed: split 'dev' gets fewer than 2 entities"), problems


def test_every_numeric_parameter_has_a_rule():
    table = rules()
    for name, nb in notebook_paths().items():
        for key, default in notebook_parameters(nb).items():
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                assert key in table[name], f"{name}.{key}: numeric parameter without a range rule"


def test_committed_params_and_every_profile_pass(params):
    assert params_problems(params) == []
    profiles = sorted((paths.CONFIGS_DIR / "profiles").glob("*.yaml"))
    assert profiles
    for prof in profiles:
        merged, _ = profile_params(prof.stem)
        assert params_problems(merged) == [], prof.name


# ---------------------------------------------------------------------------------------------
# YAML reading: duplicate keys, syntax errors, missing files, invalid UTF-8
# ---------------------------------------------------------------------------------------------
def test_read_yaml_rejects_every_duplicate_key(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("a:\n  b: 1\n  c: 2\n  b: 3\nd: [1]\na: {}\nlist:\n  - k: 1\n    k: 2\n")
    with pytest.raises(DataFormatError) as err:
        read_yaml(f)
    assert str(err.value).splitlines() == [
        f"{f}:4: duplicate key 'a.b' (first at line 2)",
        f"{f}:6: duplicate key 'a' (first at line 1)",
        f"{f}:9: duplicate key 'list[0].k' (first at line 8)",
    ]
    f.write_text("base: &b {x: 1}\nmore:\n  <<: *b\n  y: 2\n")
    assert read_yaml(f) == {"base": {"x": 1}, "more": {"x": 1, "y": 2}}


def test_read_yaml_syntax_error_and_bad_utf8_are_one_line(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(DataFormatError) as err:
        read_yaml(f)
    assert str(err.value) == (f"{f}:3: invalid YAML (expected ',' or ']', but got ':'; "
                              "while parsing a flow sequence)")
    f.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(DataFormatError, match=r"x\.yaml:2: invalid UTF-8 \(byte 0xe9\)"):
        read_yaml(f)


def test_load_params_yaml_problems(tmp_path, params):
    f = tmp_path / "params.yaml"
    with pytest.raises(ParamsError, match=r"params\.yaml: no such file$"):
        load_params(f)
    text = paths.PARAMS_FILE.read_text(encoding="utf-8")
    f.write_text(text.replace("  top_k: 3\n", "  top_k: 3\n  top_k: -3\n", 1))
    with pytest.raises(ParamsError) as err:
        load_params(f)
    lines = str(err.value).splitlines()[1:]
    assert len(lines) == 2
    assert "duplicate key 'retrieval_rag.top_k' (first at line" in lines[0]
    assert lines[1] == "  - retrieval_rag.top_k: must be >= 1, got -3"  # the rest is still reported


def test_seeded_split_refuses_bad_fractions():
    with pytest.raises(ValueError, match=r"split fractions must be >= 0: train=-0\.2"):
        seeded_split(range(100), {"train": -0.2, "dev": 0.6, "test": 0.6}, seed=1)
    with pytest.raises(ValueError, match=r"add up to more than 1: train=0\.5 \+ dev=0\.6 \+ test=0\.1"):
        seeded_split(range(100), {"train": 0.5, "dev": 0.6, "test": 0.1}, seed=1)
    out = seeded_split(range(100), {"train": 0.7, "dev": 0.2, "test": 0.1}, seed=1)
    assert [len(v) for v in out.values()] == [70, 20, 10]


def test_trivia_split_names_the_bad_fractions():
    from ragcritic_lib.data.assets import build_trivia_splits

    with pytest.raises(ValueError, match="dev_fraction=0.6, test_fraction=0.6"):
        build_trivia_splits([], [], seed=1, dev_fraction=0.6, test_fraction=0.6)


# ---------------------------------------------------------------------------------------------
# Command lines: `params check` and the stage runner, in a copy of the repository's inputs
# ---------------------------------------------------------------------------------------------
def _repo_copy(tmp_path: Path, params_text: str | bytes | None) -> Path:
    root = tmp_path / "repo"
    (root / "data").mkdir(parents=True)
    for rel in ("notebooks", "configs", "data/taxonomy"):
        (root / rel).symlink_to(paths.ROOT / rel)
    (root / "dvc.yaml").write_text(paths.DVC_FILE.read_text(encoding="utf-8"))
    if isinstance(params_text, str):
        (root / "params.yaml").write_text(params_text, encoding="utf-8")
    elif isinstance(params_text, bytes):
        (root / "params.yaml").write_bytes(params_text)
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAGCRITIC_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", *args], cwd=paths.ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def _bad_params_text() -> str:
    data = yaml.safe_load(paths.PARAMS_FILE.read_text(encoding="utf-8"))
    data["retrieval_rag"].update(top_k=-3, prompt_variant="nonexistent")
    data["assets"].update(dev_fraction=0.6, test_fraction=0.6)
    return yaml.safe_dump(data, sort_keys=False)


CLI_CASES = {
    "values": (_bad_params_text, ["assets.dev_fraction + assets.test_fraction:", "retrieval_rag.top_k:",
                                  "retrieval_rag.prompt_variant:"]),
    "syntax": (lambda: "common:\n  seed: [13\nassets: {}\n", ["params.yaml:3: invalid YAML (expected ',' or ']'"]),
    "missing": (lambda: None, ["params.yaml: no such file"]),
    "not_utf8": (lambda: b"common:\n  seed: 13 # caf\xe9\n", ["params.yaml:2: invalid UTF-8"]),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_params_check_cli_exit_2_one_line_per_problem(tmp_path, case):
    make, expected = CLI_CASES[case]
    root = _repo_copy(tmp_path, make())
    res = _run(root, "ragcritic_lib.pipeline.params", "check")
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    problems = lines[1:] if lines[0].endswith(" is invalid:") else lines
    assert len(problems) == len(expected), res.stderr
    for line, want in zip(problems, expected):
        assert want in line, (want, line)


def test_stage_runner_reports_params_problems_without_traceback(tmp_path):
    root = _repo_copy(tmp_path, _bad_params_text())
    res = _run(root, "ragcritic_lib.pipeline.stage", "notebooks/01_retrieval_rag.py")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert [line.split(":")[0] for line in res.stderr.strip().splitlines()[1:]] == [
        "  - assets.dev_fraction + assets.test_fraction", "  - retrieval_rag.top_k", "  - retrieval_rag.prompt_variant"]
    assert not (root / "reports").exists()  # nothing ran


def test_params_check_cli_ok_and_profile(tmp_path):
    root = _repo_copy(tmp_path, paths.PARAMS_FILE.read_text(encoding="utf-8"))
    res = _run(root, "ragcritic_lib.pipeline.params", "check")
    assert res.returncode == 0 and res.stdout.strip() == f"{root.resolve() / 'params.yaml'}: ok", res.stderr
    res = _run(root, "ragcritic_lib.pipeline.params", "check", "--profile", "nope")
    assert res.returncode == 2 and "no such params profile" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("text, message", [
    ("backend: openai\nmodel: big\nurl: http://gpu-node:8000\n", r"unknown key\(s\) \['url'\]"),
    ("backend: openai\nmodel: big\nurls: http://gpu-node:8000\ntimeout_s: '120'\n", "'timeout_s' must be a number"),
    ("- backend\n- openai\n", "must be a mapping"),
])
def test_a_teacher_config_file_is_checked_before_the_stage_samples(params, tmp_path, text, message):
    """The LLM config inside teacher_config is read by `params check`, not first after sampling."""
    path = tmp_path / "teacher.yaml"
    path.write_text(text)
    for section in ("error_sampling", "tagging"):
        problems = params_problems(_bad(params, section, {"teacher_config": str(path)}))
        assert len(problems) == 1, problems
        assert problems[0].startswith(f"{section}.teacher_config ({path})") and re.search(message, problems[0])
    path.write_text("backend: openai\nmodel: big\nurls: http://gpu-node:8000\napi_key_env: TEACHER_KEY\n")
    assert params_problems(_bad(params, "error_sampling", {"teacher_config": str(path)})) == []


def test_a_vllm_generator_takes_the_engine_options_load_llm_passes_on(params):
    ok = _bad(params, "common.generator", {"backend": "vllm", "quantization": "awq", "max_num_seqs": 64})
    ok["common"]["generator"].pop("device", None)
    assert params_problems(ok) == []
    bad = _bad(params, "common.generator", {"backend": "vllm", "max_num_seq": 64})
    bad["common"]["generator"].pop("device", None)
    problems = params_problems(bad)
    assert len(problems) == 1 and problems[0].startswith("common.generator.max_num_seq: unknown key")
    assert "vllm.LLM engine option" in problems[0]
    # Under hf the same engine option is a typo, not a setting.
    assert params_problems(_bad(params, "common.generator", {"max_num_seqs": 64}))[0].startswith(
        "common.generator.max_num_seqs: unknown key")


def test_papermill_guesses_about_parameters_are_dropped_and_real_warnings_kept(caplog):
    """papermill cannot parse ``x = "a=1,b=2"`` and then calls x unknown; our own check reads the
    parameters cell with ast, so only those two guesses are dropped."""
    import logging

    from ragcritic_lib.pipeline.stage import _quiet_papermill_parameter_guesses

    _quiet_papermill_parameter_guesses()
    _quiet_papermill_parameter_guesses()  # idempotent: one filter per logger
    translators, execute = logging.getLogger("papermill.translators"), logging.getLogger("papermill")
    assert len(translators.filters) == 1 and len(execute.filters) == 1
    with caplog.at_level(logging.WARNING):
        translators.warning("Unable to parse line 4 'train_questions = \"testbed=700,trivia=400\"'.")
        execute.warning("Passed unknown parameter: train_questions")
        execute.warning("Output Notebook is not writable")
    assert [r.getMessage() for r in caplog.records] == ["Output Notebook is not writable"]


def test_a_parameter_the_notebook_lacks_is_refused_before_the_kernel_starts(tmp_path):
    from ragcritic_lib.pipeline.stage import run_notebook

    with pytest.raises(ParamsError, match="05_critic_sft.py: no parameter 'epoch' in its parameters cell"):
        run_notebook(paths.NOTEBOOKS_DIR / "05_critic_sft.py", output_dir=tmp_path, extra_params={"epoch": 2})
    assert list(tmp_path.iterdir()) == []
