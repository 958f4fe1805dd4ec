"""README's generated blocks: equal to what reports/metrics gives, rendered exactly, clear errors."""

import copy
import json
import re

import pytest

from ragcritic_lib import paths
from ragcritic_lib.io import write_json
from ragcritic_lib.pipeline import readme
from ragcritic_lib.pipeline.readme import (
    ReadmeDataError,
    block_names,
    differing_blocks,
    render_block,
    rewrite_blocks,
)

ENV = {"generator": {"backend": "hf", "device": "cpu", "dtype": "float32"}, "torch": "2.0", "cpu_class": "avx2",
       "wall_seconds": 60.0}


def _row(n, em, f1, acc, delta, low, high, p):
    return {"n": n, "em": em, "f1": f1, "acc": acc, "delta_f1": delta, "ci_low": low, "ci_high": high, "p_value": p}


JUDGED = {"judge_acc": 0.75, "delta_judge_acc": 0.25, "delta_judge_acc_ci_low": 0.0025, "delta_judge_acc_ci_high": 0.5,
          "delta_judge_acc_p_value": 0.5}


def ladder_metrics():
    return {"08_correction": {
        "environment": copy.deepcopy(ENV),
        "degenerate": ["critic:testbed/RAG-Critic one verdict"],
        "critic_verdict": {"dev_fit": {"n": 10, "threshold": None, "f1_before": 0.25}},
        "ladder": {
            "testbed": {
                "oracle critique": {**_row(4, 0.5, 0.6, 0.75, 0.1, 0.0075, 0.2, 0.03), **JUDGED,
                                    "corrected": 2, "corrected_delta_f1": 0.2, "corrected_right": 0,
                                    "corrected_right_delta_f1": None},
                "fixed action": {**_row(4, 0.25, 0.5, 0.5, -0.0004, -0.05, 0.04, 0.9), "judge_acc": 0.5,
                                 "delta_judge_acc": 0.0, "delta_judge_acc_ci_low": -0.25,
                                 "delta_judge_acc_ci_high": 0.25, "delta_judge_acc_p_value": 1.0,
                                 "corrected": 1, "corrected_delta_f1": -0.0016, "corrected_right": 1,
                                 "corrected_right_delta_f1": -0.0016},
                "standard RAG": {**_row(4, 0.25, 0.5, 0.5, 0.0, 0.0, 0.0, 1.0), "judge_acc": 0.5,
                                 "delta_judge_acc": 0.0, "delta_judge_acc_ci_low": 0.0,
                                 "delta_judge_acc_ci_high": 0.0, "delta_judge_acc_p_value": 1.0, "corrected": 0,
                                 "corrected_delta_f1": None, "corrected_right": 0, "corrected_right_delta_f1": None},
            },
            "testbed_mde_f1": 0.3,
            "testbed_paired_mde_f1": {"fixed action": 0.12},
            "a_key_from_a_later_schema": {"x": 1},
        },
    }}


LADDER = """\
Every row answers the same 4 testbed test questions; ΔF1 is the change against standard RAG with a paired \
bootstrap 95% CI and a paired permutation p; the paired MDE is the smallest change its paired differences \
could detect (0 for a row that changed no answer). "right" is the share of answers the audited judge calls right, \
with its paired change; "changed" counts the answers the row changed and "of them right before" those the judge \
called right before the change, each with its mean F1 change.

| row | n | F1 | ΔF1 (95% CI) | p | paired MDE | right | Δ right (95% CI) | changed (ΔF1) | of them right before (ΔF1) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| standard RAG | 4 | 0.500 | – | – | – | 0.500 | – | – | – |
| fixed action | 4 | 0.500 | +0.000 (-0.050, +0.040) | 0.9000 | 0.120 | 0.500 | +0.000 (-0.250, +0.250) | 1 (-0.002) | 1 (-0.002) |
| oracle critique | 4 | 0.600 | +0.100 (+0.008, +0.200) | 0.0300 | – | 0.750 | +0.250 (+0.003, +0.500) | 2 (+0.200) | 0 |

- 95% CI of ΔF1 wholly above 0: oracle critique; wholly below 0: none.
- 95% CI of the change in the share judged right wholly above 0: oracle critique; wholly below 0: none.
- Minimum detectable F1 change at n = 4 (80% power, conservative): 0.300.
- RAG-Critic's acting threshold, fitted on 10 dev questions: none raised dev F1 above 0.250, so it corrects no \
test answer.
- Flagged as degenerate (`degenerate`): `critic:testbed/RAG-Critic one verdict`.
- Generator: backend `hf`, device `cpu`, dtype `float32`, CPU class `avx2`; torch 2.0 (`reports/metrics/08_correction.json`).
"""


def test_the_ladder_renders_exactly():
    # Rows in reading order (baseline first, oracle rows last), a -0.0004 change printed as +0.000,
    # 0.0075 rounded half up, a missing paired MDE as a dash, keys the renderer does not know ignored.
    assert render_block("ladder", ladder_metrics()) == LADDER


def test_the_critics_test_verdicts_are_reported_when_present():
    metrics = ladder_metrics()
    metrics["08_correction"]["critic_verdict"]["test"] = {"testbed": {
        "n": 10, "judge": "f1 >= 0.5", "auroc_judge": 0.75, "auroc_judge_ci": [0.6, 0.9], "auroc_acc": 0.45,
        "auroc_acc_ci": [0.3, 0.6], "wrong_judge": 8, "wrong_acc": 7, "acted": 5, "acted_right_judge": 1,
        "acted_right_acc": 2, "abstained_after": 3, "delta_f1_acted_right_acc": -0.2, "delta_f1_acted_wrong_acc": 0.05}}
    text = render_block("ladder", metrics)
    assert ("margin AUROC 0.750 (CI 0.600..0.900) against the judge's label it was trained on (f1 >= 0.5; 8 of 10 "
            "wrong), 0.450 (0.300..0.600) against accuracy (7 wrong). It corrected 5 answers: 1 right by the judge, "
            "2 right by accuracy (mean F1 change -0.200), 3 wrong by accuracy (+0.050); 3 corrections turned an "
            "answer into an abstention.") in text
    assert "margin AUROC" not in render_block("ladder", ladder_metrics())


def test_a_fitted_threshold_is_reported():
    metrics = ladder_metrics()
    metrics["08_correction"]["critic_verdict"]["dev_fit"].update(threshold=-1.5, f1_at_threshold=0.31)
    assert ("- RAG-Critic's acting threshold, fitted on 10 dev questions: -1.500 (dev F1 0.250 -> 0.310).\n"
            in render_block("ladder", metrics))


def test_the_dev_fit_against_its_default_is_reported_with_its_ci():
    metrics = ladder_metrics()
    metrics["08_correction"]["critic_verdict"]["dev_fit"].update(
        threshold=0.7, fitted_threshold=-0.25, f1_at_fitted=0.3, calibrated_threshold=0.7, f1_at_calibrated=0.26,
        vs_default={"delta": 0.04, "ci_low": -0.01, "ci_high": 0.09, "kept_default": True})
    assert ("- RAG-Critic's acting threshold on 10 dev questions: the fit, -0.250 (dev F1 0.300), against the "
            "critic's calibrated 0.700 (0.260): a dev difference of +0.040 (95% CI -0.010, +0.090), so the calibrated "
            "threshold stays; dev F1 uncorrected 0.250.\n") in render_block("ladder", metrics)
    fit = metrics["08_correction"]["critic_verdict"]["dev_fit"]
    fit.update(verify=False, fits={"verified": {"f1_at_threshold": 0.27, "threshold": 0.5},
                                   "unverified": {"f1_at_threshold": 0.26, "threshold": 0.7}},
               verify_vs_default={"delta": 0.01, "ci_low": -0.02, "ci_high": 0.04, "kept_default": True})
    assert ("so RAG-Critic keeps every new answer, as Algorithm 1 reads (verified minus unverified: +0.010, 95% CI "
            "-0.020, +0.040; verification must win beyond its CI).") in render_block("ladder", metrics)


def test_a_dev_fit_that_acts_on_no_answer_says_so():
    metrics = ladder_metrics()
    metrics["08_correction"]["critic_verdict"]["dev_fit"].update(
        fitted_threshold=None, f1_at_fitted=0.25, calibrated_threshold=2.4, f1_at_calibrated=0.2,
        vs_default={"delta": 0.05, "ci_low": 0.01, "ci_high": 0.09, "kept_default": False})
    assert ("- RAG-Critic's acting threshold on 10 dev questions: the fit, acting on no answer (dev F1 0.250), "
            "against the critic's calibrated 2.400 (0.200): a dev difference of +0.050 (95% CI +0.010, +0.090), so "
            "RAG-Critic corrects no test answer; dev F1 uncorrected 0.250.\n") in render_block("ladder", metrics)


