#!/bin/bash
# The API process's CPU per request kind while the engine polices 1,000 stand-in routers of 16 VRs
# (python -m xtc_lab.policer_api_cpu --fleet 1000: requests one at a time on one connection, 1,000 of each
# kind, the best of 2 runs a kind), before and after alternated (python -m xtc_lab.alternate).  Before =
# main at the branch point db076ca, exported with `git archive db076ca xtc | tar -x -C /tmp/api2-before`,
# plus /tmp/api2-before/uvloop.py that raises ImportError (main's environment had no uvloop: its
# uvicorn "auto" loop was asyncio's), alone on PYTHONPATH; after = this branch.  STEP names the runs.
set -u
cd "$(dirname "$0")"
PY=${PY:-/work/wt/api2/.venv/bin/python}
BEFORE=${BEFORE:-/tmp/api2-before}
STEP=${STEP:-cpu}
ORDER=${ORDER:-before,after}
$PY -m xtc_lab.alternate --before "$BEFORE" --each side=$ORDER $STEP-{side} -- $PY -m xtc_lab.policer_api_cpu -n 1000 --repeat 2 --fleet 1000
