"""The vLLM offline-engine backend (GPU only, imported lazily): one engine per process, shared
by views of one base model that differ by LoRA adapter; :func:`release_vllm_engine` frees it."""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
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
    _adapter_has_tokenizer,
    _fingerprint,
    _model_label,
    _render_chat,
    _resolve_model_path,
    cut_at_stop,
)

log = logging.getLogger(__name__)

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


