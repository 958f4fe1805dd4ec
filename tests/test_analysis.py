"""Notebook 15's library: tables from small metrics files shaped like the real stage outputs,
exact values, and missing inputs reported instead of filled in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragcritic_lib.evaluation import analysis
from ragcritic_lib.io import write_json, write_jsonl

pd = pytest.importorskip("pandas")


def _agg(em, f1, acc, n):
    return {"em": em, "f1": f1, "acc": acc, "n": n}


def _row(ds, method, f1, *, typ="all", n=4, d=None, lo=None, hi=None):
    # A row of ragcritic_lib.baselines.comparison_table as notebook 14 writes it under "rows";
    # an interval not given is the point itself (the schema wants d_f1_low <= d_f1 <= d_f1_high).
    lo = (0.0 if d is None else d) if lo is None else lo
    hi = (0.0 if d is None else d) if hi is None else hi
    return {"dataset": ds, "type": typ, "method": method, "n": n, "em": f1 / 2, "f1": f1, "acc": f1,
            "f1_low": f1 - 0.1, "f1_high": f1 + 0.1, "d_em": 0.0 if d is None else d / 2,
            "d_em_low": None, "d_em_high": None, "d_f1": 0.0 if d is None else d,
            "d_f1_low": lo, "d_f1_high": hi, "p_f1": 0.5}


def _tested(n, d, p, p_holm, *, calls, training_calls, steps):
    # One method of notebook 14's "comparison" block: {dataset: {method: this}}.
    return {"n": n, "em": 0.25, "f1": 0.4 + d, "acc": 0.5, "delta_f1": d, "ci_low": d - 0.1, "ci_high": d + 0.1,
            "p": p, "p_holm": p_holm, "mde": 0.3, "calls_per_question": calls, "training_calls": training_calls,
            "training_seconds": None, "training_steps": steps}


def _score(acc_c, acc_e, f1_1, f1_2):
    # Shape of ragcritic_lib.critic.benchmark.score_critic's output (the parts analysis reads).
    per = {"Retrieval Errors": {"precision": 0.5, "recall": 1.0, "f1": f1_1, "support": 2, "predicted": 4}}
    per2 = {"Irrelevant Information": {"precision": 0.25, "recall": 0.5, "f1": f1_2, "support": 2, "predicted": 4}}
    return {"n": 8, "identification": {"acc_correct": acc_c, "acc_error": acc_e, "acc_avg": (acc_c + acc_e) / 2},
            "classification": {"tag1_f1": f1_1, "tag2_f1": f1_2, "avg_f1": (f1_1 + f1_2) / 2},
            "tag1": {"micro": {}, "macro": {"f1": f1_1}, "per_label": per},
            "tag2": {"micro": {}, "macro": {"f1": f1_2}, "per_label": per2},
            "parse_failure_rate": 0.125}


def write_stage_outputs(root: Path, *, skip: tuple[str, ...] = ()) -> None:
    """Small metrics JSON (and the tables and records analysis reads) like the real stages write."""
    m, t = root / "reports" / "metrics", root / "reports" / "tables"
    files = {
        "00_assets": {"corpus_passages": 600, "trivia_split_sizes": {"train": 80, "dev": 10, "test": 10}},
        "00_testbed": {"corpus": {"passages": 300}, "questions": {"train": {"n": 70}, "dev": {"n": 14}, "test": {"n": 28}}},
        "01_retrieval_rag": {
            "retrieval": {"testbed": {"bm25": {"n": 4, "answer_recall": {"1": 0.25, "5": 0.5},
                                               "support_recall": {"1": 0.125, "5": 0.375}},
                                      "hybrid": {"n": 4, "answer_recall": {"1": 0.5, "5": 0.75}}},
                          "trivia": {"bm25": {"n": 3, "answer_recall": {"1": 0.0, "5": 0.3333}}}},
            "rag": {"testbed": {"test": {**_agg(0.25, 0.4, 0.5, 4), "prefix_rate": 0.75, "truncation_rate": 0.0,
                                         "by_type": {"factual": _agg(0.5, 0.6, 0.5, 2), "temporal": _agg(0.0, 0.2, 0.5, 2)}}},
                    "trivia": {"test": {**_agg(0.0, 0.1, 0.0, 2), "prefix_rate": 0.5, "truncation_rate": 0.5,
                                        "by_answerable": {"False": _agg(0.0, 0.0, 0.0, 1), "True": _agg(0.0, 0.2, 0.0, 1)}}}},
            "closed_book": {"testbed": {"test": {**_agg(0.0, 0.05, 0.0, 4), "prefix_rate": 1.0, "truncation_rate": 0.0}}},
        },
        "02_error_sampling": {"source_statistics": [
            {"dataset": "testbed", "type": "factual", "questions": 2, "samples": 8, "errors": 6, "correct": 2, "error_rate": 0.75},
            {"dataset": "testbed", "type": "temporal", "questions": 2, "samples": 8, "errors": 2, "correct": 6, "error_rate": 0.25}],
            "error_rate_by_member": {"a": 0.5, "b": 0.5}},
        "03_tagging": {"normalization": {"raw_tags": 40, "raw_unique": 30, "final_tags": 20, "final_unique": 5}},
        "04_taxonomy": {"tier1_by_dataset": {"testbed": {"Retrieval Errors": 3, "Reasoning Errors": 1}},
                        "tier2_distribution": {"Irrelevant Information": 2}},
        "05_critic_sft": {"train": {"steps": 4, "examples": 16, "first_loss": 2.5, "last_loss": 1.25},
                          "balance": {"errors": 8, "correct": 8}},
        "06_critic_dpo": {"pairs": {"coarse": 6, "fine": 4}, "train": {"beta": 0.3, "steps": 2, "pairs_used": 10,
                                                                      "first_loss": 0.69, "last_loss": 0.6}},
        "07_benchmark": {"critics": {"SFT+DPO critic": _score(0.75, 0.5, 0.4, 0.2), "heuristic": _score(1.0, 0.25, 0.2, 0.1)},
                         "known_causes": {"SFT+DPO critic": {"pairs": 3, "tier1_hit_rate": 2 / 3, "tier2_hit_rate": 1 / 3}},
                         "by_dataset": {"SFT+DPO critic": {"testbed": {"acc_avg": 0.625}}}},
        "08_correction": {
            "n_questions": {"testbed": 4, "trivia": 2},
            # Calls written in each method's programs; the RePAIR table sums RAG-Critic's over
            # RePAIR's datasets only (testbed here).
            "program_calls": {"testbed": {"RAG-Critic": {"Retrieval": 4, "RewriteQuery": 0},
                                          "fixed action": {"Retrieval": 9, "RewriteQuery": 9}},
                              "trivia": {"RAG-Critic": {"Retrieval": 7, "RewriteQuery": 7}}},
            "comparison": {ds: {"standard RAG": _agg(0.25, base, 0.5, 4), "RAG-Critic (1 iter)": _agg(0.5, base + 0.2, 0.5, 4),
                                "RAG-Critic (2 iter)": _agg(0.5, base + 0.25, 0.5, 4),
                                "oracle verdict": _agg(0.25, base + 0.05, 0.5, 4),
                                "fixed action": _agg(0.25, base + 0.1, 0.5, 4),
                                "oracle critique": _agg(0.75, base + 0.3, 0.75, 4)}
                           for ds, base in (("testbed", 0.4), ("trivia", 0.1))},
            "by_type": {"testbed": [{"method": "standard RAG", "iteration": 0, "group": "factual", **_agg(0.5, 0.6, 0.5, 2)},
                                    {"method": "RAG-Critic (1 iter)", "iteration": 1, "group": "factual", **_agg(0.5, 0.7, 0.5, 2)}]},
            "iterations": {"testbed": {"iter0": _agg(0.25, 0.4, 0.5, 4), "iter1": _agg(0.5, 0.6, 0.5, 4),
                                       "iter2": _agg(0.5, 0.65, 0.5, 4)}},
            "cost": {"testbed": {"RAG-Critic": {
                "critic": {"calls": 8.0, "calls_per_sample": 2.0, "prompt_tokens_per_sample": 100.0,
                           "completion_tokens_per_sample": 20.0},
                "planner": {"calls": 4.0, "calls_per_sample": 1.0, "prompt_tokens_per_sample": 50.0,
                            "completion_tokens_per_sample": 30.0},
                "actions": {"calls_per_sample": 1.5, "prompt_tokens_per_sample": 10.0, "completion_tokens_per_sample": 5.0,
                            "action_calls": 9.0},
                "total": {"wall_s": 12.5}}}},
            "planner_training": {"steps": 3, "examples": 12, "device": "cpu"},
        },
        # One metrics file per method stage (ragcritic_lib.baselines.harness.save_method_run) with the
        # method's own block at top level; each block the analysis reads is only in its own file.
        "09_self_refine": {"method": "Self-Refine", "n": {"testbed": 4, "trivia": 2},
                           "cost_by_dataset": {"testbed": {"calls": 12, "prompt_tokens": 1600, "completion_tokens": 200},
                                               "trivia": {"calls": 6, "prompt_tokens": 900, "completion_tokens": 60}},
                           "training": {}, "runs": {}, "degenerate": [], "seconds": {"test": 10.0}},
        "10_crag": {"method": "CRAG", "n": {"testbed": 4}, "cost_by_dataset": {"testbed": {"calls": 8}},
                    "training": {"calls": 20}, "runs": {}, "degenerate": [], "seconds": {"test": 4.0}},
        "11_simrag": {"method": "SIM-RAG", "n": {"testbed": 4},
                      "heldout_confusion": {"correct_accept": 3, "correct_reject": 1, "wrong_accept": 2, "wrong_reject": 4,
                                            "n": 10, "accuracy": 0.7,
                                            "shares": {"correct_accept": 0.3, "correct_reject": 0.1, "wrong_accept": 0.2,
                                                       "wrong_reject": 0.4}}},
        "12_repair": {"method": "RePAIR", "n": {"testbed": 4},
                      "action_calls": {"Retrieval": 2, "RewriteQuery": 1}},
        # ragec_summary's fields at top level, then notebook 13's own keys.
        "13_ragec": {"errors": 5, "votes": 15, "invalid_votes": 1, "invalid_vote_rate": 1 / 15,
                     "stages": {"chunking": 1, "retrieval": 2, "reranking": 0, "generation": 2}, "reranking_stage": False,
                     "degenerate": ["ragec: the diagnosed pipeline has no reranking stage, so E7/E8 cannot be chosen"],
                     "answers": {"testbed": {"answers": 4, "wrong": 3, "diagnosed": 3}},
                     "mode_frequency": {"1": 0, "2": 1, "3": 3},
                     "agreement": {"n": 4, "side_agreement": 0.75, "type_agreement": 0.25},
                     "critic_source": "notebook 08 critic", "cost": {"calls": 15}},
        "14_comparison": {
            "rows": [_row("testbed", "standard RAG", 0.4), _row("testbed", "RAG-Critic", 0.5, d=0.1, lo=-0.05, hi=0.25),
                     _row("testbed", "SIM-RAG (oracle critic)", 0.7, d=0.3, lo=0.1, hi=0.5),
                     _row("testbed", "Self-Refine", 0.3, d=-0.1, lo=-0.2, hi=0.0),
                     _row("testbed", "standard RAG", 0.6, typ="factual", n=2),
                     _row("testbed", "RAG-Critic", 0.8, typ="factual", n=2, d=0.2),
                     _row("trivia", "standard RAG", 0.1, n=2), _row("trivia", "RAG-Critic", 0.2, n=2, d=0.1, lo=0.0, hi=0.2),
                     _row("trivia", "Self-Refine", 0.1, n=2, d=0.0)],
            "comparison": {ds: {"standard RAG": _tested(n, 0.0, None, None, calls=1.0, training_calls=0, steps=0),
                                "RAG-Critic": _tested(n, 0.1, 0.2, 0.4, calls=4.5, training_calls=512, steps=30),
                                "Self-Refine": _tested(n, -0.1 if ds == "testbed" else 0.0, 0.0004, 0.0008, calls=3.0,
                                                       training_calls=0, steps=0)}
                           for ds, n in (("testbed", 4), ("trivia", 2))},
            "oracle_and_ablation_rows": {"testbed": {"SIM-RAG (oracle critic)": {"n": 4, "f1": 0.7, "p_holm": None}}},
            "degenerate": ["Self-Refine: the feedback approved 95% of answers"],
            "stage_seconds": {"Self-Refine": {"test": 10.0}, "CRAG": {"tuning": 2.0, "test": 4.0}},
        },
    }
    for stem, data in files.items():
        if stem not in skip:
            write_json(m / f"{stem}.json", data)
    if "13_ragec_types" not in skip:
        (t / "13_ragec").mkdir(parents=True, exist_ok=True)
        (t / "13_ragec" / "ragec_types.csv").write_text(
            "label,stage,mode,second_mode,testbed,trivia\n"
            "E1 Overchunking,chunking,1,0,1,0\n"
            "Percentage chunking,chunking,20.0,0.0,33.3333,0.0\n"
            "E5 Missing Retrieval,retrieval,4,1,2,2\n"
            "Percentage retrieval,retrieval,80.0,100.0,66.6667,100.0\n"
            "Total,,5,1,3,2\n")
    if "error_qa" not in skip:
        recs = [("a", "testbed", ["Retrieval Errors"], ["Irrelevant Information", "Missing Information"]),
                ("a", "testbed", ["Retrieval Errors", "Reasoning Errors"], ["Irrelevant Information"]),
                ("b", "testbed", ["Reasoning Errors"], ["Logical Errors"]),
                ("a", "trivia", ["Retrieval Errors"], ["Missing Information"])]
        write_jsonl(root / "data" / "taxonomy" / "build" / "error_qa.jsonl",
                    [{"id": str(i), "dataset": ds, "pool_member": pm, "critic_target": {"Judgement": "Error", "tag1": t1,
                                                                                       "tag2": t2, "tag3": []}}
                     for i, (pm, ds, t1, t2) in enumerate(recs)])


@pytest.fixture()
def inputs(tmp_path):
    write_stage_outputs(tmp_path)
    return analysis.Inputs(tmp_path / "reports" / "metrics", tmp_path / "reports" / "tables", root=tmp_path)


@pytest.fixture()
def empty_inputs(tmp_path):
    return analysis.Inputs(tmp_path / "reports" / "metrics", tmp_path / "reports" / "tables", root=tmp_path)


def test_a_missing_ladder_row_is_reported(tmp_path):
    import json

    write_stage_outputs(tmp_path)
    path = tmp_path / "reports" / "metrics" / "08_correction.json"
    metrics = json.loads(path.read_text())
    del metrics["comparison"]["testbed"]["oracle verdict"]
    path.write_text(json.dumps(metrics))
    inputs = analysis.Inputs(tmp_path / "reports" / "metrics", tmp_path / "reports" / "tables", root=tmp_path)
    t = analysis.ablation_table(inputs)
    assert "oracle verdict" not in list(t.frame.method[t.frame.dataset == "testbed"])
    assert any("'oracle verdict' not found" in m["reason"] for m in inputs.missing_for("table4_ablations"))


def _pick(frame, **where):
    sel = frame
    for k, v in where.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, where
    return sel.iloc[0]


def test_main_comparison_from_stage_14(inputs):
    t = analysis.main_comparison_table(inputs)
    f = t.frame
    # Notebook 14's names, the baseline printed as the papers do; an oracle run follows its method.
    assert list(f.method[f.dataset == "testbed"]) == ["Standard RAG", "RAG-Critic", "Self-Refine",
                                                       "SIM-RAG (oracle critic)"]
    r = _pick(f, dataset="testbed", method="RAG-Critic")
    assert (r.f1, r.d_f1, r.d_f1_low, r.d_f1_high, r.n, r.source) == (0.5, 0.1, -0.05, 0.25, 4, "14_comparison")
    assert (r.p_perm, r.p_holm, r.mde) == (0.2, 0.4, 0.3)
    assert pd.isna(_pick(f, method="SIM-RAG (oracle critic)").p_holm)  # outside the corrected family
    d = t.display.set_index("Method")
    assert d.loc["RAG-Critic", "testbed F1"] == "50.0 [40.0, 60.0]"
    assert d.loc["RAG-Critic", "testbed ΔF1"] == "+10.0 [-5.0, +25.0]"
    assert d.loc["Standard RAG", "testbed ΔF1"] == "–"
    assert (d.loc["RAG-Critic", "testbed p (Holm)"], d.loc["Self-Refine", "trivia p (Holm)"]) == ("0.400", "<0.001")
    assert d.loc["Standard RAG", "testbed p (Holm)"] == d.loc["SIM-RAG (oracle critic)", "testbed p (Holm)"] == "–"
    assert d.loc["SIM-RAG (oracle critic)", "trivia F1"] == "–"
    # Overall = mean over datasets (0.5 + 0.2) / 2 against (0.4 + 0.1) / 2.
    assert d.loc["RAG-Critic", "Overall F1"] == "35.0 (+10.0)"
    assert d.loc["Standard RAG", "Overall F1"] == "25.0"
    assert d.loc["RAG-Critic", "n"] == "4/2"
    assert any("Self-Refine: the feedback approved 95% of answers" in n for n in t.notes)
    reported = {(m["input"], m["reason"]) for m in inputs.missing_for("table3_main_comparison")}
    assert all(source.endswith("reports/metrics/14_comparison.json") for source, _ in reported)
    assert {reason for _, reason in reported} == {f"method {m!r} not in the comparison" for m in ("CRAG", "SIM-RAG", "RePAIR")}


def test_main_comparison_falls_back_to_stage_08(tmp_path):
    write_stage_outputs(tmp_path, skip=("14_comparison",))
    inputs = analysis.Inputs(tmp_path / "reports" / "metrics", tmp_path / "reports" / "tables", root=tmp_path)
    t = analysis.main_comparison_table(inputs)
    f = t.frame
    assert set(f.source) == {"08_correction"}
    assert list(f.method[f.dataset == "testbed"]) == ["Standard RAG", "RAG-Critic (1 iter)", "RAG-Critic (2 iter)"]
    assert _pick(f, dataset="trivia", method="RAG-Critic (2 iter)").f1 == pytest.approx(0.35)
    assert f.f1_low.isna().all()  # no intervals are made up
    assert any(m["input"].endswith("14_comparison.json") and m["reason"] == "file not found"
               for m in inputs.missing_for("table3_main_comparison"))
    assert "notebook 14 metrics absent" in t.notes[0]
    by_type = analysis.by_type_table(inputs)
    assert _pick(by_type.frame, method="RAG-Critic (1 iter)", type="factual").f1 == 0.7


def test_by_type_table(inputs):
    t = analysis.by_type_table(inputs, metric="f1")
    row = t.display.set_index(["dataset", "type"]).loc[("testbed", "factual")]
    assert (row["Standard RAG"], row["RAG-Critic"], row["n"]) == ("60.0", "80.0", 2)


def test_ablations_and_iterations_exact(inputs):
    t = analysis.ablation_table(inputs)
    f = t.frame
    assert list(f.method[f.dataset == "testbed"]) == [
        "RAG-Critic (1 iter)", "fixed action", "oracle verdict", "oracle critique", "standard RAG"]
    assert _pick(f, dataset="testbed", method="oracle verdict").d_f1 == pytest.approx(-0.15)
    assert t.display.set_index("Method").loc["fixed action", "trivia F1"] == "20.0 (-10.0)"
    assert inputs.missing_for("table4_ablations") == []


    it = analysis.iterations_table(inputs)
    assert list(it.frame["round"]) == [0, 1, 2]
    assert list(it.frame.label) == ["standard RAG", "+ 1 iteration", "+ 2 iterations"]
    assert it.frame.d_f1.iloc[2] == pytest.approx(0.05)
    assert list(it.display["testbed F1"]) == ["40.0", "60.0 (+20.0)", "65.0 (+5.0)"]


def test_stage01_tables(inputs):
    r = analysis.retrieval_recall_table(inputs)
    assert len(r.frame) == 6
    assert _pick(r.frame, dataset="testbed", retriever="bm25", k=5).support_recall == 0.375
    assert list(r.display.columns) == ["dataset", "retriever", "R@1", "R@5"]
    assert r.display.iloc[2]["R@5"] == "33.3"
    s = analysis.standard_rag_table(inputs)
    assert _pick(s.frame, dataset="testbed", method="closed-book", group="all").f1 == 0.05
    assert _pick(s.frame, dataset="testbed", method="standard RAG", group="type=temporal").n == 2
    assert _pick(s.frame, dataset="trivia", group="answerable=True").f1 == 0.2


def test_datasets_and_source_statistics(inputs):
    d = analysis.datasets_table(inputs).frame.set_index("dataset")
    assert d.loc["trivia", "corpus_passages"] == 600 and d.loc["testbed", "test"] == 28
    assert d.loc["testbed", "test_standard_rag"] == 4 and d.loc["testbed", "test_correction"] == 4
    assert d.loc["trivia", "test_comparison"] == 2
    s = analysis.source_statistics_table(inputs)
    assert list(s.frame.type) == ["all", "factual", "temporal"]
    total = s.frame.iloc[0]
    assert (total.questions, total.samples, total.errors, total.error_rate) == (4, 16, 8, 0.5)
    assert any("40 raw" in n and "5 unique" in n for n in s.notes)


def test_cost_tables(inputs):
    acc = analysis.trained_critic_accuracy(inputs, critic="SFT+DPO critic")
    assert acc == 0.625
    c = analysis.correction_cost_table(inputs, critic_accuracy=acc)
    row = c.frame.iloc[0]
    assert (row.critic_calls_per_q, row.critic_tokens_per_q, row.planner_tokens_per_q, row.action_calls, row.wall_s) == \
        (2.0, 120.0, 80.0, 9.0, 12.5)
    assert any("62.5%" in n for n in c.notes)
    t = analysis.method_cost_table(inputs)
    m = t.frame
    assert list(m.method[m.dataset == "testbed"]) == ["Standard RAG", "RAG-Critic", "Self-Refine"]
    sr = _pick(m, dataset="testbed", method="Self-Refine")
    # Calls per question from notebook 14's block; tokens from notebook 09's meter over its 4 questions.
    assert (sr.calls_per_q, sr.prompt_tokens_per_q, sr.completion_tokens_per_q, sr.stage_seconds) == (3.0, 400.0, 50.0, 10.0)
    assert _pick(m, dataset="trivia", method="Self-Refine").prompt_tokens_per_q == 450.0
    rc = _pick(m, dataset="testbed", method="RAG-Critic")
    assert (rc.calls_per_q, rc.training_calls, rc.training_steps) == (4.5, 512, 30)
    assert pd.isna(rc.prompt_tokens_per_q) and pd.isna(rc.stage_seconds)  # not recorded: left empty
    d = t.display.set_index(["dataset", "method"])
    assert d.loc[("testbed", "Standard RAG"), "calls_per_q"] == "1.00"
    assert d.loc[("testbed", "RAG-Critic"), "prompt_tokens_per_q"] == "–"
    assert inputs.missing_for("table8_cost_methods") == []


def test_error_distributions_from_records(inputs):
    t1 = analysis.error_distribution_table(inputs, 1, error_qa_file="data/taxonomy/build/error_qa.jsonl")
    f = t1.frame
    r = _pick(f, pool_member="a", dataset="testbed", label="Retrieval Errors")
    assert (r["count"], r.share_of_labels, r.share_of_errors, r.errors) == (2, 2 / 3, 1.0, 2)
    r = _pick(f, pool_member="all", dataset="all", label="Retrieval Errors")
    assert (r["count"], r.errors) == (3, 4)
    assert f.groupby(["pool_member", "dataset"]).share_of_labels.sum().round(9).eq(1.0).all()
    t2 = analysis.error_distribution_table(inputs, 2, error_qa_file="data/taxonomy/build/error_qa.jsonl", top=1)
    shown = t2.display[(t2.display.pool_member == "a") & (t2.display.dataset == "testbed")]
    assert list(shown.label) == ["Irrelevant Information"]  # 2 of 3 labels: top 1 only


def test_error_distribution_falls_back_to_stage_04(tmp_path):
    write_stage_outputs(tmp_path, skip=("error_qa",))
    inputs = analysis.Inputs(tmp_path / "reports" / "metrics", tmp_path / "reports" / "tables", root=tmp_path)
    t = analysis.error_distribution_table(inputs, 1, error_qa_file="data/taxonomy/build/error_qa.jsonl")
    assert list(t.frame["count"]) == [3, 1] and set(t.frame.pool_member) == {"all"}
    assert inputs.missing_for("fig6_tier1_errors")[0]["input"].endswith("error_qa.jsonl")


def test_critic_benchmark_tables(inputs):
    b = analysis.critic_benchmark_table(inputs)
    r = b.frame.set_index("critic").loc["SFT+DPO critic"]
    assert (r.correct, r.error, r.ident_avg, r.tag1_f1, r.tag2_f1, r.cls_avg) == \
        (0.75, 0.5, 0.625, 0.4, 0.2, pytest.approx(0.3))
    assert b.display.set_index("critic").loc["heuristic", "Ident. Avg"] == "62.5"
    p = analysis.critic_per_label_table(inputs)
    assert _pick(p.frame, critic="heuristic", tier="tag2").f1 == 0.1
    assert list(p.display.columns) == ["tier", "label", "support", "SFT+DPO critic", "heuristic"]
    k = analysis.known_causes_table(inputs).display.set_index("critic")
    assert k.index.tolist() == ["SFT+DPO critic"]
    assert (k.loc["SFT+DPO critic", "tier1_hit_rate"], k.loc["SFT+DPO critic", "testbed_ident_avg"]) == ("66.7", "62.5")
    tr = analysis.critic_training_table(inputs).frame.set_index("run")
    assert tr.loc["critic DPO (06)", "examples"] == 10 and tr.loc["critic SFT (05)", "last_loss"] == 1.25


def test_baseline_diagnostics(inputs):
    r = analysis.ragec_types_table(inputs)
    d = r.display.set_index("Error type")
    assert d.loc["Percentage retrieval", "Mode"] == "80.0%" and d.loc["E5 Missing Retrieval", "trivia"] == 2
    mf = analysis.ragec_mode_frequency_table(inputs).frame
    assert list(mf.errors) == [0, 1, 3] and mf.share.iloc[2] == 0.75
    st = analysis.ragec_stage_table(inputs).frame.set_index("row")
    assert st.loc["stage: retrieval", "share"] == 0.4 and st.loc["agreement: side_agreement", "value"] == 0.75
    stage_table = analysis.ragec_stage_table(inputs)
    assert any("no reranking stage" in n for n in stage_table.notes)
    shown = stage_table.display.set_index("row")
    assert (shown.loc["stage: retrieval", "value"], shown.loc["agreement: side_agreement", "value"]) == (2, "0.750")
    c = analysis.simrag_confusion_table(inputs)
    assert list(c.display["critic: Accept"]) == [3, 2] and list(c.display["critic: Reject"]) == [1, 4]
    assert c.notes == ["n = 10 held-out examples; critic accuracy 70.0%."]
    u = analysis.repair_action_usage_table(inputs)
    assert list(u.frame.action) == ["Retrieval", "RewriteQuery"]
    assert list(u.frame.with_error_categories) == [4, 0] and list(u.frame.repair) == [2, 1]
    assert list(u.display["change %"]) == [-50.0, "–"]
    assert "on testbed;" in u.notes[0]


@pytest.mark.parametrize(("stem", "item", "build"), [
    ("14_comparison", "table3_main_comparison", lambda i: analysis.main_comparison_table(i)),
    ("14_comparison", "table3_by_question_type", lambda i: analysis.by_type_table(i)),
    ("14_comparison", "table8_cost_methods", lambda i: analysis.method_cost_table(i)),
    ("09_self_refine", "table8_cost_methods", lambda i: analysis.method_cost_table(i)),
    ("11_simrag", "simrag_fig3_confusion", lambda i: analysis.simrag_confusion_table(i)),
    ("12_repair", "repair_table3_action_usage", lambda i: analysis.repair_action_usage_table(i)),
    ("08_correction", "repair_table3_action_usage", lambda i: analysis.repair_action_usage_table(i)),
    ("13_ragec", "ragec_table4_mode_frequency", lambda i: analysis.ragec_mode_frequency_table(i)),
    ("13_ragec", "ragec_stages_agreement", lambda i: analysis.ragec_stage_table(i)),
    ("13_ragec_types", "ragec_table2_types", lambda i: analysis.ragec_types_table(i)),
])
def test_each_block_is_read_from_its_own_stage_file(tmp_path, stem, item, build):
    """Without one stage's file, the items built from it name exactly that file as missing and
    nothing is taken from another stage's file in its place."""
    write_stage_outputs(tmp_path, skip=(stem,))
    inputs = analysis.Inputs(tmp_path / "reports" / "metrics", tmp_path / "reports" / "tables", root=tmp_path)
    table = build(inputs)
    missing = inputs.missing_for(item)
    name = "ragec_types.csv" if stem.endswith("_types") else f"{stem}.json"
    assert [(m["input"].split("/")[-1], m["reason"]) for m in missing
            if m["input"].split("/")[-1] == name] == [(name, "file not found")]
    if stem == "14_comparison" and item == "table3_main_comparison":
        assert set(table.frame.source) == {"08_correction"}  # notebook 08's rows, named as such
    elif stem == "09_self_refine":
        sr = _pick(table.frame, dataset="testbed", method="Self-Refine")
        assert sr.calls_per_q == 3.0 and pd.isna(sr.prompt_tokens_per_q)  # tokens not filled in
    elif stem == "14_comparison" and item == "table3_by_question_type":
        assert set(table.frame.source) == {"08_correction"}
    else:
        assert table is None


