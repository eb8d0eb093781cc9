"""What the hot netlink reads cost through xtc's own adapter and through pyroute2's ``IPRoute``.

Run as root::

    PYTHONPATH=.:lab python -m xtc_lab.bench.netlink_cost --pairs 200 --dests 64 --reps 200

Creates a throw-away network namespace ``xtcnl-bench-<random>`` holding ``--pairs`` veth pairs
(made with one ``ip -n <ns> -batch -``), puts an XCo gate (:class:`xtc.host.tcgate.TcGate`, HTB +
TBF, ``--dests`` destination classes) on the first one, and measures, as process CPU time per
call (``time.process_time``: the kernel fills a dump in the reader's context, so its share is
included):

* ``links_xtc``: :meth:`xtc.host.counters.NetlinkCounters.read` (``RTM_GETSTATS``, every
  interface's 64-bit counters into arrays: the daemon's period);
* ``links_pyroute2``: ``IPRoute.get_links()`` and each link's ``IFLA_STATS64`` read out (pyroute2
  has no ``RTM_GETSTATS`` dump; ``get_links`` is how it gives every interface's counters);
* ``classes_xtc``: one ``RTM_GETTCLASS`` dump of the gate's classes on
  :class:`xtc.host.netlink.RouteSocket` decoded by :func:`xtc.host.tccodec.decode_class_counters`;
* ``classes_xtc_table``: :meth:`TcGate.counters` (the same dump decoded by word offsets: the XCo
  agent's poll);
* ``classes_pyroute2``: ``IPRoute.get_classes(index=...)`` and each gate class's ``TCA_STATS2``
  basic and queue counters read out (its API has no parent filter: the TBF leaves' classes come too);
* ``root_xtc`` / ``root_pyroute2``: the root qdisc's counters (:meth:`TcGate.quiet`'s probe; pyroute2:
  ``get_qdiscs(index=...)`` and the root's stats).

Prints one JSON object (medians and 10th/90th percentiles, microseconds).  The namespace is
removed at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

from xtc.host.counters import NetlinkCounters
from xtc.host.netlink import RouteSocket, in_netns
from xtc.host.qdiscs import dump_tc
from xtc.host.tccodec import RTM_GETTCLASS, decode_class_counters
from xtc.host.tcgate import ROOT_HANDLE, TcGate
from xtc_lab.bench.counters_cost import bench_namespace, not_root


def cpu_per_call_us(call: Callable[[], object], reps: int) -> dict[str, float]:
    """Per-call process CPU time: median and 10th/90th percentiles, microseconds."""
    for _ in range(3):
        call()  # warm up
    samples = []
    for _ in range(reps):
        t0 = time.process_time()
        call()
        samples.append((time.process_time() - t0) * 1e6)
    samples.sort()
    return {"median_us": round(statistics.median(samples), 1), "p10_us": round(samples[len(samples) // 10], 1),
            "p90_us": round(samples[(len(samples) * 9) // 10], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200, help="veth pairs (interfaces = 2 x pairs + lo)")
    parser.add_argument("--dests", type=int, default=64, help="destination classes on the gate")
    parser.add_argument("--reps", type=int, default=200, help="calls measured per method")
    args = parser.parse_args(argv)
    if not_root():
        return 2
    from pyroute2 import IPRoute  # the comparison only: xtc's hot paths do not load it

    with bench_namespace("xtcnl-bench", args.pairs, up=True) as (name, _):
        gate = TcGate("xb0a", link_bps=1_000_000_000, netns=name)
        gate.install()
        for d in range(args.dests):
            gate.add_dest(d)
        dests = list(range(args.dests))
        nl = in_netns(name, RouteSocket)
        ipr = IPRoute(netns=name)
        ifindex = gate.ifindex
        counters = NetlinkCounters(name)
        n_links = len(counters.read())

        def links_pyroute2() -> int:
            return sum(link.get_attr("IFLA_STATS64")["rx_packets"] for link in ipr.get_links())

        def classes_xtc() -> int:
            return len(decode_class_counters(dump_tc(nl, RTM_GETTCLASS, ifindex, ROOT_HANDLE), ROOT_HANDLE))

        def classes_pyroute2() -> int:
            out = {}
            for c in ipr.get_classes(index=ifindex):  # no parent filter in its API: every class comes
                if c["handle"] & 0xFFFF0000 != ROOT_HANDLE:
                    continue
                st = c.get_attr("TCA_STATS2")
                basic, queue = st.get_attr("TCA_STATS_BASIC"), st.get_attr("TCA_STATS_QUEUE")
                out[c["handle"]] = (basic["bytes"], basic["packets"], queue["backlog"], queue["qlen"])
            return len(out)

        def root_pyroute2() -> int:
            root = next(q for q in ipr.get_qdiscs(index=ifindex) if q["parent"] == 0xFFFFFFFF)
            st = root.get_attr("TCA_STATS2")
            return st.get_attr("TCA_STATS_BASIC")["bytes"] + st.get_attr("TCA_STATS_QUEUE")["qlen"]

        got = (classes_xtc(), classes_pyroute2())
        assert got == (args.dests + 1, args.dests + 1), got  # the same classes both ways
        result = {
            "interfaces": n_links, "classes": args.dests + 1, "reps": args.reps,
            "links_xtc": cpu_per_call_us(counters.read, args.reps),
            "links_pyroute2": cpu_per_call_us(links_pyroute2, args.reps),
            "classes_xtc": cpu_per_call_us(classes_xtc, args.reps),
            "classes_xtc_table": cpu_per_call_us(lambda: gate.counters(dests), args.reps),
            "classes_pyroute2": cpu_per_call_us(classes_pyroute2, args.reps),
            "root_xtc": cpu_per_call_us(gate.quiet, args.reps),
            "root_pyroute2": cpu_per_call_us(root_pyroute2, args.reps),
            "kernel": os.uname().release, "python": sys.version.split()[0],
        }
        import pyroute2

        result["pyroute2"] = pyroute2.__version__
        gate.restore()
        gate.close()
        for c in (counters, nl, ipr):
            c.close()
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
