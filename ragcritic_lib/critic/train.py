"""Critic fine-tuning within a CPU budget: the frozen lower layers run once, the top layers learn.

A critic needs thousands of examples (the learning curve of notebook 05 shows it), and a full
backward pass through a 30-layer model costs about 270 training tokens/s on two CPU cores. Here
the lower ``L - train_layers`` decoder layers stay frozen: every example goes through them once,
with no gradient, and their output is kept in memory (bf16). Each epoch then runs only the top
``train_layers`` layers, the final norm and the output head, and the loss is taken on the
critique tokens alone (logits are computed at those positions only). With ``train_layers`` equal
to the model's depth this is plain full fine-tuning (embeddings frozen).

``method``:
- ``full``: every weight of the top layers is trained (fp32 master weights, bf16 autocast).
- ``lora``: LoRA adapters (peft) on every linear map of the top layers.
- ``best``: both are compared on dev first (:func:`run_cached_sft`); full fine-tuning, the
  documented default, is replaced only by a method whose advantage's CI lies wholly above 0.

The trained critic ships in a compact form (:mod:`ragcritic_lib.critic.forms`): a LoRA result as
its adapter, a full fine-tune as what changed against the base within a size budget.

Batches are right-padded (a left-padded row is fully masked at its first positions, which gives
NaN gradients under SDPA) and causal attention alone keeps pads out of every real position.

Early stopping reads the dev verdict AUROC: the margin log P("Error") - log P("Correct") at the
verdict token of ``{"Judgement": "...``, the same score the calibrated critic uses. DPO
(:func:`train_dpo`) uses the same cache: the policy is the top layers, the reference is their
state before DPO, and reference log-probabilities are computed once.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib.critic.verdict import CORRECT, ERROR, VERDICT_PREFIX, verdict_tokens
from ragcritic_lib.critic.flags import learning_curve  # noqa: F401 - re-exported
from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci  # noqa: F401 - re-exported
from ragcritic_lib.evaluation.stats import cluster_resamples, percentile_interval

METHODS = ("full", "lora")
SELECT_BY = ("dev_auroc", "dev_loss", "dev_pairs")
SCHEDULES = ("linear", "cosine")


@dataclass
class TrainSettings:
    """Knobs of one critic training run (params ``critic_sft`` / ``critic_dpo``)."""

    method: str = "full"
    train_layers: int = 6
    epochs: float = 2.0
    learning_rate: float = 1e-4
    batch_size: int = 16
    weight_decay: float = 0.0
    warmup_ratio: float = 0.05
    eval_every: int = 500          # examples between dev evaluations
    patience: int = 3              # evaluations without a better dev AUROC before stopping
    lora_r: int = 16
    lora_alpha: int = 32
    max_length: int = 512
    verdict_weight: float = 1.0    # SFT loss: mean CE of the verdict tokens x this + mean CE of the other tokens (0: plain mean)
    seed: int = 13
    dtype: str = "auto"            # autocast dtype: auto (bf16 where supported) | bfloat16 | float32
    schedule: str = "linear"       # learning rate after the warm-up: linear | cosine decay to 0
    select: str = "dev_auroc"      # weights kept: dev_auroc (the critic's own verdict margin) | dev_loss (its dev critiques' tokens) | dev_pairs (DPO: held-out pairs' loss)

    def __post_init__(self) -> None:
        if self.method not in (*METHODS, "best"):
            raise ValueError(f"critic training method {self.method!r}: choose one of {(*METHODS, 'best')}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"critic training schedule {self.schedule!r}: choose one of {SCHEDULES}")
        if self.select not in SELECT_BY:
            raise ValueError(f"critic training select {self.select!r}: choose one of {SELECT_BY}")
        if self.train_layers < 1:
            raise ValueError(f"train_layers must be >= 1, got {self.train_layers}")


@dataclass
class Encoded:
    ids: list[int]
    n_prompt: int
    verdict_pos: int            # index of the token whose logits give the verdict
    is_error: bool


@dataclass
class RunReport:
    """What one training run did: curve, best dev AUROC and where, cost."""

    method: str
    examples: int
    train_layers: int
    steps: int = 0
    seconds: float = 0.0
    cache_seconds: float = 0.0
    train_tokens: int = 0
    best_dev_auroc: float | None = None
    best_at_examples: int = 0
    stopped_early: bool = False
    curve: list[dict[str, Any]] = field(default_factory=list)   # {examples_seen, loss, dev_auroc[, dev_loss]}
    select: str = "dev_auroc"
    best_dev_loss: float | None = None   # select dev_loss: the kept weights' dev critique loss; dev_pairs: their dev pair loss

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------------------------
def _verdict_tokens(tok: Any) -> tuple[int, int, int]:
    """:func:`ragcritic_lib.critic.verdict.verdict_tokens`."""
    return verdict_tokens(tok)


def encode(tok: Any, prompt_messages: Sequence[Mapping[str, str]], completion: str, *, max_length: int
           ) -> Encoded | None:
    """Token ids of prompt + completion (+ end of turn); None when longer than ``max_length``."""
    prompt = tok.apply_chat_template(list(prompt_messages), tokenize=False, add_generation_prompt=True)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    end = tok.eos_token or ""
    c_ids = tok(completion + end, add_special_tokens=False)["input_ids"]
    ids = p_ids + c_ids
    if len(ids) > max_length:
        return None
    offset, _, _ = _verdict_tokens(tok)
    return Encoded(ids=ids, n_prompt=len(p_ids), verdict_pos=len(p_ids) + offset - 1,
                   is_error=not completion.startswith(VERDICT_PREFIX + CORRECT))


def encode_examples(tok: Any, examples: Sequence[Mapping[str, Any]], *, max_length: int) -> tuple[list[Encoded], int]:
    """Encode chat examples ``{"messages": [system, user, assistant]}``; returns (encoded, dropped)."""
    out, dropped = [], 0
    for ex in examples:
        msgs = ex["messages"]
        e = encode(tok, msgs[:-1], msgs[-1]["content"], max_length=max_length)
        if e is None:
            dropped += 1
        else:
            out.append(e)
    return out, dropped


# --------------------------------------------------------------------------------------------
# Model split at a layer
# --------------------------------------------------------------------------------------------
def train_device() -> str:
    """Where the cached trainer runs: ``cuda`` when PyTorch sees a GPU, else ``cpu`` (hide the GPU
    with ``CUDA_VISIBLE_DEVICES=""`` to train on the CPU anyway). The same params give the same
    recipe on either; only the arithmetic's speed and rounding differ. The generator's ``device:
    auto`` resolves the same way."""
    from ragcritic_lib.llm import _resolve_device

    return _resolve_device("auto")


def autocast_plan(torch: Any, dtype: str, device: Any = "cpu") -> tuple[str, bool]:
    """(device type, bf16 on): bf16 autocast where asked (``bfloat16``) or where it pays
    (``auto``: a CPU with bf16 instructions, or a GPU that has bf16); fp32 otherwise."""
    from ragcritic_lib.critic.training import cpu_bf16_enabled

    kind = getattr(device, "type", str(device)).split(":")[0]
    if kind == "cuda":
        return "cuda", bool(dtype == "bfloat16" or (dtype == "auto" and torch.cuda.is_bf16_supported()))
    return "cpu", bool(dtype == "bfloat16" or (dtype == "auto" and cpu_bf16_enabled("auto")))


def _autocast(torch: Any, dtype: str, device: Any = "cpu") -> Any:
    kind, use = autocast_plan(torch, dtype, device)
    return torch.autocast(kind, dtype=torch.bfloat16, enabled=use)


class SplitModel:
    """A causal LM seen as frozen lower layers and trainable upper layers."""

    def __init__(self, model: Any, train_layers: int) -> None:
        self.model = model
        self.inner = model.model
        n = len(self.inner.layers)
        self.split = max(0, n - train_layers)
        self.upper = list(self.inner.layers[self.split:])
        self.lora_config: Any = None  # set once LoRA adapters are in the model

    @property
    def device(self) -> Any:
        """The device the model's weights are on (every input is built there)."""
        return next(self.model.parameters()).device

    def tensor(self, values: Any) -> Any:
        """``torch.tensor(values)`` on the model's device."""
        import torch

        return torch.tensor(values, device=self.device)

    def _positions(self, h: Any) -> Any:
        import torch

        return torch.arange(h.shape[1], device=h.device).unsqueeze(0).expand(h.shape[0], -1)

    def _run(self, h: Any, layers: Sequence[Any]) -> Any:
        pos = self._positions(h)
        pe = self.inner.rotary_emb(h, position_ids=pos)
        for layer in layers:
            h = layer(h, attention_mask=None, position_embeddings=pe, position_ids=pos)
            h = h[0] if isinstance(h, tuple) else h
        return h

    def lower(self, ids: Any) -> Any:
        """Hidden states after the frozen layers (no gradient)."""
        import torch

        with torch.no_grad():
            return self._run(self.inner.embed_tokens(ids), self.inner.layers[:self.split])

    def upper_logits(self, h: Any, rows: Any, cols: Any) -> Any:
        """Logits at the given (row, position) pairs after the upper layers and the norm."""
        out = self.inner.norm(self._run(h, self.upper))
        return self.model.lm_head(out[rows, cols])


