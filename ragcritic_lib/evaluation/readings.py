"""Short readings of each stage's numbers, written from its metrics so they stay true when they change.

Every notebook ends with a "Reading the numbers" cell that calls one ``reading_<stage>`` function
on the metrics file the stage has just written (``reports/metrics/<stem>.json``) and shows the
sentences as Markdown. Each function takes plain dicts and numbers, returns a list of sentences
(Markdown) and says both what the numbers show and what they do not: an interval that contains
0, a change smaller than the minimum detectable effect, a training loss that rose, two critics
that score the same, a flag for a degenerate run. Keys a run may lack are read with defaults.
Each reading ends with the file's ``environment.provenance`` entries, if any: the upstream outputs
the stage read that were made in another dtype or on another CPU class than its own.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping, Sequence

__all__ = [
    "change_sentence", "comparison_block", "provenance_sentences", "reading_analysis", "reading_assets", "reading_benchmark",
    "reading_comparison", "reading_correction", "reading_crag", "reading_critic_data", "reading_critic_dpo", "reading_critic_sft",
    "reading_critic_body",
    "reading_error_sampling", "reading_ragec", "reading_repair", "reading_retrieval_rag", "reading_self_refine",
    "reading_simrag", "reading_tagging", "reading_taxonomy", "reading_testbed",
]

# Loss values closer than this count as unchanged.
_FLAT = 1e-4
# A DPO run whose policy equals its reference has sigmoid loss exactly log 2.
_DPO_START_LOSS = math.log(2)


# ------------------------------------------------------------------------------------ helpers
def provenance_sentences(metrics: Mapping[str, Any]) -> list[str]:
    """One sentence per ``environment.provenance`` entry of a metrics file (none when absent)."""
    env = metrics.get("environment") if isinstance(metrics, Mapping) else None
    entries = env.get("provenance") if isinstance(env, Mapping) else None
    return [f"Provenance: {entry}." for entry in entries or [] if isinstance(entry, str)]


def _with_provenance(reading: Callable[..., list[str]]) -> Callable[..., list[str]]:
    """A reading followed by the provenance sentences of the metrics it reads."""
    @functools.wraps(reading)
    def wrapped(metrics: Mapping[str, Any], *args: Any, **kwargs: Any) -> list[str]:
        return reading(metrics, *args, **kwargs) + provenance_sentences(metrics)
    return wrapped


def _known(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def _pct(x: Any) -> str:
    return f"{x:.0%}" if _known(x) else "n/a"


def _f(x: Any, digits: int = 3) -> str:
    return f"{x:.{digits}f}" if _known(x) else "n/a"


def _signed(x: Any, digits: int = 3) -> str:
    return f"{x:+.{digits}f}" if _known(x) else "n/a"


def _share(part: Any, whole: Any) -> float | None:
    return part / whole if _known(part) and _known(whole) and whole else None


def _trend(first: Any, last: Any, digits: int = 3) -> str:
    """``"rose from a to b"``, ``"fell from a to b"`` or ``"stayed at a"`` (``""`` when unknown)."""
    if not (_known(first) and _known(last)):
        return ""
    if abs(last - first) <= _FLAT:
        return f"stayed at {first:.{digits}f}"
    return f"{'rose' if last > first else 'fell'} from {first:.{digits}f} to {last:.{digits}f}"


def _counts(d: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items())


def _flags(flags: Sequence[str] | None) -> list[str]:
    return [f"Flagged degenerate: {d}." for d in flags or []]


def _half_width(n: int) -> float | None:
    """Half-width of a 95% normal interval on a proportion near 0.5 from ``n`` samples."""
    return 1.96 * math.sqrt(0.25 / n) if n > 0 else None


def change_sentence(name: str, row: Mapping[str, Any], *, mde: Any = None, alpha: float = 0.05,
                    p_key: str = "p_value", p_label: str = "p", baseline: str = "standard RAG") -> str:
    """One Markdown line on a paired F1 change: its interval, whether it contains 0, and the MDE.

    Args:
        row: ``f1``, ``delta_f1``, ``ci_low``, ``ci_high`` and the p-value under ``p_key``.
        mde: the minimum detectable F1 change at 80% power for this comparison, if known.
    """
    low, high, delta, p = row.get("ci_low"), row.get("ci_high"), row.get("delta_f1"), row.get(p_key)
    line = f"- **{name}**: F1 {_f(row.get('f1'))}, change {_signed(delta)}"
    if not (_known(low) and _known(high)):
        return line + " (no interval)."
    line += f" (95% CI {_signed(low)}..{_signed(high)}"
    line += f", {p_label} {p:.3g})" if _known(p) else ")"
    if low <= 0 <= high:
        line += f": the interval contains 0, so no change against {baseline} is shown"
        if _known(mde) and _known(delta) and abs(delta) < mde:
            line += (f"; the change is below the minimum detectable effect ({_f(mde)}), so an effect of this size "
                     "would likely be missed: this is no evidence that there is none")
    else:
        line += f": the interval excludes 0 ({'above' if low > 0 else 'below'} {baseline})"
        if _known(p) and p >= alpha:
            line += f", but the p-value is not below {alpha:g}: interval and test disagree, so read it as weak"
    return line + "."


# ------------------------------------------------------------------------------------ 00 assets
@_with_provenance
def reading_assets(metrics: Mapping[str, Any]) -> list[str]:
    """00_assets: what the asset build produced (one sentence, plus skipped trivia lists)."""
    sizes = metrics.get("trivia_split_sizes") or {}
    split = "/".join(str(sizes.get(s, 0)) for s in ("train", "dev", "test"))
    text = [f"The build made a corpus of {metrics.get('corpus_passages', 0)} passages from "
            f"{metrics.get('corpus_articles', 0)} Wikipedia articles (mean {_f(metrics.get('corpus_mean_words'), 0)} words) "
            f"and {metrics.get('trivia_questions', 0)} trivia questions (train/dev/test {split}); "
            f"{_pct(metrics.get('trivia_answerable_rate'))} of the questions have a gold answer somewhere in the corpus, "
            "the ceiling for any method that reads only this corpus."]
    skipped = metrics.get("trivia_lists_skipped") or []
    if skipped:
        text.append(f"{len(skipped)} trivia lists were skipped ({', '.join(skipped)}).")
    return text


# ------------------------------------------------------------------------------------ 00 testbed
@_with_provenance
def reading_testbed(stats: Mapping[str, Any]) -> list[str]:
    """00_testbed: corpus size, the difficulty knobs and the question splits."""
    corpus, questions = stats.get("corpus") or {}, stats.get("questions") or {}
    text = [f"The testbed has {sum((stats.get('entities') or {}).values())} entities rendered into "
            f"{corpus.get('documents', 0)} documents and {corpus.get('passages', 0)} passages (mean "
            f"{_f(corpus.get('words_mean'), 0)} words), with {stats.get('twins', 0)} near-duplicate entities, "
            f"{stats.get('conflicts', 0)} outdated reports and {stats.get('split_facts', 0)} facts split across chunks."]
    for split, q in questions.items():
        n = q.get("n", 0)
        if not n:
            text.append(f"The {split} split is empty.")
            continue
        by_type = q.get("by_type") or {}
        counts = sorted(set(by_type.values()))
        per_type = (f"{counts[0]} per type" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} per type") if counts else ""
        knobs = ", ".join(f"{k} {_pct(_share(v, n))}" for k, v in (q.get("knobs") or {}).items())
        text.append(f"{split}: {n} questions over {q.get('n_entities', 0)} entities of its own"
                    + (f" ({len(by_type)} types, {per_type})" if by_type else "")
                    + (f"; the knobs touch {knobs} of them" if knobs else "") + ".")
    text.append("The world is synthetic: scores on it show how a method copes with these constructed "
                "difficulties, not how it does on natural text.")
    return text


# ------------------------------------------------------------------------------------ 01 retrieval
def _recall_sentence(ds: str, by_retriever: Mapping[str, Any], k: str) -> str | None:
    at_k = {name: r.get("answer_recall", {}).get(k) for name, r in by_retriever.items()}
    at_k = {name: v for name, v in at_k.items() if _known(v)}
    if not at_k:
        return None
    best = max(at_k, key=at_k.get)
    n = by_retriever[best].get("n", 0)
    others = ", ".join(f"{name} {_pct(v)}" for name, v in at_k.items() if name != best)
    top = {name: max((float(v) for v in r.get("answer_recall", {}).values()), default=float("nan"))
           for name, r in by_retriever.items()}
    ks = max((int(x) for r in by_retriever.values() for x in r.get("answer_recall", {})), default=int(k))
    return (f"On {ds}, {best} finds a gold answer in the top {k} passages for {_pct(at_k[best])} of {n} dev questions "
            "with an answer" + (f" ({others})" if others else "") + f"; even at k={ks} the best retriever reaches "
            f"{_pct(max(top.values()))}: for the other questions no gold answer is among its first {ks} passages.")


def _rag_sentence(ds: str, rag: Mapping[str, Any], closed: Mapping[str, Any] | None) -> str:
    line = (f"Standard RAG on {ds} test: F1 {_f(rag.get('f1'))}, EM {_f(rag.get('em'))}, accuracy "
            f"{_pct(rag.get('acc'))} on {rag.get('n', 0)} questions, {_pct(rag.get('truncation_rate'))} of answers cut at the token cap")
    if closed and _known(closed.get("f1")) and _known(rag.get("f1")):
        gain = rag["f1"] - closed["f1"]
        verb = "adds" if gain > 0 else "does not add"
        line += f"; closed-book F1 is {_f(closed['f1'])}, so retrieval {verb} F1 here ({_signed(gain)})"
    return line + "."


@_with_provenance
def reading_retrieval_rag(metrics: Mapping[str, Any], *, top_k: int | None = None) -> list[str]:
    """01_retrieval_rag: recall at the k RAG reads, standard RAG vs closed-book, the prompt probe.

    Args:
        top_k: the number of passages standard RAG reads (default: the smallest k measured).
    """
    text: list[str] = []
    for ds, by_retriever in (metrics.get("retrieval") or {}).items():
        ks = sorted({int(x) for r in by_retriever.values() for x in r.get("answer_recall", {})})
        k = str(top_k) if top_k is not None else (str(ks[0]) if ks else "")
        line = _recall_sentence(ds, by_retriever, k)
        if line:
            text.append(line)
    for ds, splits in (metrics.get("rag") or {}).items():
        if "test" in splits:
            text.append(_rag_sentence(ds, splits["test"], (metrics.get("closed_book") or {}).get(ds, {}).get("test")))
    probe: dict[str, list[Mapping[str, Any]]] = {}
    for row in metrics.get("prompt_variants") or []:
        probe.setdefault(row["dataset"], []).append(row)
    for ds, rows in probe.items():
        best = max(rows, key=lambda r: r.get("f1", 0))
        n = best.get("n", 0)
        step = f"; with {n} questions one answer moves accuracy by {_pct(1 / n)}, so this ranking is rough" if n else ""
        text.append(f"On the {ds} prompt probe {best['variant']} scores the best F1 ({_f(best.get('f1'))}, "
                    f"answer phrase followed {_pct(best.get('prefix_rate'))}){step}.")
    if text:
        text.append("These are point estimates without intervals; the paired comparisons with intervals are in "
                    "notebooks 08 and 14.")
    return text


# ------------------------------------------------------------------------------------ 02 error sampling
@_with_provenance
def reading_error_sampling(metrics: Mapping[str, Any]) -> list[str]:
    """02_error_sampling: the error pool, error rates per member and dataset, the LLM judge check."""
    samples, errors, correct = metrics.get("samples", 0), metrics.get("errors", 0), metrics.get("correct", 0)
    judge = metrics.get("judge") or {}
    text = [f"{metrics.get('pool_size', 0)} pool members sampled {samples} answers; judged by "
            f"{judge.get('metric', '?')} >= {judge.get('threshold', '?')}, {errors} are wrong "
            f"({_pct(_share(errors, samples))}) and form D_error, {correct} are correct."]
    rates = {k: v for k, v in (metrics.get("error_rate_by_member") or {}).items() if _known(v)}
    if len(rates) > 1:
        lo, hi = min(rates, key=rates.get), max(rates, key=rates.get)
        text.append(f"Error rates per member run from {_pct(rates[lo])} ({lo}) to {_pct(rates[hi])} ({hi}).")
    for ds, d in (metrics.get("by_dataset") or {}).items():
        rate, gold = d.get("error_rate"), d.get("gold_in_passages")
        line = (f"On {ds} {_pct(rate)} of {d.get('n', 0)} answers are wrong and the gold answer was in the passages "
                f"for {_pct(gold)} of all answers")
        if _known(rate) and _known(gold) and rate > gold:
            line += f", so at least {_pct((rate - gold) / rate)} of its errors had no gold answer to read"
        text.append(line + ".")
    if samples and _share(correct, samples) < 0.2:
        text.append(f"Only {correct} correct answers exist: the critic's training sees few examples of a right answer.")
    text += _llm_judge_sentences(metrics.get("llm_teacher_agreement") or {})
    text += _audit_sentences(judge)
    return text


def _audit_sentences(judge: Mapping[str, Any]) -> list[str]:
    """The judges against the hand-labelled audit (``judge.audit``), test rows first."""
    audit = judge.get("audit") or {}
    if not audit.get("exists"):
        return [f"No hand-labelled audit ({audit.get('source') or 'data/audit/audit.jsonl'}) was read: "
                "how often the judge agrees with a reader is not measured in this run."]
    agree, low, high = audit.get("agreement") or {}, audit.get("agreement_ci_low") or {}, audit.get("agreement_ci_high") or {}
    shown = ", ".join(f"{j} {_pct(a)} ({_pct(low.get(j))}-{_pct(high.get(j))})" for j, a in agree.items() if _known(a))
    choosing = (audit.get("choosing") or {})
    best = audit.get("best_choosing")
    text = [f"Against {audit.get('n', 0)} hand-labelled answers, on the {audit.get('n_test', 0)} test rows the judges "
            f"agree with the reader: {shown or 'none judged'} (Wilson 95%)."]
    if best:
        text.append(f"On the {choosing.get('n', 0)} choosing rows {best} agrees best "
                    f"({_pct((choosing.get('agreement') or {}).get(best))}); this run judged with {judge.get('metric', '?')}.")
        versus = choosing.get("best_versus") or {}
        tied = sorted(j for j, v in versus.items() if v.get("ci_low", 0) <= 0)
        if versus:
            text.append(f"Its lead there is wider than its paired 95% interval over "
                        f"{', '.join(sorted(set(versus) - set(tied))) or 'no judge'}"
                        + (f", not over {', '.join(tied)}." if tied else "."))
    return text


def _llm_judge_sentences(agreement: Mapping[str, Any]) -> list[str]:
    n = agreement.get("records", 0)
    on_err, on_cor = agreement.get("judgement_agreement_on_errors"), agreement.get("judgement_agreement_on_correct")
    if not n or not (_known(on_err) and _known(on_cor)):
        return ["The LLM teacher's judgement was not checked in this run."]
    balanced = (on_err + on_cor) / 2
    verdict = "no better than chance (50%)" if balanced <= 0.5 + (_half_width(n) or 0) else "above chance"
    return [f"On {n} answers (half wrong, half right where possible) the LLM teacher agrees with the gold "
            f"judgement on {_pct(on_err)} of wrong and {_pct(on_cor)} of right answers: balanced {_pct(balanced)}, "
            f"{verdict} at this sample size; {_pct(agreement.get('rationale_parse_failure_rate'))} of its outputs did not parse."]


# ------------------------------------------------------------------------------------ 03 tagging
@_with_provenance
def reading_tagging(metrics: Mapping[str, Any]) -> list[str]:
    """03_tagging: raw vs normalized tags, what each filter removed, the LLM tagger's overlap."""
    norm = metrics.get("normalization") or {}
    raw, raw_u = norm.get("raw_tags", 0), norm.get("raw_unique", 0)
    text = [f"The {metrics.get('tagger', '?')} tagger wrote {raw} tags ({raw_u} distinct) for "
            f"{metrics.get('error_records', 0)} error records; {_pct(metrics.get('parse_failure_rate'))} of its outputs did not parse."]
    if raw:
        text.append(f"Normalization kept {norm.get('final_tags', 0)} tags ({norm.get('final_unique', 0)} distinct): "
                    f"merging variants left {norm.get('unique_after_merge', 0)} distinct, the length cap dropped "
                    f"{norm.get('too_long_unique', 0)}, and tags seen fewer than {norm.get('alpha', '?')} times dropped "
                    f"{norm.get('below_alpha_unique', 0)} distinct ({norm.get('below_alpha_occurrences', 0)} occurrences).")
    agreement = metrics.get("llm_teacher_agreement") or {}
    n = agreement.get("tagged_records", 0)
    if n:
        exact, words = agreement.get("tag_exact_jaccard"), agreement.get("tag_word_jaccard")
        weak = _known(words) and words < 0.2
        text.append(f"On {n} records the LLM tagger's output failed to parse {_pct(agreement.get('tag_parse_failure_rate'))} "
                    f"of the time; its tags share {_pct(exact)} exact tags and {_pct(words)} content words with the grounded "
                    "tagger's" + (": it does not reproduce them." if weak else "."))
    else:
        text.append("The LLM tagger was not compared with the grounded one in this run.")
    if metrics.get("tagger") == "grounded":
        text.append("The grounded tags are written from rules over the evidence, so the taxonomy built from them "
                    "reflects those rules, not a model's reading of the errors.")
    return text


