#!/bin/bash
# side.sh before|after COMMAND...: COMMAND with the product of that side first on PYTHONPATH and this worktree's lab
# after it: before = main at the branch point 638ae02 (`git archive 638ae02 xtc | tar -x -C /tmp/cycle-before`),
# after = this branch's worktree.  (xtc_lab.alternate's own sides run the installed product on the after side,
# which is main's editable install here: this worktree has no environment of its own.)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
tree="$(cd "$here/../../.." && pwd)"
case "$1" in
  before) export PYTHONPATH=/tmp/cycle-before:$tree/lab ;;
  after) export PYTHONPATH=$tree:$tree/lab ;;
  *) echo "side.sh: before or after, not $1" >&2; exit 2 ;;
esac
shift
echo "side $PYTHONPATH" >&2  # in the run's .err: which product it ran
exec "$@"
