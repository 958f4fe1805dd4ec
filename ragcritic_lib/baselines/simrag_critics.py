"""SIM-RAG's sufficiency critics, the label they learn and the context they read.

The label (:func:`make_match_fn`) is the project's judge of correct; the critics judge whether
the information gathered so far supports an answer (Accept) or not (Reject), from the
question, the searches and what they found, the answer and its rationale, never the gold
answer (except the oracle, labelled as one):

- :class:`LLMSufficiencyCritic`: a (LoRA-tuned, :func:`train_llm_critic`) LLM answering
  Accept or Reject to :func:`build_critic_messages`;
- :class:`ProbeSufficiencyCritic`: the frozen LLM's hidden states at the start of its reply to
  the same prompt, read by a logistic probe;
- :class:`ClassifierCritic`: TF-IDF of :func:`critic_text` plus :func:`dense_features`, logistic
  regression;
- :class:`OracleCritic`: accepts exactly the right answers (the ceiling).

:mod:`ragcritic_lib.baselines.simrag` runs the loop and re-exports these names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ragcritic_lib.baselines import contains_answer, overlap_fraction, tokens


# --------------------------------------------------------------------------- the context
def render_context(context: Sequence[Mapping[str, str]], max_chars: int) -> str:
    if not context:
        return "Nothing has been searched yet."
    lines = []
    for i, c in enumerate(context, 1):
        doc = " ".join(str(c.get("doc", "")).split())
        doc = doc if len(doc) <= max_chars else doc[: max_chars - 3] + "..."
        lines.append(f"Search {i}: {c.get('query', '')}\nFound: {doc}")
    return "\n".join(lines)



# ------------------------------------------------------------------------ the label
def make_match_fn(metric: str = "em", threshold: float = 1.0) -> Callable[..., bool]:
    """``fn(answer, golds, metadata=None) -> bool``: the project's judge
    (:func:`ragcritic_lib.mining.sampling.is_correct`) with ``metric`` (em / f1 / acc of
    ragcritic_lib.evaluation.scoring, or ``truth``, which reads the question's ``metadata``) at
    ``threshold``; an abstention is right where every gold answer is one, as the judge has it."""
    from ragcritic_lib.evaluation.scoring import score_prediction
    from ragcritic_lib.mining.sampling import JUDGE_METRICS, is_correct

    if metric not in JUDGE_METRICS:
        raise ValueError(f"simrag match metric must be one of {sorted(JUDGE_METRICS)}, got {metric!r}")

    def match(answer: str, golds: Sequence[str], metadata: Mapping[str, Any] | None = None) -> bool:
        golds = [str(g) for g in golds or []]
        record = {"prediction": str(answer or ""), "golden_answers": golds, "metadata": dict(metadata or {})}
        if metric != "truth":
            record.update(score_prediction(record["prediction"], golds))
        return is_correct(record, metric=metric, threshold=threshold)

    return match


# ----------------------------------------------------------------------------- critics
def critic_text(ex: Mapping[str, Any]) -> str:
    """The flat text a classifier critic reads."""
    ctx = " ".join(f"{c.get('query', '')} {c.get('doc', '')}" for c in ex.get("context") or [])
    return f"question: {ex['question']} context: {ctx} answer: {ex.get('answer', '')} rationale: {ex.get('rationale', '')}"


DENSE_FEATURES = ("answer_in_context", "answer_empty", "abstained", "answer_tokens",
                  "question_context_overlap", "answer_question_overlap", "answer_in_rationale")


def dense_features(ex: Mapping[str, Any]) -> list[float]:
    """Grounded features of one example (order = :data:`DENSE_FEATURES`).

    Deliberately without the turn index or the number of searches (the same number when the
    context starts empty): the critic must judge the information, not how late the turn is.
    """
    from ragcritic_lib.mining.evidence import is_abstention

    answer = str(ex.get("answer") or "")
    ctx = " ".join(str(c.get("doc", "")) for c in ex.get("context") or [])
    return [
        float(bool(answer.strip()) and contains_answer(ctx, [answer])),
        float(not answer.strip()),
        float(is_abstention(answer)),
        min(len(tokens(answer)), 30) / 30.0,
        overlap_fraction(str(ex["question"]), ctx),
        overlap_fraction(answer, str(ex["question"])),
        float(bool(answer.strip()) and contains_answer(str(ex.get("rationale") or ""), [answer])),
    ]


class OracleCritic:
    """Accepts exactly the answers that match a gold answer (the paper's ceiling)."""

    name = "oracle"

    def __init__(self, match_fn: Callable[..., bool] | None = None) -> None:
        self.match = match_fn or make_match_fn("em")

    def accept(self, examples: Sequence[Mapping[str, Any]]) -> list[bool]:
        return [bool(self.match(str(e.get("answer") or ""), e.get("golden_answers") or [], e.get("metadata")))
                for e in examples]


class ClassifierCritic:
    """TF-IDF (uni+bigrams) of :func:`critic_text` + :func:`dense_features` -> logistic regression.

    When the training data hold one label only, the critic predicts that label.
    """

    name = "classifier"

    def __init__(self, *, c: float = 1.0, max_features: int = 5000, seed: int = 0) -> None:
        self.c, self.max_features, self.seed = c, max_features, seed
        self.vectorizer: Any = None
        self.model: Any = None
        self.constant: bool | None = None

    def _matrix(self, examples: Sequence[Mapping[str, Any]]):
        import numpy as np
        from scipy.sparse import csr_matrix, hstack

        text = self.vectorizer.transform([critic_text(e) for e in examples])
        dense = csr_matrix(np.asarray([dense_features(e) for e in examples], dtype=float))
        return hstack([text, dense]).tocsr()

    def fit(self, examples: Sequence[Mapping[str, Any]]) -> "ClassifierCritic":
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        labels = [str(e["label"]) for e in examples]
        if len(set(labels)) < 2:
            self.constant = bool(labels) and labels[0] == "Accept"
            return self
        self.vectorizer = TfidfVectorizer(ngram_range=(1, 2), max_features=self.max_features, sublinear_tf=True)
        self.vectorizer.fit([critic_text(e) for e in examples])
        self.model = LogisticRegression(C=self.c, class_weight="balanced", max_iter=2000, random_state=self.seed)
        self.model.fit(self._matrix(examples), [int(x == "Accept") for x in labels])
        return self

    def accept(self, examples: Sequence[Mapping[str, Any]]) -> list[bool]:
        if not examples:
            return []
        if self.model is None:
            if self.constant is None:
                raise RuntimeError("ClassifierCritic.accept called before fit")
            return [self.constant] * len(examples)
        return [bool(p) for p in self.model.predict(self._matrix(examples))]

    def scores(self, examples: Sequence[Mapping[str, Any]]) -> list[float]:
        """Log-odds of Reject per example (higher: more likely Reject; below 0 it accepts)."""
        if not examples:
            return []
        if self.model is None:
            return [-1.0 if self.constant else 1.0 for _ in self.accept(examples)]
        return [-float(v) for v in self.model.decision_function(self._matrix(examples))]


def build_critic_messages(ex: Mapping[str, Any], *, max_chars: int = 700) -> list[dict[str, str]]:
    """Prompt of the LLM sufficiency critic (the gold answer is never shown)."""
    return [
        {"role": "system", "content": "You check whether an answer is supported by the information found so far."},
        {"role": "user", "content": f"{render_context(ex.get('context') or [], max_chars)}\n\n"
                                    f"Question: {ex['question']}\nProposed answer: {ex.get('answer', '')}\n"
                                    f"Reasoning: {ex.get('rationale', '')}\n\n"
                                    "Is the information enough to trust this answer? Reply Accept or Reject."},
    ]


def parse_verdict(text: str) -> str | None:
    """First "accept"/"reject" word in the critic output (any case), None when neither occurs."""
    m = re.search(r"\b(accept|reject)", text or "", flags=re.I)
    return m.group(1).capitalize() if m else None


def critic_sft_examples(examples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """SFT examples {"messages": prompt + assistant verdict} for :func:`train_llm_critic`."""
    return [{"messages": build_critic_messages(e) + [{"role": "assistant", "content": str(e["label"])}]} for e in examples]


def train_llm_critic(examples: Sequence[Mapping[str, Any]], recipe: Any, output_dir: Any, *, base_model: str,
                     overrides: Mapping[str, Any] | None = None) -> Any:
    """LoRA-tune the packaged model as the critic (``ragcritic_lib.critic.training.train_sft``)."""
    from ragcritic_lib.critic.training import train_sft

    return train_sft(critic_sft_examples(examples), recipe, output_dir, base_model=base_model, overrides=overrides)


class LLMSufficiencyCritic:
    """A (fine-tuned) LLM answering Accept/Reject; unparseable outputs count as Reject."""

    name = "llm"

    def __init__(self, llm: Any, *, max_new_tokens: int = 4) -> None:
        self.llm, self.max_new_tokens = llm, max_new_tokens
        self.invalid = 0

    def accept(self, examples: Sequence[Mapping[str, Any]]) -> list[bool]:
        from ragcritic_lib.llm import GenParams

        if not examples:
            return []
        gens = self.llm.generate([build_critic_messages(e) for e in examples],
                                 GenParams(max_new_tokens=self.max_new_tokens), desc="simrag critic")
        verdicts = [parse_verdict(g.text) for g in gens]
        self.invalid += sum(v is None for v in verdicts)
        return [v == "Accept" for v in verdicts]


class ProbeSufficiencyCritic:
    """The generator itself, frozen, read by a linear probe: the critic's prompt
    (:func:`build_critic_messages`) goes through the model once, and a logistic regression on two
    of its hidden states at the position where the reply would begin (layer ``layer``'s output
    and the final state; :func:`ragcritic_lib.critic.probe.hidden_features`) says Reject or
    Accept. Fitting costs one forward pass per training example, against a LoRA critic's forward
    and backward passes; the classes are weighed equally, and an answer is accepted where the
    log-odds of Reject are below 0. ``scores`` gives those log-odds (higher: more likely Reject).
    When the training examples hold one label only, the critic predicts that label.
    """

    name = "probe"

    def __init__(self, model_dir: Any, *, layer: int = 24, seed: int = 0, batch_size: int = 16) -> None:
        from ragcritic_lib.critic.probe import load_frozen

        self.model_dir, self.layer, self.seed, self.batch_size = model_dir, int(layer), seed, batch_size
        self.model, self.tok = load_frozen(model_dir)
        depth = int(self.model.config.num_hidden_layers)
        if not 0 < self.layer <= depth:
            raise ValueError(f"simrag.probe_layer: must lie in 1..{depth} (the model's layers), got {layer}")
        self.probe: dict[str, Any] | None = None
        self.constant: bool | None = None

    def features(self, examples: Sequence[Mapping[str, Any]]) -> Any:
        from ragcritic_lib.critic.probe import hidden_features, prompt_ids

        ids = [prompt_ids(self.tok, build_critic_messages(e)) for e in examples]
        return hidden_features(self.model, self.tok, ids, layer=self.layer, batch_size=self.batch_size)

    def fit(self, examples: Sequence[Mapping[str, Any]]) -> "ProbeSufficiencyCritic":
        from ragcritic_lib.critic.probe import fit_probe

        labels = [str(e["label"]) for e in examples]
        if len(set(labels)) < 2:
            self.constant = bool(labels) and labels[0] == "Accept"
            return self
        self.probe = fit_probe(self.features(examples), [x == "Reject" for x in labels], seed=self.seed,
                               class_weight="balanced")
        return self

    def scores(self, examples: Sequence[Mapping[str, Any]]) -> list[float]:
        from ragcritic_lib.critic.probe import probe_scores

        if not examples:
            return []
        if self.probe is None:
            if self.constant is None:
                raise RuntimeError("ProbeSufficiencyCritic.scores called before fit")
            return [-1.0 if self.constant else 1.0] * len(examples)
        return probe_scores(self.probe, self.features(examples))

    def accept(self, examples: Sequence[Mapping[str, Any]]) -> list[bool]:
        return [s < 0 for s in self.scores(examples)]

    def save(self, folder: Any) -> Any:
        """The fitted probe as ``probe.json`` (:func:`ragcritic_lib.critic.probe.save_probe`)."""
        from ragcritic_lib.critic.probe import save_probe

        if self.probe is None:
            raise RuntimeError("ProbeSufficiencyCritic.save: nothing fitted (one label only, or fit not called)")
        return save_probe(folder, self.probe, model_dir=self.model_dir, layer=self.layer,
                          base_key="simrag.critic_base_model")
