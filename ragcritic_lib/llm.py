"""One interface to every language model the project calls, with a persistent cache.

Backends:

* :class:`HFBackend` -- transformers on CPU or GPU: batched, left-padded, chat templates, optional
  LoRA adapter (merged for inference).
* :class:`VLLMBackend` -- vLLM offline engine (GPU only, imported lazily): one engine per
  process, shared by views of one base model that differ by LoRA adapter;
  :func:`release_vllm_engine` frees it.
* :class:`OpenAIBackend` -- any OpenAI-compatible HTTP server (``vllm serve``, llama.cpp server,
  TGI, hosted APIs); several URLs, a bounded number of requests in flight to each, patient
  retries, refused prompts recorded per prompt (``Generation.error``).
* :class:`CallableLLM` -- a plain Python function, for tests and rule-based stand-ins.

Every backend answers :meth:`LLM.generate` the same way: prompts found in the persistent
:class:`~ragcritic_lib.cache.LLMCache` are returned from it, only the misses are generated (each
distinct prompt once), results are written to the cache as they arrive (an interrupted run keeps
its progress) and come back in input order. :func:`load_llm` builds a backend from the
``generator`` / critic dictionaries of params.yaml.

Sampling is reproducible through ``GenParams.seed``: the same prompt, parameters and seed give
the same cache key and therefore the same text on a re-run. To draw several different samples of
one prompt, vary the seed (``dataclasses.replace(params, seed=i)``); identical (prompt, params)
pairs inside one call are generated once and share the result.

Importing this module imports neither torch, transformers, httpx nor vllm.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import logging
import os
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.cache import LLMCache, make_key
from ragcritic_lib.text import clean_text

log = logging.getLogger(__name__)

Message = dict[str, str]
Prompt = list[Message] | str

_ROLES = ("system", "user", "assistant")


# ---------------------------------------------------------------------------------------------
# Data classes of the interface
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GenParams:
    """Decoding parameters of one :meth:`LLM.generate` call.

    Attributes:
        max_new_tokens: cap on generated tokens; hitting it gives ``finish_reason == "length"``.
        temperature: 0 means greedy decoding (then ``top_p`` and ``seed`` do not matter).
        top_p: nucleus sampling mass, in (0, 1].
        stop: generation is cut at the first occurrence of any of these strings, which is removed.
        seed: seed of the sampler; vary it to draw different samples of the same prompt.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        # params.yaml gives lists; a frozen dataclass needs object.__setattr__ to normalise them.
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if not all(isinstance(s, str) for s in stop):
            raise TypeError(f"GenParams.stop must hold strings, got {self.stop!r}")
        object.__setattr__(self, "stop", tuple(s for s in stop if s))
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"GenParams.max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if not self.temperature >= 0:
            raise ValueError(f"GenParams.temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"GenParams.top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.seed, int):
            raise TypeError(f"GenParams.seed must be an int, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def cache_dict(self) -> dict[str, Any]:
        """The parameters that can change the output (greedy ignores ``top_p`` and ``seed``)."""
        d: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "stop": list(self.stop)}
        if self.greedy:
            d["temperature"] = 0.0
        else:
            d.update(temperature=float(self.temperature), top_p=float(self.top_p), seed=self.seed)
        return d


@dataclass
class Generation:
    """One generated completion.

    Attributes:
        text: the completion, cut before the first stop string (never includes the prompt).
        prompt_tokens: tokens of the prompt as the model saw it (after any truncation).
        completion_tokens: tokens the model generated (the cost, including a final end token).
        finish_reason: ``"stop"`` (end token or stop string), ``"length"`` (hit max_new_tokens)
            or ``"error"`` (the server refused this prompt; ``text`` is empty).
        cached: True when no model call was spent on it in this ``generate`` call.
        error: the server's message when ``finish_reason == "error"``, else None. Such a
            generation is never answered from the cache, so a re-run asks again.
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    cached: bool = False
    error: str | None = None

    def to_cache(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_cache(cls, obj: Mapping[str, Any]) -> Generation | None:
        """Rebuild a cached generation; None when the stored object is not one of ours."""
        try:
            gen = cls(
                text=obj["text"],
                prompt_tokens=int(obj["prompt_tokens"]),
                completion_tokens=int(obj["completion_tokens"]),
                finish_reason=obj["finish_reason"],
                cached=True,
            )
        except (KeyError, TypeError, ValueError):
            return None
        return gen if isinstance(gen.text, str) and gen.finish_reason in ("stop", "length") else None


@dataclass
class UsageStats:
    """Cumulative usage of one backend, for cost tables.

    Attributes:
        calls: prompts the backend actually generated.
        cached_calls: prompts answered without generation (cache hits, duplicates in a call).
        prompt_tokens: prompt tokens of the generated calls.
        completion_tokens: completion tokens of the generated calls.
        seconds: wall time spent generating (cache lookups excluded).
        truncated_inputs: prompts cut from the left to fit ``max_input_tokens``.
        requests: every prompt answered, from the model or the cache.
        request_prompt_tokens, request_completion_tokens: tokens of every answered prompt,
            cached or not: what the method costs, independent of what this run found cached
            (the cost tables use these, so two runs of one configuration report the same cost).
    """

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    truncated_inputs: int = 0
    requests: int = 0
    request_prompt_tokens: int = 0
    request_completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: float) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def snapshot(self) -> dict[str, float]:
        """Plain dict of the counters (JSON-ready)."""
        with self._lock:
            return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "_lock"}

    def reset(self) -> None:
        with self._lock:
            for f in dataclasses.fields(self):
                if f.name != "_lock":
                    setattr(self, f.name, f.default)


@dataclass
class Choice:
    """The option a constrained decode picked for one prompt (:meth:`LLM.choose`).

    Attributes:
        index: position of the chosen option in the prompt's option list.
        text: the chosen option.
        prompt_tokens, completion_tokens: cost of the call (completion: the option's tokens).
        constrained: True when decoding could only produce one of the options; False when the
            backend generated freely and the output was matched to the nearest option.
        raw: the free generation that was matched (empty when constrained).
        cached: True when no model call was spent on it.
    """

    index: int
    text: str
    prompt_tokens: int
    completion_tokens: int
    constrained: bool
    raw: str = ""
    cached: bool = False

    def to_cache(self) -> dict[str, Any]:
        return {"index": self.index, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "constrained": self.constrained, "raw": self.raw}


def nearest_option(text: str, options: Sequence[str]) -> int:
    """Index of the option closest to ``text`` (character similarity; first wins ties)."""
    import difflib

    clean = " ".join(str(text).split())
    scores = [difflib.SequenceMatcher(None, clean, " ".join(o.split()), autojunk=False).ratio() for o in options]
    return max(range(len(options)), key=lambda i: (scores[i], -i))


def _check_options(prompts: Sequence[Any], options: Sequence[Sequence[str]]) -> list[list[str]]:
    if isinstance(prompts, (str, Mapping)):
        raise TypeError("pass a sequence of prompts; wrap a single prompt in a list")
    if len(options) != len(prompts):
        raise ValueError(f"got {len(prompts)} prompts but {len(options)} option lists")
    out = []
    for i, opts in enumerate(options):
        if isinstance(opts, str) or not opts or not all(isinstance(o, str) and o for o in opts):
            raise ValueError(f"options[{i}] must be a non-empty list of non-empty strings, got {opts!r}")
        out.append(list(opts))
    return out


# ---------------------------------------------------------------------------------------------
# Small helpers shared by the backends
# ---------------------------------------------------------------------------------------------
def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest occurrence of any stop string.

    Returns:
        (text, found): the possibly shortened text and whether a stop string occurred.
    """
    cut = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if 0 <= i < cut:
                cut = i
    return text[:cut], cut < len(text)


def validate_prompt(prompt: Any, index: int = 0) -> None:
    """Raise a clear error unless ``prompt`` is a str or a list of {"role", "content"} messages."""
    if isinstance(prompt, str):
        return
    if not isinstance(prompt, list) or not prompt:
        raise TypeError(
            f"prompt {index}: expected a str or a non-empty list of messages, got {type(prompt).__name__}"
        )
    for j, msg in enumerate(prompt):
        if not isinstance(msg, Mapping):
            raise TypeError(f"prompt {index}, message {j}: expected a dict, got {type(msg).__name__}")
        if msg.get("role") not in _ROLES:
            raise ValueError(
                f"prompt {index}, message {j}: role must be one of {_ROLES}, got {msg.get('role')!r}"
            )
        if not isinstance(msg.get("content"), str):
            raise TypeError(f"prompt {index}, message {j}: 'content' must be a str")


def _fingerprint(path: str | os.PathLike[str] | None) -> str | None:
    """A cheap content fingerprint of a model or adapter folder, for cache keys.

    Small files (configs, tokenizer) are hashed whole; large weight files by name, size and their
    first and last MiB. Modification times are ignored on purpose: ``dvc checkout`` changes them
    without changing the content. A name that is not a local folder hashes as the name.
    """
    if path is None:
        return None
    p = Path(path)
    h = hashlib.sha256()
    if not p.exists():
        h.update(str(path).encode())
        return h.hexdigest()[:16]
    # Top level only: loaders read only those files, and trainers leave checkpoint-*/ folders
    # next to the final adapter that must not change its identity.
    files = sorted(f for f in (p.iterdir() if p.is_dir() else [p]) if f.is_file() and not f.name.startswith("."))
    chunk = 1 << 20
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.name}\0{size}\0".encode())
        with f.open("rb") as fh:
            if size <= 4 * chunk:
                h.update(fh.read())
            else:
                h.update(fh.read(chunk))
                fh.seek(size - chunk)
                h.update(fh.read(chunk))
    return h.hexdigest()[:16]


