"""Figure 7's RTT through an uncapped VR with early drop's limiter present but not binding, vs absent.

The eBPF bucket's version of docs/results/2026-11-27-early-drop-cost/rtt_limiter.py (the TBF's).  Issue 48 item 4 (second half), goal "RTT through a VR whose limiter does not bind unchanged".
One netns VR of the lab (the lab's forwarder, no cap) forwards a paced 64-byte UDP stream
(``OFFERED_PPS``) while a ``ping -i 0.01`` probe (the paper's Figure 7 probe, 100 requests/s)
crosses it both ways.  Phases alternate, ``REPS`` times each: ``absent`` (the vifs' kernel default
root) and ``present`` (the daemon's default limiter, the eBPF bucket
:class:`xtc.host.bpflimiter.BpfLimiter`, on every host-side vif at the rate the daemon's rule would
give a VR forwarding all of its offered load: (1 + margin)(1 + step) = 1.071 x OFFERED_PPS with
0.3 s of credit, i.e. above what it is offered: present, not binding).
Per phase: every RTT sample, the probe's loss, the stream's forwarded rate, the limiter's drops
(must be 0: not binding).  Reported: median and p99 over all samples of each condition, and per
rep.  Run as root from the worktree's venv:
``.venv/bin/python docs/results/2026-11-27-early-drop-bpf/rtt_limiter_bpf.py OUT.json [REPS] [PING_S]``.
The phases and the report are the lab's (xtc_lab.lab.rtt_limiter); the script as it ran held them itself,
copied from the TBF's (git show a948e5d:docs/results/2026-11-27-early-drop-bpf/rtt_limiter_bpf.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from xtc.daemon.limiter_policy import BPF_TUNING, limit_bytes
from xtc.host.bpflimiter import BpfLimiter
from xtc.host.limiter import LimiterSetting
from xtc_lab.lab.rtt_limiter import FRAME_BYTES, OFFERED_PPS, rtt_limiter_runs, rtt_report


def main() -> None:
    out_path = Path(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    ping_s = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    # the daemon's rule for a VR forwarding all it is offered: 1.05 x that (+ the step): not binding
    t = BPF_TUNING
    limit = limit_bytes((1 + t.margin_fraction) * (1 + t.step_fraction) * OFFERED_PPS, FRAME_BYTES, t)
    setting = LimiterSetting(limit.rate_bytes_per_s, limit.burst_bytes, rate_pps=limit.rate_pps, burst_s=t.burst_s)
    runs = rtt_limiter_runs(BpfLimiter(), setting, limit.rate_pps, reps, ping_s)
    doc = rtt_report("RTT (ping -i 0.01) through an uncapped netns VR: early drop's eBPF limiter present but not binding vs absent",
                     {"rate_pps": limit.rate_pps, "credit_s": BPF_TUNING.burst_s, "limiter": "bpf"}, runs, reps, ping_s)
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["summary"], indent=1))


if __name__ == "__main__":
    main()