def test_nothing_present_every_item_missing(empty_inputs, tmp_path):
    builders = [analysis.datasets_table, analysis.source_statistics_table, analysis.retrieval_recall_table,
                analysis.standard_rag_table, analysis.main_comparison_table, analysis.by_type_table,
                analysis.ablation_table, analysis.iterations_table, analysis.critic_training_table,
                analysis.critic_benchmark_table, analysis.critic_per_label_table, analysis.known_causes_table,
                analysis.correction_cost_table, analysis.method_cost_table, analysis.ragec_types_table,
                analysis.ragec_mode_frequency_table, analysis.ragec_stage_table, analysis.simrag_confusion_table,
                analysis.repair_action_usage_table]
    assert all(b(empty_inputs) is None for b in builders)
    for tier in (1, 2):
        assert analysis.error_distribution_table(empty_inputs, tier, error_qa_file="x.jsonl") is None
    out = analysis.Outputs(tmp_path / "analysis")
    index = out.write_index(empty_inputs)
    assert {i["status"] for i in index["items"]} == {"missing"}
    assert all(i["missing"] for i in index["items"]), [i["id"] for i in index["items"] if not i["missing"]]
    metrics = analysis.summary_metrics(index, empty_inputs)
    assert metrics["built"] == [] and len(metrics["not_built"]) == len(analysis.ITEMS)
    assert {m["input"].split("/")[-1] for m in metrics["missing"]} >= {
        f"{stem}.json" for stem in analysis.STAGE_FILES.values()
        if stem not in ("09_self_refine", "10_crag")} | {"ragec_types.csv", "x.jsonl"}
    # Self-Refine's and CRAG's own files are read only for the methods notebook 14 compared
    # (their tokens); see test_each_block_is_read_from_its_own_stage_file.