def _resolve_model_path(model: str | os.PathLike[str]) -> str:
    """A local folder (relative paths are relative to the repo root) or, if none exists, the name."""
    p = Path(model).expanduser()
    if p.exists():
        return str(p.resolve())
    rp = paths.resolve(model)
    return str(rp) if rp.exists() else str(model)


def _model_label(model: str) -> str:
    """The part of a model path that names it (the folder), so moving the repo keeps cache keys."""
    p = Path(model)
    return p.name if p.exists() else str(model)


def _adapter_has_tokenizer(adapter: str | None) -> bool:
    return bool(adapter) and (Path(adapter) / "tokenizer_config.json").exists()


def _render_chat(tokenizer: Any, messages: list[Message]) -> str:
    """Render messages with the tokenizer's chat template, ready for the assistant's turn.

    A conversation ending with an assistant message is continued (the model completes that
    message), which lets callers prefill the start of an answer, e.g. ``{"Judgement": "``.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "this tokenizer has no chat template; pass raw str prompts or use a model with one"
        )
    cont = messages[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tokenize=False,
        add_generation_prompt=not cont,
        continue_final_message=cont,
    )


# ---------------------------------------------------------------------------------------------
# The interface
# ---------------------------------------------------------------------------------------------
class LLM(ABC):
    """Base class: the cache, de-duplication, stats and ordering live here, once.

    Subclasses implement :meth:`identity`, :meth:`_generate` and :meth:`count_tokens`, and may
    override :meth:`_prepare` (what a prompt looks like to the model and to the cache key).
    """

    backend: str = "abstract"
    model: str = ""

    def __init__(self, *, cache: LLMCache | None = None, batch_size: int = 8):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.cache = cache
        self.batch_size = batch_size
        self.stats = UsageStats()
        # Results are written to the cache in groups of this many (and at least every 10 s).
        self._flush_every = max(8, batch_size)

    # -- to implement --------------------------------------------------------------------------
    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """Everything besides prompt and params that changes the output (goes into cache keys)."""

    @abstractmethod
    def _generate(self, prompts: list[Any], params: GenParams) -> Iterator[tuple[int, Generation]]:
        """Generate every prepared prompt (no cache), yielding (index, generation) as they finish."""

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` for this model (no special tokens added)."""

    def _prepare(self, prompt: Prompt) -> Any:
        """The prompt as this backend sends it (also what the cache key hashes)."""
        return prompt

    # -- the shared algorithm ------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[Prompt], params: GenParams = GenParams(), *, desc: str | None = None
    ) -> list[Generation]:
        """Generate one completion per prompt, answering what it can from the cache.

        Args:
            prompts: chat prompts (lists of messages) or raw strings; mixed is fine.
            params: decoding parameters shared by all prompts.
            desc: when given, a progress bar with this label is shown for the generated part.

        Returns:
            One :class:`Generation` per prompt, in input order.
        """
        if isinstance(prompts, (str, Mapping)):
            raise TypeError("generate() takes a sequence of prompts; wrap a single prompt in a list")
        if not isinstance(params, GenParams):
            raise TypeError(f"params must be a GenParams, got {type(params).__name__}")
        prompts = list(prompts)
        for i, p in enumerate(prompts):
            validate_prompt(p, i)
        prepared = [self._prepare(p) for p in prompts]
        identity, pkey = self.identity(), params.cache_dict()
        keys = [make_key(identity, p, pkey) for p in prepared]

        results: list[Generation | None] = [None] * len(prompts)
        hits = self.cache.get_many(keys) if self.cache is not None else {}
        todo: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            gen = Generation.from_cache(hits[key]) if key in hits else None
            if gen is not None:
                results[i] = gen
            else:
                todo.setdefault(key, []).append(i)
        miss_keys = list(todo)
        self.stats.add(cached_calls=len(prompts) - len(miss_keys))
        if not miss_keys:
            self.stats.add(requests=len(results), request_prompt_tokens=sum(r.prompt_tokens for r in results),
                           request_completion_tokens=sum(r.completion_tokens for r in results))
            return results  # type: ignore[return-value]

        pending: list[tuple[str, dict[str, Any]]] = []
        last_flush = time.monotonic()
        bar = _progress(len(miss_keys), desc)
        start = time.perf_counter()
        stream = self._generate([prepared[todo[k][0]] for k in miss_keys], params)
        try:
            for j, gen in stream:
                key = miss_keys[j]
                first, *dups = todo[key]
                results[first] = gen
                for i in dups:
                    results[i] = dataclasses.replace(gen, cached=True)
                self.stats.add(
                    calls=1, prompt_tokens=gen.prompt_tokens, completion_tokens=gen.completion_tokens
                )
                pending.append((key, gen.to_cache()))
                if bar is not None:
                    bar.update(1)
                if len(pending) >= self._flush_every or time.monotonic() - last_flush > 10:
                    self._flush(pending)
                    last_flush = time.monotonic()
        finally:
            # Stop the backend's workers now (not at garbage collection) on an error, and keep
            # whatever finished, even when the run is interrupted half way.
            close = getattr(stream, "close", None)
            if close is not None:
                close()
            self._flush(pending)
            self.stats.add(seconds=time.perf_counter() - start)
            if bar is not None:
                bar.close()
        missing = [i for i, r in enumerate(results) if r is None]
        done = [r for r in results if r is not None]
        self.stats.add(requests=len(done), request_prompt_tokens=sum(r.prompt_tokens for r in done),
                       request_completion_tokens=sum(r.completion_tokens for r in done))
        if missing:
            raise RuntimeError(f"{self.backend} backend returned no result for prompts {missing[:10]}")
        return results  # type: ignore[return-value]

    # -- scoring and constrained choice ------------------------------------------------------
    def _score(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, list[float]]]:
        """Log-probabilities of options (no cache); backends that can, override this."""
        raise NotImplementedError(
            f"the {self.backend} backend cannot score continuations; use a 'hf' or 'vllm' backend "
            "for calibrated verdicts, or leave the critic's verdict mode at 'generate'"
        )

    def score(self, prompts: Sequence[Prompt], options: Sequence[Sequence[str]], *,
              desc: str | None = None) -> list[list[float]]:
        """Total log-probability of each option as the continuation of its prompt.

        A chat prompt ending with an assistant message is continued, so a caller can prefill a
        verdict's opening (``{"Judgement": "``) and compare ``["Correct", "Error"]``. Results
        are cached like generations.

        Raises:
            NotImplementedError: for backends that expose no log-probabilities.
        """
        opts = _check_options(prompts, options)
        for i, p in enumerate(prompts):
            validate_prompt(p, i)
        prepared = [self._prepare(p) for p in prompts]
        identity = self.identity()
        keys = [make_key(identity, p, {"op": "score", "options": o}) for p, o in zip(prepared, opts)]
        hits = self.cache.get_many(keys) if self.cache is not None else {}
        results: list[list[float] | None] = [None] * len(keys)
        todo: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            val = hits.get(key, {}).get("logprobs")
            if isinstance(val, list) and len(val) == len(opts[i]):
                results[i] = [float(v) for v in val]
            else:
                todo.setdefault(key, []).append(i)
        miss = list(todo)
        self.stats.add(cached_calls=len(keys) - len(miss), requests=len(keys))
        if miss:
            start = time.perf_counter()
            pending: list[tuple[str, dict[str, Any]]] = []
            bar = _progress(len(miss), desc)
            try:
                for j, lps in self._score([prepared[todo[k][0]] for k in miss], [opts[todo[k][0]] for k in miss]):
                    for i in todo[miss[j]]:
                        results[i] = list(lps)
                    pending.append((miss[j], {"logprobs": list(lps)}))
                    self.stats.add(calls=1)
                    if bar is not None:
                        bar.update(1)
            finally:
                self._flush(pending)
                self.stats.add(seconds=time.perf_counter() - start)
                if bar is not None:
                    bar.close()
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise RuntimeError(f"{self.backend} backend returned no scores for prompts {missing[:10]}")
        return results  # type: ignore[return-value]

    def _choose(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, Choice]]:
        """Default: greedy free generation matched to the nearest option (backends without
        constrained decoding, e.g. a served model)."""
        longest = max(self.count_tokens(o) for opts in options for o in opts)
        params = GenParams(max_new_tokens=min(longest + 16, 1024), temperature=0.0)
        for j, gen in self._generate(prompts, params):
            k = nearest_option(gen.text, options[j])
            yield j, Choice(index=k, text=options[j][k], prompt_tokens=gen.prompt_tokens,
                            completion_tokens=gen.completion_tokens, constrained=False, raw=gen.text)

    def choose(self, prompts: Sequence[Prompt], options: Sequence[Sequence[str]], *,
               desc: str | None = None) -> list[Choice]:
        """Pick one option per prompt by decoding that can only write one of the options.

        The transformers backend decodes greedily inside a token trie of the options (so the
        result is always exactly one option); other backends generate freely and take the
        nearest option (``Choice.constrained`` is then False). Cached like generations.
        """
        opts = _check_options(prompts, options)
        for i, p in enumerate(prompts):
            validate_prompt(p, i)
        prepared = [self._prepare(p) for p in prompts]
        identity = self.identity()
        keys = [make_key(identity, p, {"op": "choose", "options": o}) for p, o in zip(prepared, opts)]
        hits = self.cache.get_many(keys) if self.cache is not None else {}
        results: list[Choice | None] = [None] * len(keys)
        todo: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            hit = hits.get(key)
            try:
                k = int(hit["index"]) if hit is not None else -1
                if 0 <= k < len(opts[i]):
                    results[i] = Choice(index=k, text=opts[i][k], prompt_tokens=int(hit["prompt_tokens"]),
                                        completion_tokens=int(hit["completion_tokens"]),
                                        constrained=bool(hit["constrained"]), raw=str(hit.get("raw", "")),
                                        cached=True)
            except (KeyError, TypeError, ValueError):
                results[i] = None
            if results[i] is None:
                todo.setdefault(key, []).append(i)
        miss = list(todo)
        self.stats.add(cached_calls=len(keys) - len(miss))
        if miss:
            start = time.perf_counter()
            pending: list[tuple[str, dict[str, Any]]] = []
            bar = _progress(len(miss), desc)
            try:
                for j, ch in self._choose([prepared[todo[k][0]] for k in miss], [opts[todo[k][0]] for k in miss]):
                    first, *dups = todo[miss[j]]
                    results[first] = ch
                    for i in dups:
                        results[i] = dataclasses.replace(ch, cached=True)
                    pending.append((miss[j], ch.to_cache()))
                    self.stats.add(calls=1, prompt_tokens=ch.prompt_tokens, completion_tokens=ch.completion_tokens)
                    if bar is not None:
                        bar.update(1)
            finally:
                self._flush(pending)
                self.stats.add(seconds=time.perf_counter() - start)
                if bar is not None:
                    bar.close()
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise RuntimeError(f"{self.backend} backend returned no choice for prompts {missing[:10]}")
        done = [r for r in results if r is not None]
        self.stats.add(requests=len(done), request_prompt_tokens=sum(r.prompt_tokens for r in done),
                       request_completion_tokens=sum(r.completion_tokens for r in done))
        return results  # type: ignore[return-value]

    def _flush(self, pending: list[tuple[str, dict[str, Any]]]) -> None:
        if pending and self.cache is not None:
            self.cache.put_many(pending)
        pending.clear()

    def close(self) -> None:
        """Release network clients and cache connections (models are freed by the GC)."""
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"


