"""Which of the frozen generator's layers the verdict probe should read: dev AUROC per layer set.

Stage 05's verdict comes from a logistic probe on the frozen generator's hidden states at the
verdict position, reading layer ``critic_body.probe_layer`` and the final normed state. This
benchmark computes every layer's state there once, for the stage's own probe samples (the train
samples of ``critic_body.verdict_sources``: the generator's and the pool's real answers) and its
dev answers, then fits the stage's probe (:func:`ragcritic_lib.critic.probe.fit_probe`, C by
5-fold cross-validated AUROC) on each layer set and scores dev: AUROC with its bootstrap 95% CI,
and the paired bootstrap CI of its difference to the set the stage reads (``shipped``). Dev answers only,
never test; the dev answers pick among many sets here, so the best row's dev AUROC is optimistic
and a change of the default needs a difference whose CI lies above 0, and then the benchmark's
test AUROC from a full stage run. Each set is also fitted under ``--orders`` sample orders: the
cross-validation that picks the probe's C splits the samples by their order, so ``dev_auroc_orders``
shows how much of a row's AUROC is that choice rather than the layers; the first order is the
stage's own, so the shipped set's row reproduces the stage's dev AUROC.

With ``--select train`` the choice does not look at dev at all: every set is also scored out of
fold on the probe samples themselves (5 folds that keep the answers to one question together,
each fold's probe the stage's), with an interval from resampling questions, and the set chosen
is the best one whose paired interval against the shipped set lies above 0 there (else the
shipped set stays); dev then only says whether that choice holds on answers it never saw
(``chosen_by_train``, ``chosen_dev_vs_shipped``). ``--features`` keeps every layer's states in an
.npz, so a second look skips the forward passes. ``--answer-span`` also averages every state over
the tokens of the answer under check and adds sets that read those means (``a18``: layer 18 over
the answer), alone and beside the shipped set. Every row also reports the AUROC within kinds of
question (dataset and type; pairs of a wrong and a right answer to questions of the same kind
only), on dev and out of fold, with paired intervals against the shipped set: the kinds' error
rates differ so much that the plain AUROC rewards knowing the kind.

    .venv/bin/python benchmarks/bench_probe_layers.py                    # writes reports/benchmarks/probe_layers.json
    .venv/bin/python benchmarks/bench_probe_layers.py --select train --orders 1 --features /tmp/states.npz \
        --out reports/benchmarks/probe_layers_train_cv.json
    .venv/bin/python benchmarks/bench_probe_layers.py --answer-span --select train --orders 1 --jobs 2 \
        --sets 18+last,a15,a18,a15+18+last,a18+18+last,a24+18+last,alast+18+last \
        --features /tmp/span_states.npz --out reports/benchmarks/probe_answer_span.json
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

def shipped_set(probe_layer: int) -> str:
    """The set the stage reads: ``critic_body.probe_layer`` beside the final state."""
    return f"{int(probe_layer)}+last"


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


def answer_span_sets(n_layers: int, probe_layer: int) -> dict[str, list[int | str]]:
    """Sets that read the mean of a layer's states over the answer's tokens (``"a18"``: layer 18
    averaged over the span of the answer under check; ``"alast"``: the final normed state there),
    alone and beside the set the stage reads."""
    shipped: list[int | str] = [int(probe_layer), "last"]
    sets: dict[str, list[int | str]] = {}
    for layer in sorted({n_layers // 2, int(probe_layer), n_layers * 4 // 5}):
        sets[f"a{layer}"] = [f"a{layer}"]
        sets[f"a{layer}+{probe_layer}+last"] = [f"a{layer}", *shipped]
    sets["alast"] = ["alast"]
    sets[f"alast+{probe_layer}+last"] = ["alast", *shipped]
    return sets


def select(features, layers: list[int | str], spans=None):
    """The chosen states side by side. ``features`` is ``[n, layers + 1, hidden]`` (the verdict
    position); ``spans``, the same shape, holds each state's mean over the answer's tokens, which
    names like ``"a18"`` and ``"alast"`` read."""
    import numpy as np

    last = features.shape[1] - 1

    def column(layer: int | str):
        name = str(layer)
        if name.startswith("a"):
            if spans is None:
                raise ValueError(f"layer {name!r} reads the answer span: compute the features with --answer-span")
            return spans[:, last if name == "alast" else int(name[1:])]
        return features[:, last if name == "last" else int(name)]

    return np.concatenate([column(layer) for layer in layers], axis=1)


def split_spans(states):
    """``(verdict states, answer-span means)`` of an :func:`all_layer_span_features` array."""
    half = states.shape[1] // 2
    return states[:, :half], states[:, half:]


def all_layer_span_features(model, tok, conversations, *, batch_size: int = 16):
    """``[n, 2 * (layers + 1), hidden]`` float32: every hidden state at the verdict position (the
    first half, as :func:`all_layer_features`), then each state's mean over the answer's tokens
    (:func:`ragcritic_lib.critic.probe.answer_span`; the verdict position's state where the answer
    has no tokens). The halves are what :func:`select` reads as ``features`` and ``spans``
    (:func:`split_spans`)."""
    import numpy as np

    from ragcritic_lib.critic.probe import answer_span, span_states

    found = [answer_span(tok, c) for c in conversations]
    n_states = int(model.config.num_hidden_layers) + 1
    out = np.zeros((len(found), 2 * n_states, int(model.config.hidden_size)), dtype=np.float32)
    for i, states, means in span_states(model, tok, [f[0] for f in found], [(f[1], f[2]) for f in found],
                                        batch_size=batch_size):
        out[i, :n_states] = states.float().cpu().numpy()
        out[i, n_states:] = means.float().cpu().numpy()
    return out


def _load_features(path: Path | None, n_train: int, n_dev: int, *, answer_span: bool = False):
    """(train, dev, seconds, device) from a features file written for the same samples (with the
    answer-span states when ``answer_span``), else None."""
    if path is None or not path.exists():
        return None
    import numpy as np

    with np.load(path) as z:
        if z["train"].shape[0] != n_train or z["dev"].shape[0] != n_dev:
            print(f"{path}: {z['train'].shape[0]} + {z['dev'].shape[0]} samples, not {n_train} + {n_dev}: recomputed")
            return None
        has_spans = "answer_span" in z.files and bool(z["answer_span"])
        if has_spans != answer_span:
            print(f"{path}: {'with' if has_spans else 'without'} answer-span states: recomputed")
            return None
        return z["train"], z["dev"], float(z["seconds"]), str(z["device"])


_SHARED: dict = {}  # what forked workers read: features, labels, seed (set before the pool starts)


def _fit_one(name: str) -> tuple[dict, list[float]]:
    """Fit the probe on one layer set and score dev (in a worker, or in the parent with --jobs 1)."""
    from ragcritic_lib.critic.probe import fit_probe, probe_scores
    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci

    d = _SHARED
    t1 = time.time()
    layers = d["sets"][name]
    x_train, x_dev = select(d["f_train"], layers, d.get("s_train")), select(d["f_dev"], layers, d.get("s_dev"))
    n = len(d["y_train"])
    fits = []
    for k in range(d["orders"]):  # order 0 is the stage's: its probe is fitted on the samples in this order
        order = random.Random(d["seed"] + k).sample(range(n), n)
        probe = fit_probe(x_train[order], [d["y_train"][i] for i in order], seed=d["seed"],
                          cv_repeats=d["cv_repeats"])
        fits.append((probe, probe_scores(probe, x_dev)))
    probe, scores = fits[0]
    oof = _out_of_fold(x_train) if d.get("select") == "train" else None
    a = auroc(scores, d["y_dev"])
    lo, hi = bootstrap_auroc_ci(scores, d["y_dev"], seed=d["seed"], n_boot=d["boot"])
    within = _within(scores, d["y_dev"], d.get("kinds_dev"))
    return ({"name": name, "layers": d["sets"][name], "dev_auroc": None if a is None else round(a, 4),
             **({} if within is None else {"dev_within_kind": round(within, 4)}),
             "ci_low": lo, "ci_high": hi, "C": probe["C"], "features": len(probe["coef"]),
             "dev_auroc_orders": [round(auroc(sc, d["y_dev"]) or 0.0, 4) for _, sc in fits],
             "C_orders": [p["C"] for p, _ in fits], "fit_seconds": round(time.time() - t1, 1),
             **({} if oof is None else _oof_row(oof))}, (scores, oof))


def _within(scores, labels, kinds) -> float | None:
    """The AUROC within kinds of question (None without kinds)."""
    from ragcritic_lib.evaluation.stats import within_group_auroc

    return None if kinds is None else within_group_auroc(scores, labels, kinds)


def _out_of_fold(x_train) -> list[float]:
    """Each probe sample's score from a probe fitted without its question: 5 folds that keep every
    answer to a question together (stratified, shuffled with the seed); each fold's probe is the
    stage's (C by its own inner cross-validation on the other folds)."""
    from sklearn.model_selection import StratifiedGroupKFold

    from ragcritic_lib.critic.probe import fit_probe, probe_scores

    d = _SHARED
    y, oof = d["y_train"], [0.0] * len(d["y_train"])
    folds = StratifiedGroupKFold(n_splits=5, shuffle=True, random_state=d["seed"])
    for fit_idx, held in folds.split(x_train, [int(v) for v in y], d["groups"]):
        probe = fit_probe(x_train[fit_idx], [y[i] for i in fit_idx], seed=d["seed"])
        for i, v in zip(held, probe_scores(probe, x_train[held])):
            oof[int(i)] = v
    return oof


