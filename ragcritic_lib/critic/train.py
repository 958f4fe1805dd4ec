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
- ``lora``: LoRA adapters (peft) on the top layers' linear maps, merged into the weights at the
  end, so both methods leave a plain checkpoint.

Batches are right-padded (a left-padded row is fully masked at its first positions, which gives
NaN gradients under SDPA) and causal attention alone keeps pads out of every real position.

Early stopping reads the dev verdict AUROC: the margin log P("Error") - log P("Correct") at the
verdict token of ``{"Judgement": "...``, the same score the calibrated critic uses. DPO
(:func:`train_dpo`) uses the same cache: the policy is the top layers, the reference is their
state before DPO, and reference log-probabilities are computed once.
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib.critic.critics import CORRECT, ERROR, VERDICT_PREFIX
from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci  # noqa: F401 - re-exported

METHODS = ("full", "lora")


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

    def __post_init__(self) -> None:
        if self.method not in (*METHODS, "best"):
            raise ValueError(f"critic training method {self.method!r}: choose one of {(*METHODS, 'best')}")
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
    curve: list[dict[str, Any]] = field(default_factory=list)   # {examples_seen, loss, dev_auroc}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------------------------
def _verdict_tokens(tok: Any) -> tuple[int, int, int]:
    """(offset of the verdict token inside the target, token id of Correct, of Error)."""
    a = tok(VERDICT_PREFIX + CORRECT, add_special_tokens=False)["input_ids"]
    b = tok(VERDICT_PREFIX + ERROR, add_special_tokens=False)["input_ids"]
    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return i, a[i], b[i]


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
def _autocast(torch: Any, dtype: str) -> Any:
    from ragcritic_lib.critic.training import cpu_bf16_enabled

    use = dtype == "bfloat16" or (dtype == "auto" and cpu_bf16_enabled("auto"))
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(use))


class SplitModel:
    """A causal LM seen as frozen lower layers and trainable upper layers."""

    def __init__(self, model: Any, train_layers: int) -> None:
        self.model = model
        self.inner = model.model
        n = len(self.inner.layers)
        self.split = max(0, n - train_layers)
        self.upper = list(self.inner.layers[self.split:])

    def _positions(self, h: Any) -> Any:
        import torch

        return torch.arange(h.shape[1]).unsqueeze(0).expand(h.shape[0], -1)

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
    """Per example, the frozen layers' output (bf16, real positions only)."""
    import torch

    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
    out: list[Any] = [None] * len(encoded)
    with _autocast(torch, dtype):
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            ids = _pad([torch.tensor(encoded[i].ids) for i in idx], torch)
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
    with torch.no_grad(), _autocast(torch, dtype):
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            h = _pad([cache[i] for i in idx], torch)
            rows = torch.arange(len(idx))
            cols = torch.tensor([encoded[i].verdict_pos for i in idx])
            logp = torch.log_softmax(split.upper_logits(h, rows, cols).float(), dim=-1)
            for j, i in enumerate(idx):
                out[i] = float(logp[j, e_id] - logp[j, c_id])
    return out


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
def _trainable(split: SplitModel, settings: TrainSettings) -> list[Any]:
    """Freeze everything, then open the upper layers (full) or add LoRA to them (lora)."""
    for p in split.model.parameters():
        p.requires_grad = False
    if settings.method == "full":
        params = [p for layer in split.upper for p in layer.parameters()]
        for p in params:
            p.requires_grad = True
        return params
    from peft import LoraConfig, inject_adapter_in_model

    names = "|".join(str(i) for i in range(split.split, len(split.inner.layers)))
    cfg = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
                     target_modules=rf".*layers\.({names})\.(self_attn|mlp)\.\w+_proj")
    inject_adapter_in_model(cfg, split.model)
    split.upper = list(split.inner.layers[split.split:])
    return [p for n, p in split.model.named_parameters() if "lora_" in n]


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
    return settings.learning_rate * max(0.0, (total - step) / max(1, total - warm))


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


