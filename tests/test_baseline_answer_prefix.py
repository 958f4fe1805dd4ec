"""The baselines' ``answer_prefix`` (stages 09-11): the params value sets the generator's shared
opening, a wrong value names its key, and the prompts the baselines answer with (standard RAG's,
a rewrite's extra instruction included) do share an opening the backend encodes once."""

from __future__ import annotations

import pytest

from ragcritic_lib.baselines.answer_prefix import ANSWER_PREFIXES, set_answer_prefix
from ragcritic_lib.llm import GenParams
from ragcritic_lib.retrieval.rag import build_rag_messages

from test_generation_prefix import _backend, fp32_dir  # noqa: F401  (fixture)


class _Switchable:
    share_generation_prefix = False


@pytest.mark.parametrize("setting, on", [("shared", True), ("whole", False)])
def test_the_setting_turns_the_switch(setting, on):
    llm = _Switchable()
    llm.share_generation_prefix = not on
    assert set_answer_prefix(llm, setting, key="crag.answer_prefix") is True
    assert llm.share_generation_prefix is on


def test_a_wrong_value_names_its_key_and_changes_nothing():
    llm = _Switchable()
    with pytest.raises(ValueError, match=r"simrag\.answer_prefix: must be one of shared \| whole, got 'Shared'"):
        set_answer_prefix(llm, "Shared", key="simrag.answer_prefix")
    assert llm.share_generation_prefix is False
    assert set(ANSWER_PREFIXES) == {"shared", "whole"}


def test_a_backend_without_the_switch_is_left_alone():
    class Served:  # vLLM caches prefixes itself; a served model has no such switch
        pass

    llm = Served()
    assert set_answer_prefix(llm, "shared", key="self_refine.answer_prefix") is False
    assert not hasattr(llm, "share_generation_prefix")


def test_the_baselines_answer_prompts_share_an_opening(fp32_dir):  # noqa: F811
    llm = _backend(fp32_dir, "float32", share=False)
    set_answer_prefix(llm, "shared", key="self_refine.answer_prefix")
    passages = ["The lake lies north of the capital.", "A railway station was founded in the century."]
    prompts = [build_rag_messages("Which lake lies north?", passages, variant="prefill"),
               build_rag_messages("Who founded the station?", passages[::-1], variant="prefill",
                                  additional_instruction="The last answer named the wrong city; answer again.")]
    gens = llm.generate(prompts, GenParams(max_new_tokens=4))
    assert len(gens) == 2
    assert len(llm._prefix_kv) == 1, "both prompts opened with the same turns, encoded once"

    whole = _backend(fp32_dir, "float32", share=False)
    set_answer_prefix(whole, "whole", key="self_refine.answer_prefix")
    whole.generate(prompts, GenParams(max_new_tokens=4))
    assert not whole._prefix_kv