def _oof_row(oof: list[float]) -> dict:
    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci

    d = _SHARED
    lo, hi = bootstrap_auroc_ci(oof, d["y_train"], seed=d["seed"], n_boot=d["boot"], groups=d["groups"])
    within = _within(oof, d["y_train"], d.get("kinds_train"))
    return {"train_oof_auroc": round(auroc(oof, d["y_train"]), 4), "train_oof_ci": [lo, hi],
            **({} if within is None else {"train_oof_within_kind": round(within, 4)})}


def paired_group_diff(a: list[float], b: list[float], y: list[bool], groups: list, *, seed: int,
                      n_boot: int, kinds: list | None = None) -> dict:
    """AUROC(a) - AUROC(b) on the same samples with a percentile interval from resampling whole
    questions (every answer to a drawn question), both score lists on each resample; with
    ``kinds``, the AUROC within kinds of question instead."""
    from ragcritic_lib.evaluation.stats import auroc, cluster_resamples, percentile_interval, within_group_auroc

    def metric(scores, idx):
        ys = [y[i] for i in idx]
        picked = [scores[i] for i in idx]
        return auroc(picked, ys) if kinds is None else within_group_auroc(picked, ys, [kinds[i] for i in idx])

    diffs = []
    for idx in cluster_resamples(groups, len(y), n_boot, seed):
        x, z = metric(a, idx), metric(b, idx)
        if x is not None and z is not None:
            diffs.append(x - z)
    lo, hi = percentile_interval(diffs, 0.05)
    everything = range(len(y))
    return {"diff": round(metric(a, everything) - metric(b, everything), 4),
            "low": None if lo is None else round(lo, 4), "high": None if hi is None else round(hi, 4)}


