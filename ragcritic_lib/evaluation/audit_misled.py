"""Answers to audit that the pipeline's own answers lack: the generator misled by its passages.

    python -m ragcritic_lib.evaluation.audit_misled [--out data/audit/misled.jsonl]
        [--per-split 24] [--seed 0] [--more-variants default,terse] [--more-for superseded]

The judge audit must hold answers that state a superseded value or a near-duplicate entity's
value, the cases where a judge that only looks for the gold can be fooled. The embedded
default's generator, reading the passages its retriever ranks first, almost never writes them
(none of notebooks 01 and 02's answers on an answerable question does). This module makes the
generator meet the passages that mislead in practice, as a retriever that ranks them first
would hand them over when it misses the current passage: for testbed questions whose metadata
names a twin entity (``distractor_passage_ids``, ``distractor_answers``), the twin's passage
stating its value, then the twin's other passages; for questions with a superseded value
(``outdated_answers``), the passages about the question's entities that state it. (With the
question's own supporting passage beside them, the generator kept to the current value or
abstained on all but 2 of 94 questions.) The
answer is written exactly as standard RAG writes it (notebook 01's prompt variant, passage
length, token budget and answer extraction) by the configured generator, through the LLM cache.

This is evaluation data, not a method: the metadata chooses which passages the generator reads,
never what the answer is, and no answer is labelled here. Each record keeps the question's
fields and the passages it read, with ``misled_by`` (``near_duplicate`` or ``superseded``);
:mod:`ragcritic_lib.evaluation.audit_draw` reads the file as the ``misled`` source (train and dev
questions choose, test questions report).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.evaluation.scoring import contains_answer
from ragcritic_lib.io import read_jsonl, write_jsonl

DEFAULT_OUT = "data/audit/misled.jsonl"
SPLITS = ("train", "dev", "test")
MISLEADERS = ("near_duplicate", "superseded")
_K = 3  # passages per prompt, as standard RAG's top_k


def _stating(passages: Sequence[Mapping[str, Any]], values: Sequence[str]) -> list[Mapping[str, Any]]:
    return [p for p in passages if values and contains_answer(str(p.get("contents", "")), list(values))]


def misleading_passages(question: Mapping[str, Any], corpus: Mapping[str, Mapping[str, Any]],
                        by_value: Mapping[str, list[Mapping[str, Any]]], kind: str) -> list[Mapping[str, Any]]:
    """The passages a question's ``kind`` of misleader hands the generator (at most three, none of
    the question's supporting passages); [] when there is none.

    ``corpus``: passages by id; ``by_value``: a misleading value -> the passages that state it."""
    meta = question.get("metadata") or {}
    support = [corpus[i] for i in meta.get("supporting_ids") or [] if i in corpus]
    if kind == "near_duplicate":
        twin = [corpus[i] for i in meta.get("distractor_passage_ids") or [] if i in corpus]
        lead = _stating(twin, [str(v) for v in meta.get("distractor_answers") or []])
    elif kind == "superseded":
        values = [str(v) for v in meta.get("outdated_answers") or []]
        own = set(meta.get("entity_ids") or [])  # the older report about one of the question's entities
        lead = [p for v in values for p in by_value.get(v, []) if p not in support
                and own & set((p.get("metadata") or {}).get("entity_ids") or [])]
    else:
        raise ValueError(f"unknown misleader {kind!r}; choose from {MISLEADERS}")
    if not lead:
        return []
    # A retriever that missed the current passage: the misleading ones only (the twin's others
    # after the one stating its value).
    rest = [p for p in (twin if kind == "near_duplicate" else []) if p not in lead]
    out: list[Mapping[str, Any]] = []
    for p in [*lead, *rest]:
        if p not in out:
            out.append(p)
    return out[:_K]


def _value_index(corpus: Sequence[Mapping[str, Any]], values: set[str]) -> dict[str, list[Mapping[str, Any]]]:
    index: dict[str, list[Mapping[str, Any]]] = {v: [] for v in values}
    for p in corpus:
        text = str(p.get("contents", ""))
        for v in values:
            if v in text and contains_answer(text, [v]):
                index[v].append(p)
    return index


def misled_questions(testbed_dir: Path, *, per_split: int, seed: int) -> list[tuple[dict[str, Any], str, list]]:
    """(question, misleader, passages) for up to ``per_split`` questions per split and misleader,
    answerable testbed questions only, in a seeded order."""
    corpus_rows = list(read_jsonl(testbed_dir / "corpus.jsonl"))
    corpus = {str(p["id"]): p for p in corpus_rows}
    questions = {split: list(read_jsonl(testbed_dir / f"{split}.jsonl")) for split in SPLITS}
    outdated = {str(v) for qs in questions.values() for q in qs for v in (q.get("metadata") or {}).get("outdated_answers") or []}
    by_value = _value_index(corpus_rows, outdated)
    rng = random.Random(f"{seed}|misled")
    chosen = []
    for split in SPLITS:
        for kind in MISLEADERS:
            pool = []
            for q in questions[split]:
                meta = q.get("metadata") or {}
                if not meta.get("answerable", True):
                    continue
                passages = misleading_passages(q, corpus, by_value, kind)
                if passages:
                    pool.append((q, kind, passages))
            rng.shuffle(pool)
            chosen.extend(pool[:per_split])
    return chosen


def answer_misled(llm: Any, chosen: Sequence[tuple[Mapping[str, Any], str, list]], *, variant: str,
                  max_passage_words: int, max_new_tokens: int, member_suffix: str = "") -> list[dict[str, Any]]:
    """Standard RAG's answer to each question over its misleading passages (``pool_member``
    ``misled-<misleader><member_suffix>``)."""
    from ragcritic_lib.retrieval.base import Hit
    from ragcritic_lib.retrieval.rag import answer_gen_params, run_standard_rag

    records = [dict(q, split=q.get("split") or str(q["id"]).split("-")[1]) for q, _, _ in chosen]
    hits = [[Hit(str(p["id"]), float(len(ps) - i), str(p["contents"])) for i, p in enumerate(ps)] for _, _, ps in chosen]
    out = run_standard_rag(llm, records, retriever=None, k=_K, variant=variant,
                           gen_params=answer_gen_params(variant, max_new_tokens),
                           max_passage_words=max_passage_words, hits=hits, desc="misled")
    for row, (_, kind, _) in zip(out, chosen):
        row["misled_by"] = kind
        row["pool_member"] = f"misled-{kind}{member_suffix}"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ragcritic_lib.evaluation.audit_misled",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--per-split", type=int, default=24, help="questions per split and misleader")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--more-variants", default="",
                    help="comma-separated RAG prompt variants to answer with as well (as the error pool's members "
                         "differ), for the misleaders named by --more-for")
    ap.add_argument("--more-for", default="superseded", help="comma-separated misleaders the extra variants answer")
    args = ap.parse_args(argv)
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.runtime import load_generator

    params = load_params()
    rr = params["retrieval_rag"]
    testbed_dir = paths.DATA_DIR / "testbed"
    if not (testbed_dir / "corpus.jsonl").exists():
        print(f"{testbed_dir}: no testbed; run `dvc repro testbed` first", file=sys.stderr)
        return 1
    chosen = misled_questions(testbed_dir, per_split=args.per_split, seed=args.seed)
    llm = load_generator(params)
    common = dict(max_passage_words=int(rr["max_passage_words"]), max_new_tokens=int(rr["max_new_tokens"]))
    rows = answer_misled(llm, chosen, variant=str(rr["prompt_variant"]), **common)
    more_for = {k.strip() for k in args.more_for.split(",") if k.strip()}
    for variant in [v.strip() for v in args.more_variants.split(",") if v.strip()]:
        if variant != rr["prompt_variant"]:
            rows += answer_misled(llm, [c for c in chosen if c[1] in more_for], variant=variant,
                                  member_suffix=f"-{variant}", **common)
    keep = ("id", "split", "question", "golden_answers", "metadata", "passages", "prediction", "truncated",
            "pool_member", "misled_by")
    out = paths.resolve(args.out)
    write_jsonl(out, [{k: r[k] for k in keep if k in r} for r in rows])
    print(f"{len(rows)} misled answers -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
