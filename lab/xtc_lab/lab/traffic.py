"""Traffic for the host lab: a steady UDP stream from a VR's generator to its receiver.

Two tools, both run inside the lab's namespaces:

* ``iperf3`` (``-u -l <payload>``): a one-shot server in the receiver namespace, the client
  in the generator namespace.  iperf3's ``-b`` is the application bit rate, so R packets/s
  of P-byte payloads is ``-b R*P*8``.  Its control channel is TCP, so the VR must forward
  both directions.  It makes one system call per packet: on a busy 2-core host it falls
  short of 100 kp/s as soon as the VR under test takes a core.
* ``udpsend`` (``udpsend.c``, built at run time): paced with one ``sendmmsg`` per
  millisecond, several times cheaper per packet, so the offered rate stays steady.  It
  needs no receiver process: the receiver's kernel drops the datagrams (its ICMP
  port-unreachable replies are rate-limited to a few per second).  This is the default.

Either way the lab measures the VR at its host-side interface counters, not at the tools.

TCP streams (:func:`start_tcp_stream`) are iperf3 too: a one-shot server in the receiver
namespace, a client with ``-P n`` parallel flows (connections) in the generator namespace.  The
client's JSON report is parsed by the pure :func:`parse_iperf3_tcp`.  Two settings make TCP's
packets look like a router's:

* **One segment per packet.**  Linux hands veth up to 64 KB super-frames (TSO/GSO); the
  VR's forwarder passes them whole, and the host counts one packet per super-frame: on the
  lab's 2-core host one flow then moved 6.7 Gbit/s as only ~16 k packets/s.  The stream sets
  ``gso_max_segs 1`` on the generator's and receiver's ``eth0``, so every segment is its own
  packet on the wire (and in ``/proc/net/dev``).
* **Frame size.**  The paper's TCP packets are 524 bytes; ``frame_bytes=524`` asks iperf3
  for an MSS (``-M``) of 524 - 54 = 470 bytes.  Linux puts 12 bytes of timestamp option in
  every segment, so a full data segment carries 458 bytes of payload and is 524 bytes on the
  wire (Ethernet 14 + IPv4 20 + TCP 20 + options 12 + payload 458).  ACKs are 66 bytes.

A VR that forwards TCP forwards both directions: its forwarded rate (host-side RX of both
vifs) is data segments plus ACKs (about one ACK per two segments with delayed ACKs).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xtc_lab.lab.build import build_udpsend
from xtc_lab.lab.netlab import VR, LabError, NetLab
from xtc_lab.procs import stop_processes

DEFAULT_PORT = 5201
#: Ethernet + IPv4 + TCP headers, bytes (no options); the MSS excludes them.
ETH_IPV4_TCP_HEADER_BYTES = 14 + 20 + 20
#: Ethernet + IPv4 + UDP headers, bytes.
ETH_IPV4_UDP_HEADER_BYTES = 14 + 20 + 8
#: The TCP timestamp option Linux puts in every segment (10 bytes padded to 12), bytes.
TCP_TIMESTAMP_OPTION_BYTES = 12
#: The paper's packets in the TCP/UDP coexistence and fairness tests (section 7.3), bytes on the wire.
PAPER_TCP_FRAME_BYTES = 524
MAX_TCP_FLOWS = 128  # iperf3's -P limit
TCP_MSS_RANGE = (88, 9000)  # Linux's smallest MSS; a jumbo frame


def _check_stream(rate_pps: float, duration_s: float, payload_bytes: int) -> None:
    if not rate_pps > 0:
        raise LabError(f"rate_pps must be positive, got {rate_pps!r}")
    if not duration_s >= 1:
        raise LabError(f"duration_s must be at least 1 s, got {duration_s!r}")
    if not 16 <= payload_bytes <= 1472:
        raise LabError(f"payload_bytes {payload_bytes} out of range 16..1472")


def udpsend_argv(program: str, server: str, rate_pps: float, duration_s: float, payload_bytes: int = 64,
                 port: int = DEFAULT_PORT) -> list[str]:
    """Command line of the paced sender (same parameters as :func:`iperf3_udp_argv`)."""
    _check_stream(rate_pps, duration_s, payload_bytes)
    return [program, "-r", f"{rate_pps:.3f}", "-t", f"{duration_s:.3f}", "-l", str(payload_bytes),
            "-p", str(port), server]


def iperf3_udp_argv(server: str, rate_pps: float, duration_s: float, payload_bytes: int = 64,
                    port: int = DEFAULT_PORT) -> list[str]:
    """Client command line for a UDP stream of ``rate_pps`` packets/s for ``duration_s`` s.

    Parameters
    ----------
    server
        Receiver address (in 198.18.0.0/15).
    rate_pps
        Offered packet rate, packets/s (> 0).
    duration_s
        Length of the stream, s (>= 1; iperf3 counts whole seconds).
    payload_bytes
        UDP payload per packet, bytes (16..1472); 64 gives the paper's small frames.
    """
    _check_stream(rate_pps, duration_s, payload_bytes)
    bits_per_s = int(round(rate_pps * payload_bytes * 8))
    return ["iperf3", "-c", server, "-p", str(port), "-u", "-l", str(payload_bytes),
            "-b", str(bits_per_s), "-t", str(int(round(duration_s))), "--json"]


def tcp_listening(pid: int, port: int, proc: Path = Path("/proc")) -> bool:
    """True if a TCP socket in ``pid``'s network namespace listens on ``port``."""
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / str(pid) / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 3 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


