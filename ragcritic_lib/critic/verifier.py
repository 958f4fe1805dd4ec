"""A small encoder verifier of the critic's verdict: one score per (question, passages, answer).

The generative critic writes a verdict, tier tags and a critique. Grounding can also be judged by
a small encoder fine-tuned as a classifier (MiniCheck, ARES's lightweight judges): here a
sentence encoder of the embedded default (all-MiniLM-L6-v2, 22M parameters) reads the answer and
the question as its first segment and the critic's evidence view (the passage sentences the
critic itself sees) as its second, mean-pools its last layer and maps that to one logit, trained
with binary cross-entropy on the critic's own training set. Its score plays the role of the
generative critic's verdict margin: higher means more likely wrong.

Inputs are the chat examples the critic trains on (``{"messages": [system, user, assistant]}``),
so the verifier reads exactly the critic's view of every sample and nothing more; the label is
the verdict of the assistant turn.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib.critic.verdict import CORRECT, VERDICT_PREFIX

QUESTION_MARK = "Question:"
PASSAGES_MARK = "Passages:"
ANSWER_MARK = "Answer to check:"


@dataclass
class VerifierSettings:
    """Knobs of one verifier run."""

    epochs: float = 2.0
    learning_rate: float = 5e-5
    batch_size: int = 16
    max_length: int = 256
    warmup_ratio: float = 0.06
    eval_every: int = 400       # examples between dev evaluations (the learning curve)
    seed: int = 13
    train_layers: int = 3       # top encoder layers trained (the embeddings and the rest stay frozen)
    head_learning_rate: float = 1e-3   # the new head starts from nothing: it learns at its own rate


@dataclass
class VerifierReport:
    examples: int
    steps: int = 0
    seconds: float = 0.0
    best_dev_auroc: float | None = None
    best_at_examples: int = 0
    curve: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_view(user: str) -> tuple[str, str]:
    """(answer and question, passages) of the critic's user turn. A turn without the usual
    marks is kept whole as the first segment (the second is empty): the verifier never fails on
    an unexpected prompt, it reads it unsplit."""
    q, p, a = user.find(QUESTION_MARK), user.find(PASSAGES_MARK), user.find(ANSWER_MARK)
    if min(q, p, a) < 0 or not q < p < a:
        return " ".join(user.split()), ""
    question = user[q:p].strip()
    passages = user[p + len(PASSAGES_MARK):a].strip()
    answer_end = user.find("\n\n", a)
    answer = user[a:answer_end if answer_end > 0 else len(user)].strip()
    return f"{answer} {question}", " ".join(passages.split())


def example_pair(example: Mapping[str, Any]) -> tuple[str, str, bool]:
    """(first segment, second segment, is the answer wrong) of one chat example."""
    msgs = example["messages"]
    user = next(m["content"] for m in msgs if m["role"] == "user")
    target = next((m["content"] for m in msgs if m["role"] == "assistant"), "")
    first, second = split_view(user)
    return first, second, not target.startswith(VERDICT_PREFIX + CORRECT)


def is_error_example(example: Mapping[str, Any]) -> bool:
    """Whether a chat example's assistant turn calls the answer wrong."""
    return example_pair(example)[2]


