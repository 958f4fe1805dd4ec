"""Tests of the LLM backend interface: CallableLLM and the cache logic, the OpenAI-compatible
backend against real loopback HTTP servers, the vLLM backend's mapping (without vllm), and the
transformers backend on a tiny random model written by the test and on the packaged model."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragcritic_lib.llm.cache import LLMCache
from ragcritic_lib.llm import (
    CallableLLM,
    Generation,
    GenParams,
    OpenAIBackend,
    UsageStats,
    cut_at_stop,
    load_llm,
)

ROOT = Path(__file__).resolve().parent.parent
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]


# ---------------------------------------------------------------------------------------------
# Interface basics
# ---------------------------------------------------------------------------------------------
def test_import_stays_light():
    code = (
        "import sys, ragcritic_lib.llm, ragcritic_lib.llm.cache; "
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'httpx', 'peft') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_genparams_validation_and_cache_dict():
    assert GenParams(stop=["\n", ""]).stop == ("\n",)  # lists from YAML become tuples
    assert GenParams(stop="END").stop == ("END",)
    for bad in (dict(max_new_tokens=0), dict(temperature=-1), dict(top_p=0), dict(top_p=1.5)):
        with pytest.raises(ValueError):
            GenParams(**bad)
    with pytest.raises(TypeError):
        GenParams(stop=(1,))
    # Greedy decoding ignores top_p and seed, so they are not part of the cache key.
    assert GenParams(seed=1, top_p=0.5).cache_dict() == GenParams(seed=2).cache_dict()
    assert GenParams(temperature=0.7, seed=1).cache_dict() != GenParams(temperature=0.7, seed=2).cache_dict()


def test_request_counters_include_cache_hits(tmp_path):
    from ragcritic_lib.llm.cache import LLMCache

    llm = CallableLLM(lambda prompt, params: "answer", name="t", cache=LLMCache(tmp_path))
    llm.generate(["p1", "p2"], GenParams(max_new_tokens=4))
    cold = llm.stats.snapshot()
    llm.stats.reset()
    llm.generate(["p1", "p2"], GenParams(max_new_tokens=4))
    warm = llm.stats.snapshot()
    assert cold["requests"] == warm["requests"] == 2
    assert warm["cached_calls"] == 2 and warm["calls"] == 0
    assert (cold["request_prompt_tokens"], cold["request_completion_tokens"]) == \
        (warm["request_prompt_tokens"], warm["request_completion_tokens"])


def test_cut_at_stop():
    assert cut_at_stop("a. b\nc", ["\n", "."]) == ("a", True)
    assert cut_at_stop("abc", ["x"]) == ("abc", False)
    assert cut_at_stop("abc", []) == ("abc", False)
    assert cut_at_stop("STOPx", ["STOP"]) == ("", True)


def test_usage_stats_snapshot_and_reset():
    stats = UsageStats()
    stats.add(calls=2, prompt_tokens=10, seconds=0.5)
    stats.add(calls=1, cached_calls=3)
    snap = stats.snapshot()
    assert snap == {
        "calls": 3, "cached_calls": 3, "prompt_tokens": 10, "completion_tokens": 0,
        "seconds": 0.5, "truncated_inputs": 0, "requests": 0, "request_prompt_tokens": 0,
        "request_completion_tokens": 0,
    }
    json.dumps(snap)
    stats.reset()
    assert stats.snapshot()["calls"] == 0 and stats.seconds == 0.0


# ---------------------------------------------------------------------------------------------
# CallableLLM and the shared cache / de-duplication logic
# ---------------------------------------------------------------------------------------------
class Recorder:
    """A fake model that answers deterministically and records what it was asked."""

    def __init__(self, fail_after: int | None = None):
        self.seen: list = []
        self.fail_after = fail_after

    def __call__(self, prompt, params):
        if self.fail_after is not None and len(self.seen) >= self.fail_after:
            raise RuntimeError("simulated crash")
        self.seen.append(prompt)
        text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        return f"echo {text} t={params.temperature} s={params.seed}"


def test_callable_llm_basic_results():
    rec = Recorder()
    llm = CallableLLM(rec, name="echo")
    out = llm.generate([CHAT, "raw prompt"], GenParams(stop=("t=",)))
    assert [g.text for g in out] == ["echo Capital of France? ", "echo raw prompt "]
    assert out[0].prompt_tokens == 7  # "system: Be brief.\nuser: Capital of France?"
    assert out[1] == Generation("echo raw prompt ", 2, 3, "stop", cached=False)
    assert rec.seen == [CHAT, "raw prompt"]
    assert llm.identity() == {"backend": "callable", "model": "echo"}
    assert llm.count_tokens("a b  c") == 3
    assert llm.stats.snapshot()["calls"] == 2 and llm.stats.prompt_tokens == 9 and llm.stats.completion_tokens == 7


def test_callable_llm_can_return_generation():
    llm = CallableLLM(lambda p, gp: Generation("one two three END four", 9, 64, "length"))
    assert llm.generate(["x"])[0] == Generation("one two three END four", 9, 64, "length")
    # A stop string found afterwards makes it a normal stop.
    assert llm.generate(["x"], GenParams(stop=("END",)))[0] == Generation("one two three ", 9, 64, "stop")


def test_generate_rejects_bad_prompts():
    llm = CallableLLM(Recorder())
    with pytest.raises(TypeError, match="wrap a single prompt"):
        llm.generate("just a string")
    with pytest.raises(ValueError, match="prompt 1, message 0: role"):
        llm.generate(["ok", [{"role": "bot", "content": "x"}]])
    with pytest.raises(TypeError, match="prompt 0, message 0: 'content'"):
        llm.generate([[{"role": "user", "content": None}]])
    with pytest.raises(TypeError, match="prompt 0"):
        llm.generate([[]])
    with pytest.raises(TypeError, match="GenParams"):
        llm.generate(["x"], {"max_new_tokens": 3})
    assert llm.generate([]) == []


def test_cache_hits_misses_and_order(tmp_path):
    cache = LLMCache(tmp_path)
    rec = Recorder()
    llm = CallableLLM(rec, name="m1", cache=cache)
    first = llm.generate(["a", "b", CHAT])
    assert len(rec.seen) == 3 and not any(g.cached for g in first)

    rec2 = Recorder()
    again = CallableLLM(rec2, name="m1", cache=LLMCache(tmp_path))  # a fresh process would do this
    second = again.generate(["b", "new", CHAT, "a"])
    assert rec2.seen == ["new"]  # only the miss is generated
    assert [g.text for g in second] == ["echo b t=0.0 s=0", "echo new t=0.0 s=0", "echo Capital of France? t=0.0 s=0", "echo a t=0.0 s=0"]
    assert [g.cached for g in second] == [True, False, True, True]
    assert dataclasses.replace(second[0], cached=False) == first[1]
    assert again.stats.snapshot()["calls"] == 1 and again.stats.cached_calls == 3


def test_cache_key_sensitivity(tmp_path):
    cache = LLMCache(tmp_path)
    rec = Recorder()
    CallableLLM(rec, name="m1", cache=cache).generate(["p"], GenParams(max_new_tokens=8))
    assert len(rec.seen) == 1

    def misses(name="m1", prompt="p", **params) -> int:
        r = Recorder()
        CallableLLM(r, name=name, cache=cache).generate([prompt], GenParams(**{"max_new_tokens": 8, **params}))
        return len(r.seen)

    assert misses() == 0
    assert misses(seed=5) == 0  # greedy: the seed cannot change the output
    assert misses(name="m2") == 1  # model
    assert misses(prompt="p ") == 1  # prompt
    assert misses(prompt=[{"role": "user", "content": "p"}]) == 1  # chat vs raw
    assert misses(max_new_tokens=9) == 1
    assert misses(stop=("x",)) == 1
    assert misses(temperature=0.5) == 1
    assert misses(temperature=0.5) == 0  # now cached
    assert misses(temperature=0.5, seed=1) == 1
    assert misses(temperature=0.5, top_p=0.9) == 1


def test_duplicates_in_one_call_are_generated_once():
    rec = Recorder()
    llm = CallableLLM(rec)
    out = llm.generate(["a", "b", "a", "a"], GenParams(temperature=1.0, seed=3))
    assert rec.seen == ["a", "b"]
    assert [g.text for g in out] == ["echo a t=1.0 s=3", "echo b t=1.0 s=3"] + ["echo a t=1.0 s=3"] * 2
    assert [g.cached for g in out] == [False, False, True, True]
    assert llm.stats.calls == 2 and llm.stats.cached_calls == 2
    # Different seeds are different samples.
    out = llm.generate(["a", "a"], GenParams(temperature=1.0, seed=4))
    assert len(rec.seen) == 3


def test_interrupted_generate_keeps_finished_results(tmp_path):
    prompts = [f"q{i}" for i in range(5)]
    crashing = Recorder(fail_after=3)
    with pytest.raises(RuntimeError, match="simulated crash"):
        CallableLLM(crashing, cache=LLMCache(tmp_path)).generate(prompts)
    assert len(LLMCache(tmp_path)) == 3
    rec = Recorder()
    out = CallableLLM(rec, cache=LLMCache(tmp_path)).generate(prompts)
    assert rec.seen == ["q3", "q4"]
    assert [g.text for g in out] == [f"echo q{i} t=0.0 s=0" for i in range(5)]


def test_progress_bar_desc(capsys):
    out = CallableLLM(Recorder()).generate(["a", "b"], desc="answering")
    assert len(out) == 2
    assert "answering" in capsys.readouterr().err


def test_fingerprint_tracks_content_not_mtime(tmp_path):
    import os

    from ragcritic_lib.llm import _fingerprint

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"a": 1}')
    (model / "model.safetensors").write_bytes(bytes(range(256)) * 20000)  # > 4 MiB: sampled
    fp = _fingerprint(model)
    os.utime(model / "model.safetensors", (1, 1))
    (model / "checkpoint-5").mkdir()  # trainer leftovers in sub-folders do not count
    (model / "checkpoint-5" / "x.bin").write_bytes(b"x")
    assert _fingerprint(model) == fp
    (model / "config.json").write_text('{"a": 2}')
    assert _fingerprint(model) != fp
    (model / "config.json").write_text('{"a": 1}')
    with (model / "model.safetensors").open("r+b") as fh:
        fh.seek(-3, os.SEEK_END)
        fh.write(b"zzz")  # a change in the last MiB of the weights
    assert _fingerprint(model) != fp
    assert _fingerprint("org/name") == _fingerprint("org/name") != _fingerprint("org/other")


# ---------------------------------------------------------------------------------------------
# load_llm
# ---------------------------------------------------------------------------------------------
def test_load_llm_rejects_bad_configs():
    with pytest.raises(ValueError, match="'backend'"):
        load_llm({"backend": "gpt", "model": "m"})
    with pytest.raises(ValueError, match="CallableLLM"):
        load_llm({"backend": "callable", "model": "m"})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['temprature'\]"):
        load_llm({"backend": "hf", "model": "m", "temprature": 0.1})
    with pytest.raises(ValueError, match="'model'"):
        load_llm({"backend": "hf"})
    with pytest.raises(ValueError, match="'urls' is required"):
        load_llm({"backend": "openai", "model": "m", "cache": False})
    with pytest.raises(ValueError, match=r"'adapter'.*not a local adapter folder"):
        load_llm({"backend": "openai", "model": "m", "urls": "http://x", "adapter": "data/a"})
    with pytest.raises(ValueError, match=r"\['no_repeat_ngram_size'\]"):
        load_llm({"backend": "vllm", "model": "m", "no_repeat_ngram_size": 3})
    with pytest.raises(ValueError, match="'max_in_flight' must be an int"):
        load_llm({"backend": "openai", "model": "m", "urls": "http://x", "max_in_flight": "4", "cache": False})
    with pytest.raises(TypeError):
        load_llm(["backend", "hf"])


@pytest.mark.parametrize("model", ["data/assets/models/smollm2-135m-instruc", "./my-model", "/models/llama-8b",
                                   "~/no/such/model"])
def test_a_local_model_folder_that_is_not_there_is_named(model):
    """A misspelt folder is not sent to the hub as a name (a download error minutes later)."""
    for backend in ("hf", "vllm"):
        with pytest.raises(ValueError, match=rf"'model': no such local model folder '{model}'"):
            load_llm({"backend": backend, "model": model, "cache": False})


@pytest.mark.parametrize("key, value, message", [
    ("urls", 8000, "'urls' must be a URL"),
    ("urls", ["http://a", 1], "'urls' must be a URL"),
    ("extra_body", ["x"], "'extra_body' must be a mapping"),
    ("timeout_s", "60", "'timeout_s' must be a number"),
    ("patience_s", -1, "'patience_s' must be a number >= 0"),
])
def test_served_backend_options_of_the_wrong_type_name_their_key(key, value, message):
    with pytest.raises(ValueError, match=message):
        load_llm({"backend": "openai", "model": "m", "urls": "http://x", "cache": False, key: value})


def test_load_llm_openai_ignores_local_runtime_keys(tmp_path):
    llm = load_llm({
        "backend": "openai", "model": "served", "urls": "http://a:1/v1, b:2", "max_in_flight": 3,
        "dtype": "bfloat16", "device": "cpu", "batch_size": 4, "repetition_penalty": 1.2,
        "cache_dir": str(tmp_path),
    })
    assert isinstance(llm, OpenAIBackend)
    assert llm.urls == ["http://a:1", "http://b:2"] and llm.max_in_flight == 3
    assert llm.identity() == {"backend": "openai", "model": "served", "extra_body": {"repetition_penalty": 1.2}}
    assert llm.cache is not None and llm.cache.path.parent == tmp_path
    assert load_llm({"backend": "openai", "model": "m", "urls": ["http://a"], "cache": False}).cache is None


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible backend against real loopback servers
# ---------------------------------------------------------------------------------------------
class FakeServer:
    """A tiny OpenAI-compatible server: echoes the prompt, reports usage, counts concurrency.

    Behaviour knobs: ``fail_first`` answers the first N requests with HTTP 500; ``delay_s``
    holds each request open; ``usage`` toggles the usage field; model "bad" gets HTTP 400.
    The reply is "echo <words>" truncated to max_tokens words (finish_reason "length" then);
    it ignores "stop", so the client must cut.
    """

    def __init__(self, *, delay_s: float = 0.0, fail_first: int = 0, usage: bool = True):
        self.delay_s, self.fail_first, self.usage = delay_s, fail_first, usage
        self.lock = threading.Lock()
        self.active = self.max_active = self.count = self.failed = 0
        self.requests: list[tuple[str, dict, dict]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.count += 1
                    server.active += 1
                    server.max_active = max(server.max_active, server.active)
                    fail = server.count <= server.fail_first
                    server.failed += fail
                    server.requests.append((self.path, body, dict(self.headers)))
                try:
                    time.sleep(server.delay_s)
                    if fail:
                        return self._send(500, {"error": "overloaded"})
                    if body.get("model") == "bad":
                        return self._send(400, {"error": "unknown model"})
                    if self.path == "/v1/chat/completions":
                        prompt = body["messages"][-1]["content"]
                    elif self.path == "/v1/completions":
                        prompt = body["prompt"]
                    else:
                        return self._send(404, {"error": "no route"})
                    words = ("echo " + prompt).split()
                    n = body["max_tokens"]
                    reason = "length" if len(words) > n else "stop"
                    text = " ".join(words[:n])
                    choice = {"index": 0, "finish_reason": reason}
                    if self.path == "/v1/chat/completions":
                        choice["message"] = {"role": "assistant", "content": text}
                    else:
                        choice["text"] = text
                    reply = {"choices": [choice]}
                    if server.usage:
                        reply["usage"] = {"prompt_tokens": len(prompt.split()), "completion_tokens": min(n, len(words))}
                    self._send(200, reply)
                finally:
                    with server.lock:
                        server.active -= 1

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    made: list[FakeServer] = []

    def make(**kw) -> FakeServer:
        made.append(FakeServer(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_openai_chat_and_completions(servers, monkeypatch):
    srv = servers()
    monkeypatch.setenv("FAKE_KEY", "sekret")
    llm = OpenAIBackend("tiny", urls=srv.url + "/v1/", api_key_env="FAKE_KEY", backoff_s=0.01)
    out = llm.generate(
        [[{"role": "user", "content": "one two STOP three"}], "raw words here", "a b c d e f"],
        GenParams(max_new_tokens=4, stop=("STOP",)),
    )
    assert out[0] == Generation("echo one two ", 4, 4, "stop")  # server ignored stop; we cut
    assert out[1] == Generation("echo raw words here", 3, 4, "stop")
    assert out[2] == Generation("echo a b c", 6, 4, "length")
    paths = sorted(p for p, _, _ in srv.requests)
    assert paths == ["/v1/chat/completions", "/v1/completions", "/v1/completions"]
    for _, body, headers in srv.requests:
        assert body["model"] == "tiny" and body["max_tokens"] == 4 and body["stop"] == ["STOP"]
        assert body["temperature"] == 0.0 and "seed" not in body  # greedy
        assert headers["Authorization"] == "Bearer sekret"
    assert llm.stats.calls == 3 and llm.stats.prompt_tokens == 13 and llm.stats.completion_tokens == 12

    llm.generate(["x"], GenParams(temperature=0.8, top_p=0.9, seed=7))
    body = srv.requests[-1][1]
    assert (body["temperature"], body["top_p"], body["seed"]) == (0.8, 0.9, 7)
    assert "continue_final_message" not in body
    # A prefilled assistant message asks the server to continue it.
    llm.generate([[{"role": "user", "content": "q"}, {"role": "assistant", "content": "{"}]])
    body = srv.requests[-1][1]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    llm.close()


def test_openai_two_urls_respect_max_in_flight(servers):
    a, b = servers(delay_s=0.05), servers(delay_s=0.05)
    llm = OpenAIBackend("tiny", urls=f"{a.url},{b.url}", max_in_flight=2)
    prompts = [f"question {i}" for i in range(16)]
    out = llm.generate(prompts, GenParams(max_new_tokens=8))
    assert [g.text for g in out] == [f"echo question {i}" for i in range(16)]
    assert a.count + b.count == 16 and a.count >= 1 and b.count >= 1
    assert a.max_active <= 2 and b.max_active <= 2


def test_openai_retries_500_then_succeeds(servers):
    srv = servers(fail_first=2)
    llm = OpenAIBackend("tiny", urls=[srv.url], max_retries=3, backoff_s=0.01)
    out = llm.generate(["hello there"])
    assert out[0].text == "echo hello there"
    assert srv.failed == 2 and srv.count == 3


def test_openai_moves_to_another_url_on_connection_error(servers):
    srv = servers()
    llm = OpenAIBackend("tiny", urls=[_closed_port_url(), srv.url], max_in_flight=1, backoff_s=0.01)
    out = llm.generate([f"p{i}" for i in range(4)])
    assert [g.text for g in out] == [f"echo p{i}" for i in range(4)]
    assert srv.count == 4


def test_openai_gives_up_after_retries(servers):
    srv = servers(fail_first=100)
    llm = OpenAIBackend("tiny", urls=[srv.url], max_retries=2, backoff_s=0.01)
    with pytest.raises(RuntimeError, match="after 3 attempts.*HTTP 500"):
        llm.generate(["x"])
    assert srv.count == 3


def test_openai_client_error_is_not_retried(servers):
    srv = servers()
    llm = OpenAIBackend("bad", urls=[srv.url], max_retries=3, backoff_s=0.01)
    [gen] = llm.generate(["x"])  # recorded in the prompt's Generation, not raised
    assert (gen.text, gen.finish_reason) == ("", "error") and "HTTP 400" in gen.error and "unknown model" in gen.error
    assert srv.count == 1


def test_openai_missing_usage_and_missing_api_key(servers, monkeypatch):
    srv = servers(usage=False)
    llm = OpenAIBackend("tiny", urls=[srv.url])
    assert llm.generate(["a b"])[0] == Generation("echo a b", 0, 0, "stop")
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ValueError, match="NO_SUCH_KEY_VAR"):
        OpenAIBackend("tiny", urls=[srv.url], api_key_env="NO_SUCH_KEY_VAR")


def test_openai_results_are_cached(servers, tmp_path):
    srv = servers()
    llm = OpenAIBackend("tiny", urls=[srv.url], cache=LLMCache(tmp_path))
    first = llm.generate(["a", "b"])
    second = OpenAIBackend("tiny", urls=[_closed_port_url()], cache=LLMCache(tmp_path)).generate(["b", "a"])
    assert srv.count == 2
    assert [g.text for g in second] == [first[1].text, first[0].text] and all(g.cached for g in second)


# ---------------------------------------------------------------------------------------------
# vLLM backend without vllm
# ---------------------------------------------------------------------------------------------
def test_vllm_missing_gives_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    from ragcritic_lib.llm import VLLMBackend

    with pytest.raises(ImportError, match="needs the vllm package.*GPU"):
        VLLMBackend("some/model")
    with pytest.raises(ImportError, match="needs the vllm package"):
        load_llm({"backend": "vllm", "model": "some/model", "cache": False})


def _install_fake_vllm(monkeypatch, engine, sampling_params, lora_request=None):
    """Make ``import vllm`` (and ``vllm.lora.request``) return stand-ins for this test."""
    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = engine, sampling_params
    lora_mod = types.ModuleType("vllm.lora.request")
    lora_mod.LoRARequest = lora_request
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.lora", types.ModuleType("vllm.lora"))
    monkeypatch.setitem(sys.modules, "vllm.lora.request", lora_mod)


def test_vllm_backend_maps_params_and_outputs(monkeypatch, tmp_path):
    """A stand-in ``vllm`` module records how the backend drives vLLM's documented API."""
    calls: dict = {}

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class FakeTokenizer:
        chat_template = "x"

        def encode(self, text, add_special_tokens=True):
            assert add_special_tokens is False
            return list(range(len(text.split())))

        def apply_chat_template(self, messages, tokenize, add_generation_prompt, continue_final_message):
            assert tokenize is False
            return " ".join(m["content"] for m in messages) + (" ASSISTANT" if add_generation_prompt else "")

    class FakeLLM:
        def __init__(self, **kw):
            calls["engine"] = kw

        def get_tokenizer(self):
            return FakeTokenizer()

        def generate(self, inputs, sp, **kw):
            calls.setdefault("generate", []).append((inputs, sp.kw, kw))
            outs = []
            for inp in inputs:
                n = len(inp["prompt_token_ids"])
                comp = types.SimpleNamespace(text=f"out{n} tail", token_ids=[0] * n, finish_reason="length" if n > 3 else "stop")
                outs.append(types.SimpleNamespace(outputs=[comp], prompt_token_ids=inp["prompt_token_ids"]))
            return outs

    class LoRARequest:
        def __init__(self, name, int_id, path):
            self.args = (name, int_id, path)

    _install_fake_vllm(monkeypatch, FakeLLM, SamplingParams, LoRARequest)

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 24}))
    llm = load_llm({
        "backend": "vllm", "model": "org/model", "adapter": str(adapter), "dtype": "bfloat16",
        "max_input_tokens": 4, "gpu_memory_utilization": 0.5, "batch_size": 2, "cache": False,
        "device": "cuda",  # a local-runtime key of the hf backend: ignored
    })
    eng = calls["engine"]
    assert eng["model"] == "org/model" and eng["dtype"] == "bfloat16" and eng["gpu_memory_utilization"] == 0.5
    assert eng["enable_lora"] is True and eng["max_lora_rank"] == 32

    out = llm.generate([[{"role": "user", "content": "a b"}], "one two three four five six", "x"],
                       GenParams(max_new_tokens=5, stop=("tail",)))
    assert out[0] == Generation("out3 ", 3, 3, "stop")  # "a b ASSISTANT": 3 tokens
    assert out[1] == Generation("out4 ", 4, 4, "stop")  # truncated to 4; stop string found -> stop
    assert out[2] == Generation("out1 ", 1, 1, "stop")
    assert llm.stats.truncated_inputs == 1
    (inputs1, sp, kw), (inputs2, _, _) = calls["generate"]
    assert inputs1 == [{"prompt_token_ids": [0, 1, 2]}, {"prompt_token_ids": [2, 3, 4, 5]}] and len(inputs2) == 1
    assert sp == {"n": 1, "max_tokens": 5, "temperature": 0.0, "top_p": 1.0, "seed": None, "stop": ["tail"], "repetition_penalty": 1.0}
    name, lora_id, lora_path = kw["lora_request"].args
    assert (name, lora_path) == (f"adapter-{lora_id}", str(adapter)) and kw["use_tqdm"] is False
    sampled = llm.sampling_params(GenParams(temperature=0.7, top_p=0.8, seed=11))
    assert (sampled.kw["temperature"], sampled.kw["top_p"], sampled.kw["seed"], sampled.kw["stop"]) == (0.7, 0.8, 11, None)
    assert llm.identity()["adapter"] == "adapter" and llm.identity()["backend"] == "vllm"


