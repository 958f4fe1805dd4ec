"""The vLLM backend against a stand-in ``vllm`` package shaped like vLLM's documented API:
``vllm.LLM(model, *, ..., **kwargs)`` forwarding unknown keywords to the ``EngineArgs``
dataclass, ``LLM.generate(prompts, sampling_params, *, use_tqdm, lora_request)`` taking token
prompts and one or a list of ``SamplingParams``, ``StructuredOutputsParams(choice=...)`` in
``vllm.sampling_params``, ``LoRARequest(name, int_id, path)`` and the distributed tear-down
functions of ``vllm.distributed.parallel_state``. No GPU, no real vllm."""

from __future__ import annotations

import dataclasses
import gc
import json
import sys
import types
import weakref
from pathlib import Path

import pytest

from ragcritic_lib import llm as llm_mod
from ragcritic_lib.llm import GenParams, VLLMBackend, load_llm, release_vllm_engine


class WordTokenizer:
    """One token per whitespace word; ids are assigned in order of first appearance."""

    chat_template = "chatml"

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        assert add_special_tokens is False
        return [self.vocab.setdefault(w, len(self.vocab) + 1) for w in text.split()]

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, continue_final_message):
        text = " ".join(f"{m['role']}: {m['content']}" for m in messages)
        return text + (" assistant:" if add_generation_prompt else "")


class FakeVLLM:
    """Builds the stand-in package and records what the backend does with it."""

    def __init__(self, *, structured: str = "StructuredOutputsParams") -> None:
        self.built: list[dict] = []  # engine kwargs, one per engine construction
        self.events: list[str] = []  # "build", "shutdown", "destroy_model_parallel", ...
        self.calls: list[tuple[list, object, dict]] = []  # generate(inputs, sampling, kwargs)
        self.engines: list[weakref.ref] = []
        self.choice_answer = None  # when set, the engine's answer to choice requests
        self.tokenizer = WordTokenizer()
        fake = self

        @dataclasses.dataclass
        class EngineArgs:
            model: str = ""
            max_num_seqs: int = 256
            max_loras: int = 1
            max_lora_rank: int = 16
            enable_lora: bool = False
            max_model_len: int | None = None
            enable_prefix_caching: bool = True

        class SamplingParams:
            def __init__(self, *, n=1, max_tokens=16, temperature=1.0, top_p=1.0, seed=None, stop=None,
                         repetition_penalty=1.0, prompt_logprobs=None, structured_outputs=None,
                         guided_decoding=None):
                self.kw = {k: v for k, v in locals().items() if k != "self"}

        class Logprob:
            def __init__(self, logprob: float) -> None:
                self.logprob = logprob

        class EngineCore:
            def shutdown(self) -> None:
                fake.events.append("shutdown")

        class LLM:
            def __init__(self, model: str, *, tokenizer=None, trust_remote_code: bool = False,
                         tensor_parallel_size: int = 1, dtype: str = "auto", quantization=None, seed=None,
                         gpu_memory_utilization: float = 0.9, enforce_eager: bool = False, **kwargs):
                EngineArgs(model=model, **kwargs)  # an unknown keyword is a TypeError, as in vLLM
                fake.built.append({"model": model, "trust_remote_code": trust_remote_code,
                                   "tensor_parallel_size": tensor_parallel_size, "dtype": dtype,
                                   "quantization": quantization, "seed": seed,
                                   "gpu_memory_utilization": gpu_memory_utilization, **kwargs})
                fake.events.append(f"build {model}")
                fake.engines.append(weakref.ref(self))
                self.llm_engine = types.SimpleNamespace(engine_core=EngineCore())

            def get_tokenizer(self):
                return fake.tokenizer

            def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None):
                fake.calls.append((list(prompts), sampling_params, {"use_tqdm": use_tqdm, "lora_request": lora_request}))
                sps = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
                return [self._one(p["prompt_token_ids"], sp.kw, lora_request) for p, sp in zip(prompts, sps)]

            def _one(self, ids, kw, lora):
                if kw["prompt_logprobs"] is not None:
                    # log-probability of the token at position i: -id / 10 (position 0: None)
                    lps = [None] + [{t: Logprob(-t / 10), 999: Logprob(-0.01)} for t in ids[1:]]
                    comp = types.SimpleNamespace(text="x", token_ids=[1], finish_reason="length")
                    return types.SimpleNamespace(prompt_logprobs=lps, outputs=[comp])
                rule = kw["structured_outputs"] or kw["guided_decoding"]
                if rule is not None:
                    text = fake.choice_answer or rule.choice[len(ids) % len(rule.choice)]
                    comp = types.SimpleNamespace(text=text, token_ids=[0] * len(text.split()), finish_reason="stop")
                    return types.SimpleNamespace(prompt_logprobs=None, outputs=[comp])
                name = lora.lora_name if lora is not None else "base"
                comp = types.SimpleNamespace(text=f"{name} saw {len(ids)}", token_ids=[0, 0], finish_reason="stop")
                return types.SimpleNamespace(prompt_logprobs=None, outputs=[comp])

        class LoRARequest:
            def __init__(self, lora_name: str, lora_int_id: int, lora_path: str) -> None:
                self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path

        @dataclasses.dataclass
        class ChoiceParams:
            choice: list | None = None

        self.vllm = types.ModuleType("vllm")
        self.vllm.LLM, self.vllm.SamplingParams, self.vllm.EngineArgs = LLM, SamplingParams, EngineArgs
        self.sampling = types.ModuleType("vllm.sampling_params")
        self.sampling.SamplingParams = SamplingParams
        if structured:
            setattr(self.sampling, structured, ChoiceParams)
        self.lora = types.ModuleType("vllm.lora.request")
        self.lora.LoRARequest = LoRARequest
        self.parallel = types.ModuleType("vllm.distributed.parallel_state")
        self.parallel.destroy_model_parallel = lambda: fake.events.append("destroy_model_parallel")
        self.parallel.destroy_distributed_environment = lambda: fake.events.append("destroy_distributed_environment")

    def install(self, monkeypatch) -> FakeVLLM:
        for name, mod in (("vllm", self.vllm), ("vllm.sampling_params", self.sampling),
                          ("vllm.lora", types.ModuleType("vllm.lora")), ("vllm.lora.request", self.lora),
                          ("vllm.distributed", types.ModuleType("vllm.distributed")),
                          ("vllm.distributed.parallel_state", self.parallel)):
            monkeypatch.setitem(sys.modules, name, mod)
        return self

    def alive(self) -> int:
        gc.collect()
        return sum(ref() is not None for ref in self.engines)


