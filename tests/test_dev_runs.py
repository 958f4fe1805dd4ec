"""ragcritic_lib.agent.dev_runs: the ladder on dev questions, set up as stage 08 sets it up."""

from __future__ import annotations

import pytest

from ragcritic_lib.agent.dev_runs import ACTION_SETTINGS, DevLadder, dev_ladder, run_dev_methods


def test_an_override_that_is_no_action_setting_is_named_before_anything_loads():
    ladder = DevLadder(params={}, cfg={}, rag_cfg={}, gold={}, dataset="testbed", records=[], taxonomy=None,
                       table=None, rule_planner=None)
    with pytest.raises(KeyError, match="correction.answer_mod: not an action-layer setting"):
        run_dev_methods(ladder, {}, settings={"answer_mod": "free"})
    assert "answer_mode" in ACTION_SETTINGS


def test_missing_dev_answers_name_the_file(tmp_path, monkeypatch):
    from ragcritic_lib import paths

    monkeypatch.setattr(paths, "stage_dir", lambda stage: tmp_path / stage)
    params = {"correction": {"dev_questions": 2, "action_topk": 3, "deep_topk": 8},
              "error_sampling": {"judge_metric": "truth", "judge_threshold": 0.5},
              "common": {"datasets": {"testbed": {}}}, "retrieval_rag": {}}
    with pytest.raises(FileNotFoundError, match="dev.jsonl"):
        dev_ladder(params)
