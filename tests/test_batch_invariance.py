"""A prompt's output must not depend on the other prompts of its call, nor on the cache's history.

Under bf16 on CPU, the same prompt left-padded to another width or computed in a batch of
another size can give another greedy answer; the cache then served whichever answer came first.
These tests use a small randomly initialised Llama in bf16 (random logits are nearly flat, so
rounding differences flip the argmax often) with the repository's tokenizer when the assets are
built, else a small BPE tokenizer trained here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragcritic_lib import paths
from ragcritic_lib.llm.cache import LLMCache
from ragcritic_lib.llm import GenParams

_WORDS = ("lake river passage answer question museum century founded north bridge capital "
          "population island mountain author novel railway station harbour festival").split()


def _prompts(n: int = 20) -> list[str]:
    """``n`` raw prompts of different lengths (a few to ~150 tokens), fixed content."""
    out = []
    for i in range(n):
        words = [_WORDS[(i * 7 + j * 3) % len(_WORDS)] for j in range(3 + 9 * i)]
        out.append(f"Passage {i}: " + " ".join(words) + ". Question: what is it?")
    return out


def _tokenizer(out: Path):
    """The packaged model's tokenizer when built, else a small BPE tokenizer with an end token."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    packaged = paths.resolve("data/assets/models/smollm2-135m-instruct")
    if (packaged / "tokenizer.json").exists():
        tok = AutoTokenizer.from_pretrained(packaged)
    else:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_end|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        bpe.train_from_iterator([" ".join(_WORDS)] * 20, trainer)
        tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|im_end|>")
    tok.save_pretrained(out)
    return tok


@pytest.fixture(scope="module")
def bf16_dir(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("bf16") / "random-llama"
    tok = _tokenizer(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      initializer_range=0.2,  # sharper logits than the default: varied outputs
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)
    return out


def _backend(model_dir: Path, cache: LLMCache | None = None, batch_size: int = 4):
    import torch

    torch.set_num_threads(1)
    from ragcritic_lib.llm import HFBackend

    return HFBackend(model_dir, dtype="bfloat16", device="cpu", batch_size=batch_size, cache=cache)


def _dump(gens) -> str:
    return json.dumps([g.to_cache() for g in gens], sort_keys=True)


# ---------------------------------------------------------------------------------------------
# The batching plan: a pure function of the prompts' lengths
# ---------------------------------------------------------------------------------------------
def test_padded_width_always_pads_at_least_one_token():
    from ragcritic_lib.llm import padded_width

    assert [padded_width(n, 64) for n in (0, 1, 63, 64, 65, 127, 128)] == [64, 64, 64, 128, 128, 128, 192]
    assert padded_width(5, 4) == 8


def test_plan_batches_groups_equal_widths_longest_first():
    from ragcritic_lib.llm import plan_batches

    plan = plan_batches([5, 70, 63, 64, 128, 1, 0, 100], 2, 64)
    assert plan == [([4], 192), ([7, 1], 128), ([3], 128), ([2, 0], 64), ([5, 6], 64)]
    # A subset of the prompts (e.g. the cache misses of a re-run) keeps every prompt's width.
    widths = {i: w for idx, w in plan for i in idx}
    sub = [5, 64, 1]
    assert {i: w for idx, w in plan_batches(sub, 2, 64) for i in idx} == {0: widths[0], 1: widths[3], 2: widths[5]}
    assert plan_batches([], 4) == []


# ---------------------------------------------------------------------------------------------
# (a) batch composition and (b) cache history do not change any answer
# ---------------------------------------------------------------------------------------------
def test_answers_do_not_depend_on_batch_composition(bf16_dir):
    llm = _backend(bf16_dir)
    prompts = _prompts()
    params = GenParams(max_new_tokens=12)
    together = llm.generate(prompts, params)
    evens = llm.generate(prompts[0::2], params)
    odds = llm.generate(prompts[1::2], params)
    apart = [None] * len(prompts)
    apart[0::2], apart[1::2] = evens, odds
    alone = [llm.generate([p], params)[0] for p in prompts[:6]]
    assert [g.text for g in apart] == [g.text for g in together]
    assert _dump(apart) == _dump(together)
    assert _dump(alone) == _dump(together[:6])
    assert len({g.text for g in together}) > 1  # the outputs are not all the same string


def test_run_from_a_differently_filled_cache_is_byte_identical(bf16_dir, tmp_path):
    prompts = _prompts()
    params = GenParams(max_new_tokens=12)
    cold = _backend(bf16_dir, LLMCache(tmp_path / "cold")).generate(prompts, params)

    warm_cache = LLMCache(tmp_path / "warm")
    # An earlier run (say a tuning run on a subset) left every third prompt in the cache.
    _backend(bf16_dir, warm_cache).generate(prompts[::3], params)
    warm_llm = _backend(bf16_dir, warm_cache)
    warm = warm_llm.generate(prompts, params)
    assert warm_llm.stats.cached_calls == len(prompts[::3])
    assert _dump(warm) == _dump(cold)


def test_sampling_does_not_depend_on_batch_composition(bf16_dir):
    import torch

    llm = _backend(bf16_dir)
    prompts = _prompts(8)
    params = GenParams(max_new_tokens=8, temperature=1.0, top_p=0.9, seed=3)
    state = torch.random.get_rng_state()
    together = llm.generate(prompts, params)
    assert torch.equal(state, torch.random.get_rng_state())  # the caller's RNG is untouched
    apart = [llm.generate([p], params)[0] for p in prompts]
    assert _dump(apart) == _dump(together)
    other_seed = llm.generate(prompts, GenParams(max_new_tokens=8, temperature=1.0, top_p=0.9, seed=4))
    assert [g.text for g in other_seed] != [g.text for g in together]


def test_choices_do_not_depend_on_batch_composition(bf16_dir):
    llm = _backend(bf16_dir)
    prompts = _prompts(12)
    options = [["lake", "river", "mountain", "island"]] * len(prompts)
    together = [c.index for c in llm.choose(prompts, options)]
    apart = [llm.choose([p], [o])[0].index for p, o in zip(prompts, options)]
    assert apart == together


def test_batch_shape_is_part_of_the_cache_identity(bf16_dir):
    a, b = _backend(bf16_dir, batch_size=4), _backend(bf16_dir, batch_size=8)
    assert a.identity()["batching"] == {"rows": 4, "fill": "none", "pad_multiple": 64, "sampler": "row-gumbel"}
    assert a.identity() != b.identity()
