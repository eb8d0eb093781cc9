"""Ping as a measurement: loss ratio and round-trip times of a probe through the lab's VRs.

The paper (section 7.1, Figures 7, 16 and 20) sends a ``ping`` probe at 0.1 kp/s (100 echo
requests per second) through a controlled VR and reports the probe's packet loss ratio and its
average RTT.  Here:

* :func:`ping_argv` (pure, checked) builds the iputils ``ping`` command line;
* :func:`parse_ping_output` (pure) turns ping's output into a :class:`PingResult`: packets
  transmitted and received, the loss ratio, every reply's sequence number and RTT, and the
  average (of the per-packet RTTs);
* :func:`start_ping` runs ping inside one of the lab's namespaces and returns a
  :class:`PingRun`; :meth:`PingRun.result` waits for it and parses the output.

ping's output goes to a temporary file, not a pipe: at 100 replies/s a pipe nobody reads fills
within seconds and would stall the probe.  Destinations must be lab addresses (198.18.0.0/15).

Units: seconds (``_s``), milliseconds for RTTs (``_ms``, ping's own unit), ratios in 0..1.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any, Self

from xtc_lab.lab.netlab import LAB_NET, LabError, NetLab

MIN_INTERVAL_S = 0.002  # iputils: shorter intervals only for root; the lab never needs them
_REPLY = re.compile(r"(?:^\[(?P<ts>\d+\.\d+)\] )?\d+ bytes from [^:]+: icmp_seq=(?P<seq>\d+) ttl=\d+ "
                    r"time=(?P<rtt>[\d.]+) ms(?P<dup> \(DUP!\))?")
_SUMMARY = re.compile(r"^(?P<tx>\d+) packets transmitted, (?P<rx>\d+) received")
_DUPS = re.compile(r", \+(\d+) duplicates")
_ERRS = re.compile(r", \+(\d+) errors")
_TIME = re.compile(r", time (\d+)ms")


@dataclass
class PingResult:
    """What one ping run measured.

    Attributes
    ----------
    transmitted, received
        Echo requests sent and distinct replies received (ping's summary; when ping was
        killed before printing one, the highest sequence number seen and the replies counted).
    duplicates, errors
        Duplicate replies and ICMP errors ping reported.
    seq, rtt_ms
        Sequence number and round-trip time (ms) of every (non-duplicate) reply, in arrival order.
    reply_times_s
        Wall-clock time of each reply (``ping -D``), s since the epoch, when ping printed them.
    summary_found
        Whether ping printed its statistics (it does unless it was killed).
    elapsed_s
        ping's own "time", s (from the first request until it stopped waiting for replies, so it
        includes up to ``-W`` of waiting after the last request when replies are missing); NaN
        without statistics.
    """

    transmitted: int
    received: int
    duplicates: int = 0
    errors: int = 0
    seq: list[int] = field(default_factory=list)
    rtt_ms: list[float] = field(default_factory=list)
    reply_times_s: list[float] = field(default_factory=list)
    summary_found: bool = True
    elapsed_s: float = math.nan

    @property
    def request_rate_pps(self) -> float:
        """Echo requests per second ping actually sent, from the replies' sequence numbers and times.

        It is not always ``1 / interval_s``: iputils ping (20221126, measured on the lab host)
        keeps the interval in whole milliseconds and, from 10 ms up, waits a few milliseconds
        more each time: ``-i 0.01`` sends about 62 requests/s, ``-i 0.011`` 62, ``-i 0.02``
        42, while ``-i 0.009`` sends 111 and ``-i 0.005`` 200.  NaN with fewer than two
        timestamped replies.
        """
        if len(self.reply_times_s) < 2 or len(self.reply_times_s) != len(self.seq):
            return math.nan
        span = self.reply_times_s[-1] - self.reply_times_s[0]
        return (self.seq[-1] - self.seq[0]) / span if span > 0 else math.nan

    @property
    def loss_ratio(self) -> float:
        """Fraction of echo requests without a reply (NaN if none was sent)."""
        if self.transmitted <= 0:
            return math.nan
        return max(0.0, 1.0 - self.received / self.transmitted)

    @property
    def avg_rtt_ms(self) -> float:
        """Mean RTT of the replies, ms (NaN without replies)."""
        return sum(self.rtt_ms) / len(self.rtt_ms) if self.rtt_ms else math.nan

    def rtt_percentile_ms(self, q: float) -> float:
        """The ``q``-th percentile (0..100) of the replies' RTTs, ms (nearest rank; NaN without replies)."""
        if not 0 <= q <= 100:
            raise ValueError(f"percentile {q!r} out of range 0..100")
        if not self.rtt_ms:
            return math.nan
        xs = sorted(self.rtt_ms)
        return xs[min(len(xs) - 1, max(0, math.ceil(q / 100.0 * len(xs)) - 1))]

    def summary(self) -> dict[str, Any]:
        """The numbers a report needs (no per-packet lists)."""
        return {"transmitted": self.transmitted, "received": self.received, "duplicates": self.duplicates,
                "errors": self.errors, "loss_ratio": self.loss_ratio, "avg_rtt_ms": self.avg_rtt_ms,
                "min_rtt_ms": min(self.rtt_ms) if self.rtt_ms else math.nan,
                "p50_rtt_ms": self.rtt_percentile_ms(50), "p95_rtt_ms": self.rtt_percentile_ms(95),
                "max_rtt_ms": max(self.rtt_ms) if self.rtt_ms else math.nan,
                "elapsed_s": self.elapsed_s, "request_rate_pps": self.request_rate_pps,
                "summary_found": self.summary_found}


