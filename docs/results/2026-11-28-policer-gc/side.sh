#!/bin/bash
# side.sh main|fleet|drift|after COMMAND...: COMMAND with one side's product and testbed first on PYTHONPATH:
#   main  = main at 7ac8edf, product and lab (`git archive 7ac8edf xtc lab | tar -x -C /tmp/gc-main`):
#           the stand-in fleet that sleeps a whole period after each message;
#   fleet = main's product with this branch's lab: the fleet on a fixed schedule, as the daemon;
#   drift = main's product with this branch's lab but main's fleet (`cp -r lab /tmp/gc-drift-lab`, then main's
#           lab/xtc_lab/policer_fleet.py over it): the profile that counts the measurements by source, on the
#           old fleet;
#   after = this branch: the fleet on a fixed schedule and the engine freezing its heap after each cycle.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
tree="$(cd "$here/../../.." && pwd)"
case "$1" in
  main) export PYTHONPATH=/tmp/gc-main:/tmp/gc-main/lab ;;
  fleet) export PYTHONPATH=/tmp/gc-main:$tree/lab ;;
  drift) export PYTHONPATH=/tmp/gc-main:/tmp/gc-drift-lab ;;
  after) export PYTHONPATH=$tree:$tree/lab ;;
  *) echo "side.sh: main, fleet, drift or after, not $1" >&2; exit 2 ;;
esac
shift
echo "side $PYTHONPATH" >&2  # in the run's .err: which product it ran
exec "$@"