@pytest.fixture
def fake_vllm(monkeypatch):
    release_vllm_engine()
    fake = FakeVLLM().install(monkeypatch)
    yield fake
    release_vllm_engine()


def _adapter(path: Path, rank: int = 8, weights: bytes = b"w1") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "adapter_config.json").write_text(json.dumps({"r": rank}))
    (path / "adapter_model.safetensors").write_bytes(weights)
    return path


def test_views_of_one_base_share_one_engine_with_their_own_lora(fake_vllm, tmp_path):
    base = {"backend": "vllm", "model": "org/base", "enable_lora": True, "max_loras": 2, "cache": False}
    gen = load_llm(base)
    critic = load_llm({**base, "adapter": str(_adapter(tmp_path / "critic"))})
    planner = load_llm({**base, "adapter": str(_adapter(tmp_path / "planner", weights=b"p"))})
    assert len(fake_vllm.built) == 1 and fake_vllm.built[0]["max_loras"] == 2

    texts = [m.generate(["a b c"], GenParams(max_new_tokens=4))[0].text for m in (gen, critic, planner)]
    loras = [kw["lora_request"] for _, _, kw in fake_vllm.calls]
    assert loras[0] is None
    assert {loras[1].lora_path, loras[2].lora_path} == {str(tmp_path / "critic"), str(tmp_path / "planner")}
    assert loras[1].lora_int_id != loras[2].lora_int_id and loras[1].lora_name != loras[2].lora_name
    assert texts == ["base saw 3", f"{loras[1].lora_name} saw 3", f"{loras[2].lora_name} saw 3"]
    assert len(fake_vllm.built) == 1 and fake_vllm.alive() == 1