def _vs_shipped(args: tuple[list[float], list[float]]) -> dict:
    from ragcritic_lib.critic.train import paired_auroc_diff_ci

    return paired_auroc_diff_ci(args[0], args[1], _SHARED["y_dev"], seed=_SHARED["seed"], n_boot=_SHARED["boot"])


def train_selection(rows: list[dict], shipped_name: str) -> dict:
    """The set the probe samples choose, dev unseen: the highest out-of-fold AUROC among the sets
    whose paired interval against the shipped set lies above 0 on the probe samples, else the
    shipped set; then its dev AUROC against the shipped one's (dev confirms, it does not choose)."""
    shipped = next(r for r in rows if r["name"] == shipped_name)
    above = [r for r in rows if (r.get("train_vs_shipped") or {}).get("low") is not None
             and r["train_vs_shipped"]["low"] > 0]
    chosen = max(above, key=lambda r: r["train_oof_auroc"]) if above else shipped
    return {"best_on_train": max(rows, key=lambda r: r["train_oof_auroc"])["name"],
            "clearly_above_shipped_on_train": [r["name"] for r in above], "chosen_by_train": chosen["name"],
            "chosen_dev_auroc": chosen["dev_auroc"], "shipped_dev_auroc": shipped["dev_auroc"],
            "chosen_dev_vs_shipped": chosen.get("vs_shipped")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=paths.ROOT / "reports" / "benchmarks" / "probe_layers.json")
    ap.add_argument("--limit", type=int, default=0, help="first N probe samples and dev answers only (a quick look)")
    ap.add_argument("--sets", default="", help="comma-separated set names (default: every set)")
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=1, help="layer sets fitted at once (forked processes)")
    ap.add_argument("--cv-repeats", type=int, default=1,
                    help="choose C over this many shuffled stratified 5-fold splits (1: the stage's folds, in order)")
    ap.add_argument("--features", type=Path, default=None,
                    help="an .npz of every layer's states: read when it holds these samples, else written "
                         "(the forward passes are most of the time on a CPU)")
    ap.add_argument("--answer-span", action="store_true",
                    help="also read each state's mean over the answer's tokens (sets named a<layer>, alast)")
    ap.add_argument("--select", choices=("dev", "train"), default="dev",
                    help="train: also score every set out of fold on the probe samples (5 folds by question) "
                         "and choose there, dev unseen; dev then only confirms the choice")
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
    sft, seed = params["critic_body"], int(params["common"]["seed"])
    base = runtime.resolve_base_model(params, params["critic_sft"]["base_model"], key="critic_sft.base_model")
    data_dir = paths.stage_dir("critic_data")
    examples, dev = read_jsonl(data_dir / "sft_train.jsonl"), read_jsonl(data_dir / "sft_dev.jsonl")
    samples = read_jsonl(data_dir / "train_samples.jsonl")
    sources = [s["source"] for s in samples]
    keep = {x.strip() for x in str(sft["verdict_sources"]).split(",") if x.strip()}
    train = [e for e, src in zip(examples, sources) if not keep or src in keep]
    picked: list[int] = []
    if args.limit:
        picked = random.Random(seed).sample(range(len(train)), min(args.limit, len(train)))
        train, dev = [train[i] for i in picked], dev[: args.limit]
    y_train, y_dev = [is_error_example(e) for e in train], [is_error_example(e) for e in dev]

    model, tok = load_frozen(base)
    device = next(model.parameters()).device.type
    t0 = time.time()
    cached = _load_features(args.features, len(train), len(dev), answer_span=args.answer_span)
    if cached is None:
        features_of = all_layer_span_features if args.answer_span else all_layer_features
        f_train = features_of(model, tok, [e["messages"] for e in train])
        f_dev = features_of(model, tok, [e["messages"] for e in dev])
        feature_seconds = round(time.time() - t0, 1)
        if args.features:
            import numpy as np

            args.features.parent.mkdir(parents=True, exist_ok=True)
            np.savez(args.features, train=f_train, dev=f_dev, seconds=feature_seconds, device=device,
                     answer_span=bool(args.answer_span))
    else:
        f_train, f_dev, feature_seconds, device = cached
    s_train = s_dev = None
    if args.answer_span:
        (f_train, s_train), (f_dev, s_dev) = split_spans(f_train), split_spans(f_dev)
    print(f"features: {len(train)} probe samples, {len(dev)} dev answers, {feature_seconds} s on {device}", flush=True)

    sets = layer_sets(int(model.config.num_hidden_layers))
    shipped = shipped_set(sft["probe_layer"])
    sets.setdefault(shipped, [int(sft["probe_layer"]), "last"])
    if args.answer_span:
        sets.update(answer_span_sets(int(model.config.num_hidden_layers), int(sft["probe_layer"])))
    wanted = [s.strip() for s in args.sets.split(",") if s.strip()] or list(sets)
    unknown = [s for s in wanted if s not in sets]
    if unknown:
        raise SystemExit(f"unknown set {unknown[0]!r} (known: {', '.join(sets)})")
    if shipped not in wanted:
        wanted.insert(0, shipped)
    groups = [s["qkey"] for s, src in zip(samples, sources) if not keep or src in keep]
    def kind(sample: dict) -> str:  # a kind of question: its dataset and type
        return f"{sample['dataset']}/{sample['type']}"

    kinds_train = [kind(s) for s, src in zip(samples, sources) if not keep or src in keep]
    dev_samples = read_jsonl(data_dir / "dev_samples.jsonl")[: len(dev)]  # sft_dev.jsonl is in this order
    kinds_dev = [kind(s) for s in dev_samples]
    if args.limit:
        groups, kinds_train = [groups[i] for i in picked], [kinds_train[i] for i in picked]
    _SHARED.update(f_train=f_train, f_dev=f_dev, s_train=s_train, s_dev=s_dev, y_train=y_train, y_dev=y_dev,
                   kinds_train=kinds_train, kinds_dev=kinds_dev, seed=seed, boot=args.boot, sets=sets,
                   orders=max(1, args.orders), cv_repeats=max(1, args.cv_repeats), select=args.select,
                   groups=groups)
    if args.jobs > 1:
        import multiprocessing

        pool = multiprocessing.get_context("fork").Pool(args.jobs)  # workers only fit numpy arrays
        mapper = pool.imap
    else:
        pool, mapper = None, map
    scores, rows = {}, []
    oofs = {}
    for row, (sc, oof) in mapper(_fit_one, wanted):
        rows.append(row)
        scores[row["name"]], oofs[row["name"]] = sc, oof
        print(json.dumps(row), flush=True)
    others = [r for r in rows if r["name"] != shipped]
    for row, vs in zip(others, mapper(_vs_shipped, [(scores[r["name"]], scores[shipped]) for r in others])):
        row["vs_shipped"] = vs
    if pool is not None:
        pool.close()
    selection = None
    if args.select == "train":
        for row in others:
            row["train_vs_shipped"] = paired_group_diff(oofs[row["name"]], oofs[shipped], y_train, groups,
                                                        seed=seed, n_boot=args.boot)
            row["train_within_kind_vs_shipped"] = paired_group_diff(
                oofs[row["name"]], oofs[shipped], y_train, groups, seed=seed, n_boot=args.boot, kinds=kinds_train)
        selection = train_selection(rows, shipped)
    for row in others:  # dev within kinds against the shipped set (resampling dev questions)
        row["dev_within_kind_vs_shipped"] = paired_group_diff(
            scores[row["name"]], scores[shipped], y_dev, [s["qkey"] for s in dev_samples], seed=seed,
            n_boot=args.boot, kinds=kinds_dev)
    best = max(rows, key=lambda r: r["dev_auroc"] or 0.0)
    clear = [r["name"] for r in rows if (r.get("vs_shipped") or {}).get("low") is not None
             and r["vs_shipped"]["low"] > 0]
    doc = {"orders": max(1, args.orders), "cv_repeats": max(1, args.cv_repeats), "probe_samples": len(train),
           "probe_errors": int(sum(y_train)), "dev": len(dev), "dev_errors": int(sum(y_dev)),
           "sources": sorted(keep) or "all", "shipped": shipped, "answer_span": bool(args.answer_span),
           "device": device, "cpu_class": cpu_class("cuda" if device == "cuda" else "cpu"), "torch": torch.__version__,
           "feature_seconds": feature_seconds, "rows": rows, "best_on_dev": best["name"],
           "clearly_above_shipped": clear, **({} if selection is None else {"select": "train", **selection})}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"best on dev: {best['name']} {best['dev_auroc']}; clearly above {shipped}: {clear or 'none'} -> {args.out}")


if __name__ == "__main__":
    main()