# ------------------------------------------------------------------------------------ 04 taxonomy
@_with_provenance
def reading_taxonomy(metrics: Mapping[str, Any]) -> list[str]:
    """04_taxonomy: clusters and their mapping, the label distribution, agreement with known causes."""
    qa, tax = metrics.get("error_qa") or {}, metrics.get("taxonomy") or {}
    sources = _counts(metrics.get("mapping_sources") or {})
    text = [f"{metrics.get('tags_clustered', 0)} distinct tags were cut into {metrics.get('clusters', 0)} clusters "
            f"mapped onto {len(metrics.get('tier2_labels_used') or [])} of the {tax.get('tier2', '?')} tier-2 labels"
            + (f" (mapped by {sources})" if sources else "") + f"; D_Error^QA keeps {qa.get('kept', 0)} of "
            f"{qa.get('input', 0)} error records."]
    tier1 = metrics.get("tier1_distribution") or {}
    if tier1:
        top = max(tier1, key=tier1.get)
        text.append(f"The most frequent tier-1 label is {top} ({tier1[top]} of {sum(tier1.values())} labels); "
                    f"{len(tier1)} of {tax.get('tier1', '?')} tier-1 labels occur.")
    known = metrics.get("known_cause_agreement") or {}
    per_cause = {c: v for c, v in (known.get("per_cause") or {}).items() if v.get("n")}
    if per_cause:
        text.append(f"Against the causes known from the testbed's construction ({known.get('pairs', 0)} cause-record pairs), "
                    f"tier-1 labels hit {_pct(known.get('tier1_hit_rate'))} and tier-2 {_pct(known.get('tier2_hit_rate'))}.")
        best = max(per_cause, key=lambda c: per_cause[c].get("tier1_hit_rate") or 0)
        worst = min(per_cause, key=lambda c: per_cause[c].get("tier1_hit_rate") or 0)
        text.append(f"Best: {best} ({_pct(per_cause[best].get('tier1_hit_rate'))} of {per_cause[best]['n']}); "
                    f"worst: {worst} ({_pct(per_cause[worst].get('tier1_hit_rate'))} of {per_cause[worst]['n']})."
                    + _few(per_cause))
        text.append("When the tags come from the grounded tagger they were written from these causes, so this "
                    "measures the clustering and mapping, not the tagging.")
    else:
        text.append("No error record carries a known cause, so the labels were not checked against construction.")
    parse = metrics.get("cluster_name_parse") or {}
    if parse.get("calls"):
        text.append(f"The LLM cluster namer failed to parse {parse.get('failures', 0)} of {parse['calls']} names; "
                    f"the {metrics.get('cluster_namer', '?')} names are the ones used.")
    return text


