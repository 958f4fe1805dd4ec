"""The prompt sets of benchmarks/bench_answer_prefix.py: the LLM teacher's prompts on the hand
audit's choosing rows only, and its scores (an unparsed output never agrees with the label)."""

from __future__ import annotations

import json

from script_modules import load_script

from ragcritic_lib.pipeline.params import load_params

bench = load_script("benchmarks/bench_answer_prefix.py")
ERROR = '{"Judgement": "Error", "Error_analysis": "The passage names another'  # cut by the cap: still a verdict


def test_the_teacher_set_reads_choosing_rows_only_and_scores_verdicts_against_the_labels() -> None:
    meta, prompts, gen_params, score = bench.teacher_set(load_params(), 0)
    rows = [json.loads(line) for line in open("data/audit/audit.jsonl", encoding="utf-8")]
    choosing = [r for r in rows if r["role"] == "choosing"]
    assert meta["rows"] == len(prompts) == len(choosing) and meta["role"] == "choosing"
    assert all(r["split"] != "test" for r in choosing)
    assert gen_params.max_new_tokens == load_params()["error_sampling"]["teacher_max_new_tokens"]
    assert [m["role"] for m in prompts[0]][:2] == ["system", "user"] and prompts[0][-1]["role"] == "user"

    first = bench.teacher_set(load_params(), 3)[1]
    assert first == prompts[:3]
    _, _, _, score3 = bench.teacher_set(load_params(), 3)
    labels = [r["label"] for r in choosing[:3]]
    said = ['{"Judgement": "Correct", "Error_analysis": ""}' if lab == "correct" else ERROR
            for lab in labels]
    assert score3(said) == {"parsed": [1.0] * 3, "agreement": [1.0] * 3}
    flipped = [ERROR if lab == "correct" else '{"Judgement": "Correct", "Error_analysis": ""}' for lab in labels]
    assert score3(flipped)["agreement"] == [0.0] * 3
    assert score3(["The model answer is incorrect."] * 3) == {"parsed": [0.0] * 3, "agreement": [0.0] * 3}