def test_vllm_backend_scores_options_from_prompt_logprobs(monkeypatch):
    """Option scores are sums of vLLM's prompt log-probabilities over the option's tokens."""
    seen: list = []

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class Tok:
        chat_template = None

        def encode(self, text, add_special_tokens=True):
            return [len(w) for w in text.split()]  # a word's token id is its length

    class Logprob:
        def __init__(self, logprob):
            self.logprob = logprob

    class Engine:
        def __init__(self, **kw):
            pass

        def get_tokenizer(self):
            return Tok()

        def generate(self, inputs, sp, **kw):
            seen.append((len(inputs), sp.kw))
            outs = []
            for inp in inputs:
                ids = inp["prompt_token_ids"]
                # position i holds the log-probability of token ids[i]: -id / 10 (first: None)
                lps = [None] + [{t: Logprob(-t / 10), 99: Logprob(-0.01)} for t in ids[1:]]
                outs.append(types.SimpleNamespace(prompt_logprobs=lps, outputs=[]))
            return outs

    _install_fake_vllm(monkeypatch, Engine, SamplingParams)
    llm = load_llm({"backend": "vllm", "model": "org/model", "batch_size": 2, "cache": False})
    scores = llm.score(["ab cde", "x"], [["f", "gh ij"], ["klm"]])
    assert scores[0] == pytest.approx([-0.1, -0.4]) and scores[1] == pytest.approx([-0.3])
    assert [n for n, _ in seen] == [2, 1]  # three requests in chunks of batch_size
    assert seen[0][1]["prompt_logprobs"] == 1 and seen[0][1]["max_tokens"] == 1
    with pytest.raises(ValueError, match="encodes to no tokens"):
        llm.score(["ab"], [["  "]])