def _few(per_cause: Mapping[str, Mapping[str, Any]], below: int = 5) -> str:
    few = [c for c, v in per_cause.items() if v.get("n", 0) < below]
    return f" Causes with fewer than {below} records ({', '.join(few)}) are too few to read." if few else ""


# ------------------------------------------------------------------------------------ 05 / 06 critics
def _calibration_sentence(cal: Mapping[str, Any]) -> list[str]:
    n, n_cor = cal.get("n", 0), cal.get("n_correct", 0)
    if not n:
        return ["The verdict was not calibrated: there were no dev samples."]
    text = [f"On {n} dev samples ({cal.get('n_error', 0)} wrong, {n_cor} right answers) the more likely verdict gets "
            f"{_pct(cal.get('argmax_error_acc'))} of wrong and {_pct(cal.get('argmax_correct_acc'))} of right answers "
            f"(balanced {_pct(cal.get('argmax_avg_acc'))})."]
    if cal.get("fitted"):
        text.append(f"The threshold {_signed(cal.get('threshold'))} on the Error-Correct margin gives balanced "
                    f"{_pct(cal.get('avg_acc'))} (AUROC {_f(cal.get('auroc'))}); it was chosen on these same samples, "
                    "so that figure is optimistic" + (f", and with {n_cor} right answers one of them moves their "
                    f"accuracy by {_pct(1 / n_cor)}" if n_cor else "") + ".")
    else:
        text.append("No threshold was fitted (one class is missing on dev): the written verdict is used as is.")
    return text


def _loss_sentence(kind: str, train: Mapping[str, Any]) -> str:
    trend = _trend(train.get("first_loss"), train.get("last_loss"), 4)
    if not trend:
        return f"No {kind} loss was logged."
    line = f"The {kind} loss {trend} over {train.get('steps', 0)} steps (first and last logged values of a noisy curve)"
    if trend.startswith("rose"):
        return line + (": it went up, so these steps did not fit the training data better; the checkpoint is "
                       "used as trained.")
    if trend.startswith("fell"):
        return line + ": the model fit its training data better, which by itself says nothing about held-out samples."
    return line + ": training did not move it."


def _critic_data_sentences(metrics: Mapping[str, Any]) -> list[str]:
    data = metrics.get("data") or {}
    sources = "; ".join(f"{src} {v.get('correct', 0)} right and {v.get('error', 0)} wrong"
                        for src, v in (data.get("sources") or {}).items())
    text = [f"The training set holds {data.get('examples', 0)} samples from {data.get('questions', 0)} train questions "
            f"({_pct(data.get('correct_share'))} right answers): {sources}." if sources
            else "There is no training-set report."]
    lengths = data.get("by_length") or {}
    if lengths:
        text.append("By the answer's length: " + "; ".join(
            f"{name} {v.get('correct', 0)} right and {v.get('error', 0)} wrong" for name, v in lengths.items()) + ".")
    ev = data.get("evidence") or {}
    cur, old = (ev.get("current") or {}).get("share"), (ev.get("first_words") or {}).get("share")
    if _known(cur):
        text.append(f"The sentence that decides a dev answer is in the critic's prompt for {_pct(cur)} of the dev answers "
                    f"whose passages hold one" + (f" (the first words of each passage held it for {_pct(old)})." if _known(old)
                                                   else "."))
    if _known(data.get("style_shortcut_auroc")):
        text.append(f"Answer surface alone separates right from wrong training samples with AUROC "
                    f"{_f(data['style_shortcut_auroc'])} (0.5: not at all).")
    return text


@_with_provenance
def reading_critic_data(metrics: Mapping[str, Any]) -> list[str]:
    """05_critic_data: the training set by source and answer length, the dev answers, what the
    critic sees and whether answer surface alone gives the verdict away."""
    dev = metrics.get("dev") or {}
    text = _critic_data_sentences(metrics)
    if dev:
        text.append(f"The dev set holds the generator's {dev.get('n', 0)} answers to the dev questions, "
                    f"{dev.get('correct', 0)} of them right by the judge.")
    return text


