#!/usr/bin/env bash
# The GPU suite in one command (<= 5 minutes on one GPU): JSON report + a short table printed last.
# Extra arguments go to benchmarks/gpu_suite.py, e.g. `benchmarks/gpu_suite.sh --device cpu --quick` (smoke test).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
# The suite keeps its own budget (sections that would start late are skipped); this is only the backstop.
PYTHONPATH=. exec timeout 330 "$PY" benchmarks/gpu_suite.py "$@"
