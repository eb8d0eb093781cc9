"""Does the guest hog run, and what does it cost the forwarding?  On a lab made by
``xtc lab up --kind qemu --name NAME``: the vCPU's CPU and the forwarded rate (a udpsend stream),
uncapped and at a cap, without and with the hog.  Usage: hogcheck.py NAME OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time

from xtc_lab.lab.harness import measure_with_generator, set_cap
from xtc_lab.lab.lifecycle import load_lab
from xtc_lab.lab.netlab import NetLab
from xtc_lab.lab.qemu import GuestHog, vcpu_time_ns
from xtc_lab.lab.traffic import start_udp_stream


def window(lab, vr, dom, seconds=6.0):
    ns0, t0 = vcpu_time_ns(dom), time.monotonic()
    fwd, _handed, sent = measure_with_generator(lab, vr, seconds)
    return {"vcpu_percent": round(100 * (vcpu_time_ns(dom) - ns0) / 1e9 / (time.monotonic() - t0), 1),
            "forwarded_pps": round(fwd), "generator_sent_pps": round(sent), "load_avg_1m": os.getloadavg()[0]}


def main(name: str, out: str) -> int:
    record, vrs, _chain = load_lab(name)
    lab = NetLab(prefix=name, uri=record["uri"])  # a view on the persistent lab: never torn down here
    lab.vrs = list(vrs)
    vr = lab.vrs[0]
    dom = lab.domain(vr)
    rows = []
    with start_udp_stream(lab, vr, 25000, duration_s=200):
        time.sleep(2)
        for cap in (None, 10.0, 5.0):
            set_cap(lab, vr, cap)
            time.sleep(2)
            hog = GuestHog(dom)
            rows.append({"cap_percent": cap, "hog": False, **window(lab, vr, dom)})
            hog.start()
            print("guest:", hog.answer, flush=True)
            time.sleep(2)
            rows.append({"cap_percent": cap, "hog": True, "guest_answer": hog.answer, **window(lab, vr, dom)})
            hog.stop()
            time.sleep(2)
            print(rows[-2:], flush=True)
        set_cap(lab, vr, None)
    with open(out, "w") as f:
        json.dump({"lab": name, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