def _pad(seqs: Sequence[Any], torch: Any) -> Any:
    width = max(s.shape[0] for s in seqs)
    out = seqs[0].new_zeros((len(seqs), width, *seqs[0].shape[1:]))
    for i, s in enumerate(seqs):
        out[i, : s.shape[0]] = s
    return out


def cache_lower(split: SplitModel, encoded: Sequence[Encoded], *, batch_size: int, dtype: str) -> list[Any]:
    """Per example, the frozen layers' output (bf16, real positions only, on the model's device)."""
    import torch

    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
    out: list[Any] = [None] * len(encoded)
    with _autocast(torch, dtype, split.device):
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            ids = _pad([split.tensor(encoded[i].ids) for i in idx], torch)
            h = split.lower(ids)
            for j, i in enumerate(idx):
                out[i] = h[j, : len(encoded[i].ids)].to(torch.bfloat16).clone()
    return out


# --------------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------------
def verdict_margins(split: SplitModel, cache: Sequence[Any], encoded: Sequence[Encoded], tok: Any, *,
                    batch_size: int, dtype: str) -> list[float]:
    """log P(Error) - log P(Correct) at each example's verdict token."""
    import torch

    _, c_id, e_id = _verdict_tokens(tok)
    out = [0.0] * len(encoded)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
    with torch.no_grad(), _autocast(torch, dtype, split.device):
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            h = _pad([cache[i] for i in idx], torch).to(split.device)
            rows = torch.arange(len(idx), device=split.device)
            cols = split.tensor([encoded[i].verdict_pos for i in idx])
            logp = torch.log_softmax(split.upper_logits(h, rows, cols).float(), dim=-1)
            for j, i in enumerate(idx):
                out[i] = float(logp[j, e_id] - logp[j, c_id])
    return out


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
def _trainable(split: SplitModel, settings: TrainSettings) -> list[Any]:
    """Freeze everything, then open the upper layers (full) or add LoRA to them (lora). A model
    that already carries an adapter (a LoRA SFT critic that DPO continues) keeps it, and the
    adapter's weights in the upper layers train."""
    for p in split.model.parameters():
        p.requires_grad = False
    upper = tuple(f"layers.{i}." for i in range(split.split, len(split.inner.layers)))
    if settings.method == "full":
        params = [p for layer in split.upper for p in layer.parameters()]
        for p in params:
            p.requires_grad = True
        return params
    if getattr(split, "lora_config", None) is None:
        from peft import LoraConfig, inject_adapter_in_model

        names = "|".join(str(i) for i in range(split.split, len(split.inner.layers)))
        split.lora_config = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
                                       target_modules=rf".*layers\.({names})\.(self_attn|mlp)\.\w+_proj")
        inject_adapter_in_model(split.lora_config, split.model)
        split.upper = list(split.inner.layers[split.split:])
    params = [p for n, p in split.model.named_parameters() if "lora_" in n and any(u in n for u in upper)]
    for p in params:
        p.requires_grad = True
    return params


def merge_lora(model: Any) -> None:
    """Fold LoRA adapters into their base linear maps and remove the wrappers (in place)."""
    from peft.tuners.lora import LoraLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLayer):
            module.merge()
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name), child, module.get_base_layer())


