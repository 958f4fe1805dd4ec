"""The pinned GPU set (requirements-gpu.txt, installed by environment.yml) must not drift from the
pinned CPU set: every package both pin has the same version unless the exception table below
says why not. Whether each set resolves is checked against the index by .ci/check_requirements.py."""

import re
import subprocess
import sys

import pytest
import yaml

from ragcritic_lib import paths

# Packages both sets pin at different versions, each with the constraint that forces it.
# Remove an entry as soon as the two versions can be equal again.
PIN_EXCEPTIONS = {
    # vllm 0.32.0 requires transformers >=5.16.1,<5.20; the CPU set runs 5.23 (newest).
    "transformers": "vllm 0.32.0 requires transformers <5.20",
    # vllm's mistral_common[image] needs numpy <2.4 on Python <= 3.12; the CPU set runs 2.4.6.
    "numpy": "vllm 0.32.0 (mistral_common[image]) requires numpy <2.4 on Python 3.11",
}
CPU_ONLY = {"faiss-cpu"}  # the GPU set has faiss-gpu: same import name, never both in one env
GPU_ONLY = {"faiss-gpu", "vllm", "deepspeed"}
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)$")


def _pins(path):
    """{normalised name: version} of a requirements file; anything but `name==version` is an error."""
    out = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#")[0].strip()
        if not line:
            continue
        m = _PIN.match(line)
        assert m, f"{path.name}:{n}: not an exact pin (name==version): {raw!r}"
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        assert name not in out, f"{path.name}:{n}: {name} pinned twice"
        out[name] = m.group(2)
    return out


@pytest.fixture(scope="module")
def cpu():
    return _pins(paths.ROOT / "requirements-cpu.txt")


@pytest.fixture(scope="module")
def gpu():
    return _pins(paths.ROOT / "requirements-gpu.txt")


def test_shared_packages_have_equal_pins_unless_excepted(cpu, gpu):
    differ = {k: (cpu[k], gpu[k]) for k in cpu.keys() & gpu.keys() if cpu[k] != gpu[k]}
    assert sorted(differ) == sorted(PIN_EXCEPTIONS), (
        f"pins that differ: {differ}; exceptions listed: {sorted(PIN_EXCEPTIONS)} "
        "(make the pins equal, or add/remove an exception with its reason)")


def test_each_set_carries_exactly_the_packages_it_should(cpu, gpu):
    assert set(cpu) - set(gpu) == CPU_ONLY
    assert set(gpu) - set(cpu) == GPU_ONLY


def test_faiss_cpu_never_beside_faiss_gpu(cpu, gpu):
    for name, pins in (("requirements-cpu.txt", cpu), ("requirements-gpu.txt", gpu)):
        assert not {"faiss-cpu", "faiss-gpu"} <= set(pins), name
    assert "faiss-gpu" in gpu and "faiss-cpu" in cpu


def test_gpu_pins_satisfy_the_known_vllm_constraints(gpu):
    """The constraints behind the exceptions, as checked with pip's resolver (see the table)."""
    assert gpu["vllm"] == "0.32.0" and gpu["torch"] == "2.13.0"
    assert (5, 16, 1) <= tuple(int(x) for x in gpu["transformers"].split(".")) < (5, 20)
    assert tuple(int(x) for x in gpu["numpy"].split(".")) < (2, 4)


def test_conda_environment_installs_the_gpu_set_only():
    env = yaml.safe_load((paths.ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    conda = sorted(d.split("=")[0] for d in deps if isinstance(d, str))
    assert conda == ["pip", "python"]
    assert "python=3.11" in deps
    pip_section = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert pip_section == ["-r requirements-gpu.txt"]


def test_import_is_light():
    code = (
        "import sys, ragcritic_lib, ragcritic_lib.paths, ragcritic_lib.pipeline.params, ragcritic_lib.retrieval.rag, "
        "ragcritic_lib.evaluation.scoring, ragcritic_lib.io, ragcritic_lib.data.flashrag, ragcritic_lib.runtime; "
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'trl', 'peft', 'sentence_transformers') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_gpu_profile_passes_params_check_with_models_to_fill_in():
    """`params check --profile gpu` accepts the profile as committed (models still USER_TO_FILL)."""
    out = subprocess.run([sys.executable, "-m", "ragcritic_lib.pipeline.params", "check", "--profile", "gpu"],
                         capture_output=True, text=True, cwd=paths.ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("gpu.yaml: ok")
    prof = yaml.safe_load((paths.CONFIGS_DIR / "profiles" / "gpu.yaml").read_text())
    gen = prof["common"]["generator"]
    assert (gen["backend"], gen["device"]) == ("vllm", "cuda") and "USER_TO_FILL" in gen["model"]
    assert prof["benchmark"]["per_class"] == 500 and prof["ragec"]["votes"] == 10
    assert prof["critic_sft"]["trainer"] == "trl"  # full fine-tuning of every layer on every example
    for stage in ("critic_sft", "critic_dpo"):
        assert prof[stage]["max_steps"] == -1 and prof[stage]["recipe"].endswith("_paper.yaml")
        recipe = yaml.safe_load((paths.ROOT / prof[stage]["recipe"]).read_text())
        assert recipe["max_steps"] == -1  # full epochs


def _check_requirements_module():
    from script_modules import load_script

    return load_script(".ci/check_requirements.py")


def test_requirements_check_reports_pips_conflict_explanation_only():
    """The CI check's message keeps pip's causes and errors, not its download log."""
    output = (
        "Looking in links: /opt/wheels\nWARNING: Location 'file:///x/simple/trl/' is ignored\n"
        "Collecting trl==1.16.0 (from -r bad.txt (line 1))\n  Downloading trl-1.16.0-py3-none-any.whl (948 kB)\n"
        "INFO: pip is looking at multiple versions of trl\nThe conflict is caused by:\n"
        "    The user requested transformers==4.50.0\n    trl 1.16.0 depends on transformers>=4.56.2\n"
        "To fix this you could try to:\n1. loosen the range\n2. remove package versions\n"
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io\n"
    )
    assert _check_requirements_module()._pip_explanation(output).split("\n    ") == [
        "The conflict is caused by:", "    The user requested transformers==4.50.0",
        "    trl 1.16.0 depends on transformers>=4.56.2", "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io"]


def test_requirements_check_refuses_an_unknown_set():
    with pytest.raises(SystemExit, match="unknown set 'gpu2'"):
        _check_requirements_module().main(["gpu2"])