def test_outputs_write_files_index_and_metrics(inputs, tmp_path):
    out = analysis.Outputs(tmp_path / "out", dpi=40)
    main = analysis.main_comparison_table(inputs)
    out.table("table3_main_comparison", main)
    out.figure("table3_main_comparison", analysis.plot_main_comparison(main), close=True)
    out.table("table6_iterations", None)
    csv = tmp_path / "out" / "tables" / "table3_main_comparison.csv"
    assert pd.read_csv(csv).f1.tolist() == [0.4, 0.5, 0.3, 0.7, 0.1, 0.2, 0.1]
    md = (tmp_path / "out" / "tables" / "table3_main_comparison.md").read_text()
    assert "*Counterpart: RAG-Critic Table 3 / RePAIR Table 2*" in md and "| RAG-Critic |" in md
    for ext in ("png", "svg"):
        assert (tmp_path / "out" / "figures" / f"table3_main_comparison.{ext}").stat().st_size > 1000
    index = out.write_index(inputs)
    by_id = {i["id"]: i for i in index["items"]}
    assert by_id["table3_main_comparison"]["status"] == "partial"  # CRAG, SIM-RAG, RePAIR absent
    assert by_id["table6_iterations"]["status"] == "missing"
    assert len(by_id["table3_main_comparison"]["files"]) == 4
    assert index["by_paper"]["RAG-Critic Table 3 / RePAIR Table 2"] == by_id["table3_main_comparison"]["files"]
    assert json.loads((tmp_path / "out" / "index.json").read_text()) == index
    metrics = analysis.summary_metrics(index, inputs, main)
    assert metrics["headline"]["testbed"]["RAG-Critic"] == {"f1": 0.5, "em": 0.25, "d_f1": 0.1, "d_f1_low": -0.05,
                                                           "d_f1_high": 0.25, "p_holm": 0.4}
    assert "table3_main_comparison" in metrics["partial"]
    # A second run starts clean and writes the same bytes (SVG without dates, stable ids).
    svg = (tmp_path / "out" / "figures" / "table3_main_comparison.svg").read_bytes()
    out2 = analysis.Outputs(tmp_path / "out", dpi=40)
    assert not csv.exists()
    out2.figure("table3_main_comparison", analysis.plot_main_comparison(main), close=True)
    assert (tmp_path / "out" / "figures" / "table3_main_comparison.svg").read_bytes() == svg