def _completion_positions(enc: Sequence[Encoded], idx: Sequence[int]) -> tuple[list[int], list[int], list[int], list[bool]]:
    """(batch row, position, next token, is the verdict token) of every completion token of the
    examples ``idx``, in batch order: the positions whose logits the loss reads."""
    rows, cols, targets, is_verdict = [], [], [], []
    for j, i in enumerate(idx):
        e = enc[i]
        for pos in range(e.n_prompt - 1, len(e.ids) - 1):
            rows.append(j)
            cols.append(pos)
            targets.append(e.ids[pos + 1])
            is_verdict.append(pos == e.verdict_pos)
    return rows, cols, targets, is_verdict


def _lr_at(step: int, total: int, settings: TrainSettings) -> float:
    warm = max(1, int(settings.warmup_ratio * total))
    if step < warm:
        return settings.learning_rate * (step + 1) / warm
    left = max(0.0, (total - step) / max(1, total - warm))  # 1 at the end of the warm-up, 0 at the end
    if settings.schedule == "cosine":
        return settings.learning_rate * 0.5 * (1.0 - math.cos(math.pi * left))
    return settings.learning_rate * left


def _batches(encoded: Sequence[Encoded], size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of similar length (less padding to compute)."""
    idx = list(range(len(encoded)))
    rng.shuffle(idx)
    chunks = [idx[i:i + size * 8] for i in range(0, len(idx), size * 8)]
    out = []
    for ch in chunks:
        ch.sort(key=lambda i: len(encoded[i].ids))
        out += [ch[i:i + size] for i in range(0, len(ch), size)]
    rng.shuffle(out)
    return out


def critique_loss(split: SplitModel, cache: Sequence[Any], encoded: Sequence[Encoded], *, batch_size: int,
                  dtype: str) -> float:
    """Mean cross-entropy of the completion tokens after the verdict token (tags, critique and
    the end of turn) over ``encoded``: how well the critic writes what follows its verdict."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad(), _autocast(torch, dtype, split.device):
        for start in range(0, len(encoded), batch_size):
            idx = list(range(start, min(len(encoded), start + batch_size)))
            rows, cols, targets, _ = _completion_positions(encoded, idx)
            keep = [k for k, (j, c) in enumerate(zip(rows, cols)) if c > encoded[idx[j]].verdict_pos]
            if not keep:
                continue
            h = _pad([cache[i] for i in idx], torch).to(split.device)
            logits = split.upper_logits(h, split.tensor([rows[k] for k in keep]), split.tensor([cols[k] for k in keep]))
            ce = torch.nn.functional.cross_entropy(logits.float(), split.tensor([targets[k] for k in keep]),
                                                   reduction="sum")
            total, count = total + float(ce), count + len(keep)
    return total / count if count else float("nan")


class _BestOnDev:
    """Dev bookkeeping shared by SFT and DPO: the curve, the best weights, patience.

    Every evaluation scores the critic's own verdict margin on dev (``dev_auroc``); with
    ``select: dev_loss`` it also scores the dev critiques' tokens after the verdict
    (:func:`critique_loss`), and the weights of the lowest such loss are kept instead: the right
    choice when the verdict comes from another body and the critic is there for its tags and
    critique. With ``select: dev_pairs`` (DPO) ``pair_loss`` scores held-out preference pairs,
    ``(loss, accuracy)``, and the weights of the lowest dev pair loss are kept."""

    def __init__(self, split: SplitModel, tok: Any, dev: Sequence[Encoded], dev_cache: Sequence[Any],
                 settings: TrainSettings, report: RunReport, progress: Any,
                 pair_loss: Callable[[], tuple[float, float]] | None = None) -> None:
        if settings.select == "dev_pairs" and pair_loss is None:
            raise ValueError("select: dev_pairs needs held-out preference pairs (DPO with dev pairs)")
        self.split, self.tok, self.dev, self.dev_cache = split, tok, dev, dev_cache
        self.settings, self.report, self.progress = settings, report, progress
        self.pair_loss = pair_loss
        self.best, self.bad, self.state = -math.inf, 0, None
        report.select = settings.select

    def evaluate(self, seen: int, **row: Any) -> bool:
        """Score dev, log a curve row; True when patience has run out."""
        was_training = self.split.model.training
        self.split.model.eval()
        a = auroc(verdict_margins(self.split, self.dev_cache, self.dev, self.tok, batch_size=32,
                                  dtype=self.settings.dtype), [d.is_error for d in self.dev])
        entry = {"examples_seen": seen, **row, "dev_auroc": None if a is None else round(a, 4)}
        score = a
        if self.settings.select == "dev_loss":
            loss = critique_loss(self.split, self.dev_cache, self.dev, batch_size=32, dtype=self.settings.dtype)
            entry["dev_loss"] = round(loss, 4)
            score = None if math.isnan(loss) else -loss
        elif self.settings.select == "dev_pairs":
            assert self.pair_loss is not None
            loss, accuracy = self.pair_loss()
            entry.update(dev_loss=round(loss, 4), dev_pair_accuracy=round(accuracy, 4))
            score = -loss
        self.split.model.train(was_training)
        self.report.curve.append(entry)
        if self.progress:
            self.progress(entry)
        if score is not None and score > self.best + 1e-4:
            self.best, self.bad = score, 0
            self.state = {k: v.detach().clone() for k, v in self.split.model.named_parameters() if v.requires_grad}
            self.report.best_dev_auroc, self.report.best_at_examples = entry["dev_auroc"], seen
            self.report.best_dev_loss = entry.get("dev_loss")
            return False
        self.bad += 1
        return self.bad >= self.settings.patience

    def restore(self) -> None:
        """Put the best weights back (nothing to do when dev never gave an AUROC)."""
        import torch

        self.split.model.eval()
        if self.state is not None:
            with torch.no_grad():
                named = dict(self.split.model.named_parameters())
                for k, v in self.state.items():
                    named[k].copy_(v)


def train_sft(split: SplitModel, tok: Any, train: Sequence[Encoded], train_cache: Sequence[Any],
              dev: Sequence[Encoded], dev_cache: Sequence[Any], settings: TrainSettings, *,
              progress: Any = None) -> RunReport:
    """Train the upper layers on the critique tokens; keep the weights of the best dev AUROC."""
    import torch

    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    params = _trainable(split, settings)
    for p in params:
        p.data = p.data.float()
    opt = torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    epochs = max(1, math.ceil(settings.epochs))
    plan = []
    for e in range(epochs):
        b = _batches(train, settings.batch_size, rng)
        if e == epochs - 1 and settings.epochs < epochs:
            b = b[: max(1, round(len(b) * (settings.epochs - e)))]
        plan += b
    report = RunReport(method=settings.method, examples=len(train), train_layers=len(split.upper))
    stopper = _BestOnDev(split, tok, dev, dev_cache, settings, report, progress)
    seen, next_eval = 0, settings.eval_every
    losses: list[float] = []
    t0 = time.time()

    split.model.train()
    for step, batch in enumerate(plan):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, len(plan), settings)
        h = _pad([train_cache[i] for i in batch], torch).to(split.device)
        rows, cols, targets, is_verdict = _completion_positions(train, batch)
        with _autocast(torch, settings.dtype, split.device):
            logits = split.upper_logits(h, split.tensor(rows), split.tensor(cols))
        ce = torch.nn.functional.cross_entropy(logits.float(), split.tensor(targets), reduction="none")
        verdict = split.tensor(is_verdict)
        if settings.verdict_weight > 0 and verdict.any() and (~verdict).any():
            loss = settings.verdict_weight * ce[verdict].mean() + ce[~verdict].mean()
        else:
            loss = ce.mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        report.steps += 1
        report.train_tokens += sum(len(train[i].ids) for i in batch)
        seen += len(batch)
        if seen >= next_eval or step == len(plan) - 1:
            next_eval += settings.eval_every
            stop = stopper.evaluate(seen, loss=round(sum(losses) / max(1, len(losses)), 4))
            losses.clear()
            if stop:
                report.stopped_early = step < len(plan) - 1
                break
    stopper.restore()
    report.seconds = round(time.time() - t0, 1)
    return report