def test_a_best_threshold_inside_its_ci_against_acting_on_none_is_reported():
    metrics = ladder_metrics()
    metrics["08_correction"]["critic_verdict"]["dev_fit"].update(
        best_threshold=6.5, f1_at_best=0.2502, vs_none={"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0001, "acts": False},
        fitted_threshold=None, f1_at_fitted=0.25, calibrated_threshold=2.4, f1_at_calibrated=0.2,
        vs_default={"delta": 0.05, "ci_low": 0.01, "ci_high": 0.09, "kept_default": False})
    block = render_block("ladder", metrics)
    assert ("- RAG-Critic's best dev threshold, 6.500 (dev F1 0.2502), against acting on no dev answer: +0.0000 "
            "(95% CI +0.0000, +0.0001), inside its CI, so the fit picks acting on none (a fit must win beyond "
            "its CI), then meets the calibrated threshold (next line).\n"
            "- RAG-Critic's acting threshold on 10 dev questions: the fit, acting on no answer") in block


def test_a_critic_that_corrected_nothing_is_reported_in_words():
    metrics = ladder_metrics()
    metrics["08_correction"]["critic_verdict"]["test"] = {"testbed": {
        "n": 10, "judge": "truth >= 0.5", "auroc_judge": 0.75, "auroc_judge_ci": [0.6, 0.9], "auroc_acc": 0.8,
        "auroc_acc_ci": [0.7, 0.9], "wrong_judge": 8, "wrong_acc": 7, "acted": 0, "acted_right_judge": 0,
        "acted_right_acc": 0, "abstained_after": 0, "delta_f1_acted_right_acc": None,
        "delta_f1_acted_wrong_acc": None}}
    text = render_block("ladder", metrics)
    assert "against accuracy (7 wrong). It corrected no answer.\n" in text
    assert "right by accuracy" not in text


def test_the_verification_choice_is_reported_both_ways():
    metrics = ladder_metrics()
    fit = metrics["08_correction"]["critic_verdict"]["dev_fit"]
    fit.update(threshold=0.5, f1_at_threshold=0.27, verify=True,
               fits={"verified": {"f1_at_threshold": 0.27, "threshold": 0.5},
                     "unverified": {"f1_at_threshold": 0.2604, "threshold": 1.75}})
    metrics["08_correction"]["critic_verdict"]["verify_mode"] = "dev_f1"
    metrics["08_correction"]["critic_verdict"]["test"] = {"testbed": {
        "n": 10, "judge": "f1 >= 0.5", "auroc_judge": 0.75, "auroc_judge_ci": [0.6, 0.9], "auroc_acc": 0.45,
        "auroc_acc_ci": [0.3, 0.6], "wrong_judge": 8, "wrong_acc": 7, "acted": 2, "acted_right_judge": 0,
        "acted_right_acc": 0, "abstained_after": 0, "delta_f1_acted_right_acc": None,
        "delta_f1_acted_wrong_acc": 0.4, "not_verified": 3}}
    text = render_block("ladder", metrics)
    assert ("chosen on the same dev corrections: dev F1 0.270 verified (threshold 0.500) against 0.260 unverified "
            "(threshold 1.750). The \"unverified\" rows are the same run's first round with every new answer kept, "
            "as Algorithm 1 reads, at the unverified fit's threshold and at the verified one.") in text
    assert "The critic refused 3 further corrections (their old answers stay)." in text
    metrics["08_correction"]["critic_verdict"]["verify_mode"] = "always"
    assert "also verifies its corrections (a new answer is kept only when the critic judges it less likely wrong " \
        "than the old one), set on (`verify_corrections: always`): dev F1 0.270" in render_block("ladder", metrics)
    fit.update(verify=False, fits={"verified": {"f1_at_threshold": 0.25}, "unverified": {"f1_at_threshold": 0.27}})
    assert ("Verifying corrections with the critic did not win on dev (dev F1 0.250 verified, 0.270 unverified)"
            in render_block("ladder", metrics))


def test_a_missing_key_is_one_error_naming_file_and_key():
    metrics = ladder_metrics()
    del metrics["08_correction"]["ladder"]["testbed"]["fixed action"]["p_value"]
    with pytest.raises(ReadmeDataError) as err:
        render_block("ladder", metrics)
    assert str(err.value) == "reports/metrics/08_correction.json: missing key ladder.testbed.fixed action.p_value"


def test_a_missing_environment_is_an_error():
    metrics = ladder_metrics()
    del metrics["08_correction"]["environment"]["generator"]["dtype"]
    with pytest.raises(ReadmeDataError, match=r"08_correction\.json: missing key environment\.generator\.dtype$"):
        render_block("ladder", metrics)


def test_a_non_number_is_an_error():
    metrics = ladder_metrics()
    metrics["08_correction"]["ladder"]["testbed"]["standard RAG"]["f1"] = "0.5"
    with pytest.raises(ReadmeDataError, match=r"key ladder\.testbed\.standard RAG\.f1 is '0\.5', not a number"):
        render_block("ladder", metrics)


def test_a_missing_metrics_file_is_one_error_naming_it(tmp_path):
    write_json(tmp_path / "07_benchmark.json", {"critics": {}})
    with pytest.raises(ReadmeDataError, match=r"^reports/metrics/08_correction\.json: cannot be read"):
        readme.load_metrics(["07_benchmark", "08_correction"], tmp_path)
    with pytest.raises(ReadmeDataError, match=r"^reports/metrics/14_comparison\.json: missing"):
        render_block("comparison", {})


def _critic(n_ok, n_err, ident, f1s, said, **extra):
    return {"n": n_ok + n_err, "identification": dict(zip(("acc_avg", "acc_correct", "acc_error"), ident)),
            "classification": {"tag1_f1": f1s[0], "tag2_f1": f1s[1], "avg_f1": 0.0},
            "predicted_judgements": dict(zip(("Correct", "Error", "none"), said)), **extra}


def benchmark_metrics():
    calibration = {"verdict_calibration": {"auroc": 0.6, "n": 8, "n_error": 6, "n_correct": 2}}
    sft = _critic(2, 2, (0.5, 1.0, 0.0), (0.0, 0.0), (4, 0, 0))
    sft.update({"verdict_auroc": 0.75, "verdict_auroc_ci_low": 0.5, "verdict_auroc_ci_high": 1.0})
    heuristic = _critic(2, 2, (0.75, 0.5, 1.0), (0.2264, 0.1), (1, 3, 0), tag1={"n": 2})
    heuristic.update({"verdict_auroc": None, "verdict_auroc_ci_low": None, "verdict_auroc_ci_high": None})
    return {
        "07_benchmark": {
            "environment": copy.deepcopy(ENV),
            "benchmark": {"n_error": 2, "n_correct": 2, "questions": {"test": 4}},
            "critics": {"SFT critic": sft, "heuristic": heuristic},
            "style_baseline": {"verdict_auroc": 0.625, "verdict_auroc_ci_low": 0.25, "verdict_auroc_ci_high": 1.0},
        },
        "05_critic_sft": {**calibration, "environment": copy.deepcopy(ENV)},
        "06_critic_dpo": {"verdict_calibration": {"auroc": None, "n": 8, "n_error": 6, "n_correct": 2}},
    }


def test_the_benchmark_renders_every_critic_in_the_file():
    text = render_block("benchmark", benchmark_metrics())
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table == [
        "| critic | n | verdict AUROC | 95% CI | within kinds (95% CI) | minus question-only (95% CI) | identification "
        "| on right | on wrong | tier-1 F1 | tier-2 F1 | tier-1 F1 minus prior (95% CI) "
        "| verdicts: Error / Correct / none |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        "| SFT critic | 4 | 0.750 | 0.500..1.000 | – | – | 50.0 | 100.0 | 0.0 | 0.0 | 0.0 | – | 0 / 4 / 0 |",
        "| heuristic | 4 | – | – | – | – | 75.0 | 50.0 | 100.0 | 22.6 | 10.0 | – | 3 / 1 / 0 |",
        "| style-only baseline (answer surface; fit on dev) | – | 0.625 | 0.250..1.000 | – | – | – | – | – | – | – "
        "| – | – |",
    ]
    assert "label prior" not in text  # metrics written before the prior was scored claim nothing about it
    assert text.startswith("4 benchmark samples: real answers to 4 test questions (no training question), 2 wrong "
                           "and 2 right.")
    assert ("- Verdict AUROC on the dev answers the threshold was fitted on: SFT critic 0.600 (n = 8: 6 wrong, "
            "2 right; `reports/metrics/05_critic_sft.json`); SFT+DPO critic – (n = 8: 6 wrong, 2 right; "
            "`reports/metrics/06_critic_dpo.json`).") in text
    assert "degenerate" not in text  # 07 has no `degenerate` list yet: nothing is claimed about it


def test_the_benchmark_shows_each_critic_against_the_label_prior_when_07_scored_it():
    metrics = benchmark_metrics()
    row = {"micro_f1_minus_prior": -0.1313, "ci_low": -0.1846, "ci_high": -0.0763}
    metrics["07_benchmark"]["benchmark"]["label_prior"] = {
        "fit": {"n_errors": 9, "tag1": {"labels": ["A", "B"], "k": 2}, "tag2": {"labels": ["a1"], "k": 1}},
        "critics": {"SFT critic": {"tag1": row, "tag2": {**row, "micro_f1_minus_prior": 0.02, "ci_low": None}}},
    }
    text = render_block("benchmark", metrics)
    table = [line for line in text.splitlines() if line.startswith("| SFT critic") or line.startswith("| heuristic")]
    assert table[0].endswith("| 0.0 | 0.0 | -13.1 (-18.5..-7.6) | 0 / 4 / 0 |")
    assert table[1].endswith("| 22.6 | 10.0 | – | 3 / 1 / 0 |")  # a critic the prior was not scored for
    assert ("the tier-1 labels the training targets name most often (A, B) and likewise at tier 2 (a1), as many as "
            "fit the training targets best (`label_prior` in the metrics); tier-2 F1 minus prior: SFT critic +2.0; "
            "heuristic –.") in text


def test_the_benchmark_names_the_zero_shot_models_dev_threshold_when_07_fitted_one():
    metrics = benchmark_metrics()
    metrics["07_benchmark"]["benchmark"]["zeroshot_calibration"] = {"auroc": 0.5123, "n": 8, "threshold": 3.86}
    assert ("`reports/metrics/06_critic_dpo.json`); base zero-shot 0.512 (the same 8, threshold 3.860; "
            "`reports/metrics/07_benchmark.json`).") in render_block("benchmark", metrics)
    del metrics["07_benchmark"]["benchmark"]["zeroshot_calibration"]["auroc"]
    with pytest.raises(readme.ReadmeDataError, match="07_benchmark.json: missing key benchmark.zeroshot_calibration.auroc"):
        render_block("benchmark", metrics)


def test_the_benchmark_names_how_many_tier1_labels_each_critic_uses_beside_its_macro_f1():
    metrics = benchmark_metrics()
    assert "Micro F1 rewards" not in render_block("benchmark", metrics)  # no per-label counts: nothing claimed
    per_label = {"A": {"predicted": 3}, "B": {"predicted": 0}, "C": {"predicted": 1}}
    metrics["07_benchmark"]["critics"]["SFT critic"]["tag1"] = {"per_label": per_label, "macro": {"f1": 0.25}}
    metrics["07_benchmark"]["critics"]["heuristic"]["tag1"] = {"per_label": {"A": {"predicted": 4}}, "macro": {"f1": None}}
    assert ("the tier-1 labels each critic names and its macro F1: SFT critic 2 of 3, 25.0; heuristic 1 of 1, –."
            ) in render_block("benchmark", metrics)


def test_the_benchmark_shows_within_kind_aurocs_and_the_question_only_baseline():
    metrics = benchmark_metrics()
    bench = metrics["07_benchmark"]
    bench["critics"]["SFT critic"].update({"verdict_auroc_within_kind": 0.6061, "verdict_auroc_within_kind_ci_low": 0.52,
                                           "verdict_auroc_within_kind_ci_high": 0.6984})
    bench["question_baseline"] = {"verdict_auroc": 0.7321, "verdict_auroc_ci_low": 0.667, "verdict_auroc_ci_high": 0.788,
                                  "verdict_auroc_within_kind": 0.534, "verdict_auroc_within_kind_ci_low": None,
                                  "verdict_auroc_within_kind_ci_high": None}
    table = [line for line in render_block("benchmark", metrics).splitlines() if line.startswith("| ")]
    assert table[2] == ("| SFT critic | 4 | 0.750 | 0.500..1.000 | 0.606 (0.520..0.698) | – | 50.0 | 100.0 | 0.0 | 0.0 "
                        "| 0.0 | – | 0 / 4 / 0 |")
    assert table[-1] == ("| question-only baseline (question text; fit on train) | – | 0.732 | 0.667..0.788 | 0.534 "
                         "| – | – | – | – | – | – | – | – |")
    bench["question_baseline"]["critics_minus_baseline"] = {"SFT critic": {"diff": 0.0179, "ci_low": -0.04,
                                                                           "ci_high": 0.081}}
    table = [line for line in render_block("benchmark", metrics).splitlines() if line.startswith("| ")]
    assert "| 0.606 (0.520..0.698) | +0.018 (-0.040..+0.081) | 50.0 |" in table[2]
    del bench["question_baseline"]["verdict_auroc_within_kind"]   # metrics from before it was scored
    table = [line for line in render_block("benchmark", metrics).splitlines() if line.startswith("| ")]
    assert table[-1].startswith("| question-only baseline (question text; fit on train) | – | 0.732 | 0.667..0.788 | – |")


def test_the_benchmark_reports_a_rerun_of_the_critic_elsewhere():
    metrics = benchmark_metrics()
    assert "re-run" not in render_block("benchmark", metrics)
    metrics[readme.RERUNS_KEY] = {"reruns": [{
        "machine": "one GPU", "cpu_class": "cuda", "dev_auroc": 0.7511, "threshold": 2.3682, "dev_tag1_f1": 0.5414,
        "wall_seconds": 186.5, "dev_auroc_diff": -0.0002, "within_tolerance": True, "tolerance": 0.05,
        "shipped": {"cpu_class": "avx2", "dev_auroc": 0.7513, "threshold": 2.369, "dev_tag1_f1": 0.5203,
                    "wall_seconds": 5424.8}}]}
    metrics["05_critic_sft"]["verdict_calibration"].update({"auroc": 0.7513, "threshold": 2.369})  # the shipped one
    assert ("- Stage 05 re-run on one GPU (class `cuda`, `reports/benchmarks/critic_reruns.json`): dev verdict AUROC "
            "0.751 against 0.751 shipped (`avx2`), a difference of -0.0002 (within 0.05); threshold 2.368 against "
            "2.369, dev tier-1 F1 0.541 against 0.520; the stage's cells took 187 s against 5425 s."
            ) in render_block("benchmark", metrics)
    # the shipped critic has changed since: the entry says it compared with the one shipped then
    metrics["05_critic_sft"]["verdict_calibration"].update({"auroc": 0.7859, "threshold": 2.4996})
    assert "against 0.751 shipped then, since replaced (`avx2`)" in render_block("benchmark", metrics)


def comparison_metrics():
    def method(n, em, f1, delta, low, high, p, p_holm, calls, training=(None, None, None)):
        return {"n": n, "em": em, "f1": f1, "acc": f1, "delta_f1": delta, "ci_low": low, "ci_high": high, "p": p,
                "p_holm": p_holm, "calls_per_question": calls,
                **dict(zip(("training_calls", "training_steps", "training_seconds"), training))}
    return {"14_comparison": {
        "environment": copy.deepcopy(ENV),
        "comparison": {"testbed": {
            "CRAG": {**method(10, 0.1, 0.2, -0.05, -0.09, -0.01, 0.02, 0.04, 1.0, (12, 0, 0.0)),
                     "judge_acc": 0.2, "delta_judge_acc": -0.1, "judge_ci_low": -0.3, "judge_ci_high": 0.1,
                     "judge_p": 0.5, "judge_p_holm": 0.5},
            "RAG-Critic": {**method(10, 0.2, 0.3, 0.05, -0.01, 0.11, 0.2, 0.2, 2.5, (40, 6, 90.0)),
                           "judge_acc": 0.6, "delta_judge_acc": 0.3, "judge_ci_low": 0.1, "judge_ci_high": 0.5,
                           "judge_p": 0.01, "judge_p_holm": 0.02},
            "standard RAG": {**method(10, 0.15, 0.25, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0), "judge_acc": 0.3,
                             "delta_judge_acc": 0.0, "judge_ci_low": 0.0, "judge_ci_high": 0.0, "judge_p": 1.0,
                             "judge_p_holm": 1.0},
        }},
        "oracle_and_ablation_rows": {"testbed": {
            "CRAG (oracle)": method(10, 0.3, 0.4, 0.15, 0.05, 0.25, 0.01, None, None)}},
        "summary": {"testbed": {"mde_conservative": 0.2, "significant_after_holm": ["CRAG"]}},
        "degenerate": ["RAG-Critic: one verdict"],
        "degenerate_by_method": {"RAG-Critic": ["one verdict"], "CRAG": []},
    }}


def test_the_comparison_renders_exactly():
    lines = render_block("comparison", comparison_metrics()).splitlines()
    assert lines[0].startswith("Standard RAG and 2 methods on the ladder's 10 testbed test questions")
    assert lines[4:8] == [
        "| standard RAG | 10 | 0.250 | – | – | 0.300 | – | – | 1.00 | – |  |",
        "| RAG-Critic | 10 | 0.300 | +0.050 (-0.010, +0.110) | 0.2000 | 0.600 | +0.300 (+0.100, +0.500) | 0.0200 | 2.50 "
        "| 40 calls, 6 steps, 1.5 min | yes |",
        "| CRAG | 10 | 0.200 | -0.050 (-0.090, -0.010) | 0.0400 | 0.200 | -0.100 (-0.300, +0.100) | 0.5000 | 1.00 "
        "| 12 calls, 0 steps, 0.0 min |  |",
        "| *CRAG (oracle)* | 10 | 0.400 | +0.150 (+0.050, +0.250) | – | – | – | – | – | – |  |",
    ]
    assert lines[9:14] == [
        "- Methods: 95% CI of ΔF1 wholly above 0: none; wholly below 0: CRAG. Significant after Holm: CRAG.",
        "- Methods, judged right: 95% CI of the change in the share judged right wholly above 0: RAG-Critic; "
        "wholly below 0: none. Significant after Holm: RAG-Critic.",
        "- Oracle and ablation rows: 95% CI of ΔF1 wholly above 0: CRAG (oracle); wholly below 0: none.",
        "- Minimum detectable F1 change at n = 10 (80% power, conservative): 0.200.",
        "- Flagged as degenerate (`degenerate`): `RAG-Critic: one verdict`.",
    ]


def test_an_unknown_block_is_an_error():
    with pytest.raises(ReadmeDataError, match="unknown generated block 'nonsense'"):
        render_block("nonsense", {})


def test_stale_blocks_are_found_and_rewritten_and_the_rest_is_kept():
    text = ("# Title\n\nbefore\n\n<!-- BEGIN generated: ladder -->\nF1 0.999\n<!-- END generated: ladder -->\n\n"
            "after\n")
    metrics = ladder_metrics()
    assert block_names(text) == ["ladder"]
    assert differing_blocks(text, metrics) == ["ladder"]
    new = rewrite_blocks(text, metrics)
    assert new == text.replace("F1 0.999\n", LADDER)
    assert differing_blocks(new, metrics) == []


def test_an_unclosed_or_repeated_block_is_an_error():
    with pytest.raises(ReadmeDataError, match="README.md: generated block.* ladder lack a matching"):
        block_names("<!-- BEGIN generated: ladder -->\nx\n<!-- END generated: comparison -->\n", "README.md")
    twice = "<!-- BEGIN generated: ladder -->\n<!-- END generated: ladder -->\n" * 2
    with pytest.raises(ReadmeDataError, match="ladder appear more than once"):
        block_names(twice)
    with pytest.raises(ReadmeDataError, match="docs/results.md: unknown generated block.s. ladder_v2"):
        block_names("<!-- BEGIN generated: ladder_v2 -->\n<!-- END generated: ladder_v2 -->\n", "docs/results.md")


def test_check_names_the_stale_block_and_writes_only_without_check(tmp_path, capsys):
    page = tmp_path / "page.md"
    stale = "<!-- BEGIN generated: comparison -->\nold\n<!-- END generated: comparison -->\n"
    page.write_text(stale, encoding="utf-8")
    assert readme.main(["--check", str(page)]) == 1
    assert "generated block 'comparison' differs" in capsys.readouterr().err
    assert page.read_text(encoding="utf-8") == stale
    assert readme.main([str(page)]) == 0
    assert readme.main(["--check", str(page)]) == 0
    assert "| RAG-Critic |" in page.read_text(encoding="utf-8")


# ------------------------------------------------------------------------- the committed README
README = paths.ROOT / "README.md"


def test_readme_and_results_page_equal_what_the_metrics_give():
    files = readme.target_files()
    assert README in files
    assert readme.check(files) == []


def test_readme_holds_the_headline_blocks():
    names = block_names(README.read_text(encoding="utf-8"), "README.md")
    assert {"ladder", "benchmark", "comparison"} <= set(names)


def test_readme_is_a_front_page():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 260


def test_every_report_file_and_doc_named_in_the_readme_exists():
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"\]\(((?:docs|data|reports)/[^)#]+)", text))
    named |= set(re.findall(r"`(reports/[\w/.\-]+\.(?:json|png|md))`", text))
    assert any(p.endswith(".png") for p in named)
    assert sorted(p for p in named if not (paths.ROOT / p).exists()) == []