class _BestOnDev:
    """Dev-AUROC bookkeeping shared by SFT and DPO: the curve, the best weights, patience."""

    def __init__(self, split: SplitModel, tok: Any, dev: Sequence[Encoded], dev_cache: Sequence[Any],
                 settings: TrainSettings, report: RunReport, progress: Any) -> None:
        self.split, self.tok, self.dev, self.dev_cache = split, tok, dev, dev_cache
        self.settings, self.report, self.progress = settings, report, progress
        self.best, self.bad, self.state = -1.0, 0, None

    def evaluate(self, seen: int, **row: Any) -> bool:
        """Score dev, log a curve row; True when patience has run out."""
        was_training = self.split.model.training
        self.split.model.eval()
        a = auroc(verdict_margins(self.split, self.dev_cache, self.dev, self.tok, batch_size=32,
                                  dtype=self.settings.dtype), [d.is_error for d in self.dev])
        self.split.model.train(was_training)
        entry = {"examples_seen": seen, **row, "dev_auroc": None if a is None else round(a, 4)}
        self.report.curve.append(entry)
        if self.progress:
            self.progress(entry)
        if a is not None and a > self.best + 1e-4:
            self.best, self.bad = a, 0
            self.state = {k: v.detach().clone() for k, v in self.split.model.named_parameters() if v.requires_grad}
            self.report.best_dev_auroc, self.report.best_at_examples = round(a, 4), seen
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
        h = _pad([train_cache[i] for i in batch], torch)
        rows, cols, targets, is_verdict = _completion_positions(train, batch)
        with _autocast(torch, settings.dtype):
            logits = split.upper_logits(h, torch.tensor(rows), torch.tensor(cols))
        ce = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(targets), reduction="none")
        verdict = torch.tensor(is_verdict)
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