class EncoderVerifier:
    """A sentence encoder with a one-logit head over its mean-pooled last layer."""

    def __init__(self, model_dir: str | Path, *, max_length: int = 256, seed: int = 13) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        torch.manual_seed(seed)
        self.model_dir = str(model_dir)
        self.tok = AutoTokenizer.from_pretrained(self.model_dir)
        self.encoder = AutoModel.from_pretrained(self.model_dir, dtype=torch.float32)
        self.head = torch.nn.Linear(self.encoder.config.hidden_size, 1)
        torch.nn.init.normal_(self.head.weight, std=0.02)
        torch.nn.init.zeros_(self.head.bias)
        self.max_length = max_length

    def layers(self) -> list[Any]:
        return list(self.encoder.encoder.layer)

    def trainable(self, train_layers: int) -> list[Any]:
        """Freeze the encoder but its top ``train_layers`` layers; the head always trains."""
        for p in self.encoder.parameters():
            p.requires_grad = False
        top = self.layers()[max(0, len(self.layers()) - train_layers):]
        params = [p for layer in top for p in layer.parameters()]
        for p in [*params, *self.head.parameters()]:
            p.requires_grad = True
        self.trained_layers = len(top)
        return [*params, *self.head.parameters()]

    def _batch(self, pairs: Sequence[tuple[str, str]]) -> Any:
        firsts = [a for a, _ in pairs]
        seconds = [b or " " for _, b in pairs]
        return self.tok(firsts, seconds, truncation="only_second", max_length=self.max_length, padding=True,
                        return_tensors="pt")

    def logits(self, pairs: Sequence[tuple[str, str]]) -> Any:
        enc = self._batch(pairs)
        out = self.encoder(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
        pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled).squeeze(-1)

    def scores(self, pairs: Sequence[tuple[str, str]], *, batch_size: int = 32) -> list[float]:
        """Logit of "wrong" per pair (higher: more likely wrong)."""
        import torch

        was = self.encoder.training
        self.encoder.eval()
        out: list[float] = [0.0] * len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        with torch.no_grad():
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                for i, v in zip(idx, self.logits([pairs[i] for i in idx]).tolist()):
                    out[i] = float(v)
        self.encoder.train(was)
        return out

    def save(self, out_dir: str | Path, *, base_key: str = "critic_body.verifier_model") -> Path:
        """What training changed, in ``out_dir``: the trained top layers and the head
        (``verifier.safetensors``, float32) and a manifest naming the base encoder by folder and
        content hash (``verifier.json``). The base stays where it is (the embedded default rebuilds
        it), so the verifier ships in a few MB."""
        from safetensors.torch import save_file

        from ragcritic_lib.critic.forms import _repo_relative, base_sha256

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        n = len(self.layers())
        k = getattr(self, "trained_layers", n)
        prefixes = tuple(f"encoder.layer.{i}." for i in range(n - k, n))
        state = {f"encoder.{name}": t.detach().contiguous().clone() for name, t in self.encoder.state_dict().items()
                 if name.startswith(prefixes)}
        state.update({f"head.{name}": t.detach().contiguous().clone() for name, t in self.head.state_dict().items()})
        save_file(state, str(out / "verifier.safetensors"))
        manifest = {"base": {"folder": _repo_relative(self.model_dir), "sha256": base_sha256(self.model_dir),
                             "params_key": base_key},
                    "trained_layers": k, "max_length": self.max_length, "tensors": len(state)}
        (out / "verifier.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        return out

    @classmethod
    def load(cls, folder: str | Path, *, max_length: int | None = None) -> EncoderVerifier:
        """A saved verifier on its base encoder.

        Raises:
            FileNotFoundError / ValueError: naming the file, when the manifest or weights are missing,
                or the base encoder's weights are not the ones it was trained on.
        """
        import torch
        from safetensors.torch import load_file

        from ragcritic_lib import paths
        from ragcritic_lib.critic.forms import base_sha256

        folder = Path(folder)
        mfile = folder / "verifier.json"
        if not mfile.is_file():
            raise FileNotFoundError(f"{mfile}: no verifier manifest (run the critic SFT stage)")
        manifest = json.loads(mfile.read_text(encoding="utf-8"))
        base = paths.resolve(manifest["base"]["folder"])
        if base_sha256(base) != manifest["base"]["sha256"]:
            raise ValueError(f"{mfile}: the base encoder {base} is not the one the verifier was trained on "
                             f"({manifest['base']['params_key']}); retrain the verifier")
        v = cls(base, max_length=max_length or int(manifest.get("max_length", 256)))
        state = load_file(str(folder / "verifier.safetensors"))
        enc = {k[len("encoder."):]: t for k, t in state.items() if k.startswith("encoder.")}
        missing = set(enc) - set(v.encoder.state_dict())
        if missing:
            raise ValueError(f"{folder / 'verifier.safetensors'}: tensors the base encoder lacks: {sorted(missing)[:3]}")
        with torch.no_grad():
            v.encoder.load_state_dict(enc, strict=False)
            v.head.load_state_dict({k[len("head."):]: t for k, t in state.items() if k.startswith("head.")})
        v.trained_layers = int(manifest.get("trained_layers", 0))
        v.encoder.eval()
        return v


def train_verifier(verifier: EncoderVerifier, train: Sequence[Mapping[str, Any]], dev: Sequence[Mapping[str, Any]],
                   settings: VerifierSettings, *, progress: Callable[[dict[str, Any]], None] | None = None
                   ) -> VerifierReport:
    """Fine-tune encoder and head on ``train`` chat examples; dev AUROC every ``eval_every``
    examples; the best dev weights are kept (dev picks the checkpoint, never a test sample)."""
    dev_pairs, dev_labels = dev_pairs_and_labels(dev)
    return train_pairs(verifier, [example_pair(e) for e in train], dev_pairs, dev_labels, settings,
                       progress=progress)


def train_pairs(verifier: EncoderVerifier, rows: Sequence[tuple[str, str, bool]],
                dev_pairs: Sequence[tuple[str, str]], dev_labels: Sequence[bool], settings: VerifierSettings, *,
                progress: Callable[[dict[str, Any]], None] | None = None) -> VerifierReport:
    """:func:`train_verifier` on ready ``(first segment, second segment, label)`` rows: binary
    cross-entropy towards ``label``, dev AUROC of ``dev_labels`` every ``eval_every`` examples, the
    best dev weights kept. Any pair task fits (the verdict, a question's answerability).

    Raises:
        ValueError: no training rows, or dev pairs and labels of different lengths.
    """
    import torch

    from ragcritic_lib.evaluation.stats import auroc

    if not rows:
        raise ValueError("train_pairs: no training rows")
    if len(dev_pairs) != len(dev_labels):
        raise ValueError(f"train_pairs: {len(dev_pairs)} dev pairs but {len(dev_labels)} dev labels")
    rows = [(str(a), str(b), bool(y)) for a, b, y in rows]
    dev_pairs = [(str(a), str(b)) for a, b in dev_pairs]
    dev_labels = [bool(y) for y in dev_labels]
    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    params = verifier.trainable(settings.train_layers)
    head = set(map(id, verifier.head.parameters()))
    groups = [{"params": [p for p in params if id(p) not in head], "base_lr": settings.learning_rate},
              {"params": list(verifier.head.parameters()), "base_lr": settings.head_learning_rate}]
    opt = torch.optim.AdamW(groups, lr=settings.learning_rate, weight_decay=0.01)
    plan: list[list[int]] = []
    for e in range(max(1, math.ceil(settings.epochs))):
        idx = list(range(len(rows)))
        rng.shuffle(idx)
        batches = [idx[i:i + settings.batch_size] for i in range(0, len(idx), settings.batch_size)]
        if e == math.ceil(settings.epochs) - 1 and settings.epochs < math.ceil(settings.epochs):
            batches = batches[: max(1, round(len(batches) * (settings.epochs - e)))]
        plan += batches
    warm = max(1, int(settings.warmup_ratio * len(plan)))
    report = VerifierReport(examples=len(rows))
    best_state: dict[str, Any] | None = None
    seen, next_eval, losses = 0, settings.eval_every, []
    t0 = time.time()
    verifier.encoder.train()
    for step, batch in enumerate(plan):
        scale = (step + 1) / warm if step < warm else max(0.0, (len(plan) - step) / max(1, len(plan) - warm))
        for g in opt.param_groups:
            g["lr"] = g["base_lr"] * scale
        logits = verifier.logits([(rows[i][0], rows[i][1]) for i in batch])
        y = torch.tensor([float(rows[i][2]) for i in batch])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        report.steps += 1
        seen += len(batch)
        if seen >= next_eval or step == len(plan) - 1:
            next_eval += settings.eval_every
            a = auroc(verifier.scores(dev_pairs), dev_labels)
            entry = {"examples_seen": seen, "loss": round(sum(losses) / len(losses), 4),
                     "dev_auroc": None if a is None else round(a, 4)}
            losses.clear()
            report.curve.append(entry)
            if progress:
                progress(entry)
            if a is not None and a > (report.best_dev_auroc or -1.0) + 1e-4:
                report.best_dev_auroc, report.best_at_examples = round(a, 4), seen
                best_state = {"encoder": {k: v.detach().clone() for k, v in verifier.encoder.state_dict().items()},
                              "head": {k: v.detach().clone() for k, v in verifier.head.state_dict().items()}}
    if best_state is not None:
        verifier.encoder.load_state_dict(best_state["encoder"])
        verifier.head.load_state_dict(best_state["head"])
    verifier.encoder.eval()
    report.seconds = round(time.time() - t0, 1)
    return report


def dev_pairs_and_labels(dev: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[str, str]], list[bool]]:
    rows = [example_pair(e) for e in dev]
    return [(a, b) for a, b, _ in rows], [y for _, _, y in rows]


class VerifierScorer:
    """A shipped verifier (``EncoderVerifier.save``'s folder) as a critic's verdict scorer: called
    with the critic's conversations (or their user turns as strings), it returns one score each
    (higher: more likely wrong)."""

    def __init__(self, folder: str | Path, *, max_length: int | None = None, batch_size: int = 32) -> None:
        self.folder = Path(folder)
        self.batch_size = batch_size
        self.verifier = EncoderVerifier.load(self.folder, max_length=max_length)

    def __call__(self, conversations: Sequence[Any]) -> list[float]:
        users = [c if isinstance(c, str) else next(m["content"] for m in c if m["role"] == "user")
                 for c in conversations]
        return self.verifier.scores([split_view(u) for u in users], batch_size=self.batch_size)
