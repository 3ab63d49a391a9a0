# Shell functions of scripts/test, scripts/test-lowest and scripts/test-floors (sourced, not
# run): a virtualenv made once, and pytest run so that collecting no test fails.

PY=${PYTHON:-python3}

# venv DIR: a virtualenv with pip at DIR. One made half-way (no pip: Debian without
# python3-venv) is made again, so installing the missing package and running again works.
venv() {
  if ! "$1/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$1"
    "$PY" -m venv "$1"
  fi
}

# run_pytest DIR LABEL ARG...: pytest in DIR's virtualenv, in WURK_TEST_WORKERS processes
# (default 4), a worker that runs out taking tests queued for another (worksteal: a few long
# tests landing on one worker late do not make the run wait for that one alone). Returns
# pytest's status; exit 5 (no tests collected) is a failure.
run_pytest() {
  local dir=$1 label=$2 status
  shift 2
  set +e
  "$dir/bin/python" -m pytest -n "${WURK_TEST_WORKERS:-4}" --dist worksteal "$@"
  status=$?
  set -e
  if [ "$status" -eq 5 ]; then
    echo "$label: pytest collected no tests: that is a failure" >&2
    status=1
  fi
  return "$status"
}