def save_checkpoint(split: SplitModel, tok: Any, out_dir: str | Path, *, method: str, dtype: str = "bfloat16") -> Path:
    """Merge LoRA if any, cast and save model + tokenizer to ``out_dir``."""
    import torch

    out = Path(out_dir)
    if method == "lora":
        merge_lora(split.model)
    model = split.model.to(getattr(torch, dtype))
    for p in model.parameters():
        p.requires_grad = False
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def load_split_model(base_model: str | Path, train_layers: int) -> tuple[SplitModel, Any]:
    """(SplitModel in fp32, tokenizer) from a local model folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base_model))
    model = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=torch.float32)
    model.config.use_cache = False
    return SplitModel(model, train_layers), tok


def fresh_copy(split: SplitModel, train_layers: int) -> SplitModel:
    """An independent copy (for runs that start from the same weights)."""
    return SplitModel(copy.deepcopy(split.model), train_layers)


# --------------------------------------------------------------------------------------------
# DPO on the cache
# --------------------------------------------------------------------------------------------
def _completion_logps(split: SplitModel, cache: Sequence[Any], enc: Sequence[Encoded], idx: Sequence[int],
                      dtype: str, grad: bool) -> Any:
    import torch

    h = _pad([cache[i] for i in idx], torch)
    rows, cols, targets, _ = _completion_positions(enc, idx)
    owner = rows
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx, _autocast(torch, dtype):
        logits = split.upper_logits(h, torch.tensor(rows), torch.tensor(cols))
    with ctx:
        lp = torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(targets)[:, None])[:, 0]
        return torch.zeros(len(idx)).index_add(0, torch.tensor(owner), lp)


def train_dpo(split: SplitModel, chosen: Sequence[Encoded], rejected: Sequence[Encoded], c_cache: Sequence[Any],
              r_cache: Sequence[Any], dev: Sequence[Encoded], dev_cache: Sequence[Any], tok: Any,
              settings: TrainSettings, *, beta: float, progress: Any = None) -> RunReport:
    """Sigmoid DPO of the upper layers against their own state before training (the reference).

    The curve rows carry ``loss``, ``reward_accuracy`` (share of pairs whose chosen reward is
    above the rejected one), ``reward_margin`` and ``dev_auroc``. The best dev AUROC's weights
    are kept, including the starting point (evaluated first), so DPO never leaves the critic
    worse on dev than SFT left it; whether it helped is in the report.
    """
    import torch

    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    n = len(chosen)
    ref_c = torch.cat([_completion_logps(split, c_cache, chosen, list(range(i, min(n, i + 32))), settings.dtype, False)
                       for i in range(0, n, 32)])
    ref_r = torch.cat([_completion_logps(split, r_cache, rejected, list(range(i, min(n, i + 32))), settings.dtype, False)
                       for i in range(0, n, 32)])
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
    stopper = _BestOnDev(split, tok, dev, dev_cache, settings, report, progress)
    seen, next_eval = 0, settings.eval_every
    t0 = time.time()
    stopper.evaluate(0)  # the SFT starting point
    split.model.train()
    for step, batch in enumerate(plan):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, len(plan), settings)
        pc = _completion_logps(split, c_cache, chosen, batch, settings.dtype, True)
        pr = _completion_logps(split, r_cache, rejected, batch, settings.dtype, True)
        b = torch.tensor(batch)
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
            if stopper.evaluate(seen, **row):
                report.stopped_early = step < len(plan) - 1
                break
    stopper.restore()
    report.seconds = round(time.time() - t0, 1)
    return report


def learning_curve(run: Mapping[str, Any], n_train: int) -> list[dict[str, Any]]:
    """Dev AUROC against examples trained on, from a training run's evaluation rows: within the
    first epoch a point at N examples has seen N distinct examples; later points have all
    ``n_train`` (``examples_seen`` counts repeats)."""
    return [{"examples": min(int(r["examples_seen"]), n_train), "examples_seen": int(r["examples_seen"]),
             "dev_auroc": r.get("dev_auroc")} for r in run.get("curve", [])]


def write_report(report: RunReport, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    return p


# --------------------------------------------------------------------------------------------
# One stage's run: encode, cache, compare methods, train, save
# --------------------------------------------------------------------------------------------
def run_cached_sft(examples: Sequence[Mapping[str, Any]], dev_examples: Sequence[Mapping[str, Any]],
                   base_model: str | Path, out_dir: str | Path, *, settings: TrainSettings,
                   compare: Sequence[str] = (), compare_examples: int = 0, lora_learning_rate: float | None = None,
                   merge_dtype: str = "bfloat16", progress: Any = None) -> dict[str, Any]:
    """SFT of a critic with the cached trainer, as notebook 05 runs it.

    ``examples`` / ``dev_examples`` are chat examples (the assistant turn is the critique). With
    ``compare`` (e.g. ``("full", "lora")``) each method first trains one epoch on the first
    ``compare_examples`` examples from the same starting weights; ``settings.method == "best"``
    is not a method: pass the winner in ``settings``, or let this function pick it (the higher
    dev AUROC) when ``settings.method`` is ``"best"``. The main run trains on every example,
    evaluating dev every ``settings.eval_every`` examples (the learning curve) with early
    stopping, and the best weights are saved to ``out_dir/merged``.

    Returns a report: examples, dropped_too_long, tokens_per_example, cache_seconds, comparison
    (per method: dev AUROC, seconds, examples), chosen method, and the main run's
    :class:`RunReport` as ``run``.
    """
    t0 = time.time()
    method = settings.method
    base = copy.copy(settings)
    if method == "best":
        base.method = "full"
    split, tok = load_split_model(base_model, settings.train_layers)
    train, dropped = encode_examples(tok, examples, max_length=settings.max_length)
    dev, dev_dropped = encode_examples(tok, dev_examples, max_length=settings.max_length)
    if not train or not dev:
        raise ValueError(f"critic SFT: {len(train)} training and {len(dev)} dev examples fit max_length "
                         f"{settings.max_length}; raise critic_sft.max_length")
    tc = cache_lower(split, train, batch_size=32, dtype=settings.dtype)
    dc = cache_lower(split, dev, batch_size=32, dtype=settings.dtype)
    cache_seconds = round(time.time() - t0, 1)
    base_auroc = auroc(verdict_margins(split, dc, dev, tok, batch_size=32, dtype=settings.dtype),
                       [d.is_error for d in dev])
    comparison: dict[str, Any] = {}
    n_cmp = min(compare_examples, len(train))
    for m in compare:
        s = copy.copy(base)
        s.method, s.epochs, s.eval_every, s.patience = m, 1.0, n_cmp, 1
        if m == "lora" and lora_learning_rate:
            s.learning_rate = lora_learning_rate
        trial = fresh_copy(split, settings.train_layers)
        rep = train_sft(trial, tok, train[:n_cmp], tc[:n_cmp], dev, dc, s)
        comparison[m] = {"examples": n_cmp, "dev_auroc": rep.best_dev_auroc, "seconds": rep.seconds,
                         "learning_rate": s.learning_rate}
        if progress:
            progress({"compare": m, **comparison[m]})
        del trial
    if method == "best":
        scored = {m: (c["dev_auroc"] or 0.0) for m, c in comparison.items()}
        method = max(sorted(scored), key=lambda m: scored[m]) if scored else "full"
    main = copy.copy(base)
    main.method = method
    if method == "lora" and lora_learning_rate:
        main.learning_rate = lora_learning_rate
    run = train_sft(split, tok, train, tc, dev, dc, main, progress=progress)
    save_checkpoint(split, tok, Path(out_dir) / "merged", method=method, dtype=merge_dtype)
    return {
        "examples": len(train), "dropped_too_long": dropped, "dev_examples": len(dev), "dev_dropped": dev_dropped,
        "tokens_per_example": round(sum(len(e.ids) for e in train) / len(train), 1),
        "cache_seconds": cache_seconds, "untrained_dev_auroc": None if base_auroc is None else round(base_auroc, 4),
        "comparison": comparison, "method": method, "settings": asdict(main), "run": run.to_dict(),
        "seconds": round(time.time() - t0, 1),
    }


def run_cached_dpo(pairs: Sequence[Mapping[str, Any]], dev_examples: Sequence[Mapping[str, Any]],
                   start_model: str | Path, out_dir: str | Path, *, settings: TrainSettings, beta: float,
                   merge_dtype: str = "bfloat16", progress: Any = None) -> dict[str, Any]:
    """Coarse-to-fine DPO of the SFT critic with the cached trainer (notebook 06).

    ``pairs``: ``{"prompt": [system, user], "chosen": str, "rejected": str}``. Saves the best
    dev-AUROC weights (the SFT start included) to ``out_dir/merged`` and returns the report with
    the dev AUROC before and after.
    """
    t0 = time.time()
    split, tok = load_split_model(start_model, settings.train_layers)
    chosen, rejected, dropped = [], [], 0
    for p in pairs:
        c = encode(tok, p["prompt"], p["chosen"], max_length=settings.max_length)
        r = encode(tok, p["prompt"], p["rejected"], max_length=settings.max_length)
        if c is None or r is None:
            dropped += 1
            continue
        chosen.append(c)
        rejected.append(r)
    dev, _ = encode_examples(tok, dev_examples, max_length=settings.max_length)
    if not chosen or not dev:
        raise ValueError(f"critic DPO: {len(chosen)} pairs and {len(dev)} dev examples fit max_length "
                         f"{settings.max_length}")
    cc = cache_lower(split, chosen, batch_size=32, dtype=settings.dtype)
    rc = cache_lower(split, rejected, batch_size=32, dtype=settings.dtype)
    dc = cache_lower(split, dev, batch_size=32, dtype=settings.dtype)
    cache_seconds = round(time.time() - t0, 1)
    run = train_dpo(split, chosen, rejected, cc, rc, dev, dc, tok, settings, beta=beta, progress=progress)
    save_checkpoint(split, tok, Path(out_dir) / "merged", method=settings.method, dtype=merge_dtype)
    before = run.curve[0]["dev_auroc"] if run.curve else None
    return {"pairs_used": len(chosen), "dropped_too_long": dropped, "cache_seconds": cache_seconds,
            "dev_auroc_before": before, "dev_auroc_after": run.best_dev_auroc,
            "kept_start": run.best_at_examples == 0, "settings": asdict(settings), "run": run.to_dict(),
            "seconds": round(time.time() - t0, 1)}


def run_trl_sft(examples: Sequence[Mapping[str, Any]], dev_examples: Sequence[Mapping[str, Any]],
                base_model: str | Path, out_dir: str | Path, *, recipe: str, max_steps: int, launcher: str,
                accelerate_config: str, num_processes: int, merge_dtype: str, max_length: int) -> dict[str, Any]:
    """SFT with the TRL recipe (GPUs; ``launcher="accelerate"`` for DeepSpeed ZeRO-3), shaped
    like :func:`run_cached_sft`'s report. The dev examples are not read during training here:
    the stage's calibration scores the saved checkpoint on them."""
    from ragcritic_lib.critic.training import inference_checkpoint, loss_curve, run_training

    overrides: dict[str, Any] = {"max_length": max_length, **({"max_steps": max_steps} if max_steps > 0 else {})}
    result = run_training("sft", list(examples), recipe, Path(out_dir) / "adapter", base_model=str(base_model),
                          overrides=overrides, launcher=launcher, accelerate_config=accelerate_config,
                          num_processes=num_processes)
    inference_checkpoint(result, Path(out_dir) / "merged", dtype=merge_dtype)
    curve = [{"examples_seen": int(r.get("step", 0)), "loss": r.get("loss"), "dev_auroc": None}
             for r in loss_curve(result.log_history)]
    run = RunReport(method="trl", examples=result.examples, train_layers=0, steps=result.steps,
                    seconds=round(result.seconds, 1), curve=curve)
    return {"examples": result.examples, "dropped_too_long": result.dropped_too_long, "dev_examples": len(dev_examples),
            "dev_dropped": 0, "tokens_per_example": None, "cache_seconds": 0.0, "untrained_dev_auroc": None,
            "comparison": {}, "method": "trl", "settings": {"epochs": None, "recipe": recipe},
            "run": run.to_dict(), "seconds": round(result.seconds, 1)}


