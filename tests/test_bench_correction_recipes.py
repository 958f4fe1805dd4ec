"""The correction-recipe benchmark's recipe list (benchmarks/bench_correction_recipes.py)."""

from __future__ import annotations

import pytest
from script_modules import load_script

bench = load_script("benchmarks/bench_correction_recipes.py")


def test_recipes_parse_in_order_with_the_first_as_reference():
    recipes = bench.parse_recipes("llm:20, extractive:10")
    assert [r["notes"] for r in recipes] == ["llm", "extractive"]
    assert [r["rerank_depth"] for r in recipes] == [20, 10]
    assert recipes[0]["name"] == "llm notes, rerank depth 20"


@pytest.mark.parametrize("text", ["model:20", "llm:0", "llm", "llm:x", " , "])
def test_a_bad_recipe_is_one_clear_error(text):
    with pytest.raises(SystemExit, match="--recipes"):
        bench.parse_recipes(text)


def test_a_recipe_may_name_its_expansion_and_defaults_to_the_generator():
    recipes = bench.parse_recipes("extractive:10,extractive:10:prf,extractive:10:llm")
    assert [r["expand"] for r in recipes] == ["llm", "prf", "llm"]
    assert recipes[1]["name"] == "extractive notes, rerank depth 10, prf expand"
    assert recipes[0]["name"] == recipes[2]["name"] == "extractive notes, rerank depth 10"


@pytest.mark.parametrize("text", ["extractive:10:web", "extractive:10:prf:x", "extractive::prf"])
def test_a_bad_expansion_is_one_clear_error(text):
    with pytest.raises(SystemExit, match="--recipes"):
        bench.parse_recipes(text)