def test_every_plot_renders(inputs):
    import matplotlib.pyplot as plt

    tables = {
        analysis.plot_retrieval_recall: analysis.retrieval_recall_table(inputs),
        analysis.plot_ablations: analysis.ablation_table(inputs),
        analysis.plot_iterations: analysis.iterations_table(inputs),
        analysis.plot_critic_benchmark: analysis.critic_benchmark_table(inputs),
        analysis.plot_critic_per_label: analysis.critic_per_label_table(inputs),
        analysis.plot_tier1_distribution: analysis.error_distribution_table(inputs, 1, error_qa_file="data/taxonomy/build/error_qa.jsonl"),
        analysis.plot_tier2_top: analysis.error_distribution_table(inputs, 2, error_qa_file="data/taxonomy/build/error_qa.jsonl"),
        analysis.plot_ragec_types: analysis.ragec_types_table(inputs),
        analysis.plot_simrag_confusion: analysis.simrag_confusion_table(inputs),
    }
    for plot, table in tables.items():
        fig = plot(table)
        assert fig is not None and fig.axes, plot.__name__
        plt.close(fig)
        assert plot(None) is None


def test_bad_json_is_reported_not_raised(tmp_path):
    m = tmp_path / "reports" / "metrics"
    m.mkdir(parents=True)
    (m / "08_correction.json").write_text("{not json")
    inputs = analysis.Inputs(m, tmp_path / "reports" / "tables", root=tmp_path)
    assert analysis.iterations_table(inputs) is None
    (miss,) = inputs.missing_for("table6_iterations")
    assert miss["reason"].startswith("unreadable") and "08_correction.json:1" in miss["reason"]


