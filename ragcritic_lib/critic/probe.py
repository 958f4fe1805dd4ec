"""A linear probe of the verdict on the frozen generator: the cheapest body a verdict can have.

The generator's hidden states at the critic's verdict position (the last token of
``{"Judgement": "``, after the critic's prompt) already separate right from wrong answers
somewhat without any training. The probe reads two of them, the output of layer ``layer`` and
the model's final (normed) state, standardizes them and fits a logistic regression (its inverse
regularization C chosen by 5-fold cross-validated AUROC on the training samples). Its log-odds
of "wrong" is the verdict score; the generative critic still writes the tags and the critique.
With ``span_layer`` it also reads that layer's mean over the tokens of the answer under check
(:func:`answer_span`), which carries more of the answer itself than the one verdict position.

Training and scoring compute the features with one function, :func:`verdict_features`, from the
same chat messages, so what the probe was fitted on is what it reads later. It ships as JSON
(the scaler, the weights, the layer) naming the frozen model by folder and content hash.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib.critic.verdict import CORRECT, VERDICT_PREFIX, verdict_tokens

PROBE_FILE = "probe.json"


def prompt_ids(tok: Any, messages: Sequence[Mapping[str, str]], opening: Sequence[int] = ()) -> list[int]:
    """Token ids of the chat prompt (its system and user turns, with the generation prompt; an
    assistant turn is ignored), then ``opening``: the position whose next-token distribution
    follows is the last one."""
    prompt = tok.apply_chat_template([dict(m) for m in messages if m["role"] != "assistant"], tokenize=False,
                                     add_generation_prompt=True)
    return tok(prompt, add_special_tokens=False)["input_ids"] + list(opening)


def _verdict_ids(tok: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Token ids of the chat prompt and the verdict's opening, up to the token whose next-token
    distribution is the verdict (as the trainer's ``Encoded.verdict_pos`` reads it)."""
    offset, _, _ = verdict_tokens(tok)
    return prompt_ids(tok, messages, tok(VERDICT_PREFIX + CORRECT, add_special_tokens=False)["input_ids"][:offset])


def _batched_states(model: Any, tok: Any, ids: Sequence[Sequence[int]],
                    batch_size: int) -> Iterator[tuple[list[int], tuple[Any, ...]]]:
    """``(indices, hidden_states)`` per batch of token sequences taken in order of length,
    right-padded, through the transformer body only (``base_model``: the language-model head, a
    fifth of a small model's work at every position, is never needed). ``hidden_states`` is the
    model's tuple (the embeddings, then each layer's output; the last one normed), each
    ``[batch, width, hidden]``; row ``j`` is sequence ``indices[j]``, its real positions exact."""
    import torch

    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    body = getattr(model, "base_model", model)  # the causal LM's hidden states without its head
    device = next(model.parameters()).device
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            width = max(len(ids[i]) for i in idx)
            batch = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for j, i in enumerate(idx):
                batch[j, : len(ids[i])] = torch.tensor(list(ids[i]))
                mask[j, : len(ids[i])] = 1
            yield idx, body(input_ids=batch.to(device), attention_mask=mask.to(device),
                            output_hidden_states=True).hidden_states


def last_position_states(model: Any, tok: Any, ids: Sequence[Sequence[int]], *,
                         batch_size: int = 16) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """``(index, states)`` for each token sequence, in order of length: ``states`` holds every
    hidden state of the model (the embeddings, then each layer's output; the last one normed) at
    the sequence's last position (:func:`_batched_states`)."""
    for idx, hs in _batched_states(model, tok, ids, batch_size):
        for j, i in enumerate(idx):
            pos = len(ids[i]) - 1
            yield i, tuple(h[j, pos] for h in hs)


def answer_span(tok: Any, messages: Sequence[Mapping[str, str]]) -> tuple[list[int], int, int]:
    """The verdict position's token ids (:func:`_verdict_ids`) and the token range ``[start, end)``
    of the answer under check in them: the text after the last answer mark of the user turn, up to
    the line that asks for the reply (or the turn's end), without its surrounding spaces. An empty
    answer gives an empty range.

    Raises:
        ValueError: the prompt has no answer mark.
    """
    from ragcritic_lib.critic.verifier import ANSWER_MARK

    ids = _verdict_ids(tok, messages)
    prompt = tok.apply_chat_template([dict(m) for m in messages if m["role"] != "assistant"], tokenize=False,
                                     add_generation_prompt=True)
    enc = tok(prompt, add_special_tokens=False, return_offsets_mapping=True)
    user = next((str(m["content"]) for m in reversed(messages) if m["role"] == "user"), "")
    at, mark = prompt.rfind(user) if user else -1, user.rfind(ANSWER_MARK)
    if at < 0 or mark < 0:
        raise ValueError(f"verdict probe: no {ANSWER_MARK!r} in the critic prompt, so no answer span")
    start = at + mark + len(ANSWER_MARK)
    end = prompt.find("\nReply ", start, at + len(user))
    end = at + len(user) if end < 0 else end
    while start < end and prompt[start].isspace():
        start += 1
    while end > start and prompt[end - 1].isspace():
        end -= 1
    toks = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > start and a < end and b > a]
    return ids, (toks[0] if toks else 0), (toks[-1] + 1 if toks else 0)