@_with_provenance
def reading_critic_sft(metrics: Mapping[str, Any]) -> list[str]:
    """05_critic_sft: the training set by source, what the critic sees, the learning curve and
    the dev calibration."""
    train, dev = metrics.get("train") or {}, metrics.get("dev") or {}
    text = _critic_data_sentences(metrics)
    comp = metrics.get("method_comparison") or {}
    if comp:
        text.append("Method comparison on " + ", ".join(
            f"{m} (dev AUROC {_f(c.get('dev_auroc'))} after {c.get('examples', 0)} examples, {c.get('seconds', 0):.0f} s)"
            for m, c in comp.items()) + f"; {train.get('method', '?')} trains on.")
    decision = metrics.get("method_decision") or {}
    if decision.get("reason"):
        text.append(f"Method decision: {decision['reason']}.")
    curve = [r for r in metrics.get("learning_curve") or [] if _known(r.get("dev_auroc"))]
    if curve:
        pts = ", ".join(f"{_f(r['dev_auroc'])} at {r['examples_seen']}" for r in curve)
        saved = (f"The saved critic is the one whose dev critiques (the tokens after the verdict) had the lowest "
                 f"loss, {_f(train.get('best_dev_loss'))} at {train.get('best_at_examples', 0)} examples"
                 if train.get("select") == "dev_loss" else
                 f"The best, {_f(train.get('best_dev_auroc'))} at {train.get('best_at_examples', 0)}, is the saved critic")
        text.append(f"Dev verdict AUROC against training examples seen ({dev.get('n', 0)} dev answers, "
                    f"{dev.get('correct', 0)} right; untrained {_f(metrics.get('untrained_dev_auroc'))}): {pts}. "
                    + saved + (" (training stopped early)." if train.get("stopped_early") else "."))
    body = metrics.get("verdict_body") or {}
    if body:
        text.append(_body_sentence(body) + " (stage 05_critic_body; the curve above is its own); the generative "
                    f"critic writes the tier tags and the critique (its own best dev AUROC {_f(train.get('best_dev_auroc'))}).")
    text.append(_loss_sentence("SFT", train))
    text += _calibration_sentence(metrics.get("verdict_calibration") or {})
    text += _tags_sentence(metrics.get("dev_tags") or {})
    if metrics.get("preview_parse_failures"):
        text.append(f"{metrics['preview_parse_failures']} of the preview critiques did not parse.")
    text += _ship_sentence(metrics.get("ship") or {})
    return text


def _body_sentence(body: Mapping[str, Any]) -> str:
    """What scores the verdict (a fitted ``verdict_body``: probe or verifier), on how many
    samples, and its best dev AUROC; no closing stop."""
    what = (f"a logistic probe on the frozen generator's states at the verdict position (layer {body.get('layer')} "
            f"and the last" + (f", and layer {body['answer_layer']}'s mean over the answer" if body.get("answer_layer")
                               else "") + f"), fitted on {body.get('examples', 0)} samples"
            if body.get("body") == "probe" else
            f"an encoder verifier ({body.get('model', '?')}) trained for {_f(body.get('epochs'), 1)} passes over "
            f"{body.get('examples', 0)} samples")
    sources = body.get("sources")
    return (f"The verdict is scored by {what}" + (f" of the sources {', '.join(sources)}" if isinstance(sources, list)
                                                  else "") +
            f" in {body.get('seconds') or 0:.0f} s: best dev AUROC {_f(body.get('best_dev_auroc'))} at "
            f"{body.get('best_at_examples', 0)} samples")


@_with_provenance
def reading_critic_body(metrics: Mapping[str, Any]) -> list[str]:
    """05_critic_body: which body scores the verdict, its learning curve on dev, and its flags."""
    body, dev = metrics.get("verdict_body") or {}, metrics.get("dev") or {}
    if body.get("body") not in ("probe", "verifier"):
        return ["No body of its own scores the verdict (critic_body.verdict_body is generative): the critic "
                "trained in stage 05_critic_sft scores it with its own margin."]
    text = [_body_sentence(body) + "."]
    curve = [r for r in metrics.get("learning_curve") or [] if _known(r.get("dev_auroc"))]
    if curve:
        text.append(f"Dev AUROC against training samples ({dev.get('n', 0)} dev answers, {dev.get('correct', 0)} right): "
                    + ", ".join(f"{_f(r['dev_auroc'])} at {r['examples_seen']}" for r in curve) + ".")
    flags = metrics.get("degenerate") or []
    text.append("Flagged: " + "; ".join(flags) + "." if flags else "No degeneracy flag: the curve rises.")
    return text


def _tags_sentence(tags: Mapping[str, Any]) -> list[str]:
    """How well the critic's Error critiques of wrong dev answers name the error (``dev_tags``)."""
    if not tags.get("n"):
        return []
    t1, t2 = tags["tag1"], tags["tag2"]
    return [f"On {tags['n']} wrong dev answers, continuing an Error verdict, the critic names a tier-1 label in "
            f"{100 * t1['named_share']:.0f}% of its critiques; against the labels of the answers' known causes "
            f"its tier-1 F1 is {_f(t1['f1'])} (precision {_f(t1['precision'])}, recall {_f(t1['recall'])}) "
            f"and its tier-2 F1 {_f(t2['f1'])}."]


def _ship_sentence(ship: Mapping[str, Any]) -> list[str]:
    """What the shipped critic is and what it loses on dev against the trained one."""
    if not ship:
        return []
    form = ship.get("form", "?") + (f" rank {ship['rank']}" if ship.get("form") == "lowrank" else "")
    text = f"The critic ships as {form} ({_f(ship.get('mb'), 1)} MB)"
    if _known(ship.get("dev_auroc_shipped")):
        text += (f"; its dev AUROC is {_f(ship['dev_auroc_shipped'])} against {_f(ship.get('dev_auroc_trained'))} "
                 f"for the trained model" + (", a loss over 0.02: flagged" if ship.get("flag") else ""))
    return [text + "."]


@_with_provenance
def reading_critic_dpo(metrics: Mapping[str, Any]) -> list[str]:
    """06_critic_dpo: the preference pairs, loss and reward trend, dev AUROC before and after,
    and the dev calibration."""
    pairs, train = metrics.get("pairs") or {}, metrics.get("train") or {}
    text = [f"DPO trained on {train.get('pairs_used', pairs.get('total', 0))} preference pairs ({pairs.get('coarse_kept', 0)} "
            f"coarse, {pairs.get('fine_kept', 0)} fine; {pairs.get('total_before_cap', 0)} before the cap), beta "
            f"{train.get('beta', '?')}.", _loss_sentence("DPO", train)]
    last, margin, acc = train.get("last_loss"), train.get("last_reward_margin"), train.get("last_reward_accuracy")
    if _known(last) and _known(margin):
        side = "the chosen critiques over the rejected ones" if margin > 0 else "the rejected critiques over the chosen ones"
        text.append(f"In the last stretch the loss is {'below' if last < _DPO_START_LOSS else 'not below'} log 2 "
                    f"({_DPO_START_LOSS:.4f}, the loss while the policy equals its SFT reference) and the reward margin is "
                    f"{_signed(margin, 4)}: relative to the reference the policy favours {side}"
                    + (f" ({_pct(acc)} of pairs ranked right)" if _known(acc) else "") + ".")
    dev, held = metrics.get("dev_auroc") or {}, metrics.get("dev_pairs") or {}
    if held.get("n") and _known(held.get("loss_before")) and _known(held.get("loss_after")):
        acc = held.get("accuracy_after")
        text.append(f"On {held['n']} held-out pairs from the dev samples the DPO loss is {_f(held['loss_before'], 4)} "
                    f"for the SFT critic and {_f(held['loss_after'], 4)} for the saved one"
                    + (f" ({_pct(acc)} of the pairs ranked right)" if _known(acc) and not dev.get("kept_sft_weights") else "")
                    + (": DPO did not lower it, so the saved critic keeps the SFT weights." if dev.get("kept_sft_weights")
                       else "."))
        if _known(dev.get("before")) and _known(dev.get("after")):
            text.append(f"The generative critic's own dev verdict AUROC: {_f(dev['before'])} before DPO, "
                        f"{_f(dev['after'])} after.")
    elif _known(dev.get("before")) and _known(dev.get("after")):
        if dev.get("kept_sft_weights"):
            text.append(f"DPO did not raise dev verdict AUROC above the SFT critic's {_f(dev['before'])}: the saved critic "
                        "keeps the SFT weights.")
        else:
            text.append(f"Dev verdict AUROC {_f(dev['before'])} before DPO, {_f(dev['after'])} after.")
    text += _calibration_sentence(metrics.get("verdict_calibration") or {})
    text += _tags_sentence(metrics.get("dev_tags") or {})
    text += _ship_sentence(metrics.get("ship") or {})
    return text