def test_a_file_off_its_schema_is_reported_not_read(tmp_path):
    """Metrics are read through the stage's typed schema: a value out of range makes the file
    unusable for every item (named with its key path), absent keys stay per-item notes."""
    write_stage_outputs(tmp_path)
    path = tmp_path / "reports" / "metrics" / "08_correction.json"
    metrics = json.loads(path.read_text())
    metrics["comparison"]["testbed"]["fixed action"]["f1"] = 1.3
    path.write_text(json.dumps(metrics))
    inputs = analysis.Inputs(tmp_path / "reports" / "metrics", tmp_path / "reports" / "tables", root=tmp_path)
    assert analysis.ablation_table(inputs) is None and analysis.iterations_table(inputs) is None
    for item in ("table4_ablations", "table6_iterations"):
        (miss,) = inputs.missing_for(item)
        assert miss["input"].endswith("08_correction.json")
        assert miss["reason"] == "does not match its schema: comparison.testbed.fixed action.f1 = 1.3 is not in [0, 1]"


def test_tables_from_the_real_stage_functions(tmp_path):
    """Metrics written by the same functions notebooks 08 and 14 use, so a change of their shape
    shows up here."""
    from ragcritic_lib.agent.workflow import comparison_rows, iteration_table
    from ragcritic_lib.baselines import comparison_table, jsonable, score_records

    def rec(i, qtype, preds):
        return {"id": str(i), "dataset": "testbed", "golden_answers": ["paris"], "metadata": {"type": qtype},
                "predictions": preds, "final_prediction": preds[-1], "prediction": preds[0], "steps": []}

    runs = [rec(0, "factual", ["paris", "paris"]), rec(1, "factual", ["rome", "paris"]),
            rec(2, "temporal", ["rome", "rome"]), rec(3, "temporal", ["lyon", "paris"])]
    results = {"standard RAG": score_records(runs), "RAG-Critic": score_records(runs, pred_key="final_prediction")}
    rows = comparison_table(results, baseline="standard RAG", n_boot=50, alpha=0.1, seed=0)
    m = tmp_path / "reports" / "metrics"
    write_json(m / "14_comparison.json", jsonable({"rows": rows}))
    write_json(m / "08_correction.json", {
        "comparison": {"testbed": {r["method"]: {k: r[k] for k in ("em", "f1", "acc", "n")}
                                   for r in comparison_rows({"RAG-Critic": runs}) if r["group"] == "all"}},
        "iterations": {"testbed": iteration_table(runs)}})
    inputs = analysis.Inputs(m, tmp_path / "reports" / "tables", root=tmp_path)
    main = analysis.main_comparison_table(inputs).frame
    assert list(main.method) == ["Standard RAG", "RAG-Critic"]
    assert list(main.f1) == [0.25, 0.75] and _pick(main, method="RAG-Critic").d_f1 == 0.5
    by_type = analysis.by_type_table(inputs).frame
    assert _pick(by_type, method="RAG-Critic", type="temporal").f1 == 0.5
    it = analysis.iterations_table(inputs).frame
    assert list(it.f1) == [0.25, 0.75]
    ab = analysis.ablation_table(inputs).frame
    assert list(ab.method) == ["RAG-Critic", "standard RAG"] and ab.d_f1.iloc[1] == -0.5