def _progress(total: int, desc: str | None) -> Any:
    if desc is None:
        return None
    # Plain text bar on stderr: it reads the same in a terminal and in papermill's executed notebooks.
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="prompt")


# ---------------------------------------------------------------------------------------------
# Callable backend (tests, rule-based stand-ins)
# ---------------------------------------------------------------------------------------------
class CallableLLM(LLM):
    """A deterministic backend that calls ``fn(prompt, params)`` for each prompt.

    ``fn`` returns the completion text (stop strings are applied afterwards, like every backend),
    or a full :class:`Generation` when a test needs to control token counts or finish_reason.
    Tokens are whitespace-separated words. No persistent cache unless one is passed.

    Args:
        fn: the function standing in for a model.
        name: the model name (part of the cache identity).
        cache: optional cache, e.g. ``LLMCache(tmp_path)`` in a test of caching behaviour.
        score_fn: optional ``score_fn(prompt, options) -> list[float]`` giving log-probabilities
            for :meth:`LLM.score`; without it scoring raises NotImplementedError like a served
            model's backend.
    """

    backend = "callable"

    def __init__(
        self,
        fn: Callable[[Prompt, GenParams], str | Generation],
        name: str = "callable",
        *,
        cache: LLMCache | None = None,
        batch_size: int = 8,
        score_fn: Callable[[Prompt, list[str]], Sequence[float]] | None = None,
    ):
        super().__init__(cache=cache, batch_size=batch_size)
        self.fn = fn
        self.score_fn = score_fn
        self.model = name

    def _score(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, list[float]]]:
        if self.score_fn is None:
            yield from super()._score(prompts, options)
            return
        for i, (prompt, opts) in enumerate(zip(prompts, options)):
            yield i, [float(v) for v in self.score_fn(prompt, opts)]

    def identity(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model}

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _prompt_text(self, prompt: Prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)

    def _generate(self, prompts: list[Any], params: GenParams) -> Iterator[tuple[int, Generation]]:
        for i, prompt in enumerate(prompts):
            out = self.fn(prompt, params)
            if isinstance(out, Generation):
                text, found = cut_at_stop(clean_text(out.text), params.stop)
                yield i, dataclasses.replace(
                    out, text=text, finish_reason="stop" if found else out.finish_reason, cached=False
                )
                continue
            if not isinstance(out, str):
                raise TypeError(f"CallableLLM function returned {type(out).__name__}, expected str")
            text, _ = cut_at_stop(clean_text(out), params.stop)
            yield i, Generation(
                text=text,
                prompt_tokens=self.count_tokens(self._prompt_text(prompt)),
                completion_tokens=self.count_tokens(text),
                finish_reason="stop",
            )


# ---------------------------------------------------------------------------------------------
# transformers backend
# ---------------------------------------------------------------------------------------------
def _resolve_device(device: str) -> str:
    import torch

    if device in ("auto", None, ""):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} requested but torch sees no CUDA GPU")
    return str(device)


def _resolve_dtype(dtype: str, device: str) -> str:
    """Map "auto" to the fastest safe dtype: bf16 on GPUs that have it and on CPUs with
    AMX/AVX512-BF16 (about 2.5x faster than fp32 there), float32 otherwise."""
    import torch

    if dtype not in ("auto", "bfloat16", "float32", "float16"):
        raise ValueError(f"dtype must be one of auto, bfloat16, float32, float16; got {dtype!r}")
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    cpu = getattr(torch, "cpu", None)
    fast_bf16 = False
    for probe in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        fn = getattr(cpu, probe, None)
        if fn is not None:
            try:
                fast_bf16 = fast_bf16 or bool(fn())
            except Exception:  # a probe missing on this build is not an error
                pass
    return "bfloat16" if fast_bf16 else "float32"


# Prompts are left-padded to a multiple of this many tokens (see plan_batches).
PAD_MULTIPLE = 64


