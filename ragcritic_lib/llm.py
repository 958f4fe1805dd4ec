"""One interface to every language model the project calls, with a persistent cache.

Backends:

* :class:`HFBackend` -- transformers on CPU or GPU: batched, left-padded, chat templates, optional
  LoRA adapter (merged for inference).
* :class:`VLLMBackend` -- vLLM offline engine (GPU only, imported lazily).
* :class:`OpenAIBackend` -- any OpenAI-compatible HTTP server (``vllm serve``, llama.cpp server,
  TGI, hosted APIs); several URLs, a bounded number of requests in flight to each.
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
import hashlib
import json
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.cache import LLMCache, make_key

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
        finish_reason: ``"stop"`` (end token or stop string) or ``"length"`` (hit max_new_tokens).
        cached: True when no model call was spent on it in this ``generate`` call.
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    cached: bool = False

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
                text, found = cut_at_stop(out.text, params.stop)
                yield i, dataclasses.replace(
                    out, text=text, finish_reason="stop" if found else out.finish_reason, cached=False
                )
                continue
            if not isinstance(out, str):
                raise TypeError(f"CallableLLM function returned {type(out).__name__}, expected str")
            text, _ = cut_at_stop(out, params.stop)
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


class HFBackend(LLM):
    """transformers causal LM: batched, left-padded generation on CPU or GPU.

    Prompts are rendered with the tokenizer's chat template (``add_generation_prompt=True``)
    and encoded without adding special tokens; raw str prompts are encoded as they are. Within a
    call, prompts are sorted by length so each batch pads little. Greedy when temperature is 0,
    else sampling seeded from ``GenParams.seed`` (the caller's torch RNG state is left untouched).

    Args:
        model: local model folder (relative paths are relative to the repo root).
        adapter: optional LoRA adapter folder (peft); merged into the weights for inference. Its
            tokenizer is used when it saved one (training may change the chat template).
        dtype: "auto" (bf16 where fast, else fp32), "bfloat16", "float32" or "float16".
        device: "auto" (CUDA when available), "cpu", "cuda", "cuda:1"...
        batch_size: prompts per forward batch.
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
        return dict(self._identity)

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
        # Longest first: similar lengths share a batch (little padding) and memory peaks early.
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        for b, start in enumerate(range(0, len(order), self.batch_size)):
            idx = order[start : start + self.batch_size]
            outs = self._generate_batch([encoded[i] for i in idx], params, batch_seed=params.seed + b)
            yield from zip(idx, outs)

    def _generate_batch(
        self, batch: list[list[int]], params: GenParams, *, batch_seed: int
    ) -> list[Generation]:
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for r, ids in enumerate(batch):
            if ids:
                input_ids[r, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention[r, width - len(ids) :] = 1
        gen_cfg: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "do_sample": not params.greedy,
            "pad_token_id": self.pad_token_id,
            "eos_token_id": self.eos_token_ids,
        }
        if not params.greedy:
            gen_cfg.update(temperature=float(params.temperature), top_p=float(params.top_p), top_k=0)
        if self.repetition_penalty != 1.0:
            gen_cfg["repetition_penalty"] = self.repetition_penalty
        if self.no_repeat_ngram_size > 0:
            gen_cfg["no_repeat_ngram_size"] = self.no_repeat_ngram_size
        stopping = StoppingCriteriaList()
        stop_rule = None
        if params.stop:
            stop_rule = _stop_string_criteria(self.tokenizer, params.stop, width)
            stopping.append(stop_rule)

        devices: list[int] = []
        if self.device.startswith("cuda"):
            index = torch.device(self.device).index
            devices = [torch.cuda.current_device() if index is None else index]
        with torch.inference_mode(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(batch_seed)
            out = self.hf_model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                generation_config=GenerationConfig(**gen_cfg),
                stopping_criteria=stopping,
            )
        new_tokens = out[:, width:].tolist()
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
        text = self.tokenizer.decode(row[:n_gen], skip_special_tokens=True)
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
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(encoded[i]) for i in idx)
            input_ids = torch.full((len(idx), width), self.pad_token_id, dtype=torch.long)
            attention = torch.zeros((len(idx), width), dtype=torch.long)
            for r, i in enumerate(idx):
                input_ids[r, width - len(encoded[i]) :] = torch.tensor(encoded[i], dtype=torch.long)
                attention[r, width - len(encoded[i]) :] = 1
            longest = max(len(ids) for i in idx for ids in seqs[i])

            def allowed(row: int, ids: Any, _idx: list[int] = idx, _w: int = width) -> list[int]:
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


