"""RAG-Error benchmark: balanced construction and the scorer on hand-made critiques."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragcritic_lib.critic.benchmark import (
    benchmark_metrics, benchmark_table, build_benchmark, plot_per_label, score_critic, score_known_causes,
)
from ragcritic_lib.critic.critics import parse_critic_output
from ragcritic_lib.mining.taxonomy import load_taxonomy

A1, A2 = "Incomplete Information", "Insufficient or Incomplete Information Retrieval"
B1, B2 = "Irrelevant Information", "Irrelevant Information Retrieval"
C1, C2 = "Overly Verbose Response", "Overly Complex and Redundant Response"


@pytest.fixture(scope="module")
def tx():
    return load_taxonomy()


def _gold_err(t1: list[str], t2: list[str]) -> str:
    return json.dumps({"Judgement": "Error", "tag1": t1, "tag2": t2, "tag3": [], "Error_analysis": ""})


GOLDS = ['{"Judgement": "Correct"}'] * 4 + [
    _gold_err([A1], [A2]), _gold_err([A1, B1], [A2, B2]), _gold_err([B1], [B2]), _gold_err([C1], [C2])]
PRED_TEXTS = [
    '{"Judgement": "Correct"}',                                        # right
    '```json\n{"Judgement": "Error", "tag1": ["%s"]}\n```' % A1,       # wrong
    "",                                                                # parse failure
    "{'Judgement': 'Correct',}",                                       # right after repair
    '{"Judgement": "Error", "tag1": ["%s"], "tag2": ["%s", "%s"]}' % (A1, A2, B2),
    '{"Judgement": "Error", "tag1": ["%s"], "tag2": ["%s"], "tag3": ["x"], "Error_analysis": "cut' % (A1, A2),
    '{"Judgement": "Correct", "tag1": ["%s"]}' % B1,                   # misses the error; tags ignored
    'garbage {"Judgement": "Error", "tag1": ["Nope", "%s"], "tag2": ["%s"]' % (C1, B2),
]


def test_scorer_exact_numbers(tx) -> None:
    preds = [parse_critic_output(t, tx) for t in PRED_TEXTS]
    r = score_critic(preds, GOLDS, tx)
    assert (r["n"], r["n_correct_gold"], r["n_error_gold"]) == (8, 4, 4)
    assert r["identification"] == {"acc_correct": 0.5, "acc_error": 0.75, "acc_avg": 0.625}
    assert r["predicted_judgements"] == {"Correct": 3, "Error": 4, "none": 1}
    t1, t2 = r["tag1"], r["tag2"]
    assert t1["micro"] == {"precision": 1.0, "recall": 0.6, "f1": 0.75}
    assert t1["macro"] == {"precision": 0.6667, "recall": 0.6667, "f1": 0.6667}
    assert t1["official_sample_recall"] == 0.625 and t1["sample_f1"] == 0.6667
    assert t1["per_label"][B1] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 2, "predicted": 0}
    assert t1["per_label"][A1] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2, "predicted": 2}
    assert t1["per_label"]["Erroneous Information"]["support"] == 0
    assert t2["micro"] == {"precision": 0.5, "recall": 0.4, "f1": 0.4444}
    assert t2["macro"] == {"precision": 0.3333, "recall": 0.3333, "f1": 0.3333}
    assert t2["official_sample_recall"] == 0.375 and t2["sample_f1"] == 0.3333
    assert t2["per_label"][B2] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 2, "predicted": 2}
    assert r["classification"] == {"tag1_f1": 0.75, "tag2_f1": 0.4444, "avg_f1": 0.5972,
                                   "official_avg_sample_recall": 0.5}
    assert (r["parse_failure_rate"], r["valid_json_rate"], r["unknown_labels_per_critique"]) == (0.125, 0.5, 0.125)


def test_scorer_accepts_dicts_and_rejects_bad_input(tx) -> None:
    preds = [parse_critic_output(t, tx).to_dict() for t in PRED_TEXTS]
    assert score_critic(preds, [json.loads(g) for g in GOLDS], tx)["identification"]["acc_avg"] == 0.625
    only_errors = score_critic(preds[4:], GOLDS[4:], tx)["identification"]
    assert only_errors == {"acc_correct": None, "acc_error": 0.75, "acc_avg": 0.75}
    with pytest.raises(ValueError, match="8 predictions but 7 gold"):
        score_critic(preds, GOLDS[:7], tx)
    with pytest.raises(ValueError, match="without a valid Judgement"):
        score_critic(preds[:1], ['{"Judgement": "Maybe"}'], tx)


def test_perfect_and_empty_critics(tx) -> None:
    perfect = [parse_critic_output(g, tx) for g in GOLDS]
    r = score_critic(perfect, GOLDS, tx)
    assert r["identification"]["acc_avg"] == 1.0 and r["classification"]["avg_f1"] == 1.0
    silent = score_critic([parse_critic_output("", tx)] * 8, GOLDS, tx)
    assert silent["identification"]["acc_avg"] == 0.0 and silent["tag2"]["micro"]["f1"] == 0.0
    assert silent["parse_failure_rate"] == 1.0


def _sample(i: int, t2: list[str], tx, judgement: str = "Error") -> dict:
    return {"qkey": f"d::{i}", "id": str(i), "judgement": judgement, "tag2": t2,
            "tag1": list(dict.fromkeys(tx.parent(t) for t in t2)), "target": "{}"}


def test_benchmark_balanced_over_tier2_and_correctness(tx) -> None:
    errs = [_sample(i, [A2], tx) for i in range(6)] + [_sample(10 + i, [B2], tx) for i in range(2)]
    errs += [_sample(20, [C2, A2], tx)]
    cors = [_sample(100 + i, [], tx, "Correct") for i in range(20)]
    bench, rep = build_benchmark(errs + cors, tx, per_label=3, seed=0)
    assert rep["available"][A2] == 7 and rep["available"][B2] == 2 and rep["available"][C2] == 1
    assert rep["selected"][C2] == 1 and rep["selected"][B2] == 2 and rep["selected"][A2] == 3
    # the C2 sample also carries A2, so two more A2 samples complete N = 3
    assert rep["n_error"] == 5 and rep["n_correct"] == 5 and len(bench) == 10
    assert B2 in rep["labels_below_n"] and A2 not in rep["labels_below_n"]
    assert len(rep["labels_below_n"]) == len(tx.tier2) - 1
    assert build_benchmark(errs + cors, tx, per_label=3, seed=0)[0] == bench


def test_known_causes_scored_on_tier1(tx) -> None:
    known = {"supporting_not_retrieved": {"tier1": [A1], "tier2": [A2]}, "verbose_or_truncated": {"tier1": [C1], "tier2": []}}
    samples = [{"judgement": "Error", "known_causes": ["supporting_not_retrieved"]},
               {"judgement": "Error", "known_causes": ["supporting_not_retrieved", "verbose_or_truncated"]},
               {"judgement": "Error", "known_causes": []},
               {"judgement": "Correct", "known_causes": ["verbose_or_truncated"]}]
    preds = [parse_critic_output(t, tx) for t in [
        '{"Judgement": "Error", "tag1": ["%s"], "tag2": ["%s"]}' % (A1, A2),
        '{"Judgement": "Correct", "tag1": ["%s"]}' % C1,
        '{"Judgement": "Error", "tag1": ["%s"]}' % A1,
        '{"Judgement": "Error", "tag1": ["%s"]}' % C1]]
    r = score_known_causes(preds, samples, known)
    assert (r["pairs"], r["records"], r["tier1_hit_rate"], r["tier2_hit_rate"]) == (3, 2, 0.3333, 0.5)
    assert r["per_cause"]["supporting_not_retrieved"]["tier1_hits"] == 1


def test_table_and_figure(tx, tmp_path: Path) -> None:
    r = score_critic([parse_critic_output(t, tx) for t in PRED_TEXTS], GOLDS, tx)
    rows = benchmark_table({"sft": r})
    assert rows == [{"critic": "sft", "auroc": None, "auroc_ci": None, "correct": 50.0, "error": 75.0, "ident_avg": 62.5, "tag1_f1": 75.0,
                     "tag2_f1": 44.4, "cls_avg": 59.7, "tag1_macro_f1": 66.7, "tag2_macro_f1": 33.3,
                     "official_recall_avg": 50.0, "parse_fail": 12.5}]
    fig = plot_per_label({"sft": r, "other": r}, tx)
    out = tmp_path / "fig.png"
    fig.savefig(out)
    assert out.stat().st_size > 1000
    assert [ax.get_title() for ax in fig.axes] == ["Tier-1 labels", "Tier-2 labels"]


def test_the_figure_leaves_the_kernels_backend_alone(tx) -> None:
    """A notebook shows figures through its own backend (inline in JupyterLab); a plot function
    that switches it to Agg leaves the notebook without its figure."""
    import matplotlib
    import matplotlib.pyplot as plt

    before = matplotlib.get_backend()
    matplotlib.use("svg")
    try:
        r = score_critic([parse_critic_output(t, tx) for t in PRED_TEXTS], GOLDS, tx)
        plt.close(plot_per_label({"sft": r}, tx))
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)


def test_benchmark_metrics_keep_token_counts_only(tx) -> None:
    from ragcritic_lib.critic.critics import HeuristicCritic, LLMCritic
    from ragcritic_lib.llm import CallableLLM

    bench = [{"question": "Who wrote it?", "passages": ["Title\nIt was written by Ann."], "prediction": "Ann",
              "target": '{"Judgement": "Correct"}'},
             {"question": "Where is it?", "passages": [], "prediction": "Paris", "target": GOLDS[4]}]
    critics = {"zero-shot": LLMCritic(CallableLLM(lambda prompt, params: '{"Judgement": "Correct"}'), tx, "zeroshot"),
               "heuristic": HeuristicCritic(tx)}
    results = {name: score_critic(c.critique(bench), [s["target"] for s in bench], tx) for name, c in critics.items()}
    table = benchmark_table(results)
    report = {"n_error": 1, "n_correct": 1}
    metrics = benchmark_metrics(report=report, table=table, results=results, by_dataset={"zero-shot": {}},
                                known_causes={"zero-shot": {"pairs": 0}}, critics=critics)
    stats = critics["zero-shot"].llm.stats
    assert stats.calls == 2 and stats.request_prompt_tokens > 0
    assert metrics == {
        "benchmark": report, "table": table, "critics": results, "by_dataset": {"zero-shot": {}},
        "known_causes": {"zero-shot": {"pairs": 0}}, "style_baseline": {}, "degenerate": [],
        # calls, seconds and cache hits vary with the cache and the machine: left out; the
        # heuristic critic has no LLM.
        "llm_usage": {"zero-shot": {"requests": 2, "request_prompt_tokens": stats.request_prompt_tokens,
                                    "request_completion_tokens": 4}},
    }
    assert list(metrics) == ["benchmark", "table", "critics", "by_dataset", "known_causes", "style_baseline",
                             "degenerate", "llm_usage"]


def test_verdict_auroc_and_bootstrap_intervals(tx) -> None:
    from ragcritic_lib.critic.critics import CriticParse
    from ragcritic_lib.critic.benchmark import verdict_scores, with_confidence

    golds = ['{"Judgement": "Error", "tag1": ["Incomplete Information"], "tag2": []}'] * 20 + ['{"Judgement": "Correct"}'] * 20
    # margins rank every wrong answer above every right one, but the verdicts are all "Correct"
    preds = [CriticParse(judgement="Correct", valid_json=True, margin=1.0 + i) for i in range(20)] + \
            [CriticParse(judgement="Correct", valid_json=True, margin=-1.0 - i) for i in range(20)]
    r = with_confidence(score_critic(preds, golds, tx), preds, golds, tx, seed=0, n_boot=200)
    assert r["verdict_auroc"] == 1.0 and r["verdict_auroc_ci_low"] == 1.0
    assert r["identification"]["acc_avg"] == 0.5 and r["ci95"]["acc_avg"] == [0.5, 0.5]
    # without a margin the verdict is the score: a constant verdict ranks nothing
    flat = [CriticParse(judgement="Correct", valid_json=True) for _ in golds]
    assert set(verdict_scores(flat)) == {0.0}
    assert with_confidence(score_critic(flat, golds, tx), flat, golds, tx, seed=0, n_boot=50)["verdict_auroc"] == 0.5


def test_verdict_auroc_within_kinds_of_question(tx) -> None:
    from ragcritic_lib.critic.critics import CriticParse
    from ragcritic_lib.critic.benchmark import with_confidence

    # kind "a" is mostly wrong, kind "b" mostly right; the score knows only the kind, so it ranks
    # well overall and no better than chance inside a kind
    kinds = ["a"] * 20 + ["b"] * 20
    wrong = [i % 10 != 0 for i in range(20)] + [i % 10 == 0 for i in range(20)]
    golds = ['{"Judgement": "Error", "tag1": [], "tag2": []}' if w else '{"Judgement": "Correct"}' for w in wrong]
    preds = [CriticParse(judgement="Correct", valid_json=True) for _ in golds]
    scores = [1.0 if k == "a" else 0.0 for k in kinds]
    r = with_confidence(score_critic(preds, golds, tx), preds, golds, tx, scores=scores, seed=0, n_boot=200,
                        groups=list(range(40)), kinds=kinds)
    assert r["verdict_auroc"] == 0.9 and r["verdict_auroc_within_kind"] == 0.5
    assert r["verdict_auroc_within_kind_ci_low"] == r["verdict_auroc_within_kind_ci_high"] == 0.5
    assert "verdict_auroc_within_kind" not in with_confidence(score_critic(preds, golds, tx), preds, golds, tx,
                                                              scores=scores, seed=0, n_boot=20)


def test_question_only_baseline_reads_the_question_alone() -> None:
    from ragcritic_lib.critic import corpus

    def sample(i: int, wrong: bool, kind: str) -> dict:
        return {"qkey": f"q{i}", "question": f"{kind} question {i}", "prediction": "same answer", "dataset": "tb",
                "type": kind, "judgement": "Error" if wrong else "Correct"}

    fit = [sample(i, i % 4 != 0, "sum") for i in range(40)] + [sample(40 + i, i % 4 == 0, "when") for i in range(40)]
    bench = [sample(100 + i, i % 2 == 0, "sum") for i in range(10)] + \
            [sample(200 + i, i % 5 == 0, "when") for i in range(10)]
    seen: list[str] = []

    def encode(texts):
        seen.extend(texts)
        return [[1.0, 0.0] if t.startswith("sum") else [0.0, 1.0] for t in texts]

    out = corpus.question_only_baseline(fit, bench, encode=encode, seed=0, n_boot=100)
    assert seen == [s["question"] for s in fit + bench]   # questions only, never an answer
    assert out["fit_on"] == 80 and out["verdict_auroc"] > 0.6 and out["verdict_auroc_within_kind"] == 0.5
    assert out["verdict_auroc_ci_low"] <= out["verdict_auroc"] <= out["verdict_auroc_ci_high"]
    assert corpus.question_kind(bench[0]) == "tb/sum"
    one_verdict = corpus.question_only_baseline(fit[:1], bench, encode=encode, seed=0)
    assert one_verdict["verdict_auroc"] is None and "only one verdict" in one_verdict["why_none"]
    # with no baseline each critic's paired entry is still there, undefined (the smoke run's train answers)
    undefined = corpus.question_only_baseline(fit[:1], bench, encode=encode, seed=0,
                                              critic_scores={"reads": [0.5] * len(bench)})
    assert undefined["critics_minus_baseline"] == {"reads": {"diff": None, "ci_low": None, "ci_high": None}}
    with pytest.raises(ValueError, match="reads"):
        corpus.question_only_baseline(fit[:1], bench, encode=encode, seed=0, critic_scores={"reads": [0.5]})
    # a critic that reads the answer's verdict beats the question alone; one that copies it does not
    wrong = [s["judgement"] == "Error" for s in bench]
    vs = corpus.question_only_baseline(fit, bench, encode=encode, seed=0, n_boot=100, critic_scores={
        "reads the answer": [float(w) for w in wrong],
        "reads the kind": [1.0 if s["type"] == "sum" else 0.0 for s in bench]})["critics_minus_baseline"]
    assert vs["reads the answer"]["diff"] == round(1.0 - out["verdict_auroc"], 4)
    assert 0 < vs["reads the answer"]["ci_low"] <= vs["reads the answer"]["diff"]
    assert vs["reads the kind"] == {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    with pytest.raises(ValueError, match="reads"):
        corpus.question_only_baseline(fit, bench, encode=encode, seed=0, n_boot=10, critic_scores={"reads": [0.5]})
