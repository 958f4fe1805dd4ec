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
:class:`~ragcritic_lib.llm.cache.LLMCache` are returned from it, only the misses are generated (each
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

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragcritic_lib.llm.cache import LLMCache
from ragcritic_lib.llm.base import (  # noqa: F401 (the package's public interface)
    CallableLLM,
    Choice,
    GenParams,
    Generation,
    LLM,
    Message,
    Prompt,
    UsageStats,
    cut_at_stop,
    nearest_option,
    validate_prompt,
    _fingerprint,
    _resolve_model_path,
)
from ragcritic_lib.llm.hf import (  # noqa: F401 (the package's public interface)
    HFBackend,
    PAD_MULTIPLE,
    padded_width,
    plan_batches,
    _resolve_device,
    _resolve_dtype,
)
from ragcritic_lib.llm.vllm import (  # noqa: F401 (the package's public interface)
    VLLMBackend,
    VLLM_ENGINE_OPTIONS,
    check_vllm_engine_options,
    release_vllm_engine,
    vllm_engine_options,
)
from ragcritic_lib.llm.openai import (  # noqa: F401 (the package's public interface)
    OpenAIBackend,
    PromptRejected,
    ServerConfigError,
    retry_after_seconds,
)

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


def check_llm_config(cfg: Mapping[str, Any], source: str = "LLM config", *,
                     check_model_path: bool = True) -> tuple[str, set[str]]:
    """Check an LLM config as :func:`load_llm` reads it, without building anything: the backend,
    unknown keys, the model, and keys that this backend cannot honour. ``source`` opens every
    message (a file and member, say); ``check_model_path=False`` leaves a local model folder that
    is not there yet unchecked (one a later stage builds).

    Returns:
        (backend, the vLLM engine option keys among the config's keys).
    """
    if not isinstance(cfg, Mapping):
        raise TypeError(f"{source} must be a mapping, got {type(cfg).__name__}")
    backend = cfg.get("backend")
    if backend == "callable":
        raise ValueError(f"{source}: backend 'callable' is built in code: CallableLLM(fn), not through load_llm")
    if backend not in _BACKEND_KEYS:
        raise ValueError(f"{source} key 'backend' must be one of {sorted(_BACKEND_KEYS)}, got {backend!r}")
    known = _COMMON_KEYS.union(*_BACKEND_KEYS.values())
    engine_keys: set[str] = set()
    if backend == "vllm":
        engine_keys = set(cfg) - known
        check_vllm_engine_options({k: cfg[k] for k in engine_keys})
        known = known | engine_keys
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {unknown}; known keys: {sorted(known)}")
    if not isinstance(cfg.get("model"), str) or not cfg["model"]:
        raise ValueError(f"{source} key 'model' must be a non-empty string")
    if (check_model_path and backend in ("hf", "vllm") and looks_like_path(cfg["model"])
            and not Path(cfg["model"]).expanduser().exists()):
        raise ValueError(f"{source} key 'model': no such local model folder {cfg['model']!r} "
                         "(a hub model is named 'org/name')")
    unsupported = sorted(
        k for k in set(cfg) - _COMMON_KEYS - _BACKEND_KEYS[backend] - _PORTABLE_KEYS - engine_keys
        if cfg[k] not in _INACTIVE.get(k, (None,))
    )
    if unsupported:
        raise ValueError(f"{source} key(s) {unsupported} are not supported by backend {backend!r}")
    if backend == "openai":
        if "urls" not in cfg:
            raise ValueError(f"{source} key 'urls' is required for backend 'openai'")
        urls = cfg["urls"]
        if not (isinstance(urls, str) or (isinstance(urls, list) and all(isinstance(u, str) for u in urls))):
            raise ValueError(f"{source} key 'urls' must be a URL, a comma-separated str or a list of URLs, got {urls!r}")
        if cfg.get("extra_body") is not None and not isinstance(cfg["extra_body"], Mapping):
            raise ValueError(f"{source} key 'extra_body' must be a mapping of request fields, got {cfg['extra_body']!r}")
    for key in ("timeout_s", "backoff_s", "backoff_max_s", "patience_s"):
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"{source} key {key!r} must be a number >= 0, got {value!r}")
    return backend, engine_keys


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
    backend, engine_keys = check_llm_config(cfg)
    cache = None
    if cfg.get("cache", True):
        cache = LLMCache(Path(cfg["cache_dir"]) if cfg.get("cache_dir") else None)
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
    rep = opts.pop("repetition_penalty", 1.0)
    if rep != 1.0:
        opts["extra_body"] = {**(opts.get("extra_body") or {}), "repetition_penalty": float(rep)}
    return OpenAIBackend(cfg["model"], cache=cache, **opts)


def looks_like_path(model: str) -> bool:
    """A model string meant as a local folder: absolute, ./ ../ ~ relative, or deeper than a hub
    id's one "org/name" slash."""
    return model.startswith(("/", "./", "../", "~")) or model.count("/") > 1


def _as_int(cfg: Mapping[str, Any], key: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"LLM config key {key!r} must be an int, got {value!r}")
    return value
