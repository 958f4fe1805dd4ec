#!/usr/bin/env bash
# `make test`: the unit and contract tests and the smoke run (tests/test_smoke.py), as two pytest
# processes side by side. The smoke run, a cold `dvc repro` of every stage in a copy of the
# repository, leaves one of the two cores idle for most of its time, and the unit tests are one
# process: side by side they take about as long as the smoke run alone. The unit tests print first,
# then the smoke run's output. The status is the unit tests' when they failed, else the smoke run's
# (pytest's 5, "no test collected", counts as a pass for one of the two when the other ran tests).
#
#   tests/run_suite.sh [PYTEST ARGS...]     # the arguments go to both pytest calls
#   RAGCRITIC_TEST_SERIAL=1 tests/run_suite.sh    # one after the other (smoke output live)
#   PYTHON=path/to/python tests/run_suite.sh      # another interpreter (default: python)
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}

if [ "${RAGCRITIC_TEST_SERIAL:-0}" = 1 ]; then
  "$py" -m pytest -q -m "not smoke" "$@" tests
  units=$?
  "$py" -m pytest -q -m smoke "$@" tests
  smoke=$?
else
  log=$(mktemp "${TMPDIR:-/tmp}/ragcritic-smoke.XXXXXX")
  "$py" -m pytest -q -m smoke "$@" tests >"$log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null; rm -f "$log"' EXIT
  "$py" -m pytest -q -m "not smoke" "$@" tests
  units=$?
  echo "== the smoke run (tests/test_smoke.py), run beside the unit tests; waiting for it =="
  wait "$pid"
  smoke=$?
  cat "$log"
fi

if [ "$units" = 5 ] && [ "$smoke" != 5 ]; then units=0; fi
if [ "$smoke" = 5 ] && [ "$units" != 5 ]; then smoke=0; fi
if [ "$units" != 0 ]; then exit "$units"; fi
exit "$smoke"
