"""Critic training data: balanced SFT samples, question-level splits and coarse-to-fine DPO pairs.

RAG-Critic section 3.2: the SFT set is D_Error^QA plus an equal number of randomly drawn correct
responses ({"Judgement": "Correct"} targets); the critic input never contains the gold answer.
For preference alignment each sample's true critique is the chosen response and the rejected
ones are drawn k times from the correct pool (coarse: wrong judgement) and from other error
records whose labels differ (fine: wrong tags).

A *sample* here is a flat dict holding only what the critic may read plus its target::

    {"qkey", "id", "dataset", "type", "pool_member", "question", "passages": [str],
     "prediction", "truncated", "judgement", "target" (critique JSON text), "tag1", "tag2",
     "known_causes"}

Splits are made by question (``qkey`` = dataset + question id), so the several pool members'
answers to one question always land in the same split and no test question is ever trained on.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ragcritic_lib.critic.critics import CORRECT, ERROR, TaxonomyLike, build_critic_messages, critic_target, passage_texts
from ragcritic_lib.io import DataFormatError

SPLITS = ("train", "dev", "test")


def question_key(record: Mapping[str, Any]) -> str:
    """Identity of the question behind a record: ``dataset::id``."""
    if "id" not in record:
        raise DataFormatError(f"record without 'id': {str(dict(record))[:120]}")
    dataset = record.get("dataset") or (record.get("metadata") or {}).get("dataset") or ""
    return f"{dataset}::{record['id']}"


def make_sample(
    record: Mapping[str, Any], *, correct: bool, max_analysis_words: int | None = None, max_tag3: int | None = None
) -> dict[str, Any]:
    """One critic sample from a D_Error^QA record (``correct=False``) or a correct-pool record.

    ``max_analysis_words`` / ``max_tag3`` shorten the target (see :func:`critic.format_critique`).
    """
    for key in ("question", "prediction"):
        if key not in record:
            raise DataFormatError(f"record {record.get('id', '?')}: missing key {key!r}")
    if correct:
        target = json.dumps({"Judgement": CORRECT})
    else:
        target = critic_target(record, max_analysis_words=max_analysis_words, max_tag3=max_tag3)
    parsed = json.loads(target)
    if (parsed["Judgement"] == CORRECT) != correct:
        raise DataFormatError(
            f"record {record.get('id', '?')}: target judgement {parsed['Judgement']!r} but the record "
            f"comes from the {'correct' if correct else 'error'} pool"
        )
    meta = record.get("metadata") or {}
    evidence = record.get("evidence") or {}
    return {
        "qkey": question_key(record),
        "id": str(record["id"]),
        "dataset": record.get("dataset") or meta.get("dataset") or "",
        "type": meta.get("type", ""),
        "pool_member": record.get("pool_member", ""),
        "question": str(record["question"]),
        "passages": passage_texts(record.get("passages") or []),
        "prediction": str(record.get("prediction") or ""),
        "truncated": bool(record.get("truncated", False)),
        "judgement": parsed["Judgement"],
        "target": target,
        "tag1": list(parsed.get("tag1", [])),
        "tag2": list(parsed.get("tag2", [])),
        "known_causes": list(evidence.get("known_causes") or []),
    }


def make_samples(
    error_records: Sequence[Mapping[str, Any]],
    correct_records: Sequence[Mapping[str, Any]],
    *,
    max_analysis_words: int | None = None,
    max_tag3: int | None = None,
) -> list[dict[str, Any]]:
    """Samples from D_Error^QA (records with ``critic_target``) and the correct pool, in input order."""
    errs = [make_sample(r, correct=False, max_analysis_words=max_analysis_words, max_tag3=max_tag3)
            for r in error_records]
    cors = [make_sample(r, correct=True) for r in correct_records]
    return errs + cors


def split_by_question(
    samples: Sequence[Mapping[str, Any]], *, dev_fraction: float, test_fraction: float, seed: int
) -> dict[str, list[dict[str, Any]]]:
    """Assign whole questions to train / dev / test (no question in two splits).

    The sorted question keys are shuffled with ``seed``; the first ``round(test_fraction * n)``
    go to test, the next ``round(dev_fraction * n)`` to dev, the rest to train. Sample order
    inside each split follows the input.
    """
    if not (0 <= dev_fraction < 1 and 0 <= test_fraction < 1 and dev_fraction + test_fraction < 1):
        raise ValueError(f"bad split fractions dev={dev_fraction} test={test_fraction}")
    keys = sorted({s["qkey"] for s in samples})
    random.Random(seed).shuffle(keys)
    n_test = round(test_fraction * len(keys))
    n_dev = round(dev_fraction * len(keys))
    where = {k: "test" for k in keys[:n_test]}
    where.update({k: "dev" for k in keys[n_test:n_test + n_dev]})
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    for s in samples:
        out[where.get(s["qkey"], "train")].append(dict(s))
    return out


def check_no_leakage(splits: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Raise ValueError naming a question found in two splits."""
    seen: dict[str, str] = {}
    for name, rows in splits.items():
        for s in rows:
            other = seen.setdefault(s["qkey"], name)
            if other != name:
                raise ValueError(f"question {s['qkey']} is in both {other!r} and {name!r}")


