"""The packaged model's conversion parses its GGUF file once, not once per transformers call."""

import gguf
import numpy as np
import pytest

from ragcritic_lib.data.assets import gguf_parsed_once


def _tiny_gguf(path):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("test.answer", 42)
    writer.add_tensor("w", np.arange(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_each_file_is_parsed_once_inside_the_block_and_the_reader_is_restored(tmp_path, monkeypatch):
    first, second = _tiny_gguf(tmp_path / "a.gguf"), _tiny_gguf(tmp_path / "b.gguf")
    original, parses = gguf.GGUFReader, []

    class Counting(original):
        def __init__(self, path, mode="r"):
            parses.append(str(path))
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    with gguf_parsed_once():
        from gguf import GGUFReader  # as transformers imports it, inside each call

        one = GGUFReader(first)
        assert GGUFReader(str(first)) is one  # the same file by another spelling of its path
        other = GGUFReader(second)
        assert other is not one and GGUFReader(second) is other
        assert int(one.fields["test.answer"].parts[-1][0]) == 42
        assert np.array_equal(np.asarray(one.tensors[0].data), np.arange(8, dtype=np.float32))
    assert parses == [str(first), str(second)]
    assert gguf.GGUFReader is Counting


def test_the_reader_is_restored_when_the_block_raises(tmp_path):
    original = gguf.GGUFReader
    with pytest.raises(RuntimeError, match="boom"):
        with gguf_parsed_once():
            assert gguf.GGUFReader is not original
            raise RuntimeError("boom")
    assert gguf.GGUFReader is original