def test_the_committed_metrics_render_without_a_missing_key():
    # Every block renders from the committed files (a schema change that drops a key fails here).
    required = {s for name, stems in readme.BLOCK_SOURCES.items() if name not in readme.OPTIONAL_SOURCE_BLOCKS
                for s in stems}
    metrics = readme.load_metrics({s for stems in readme.BLOCK_SOURCES.values() for s in stems},
                                  optional={s for stems in readme.BLOCK_SOURCES.values() for s in stems} - required)
    for name in readme.BLOCK_SOURCES:
        assert render_block(name, copy.deepcopy(metrics)).endswith("\n")


def baselines_metrics():
    held = {"n": 90, "n_correct": 7, "n_wrong": 83, "accept_rate_correct": 1 / 7, "accept_rate_correct_ci": [0.026, 0.513],
            "accept_rate_wrong": None, "accept_rate_wrong_ci": None}
    return {
        "09_self_refine": {"degenerate": [], "self_refine": {"approved": 1, "questions": 280, "feedback_by_type": {
            "a": {"kinds": {"names a problem": 3, "neither": 1}}, "b": {"kinds": {"neither": 4}}}}},
        "10_crag": {"degenerate": [], "crag": {"testbed": {"test_actions": {"Ambiguous": 193, "Correct": 87}}}},
        "11_simrag": {"degenerate": [], "critic": {"balanced_train": 370, "distinct_train": 210, "train_accept": 25,
                                                   "heldout": held}},
        "12_repair": {"environment": copy.deepcopy(ENV), "degenerate": ["repair: one plan is 99% of the 280 executed test plans"],
                      "training": {"offpolicy_states": 106, "onpolicy_states": 125, "offpolicy_states_with_pair": 90,
                                   "onpolicy_states_with_pair": 40},
                      "test": {"executed": 280, "distinct": 2, "top_share": 0.9964, "plan_shares": {"a": 0.0036, "b": 0.9964}}},
        "13_ragec": {"degenerate": [], "errors": 262, "answers": {"testbed": {"answers": 280, "wrong": 262, "diagnosed": 262}},
                     "undiagnosed": {}, "stages": {"Chunking": 1, "Retrieval": 20, "Reranking": 30, "Generation": 211}},
    }