class VLLMBackend(LLM):
    """vLLM's offline engine on one or more GPUs; vllm is imported only here.

    Prompts are rendered with the chat template and passed as token ids (so truncation and token
    counts match the HF backend); vLLM schedules the whole list itself, so ``batch_size`` only
    sets how often results reach the cache. Sampling uses a per-request seed, so a prompt's
    sample does not depend on the other prompts of the call.

    Args:
        model: local model folder or served name.
        adapter: optional LoRA adapter folder, applied per request (``enable_lora``).
        dtype: "auto", "bfloat16", "float16" or "float32".
        batch_size: prompts handed to vLLM per chunk (each chunk is cached when done).
        max_input_tokens: left-truncate longer prompts.
        repetition_penalty: vLLM's repetition penalty (1.0 = off).
        seed: engine seed.
        engine_kwargs: extra ``vllm.LLM`` arguments (gpu_memory_utilization,
            tensor_parallel_size, max_model_len, enforce_eager...).
    """

    backend = "vllm"

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        adapter: str | os.PathLike[str] | None = None,
        dtype: str = "auto",
        batch_size: int = 256,
        max_input_tokens: int | None = None,
        repetition_penalty: float = 1.0,
        seed: int = 0,
        cache: LLMCache | None = None,
        **engine_kwargs: Any,
    ):
        super().__init__(cache=cache, batch_size=batch_size)
        vllm = _import_vllm()
        self.model = _resolve_model_path(model)
        self.adapter = _resolve_model_path(adapter) if adapter else None
        self.dtype = dtype
        self.max_input_tokens = max_input_tokens
        self.repetition_penalty = float(repetition_penalty)
        args: dict[str, Any] = {"model": self.model, "dtype": dtype, "seed": seed, **engine_kwargs}
        if _adapter_has_tokenizer(self.adapter):
            args.setdefault("tokenizer", self.adapter)
        self._lora_request = None
        if self.adapter:
            from vllm.lora.request import LoRARequest

            rank = _adapter_rank(self.adapter)
            args.setdefault("enable_lora", True)
            args.setdefault("max_lora_rank", next((r for r in _VLLM_LORA_RANKS if r >= rank), rank))
            self._lora_request = LoRARequest("adapter", 1, self.adapter)
        self._vllm = vllm
        self.engine = vllm.LLM(**args)
        self.tokenizer = self.engine.get_tokenizer()
        self._identity = {
            "backend": self.backend,
            "model": _model_label(self.model),
            "weights": _fingerprint(self.model),
            "adapter": _model_label(self.adapter) if self.adapter else None,
            "adapter_weights": _fingerprint(self.adapter),
            "dtype": dtype,
            "max_input_tokens": max_input_tokens,
            "repetition_penalty": self.repetition_penalty,
        }

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

    def _generate(self, prompts: list[Any], params: GenParams) -> Iterator[tuple[int, Generation]]:
        sp = self.sampling_params(params)
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            inputs = []
            for text in chunk:
                ids = list(self.tokenizer.encode(text, add_special_tokens=False))
                if self.max_input_tokens is not None and len(ids) > self.max_input_tokens:
                    ids = ids[-self.max_input_tokens :]
                    self.stats.add(truncated_inputs=1)
                inputs.append({"prompt_token_ids": ids})
            kwargs: dict[str, Any] = {"use_tqdm": False}
            if self._lora_request is not None:
                kwargs["lora_request"] = self._lora_request
            outputs = self.engine.generate(inputs, sp, **kwargs)
            for j, (inp, out) in enumerate(zip(inputs, outputs)):
                comp = out.outputs[0]
                # vLLM already removes the stop string; cutting again is a no-op safety net.
                text, found = cut_at_stop(comp.text, params.stop)
                length_hit = comp.finish_reason == "length" and not found
                yield start + j, Generation(
                    text=text,
                    prompt_tokens=len(inp["prompt_token_ids"]),
                    completion_tokens=len(comp.token_ids),
                    finish_reason="length" if length_hit else "stop",
                )


    def _score(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, list[float]]]:
        """Exact option log-probabilities from vLLM's prompt log-probabilities.

        Each (prompt, option) pair is one request whose prompt is the prompt's tokens followed by
        the option's; ``prompt_logprobs`` returns the log-probability of every prompt token, and
        the option's are summed. One output token is generated per request and ignored.
        """
        sp = self._vllm.SamplingParams(n=1, max_tokens=1, temperature=0.0, prompt_logprobs=1)
        kwargs: dict[str, Any] = {"use_tqdm": False}
        if self._lora_request is not None:
            kwargs["lora_request"] = self._lora_request
        pending: list[tuple[int, int, int, list[int]]] = []  # (prompt index, option index, start, option ids)
        inputs: list[dict[str, list[int]]] = []
        for j, (text, opts) in enumerate(zip(prompts, options)):
            prompt_ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            for k, opt in enumerate(opts):
                opt_ids = list(self.tokenizer.encode(opt, add_special_tokens=False))
                if not opt_ids:
                    raise ValueError(f"option {opt!r} encodes to no tokens")
                ids = prompt_ids + opt_ids
                start = len(prompt_ids)
                if self.max_input_tokens is not None and len(ids) > self.max_input_tokens:
                    cut = len(ids) - self.max_input_tokens
                    if cut >= start:
                        raise ValueError(f"option {k} of prompt {j} alone exceeds max_input_tokens={self.max_input_tokens}")
                    ids, start = ids[cut:], start - cut
                    self.stats.add(truncated_inputs=1)
                pending.append((j, k, start, opt_ids))
                inputs.append({"prompt_token_ids": ids})
        scores: dict[int, list[float]] = {j: [0.0] * len(opts) for j, opts in enumerate(options)}
        left = {j: len(opts) for j, opts in enumerate(options)}
        for begin in range(0, len(inputs), self.batch_size):
            outputs = self.engine.generate(inputs[begin : begin + self.batch_size], sp, **kwargs)
            for (j, k, start, opt_ids), out in zip(pending[begin : begin + self.batch_size], outputs):
                per_token = out.prompt_logprobs
                total = 0.0
                for pos, tok in enumerate(opt_ids, start=start):
                    entry = per_token[pos] if per_token is not None and pos < len(per_token) else None
                    value = entry.get(tok) if entry is not None else None
                    if value is None:
                        raise RuntimeError(f"vLLM returned no log-probability for option token {tok} at position {pos}")
                    total += float(getattr(value, "logprob", value))
                scores[j][k] = total
                left[j] -= 1
                if left[j] == 0:
                    yield j, scores.pop(j)


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
    """Hands out server slots: at most ``max_in_flight`` requests per URL, least loaded first."""

    def __init__(self, urls: list[str], max_in_flight: int):
        self.urls = urls
        self.max_in_flight = max_in_flight
        self.load = [0] * len(urls)
        self._next = 0
        self._cond = threading.Condition()

    def acquire(self, avoid: int | None = None) -> int:
        with self._cond:
            while True:
                free = [i for i in range(len(self.urls)) if self.load[i] < self.max_in_flight]
                if avoid is not None and len(free) > 1:
                    free = [i for i in free if i != avoid]  # retry elsewhere after a failure
                if free:
                    n = len(self.urls)
                    pick = min(free, key=lambda i: (self.load[i], (i - self._next) % n))
                    self._next = (pick + 1) % n
                    self.load[pick] += 1
                    return pick
                self._cond.wait()

    def release(self, i: int) -> None:
        with self._cond:
            self.load[i] -= 1
            self._cond.notify()


