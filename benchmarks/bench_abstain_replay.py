"""The correction ladder's abstain path replayed from a shipped stage 08: what each run's F1 would
have been had the reader's own answer stood wherever the abstain path replaced it, with no model
run again.

On a critique that names an unsupported answer (``agent.actions.UNSUPPORTED_LABELS``),
GenerateAnswer turns a new answer into "insufficient information" when it is not grounded in its
passages or repeats the rejected one; each such call is logged with the reader's raw text
(``abstained: true``). For every run file of ``data/correction/<dataset>/`` (the test rows and the
dev corrections the acting threshold is fitted on) this prints, over the first round: the mean F1
before, as run, and with the reader's answer restored; how often the path fired; on the
answerable and the unanswerable questions apart (every gold answer an abstention), how many
answers were corrected, how many of their critiques named an unsupported answer and how often the
path fired and why (the rejected answer repeated, or a new one; whether the passages hold the
reader's answer either way); and, for the dev corrections, both F1s at a range of verdict-margin thresholds
(acting only above each), the calibrated one included. Numbers only, no asserts.

    .venv/bin/python benchmarks/bench_abstain_replay.py
    .venv/bin/python benchmarks/bench_abstain_replay.py --dataset testbed --thresholds 0,1,2,3,4,5
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import read_json, read_jsonl


def replay(record: Mapping[str, Any]) -> dict[str, Any]:
    """One record's first round: {"before", "after", "restored" (F1 each), "fired" (bool),
    "margin" (the critic's verdict margin, None without one)}. "restored" reads the reader's
    answer from the raw text of the final GenerateAnswer the abstain path replaced (extracted as
    the stage extracts it, by the record's prompt variant); where the path did not fire it is
    "after"."""
    from ragcritic_lib.evaluation.scoring import score_prediction
    from ragcritic_lib.retrieval.rag import extract_answer

    golds = list(record.get("golden_answers") or [])
    steps = record.get("steps") or []
    step = steps[0] if steps else {}
    before = score_prediction(str(record["predictions"][0]), golds)["f1"]
    after = score_prediction(str(step.get("answer_after", record.get("final_prediction", ""))), golds)["f1"] \
        if step else before
    from ragcritic_lib.agent.actions import UNSUPPORTED_LABELS, _grounded
    from ragcritic_lib.evaluation.scoring import normalize_words

    restored, fired, repeat, grounded = after, False, None, None
    for event in step.get("events") or []:
        if event.get("action") == "GenerateAnswer" and not event.get("intermediate") and event.get("abstained"):
            answer, _ = extract_answer(str(event.get("raw") or ""), prefilled=record.get("prompt_variant") == "prefill")
            restored, fired = score_prediction(answer, golds)["f1"], True
            # Why it fired: the reader gave the rejected answer again, or (a new answer) one whose
            # words the passages do not hold; and whether the passages hold its words either way.
            repeat = normalize_words(answer) == normalize_words(str(record["predictions"][0]))
            grounded = _grounded(answer, [str(d) for d in event.get("docs") or []], "")
    from ragcritic_lib.evaluation.truth import is_unanswerable

    critique = step.get("critic") or {}
    margin = critique.get("margin")
    labels = {str(t) for key in ("tag1", "tag2") for t in critique.get(key) or []}
    return {"before": before, "after": after, "restored": restored, "fired": fired,
            "margin": None if margin is None else float(margin),
            "unanswerable": is_unanswerable(golds), "corrected": step.get("status") == "corrected",
            "unsupported_label": bool(labels & UNSUPPORTED_LABELS), "repeat": repeat, "grounded": grounded}


def at_threshold(rows: Sequence[Mapping[str, Any]], threshold: float, key: str) -> float:
    """Mean F1 acting only where the margin exceeds ``threshold`` (``key``: "after" or "restored")."""
    return sum(r[key] if r["margin"] is not None and r["margin"] > threshold else r["before"] for r in rows) / len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="testbed")
    ap.add_argument("--thresholds", default="0,1,2,3,4,5", help="comma-separated verdict margins for the dev file")
    args = ap.parse_args()
    folder = paths.resolve(f"data/correction/{args.dataset}")
    files = sorted(Path(folder).glob("*.jsonl"))
    if not files:
        raise SystemExit(f"{folder}: no run files (run or restore stage 08 first)")
    for f in files:
        rows = [replay(r) for r in read_jsonl(f)]
        if not rows:
            continue
        n = len(rows)
        mean = {k: sum(r[k] for r in rows) / n for k in ("before", "after", "restored")}
        print(f"{f.name}: n={n}, abstain path fired on {sum(r['fired'] for r in rows)}; F1 before {mean['before']:.4f}, "
              f"as run {mean['after']:.4f}, reader's answer restored {mean['restored']:.4f}")
        for part, flag in (("answerable", False), ("unanswerable", True)):
            sub = [r for r in rows if r["unanswerable"] is flag and r["corrected"]]
            fired = [r for r in sub if r["fired"]]
            print(f"  {part}: {len(sub)} corrected, {sum(r['unsupported_label'] for r in sub)} critiques name an "
                  f"unsupported answer, the abstain path fired on {len(fired)} ({sum(r['repeat'] for r in fired)} "
                  f"repeating the rejected answer; {sum(r['grounded'] for r in fired)} whose answer the passages hold)")
        if f.name.startswith("dev_") and all(r["margin"] is not None for r in rows):
            metrics = paths.METRICS_DIR / "08_correction.json"
            calibrated = (((read_json(metrics).get("critic_verdict") or {}).get("dev_fit") or {})
                          .get("calibrated_threshold") if metrics.exists() else None)
            marks = [float(t) for t in args.thresholds.split(",") if t.strip()]
            for t in sorted({*marks, *([float(calibrated)] if calibrated is not None else [])}):
                acted = sum(r["margin"] > t for r in rows)
                print(f"  margin > {t:.3f}{' (calibrated)' if t == calibrated else ''}: acts on {acted}; "
                      f"F1 as run {at_threshold(rows, t, 'after'):.4f}, restored {at_threshold(rows, t, 'restored'):.4f}")


if __name__ == "__main__":
    main()
