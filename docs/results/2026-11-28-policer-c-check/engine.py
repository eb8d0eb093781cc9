"""The engine as it polices, its datagrams checked by IMPL: ``python`` (the product's xtc.daemon.datagram.decode)
or ``c`` (ccheck.decode, built by build.sh, put in its place in this process only: a measurement, not the
product); then ``python -m xtc_lab.policer_profile`` with the other arguments.  Prints the profile tool's JSON
with ``check`` added.  Usage, from the repository's top:

    python docs/results/2026-11-28-policer-c-check/engine.py c --routers 1000 --window 10 --jitter 0.05 \
        --sample-link --sample-udp 127.0.0.1 --no-profile
"""

import sys
from pathlib import Path

from xtc.daemon import datagram

impl = sys.argv[1]
if impl == "c":
    sys.path.insert(0, str(Path(__file__).parent))
    import ccheck

    ccheck.set_error(datagram.DatagramError)
    datagram.decode = ccheck.decode
elif impl != "python":
    sys.exit(f"engine.py: IMPL is python or c, not {impl!r}")

from xtc_lab.policer_profile import main

sys.exit(main(sys.argv[2:]))
