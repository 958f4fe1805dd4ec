"""JSONL readers name the physical file:line of a problem (blank lines counted, bad UTF-8)."""

import json

import pytest

from ragcritic_lib.data.flashrag import load_corpus_records, load_dataset_split
from ragcritic_lib.io import DataFormatError, iter_jsonl_numbered, read_jsonl, read_jsonl_tolerant

GOOD = json.dumps({"id": "a", "question": "Who?", "golden_answers": ["X"]})
PASSAGE = json.dumps({"id": "p1", "contents": "Title\nBody"})


def test_blank_line_before_bad_record_names_its_physical_line(tmp_path):
    split = tmp_path / "s.jsonl"
    split.write_text(f'{GOOD}\n\n{{"id": "b", "question": ""}}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"s\.jsonl:3: 'question' must be a non-empty string"):
        load_dataset_split(split)
    split.write_text(f"\n{GOOD}\n  \n{GOOD}\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"s\.jsonl:4: duplicate id 'a'"):
        load_dataset_split(split)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(f'{PASSAGE}\n\n\n{{"id": "p2", "contents": " "}}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"c\.jsonl:4: 'contents' must be a non-empty string"):
        load_corpus_records(corpus)
    assert [n for n, _ in iter_jsonl_numbered(split)] == [2, 4]


def test_invalid_utf8_names_file_and_line(tmp_path):
    split = tmp_path / "s.jsonl"
    split.write_bytes(GOOD.encode() + b"\n\n" + b'{"id": "c", "question": "caf\xe9?", "golden_answers": []}\n'
                      + GOOD.replace('"a"', '"d"').encode() + b"\n")
    pattern = r"s\.jsonl:3: invalid UTF-8 \(byte 0xe9 at column 29\)"
    with pytest.raises(DataFormatError, match=pattern):
        load_dataset_split(split)
    with pytest.raises(DataFormatError, match=pattern):
        read_jsonl(split)
    with pytest.raises(DataFormatError, match=pattern):
        read_jsonl_tolerant(split)  # not the last line: corruption, not a torn tail
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(PASSAGE.encode() + b"\n\n" + b'{"id": "p2", "contents": "T\\n\xff"}\n')
    with pytest.raises(DataFormatError, match=r"c\.jsonl:3: invalid UTF-8"):
        load_corpus_records(corpus)


def test_errors_are_value_errors_with_one_message(tmp_path):
    split = tmp_path / "s.jsonl"
    split.write_text(f"{GOOD}\n\n{{not json\n", encoding="utf-8")
    with pytest.raises(ValueError) as info:
        load_dataset_split(split)
    assert str(info.value) == f"{split}:3: invalid JSON (Expecting property name enclosed in double quotes)"


def test_line_separator_characters_inside_records_are_not_line_breaks(tmp_path):
    split = tmp_path / "s.jsonl"
    rec = {"id": "u", "question": "Where is 東京\u2028(Tokyo)\u0085? 🙂", "golden_answers": ["Japan\u2029"]}
    split.write_text(GOOD + "\n" + json.dumps(rec, ensure_ascii=False) + "\n", encoding="utf-8")
    loaded = load_dataset_split(split)
    assert loaded[1] == {**rec, "metadata": {}}
