"""The critic's recipe frontier on this CPU: dev verdict AUROC against training cost.

Every recipe trains on the same fixed subset of the critic's training examples
(``data/critic_data/sft_train.jsonl``, stage 05_critic_data) and is scored on the same dev answers
(``sft_dev.jsonl``; the bootstrap resamples dev questions). The recipes:

- ``gen-top12``: the generative critic (verdict, tier tags, critique), the top 12 of SmolLM2's 30
  layers trained on cached states of the frozen 18, one pass;
- ``gen-top6``: the same with the top 6 layers (the 18-layer cache run 6 layers deeper);
- ``probe``: no training of the model: a logistic regression on the frozen model's states at the
  verdict position (layer 24 and the last layer), C by cross-validation on the subset;
- ``verifier-top3`` / ``verifier-top6``: an encoder verifier (all-MiniLM-L6-v2 with a one-logit
  head; its top 3 or all 6 layers fine-tuned, two passes) reading the critic's own view of each
  sample; it gives the verdict score only, so a stage using it also trains a generative critic for
  the tags, and its projected stage minutes include the cheapest generative recipe.

Each row's ``train_seconds`` is what it cost here on the subset (the frozen-layer cache included);
``projected_stage_minutes`` scales its measured seconds per example to the full training set.
The default recipe is :func:`ragcritic_lib.critic.frontier.choose`'s. Writes
``reports/benchmarks/critic_recipes.json`` and its figure, and prints the rows. Run it alone:
other load on the cores changes the seconds.

    .venv/bin/python benchmarks/bench_critic_recipes.py                 # 512 examples
    .venv/bin/python benchmarks/bench_critic_recipes.py --examples 64 --out /tmp/r.json --figure /tmp/r.png
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ragcritic_lib import paths

RECIPES = ("gen-top12", "gen-top6", "probe", "verifier-top3", "verifier-top6")
STAGE_BUDGET = {"avx2": 100.0, "other": 100.0, "avx512_bf16": 30.0, "amx": 30.0, "cuda": 30.0}
STAGE_OVERHEAD = 0.8   # share of a stage's budget left to training: loading, calibration, preview and shipping take the rest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=512)
    ap.add_argument("--recipes", default=",".join(RECIPES))
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--sources", default="",
                    help="train only on samples of these sources (comma-separated, e.g. generator,pool: the real "
                         "answers); the recipe names get the suffix -<sources>; default: every source")
    ap.add_argument("--append", action="store_true",
                    help="add the rows to the file's recipes (same CPU class and dev answers) instead of replacing it")
    ap.add_argument("--data-dir", default=str(paths.stage_dir("critic_data")),
                    help="stage 05_critic_data's folder (sft_train.jsonl, sft_dev.jsonl, dev_samples.jsonl)")
    ap.add_argument("--verifier-epochs", type=float, default=2.0)
    ap.add_argument("--out", default=str(paths.ROOT / "reports" / "benchmarks" / "critic_recipes.json"))
    ap.add_argument("--figure", default=str(paths.ROOT / "reports" / "benchmarks" / "critic_recipes.png"))
    args = ap.parse_args()
    wanted = [r.strip() for r in args.recipes.split(",") if r.strip()]
    unknown = sorted(set(wanted) - set(RECIPES))
    if unknown:
        raise SystemExit(f"--recipes: unknown {', '.join(unknown)} (choose from {', '.join(RECIPES)})")

    import torch

    from ragcritic_lib.critic import frontier
    from ragcritic_lib.critic.train import (TrainSettings, cache_lower, encode, fresh_copy, load_split_model,
                                            train_sft, verdict_margins)
    from ragcritic_lib.critic.verifier import EncoderVerifier, VerifierSettings, dev_pairs_and_labels, train_verifier
    from ragcritic_lib.io import read_jsonl
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    params = load_params()
    sft = params["critic_sft"]
    klass = cpu_class()
    data_dir = paths.resolve(args.data_dir)
    examples = read_jsonl(data_dir / "sft_train.jsonl")
    dev_examples = read_jsonl(data_dir / "sft_dev.jsonl")
    dev_keys = [s["qkey"] for s in read_jsonl(data_dir / "dev_samples.jsonl")]
    sources = [x.strip() for x in args.sources.split(",") if x.strip()]
    suffix = f"-{'+'.join(sources)}" if sources else ""
    if sources:  # sft_train.jsonl holds the chat examples of train_samples.jsonl, in its order
        samples = read_jsonl(data_dir / "train_samples.jsonl")
        if len(samples) != len(examples):
            raise SystemExit(f"{data_dir}: train_samples.jsonl and sft_train.jsonl differ in length")
        examples = [e for e, smp in zip(examples, samples) if smp["source"] in sources]
        if not examples:
            raise SystemExit(f"--sources {args.sources}: no training sample has these sources")
    base = paths.resolve(sft["base_model"] or params["common"]["generator"]["model"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, cpu_class {klass}; "
          f"{len(examples)} training examples, {len(dev_examples)} dev answers")

    split18, tok = load_split_model(base, 12)

    def encoded(rows, idx):
        keep, enc = [], []
        for i in idx:
            msgs = rows[i]["messages"]
            e = encode(tok, msgs[:-1], msgs[-1]["content"], max_length=int(sft["max_length"]))
            if e is not None:
                keep.append(i)
                enc.append(e)
        return keep, enc

    train_idx, train_enc = encoded(examples, frontier.subset(examples, args.examples, seed=args.seed))
    dev_idx, dev_enc = encoded(dev_examples, range(len(dev_examples)))
    sub, dev_sub = [examples[i] for i in train_idx], [dev_examples[i] for i in dev_idx]
    labels, groups = [e.is_error for e in dev_enc], [dev_keys[i] for i in dev_idx]
    n, n_dev, n_full = len(train_enc), len(dev_enc), len(examples)
    print(f"subset: {n} training examples ({sum(e.is_error for e in train_enc)} wrong), {n_dev} dev answers "
          f"({sum(labels)} wrong), tokens per example {sum(len(e.ids) for e in train_enc) / max(1, n):.0f}")

    rows, caches, cache_s = [], {}, {}

    def settings(layers: int) -> TrainSettings:
        return TrainSettings(method="full", train_layers=layers, epochs=1.0, learning_rate=float(sft["learning_rate"]),
                             batch_size=int(sft["batch_size"]), eval_every=max(1, n // 4), patience=99,
                             max_length=int(sft["max_length"]), verdict_weight=float(sft["verdict_weight"]),
                             seed=args.seed)

    def cache(depth: int):
        """(train cache, dev cache) after ``depth`` frozen layers, and its seconds so far."""
        if depth not in caches:
            if depth == 18:
                (tc, dc), s = frontier.timed(lambda: (cache_lower(split18, train_enc, batch_size=32, dtype="auto"),
                                                      cache_lower(split18, dev_enc, batch_size=32, dtype="auto")))
                caches[18], cache_s[18] = (tc, dc), s
            else:
                prev = max(d for d in (18, 24) if d < depth)
                ptc, pdc = cache(prev)
                layers = split18.inner.layers[prev:depth]
                (tc, dc), s = frontier.timed(lambda: (frontier.extend_cache(split18, ptc, layers),
                                                      frontier.extend_cache(split18, pdc, layers)))
                caches[depth], cache_s[depth] = (tc, dc), cache_s[prev] + s
            print(f"cache after {depth} layers: {cache_s[depth]:.0f} s in all")
        return caches[depth]

    def generative(layers: int) -> dict:
        depth = 30 - layers
        tc, dc = cache(depth)
        trial = fresh_copy(split18, layers)
        rep = train_sft(trial, tok, train_enc, tc, dev_enc, dc, settings(layers), progress=print)
        margins, eval_s = frontier.timed(lambda: verdict_margins(trial, dc, dev_enc, tok, batch_size=32, dtype="auto"))
        evals = len(rep.curve)
        train_per = max(0.0, rep.seconds - evals * eval_s) / n
        proj = frontier.projected_minutes(cache_seconds_per_example=cache_s[depth] / (n + n_dev),
                                          train_seconds_per_example_pass=train_per, train_examples=n_full,
                                          dev_examples=n_dev, passes=1.0, evaluations=max(1, n_full // 400),
                                          eval_seconds=eval_s)
        del trial
        return frontier.row(f"gen-top{layers}{suffix}", scores=margins, labels=labels, groups=groups,
                            seconds=cache_s[depth] + rep.seconds, cpu_class=klass, examples=n, seed=args.seed,
                            body="generative", train_layers=layers, passes=1.0, cache_seconds=round(cache_s[depth], 1),
                            best_at_examples=rep.best_at_examples, curve=rep.curve, projected_stage_minutes=proj)

    for name in wanted:
        t0 = time.time()
        if name.startswith("gen-top"):
            r = generative(int(name[len("gen-top"):]))
        elif name == "probe":
            tc24, dc24 = cache(24)
            (tc30, dc30), s30 = frontier.timed(lambda: (
                frontier.extend_cache(split18, tc24, split18.inner.layers[24:]),
                frontier.extend_cache(split18, dc24, split18.inner.layers[24:])))

            def feats(c24, c30, enc):
                with torch.no_grad():
                    return torch.stack([torch.cat([c24[i][e.verdict_pos].float(),
                                                   split18.inner.norm(c30[i][e.verdict_pos].float())])
                                        for i, e in enumerate(enc)]).numpy()

            scores, fit_s = frontier.timed(lambda: frontier.probe_scores(
                feats(tc24, tc30, train_enc), [e.is_error for e in train_enc], feats(dc24, dc30, dev_enc), seed=args.seed))
            frozen = cache_s[24] + s30
            proj = frontier.projected_minutes(cache_seconds_per_example=frozen / (n + n_dev),
                                              train_seconds_per_example_pass=fit_s / n, train_examples=n_full,
                                              dev_examples=n_dev, passes=1.0)
            r = frontier.row(f"probe{suffix}", scores=scores, labels=labels, groups=groups, seconds=frozen + fit_s,
                             cpu_class=klass, examples=n, seed=args.seed, body="probe", train_layers=0, passes=1.0,
                             cache_seconds=round(frozen, 1), projected_stage_minutes=proj)
        else:
            folder = paths.resolve(params["critic_body"]["verifier_model"])
            layers = int(name[len("verifier-top"):])
            v = EncoderVerifier(folder, max_length=int(params["critic_body"]["verifier_max_length"]), seed=args.seed)
            rep = train_verifier(v, sub, dev_sub, VerifierSettings(
                epochs=args.verifier_epochs, learning_rate=float(params["critic_body"]["verifier_learning_rate"]),
                batch_size=int(sft["batch_size"]), max_length=int(params["critic_body"]["verifier_max_length"]),
                eval_every=max(1, n // 2), seed=args.seed, train_layers=layers), progress=print)
            pairs, _ = dev_pairs_and_labels(dev_sub)
            scores, eval_s = frontier.timed(lambda: v.scores(pairs))
            train_per = max(0.0, rep.seconds - len(rep.curve) * eval_s) / (n * args.verifier_epochs)
            proj = frontier.projected_minutes(cache_seconds_per_example=0.0, train_seconds_per_example_pass=train_per,
                                              train_examples=n_full, dev_examples=n_dev, passes=args.verifier_epochs,
                                              evaluations=max(1, int(n_full * args.verifier_epochs) // 400),
                                              eval_seconds=eval_s)
            r = frontier.row(name + suffix, scores=scores, labels=labels, groups=groups, seconds=rep.seconds,
                             cpu_class=klass, examples=n, seed=args.seed, body="verifier", train_layers=layers,
                             passes=args.verifier_epochs, best_at_examples=rep.best_at_examples, curve=rep.curve,
                             projected_verifier_minutes=proj, projected_stage_minutes=proj)
        r["sources"] = sources or "all"
        r["pool"] = n_full   # training samples of these sources; the subset is drawn from them
        rows.append(r)
        print({k: r[k] for k in (*frontier.ROW_KEYS, "projected_stage_minutes")}, f"({time.time() - t0:.0f} s)")

    if args.append and Path(args.out).exists():
        old = json.loads(Path(args.out).read_text(encoding="utf-8"))
        if old.get("cpu_class") != klass:
            raise SystemExit(f"{args.out}: its rows come from {old.get('cpu_class')}, this CPU is {klass}: not appended")
        names = {r["name"] for r in rows}
        rows = [r for r in old["recipes"] if r["name"] not in names] + rows
    tags = [r for r in rows if r.get("body") == "generative"]
    for r in rows:
        if r.get("body") in ("verifier", "probe") and tags and "with_tags_from" not in r:
            cheapest = min(tags, key=lambda t: t["projected_stage_minutes"])
            r["with_tags_from"] = cheapest["name"]
            r["projected_stage_minutes"] = round(r["projected_stage_minutes"] + cheapest["projected_stage_minutes"], 1)
    budget = STAGE_BUDGET.get(klass, 100.0) * STAGE_OVERHEAD
    choice = frontier.choose(rows, budget_minutes=budget)
    pools = {("+".join(r["sources"]) if isinstance(r.get("sources"), list) else "all"): r["pool"]
             for r in rows if "pool" in r}
    meta = {"cpu_class": klass, "subset": {"train": max(r["examples"] for r in rows), "dev": n_dev,
                                           "dev_wrong": sum(labels), "seed": args.seed, "pools": pools},
            "budget_minutes": budget, "choice": choice,
            "note": ("train_seconds: measured here on the subset, the frozen-layer cache included; "
                     "projected_stage_minutes: the recipe on the full training set (a verifier or probe adds the "
                     "cheapest generative recipe, which writes the tags)")}
    frontier.write_frontier(args.out, rows, **meta)
    frontier.plot_frontier(rows, args.figure, title=f"Critic recipes on {n} examples ({klass})")
    print(f"choice: {choice}\nwrote {args.out} and {args.figure}")


if __name__ == "__main__":
    main()