def padded_width(n_tokens: int, multiple: int = PAD_MULTIPLE) -> int:
    """The width a prompt of ``n_tokens`` is left-padded to: the next multiple of ``multiple``
    strictly above it, so every row carries at least one pad and attention always takes the
    masked path (an unpadded batch would take another kernel)."""
    return (n_tokens // multiple + 1) * multiple


def plan_batches(lengths: Sequence[int], batch_size: int, multiple: int = PAD_MULTIPLE) -> list[tuple[list[int], int]]:
    """Group prompts into batches whose tensor shapes depend on each prompt alone.

    Greedy decoding of a row is not invariant to the shape of its batch: the attention's
    reduction runs over the padded width, and on CPU a different width (or a different number
    of rows) changes the rounding and so, at a near tie, the argmax. Hence each prompt is padded
    to :func:`padded_width` of its own length and only prompts of equal width share a batch, so
    which other prompts a call holds (for instance the cache misses of a re-run) cannot change the
    width a prompt is computed at. The number of rows still varies with the call: measured, it
    changed no answer (bf16 and fp32 probes, 1 vs 4 rows, and one call vs two calls in
    tests/test_batch_invariance.py), while filling every batch to ``batch_size`` rows with copies
    cost up to 2.5x the CPU on small calls, so batches hold real prompts only.

    Args:
        lengths: token count of each prompt.
        batch_size: rows per batch.
        multiple: width granularity in tokens.

    Returns:
        (indices, width) pairs: widest first; inside one width, longest first, then input order.
    """
    by_width: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_width.setdefault(padded_width(n, multiple), []).append(i)
    plan = []
    for width in sorted(by_width, reverse=True):
        members = sorted(by_width[width], key=lambda i: (-lengths[i], i))
        plan += [(members[s : s + batch_size], width) for s in range(0, len(members), batch_size)]
    return plan


def _left_padded(rows: Sequence[Sequence[int]], width: int, n_rows: int, pad_id: int) -> tuple[Any, Any]:
    """Input ids and attention mask of ``rows`` left-padded to ``width`` (``n_rows`` rows: more
    than ``len(rows)`` fills with copies of the first row, whose outputs are discarded)."""
    import torch

    filled = list(rows) + [rows[0]] * (n_rows - len(rows))
    input_ids = torch.full((len(filled), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(filled), width), dtype=torch.long)
    for r, ids in enumerate(filled):
        if len(ids) > width:
            raise ValueError(f"row {r} has {len(ids)} tokens, more than the batch width {width}")
        if ids:
            input_ids[r, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[r, width - len(ids) :] = 1
    return input_ids, attention


def _row_seed(seed: int, prompt_ids: Sequence[int]) -> int:
    """The sampling seed of one prompt: a function of the call's seed and the prompt alone."""
    blob = json.dumps([seed, list(prompt_ids)], separators=(",", ":")).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 1


def _row_sampler(seeds: Sequence[int], temperature: float, top_p: float) -> Any:
    """A logits processor that makes greedy decoding draw a sample, with one random stream per row.

    Gumbel-max: the argmax of ``log p + Gumbel noise`` is a draw from ``p`` (here the softmax of
    logits / temperature, restricted to the top-p nucleus). Each row's noise comes from its own
    generator, so a prompt's sample does not depend on the other rows of its batch, and the
    global torch RNG is never touched.
    """
    import torch
    from transformers import LogitsProcessor

    class _RowSampler(LogitsProcessor):
        def __init__(self) -> None:
            self.generators = [torch.Generator().manual_seed(s) for s in seeds]

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            logp = torch.log_softmax(scores.float() / temperature, dim=-1)
            if top_p < 1.0:
                sorted_lp, order = logp.sort(dim=-1, descending=True)
                probs = sorted_lp.exp()
                # Drop a token once the mass of the tokens ranked above it reaches top_p (the
                # most likely token is always kept).
                drop_sorted = (probs.cumsum(-1) - probs) >= top_p
                logp = logp.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
            u = torch.stack([torch.rand(scores.shape[-1], generator=g) for g in self.generators])
            gumbel = -torch.log(-torch.log(u.clamp(min=1e-12)))
            return logp + gumbel.to(logp.device)

    return _RowSampler()


class HFBackend(LLM):
    """transformers causal LM: batched, left-padded generation on CPU or GPU.

    Prompts are rendered with the tokenizer's chat template (``add_generation_prompt=True``)
    and encoded without adding special tokens; raw str prompts are encoded as they are. A prompt
    is computed at the same width whatever else the call holds (left-padded to
    :func:`padded_width` of its own length, batched with equal widths only, at most
    ``batch_size`` rows, see :func:`plan_batches`), so its output does not depend on its batch
    neighbours nor on which prompts an earlier run left in the cache. Greedy when temperature is 0, else sampling
    from a random stream seeded by ``GenParams.seed`` and the prompt itself (the caller's torch
    RNG state is left untouched).

    Args:
        model: local model folder (relative paths are relative to the repo root).
        adapter: optional LoRA adapter folder (peft); merged into the weights for inference. Its
            tokenizer is used when it saved one (training may change the chat template).
        dtype: "auto" (bf16 where fast, else fp32), "bfloat16", "float32" or "float16".
        device: "auto" (CUDA when available), "cpu", "cuda", "cuda:1"...
        batch_size: rows of every forward batch (short batches are filled with copies).
        max_input_tokens: prompts longer than this are cut from the left (the end, with the
            question and the assistant turn, is what matters most).
        repetition_penalty: >1 discourages repeating tokens (1.0 = off).
        no_repeat_ngram_size: forbid repeating any n-gram of this size (0 = off).
        cache: the persistent cache, or None for none.
        attn_implementation: passed to ``from_pretrained`` when set (e.g. "sdpa", "eager").
    """

    backend = "hf"

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        adapter: str | os.PathLike[str] | None = None,
        dtype: str = "auto",
        device: str = "auto",
        batch_size: int = 8,
        max_input_tokens: int | None = None,
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
        cache: LLMCache | None = None,
        attn_implementation: str | None = None,
    ):
        super().__init__(cache=cache, batch_size=batch_size)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.model = _resolve_model_path(model)
        self.adapter = _resolve_model_path(adapter) if adapter else None
        if self.adapter and not Path(self.adapter).exists():
            raise FileNotFoundError(f"{self.adapter}: LoRA adapter folder not found")
        self.device = _resolve_device(device)
        self.dtype = _resolve_dtype(dtype, self.device)
        if max_input_tokens is not None and max_input_tokens < 1:
            raise ValueError(f"max_input_tokens must be >= 1, got {max_input_tokens!r}")
        self.max_input_tokens = max_input_tokens
        self.repetition_penalty = float(repetition_penalty)
        self.no_repeat_ngram_size = int(no_repeat_ngram_size)

        tok_dir = self.adapter if _adapter_has_tokenizer(self.adapter) else self.model
        self.tokenizer = AutoTokenizer.from_pretrained(tok_dir)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

        kwargs: dict[str, Any] = {"dtype": getattr(torch, self.dtype)}
        if self.device.startswith("cuda"):
            kwargs["device_map"] = self.device  # load straight onto the GPU
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        hf_model = AutoModelForCausalLM.from_pretrained(self.model, **kwargs)
        if self.adapter:
            from peft import PeftModel

            if len(self.tokenizer) > hf_model.get_input_embeddings().weight.shape[0]:
                hf_model.resize_token_embeddings(len(self.tokenizer))
            hf_model = PeftModel.from_pretrained(hf_model, self.adapter).merge_and_unload()
        self.hf_model = hf_model.to(self.device).eval()

        # End tokens: the model's generation config may list several (e.g. <|im_end|> and <|endoftext|>).
        eos = self.hf_model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = sorted(eos_ids)
        self.pad_token_id = int(self.tokenizer.pad_token_id)
        # A clean generation config, so no sampling default shipped with the checkpoint
        # (top_k=50, temperature...) leaks into our decoding.
        self.hf_model.generation_config = GenerationConfig(
            bos_token_id=self.tokenizer.bos_token_id,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
        )
        self._identity = {
            "backend": self.backend,
            "model": _model_label(self.model),
            "weights": _fingerprint(self.model),
            "adapter": _model_label(self.adapter) if self.adapter else None,
            "adapter_weights": _fingerprint(self.adapter),
            "dtype": self.dtype,
            "max_input_tokens": self.max_input_tokens,
            "repetition_penalty": self.repetition_penalty,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
        }

    def identity(self) -> dict[str, Any]:
        # The batch shape a prompt is computed at (rows, width granularity) and the sampler are
        # part of what decides its output, so entries made under other settings never match.
        batching = {"rows": self.batch_size, "fill": "none", "pad_multiple": PAD_MULTIPLE, "sampler": "row-gumbel"}
        return {**self._identity, "batching": batching}

    def render(self, prompt: Prompt) -> str:
        """The exact text the model reads for ``prompt`` (before tokenization)."""
        validate_prompt(prompt)
        return prompt if isinstance(prompt, str) else _render_chat(self.tokenizer, prompt)

    def _prepare(self, prompt: Prompt) -> str:
        return self.render(prompt)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(self, text: str) -> list[int]:
        """Token ids of a rendered prompt, left-truncated to ``max_input_tokens``."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if self.max_input_tokens is not None and len(ids) > self.max_input_tokens:
            ids = ids[-self.max_input_tokens :]
            self.stats.add(truncated_inputs=1)
        return ids

    def _generate(self, prompts: list[Any], params: GenParams) -> Iterator[tuple[int, Generation]]:
        encoded = [self.encode(t) for t in prompts]
        for idx, width in plan_batches([len(ids) for ids in encoded], self.batch_size):
            outs = self._generate_batch([encoded[i] for i in idx], params, width=width)
            yield from zip(idx, outs)

    def _generate_batch(self, batch: list[list[int]], params: GenParams, *, width: int) -> list[Generation]:
        """Generate one batch at a fixed width (``width`` columns, one row per prompt)."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        input_ids, attention = _left_padded(batch, width, len(batch), self.pad_token_id)
        # Sampling is greedy decoding over Gumbel-perturbed scores (_row_sampler), so HF's own
        # sampler, which draws for the whole batch from one stream, is never used.
        gen_cfg: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "do_sample": False,
            "pad_token_id": self.pad_token_id,
            "eos_token_id": self.eos_token_ids,
        }
        if self.repetition_penalty != 1.0:
            gen_cfg["repetition_penalty"] = self.repetition_penalty
        if self.no_repeat_ngram_size > 0:
            gen_cfg["no_repeat_ngram_size"] = self.no_repeat_ngram_size
        processors = LogitsProcessorList()
        if not params.greedy:
            seeds = [_row_seed(params.seed, ids) for ids in batch]
            processors.append(_row_sampler(seeds, float(params.temperature), float(params.top_p)))
        stopping = StoppingCriteriaList()
        stop_rule = None
        if params.stop:
            stop_rule = _stop_string_criteria(self.tokenizer, params.stop, width)
            stopping.append(stop_rule)

        with torch.inference_mode():
            out = self.hf_model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                generation_config=GenerationConfig(**gen_cfg),
                logits_processor=processors,
                stopping_criteria=stopping,
            )
        new_tokens = out[: len(batch), width:].tolist()
        stopped_at = stop_rule.stopped_at if stop_rule is not None else {}
        return [
            self._finish(ids, row, params, stopped_at.get(r))
            for r, (ids, row) in enumerate(zip(batch, new_tokens))
        ]

    def _finish(
        self, prompt_ids: list[int], row: list[int], params: GenParams, stopped_at: int | None
    ) -> Generation:
        eos = set(self.eos_token_ids)
        n_gen, ended = len(row), False
        for pos, tok in enumerate(row[: stopped_at if stopped_at is not None else len(row)]):
            if tok in eos:
                n_gen, ended = pos + 1, True
                break
        else:
            if stopped_at is not None:
                n_gen = stopped_at  # what follows is padding, not generated tokens
        text = clean_text(self.tokenizer.decode(row[:n_gen], skip_special_tokens=True))
        text, found = cut_at_stop(text, params.stop)
        length_hit = not ended and not found and n_gen >= params.max_new_tokens
        return Generation(
            text=text,
            prompt_tokens=len(prompt_ids),
            completion_tokens=n_gen,
            finish_reason="length" if length_hit else "stop",
        )


    # -- scoring and constrained choice ------------------------------------------------------
    def _option_ids(self, option: str) -> list[int]:
        ids = list(self.tokenizer(option, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ValueError(f"option {option!r} encodes to no tokens")
        return ids

    def _score(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, list[float]]]:
        import torch

        for j, (text, opts) in enumerate(zip(prompts, options)):
            prompt_ids = self.encode(text)
            opt_ids = [self._option_ids(o) for o in opts]
            with torch.inference_mode():
                if all(len(ids) == 1 for ids in opt_ids):
                    # One forward pass: every option is a single next token.
                    logits = self.hf_model(torch.tensor([prompt_ids], device=self.device)).logits[0, -1]
                    lp = torch.log_softmax(logits.float(), -1)
                    yield j, [float(lp[ids[0]]) for ids in opt_ids]
                    continue
                scores = []
                for start in range(0, len(opt_ids), self.batch_size):
                    chunk = opt_ids[start : start + self.batch_size]
                    width = len(prompt_ids) + max(map(len, chunk))
                    ids = torch.full((len(chunk), width), self.pad_token_id, dtype=torch.long)
                    mask = torch.zeros((len(chunk), width), dtype=torch.long)
                    for r, o in enumerate(chunk):
                        seq = prompt_ids + o
                        ids[r, : len(seq)] = torch.tensor(seq)
                        mask[r, : len(seq)] = 1
                    logits = self.hf_model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                    lp = torch.log_softmax(logits.float(), -1)
                    for r, o in enumerate(chunk):
                        pos = torch.arange(len(prompt_ids) - 1, len(prompt_ids) - 1 + len(o))
                        scores.append(float(lp[r, pos, torch.tensor(o)].sum()))
                yield j, scores

    def _choose(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, Choice]]:
        """Greedy decoding restricted to a token trie of each prompt's options (batched)."""
        import torch
        from transformers import GenerationConfig

        # The option ends with the end-of-turn token a chat model writes after its answer.
        eos = self.tokenizer.eos_token_id
        end = int(eos) if eos is not None else self.eos_token_ids[0]
        encoded = [self.encode(t) for t in prompts]
        tries: list[dict[tuple[int, ...], set[int]]] = []
        seqs: list[dict[tuple[int, ...], int]] = []
        for opts in options:
            trie: dict[tuple[int, ...], set[int]] = {}
            full: dict[tuple[int, ...], int] = {}
            for k, o in enumerate(opts):
                ids = tuple(self._option_ids(o)) + (end,)
                full.setdefault(ids, k)
                for n in range(len(ids)):
                    trie.setdefault(ids[:n], set()).add(ids[n])
            tries.append(trie)
            seqs.append(full)
        # Fixed batch shapes, as in _generate: a choice never depends on the other prompts.
        for idx, width in plan_batches([len(ids) for ids in encoded], self.batch_size):
            input_ids, attention = _left_padded([encoded[i] for i in idx], width, len(idx), self.pad_token_id)
            rows = idx
            longest = max(len(ids) for i in idx for ids in seqs[i])

            def allowed(row: int, ids: Any, _idx: list[int] = rows, _w: int = width) -> list[int]:
                done = tuple(ids[_w:].tolist())
                nxt = tries[_idx[row]].get(done)
                # A finished row is padded with the end token until the batch is done.
                return sorted(nxt) if nxt else [end]

            cfg = GenerationConfig(max_new_tokens=longest, do_sample=False, pad_token_id=self.pad_token_id,
                                   eos_token_id=self.eos_token_ids)
            with torch.inference_mode():
                out = self.hf_model.generate(input_ids=input_ids.to(self.device),
                                             attention_mask=attention.to(self.device),
                                             generation_config=cfg, prefix_allowed_tokens_fn=allowed)
            for r, i in enumerate(idx):
                row = out[r, width:].tolist()
                cut = row.index(end) + 1 if end in row else len(row)
                k = seqs[i].get(tuple(row[:cut]))
                if k is None:  # cannot happen with a complete trie; never guess silently
                    raise RuntimeError(f"constrained decoding left the option trie for prompt {i}")
                yield i, Choice(index=k, text=options[i][k], prompt_tokens=len(encoded[i]),
                                completion_tokens=cut, constrained=True)


