"""The OpenAI-compatible HTTP backend (``vllm serve``, llama.cpp server, TGI, hosted APIs):
several URLs, a bounded number of requests in flight to each, patient retries, and refused
prompts recorded per prompt (``Generation.error``)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib.llm.cache import LLMCache
from ragcritic_lib.text import clean_text

from ragcritic_lib.llm.base import (
    Choice,
    GenParams,
    Generation,
    LLM,
    Prompt,
    _fingerprint,
    _render_chat,
    _resolve_model_path,
    cut_at_stop,
    nearest_option,
)

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# OpenAI-compatible HTTP backend
# ---------------------------------------------------------------------------------------------
class _UrlPool:
    """Hands out server slots: at most ``max_in_flight`` requests per URL, least loaded first.

    A URL whose request just failed rests for a cool-down (``backoff_s`` doubling per consecutive
    failure, capped at ``backoff_max_s``): while another URL is healthy, new requests wait for a
    slot there instead of hitting a server that is down. A success ends the cool-down.
    """

    def __init__(self, urls: list[str], max_in_flight: int, *, backoff_s: float = 1.0,
                 backoff_max_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.urls = urls
        self.max_in_flight = max_in_flight
        self.load = [0] * len(urls)
        self.failures = [0] * len(urls)
        self.down_until = [0.0] * len(urls)
        self.backoff_s, self.backoff_max_s, self.clock = backoff_s, backoff_max_s, clock
        self._next = 0
        self._cond = threading.Condition()

    def acquire(self, avoid: int | None = None) -> int:
        with self._cond:
            while True:
                now = self.clock()
                healthy = [i for i in range(len(self.urls)) if self.down_until[i] <= now]
                free = [i for i in range(len(self.urls)) if self.load[i] < self.max_in_flight]
                if healthy:
                    free = [i for i in free if i in healthy]
                if avoid is not None and len(free) > 1:
                    free = [i for i in free if i != avoid]  # retry elsewhere after a failure
                if free:
                    n = len(self.urls)
                    pick = min(free, key=lambda i: (self.load[i], (i - self._next) % n))
                    self._next = (pick + 1) % n
                    self.load[pick] += 1
                    return pick
                # Wake up when a slot frees or the earliest cool-down ends.
                ends = [t - now for t in self.down_until if t > now]
                self._cond.wait(timeout=min(ends) if ends else None)

    def release(self, i: int, *, failed: bool = False) -> None:
        with self._cond:
            self.load[i] -= 1
            if failed:
                self.failures[i] += 1
                rest = min(self.backoff_max_s, self.backoff_s * 2 ** (self.failures[i] - 1))
                self.down_until[i] = self.clock() + rest
            else:
                self.failures[i], self.down_until[i] = 0, 0.0
            self._cond.notify_all()


def _normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url[: -len("/v1")] if url.endswith("/v1") else url


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds asked for by a ``Retry-After`` header (delta seconds or an HTTP date); None if absent
    or unreadable."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class PromptRejected(RuntimeError):
    """The server refused one prompt (HTTP 4xx other than 401/403/404/408/409/429): retrying
    cannot help."""


class ServerConfigError(RuntimeError):
    """The server refuses every request of this configuration (HTTP 401, 403 or 404: a wrong API
    key, model name or URL path), so no prompt is recorded as refused: the run stops here.
    ``code`` is the HTTP status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


#: HTTP codes that say the request's configuration is wrong, whatever the prompt.
CONFIG_REFUSALS = (401, 403, 404)


