"""The critic's verdict as text and as tokens: the words every critic body agrees on.

Kept apart from :mod:`ragcritic_lib.critic.critics` so that the bodies that score a verdict (the
trainer, the probe, the verifier) need nothing else of the critic, and the critic can load them.
"""

from __future__ import annotations

from typing import Any

CORRECT = "Correct"
ERROR = "Error"
# The opening a critique starts with; the verdict is the word that follows it.
VERDICT_PREFIX = '{"Judgement": "'


def verdict_tokens(tok: Any) -> tuple[int, int, int]:
    """(offset of the verdict token inside the target, token id of Correct, of Error)."""
    a = tok(VERDICT_PREFIX + CORRECT, add_special_tokens=False)["input_ids"]
    b = tok(VERDICT_PREFIX + ERROR, add_special_tokens=False)["input_ids"]
    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return i, a[i], b[i]