def parse_ping_output(text: str) -> PingResult:
    """Parse the output of iputils ``ping`` (with or without ``-D`` timestamps).

    Raises
    ------
    LabError
        The text has neither a reply line nor ping's statistics (not ping output).
    """
    seq: list[int] = []
    rtt: list[float] = []
    ts: list[float] = []
    dups = 0
    summary = None
    for line in text.splitlines():
        line = line.strip()
        m = _REPLY.match(line)
        if m:
            if m.group("dup"):
                dups += 1
                continue
            seq.append(int(m.group("seq")))
            rtt.append(float(m.group("rtt")))
            if m.group("ts"):
                ts.append(float(m.group("ts")))
            continue
        s = _SUMMARY.match(line)
        if s:
            summary = (s, line)
    if summary is not None:
        s, line = summary
        d, e, el = _DUPS.search(line), _ERRS.search(line), _TIME.search(line)
        return PingResult(transmitted=int(s.group("tx")), received=int(s.group("rx")),
                          duplicates=int(d.group(1)) if d else dups, errors=int(e.group(1)) if e else 0,
                          seq=seq, rtt_ms=rtt, reply_times_s=ts, summary_found=True,
                          elapsed_s=int(el.group(1)) / 1000.0 if el else math.nan)
    if not seq and "PING " not in text:
        raise LabError(f"not ping output: {text[:200]!r}")
    return PingResult(transmitted=max(seq, default=0), received=len(seq), duplicates=dups, seq=seq, rtt_ms=rtt,
                      reply_times_s=ts, summary_found=False)


def ping_count(interval_s: float, count: int | None = None, duration_s: float | None = None) -> int:
    """Number of echo requests: ``count``, or ``duration_s / interval_s`` rounded (exactly one given)."""
    if (count is None) == (duration_s is None):
        raise LabError("give exactly one of count and duration_s")
    if count is not None:
        if not isinstance(count, int) or count < 1:
            raise LabError(f"ping count {count!r}: want a positive integer")
        return count
    assert duration_s is not None
    if not duration_s > 0:
        raise LabError(f"ping duration_s {duration_s!r}: want a positive number of seconds")
    return max(1, round(duration_s / interval_s))


