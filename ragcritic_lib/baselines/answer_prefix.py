"""How a baseline stage encodes its answer prompts: the opening they share once, or each whole.

Standard RAG's answer prompt (:func:`ragcritic_lib.retrieval.rag.build_rag_messages`) opens with an
instruction and two worked examples, about 190 of its 400-600 tokens, alike in every prompt.
Self-Refine's rewrites, CRAG's answers over its refined knowledge and SIM-RAG's turn answers all
use it, as RAG-Critic's GenerateAnswer does (``correction.answer_prefix``). ``shared`` turns on the
HF backend's ``share_generation_prefix``: the turns before a prompt's last user turn are encoded
once and their key-value cache reused, so prefill falls by that share and the answers stay each
prompt's own (in bf16 a near tie may decode the other way; ``benchmarks/bench_answer_prefix.py``
measures both on dev). ``whole`` encodes every prompt whole. Backends without the switch (vLLM,
which caches prefixes itself, and served models) are left as they are.
"""

from __future__ import annotations

from typing import Any

ANSWER_PREFIXES = ("shared", "whole")


def set_answer_prefix(llm: Any, setting: str, *, key: str) -> bool:
    """Set the generator ``llm``'s prompt encoding from a params value; returns whether it applies.

    Args:
        llm: the stage's generator (the backend itself; a cost meter wraps it afterwards).
        setting: ``shared`` or ``whole``.
        key: the params key the value came from, named in the error.

    Raises:
        ValueError: ``setting`` is neither choice.
    """
    if setting not in ANSWER_PREFIXES:
        raise ValueError(f"{key}: must be one of {' | '.join(ANSWER_PREFIXES)}, got {setting!r}")
    if not hasattr(llm, "share_generation_prefix"):
        return False
    llm.share_generation_prefix = setting == "shared"
    return True
