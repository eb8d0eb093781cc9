"""``xtc xco agent -c FILE`` with the gate's open burst set, as the lab needs it.

The agent builds its :class:`xtc.host.tcgate.TcGate` with the default open burst, "1 ms at the link
rate, at least 64 KiB": at the lab's scale 0.1 (a 100 Mb/s NIC) 64 KiB is 5.2 ms of the link, and
every slice would begin with that burst on top of what the previous sender left in the switch
queue (measured: 9.8 % switch loss with 5 TCP senders and 10 ms slices).  The agent's file has no
key for it, so this wrapper runs the same :func:`xtc.xco.agent_service.run_agent` with a gate whose
``open_burst_bytes`` is given here.

Usage: ``python -m xtc_lab.xco.experiments.agent_launch -c agent.toml --open-burst-bytes N``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="xco-lab-agent")
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--open-burst-bytes", type=int, required=True)
    args = ap.parse_args(argv)
    from xtc.host import tcgate

    base = tcgate.TcGate
    burst = args.open_burst_bytes

    class LabGate(base):  # type: ignore[misc,valid-type]
        def __init__(self, *a: Any, **kw: Any) -> None:
            kw.setdefault("open_burst_bytes", burst)
            super().__init__(*a, **kw)

    tcgate.TcGate = LabGate  # type: ignore[misc]
    from xtc.xco.agent_service import run_agent

    return run_agent(args.config)


if __name__ == "__main__":
    sys.exit(main())
