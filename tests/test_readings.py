"""The notebooks' "Reading the numbers" sentences: what they say for given metrics, and that they
run on the metrics files the stages committed."""

import json
import math

import pytest

from ragcritic_lib import paths

from ragcritic_lib.evaluation import readings as R
from ragcritic_lib.evaluation.readings import change_sentence


def _text(lines):
    assert isinstance(lines, list) and all(isinstance(x, str) and x for x in lines)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ change_sentence
def test_change_sentence_says_whether_the_interval_contains_zero():
    inside = {"f1": 0.225, "delta_f1": -0.011, "ci_low": -0.043, "ci_high": 0.011, "p_value": 0.40}
    line = change_sentence("RAG-Critic", inside)
    assert "contains 0" in line and "no change against standard RAG is shown" in line
    assert "excludes" not in line and "minimum detectable" not in line
    above = {"f1": 0.288, "delta_f1": 0.052, "ci_low": 0.011, "ci_high": 0.098, "p_value": 0.02}
    line = change_sentence("oracle", above)
    assert "excludes 0 (above standard RAG)" in line and "disagree" not in line
    below = {"f1": 0.16, "delta_f1": -0.07, "ci_low": -0.12, "ci_high": -0.03, "p_value": 0.001}
    assert "excludes 0 (below standard RAG)" in change_sentence("Self-Refine", below)


def test_change_sentence_compares_the_change_with_the_mde():
    row = {"f1": 0.225, "delta_f1": -0.011, "ci_low": -0.043, "ci_high": 0.011, "p_value": 0.4}
    assert "below the minimum detectable effect (0.037)" in change_sentence("x", row, mde=0.037)
    assert "minimum detectable" not in change_sentence("x", row, mde=0.005)
    assert "minimum detectable" not in change_sentence("x", row, mde=float("nan"))


def test_change_sentence_flags_an_interval_the_test_does_not_back():
    row = {"f1": 0.214, "delta_f1": -0.022, "ci_low": -0.050, "ci_high": -0.0015, "p_value": 0.0857}
    line = change_sentence("RAG-Critic (1 iter)", row)
    assert "excludes 0 (below" in line and "disagree" in line and "p 0.0857" in line
    assert "disagree" not in change_sentence("x", {**row, "p_value": 0.01})
    assert "disagree" not in change_sentence("x", {**row, "p_value": None})
    assert change_sentence("x", {"f1": 0.2, "delta_f1": 0.0}).endswith("(no interval).")
    assert "Holm p 1)" in change_sentence("x", {**row, "ci_high": 0.01, "p_holm": 1.0}, p_key="p_holm", p_label="Holm p")


# ------------------------------------------------------------------------------------ 00
def test_reading_assets_one_sentence_without_skipped_lists():
    m = {"corpus_passages": 100, "corpus_articles": 80, "corpus_mean_words": 60.0, "trivia_questions": 50,
         "trivia_split_sizes": {"train": 40, "dev": 5, "test": 5}, "trivia_answerable_rate": 0.47}
    lines = R.reading_assets(m)
    assert len(lines) == 1 and "100 passages from 80" in lines[0] and "40/5/5" in lines[0] and "47%" in lines[0]
    assert "2 trivia lists were skipped (a, b)" in R.reading_assets({**m, "trivia_lists_skipped": ["a", "b"]})[1]
    assert "n/a" in R.reading_assets({})[0]


def test_reading_testbed_per_split_and_empty_split():
    stats = {"entities": {"a": 3, "b": 4}, "corpus": {"documents": 5, "passages": 9, "words_mean": 40.0},
             "questions": {"train": {"n": 10, "n_entities": 4, "by_type": {"x": 5, "y": 5}, "knobs": {"conflict": 2}},
                           "dev": {"n": 7, "n_entities": 2, "by_type": {"x": 3, "y": 4}},
                           "test": {"n": 0}}}
    text = _text(R.reading_testbed(stats))
    assert "7 entities" in text and "2 types, 5 per type" in text and "conflict 20%" in text
    assert "2 types, 3-4 per type" in text and "The test split is empty." in text and "synthetic" in text


# ------------------------------------------------------------------------------------ 01
def _retrieval_metrics(closed_f1):
    return {
        "retrieval": {"tb": {"bm25": {"n": 50, "answer_recall": {"1": 0.2, "3": 0.4, "20": 0.6}},
                             "dense": {"n": 50, "answer_recall": {"1": 0.3, "3": 0.5, "20": 0.7}}}},
        "rag": {"tb": {"test": {"f1": 0.25, "em": 0.1, "acc": 0.3, "n": 40, "truncation_rate": 0.2}}},
        "closed_book": {"tb": {"test": {"f1": closed_f1}}},
        "prompt_variants": [{"dataset": "tb", "variant": "a", "f1": 0.1, "n": 20, "prefix_rate": 1.0},
                            {"dataset": "tb", "variant": "b", "f1": 0.3, "n": 20, "prefix_rate": 0.5}],
    }


def test_reading_retrieval_rag_best_retriever_and_closed_book():
    text = _text(R.reading_retrieval_rag(_retrieval_metrics(0.1), top_k=3))
    assert "dense finds a gold answer in the top 3 passages for 50% of 50" in text and "bm25 40%" in text
    assert "at k=20 the best retriever reaches 70%" in text
    assert "retrieval adds F1 here (+0.150)" in text and "b scores the best F1 (0.300" in text
    assert "one answer moves accuracy by 5%" in text and "without intervals" in text
    worse = _text(R.reading_retrieval_rag(_retrieval_metrics(0.3)))
    assert "retrieval does not add F1 here (-0.050)" in worse and "top 1 passages" in worse  # default k: smallest
    assert R.reading_retrieval_rag({}) == []


