"""The transformers backend (CPU or GPU): batched, left-padded generation with chat templates
and an optional LoRA adapter merged for inference; ``auto`` device and dtype resolution."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
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
    validate_prompt,
)

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# transformers backend
# ---------------------------------------------------------------------------------------------
def _resolve_device(device: str) -> str:
    import torch

    if device in ("auto", None, ""):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", str(device)):
        raise ValueError(f"hf option 'device' must be auto, cpu, mps, cuda or cuda:N, got {device!r}")
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
        # A constrained choice's prefill reads the next-token logits at the last position only, so
        # it skips the language-model head at every other position (a fifth of a small model's
        # work; the last position's logits differ from a full-width head's by about 4e-5).
        forward = getattr(self.hf_model, "forward", None)
        self._last_only: dict[str, int] = (
            {"logits_to_keep": 1} if forward is not None and "logits_to_keep" in inspect.signature(forward).parameters
            else {})
        # Scoring many prompts that open alike (one instruction, then each its own state): encode
        # their shared token prefix once a call and reuse its key-value cache (off by default).
        self.share_prompt_prefix = False
        self.min_shared_prefix = 32
        # Generating for many prompts whose turns before the last user turn are alike (one
        # instruction and its worked examples, then each its own passages and question): encode
        # those turns once and reuse their key-value cache (off by default; see _generate).
        self.share_generation_prefix = False
        self._turn_prefix: dict[str, str] = {}
        self._prefix_kv: dict[tuple[int, ...], Any] = {}

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

    def render(self, prompt: Prompt) -> str:
        """The exact text the model reads for ``prompt`` (before tokenization)."""
        validate_prompt(prompt)
        return prompt if isinstance(prompt, str) else _render_chat(self.tokenizer, prompt)

    def _prepare(self, prompt: Prompt) -> str:
        text = self.render(prompt)
        if self.share_generation_prefix and not isinstance(prompt, str):
            users = [i for i, m in enumerate(prompt) if m["role"] == "user"]
            if users and users[-1] > 0:
                head = self.tokenizer.apply_chat_template([dict(m) for m in prompt[: users[-1]]], tokenize=False,
                                                          add_generation_prompt=False)
                if text.startswith(head):
                    self._turn_prefix[text] = head
        return text

    def identity(self) -> dict[str, Any]:
        # The batch shape a prompt is computed at (rows, width granularity) and the sampler are
        # part of what decides its output, so entries made under other settings never match.
        batching = {"rows": self.batch_size, "fill": "none", "pad_multiple": PAD_MULTIPLE, "sampler": "row-gumbel"}
        if self.share_generation_prefix:
            batching["prefix"] = "turns before the last user turn, encoded once"
        return {**self._identity, "batching": batching}

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
        prefixes = [self._prefix_ids(t, ids) for t, ids in zip(prompts, encoded)]
        self._turn_prefix.clear()
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, pre in enumerate(prefixes):
            groups.setdefault(pre, []).append(i)
        for pre, members in sorted(groups.items(), key=lambda kv: (len(kv[0]), kv[0])):
            rest = [encoded[i][len(pre):] for i in members]
            for idx, width in plan_batches([len(ids) for ids in rest], self.batch_size):
                outs = self._generate_batch([rest[k] for k in idx], params, width=width, prefix=pre,
                                            prompt_tokens=[len(encoded[members[k]]) for k in idx])
                yield from zip([members[k] for k in idx], outs)

    def _prefix_ids(self, text: str, ids: list[int]) -> tuple[int, ...]:
        """The token ids of ``text``'s turns before its last user turn when they are encoded once
        for all prompts that share them (``share_generation_prefix``), else ().

        The prefix is a property of the prompt alone (its own earlier turns, whatever else the
        call holds), so a prompt's output does not depend on its neighbours. It is used only when
        it is at least ``min_shared_prefix`` tokens, the prompt's own tokens begin with it, and
        the prompt keeps at least one token of its own.
        """
        head = self._turn_prefix.get(text)
        if not self.share_generation_prefix or head is None:
            return ()
        pre = list(self.tokenizer(head, add_special_tokens=False)["input_ids"])
        if len(pre) < self.min_shared_prefix or len(ids) <= len(pre) or ids[: len(pre)] != pre:
            return ()
        return tuple(pre)

    def _prefix_cache(self, prefix: tuple[int, ...]) -> Any:
        """The key-value cache of ``prefix`` alone (one row, no padding), computed once and kept
        for the next calls (the few latest prefixes)."""
        import torch

        if prefix not in self._prefix_kv:
            if len(self._prefix_kv) >= 4:
                self._prefix_kv.pop(next(iter(self._prefix_kv)))
            with torch.inference_mode():
                out = self.hf_model(input_ids=torch.tensor([list(prefix)], device=self.device), use_cache=True,
                                    **self._last_only)
            self._prefix_kv[prefix] = out.past_key_values
        return self._prefix_kv[prefix]

    def _generate_batch(self, batch: list[list[int]], params: GenParams, *, width: int,
                        prefix: tuple[int, ...] = (), prompt_tokens: list[int] | None = None) -> list[Generation]:
        """Generate one batch at a fixed width (``width`` columns, one row per prompt).

        With ``prefix`` the rows are the prompts' tokens after that shared prefix: the model reads
        the prefix's cached keys and values (repeated once a row), then each row's padding
        (masked) and its own tokens, so the prefix is not encoded again for every prompt.
        """
        import copy

        import torch
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        input_ids, attention = _left_padded(batch, width, len(batch), self.pad_token_id)
        extra: dict[str, Any] = {}
        if prefix:
            cache = copy.deepcopy(self._prefix_cache(prefix))
            cache.batch_repeat_interleave(len(batch))
            head = torch.tensor([list(prefix)] * len(batch), dtype=torch.long)
            input_ids = torch.cat([head, input_ids], dim=1)
            attention = torch.cat([torch.ones_like(head), attention], dim=1)
            extra["past_key_values"] = cache
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
            seeds = [_row_seed(params.seed, [*prefix, *ids]) for ids in batch]
            processors.append(_row_sampler(seeds, float(params.temperature), float(params.top_p)))
        stopping = StoppingCriteriaList()
        stop_rule = None
        if params.stop:
            stop_rule = _stop_string_criteria(self.tokenizer, params.stop, len(prefix) + width)
            stopping.append(stop_rule)

        with torch.inference_mode():
            out = self.hf_model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                generation_config=GenerationConfig(**gen_cfg),
                logits_processor=processors,
                stopping_criteria=stopping,
                **extra,
            )
        new_tokens = out[: len(batch), len(prefix) + width:].tolist()
        stopped_at = stop_rule.stopped_at if stop_rule is not None else {}
        return [
            self._finish(ids, row, params, stopped_at.get(r),
                         n_prompt=prompt_tokens[r] if prompt_tokens is not None else None)
            for r, (ids, row) in enumerate(zip(batch, new_tokens))
        ]

    def _finish(
        self, prompt_ids: list[int], row: list[int], params: GenParams, stopped_at: int | None,
        n_prompt: int | None = None,
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
            prompt_tokens=len(prompt_ids) if n_prompt is None else n_prompt,
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

        encoded = [self.encode(text) for text in prompts]
        opt_all = [[self._option_ids(o) for o in opts] for opts in options]
        prefix = self._shared_prefix(encoded, opt_all)
        for j, (prompt_ids, opt_ids) in enumerate(zip(encoded, opt_all)):
            with torch.inference_mode():
                if all(len(ids) == 1 for ids in opt_ids):
                    # One forward pass: every option is a single next token.
                    logits = self.hf_model(torch.tensor([prompt_ids], device=self.device)).logits[0, -1]
                    lp = torch.log_softmax(logits.float(), -1)
                    yield j, [float(lp[ids[0]]) for ids in opt_ids]
                    continue
                yield j, self._score_after_prompt(prompt_ids, opt_ids, prefix=prefix)

    def _shared_prefix(self, encoded: list[list[int]], opt_all: list[list[list[int]]]) -> tuple[int, Any] | None:
        """(length, key-value cache) of the token prefix that every multi-token-scored prompt of
        this call shares, computed once (``share_prompt_prefix``; None when off, for fewer than two
        such prompts, or a prefix under ``min_shared_prefix`` tokens). Each prompt keeps at least
        one token of its own, whose logits give its options' first tokens."""
        import torch

        rows = [ids for ids, opts in zip(encoded, opt_all) if not all(len(o) == 1 for o in opts)]
        if not self.share_prompt_prefix or len(rows) < 2:
            return None
        n = min(len(r) for r in rows) - 1
        first = rows[0]
        for r in rows[1:]:
            k = 0
            while k < n and r[k] == first[k]:
                k += 1
            n = k
        if n < self.min_shared_prefix:
            return None
        with torch.inference_mode():
            out = self.hf_model(input_ids=torch.tensor([first[:n]], device=self.device), use_cache=True,
                                **self._last_only)
        return n, out.past_key_values

    def _score_after_prompt(self, prompt_ids: list[int], opt_ids: list[list[int]],
                            prefix: tuple[int, Any] | None = None) -> list[float]:
        """Total log-probability of each option (token ids, at least one has two or more) after
        ``prompt_ids``, encoding the prompt once.

        One forward pass over the prompt gives every option's first token and the prompt's
        key-value cache; each batch of options then feeds only its own tokens but the last over a
        copy of that cache repeated once a row (right-padded, the padding masked and after every
        real token, so no real token sees it). Encoding the prompt once a call instead of once an
        option is what makes scoring many options of a long prompt affordable on a CPU; the scores
        agree with a full pass over prompt and option to float rounding. With ``prefix`` (the
        length and cache of a prefix this prompt shares with the call's others,
        :meth:`_shared_prefix`), the pass reads only the tokens after it.
        """
        import copy

        import torch

        if prefix is not None:  # the shared prefix's cache, then only this prompt's own tokens
            n_shared, shared_cache = prefix
            out = self.hf_model(input_ids=torch.tensor([prompt_ids[n_shared:]], device=self.device),
                                past_key_values=copy.deepcopy(shared_cache), use_cache=True, **self._last_only)
        else:
            out = self.hf_model(input_ids=torch.tensor([prompt_ids], device=self.device), use_cache=True,
                                **self._last_only)
        first = torch.log_softmax(out.logits[0, -1].float(), -1)
        n_prompt = len(prompt_ids)
        scores: list[float] = []
        for start in range(0, len(opt_ids), self.batch_size):
            chunk = opt_ids[start : start + self.batch_size]
            totals = [float(first[o[0]]) for o in chunk]
            width = max(len(o) for o in chunk) - 1
            if width:
                n = len(chunk)
                cache = copy.deepcopy(out.past_key_values)
                cache.batch_repeat_interleave(n)
                ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
                mask = torch.zeros((n, n_prompt + width), dtype=torch.long)
                mask[:, :n_prompt] = 1
                for r, o in enumerate(chunk):
                    ids[r, : len(o) - 1] = torch.tensor(o[:-1])
                    mask[r, n_prompt : n_prompt + len(o) - 1] = 1
                positions = torch.arange(n_prompt, n_prompt + width).expand(n, -1)
                logits = self.hf_model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                       position_ids=positions.to(self.device), past_key_values=cache,
                                       use_cache=True).logits
                lp = torch.log_softmax(logits.float(), -1)
                for r, o in enumerate(chunk):
                    if len(o) > 1:
                        totals[r] += float(lp[r, torch.arange(len(o) - 1), torch.tensor(o[1:])].sum())
            scores += totals
        return scores

    def _choose(self, prompts: list[Any], options: list[list[str]]) -> Iterator[tuple[int, Choice]]:
        """Greedy decoding restricted to a token trie of each prompt's options (batched).

        Only where the trie branches does the model's choice matter: a token that is the only
        one allowed is taken without asking the model. So after one prefill of the batch (at the
        prompts' fixed width, as in :meth:`_generate`), each round picks every unfinished row's
        best allowed token at its branch and feeds that token together with the forced run that
        follows it in one forward pass over the key-value cache. A batch costs one forward pass
        per branch point of its deepest row instead of one per token of its longest option
        (the table's programs branch a few times in some 40 tokens); the choice is the greedy
        one, as a token-by-token decode would make it.
        """
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
            paths = self._choose_batch([encoded[i] for i in idx], [tries[i] for i in idx], width, end)
            for i, path in zip(idx, paths):
                k = seqs[i].get(tuple(path))
                if k is None:  # cannot happen with a complete trie; never guess silently
                    raise RuntimeError(f"constrained decoding left the option trie for prompt {i}")
                yield i, Choice(index=k, text=options[i][k], prompt_tokens=len(encoded[i]),
                                completion_tokens=len(path), constrained=True)

    def _choose_batch(self, batch: list[list[int]], tries: list[dict[tuple[int, ...], set[int]]], width: int,
                      end: int) -> list[list[int]]:
        """The token path through its trie that greedy decoding takes for each prompt of one batch."""
        import torch

        n = len(batch)
        input_ids, attention = _left_padded(batch, width, n, self.pad_token_id)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        paths: list[list[int]] = [[] for _ in range(n)]
        finished = [False] * n
        real = [len(ids) for ids in batch]
        with torch.inference_mode():
            out = self.hf_model(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                                position_ids=positions.to(self.device), use_cache=True, **self._last_only)
            past, last = out.past_key_values, out.logits[:, -1, :].float()
            mask = attention
            while True:
                chunks: list[list[int]] = []
                for r in range(n):
                    if finished[r]:
                        chunks.append([])
                        continue
                    allowed = sorted(tries[r][tuple(paths[r])])
                    ids = torch.tensor(allowed, device=last.device)
                    token = allowed[int(torch.argmax(last[r, ids]))] if len(allowed) > 1 else allowed[0]
                    chunk = [token]
                    while token != end:  # the forced run: nodes with one way on
                        nxt = tries[r].get(tuple(paths[r] + chunk))
                        if nxt is None or len(nxt) != 1:
                            break
                        token = next(iter(nxt))
                        chunk.append(token)
                    paths[r] += chunk
                    finished[r] = chunk[-1] == end
                    chunks.append([] if finished[r] else chunk)
                if all(finished):
                    return paths
                span = max(len(c) for c in chunks)
                new_ids = torch.full((n, span), self.pad_token_id, dtype=torch.long)
                new_mask = torch.zeros((n, span), dtype=torch.long)
                new_pos = torch.ones((n, span), dtype=torch.long)
                for r, c in enumerate(chunks):
                    if c:
                        new_ids[r, : len(c)] = torch.tensor(c, dtype=torch.long)
                        new_mask[r, : len(c)] = 1
                        new_pos[r, : len(c)] = torch.arange(real[r], real[r] + len(c))
                mask = torch.cat([mask, new_mask], dim=1)
                out = self.hf_model(input_ids=new_ids.to(self.device), attention_mask=mask.to(self.device),
                                    position_ids=new_pos.to(self.device), past_key_values=past, use_cache=True)
                past = out.past_key_values
                rows = torch.arange(n)
                at = torch.tensor([max(0, len(c) - 1) for c in chunks])
                last = out.logits[rows, at].float()
                for r, c in enumerate(chunks):
                    real[r] += len(c)


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