def span_states(model: Any, tok: Any, ids: Sequence[Sequence[int]], spans: Sequence[tuple[int, int]], *,
                batch_size: int = 16) -> Iterator[tuple[int, Any, Any]]:
    """``(index, states, means)`` for each token sequence, in order of length: ``states`` is
    ``[layers + 1, hidden]``, every hidden state at the sequence's last position (as
    :func:`last_position_states`), and ``means`` each state's mean over the positions ``spans[i]``
    (``[start, end)``; the last position's states where the span is empty)."""
    import torch

    if len(spans) != len(ids):
        raise ValueError(f"{len(spans)} spans for {len(ids)} token sequences")
    for idx, hidden in _batched_states(model, tok, ids, batch_size):
        hs = torch.stack(hidden, dim=1)  # [batch, states, width, hidden]
        for j, i in enumerate(idx):
            pos, (a, b) = len(ids[i]) - 1, spans[i]
            piece = hs[j, :, a:b] if b > a else hs[j, :, pos:pos + 1]
            yield i, hs[j, :, pos], piece.mean(dim=1)


def hidden_features(model: Any, tok: Any, ids: Sequence[Sequence[int]], *, layer: int, batch_size: int = 16,
                    spans: Sequence[tuple[int, int]] | None = None, span_layer: int | None = None) -> Any:
    """``[n, 2 * hidden]`` float32 array: layer ``layer``'s output and the final normed state at
    the last position of each token sequence (:func:`last_position_states`). With ``span_layer``,
    ``[n, 3 * hidden]``: layer ``span_layer``'s mean over each sequence's span (``spans``, as
    :func:`span_states` reads them) first, then the same two states."""
    import numpy as np
    import torch

    width = int(model.config.hidden_size)
    if span_layer is None:
        out = np.zeros((len(ids), 2 * width), dtype=np.float32)
        for i, states in last_position_states(model, tok, ids, batch_size=batch_size):
            out[i] = torch.cat([states[layer], states[-1]]).float().cpu().numpy()
        return out
    if spans is None:
        raise ValueError("span_layer needs the spans of the answers")
    out = np.zeros((len(ids), 3 * width), dtype=np.float32)
    for i, states, means in span_states(model, tok, ids, spans, batch_size=batch_size):
        out[i] = torch.cat([means[span_layer], states[layer], states[-1]]).float().cpu().numpy()
    return out


def verdict_features(model: Any, tok: Any, conversations: Sequence[Sequence[Mapping[str, str]]], *, layer: int,
                     batch_size: int = 16, span_layer: int | None = None) -> Any:
    """:func:`hidden_features` at the verdict position of each conversation (its system and user
    turns; an assistant turn is ignored); with ``span_layer``, also that layer's mean over the
    answer under check (:func:`answer_span`)."""
    if span_layer is None:
        return hidden_features(model, tok, [_verdict_ids(tok, c) for c in conversations], layer=layer,
                               batch_size=batch_size)
    found = [answer_span(tok, c) for c in conversations]
    return hidden_features(model, tok, [f[0] for f in found], layer=layer, batch_size=batch_size,
                           spans=[(f[1], f[2]) for f in found], span_layer=span_layer)


