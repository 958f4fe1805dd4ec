import json
import multiprocessing
import os

import pytest

from ragcritic_lib.data.flashrag import load_corpus_records, load_dataset_split, seeded_split, split_title
from ragcritic_lib.io import (
    DataFormatError, append_jsonl, atomic_write_text, read_jsonl, read_jsonl_tolerant, read_yaml, write_jsonl,
)


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_malformed_jsonl_names_file_and_line(tmp_path):
    f = _write(tmp_path / "d.jsonl", ['{"id": 1, "question": "q", "golden_answers": ["a"]}', '{"id": 2, "question": '])
    with pytest.raises(DataFormatError, match=r"d\.jsonl:2: invalid JSON"):
        read_jsonl(f)
    f2 = _write(tmp_path / "e.jsonl", ['[1, 2]'])
    with pytest.raises(DataFormatError, match=r"e\.jsonl:1: expected a JSON object"):
        read_jsonl(f2)


def test_dataset_validation_errors(tmp_path):
    good = '{"id": "a", "question": "Who?", "golden_answers": ["X"], "metadata": {}}'
    cases = {
        '{"question": "Who?", "golden_answers": ["X"]}': "no 'id'",
        '{"id": "b", "question": "", "golden_answers": ["X"]}': "'question'",
        '{"id": "b", "question": "Q", "golden_answers": "X"}': "'golden_answers'",
        '{"id": "b", "question": "Q", "golden_answers": ["X"], "metadata": []}': "'metadata'",
        good: "duplicate id",
    }
    for bad, msg in cases.items():
        f = _write(tmp_path / "s.jsonl", [good, bad])
        with pytest.raises(DataFormatError, match=rf"s\.jsonl:2: .*{msg}"):
            load_dataset_split(f)


def test_dataset_and_corpus_load(tmp_path):
    f = _write(tmp_path / "s.jsonl", [
        json.dumps({"id": 7, "question": "Q1", "golden_answers": ["A"]}),
        "",
        json.dumps({"id": "x", "question": "Q2", "golden_answers": []}),
    ])
    recs = load_dataset_split(f)
    assert [r["id"] for r in recs] == ["7", "x"] and recs[0]["metadata"] == {}
    assert len(load_dataset_split(f, limit=1)) == 1
    c = _write(tmp_path / "c.jsonl", [json.dumps({"id": "p1", "contents": "Title\nBody text"}),
                                       json.dumps({"id": "p2", "title": "T2", "text": "B2"})])
    corpus = load_corpus_records(c)
    assert corpus[1]["contents"] == "T2\nB2"
    assert split_title(corpus[0]["contents"]) == ("Title", "Body text")
    bad = _write(tmp_path / "c2.jsonl", [json.dumps({"id": "p1", "contents": "  "})])
    with pytest.raises(DataFormatError, match=r"c2\.jsonl:1: 'contents'"):
        load_corpus_records(bad)


def test_seeded_split_is_deterministic_and_complete():
    a = seeded_split(range(100), {"train": 0.8, "dev": 0.1, "test": 0.1}, seed=3)
    b = seeded_split(range(100), {"train": 0.8, "dev": 0.1, "test": 0.1}, seed=3)
    assert a == b
    assert [len(a[k]) for k in ("train", "dev", "test")] == [80, 10, 10]
    assert sorted(a["train"] + a["dev"] + a["test"]) == list(range(100))
    assert seeded_split(range(100), {"train": 0.8, "dev": 0.1, "test": 0.1}, seed=4) != a


def test_atomic_write_never_leaves_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def _append_then_die(path):
    append_jsonl(path, [{"i": 0}, {"i": 1}])
    with open(path, "a") as fh:  # a killed writer leaves a torn last line
        fh.write('{"i": 2, "tor')
        fh.flush()
    os._exit(1)


def test_tolerant_reader_drops_torn_tail_only(tmp_path):
    path = tmp_path / "log.jsonl"
    p = multiprocessing.get_context("fork").Process(target=_append_then_die, args=(path,))
    p.start()
    p.join()
    assert read_jsonl_tolerant(path) == [{"i": 0}, {"i": 1}]
    path.write_text('{"i": 0}\n{"bad\n{"i": 2}\n')
    with pytest.raises(DataFormatError, match=r"log\.jsonl:2"):
        read_jsonl_tolerant(path)
    write_jsonl(path, [{"a": "é"}])
    assert read_jsonl(path) == [{"a": "é"}]


def test_yaml_error_names_line(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(DataFormatError, match=r"p\.yaml:\d+: invalid YAML"):
        read_yaml(f)
