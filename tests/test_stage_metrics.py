"""Every metrics file carries the environment that explains differences between machines."""

import json
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


# ------------------------------------------------------------------ CPU class and provenance
def _cpuinfo(*flags):
    return f"processor\t: 0\nflags\t\t: fpu sse2 {' '.join(flags)}\n\nprocessor\t: 1\nflags\t\t: fpu\n"


@pytest.mark.parametrize("flags, device, expected", [
    (("avx2", "avx512_bf16", "amx_bf16", "amx_tile"), "cpu", "amx"),
    (("avx2", "avx512f", "avx512_bf16"), "cpu", "avx512_bf16"),
    (("avx2", "avx512f"), "cpu", "avx2"),
    (("sse4_2",), "cpu", "other"),
    (("avx2",), "cuda:0", "cuda"),
])
def test_cpu_class_reads_the_flags(flags, device, expected):
    assert stage_metrics.cpu_class(device, _cpuinfo(*flags)) == expected


def test_cpu_class_of_this_machine_is_recorded():
    env = stage_metrics.environment({"backend": "hf", "device": "cpu", "dtype": "float32"})
    assert env["cpu_class"] in stage_metrics.CPU_CLASSES


def _pipeline(root, envs):
    """A two-stage pipeline under ``root``: ``make`` writes data/make, ``use`` reads it."""
    (root / "notebooks").mkdir(parents=True)
    for nb in ("01_make.py", "02_use.py"):
        (root / "notebooks" / nb).write_text("# %%\n", encoding="utf-8")
    (root / "params.yaml").write_text("use:\n  source: data/make\n", encoding="utf-8")
    (root / "dvc.yaml").write_text(
        "stages:\n"
        "  make: {cmd: x, deps: [notebooks/01_make.py], outs: [data/make]}\n"
        "  use: {cmd: x, deps: [notebooks/02_use.py, '${use.source}/table.jsonl'], outs: [data/use]}\n",
        encoding="utf-8")
    metrics = root / "metrics"
    metrics.mkdir()
    for stem, env in envs.items():
        (metrics / f"{stem}.json").write_text(json.dumps({"environment": env}), encoding="utf-8")
    return metrics


def test_upstream_is_read_from_the_producing_stages_metrics(tmp_path):
    env = {"python": "3", "generator": {"backend": "hf", "device": "cpu", "dtype": "float32"}, "cpu_class": "avx2"}
    metrics = _pipeline(tmp_path, {"01_make": env})
    up = stage_metrics.upstream_environments("use", metrics, tmp_path)
    assert up == {"make": {"read": ["data/make/table.jsonl"], "dtype": "float32", "cpu_class": "avx2"}}
    assert stage_metrics.upstream_environments("make", metrics, tmp_path) == {}
    # an upstream whose metrics file predates cpu_class, or is missing
    del env["cpu_class"]
    metrics = _pipeline(tmp_path / "old", {"01_make": env})
    assert stage_metrics.upstream_environments("use", metrics, tmp_path / "old")["make"]["cpu_class"] is None
    assert stage_metrics.upstream_environments("use", _pipeline(tmp_path / "none", {}), tmp_path / "none") == {}


def test_provenance_names_each_upstream_made_otherwise():
    here = {"generator": {"dtype": "bfloat16"}, "cpu_class": "amx"}
    up = {"critic_sft": {"read": ["data/critic_sft"], "dtype": "float32", "cpu_class": "avx2"},
          "same": {"read": ["data/same"], "dtype": "bfloat16", "cpu_class": "amx"},
          "other_cpu": {"read": ["data/a", "data/b"], "dtype": "bfloat16", "cpu_class": "avx512_bf16"},
          "unrecorded": {"read": ["data/old"], "dtype": "bfloat16", "cpu_class": None}}
    assert stage_metrics.provenance(here, up) == [
        "read data/critic_sft made in float32 on avx2; this stage ran in bfloat16 on amx",
        "read data/a, data/b made in bfloat16 on avx512_bf16; this stage ran in bfloat16 on amx",
    ]


def test_write_stage_metrics_records_upstream_and_provenance(tmp_path, monkeypatch):
    other = {"python": "3", "generator": {"backend": "hf", "device": "cpu", "dtype": "bfloat16"}, "cpu_class": "amx"}
    metrics = _pipeline(tmp_path, {"01_make": other})
    monkeypatch.setattr(paths, "METRICS_DIR", metrics)
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    out = stage_metrics.write_stage_metrics("02_use", {"f1": 0.5}, generator={"backend": "hf", "dtype": "float32"})
    env = read_json(out)["environment"]
    assert env["upstream"]["make"]["dtype"] == "bfloat16"
    assert env["provenance"] == [f"read data/make/table.jsonl made in bfloat16 on amx; this stage ran in "
                                 f"float32 on {env['cpu_class']}"]
    # the same dtype and class: no provenance entry
    (metrics / "01_make.json").write_text(json.dumps({"environment": {**other, **{
        "generator": env["generator"], "cpu_class": env["cpu_class"]}}}), encoding="utf-8")
    out = stage_metrics.write_stage_metrics("02_use", {"f1": 0.5}, generator={"backend": "hf", "dtype": "float32"})
    assert "provenance" not in read_json(out)["environment"]


def test_record_wall_seconds(tmp_path):
    (tmp_path / "01_make.json").write_text(json.dumps({"f1": 1, "environment": {"python": "3"}}), encoding="utf-8")
    assert stage_metrics.record_wall_seconds("01_make", 12.345, metrics_dir=tmp_path) == tmp_path / "01_make.json"
    assert read_json(tmp_path / "01_make.json") == {"f1": 1, "environment": {"python": "3", "wall_seconds": 12.3}}
    assert stage_metrics.record_wall_seconds("02_none", 1.0, metrics_dir=tmp_path) is None
    assert not (tmp_path / "02_none.json").exists()


def test_every_committed_stage_that_read_another_class_says_so_in_its_provenance():
    """The committed chain may mix CPU classes and dtypes (each stage runs on the machine of its
    sitting), but a stage that read outputs made otherwise carries one provenance line per such
    upstream stage, as the upstream stages' committed metrics give it. Files written before
    cpu_class was recorded are left out, and so is a stage whose inputs changed after it ran (a
    chain re-run across sittings: `dvc status` names it, and it is checked once it re-runs)."""
    import yaml

    from ragcritic_lib.pipeline.stage import stage_name

    lock = yaml.safe_load((paths.ROOT / "dvc.lock").read_text())["stages"]
    made = {o["path"]: o.get("md5") for st in lock.values() for o in st.get("outs", [])}
    maker = {o["path"]: name for name, st in lock.items() for o in st.get("outs", [])}
    stale = {name for name, st in lock.items()
             if any(d["path"] in made and d.get("md5") != made[d["path"]] for d in st.get("deps", []))}
    while True:  # and every stage downstream of one that is
        more = {name for name, st in lock.items() if name not in stale
                and any(maker.get(d["path"]) in stale for d in st.get("deps", []))}
        if not more:
            break
        stale |= more
    files = sorted(paths.METRICS_DIR.glob("*.json"))
    assert files
    checked = 0
    for f in files:
        env = read_json(f).get("environment") or {}
        if "cpu_class" not in env or stage_name(f) in stale:
            continue
        want = stage_metrics.provenance(env, stage_metrics.upstream_environments(stage_name(f)))
        assert env.get("provenance", []) == want, f"{f.name}: provenance {env.get('provenance')} but {want}"
        checked += 1
    assert checked >= 6  # 00-04 at least
