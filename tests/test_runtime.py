"""Runtime helpers that build components from params."""

from __future__ import annotations

import json

from ragcritic_lib import runtime


def _write_dataset(folder, text):
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"id": "d0", "contents": f"T\n{text}"}) + "\n"
                                         + json.dumps({"id": "d1", "contents": "U\nunrelated words here"}) + "\n")
    for split in ("train", "dev", "test"):
        (folder / f"{split}.jsonl").write_text("")


def test_load_retriever_memo_follows_the_corpus_path(tmp_path):
    _write_dataset(tmp_path / "a", "alpha bravo")
    _write_dataset(tmp_path / "b", "charlie delta")
    params = {"common": {"retriever": {"kind": "bm25", "cache": False},
                         "datasets": {"x": {"corpus": str(tmp_path / "a" / "corpus.jsonl"), "splits": str(tmp_path / "a")}}}}
    first = runtime.load_retriever(params, "x")
    assert runtime.load_retriever(params, "x") is first
    params["common"]["datasets"]["x"] = {"corpus": str(tmp_path / "b" / "corpus.jsonl"), "splits": str(tmp_path / "b")}
    second = runtime.load_retriever(params, "x")
    assert second is not first
    assert "charlie" in second.search(["charlie"], k=1)[0][0].contents