def balance_correct(
    samples: Sequence[Mapping[str, Any]], *, seed: int, max_samples: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Errors plus an equal number of randomly drawn correct samples (section 3.2).

    With ``max_samples`` the result is cut to at most that many, still half errors and half
    correct. The output is shuffled with ``seed``.

    Returns:
        (samples, counts) with counts of available and kept errors and correct samples.

    Raises:
        ValueError: the result would be empty: no wrong or no right answer among ``samples``, or
            ``max_samples`` below 2. The message gives both counts.
    """
    rng = random.Random(seed)
    errors = [dict(s) for s in samples if s["judgement"] == ERROR]
    corrects = [dict(s) for s in samples if s["judgement"] == CORRECT]
    n = min(len(errors), len(corrects))
    if max_samples is not None:
        n = min(n, max_samples // 2)
    if n == 0:
        raise ValueError(
            f"balance_correct: {len(errors)} wrong and {len(corrects)} right answers (max_samples="
            f"{max_samples}) give an empty balanced set; a critic needs both kinds. In the pipeline, "
            "sample more questions (error_sampling.questions_per_dataset) so that the pool holds right "
            "answers, or raise max_train_samples.")
    kept_err = rng.sample(errors, n) if n < len(errors) else errors
    kept_cor = rng.sample(corrects, n) if n < len(corrects) else corrects
    out = kept_err + kept_cor
    rng.shuffle(out)
    counts = {"errors_available": len(errors), "correct_available": len(corrects),
              "errors": len(kept_err), "correct": len(kept_cor)}
    return out, counts


def sft_examples(
    samples: Sequence[Mapping[str, Any]],
    taxonomy: TaxonomyLike,
    *,
    top_k: int = 3,
    passage_words: int = 30,
    label_list: bool = True,
    evidence_words: int = 0,
) -> list[dict[str, Any]]:
    """Chat examples ``{"messages": [system, user, assistant]}`` for SFT (trained prompt)."""
    out = []
    for s in samples:
        msgs = build_critic_messages(s["question"], s["passages"], s["prediction"], taxonomy=taxonomy,
                                     variant="trained", top_k=top_k, passage_words=passage_words,
                                     label_list=label_list, evidence_words=evidence_words)
        out.append({"messages": [*msgs, {"role": "assistant", "content": s["target"]}]})
    return out


def _signature(sample: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(sorted(sample.get("tag1", []))), tuple(sorted(sample.get("tag2", [])))


def _draw(
    rng: random.Random,
    pool: Sequence[tuple[str, tuple[Any, ...]]],
    k: int,
    exclude_text: str,
    exclude_sig: tuple[Any, ...] | None,
) -> list[str]:
    """Up to ``k`` distinct critique texts from ``pool`` (text, signature), none equal to the
    chosen one and, when ``exclude_sig`` is given, none with the same labels.

    Rejection sampling keeps this O(k) per sample on large pools; a filtered scan takes over
    when the pool is nearly exhausted, so the result is the same size either way.
    """
    if k <= 0 or not pool:
        return []

    def ok(item: tuple[str, tuple[Any, ...]]) -> bool:
        return item[0] != exclude_text and (exclude_sig is None or item[1] != exclude_sig)

    picked: list[str] = []
    seen: set[int] = set()
    for _ in range(20 * k):
        if len(picked) == k:
            return picked
        i = rng.randrange(len(pool))
        if i in seen:
            continue
        seen.add(i)
        if ok(pool[i]):
            picked.append(pool[i][0])
    rest = [pool[i][0] for i in range(len(pool)) if i not in seen and ok(pool[i])]
    need = k - len(picked)
    picked.extend(rng.sample(rest, need) if need < len(rest) else rest)
    return picked


def dpo_pairs(
    samples: Sequence[Mapping[str, Any]],
    taxonomy: TaxonomyLike,
    *,
    k_coarse: int,
    k_fine: int,
    seed: int,
    max_pairs: int | None = None,
    top_k: int = 3,
    passage_words: int = 30,
    label_list: bool = True,
    evidence_words: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Coarse-to-fine preference pairs (section 3.2).

    For an error sample: chosen = its critique; coarse rejected = the correct-pool critique
    ({"Judgement": "Correct"}, identical for every correct sample, so drawn once); fine rejected =
    ``k_fine`` distinct critiques of other error samples whose (tag1, tag2) differ. For a correct
    sample: chosen = {"Judgement": "Correct"}; coarse rejected = ``k_coarse`` distinct error
    critiques. Duplicate critique texts in the error pool are drawn at most once.

    Returns:
        (pairs, counts). Each pair is {"prompt": [system, user], "chosen": str, "rejected": str,
        "kind": "coarse"|"fine", "qkey"}. Counts: coarse_error_vs_correct,
        coarse_correct_vs_error, fine, total_before_cap, total (after ``max_pairs``), and the
        same three kinds after the cap with the suffix ``_kept``.
    """
    rng = random.Random(seed)
    error_pool: list[tuple[str, tuple[Any, ...]]] = []
    seen_texts: set[str] = set()
    for s in samples:
        if s["judgement"] == ERROR and s["target"] not in seen_texts:
            seen_texts.add(s["target"])
            error_pool.append((s["target"], _signature(s)))
    has_correct = any(s["judgement"] == CORRECT for s in samples)
    correct_text = json.dumps({"Judgement": CORRECT})
    pairs: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    for s in samples:
        prompt = build_critic_messages(s["question"], s["passages"], s["prediction"], taxonomy=taxonomy,
                                       variant="trained", top_k=top_k, passage_words=passage_words,
                                       label_list=label_list, evidence_words=evidence_words)
        rejected: list[tuple[str, str]] = []
        if s["judgement"] == ERROR:
            if k_coarse > 0 and has_correct:
                rejected.append(("coarse", correct_text))
                counts["coarse_error_vs_correct"] += 1
            fine = _draw(rng, error_pool, k_fine, s["target"], _signature(s))
            rejected += [("fine", t) for t in fine]
            counts["fine"] += len(fine)
        else:
            coarse = _draw(rng, error_pool, k_coarse, s["target"], None)
            rejected += [("coarse", t) for t in coarse]
            counts["coarse_correct_vs_error"] += len(coarse)
        for kind, text in rejected:
            pairs.append({"prompt": prompt, "chosen": s["target"], "rejected": text, "kind": kind,
                          "qkey": s["qkey"]})
    out = dict.fromkeys(("coarse_error_vs_correct", "coarse_correct_vs_error", "fine"), 0)
    out.update(counts)
    out["total_before_cap"] = len(pairs)
    if max_pairs is not None and len(pairs) > max_pairs:
        keep = sorted(rng.sample(range(len(pairs)), max_pairs))
        pairs = [pairs[i] for i in keep]
    rng.shuffle(pairs)
    out["total"] = len(pairs)
    out["coarse_kept"] = sum(p["kind"] == "coarse" for p in pairs)
    out["fine_kept"] = sum(p["kind"] == "fine" for p in pairs)
    return pairs, out


def label_counts(samples: Sequence[Mapping[str, Any]], tier: int) -> dict[str, int]:
    """How often each tier-``tier`` label occurs among error samples (most frequent first)."""
    c: Counter[str] = Counter()
    for s in samples:
        if s["judgement"] == ERROR:
            c.update(s.get(f"tag{tier}", []))
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


# --------------------------------------------------------------------------------------------
# Stage metrics
# --------------------------------------------------------------------------------------------
def _rounded_calibration(calibration: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in calibration.items()}


def critic_data_metrics(*, data: Mapping[str, Any], evidence: Mapping[str, Any], style_shortcut_auroc: float | None,
                        dev: Mapping[str, Any], questions: Mapping[str, int], prompt: Mapping[str, Any]
                        ) -> dict[str, Any]:
    """The critic data stage's metrics (``reports/metrics/05_critic_data.json``, schema
    ``CriticDataMetrics``); stage 05_critic_sft copies ``data``, ``dev`` and ``questions`` into
    its own metrics. Arguments as :func:`critic_sft_metrics`'s, plus the critic's prompt settings."""
    return {
        "data": {**data, "evidence_in_prompt": evidence["current"]["share"], "evidence": dict(evidence),
                 "style_shortcut_auroc": style_shortcut_auroc},
        "dev": dict(dev),
        "questions": dict(questions),
        "prompt": dict(prompt),
    }


def _torch_device() -> str:
    """Where this process trained: the cached trainer runs on a GPU whenever torch sees one
    (:func:`ragcritic_lib.critic.train.train_device`), and the metrics are written right after."""
    from ragcritic_lib.llm import _resolve_device

    return _resolve_device("auto")


def critic_sft_metrics(*, data: Mapping[str, Any], evidence: Mapping[str, Any], style_shortcut_auroc: float | None,
                       dev: Mapping[str, Any], fit: Mapping[str, Any], preview: Sequence[Any],
                       calibration: Mapping[str, Any], questions: Mapping[str, int],
                       verdict_body: Mapping[str, Any] | None = None,
                       dev_tags: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The critic SFT stage's metrics (``reports/metrics/05_critic_sft.json``, schema
    ``CriticSftMetrics``) from what the stage computed.

    Args:
        data: :func:`ragcritic_lib.critic.corpus.data_report` of the training set.
        evidence: ``{"current": coverage, "first_words": coverage}``, each
            :func:`ragcritic_lib.critic.evidence.evidence_coverage` of the dev answers under the
            critic's prompt and under the first-words prompt it replaced.
        style_shortcut_auroc: cross-validated AUROC of the style-only classifier on the
            training set (0.5: right and wrong answers do not differ in surface form).
        dev: counts of the dev answers (``n``, ``correct``, ``errors``).
        fit: :func:`ragcritic_lib.critic.train.run_cached_sft`'s report (or the trl trainer's,
            shaped the same way).
        preview: the critic's parses of the preview samples; those not ``ok`` are counted.
        calibration: ``calibrate_verdicts``' report on dev; floats rounded to 4 digits.
        questions: distinct questions per split (train / dev), checked disjoint.
        verdict_body: the verdict's own body when it has one (the probe's or the verifier's
            report: ``body``, ``examples``, ``curve`` of ``{examples_seen, dev_auroc}`` and what
            fitted it): ``learning_curve`` and the degeneracy flags then read its curve, the
            generative critic's moves to ``critique_learning_curve``.
        dev_tags: :func:`ragcritic_lib.critic.benchmark.tag_quality` of the critic's Error
            critiques of wrong dev answers (flagged when they name no gold tier-1 label).
    """
    from ragcritic_lib.critic.flags import learning_curve, sft_degenerate

    run = fit["run"]
    losses = [r["loss"] for r in run.get("curve", []) if r.get("loss") is not None]
    critique_curve = learning_curve(run, fit["examples"])
    verdict_curve = learning_curve(verdict_body, int(verdict_body["examples"])) if verdict_body else critique_curve
    first = critic_data_metrics(data=data, evidence=evidence, style_shortcut_auroc=style_shortcut_auroc, dev=dev,
                                questions=questions, prompt={})
    return {
        "data": first["data"],
        "dev": first["dev"],
        "questions": first["questions"],
        # seconds: wall time of the whole training (cache, comparison, main run), the
        # comparison's training cost (it varies from run to run).
        "train": {"steps": run["steps"], "seconds": fit["seconds"], "examples": fit["examples"],
                  "dropped_too_long": fit["dropped_too_long"], "device": fit.get("device") or _torch_device(),
                  "method": fit["method"],
                  "lora_r": fit.get("lora_r"), "train_layers": run["train_layers"], "epochs": fit["settings"]["epochs"],
                  "tokens_per_example": fit["tokens_per_example"], "cache_seconds": fit["cache_seconds"],
                  "stopped_early": run["stopped_early"], "best_at_examples": run["best_at_examples"],
                  "best_dev_auroc": run["best_dev_auroc"], "select": run.get("select", "dev_auroc"),
                  **({"best_dev_loss": run["best_dev_loss"]} if run.get("best_dev_loss") is not None else {}),
                  "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None},
        "untrained_dev_auroc": fit.get("untrained_dev_auroc"),
        "method_comparison": dict(fit.get("comparison") or {}),
        "method_decision": fit.get("decision"),
        **({"ship": dict(fit["ship"])} if fit.get("ship") else {}),
        "learning_curve": verdict_curve,
        **({"critique_learning_curve": critique_curve, "verdict_body": body_summary(verdict_body)}
           if verdict_body else {}),
        "preview_parse_failures": sum(not p.ok for p in preview),
        "verdict_calibration": _rounded_calibration(calibration),
        **({"dev_tags": dict(dev_tags)} if dev_tags else {}),
        "degenerate": sft_degenerate(verdict_curve, calibration, tags=dev_tags),
    }


def body_summary(verdict_body: Mapping[str, Any]) -> dict[str, Any]:
    """What the metrics say of a verdict body's report (the stage 05_critic_body's
    ``verdict_body.json``): its kind and what fitted it, without its curve."""
    return {k: verdict_body[k] for k in ("body", "model", "layer", "answer_layer", "C", "examples", "epochs",
                                         "learning_rate", "steps", "seconds", "best_dev_auroc", "best_at_examples",
                                         "sources") if k in verdict_body}


def critic_body_metrics(*, verdict_body: Mapping[str, Any], dev_examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The verdict body stage's metrics (``reports/metrics/05_critic_body.json``, schema
    ``CriticBodyMetrics``).

    Args:
        verdict_body: the body's report (``body``: probe, verifier or generative; for a fitted
            body also ``examples``, ``curve`` of ``{examples_seen, dev_auroc}`` and what fitted it).
        dev_examples: the dev examples its curve is scored on (``sft_dev.jsonl``); counted by
            their verdict.
    """
    from ragcritic_lib.critic.flags import curve_degenerate, learning_curve
    from ragcritic_lib.critic.verifier import is_error_example

    fitted = verdict_body.get("body") in ("probe", "verifier")
    curve = learning_curve(verdict_body, int(verdict_body["examples"])) if fitted else []
    errors = sum(bool(is_error_example(e)) for e in dev_examples)
    return {"verdict_body": body_summary(verdict_body), "learning_curve": curve,
            "dev": {"n": len(dev_examples), "errors": errors, "correct": len(dev_examples) - errors},
            "degenerate": curve_degenerate(curve, "critic_body")}