def save_checkpoint(split: SplitModel, out_dir: str | Path, *, method: str, base_model: str | Path, base_key: str,
                    ship_max_mb: float, dtype: str = "bfloat16") -> dict[str, Any]:
    """Ship the trained critic to ``out_dir`` in a compact form (:mod:`ragcritic_lib.critic.forms`):
    LoRA as its adapter alone, full fine-tuning as the most faithful form within ``ship_max_mb``
    of what changed against ``base_model`` (whose params key is ``base_key``). Returns the manifest."""
    from ragcritic_lib.critic import forms as model_forms

    device = split.device
    split.model.to("cpu")  # the shipped forms are computed against the base's weights, read on the CPU
    try:
        if method == "lora":
            return model_forms.ship_adapter(split.model, out_dir, base_folder=base_model, base_key=base_key,
                                            lora_config=split.lora_config, dtype=dtype)
        return model_forms.ship_full(split.model.state_dict(), base_model, out_dir, max_mb=ship_max_mb,
                                     base_key=base_key, dtype=dtype)
    finally:
        split.model.to(device)


def load_split_model(model_dir: str | Path, train_layers: int) -> tuple[SplitModel, Any]:
    """(SplitModel in fp32 on :func:`train_device`, tokenizer) from a local model folder or a shipped
    form (a full form is rebuilt on its base; an adapter is injected into its base and stays a
    trainable adapter)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragcritic_lib.critic import forms as model_forms

    lora_config = None
    if model_forms.is_shipped(model_dir):
        base = model_forms.manifest_base(model_dir)
        tok = AutoTokenizer.from_pretrained(str(base))
        if model_forms.read_manifest(model_dir)["form"] == "adapter":
            model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
            lora_config = model_forms.load_adapter_into(model, model_dir)
        else:
            model = model_forms.rebuild_model(model_dir, dtype="float32")
    else:
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.config.use_cache = False
    split = SplitModel(model.to(train_device()), train_layers)
    split.lora_config = lora_config
    return split, tok


def ship_base(model_dir: str | Path) -> Path:
    """The base a shipped form stands on (checked), or the folder itself when it is a plain model:
    what a model trained further from ``model_dir`` ships against."""
    from ragcritic_lib.critic import forms as model_forms

    return model_forms.manifest_base(model_dir) if model_forms.is_shipped(model_dir) else Path(model_dir)


def shipped_fidelity(trained: SplitModel, tok: Any, dev: Sequence[Encoded], shipped_dir: str | Path,
                     settings: TrainSettings, *, tolerance: float = 0.02) -> dict[str, Any]:
    """Dev verdict margins of the trained model in memory against those of the shipped form,
    reloaded from ``shipped_dir``: both AUROCs, the mean absolute margin difference and ``flag``
    when the shipped AUROC is more than ``tolerance`` lower."""
    from ragcritic_lib.critic import forms as model_forms

    kw = {"batch_size": 32, "dtype": settings.dtype}
    full = len(trained.inner.layers)
    t_split = SplitModel(trained.model, full)
    before = verdict_margins(t_split, cache_lower(t_split, dev, **kw), dev, tok, **kw)
    shipped, _ = load_split_model(shipped_dir, full)
    shipped.model.eval()
    after = verdict_margins(shipped, cache_lower(shipped, dev, **kw), dev, tok, **kw)
    del shipped
    manifest = model_forms.read_manifest(shipped_dir)
    check = model_forms.ship_check(before, after, [d.is_error for d in dev], auroc=auroc, tolerance=tolerance)
    return {"form": manifest["form"], "rank": manifest.get("rank", 0), "mb": model_forms.folder_mb(shipped_dir),
            "max_mb": manifest.get("ship_max_mb"), **check}


def fresh_copy(split: SplitModel, train_layers: int) -> SplitModel:
    """An independent copy (for runs that start from the same weights)."""
    out = SplitModel(copy.deepcopy(split.model), train_layers)
    out.lora_config = copy.deepcopy(split.lora_config)
    return out


# --------------------------------------------------------------------------------------------
# DPO on the cache
# --------------------------------------------------------------------------------------------
def _completion_logps(split: SplitModel, cache: Sequence[Any], enc: Sequence[Encoded], idx: Sequence[int],
                      dtype: str, grad: bool) -> Any:
    import torch

    h = _pad([cache[i] for i in idx], torch).to(split.device)
    rows, cols, targets, _ = _completion_positions(enc, idx)
    owner = rows
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx, _autocast(torch, dtype, split.device):
        logits = split.upper_logits(h, split.tensor(rows), split.tensor(cols))
    with ctx:
        lp = torch.log_softmax(logits.float(), dim=-1).gather(1, split.tensor(targets)[:, None])[:, 0]
        return torch.zeros(len(idx), device=split.device).index_add(0, split.tensor(owner), lp)


def _pair_logps(split: SplitModel, cache: Sequence[Any], enc: Sequence[Encoded], dtype: str) -> Any:
    """Summed completion log-probabilities of every example (no gradient), in order."""
    import torch

    n = len(enc)
    return torch.cat([_completion_logps(split, cache, enc, list(range(i, min(n, i + 32))), dtype, False)
                      for i in range(0, n, 32)])


def train_dpo(split: SplitModel, chosen: Sequence[Encoded], rejected: Sequence[Encoded], c_cache: Sequence[Any],
              r_cache: Sequence[Any], dev: Sequence[Encoded], dev_cache: Sequence[Any], tok: Any,
              settings: TrainSettings, *, beta: float, progress: Any = None,
              dev_pairs: tuple[Sequence[Encoded], Sequence[Encoded], Sequence[Any], Sequence[Any]] | None = None
              ) -> RunReport:
    """Sigmoid DPO of the upper layers against their own state before training (the reference).

    The curve rows carry ``loss``, ``reward_accuracy`` (share of pairs whose chosen reward is
    above the rejected one), ``reward_margin`` and ``dev_auroc``. The best dev AUROC's weights
    are kept, including the starting point (evaluated first), so DPO never leaves the critic
    worse on dev than SFT left it; whether it helped is in the report. ``dev_pairs`` (chosen,
    rejected, their caches) are held-out pairs: with ``select: dev_pairs`` the weights of their
    lowest DPO loss against the same reference are kept (log 2 at the start). With neither dev
    examples nor dev pairs (a policy that is not a critic, e.g. RePAIR's planner) nothing is
    selected: the curve logs the training rows and the last weights stay.
    """
    import torch

    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    n = len(chosen)
    ref_c = _pair_logps(split, c_cache, chosen, settings.dtype)
    ref_r = _pair_logps(split, r_cache, rejected, settings.dtype)
    pair_loss = None
    if dev_pairs is not None:
        d_chosen, d_rejected, dc_cache, dr_cache = dev_pairs
        ref_dc = _pair_logps(split, dc_cache, d_chosen, settings.dtype)
        ref_dr = _pair_logps(split, dr_cache, d_rejected, settings.dtype)

        def pair_loss() -> tuple[float, float]:
            margin = beta * ((_pair_logps(split, dc_cache, d_chosen, settings.dtype) - ref_dc)
                             - (_pair_logps(split, dr_cache, d_rejected, settings.dtype) - ref_dr))
            return float(-torch.nn.functional.logsigmoid(margin).mean()), float((margin > 0).float().mean())
    params = _trainable(split, settings)
    for p in params:
        p.data = p.data.float()
    opt = torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    report = RunReport(method=settings.method, examples=n, train_layers=len(split.upper))
    epochs = max(1, math.ceil(settings.epochs))
    plan = []
    for _ in range(epochs):
        idx = list(range(n))
        rng.shuffle(idx)
        plan += [idx[i:i + settings.batch_size] for i in range(0, n, settings.batch_size)]
    plan = plan[: max(1, round(len(plan) * settings.epochs / epochs))]
    stats: list[tuple[float, float, float]] = []
    stopper = (_BestOnDev(split, tok, dev, dev_cache, settings, report, progress, pair_loss=pair_loss)
               if dev or pair_loss is not None else None)
    seen, next_eval = 0, settings.eval_every
    t0 = time.time()
    if stopper is not None:
        stopper.evaluate(0)  # the SFT starting point
    split.model.train()
    for step, batch in enumerate(plan):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, len(plan), settings)
        pc = _completion_logps(split, c_cache, chosen, batch, settings.dtype, True)
        pr = _completion_logps(split, r_cache, rejected, batch, settings.dtype, True)
        b = split.tensor(batch)
        margin = beta * ((pc - ref_c[b]) - (pr - ref_r[b]))
        loss = -torch.nn.functional.logsigmoid(margin).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        stats.append((loss.item(), (margin > 0).float().mean().item(), (margin.mean() / beta).item()))
        report.steps += 1
        report.train_tokens += sum(len(chosen[i].ids) + len(rejected[i].ids) for i in batch)
        seen += len(batch)
        if seen >= next_eval or step == len(plan) - 1:
            next_eval += settings.eval_every
            row = {"loss": round(sum(t[0] for t in stats) / len(stats), 4),
                   "reward_accuracy": round(sum(t[1] for t in stats) / len(stats), 4),
                   "reward_margin": round(sum(t[2] for t in stats) / len(stats), 4)}
            stats.clear()
            if stopper is None:
                report.curve.append({"examples_seen": seen, **row})
                if progress:
                    progress(report.curve[-1])
            elif stopper.evaluate(seen, **row):
                report.stopped_early = step < len(plan) - 1
                break
    if stopper is not None:
        stopper.restore()
    else:
        split.model.eval()
    report.seconds = round(time.time() - t0, 1)
    return report


def write_report(report: RunReport, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    return p


# --------------------------------------------------------------------------------------------
# Comparing training methods on dev
# --------------------------------------------------------------------------------------------
def paired_auroc_diff_ci(a: Sequence[float], b: Sequence[float], is_error: Sequence[bool], *, seed: int,
                         n_boot: int = 1000, alpha: float = 0.05,
                         groups: Sequence[Any] | None = None) -> dict[str, Any]:
    """AUROC(a) - AUROC(b) on the same dev answers, with a paired percentile bootstrap interval:
    each resample draws answers (or, with ``groups``, whole groups of them, e.g. every answer to a
    drawn question) and scores both methods on them; the ends follow the rule of every other
    interval here (:func:`~ragcritic_lib.evaluation.stats.percentile_interval`)."""
    if not len(a) == len(b) == len(is_error):
        raise ValueError(f"paired scores differ in length: {len(a)}, {len(b)}, {len(is_error)} labels")
    diffs = []
    for idx in cluster_resamples(groups, len(a), n_boot, seed):
        y = [is_error[i] for i in idx]
        x, z = auroc([a[i] for i in idx], y), auroc([b[i] for i in idx], y)
        if x is not None and z is not None:
            diffs.append(x - z)
    da, db = auroc(a, is_error), auroc(b, is_error)
    diff = None if da is None or db is None else round(da - db, 4)
    lo, hi = percentile_interval(diffs, alpha)
    if lo is None or hi is None:
        return {"diff": diff, "low": None, "high": None}
    return {"diff": diff, "low": round(lo, 4), "high": round(hi, 4)}


def decide_method(comparison: Mapping[str, Mapping[str, Any]], default: str) -> dict[str, Any]:
    """The method to train: ``default`` unless another's paired advantage over it (``vs_default``
    interval) lies wholly above 0; among several such, the higher dev AUROC."""
    if default not in comparison:
        raise ValueError(f"critic_sft.default_method {default!r} is not among the compared methods "
                         f"{sorted(comparison)}")
    better = [m for m, c in comparison.items()
              if m != default and (c.get("vs_default") or {}).get("low") is not None and c["vs_default"]["low"] > 0]
    if not better:
        return {"method": default, "default": default,
                "reason": "no method's dev AUROC advantage over the default has a CI wholly above 0"}
    best = max(sorted(better), key=lambda m: comparison[m]["dev_auroc"] or 0.0)
    ci = comparison[best]["vs_default"]
    return {"method": best, "default": default,
            "reason": f"{best} beats {default} by {ci['diff']} dev AUROC (95% CI {ci['low']} to {ci['high']})"}


def candidate_settings(name: str, base: TrainSettings, *, lora_learning_rate: float | None = None) -> TrainSettings:
    """Settings of a compared method: ``full``, or ``lora_r<R>`` (LoRA over every linear map of
    the trained layers at rank R, alpha 2R, ``lora_learning_rate``)."""
    s = copy.copy(base)
    if name == "full":
        s.method = "full"
        return s
    if not name.startswith("lora_r") or not name[6:].isdigit():
        raise ValueError(f"unknown method to compare {name!r} (expected 'full' or 'lora_r<rank>')")
    s.method, s.lora_r, s.lora_alpha = "lora", int(name[6:]), 2 * int(name[6:])
    if lora_learning_rate:
        s.learning_rate = lora_learning_rate
    return s


# --------------------------------------------------------------------------------------------
# One stage's run: encode, cache, compare methods, train, ship
# --------------------------------------------------------------------------------------------
def run_cached_sft(examples: Sequence[Mapping[str, Any]], dev_examples: Sequence[Mapping[str, Any]],
                   base_model: str | Path, out_dir: str | Path, *, settings: TrainSettings,
                   compare: Sequence[str] = (), compare_examples: int = 0, lora_learning_rate: float | None = None,
                   default_method: str = "full", lora_ranks: Sequence[int] = (32, 64), bootstrap: int = 1000,
                   ship_max_mb: float = 24.0, base_key: str = "critic_sft.base_model",
                   merge_dtype: str = "bfloat16", progress: Any = None) -> dict[str, Any]:
    """SFT of a critic with the cached trainer, as notebook 05 runs it.

    ``examples`` / ``dev_examples`` are chat examples (the assistant turn is the critique).
    ``compare`` names methods (``full``, ``lora_r<R>``; see :func:`candidate_settings`); each first
    trains one epoch on the first ``compare_examples`` examples from the same starting weights and
    is scored on dev: AUROC with its bootstrap CI and, against ``default_method``, the paired
    bootstrap CI of the difference. With ``settings.method == "best"`` the method trained is
    :func:`decide_method`'s: the default unless another's advantage is clearly above 0. A plain
    ``method: lora`` trains at the first of ``lora_ranks``. The main run trains on every
    example, evaluating dev every ``settings.eval_every`` examples (the learning curve) with
    early stopping; the best weights ship to ``out_dir/model`` (:func:`save_checkpoint`), and
    the shipped form is scored on dev against the trained model (``ship``).

    Returns a report: examples, dropped_too_long, tokens_per_example, cache_seconds, comparison
    (per method: dev AUROC, CI, difference to the default, seconds, examples), decision, chosen
    method, lora_r, ship, and the main run's :class:`RunReport` as ``run``.
    """
    t0 = time.time()
    method = settings.method
    base = copy.copy(settings)
    base.method = "full"
    if default_method == "lora":  # the compared name of plain LoRA
        default_method = f"lora_r{int(lora_ranks[0])}"
    split, tok = load_split_model(base_model, settings.train_layers)
    train, dropped = encode_examples(tok, examples, max_length=settings.max_length)
    dev, dev_dropped = encode_examples(tok, dev_examples, max_length=settings.max_length)
    if not train or not dev:
        raise ValueError(f"critic SFT: {len(train)} training and {len(dev)} dev examples fit max_length "
                         f"{settings.max_length}; raise critic_sft.max_length")
    tc = cache_lower(split, train, batch_size=32, dtype=settings.dtype)
    dc = cache_lower(split, dev, batch_size=32, dtype=settings.dtype)
    cache_seconds = round(time.time() - t0, 1)
    labels = [d.is_error for d in dev]
    base_auroc = auroc(verdict_margins(split, dc, dev, tok, batch_size=32, dtype=settings.dtype), labels)
    comparison: dict[str, Any] = {}
    margins: dict[str, list[float]] = {}
    n_cmp = min(compare_examples, len(train))
    for m in compare:
        s = candidate_settings(m, base, lora_learning_rate=lora_learning_rate)
        s.epochs, s.eval_every, s.patience = 1.0, n_cmp, 1
        trial = fresh_copy(split, settings.train_layers)
        rep = train_sft(trial, tok, train[:n_cmp], tc[:n_cmp], dev, dc, s)
        margins[m] = verdict_margins(trial, dc, dev, tok, batch_size=32, dtype=settings.dtype)
        a = auroc(margins[m], labels)
        lo, hi = bootstrap_auroc_ci(margins[m], labels, seed=settings.seed, n_boot=bootstrap)
        comparison[m] = {"examples": n_cmp, "epochs": 1.0, "dev_auroc": None if a is None else round(a, 4),
                         "ci_low": lo, "ci_high": hi, "seconds": rep.seconds, "learning_rate": s.learning_rate,
                         "lora_r": s.lora_r if s.method == "lora" else None}
        if progress:
            progress({"compare": m, **comparison[m]})
        del trial
    if default_method in margins:
        for m in comparison:
            if m != default_method:
                comparison[m]["vs_default"] = paired_auroc_diff_ci(margins[m], margins[default_method], labels,
                                                                   seed=settings.seed, n_boot=bootstrap)
    decision = None
    if method == "best":
        decision = decide_method(comparison, default_method) if comparison else \
            {"method": default_method, "default": default_method, "reason": "no comparison ran"}
        method = decision["method"]
    elif method == "lora":
        method = f"lora_r{int(lora_ranks[0])}"
    main = candidate_settings(method, settings if method != "full" else base, lora_learning_rate=lora_learning_rate)
    run = train_sft(split, tok, train, tc, dev, dc, main, progress=progress)
    save_checkpoint(split, Path(out_dir) / "model", method=main.method, base_model=base_model, base_key=base_key,
                    ship_max_mb=ship_max_mb, dtype=merge_dtype)
    ship = shipped_fidelity(split, tok, dev, Path(out_dir) / "model", main)
    if progress:
        progress({"ship": ship})
    return {
        "examples": len(train), "dropped_too_long": dropped, "dev_examples": len(dev), "dev_dropped": dev_dropped,
        "tokens_per_example": round(sum(len(e.ids) for e in train) / len(train), 1),
        "cache_seconds": cache_seconds, "untrained_dev_auroc": None if base_auroc is None else round(base_auroc, 4),
        "comparison": comparison, "decision": decision, "method": main.method,
        "lora_r": main.lora_r if main.method == "lora" else None, "settings": asdict(main), "run": run.to_dict(),
        "ship": ship, "seconds": round(time.time() - t0, 1),
    }


def run_cached_dpo(pairs: Sequence[Mapping[str, Any]], dev_examples: Sequence[Mapping[str, Any]],
                   start_model: str | Path, out_dir: str | Path, *, settings: TrainSettings, beta: float,
                   ship_max_mb: float = 24.0, base_key: str = "critic_sft.base_model",
                   merge_dtype: str = "bfloat16", progress: Any = None,
                   dev_pairs: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Coarse-to-fine DPO of the SFT critic with the cached trainer (notebook 06).

    ``pairs`` and ``dev_pairs`` (held-out, from dev samples): ``{"prompt": [system, user],
    "chosen": str, "rejected": str}``. ``start_model`` is the SFT critic's shipped form (an
    adapter continues as the policy; a full form is rebuilt). The best weights by
    ``settings.select`` (the SFT start included) ship to ``out_dir/model`` against the SFT
    critic's own base; the report has the dev AUROC before and after, with ``select: dev_pairs``
    the dev pair loss and accuracy before and after, and ``ship``.
    """
    t0 = time.time()
    split, tok = load_split_model(start_model, settings.train_layers)
    if split.lora_config is not None and settings.method != "lora":
        raise ValueError(f"{start_model}: the SFT critic is a LoRA adapter; DPO continues it with method 'lora', "
                         f"not {settings.method!r}")
    if split.lora_config is None and settings.method == "lora" and ship_base(start_model) != Path(start_model):
        raise ValueError(f"{start_model}: the SFT critic is a full fine-tune shipped against its base; a new LoRA "
                         "on it could not ship as an adapter of that base: use method 'full'")
    def encode_pairs(rows: Sequence[Mapping[str, Any]]) -> tuple[list[Encoded], list[Encoded], int]:
        chosen, rejected, dropped = [], [], 0
        for p in rows:
            c = encode(tok, p["prompt"], p["chosen"], max_length=settings.max_length)
            r = encode(tok, p["prompt"], p["rejected"], max_length=settings.max_length)
            if c is None or r is None:
                dropped += 1
                continue
            chosen.append(c)
            rejected.append(r)
        return chosen, rejected, dropped

    chosen, rejected, dropped = encode_pairs(pairs)
    d_chosen, d_rejected, _ = encode_pairs(dev_pairs)
    dev, _ = encode_examples(tok, dev_examples, max_length=settings.max_length)
    if not chosen or not dev:
        raise ValueError(f"critic DPO: {len(chosen)} pairs and {len(dev)} dev examples fit max_length "
                         f"{settings.max_length}")
    if settings.select == "dev_pairs" and not d_chosen:
        raise ValueError(f"critic DPO select dev_pairs: none of {len(dev_pairs)} dev pairs fits max_length "
                         f"{settings.max_length}")
    lower = functools.partial(cache_lower, split, batch_size=32, dtype=settings.dtype)
    cc, rc, dc = lower(chosen), lower(rejected), lower(dev)
    held_out = (d_chosen, d_rejected, lower(d_chosen), lower(d_rejected)) if settings.select == "dev_pairs" else None
    cache_seconds = round(time.time() - t0, 1)
    run = train_dpo(split, chosen, rejected, cc, rc, dev, dc, tok, settings, beta=beta, progress=progress,
                    dev_pairs=held_out)
    save_checkpoint(split, Path(out_dir) / "model", method=settings.method, base_model=ship_base(start_model),
                    base_key=base_key, ship_max_mb=ship_max_mb, dtype=merge_dtype)
    ship = shipped_fidelity(split, tok, dev, Path(out_dir) / "model", settings)
    start = run.curve[0] if run.curve else {}
    kept = next((r for r in run.curve if r["examples_seen"] == run.best_at_examples), {})
    pairs_dev = ({"dev_pairs": len(d_chosen), "dev_pair_loss_before": start.get("dev_loss"),
                  "dev_pair_loss_after": kept.get("dev_loss"), "dev_pair_accuracy_after": kept.get("dev_pair_accuracy")}
                 if held_out else {})
    return {"pairs_used": len(chosen), "dropped_too_long": dropped, "cache_seconds": cache_seconds,
            "dev_auroc_before": start.get("dev_auroc"), "dev_auroc_after": run.best_dev_auroc, **pairs_dev,
            "kept_start": run.best_at_examples == 0, "settings": asdict(settings), "run": run.to_dict(),
            "ship": ship, "seconds": round(time.time() - t0, 1)}