def _stop_string_criteria(tokenizer: Any, stop: Sequence[str], prompt_width: int) -> Any:
    """A stopping criterion that ends each row once its decoded completion holds a stop string.

    Decoding the completion (not matching token ids) catches stop strings however the
    tokenizer splits them; the text is cut exactly afterwards in ``_finish``.
    """
    import torch
    from transformers import StoppingCriteria

    class _StopOnStrings(StoppingCriteria):
        def __init__(self) -> None:
            # row -> number of generated tokens when its stop string first appeared. Needed
            # because finished rows are padded, and pad may equal the end token.
            self.stopped_at: dict[int, int] = {}

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            rows = input_ids[:, prompt_width:].tolist()
            done = []
            for r, row in enumerate(rows):
                if r not in self.stopped_at and any(
                    s in tokenizer.decode(row, skip_special_tokens=True) for s in stop
                ):
                    self.stopped_at[r] = len(row)
                done.append(r in self.stopped_at)
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return _StopOnStrings()


# ---------------------------------------------------------------------------------------------
# vLLM backend (GPU)
# ---------------------------------------------------------------------------------------------
_VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)

# Engine options accepted when vllm cannot be imported to ask it (a CPU machine checking the
# params of a GPU run). Where vllm is installed, vllm.LLM's own signature (plus the EngineArgs
# fields its **kwargs forward to) is the reference instead.
VLLM_ENGINE_OPTIONS = frozenset({
    "tokenizer", "tokenizer_mode", "skip_tokenizer_init", "trust_remote_code", "revision",
    "tokenizer_revision", "dtype", "quantization", "seed", "tensor_parallel_size",
    "pipeline_parallel_size", "data_parallel_size", "distributed_executor_backend",
    "gpu_memory_utilization", "swap_space", "cpu_offload_gb", "kv_cache_dtype", "block_size",
    "enforce_eager", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "max_logprobs",
    "enable_prefix_caching", "enable_chunked_prefill", "enable_lora", "max_loras", "max_lora_rank",
    "max_cpu_loras", "fully_sharded_loras", "load_format", "download_dir", "hf_overrides",
    "compilation_config", "disable_custom_all_reduce", "disable_log_stats", "generation_config",
    "structured_outputs_config",
})


