"""Figure 16 (and 5): 13 senders, a mix of TCP and UDP, each to its own receiver across one shared
switch-to-switch link (Figure 1(b): 13 hosts at 1 Gb/s on each switch, the switches joined at 10 Gb/s)."""

from __future__ import annotations

from typing import Any

from xtc_lab.lab.harness import markdown_table
from xtc_lab.xco.experiments import mix_figure
from xtc_lab.xco.experiments.flows import failed_flows_md, flow_errors, ip_reassembly, port_delta, run_flows

NAME = "fig16"
TITLE = "13 TCP/UDP senders over a shared uplink"
PAPER = "Figures 5 and 16"
TOPOLOGY = "fig1b"
#: The lab's scale for this topology: 13 senders at 0.1 would push 1.3 Gb/s through three bridges,
#: more than the 2 cores forward; at 0.02 the hosts' links are 20 Mb/s and the shared link 200 Mb/s.
SCALE = 0.02
SENDERS = tuple(f"s{k}" for k in range(1, 14))
RECEIVER_OF = {f"s{k}": f"r{k}" for k in range(1, 14)}
#: Only the senders run an agent (with XCo): the receivers send nothing but TCP acknowledgements,
#: which pass unheld (``pass_tcp_control``: their agents got no directive in the runs with all 26
#: agents), and on 2 cores 13 more agents took the CPU from the senders.
AGENT_HOSTS = SENDERS
#: The congested port: switch sw1's egress into the link to sw2.
BOTTLENECK = "sw1>sw2"
#: As in Figure 15: netperf's UDP_STREAM sends 64 KB messages (45 IP fragments each).
UDP_MESSAGE_BYTES = 65_000
PAPER_NOTE = ("at 10 Gb/s shared by 13 senders of 1 Gb/s, without XCo the received throughput falls "
              "steeply as UDP senders replace TCP ones (congestion at the first switch) and the "
              "per-flow TCP throughput collapses; with timeslices (up to 10 senders at a time) a high "
              "aggregate at every mix, TCP senders keeping their share; rate limiting (10/13 Gb/s "
              "each) better than none and slightly worse than timeslices")


def mix(n_udp: int) -> list[tuple[str, str]]:
    """The senders with the last ``n_udp`` of them on UDP."""
    return [(h, "udp" if k >= len(SENDERS) - n_udp else "tcp") for k, h in enumerate(SENDERS)]


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    tb = ctx.tb
    dur = 3 if ctx.quick else 10
    rate, nic = tb.rate_bps(BOTTLENECK), tb.rate_bps("s1>sw1")
    points = (0, 7) if ctx.quick else (0, 2, 4, 7, 10, 13)
    rows = []
    for n_udp in points:
        ctx.say(f"  {len(SENDERS) - n_udp} TCP + {n_udp} UDP senders, {dur} s")
        before = tb.port_stats()
        reasm0 = {r: ip_reassembly(tb, r) for r in RECEIVER_OF.values()}
        flows = run_flows(tb, mix(n_udp), RECEIVER_OF, dur, nic, UDP_MESSAGE_BYTES)
        after = tb.port_stats()
        reasm1 = {r: ip_reassembly(tb, r) for r in RECEIVER_OF.values()}
        port = port_delta(before, after, BOTTLENECK, dur)
        receivers = [port_delta(before, after, f"sw2>{r}", dur) for r in RECEIVER_OF.values()]
        fails = sum(reasm1[r]["ReasmFails"] - reasm0[r]["ReasmFails"] for r in reasm0)
        tcp = [f["goodput_bps"] for f in flows if f["proto"] == "tcp"]
        total = sum(f["goodput_bps"] for f in flows)
        rows.append({"n_udp": n_udp, "n_tcp": len(SENDERS) - n_udp, "goodput_bps": total,
                     "goodput_fraction": total / rate, "tcp_per_flow_bps": sum(tcp) / len(tcp) if tcp else None,
                     "switch_port": port, "receiver_ports_drops": sum(p["drops"] for p in receivers),
                     "receivers_ip_reassembly_fails": fails, "flows": flows,
                     "errors": flow_errors(flows)})
    result = {"bottleneck": BOTTLENECK, "bottleneck_bps": rate, "nic_bps": nic, "udp_rate_bps": nic,
              "udp_message_bytes": UDP_MESSAGE_BYTES, "seconds_per_point": dur, "points": rows,
              "paper": PAPER_NOTE}
    fig = mix_figure(ctx, rows, rate, PAPER, len(SENDERS), "shared link use")
    table = markdown_table(
        ["TCP+UDP", "goodput Mb/s", "of the shared link", "per TCP flow Mb/s", "link use", "drops at the link",
         "loss at the link", "drops at receiver ports", "reassembly fails"],
        [(f"{r['n_tcp']}+{r['n_udp']}", f"{r['goodput_bps'] / 1e6:.1f}", f"{100 * r['goodput_fraction']:.1f}%",
          "-" if r["tcp_per_flow_bps"] is None else f"{r['tcp_per_flow_bps'] / 1e6:.2f}",
          f"{100 * r['switch_port']['utilisation']:.1f}%", r["switch_port"]["drops"],
          f"{r['switch_port']['loss_percent']:.2f}%", r["receiver_ports_drops"], r["receivers_ip_reassembly_fails"])
         for r in rows])
    md = (f"Senders s1..s13, each on its own host on sw1, send to r1..r13 on sw2 (s_k to r_k); every flow "
          f"crosses `{BOTTLENECK}` at {rate / 1e6:g} Mb/s (TBF, {tb.record['port_buffer_bytes']} bytes); each "
          f"host's link is {nic / 1e6:g} Mb/s, so the 13 offer {13 * nic / rate:.2f} times the shared link. "
          f"UDP senders send at their NIC rate in {UDP_MESSAGE_BYTES}-byte datagrams (IP fragments, as "
          f"netperf's 64 KB messages); TCP is one iperf3 connection each; {dur} s per point. Goodput is what "
          f"the receivers got (TCP: iperf3's receiver; UDP: a counting sink); drops are the TBFs' (netlink "
          f"qdisc stats); reassembly fails are the receiving VMs' (`/proc/net/snmp`).\n\n{table}"
          + failed_flows_md(rows)
          + f"\n\nThe paper: {PAPER_NOTE}.")
    return result, fig, md