# ------------------------------------------------------------------------------------ 02
def test_reading_error_sampling_reports_the_audit_or_its_absence():
    from ragcritic_lib.evaluation import audit
    from pathlib import Path

    rows = audit.read_audit(Path(__file__).parent / "data" / "audit_fixture.jsonl")
    report = audit.judge_audit(rows, metrics=("f1", "truth"), threshold=0.5, source="data/audit/audit.jsonl")
    text = _text(R.reading_error_sampling({"judge": {"metric": "f1", "threshold": 0.5, "audit": report}}))
    assert "Against 10 hand-labelled answers, on the 4 test rows" in text and "f1 25% (5%-70%), truth 75% (30%-95%)" in text
    assert "On the 6 choosing rows truth agrees best (100%); this run judged with f1." in text
    lead = report["choosing"]["best_versus"]["f1"]
    assert ("wider than its paired 95% interval over f1." if lead["ci_low"] > 0
            else "wider than its paired 95% interval over no judge, not over f1.") in text
    absent = _text(R.reading_error_sampling({"judge": {"metric": "f1", "threshold": 0.5,
                                                       "audit": audit.no_audit("data/audit/audit.jsonl")}}))
    assert "No hand-labelled audit (data/audit/audit.jsonl) was read" in absent


def test_reading_error_sampling_judge_at_chance_and_above():
    m = {"pool_size": 2, "samples": 100, "errors": 90, "correct": 10, "judge": {"metric": "f1", "threshold": 0.5},
         "error_rate_by_member": {"a": 0.8, "b": 0.95},
         "by_dataset": {"tb": {"n": 100, "error_rate": 0.9, "gold_in_passages": 0.4}},
         "llm_teacher_agreement": {"records": 24, "judgement_agreement_on_errors": 0.5,
                                   "judgement_agreement_on_correct": 0.5, "rationale_parse_failure_rate": 0.1}}
    text = _text(R.reading_error_sampling(m))
    assert "90 are wrong (90%)" in text and "from 80% (a) to 95% (b)" in text
    assert "at least 56% of its errors had no gold answer" in text  # (0.9 - 0.4) / 0.9
    assert "Only 10 correct answers" in text and "no better than chance" in text
    good = {**m["llm_teacher_agreement"], "judgement_agreement_on_errors": 1.0, "judgement_agreement_on_correct": 0.9}
    assert "above chance" in _text(R.reading_error_sampling({**m, "llm_teacher_agreement": good}))
    assert "not checked" in _text(R.reading_error_sampling({**m, "llm_teacher_agreement": {}}))
    empty = _text(R.reading_error_sampling({}))
    assert "0 pool members sampled 0 answers" in empty and "Only" not in empty


# ------------------------------------------------------------------------------------ 03
def test_reading_tagging_normalization_and_llm_overlap():
    m = {"tagger": "grounded", "error_records": 10, "parse_failure_rate": 0.0,
         "normalization": {"raw_tags": 30, "raw_unique": 12, "final_tags": 25, "final_unique": 6, "unique_after_merge": 9,
                           "too_long_unique": 1, "alpha": 3, "below_alpha_unique": 2, "below_alpha_occurrences": 4},
         "llm_teacher_agreement": {"tagged_records": 8, "tag_parse_failure_rate": 0.25, "tag_exact_jaccard": 0.0,
                                   "tag_word_jaccard": 0.05}}
    text = _text(R.reading_tagging(m))
    assert "wrote 30 tags (12 distinct)" in text and "kept 25 tags (6 distinct)" in text
    assert "does not reproduce them" in text and "rules over the evidence" in text
    llm = {**m, "tagger": "llm", "llm_teacher_agreement": {"tagged_records": 8, "tag_word_jaccard": 0.6}}
    text = _text(R.reading_tagging(llm))
    assert "does not reproduce" not in text and "rules over the evidence" not in text
    none = _text(R.reading_tagging({"normalization": {"raw_tags": 0}}))
    assert "Normalization" not in none and "not compared" in none


# ------------------------------------------------------------------------------------ 04
def test_reading_taxonomy_known_causes_and_namer():
    m = {"tags_clustered": 50, "clusters": 5, "tier2_labels_used": ["a", "b"], "taxonomy": {"tier1": 7, "tier2": 19},
         "mapping_sources": {"override": 2, "similarity": 3}, "error_qa": {"kept": 9, "input": 10},
         "tier1_distribution": {"X": 3, "Y": 7},
         "known_cause_agreement": {"pairs": 12, "tier1_hit_rate": 0.75, "tier2_hit_rate": 0.5, "per_cause": {
             "good": {"n": 8, "tier1_hit_rate": 0.9}, "bad": {"n": 2, "tier1_hit_rate": 0.0}, "none": {"n": 0}}},
         "cluster_name_parse": {"calls": 5, "failures": 5}, "cluster_namer": "grounded"}
    text = _text(R.reading_taxonomy(m))
    assert "onto 2 of the 19 tier-2 labels" in text and "keeps 9 of 10" in text and "Y (7 of 10 labels)" in text
    assert "Best: good (90% of 8); worst: bad (0% of 2)" in text and "fewer than 5 records (bad)" in text
    assert "failed to parse 5 of 5" in text and "clustering and mapping" in text
    bare = _text(R.reading_taxonomy({"known_cause_agreement": {"per_cause": {}}}))
    assert "not checked against construction" in bare and "cluster namer" not in bare


# ------------------------------------------------------------------------------------ 05 / 06
_CAL = {"n": 52, "n_error": 45, "n_correct": 7, "argmax_error_acc": 0.18, "argmax_correct_acc": 1.0,
        "argmax_avg_acc": 0.59, "fitted": True, "threshold": -0.64, "avg_acc": 0.68, "auroc": 0.67}


def _sft(first, last):
    return {"data": {"examples": 2500, "questions": 1100, "correct_share": 0.45,
                     "sources": {"pool": {"correct": 60, "error": 300}, "reference": {"correct": 1065, "error": 0}},
                     "evidence": {"current": {"share": 0.88}, "first_words": {"share": 0.71}},
                     "style_shortcut_auroc": 0.6},
            "dev": {"n": 180, "correct": 29},
            "train": {"steps": 30, "examples": 2500, "method": "full", "first_loss": first, "last_loss": last,
                      "best_dev_auroc": 0.7, "best_at_examples": 1000, "stopped_early": True},
            "untrained_dev_auroc": 0.45,
            "method_comparison": {"full": {"examples": 600, "dev_auroc": 0.62, "seconds": 60.0},
                                  "lora": {"examples": 600, "dev_auroc": 0.58, "seconds": 55.0}},
            "learning_curve": [{"examples": 250, "examples_seen": 250, "dev_auroc": 0.6},
                               {"examples": 1000, "examples_seen": 1000, "dev_auroc": 0.7}],
            "verdict_calibration": _CAL}