def ping_argv(dest: str, interval_s: float, count: int, payload_bytes: int = 56,
              reply_timeout_s: float = 1.0) -> list[str]:
    """The ``ping`` command line (iputils): ``count`` requests every ``interval_s`` to ``dest``.

    Parameters
    ----------
    dest
        Destination, an IPv4 address in 198.18.0.0/15 (the lab's range; anything else is refused).
    interval_s
        Time between requests, s (at least 0.002; 0.01 is the paper's 0.1 kp/s, although iputils
        sends only about 62 requests/s with it, see :attr:`PingResult.request_rate_pps`).
    count
        Requests to send.
    payload_bytes
        ICMP payload, bytes (ping's ``-s``; 56 gives 84-byte IP packets).
    reply_timeout_s
        How long ping waits for the last replies after sending the last request, s.
    """
    try:
        addr = ipaddress.ip_address(dest)
    except ValueError:
        raise LabError(f"ping destination {dest!r} is not an IP address") from None
    if addr not in LAB_NET:
        raise LabError(f"ping destination {dest} is outside the lab's range {LAB_NET}")
    if not (isinstance(interval_s, (int, float)) and MIN_INTERVAL_S <= interval_s <= 60):
        raise LabError(f"ping interval_s {interval_s!r} out of range {MIN_INTERVAL_S}..60")
    if not isinstance(count, int) or count < 1:
        raise LabError(f"ping count {count!r}: want a positive integer")
    if not 0 <= payload_bytes <= 1472:
        raise LabError(f"ping payload_bytes {payload_bytes} out of range 0..1472")
    if not 0.1 <= reply_timeout_s <= 60:
        raise LabError(f"ping reply_timeout_s {reply_timeout_s!r} out of range 0.1..60")
    return ["ping", "-n", "-D", "-i", f"{interval_s:g}", "-c", str(count), "-s", str(payload_bytes),
            "-W", f"{reply_timeout_s:g}", str(addr)]


class PingRun:
    """A ping running in a lab namespace (start it with :func:`start_ping`)."""

    def __init__(self, process: subprocess.Popen[bytes], out: IO[bytes], argv: list[str], expected_s: float):
        self.process = process
        self._out = out
        self.argv = argv
        self.expected_s = expected_s
        self._result: PingResult | None = None
        self.output = ""  # ping's output, once it has finished

    def running(self) -> bool:
        return self.process.poll() is None

    def result(self, timeout_s: float | None = None) -> PingResult:
        """Wait for ping to finish and parse its output.

        The default timeout is twice its nominal length plus 10 s: on a busy host ping sends
        more slowly than ``1 / interval_s`` (see :attr:`PingResult.request_rate_pps`).

        Raises
        ------
        LabError
            ping did not finish in time (it is then stopped) or printed no usable output.
        """
        if self._result is not None:
            return self._result
        timeout_s = 2 * self.expected_s + 10.0 if timeout_s is None else timeout_s
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise LabError(f"ping ({' '.join(self.argv[-1:])}) did not finish within {timeout_s:.0f} s") from None
        return self._parse()

    def stop(self) -> PingResult | None:
        """Stop ping now (SIGINT: it prints its statistics) and return what it measured (idempotent)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        try:
            return self._parse()
        except LabError:
            return None

    def _parse(self) -> PingResult:
        if self._result is None:
            self._out.seek(0)
            text = self.output = self._out.read().decode(errors="replace")
            if self.process.returncode not in (0, 1) and not text.strip():
                raise LabError(f"ping failed with status {self.process.returncode}")
            self._result = parse_ping_output(text)
            self._out.close()
        return self._result

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_ping(lab: NetLab, ns: str, dest: str, interval_s: float = 0.01, count: int | None = None,
               duration_s: float | None = None, payload_bytes: int = 56, reply_timeout_s: float = 1.0) -> PingRun:
    """Start ``ping`` from the lab namespace ``ns`` to ``dest``; returns at once.

    Parameters
    ----------
    lab, ns
        The lab and one of its namespaces (e.g. a VR's generator namespace ``vr.tg_ns``).
    dest
        A lab address (e.g. ``vr.tr_addr``: the probe crosses the VR both ways).
    interval_s
        Time between echo requests, s (0.01 = 100 requests/s, the paper's 0.1 kp/s).
    count, duration_s
        Exactly one: the number of requests, or how long to send them (``duration_s / interval_s``
        requests; on a busy host ping sends more slowly and takes longer).
    payload_bytes, reply_timeout_s
        See :func:`ping_argv`.
    """
    n = ping_count(interval_s, count, duration_s)
    argv = ping_argv(dest, interval_s, n, payload_bytes, reply_timeout_s)
    out = tempfile.TemporaryFile(prefix="xtc-ping-")  # noqa: SIM115 - owned (and closed) by the PingRun
    try:
        p = lab.spawn_in(ns, argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "LC_ALL": "C"})
    except LabError:
        out.close()
        raise
    return PingRun(p, out, argv, expected_s=n * interval_s + reply_timeout_s)
