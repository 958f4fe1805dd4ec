"""What every backend shares: generation parameters and results, prompt checks, and the
:class:`LLM` base class that serves prompts from the persistent cache and generates only the
misses (:class:`CallableLLM` wraps a plain function, for tests and rule-based stand-ins).

Model and adapter paths arrive here already resolved (:func:`ragcritic_lib.paths.resolve_llm_paths` resolves
repository-relative paths); a backend only makes an existing local path absolute.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib.llm.cache import LLMCache, make_key
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


_FULL_HASH_BYTES = 2 << 30
"""Weight files up to this size (2 GiB: models up to about 1B parameters in bf16) are hashed whole."""


def _fingerprint(path: str | os.PathLike[str] | None) -> str | None:
    """A content fingerprint of a model or adapter folder, for cache keys.

    Every top-level file is hashed whole up to ``_FULL_HASH_BYTES``; a larger weight file by its
    name, size and 256 one-MiB chunks spread evenly over it. (Hashing only the first and last MiB
    missed fine-tuning that changes only some layers: a critic whose top layers were trained kept
    the fingerprint of the checkpoint before it, and the cache served the old model's scores.)
    Modification times are ignored on purpose: ``dvc checkout`` changes them without changing the
    content. A name that is not a local folder hashes as the name.
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
            if size <= _FULL_HASH_BYTES:
                for block in iter(lambda: fh.read(16 * chunk), b""):
                    h.update(block)
            else:
                for i in range(256):
                    fh.seek(i * (size - chunk) // 255)
                    h.update(fh.read(chunk))
    return h.hexdigest()[:16]


def _resolve_model_path(model: str | os.PathLike[str]) -> str:
    """An existing local path made absolute, or else the name as given (a hub or server name).

    Repository-relative paths are resolved before a config reaches a backend, by
    :func:`ragcritic_lib.paths.resolve_llm_paths`; backends do not know the repository.
    """
    p = Path(model).expanduser()
    return str(p.resolve()) if p.exists() else str(model)


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