def test_reading_critic_sft_says_when_the_loss_rose():
    text = _text(R.reading_critic_sft(_sft(0.98, 1.24)))
    assert "The SFT loss rose from 0.9800 to 1.2400" in text and "went up" in text and "fell" not in text
    text = _text(R.reading_critic_sft(_sft(2.02, 1.94)))
    assert "The SFT loss fell from 2.0200 to 1.9400" in text and "rose" not in text
    assert "stayed at 1.0000" in _text(R.reading_critic_sft(_sft(1.0, 1.00005)))
    assert "No SFT loss was logged" in _text(R.reading_critic_sft(_sft(None, None)))
    assert "2500 samples from 1100 train questions (45% right answers): pool 60 right and 300 wrong" in text
    assert "in the critic's prompt for 88% of the dev answers" in text and "held it for 71%" in text
    assert "0.600 at 250, 0.700 at 1000" in text and "training stopped early" in text
    assert "full (dev AUROC 0.620 after 600 examples, 60 s), lora (dev AUROC 0.580" in text
    assert "optimistic" in text and "moves their accuracy by 14%" in text


def test_reading_critic_sft_names_the_kept_weights_and_the_dev_tags():
    m = _sft(2.0, 1.0)
    assert "0.700 at 1000, is the saved critic" in _text(R.reading_critic_sft(m))
    m["train"].update(select="dev_loss", best_dev_loss=0.4321, best_at_examples=2000)
    m["dev_tags"] = {"n": 40, "tag1": {"precision": 0.5, "recall": 0.25, "f1": 0.3333, "named_share": 0.9},
                     "tag2": {"precision": 0.2, "recall": 0.1, "f1": 0.1333, "named_share": 0.8}}
    text = _text(R.reading_critic_sft(m))
    assert "had the lowest loss, 0.432 at 2000 examples" in text and "is the saved critic" not in text
    assert ("On 40 wrong dev answers, continuing an Error verdict, the critic names a tier-1 label in 90% of its "
            "critiques; against the labels of the answers' known causes its tier-1 F1 is 0.333 (precision 0.500, "
            "recall 0.250) and its tier-2 F1 0.133.") in text


def test_reading_critic_calibration_edge_cases():
    unfitted = {**_sft(1, 0.5), "verdict_calibration": {**_CAL, "fitted": False}}
    assert "No threshold was fitted" in _text(R.reading_critic_sft(unfitted))
    assert "not calibrated" in _text(R.reading_critic_sft({**_sft(1, 0.5), "verdict_calibration": {"n": 0}}))
    no_right = {**_sft(1, 0.5), "verdict_calibration": {**_CAL, "n_correct": 0}}
    assert "moves their accuracy" not in _text(R.reading_critic_sft(no_right))
    assert "There is no training-set report." in _text(R.reading_critic_sft({}))


def test_reading_critic_dpo_loss_and_reward_margin():
    base = {"pairs": {"total": 6, "coarse_kept": 4, "fine_kept": 2, "total_before_cap": 8},
            "train": {"beta": 0.3, "steps": 10, "pairs_used": 6, "first_loss": 0.6931, "last_loss": 0.7169,
                      "last_reward_margin": -0.0121, "last_reward_accuracy": 0.5},
            "verdict_calibration": _CAL}
    text = _text(R.reading_critic_dpo(base))
    assert "The DPO loss rose from 0.6931 to 0.7169" in text and "not below log 2" in text
    assert "favours the rejected critiques over the chosen ones" in text and "50% of pairs ranked right" in text
    better = {**base, "train": {**base["train"], "last_loss": 0.5, "last_reward_margin": 0.4}}
    text = _text(R.reading_critic_dpo(better))
    assert "fell from 0.6931 to 0.5000" in text and "is below log 2" in text
    assert "favours the chosen critiques over the rejected ones" in text
    assert "reward margin" not in _text(R.reading_critic_dpo({"train": {}}))


def test_reading_critic_dpo_held_out_pairs_and_tags():
    base = {"pairs": {"total": 6}, "train": {"beta": 0.3, "pairs_used": 6}, "verdict_calibration": _CAL,
            "dev_auroc": {"before": 0.48, "after": 0.49, "kept_sft_weights": False},
            "dev_pairs": {"n": 200, "loss_before": 0.6931, "loss_after": 0.6012, "accuracy_after": 0.71}}
    text = _text(R.reading_critic_dpo(base))
    assert ("On 200 held-out pairs from the dev samples the DPO loss is 0.6931 for the SFT critic and 0.6012 for "
            "the saved one (71% of the pairs ranked right).") in text
    assert "own dev verdict AUROC: 0.480 before DPO, 0.490 after" in text
    kept = {**base, "dev_auroc": {**base["dev_auroc"], "kept_sft_weights": True},
            "dev_pairs": {**base["dev_pairs"], "loss_after": 0.6931}}
    assert "DPO did not lower it, so the saved critic keeps the SFT weights." in _text(R.reading_critic_dpo(kept))
    tags = {"n": 40, "tag1": {"precision": 0.5, "recall": 0.5, "f1": 0.5, "named_share": 1.0},
            "tag2": {"precision": 0.2, "recall": 0.2, "f1": 0.2, "named_share": 1.0}}
    assert "its tier-1 F1 is 0.500" in _text(R.reading_critic_dpo({**base, "dev_tags": tags}))


# ------------------------------------------------------------------------------------ 07
def _critic(acc_avg, correct, said, tag1=0.0):
    return {"n": 28, "identification": {"acc_avg": acc_avg, "acc_correct": correct, "acc_error": 2 * acc_avg - correct},
            "classification": {"tag1_f1": tag1, "tag2_f1": 0.0}, "predicted_judgements": said, "valid_json_rate": 1.0}


