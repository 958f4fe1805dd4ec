"""Shared fixtures. Model fixtures point at the embedded-default assets built by the `assets`
stage (`make test` builds them first); a test that needs one is skipped only when they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragcritic_lib import paths


def _model_dir(name: str) -> Path:
    d = paths.MODELS_DIR / name
    if not d.exists():
        pytest.skip(f"{d} not built (run `make assets`)")
    return d


@pytest.fixture(scope="session")
def smollm_dir() -> Path:
    return _model_dir("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    return _model_dir("all-minilm-l6-v2")


@pytest.fixture(scope="session")
def reranker_dir() -> Path:
    return _model_dir("ms-marco-minilm-l12-reranker")


@pytest.fixture(scope="session")
def bge_dir() -> Path:
    return _model_dir("bge-small-en")