def test_adapter_view_enables_lora_on_the_shared_engine_once(fake_vllm, tmp_path):
    gen = load_llm({"backend": "vllm", "model": "org/base", "cache": False})
    assert "enable_lora" not in fake_vllm.built[0]
    critic = load_llm({"backend": "vllm", "model": "org/base", "adapter": str(_adapter(tmp_path / "c", rank=24)),
                       "cache": False})
    # The engine without LoRA support was freed, then rebuilt once with it; the generator
    # view now runs on the rebuilt engine.
    assert fake_vllm.events[:4] == ["build org/base", "shutdown", "destroy_model_parallel",
                                    "destroy_distributed_environment"]
    assert fake_vllm.built[1]["enable_lora"] is True and fake_vllm.built[1]["max_lora_rank"] == 32
    gen.generate(["x"])
    critic.generate(["y"])
    assert len(fake_vllm.built) == 2 and fake_vllm.alive() == 1


def test_another_base_model_frees_the_old_engine_first(fake_vllm):
    first = load_llm({"backend": "vllm", "model": "org/one", "cache": False})
    first.generate(["p"])
    load_llm({"backend": "vllm", "model": "org/two", "cache": False})
    assert fake_vllm.events == ["build org/one", "shutdown", "destroy_model_parallel",
                                "destroy_distributed_environment", "build org/two"]
    assert fake_vllm.alive() == 1
    # The first view still works: it rebuilds its engine (after freeing org/two's).
    assert first.generate(["q r"])[0].text == "base saw 2"
    assert fake_vllm.events[-1] == "build org/one" and fake_vllm.alive() == 1


def test_release_really_frees_and_the_next_call_rebuilds(fake_vllm, monkeypatch):
    import torch

    emptied: list[bool] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    llm = load_llm({"backend": "vllm", "model": "org/base", "cache": False})
    assert fake_vllm.alive() == 1
    assert llm.release() is True
    assert fake_vllm.alive() == 0  # no view, registry or frame keeps the engine
    assert fake_vllm.events[1:] == ["shutdown", "destroy_model_parallel", "destroy_distributed_environment"]
    assert emptied == [True]
    assert release_vllm_engine() is False  # nothing left to free
    assert llm.generate(["a b"])[0].text == "base saw 2"
    assert len(fake_vllm.built) == 2 and fake_vllm.alive() == 1


def test_retrained_adapter_in_the_same_folder_gets_a_new_lora_id_and_cache_key(fake_vllm, tmp_path):
    folder = _adapter(tmp_path / "critic", weights=b"epoch-1")
    cfg = {"backend": "vllm", "model": "org/base", "adapter": str(folder), "enable_lora": True, "cache": False}
    old = load_llm(cfg)
    same = load_llm(cfg)
    (folder / "adapter_model.safetensors").write_bytes(b"epoch-2")
    new = load_llm(cfg)
    ids = [m._lora_request.lora_int_id for m in (old, same, new)]
    assert ids[0] == ids[1] != ids[2]
    assert old.identity() == same.identity() and old.identity() != new.identity()


def test_engine_options_pass_through_and_unknown_keys_are_rejected(fake_vllm):
    load_llm({"backend": "vllm", "model": "org/base", "cache": False, "trust_remote_code": True,
              "quantization": "awq", "max_num_seqs": 8, "max_loras": 3, "tensor_parallel_size": 2,
              "gpu_memory_utilization": 0.5, "dtype": "float16", "max_model_len": 1024})
    built = fake_vllm.built[-1]
    assert (built["trust_remote_code"], built["quantization"], built["max_num_seqs"], built["max_loras"],
            built["tensor_parallel_size"], built["gpu_memory_utilization"], built["dtype"],
            built["max_model_len"]) == (True, "awq", 8, 3, 2, 0.5, "float16", 1024)
    n = len(fake_vllm.built)
    with pytest.raises(ValueError, match="'max_num_seq' is not an argument of vllm.LLM"):
        load_llm({"backend": "vllm", "model": "org/base", "cache": False, "max_num_seq": 8})
    with pytest.raises(ValueError, match="'swap_spce'"):
        VLLMBackend("org/base", swap_spce=4)
    assert len(fake_vllm.built) == n  # rejected before any engine was built


