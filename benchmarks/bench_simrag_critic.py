"""SIM-RAG's sufficiency critics on this CPU: held-out quality against training cost.

Every critic learns from the same self-practice examples (the SIM-RAG stage's Algorithm 1 on the
first ``--questions`` train questions, labelled by the stage's judge) and is checked on the same
held-out questions (the stage's split by question). The critics:

- ``lora-all``: the stage's ``critic: llm`` as it stands, the packaged LLM LoRA-tuned on every
  layer (``simrag.critic_recipe``, one epoch over the balanced set);
- ``lora-top<N>``: the same with LoRA on the top N layers only (``lora_top_layers``), so the
  backward pass stops N layers down;
- ``probe``: ``critic: probe``, the frozen LLM read by a logistic probe (layer
  ``simrag.probe_layer`` and the last; one forward pass per example);
- ``classifier``: the TF-IDF logistic regression of the ablation row.

Each row: held-out accuracy, the accept rates on right and on wrong answers with Wilson 95%
intervals and whether those intervals are apart (``separated``: the stage's target), the AUROC
of the critic's Reject score (a LoRA critic's verdict is 0 or 1, so its AUROC is its balanced
accuracy) with a bootstrap 95% CI over held-out questions, training seconds (the LoRA critics'
held-out verdicts excluded) and the CPU class. Writes ``reports/benchmarks/simrag_critic.json``
and prints the rows. Run it alone: other load on the cores changes the seconds. The generator's
cache keeps the self-practice answers, so a second run pays for the critics only.

    .venv/bin/python benchmarks/bench_simrag_critic.py                        # every critic
    .venv/bin/python benchmarks/bench_simrag_critic.py --critics probe,classifier --questions 40 --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ragcritic_lib import paths

CRITICS = ("lora-all", "lora-top8", "probe", "classifier")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--critics", default=",".join(CRITICS),
                    help="comma-separated; lora-top<N> takes any N (e.g. lora-top4)")
    ap.add_argument("--questions", type=int, default=None,
                    help="train questions of self-practice per dataset (default: simrag.train_questions)")
    ap.add_argument("--out", default=str(paths.ROOT / "reports" / "benchmarks" / "simrag_critic.json"))
    ap.add_argument("--append", action="store_true",
                    help="keep the file's other rows (same CPU class and the same self-practice examples)")
    args = ap.parse_args()
    wanted = [c.strip() for c in args.critics.split(",") if c.strip()]
    bad = [c for c in wanted if c not in CRITICS and not (c.startswith("lora-top") and c[8:].isdigit())]
    if bad:
        raise SystemExit(f"--critics: unknown {', '.join(bad)} (choose from {', '.join(CRITICS)} or lora-top<N>)")

    from ragcritic_lib import runtime
    from ragcritic_lib.baselines import MeteredLLM, simrag
    from ragcritic_lib.baselines.stage_setup import setup_method
    from ragcritic_lib.evaluation.stats import auroc, bootstrap_auroc_ci
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    setup = setup_method("simrag")
    params, seed, sp = setup.params, setup.seed, setup.params["simrag"]
    questions = int(args.questions if args.questions is not None else sp["train_questions"])
    klass = cpu_class()
    retrievers = setup.load_retrievers()
    sim_kw = simrag.loop_settings(setup, max_turns=sp["max_turns"], docs_per_turn=sp["docs_per_turn"],
                                  initial_docs=sp["initial_docs"])
    match_fn = simrag.stage_match_fn(params, sp["match"], sp["match_threshold"])
    t0 = time.time()
    practice, meter = [], MeteredLLM(setup.llm)
    for ds in setup.datasets:
        practice += simrag.self_practice(meter, retrievers[ds], runtime.load_split(params, ds, "train", limit=questions),
                                         match_fn=match_fn, **sim_kw)
    practice_s = time.time() - t0
    practice_cost = meter.cost()
    train_ex, held = simrag.split_by_question(practice, heldout_frac=sp["heldout_frac"], seed=seed)
    balanced = simrag.balance_labels(train_ex, seed=seed, mode=sp["balance"])
    labels = [e["label"] for e in held]
    is_reject = [x == "Reject" for x in labels]
    groups = [e.get("id") or e["question"] for e in held]
    print(f"cpu_class {klass}; self-practice: {len(practice)} examples from {questions} questions in {practice_s:.0f} s "
          f"({sum(e['label'] == 'Accept' for e in practice)} Accept); train {len(train_ex)} distinct, "
          f"{len(balanced)} balanced; held-out {len(held)} ({labels.count('Accept')} Accept)")
    base = runtime.resolve_base_model(params, sp["critic_base_model"], key="simrag.critic_base_model")

    out = Path(args.out)
    doc = {"cpu_class": klass, "questions": questions, "seed": seed, "practice_examples": len(practice),
           "practice_seconds": round(practice_s, 1), "practice_cost": practice_cost,
           "train_distinct": len(train_ex), "train_balanced": len(balanced),
           "heldout": len(held), "heldout_accept": labels.count("Accept"), "critics": [],
           "note": ("train_seconds: the critic's fit on this CPU (the LoRA critics' held-out generation excluded); "
                    "auroc: of the Reject score against the Reject label on held-out questions")}
    rows = []
    if args.append and out.exists():
        old = json.loads(out.read_text(encoding="utf-8"))
        same = ("cpu_class", "questions", "seed", "practice_examples", "heldout", "heldout_accept")
        if any(old.get(k) != doc[k] for k in same):
            raise SystemExit(f"{out}: made from other self-practice data or another CPU class "
                             f"({ {k: old.get(k) for k in same} }); not appended")
        for key in ("practice_seconds", "practice_cost"):  # the cold run's, not this one's cache hits
            doc[key] = old.get(key, doc[key])
        rows = [r for r in old["critics"] if r["name"] not in wanted]
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in wanted:
        t0 = time.time()
        extra = {}
        if name.startswith("lora-"):
            top = 0 if name == "lora-all" else int(name[len("lora-top"):])
            overrides = {"max_steps": -1, "num_train_epochs": 1, "lora_top_layers": top}
            res = simrag.train_llm_critic(balanced, sp["critic_recipe"], paths.ROOT / ".cache" / "bench_simrag" / name,
                                          base_model=base, overrides=overrides)
            seconds = time.time() - t0
            critic = simrag.LLMSufficiencyCritic(runtime.load_trained_model(params, res.adapter_dir,
                                                                            base_model=res.base_model))
            accepted = critic.accept(held)
            scores = [0.0 if a else 1.0 for a in accepted]
            extra = {"steps": res.steps, "seconds_per_step": round(res.seconds_per_step, 2), "rows": res.examples,
                     "invalid_verdicts": critic.invalid}
        else:
            if name == "probe":
                critic = simrag.ProbeSufficiencyCritic(base, layer=sp["probe_layer"], seed=seed).fit(train_ex)
                extra = {"rows": len(train_ex), "layer": sp["probe_layer"]}
            else:
                critic = simrag.ClassifierCritic(seed=seed).fit(balanced)
                extra = {"rows": len(balanced)}
            seconds = time.time() - t0
            scores = critic.scores(held)
            accepted = [s < 0 for s in scores]
        conf = simrag.confusion_matrix(labels, accepted)
        lo, hi = bootstrap_auroc_ci(scores, is_reject, seed=seed, groups=groups)
        ok_ci = conf["accept_rate_correct_ci"] and conf["accept_rate_wrong_ci"]
        row = {"name": name, "train_seconds": round(seconds, 1), "cpu_class": klass, "heldout": len(held),
               "accuracy": conf["accuracy"], "accept_rate_correct": conf["accept_rate_correct"],
               "accept_rate_correct_ci": conf["accept_rate_correct_ci"],
               "accept_rate_wrong": conf["accept_rate_wrong"], "accept_rate_wrong_ci": conf["accept_rate_wrong_ci"],
               "separated": bool(ok_ci and conf["accept_rate_correct_ci"][0] > conf["accept_rate_wrong_ci"][1]),
               "auroc": None if auroc(scores, is_reject) is None else round(auroc(scores, is_reject), 4),
               "auroc_ci": [lo, hi], **extra}
        rows.append(row)
        print(json.dumps(row), f"({time.time() - t0:.0f} s with the held-out check)")
        out.write_text(json.dumps({**doc, "critics": rows}, indent=1) + "\n", encoding="utf-8")  # after every row
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
