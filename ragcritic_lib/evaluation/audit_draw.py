"""Draw the judge audit's rows: an unlabelled, stratified sample of real answers.

    python -m ragcritic_lib.evaluation.audit_draw [--out data/audit/draw.jsonl] [--n 300]
        [--min-test 100] [--min-kind 15] [--seed 0] [--append-kinds KIND,...]

Candidates are the answers the pipeline has written, where present: notebook 02's pool answers
(``data/error_sampling/samples/*.jsonl``, split ``error_sampling.split``) and notebook 01's
generator answers on dev (choosing rows), notebook 01's generator answers on test and notebook
07's test pool (``data/benchmark/test_pool/*.jsonl``; test rows), and the answers over misleading
passages of :mod:`ragcritic_lib.evaluation.audit_misled` (``data/audit/misled.jsonl``; the role by
each question's split). Each gets a kind from its
answer's form against its gold answers and metadata (:func:`ragcritic_lib.evaluation.audit.answer_kind`);
no score, judge or label is read, and none is written: every row leaves with ``label`` and
``reason`` null and without em/f1/acc, for a reader to fill in (data/audit/README.md).

The draw first gives every kind ``min_kind`` rows where the answers hold that many (alternating
test and choosing rows), then tops the test rows up to ``min_test``, then fills to ``n`` taking
one row per (role, kind) group in turn, rarest groups first. Seeded: the same answers and seed
give the same draw. ``--append-kinds k1,k2`` instead appends ``min_kind`` rows of those kinds
to an existing draw from answers it does not hold (how the audit gained its misled rows).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.evaluation.audit import KINDS, REQUIRED_KINDS, ROLES, SPLIT_ROLE, answer_kind
from ragcritic_lib.evaluation.scoring import normalize_words
from ragcritic_lib.io import read_jsonl, read_yaml, write_jsonl

DEFAULT_OUT = "data/audit/draw.jsonl"
MISLED = "data/audit/misled.jsonl"  # answers over misleading passages (audit_misled), where written
# What a reader needs beside the answer; scores and judge outputs are left behind on purpose.
_KEPT = ("id", "question", "golden_answers", "metadata", "prediction", "truncated", "pool_member")


def audit_row(record: Mapping[str, Any], *, role: str, split: str, source: str) -> dict[str, Any]:
    """One unlabelled audit row from a RAG result record (no score, no label)."""
    row = {k: record[k] for k in _KEPT if k in record}
    dataset = str((record.get("metadata") or {}).get("dataset") or record.get("dataset") or "")
    member = str(record.get("pool_member") or source)
    row.update({
        "audit_id": f"{source}:{dataset}:{record['id']}:{member}",
        "role": role, "split": split, "source": source, "dataset": dataset,
        "passages": [{"id": p.get("id"), "contents": p.get("contents", "")}
                     for p in record.get("passages") or [] if isinstance(p, Mapping)],
        "kind": answer_kind(record), "label": None, "reason": None,
    })
    return row


def _sources(root: Path) -> list[tuple[Path, str, str, str]]:
    """(file, role, split, source) for every candidate file present under ``root``."""
    params = read_yaml(root / "params.yaml") if (root / "params.yaml").exists() else {}
    pool_split = str((params.get("error_sampling") or {}).get("split", "train"))
    out = [(f, "choosing" if pool_split != "test" else "test", pool_split, "error_sampling")
           for f in sorted((root / "data/error_sampling/samples").glob("*.jsonl"))]
    for ds_dir in sorted(p for p in (root / "data/retrieval_rag").glob("*") if p.is_dir()):
        for split, role in (("dev", "choosing"), ("test", "test")):
            if (ds_dir / f"{split}.jsonl").exists():
                out.append((ds_dir / f"{split}.jsonl", role, split, "retrieval_rag"))
    out += [(f, "test", "test", "test_pool") for f in sorted((root / "data/benchmark/test_pool").glob("*.jsonl"))]
    misled = root / MISLED
    if misled.exists():  # role and split per record (ragcritic_lib.evaluation.audit_misled)
        out.append((misled, "", "", "misled"))
    return out


def candidates(root: Path = paths.ROOT) -> list[dict[str, Any]]:
    """Every answer the pipeline has written that the audit may draw, as unlabelled rows; one
    per (dataset, question, answer text), answers the server refused left out."""
    rows, seen = [], set()
    for path, role, split, source in _sources(root):
        for rec in read_jsonl(path):
            if "generation_error" in rec or "prediction" not in rec:
                continue
            if source == "misled":
                split = str(rec.get("split") or "")
                role = SPLIT_ROLE.get(split, "")
                if not role:
                    continue
            row = audit_row(rec, role=role, split=split, source=source)
            key = (row["dataset"], str(rec["id"]), normalize_words(str(rec.get("prediction") or "")))
            if key not in seen:
                seen.add(key)
                rows.append(row)
    return rows


def stratified_draw(rows: Sequence[Mapping[str, Any]], *, n: int = 300, min_test: int = 100,
                    min_kind: int = 15, seed: int = 0) -> list[dict[str, Any]]:
    """The draw described in the module docstring, in a seeded order."""
    rng = random.Random(f"{seed}|audit")
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["role"], r["kind"]), []).append(r)
    for key in sorted(groups):
        rng.shuffle(groups[key])
    chosen: list[Mapping[str, Any]] = []

    def take(key: tuple[str, str]) -> bool:
        if groups.get(key):
            chosen.append(groups[key].pop())
            return True
        return False

    def count(role: str | None = None, kind: str | None = None) -> int:
        return sum((role is None or r["role"] == role) and (kind is None or r["kind"] == kind) for r in chosen)

    for kind in KINDS:
        while count(kind=kind) < min_kind and (take(("test", kind)) | take(("choosing", kind))):
            pass
        while count(kind=kind) > min_kind:  # the alternation can overshoot by one
            last = next(i for i in range(len(chosen) - 1, -1, -1) if chosen[i]["kind"] == kind)
            groups[(chosen[last]["role"], kind)].append(chosen.pop(last))

    def round_robin(roles: Sequence[str], until: Any) -> None:
        while not until():
            keys = sorted((k for k in groups if k[0] in roles and groups[k]), key=lambda k: (len(groups[k]), k))
            if not keys:
                return
            for key in keys:
                if until():
                    return
                take(key)

    round_robin(["test"], lambda: count(role="test") >= min_test or len(chosen) >= max(n, min_test))
    round_robin(list(ROLES), lambda: len(chosen) >= n)
    return [dict(r) for r in chosen]


def append_draw(drawn: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], *, kinds: Sequence[str],
                min_kind: int = 15, seed: int = 0) -> list[dict[str, Any]]:
    """Rows to append to ``drawn`` so each of ``kinds`` holds ``min_kind`` rows where the answers
    allow: answers ``drawn`` does not hold (by audit id, and by dataset, question and answer text),
    alternating test and choosing rows, seeded."""
    held = {r["audit_id"] for r in drawn}
    seen = {(r["dataset"], str(r["id"]), normalize_words(str(r.get("prediction") or ""))) for r in drawn}
    fresh = [r for r in rows if r["kind"] in kinds and r["audit_id"] not in held
             and (r["dataset"], str(r["id"]), normalize_words(str(r.get("prediction") or ""))) not in seen]
    need = {k: max(0, min_kind - sum(r["kind"] == k for r in drawn)) for k in kinds}
    extra: list[dict[str, Any]] = []
    for kind in kinds:
        part = [r for r in fresh if r["kind"] == kind]
        extra += stratified_draw(part, n=need[kind], min_test=0, min_kind=need[kind], seed=seed)[:need[kind]]
    return extra


def draw_summary(drawn: Sequence[Mapping[str, Any]], *, min_kind: int) -> list[str]:
    """Lines: rows per role and kind, and each required kind below ``min_kind``."""
    lines = [f"{len(drawn)} rows: " + ", ".join(f"{role} {sum(r['role'] == role for r in drawn)}" for role in ROLES)]
    for kind in KINDS:
        per = {role: sum(r["role"] == role and r["kind"] == kind for r in drawn) for role in ROLES}
        if sum(per.values()):
            lines.append(f"  {kind:22s} choosing {per['choosing']:4d}  test {per['test']:4d}")
    short = [k for k in REQUIRED_KINDS if sum(r["kind"] == k for r in drawn) < min_kind]
    if short:
        lines.append(f"below {min_kind} (the answers hold no more): {', '.join(short)}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ragcritic_lib.evaluation.audit_draw", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"unlabelled draw to write (default {DEFAULT_OUT})")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--min-test", type=int, default=100)
    ap.add_argument("--min-kind", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", default=str(paths.ROOT), help="repository root holding data/ (default: this one)")
    ap.add_argument("--append-kinds", default="",
                    help="comma-separated kinds: append min-kind rows of each to the existing draw at --out from "
                         "answers it does not hold (alternating test and choosing), instead of drawing anew")
    args = ap.parse_args(argv)
    rows = candidates(Path(args.root))
    if not rows:
        print("no answers to draw from: run notebooks 01 and 02 (and 07 for its test pool) first", file=sys.stderr)
        return 1
    out = paths.resolve(args.out)
    if out.name == "audit.jsonl":
        print(f"{out}: refusing to overwrite the labelled audit; write the draw elsewhere", file=sys.stderr)
        return 2
    if args.append_kinds:
        kinds = [k.strip() for k in args.append_kinds.split(",") if k.strip()]
        unknown = [k for k in kinds if k not in KINDS]
        if unknown or not out.exists():
            print(f"--append-kinds: unknown kind(s) {unknown}" if unknown else f"{out}: no draw to append to",
                  file=sys.stderr)
            return 2
        drawn = [dict(r) for r in read_jsonl(out)]
        extra = append_draw(drawn, rows, kinds=kinds, min_kind=args.min_kind, seed=args.seed)
        write_jsonl(out, drawn + extra)
        print("\n".join([f"{len(extra)} rows appended ({len(drawn) + len(extra)} in all) -> {out}",
                         *draw_summary(drawn + extra, min_kind=args.min_kind)]))
        return 0
    drawn = stratified_draw(rows, n=args.n, min_test=args.min_test, min_kind=args.min_kind, seed=args.seed)
    write_jsonl(out, drawn)
    print("\n".join([f"{len(rows)} candidate answers -> {out}", *draw_summary(drawn, min_kind=args.min_kind)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
