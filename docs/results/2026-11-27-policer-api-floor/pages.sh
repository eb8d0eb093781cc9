#!/bin/bash
# pages.py (a page of 100 VRs / routers in the API's process, without HTTP) before and after alternated, ROUNDS
# times: before = main at the branch point (/tmp/api2-before, alone on PYTHONPATH), after = this branch.
set -u
cd "$(dirname "$0")"
PY=${PY:-/work/wt/api2/.venv/bin/python}
BEFORE=${BEFORE:-/tmp/api2-before}
for k in $(seq 1 "${ROUNDS:-4}"); do
  PYTHONPATH=$BEFORE $PY pages.py
  $PY pages.py
done
