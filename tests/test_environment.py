"""The conda environment for GPU machines must not drift from the pinned CPU stack."""

import re
import subprocess
import sys

import yaml

from ragcritic_lib import paths

GPU_ONLY = {"vllm", "deepspeed"}
CPU_ONLY = {"faiss-cpu"}  # faiss-gpu comes from conda instead; both share an import name


def _pins(lines):
    out = {}
    for line in lines:
        line = line.split("#")[0].strip()
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def test_environment_pins_match_requirements():
    req = _pins((paths.ROOT / "requirements-cpu.txt").read_text().splitlines())
    env = yaml.safe_load((paths.ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    envpins = _pins(pip_section)
    shared_req = {k: v for k, v in req.items() if k not in CPU_ONLY}
    shared_env = {k: v for k, v in envpins.items() if k not in GPU_ONLY}
    assert shared_env == shared_req
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert any(d.startswith("faiss-gpu") for d in conda)
    assert "faiss-cpu" not in envpins


def test_import_is_light():
    code = (
        "import sys, ragcritic_lib, ragcritic_lib.paths, ragcritic_lib.params, ragcritic_lib.rag, "
        "ragcritic_lib.metrics, ragcritic_lib.io, ragcritic_lib.data, ragcritic_lib.runtime; "
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'trl', 'peft', 'sentence_transformers') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