def vllm_engine_options() -> frozenset[str]:
    """Keyword options a ``vllm.LLM`` engine accepts.

    Read from the installed vllm when it imports (``vllm.LLM.__init__``'s parameters plus the
    ``EngineArgs`` fields its ``**kwargs`` are forwarded to); else :data:`VLLM_ENGINE_OPTIONS`.
    """
    try:
        import vllm
    except ImportError:
        return VLLM_ENGINE_OPTIONS
    import inspect

    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = inspect.signature(vllm.LLM.__init__).parameters.values()
    names = {p.name for p in params if p.kind in kinds}
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
        # vllm.LLM forwards **kwargs to EngineArgs: its fields are the rest of the options.
        engine_args = getattr(vllm, "EngineArgs", None)
        if engine_args is not None and dataclasses.is_dataclass(engine_args):
            names |= {f.name for f in dataclasses.fields(engine_args)}
        else:
            names |= VLLM_ENGINE_OPTIONS
    return frozenset(names - {"self", "model"})


def check_vllm_engine_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``options`` unchanged when every key is a ``vllm.LLM`` option.

    Raises:
        ValueError: naming the first unknown key (in sorted order).
    """
    known = vllm_engine_options()
    for key in sorted(options):
        if key not in known:
            raise ValueError(
                f"vLLM engine option {key!r} is not an argument of vllm.LLM; accepted options: {sorted(known)}"
            )
    return dict(options)


def _vllm_visible_devices(device: str | None) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for a ``device`` option: None keeps the process's setting."""
    dev = str(device or "auto").strip()
    if dev in ("auto", "cuda"):
        return None
    if dev.startswith("cuda:"):
        ids = [s.strip() for s in dev[len("cuda:"):].split(",")]
        if ids and all(s.isdigit() for s in ids):
            return ",".join(ids)
    raise ValueError(
        f"vLLM option 'device' must be 'auto', 'cuda' or 'cuda:N[,M...]', got {device!r} "
        "(vLLM runs on GPUs; use backend 'hf' on a CPU)"
    )


@dataclass
class _EngineSlot:
    """The process's vLLM engine and what it was built for."""

    key: str
    engine: Any
    lora_rank: int  # largest LoRA rank it serves; 0 = built without LoRA support


_VLLM_LOCK = threading.RLock()
_VLLM_STATE: dict[str, _EngineSlot] = {}
_LORA_IDS: dict[tuple[str, str | None], int] = {}


def _lora_int_id(adapter: str, fingerprint: str | None) -> int:
    """A process-wide LoRA id per adapter *content*: vLLM caches loaded adapters by id, so a
    re-trained adapter in the same folder must get a new id or the old weights would be served."""
    with _VLLM_LOCK:
        return _LORA_IDS.setdefault((adapter, fingerprint), len(_LORA_IDS) + 1)


def _vllm_engine(model: str, options: Mapping[str, Any], visible: str | None, lora_rank: int) -> Any:
    """The process's engine for ``model`` + ``options``, built (after freeing any other) on demand.

    One engine per process: generator, critic and planner views of one base model share it and
    differ only in their LoRA request. A view that needs LoRA on an engine built without it (or
    with a smaller max rank) rebuilds the engine once with LoRA enabled.
    """
    vllm = _import_vllm()
    # The engine class is part of the key: a re-imported (or, in tests, replaced) vllm module
    # never gets an engine built by another one.
    key = json.dumps([model, dict(options), visible, id(vllm.LLM)], sort_keys=True, default=str)
    with _VLLM_LOCK:
        slot = _VLLM_STATE.get("slot")
        if slot is not None and slot.key == key and slot.lora_rank >= lora_rank:
            return slot.engine
        if slot is not None:
            log.info("releasing the vLLM engine of %s before building another", json.loads(slot.key)[0])
            release_vllm_engine()
        if visible is not None and os.environ.get("CUDA_VISIBLE_DEVICES") != visible:
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                raise RuntimeError(
                    f"vLLM option 'device' asks for GPU(s) {visible}, but CUDA is already initialised in "
                    "this process; choose the device before any GPU work (or start a new kernel)"
                )
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        args: dict[str, Any] = {"model": model, **options}
        rank = 0
        if lora_rank or args.get("enable_lora"):
            args["enable_lora"] = True
            wanted = next((r for r in _VLLM_LORA_RANKS if r >= lora_rank), lora_rank)
            args["max_lora_rank"] = max(int(args.get("max_lora_rank") or 0), wanted)
            rank = args["max_lora_rank"]
        engine = vllm.LLM(**args)
        _VLLM_STATE["slot"] = _EngineSlot(key, engine, rank)
        return engine


def release_vllm_engine() -> bool:
    """Free the process's vLLM engine and its GPU memory; the next request builds it again.

    Call it between pool members of different models and before training in the same process.
    Backends built earlier stay usable: they hold no reference to the engine.

    Returns:
        True when an engine was released.
    """
    with _VLLM_LOCK:
        slot = _VLLM_STATE.pop("slot", None)
        if slot is None:
            return False
        engine, slot.engine = slot.engine, None
        # vLLM's V1 engine core runs in a child process: stop it now, not at garbage collection.
        core = getattr(getattr(engine, "llm_engine", None), "engine_core", None)
        if callable(getattr(core, "shutdown", None)):
            try:
                core.shutdown()
            except Exception as exc:  # a failed shutdown must not keep the memory pinned
                log.warning("vLLM engine core shutdown failed: %s", exc)
        del engine, core, slot
        try:
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel
        except ImportError:
            pass
        else:
            destroy_model_parallel()
            destroy_distributed_environment()
        gc.collect()
        torch = sys.modules.get("torch")  # vllm imported it; never import torch just for this
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
        return True


