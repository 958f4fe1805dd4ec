"""Can a cross-encoder, or the reader itself, tell an unanswerable question from its passages, and
what would gating the correction ladder's abstain path on it have done? Replayed from shipped
stages 01 and 08; only the reader signal runs the generator (one scoring pass a question).

The ladder's abstain path (``agent.actions``: a critique naming an unsupported answer, a new
answer the passages do not hold or that repeats the rejected one) fires far more often on
answerable questions than on unanswerable ones, and every firing on an answerable question turns
an answer into "insufficient information" (``benchmarks/bench_abstain_replay.py`` counts them).
A gate that lets the path fire only where the passages do not seem to hold an answer to the
question would keep the gain on unanswerable questions and drop most of the loss.

Two candidate signals, both general, neither the testbed's (``--signal``):

- ``support``: the question's **support score**, the highest relevance logit the ms-marco
  cross-encoder (``retriever.reranker``, the one the action layer already uses) gives to any
  sentence of the retrieved passages, each sentence with its passage's title (``"Title. sentence"``);
- ``reader``: the **reader's own abstention**, the log-probability the generator gives to
  "insufficient information" as its answer, continuing the very prompt standard RAG answered
  (stage 01's ``messages``, its answer prefix prefilled); a higher one means the reader itself
  leans to "the passages do not say". Scored beside the reader's own answer in one call
  (:func:`reader_abstain_scores`), so a second run reads the LLM cache;
- ``trained``: a **learned answerability judge**, the embedded sentence encoder (all-MiniLM-L6-v2,
  ``critic_body.verifier_model``) fine-tuned with a one-logit head (``critic.verifier.train_pairs``)
  on the *train* questions, retrieved as stage 01 retrieves (``retrieval_rag.top_k``), each labelled
  unanswerable or not by its gold answers (training labels only; dev picks the checkpoint, test is
  never seen). Four views are trained and reported side by side (:func:`answerability_rows`):
  ``passages`` (the question, then its passages' sentences), ``contrast`` (the same view, trained
  on pairs in which the question cannot tell the label, :func:`contrast_rows`), ``sentences`` (one row per passage
  sentence, labelled by whether it holds a gold answer; a question scores its best sentence) and
  ``question`` (the question alone: a control that measures how much of the signal is the
  question's wording, i.e. which attributes a dataset tends to leave unanswered, rather than
  reading the passages). The gate is replayed with the first view unless ``--view`` names another.

This prints

- the signal's AUROC for "unanswerable" (a low score predicts it: the support score, or minus the
  abstention's log-probability) on the dev and the test questions of ``data/retrieval_rag/<dataset>`` (the ladder's first ``--test-questions``), with
  percentile bootstrap 95% intervals over questions;
- a threshold fitted on dev only (the best balanced accuracy on dev's answerability; ties to the
  lower threshold, which fires less) and its true and false positive rates on test;
- for every run file of ``data/correction/<dataset>/``: the mean F1 before, as run, with the
  abstain path gated at that threshold (the reader's own answer restored where the gate says the
  passages hold an answer, as ``bench_abstain_replay.replay`` restores it), and with an oracle gate
  that knows which questions are unanswerable (labelled: it reads the gold answers); the gated
  difference to "as run" with its paired bootstrap 95% interval and MDE.

Numbers only, no asserts. The gate is a design under measurement, not part of any stage; a stage
gains it only when these numbers say the difference exceeds its interval on dev.

    .venv/bin/python benchmarks/bench_answerability.py
    .venv/bin/python benchmarks/bench_answerability.py --dataset testbed --test-questions 280
    .venv/bin/python benchmarks/bench_answerability.py --signal reader   # about 14 min on 2 AVX2 cores
    .venv/bin/python benchmarks/bench_answerability.py --signal trained  # four fine-tunings, about 30 min on 2 AVX2 cores
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import read_jsonl


def sentence_units(passages: Sequence[Any]) -> list[str]:
    """Every sentence of the passages, each prefixed with its passage's title ("Title. sentence");
    a passage is a ``{"contents": "Title\\ntext"}`` record or that text itself."""
    from ragcritic_lib.agent.actions import split_sentences, split_title

    units: list[str] = []
    for p in passages:
        text = p.get("contents", "") if isinstance(p, Mapping) else str(p)
        title, body = split_title(str(text))
        for s in split_sentences(body) or ([body] if body else []):
            units.append(f"{title}. {s}" if title else s)
    return units


def support_scores(score_pairs, questions: Sequence[str], passages: Sequence[Sequence[Any]]) -> list[float]:
    """Per question, the highest ``score_pairs(queries, texts)`` logit over its sentence units
    (-inf for a question without passages, so it ranks as the least supported)."""
    queries, texts, owner = [], [], []
    for i, (q, ps) in enumerate(zip(questions, passages)):
        for u in sentence_units(ps):
            queries.append(str(q))
            texts.append(u)
            owner.append(i)
    best = [float("-inf")] * len(questions)
    if queries:
        for i, s in zip(owner, score_pairs(queries, texts)):
            best[i] = max(best[i], float(s))
    return best


VIEWS = ("passages", "contrast", "sentences", "question")


def holds_answer(text: str, golds: Sequence[str]) -> bool:
    """Whether a normalized gold answer (of at least two characters, not an abstention) occurs in
    ``text`` as a run of whole words."""
    from ragcritic_lib.evaluation.scoring import normalize_answer
    from ragcritic_lib.evaluation.truth import is_unanswerable

    body = f" {normalize_answer(text)} "
    for g in golds:
        n = normalize_answer(str(g))
        if len(n) >= 2 and not is_unanswerable([str(g)]) and f" {n} " in body:
            return True
    return False


def answerability_rows(records: Sequence[Mapping[str, Any]], view: str) -> tuple[list[tuple[str, str, bool]], list[int]]:
    """Training or scoring rows of one view and the record each row belongs to.

    ``passages``: one row a record, (question, its passages' sentence units joined), labelled
    unanswerable by its gold answers; ``contrast``: the same (the view scores as ``passages`` does;
    it differs in training, :func:`contrast_rows`); ``question``: an empty second segment;
    ``sentences``: one row per sentence unit, labelled True where the unit does **not** hold a
    gold answer (so that, as in the other views, a high logit leans to "unanswerable" and a
    question's score is its lowest row). Labels read the gold answers: they train and evaluate,
    a gate never sees them.

    Raises:
        ValueError: an unknown view, or a record without a question.
    """
    from ragcritic_lib.evaluation.truth import is_unanswerable

    if view not in VIEWS:
        raise ValueError(f"answerability_rows: view must be one of {VIEWS}, got {view!r}")
    rows: list[tuple[str, str, bool]] = []
    owner: list[int] = []
    for i, r in enumerate(records):
        q = " ".join(str(r.get("question") or "").split())
        if not q:
            raise ValueError(f"answerability_rows: record {r.get('id', i)!r} has no question")
        golds = [str(g) for g in r.get("golden_answers") or []]
        unanswerable = is_unanswerable(golds)
        units = sentence_units(r.get("passages") or [])
        if view == "sentences":
            for u in units or [""]:
                rows.append((q, u, unanswerable or not holds_answer(u, golds)))
                owner.append(i)
        else:
            rows.append((q, "" if view == "question" else " ".join(units), unanswerable))
            owner.append(i)
    return rows, owner


def contrast_rows(records: Sequence[Mapping[str, Any]], k: int) -> list[tuple[str, str, bool]]:
    """Training rows in which the question's wording cannot tell the label: for every answerable
    record whose ranked ``passages`` (retrieved deeper than ``k``) hold a gold answer both in its
    top ``k`` and not in ``k`` others, two rows, (question, the top ``k``) labelled answerable and
    (question, the first ``k`` passages that do not hold the answer) labelled unanswerable. The same
    question appears under both labels, so only reading the passages separates them; unanswerable
    records are left out (their wording alone would carry the label)."""
    from ragcritic_lib.evaluation.truth import is_unanswerable

    rows: list[tuple[str, str, bool]] = []
    for r in records:
        golds = [str(g) for g in r.get("golden_answers") or []]
        if is_unanswerable(golds):
            continue
        q = " ".join(str(r.get("question") or "").split())
        ranked = [sentence_units([p]) for p in r.get("passages") or []]
        held = [holds_answer(" ".join(u), golds) for u in ranked]
        without = [u for u, h in zip(ranked, held) if not h][:k]
        if not q or not any(held[:k]) or len(without) < k:
            continue
        rows.append((q, " ".join(x for u in ranked[:k] for x in u), False))
        rows.append((q, " ".join(x for u in without for x in u), True))
    return rows


def per_record(scores: Sequence[float], owner: Sequence[int], n: int) -> list[float]:
    """Per record, the lowest score of its rows (its best-supported row), negated so that, like the
    support score, a low value predicts "unanswerable"."""
    best = [float("inf")] * n
    for i, s in zip(owner, scores):
        best[i] = min(best[i], float(s))
    return [-b for b in best]


def retrieve_records(retriever: Any, records: Sequence[Mapping[str, Any]], k: int) -> list[dict[str, Any]]:
    """``records`` with ``passages``: the retriever's top ``k`` for each question, in the record
    form stage 01 writes."""
    hits = retriever.search([str(r["question"]) for r in records], k) if records else []
    return [{**r, "passages": [h.to_record() for h in hs]} for r, hs in zip(records, hits)]


def reader_prompt(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Standard RAG's prompt with the answer slot open: the record's messages as they are when they
    end with a prefilled assistant turn (the ``prefill`` variant), else with the answer prefix
    (``So the final answer is:``) added as that turn.

    Raises:
        ValueError: no messages, or a message without a role or content.
    """
    from ragcritic_lib.retrieval.rag import ANSWER_PREFIX

    if not messages:
        raise ValueError("reader_prompt: the record has no messages (stage 01 writes them)")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise ValueError(f"reader_prompt: message {i} needs a role and a content; got {m!r:.80}")
        out.append({"role": str(m["role"]), "content": str(m["content"])})
    if out[-1]["role"] != "assistant":
        out.append({"role": "assistant", "content": ANSWER_PREFIX})
    return out


def reader_abstain_scores(llm: Any, records: Sequence[Mapping[str, Any]], *,
                          desc: str | None = None) -> list[dict[str, float]]:
    """Per standard-RAG record: ``abstain``, the total log-probability of " insufficient
    information" in its answer slot (:func:`reader_prompt`), and ``own``, that of the answer the
    reader gave (``prediction``), with ``abstain_tokens`` and ``own_tokens`` their token counts; one
    ``llm.score`` call."""
    from ragcritic_lib.retrieval.rag import ABSTAIN_ANSWER

    prompts = [reader_prompt(r.get("messages") or []) for r in records]
    options = [[f" {ABSTAIN_ANSWER}", " " + " ".join(str(r.get("prediction") or "").split())] for r in records]
    scores = llm.score(prompts, options, desc=desc) if records else []
    return [{"abstain": float(s[0]), "own": float(s[1]), "abstain_tokens": float(max(1, llm.count_tokens(o[0]))),
             "own_tokens": float(max(1, llm.count_tokens(o[1])))} for s, o in zip(scores, options)]


def fit_threshold(scores: Sequence[float], unanswerable: Sequence[bool]) -> tuple[float, float]:
    """(threshold, balanced accuracy): the cut ``score < threshold`` predicting "unanswerable" with
    the best balanced accuracy over the observed scores; ties go to the lower threshold.

    Raises:
        ValueError: no scores, or only one class.
    """
    pos = sum(bool(u) for u in unanswerable)
    neg = len(unanswerable) - pos
    if not scores or pos == 0 or neg == 0:
        raise ValueError(f"fit_threshold: needs both classes; got {pos} unanswerable and {neg} answerable")
    best_t, best_b = float("-inf"), -1.0
    for t in sorted({*scores, float("inf")}):
        tp = sum(1 for s, u in zip(scores, unanswerable) if u and s < t)
        tn = sum(1 for s, u in zip(scores, unanswerable) if not u and s >= t)
        b = 0.5 * (tp / pos + tn / neg)
        if b > best_b + 1e-12:
            best_t, best_b = t, b
    return best_t, best_b


def gated_f1(rows: Sequence[Mapping[str, Any]], allow_abstain: Sequence[bool]) -> list[float]:
    """Per replayed row (``bench_abstain_replay.replay``): its F1 as run where the abstain path did
    not fire or the gate allows it, else the reader's own answer's F1 (``restored``)."""
    return [r["after"] if (not r["fired"] or ok) else r["restored"] for r, ok in zip(rows, allow_abstain)]


def train_views(params: Mapping[str, Any], args: argparse.Namespace, rag: Path) -> dict[str, Any]:
    """One fine-tuned encoder per view, on the train questions retrieved as stage 01 retrieves;
    each keeps its best dev checkpoint (dev AUROC for "unanswerable"). Prints what each cost."""
    import time

    from ragcritic_lib import runtime
    from ragcritic_lib.critic.verifier import EncoderVerifier, VerifierSettings, train_pairs
    from ragcritic_lib.evaluation.truth import is_unanswerable
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    t0 = time.time()
    k = int(params["retrieval_rag"]["top_k"])
    deep = retrieve_records(runtime.load_retriever(params, args.dataset),
                            runtime.load_split(params, args.dataset, "train"), max(k, 10))
    train = [{**r, "passages": r["passages"][:k]} for r in deep]
    dev = list(read_jsonl(rag / "dev.jsonl"))
    dev_labels = [is_unanswerable(r.get("golden_answers") or []) for r in dev]
    print(f"train: {len(train)} questions retrieved (top {k}) in {time.time() - t0:.0f} s, "
          f"{sum(is_unanswerable(r['golden_answers']) for r in train)} unanswerable; cpu {cpu_class()}", flush=True)
    out = {}
    for view in args.views:
        rows = contrast_rows(deep, k) if view == "contrast" else answerability_rows(train, view)[0]
        dev_rows, dev_owner = answerability_rows(dev, view)
        model = EncoderVerifier(paths.resolve(params["critic_body"]["verifier_model"]), max_length=256, seed=13)
        # The sentence view has about 16 rows a question: one pass over them already sees each
        # question's passages more often than the other views' epochs do.
        epochs = min(args.epochs, 1.0) if view == "sentences" else args.epochs
        settings = VerifierSettings(epochs=epochs, train_layers=args.train_layers, learning_rate=args.learning_rate, batch_size=16,
                                    eval_every=max(200, len(rows) // 4), seed=13)
        if view == "sentences":
            report = _train_sentences(model, rows, dev_rows, dev_owner, dev_labels, settings)
        else:
            report = train_pairs(model, rows, [(a, b) for a, b, _ in dev_rows], dev_labels, settings)
        print(f"view {view}: {len(rows)} rows ({sum(y for *_, y in rows)} labelled unanswerable), "
              f"{report.steps} steps in {report.seconds:.0f} s; dev AUROC by checkpoint "
              f"{[c['dev_auroc'] for c in report.curve]}, kept {report.best_dev_auroc}", flush=True)
        out[view] = model
    return out


def _train_sentences(model: Any, rows, dev_rows, dev_owner, dev_labels, settings) -> Any:
    """``train_pairs`` for the sentence view: the checkpoint is chosen by the per-sentence dev
    AUROC (does this sentence hold the answer), and the report's ``best_dev_auroc`` is then
    replaced by the per-question one the gate reads (each dev question's best sentence)."""
    from ragcritic_lib.critic.verifier import train_pairs
    from ragcritic_lib.evaluation.stats import auroc

    report = train_pairs(model, rows, [(a, b) for a, b, _ in dev_rows], [y for *_, y in dev_rows], settings)
    got = per_record(model.scores([(a, b) for a, b, _ in dev_rows]), dev_owner, len(dev_labels))
    report.best_dev_auroc = round(auroc([-s for s in got], dev_labels) or 0.0, 4)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="testbed")
    ap.add_argument("--test-questions", type=int, default=280, help="the first N test questions (the ladder's)")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--signal", choices=("support", "reader", "trained"), default="support",
                    help="support: the cross-encoder's best sentence; reader: the generator's log-probability of "
                         "abstaining; trained: an encoder fine-tuned on the train questions' answerability")
    ap.add_argument("--view", choices=VIEWS, default="passages", help="with --signal trained: the view the gate uses")
    ap.add_argument("--views", nargs="+", choices=VIEWS, default=list(VIEWS), help="with --signal trained: the views trained")
    ap.add_argument("--epochs", type=float, default=3.0, help="with --signal trained")
    ap.add_argument("--train-layers", type=int, default=6, help="with --signal trained: top encoder layers trained")
    ap.add_argument("--learning-rate", type=float, default=5e-5, help="with --signal trained: the encoder's (the head's is 1e-3)")
    args = ap.parse_args()
    if args.signal == "trained" and args.view not in args.views:
        ap.error(f"--view {args.view} is not among the --views trained ({' '.join(args.views)})")

    import importlib.util

    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci, paired_comparison
    from ragcritic_lib.evaluation.truth import is_unanswerable
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.retrieval.rerank import CrossEncoderReranker

    spec = importlib.util.spec_from_file_location("bench_abstain_replay", Path(__file__).with_name("bench_abstain_replay.py"))
    replay_mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(replay_mod)  # type: ignore[union-attr]

    params = load_params()
    rag = paths.resolve(f"data/retrieval_rag/{args.dataset}")
    runs = paths.resolve(f"data/correction/{args.dataset}")
    missing = [str(p) for p in (rag / "dev.jsonl", rag / "test.jsonl") if not p.exists()]
    if missing:
        raise SystemExit(f"no {', '.join(missing)} (run or restore stage 01 first)")
    if args.signal == "support":
        reranker = CrossEncoderReranker(params["common"]["retriever"]["reranker"])
    elif args.signal == "reader":
        from ragcritic_lib import runtime

        llm = runtime.load_generator(params)
    else:
        trained = train_views(params, args, rag)
    name = {"support": "support-score", "reader": "reader-abstention", "trained": f"trained-{args.view}"}[args.signal]

    split_scores: dict[str, dict[str, tuple[float, bool]]] = {}
    for split, limit in (("dev", 0), ("test", args.test_questions)):
        recs = list(read_jsonl(rag / f"{split}.jsonl"))
        recs = recs[:limit] if limit else recs
        if args.signal == "support":
            scores = support_scores(reranker.score_pairs, [r["question"] for r in recs],
                                    [r.get("passages") or [] for r in recs])
        elif args.signal == "trained":
            labels = [is_unanswerable(r.get("golden_answers") or []) for r in recs]
            for view, model in trained.items():
                rows, owner = answerability_rows(recs, view)
                got = per_record(model.scores([(a, b) for a, b, _ in rows]), owner, len(recs))
                if view == args.view:
                    scores = got
                lo, hi = bootstrap_auroc_ci([-s for s in got], labels, seed=0, n_boot=args.n_boot)
                print(f"  {split} view {view}: AUROC {auroc([-s for s in got], labels):.3f} ({lo}, {hi})", flush=True)
        else:
            reader = reader_abstain_scores(llm, recs, desc=f"reader {split}")
            # A low score predicts "unanswerable", as the support score: minus the abstention's log-probability.
            scores = [-r["abstain"] for r in reader]
        labels = [is_unanswerable(r.get("golden_answers") or []) for r in recs]
        split_scores[split] = {str(r["id"]): (s, u) for r, s, u in zip(recs, scores, labels)}
        neg = [-s for s in scores]  # a low score predicts "unanswerable"
        lo, hi = bootstrap_auroc_ci(neg, labels, seed=0, n_boot=args.n_boot)
        print(f"{split}: {len(recs)} questions, {sum(labels)} unanswerable; {name} AUROC "
              f"{auroc(neg, labels):.3f} ({lo}, {hi}); mean score answerable "
              f"{sum(s for s, u in zip(scores, labels) if not u) / max(1, len(labels) - sum(labels)):.2f}, "
              f"unanswerable {sum(s for s, u in zip(scores, labels) if u) / max(1, sum(labels)):.2f}", flush=True)
        if args.signal == "reader":
            # The same, per token and against the reader's own answer: abstaining rather than what it said.
            rel = [r["abstain"] / r["abstain_tokens"] - r["own"] / r["own_tokens"] for r in reader]
            lo, hi = bootstrap_auroc_ci(rel, labels, seed=0, n_boot=args.n_boot)
            print(f"  per token, abstention minus own answer: AUROC {auroc(rel, labels):.3f} ({lo}, {hi})", flush=True)

    dev = list(split_scores["dev"].values())
    t, bal = fit_threshold([s for s, _ in dev], [u for _, u in dev])
    test = list(split_scores["test"].values())
    tpr = sum(1 for s, u in test if u and s < t) / max(1, sum(u for _, u in test))
    fpr = sum(1 for s, u in test if not u and s < t) / max(1, sum(not u for _, u in test))
    print(f"threshold fitted on dev: {name} < {t:.3f} (dev balanced accuracy {bal:.3f}); on test it flags "
          f"{tpr:.0%} of the unanswerable and {fpr:.0%} of the answerable questions", flush=True)

    known = {**split_scores["dev"], **split_scores["test"]}
    for f in sorted(Path(runs).glob("*.jsonl")):
        recs = [r for r in read_jsonl(f) if str(r.get("id")) in known]
        if not recs:
            continue
        rows = [replay_mod.replay(r) for r in recs]
        if not any(r["fired"] for r in rows):
            continue
        gate = [known[str(r["id"])][0] < t for r in recs]
        oracle = [bool(r["unanswerable"]) for r in rows]
        after = [r["after"] for r in rows]
        gated = gated_f1(rows, gate)
        cmp = paired_comparison(gated, after, n_boot=args.n_boot, n_perm=2000, seed=0)
        n = len(rows)
        print(f"{f.name}: n={n}, fired {sum(r['fired'] for r in rows)} (gate keeps "
              f"{sum(r['fired'] and g for r, g in zip(rows, gate))}); F1 before {sum(r['before'] for r in rows) / n:.4f}, "
              f"as run {sum(after) / n:.4f}, gated {sum(gated) / n:.4f}, oracle gate (reads the gold) "
              f"{sum(gated_f1(rows, oracle)) / n:.4f}; gated - as run {cmp['delta']:+.4f} "
              f"({cmp['ci_low']:+.4f}, {cmp['ci_high']:+.4f}), MDE {cmp['mde']:.4f}", flush=True)


if __name__ == "__main__":
    main()
