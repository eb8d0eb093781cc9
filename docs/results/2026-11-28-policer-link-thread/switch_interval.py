"""The profile tool's run with the interpreter's switch interval set first (``sys.setswitchinterval``): does the
hand-over of the interpreter lock between the link thread and the worker cost the engine?  Usage, from the
repository's top: python docs/results/2026-11-28-policer-link-thread/switch_interval.py SECONDS <profile args>"""

import sys

sys.setswitchinterval(float(sys.argv[1]))

from xtc_lab.policer_profile import main

main(sys.argv[2:])