# ------------------------------------------------------------------------------------ 07 benchmark
def _same_scores(critics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A sentence for each group of critics with the same verdicts (and maybe the same labels)."""
    groups: dict[str, list[str]] = {}
    for name, r in critics.items():
        groups.setdefault(repr((r.get("identification"), r.get("predicted_judgements"))), []).append(name)
    out = []
    for names in (g for g in groups.values() if len(g) > 1):
        same_labels = all(critics[n].get("classification") == critics[names[0]].get("classification") for n in names)
        out.append(f"{' and '.join(names)} give the same verdict counts and identification scores"
                   + (" and the same label scores: this benchmark does not tell them apart at all." if same_labels
                      else ": on verdicts this benchmark does not tell them apart; they differ only in their labels."))
    return out


def _critic_line(name: str, r: Mapping[str, Any]) -> str:
    ident, cls = r.get("identification") or {}, r.get("classification") or {}
    said = r.get("predicted_judgements") or {}
    n = r.get("n", 0)
    line = f"- **{name}**: "
    if _known(r.get("verdict_auroc")):
        line += (f"verdict AUROC {_f(r['verdict_auroc'])} (95% CI {_f(r.get('verdict_auroc_ci_low'))}.."
                 f"{_f(r.get('verdict_auroc_ci_high'))}), ")
    if _known(r.get("verdict_auroc_within_kind")):
        line += (f"within kinds of question {_f(r['verdict_auroc_within_kind'])} (95% CI "
                 f"{_f(r.get('verdict_auroc_within_kind_ci_low'))}..{_f(r.get('verdict_auroc_within_kind_ci_high'))}), ")
    line += (f"identification {_pct(ident.get('acc_avg'))} (right answers {_pct(ident.get('acc_correct'))}, "
             f"wrong {_pct(ident.get('acc_error'))}), tier-1 F1 {_pct(cls.get('tag1_f1'))}, tier-2 F1 {_pct(cls.get('tag2_f1'))}")
    top = max(said, key=said.get) if said else None
    if top and n and said[top] >= 0.9 * n:
        line += (f"; it gives no verdict for {said[top]} of {n}" if top == "none" else f"; it says {top} for {said[top]} of {n}")
    if r.get("valid_json_rate") == 0:
        line += "; none of its outputs is valid JSON"
    return line + "."


@_with_provenance
def reading_benchmark(metrics: Mapping[str, Any]) -> list[str]:
    """07_benchmark: each critic's scores with CIs, the style and question-only baselines, critics
    that score the same, and the benchmark's resolution."""
    bench, critics = metrics.get("benchmark") or {}, metrics.get("critics") or {}
    n_err, n_cor = bench.get("n_error", 0), bench.get("n_correct", 0)
    sources = "; ".join(f"{src} {v.get('correct', 0)} right, {v.get('error', 0)} wrong"
                        for src, v in (bench.get("sources") or {}).items())
    text = [f"The benchmark holds {n_err} wrong and {n_cor} right real answers to "
            f"{(bench.get('questions') or {}).get('test', '?')} test questions" + (f" ({sources})." if sources else ".")]
    if not critics:
        return text + ["No critic was scored."]
    text += [_critic_line(name, r) for name, r in critics.items()]
    style = metrics.get("style_baseline") or {}
    if _known(style.get("verdict_auroc")):
        text.append(f"The style-only baseline (answer surface, no passages) reaches AUROC {_f(style['verdict_auroc'])} "
                    f"(95% CI {_f(style.get('verdict_auroc_ci_low'))}..{_f(style.get('verdict_auroc_ci_high'))}): a critic "
                    "must beat that to show judgement beyond style.")
    question = metrics.get("question_baseline") or {}
    if _known(question.get("verdict_auroc")):
        within = question.get("verdict_auroc_within_kind")
        text.append(f"The question-only baseline (the question's embedding, no answer, no passages) reaches AUROC "
                    f"{_f(question['verdict_auroc'])} (95% CI {_f(question.get('verdict_auroc_ci_low'))}.."
                    f"{_f(question.get('verdict_auroc_ci_high'))})"
                    + (f", {_f(within)} within kinds of question" if _known(within) else "")
                    + ": that much of a verdict AUROC the question alone gives, and the within-kind AUROC "
                    "shows what a critic reads beyond the kind of question.")
        for name, d in (question.get("critics_minus_baseline") or {}).items():
            if not _known((d or {}).get("diff")) or not _known(d.get("ci_low")) or not _known(d.get("ci_high")):
                continue
            verdict = ("reads more than the question" if d["ci_low"] > 0 else
                       "scores below the question alone" if d["ci_high"] < 0 else
                       "is not shown to read more than the question (the interval holds 0)")
            text.append(f"{name} minus the question-only baseline: {_signed(d['diff'])} AUROC (paired 95% CI "
                        f"{_signed(d['ci_low'])}..{_signed(d['ci_high'])}), so it {verdict}.")
    acc = {c: (r.get("identification") or {}).get("acc_avg") for c, r in critics.items()}
    acc = {c: v for c, v in acc.items() if _known(v)}
    if acc:
        top = max(acc.values())
        best = [c for c, v in acc.items() if v == top]
        text.append(f"Best identification: {' and '.join(best)} ({_pct(top)}); a constant verdict gets 50%"
                    + (", so no critic tells right from wrong answers better than that." if top <= 0.5 else "."))
    text += _same_scores(critics)
    width = _half_width(min(n_err, n_cor))
    if width:
        text.append(f"With {min(n_err, n_cor)} samples on a side, a 95% interval on one side's accuracy is about "
                    f"±{width:.0%} wide: differences smaller than that are not shown by this benchmark.")
    per_ds = next(iter((metrics.get("by_dataset") or {}).values()), {})
    no_correct = [ds for ds, a in per_ds.items() if a.get("acc_correct") is None]
    if no_correct:
        text.append(f"{', '.join(no_correct)} has no right answer in the benchmark: its accuracy is on wrong answers only.")
    return text


# ----------------------------------------------------------------------------------- 08 planner data
@_with_provenance
def reading_planner_data(metrics: Mapping[str, Any]) -> list[str]:
    """08_planner_data: what the executed programs did to wrong train answers, per program, and
    what the planner was trained on."""
    out = metrics.get("outcomes") or {}
    n, records = out.get("executed_records", 0), out.get("records", 0)
    own = out.get("own_program") or {}
    text = [f"{n} programs ran on {records} wrong answers to train questions "
            f"({metrics.get('programs_per_record', 0)} a record); {out.get('made_right', 0)} runs made the answer "
            f"right by the judge and {out.get('helped', 0)} helped (right, or a higher F1 on the same side of the "
            f"judge); mean F1 change {_signed(out.get('mean_delta_f1'))}. The critique's own rule program made "
            f"{own.get('made_right', 0)} of its {own.get('executed', 0)} runs right (mean F1 change "
            f"{_signed(own.get('mean_delta_f1'))})."]
    ranked = sorted((out.get("by_program") or {}).items(), key=lambda kv: -(kv[1].get("made_right") or 0))
    if ranked:
        text.append("Runs made right per program: " + "; ".join(
            f"{label} {v.get('made_right', 0)} of {v.get('executed', 0)} (ΔF1 {_signed(v.get('mean_delta_f1'))}, "
            f"{v.get('targets', 0)} targets)" for label, v in ranked) + ".")
    train = metrics.get("train") or {}
    if metrics.get("targets") == "outcomes":
        text.append(f"A program helped {out.get('records_helped', 0)} of the {records} records; the planner trained on "
                    f"{out.get('examples', 0)} of them, balanced over the programs (the most frequent target "
                    f"{_pct(out.get('top_target_share'))} of the examples), for {train.get('steps', 0)} steps.")
    else:
        text.append(f"The planner trained on {train.get('examples', 0)} rule-planner programs (`targets: rule`), "
                    f"for {train.get('steps', 0)} steps; the executed outcomes are reported, not learned from.")
    return text + _flags(metrics.get("degenerate"))


# ------------------------------------------------------------------------------------ 08 correction
@_with_provenance
def reading_correction(metrics: Mapping[str, Any], *, alpha: float = 0.05) -> list[str]:
    """08_correction: the ablation ladder per dataset (CIs, p-values, MDEs), rounds, flags."""
    ladder = metrics.get("ladder") or {}
    datasets = [ds for ds in (metrics.get("n_questions") or {}) if ds in ladder]
    text: list[str] = []
    for ds in datasets:
        rows, paired = ladder[ds], ladder.get(f"{ds}_paired_mde_f1") or {}
        base = rows.get("standard RAG") or {}
        recall = ladder.get(f"{ds}_answer_recall")
        text.append(f"On {ds} ({base.get('n', 0)} questions) standard RAG scores F1 {_f(base.get('f1'))}; a change of "
                    f"{_f(ladder.get(f'{ds}_mde_f1'))} F1 is detectable at 80% power (conservative MDE); the gold "
                    f"answer is in standard RAG's passages for {_pct(recall)} of the questions.")
        text.append("\n".join(change_sentence(name, row, mde=paired.get(name), alpha=alpha)
                              for name, row in rows.items() if name != "standard RAG"))
    for ds in datasets[1:]:
        text.append(f"{ds} runs small beside its answer-recall ceiling: no effect is claimed from it.")
    for ds, by_round in (metrics.get("iterations") or {}).items():
        f1s = [_f(v.get("f1")) for v in by_round.values()]
        if len(f1s) > 1:
            text.append(f"RAG-Critic's F1 on {ds} by round: {' -> '.join(f1s)}.")
    for ds, v in (metrics.get("verdict_shares") or {}).items():
        text.append(f"The critic judged {_pct(v.get('error_share'))} of the {ds} answers wrong.")
    fit = (metrics.get("critic_verdict") or {}).get("dev_fit")
    vn = (fit or {}).get("vs_none") or {}
    if vn and fit.get("best_threshold") is not None:
        # four digits, as README prints it: a fit that moves one answer often differs by under 0.001
        text.append(f"The best dev threshold ({_signed(fit.get('best_threshold'))}, dev F1 {_f(fit.get('f1_at_best'), 4)}) "
                    f"against acting on no dev answer: {_signed(vn.get('delta'), 4)} (95% CI "
                    f"{_signed(vn.get('ci_low'), 4)}, {_signed(vn.get('ci_high'), 4)}), so "
                    + ("the fit keeps it." if vn.get("acts") else "the fit acts on none (a fit must win beyond its CI)."))
    vs = (fit or {}).get("vs_default") or {}
    if vs:
        none = fit.get("fitted_threshold") is None
        best = ("Acting on no dev answer (dev F1 " if none
                else f"The best dev threshold ({_signed(fit.get('fitted_threshold'))}, dev F1 ")
        text.append(f"{best}{_f(fit.get('f1_at_fitted'))}) against the critic's calibrated threshold "
                    f"({_signed(fit.get('calibrated_threshold'))}, {_f(fit.get('f1_at_calibrated'))}): "
                    f"{_signed(vs.get('delta'))} (95% CI {_signed(vs.get('ci_low'))}, {_signed(vs.get('ci_high'))}), so "
                    + ("the calibrated threshold stays (a fit must win beyond its CI)." if vs.get("kept_default")
                       else "the critic acts on no test answer." if none else "the fitted one is used."))
    if fit:
        n, acted = fit.get("n", 0), fit.get("acted", 0)
        if fit.get("acts"):
            text.append(f"On {n} dev answers, correcting the {acted} the critic doubted most (margin above "
                        f"{_signed(fit.get('threshold'))}) gave dev F1 {_f(fit.get('f1_at_threshold'))} against "
                        f"{_f(fit.get('f1_before'))} uncorrected and {_f(fit.get('f1_all'))} correcting every answer, "
                        "so the critic acts above that margin on test.")
            fits = fit.get("fits") or {}
            if fit.get("verify") and fits:
                text.append(f"That fit counts a correction only where the critic judged the new answer less likely "
                            f"wrong than the old one, as it does on test: dev F1 "
                            f"{_f((fits.get('verified') or {}).get('f1_at_threshold'))} against "
                            f"{_f((fits.get('unverified') or {}).get('f1_at_threshold'))} keeping every new answer.")
        else:
            text.append(f"On {n} dev answers no margin threshold made correcting pay (dev F1 {_f(fit.get('f1_before'))} "
                        f"uncorrected, {_f(fit.get('f1_all'))} correcting every answer), so the trained critic corrects "
                        "nothing: RAG-Critic's rows are standard RAG's answers.")
    return text + _flags(metrics.get("degenerate"))


# ------------------------------------------------------------------------------------ 09 / 10 baselines
def _vs_standard(ds: str, scores: Mapping[str, Any], standard_f1: Mapping[str, float] | None) -> str:
    f1 = scores.get("f1")
    line = f"On {ds} the final answers score F1 {_f(f1)}"
    std = (standard_f1 or {}).get(ds)
    if _known(std) and _known(f1):
        line += f" against standard RAG's {_f(std)} on the same questions ({_signed(f1 - std)})"
    return line + "; whether that change is more than noise is tested, paired, in notebook 14."


@_with_provenance
def reading_self_refine(metrics: Mapping[str, Any], *, standard_f1: Mapping[str, float] | None = None) -> list[str]:
    """09_self_refine: how often the feedback approved, how many answers changed, F1 vs standard RAG.

    Args:
        standard_f1: {dataset: standard RAG's mean F1 on the same questions}.
    """
    info = metrics.get("self_refine") or {}
    n = info.get("questions", 0)
    text = [f"Over {n} questions the feedback approved {info.get('approved', 0)} answers "
            f"({_pct(info.get('approval_rate'))}) in {info.get('feedback_calls', 0)} feedback calls, and "
            f"{info.get('refinements', 0)} rewrites were made; {info.get('answers_changed', 0)} final answers differ from "
            "standard RAG's."]
    if n and _share(info.get("approved", 0), n) < 0.05:
        text.append("The feedback almost never approves an answer, so the loop nearly always runs every round: "
                    "it does not act as a check of correctness here.")
    by_type = info.get("feedback_by_type") or {}
    if by_type:
        kinds: dict[str, int] = {}
        for row in by_type.values():
            for k, v in (row.get("kinds") or {}).items():
                kinds[k] = kinds.get(k, 0) + int(v)
        text.append("First-round feedback by kind: " + _counts(dict(sorted(kinds.items(), key=lambda kv: -kv[1])))
                    + "; approval rate per question type: "
                    + ", ".join(f"{t} {_pct(row.get('approval_rate'))} (n {row.get('n', 0)})" for t, row in by_type.items())
                    + ". Samples per type are in the metrics (`self_refine.feedback_by_type`).")
    text += [_vs_standard(ds, s, standard_f1) for ds, s in (metrics.get("scores") or {}).items()]
    return text + _flags(metrics.get("degenerate"))


@_with_provenance
def reading_crag(metrics: Mapping[str, Any], *, standard_f1: Mapping[str, float] | None = None) -> list[str]:
    """10_crag: the tuned thresholds against always taking one action, test actions, F1 vs standard RAG.

    Args:
        standard_f1: {dataset: standard RAG's mean F1 on the same questions}.
    """
    text: list[str] = []
    for ds, c in (metrics.get("crag") or {}).items():
        by_judge = c.get("objective") == "judge_acc" and _known(c.get("dev_judge_acc"))
        key, score = ("judge_acc", "dev_judge_acc") if by_judge else ("f1", "dev_f1")
        per_action = {a: v for a, v in (c.get(f"action_{key}") or {}).items() if _known(v)}
        got = (f"dev judge accuracy {_pct(c.get('dev_judge_acc'))} (F1 {_f(c.get('dev_f1'))})" if by_judge
               else f"dev F1 {_f(c.get('dev_f1'))}")
        line = (f"On {ds} the evaluator was fit on {c.get('train_pairs', 0)} passage pairs "
                f"({_pct(c.get('train_positive_rate'))} relevant); the thresholds (upper {_f(c.get('upper'))}, lower "
                f"{_f(c.get('lower'))}) give {got} on the {c.get('n', 0)} dev questions they were tuned on")
        if per_action and _known(c.get(score)):
            single = max(per_action, key=per_action.get)
            gain = c[score] - per_action[single]
            line += (f", {_signed(gain)} {'judge accuracy' if by_judge else 'F1'} over always taking {single}"
                     + (": the routing adds nothing on dev" if gain <= 1e-9 else ""))
        line += f" (best action per question: {_pct(c.get('oracle_judge_acc')) if by_judge else _f(c.get('oracle_f1'))})"
        text.append(line + ".")
        if c.get("test_actions"):
            text.append(f"Test actions on {ds}: {_counts(c['test_actions'])}.")
        usage = c.get("action_usage") or {}
        for a in usage.get("below_min") or []:
            text.append(f"{a} was taken on {_pct((usage.get('shares') or {}).get(a))} of the {ds} test questions "
                        f"(under {_pct(usage.get('min_share'))}): {(usage.get('why') or {}).get(a, 'no reason recorded')}.")
        by_type = c.get("test_actions_by_type") or {}
        if by_type:
            parts = []
            for t, row in by_type.items():
                n = sum(row.values())
                top = max(row, key=row.get)
                parts.append(f"{t} {top} {_pct(_share(row[top], n))} (n {n})")
            text.append(f"Most frequent action per question type on {ds}: " + ", ".join(parts) + ".")
    text += [_vs_standard(ds, s, standard_f1) for ds, s in (metrics.get("scores") or {}).items()]
    return text + _flags(metrics.get("degenerate"))


# ------------------------------------------------------------------------------------ 11 SIM-RAG
def _mean_f1(records: Sequence[Mapping[str, Any]]) -> float:
    """Mean token F1 of the records' ``prediction`` against their gold answers (0 without records)."""
    from ragcritic_lib.evaluation.scoring import score_prediction

    f1 = [score_prediction(str(r.get("prediction") or ""), list(r.get("golden_answers") or []))["f1"] for r in records]
    return sum(f1) / max(1, len(f1))


def _rate_ci(held: Mapping[str, Any], side: str) -> str:
    """An accept rate with its interval, e.g. "14% (3%-51%)"; "an unmeasured share" without answers."""
    rate, ci = held.get(f"accept_rate_{side}"), held.get(f"accept_rate_{side}_ci")
    if rate is None:
        return "an unmeasured share"
    return f"{_pct(rate)} ({_pct(ci[0])}-{_pct(ci[1])})" if ci else _pct(rate)


@_with_provenance
def reading_simrag(metrics: Mapping[str, Any], records: Sequence[Mapping[str, Any]], *,
                   extra_runs: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]] | None = None) -> list[str]:
    """11_simrag: the self-practice data, the critic's held-out confusion, and the test answers.

    Args:
        metrics: the stage's metrics (``save_method_answers``'s, unrounded).
        records: the test answers of the configured critic (``simrag_accepted``, ``simrag_turns``,
            ``prediction``, ``golden_answers``).
        extra_runs: {file stem: (display name, records)}: the ablation and oracle runs, whose mean
            F1 is quoted beside the main one.
    """
    practice, conf = metrics.get("practice") or {}, metrics.get("heldout_confusion") or {}
    shares = conf.get("shares") or {}
    about = metrics.get("critic") if isinstance(metrics.get("critic"), Mapping) else {"name": metrics.get("critic")}
    held = about.get("heldout") or {}
    accepted = sum(1 for r in records if r.get("simrag_accepted"))
    mean_turns = sum(r.get("simrag_turns", 0) for r in records) / max(1, len(records))
    text = [f"Self-practice gave {metrics.get('practice_examples', 0)} examples ({practice.get('accept', 0)} accepted as "
            f"correct); the {about.get('name') or '?'} critic learned from {practice.get('distinct_train', 0)} distinct "
            f"training examples ({practice.get('train_accept', 0)} Accept; {metrics.get('balanced_train', 0)} after "
            f"balancing by {practice.get('balance', '?')}) and scores {_pct(conf.get('accuracy'))} on {conf.get('n', 0)} "
            f"held-out ones (accepting {_pct(shares.get('wrong_accept'))} wrong and rejecting "
            f"{_pct(shares.get('correct_reject'))} right answers, as shares of all held-out examples).",
            f"Held out, it accepts {_rate_ci(held, 'correct')} of the {held.get('n_correct', 0)} right answers and "
            f"{_rate_ci(held, 'wrong')} of the {held.get('n_wrong', 0)} wrong ones (Wilson 95% intervals); a useful "
            "sufficiency critic accepts the first far more often than the second.",
            f"On the test questions the critic accepted {accepted} of {len(records)} final answers, after "
            f"{_f(mean_turns, 2)} turns on average; mean F1 {_f(_mean_f1(records))}"
            + "".join(f"; {label}: {_f(_mean_f1(recs))}" for label, recs in (extra_runs or {}).values()) + "."]
    return text + _flags(metrics.get("degenerate"))