class VLLMBackend(LLM):
    """A view of the process's one vLLM engine (GPU only; vllm is imported lazily).

    Several backends of the same base model and engine options (generator, critic, planner) share
    one engine and differ only by their LoRA adapter, sent per request. A backend for another
    base model frees the current engine first (one engine per process). Backends never hold the
    engine themselves, so :func:`release_vllm_engine` (or :meth:`release`) really frees the GPU,
    and the next call rebuilds the engine.

    Prompts are rendered with the chat template and passed as token ids (so truncation and token
    counts match the HF backend); sampling uses a per-request seed, so a prompt's sample does not
    depend on the other prompts of the call. :meth:`choose` decodes with vLLM's structured-output
    ``choice`` (the answer is always one of the options); :meth:`score` sends each prompt's
    options together in one engine call.

    Args:
        model: local model folder or hub name.
        adapter: optional LoRA adapter folder, applied per request.
        device: "auto", "cuda" or "cuda:N[,M]" (sets CUDA_VISIBLE_DEVICES before the engine).
        dtype: "auto", "bfloat16", "float16" or "float32".
        batch_size: prompts handed to vLLM per call (each call's results are cached when done).
        max_input_tokens: left-truncate longer prompts.
        repetition_penalty: vLLM's repetition penalty (1.0 = off).
        seed: engine seed.
        **engine_options: any other ``vllm.LLM`` argument (trust_remote_code, quantization,
            max_num_seqs, max_loras, enable_lora, tensor_parallel_size, gpu_memory_utilization,
            max_model_len...); an unknown key is an error naming it.
    """

    backend = "vllm"

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        adapter: str | os.PathLike[str] | None = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 256,
        max_input_tokens: int | None = None,
        repetition_penalty: float = 1.0,
        seed: int = 0,
        cache: LLMCache | None = None,
        **engine_options: Any,
    ):
        super().__init__(cache=cache, batch_size=batch_size)
        options = check_vllm_engine_options(engine_options)
        self._vllm = _import_vllm()
        self.model = _resolve_model_path(model)
        self.adapter = _resolve_model_path(adapter) if adapter else None
        self.dtype = dtype
        self.device = str(device)
        self._visible = _vllm_visible_devices(device)
        self.max_input_tokens = max_input_tokens
        self.repetition_penalty = float(repetition_penalty)
        self._options = {"dtype": dtype, "seed": seed, **options}
        adapter_fp = _fingerprint(self.adapter)
        self._lora_rank = _adapter_rank(self.adapter) if self.adapter else 0
        self._lora_request = None
        if self.adapter:
            from vllm.lora.request import LoRARequest

            lora_id = _lora_int_id(self.adapter, adapter_fp)
            self._lora_request = LoRARequest(f"adapter-{lora_id}", lora_id, self.adapter)
        if _adapter_has_tokenizer(self.adapter):
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(self.adapter)
        else:
            self.tokenizer = self._engine().get_tokenizer()
        self._identity = {
            "backend": self.backend,
            "model": _model_label(self.model),
            "weights": _fingerprint(self.model),
            "adapter": _model_label(self.adapter) if self.adapter else None,
            "adapter_weights": adapter_fp,
            "dtype": dtype,
            "max_input_tokens": max_input_tokens,
            "repetition_penalty": self.repetition_penalty,
        }
        quant = options.get("quantization")
        if quant:  # changes outputs; absent otherwise so existing cache keys stay valid
            self._identity["quantization"] = quant

    def _engine(self) -> Any:
        return _vllm_engine(self.model, self._options, self._visible, self._lora_rank)

    @property
    def engine(self) -> Any:
        """The shared engine (built on demand); do not keep a reference to it."""
        return self._engine()

    def release(self) -> bool:
        """Free the shared engine (every view of it rebuilds it on its next call)."""
        return release_vllm_engine()

    def close(self) -> None:
        """Free the engine and close the cache."""
        self.release()
        super().close()

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def _prepare(self, prompt: Prompt) -> str:
        return prompt if isinstance(prompt, str) else _render_chat(self.tokenizer, prompt)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def sampling_params(self, params: GenParams) -> Any:
        """The ``vllm.SamplingParams`` equivalent of ``params``."""
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=params.max_new_tokens,
            temperature=float(params.temperature),
            top_p=1.0 if params.greedy else float(params.top_p),
            seed=None if params.greedy else params.seed,
            stop=list(params.stop) or None,
            repetition_penalty=self.repetition_penalty,
        )

    def _token_ids(self, text: str) -> list[int]:
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if self.max_input_tokens is not None and len(ids) > self.max_input_tokens:
            ids = ids[-self.max_input_tokens :]
            self.stats.add(truncated_inputs=1)
        return ids

    def _run(self, inputs: list[dict[str, list[int]]], sampling: Any) -> list[Any]:
        kwargs: dict[str, Any] = {"use_tqdm": False}
        if self._lora_request is not None:
            kwargs["lora_request"] = self._lora_request
        outputs = self._engine().generate(inputs, sampling, **kwargs)
        if len(outputs) != len(inputs):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(inputs)} prompts")
        return outputs

    def _generate(self, prompts: list[Any], params: GenParams) -> Iterator[tuple[int, Generation]]:
        sp = self.sampling_params(params)
        for start in range(0, len(prompts), self.batch_size):
            inputs = [{"prompt_token_ids": self._token_ids(t)} for t in prompts[start : start + self.batch_size]]
            for j, (inp, out) in enumerate(zip(inputs, self._run(inputs, sp))):
                comp = out.outputs[0]
                # vLLM already removes the stop string; cutting again is a no-op safety net.
                text, found = cut_at_stop(clean_text(comp.text), params.stop)
                length_hit = comp.finish_reason == "length" and not found
                yield start + j, Generation(
                    text=text,
                    prompt_tokens=len(inp["prompt_token_ids"]),
                    completion_tokens=len(comp.token_ids),
                    finish_reason="length" if length_hit else "stop",
                )

    def _choice_sampling(self, options: list[str]) -> Any:
        """Greedy SamplingParams whose output can only be one of ``options``.

        Uses ``StructuredOutputsParams(choice=...)`` (vLLM >= 0.11) or, on older releases,
        ``GuidedDecodingParams(choice=...)``; without either there is no constrained choice,
        and free generation is never substituted silently.
        """
        import vllm.sampling_params as vsp

        longest = max(self.count_tokens(o) for o in options)
        # Slack: the grammar may tokenize an option differently from encoding it alone.
        base = {"n": 1, "max_tokens": longest + 8, "temperature": 0.0}
        if hasattr(vsp, "StructuredOutputsParams"):
            return self._vllm.SamplingParams(**base, structured_outputs=vsp.StructuredOutputsParams(choice=options))
        if hasattr(vsp, "GuidedDecodingParams"):
            return self._vllm.SamplingParams(**base, guided_decoding=vsp.GuidedDecodingParams(choice=options))
        raise RuntimeError(
            "this vllm offers neither StructuredOutputsParams nor GuidedDecodingParams, so choose() "
            "cannot constrain decoding to the options"
        )

    def _choose(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, Choice]]:
        for start in range(0, len(prompts), self.batch_size):
            idx = range(start, min(start + self.batch_size, len(prompts)))
            inputs = [{"prompt_token_ids": self._token_ids(prompts[i])} for i in idx]
            sampling = [self._choice_sampling(options[i]) for i in idx]
            for i, inp, out in zip(idx, inputs, self._run(inputs, sampling)):
                comp = out.outputs[0]
                if comp.text not in options[i]:  # the grammar failed; never guess an option
                    raise RuntimeError(
                        f"vLLM choice decoding for prompt {i} returned {comp.text!r}, not one of {options[i]!r}"
                    )
                yield i, Choice(index=options[i].index(comp.text), text=comp.text,
                                prompt_tokens=len(inp["prompt_token_ids"]),
                                completion_tokens=len(comp.token_ids), constrained=True)

    def _score(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, list[float]]]:
        """Exact option log-probabilities from vLLM's prompt log-probabilities.

        Each option becomes one variant (prompt tokens + option tokens) with ``prompt_logprobs``;
        all variants of a prompt go into the same ``generate`` call (a call never splits a
        prompt's options), and the option tokens' log-probabilities are summed. Variants rather
        than one shared prefix: a prompt's log-probabilities cover only its own tokens, so each
        option must be a prompt suffix. One output token per variant is generated and ignored.
        """
        sp = self._vllm.SamplingParams(n=1, max_tokens=1, temperature=0.0, prompt_logprobs=1)
        j = 0
        while j < len(prompts):
            # Whole prompts per call, about batch_size variants (at least one prompt).
            group, size = [], 0
            while j < len(prompts) and (not group or size + len(options[j]) <= self.batch_size):
                group.append(j)
                size += len(options[j])
                j += 1
            spans: list[tuple[int, int, list[int]]] = []  # (prompt index, option start, option ids)
            inputs: list[dict[str, list[int]]] = []
            for p in group:
                prompt_ids = list(self.tokenizer.encode(prompts[p], add_special_tokens=False))
                for k, opt in enumerate(options[p]):
                    opt_ids = list(self.tokenizer.encode(opt, add_special_tokens=False))
                    if not opt_ids:
                        raise ValueError(f"option {opt!r} encodes to no tokens")
                    ids, start = prompt_ids + opt_ids, len(prompt_ids)
                    if self.max_input_tokens is not None and len(ids) > self.max_input_tokens:
                        cut = len(ids) - self.max_input_tokens
                        if cut >= start:
                            raise ValueError(
                                f"option {k} of prompt {p} alone exceeds max_input_tokens={self.max_input_tokens}"
                            )
                        ids, start = ids[cut:], start - cut
                        self.stats.add(truncated_inputs=1)
                    spans.append((p, start, opt_ids))
                    inputs.append({"prompt_token_ids": ids})
            scores: dict[int, list[float]] = {p: [] for p in group}
            for (p, start, opt_ids), out in zip(spans, self._run(inputs, sp)):
                per_token = out.prompt_logprobs
                total = 0.0
                for pos, tok in enumerate(opt_ids, start=start):
                    entry = per_token[pos] if per_token is not None and pos < len(per_token) else None
                    value = entry.get(tok) if entry is not None else None
                    if value is None:
                        raise RuntimeError(f"vLLM returned no log-probability for option token {tok} at position {pos}")
                    total += float(getattr(value, "logprob", value))
                scores[p].append(total)
            for p in group:
                yield p, scores[p]


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "backend 'vllm' needs the vllm package, which runs on NVIDIA GPUs only and is not part "
            "of the CPU requirements; install it in the GPU environment (environment.yml), or use "
            "backend 'hf' (CPU/GPU) or 'openai' (a running vllm server)"
            f" [{exc}]"
        ) from None
    return vllm