def test_the_baselines_block_renders_exactly():
    assert render_block("baselines", baselines_metrics()) == """\
What each baseline learned from and what its own diagnostics show; per question type in the stages' metrics \
(`feedback_by_type`, `test_actions_by_type`, `stage_types`). Intervals are Wilson 95%.

| method | trained on | diagnostics |
| --- | --- | --- |
| RePAIR | 106 off-policy and 125 on-policy states (90 and 40 with a preference pair) | 280 test plans ran, 2 distinct; \
the most common is 99.6% of them |
| SIM-RAG | 370 balanced examples (210 distinct, 25 right answers) | held out, accepts 14.3% (2.6..51.3%) of 7 right \
and unmeasured of 83 wrong answers |
| RAGEC | no training (K votes per error) | 262 of 262 wrong answers diagnosed; blamed stages: Chunking 1, \
Retrieval 20, Reranking 30, Generation 211 |
| Self-Refine | no training | feedback approves 1 of 280 answers; first-round feedback: neither 5, names a problem 3 |
| CRAG | a retrieval evaluator and two thresholds tuned on dev | test actions: Ambiguous 193, Correct 87 |

- Flagged as degenerate (`degenerate`): `repair: one plan is 99% of the 280 executed test plans`.
- Generator: backend `hf`, device `cpu`, dtype `float32`, CPU class `avx2`; torch 2.0 (`reports/metrics/12_repair.json`).
"""
    m = baselines_metrics()
    sim = m["11_simrag"]
    sim["critic"]["name"] = "probe"
    sim["critic"]["heldout"].update(accept_rate_wrong=0.13, accept_rate_wrong_ci=[0.07, 0.22])
    sim["heldout_confusion_by_critic"] = {
        "probe": sim["critic"]["heldout"],
        "classifier": {"accept_rate_correct": 0.385, "accept_rate_correct_ci": [0.177, 0.645],
                       "accept_rate_wrong": 0.052, "accept_rate_wrong_ci": [0.02, 0.126]}}
    assert ("| held out, the probe critic accepts 14.3% (2.6..51.3%) of 7 right and 13.0% (7.0..22.0%) of 83 wrong "
            "answers (intervals overlap); the classifier critic 38.5% (17.7..64.5%) and 5.2% (2.0..12.6%) "
            "(intervals apart) |") in render_block("baselines", m)
    from ragcritic_lib.pipeline.readme import SIMRAG_BENCH_KEY

    bench_probe = {"name": "probe", "accept_rate_correct": 0.154, "accept_rate_correct_ci": [0.043, 0.422],
                   "accept_rate_wrong": 0.13, "accept_rate_wrong_ci": [0.072, 0.223]}
    sim["critic"]["name"] = "classifier"
    sim["heldout_confusion_by_critic"] = {"classifier": sim["heldout_confusion_by_critic"]["classifier"]}
    m[SIMRAG_BENCH_KEY] = {"heldout": 90, "heldout_accept": 7, "critics": [bench_probe]}
    assert ("of 83 wrong answers (intervals overlap); on the same held-out examples, "
            "`reports/benchmarks/simrag_critic.json`: the probe critic 15.4% (4.3..42.2%) and 13.0% (7.2..22.3%) "
            "(intervals overlap) |") in render_block("baselines", m)
    m[SIMRAG_BENCH_KEY]["heldout"] = 100  # another split: said so
    assert "; on its own held-out examples, `reports/benchmarks/simrag_critic.json`: the probe" in render_block("baselines", m)
    m[SIMRAG_BENCH_KEY]["critics"] = [dict(bench_probe, name="classifier")]  # a critic the stage reports itself
    assert "simrag_critic.json" not in render_block("baselines", m)
    m["13_ragec"]["undiagnosed"] = {"over max_errors (40)": 222}
    m["13_ragec"]["errors"] = 40
    assert "40 of 262 wrong answers diagnosed; undiagnosed: over max_errors (40) 222;" in render_block("baselines", m)
    m["12_repair"]["training"]["offpolicy_rewards"] = {"states": 116, "by_plan": {}, "best_single": "grammar:refine_docs",
                                                      "best_single_reward": 0.151, "per_state_best_reward": 0.2954,
                                                      "tied_states": 47}
    assert ("the most common is 99.6% of them; off-policy, the plan with the best mean F1 over the states it ran on "
            "earns 0.151 (refine_docs), and the best of the plans each state ran 0.295 (47 of 116 states tie) |"
            ) in render_block("baselines", m)
    del m["12_repair"]["test"]
    with pytest.raises(ReadmeDataError, match="12_repair.json: missing key test"):
        render_block("baselines", m)