def _quote_files(root: Path, *, f1_01: float, f1_08: float, f1_14: float, n_14: int = 280) -> analysis.Inputs:
    m = root / "reports" / "metrics"
    m.mkdir(parents=True, exist_ok=True)
    write_json(m / "01_retrieval_rag.json", {"rag": {"testbed": {"test": {"f1": f1_01, "n": 280, "em": 0.1}}}})
    write_json(m / "08_correction.json", {"ladder": {"testbed": {"standard RAG": {"f1": f1_08, "n": 280}}}})
    write_json(m / "14_comparison.json", {"rows": [
        {"method": "standard RAG", "dataset": "testbed", "type": "all", "f1": f1_14, "n": n_14},
        {"method": "standard RAG", "dataset": "testbed", "type": "factual", "f1": 0.9, "n": 40},
        {"method": "standard RAG", "dataset": "trivia", "type": "all", "f1": 0.05, "n": 40}]})
    return analysis.Inputs(m, root / "reports" / "tables", root=root)


def test_standard_rag_agreement_catches_a_stage_from_another_run(tmp_path):
    same = analysis.standard_rag_agreement(_quote_files(tmp_path / "a", f1_01=0.2218, f1_08=0.2218, f1_14=0.2218))
    assert same["agree"] is True and same["problems"] == [] and same["max_gap"] == 0.0
    assert list(same["quotes"]) == ["01_retrieval_rag", "08_correction", "14_comparison"]
    stale = analysis.standard_rag_agreement(_quote_files(tmp_path / "b", f1_01=0.2218, f1_08=0.2287, f1_14=0.2218))
    assert stale["agree"] is False and stale["max_gap"] == pytest.approx(0.0069)
    assert stale["problems"] == ["standard RAG on testbed test: 08_correction quotes F1 0.2287 on 280 questions, "
                                 "01_retrieval_rag 0.2218 on 280 (a stage from another run)"]
    fewer = analysis.standard_rag_agreement(_quote_files(tmp_path / "c", f1_01=0.2218, f1_08=0.2218, f1_14=0.2218,
                                                         n_14=250))
    assert fewer["agree"] is False and "on 250 questions" in fewer["problems"][0]
    metrics = analysis.summary_metrics({"items": []}, _quote_files(tmp_path / "d", f1_01=0.2, f1_08=0.2, f1_14=0.3),
                                       agreement=analysis.standard_rag_agreement(
                                           _quote_files(tmp_path / "d", f1_01=0.2, f1_08=0.2, f1_14=0.3)))
    assert metrics["degenerate"] == ["analysis: standard RAG on testbed test: 14_comparison quotes F1 0.3000 on 280 "
                                     "questions, 01_retrieval_rag 0.2000 on 280 (a stage from another run)"]
    lone = analysis.standard_rag_agreement(analysis.Inputs(tmp_path / "none", tmp_path / "t", root=tmp_path))
    assert lone["agree"] is None and lone["quotes"] == {}