def _adapter_rank(adapter: str) -> int:
    cfg_path = Path(adapter) / "adapter_config.json"
    try:
        return int(json.loads(cfg_path.read_text(encoding="utf-8")).get("r", 16))
    except (OSError, ValueError, TypeError):
        return 16


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
    """The server refused one prompt (HTTP 4xx other than 408/409/429): retrying cannot help."""


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

        url_list = [u for u in (urls.split(",") if isinstance(urls, str) else urls) if u and u.strip()]
        if not url_list:
            raise ValueError("backend 'openai' needs at least one server URL in 'urls'")
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an int >= 1, got {max_in_flight!r}")
        if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
            raise ValueError(f"max_retries must be None or an int >= 0, got {max_retries!r}")
        for name, value in (("backoff_s", backoff_s), ("backoff_max_s", backoff_max_s), ("patience_s", patience_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
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
            PromptRejected: the server refused this request (4xx other than 408/409/429).
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


# ---------------------------------------------------------------------------------------------
# Factory
# ---------------------------------------------------------------------------------------------
_COMMON_KEYS = {"backend", "model", "cache", "cache_dir", "batch_size", "max_input_tokens"}
_BACKEND_KEYS = {
    "hf": {"adapter", "dtype", "device", "repetition_penalty", "no_repeat_ngram_size", "attn_implementation"},
    # Plus any other vllm.LLM option (vllm_engine_options), checked when the backend is vllm.
    "vllm": {
        "adapter", "device", "dtype", "repetition_penalty", "seed", "gpu_memory_utilization",
        "tensor_parallel_size", "max_model_len", "enforce_eager",
    },
    "openai": {
        "urls", "api_key_env", "max_in_flight", "timeout_s", "max_retries", "backoff_s",
        "backoff_max_s", "patience_s", "tokenizer", "extra_body", "repetition_penalty", "adapter",
        "adapter_revision",
    },
}
# Keys that only tune how a local model runs; harmless to leave set when switching backend.
_PORTABLE_KEYS = {"dtype", "device", "attn_implementation", "gpu_memory_utilization",
                  "tensor_parallel_size", "max_model_len", "enforce_eager", "seed", "urls",
                  "api_key_env", "max_in_flight", "timeout_s", "max_retries", "backoff_s",
                  "tokenizer", "batch_size", "backoff_max_s", "patience_s"}
# Values meaning "feature off" for the keys that change outputs.
_INACTIVE: dict[str, tuple[Any, ...]] = {
    "adapter": (None, ""), "no_repeat_ngram_size": (None, 0), "extra_body": (None, {}),
    "repetition_penalty": (None, 1.0),
}


def load_llm(cfg: Mapping[str, Any]) -> LLM:
    """Build a backend from a params.yaml dictionary.

    Keys: ``backend`` ("hf" | "vllm" | "openai"), ``model``, and optionally ``adapter``, ``dtype``,
    ``device``, ``batch_size``, ``max_input_tokens``, ``repetition_penalty``,
    ``no_repeat_ngram_size`` (hf), ``urls``, ``api_key_env``, ``max_in_flight``, ``timeout_s``,
    ``max_retries``, ``backoff_s``, ``backoff_max_s``, ``patience_s``, ``tokenizer``,
    ``extra_body``, ``adapter`` / ``adapter_revision`` (openai: cache identity of a served
    adapter), and for vllm any ``vllm.LLM`` engine option (:func:`vllm_engine_options`, e.g.
    ``gpu_memory_utilization``, ``tensor_parallel_size``, ``max_model_len``, ``quantization``,
    ``trust_remote_code``, ``max_num_seqs``, ``max_loras``), ``cache`` (default True) and ``cache_dir`` (default ``paths.LLM_CACHE_DIR``).
    Settings that only tune another backend's runtime are ignored, so switching ``backend``
    needs no other edit; settings that would change the output but that the chosen backend
    cannot honour are errors.

    Raises:
        ValueError: naming the unknown, missing or unsupported key.
    """
    if not isinstance(cfg, Mapping):
        raise TypeError(f"LLM config must be a mapping, got {type(cfg).__name__}")
    backend = cfg.get("backend")
    if backend == "callable":
        raise ValueError("backend 'callable' is built in code: CallableLLM(fn), not through load_llm")
    if backend not in _BACKEND_KEYS:
        raise ValueError(f"LLM config key 'backend' must be one of {sorted(_BACKEND_KEYS)}, got {backend!r}")
    known = _COMMON_KEYS.union(*_BACKEND_KEYS.values())
    engine_keys: set[str] = set()
    if backend == "vllm":
        engine_keys = set(cfg) - known
        check_vllm_engine_options({k: cfg[k] for k in engine_keys})
        known = known | engine_keys
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"LLM config: unknown key(s) {unknown}; known keys: {sorted(known)}")
    if not isinstance(cfg.get("model"), str) or not cfg["model"]:
        raise ValueError("LLM config key 'model' must be a non-empty string")
    unsupported = sorted(
        k for k in set(cfg) - _COMMON_KEYS - _BACKEND_KEYS[backend] - _PORTABLE_KEYS - engine_keys
        if cfg[k] not in _INACTIVE.get(k, (None,))
    )
    if unsupported:
        raise ValueError(f"LLM config key(s) {unsupported} are not supported by backend {backend!r}")

    cache = None
    if cfg.get("cache", True):
        cache = LLMCache(paths.resolve(cfg["cache_dir"]) if cfg.get("cache_dir") else None)
    opts = {k: v for k, v in cfg.items() if (k in _BACKEND_KEYS[backend] or k in engine_keys) and v is not None}
    if cfg.get("max_input_tokens") is not None:
        opts["max_input_tokens"] = _as_int(cfg, "max_input_tokens")
    if cfg.get("batch_size") is not None:
        opts["batch_size"] = _as_int(cfg, "batch_size")
    int_keys = ("max_in_flight", "max_retries", "no_repeat_ngram_size", "tensor_parallel_size", "max_model_len")
    for key in int_keys:
        if key in opts:
            opts[key] = _as_int(cfg, key)

    if backend == "hf":
        return HFBackend(cfg["model"], cache=cache, **opts)
    if backend == "vllm":
        return VLLMBackend(cfg["model"], cache=cache, **opts)
    if "urls" not in opts:
        raise ValueError("LLM config key 'urls' is required for backend 'openai'")
    rep = opts.pop("repetition_penalty", 1.0)
    if rep != 1.0:
        opts["extra_body"] = {**(opts.get("extra_body") or {}), "repetition_penalty": float(rep)}
    return OpenAIBackend(cfg["model"], cache=cache, **opts)


def _as_int(cfg: Mapping[str, Any], key: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"LLM config key {key!r} must be an int, got {value!r}")
    return value