class OpenAIBackend(LLM):
    """Any OpenAI-compatible server: chat prompts go to ``/v1/chat/completions``, str prompts to
    ``/v1/completions``.

    Requests run in a thread pool with at most ``max_in_flight`` open requests per URL, each sent
    to the least-loaded URL. Connection errors, timeouts, 408/409/429 and 5xx answers are retried
    on another URL when there is one, with exponential backoff (``backoff_s`` doubling up to
    ``backoff_max_s``, jittered so that many clients do not retry in step) and at least the wait a
    ``Retry-After`` header asks for, until ``patience_s`` has passed for that prompt (then the
    call fails: the servers are down). A prompt the server refuses (another 4xx, e.g. too long)
    does not abort the batch: its :class:`Generation` has ``finish_reason == "error"``, empty
    text and the server's message in ``error``; it is listed in :attr:`prompt_errors`, logged,
    and never reused from the cache. Token counts come from the server's ``usage`` field; when a
    server omits it, a local tokenizer (``tokenizer``) counts instead.

    Args:
        model: the served model name (for a LoRA served by vLLM, the adapter's served name).
        urls: base URLs ("http://host:8000" or ".../v1"), a list or a comma-separated string.
        api_key_env: name of the environment variable holding the API key (sent as Bearer).
        max_in_flight: open requests per URL.
        timeout_s: per-request timeout.
        max_retries: optional cap on retries of one prompt (None: only ``patience_s`` limits).
        backoff_s: first retry delay.
        backoff_max_s: cap of the doubling delay (a longer ``Retry-After`` is still honoured).
        patience_s: total time one prompt may spend retrying (default 10 minutes).
        tokenizer: optional local tokenizer folder for count_tokens, missing usage and scoring
            chat prompts.
        max_input_tokens: sent as vLLM's ``truncate_prompt_tokens`` (a vLLM extension).
        extra_body: extra JSON fields for every request (e.g. {"repetition_penalty": 1.1}).
        adapter: local folder of the adapter the server serves under ``model``: its weights'
            fingerprint joins the cache key, so a re-trained adapter served under the same name
            does not hit stale cache entries.
        adapter_revision: an explicit revision string for the same purpose (when the weights are
            not on this machine).
    """

    backend = "openai"

    def __init__(
        self,
        model: str,
        *,
        urls: str | Sequence[str],
        api_key_env: str | None = None,
        max_in_flight: int = 4,
        timeout_s: float = 120.0,
        max_retries: int | None = None,
        backoff_s: float = 1.0,
        backoff_max_s: float = 60.0,
        patience_s: float = 600.0,
        tokenizer: str | os.PathLike[str] | None = None,
        max_input_tokens: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        adapter: str | os.PathLike[str] | None = None,
        adapter_revision: str | None = None,
        batch_size: int = 32,
        cache: LLMCache | None = None,
    ):
        super().__init__(cache=cache, batch_size=batch_size)
        import random

        import httpx

        if not isinstance(urls, str) and not (isinstance(urls, Sequence)
                                              and all(isinstance(u, str) for u in urls)):
            raise ValueError(f"openai option 'urls' must be a URL, a comma-separated str or a list of URLs, "
                             f"got {urls!r}")
        url_list = [u for u in (urls.split(",") if isinstance(urls, str) else urls) if u and u.strip()]
        if not url_list:
            raise ValueError("backend 'openai' needs at least one server URL in 'urls'")
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an int >= 1, got {max_in_flight!r}")
        if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
            raise ValueError(f"max_retries must be None or an int >= 0, got {max_retries!r}")
        for name, value in (("backoff_s", backoff_s), ("backoff_max_s", backoff_max_s), ("patience_s", patience_s),
                            ("timeout_s", timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise ValueError(f"openai option 'extra_body' must be a mapping of request fields, got {extra_body!r}")
        self.model = str(model)
        self.urls = [_normalize_url(u) for u in url_list]
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.patience_s = float(patience_s)
        self.max_input_tokens = max_input_tokens
        self.extra_body = dict(extra_body or {})
        if max_input_tokens is not None:
            self.extra_body.setdefault("truncate_prompt_tokens", int(max_input_tokens))
        self.adapter_weights: str | None = None
        if adapter:
            local = Path(_resolve_model_path(adapter))
            if not local.is_dir():
                raise ValueError(f"openai option 'adapter': {adapter!r} is not a local adapter folder")
            self.adapter_weights = _fingerprint(local)
        if adapter_revision is not None:
            if not isinstance(adapter_revision, str) or not adapter_revision:
                raise ValueError(f"openai option 'adapter_revision' must be a non-empty str, got {adapter_revision!r}")
            self.adapter_weights = f"{self.adapter_weights or ''}@{adapter_revision}"
        self._headers = {"Content-Type": "application/json"}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(f"api_key_env: environment variable {api_key_env!r} is not set")
            self._headers["Authorization"] = f"Bearer {key}"
        self._tokenizer = None
        if tokenizer:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(_resolve_model_path(tokenizer))
        total = len(self.urls) * max_in_flight
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            limits=httpx.Limits(max_connections=total, max_keepalive_connections=total),
        )
        self._flush_every = max(self._flush_every, total)
        self._warned_usage = False
        self._random = random.Random()  # jitter only: it never changes what is generated
        self._sleep, self._clock = time.sleep, time.monotonic  # replaceable in tests
        self._pool = _UrlPool(self.urls, max_in_flight, backoff_s=self.backoff_s, backoff_max_s=self.backoff_max_s,
                              clock=lambda: self._clock())
        self._lock = threading.Lock()
        self.retries = 0
        self.prompt_errors: list[str] = []

    def identity(self) -> dict[str, Any]:
        # URLs are left out on purpose: a cluster of identical servers shares one cache.
        ident = {"backend": self.backend, "model": self.model, "extra_body": self.extra_body}
        if self.adapter_weights is not None:  # absent otherwise, so older cache keys stay valid
            ident["adapter_weights"] = self.adapter_weights
        return ident

    def count_tokens(self, text: str) -> int:
        if self._tokenizer is not None:
            return len(self._tokenizer(text, add_special_tokens=False)["input_ids"])
        # vLLM's /tokenize endpoint; other servers need the 'tokenizer' option.
        try:
            resp = self._client.post(
                f"{self.urls[0]}/tokenize",
                json={"model": self.model, "prompt": text, "add_special_tokens": False},
                headers=self._headers,
            )
            resp.raise_for_status()
            data = resp.json()
            return int(data["count"]) if "count" in data else len(data["tokens"])
        except Exception as exc:
            raise RuntimeError(
                f"{self.urls[0]}: cannot count tokens ({exc}); set the 'tokenizer' option to a local "
                "tokenizer folder"
            ) from None

    def close(self) -> None:
        self._client.close()
        super().close()

    def _request(self, prompt: Prompt, params: GenParams) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": params.max_new_tokens,
            "temperature": float(params.temperature),
            "n": 1,
        }
        if not params.greedy:
            body.update(top_p=float(params.top_p), seed=params.seed)
        if params.stop:
            body["stop"] = list(params.stop)
        body.update(self.extra_body)
        if isinstance(prompt, str):
            body["prompt"] = prompt
            return "/v1/completions", body
        body["messages"] = [{"role": m["role"], "content": m["content"]} for m in prompt]
        if prompt[-1]["role"] == "assistant":
            # Prefilled answer: ask the server to continue it (vLLM's chat extension fields).
            body.update(add_generation_prompt=False, continue_final_message=True)
        return "/v1/chat/completions", body

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Wait before retry number ``attempt`` (1-based): jittered exponential backoff, and at
        least what the server asked for."""
        base = min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1))
        delay = base / 2 + self._random.uniform(0, base / 2)
        return max(delay, retry_after or 0.0)

    def _post(self, path: str, body: Mapping[str, Any]) -> tuple[Any, str]:
        """POST ``body`` to ``path`` on some server, retrying patiently.

        Returns:
            (response, url) of the first successful (2xx) answer.

        Raises:
            ServerConfigError: HTTP 401/403/404, the same for every prompt (key, model, path).
            PromptRejected: the server refused this request (any other 4xx but 408/409/429).
            RuntimeError: retries or patience exhausted.
        """
        import httpx

        deadline = self._clock() + self.patience_s
        last_error, avoid, attempt = "", None, 0
        while True:
            u = self._pool.acquire(avoid)
            url = self.urls[u] + path
            retry_after, failed = None, True
            try:
                resp = self._client.post(url, json=body, headers=self._headers)
            except httpx.TransportError as exc:
                last_error, avoid = f"{url}: {type(exc).__name__}: {exc}", u
            else:
                code = resp.status_code
                if code in (408, 409, 429) or code >= 500:
                    last_error, avoid = f"{url}: HTTP {code}: {resp.text[:300]}", u
                    retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
                elif code in CONFIG_REFUSALS:
                    failed = False  # the server is fine; this LLM config is not
                    raise ServerConfigError(
                        f"{url}: HTTP {code} for model {self.model!r}: the server refuses every request "
                        f"of this config (check the model name, api_key_env and URL of the LLM config): "
                        f"{resp.text[:300]}", code)
                elif code >= 400:
                    failed = False  # the server is fine; the prompt is not
                    raise PromptRejected(f"{url}: HTTP {code}: {resp.text[:500]}")
                else:
                    failed = False
                    return resp, url
            finally:
                self._pool.release(u, failed=failed)
            attempt += 1
            if self.max_retries is not None and attempt > self.max_retries:
                raise RuntimeError(f"request failed after {attempt} attempts; last error: {last_error}")
            delay = self._delay(attempt, retry_after)
            if self._clock() + delay > deadline:
                raise RuntimeError(
                    f"request failed after {attempt} attempts within patience_s={self.patience_s:g} "
                    f"(next wait {delay:.1f} s); last error: {last_error}"
                )
            with self._lock:
                self.retries += 1
            self._sleep(delay)

    def _call(self, prompt: Prompt, params: GenParams) -> Generation:
        path, body = self._request(prompt, params)
        try:
            resp, url = self._post(path, body)
        except PromptRejected as exc:
            log.warning("prompt refused by the server (recorded in its Generation.error): %s", exc)
            with self._lock:
                self.prompt_errors.append(str(exc))
            return Generation("", prompt_tokens=0, completion_tokens=0, finish_reason="error", error=str(exc))
        return self._parse(resp, url, prompt, params)

    def _parse(self, resp: Any, url: str, prompt: Prompt, params: GenParams) -> Generation:
        try:
            data = resp.json()
            choice = data["choices"][0]
            if isinstance(prompt, str):
                text = choice.get("text") or ""
            else:
                text = (choice.get("message") or {}).get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise RuntimeError(f"{url}: malformed response: {resp.text[:300]}") from None
        # JSON escapes can carry a lone surrogate (a pair cut by the server); make it U+FFFD.
        text, found = cut_at_stop(clean_text(str(text)), params.stop)
        reason = "length" if choice.get("finish_reason") == "length" and not found else "stop"
        usage = data.get("usage") or {}
        p_tok, c_tok = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if p_tok is None or c_tok is None:
            p_tok, c_tok = self._local_counts(prompt, text)
        return Generation(text, prompt_tokens=int(p_tok), completion_tokens=int(c_tok), finish_reason=reason)

    def _local_counts(self, prompt: Prompt, text: str) -> tuple[int, int]:
        if self._tokenizer is None:
            if not self._warned_usage:
                log.warning("server sent no 'usage'; token counts are 0 (set 'tokenizer' to count locally)")
                self._warned_usage = True
            return 0, 0
        rendered = prompt if isinstance(prompt, str) else _render_chat(self._tokenizer, prompt)
        return self.count_tokens(rendered), self.count_tokens(text)

    def _concurrently(self, fn: Callable[[int], Any], n: int) -> Iterator[tuple[int, Any]]:
        """Run ``fn(i)`` for i < n in threads (as many as the servers accept), yielding as done."""
        from concurrent.futures import ThreadPoolExecutor, as_completed

        workers = min(n, len(self.urls) * self.max_in_flight)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-http")
        try:
            futures = {pool.submit(fn, i): i for i in range(n)}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            # On an error (or an interrupted caller) drop what has not started; finished results
            # were already yielded and cached.
            pool.shutdown(wait=True, cancel_futures=True)

    def _generate(self, prompts: list[Any], params: GenParams) -> Iterator[tuple[int, Generation]]:
        yield from self._concurrently(lambda i: self._call(prompts[i], params), len(prompts))

    def _score_one(self, prompt: Prompt, options: list[str]) -> list[float]:
        """All options of one prompt in ONE /v1/completions request: ``prompt`` is the list of
        prompt+option texts, ``echo`` returns them with ``logprobs``, and each option's tokens
        (those ending after the prompt's last character) are summed."""
        if isinstance(prompt, str):
            text = prompt
        elif self._tokenizer is not None:
            text = _render_chat(self._tokenizer, prompt)
        else:
            raise ValueError("scoring chat prompts on a served model needs the 'tokenizer' option "
                             "(the chat template is applied locally, then /v1/completions scores the text)")
        body = {"model": self.model, "prompt": [text + o for o in options], "max_tokens": 1,
                "temperature": 0.0, "echo": True, "logprobs": 1, **self.extra_body}
        no_logprobs = (
            "does not return prompt log-probabilities (/v1/completions with echo and logprobs); "
            "score with a 'hf' or 'vllm' backend, or leave the critic's verdict mode at 'generate'"
        )
        try:
            resp, url = self._post("/v1/completions", body)
        except PromptRejected as exc:
            raise NotImplementedError(f"the server {no_logprobs} [{exc}]") from None
        except ServerConfigError as exc:
            if exc.code != 404:
                raise
            # A served chat model may have no /v1/completions at all: say what scoring needs.
            raise NotImplementedError(f"the server has no /v1/completions for this model, so it {no_logprobs} "
                                      f"[{exc}]") from None
        try:
            choices = sorted(resp.json()["choices"], key=lambda c: int(c.get("index", 0)))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise RuntimeError(f"{url}: malformed response: {resp.text[:300]}") from None
        if len(choices) != len(options):
            raise RuntimeError(f"{url}: {len(choices)} choices for {len(options)} scored options")
        scores = []
        for option, choice in zip(options, choices):
            lp = choice.get("logprobs") or {}
            tokens, offsets, values = lp.get("tokens"), lp.get("text_offset"), lp.get("token_logprobs")
            if not tokens or not offsets or not values or not str(choice.get("text", "")).startswith(text):
                raise NotImplementedError(f"the server at {url} {no_logprobs}")
            end = len(text) + len(option)
            total, counted = 0.0, 0
            for t, (tok, off, value) in enumerate(zip(tokens, offsets, values)):
                tok_end = offsets[t + 1] if t + 1 < len(offsets) else off + len(tok)
                # A token merging the prompt's end with the option's start counts for the option.
                if tok_end > len(text) and off < end:
                    if value is None:
                        raise RuntimeError(f"{url}: no log-probability for option token {tok!r} at offset {off}")
                    total += float(value)
                    counted += 1
            if counted == 0:
                raise RuntimeError(f"{url}: no token of option {option!r} in the echoed prompt")
            scores.append(total)
        return scores

    def _score(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, list[float]]]:
        yield from self._concurrently(lambda i: self._score_one(prompts[i], options[i]), len(prompts))

    def _choose(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, Choice]]:
        """Greedy free generation matched to the nearest option (``Choice.constrained`` False),
        like the base class; a prompt the server refused is an error, never matched to a guess."""
        longest = max(self.count_tokens(o) for opts in options for o in opts)
        params = GenParams(max_new_tokens=min(longest + 16, 1024), temperature=0.0)
        for j, gen in self._generate(prompts, params):
            if gen.error is not None:
                raise RuntimeError(f"choose(): prompt {j} was refused by the server: {gen.error}")
            k = nearest_option(gen.text, options[j])
            yield j, Choice(index=k, text=options[j][k], prompt_tokens=gen.prompt_tokens,
                            completion_tokens=gen.completion_tokens, constrained=False, raw=gen.text)