def papers_metrics():
    env = copy.deepcopy(ENV)
    row = {"n": 280, "em": 0.1, "f1": 0.23, "acc": 0.27, "delta_f1": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_value": 1.0}
    return {
        "01_retrieval_rag": {"rag": {"testbed": {"test": {"f1": 0.2287, "em": 0.1}, "dev": {"f1": 0.2, "em": 0.1}},
                                     "trivia": {"test": {"f1": 0.0214, "em": 0.0}}}},
        "02_error_sampling": {"by_dataset": {"testbed": {}, "trivia": {}}, "by_member": {"a": {}, "b": {}, "c": {}},
                              "samples": 640, "error_rate": 0.85625, "errors": 548, "correct": 92},
        "03_tagging": {"tags_before_normalization": 1665, "unique_tags_before_normalization": 353,
                       "unique_tags_after_normalization": 131},
        "04_taxonomy": {"taxonomy": {"tier1": 7, "tier2": 19}, "tags_clustered": 131, "clusters": 20},
        "05_critic_sft": {"train": {"examples": 2651}},
        "06_critic_dpo": {"pairs": {"total": 600}},
        "07_benchmark": {"benchmark": {"n_error": 128, "n_correct": 128},
                         "critics": {"heuristic": {"identification": {"acc_avg": 0.5}},
                                     "SFT+DPO critic": {"identification": {"acc_avg": 0.7148}, "verdict_auroc": 0.7612,
                                                        "classification": {"tag1_f1": 0.3844, "tag2_f1": 0.2455},
                                                        "verdict_auroc_ci_low": 0.703, "verdict_auroc_ci_high": 0.821}},
                         "style_baseline": {"verdict_auroc": 0.726}},
        "08_correction": {"environment": env, "ladder": {"testbed": {
            "standard RAG": row, "RAG-Critic (1 iter)": {**row, "delta_f1": 0.0061, "ci_low": -0.0227, "ci_high": 0.0357},
            "fixed action": row, "oracle critique": {**row, "delta_f1": 0.0835, "ci_low": 0.0513, "ci_high": 0.1148}}}},
        "13_ragec": {"agreement": {"n": 31, "side_agreement": 0.8387, "type_agreement": None}},
        "14_comparison": {"summary": {"testbed": {"significant_after_holm": ["SIM-RAG"]}}, "comparison": {"testbed": {
            "standard RAG": {"delta_f1": 0.0}, "RAG-Critic": {"delta_f1": 0.0054}, "SIM-RAG": {"delta_f1": -0.0586},
            "RePAIR": {"delta_f1": -0.0016}}}},
    }


def test_the_papers_block_reads_every_cell_from_the_metrics():
    text = render_block("papers", papers_metrics())
    assert "| error pool | 15 models x 9 datasets | 3 configurations of the generator x 2 datasets, 640 answers, " \
           "error rate 0.856 (548 wrong, 92 right) |" in text
    assert "| atomic error tags after normalization | > 20,000 -> ~4,000 | 1665 tags (353 unique) -> 131 unique |" in text
    assert "| taxonomy tiers 1 / 2 / 3 | 7 / 19 / 4,000+ | 7 / 19 / 131 (tier 3: the normalized tags) |" in text
    assert ("identification heuristic 50.0%, SFT+DPO critic 71.5% (256 samples); the SFT+DPO critic's verdict AUROC 0.761 "
            "(0.703..0.821), style-only baseline 0.726; tier-1 / tier-2 F1 38.4 / 24.6; trained on 2651 SFT examples and "
            "600 DPO pairs") in text
    assert ("RAG-Critic (1 iter) +0.006 (-0.023, +0.036); oracle critique +0.084 (+0.051, +0.115) on 280 test "
            "questions") in text
    # Baselines in the comparison's order, RAG-Critic left to the row above; Holm's verdict from the file.
    assert "| the baselines, ΔF1 vs standard RAG | RePAIR, CRAG, SIM-RAG and Self-Refine gain in their papers | " \
           "SIM-RAG -0.059, RePAIR -0.002; significant after Holm: SIM-RAG |" in text
    assert "testbed F1 0.229 (EM 0.100); trivia F1 0.021 (EM 0.000)" in text
    assert "on 31 answers: side 83.9%, type unmeasured |" in text
    m = papers_metrics()
    m["13_ragec"]["agreement"] = {"n": 0, "n_missing": 171, "n_critic_correct": 60, "side_agreement": None,
                                  "type_agreement": None}
    assert ("on 0 answers: side unmeasured, type unmeasured (of RAGEC's wrong answers, 171 differ from those "
            "RAG-Critic judged and it called the other 60 right) |") in render_block("papers", m)
    del m["04_taxonomy"]["clusters"]
    with pytest.raises(ReadmeDataError, match="04_taxonomy.json: missing key clusters"):
        render_block("papers", m)


def test_the_environment_line_names_the_cpu_class_and_each_provenance_entry():
    env = {"python": "3.11.7", "torch": "2.13.0", "generator": {"backend": "hf", "device": "cpu", "dtype": "float32"},
           "cpu_class": "avx2", "wall_seconds": 61.0, "upstream": {"x": {"read": ["data/x"], "dtype": "bfloat16",
                                                                       "cpu_class": "amx"}},
           "provenance": ["read data/x made in bfloat16 on amx; this stage ran in float32 on avx2"]}
    assert readme.environment_line({"08_correction": {"environment": env}}, "08_correction") == (
        "Generator: backend `hf`, device `cpu`, dtype `float32`, CPU class `avx2`; python 3.11.7, torch 2.13.0 "
        "(`reports/metrics/08_correction.json`). Provenance: read data/x made in bfloat16 on amx; this stage ran "
        "in float32 on avx2.")


def test_the_stage_time_table_is_per_cpu_class_and_says_what_is_not_recorded():
    stems = readme.BLOCK_SOURCES["stage_times"]
    assert stems[0] == "00_assets" and stems[-1] == "15_analysis" and len(stems) == 20
    gen = {"backend": "hf", "device": "cpu", "dtype": "float32"}
    metrics = {stem: {"environment": {"python": "3", "generator": gen, "cpu_class": "avx2", "wall_seconds": 90.0}}
               for stem in stems}
    text = readme.render_block("stage_times", metrics)
    assert "| stage | avx2 (float32) |" in text
    assert "| `00_assets` | 1.5 min |" in text and "| all stages | 30.0 min |" in text
    assert "the stages recorded" not in text  # one class holds every stage: the total says it all
    not_run = {stem: m for stem, m in metrics.items() if stem != "08_planner_data"}  # a stage that has not run yet
    text = readme.render_block("stage_times", not_run)
    assert "| `08_planner_data` | not run yet |" in text and "| all stages | not recorded |" in text
    assert "| the stages recorded | 19 of 20: 28.5 min |" in text
    mixed = {stem: {"environment": {**m["environment"], "cpu_class": "amx"}} if stem == "12_repair" else m
             for stem, m in metrics.items()}
    text = readme.render_block("stage_times", mixed)
    assert "| stage | amx (float32) | avx2 (float32) |" in text
    assert "| the stages recorded | 1 of 20: 1.5 min | 19 of 20: 28.5 min |" in text
    del metrics["05_critic_sft"]["environment"]["wall_seconds"]
    text = readme.render_block("stage_times", metrics)
    assert "| `05_critic_sft` | not recorded |" in text and "| all stages | not recorded |" in text
    for stem in stems:  # a run before cpu_class and wall_seconds were recorded
        metrics[stem]["environment"] = {"python": "3", "generator": gen}
    text = readme.render_block("stage_times", metrics)
    assert "| stage | CPU class not recorded |" in text and text.count("not recorded |") == 22  # 20 stages, the total and the header
    assert "the stages recorded" not in text


def _one_minute_stages_and_a_copy(stage: str, stem: str, seconds: float) -> tuple[dict, dict]:
    """Every stage committed at 1 min on avx512_bf16, and an avx2 copy record of ``stage``."""
    gen = {"backend": "hf", "device": "cpu", "dtype": "bfloat16"}
    metrics = {s: {"environment": {"generator": gen, "cpu_class": "avx512_bf16", "wall_seconds": 60.0}}
               for s in readme.BLOCK_SOURCES["stage_times"]}
    return metrics, {"stage": stage, "stem": stem, "date": "2026-12-05", "cpu_class": "avx2",
                     "dtype": "float32", "wall_seconds": seconds, "fingerprint": "f1"}


def test_a_timed_copy_shows_its_cold_time_only_while_its_stage_is_unchanged():
    metrics, copy = _one_minute_stages_and_a_copy("critic_sft", "05_critic_sft", 2400.0)
    metrics[readme.STAGE_COPIES_KEY] = {"copies": [copy, {**copy, "date": "2026-12-01", "wall_seconds": 9000.0}],
                                        "fingerprints": {"critic_sft": "f1"}}
    text = readme.render_block("stage_times", metrics)
    assert "| stage | avx2 (float32) | avx512_bf16 (bfloat16) |" in text
    assert "| `05_critic_sft` | 40.0 min (copy) | 1.0 min |" in text   # the latest copy of the committed code
    assert "| `00_assets` | not recorded | 1.0 min |" in text
    assert "| the stages recorded | 1 of 20: 40.0 min (1 in copies) | 20 of 20: 20.0 min |" in text
    assert "(copy): the stage alone, cold, in a restored copy" in text and "2026-12-05" in text
    assert "How a copy's metrics compare" not in text   # a record without the comparison says nothing of it
    copy["vs_committed"] = {"numbers": 40, "equal": 31, "within_0.01": 38, "max_abs_diff": 0.02,
                            "largest": [{"key": "train.loss", "committed": 0.51, "copy": 0.53}],
                            "texts": 6, "texts_equal": 6, "changed_texts": [], "only_committed": 0, "only_copy": 0}
    text = readme.render_block("stage_times", metrics)
    assert ("`05_critic_sft` on avx2, 31 of 40 numbers equal (38 within 0.01), the largest change "
            "`train.loss` 0.51 → 0.53, 6 of 6 other values equal.") in text
    copy["vs_committed"]["headline"] = [{"key": "dev.auroc", "committed": 0.786, "copy": 0.781}]
    text = readme.render_block("stage_times", metrics)
    assert "`05_critic_sft` on avx2, `dev.auroc` 0.786 → 0.781; 31 of 40 numbers equal" in text
    metrics[readme.STAGE_COPIES_KEY]["fingerprints"] = {"critic_sft": "f2"}   # the stage changed since
    text = readme.render_block("stage_times", metrics)
    assert "(copy)" not in text and "| stage | avx512_bf16 (bfloat16) |" in text
    # A copy on the committed run's own class replaces the committed time there: a copy starts from
    # empty caches, a committed run may have found its LLM calls cached.
    metrics[readme.STAGE_COPIES_KEY] = {"copies": [{**copy, "cpu_class": "avx512_bf16"}],
                                        "fingerprints": {"critic_sft": "f1"}}
    text = readme.render_block("stage_times", metrics)
    assert "| `05_critic_sft` | 40.0 min (copy) |" in text and "| `00_assets` | 1.0 min |" in text


def test_a_copy_that_resumed_from_its_stages_restored_log_is_not_a_cold_time():
    metrics, copy = _one_minute_stages_and_a_copy("error_sampling", "02_error_sampling", 1200.0)
    metrics[readme.STAGE_COPIES_KEY] = {"copies": [copy], "fingerprints": {"error_sampling": "f1"},
                                        "persisted": {"error_sampling": ["data/error_sampling/samples"]}}
    text = readme.render_block("stage_times", metrics)
    assert "(copy)" not in text   # made before the copy deleted the stage's persisted log: it resumed from it
    copy["cleared"] = ["data/error_sampling/samples"]
    text = readme.render_block("stage_times", metrics)
    assert "| `02_error_sampling` | 20.0 min (copy) | 1.0 min |" in text
    metrics[readme.STAGE_COPIES_KEY]["persisted"] = {}   # a stage without persisted outputs needs no `cleared`
    del copy["cleared"]
    assert "| `02_error_sampling` | 20.0 min (copy) | 1.0 min |" in readme.render_block("stage_times", metrics)


def test_a_bad_stage_copy_record_is_one_clear_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- BEGIN generated: stage_times -->\n<!-- END generated: stage_times -->\n", encoding="utf-8")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "stage_copies.json").write_text('{"copies": [{"stage": "a"}]}', encoding="utf-8")
    with pytest.raises(ReadmeDataError, match=r"stage_copies.json: copies\[0\] lacks stem"):
        readme.check([page], tmp_path / "metrics", root=tmp_path)


def test_a_stage_that_has_not_run_yet_is_listed_as_such_but_other_blocks_need_their_files(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- BEGIN generated: stage_times -->\n<!-- END generated: stage_times -->\n", encoding="utf-8")
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    for stem in readme.BLOCK_SOURCES["stage_times"][:-1]:  # no 15_analysis.json
        write_json(metrics_dir / f"{stem}.json", {"environment": {"cpu_class": "avx2", "wall_seconds": 60.0}})
    assert readme.check([page], metrics_dir, root=tmp_path, write=True) == [
        "page.md: generated block 'stage_times' differs from what reports/metrics gives"]
    assert "| `15_analysis` | not run yet |" in page.read_text(encoding="utf-8")
    page.write_text("<!-- BEGIN generated: ladder -->\n<!-- END generated: ladder -->\n", encoding="utf-8")
    (metrics_dir / "08_correction.json").unlink()
    with pytest.raises(ReadmeDataError, match="08_correction.json: cannot be read"):
        readme.check([page], metrics_dir, root=tmp_path)


def test_reproduce_md_holds_the_generated_stage_times():
    assert paths.ROOT / "docs" / "reproduce.md" in readme.target_files()
    assert "stage_times" in readme.block_names((paths.ROOT / "docs" / "reproduce.md").read_text(encoding="utf-8"))


def _judge_part(n, agreement, low, high, judged=None):
    return {"n": n, "labels": {"correct": 3, "wrong": n - 3},
            "agreement": agreement, "agreement_ci_low": low, "agreement_ci_high": high,
            "judged": judged or {j: n for j in agreement},
            "confusion": {j: {"credited_right": 1, "credited_wrong": 2, "rejected_right": 3, "rejected_wrong": 4}
                          for j in agreement}}


def test_the_judge_block_tables_every_judge_against_the_hand_audit():
    test = _judge_part(10, {"f1": 0.7, "truth": 0.95, "llm_teacher": 0.5}, {"f1": 0.4, "truth": 0.7, "llm_teacher": 0.2},
                       {"f1": 0.9, "truth": 0.99, "llm_teacher": 0.8}, judged={"f1": 10, "truth": 10, "llm_teacher": 6})
    choosing = _judge_part(20, {"f1": 0.6, "truth": 0.9, "llm_teacher": None}, {"f1": 0.4, "truth": 0.7, "llm_teacher": None},
                           {"f1": 0.8, "truth": 0.97, "llm_teacher": None})
    choosing["best_versus"] = {"f1": {"n": 20, "delta": 0.3, "ci_low": 0.1, "ci_high": 0.5, "p_value": 0.01},
                               "llm_teacher": {"n": 12, "delta": 0.035, "ci_low": -0.007, "ci_high": 0.083,
                                               "p_value": 0.2}}
    audit = {"exists": True, "n": 30, "n_test": 10, **{k: v for k, v in test.items() if k != "n"},
             "choosing": choosing, "best_choosing": "truth"}
    metrics = {"02_error_sampling": {"environment": copy.deepcopy(ENV),
                                     "judge": {"metric": "truth", "threshold": 0.5, "audit": audit}},
               "08_correction": {"critic_verdict": {"test": {"testbed": {"judge": "f1 >= 0.5"}}}}}
    block = render_block("judge", metrics)
    assert "against 30 real answers labelled by hand" in block and "10 test answers (3 right)" in block
    assert "| truth **(used)** | 95.0% (70.0..99.0) | 90.0% (70.0..97.0) | 2 | 3 |" in block
    assert "| F1 | 70.0% (40.0..90.0) | 60.0% (40.0..80.0) |" in block
    assert "| LLM teacher | 50.0% (20.0..80.0, 6 judged) | – |" in block
    assert ("Best on the choosing rows: `truth`; this run judged with `truth`. Its lead on those rows, paired by row "
            "with bootstrap 95% CIs: LLM teacher +3.5 points (-0.7..+8.3); F1 +30.0 points (+10.0..+50.0); not "
            "separable from LLM teacher at this size.") in block
    assert "The correction ladder (08) last ran with the judge `f1 >= 0.5`" in block
    metrics["08_correction"]["critic_verdict"]["test"]["testbed"]["judge"] = "truth"
    assert "Stages 05-15" not in render_block("judge", metrics)
    # No audit: the block says so rather than printing an empty table.
    metrics["02_error_sampling"]["judge"] = {"metric": "f1", "threshold": 0.5, "audit": {"exists": False}}
    assert "no hand audit was read" in render_block("judge", metrics)
    del metrics["02_error_sampling"]["judge"]
    with pytest.raises(ReadmeDataError, match="02_error_sampling.json: missing key judge"):
        render_block("judge", metrics)


def test_each_method_page_holds_its_card_and_the_card_says_when_its_run_is_old():
    for card, (name, stem, row) in readme.METHOD_CARDS.items():
        pages = [p for p in (paths.ROOT / "docs" / "methods").glob("*.md") if card in block_names(p.read_text())]
        assert len(pages) == 1, f"{card}: on {len(pages)} pages of docs/methods/"
    metrics = readme.load_metrics({s for c in readme.METHOD_CARDS for s in readme.BLOCK_SOURCES[c]})
    metrics = copy.deepcopy(metrics)
    text = readme.render_block("method_repair", metrics)
    assert "| standard RAG | 280 |" in text and "| RePAIR | 280 |" in text and "| SIM-RAG" not in text
    assert "- Trained on: " in text and "- Diagnostics: " in text
    for stem in ("14_comparison", "12_repair"):
        metrics[stem]["environment"].pop("cpu_class", None)
    stale = readme.render_block("method_repair", metrics)
    assert "**Not up to date:** `14_comparison` comes from a run older" in stale
    assert "**Not up to date:** `12_repair` comes from a run older" in stale      # in its environment line
    assert stale.count("Not up to date") == 2
    for stem in ("14_comparison", "12_repair"):
        metrics[stem]["environment"].update(cpu_class="avx2", wall_seconds=1500.0)
    fresh = readme.render_block("method_repair", metrics)
    assert "Not up to date" not in fresh
    assert "`14_comparison` ran on `avx2` in 25.0 min; `12_repair` ran on `avx2` in 25.0 min." in fresh
    simrag = readme.render_block("method_simrag", metrics)
    assert "*SIM-RAG (oracle critic)*" in simrag            # its own oracle and ablation rows, in italics
    ragec = readme.render_block("method_ragec", metrics)
    assert "| RAGEC |" not in ragec and "ragec: all" in ragec   # no comparison row; its own flags


def test_an_environment_line_says_when_its_file_predates_the_stage_runner():
    metrics = {"08_correction": {"environment": copy.deepcopy(ENV)}}
    assert "Not up to date" not in readme.environment_line(metrics, "08_correction")
    for missing in ("cpu_class", "wall_seconds"):
        old = copy.deepcopy(metrics)
        old["08_correction"]["environment"].pop(missing)
        assert readme.environment_line(old, "08_correction").endswith(
            "**Not up to date:** `08_correction` comes from a run older than the stage runner that records the CPU "
            "class and wall time; `dvc status` names its stage until it re-runs.")


def test_the_probe_layer_block_reads_its_file_and_names_no_winner_inside_the_ci():
    assert "No probe-layer benchmark recorded yet" in readme.render_block("probe_layers", {})
    data = {"probe_samples": 100, "probe_errors": 80, "dev": 50, "dev_errors": 40, "sources": ["generator", "pool"],
            "shipped": "24+last", "cpu_class": "cuda", "orders": 2, "best_on_dev": "21", "clearly_above_shipped": [],
            "rows": [{"name": "24+last", "features": 8, "dev_auroc": 0.75, "ci_low": 0.6, "ci_high": 0.85,
                      "dev_auroc_orders": [0.75, 0.69]},
                     {"name": "21", "features": 4, "dev_auroc": 0.8, "ci_low": 0.7, "ci_high": 0.88,
                      "dev_auroc_orders": [0.8, 0.8], "vs_shipped": {"diff": 0.05, "low": -0.007, "high": 0.118}}]}
    text = readme.render_block("probe_layers", {readme.PROBE_LAYERS_KEY: data})
    assert "| `24+last` | 8 | 0.750 | 0.600..0.850 | – | 0.690..0.750 |" in text
    assert "| `21` | 4 | 0.800 | 0.700..0.880 | +0.050 (-0.007, +0.118) | 0.800..0.800 |" in text
    assert "- Best on dev: `21`; with a difference to `24+last` whose CI lies above 0: none." in text
    data["clearly_above_shipped"] = ["21"]
    assert "whose CI lies above 0: `21`." in readme.render_block("probe_layers", {readme.PROBE_LAYERS_KEY: data})


def test_the_train_cv_probe_block_reads_its_file_and_says_whether_dev_confirms_the_choice():
    assert "No choice on the probe samples recorded yet" in readme.render_block("probe_layers_train_cv", {})
    data = {"probe_samples": 100, "probe_errors": 80, "dev": 50, "dev_errors": 40, "shipped": "24+last",
            "cpu_class": "avx2", "feature_seconds": 1095.6, "best_on_train": "12+last",
            "clearly_above_shipped_on_train": [], "chosen_by_train": "24+last", "chosen_dev_auroc": 0.75,
            "shipped_dev_auroc": 0.75, "chosen_dev_vs_shipped": None,
            "rows": [{"name": "24+last", "features": 8, "dev_auroc": 0.75, "train_oof_auroc": 0.74,
                      "train_oof_ci": [0.70, 0.78]},
                     {"name": "12+last", "features": 8, "dev_auroc": 0.71, "train_oof_auroc": 0.765,
                      "train_oof_ci": [0.726, 0.801], "train_vs_shipped": {"diff": 0.025, "low": -0.01, "high": 0.06}}]}
    text = readme.render_block("probe_layers_train_cv", {readme.PROBE_TRAIN_CV_KEY: data})
    assert "| `24+last` | 8 | 0.740 | 0.700..0.780 | – | 0.750 |" in text
    assert "| `12+last` | 8 | 0.765 | 0.726..0.801 | +0.025 (-0.010, +0.060) | 0.710 |" in text
    assert "above 0 there: none. Chosen without dev: `24+last`; it stays, so dev has nothing to confirm." in text
    assert "The dev AUROC (50 answers, 40 wrong)" in text and "`avx2`, 1096 s" in text
    data.update(clearly_above_shipped_on_train=["12+last"], chosen_by_train="12+last", chosen_dev_auroc=0.71,
                chosen_dev_vs_shipped={"diff": -0.04, "low": -0.09, "high": 0.01})
    text = readme.render_block("probe_layers_train_cv", {readme.PROBE_TRAIN_CV_KEY: data})
    assert ("Chosen without dev: `12+last`; on dev it scores 0.710 against 0.750, Δ -0.040 (-0.090, +0.010)."
            in text)


def test_the_recipe_frontier_block_reads_its_file_and_names_the_choice():
    data = {"cpu_class": "avx2", "budget_minutes": 80.0,
            "subset": {"train": 512, "pools": {"all": 2600}, "dev": 180, "dev_wrong": 150},
            "choice": {"name": "gen-top6", "reason": "the cheaper one"},
            "recipes": [{"name": "gen-top6", "body": "generative", "train_layers": 6, "passes": 1.0, "dev_auroc": 0.61,
                         "ci_low": 0.52, "ci_high": 0.7, "train_seconds": 600.0, "projected_stage_minutes": 50.0,
                         "cpu_class": "avx2", "examples": 512}]}
    text = readme.render_block("critic_recipes", {readme.RECIPES_KEY: data})
    assert "| `gen-top6` | generative | all | 6 | 1.0 | 0.610 | 0.520..0.700 | 10.0 | 50.0 |" in text
    assert "512 training examples, a fixed random subset of the samples of its sources (all: 2600)" in text
    assert "Chosen: `gen-top6` (the cheaper one)." in text
    assert readme.render_block("critic_recipes", {}).startswith("No recipe frontier recorded yet")


def _split_row(delta, low, high, judge, jlow, jhigh, share):
    return {"delta_f1": delta, "ci_low": low, "ci_high": high, "p": 0.5, "delta_judge_acc": judge,
            "judge_ci_low": jlow, "judge_ci_high": jhigh, "share_f1": share, "share_judge_acc": share}


def answerability_metrics():
    metrics = comparison_metrics()
    metrics["14_comparison"]["answerability"] = {"testbed": {
        "answerable": {"n": 8, "rows": {
            "CRAG": _split_row(-0.1, -0.2, -0.02, -0.1, -0.3, 0.1, -0.08),
            "RAG-Critic": _split_row(0.0, -0.05, 0.05, 0.0, -0.1, 0.1, 0.0),
            "CRAG (oracle)": _split_row(0.0, -0.1, 0.1, 0.125, 0.01, 0.25, 0.0),
            "ladder: oracle critique": _split_row(0.01, -0.01, 0.03, 0.1, 0.02, 0.2, 0.008)}},
        "unanswerable": {"n": 2, "rows": {
            "CRAG": _split_row(0.15, 0.0, 0.5, 0.0, 0.0, 0.0, 0.03),
            "RAG-Critic": _split_row(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
            "CRAG (oracle)": _split_row(0.75, 0.5, 1.0, 0.5, 0.0, 1.0, 0.15),
            "ladder: oracle critique": _split_row(0.46, 0.25, 0.75, 0.5, 0.0, 1.0, 0.092)}},
    }}
    return metrics


def test_the_answerability_table_renders_every_row_with_both_parts_and_the_share():
    lines = render_block("answerability", answerability_metrics()).splitlines()
    assert lines[0].startswith("Each row's change against standard RAG on the 8 answerable and the 2 unanswerable")
    assert lines[2] == ("| row | answerable ΔF1 (95% CI) | answerable Δ right (95% CI) | unanswerable ΔF1 (95% CI) "
                        "| unanswerable Δ right (95% CI) | unanswerable share of ΔF1 |")
    assert lines[4] == ("| CRAG | -0.100 (-0.200, -0.020) | -0.100 (-0.300, +0.100) | +0.150 (+0.000, +0.500) "
                        "| +0.000 (+0.000, +0.000) | +0.030 of -0.050 |")
    assert lines[7] == ("| ladder: oracle critique | +0.010 (-0.010, +0.030) | +0.100 (+0.020, +0.200) "
                        "| +0.460 (+0.250, +0.750) | +0.500 (+0.000, +1.000) | +0.092 of +0.100 |")
    with pytest.raises(ReadmeDataError, match="answerability"):
        render_block("answerability", comparison_metrics())


def test_the_comparison_and_the_ladder_say_where_their_change_comes_from():
    note = ("- Answerable and unanswerable questions apart (descriptive; `reports/metrics/14_comparison.json` "
            "`answerability`): on the 8 answerable questions, 95% CI of ΔF1 wholly above 0: none; wholly below 0: {f1}; "
            "of the change in the share judged right wholly above 0: {judged}; wholly below 0: none. Of each row's ΔF1, "
            "the 2 unanswerable questions (every gold answer an abstention) carry: {carried}.")
    lines = render_block("comparison", answerability_metrics()).splitlines()
    assert note.format(f1="CRAG", judged="CRAG (oracle)",
                       carried="CRAG +0.030 of -0.050; CRAG (oracle) +0.150 of +0.150") in lines
    # Without the split the comparison block has no such line.
    assert not any("Answerable and" in line for line in render_block("comparison", comparison_metrics()).splitlines())
    ladder = render_block("ladder", {**ladder_metrics(), **answerability_metrics()}).splitlines()
    assert note.format(f1="none", judged="oracle critique", carried="oracle critique +0.092 of +0.100") in ladder


def ladder_steps_metrics():
    def part(n, delta, low, high, judge, jlow, jhigh):
        return {"n": n, "delta_f1": delta, "ci_low": low, "ci_high": high, "p": 0.5, "delta_judge_acc": judge,
                "judge_ci_low": jlow, "judge_ci_high": jhigh}
    metrics = comparison_metrics()
    metrics["14_comparison"]["ladder_steps"] = {"testbed": {
        "steps": [{"changes": "labels", "from": "oracle verdict + rule planner", "to": "oracle critique",
                   "parts": {"all": part(10, 0.06, 0.035, 0.086, 0.02, 0.0, 0.046),
                             "answerable": part(8, 0.04, 0.022, 0.058, -0.004, -0.021, 0.008),
                             "unanswerable": part(2, 0.175, 0.05, 0.325, 0.175, 0.05, 0.325)}}],
        "abstentions": {"standard RAG": {"all": 4, "answerable": 3, "unanswerable": 1},
                        "oracle verdict + rule planner": {"all": 7, "answerable": 6, "unanswerable": 1},
                        "oracle critique": {"all": 3, "answerable": 1, "unanswerable": 2}},
        "missing": []}}
    return metrics


def test_the_ladder_steps_table_and_note_read_each_step_on_every_part():
    lines = render_block("ladder_steps", ladder_steps_metrics()).splitlines()
    assert lines[0].startswith("The correction ladder one part at a time")
    assert lines[2] == "| step | questions | n | ΔF1 (95% CI) | Δ right (95% CI) | abstentions |"
    assert lines[4] == ("| labels: oracle verdict + rule planner → oracle critique | all | 10 | +0.060 (+0.035, +0.086) "
                        "| +0.020 (+0.000, +0.046) | 7 → 3 |")
    assert lines[6] == "|  | unanswerable | 2 | +0.175 (+0.050, +0.325) | +0.175 (+0.050, +0.325) | 1 → 2 |"
    ladder = render_block("ladder", {**ladder_metrics(), **ladder_steps_metrics()}).splitlines()
    assert ("- One part at a time (descriptive; `reports/metrics/14_comparison.json` `ladder_steps`): the row after a "
            "step against the row before it, ΔF1 (95% CI) on all, answerable and unanswerable questions, and the "
            "answers it leaves abstaining on answerable / unanswerable ones: the labels (oracle verdict + rule planner "
            "→ oracle critique) +0.060 (+0.035, +0.086), answerable +0.040 (+0.022, +0.058), unanswerable +0.175 "
            "(+0.050, +0.325), abstaining 6 / 1 → 1 / 2. Standard RAG abstains on 3 / 1.") in ladder
    # Without the steps neither the table nor the note.
    assert not any("One part at a time" in line for line in render_block("ladder", ladder_metrics()).splitlines())
    with pytest.raises(ReadmeDataError, match="ladder_steps"):
        render_block("ladder_steps", comparison_metrics())
    broken = ladder_steps_metrics()
    del broken["14_comparison"]["ladder_steps"]["testbed"]["abstentions"]["oracle critique"]
    with pytest.raises(ReadmeDataError, match="abstentions.oracle critique"):
        render_block("ladder_steps", broken)
    broken = ladder_steps_metrics()
    del broken["14_comparison"]["ladder_steps"]["testbed"]["steps"][0]["parts"]["unanswerable"]
    with pytest.raises(ReadmeDataError, match=r"ladder_steps\.testbed\.steps\.0\.parts\.unanswerable"):
        render_block("ladder", {**ladder_metrics(), **broken})


def test_the_ladder_locates_a_planner_flag_from_the_comparison_stages_counts():
    metrics = {**ladder_metrics(), **comparison_metrics()}
    metrics["08_correction"]["degenerate"] = ["planner:testbed/oracle verdict", "planner:trivia/RAG-Critic",
                                              "critic:testbed/RAG-Critic one verdict"]
    choices = {"plans": 223, "distinct": 5, "top_share": 0.6502, "label_sets": 11, "top_label_share": 0.3318,
               "label_fixed_share": 1.0, "chooses": True, "forced": 94, "chosen": 129, "chosen_top_share": 0.6047}
    forced = {**choices, "plans": 30, "distinct": 1, "top_share": 1.0, "label_sets": 1, "top_label_share": 1.0,
              "forced": 30, "chosen": 0, "chosen_top_share": None}
    metrics["14_comparison"]["planner_choices"] = {"testbed": {"oracle verdict": choices},
                                                   "trivia": {"RAG-Critic": forced}}
    line = [x for x in render_block("ladder", metrics).splitlines() if x.startswith("- Flagged")][0]
    assert line == (
        "- Flagged as degenerate (`degenerate`; where a flagged planner's plans concentrate: "
        "`reports/metrics/14_comparison.json` `planner_choices`): `planner:testbed/oracle verdict` (223 plans of 5 "
        "programs, the top 65.0%; the critiques named 11 label sets (the top 33.2%), and 100.0% of plans are their "
        "label set's usual program; the labels left one option for 94, and of the 129 plans chosen among several "
        "the top program is 60.5%); `planner:trivia/RAG-Critic` (30 plans of 1 program, the top 100.0%; the "
        "critiques named 1 label set (the top 100.0%), and 100.0% of plans are their label set's usual program; "
        "the labels left one option for 30, so the planner chose none); `critic:testbed/RAG-Critic one verdict`.")
    # Without 14's counts the flags stand alone, as before.
    del metrics["14_comparison"]["planner_choices"]
    assert ("- Flagged as degenerate (`degenerate`): `planner:testbed/oracle verdict`; `planner:trivia/RAG-Critic`; "
            "`critic:testbed/RAG-Critic one verdict`.") in render_block("ladder", metrics).splitlines()
    # A block with a key missing is one error naming it.
    metrics["14_comparison"]["planner_choices"] = {"testbed": {"oracle verdict": {**choices}}}
    del metrics["14_comparison"]["planner_choices"]["testbed"]["oracle verdict"]["forced"]
    with pytest.raises(ReadmeDataError, match=r"planner_choices\.testbed\.oracle verdict\.forced"):
        render_block("ladder", metrics)


def _lock_root(tmp_path, dep_md5: str, *, with_manifest: bool = True):
    import hashlib

    import yaml

    entries = [{"md5": "f1", "relpath": "x.json"}, {"md5": "f2", "relpath": "model/w.bin"}]
    tmp_path.mkdir(parents=True, exist_ok=True)
    if with_manifest:
        store = tmp_path / "dvc-store" / "files" / "md5" / "m1"
        store.mkdir(parents=True)
        (store / "aaa.dir").write_text(json.dumps(entries))
    model_md5 = hashlib.md5(json.dumps([{"md5": "f2", "relpath": "w.bin"}]).encode()).hexdigest() + ".dir"
    lock = {"schema": "2.0", "stages": {
        "a": {"cmd": "python -m ragcritic_lib.pipeline.stage notebooks/01_a.py",
              "outs": [{"path": "data/a", "md5": "m1aaa.dir"}]},
        "b": {"cmd": "python -m ragcritic_lib.pipeline.stage notebooks/02_b.py",
              "deps": [{"path": "data/a/x.json", "md5": dep_md5}, {"path": "data/a/model", "md5": model_md5},
                       {"path": "notebooks/02_b.py", "md5": "n"}],
              "outs": [{"path": "data/b", "md5": "b.dir"}]}}}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    return tmp_path


def test_a_stage_that_read_outputs_since_replaced_is_named_from_the_lock_alone(tmp_path):
    assert readme.stale_in_lock(_lock_root(tmp_path / "same", "f1")) == {}  # a file and a folder inside the output match
    assert readme.stale_in_lock(_lock_root(tmp_path / "moved", "f0")) == {"02_b": {"replaced": ["a"], "behind": []}}
    assert readme.stale_in_lock(_lock_root(tmp_path / "unshipped", "f0", with_manifest=False)) == {}  # not judged
    assert readme.stale_in_lock(tmp_path / "nothing") == {}


def test_a_stage_reading_a_stage_that_is_not_up_to_date_is_not_up_to_date_either(tmp_path):
    import yaml

    root = _lock_root(tmp_path, "f0")
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    lock["stages"]["c"] = {"cmd": "python -m ragcritic_lib.pipeline.stage notebooks/03_c.py",
                           "deps": [{"path": "data/b", "md5": "b.dir"}], "outs": [{"path": "data/c", "md5": "c.dir"}]}
    lock["stages"]["d"] = {"cmd": "python -m ragcritic_lib.pipeline.stage notebooks/04_d.py",
                           "deps": [{"path": "data/c", "md5": "c.dir"}, {"path": "data/a/x.json", "md5": "f1"}]}
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))
    stale = readme.stale_in_lock(root)
    assert stale["03_c"] == {"replaced": [], "behind": ["b"]}
    assert stale["04_d"] == {"replaced": [], "behind": ["c"]} and "01_a" not in stale


def test_the_environment_line_says_a_stage_read_replaced_outputs():
    metrics = {"07_benchmark": {"environment": copy.deepcopy(ENV)}}
    assert "Not up to date" not in readme.environment_line(metrics, "07_benchmark")
    metrics[readme.LOCK_STALE_KEY] = {"07_benchmark": {"replaced": ["critic_sft"], "behind": ["critic_dpo"]}}
    assert readme.environment_line(metrics, "07_benchmark").endswith(
        "**Not up to date:** `07_benchmark` read outputs of `critic_sft` that has since run again and outputs of "
        "`critic_dpo`, itself not up to date (`dvc.lock`); its numbers are those of its last run until it and the "
        "stages before it re-run (`dvc repro`).")


def test_the_stage_times_sum_a_cold_run_over_both_bf16_classes():
    stems = readme.BLOCK_SOURCES["stage_times"]
    gen = {"backend": "hf", "device": "cpu", "dtype": "bfloat16"}
    metrics = {stem: {"environment": {"generator": gen, "cpu_class": "avx512_bf16", "wall_seconds": 60.0}}
               for stem in stems}
    metrics["08_correction"]["environment"] = {"generator": {**gen, "dtype": "float32"}, "cpu_class": "avx2",
                                               "wall_seconds": 6000.0}
    metrics["13_ragec"]["environment"]["wall_seconds"] = 6.0   # a warm-cache run on avx512_bf16
    base = {"dtype": "bfloat16", "date": "2026-12-06"}
    metrics[readme.STAGE_COPIES_KEY] = {
        "copies": [{**base, "stage": "correction", "stem": "08_correction", "cpu_class": "amx", "wall_seconds": 1200.0,
                    "fingerprint": "c"},
                   {**base, "stage": "ragec", "stem": "13_ragec", "cpu_class": "amx", "wall_seconds": 300.0,
                    "fingerprint": "r"},
                   {**base, "stage": "ragec", "stem": "13_ragec", "cpu_class": "avx512_bf16", "wall_seconds": 420.0,
                    "fingerprint": "r"},
                   {**base, "stage": "crag", "stem": "10_crag", "cpu_class": "avx2", "dtype": "float32",
                    "wall_seconds": 9000.0, "fingerprint": "g"}],
        "fingerprints": {"correction": "c", "ragec": "r", "crag": "g"}}
    metrics["10_crag"]["environment"]["wall_seconds"] = 180.0   # a slower host than the copy's below
    metrics[readme.STAGE_COPIES_KEY]["copies"].append({**base, "stage": "crag", "stem": "10_crag",
                                                       "cpu_class": "avx512_bf16", "wall_seconds": 90.0,
                                                       "fingerprint": "g"})
    text = readme.render_block("stage_times", metrics)
    # 17 committed bf16 runs of 1 min, 10's slower committed run (3 min, not its faster copy), 08's amx
    # copy (20 min) and 13's slower copy (7 min, not its warm committed run); avx2 left out
    assert ("per stage the slowest of its copies and its committed run on either class: 20 of 20 stages, 47.0 min "
            "(2 from copies, 18 from committed runs). The budget of a cold `dvc repro` there is 150 min") in text
    del metrics[readme.STAGE_COPIES_KEY]["copies"][0]   # 08 then has no time on either class
    text = readme.render_block("stage_times", metrics)
    assert "19 of 20 stages, 27.0 min (1 from copies, 18 from committed runs); not timed on either class: `08_correction`. The budget" in text
    for stem in stems:
        metrics[stem]["environment"]["cpu_class"] = "avx2"
    metrics[readme.STAGE_COPIES_KEY]["copies"] = []
    assert "AVX512-BF16 or AMX together" not in readme.render_block("stage_times", metrics)


def test_the_unverified_round_at_one_threshold_is_one_row():
    metrics = ladder_metrics()
    rows = metrics["08_correction"]["ladder"]["testbed"]
    rows["RAG-Critic (1 iter, unverified)"] = copy.deepcopy(rows["fixed action"])
    rows["RAG-Critic (1 iter, unverified, same threshold)"] = copy.deepcopy(rows["fixed action"])
    fit = metrics["08_correction"]["critic_verdict"]["dev_fit"]
    fit.update(threshold=0.5, f1_at_threshold=0.27, verify=True,
               fits={"verified": {"f1_at_threshold": 0.27, "threshold": 0.5},
                     "unverified": {"f1_at_threshold": 0.26, "threshold": 0.5}})
    text = render_block("ladder", metrics)
    assert "| RAG-Critic (1 iter, unverified) |" in text and "same threshold) |" not in text
    assert "at the unverified fit's threshold, here the verified one's too." in text
    rows["RAG-Critic (1 iter, unverified, same threshold)"]["f1"] = 0.3   # a different threshold reads other answers
    fit["fits"]["unverified"]["threshold"] = 0.7
    text = render_block("ladder", metrics)
    assert "| RAG-Critic (1 iter, unverified, same threshold) |" in text
    assert "at the unverified fit's threshold and at the verified one." in text


def test_provenance_entries_of_the_same_classes_are_joined_into_one_sentence():
    entries = ["read data/a made in bfloat16 on avx512_bf16; this stage ran in float32 on avx2",
               "read data/b, reports/metrics/b.json made in bfloat16 on avx512_bf16; this stage ran in float32 on avx2",
               "read data/c made in float32 on avx2; this stage ran in float32 on amx",
               "read data/a made in bfloat16 on avx512_bf16; this stage ran in float32 on avx2",
               "something else entirely"]
    assert readme.grouped_provenance(entries) == [
        "read data/a, data/b, reports/metrics/b.json made in bfloat16 on avx512_bf16; this stage ran in float32 on avx2",
        "read data/c made in float32 on avx2; this stage ran in float32 on amx",
        "something else entirely"]
    env = {"python": "3.11.7", "generator": {"backend": "hf", "device": "cpu", "dtype": "float32"},
           "cpu_class": "avx2", "wall_seconds": 61.0, "provenance": entries[:2]}
    line = readme.environment_line({"14_comparison": {"environment": env}}, "14_comparison")
    assert line.count("Provenance: ") == 1 and line.endswith("read data/a, data/b, reports/metrics/b.json made in "
                                                            "bfloat16 on avx512_bf16; this stage ran in float32 on avx2.")


def test_the_ladder_split_names_its_last_rag_critic_round_as_the_comparison_row():
    metrics = {**ladder_metrics(), **answerability_metrics()}
    rows = metrics["08_correction"]["ladder"]["testbed"]
    for name in ("RAG-Critic (1 iter)", "RAG-Critic (2 iter)"):
        rows[name] = copy.deepcopy(rows["fixed action"])
    split = metrics["14_comparison"]["answerability"]["testbed"]
    split["answerable"]["rows"]["RAG-Critic"] = _split_row(-0.1, -0.2, -0.01, 0.0, -0.1, 0.1, -0.08)
    split["unanswerable"]["rows"]["RAG-Critic"] = _split_row(0.1, 0.0, 0.5, 0.0, 0.0, 0.0, 0.02)
    assert readme._final_round_row(rows) == "RAG-Critic (2 iter)"
    assert readme._final_round_row(["oracle critique"]) is None
    (note,) = [line for line in render_block("ladder", metrics).splitlines() if "Answerable and" in line]
    # the comparison's RAG-Critic is the ladder's final round: shown under that row's name, once
    assert "wholly below 0: RAG-Critic (2 iter);" in note and "RAG-Critic (1 iter)" not in note
    assert "carry: RAG-Critic (2 iter) +0.020 of -0.060; oracle critique +0.092 of +0.100." in note


def test_a_repeated_unverified_round_is_left_out_of_every_list_of_ladder_rows():
    row = {"f1": 0.2, "delta_f1": -0.004}
    ladder = {"RAG-Critic (1 iter, unverified)": row, "RAG-Critic (1 iter, unverified, same threshold)": dict(row),
              "RAG-Critic (2 iter)": {"f1": 0.3}}
    names = list(ladder)
    assert readme._without_repeated_round(names, ladder) == ["RAG-Critic (1 iter, unverified)", "RAG-Critic (2 iter)"]
    ladder["RAG-Critic (1 iter, unverified, same threshold)"] = {"f1": 0.1, "delta_f1": -0.1}  # another threshold
    assert readme._without_repeated_round(names, ladder) == names


def test_the_benchmark_reports_the_identification_ceiling_of_the_verdict_scores():
    metrics = benchmark_metrics()
    assert "ceiling" not in render_block("benchmark", metrics)
    row = {"auroc": 0.75, "identification": 0.5, "oracle_identification": 0.73,
           "oracle_identification_ci": [0.69, 0.7783], "auroc_for_target": 0.8299}
    metrics[readme.BOUND_KEY] = {"target": 0.75, "critics": {"SFT critic": row}}
    assert ("- The best identification any threshold gives these verdict scores "
            "(`reports/benchmarks/identification_bound.json`; an oracle that reads the test labels, a ceiling and "
            "never a setting): SFT critic 73.0% (69.0%..77.8%) against 50.0% at the dev threshold. On these answers no "
            "threshold reaches 75%; with equal-variance normal scores 75% needs a verdict AUROC of about 0.83."
            ) in render_block("benchmark", metrics)
    row["oracle_identification"] = 0.8
    assert ". The target is 75%;" in render_block("benchmark", metrics)
    metrics["07_benchmark"]["critics"]["SFT critic"]["verdict_auroc"] = 0.8   # the benchmark has run again since
    assert "was written for another benchmark run; re-run" in render_block("benchmark", metrics)
