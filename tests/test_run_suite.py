"""`make test`'s runner (tests/run_suite.sh): the unit tests and the smoke run as two pytest
processes side by side, the smoke run's output after the unit tests', and one exit status that
fails when either failed. A stand-in interpreter records the calls instead of running pytest."""

import os
import subprocess

import pytest

from ragcritic_lib import paths

SCRIPT = paths.ROOT / "tests" / "run_suite.sh"
STUB = """#!/usr/bin/env bash
# python -m pytest -q -m MARK [ARGS...] tests
mark=$5
if [ "$mark" = smoke ]; then sleep 0.3; echo "smoke ran: $*"; exit "${SMOKE_RC}"; fi
echo "units ran: $*"; echo "units $(date +%s%N)" >> "$CALLS"; exit "${UNITS_RC}"
"""


def _run(tmp_path, units_rc, smoke_rc, *args, serial=False):
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    env = {**os.environ, "PYTHON": str(stub), "UNITS_RC": str(units_rc), "SMOKE_RC": str(smoke_rc),
           "CALLS": str(tmp_path / "calls"), "RAGCRITIC_TEST_SERIAL": "1" if serial else "0"}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("serial", [False, True])
def test_both_run_and_the_smoke_output_follows_the_units(tmp_path, serial):
    proc = _run(tmp_path, 0, 0, "-x", serial=serial)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "units ran: -m pytest -q -m not smoke -x tests" in out
    assert "smoke ran: -m pytest -q -m smoke -x tests" in out
    assert out.index("units ran") < out.index("smoke ran")


@pytest.mark.parametrize("units_rc,smoke_rc,status", [
    (0, 0, 0), (1, 0, 1), (0, 1, 1), (2, 1, 2), (5, 0, 0), (0, 5, 0), (5, 5, 5), (5, 1, 1), (1, 5, 1)])
def test_the_status_fails_when_either_fails(tmp_path, units_rc, smoke_rc, status):
    assert _run(tmp_path, units_rc, smoke_rc).returncode == status