def ship_train_result(result: Any, out_dir: str | Path, *, base_model: str | Path, base_key: str,
                      ship_max_mb: float, dtype: str = "bfloat16") -> dict[str, Any]:
    """Ship a TRL training result (:class:`ragcritic_lib.critic.training.TrainResult`): its adapter, or
    the fully fine-tuned model's compact form against ``base_model``; the training folder
    (checkpoints, optimizer state) is then removed. An adapter trained on another model than
    ``base_model`` (a rebuilt full critic) is merged into that model and ships as a full form.
    Returns the manifest."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from ragcritic_lib import paths
    from ragcritic_lib.critic import forms as model_forms

    trained = paths.resolve(result.adapter_dir)
    on = paths.resolve(result.base_model)
    if result.is_adapter and on.resolve() == paths.resolve(base_model).resolve():
        manifest = model_forms.ship_adapter_dir(trained, out_dir, base_folder=base_model, base_key=base_key,
                                                dtype=dtype)
    else:
        if result.is_adapter:
            from peft import PeftModel

            model = AutoModelForCausalLM.from_pretrained(str(on), dtype=torch.float32)
            state = PeftModel.from_pretrained(model, str(trained)).merge_and_unload().state_dict()
        else:
            state = AutoModelForCausalLM.from_pretrained(str(trained), dtype=torch.float32).state_dict()
        manifest = model_forms.ship_full(state, base_model, out_dir, max_mb=ship_max_mb, base_key=base_key,
                                         dtype=dtype)
    shutil.rmtree(trained, ignore_errors=True)
    return manifest


def run_trl_sft(examples: Sequence[Mapping[str, Any]], dev_examples: Sequence[Mapping[str, Any]],
                base_model: str | Path, out_dir: str | Path, *, recipe: str, max_steps: int, launcher: str,
                accelerate_config: str, num_processes: int, merge_dtype: str, max_length: int,
                ship_max_mb: float = 24.0, base_key: str = "critic_sft.base_model") -> dict[str, Any]:
    """SFT with the TRL recipe (GPUs; ``launcher="accelerate"`` for DeepSpeed ZeRO-3), shaped
    like :func:`run_cached_sft`'s report; the result ships to ``out_dir/model``
    (:func:`ship_train_result`). The dev examples are not read during training here: the
    stage's calibration scores the shipped critic on them."""
    from ragcritic_lib.critic.training import loss_curve, run_training

    overrides: dict[str, Any] = {"max_length": max_length, **({"max_steps": max_steps} if max_steps > 0 else {})}
    result = run_training("sft", list(examples), recipe, Path(out_dir) / "adapter", base_model=str(base_model),
                          overrides=overrides, launcher=launcher, accelerate_config=accelerate_config,
                          num_processes=num_processes)
    manifest = ship_train_result(result, Path(out_dir) / "model", base_model=base_model, base_key=base_key,
                                 ship_max_mb=ship_max_mb, dtype=merge_dtype)
    curve = [{"examples_seen": int(r.get("step", 0)), "loss": r.get("loss"), "dev_auroc": None}
             for r in loss_curve(result.log_history)]
    run = RunReport(method="trl", examples=result.examples, train_layers=0, steps=result.steps,
                    seconds=round(result.seconds, 1), curve=curve)
    return {"examples": result.examples, "dropped_too_long": result.dropped_too_long, "dev_examples": len(dev_examples),
            "dev_dropped": 0, "tokens_per_example": None, "cache_seconds": 0.0, "untrained_dev_auroc": None,
            "comparison": {}, "decision": None, "method": "trl", "settings": {"epochs": None, "recipe": recipe},
            "run": run.to_dict(), "ship": _ship_summary(manifest, Path(out_dir) / "model"),
            "seconds": round(result.seconds, 1)}


