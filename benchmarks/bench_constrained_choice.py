"""The trained planner's constrained decoding on this CPU: the trie-jumping choice against a
token-by-token decode of the same trie.

The planner of stage 08 (``correction.planner_dir``'s adapter, ``planner_decoding: constrained``)
chooses among the error-action table's programs. ``HFBackend.choose`` asks the model only where the
options' token trie branches and feeds each forced run in one forward pass; the reference here is
HF ``generate`` with the trie as ``prefix_allowed_tokens_fn``, one forward pass per token. Both run
on the same planner prompts, built from the first ``--records`` testbed *dev* answers (critiques
with the table's tier-1 labels in turn, so the prompts differ), with the LLM cache off. Prints and
writes ``reports/benchmarks/constrained_choice.json``: seconds per choice of each, the speed-up,
how many choices agree, the mean option length in tokens and the CPU class. Run it alone: other
load on the cores changes the seconds.

    .venv/bin/python benchmarks/bench_constrained_choice.py --records 32
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ragcritic_lib import paths


def stepwise_choose(llm, prompts, options):
    """Token-by-token greedy decoding restricted to each prompt's option trie (HF generate)."""
    import torch
    from transformers import GenerationConfig

    from ragcritic_lib.llm.hf import _left_padded, plan_batches

    end = int(llm.tokenizer.eos_token_id)
    encoded = [llm.encode(llm.render(p)) for p in prompts]
    out = [0] * len(prompts)
    for idx, width in plan_batches([len(e) for e in encoded], llm.batch_size):
        seqs = [{tuple(llm._option_ids(o)) + (end,): k for k, o in reversed(list(enumerate(options[i])))}
                for i in idx]
        tries = []
        for s in seqs:
            trie: dict[tuple[int, ...], set[int]] = {}
            for ids in s:
                for n in range(len(ids)):
                    trie.setdefault(ids[:n], set()).add(ids[n])
            tries.append(trie)
        ids, mask = _left_padded([encoded[i] for i in idx], width, len(idx), llm.pad_token_id)

        def allowed(row, sofar, _t=tries, _w=width):
            nxt = _t[row].get(tuple(sofar[_w:].tolist()))
            return sorted(nxt) if nxt else [end]

        cfg = GenerationConfig(max_new_tokens=max(len(k) for s in seqs for k in s), do_sample=False,
                               pad_token_id=llm.pad_token_id, eos_token_id=llm.eos_token_ids)
        with torch.inference_mode():
            gen = llm.hf_model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg,
                                        prefix_allowed_tokens_fn=allowed)
        for r, i in enumerate(idx):
            row = gen[r, width:].tolist()
            out[i] = seqs[r][tuple(row[: row.index(end) + 1])]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=32, help="testbed dev answers to plan for")
    ap.add_argument("--out", default=str(paths.ROOT / "reports" / "benchmarks" / "constrained_choice.json"))
    args = ap.parse_args()

    from ragcritic_lib.agent.planner import (PlannerContext, RuleBasedPlanner, build_planner_messages, load_error_actions,
                                             load_trained_planner)
    from ragcritic_lib.io import read_json, read_jsonl
    from ragcritic_lib.mining.taxonomy import load_taxonomy
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    params = load_params()
    cfg = params["correction"]
    table = load_error_actions(taxonomy=load_taxonomy())
    rules = RuleBasedPlanner(table, topk=cfg["action_topk"], deep_topk=cfg["deep_topk"])
    result = read_json(paths.resolve(cfg["planner_dir"]) / "planner_train_result.json")
    planner = load_trained_planner(params, paths.resolve(result["adapter_dir"]),
                                   variant=params["planner_data"]["prompt"], name="trained",
                                   max_new_tokens=cfg["planner_max_new_tokens"], decoding="constrained",
                                   candidates=rules, scope=cfg["planner_candidates"])
    llm = planner.llm
    llm.cache = None
    labels = list(table.tier1)
    records = read_jsonl(paths.stage_dir("retrieval_rag") / "testbed" / "dev.jsonl")[: args.records]
    contexts = [PlannerContext.from_record(r, {"judgement": "Error", "analysis": "", "tag1": [labels[k % len(labels)]],
                                               "tag2": [], "tag3": []}, table) for k, r in enumerate(records)]
    prompts = [build_planner_messages(c, variant=planner.variant) for c in contexts]
    options = [[p for p, _ in rules.candidate_programs(c.critic, c.prediction, scope=planner.scope)] for c in contexts]
    rows = {}
    t = time.perf_counter()
    jump = [c.index for c in llm.choose(prompts, options)]
    rows["trie_jump"] = time.perf_counter() - t
    t = time.perf_counter()
    step = stepwise_choose(llm, prompts, options)
    rows["token_by_token"] = time.perf_counter() - t
    lengths = [len(llm._option_ids(o)) + 1 for opts in options for o in opts]
    report = {
        "cpu_class": cpu_class(), "choices": len(prompts), "batch_size": llm.batch_size,
        "options_per_choice": round(sum(map(len, options)) / len(options), 1),
        "mean_option_tokens": round(sum(lengths) / len(lengths), 1),
        "seconds_per_choice": {k: round(v / len(prompts), 3) for k, v in rows.items()},
        "speedup": round(rows["token_by_token"] / rows["trie_jump"], 2),
        "agree": sum(a == b for a, b in zip(jump, step)),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