@dataclass
class UdpResult:
    """What the sending tool reported for one stream.

    ``lost_packets`` is iperf3's count at its receiver (None for udpsend, which has none);
    ``raw`` is the tool's JSON report.
    """

    sent_packets: int
    lost_packets: int | None
    seconds: float
    raw: dict[str, Any]

    @property
    def sent_pps(self) -> float:
        """Packets/s the generator sent."""
        return self.sent_packets / self.seconds if self.seconds > 0 else 0.0


class _Stream:
    """A running traffic client (and its server, if any) through one VR; stopped on exit."""

    label = "traffic"

    def __init__(self, vr: VR, server: subprocess.Popen[bytes] | None, client: subprocess.Popen[bytes],
                 duration_s: float) -> None:
        self.vr, self.server, self.client = vr, server, client
        self.duration_s = duration_s

    def running(self) -> bool:
        return self.client.poll() is None

    def _report(self, timeout_s: float | None) -> dict[str, Any]:
        """Wait for the client (default: duration + 15 s) and return its JSON report."""
        timeout_s = self.duration_s + 15 if timeout_s is None else timeout_s
        try:
            out, err = self.client.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            self.stop()
            raise LabError(f"{self.label} through {self.vr.name} did not finish within {timeout_s:.0f} s") from e
        try:
            return json.loads(out.decode(errors="replace"))
        except ValueError as e:
            raise LabError(f"{self.label} through {self.vr.name} printed no report: {err.decode()[-300:]}") from e

    def stop(self) -> None:
        """Stop client and server now (idempotent)."""
        stop_processes((self.client, self.server), 3)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_streams(*starts: Callable[[], _Stream]) -> list[Any]:
    """Start streams in order, each by calling one of ``starts``, and return them.

    If one fails to start, the ones already started are stopped and the error is raised.
    """
    started: list[_Stream] = []
    try:
        for start in starts:
            started.append(start())
    except Exception:
        for s in started:
            s.stop()
        raise
    return started


class UdpStream(_Stream):
    """A running UDP stream (udpsend or iperf3) through one VR; use :meth:`wait` for its result.

    Start it with :func:`start_udp_stream`.
    """

    def __init__(self, lab: NetLab, vr: VR, server: subprocess.Popen[bytes] | None,
                 client: subprocess.Popen[bytes], duration_s: float, tool: str) -> None:
        super().__init__(vr, server, client, duration_s)
        self.lab = lab
        self.tool = self.label = tool

    def wait(self, timeout_s: float | None = None) -> UdpResult:
        """Wait for the client to finish; return its report.

        Raises
        ------
        LabError
            The tool failed or did not finish within ``timeout_s`` (default: duration + 15 s).
        """
        report = self._report(timeout_s)
        if "error" in report:
            raise LabError(f"{self.tool} through {self.vr.name}: {report['error']}")
        if self.tool == "udpsend":
            return UdpResult(sent_packets=int(report["sent_packets"]), lost_packets=None,
                             seconds=float(report["seconds"]), raw=report)
        s = report.get("end", {}).get("sum", {})
        return UdpResult(sent_packets=int(s.get("packets", 0)), lost_packets=int(s.get("lost_packets", 0)),
                         seconds=float(s.get("seconds", 0.0)), raw=report)