def _ship_summary(manifest: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """``ship`` of a TRL run: form and size; no in-memory trained model to score against."""
    from ragcritic_lib.critic import forms as model_forms

    return {"form": manifest["form"], "rank": manifest.get("rank", 0), "mb": model_forms.folder_mb(folder),
            "max_mb": manifest.get("ship_max_mb"), "dev_auroc_trained": None, "dev_auroc_shipped": None,
            "auroc_loss": None, "mean_abs_margin_diff": None, "flag": False}


def trl_start(start_model: str | Path) -> dict[str, Any]:
    """Where TRL training continues from a shipped critic: an adapter on its base, or a full form
    rebuilt into the model cache; ``ship_base`` is what the result ships against."""
    from ragcritic_lib.critic import forms as model_forms

    if not model_forms.is_shipped(start_model):
        return {"base_model": str(start_model), "init_adapter": None, "ship_base": Path(start_model)}
    base = model_forms.manifest_base(start_model)
    if model_forms.read_manifest(start_model)["form"] == "adapter":
        return {"base_model": str(base), "init_adapter": str(start_model), "ship_base": base}
    return {"base_model": str(model_forms.materialize(start_model)), "init_adapter": None, "ship_base": base}


def run_trl_dpo(pairs: Sequence[Mapping[str, Any]], dev_examples: Sequence[Mapping[str, Any]],
                start_model: str | Path, out_dir: str | Path, *, recipe: str, max_steps: int, launcher: str,
                accelerate_config: str, num_processes: int, merge_dtype: str, ship_max_mb: float = 24.0,
                base_key: str = "critic_sft.base_model") -> dict[str, Any]:
    """DPO with the TRL recipe from the shipped SFT critic (:func:`trl_start`), shaped like
    :func:`run_cached_dpo`'s report; ships to ``out_dir/model`` against the SFT critic's base (no
    dev AUROC during training: the stage's calibration scores the result)."""
    from ragcritic_lib.critic.training import loss_curve, run_training

    start = trl_start(start_model)
    overrides: dict[str, Any] = {"max_steps": max_steps} if max_steps > 0 else {}
    result = run_training("dpo", list(pairs), recipe, Path(out_dir) / "adapter", base_model=start["base_model"],
                          init_adapter=start["init_adapter"], overrides=overrides, launcher=launcher,
                          accelerate_config=accelerate_config, num_processes=num_processes)
    manifest = ship_train_result(result, Path(out_dir) / "model", base_model=start["ship_base"], base_key=base_key,
                                 ship_max_mb=ship_max_mb, dtype=merge_dtype)
    curve = [{"examples_seen": int(r.get("step", 0)), "loss": r.get("loss"),
              "reward_accuracy": r.get("rewards_accuracies"), "reward_margin": r.get("rewards_margins"),
              "dev_auroc": None} for r in loss_curve(result.log_history)]
    run = RunReport(method="trl", examples=result.examples, train_layers=0, steps=result.steps,
                    seconds=round(result.seconds, 1), curve=curve)
    return {"pairs_used": result.examples, "dropped_too_long": result.dropped_too_long, "cache_seconds": 0.0,
            "dev_auroc_before": None, "dev_auroc_after": None, "kept_start": False,
            "settings": {"recipe": recipe}, "run": run.to_dict(), "ship": _ship_summary(manifest, Path(out_dir) / "model"),
            "seconds": round(result.seconds, 1)}
