"""HFBackend's ``share_generation_prefix``: the turns before a prompt's last user turn are
encoded once and their key-value cache reused. In fp32 the answers equal those of whole-prompt
encoding; in any dtype a prompt's answer still does not depend on the other prompts of its call,
and the setting is part of the cache identity. A small randomly initialised Llama stands in for
the generator (see tests/test_batch_invariance.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragcritic_lib.llm import GenParams

from test_batch_invariance import _WORDS, _tokenizer

_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _model_dir(out: Path, dtype: str) -> Path:
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _tokenizer(out)
    if not getattr(tok, "chat_template", None):
        tok.chat_template = _TEMPLATE
        tok.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      initializer_range=0.2, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=True)
    LlamaForCausalLM(cfg).to(getattr(torch, dtype)).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def fp32_dir(tmp_path_factory):
    return _model_dir(tmp_path_factory.mktemp("fp32") / "random-llama", "float32")


@pytest.fixture(scope="module")
def bf16_dir(tmp_path_factory):
    return _model_dir(tmp_path_factory.mktemp("bf16") / "random-llama", "bfloat16")


def _backend(model_dir: Path, dtype: str, *, share: bool, batch_size: int = 4):
    import torch

    torch.set_num_threads(1)
    from ragcritic_lib.llm import HFBackend

    llm = HFBackend(model_dir, dtype=dtype, device="cpu", batch_size=batch_size, cache=None)
    llm.share_generation_prefix = share
    return llm


_SYSTEM = "You answer from the passages. " + " ".join(_WORDS * 3)


def _chats(n: int = 10, prefill: bool = False) -> list[list[dict[str, str]]]:
    """Chat prompts sharing a system turn and a worked example, each with its own last user
    turn of a different length (so rows are padded differently)."""
    out = []
    for i in range(n):
        words = " ".join(_WORDS[(i * 5 + j) % len(_WORDS)] for j in range(2 + 7 * i))
        chat = [{"role": "system", "content": _SYSTEM},
                {"role": "user", "content": "Passage: lake river. Question: which lake?"},
                {"role": "assistant", "content": "The lake."},
                {"role": "user", "content": f"Passage {i}: {words}. Question: what is it?"}]
        if prefill:
            chat.append({"role": "assistant", "content": "So the answer is:"})
        out.append(chat)
    return out


def _dump(gens) -> str:
    return json.dumps([g.to_cache() for g in gens], sort_keys=True)


@pytest.mark.parametrize("prefill", [False, True])
def test_shared_turns_give_the_same_answers_in_fp32(fp32_dir, prefill):
    whole, shared = _backend(fp32_dir, "float32", share=False), _backend(fp32_dir, "float32", share=True)
    chats, params = _chats(prefill=prefill), GenParams(max_new_tokens=10)
    a, b = whole.generate(chats, params), shared.generate(chats, params)
    assert _dump(a) == _dump(b)  # texts, prompt token counts and finish reasons
    assert len({g.text for g in a}) > 1
    assert shared._prefix_kv, "the shared turns were encoded once and kept"
    assert not whole._prefix_kv
    # Sampling draws from the same per-prompt stream either way.
    sample = GenParams(max_new_tokens=8, temperature=0.8, seed=3)
    assert _dump(whole.generate(chats, sample)) == _dump(shared.generate(chats, sample))


def test_stop_strings_cut_the_same_with_shared_turns(fp32_dir):
    whole, shared = _backend(fp32_dir, "float32", share=False), _backend(fp32_dir, "float32", share=True)
    chats = _chats(6)
    free = whole.generate(chats, GenParams(max_new_tokens=10))
    stop = next(w for g in free for w in g.text.split() if len(w) > 2)
    params = GenParams(max_new_tokens=10, stop=[stop])
    assert _dump(whole.generate(chats, params)) == _dump(shared.generate(chats, params))


def test_shared_turns_keep_answers_independent_of_the_call_in_bf16(bf16_dir):
    llm = _backend(bf16_dir, "bfloat16", share=True)
    chats, params = _chats(12), GenParams(max_new_tokens=10)
    together = llm.generate(chats, params)
    apart = [None] * len(chats)
    apart[0::2], apart[1::2] = llm.generate(chats[0::2], params), llm.generate(chats[1::2], params)
    alone = [llm.generate([c], params)[0] for c in chats[:3]]
    assert _dump(apart) == _dump(together)
    assert _dump(alone) == _dump(together[:3])


def test_short_or_missing_shared_turns_fall_back_to_whole_prompts(fp32_dir):
    llm = _backend(fp32_dir, "float32", share=True)
    raw = ["Passage: lake river. Question: which lake?", "Passage: bridge. Question: where?"]
    one_turn = [[{"role": "user", "content": p}] for p in raw]
    short = [[{"role": "system", "content": "Answer."}, {"role": "user", "content": p}] for p in raw]
    params = GenParams(max_new_tokens=6)
    for prompts in (raw, one_turn, short):
        assert llm.generate(prompts, params)
    assert not llm._prefix_kv  # none of these had shared turns of min_shared_prefix tokens
    assert not llm._turn_prefix  # and nothing is kept between calls


def test_the_setting_is_part_of_the_cache_identity(fp32_dir):
    off, on = _backend(fp32_dir, "float32", share=False), _backend(fp32_dir, "float32", share=True)
    # Off, the identity is what it always was, so earlier cache entries stay valid.
    assert off.identity()["batching"] == {"rows": 4, "fill": "none", "pad_multiple": 64, "sampler": "row-gumbel"}
    assert on.identity() != off.identity()
