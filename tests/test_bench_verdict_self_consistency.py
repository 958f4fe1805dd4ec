"""The self-consistency scores of benchmarks/bench_verdict_self_consistency.py."""

from __future__ import annotations

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_verdict_self_consistency.py")


def test_disagreement_is_one_minus_token_f1_against_the_answer_and_between_samples():
    out = bench.disagreement_scores("Paris", "Paris", ["Paris", "Lyon", "Paris France"])
    assert out["greedy disagreement"] == 0.0
    # F1 against "Paris": 1, 0, 2/3 -> mean 5/9 agreement.
    assert out["sampled disagreement"] == pytest.approx(1 - 5 / 9)
    # Pairs: (Paris, Lyon) 0, (Paris, Paris France) 2/3, (Lyon, Paris France) 0 -> mean 2/9.
    assert out["sample spread"] == pytest.approx(1 - 2 / 9)
    # A wrong-looking answer: no sample repeats it, and the samples agree with each other.
    other = bench.disagreement_scores("1984", "2001", ["2001", "2001"])
    assert other["greedy disagreement"] == other["sampled disagreement"] == 1.0 and other["sample spread"] == 0.0