# ---------------------------------------------------------------------------------------------
# transformers backend: a tiny random model written by the test (always runs)
# ---------------------------------------------------------------------------------------------
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _write_tiny_model(out: Path, *, eos_first: bool = False) -> Path:
    """A 2-layer random Llama with a small BPE tokenizer and a ChatML template. ``eos_first``
    zeroes the final norm, so all logits tie and greedy picks token 0, the end token."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|im_end|>", "<|im_start|>", "<|endoftext|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["The capital of France is Paris.", "So the final answer is: yes, no."] * 10, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>")
    fast.chat_template = CHATML
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=1, eos_token_id=0, pad_token_id=0)
    model = LlamaForCausalLM(cfg)
    if eos_first:
        with torch.no_grad():
            model.model.norm.weight.zero_()
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    pytest.importorskip("torch")
    return _write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    import torch

    torch.set_num_threads(1)
    from ragcritic_lib.llm import HFBackend

    return HFBackend(tiny_dir, dtype="float32", device="cpu", batch_size=3)


PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    "The capital",
    [{"role": "system", "content": "Answer."}, {"role": "user", "content": "So the final answer is yes or no?"}],
    "Paris",
    [{"role": "user", "content": "yes"}],
]


def test_hf_tiny_render_and_counts(tiny):
    assert tiny.render(PROMPTS[0]) == "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    assert tiny.render("raw") == "raw"
    prefilled = tiny.render([{"role": "user", "content": "Q"}, {"role": "assistant", "content": '{"Judgement": "'}])
    assert prefilled.endswith('<|im_start|>assistant\n{"Judgement": "')
    out = tiny.generate(PROMPTS, GenParams(max_new_tokens=6))
    for prompt, g in zip(PROMPTS, out):
        assert g.prompt_tokens == tiny.count_tokens(tiny.render(prompt))
        assert g.completion_tokens == 6 and g.finish_reason == "length"  # random weights never stop
    ident = tiny.identity()
    assert ident["model"] == "tiny-llama" and ident["dtype"] == "float32" and len(ident["weights"]) == 16


def test_hf_tiny_batched_equals_unbatched(tiny):
    params = GenParams(max_new_tokens=8)
    batched = tiny.generate(PROMPTS, params)
    single = [tiny.generate([p], params)[0] for p in PROMPTS]
    assert batched == single


def test_hf_tiny_stop_string_in_a_padded_batch(tiny):
    free = tiny.generate(PROMPTS, GenParams(max_new_tokens=8))
    first_token_text = tiny.generate([PROMPTS[1]], GenParams(max_new_tokens=1))[0].text
    stop = first_token_text.strip() or first_token_text
    assert stop and free[1].text.startswith(first_token_text)
    out = tiny.generate(PROMPTS, GenParams(max_new_tokens=8, stop=(stop,)))
    for f, g in zip(free, out):
        text, found = cut_at_stop(f.text, [stop])
        assert g.text == text
        assert g.finish_reason == ("stop" if found else f.finish_reason)
        assert g.completion_tokens <= f.completion_tokens
    assert out[1].completion_tokens == 1  # stopped on its first token, padding not counted


def test_hf_tiny_end_token_gives_stop(tmp_path):
    from ragcritic_lib.llm import HFBackend

    llm = HFBackend(_write_tiny_model(tmp_path / "eos", eos_first=True), dtype="float32", device="cpu")
    out = llm.generate(PROMPTS[:3], GenParams(max_new_tokens=5))
    assert out == [Generation("", g.prompt_tokens, 1, "stop") for g in out]


def test_hf_tiny_truncation_sampling_and_rng(tiny_dir):
    import torch

    from ragcritic_lib.llm import HFBackend

    llm = HFBackend(tiny_dir, dtype="float32", device="cpu", max_input_tokens=6, batch_size=2)
    long = "The capital of France is Paris. " * 5
    g = llm.generate([long], GenParams(max_new_tokens=2))[0]
    assert g.prompt_tokens == 6 and llm.stats.truncated_inputs == 1
    tail = llm.tokenizer.decode(llm.tokenizer(long, add_special_tokens=False)["input_ids"][-6:])
    full = HFBackend(tiny_dir, dtype="float32", device="cpu")
    assert full.generate([tail], GenParams(max_new_tokens=2))[0].text == g.text

    state = torch.random.get_rng_state()
    p = GenParams(max_new_tokens=6, temperature=1.0, seed=1)
    a = [x.text for x in llm.generate(PROMPTS, p)]
    assert torch.equal(state, torch.random.get_rng_state())  # caller's RNG untouched
    assert [x.text for x in llm.generate(PROMPTS, p)] == a  # same seed, same samples
    assert [x.text for x in llm.generate(PROMPTS, dataclasses.replace(p, seed=2))] != a


def test_hf_tiny_shared_prompt_prefix_scores_as_a_full_pass(tiny, monkeypatch):
    head = "The capital of France is Paris. So the final answer is: yes, no. " * 3
    prompts = [[{"role": "system", "content": head}, {"role": "user", "content": q}]
               for q in ("Paris?", "So the capital?", "yes")]
    options = [["Paris is the capital.", "no, no."], ["yes, yes, no.", "The final answer."], ["so", "Paris, France."]]
    full = tiny.score(prompts, options)
    used = []
    real = type(tiny)._shared_prefix

    def spy(self, encoded, opt_all):
        got = real(self, encoded, opt_all)
        used.append(None if got is None else got[0])
        return got

    monkeypatch.setattr(type(tiny), "_shared_prefix", spy)
    monkeypatch.setattr(tiny, "cache", None)
    monkeypatch.setattr(tiny, "share_prompt_prefix", True)
    shared = tiny.score(prompts, options)
    n_head = len(tiny.encode(tiny.render(prompts[0]))) - len(tiny.encode(tiny.render([{"role": "user", "content": "Paris?"}])))
    assert used and used[-1] is not None and used[-1] >= max(tiny.min_shared_prefix, n_head - 2)
    assert all(abs(a - b) < 1e-4 for ra, rb in zip(full, shared) for a, b in zip(ra, rb))
    monkeypatch.setattr(tiny, "share_prompt_prefix", False)
    tiny.score(prompts, options)
    assert used[-1] is None  # off: every prompt is encoded whole
    monkeypatch.setattr(tiny, "share_prompt_prefix", True)
    tiny.score(prompts[:1], options[:1])
    assert used[-1] is None  # one prompt: nothing to share


def test_hf_tiny_adapter_and_cache(tiny_dir, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from ragcritic_lib.llm import HFBackend

    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    torch.manual_seed(1)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")

    cache = LLMCache(tmp_path / "cache")
    plain = HFBackend(tiny_dir, dtype="float32", device="cpu", cache=cache)
    tuned = HFBackend(tiny_dir, adapter=tmp_path / "adapter", dtype="float32", device="cpu", cache=cache)
    assert tuned.identity()["adapter"] == "adapter" and tuned.identity()["adapter_weights"]
    params = GenParams(max_new_tokens=6)
    a = plain.generate(PROMPTS, params)
    b = tuned.generate(PROMPTS, params)
    assert [x.text for x in a] != [x.text for x in b]  # the merged adapter changes the model
    assert tuned.stats.calls == 5  # a different identity: no hits from the base model's entries
    again = tuned.generate(PROMPTS, params)
    assert [x.text for x in again] == [x.text for x in b] and all(x.cached for x in again)


# ---------------------------------------------------------------------------------------------
# transformers backend on the packaged SmolLM2-135M-Instruct (skips when it is not built)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm(smollm_dir):
    import torch

    torch.set_num_threads(2)
    from ragcritic_lib.llm import HFBackend

    return HFBackend(smollm_dir, dtype="float32", device="cpu", batch_size=4)


SMOL_PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Name a primary colour."}],
    [{"role": "user", "content": "Write a long essay about the history of the Roman Empire, its rise and its fall."}],
    "The three largest planets of the solar system are",
]


def test_smollm_chat_template(smollm):
    text = smollm.render([{"role": "user", "content": "Hi"}])
    assert text.startswith("<|im_start|>system\n")  # the template's default system prompt
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert smollm.tokenizer.eos_token_id == 2 and smollm.pad_token_id == 2
    assert 2 in smollm.eos_token_ids


def test_smollm_batched_greedy_equals_unbatched(smollm):
    params = GenParams(max_new_tokens=8)
    batched = smollm.generate(SMOL_PROMPTS, params)
    single = [smollm.generate([p], params)[0] for p in SMOL_PROMPTS]
    assert [g.text for g in batched] == [g.text for g in single]
    assert batched == single
    for p, g in zip(SMOL_PROMPTS, batched):
        assert g.prompt_tokens == smollm.count_tokens(smollm.render(p))
        assert 1 <= g.completion_tokens <= 8
        # "length" means 8 tokens without the end token; fewer tokens means it ended itself.
        assert g.finish_reason == "stop" or g.completion_tokens == 8


def test_smollm_stop_string_and_length(smollm):
    free = smollm.generate([SMOL_PROMPTS[2]], GenParams(max_new_tokens=8))[0]
    assert free.finish_reason == "length" and free.completion_tokens == 8  # an essay takes > 8 tokens
    words = free.text.split()
    assert len(words) >= 3
    stop = words[2]
    cut = smollm.generate([SMOL_PROMPTS[2]], GenParams(max_new_tokens=8, stop=(stop,)))[0]
    assert cut.text == free.text[: free.text.index(stop)]
    assert cut.finish_reason == "stop" and cut.completion_tokens < 8
    short = smollm.generate([SMOL_PROMPTS[2]], GenParams(max_new_tokens=2))[0]
    assert short.finish_reason == "length" and short.completion_tokens == 2


def test_fingerprint_sees_a_change_in_the_middle_of_a_weight_file(tmp_path):
    """Training only some layers changes bytes far from both ends of the weight file."""
    from ragcritic_lib.llm import _fingerprint

    model = tmp_path / "m"
    model.mkdir()
    weights = bytearray(9 << 20)
    (model / "model.safetensors").write_bytes(bytes(weights))
    before = _fingerprint(model)
    weights[5 << 20] = 1  # neither in the first nor in the last MiB
    (model / "model.safetensors").write_bytes(bytes(weights))
    assert _fingerprint(model) != before


@pytest.mark.parametrize("device", ["gpu", "cuda0", "CPU", "tpu"])
def test_hf_device_names_are_checked_before_the_weights_load(device):
    from ragcritic_lib.llm.hf import _resolve_device

    with pytest.raises(ValueError, match=rf"'device' must be auto, cpu, mps, cuda or cuda:N, got '{device}'"):
        _resolve_device(device)
    assert _resolve_device("cpu") == "cpu"