def load_frozen(model_dir: str | Path) -> tuple[Any, Any]:
    """(the causal LM in float32, eval mode, on the trainer's device (a GPU when there is one); its
    tokenizer) from a local model folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragcritic_lib.llm import _resolve_device  # as the cached trainer and the generator's device: auto

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    return model.to(_resolve_device("auto")).eval(), AutoTokenizer.from_pretrained(str(model_dir))


def fit_probe(features: Any, is_error: Sequence[bool], *, seed: int, class_weight: str | None = None,
              cv_repeats: int = 1) -> dict[str, Any]:
    """Standardize, then a logistic regression with C by 5-fold cross-validated AUROC (fewer folds
    when the rarer class has under 5 samples, sklearn's C=1 when it has one); returns
    the plain parameters (lists) that :func:`probe_scores` applies. ``class_weight="balanced"``
    weighs the two classes equally, so a log-odds of 0 splits them where the rarer class is
    not simply outvoted. The folds follow the samples' order, so C can change with it; with
    ``cv_repeats`` > 1 C is chosen by the mean AUROC over that many shuffled stratified 5-fold
    splits (seeded), which leans far less on any one split.

    Raises:
        ValueError: both classes are needed.
    """
    import numpy as np
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    y = np.asarray([int(v) for v in is_error])
    if len(set(y.tolist())) < 2:
        raise ValueError(f"verdict probe: {len(y)} training samples of one class; both right and wrong are needed")
    x = np.asarray(features, dtype=np.float64)
    mean, scale = x.mean(0), x.std(0)
    scale[scale == 0] = 1.0
    folds = min(5, int(np.bincount(y).min()))  # every fold must hold both classes for its AUROC
    clf: Any
    if folds >= 2:
        cv: Any = folds
        if cv_repeats > 1:
            from sklearn.model_selection import RepeatedStratifiedKFold

            cv = RepeatedStratifiedKFold(n_splits=folds, n_repeats=cv_repeats, random_state=seed)
        # An L2 penalty (l1_ratio 0) and the plain fitted attributes, both said outright.
        clf = LogisticRegressionCV(Cs=8, cv=cv, scoring="roc_auc", max_iter=3000, random_state=seed,
                                   class_weight=class_weight, l1_ratios=(0.0,), use_legacy_attributes=False)
    else:  # a class of one sample cannot be cross-validated: sklearn's default C
        clf = LogisticRegression(C=1.0, max_iter=3000, random_state=seed, class_weight=class_weight)
    clf.fit((x - mean) / scale, y)
    c = float(np.ravel(clf.C_)[0]) if folds >= 2 else 1.0
    return {"mean": mean.tolist(), "scale": scale.tolist(), "coef": clf.coef_[0].tolist(),
            "intercept": float(clf.intercept_[0]), "C": c, "n": int(len(y)), "n_error": int(y.sum())}


def probe_scores(probe: Mapping[str, Any], features: Any) -> list[float]:
    """Log-odds of "wrong" per row of ``features``."""
    import numpy as np

    x = (np.asarray(features, dtype=np.float64) - np.asarray(probe["mean"])) / np.asarray(probe["scale"])
    return [float(v) for v in x @ np.asarray(probe["coef"]) + float(probe["intercept"])]


def save_probe(folder: str | Path, probe: Mapping[str, Any], *, model_dir: str | Path, layer: int,
               base_key: str = "critic_sft.base_model", span_layer: int | None = None) -> Path:
    """Write ``probe.json``: the fitted parameters, the layer (and the answer-span layer, when the
    probe reads one), and the frozen model by folder and hash."""
    from ragcritic_lib.critic.forms import _repo_relative, base_sha256

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"base": {"folder": _repo_relative(model_dir), "sha256": base_sha256(model_dir), "params_key": base_key},
           "layer": int(layer), **({} if span_layer is None else {"span_layer": int(span_layer)}), **probe}
    (out / PROBE_FILE).write_text(json.dumps(doc) + "\n", encoding="utf-8")
    return out


class ProbeScorer:
    """A shipped probe as a critic's verdict scorer: called with the critic's conversations
    (system and user turns), it returns one log-odds of "wrong" each.

    A scorer remembers the score of every token sequence it has read, so a conversation scored
    again (the same answer judged by two methods of one run, a correction's verification reading
    the old answer) costs no second forward pass; the memory is the scorer's own, never on disk.
    """

    def __init__(self, folder: str | Path, *, batch_size: int = 16) -> None:
        from ragcritic_lib import paths
        from ragcritic_lib.critic.forms import base_sha256

        f = Path(folder) / PROBE_FILE
        if not f.is_file():
            raise FileNotFoundError(f"{f}: no verdict probe (run the critic SFT stage)")
        try:
            self.probe = json.loads(f.read_text(encoding="utf-8"))
            base = paths.resolve(self.probe["base"]["folder"])
            want, self.layer = self.probe["base"]["sha256"], int(self.probe["layer"])
            span = self.probe.get("span_layer")
            self.span_layer = None if span is None else int(span)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ValueError(f"{f}: expected a probe with base.folder, base.sha256, layer, mean, scale, coef") from None
        if base_sha256(base) != want:
            raise ValueError(f"{f}: the model {base} is not the one the probe was fitted on; refit the probe")
        self.model, self.tok = load_frozen(base)
        self.batch_size = batch_size
        self.scored: dict[tuple[int, ...], float] = {}
        self.forward_rows = 0  # sequences this scorer has run the model on

    def __call__(self, conversations: Sequence[Sequence[Mapping[str, str]]]) -> list[float]:
        spans: dict[tuple[int, ...], tuple[int, int]] = {}
        if self.span_layer is None:
            ids = [tuple(_verdict_ids(self.tok, c)) for c in conversations]
        else:
            found = [answer_span(self.tok, c) for c in conversations]
            ids = [tuple(f[0]) for f in found]
            spans = {k: (f[1], f[2]) for k, f in zip(ids, found)}
        todo = list(dict.fromkeys(k for k in ids if k not in self.scored))
        if todo:
            feats = hidden_features(self.model, self.tok, todo, layer=self.layer, batch_size=self.batch_size,
                                    spans=[spans[k] for k in todo] if spans else None, span_layer=self.span_layer)
            self.scored.update(zip(todo, probe_scores(self.probe, feats)))
            self.forward_rows += len(todo)
        return [self.scored[k] for k in ids]
