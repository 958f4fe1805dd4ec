"""Which of the frozen generator's layers the verdict probe should read: dev AUROC per layer set.

Stage 05's verdict comes from a logistic probe on the frozen generator's hidden states at the
verdict position, reading layer ``critic_sft.probe_layer`` (24) and the final normed state. This
benchmark computes every layer's state there once, for the stage's own probe samples (the train
samples of ``critic_sft.verdict_sources``: the generator's and the pool's real answers) and its
dev answers, then fits the stage's probe (:func:`ragcritic_lib.critic.probe.fit_probe`, C by
5-fold cross-validated AUROC) on each layer set and scores dev: AUROC with its bootstrap 95% CI,
and the paired bootstrap CI of its difference to the shipped set (``24+last``). Dev answers only,
never test; the dev answers pick among many sets here, so the best row's dev AUROC is optimistic
and a change of the default needs a difference whose CI lies above 0, and then the benchmark's
test AUROC from a full stage run. Each set is also fitted under ``--orders`` sample orders: the
cross-validation that picks the probe's C splits the samples by their order, so ``dev_auroc_orders``
shows how much of a row's AUROC is that choice rather than the layers; the first order is the
stage's own, so the ``24+last`` row reproduces the stage's dev AUROC.

    .venv/bin/python benchmarks/bench_probe_layers.py                    # writes reports/benchmarks/probe_layers.json
    .venv/bin/python benchmarks/bench_probe_layers.py --limit 64 --out /tmp/p.json   # a quick look

Prints one line per set. Run it alone: other load on the cores changes the seconds. On a machine
where torch sees a GPU the forward passes run there (``train.device`` of the file says which).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from ragcritic_lib import paths

SHIPPED = "24+last"


def layer_sets(n_layers: int) -> dict[str, list[int | str]]:
    """Named layer sets: single layers across the depth, each with the final state, and a few
    concatenations. ``"last"`` is the final normed state; an int is that layer's output."""
    singles = sorted({n_layers // 5, n_layers * 2 // 5, n_layers // 2, n_layers * 3 // 5, n_layers * 7 // 10,
                      n_layers * 4 // 5, n_layers * 9 // 10})
    sets: dict[str, list[int | str]] = {"last": ["last"]}
    for layer in singles:
        sets[str(layer)] = [layer]
        sets[f"{layer}+last"] = [layer, "last"]
    mid = [n_layers // 2, n_layers * 3 // 5, n_layers * 4 // 5]
    sets["+".join(map(str, mid)) + "+last"] = [*mid, "last"]
    return sets


def all_layer_features(model, tok, conversations, *, batch_size: int = 16):
    """``[n, layers + 1, hidden]`` float32: every hidden state (embeddings, each layer's output;
    the last one normed) at the verdict position of each conversation, as the probe reads them."""
    import numpy as np
    import torch

    from ragcritic_lib.critic.probe import _verdict_ids, last_position_states

    ids = [_verdict_ids(tok, c) for c in conversations]
    out = np.zeros((len(ids), int(model.config.num_hidden_layers) + 1, int(model.config.hidden_size)),
                   dtype=np.float32)
    for i, states in last_position_states(model, tok, ids, batch_size=batch_size):
        out[i] = torch.stack(states).float().cpu().numpy()
    return out


def select(features, layers: list[int | str]):
    import numpy as np

    last = features.shape[1] - 1
    return np.concatenate([features[:, last if layer == "last" else int(layer)] for layer in layers], axis=1)


_SHARED: dict = {}  # what forked workers read: features, labels, seed (set before the pool starts)


def _fit_one(name: str) -> tuple[dict, list[float]]:
    """Fit the probe on one layer set and score dev (in a worker, or in the parent with --jobs 1)."""
    from ragcritic_lib.critic.probe import fit_probe, probe_scores
    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci

    d = _SHARED
    t1 = time.time()
    x_train, x_dev, n = select(d["f_train"], d["sets"][name]), select(d["f_dev"], d["sets"][name]), len(d["y_train"])
    fits = []
    for k in range(d["orders"]):  # order 0 is the stage's: its probe is fitted on the samples in this order
        order = random.Random(d["seed"] + k).sample(range(n), n)
        probe = fit_probe(x_train[order], [d["y_train"][i] for i in order], seed=d["seed"],
                          cv_repeats=d["cv_repeats"])
        fits.append((probe, probe_scores(probe, x_dev)))
    probe, scores = fits[0]
    a = auroc(scores, d["y_dev"])
    lo, hi = bootstrap_auroc_ci(scores, d["y_dev"], seed=d["seed"], n_boot=d["boot"])
    return ({"name": name, "layers": d["sets"][name], "dev_auroc": None if a is None else round(a, 4),
             "ci_low": lo, "ci_high": hi, "C": probe["C"], "features": len(probe["coef"]),
             "dev_auroc_orders": [round(auroc(sc, d["y_dev"]) or 0.0, 4) for _, sc in fits],
             "C_orders": [p["C"] for p, _ in fits], "fit_seconds": round(time.time() - t1, 1)}, scores)


def _vs_shipped(args: tuple[list[float], list[float]]) -> dict:
    from ragcritic_lib.critic.train import paired_auroc_diff_ci

    return paired_auroc_diff_ci(args[0], args[1], _SHARED["y_dev"], seed=_SHARED["seed"], n_boot=_SHARED["boot"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=paths.ROOT / "reports" / "benchmarks" / "probe_layers.json")
    ap.add_argument("--limit", type=int, default=0, help="first N probe samples and dev answers only (a quick look)")
    ap.add_argument("--sets", default="", help="comma-separated set names (default: every set)")
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=1, help="layer sets fitted at once (forked processes)")
    ap.add_argument("--cv-repeats", type=int, default=1,
                    help="choose C over this many shuffled stratified 5-fold splits (1: the stage's folds, in order)")
    ap.add_argument("--orders", type=int, default=3,
                    help="sample orders each set is fitted under (the CV folds that choose C follow the order); "
                         "the first is the stage's, and the row's AUROC and CIs are that one's")
    args = ap.parse_args()

    import torch

    from ragcritic_lib import runtime
    from ragcritic_lib.critic.probe import load_frozen
    from ragcritic_lib.critic.verifier import is_error_example
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    params = load_params()
    sft, seed = params["critic_sft"], int(params["common"]["seed"])
    base = runtime.resolve_base_model(params, sft["base_model"], key="critic_sft.base_model")
    data_dir = paths.stage_dir("critic_data")
    examples, dev = read_jsonl(data_dir / "sft_train.jsonl"), read_jsonl(data_dir / "sft_dev.jsonl")
    sources = [s["source"] for s in read_jsonl(data_dir / "train_samples.jsonl")]
    keep = {x.strip() for x in str(sft["verdict_sources"]).split(",") if x.strip()}
    train = [e for e, src in zip(examples, sources) if not keep or src in keep]
    if args.limit:
        train, dev = random.Random(seed).sample(train, min(args.limit, len(train))), dev[: args.limit]
    y_train, y_dev = [is_error_example(e) for e in train], [is_error_example(e) for e in dev]

    model, tok = load_frozen(base)
    device = next(model.parameters()).device.type
    t0 = time.time()
    f_train = all_layer_features(model, tok, [e["messages"] for e in train])
    f_dev = all_layer_features(model, tok, [e["messages"] for e in dev])
    feature_seconds = round(time.time() - t0, 1)
    print(f"features: {len(train)} probe samples, {len(dev)} dev answers, {feature_seconds} s on {device}", flush=True)

    sets = layer_sets(int(model.config.num_hidden_layers))
    sets.setdefault(SHIPPED, [int(sft["probe_layer"]), "last"])
    wanted = [s.strip() for s in args.sets.split(",") if s.strip()] or list(sets)
    unknown = [s for s in wanted if s not in sets]
    if unknown:
        raise SystemExit(f"unknown set {unknown[0]!r} (known: {', '.join(sets)})")
    if SHIPPED not in wanted:
        wanted.insert(0, SHIPPED)
    _SHARED.update(f_train=f_train, f_dev=f_dev, y_train=y_train, y_dev=y_dev, seed=seed, boot=args.boot, sets=sets,
                   orders=max(1, args.orders), cv_repeats=max(1, args.cv_repeats))
    if args.jobs > 1:
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(args.jobs)  # workers only fit numpy arrays
        mapper = pool.imap
    else:
        pool, mapper = None, map
    scores, rows = {}, []
    for row, sc in mapper(_fit_one, wanted):
        rows.append(row)
        scores[row["name"]] = sc
        print(json.dumps(row), flush=True)
    others = [r for r in rows if r["name"] != SHIPPED]
    for row, vs in zip(others, mapper(_vs_shipped, [(scores[r["name"]], scores[SHIPPED]) for r in others])):
        row["vs_shipped"] = vs
    if pool is not None:
        pool.close()
    best = max(rows, key=lambda r: r["dev_auroc"] or 0.0)
    clear = [r["name"] for r in rows if (r.get("vs_shipped") or {}).get("low") is not None
             and r["vs_shipped"]["low"] > 0]
    doc = {"orders": max(1, args.orders), "cv_repeats": max(1, args.cv_repeats), "probe_samples": len(train), "probe_errors": int(sum(y_train)), "dev": len(dev), "dev_errors": int(sum(y_dev)),
           "sources": sorted(keep) or "all", "shipped": SHIPPED, "device": device,
           "cpu_class": cpu_class("cuda" if device == "cuda" else "cpu"), "torch": torch.__version__,
           "feature_seconds": feature_seconds, "rows": rows, "best_on_dev": best["name"],
           "clearly_above_shipped": clear}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"best on dev: {best['name']} {best['dev_auroc']}; clearly above {SHIPPED}: {clear or 'none'} -> {args.out}")


if __name__ == "__main__":
    main()
