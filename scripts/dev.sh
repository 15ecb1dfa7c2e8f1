#!/usr/bin/env bash
# The two entry points of the README:
#   bash scripts/dev.sh up [tidelog up flags]   install what is missing, start the local cluster
#   bash scripts/dev.sh test [pytest args]      install what is missing, run the whole test suite
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  up)
    bash scripts/setup.sh
    exec "$PY" -m shared.cli.main up "$@"
    ;;
  test)
    bash scripts/setup.sh
    "$PY" -m ruff check .
    # Two workers (pytest-xdist), a test module per worker at a time: modules share their clusters, and
    # integration tests spend much of their time waiting on processes, so two cores run two modules.
    # The 25 slowest tests are listed before the closing line, to see where the suite's time goes.
    exec "$PY" -m pytest -n 2 --dist loadfile --durations=25 "$@"
    ;;
  *)
    echo "usage: bash scripts/dev.sh up|test [args...]" >&2
    exit 2
    ;;
esac