def critic_dpo_metrics(*, pair_counts: Mapping[str, Any], balance: Mapping[str, Any], beta: float,
                       fit: Mapping[str, Any], calibration: Mapping[str, Any],
                       dev_tags: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The critic DPO stage's metrics (``reports/metrics/06_critic_dpo.json``, schema
    ``CriticDpoMetrics``) from what the stage computed.

    Args:
        pair_counts: :func:`dpo_pairs`' counts; balance: :func:`balance_correct`'s report.
        beta: the DPO beta.
        fit: :func:`ragcritic_lib.critic.train.run_cached_dpo`'s report; the first and last
            loss and the last reward margin and accuracy come from its curve.
        calibration: ``calibrate_verdicts``' report on dev; floats rounded to 4 digits.
        dev_tags: :func:`ragcritic_lib.critic.benchmark.tag_quality` of the aligned critic's
            Error critiques of wrong dev answers.
    """
    from ragcritic_lib.critic.flags import dpo_degenerate

    run = fit["run"]
    rows = [r for r in run.get("curve", []) if r.get("loss") is not None]
    before, after = fit.get("dev_auroc_before"), fit.get("dev_auroc_after")
    held_out = ({"n": fit["dev_pairs"], "loss_before": fit.get("dev_pair_loss_before"),
                 "loss_after": fit.get("dev_pair_loss_after"), "accuracy_after": fit.get("dev_pair_accuracy_after")}
                if fit.get("dev_pairs") else None)
    return {
        "pairs": dict(pair_counts),
        "balance": dict(balance),
        # seconds: wall time of the whole DPO (cache, reference pass, training), the comparison's
        # training cost (it varies from run to run).
        "train": {"beta": beta, "steps": run["steps"], "seconds": fit["seconds"], "pairs_used": fit["pairs_used"],
                  "dropped_too_long": fit["dropped_too_long"], "device": fit.get("device") or _torch_device(),
                  "first_loss": rows[0]["loss"] if rows else None, "last_loss": rows[-1]["loss"] if rows else None,
                  "last_reward_margin": rows[-1].get("reward_margin") if rows else None,
                  "last_reward_accuracy": rows[-1].get("reward_accuracy") if rows else None},
        "dev_auroc": {"before": before, "after": after,
                      "lowered": None if before is None or after is None else bool(after < before),
                      "kept_sft_weights": bool(fit.get("kept_start"))},
        "curve": list(run.get("curve", [])),
        **({"ship": dict(fit["ship"])} if fit.get("ship") else {}),
        "verdict_calibration": _rounded_calibration(calibration),
        **({"dev_pairs": held_out} if held_out else {}),
        **({"dev_tags": dict(dev_tags)} if dev_tags else {}),
        "degenerate": dpo_degenerate({"before": before, "after": after},
                                     {"last_reward_accuracy": rows[-1].get("reward_accuracy") if rows else None},
                                     calibration, dev_pairs=held_out, tags=dev_tags),
    }