def test_reading_benchmark_same_critics_and_resolution():
    m = {"benchmark": {"n_error": 14, "n_correct": 14, "labels_below_n": ["a"], "per_label_n": 3},
         "critics": {"SFT": _critic(0.5, 0.7, {"Correct": 20, "Error": 8}, 0.24),
                     "SFT+DPO": _critic(0.5, 0.7, {"Correct": 20, "Error": 8}, 0.29),
                     "flat": _critic(0.43, 0.86, {"Correct": 26, "Error": 2})},
         "by_dataset": {"SFT": {"tb": {"acc_correct": 0.7}, "trivia": {"acc_correct": None}}}}
    text = _text(R.reading_benchmark(m))
    assert "SFT and SFT+DPO give the same verdict counts" in text and "differ only in their labels" in text
    assert "it says Correct for 26 of 28" in text and "no critic tells right from wrong answers better" in text
    assert "about ±26% wide" in text and "trivia has no right answer" in text
    m["critics"]["SFT+DPO"] = m["critics"]["SFT"]
    assert "does not tell them apart at all" in _text(R.reading_benchmark(m))
    m["critics"]["good"] = _critic(0.8, 0.8, {"Correct": 14, "Error": 14})
    text = _text(R.reading_benchmark(m))
    assert "Best identification: good (80%)" in text and "no critic tells" not in text
    assert R.reading_benchmark({})[-1] == "No critic was scored."
    assert "interval" not in _text(R.reading_benchmark({"critics": m["critics"]}))  # n = 0: no width


def test_reading_benchmark_says_whether_each_critic_reads_more_than_the_question():
    m = {"critics": {"SFT": _critic(0.6, 0.7, {"Correct": 16, "Error": 12})},
         "question_baseline": {"verdict_auroc": 0.73, "verdict_auroc_ci_low": 0.67, "verdict_auroc_ci_high": 0.79,
                               "critics_minus_baseline": {
                                   "SFT": {"diff": 0.044, "ci_low": -0.021, "ci_high": 0.117},
                                   "DPO": {"diff": 0.09, "ci_low": 0.01, "ci_high": 0.17},
                                   "zero-shot": {"diff": -0.2, "ci_low": -0.3, "ci_high": -0.1},
                                   "one verdict": {"diff": None, "ci_low": None, "ci_high": None}}}}
    text = _text(R.reading_benchmark(m))
    assert ("SFT minus the question-only baseline: +0.044 AUROC (paired 95% CI -0.021..+0.117), so it is not shown "
            "to read more than the question (the interval holds 0).") in text
    assert "DPO minus the question-only baseline: +0.090" in text and "so it reads more than the question" in text
    assert "zero-shot minus" in text and "scores below the question alone" in text
    assert "one verdict minus" not in text


