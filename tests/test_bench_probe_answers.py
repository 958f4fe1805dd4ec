"""The paired interval of benchmarks/bench_probe_answers.py: it resamples questions, reads 0 for
two equal scorers and lies above 0 when the second scorer ranks every pair right."""

from __future__ import annotations

import random

from script_modules import load_script

bench = load_script("benchmarks/bench_probe_answers.py")


def _data(n_questions: int = 40):
    rng = random.Random(0)
    y, groups, noisy, perfect = [], [], [], []
    for q in range(n_questions):
        for k in range(3):  # three answers a question, the question's answers resampled together
            wrong = (q + k) % 3 != 0
            y.append(wrong)
            groups.append(f"q{q}")
            noisy.append(rng.random())
            perfect.append(1.0 + rng.random() if wrong else rng.random())
    return y, groups, noisy, perfect


def test_equal_scorers_give_a_zero_interval():
    y, groups, noisy, _ = _data()
    assert bench.paired_auroc_ci(noisy, noisy, y, groups, seed=1, n_boot=200) == (0.0, 0.0)


def test_a_better_scorer_lies_above_and_the_reverse_below():
    y, groups, noisy, perfect = _data()
    low, high = bench.paired_auroc_ci(noisy, perfect, y, groups, seed=1, n_boot=300)
    assert 0 < low <= high <= 1
    low_r, high_r = bench.paired_auroc_ci(perfect, noisy, y, groups, seed=1, n_boot=300)
    assert -1 <= low_r <= high_r < 0
