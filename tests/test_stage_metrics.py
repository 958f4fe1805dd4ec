"""Every metrics file carries the environment that explains differences between machines."""

import re
from importlib import metadata

import pytest

from ragcritic_lib import paths

from ragcritic_lib.pipeline import stage_metrics
from ragcritic_lib.io import read_json
from ragcritic_lib.pipeline.params import notebook_paths


def test_environment_resolves_auto_dtype_and_names_versions():
    env = stage_metrics.environment({"backend": "hf", "device": "cpu", "dtype": "auto"})
    assert env["torch"] == metadata.version("torch")
    assert env["transformers"] == metadata.version("transformers")
    assert env["generator"]["device"] == "cpu"
    assert env["generator"]["dtype"] in ("bfloat16", "float32")  # never "auto"
    fixed = stage_metrics.environment({"backend": "hf", "device": "cpu", "dtype": "float32"})
    assert fixed["generator"]["dtype"] == "float32"
    served = stage_metrics.environment({"backend": "openai", "device": "cpu", "dtype": "auto"})
    assert served["generator"] == {"backend": "openai", "device": "cpu", "dtype": "auto"}


def test_write_stage_metrics_adds_the_block(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "METRICS_DIR", tmp_path)
    out = stage_metrics.write_stage_metrics("99_x", {"f1": 0.5}, generator={"backend": "hf", "dtype": "float32"})
    data = read_json(out)
    assert out == tmp_path / "99_x.json" and data["f1"] == 0.5
    assert data["environment"]["generator"]["dtype"] == "float32"
    with pytest.raises(ValueError, match="reserved"):
        stage_metrics.write_stage_metrics("99_x", {"environment": 1})


def test_every_notebook_writes_its_metrics_with_the_environment():
    for name, nb in notebook_paths().items():
        text = nb.read_text(encoding="utf-8")
        # in sight, in the notebook (method stages too: save_method_answers leaves the file to it)
        assert f'write_stage_metrics("{nb.stem}", ' in text, nb.name
        assert not re.search(r"write_json\(paths\.METRICS_DIR", text), nb.name