def _start_iperf3_server(lab: NetLab, vr: VR, port: int, listen_timeout_s: float) -> subprocess.Popen[bytes]:
    """A one-shot iperf3 server in ``vr``'s receiver namespace, returned once it listens on ``port``."""
    server = lab.spawn_in(vr.tr_ns, ["iperf3", "-s", "-1", "-B", vr.tr_addr, "-p", str(port)])
    deadline = time.monotonic() + listen_timeout_s
    while not tcp_listening(server.pid, port):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            server.wait()
            raise LabError(f"iperf3 server in {vr.tr_ns} did not start listening on port {port}")
        time.sleep(0.02)
    return server


def start_udp_stream(lab: NetLab, vr: VR, rate_pps: float, duration_s: float, payload_bytes: int = 64,
                     port: int = DEFAULT_PORT, tool: str = "udpsend", listen_timeout_s: float = 5.0) -> UdpStream:
    """Start a UDP stream of ``rate_pps`` packets/s from ``vr``'s generator to its receiver.

    Parameters
    ----------
    rate_pps
        Offered packet rate, packets/s.
    duration_s
        Length of the stream, s (iperf3 rounds it to whole seconds).
    payload_bytes
        UDP payload, bytes (64 + 42 bytes of headers = the paper's small frames).
    tool
        ``"udpsend"`` (default, see the module docstring) or ``"iperf3"``.

    Returns once the sender is running; the stream lasts ``duration_s`` seconds.
    """
    if tool == "udpsend":
        argv = udpsend_argv(str(build_udpsend()), vr.tr_addr, rate_pps, duration_s, payload_bytes, port)
        client = lab.spawn_in(vr.tg_ns, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return UdpStream(lab, vr, None, client, duration_s, tool)
    if tool != "iperf3":
        raise LabError(f"unknown traffic tool {tool!r}: want 'udpsend' or 'iperf3'")
    argv = iperf3_udp_argv(vr.tr_addr, rate_pps, duration_s, payload_bytes, port)
    server = _start_iperf3_server(lab, vr, port, listen_timeout_s)
    client = lab.spawn_in(vr.tg_ns, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return UdpStream(lab, vr, server, client, duration_s, tool)


# ------------------------------------------------------------------------------------ TCP
def tcp_mss_for_frame(frame_bytes: int) -> int:
    """MSS (bytes, for iperf3 ``-M``) that makes full data segments ``frame_bytes`` on the wire.

    Linux subtracts the 12-byte timestamp option from the MSS, so a segment carries
    ``frame_bytes - 66`` bytes of payload and is ``frame_bytes`` long with its Ethernet, IPv4
    and TCP headers (524 -> MSS 470, payload 458).
    """
    mss = frame_bytes - ETH_IPV4_TCP_HEADER_BYTES
    if not TCP_MSS_RANGE[0] <= mss <= TCP_MSS_RANGE[1]:
        raise LabError(f"frame_bytes {frame_bytes} gives MSS {mss}, out of range "
                       f"{TCP_MSS_RANGE[0]}..{TCP_MSS_RANGE[1]} (frames of "
                       f"{TCP_MSS_RANGE[0] + ETH_IPV4_TCP_HEADER_BYTES}.."
                       f"{TCP_MSS_RANGE[1] + ETH_IPV4_TCP_HEADER_BYTES} bytes)")
    return mss


def udp_payload_for_frame(frame_bytes: int) -> int:
    """UDP payload (bytes) of a ``frame_bytes`` Ethernet frame (524 -> 482)."""
    payload = frame_bytes - ETH_IPV4_UDP_HEADER_BYTES
    if not 16 <= payload <= 1472:
        raise LabError(f"frame_bytes {frame_bytes} gives a UDP payload of {payload}, out of range 16..1472")
    return payload


def iperf3_tcp_argv(server: str, duration_s: float, flows: int = 1, mss_bytes: int | None = None,
                    port: int = DEFAULT_PORT, congestion: str | None = None) -> list[str]:
    """Client command line for ``flows`` parallel TCP connections to ``server`` for ``duration_s`` s.

    Parameters
    ----------
    server
        Receiver address (in 198.18.0.0/15).
    duration_s
        Length of the stream, s (>= 1; iperf3 counts whole seconds).
    flows
        Parallel connections (iperf3 ``-P``), 1..128.
    mss_bytes
        TCP maximum segment size (iperf3 ``-M``), bytes, or None for the path's (1460 on the lab).
    port
        The server's port.
    congestion
        The connections' congestion control (iperf3 ``-C``: ``cubic``, ``bbr``, ``reno``...), or
        None for the sender's namespace default (``net.ipv4.tcp_congestion_control``).
    """
    if congestion is not None and not re.fullmatch(r"[a-z0-9_]{1,15}", congestion):
        raise LabError(f"congestion must be a kernel congestion control's name, got {congestion!r}")
    if not duration_s >= 1:
        raise LabError(f"duration_s must be at least 1 s, got {duration_s!r}")
    if isinstance(flows, bool) or not isinstance(flows, int) or not 1 <= flows <= MAX_TCP_FLOWS:
        raise LabError(f"flows must be an integer in 1..{MAX_TCP_FLOWS}, got {flows!r}")
    argv = ["iperf3", "-c", server, "-p", str(port), "-t", str(round(duration_s)), "-P", str(flows),
            "-i", "1", "--json"]
    if congestion is not None:
        argv += ["-C", congestion]
    if mss_bytes is not None:
        if isinstance(mss_bytes, bool) or not isinstance(mss_bytes, int) or \
                not TCP_MSS_RANGE[0] <= mss_bytes <= TCP_MSS_RANGE[1]:
            raise LabError(f"mss_bytes must be an integer in {TCP_MSS_RANGE[0]}..{TCP_MSS_RANGE[1]}, got {mss_bytes!r}")
        argv += ["-M", str(mss_bytes)]
    return argv


@dataclass
class TcpResult:
    """iperf3's report of one TCP stream (``flows`` parallel connections).

    Bytes are TCP payload (goodput); ``received_*`` is what the receiver got.

    Attributes
    ----------
    flows
        Number of connections.
    seconds
        Length of the test, s.
    sent_bytes, received_bytes
        Payload sent by the client / received by the server, all flows, bytes.
    retransmits
        Segments the sender retransmitted (None if iperf3 did not report it).
    flow_received_bytes
        Payload received per flow, bytes, in iperf3's stream order.
    mss_bytes
        The MSS iperf3 set (None if it used the default).
    interval_bits_per_s
        (end of interval in s, bits/s summed over the flows) of iperf3's 1 s intervals.
    raw
        The whole JSON report.
    """

    flows: int
    seconds: float
    sent_bytes: int
    received_bytes: int
    retransmits: int | None
    flow_received_bytes: list[int]
    mss_bytes: int | None
    interval_bits_per_s: list[tuple[float, float]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def received_bits_per_s(self) -> float:
        """Goodput at the receiver, bits/s (all flows)."""
        return 8.0 * self.received_bytes / self.seconds if self.seconds > 0 else 0.0

    def segments_per_s(self, payload_bytes: int) -> float:
        """Data segments/s the receiver got, if every segment carried ``payload_bytes`` (a lower bound of packets/s)."""
        if payload_bytes <= 0:
            raise LabError(f"payload_bytes must be positive, got {payload_bytes!r}")
        return self.received_bytes / payload_bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def flow_min_max_ratio(self) -> float | None:
        """Lowest over highest per-flow received bytes (1 = equal shares; None without data)."""
        if not self.flow_received_bytes or max(self.flow_received_bytes) <= 0:
            return None
        return min(self.flow_received_bytes) / max(self.flow_received_bytes)


def _need(doc: Mapping[str, Any], *keys: str) -> Any:
    cur: Any = doc
    for i, k in enumerate(keys):
        if not isinstance(cur, Mapping) or k not in cur:
            raise LabError(f"iperf3 TCP report has no {'.'.join(keys[:i + 1])}")
        cur = cur[k]
    return cur


def _number(doc: Mapping[str, Any], *keys: str) -> float:
    v = _need(doc, *keys)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or v < 0:
        raise LabError(f"iperf3 TCP report: {'.'.join(keys)} is {v!r}, not a non-negative number")
    return float(v)


def parse_iperf3_tcp(report: Mapping[str, Any]) -> TcpResult:
    """Parse the client's ``iperf3 --json`` report of a TCP test (pure).

    Raises
    ------
    LabError
        The report says ``error``, is a UDP report, or lacks the fields of a finished TCP test.
    """
    if not isinstance(report, Mapping):
        raise LabError(f"iperf3 report is a {type(report).__name__}, not a JSON object")
    if report.get("error"):
        raise LabError(f"iperf3: {report['error']}")
    proto = _need(report, "start", "test_start", "protocol")
    if proto != "TCP":
        raise LabError(f"iperf3 report is of a {proto} test, not TCP")
    streams = _need(report, "end", "streams")
    if not isinstance(streams, list) or not streams:
        raise LabError("iperf3 TCP report has no streams in end.streams")
    flow_bytes = [int(_number(s, "receiver", "bytes")) for s in streams]
    seconds = _number(report, "end", "sum_received", "seconds")
    if seconds <= 0:
        seconds = _number(report, "end", "sum_sent", "seconds")
    sum_sent = report["end"].get("sum_sent")
    retrans = sum_sent.get("retransmits") if isinstance(sum_sent, Mapping) else None
    mss = report["start"].get("tcp_mss")
    intervals = []
    for iv in report.get("intervals") or []:
        try:
            intervals.append((float(iv["sum"]["end"]), float(iv["sum"]["bits_per_second"])))
        except (KeyError, TypeError, ValueError):
            continue
    return TcpResult(flows=len(streams), seconds=seconds,
                     sent_bytes=int(_number(report, "end", "sum_sent", "bytes")),
                     received_bytes=int(_number(report, "end", "sum_received", "bytes")),
                     retransmits=None if retrans is None else int(retrans),
                     flow_received_bytes=flow_bytes,
                     mss_bytes=int(mss) if isinstance(mss, int) and not isinstance(mss, bool) and mss > 0 else None,
                     interval_bits_per_s=intervals, raw=dict(report))


def one_segment_per_packet(lab: NetLab, vr: VR) -> None:
    """Make every TCP segment its own packet between ``vr``'s generator and receiver (``gso_max_segs 1``).

    See the module docstring: without it the host counts 64 KB super-frames as one packet.
    """
    from pyroute2 import NetlinkError, NetNS

    for ns in (vr.tg_ns, vr.tr_ns):
        if not ns.startswith(lab.prefix + "-"):
            raise LabError(f"namespace {ns!r} does not belong to lab {lab.prefix}")
        try:
            with NetNS(ns) as nsr:
                idx = nsr.link_lookup(ifname="eth0")
                if not idx:
                    raise LabError(f"no eth0 in {ns}")
                nsr.link("set", index=idx[0], gso_max_segs=1)
        except (NetlinkError, OSError) as e:
            raise LabError(f"cannot set gso_max_segs on eth0 in {ns}: {e}") from e


class TcpStream(_Stream):
    """A running iperf3 TCP stream (one or more flows) through one VR; :meth:`wait` for its result.

    Start it with :func:`start_tcp_stream`.
    """

    label = "iperf3 TCP"

    def __init__(self, vr: VR, server: subprocess.Popen[bytes], client: subprocess.Popen[bytes],
                 duration_s: float, flows: int) -> None:
        super().__init__(vr, server, client, duration_s)
        self.flows = flows

    def wait(self, timeout_s: float | None = None) -> TcpResult:
        """Wait for the client to finish; return its parsed report.

        Raises
        ------
        LabError
            iperf3 failed, printed no report, or did not finish within ``timeout_s``
            (default: duration + 15 s).
        """
        report = self._report(timeout_s)
        try:
            return parse_iperf3_tcp(report)
        except LabError as e:
            raise LabError(f"iperf3 TCP through {self.vr.name}: {e}") from e


def start_tcp_stream(lab: NetLab, vr: VR, duration_s: float, flows: int = 1,
                     frame_bytes: int | None = PAPER_TCP_FRAME_BYTES, port: int = DEFAULT_PORT,
                     segment_per_packet: bool = True, listen_timeout_s: float = 5.0) -> TcpStream:
    """Start ``flows`` TCP connections from ``vr``'s generator to its receiver (iperf3, as fast as TCP goes).

    Parameters
    ----------
    duration_s
        Length of the stream, s (iperf3 rounds it to whole seconds).
    flows
        Parallel connections (iperf3 ``-P``).
    frame_bytes
        Size of a full data segment on the wire, bytes (default the paper's 524; see
        :func:`tcp_mss_for_frame`); None for the path's MSS.
    segment_per_packet
        Set ``gso_max_segs 1`` in the generator and receiver namespaces first (see
        :func:`one_segment_per_packet`); without it packets/s means super-frames/s.

    Returns once the client is running.
    """
    mss = None if frame_bytes is None else tcp_mss_for_frame(frame_bytes)
    argv = iperf3_tcp_argv(vr.tr_addr, duration_s, flows, mss, port)
    if segment_per_packet:
        one_segment_per_packet(lab, vr)
    server = _start_iperf3_server(lab, vr, port, listen_timeout_s)
    client = lab.spawn_in(vr.tg_ns, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return TcpStream(vr, server, client, duration_s, flows)
