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
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xtc.lab.build import build_udpsend
from xtc.lab.netlab import VR, LabError, NetLab

DEFAULT_PORT = 5201


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


class UdpStream:
    """A running iperf3 UDP stream through one VR; use :meth:`wait` for its result.

    Start it with :func:`start_udp_stream`.
    """

    def __init__(self, lab: NetLab, vr: VR, server: subprocess.Popen[bytes] | None,
                 client: subprocess.Popen[bytes], duration_s: float, tool: str) -> None:
        self.lab, self.vr, self.server, self.client = lab, vr, server, client
        self.duration_s = duration_s
        self.tool = tool

    def running(self) -> bool:
        return self.client.poll() is None

    def wait(self, timeout_s: float | None = None) -> UdpResult:
        """Wait for the client to finish; return its report.

        Raises
        ------
        LabError
            iperf3 failed or did not finish within ``timeout_s`` (default: duration + 15 s).
        """
        timeout_s = self.duration_s + 15 if timeout_s is None else timeout_s
        try:
            out, err = self.client.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            self.stop()
            raise LabError(f"{self.tool} through {self.vr.name} did not finish within {timeout_s:.0f} s") from e
        try:
            report = json.loads(out.decode(errors="replace"))
        except ValueError as e:
            raise LabError(f"{self.tool} through {self.vr.name} printed no report: {err.decode()[-300:]}") from e
        if "error" in report:
            raise LabError(f"{self.tool} through {self.vr.name}: {report['error']}")
        if self.tool == "udpsend":
            return UdpResult(sent_packets=int(report["sent_packets"]), lost_packets=None,
                             seconds=float(report["seconds"]), raw=report)
        s = report.get("end", {}).get("sum", {})
        return UdpResult(sent_packets=int(s.get("packets", 0)), lost_packets=int(s.get("lost_packets", 0)),
                         seconds=float(s.get("seconds", 0.0)), raw=report)

    def stop(self) -> None:
        """Stop client and server now (idempotent)."""
        for p in (self.client, self.server):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def __enter__(self) -> UdpStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
    server = lab.spawn_in(vr.tr_ns, ["iperf3", "-s", "-1", "-B", vr.tr_addr, "-p", str(port)])
    deadline = time.monotonic() + listen_timeout_s
    while not tcp_listening(server.pid, port):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise LabError(f"iperf3 server in {vr.tr_ns} did not start listening on port {port}")
        time.sleep(0.02)
    client = lab.spawn_in(vr.tg_ns, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return UdpStream(lab, vr, server, client, duration_s, tool)