# ------------------------------------------------------------------------------------ 12 RePAIR
@_with_provenance
def reading_repair(metrics: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                   standard: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """12_repair: the training states and pairs, the test plans executed, and how many answers changed.

    Args:
        metrics: the stage's metrics (``save_method_answers``'s, unrounded).
        records: RePAIR's test answers, in the order of ``standard``'s records.
        standard: {dataset: standard RAG's test records}, the answers RePAIR started from.
    """
    info, states = metrics.get("repair") or {}, (metrics.get("repair") or {}).get("states") or {}
    training = metrics.get("training") or {}
    started = [r for recs in standard.values() for r in recs]
    changed = sum(1 for r, s in zip(records, started) if str(r["prediction"]).strip() != str(s["prediction"]).strip())
    text = [f"The planner trained on {states.get('off', 0)} off-policy and {states.get('on', 0)} on-policy states "
            f"({info.get('offpolicy_pairs', 0)} + {info.get('onpolicy_pairs', 0)} preference pairs"
            + (f", from {training.get('offpolicy_states_with_pair', 0)} + {training.get('onpolicy_states_with_pair', 0)} "
               "states whose candidates earned different rewards" if "offpolicy_states_with_pair" in training else "")
            + "). At test time "
            f"{info.get('executed', 0)} of {info.get('plans', 0)} plans executed ({info.get('distinct_plans', 0)} distinct, "
            f"the most common {_pct(info.get('top_plan_share'))} of them) and {changed} of {len(records)} answers changed."]
    shares = (metrics.get("test") or {}).get("plan_shares") or {}
    if shares:
        text.append("Test plans by share: " + "; ".join(f"`{plan}` {_pct(share)}" for plan, share in
                                                        list(shares.items())[:4])
                    + (f"; {len(shares) - 4} more." if len(shares) > 4 else "."))
    dev = metrics.get("dev") or {}
    scored = {phase: dev[phase] for phase in ("start", "offpolicy", "final") if isinstance(dev.get(phase), Mapping)}
    if scored:
        last = scored.get("final") or list(scored.values())[-1]
        text.append(f"On {last['states']} held-out dev states the planner's picks earned a mean reward of "
                    + ", ".join(f"{_f(d['chosen_reward'])} {name}" for name, d in (
                        ("before training", scored.get("start")), ("after the off-policy phase", scored.get("offpolicy")),
                        ("after both", scored.get("final"))) if d)
                    + f" (the best single plan {_f(last['best_single_reward'])}, the per-state best "
                    f"{_f(last['per_state_best_reward'])}; its most frequent pick took {_pct(last['top_share'])} "
                    "of the states).")
    return text + _flags(metrics.get("degenerate"))


# ------------------------------------------------------------------------------------ 13 RAGEC
@_with_provenance
def reading_ragec(metrics: Mapping[str, Any]) -> list[str]:
    """13_ragec: invalid votes, the stage blamed most often, agreement with RAG-Critic's labels."""
    errors, stages = metrics.get("errors", 0), metrics.get("stages") or {}
    top_stage = max(stages, key=stages.get) if any(stages.values()) else None
    fallbacks = metrics.get("grounded_fallbacks")
    text = [f"RAGEC diagnosed {errors} wrong answers with {metrics.get('votes', 0)} votes; "
            f"{_pct(metrics.get('invalid_vote_rate'))} of the votes named no type of the blamed stage"
            + (f" ({fallbacks} answers fell back to the grounded rule)." if fallbacks else ".")]
    undiagnosed = metrics.get("undiagnosed") or {}
    wrong = sum(int(v.get("wrong", 0)) for v in (metrics.get("answers") or {}).values())
    if undiagnosed:
        text.append(f"Of the {wrong} wrong answers, {sum(undiagnosed.values())} have no diagnosis: "
                    f"{_counts(undiagnosed)}.")
    elif wrong:
        text.append(f"Every one of the {wrong} wrong answers has a diagnosis.")
    if top_stage:
        text.append(f"Most errors are blamed on the {top_stage} stage ({stages[top_stage]} of {errors}); "
                    f"stage counts: {_counts(stages)}.")
    for stage, row in (metrics.get("stage_types") or {}).items():
        if row.get("types"):
            top, k = next(iter(row["types"].items()))
            text.append(f"{stage} (n = {row['n']}): modal type {top} for {k} of them"
                        + (" (too few to read as a distribution)." if row["n"] < 10 else "."))
    agreement = metrics.get("agreement") or {}
    n, critic_right, apart = (int(agreement.get(k) or 0) for k in ("n", "n_critic_correct", "n_missing"))
    # the critic writes tier-1 labels only for answers it calls wrong, in the run it judged (notebook 08)
    why = (f"{apart} were answered otherwise in the run the critic judged (notebook 08's first round), and the "
           f"critic called {critic_right} right, writing no labels for them" if apart or critic_right else "")
    if n:
        text.append(f"Against RAG-Critic's tier-1 labels on {n} shared wrong answers: the two blame the "
                    f"same side {_pct(agreement.get('side_agreement'))} of the time and agree on the type "
                    f"{_pct(agreement.get('type_agreement'))}" + (f"; of the rest, {why}." if why else "."))
    else:
        text.append("No diagnosed answer can be set against RAG-Critic's tier-1 labels"
                    + (f": {why}." if why else "."))
    return text + _flags(metrics.get("degenerate"))


# ------------------------------------------------------------------------------------ 14 comparison
def comparison_block(dataset: str, block: Mapping[str, Mapping[str, Any]], summary: Mapping[str, Any],
                     flags: Mapping[str, Sequence[str]] | None = None, *, baseline: str = "standard RAG",
                     alpha: float = 0.05) -> str:
    """A short Markdown reading of one dataset's comparison (Holm-corrected), written from its numbers.

    Args:
        block: ``method_comparison``'s rows; summary: ``comparison_summary``'s dict;
        flags: {method: degenerate reasons}, quoted after the method's line.
    """
    base = block[baseline]
    lines = [f"On {dataset} ({base['n']} questions) {baseline} scores F1 {base['f1']:.3f}. With this many "
             f"questions a change of about {summary['mde_conservative']:.3f} F1 is detectable at 80% power "
             "(conservative MDE); each method's paired MDE is in the table."]
    for name, row in block.items():
        if name == baseline:
            continue
        p_holm = row.get("p_holm")
        known = p_holm is not None and p_holm == p_holm
        if known and p_holm < alpha:
            side = "above" if row["delta_f1"] > 0 else "below"
            verdict = f"{side} {baseline} after Holm correction (p {p_holm:.3g})"
        else:
            verdict = f"not distinguishable from {baseline} after Holm correction" + (f" (p {p_holm:.3g})" if known else "")
        why = (flags or {}).get(name)
        flagged = f"; flagged degenerate: {'; '.join(why)}" if why else ""
        judged = ""
        if row.get("delta_judge_acc") is not None:
            jp = row.get("judge_p_holm")
            judged = (f"; judged right {row['judge_acc']:.3f}, change {row['delta_judge_acc']:+.3f} (95% CI "
                      f"{row['judge_ci_low']:+.3f}..{row['judge_ci_high']:+.3f}"
                      + (f", Holm p {jp:.3g})" if jp is not None and jp == jp else ")"))
        lines.append(f"- **{name}**: F1 {row['f1']:.3f}, change {row['delta_f1']:+.3f} "
                     f"(95% CI {row['ci_low']:+.3f}..{row['ci_high']:+.3f}), {verdict}{judged}{flagged}.")
    return "\n".join(lines)


@_with_provenance
def reading_comparison(metrics: Mapping[str, Any], *, alpha: float = 0.05) -> list[str]:
    """14_comparison: per dataset, every method against standard RAG after Holm correction.

    Args:
        metrics: the stage's metrics: ``comparison`` ({dataset: method rows}), ``summary``
            ({dataset: comparison summary}) and ``degenerate_by_method`` (flags quoted per method).
        alpha: the level the Holm-corrected p-values are read at.
    """
    summaries, flags = metrics.get("summary") or {}, metrics.get("degenerate_by_method")
    return [comparison_block(ds, block, summaries[ds], flags, alpha=alpha)
            for ds, block in (metrics.get("comparison") or {}).items()]


# ------------------------------------------------------------------------------------ 15 analysis
@_with_provenance
def reading_analysis(metrics: Mapping[str, Any]) -> list[str]:
    """15_analysis: what was built, what inputs are missing, and the headline RAG-Critic change."""
    built, partial, missing = metrics.get("built") or [], metrics.get("partial") or [], metrics.get("missing") or []
    text = [f"{len(built)} of {metrics.get('items', 0)} paper items were built into {metrics.get('files', 0)} files"
            + (f"; partial: {', '.join(partial)}" if partial else "")
            + (f"; not built: {', '.join(metrics['not_built'])}" if metrics.get("not_built") else "") + "."]
    text += [f"Missing input for {m.get('item')}: {m.get('input')} {m.get('key') or ''} ({m.get('reason')})."
             for m in missing]
    for ds, rows in (metrics.get("headline") or {}).items():
        rc, std = rows.get("RAG-Critic"), rows.get("Standard RAG") or {}
        if not rc:
            continue
        row = {"f1": rc.get("f1"), "delta_f1": rc.get("d_f1"), "ci_low": rc.get("d_f1_low"),
               "ci_high": rc.get("d_f1_high"), "p_holm": rc.get("p_holm")}
        text.append(f"Headline on {ds} (standard RAG F1 {_f(std.get('f1'))}):\n"
                    + change_sentence("RAG-Critic", row, p_key="p_holm", p_label="Holm p", baseline="Standard RAG"))
    agreement = metrics.get("standard_rag_agreement") or {}
    quotes = agreement.get("quotes") or {}
    if agreement.get("agree"):
        q = next(iter(quotes.values()))
        text.append(f"Standard RAG on the {agreement.get('dataset')} test questions is quoted alike by "
                    f"{', '.join(quotes)} (F1 {_f(q.get('f1'))} on {q.get('n')} questions): one chain, one set of numbers.")
    return text + _flags(metrics.get("degenerate"))
