"""A retriever for tests: ranks a small corpus by the words a query shares with each passage."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence


class WordOverlapRetriever:
    """``search(queries, k)`` over ``{doc_id: text}``: most shared lowercase words first (ties in corpus order)."""

    def __init__(self, corpus: Mapping[str, str]) -> None:
        self.corpus = dict(corpus)

    def search(self, queries: Sequence[str], k: int) -> list[list[object]]:
        from ragcritic_lib.retrieval import Hit

        out = []
        for q in queries:
            words = set(re.findall(r"[a-z0-9]+", q.lower()))
            ranked = sorted(self.corpus.items(),
                            key=lambda kv: -len(words & set(re.findall(r"[a-z0-9]+", kv[1].lower()))))
            out.append([Hit(d, 0.0, t) for d, t in ranked[:k]])
        return out