def _normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url[: -len("/v1")] if url.endswith("/v1") else url


class OpenAIBackend(LLM):
    """Any OpenAI-compatible server: chat prompts go to ``/v1/chat/completions``, str prompts to
    ``/v1/completions``.

    Requests run in a thread pool with at most ``max_in_flight`` open requests per URL, each sent
    to the least-loaded URL; connection errors, timeouts, 429 and 5xx answers are retried with
    exponential backoff on another URL when there is one. Token counts come from the server's
    ``usage`` field; when a server omits it, a local tokenizer (``tokenizer``) counts instead.

    Args:
        model: the served model name (for a LoRA served by vLLM, the adapter's served name).
        urls: base URLs ("http://host:8000" or ".../v1"), a list or a comma-separated string.
        api_key_env: name of the environment variable holding the API key (sent as Bearer).
        max_in_flight: open requests per URL.
        timeout_s: per-request timeout.
        max_retries: retries after the first attempt.
        backoff_s: first retry delay; doubles each retry (capped at 30 s).
        tokenizer: optional local tokenizer folder for count_tokens and missing usage.
        max_input_tokens: sent as vLLM's ``truncate_prompt_tokens`` (a vLLM extension).
        extra_body: extra JSON fields for every request (e.g. {"repetition_penalty": 1.1}).
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
        max_retries: int = 4,
        backoff_s: float = 1.0,
        tokenizer: str | os.PathLike[str] | None = None,
        max_input_tokens: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        batch_size: int = 32,
        cache: LLMCache | None = None,
    ):
        super().__init__(cache=cache, batch_size=batch_size)
        import httpx

        url_list = [u for u in (urls.split(",") if isinstance(urls, str) else urls) if u and u.strip()]
        if not url_list:
            raise ValueError("backend 'openai' needs at least one server URL in 'urls'")
        if not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an int >= 1, got {max_in_flight!r}")
        self.model = str(model)
        self.urls = [_normalize_url(u) for u in url_list]
        self.max_in_flight = max_in_flight
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_input_tokens = max_input_tokens
        self.extra_body = dict(extra_body or {})
        if max_input_tokens is not None:
            self.extra_body.setdefault("truncate_prompt_tokens", int(max_input_tokens))
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
        self._pool = _UrlPool(self.urls, max_in_flight)
        self._flush_every = max(self._flush_every, total)
        self._warned_usage = False

    def identity(self) -> dict[str, Any]:
        # URLs are left out on purpose: a cluster of identical servers shares one cache.
        return {"backend": self.backend, "model": self.model, "extra_body": self.extra_body}

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

    def _call(self, prompt: Prompt, params: GenParams) -> Generation:
        import httpx

        path, body = self._request(prompt, params)
        last_error, avoid = "", None
        for attempt in range(self.max_retries + 1):
            u = self._pool.acquire(avoid)
            url = self.urls[u] + path
            try:
                resp = self._client.post(url, json=body, headers=self._headers)
            except httpx.TransportError as exc:
                last_error, avoid = f"{url}: {type(exc).__name__}: {exc}", u
            else:
                if resp.status_code == 429 or resp.status_code >= 500:
                    last_error, avoid = f"{url}: HTTP {resp.status_code}: {resp.text[:300]}", u
                elif resp.status_code >= 400:
                    raise RuntimeError(f"{url}: HTTP {resp.status_code}: {resp.text[:500]}")
                else:
                    return self._parse(resp, url, prompt, params)
            finally:
                self._pool.release(u)
            if attempt < self.max_retries:
                time.sleep(min(30.0, self.backoff_s * 2**attempt))
        raise RuntimeError(f"request failed after {self.max_retries + 1} attempts; last error: {last_error}")

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
        text, found = cut_at_stop(str(text), params.stop)
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

    def _generate(self, prompts: list[Any], params: GenParams) -> Iterator[tuple[int, Generation]]:
        from concurrent.futures import ThreadPoolExecutor, as_completed

        workers = min(len(prompts), len(self.urls) * self.max_in_flight)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-http")
        try:
            futures = {pool.submit(self._call, p, params): i for i, p in enumerate(prompts)}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            # On an error (or an interrupted caller) drop what has not started; finished results
            # were already yielded and cached.
            pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------------------------------------
# Factory
# ---------------------------------------------------------------------------------------------
_COMMON_KEYS = {"backend", "model", "cache", "cache_dir", "batch_size", "max_input_tokens"}
_BACKEND_KEYS = {
    "hf": {"adapter", "dtype", "device", "repetition_penalty", "no_repeat_ngram_size", "attn_implementation"},
    "vllm": {
        "adapter", "dtype", "repetition_penalty", "seed", "gpu_memory_utilization",
        "tensor_parallel_size", "max_model_len", "enforce_eager",
    },
    "openai": {
        "urls", "api_key_env", "max_in_flight", "timeout_s", "max_retries", "backoff_s",
        "tokenizer", "extra_body", "repetition_penalty",
    },
}
# Keys that only tune how a local model runs; harmless to leave set when switching backend.
_PORTABLE_KEYS = {"dtype", "device", "attn_implementation", "gpu_memory_utilization",
                  "tensor_parallel_size", "max_model_len", "enforce_eager", "seed", "urls",
                  "api_key_env", "max_in_flight", "timeout_s", "max_retries", "backoff_s",
                  "tokenizer", "batch_size"}
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
    ``max_retries``, ``backoff_s``, ``tokenizer``, ``extra_body`` (openai), vLLM engine options
    (``gpu_memory_utilization``, ``tensor_parallel_size``, ``max_model_len``, ``enforce_eager``,
    ``seed``), ``cache`` (default True) and ``cache_dir`` (default ``paths.LLM_CACHE_DIR``).
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
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"LLM config: unknown key(s) {unknown}; known keys: {sorted(known)}")
    if not isinstance(cfg.get("model"), str) or not cfg["model"]:
        raise ValueError("LLM config key 'model' must be a non-empty string")
    unsupported = sorted(
        k for k in set(cfg) - _COMMON_KEYS - _BACKEND_KEYS[backend] - _PORTABLE_KEYS
        if cfg[k] not in _INACTIVE.get(k, (None,))
    )
    if unsupported:
        hint = ""
        if "adapter" in unsupported and backend == "openai":
            hint = " (serve the adapter, e.g. vllm serve --lora-modules NAME=DIR, and set model: NAME)"
        raise ValueError(f"LLM config key(s) {unsupported} are not supported by backend {backend!r}{hint}")

    cache = None
    if cfg.get("cache", True):
        cache = LLMCache(paths.resolve(cfg["cache_dir"]) if cfg.get("cache_dir") else None)
    opts = {k: v for k, v in cfg.items() if k in _BACKEND_KEYS[backend] and v is not None}
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
