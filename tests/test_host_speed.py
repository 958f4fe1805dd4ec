"""The host probe that timing records keep beside their times: fixed prompts, the record it
writes, a clear record when the generator cannot load, and the line the stage-time table shows."""

from __future__ import annotations

import json
from pathlib import Path

from ragcritic_lib.llm import CallableLLM
from ragcritic_lib.pipeline import workspace
from ragcritic_lib.pipeline.readme import _copy_hosts

_CPUINFO = "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"


def test_the_prompts_are_the_same_on_every_call():
    a, b = workspace.host_prompts(), workspace.host_prompts()
    assert a == b and len(a) == workspace.HOST_PROMPTS
    assert len({json.dumps(p) for p in a}) == len(a), "every prompt its own"
    assert all(p[-1]["role"] == "assistant" for p in a), "standard RAG's prefill variant"
    assert len(workspace.host_prompts(3)) == 3


def test_a_probe_times_one_call_after_a_warm_up(monkeypatch):
    calls = []

    def answer(prompt, params):
        calls.append(params.max_new_tokens)
        return "So the answer is: harbour"

    llm = CallableLLM(answer, name="stand-in")
    monkeypatch.setattr("ragcritic_lib.runtime.load_generator", lambda params, **kw: llm)
    probe = workspace.host_speed({"common": {}}, cpuinfo=_CPUINFO)
    assert probe["cpu_model"] == "Test CPU 9000" and probe["cpu_class"] == "avx512_bf16"
    assert probe["prompts"] == workspace.HOST_PROMPTS and probe["new_tokens"] == workspace.HOST_NEW_TOKENS
    assert len(calls) == 2 + workspace.HOST_REPEATS * workspace.HOST_PROMPTS  # two warm-up prompts, then the timed calls
    assert len(probe["runs"]) == workspace.HOST_REPEATS and probe["generate_seconds"] == min(probe["runs"])
    assert set(calls) == {workspace.HOST_NEW_TOKENS}
    assert probe["prompt_tokens"] > 0 and probe["generate_seconds"] >= 0
    assert "why" not in probe


def test_a_generator_that_cannot_load_gives_a_record_that_says_why(monkeypatch):
    def missing(params, **kw):
        raise FileNotFoundError("data/assets/models/smollm2-135m-instruct: no such model folder")

    monkeypatch.setattr("ragcritic_lib.runtime.load_generator", missing)
    probe = workspace.host_speed({"common": {}}, cpuinfo="")
    assert probe["generate_seconds"] is None and probe["cpu_model"] == "unknown"
    assert "FileNotFoundError" in probe["why"] and "smollm2" in probe["why"]


def test_probe_host_never_raises_when_the_probe_cannot_run(tmp_path: Path):
    probe = workspace.probe_host(tmp_path)  # no benchmarks/ there: the subprocess fails
    assert probe["generate_seconds"] is None and probe["why"]


def test_the_table_line_gives_each_class_its_probe_range():
    copies = {
        ("10_crag", "avx512_bf16"): {"host": {"generate_seconds": 9.5}},
        ("11_simrag", "avx512_bf16"): {"host": {"generate_seconds": 14.25}},
        ("07_benchmark", "avx512_bf16"): {"note": "made before the probe"},
        ("05_critic_sft", "avx2"): {"host": {"generate_seconds": 30.0}},
        ("06_critic_dpo", "amx"): {"host": {"generate_seconds": None, "why": "no assets"}},
    }
    line = _copy_hosts(copies)
    assert "avx2 30.0 s (1 of its 1 copies probed)" in line
    assert "avx512_bf16 9.5-14.2 s (2 of its 3 copies probed)" in line
    assert "amx" not in line
    assert _copy_hosts({("10_crag", "avx2"): {"note": "old"}}) == ""
