"""Cost and quality of stage correction's action recipes, measured on the dev questions.

Stage correction runs the same five action functions for every ladder row; what they cost is
mostly generator calls: GenerateAnswer, and RefineDoc's explain / exemplify / correct, which ask
the generator for a note on every passage (``correction.refine_notes: llm``), and RewriteQuery(expand),
which asks it for an expanded query (``correction.rewrite_expand: llm``; pseudo-relevance feedback
when the line is unusable) unless the expansion is pseudo-relevance feedback alone (``prf``). This
benchmark runs the three rows that act most ("oracle critique": the judge's verdict, labels from the
known causes, rule planner; "oracle verdict": the judge's verdict, the trained critic's labels, the
trained planner; "fixed action": every answer called wrong, the table's default program, which
expands the query) on the first ``correction.dev_questions`` *dev* questions (never test) under each recipe,
with the generator's cache off so every recipe pays its own calls, and reports per recipe and
row: the dev F1 change against standard RAG with its paired 95% CI, the change in the share the
audited judge calls right, the actions' wall seconds and generator calls; and per recipe the
paired per-question F1 difference against the first recipe (the stage default). A cheaper recipe
whose difference CI holds 0 is as good on this evidence; the CPU class is recorded with the times.

Written to ``reports/benchmarks/correction_recipes.json`` (the notes and rerank depth), or
``--out`` (``correction_expand.json``: the expansion).

    .venv/bin/python benchmarks/bench_correction_recipes.py
    .venv/bin/python benchmarks/bench_correction_recipes.py --recipes llm:20,extractive:20 --questions 35
    .venv/bin/python benchmarks/bench_correction_recipes.py --recipes extractive:10,extractive:10:prf \
        --out reports/benchmarks/correction_expand.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

RECIPES = "llm:20,extractive:20,extractive:10"
"""notes:rerank_depth[:expand] per recipe (expand defaults to llm); the first is the comparison's
reference (the stage default)."""


def parse_recipes(text: str) -> list[dict[str, Any]]:
    """"notes:depth[:expand],..." -> [{"name", "notes", "rerank_depth", "expand"}]; one clear error
    on a bad item."""
    from ragcritic_lib.agent.actions import EXPAND_SOURCES, NOTE_SOURCES

    out = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        parts = item.split(":")
        notes, depth, expand = (parts + ["llm"])[:3] if len(parts) == 2 else (parts + ["", "", ""])[:3]
        if (len(parts) not in (2, 3) or notes not in NOTE_SOURCES or not depth.isdigit() or int(depth) < 1
                or expand not in EXPAND_SOURCES):
            raise SystemExit(f"--recipes: bad item {item!r}; want NOTES:DEPTH[:EXPAND] with NOTES in {NOTE_SOURCES}"
                             f" and EXPAND in {EXPAND_SOURCES}")
        name = f"{notes} notes, rerank depth {depth}" + (f", {expand} expand" if expand != "llm" else "")
        out.append({"name": name, "notes": notes, "rerank_depth": int(depth), "expand": expand})
    if not out:
        raise SystemExit("--recipes: no recipe given")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default=RECIPES, help=f"notes:rerank_depth[:expand], comma-separated (default {RECIPES})")
    parser.add_argument("--questions", type=int, default=0, help="dev questions (0 = correction.dev_questions)")
    parser.add_argument("--out", default="reports/benchmarks/correction_recipes.json")
    args = parser.parse_args()
    recipes = parse_recipes(args.recipes)

    from ragcritic_lib import paths, runtime
    from ragcritic_lib.agent.actions import ActionSet
    from ragcritic_lib.agent.dev_runs import dev_ladder
    from ragcritic_lib.agent.ladder import AlwaysErrorCritic, KnownCauseCritic, ladder_records, ladder_table
    from ragcritic_lib.agent.planner import load_trained_planner
    from ragcritic_lib.agent.workflow import OracleCritic, run_methods
    from ragcritic_lib.critic.critics import load_trained_critic
    from ragcritic_lib.data.flashrag import dataset_paths, load_corpus_records
    from ragcritic_lib.evaluation.stats import paired_comparison
    from ragcritic_lib.io import read_json
    from ragcritic_lib.mining.sampling import passage_metadata
    from ragcritic_lib.mining.taxonomy import load_known_causes
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class
    from ragcritic_lib.retrieval import CrossEncoderReranker
    from ragcritic_lib.retrieval.rag import answer_gen_params

    params = load_params()
    setup = dev_ladder(params, questions=args.questions)  # the first dataset's dev questions: the ladder's
    cfg, rag_cfg, gold, ds, dev = setup.cfg, setup.rag_cfg, setup.gold, setup.dataset, setup.records
    taxonomy, table, rule_planner = setup.taxonomy, setup.table, setup.rule_planner
    planner_dir = paths.resolve(cfg["planner_dir"])
    planner_result = read_json(planner_dir / "planner_train_result.json")
    planner = load_trained_planner(params, paths.resolve(planner_result["adapter_dir"]),
                                   variant=params["planner_data"]["prompt"],
                                   max_new_tokens=cfg["planner_max_new_tokens"], name="trained",
                                   decoding=cfg["planner_decoding"], candidates=rule_planner,
                                   scope=cfg["planner_candidates"])
    critic = load_trained_critic(params, paths.resolve(cfg["critic_dir"]), taxonomy, verdict="calibrated",
                                 max_new_tokens=cfg["critic_max_new_tokens"], name="trained")
    corpus = load_corpus_records(dataset_paths(params["common"]["datasets"], ds)["corpus"])
    methods = {"oracle critique": {"critic": KnownCauseCritic(load_known_causes(taxonomy=taxonomy), source_records=dev,
                                                              passage_meta=passage_metadata(corpus), **gold),
                                   "planner": rule_planner},
               "oracle verdict": {"critic": OracleCritic(tagger=critic, **gold), "planner": planner},
               "fixed action": {"critic": AlwaysErrorCritic(), "planner": rule_planner}}
    generator = runtime.load_generator(params, cache=False)  # every recipe pays its own generator calls
    retriever_cfg = runtime.retriever_config(params)
    reranker = CrossEncoderReranker(retriever_cfg["reranker"])
    retriever = runtime.load_retriever(params, ds)
    gen_params = answer_gen_params(rag_cfg["prompt_variant"], rag_cfg["max_new_tokens"])

    results: list[dict[str, Any]] = []
    per_question: dict[str, dict[str, list[float]]] = {}
    for recipe in recipes:
        actions = ActionSet(generator, retriever, gen_params=gen_params, topk=rag_cfg["top_k"],
                            max_doc_words=rag_cfg["max_passage_words"], rag_variant=rag_cfg["prompt_variant"],
                            reranker=reranker, rerank_depth=recipe["rerank_depth"], max_docs=rag_cfg["top_k"],
                            table=table, answer_mode=cfg["answer_mode"], notes=recipe["notes"],
                            expand=recipe["expand"])
        start = time.perf_counter()
        runs, costs = run_methods(dev, methods, actions=actions, max_calls=cfg["max_calls"],
                                  timeout_s=cfg["timeout_s"], table=table)
        wall = time.perf_counter() - start
        rows = {"standard RAG": ("oracle critique", 0), **{name: (name, 1) for name in methods}}
        scored = ladder_records(runs, rows, judge_metric=gold["metric"], judge_threshold=gold["threshold"])
        ladder = ladder_table(scored, seed=int(params["common"]["seed"]))["all"]
        entry: dict[str, Any] = {**recipe, "wall_seconds": round(wall, 1), "rows": {}}
        for name in methods:
            acts = costs[name].get("actions", {})
            entry["rows"][name] = {
                **{k: ladder[name].get(k) for k in ("delta_f1", "ci_low", "ci_high", "delta_judge_acc",
                                                    "delta_judge_acc_ci_low", "delta_judge_acc_ci_high",
                                                    "corrected")},
                "actions_wall_seconds": round(float(acts.get("wall_s", 0.0)), 1),
                "actions_generator_calls": int(acts.get("calls", 0)),
                "actions_prompt_tokens": int(acts.get("prompt_tokens", 0)),
            }
            per_question.setdefault(recipe["name"], {})[name] = [float(r["f1"]) for r in scored[name]]
        entry["actions_wall_seconds"] = round(sum(r["actions_wall_seconds"] for r in entry["rows"].values()), 1)
        results.append(entry)
        print(json.dumps(entry), flush=True)
    reference = recipes[0]["name"]
    for entry in results:
        entry["vs_reference"] = {
            name: {k: (round(v, 4) if isinstance(v, float) else v)
                   for k, v in paired_comparison(per_question[entry["name"]][name], per_question[reference][name],
                                                 seed=0).items() if k in ("delta", "ci_low", "ci_high", "n")}
            for name in methods}
    report = {"dataset": ds, "split": "dev", "questions": len(dev), "reference": reference,
              "cpu_class": cpu_class(), "recipes": results}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for entry in results:
        print(f"{entry['name']:<36} actions {entry['actions_wall_seconds']:7.1f} s  " + "  ".join(
            f"{name}: dF1 {r['delta_f1']:+.4f} ({r['ci_low']:+.4f}..{r['ci_high']:+.4f}) calls {r['actions_generator_calls']}"
            f" vs ref {entry['vs_reference'][name]['delta']:+.4f} ({entry['vs_reference'][name]['ci_low']:+.4f}.."
            f"{entry['vs_reference'][name]['ci_high']:+.4f})" for name, r in entry["rows"].items()))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
