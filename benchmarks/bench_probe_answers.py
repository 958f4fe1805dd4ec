"""Would more real answers lift the verdict probe? A second answer per train question, on dev.

The critic's verdict comes from a logistic probe on the frozen generator (stage 05_critic_body),
fitted on the real answers to train questions: the generator's (one greedy answer to each of 700
testbed train questions) and the sampling pool's, 1,226 answers with 179 right. Its learning curve
rose from 306 to 920 of them and was flat to 1,226, within the dev interval's width. This asks the
next question with more of the same kind of data: the generator answers the same train questions
again, sampled (temperature and top-p of the pool's sampled member, fixed seeds), as standard RAG
(its prompt variant, passages and answer setting); the new answers, judged by the project's judge
(`error_sampling.judge_metric`) against their gold answers and kept where their text is new for the
question, are viewed as the critic views every sample (data/critic_data/critic_prompt.json), and
the probe (the stage's layers and fit) is fitted on the shipped samples alone and on them plus the
new ones. Both are scored on the dev answers of 05_critic_data; the difference is paired, with a
bootstrap 95% CI over dev questions. Train questions only feed the fit, dev only scores it; no test
question is read. Numbers only, written to reports/benchmarks/probe_more_answers.json.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_probe_answers.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragcritic_lib import paths, runtime  # noqa: E402
from ragcritic_lib.critic import corpus as critic_corpus  # noqa: E402
from ragcritic_lib.critic.data import sft_examples  # noqa: E402
from ragcritic_lib.critic.probe import fit_probe, load_frozen, probe_scores, verdict_features  # noqa: E402
from ragcritic_lib.critic.verifier import is_error_example  # noqa: E402
from ragcritic_lib.evaluation.stats import auroc, paired_auroc_diff  # noqa: E402
from ragcritic_lib.io import read_json, read_jsonl  # noqa: E402
from ragcritic_lib.llm import GenParams  # noqa: E402
from ragcritic_lib.mining.taxonomy import load_known_causes, load_taxonomy  # noqa: E402
from ragcritic_lib.pipeline.params import load_params, parse_dataset_counts  # noqa: E402
from ragcritic_lib.pipeline.stage_metrics import cpu_class  # noqa: E402
from ragcritic_lib.retrieval.rag import answer_gen_params, run_standard_rag  # noqa: E402

OUT = ROOT / "reports" / "benchmarks" / "probe_more_answers.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--draws", type=int, default=1, help="sampled answers per train question")
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--limit", type=int, default=0, help="answer only this many train questions (a quick check)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    params = load_params()
    seed, judge, rag = params["common"]["seed"], params["error_sampling"], params["retrieval_rag"]
    body, data_dir = params["critic_body"], paths.stage_dir("critic_data")
    taxonomy = load_taxonomy()
    known = load_known_causes(paths.resolve(params["critic_data"]["known_causes_file"]), taxonomy=taxonomy)
    prompt = read_json(data_dir / "critic_prompt.json")
    view = {k: prompt[k] for k in ("top_k", "passage_words", "label_list", "evidence_words")}
    samples = read_jsonl(data_dir / "train_samples.jsonl")
    examples, dev_examples = read_jsonl(data_dir / "sft_train.jsonl"), read_jsonl(data_dir / "sft_dev.jsonl")
    dev = read_jsonl(data_dir / "dev_samples.jsonl")
    keep = {x.strip() for x in str(body["verdict_sources"]).split(",") if x.strip()}
    base = [e for e, s in zip(examples, samples) if not keep or s["source"] in keep]
    seen = {(s["qkey"], " ".join(str(s["prediction"]).lower().split())) for s in samples}

    t0 = time.time()
    llm = runtime.load_generator(params)
    new = []
    for ds, n in parse_dataset_counts(params["critic_data"]["generator_answers"]).items():
        questions = runtime.load_split(params, ds, "train", limit=min(n, args.limit) if args.limit else n)
        setting = answer_gen_params(rag["prompt_variant"], rag["max_new_tokens"])
        for draw in range(args.draws):
            sampled = GenParams(max_new_tokens=setting.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                                seed=seed + 1 + draw, stop=setting.stop)
            answered = run_standard_rag(llm, questions, retriever=runtime.load_retriever(params, ds), k=rag["top_k"],
                                        variant=rag["prompt_variant"], gen_params=sampled,
                                        max_passage_words=rag["max_passage_words"], desc=f"{ds}/train draw {draw + 1}")
            for s in critic_corpus.answer_samples(answered, known, source="generator_sampled",
                                                  metric=judge["judge_metric"], threshold=judge["judge_threshold"]):
                key = (s["qkey"], " ".join(str(s["prediction"]).lower().split()))
                if key not in seen:
                    seen.add(key)
                    new.append(s)
    generate_seconds = time.time() - t0
    disjoint = critic_corpus.check_disjoint(train=samples + new, dev=dev)
    extra = sft_examples(new, taxonomy, **view)

    t1 = time.time()
    model_dir = runtime.resolve_base_model(params, params["critic_sft"]["base_model"], key="critic_sft.base_model")
    lm, tok = load_frozen(model_dir)
    span = body["probe_answer_layer"] or None

    def feats(rows):
        return verdict_features(lm, tok, [e["messages"] for e in rows], layer=body["probe_layer"], span_layer=span,
                                batch_size=body["batch_size"])

    x_base, x_extra, x_dev = feats(base), feats(extra), feats(dev_examples)
    feature_seconds = time.time() - t1
    import numpy as np

    y_base, y_extra = [is_error_example(e) for e in base], [is_error_example(e) for e in extra]
    y_dev = [is_error_example(e) for e in dev_examples]
    fits = {}
    t2 = time.time()
    for name, (x, y) in {"shipped samples": (x_base, y_base),
                         "shipped + sampled answers": (np.concatenate([x_base, x_extra]), y_base + y_extra)}.items():
        probe = fit_probe(x, y, seed=seed)
        scores = probe_scores(probe, x_dev)
        fits[name] = {"examples": len(y), "right": len(y) - sum(y), "C": probe["C"],
                      "dev_auroc": round(auroc(scores, y_dev), 4), "scores": scores}
    fit_seconds = time.time() - t2
    a, b = fits["shipped samples"]["scores"], fits["shipped + sampled answers"]["scores"]
    # with the sampled answers minus without, resampling dev questions
    diff = paired_auroc_diff(b, a, y_dev, seed=seed, n_boot=args.bootstrap, groups=[s["qkey"] for s in dev])
    record = {
        "date": dt.date.today().isoformat(), "cpu_class": cpu_class("cpu"),
        "dev": {"n": len(y_dev), "wrong": sum(y_dev), "questions": len({s["qkey"] for s in dev})},
        "sampling": {"temperature": args.temperature, "top_p": args.top_p, "draws": args.draws,
                     "new_answers": len(new), "new_right": sum(s["judgement"] == "Correct" for s in new),
                     "questions": disjoint},
        "fits": {k: {kk: vv for kk, vv in v.items() if kk != "scores"} for k, v in fits.items()},
        "difference": {"dev_auroc": diff["diff"], "ci_low": diff["ci_low"], "ci_high": diff["ci_high"]},
        "seconds": {"generate": round(generate_seconds, 1), "features": round(feature_seconds, 1),
                    "fit": round(fit_seconds, 1)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