# ------------------------------------------------------------------------------------ 08
def test_reading_correction_ladder_per_dataset():
    row = {"n": 140, "f1": 0.2, "delta_f1": -0.01, "ci_low": -0.04, "ci_high": 0.02, "p_value": 0.5}
    m = {"n_questions": {"tb": 140, "tv": 30},
         "ladder": {"tb": {"standard RAG": {"n": 140, "f1": 0.21}, "RC": row,
                           "oracle": {**row, "delta_f1": 0.05, "ci_low": 0.01, "ci_high": 0.09, "p_value": 0.02}},
                    "tb_mde_f1": 0.107, "tb_paired_mde_f1": {"RC": 0.04}, "tb_answer_recall": 0.47,
                    "tv": {"standard RAG": {"n": 30, "f1": 0.02}, "RC": row}},
         "iterations": {"tb": {"iter0": {"f1": 0.21}, "iter1": {"f1": 0.2}}},
         "verdict_shares": {"tb": {"error_share": 0.54}},
         "degenerate": ["planner:tb/RC"]}
    lines = R.reading_correction(m)
    text = _text(lines)
    assert "On tb (140 questions) standard RAG scores F1 0.210; a change of 0.107" in text and "for 47%" in text
    assert text.count("contains 0") == 2 and "excludes 0 (above" in text
    assert "below the minimum detectable effect (0.040)" in text
    assert "tv runs small" in text and "0.210 -> 0.200" in text and "54% of the tb answers" in text
    assert lines[-1] == "Flagged degenerate: planner:tb/RC."
    assert R.reading_correction({}) == []
    fit = {"n": 140, "acted": 12, "threshold": 1.25, "f1_before": 0.2, "f1_at_threshold": 0.23, "f1_all": 0.18,
           "acts": True}
    text = _text(R.reading_correction({**m, "critic_verdict": {"mode": "dev_f1", "dev_fit": fit}}))
    assert "correcting the 12 the critic doubted most (margin above +1.250) gave dev F1 0.230" in text
    assert "less likely wrong" not in text
    fits = {"verified": {"f1_at_threshold": 0.23}, "unverified": {"f1_at_threshold": 0.215}}
    text = _text(R.reading_correction({**m, "critic_verdict": {"dev_fit": {**fit, "verify": True, "fits": fits}}}))
    assert "as it does on test: dev F1 0.230 against 0.215 keeping every new answer" in text
    idle = {**fit, "acts": False, "acted": 0, "threshold": None}
    text = _text(R.reading_correction({**m, "critic_verdict": {"mode": "dev_f1", "dev_fit": idle}}))
    assert "the trained critic corrects nothing" in text
    vs = {"delta": 0.045, "ci_low": 0.009, "ci_high": 0.097, "kept_default": False}
    none = {**idle, "fitted_threshold": None, "f1_at_fitted": 0.25, "calibrated_threshold": 2.369,
            "f1_at_calibrated": 0.205, "vs_default": vs}
    text = _text(R.reading_correction({**m, "critic_verdict": {"mode": "dev_f1", "dev_fit": none}}))
    assert ("Acting on no dev answer (dev F1 0.250) against the critic's calibrated threshold (+2.369, 0.205): "
            "+0.045 (95% CI +0.009, +0.097), so the critic acts on no test answer.") in text
    text = _text(R.reading_correction({**m, "critic_verdict": {"dev_fit": {**none, "fitted_threshold": 0.5}}}))
    assert "The best dev threshold (+0.500, dev F1 0.250)" in text and "so the fitted one is used." in text
    gated = {**none, "best_threshold": 6.563, "f1_at_best": 0.2502,
             "vs_none": {"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0001, "acts": False}}
    text = _text(R.reading_correction({**m, "critic_verdict": {"mode": "dev_f1", "dev_fit": gated}}))
    # four digits: the one-answer difference (CI high 0.0001) would read +0.000 in three
    assert ("The best dev threshold (+6.563, dev F1 0.2502) against acting on no dev answer: +0.0000 (95% CI "
            "+0.0000, +0.0001), so the fit acts on none (a fit must win beyond its CI).") in text
    assert "so the critic acts on no test answer." in text


# ------------------------------------------------------------------------------------ 09 / 10
def test_reading_self_refine_approvals_and_standard_f1():
    m = {"self_refine": {"questions": 140, "approved": 2, "approval_rate": 0.014, "feedback_calls": 279,
                         "refinements": 277, "answers_changed": 63},
         "scores": {"tb": {"f1": 0.164}}, "degenerate": []}
    text = _text(R.reading_self_refine(m, standard_f1={"tb": 0.236}))
    assert "approved 2 answers (1%)" in text and "almost never approves" in text
    assert "against standard RAG's 0.236 on the same questions (-0.072)" in text and "notebook 14" in text
    assert "against" not in _text(R.reading_self_refine(m))
    approving = {**m, "self_refine": {**m["self_refine"], "approved": 70}, "degenerate": ["always approves"]}
    text = _text(R.reading_self_refine(approving))
    assert "almost never" not in text and "Flagged degenerate: always approves." in text
    assert "Over 0 questions" in _text(R.reading_self_refine({}))
    typed = {**m, "self_refine": {**m["self_refine"], "feedback_by_type": {
        "comparison": {"n": 40, "approval_rate": 0.0, "kinds": {"names a problem": 30, "neither": 10}},
        "temporal": {"n": 20, "approval_rate": 0.05, "kinds": {"names a problem": 18, "approves": 1, "neither": 1}}}}}
    text = _text(R.reading_self_refine(typed))
    assert ("First-round feedback by kind: names a problem 48, neither 11, approves 1; approval rate per question "
            "type: comparison 0% (n 40), temporal 5% (n 20).") in text


def test_reading_crag_routing_against_the_best_single_action():
    c = {"train_pairs": 180, "train_positive_rate": 0.46, "upper": 0.78, "lower": -0.7, "dev_f1": 0.2535, "n": 40,
         "action_f1": {"Ambiguous": 0.2535, "Correct": 0.2187, "Incorrect": 0.2053}, "oracle_f1": 0.2557,
         "test_actions": {"Ambiguous": 94, "Correct": 44}}
    text = _text(R.reading_crag({"crag": {"tb": c}, "scores": {"tb": {"f1": 0.219}}}, standard_f1={"tb": 0.236}))
    assert "+0.000 F1 over always taking Ambiguous: the routing adds nothing on dev" in text
    assert "Ambiguous 94, Correct 44" in text and "(-0.017)" in text
    gain = _text(R.reading_crag({"crag": {"tb": {**c, "dev_f1": 0.3035}}}))
    assert "+0.050 F1 over always taking Ambiguous" in gain and "adds nothing" not in gain
    judged = _text(R.reading_crag({"crag": {"tb": {**c, "objective": "judge_acc", "dev_judge_acc": 0.3,
                                                   "action_judge_acc": {"Ambiguous": 0.25, "Correct": 0.2, "Incorrect": 0.1},
                                                   "oracle_judge_acc": 0.4}}}))
    assert "give dev judge accuracy 30% (F1 0.254)" in judged and "+0.050 judge accuracy over always taking Ambiguous" in judged
    assert "(best action per question: 40%)" in judged
    rare = _text(R.reading_crag({"crag": {"tb": {**c, "action_usage": {
        "shares": {"Correct": 0.6, "Ambiguous": 0.35, "Incorrect": 0.05}, "min_share": 0.1, "below_min": ["Incorrect"],
        "why": {"Incorrect": "the dev-tuned thresholds sent 1 of 40 dev questions there"}}}}}))
    assert ("Incorrect was taken on 5% of the tb test questions (under 10%): the dev-tuned thresholds sent 1 of 40 "
            "dev questions there.") in rare
    assert R.reading_crag({}) == []
    typed = {**c, "test_actions_by_type": {"comparison": {"Correct": 1, "Ambiguous": 3, "Incorrect": 0},
                                           "temporal": {"Correct": 2, "Ambiguous": 0, "Incorrect": 0}}}
    assert ("Most frequent action per question type on tb: comparison Ambiguous 75% (n 4), temporal Correct 100% "
            "(n 2).") in _text(R.reading_crag({"crag": {"tb": typed}}))


# ------------------------------------------------------------------------------------ 11 / 12 / 13 / 14
def _answer(prediction, gold, **extra):
    return {"prediction": prediction, "golden_answers": [gold], **extra}


def test_reading_simrag_practice_confusion_and_test_answers():
    held = {"n": 90, "n_correct": 7, "n_wrong": 83, "accept_rate_correct": 1 / 7, "accept_rate_correct_ci": [0.026, 0.513],
            "accept_rate_wrong": 23 / 83, "accept_rate_wrong_ci": [0.193, 0.380]}
    m = {"practice_examples": 300, "critic": {"name": "llm", "heldout": held}, "balanced_train": 370,
         "practice": {"accept": 32, "distinct_train": 210, "train_accept": 25, "balance": "oversample"},
         "heldout_confusion": {"n": 90, "accuracy": 0.6778, "shares": {"wrong_accept": 0.2556, "correct_reject": 0.0667}},
         "degenerate": ["simrag: few Accept"]}
    records = [_answer("paris", "Paris", simrag_accepted=True, simrag_turns=1),
               _answer("rome", "Paris", simrag_accepted=False, simrag_turns=3),
               _answer("the city of paris", "Paris", simrag_turns=2)]
    runs = {"oracle_critic": ("SIM-RAG (oracle critic)", [_answer("paris", "Paris")])}
    lines = R.reading_simrag(m, records, extra_runs=runs)
    assert lines[0] == ("Self-practice gave 300 examples (32 accepted as correct); the llm critic learned from 210 "
                        "distinct training examples (25 Accept; 370 after balancing by oversample) and scores 68% on 90 "
                        "held-out ones (accepting 26% wrong and rejecting 7% right answers, as shares of all held-out "
                        "examples).")
    assert lines[1] == ("Held out, it accepts 14% (3%-51%) of the 7 right answers and 28% (19%-38%) of the 83 wrong ones "
                        "(Wilson 95% intervals); a useful sufficiency critic accepts the first far more often than the "
                        "second.")
    lines = [lines[0], *lines[2:]]
    # F1 1, 0 and 0.5 ("the city of paris" against "Paris": precision 1/3 once "the" is dropped, recall 1).
    assert lines[1] == ("On the test questions the critic accepted 1 of 3 final answers, after 2.00 turns on average; "
                        "mean F1 0.500; SIM-RAG (oracle critic): 1.000.")
    assert lines[2:] == ["Flagged degenerate: simrag: few Accept."]
    bare = R.reading_simrag({}, [])
    assert "Self-practice gave 0 examples" in bare[0] and "scores n/a on 0 held-out" in bare[0]
    assert bare[1].startswith("Held out, it accepts an unmeasured share of the 0 right answers")
    assert bare[2] == "On the test questions the critic accepted 0 of 0 final answers, after 0.00 turns on average; mean F1 0.000."


def test_reading_repair_counts_changed_answers_against_standard_rag():
    m = {"repair": {"states": {"off": 59, "on": 64}, "offpolicy_pairs": 68, "onpolicy_pairs": 21, "executed": 2,
                    "plans": 3, "distinct_plans": 1, "top_plan_share": 1.0},
         "degenerate": ["repair: one plan is 100% of the 2 executed test plans"]}
    standard = {"tb": [_answer("a", "x"), _answer("b ", "x")], "tv": [_answer("c", "y")]}
    records = [_answer("a", "x"), _answer("b", "x"), _answer("d", "y")]  # whitespace alone is no change
    assert R.reading_repair(m, records, standard) == [
        "The planner trained on 59 off-policy and 64 on-policy states (68 + 21 preference pairs). At test time 2 of 3 "
        "plans executed (1 distinct, the most common 100% of them) and 1 of 3 answers changed.",
        "Flagged degenerate: repair: one plan is 100% of the 2 executed test plans."]
    none = R.reading_repair({"repair": {"top_plan_share": float("nan")}}, [], {})
    assert none == ["The planner trained on 0 off-policy and 0 on-policy states (0 + 0 preference pairs). At test time "
                    "0 of 0 plans executed (0 distinct, the most common n/a of them) and 0 of 0 answers changed."]


def test_reading_repair_gives_the_dev_score_after_each_phase():
    dev = {"start": {"states": 24, "chosen_reward": 0.1, "top_share": 1.0, "best_single_reward": 0.15,
                     "per_state_best_reward": 0.3},
           "offpolicy": None,
           "final": {"states": 24, "chosen_reward": 0.125, "top_share": 0.5, "best_single_reward": 0.15,
                     "per_state_best_reward": 0.3},
           "questions": 30, "calls": 48}
    text = R.reading_repair({"repair": {}, "dev": dev}, [], {})
    assert text[-1] == ("On 24 held-out dev states the planner's picks earned a mean reward of 0.100 before training, "
                        "0.125 after both (the best single plan 0.150, the per-state best 0.300; its most frequent "
                        "pick took 50% of the states).")
    assert len(R.reading_repair({"repair": {}, "dev": {"start": None, "final": None}}, [], {})) == 1


def test_reading_ragec_top_stage_agreement_and_fallbacks():
    m = {"errors": 40, "votes": 400, "invalid_vote_rate": 0.0, "grounded_fallbacks": 0,
         "stages": {"Chunking": 1, "Generation": 33, "Reranking": 5, "Retrieval": 1},
         "agreement": {"n": 12, "side_agreement": 0.5, "type_agreement": 0.25},
         "degenerate": ["ragec: all 5 Reranking errors get the same modal type E7"]}
    assert R.reading_ragec(m) == [
        "RAGEC diagnosed 40 wrong answers with 400 votes; 0% of the votes named no type of the blamed stage.",
        "Most errors are blamed on the Generation stage (33 of 40); stage counts: Chunking 1, Generation 33, "
        "Reranking 5, Retrieval 1.",
        "Against RAG-Critic's tier-1 labels on 12 shared wrong answers: the two blame the same side 50% of the time "
        "and agree on the type 25%.",
        "Flagged degenerate: ragec: all 5 Reranking errors get the same modal type E7."]
    fallback = R.reading_ragec({**m, "grounded_fallbacks": 3, "invalid_vote_rate": float("nan"),
                                "stages": {"Generation": 0}, "agreement": {"n": 0, "side_agreement": None}})
    assert fallback[0].endswith("n/a of the votes named no type of the blamed stage (3 answers fell back to the grounded rule).")
    assert not any(line.startswith("Most errors") for line in fallback)  # no stage blamed
    assert fallback[-2] == "No diagnosed answer can be set against RAG-Critic's tier-1 labels."
    # why none is shared: answered otherwise in the run the critic judged, or called right (so unlabelled)
    none = R.reading_ragec({**m, "degenerate": [], "agreement": {"n": 0, "n_critic_correct": 60, "n_missing": 171}})
    assert none[-1] == ("No diagnosed answer can be set against RAG-Critic's tier-1 labels: 171 were answered otherwise "
                        "in the run the critic judged (notebook 08's first round), and the critic called 60 right, "
                        "writing no labels for them.")
    some = R.reading_ragec({**m, "degenerate": [], "agreement": {**m["agreement"], "n_critic_correct": 3, "n_missing": 25}})
    assert some[-1].endswith("agree on the type 25%; of the rest, 25 were answered otherwise in the run the critic "
                             "judged (notebook 08's first round), and the critic called 3 right, writing no labels "
                             "for them.")


def test_reading_comparison_one_block_per_dataset_in_order():
    base = {"n": 140, "f1": 0.236, "delta_f1": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_holm": None}
    worse = {"n": 140, "f1": 0.164, "delta_f1": -0.072, "ci_low": -0.12, "ci_high": -0.033, "p_holm": 0.0025}
    m = {"comparison": {"tv": {"standard RAG": {**base, "n": 30}, "Worse": worse}, "tb": {"standard RAG": base, "Worse": worse}},
         "summary": {"tb": {"mde_conservative": 0.107}, "tv": {"mde_conservative": 0.2}},
         "degenerate_by_method": {"Worse": ["planner: one plan"]}}
    blocks = R.reading_comparison(m)
    assert [b.split(" (", 1)[0] for b in blocks] == ["On tv", "On tb"]
    assert blocks[1] == R.comparison_block("tb", m["comparison"]["tb"], m["summary"]["tb"], m["degenerate_by_method"])
    assert blocks[1].splitlines()[1] == ("- **Worse**: F1 0.164, change -0.072 (95% CI -0.120..-0.033), below standard RAG "
                                         "after Holm correction (p 0.0025); flagged degenerate: planner: one plan.")
    strict = R.reading_comparison(m, alpha=0.001)[1].splitlines()[1]
    assert "not distinguishable from standard RAG after Holm correction (p 0.0025)" in strict
    assert R.reading_comparison({}) == []


def test_reading_ragec_and_comparison_run_on_the_committed_metrics():
    ragec = _committed("13_ragec")
    top = max(ragec["stages"], key=ragec["stages"].get)
    assert f"blamed on the {top} stage" in _text(R.reading_ragec(ragec))
    comparison = _committed("14_comparison")
    blocks = R.reading_comparison(comparison, alpha=0.05)
    provenance = [b for b in blocks if b.startswith("Provenance: ")]  # one per upstream stage of another class
    assert len(provenance) == len(comparison["environment"].get("provenance") or [])
    assert len(blocks) - len(provenance) == len(comparison["comparison"]) and "n/a" not in "\n".join(blocks)


# ------------------------------------------------------------------------------------ 15
def test_reading_analysis_missing_inputs_and_headline():
    m = {"items": 3, "built": ["a", "b"], "partial": ["b"], "not_built": ["c"], "files": 4,
         "missing": [{"item": "b", "input": "x.json", "key": "k", "reason": "not found"}],
         "headline": {"tb": {"Standard RAG": {"f1": 0.236},
                             "RAG-Critic": {"f1": 0.3, "d_f1": 0.06, "d_f1_low": 0.02, "d_f1_high": 0.1, "p_holm": 0.01}}}}
    text = _text(R.reading_analysis(m))
    assert "2 of 3 paper items" in text and "partial: b" in text and "not built: c" in text
    assert "Missing input for b: x.json k (not found)" in text and "excludes 0 (above Standard RAG)" in text
    m["headline"]["tb"]["RAG-Critic"].update(d_f1_low=-0.01)
    assert "contains 0" in _text(R.reading_analysis(m))
    assert R.reading_analysis({}) == ["0 of 0 paper items were built into 0 files."]
    alike = {"dataset": "testbed", "agree": True, "problems": [],
             "quotes": {"01_retrieval_rag": {"f1": 0.2218, "n": 280}, "14_comparison": {"f1": 0.2218, "n": 280}}}
    assert ("quoted alike by 01_retrieval_rag, 14_comparison (F1 0.222 on 280 questions)"
            in _text(R.reading_analysis({"standard_rag_agreement": alike})))
    apart = {"standard_rag_agreement": {**alike, "agree": False}, "degenerate": ["analysis: 14 quotes F1 0.3"]}
    text = _text(R.reading_analysis(apart))
    assert "quoted alike" not in text and "Flagged degenerate: analysis: 14 quotes F1 0.3." in text


# ------------------------------------------------------------------------------------ committed metrics
_STAGES = {  # stem -> (function, extra keyword arguments the notebook passes)
    "00_assets": (R.reading_assets, {}), "00_testbed": (R.reading_testbed, {}),
    "01_retrieval_rag": (R.reading_retrieval_rag, {"top_k": 3}), "02_error_sampling": (R.reading_error_sampling, {}),
    "03_tagging": (R.reading_tagging, {}), "04_taxonomy": (R.reading_taxonomy, {}),
    "05_critic_sft": (R.reading_critic_sft, {}), "06_critic_dpo": (R.reading_critic_dpo, {}),
    "07_benchmark": (R.reading_benchmark, {}), "08_correction": (R.reading_correction, {}),
    "09_self_refine": (R.reading_self_refine, {"standard_f1": {"testbed": 0.2358}}),
    "10_crag": (R.reading_crag, {"standard_f1": {"testbed": 0.2358}}), "15_analysis": (R.reading_analysis, {}),
}


def _committed(stem):
    path = paths.METRICS_DIR / f"{stem}.json"
    if not path.exists():
        pytest.skip(f"{path} not committed")
    return json.loads(path.read_text())


@pytest.mark.parametrize("stem", sorted(_STAGES))
def test_reading_runs_on_the_committed_metrics(stem):
    fn, kw = _STAGES[stem]
    text = _text(fn(_committed(stem), **kw))
    assert "n/a" not in text, text


def test_committed_readings_follow_the_numbers():
    for stem, kind in (("05_critic_sft", "SFT"), ("06_critic_dpo", "DPO")):
        train = _committed(stem)["train"]
        word = "rose" if train["last_loss"] > train["first_loss"] + 1e-4 else (
            "fell" if train["last_loss"] < train["first_loss"] - 1e-4 else "stayed")
        assert f"The {kind} loss {word}" in _text(_STAGES[stem][0](_committed(stem)))
    m = _committed("08_correction")
    rows = [r for ds in m["n_questions"] for name, r in m["ladder"][ds].items() if name != "standard RAG"]
    text = _text(R.reading_correction(m))
    assert text.count("contains 0") == sum(r["ci_low"] <= 0 <= r["ci_high"] for r in rows)
    assert text.count("Flagged degenerate") == len(m["degenerate"])
    bench = _committed("07_benchmark")["critics"]
    same = {k for k, v in bench.items() for k2, v2 in bench.items() if k != k2
            and (v["identification"], v["predicted_judgements"]) == (v2["identification"], v2["predicted_judgements"])}
    assert ("give the same verdict counts" in _text(R.reading_benchmark(_committed("07_benchmark")))) == bool(same)


def test_every_reading_function_has_a_notebook_that_calls_it():
    from ragcritic_lib.pipeline.params import notebook_paths

    notebooks = notebook_paths()
    called = [name[len("reading_"):] for name in R.__all__ if name.startswith("reading_")]
    for stage in called:
        assert stage in notebooks, f"reading_{stage} names no pipeline stage"
        assert f"reading_{stage}(" in notebooks[stage].read_text(), f"{notebooks[stage].name} does not call reading_{stage}"
    assert math.isclose(R._DPO_START_LOSS, 0.6931, abs_tol=1e-4)


def test_every_reading_ends_with_the_provenance_entries_of_its_file():
    from ragcritic_lib.evaluation import readings

    entry = "read data/critic_sft made in float32 on avx2; this stage ran in bfloat16 on amx"
    assert readings.provenance_sentences({"environment": {"provenance": [entry]}}) == [f"Provenance: {entry}."]
    assert readings.provenance_sentences({"environment": {"python": "3"}}) == []
    assert readings.provenance_sentences({}) == []
    names = [n for n in readings.__all__ if n.startswith("reading_")]
    assert len(names) == 19  # one per stage notebook
    for name in names:
        assert hasattr(getattr(readings, name), "__wrapped__"), f"{name} does not print provenance"
    lines = readings.reading_tagging({"environment": {"provenance": [entry]}})
    assert lines[-1] == f"Provenance: {entry}." and len(lines) > 1


def test_critic_readings_say_how_the_critic_ships_and_what_it_loses() -> None:
    from ragcritic_lib.evaluation.readings import reading_critic_dpo, reading_critic_sft

    ship = {"form": "lowrank", "rank": 39, "mb": 23.9, "dev_auroc_trained": 0.75, "dev_auroc_shipped": 0.71,
            "flag": True}
    sft = reading_critic_sft({"ship": ship, "method_decision": {"reason": "no method's advantage is clear"}})
    assert "The critic ships as lowrank rank 39 (23.9 MB); its dev AUROC is 0.710 against 0.750 for the trained " \
           "model, a loss over 0.02: flagged." in sft
    assert "Method decision: no method's advantage is clear." in sft
    dpo = reading_critic_dpo({"ship": {**ship, "form": "adapter", "mb": 19.7, "dev_auroc_shipped": 0.75,
                                       "flag": False}})
    assert "The critic ships as adapter (19.7 MB); its dev AUROC is 0.750 against 0.750 for the trained model." in dpo
    assert not any("ships" in t for t in reading_critic_dpo({}))


def test_critic_data_reading_counts_sources_lengths_and_dev() -> None:
    from ragcritic_lib.evaluation.readings import reading_critic_data

    metrics = {"data": {"examples": 10, "questions": 6, "correct_share": 0.5,
                        "sources": {"generator": {"correct": 2, "error": 3}, "reference": {"correct": 3, "error": 0}},
                        "by_length": {"1-3 words": {"correct": 4, "error": 1}, "11+ words": {"correct": 1, "error": 2}},
                        "style_shortcut_auroc": 0.61},
               "dev": {"n": 20, "correct": 4, "errors": 16}}
    text = reading_critic_data(metrics)
    assert text[0].startswith("The training set holds 10 samples from 6 train questions (50")
    assert "By the answer's length: 1-3 words 4 right and 1 wrong; 11+ words 1 right and 2 wrong." in text
    assert "Answer surface alone separates right from wrong training samples with AUROC 0.610 (0.5: not at all)." in text
    assert text[-1] == "The dev set holds the generator's 20 answers to the dev questions, 4 of them right by the judge."


def test_planner_data_reading_says_what_the_executed_programs_did() -> None:
    from ragcritic_lib.evaluation.readings import reading_planner_data

    program = {"executed": 4, "made_right": 1, "helped": 2, "mean_delta_f1": 0.1, "targets": 1}
    metrics = {"programs_per_record": 2, "targets": "outcomes", "train": {"steps": 3},
               "outcomes": {"executed_records": 8, "records": 4, "made_right": 3, "helped": 5, "mean_delta_f1": 0.05,
                            "own_program": {"executed": 4, "made_right": 1, "helped": 2, "mean_delta_f1": 0.1},
                            "by_program": {"A": program, "B": {**program, "made_right": 2, "targets": 2}},
                            "records_helped": 3, "examples": 3, "top_target_share": 0.6667},
               "degenerate": ["planner_data: one program is the target of 67% of the examples (over 60%)"]}
    text = reading_planner_data(metrics)
    assert text[0].startswith("8 programs ran on 4 wrong answers to train questions (2 a record); 3 runs made the "
                              "answer right by the judge and 5 helped")
    assert text[1].startswith("Runs made right per program: B 2 of 4")  # the most repaired first
    assert ("A program helped 3 of the 4 records; the planner trained on 3 of them, balanced over the programs (the "
            "most frequent target 67% of the examples), for 3 steps.") in text
    assert any("67% of the examples" in line for line in text)
    rule = reading_planner_data({**metrics, "targets": "rule", "degenerate": [], "train": {"steps": 3, "examples": 7}})
    assert any("trained on 7 rule-planner programs (`targets: rule`)" in line for line in rule)
