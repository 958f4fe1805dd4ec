"""The OpenAI-compatible backend against scripted loopback servers (http.server in a thread on
127.0.0.1): patient retries (429/503, Retry-After, jittered backoff, bounded by patience), a
refused prompt recorded in its Generation, scoring through /v1/completions echo + logprobs, and
adapter fingerprints in the cache key. Sleeping is replaced by a fake clock, so every retry loop
is bounded and instant."""

from __future__ import annotations

import json
import threading
from collections import Counter, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragcritic_lib.llm.cache import LLMCache
from ragcritic_lib.llm import OpenAIBackend, ServerConfigError, load_llm, retry_after_seconds


class ScriptedServer:
    """An OpenAI-compatible server: answers from ``script`` first (status, headers, body), then
    echoes. ``/v1/completions`` with ``echo`` returns word tokens with offsets and log-probability
    -len(word) / 10 per word, unless ``logprobs=False`` (then it refuses echo like a server
    without prompt log-probabilities)."""

    def __init__(self, script=(), *, refuse=(), logprobs: bool = True, meet=()) -> None:
        self.script = deque(script)
        # Requests of the models in ``meet`` wait (at most 5 s) for ``met``: set when a request of
        # one arrives while a request of another is in flight.
        self.meet, self.active, self.met = set(meet), Counter(), threading.Event()
        self.refuse = set(refuse)  # prompts answered with HTTP 400
        self.logprobs = logprobs
        self.requests: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append((self.path, body))
                    scripted = server.script.popleft() if server.script else None
                    model = body.get("model")
                    if model in server.meet:
                        if any(server.active[m] for m in server.meet - {model}):
                            server.met.set()
                        server.active[model] += 1
                if model in server.meet:
                    server.met.wait(timeout=5.0)
                    with server.lock:
                        server.active[model] -= 1
                if scripted is not None:
                    return self._send(*scripted)
                prompt = body.get("prompt") if self.path == "/v1/completions" else body["messages"][-1]["content"]
                if isinstance(prompt, str) and prompt in server.refuse:
                    return self._send(400, {}, {"error": {"message": "prompt is too long"}})
                if body.get("echo"):
                    if not server.logprobs:
                        return self._send(400, {}, {"error": {"message": "echo is not supported"}})
                    return self._send(200, {}, {"choices": [_echo_choice(i, p) for i, p in enumerate(prompt)]})
                text = "echo " + prompt
                choice = {"index": 0, "finish_reason": "stop"}
                if self.path == "/v1/completions":
                    choice["text"] = text
                else:
                    choice["message"] = {"role": "assistant", "content": text}
                usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
                self._send(200, {}, {"choices": [choice], "usage": usage})

            def _send(self, code, headers, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _echo_choice(index: int, text: str) -> dict:
    """Word tokens of ``text`` (a leading space belongs to the word) plus one generated token."""
    tokens, offsets, pos = [], [], 0
    for word in text.split(" "):
        tok = word if pos == 0 else " " + word
        tokens.append(tok)
        offsets.append(pos)
        pos += len(tok)
    tokens.append(" gen")
    offsets.append(pos)
    values = [None] + [-len(t.strip()) / 10 for t in tokens[1:-1]] + [-0.5]
    return {"index": index, "text": text + " gen", "finish_reason": "length",
            "logprobs": {"tokens": tokens, "text_offset": offsets, "token_logprobs": values, "top_logprobs": None}}


@pytest.fixture
def server():
    made: list[ScriptedServer] = []

    def make(*args, **kw) -> ScriptedServer:
        made.append(ScriptedServer(*args, **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


class FakeClock:
    """Stands in for time.sleep / time.monotonic: sleeping advances the clock instantly."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []
        self.lock = threading.Lock()

    def sleep(self, s: float) -> None:
        with self.lock:
            self.sleeps.append(s)
            self.now += s

    def monotonic(self) -> float:
        return self.now


def _backend(urls, clock: FakeClock, **kw) -> OpenAIBackend:
    llm = OpenAIBackend("tiny", urls=urls, **kw)
    llm._sleep, llm._clock = clock.sleep, clock.monotonic
    return llm


def test_429_with_retry_after_is_honoured(server):
    srv = server([(429, {"Retry-After": "7"}, {"error": "slow down"})])
    clock = FakeClock()
    llm = _backend([srv.url], clock, backoff_s=0.1)
    assert llm.generate(["hi"])[0].text == "echo hi"
    assert clock.sleeps == [7.0] and llm.retries == 1 and len(srv.requests) == 2


def test_503s_back_off_exponentially_with_jitter(server):
    srv = server([(503, {}, {"error": "busy"})] * 4)
    clock = FakeClock()
    llm = _backend([srv.url], clock, backoff_s=1.0, backoff_max_s=4.0)
    assert llm.generate(["hi"])[0].text == "echo hi"
    # Waits lie in [base/2, base] for base = 1, 2, 4, 4 (capped at backoff_max_s).
    assert len(clock.sleeps) == 4
    for wait, base in zip(clock.sleeps, (1, 2, 4, 4)):
        assert base / 2 <= wait <= base
    assert llm.retries == 4


def test_patience_bounds_the_retries_and_names_the_last_error(server):
    srv = server([(503, {}, {"error": "busy"})] * 100)
    clock = FakeClock()
    llm = _backend([srv.url], clock, backoff_s=1.0, backoff_max_s=60.0, patience_s=10.0)
    with pytest.raises(RuntimeError, match=r"within patience_s=10.*HTTP 503"):
        llm.generate(["hi"])
    assert sum(clock.sleeps) <= 10.0 and 3 <= len(srv.requests) <= 5


def test_retry_after_longer_than_patience_gives_up_at_once(server):
    srv = server([(503, {"Retry-After": "3600"}, {})])
    clock = FakeClock()
    llm = _backend([srv.url], clock, patience_s=600.0)
    with pytest.raises(RuntimeError, match="next wait 3600.0 s"):
        llm.generate(["hi"])
    assert clock.sleeps == [] and len(srv.requests) == 1


def test_default_patience_is_minutes():
    llm = OpenAIBackend("tiny", urls="http://127.0.0.1:9")
    assert llm.patience_s >= 300 and llm.max_retries is None


def test_retry_after_header_forms():
    assert retry_after_seconds("12") == 12.0
    assert retry_after_seconds("-3") == 0.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) == 30.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_refused_prompt_is_recorded_and_the_batch_goes_on(server, tmp_path):
    srv = server(refuse={"too long"})
    clock = FakeClock()
    llm = _backend([srv.url], clock, cache=LLMCache(tmp_path))
    out = llm.generate(["a", "too long", "b"])
    assert [g.text for g in out] == ["echo a", "", "echo b"]
    assert [g.finish_reason for g in out] == ["stop", "error", "stop"]
    assert out[1].error is not None and "HTTP 400" in out[1].error and "prompt is too long" in out[1].error
    assert out[0].error is None and len(llm.prompt_errors) == 1 and clock.sleeps == []
    # The refusal is not reused from the cache: a re-run asks again (and only for it).
    again = _backend([srv.url], clock, cache=LLMCache(tmp_path)).generate(["a", "too long", "b"])
    assert [g.cached for g in again] == [True, False, True] and len(srv.requests) == 4


@pytest.mark.parametrize("code", [401, 403, 404])
def test_a_config_the_server_refuses_stops_the_run_instead_of_recording_empty_answers(server, tmp_path, code):
    """A wrong model name, API key or path is refused for every prompt alike: one clear error
    naming the code and the model, nothing cached, no retries."""
    srv = server([(code, {}, {"error": {"message": "The model `tiny` does not exist"}})] * 3)
    clock = FakeClock()
    llm = _backend([srv.url], clock, cache=LLMCache(tmp_path), max_in_flight=1)
    with pytest.raises(ServerConfigError, match=rf"HTTP {code} for model 'tiny'.*model name.*does not exist"):
        llm.generate(["a", "b", "c"])
    assert clock.sleeps == [] and llm.prompt_errors == [] and len(srv.requests) < 3, len(srv.requests)
    # Once the server serves the model, a re-run answers every prompt (none was cached as refused).
    again = _backend([server().url], clock, cache=LLMCache(tmp_path)).generate(["a"])
    assert [g.text for g in again] == ["echo a"] and again[0].cached is False


def test_scoring_where_the_server_has_no_completions_endpoint_says_what_scoring_needs(server):
    """A served chat model may answer 404 on /v1/completions: that is the missing echo-logprobs
    scoring path, not a wrong model name."""
    srv = server([(404, {}, {"error": {"message": "This is a chat model"}})])
    llm = _backend([srv.url], FakeClock(), cache=None)
    with pytest.raises(NotImplementedError, match=r"no /v1/completions for this model.*log-probabilities.*HTTP 404"):
        llm.score(["Is it?"], [["yes", "no"]])


def test_failing_server_is_avoided_and_every_answer_arrives_once(server):
    bad = server([(503, {}, {})] * 1000)
    good = server()
    clock = FakeClock()
    llm = _backend([bad.url, good.url], clock, max_in_flight=1, backoff_s=1.0)
    prompts = [f"q{i}" for i in range(12)]
    out = llm.generate(prompts)
    assert [g.text for g in out] == [f"echo {p}" for p in prompts]
    answered = [b["prompt"] for _, b in good.requests]
    assert sorted(answered) == sorted(prompts)  # each prompt answered exactly once
    # After its failure the bad server rests (the clock only moved by one retry wait, shorter
    # than its cool-down): no further prompt was sent to it.
    assert len(bad.requests) == 1 and llm.retries == 1


def test_score_uses_one_echo_logprobs_request_per_prompt(server):
    srv = server()
    llm = _backend([srv.url], FakeClock())
    scores = llm.score(["The verdict is ", "Pick "], [["Correct", "Error here"], ["A"]])
    assert scores[0] == pytest.approx([-0.7, -(0.5 + 0.4)]) and scores[1] == pytest.approx([-0.1])
    assert len(srv.requests) == 2
    by_prompt = {b["prompt"][0]: b for _, b in srv.requests}
    body = by_prompt["The verdict is Correct"]
    assert body["prompt"] == ["The verdict is Correct", "The verdict is Error here"]
    assert body["echo"] is True and body["logprobs"] == 1 and body["max_tokens"] == 1


def test_score_without_prompt_logprobs_is_a_clear_error(server):
    srv = server(logprobs=False)
    llm = _backend([srv.url], FakeClock())
    with pytest.raises(NotImplementedError, match="does not return prompt log-probabilities"):
        llm.score(["The verdict is"], [["Correct", "Error"]])


def test_score_of_a_chat_prompt_needs_a_local_tokenizer(server):
    llm = _backend([server().url], FakeClock())
    with pytest.raises(ValueError, match="'tokenizer' option"):
        llm.score([[{"role": "user", "content": "q"}]], [["A", "B"]])


def _adapter(path: Path, weights: bytes) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "adapter_config.json").write_text('{"r": 8}')
    (path / "adapter_model.safetensors").write_bytes(weights)
    return path


def test_retrained_adapter_served_under_the_same_name_misses_the_cache(server, tmp_path):
    srv = server()
    folder = _adapter(tmp_path / "critic", b"epoch-1")
    cfg = {"backend": "openai", "model": "critic", "urls": srv.url, "adapter": str(folder),
           "cache_dir": str(tmp_path / "cache")}
    load_llm(cfg).generate(["x"])
    assert load_llm(cfg).generate(["x"])[0].cached is True
    (folder / "adapter_model.safetensors").write_bytes(b"epoch-2")
    assert load_llm(cfg).generate(["x"])[0].cached is False
    # An explicit revision works the same way when the weights are elsewhere.
    rev = {k: v for k, v in cfg.items() if k != "adapter"}
    assert load_llm({**rev, "adapter_revision": "r1"}).generate(["x"])[0].cached is False
    assert load_llm({**rev, "adapter_revision": "r1"}).generate(["x"])[0].cached is True
    assert load_llm({**rev, "adapter_revision": "r2"}).generate(["x"])[0].cached is False
    assert len(srv.requests) == 4
    with pytest.raises(ValueError, match="'adapter'"):
        load_llm({**cfg, "adapter": str(tmp_path / "missing")})


def test_served_pool_members_are_sampled_at_the_same_time(server, tmp_path):
    from ragcritic_lib import runtime
    from ragcritic_lib.io import read_jsonl_tolerant
    from ragcritic_lib.mining.sampling import PoolMember

    srv = server(meet={"model-a", "model-b"})
    records = [{"id": f"q{i}", "question": f"What is item {i}?", "golden_answers": ["x"],
                "metadata": {"dataset": "toy"}} for i in range(3)]
    pool = [PoolMember(name=name, llm={"backend": "openai", "model": model, "urls": srv.url, "cache": False},
                       prompt_variant="closed_book")
            for name, model in (("a", "model-a"), ("b", "model-b"))]
    out = tmp_path / "samples.jsonl"
    rows = runtime.sample_pool(records, pool, {}, out_path=out, chunk_size=2, parallel_members=2)
    assert srv.met.is_set()  # both members had requests in flight together
    assert [(r["pool_member"], r["id"]) for r in rows] == [(m, f"q{i}") for m in "ab" for i in range(3)]
    assert all(r["raw_output"].startswith("echo ") for r in rows)
    logged = read_jsonl_tolerant(out)
    assert sorted((r["pool_member"], r["id"]) for r in logged) == sorted((r["pool_member"], r["id"]) for r in rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples.jsonl"]  # side logs removed
    n = len(srv.requests)
    again = runtime.sample_pool(records, pool, {}, out_path=out, chunk_size=2, parallel_members=2)
    assert again == rows and len(srv.requests) == n  # resumed from the log: no new requests


def test_choose_on_a_refused_prompt_is_an_error_not_a_guess(server):
    from ragcritic_lib.llm import nearest_option

    srv = server(refuse={"too long"})
    llm = _backend([srv.url], FakeClock(), tokenizer=None)
    llm.count_tokens = lambda text: len(text.split())  # the stand-in server has no /tokenize
    assert nearest_option("", ["Correct", "Error"]) == 0  # what an empty refusal would have picked
    with pytest.raises(RuntimeError, match="prompt 0 was refused.*HTTP 400"):
        llm.choose(["too long"], [["Correct", "Error"]])
    assert llm.choose(["Error"], [["Correct", "Error"]])[0].text == "Error"  # "echo Error"