def test_engine_options_are_checked_without_vllm_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ValueError, match="'max_num_seq'"):
        load_llm({"backend": "vllm", "model": "org/base", "cache": False, "max_num_seq": 8})
    assert llm_mod.check_vllm_engine_options({"max_num_seqs": 8, "trust_remote_code": True}) == {
        "max_num_seqs": 8, "trust_remote_code": True}


def test_device_option(fake_vllm, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    load_llm({"backend": "vllm", "model": "org/base", "device": "cuda:1", "cache": False})
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    with pytest.raises(ValueError, match="'device'.*'cpu'"):
        load_llm({"backend": "vllm", "model": "org/base", "device": "cpu", "cache": False})


def test_choose_uses_structured_output_choice(fake_vllm):
    llm = load_llm({"backend": "vllm", "model": "org/base", "cache": False})
    out = llm.choose(["one", "one two"], [["Correct", "Error"], ["A", "B", "C"]])
    # The stand-in picks option len(prompt ids) % len(options).
    assert [(c.index, c.text, c.constrained, c.prompt_tokens) for c in out] == [(1, "Error", True, 1),
                                                                                 (2, "C", True, 2)]
    (_, sampling, _), = fake_vllm.calls
    assert [sp.kw["structured_outputs"].choice for sp in sampling] == [["Correct", "Error"], ["A", "B", "C"]]
    assert all(sp.kw["temperature"] == 0.0 for sp in sampling)


def test_choose_never_guesses_an_option(fake_vllm):
    llm = load_llm({"backend": "vllm", "model": "org/base", "cache": False})
    fake_vllm.choice_answer = "Corr"
    with pytest.raises(RuntimeError, match="returned 'Corr', not one of"):
        llm.choose(["p"], [["Correct", "Error"]])


def test_choose_without_structured_outputs_is_an_error(monkeypatch):
    release_vllm_engine()
    FakeVLLM(structured="").install(monkeypatch)
    llm = load_llm({"backend": "vllm", "model": "org/base", "cache": False})
    with pytest.raises(RuntimeError, match="cannot constrain decoding"):
        llm.choose(["p"], [["Correct", "Error"]])
    release_vllm_engine()


def test_choose_falls_back_to_guided_decoding_params_on_older_vllm(monkeypatch):
    release_vllm_engine()
    fake = FakeVLLM(structured="GuidedDecodingParams").install(monkeypatch)
    llm = load_llm({"backend": "vllm", "model": "org/base", "cache": False})
    assert llm.choose(["p"], [["Correct", "Error"]])[0].text == "Error"
    assert fake.calls[0][1][0].kw["guided_decoding"].choice == ["Correct", "Error"]
    release_vllm_engine()


def test_score_sends_all_options_of_a_prompt_in_one_call(fake_vllm):
    llm = load_llm({"backend": "vllm", "model": "org/base", "batch_size": 2, "cache": False})
    tok = fake_vllm.tokenizer
    scores = llm.score(["ab cde", "x"], [["f", "gh ij", "k"], ["f"]])
    ids = {w: tok.vocab[w] for w in ("f", "gh", "ij", "k")}
    assert scores[0] == pytest.approx([-ids["f"] / 10, -(ids["gh"] + ids["ij"]) / 10, -ids["k"] / 10])
    assert scores[1] == pytest.approx([-ids["f"] / 10])
    # batch_size 2, but the first prompt's three options still share one generate call.
    assert [len(inputs) for inputs, _, _ in fake_vllm.calls] == [3, 1]
    assert fake_vllm.calls[0][1].kw["prompt_logprobs"] == 1
