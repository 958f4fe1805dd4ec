"""`make test`'s runner (tests/run_suite.sh): the unit tests and the smoke run as two pytest calls,
in turn or side by side, the smoke run's output after the unit tests', and one exit status that
fails when either failed. A stand-in interpreter records the calls instead of running pytest."""

import os
import subprocess

import pytest

from ragcritic_lib import paths

SCRIPT = paths.ROOT / "tests" / "run_suite.sh"
STUB = """#!/usr/bin/env bash
# python -m pytest -q -m MARK [ARGS...] tests
mark=$5
if [ "$mark" = smoke ]; then sleep 0.3; echo "smoke ran: $* threads=${OMP_NUM_THREADS:-unset}"; exit "${SMOKE_RC}"; fi
echo "units ran: $* threads=${OMP_NUM_THREADS:-unset}"; exit "${UNITS_RC}"
"""


def _run(tmp_path, units_rc, smoke_rc, *args, serial=True):
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    env = {**{k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}, "PYTHON": str(stub), "UNITS_RC": str(units_rc), "SMOKE_RC": str(smoke_rc),
           "CALLS": str(tmp_path / "calls"), "RAGCRITIC_TEST_PARALLEL": "0" if serial else "1"}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("serial", [False, True])
def test_both_run_and_the_smoke_output_follows_the_units(tmp_path, serial):
    proc = _run(tmp_path, 0, 0, "-x", serial=serial)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "units ran: -m pytest -q -m not smoke -x tests" in out
    assert "smoke ran: -m pytest -q -m smoke -x tests" in out
    assert out.index("units ran") < out.index("smoke ran")


def test_side_by_side_the_threads_are_split_and_in_turn_left_alone(tmp_path):
    parallel = _run(tmp_path, 0, 0, serial=False).stdout
    assert "units ran: -m pytest -q -m not smoke tests threads=1" in parallel
    assert "smoke ran: -m pytest -q -m smoke tests threads=" in parallel
    serial = _run(tmp_path, 0, 0).stdout
    assert "threads=unset" in serial and "threads=1" not in serial


@pytest.mark.parametrize("units_rc,smoke_rc,status", [
    (0, 0, 0), (1, 0, 1), (0, 1, 1), (2, 1, 2), (5, 0, 0), (0, 5, 0), (5, 5, 5), (5, 1, 1), (1, 5, 1)])
def test_the_status_fails_when_either_fails(tmp_path, units_rc, smoke_rc, status):
    assert _run(tmp_path, units_rc, smoke_rc).returncode == status
    assert _run(tmp_path, units_rc, smoke_rc, serial=False).returncode == status
