#!/bin/bash
# The HTTP server's floor (floor.py) on uvloop and on asyncio's own loop (uvloop made unimportable), alternated,
# ROUNDS times each (N requests a run), this branch's product.  The pages need the fleet:
# the per-kind runs (cpu.sh) measure those.
set -u
cd "$(dirname "$0")"
PY=${PY:-/work/wt/api2/.venv/bin/python}
NO=$(mktemp -d)
echo 'raise ImportError("uvloop made unimportable (floor.sh)")' > "$NO/uvloop.py"
for k in $(seq 1 "${ROUNDS:-4}"); do
  $PY floor.py /networks/net0 ${N:-16000}
  PYTHONPATH=$NO $PY floor.py /networks/net0 ${N:-16000} 2>/dev/null
done
rm -r "$NO"
