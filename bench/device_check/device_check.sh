#!/usr/bin/env bash
# The GPU check: every step and figure of bench/device_check/device_check.py (its docstring says
# what each step does), in at most --budget_s seconds (480 by default) after step 0's install.
#   bench/device_check/device_check.sh [--out_dir DIR] [--wheelhouse DIR] [--cpu_mrpc_accuracy X]
#       [--dry_run]
# Output: one line per step, and OUT_DIR/device_check.log, _summary.md and .json (OUT_DIR:
# --out_dir, else $OUT, else ./device_check_out). PY picks the Python (default: the project's
# .venv when it is there, else python3).
set -u
cd "$(dirname "$0")/../.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}
exec "$PY" -u bench/device_check/device_check.py --python="$PY" "$@"