def run_trl_dpo(pairs: Sequence[Mapping[str, Any]], dev_examples: Sequence[Mapping[str, Any]],
                start_model: str | Path, out_dir: str | Path, *, recipe: str, max_steps: int, launcher: str,
                accelerate_config: str, num_processes: int, merge_dtype: str) -> dict[str, Any]:
    """DPO with the TRL recipe from the merged SFT critic, shaped like :func:`run_cached_dpo`'s
    report (no dev AUROC during training: the stage's calibration scores the result)."""
    from ragcritic_lib.critic.training import inference_checkpoint, loss_curve, run_training

    overrides: dict[str, Any] = {"max_steps": max_steps} if max_steps > 0 else {}
    result = run_training("dpo", list(pairs), recipe, Path(out_dir) / "adapter", base_model=str(start_model),
                          overrides=overrides, launcher=launcher, accelerate_config=accelerate_config,
                          num_processes=num_processes)
    inference_checkpoint(result, Path(out_dir) / "merged", dtype=merge_dtype)
    curve = [{"examples_seen": int(r.get("step", 0)), "loss": r.get("loss"),
              "reward_accuracy": r.get("rewards_accuracies"), "reward_margin": r.get("rewards_margins"),
              "dev_auroc": None} for r in loss_curve(result.log_history)]
    run = RunReport(method="trl", examples=result.examples, train_layers=0, steps=result.steps,
                    seconds=round(result.seconds, 1), curve=curve)
    return {"pairs_used": result.examples, "dropped_too_long": result.dropped_too_long, "cache_seconds": 0.0,
            "dev_auroc_before": None, "dev_auroc_after": None, "kept_start": False,
            "settings": {"recipe": recipe}, "run": run.to_dict(), "seconds": round(result.seconds, 1)}
