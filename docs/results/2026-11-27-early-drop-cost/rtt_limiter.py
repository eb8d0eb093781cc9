"""Figure 7's RTT through an uncapped VR with early drop's limiter present but not binding, vs absent.

Issue 48 item 4 (second half), goal "RTT through a VR whose limiter does not bind unchanged".
One netns VR of the lab (the lab's forwarder, no cap) forwards a paced 64-byte UDP stream
(``OFFERED_PPS``) while a ``ping -i 0.01`` probe (the paper's Figure 7 probe, 100 requests/s)
crosses it both ways.  Phases alternate, ``REPS`` times each: ``absent`` (the vifs' kernel default
root) and ``present`` (the daemon's own limiter, :class:`xtc.host.tclimiter.TcLimiter`, on every
host-side vif at the rate the daemon's rule would give a VR forwarding all of its offered load:
``limit_bytes(1.2 * OFFERED_PPS * ...)``, i.e. above what it is offered: present, not binding).
Per phase: every RTT sample, the probe's loss, the stream's forwarded rate, the limiter's drops
(must be 0: not binding).  Reported: median and p99 over all samples of each condition, and per
rep.  Run as root from the worktree's venv:
``.venv/bin/python docs/results/2026-11-27-early-drop-cost/rtt_limiter.py OUT.json [REPS] [PING_S]``.
The phases and the report are the lab's (xtc_lab.lab.rtt_limiter, shared with the eBPF bucket's
docs/results/2026-11-27-early-drop-bpf/rtt_limiter_bpf.py); the script as it ran held them itself
(git show e58e6cc:docs/results/2026-11-27-early-drop-cost/rtt_limiter.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from xtc.daemon.limiter_policy import DEFAULT_TUNING, limit_bytes
from xtc.host.limiter import LimiterSetting
from xtc.host.tclimiter import TcLimiter
from xtc_lab.lab.rtt_limiter import FRAME_BYTES, OFFERED_PPS, rtt_limiter_runs, rtt_report


def main() -> None:
    out_path = Path(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    ping_s = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    # the daemon's rule for a VR forwarding all it is offered: 1.2 x that (+ the step), far from binding
    limit = limit_bytes(1.2 * 1.1 * OFFERED_PPS, FRAME_BYTES, DEFAULT_TUNING)
    setting = LimiterSetting(limit.rate_bytes_per_s, limit.burst_bytes)
    runs = rtt_limiter_runs(TcLimiter(), setting, limit.rate_pps, reps, ping_s)
    doc = rtt_report("RTT (ping -i 0.01) through an uncapped netns VR: early drop's limiter present but not binding vs absent",
                     {"rate_pps": limit.rate_pps, "rate_bytes_per_s": limit.rate_bytes_per_s, "burst_bytes": limit.burst_bytes},
                     runs, reps, ping_s)
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"], indent=1))


if __name__ == "__main__":
    main()
