"""Record a cap sweep on a host: set each cap, let the VR settle, sample its forwarded rate.

The sweep is a consumer of the daemon's own host interface (:class:`xtc.host.base.Host`): the
same backend writes the caps (:meth:`~xtc.host.base.Host.apply_cap`) and the same counters are
read (:meth:`~xtc.host.base.Host.read_counters`: netlink, or ``/proc/net/dev``) as when XTC runs,
so the model is fitted on what the controller will see.  The VR's interfaces are those
:meth:`~xtc.host.base.Host.list_vrs` reports (or the ones the caller names).  The counters are
read once at each end of every sample; the mean rates over a sample are the difference of the two
readings divided by the time between them, through the daemon's meter
(:class:`xtc.daemon.meter.PeriodMeter`): the forwarded rate is the host-side RX of the VR's
interfaces, the rate handed to it (``measured_offered_pps``) their host-side TX.

Time is injected: ``clock`` (seconds) and ``sleep`` (seconds), real time by default.  A
simulated host keeps its own clock (:class:`xtc_lab.sim.host.SimHost`); its sweep passes that
clock and a ``sleep`` that advances it, so the sweep runs as fast as the CPU allows.
The offered rate is set through an :class:`OfferedRate` (the simulated traffic source, a lab
traffic generator) or only recorded (:class:`RecordOnlyOffered`) when the traffic is generated
outside the tool.  With ``min_offered_fraction`` a sweep whose first sample sees less than that
fraction of the nominal rate handed to the VR stops at once (no traffic: the sweep would only
measure an idle VR).

The cap recorded with each sample is the cap in force as the host returns it from
:meth:`~xtc.host.base.Host.apply_cap` (a quota backend rounds to whole microseconds and to at
least 1000 us per period, Xen to whole percent), not the one asked for.

For every cap, ``settle_samples`` samples are taken and flagged ``settling`` (the transient after
the cap step, kept because it is what identifies the plant's pole ``a``), then ``samples_per_cap``
settled samples.  The VR's exact setting before the sweep (:meth:`~xtc.host.base.Host.snapshot`)
is handed back (:meth:`~xtc.host.base.Host.restore_cap`) at the end, also on error or
interruption (``xtc train`` turns SIGTERM and SIGHUP into an exception for that).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import IO, Callable, Protocol, Sequence

from xtc.daemon.meter import PeriodMeter, VrReading
from xtc.host.base import Host
from xtc.host.errors import HostAdapterError
from xtc.training.sweep import SweepSample, TrainingError

__all__ = [
    "SweepPlan",
    "OfferedRate",
    "RecordOnlyOffered",
    "parse_caps",
    "parse_rates",
    "run_sweep",
    "ProgressBar",
]


@dataclass(frozen=True)
class SweepPlan:
    """What to sweep.

    Parameters
    ----------
    caps_percent : tuple of float
        Caps in the order they are visited, percent of one CPU, each within 1..100.
    offered_pps : tuple of float
        Offered rates, packets/s; the whole cap list is swept at each.
    samples_per_cap : int
        Settled samples per cap.
    settle_samples : int
        Samples flagged as settling right after each cap change.
    period_s : float
        Length of one sample, seconds (the control period the model is fitted for).
    """

    caps_percent: tuple[float, ...]
    offered_pps: tuple[float, ...]
    samples_per_cap: int = 10
    settle_samples: int = 2
    period_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.caps_percent:
            raise TrainingError("no caps to sweep; give --caps, e.g. 5:100:5")
        for c in self.caps_percent:
            if not math.isfinite(c) or not (1.0 <= c <= 100.0):
                raise TrainingError(f"cap {c:g} is outside 1..100 percent of one CPU")
        if not self.offered_pps:
            raise TrainingError("no offered rate; give --offered-pps, e.g. 100000")
        for r in self.offered_pps:
            if not math.isfinite(r) or r <= 0:
                raise TrainingError(f"offered rate {r:g} pps must be > 0 packets/s")
        if self.samples_per_cap < 1:
            raise TrainingError("--samples must be >= 1")
        if self.settle_samples < 0:
            raise TrainingError("--settle must be >= 0")
        if not (0.01 <= self.period_s <= 60):
            raise TrainingError(f"--period {self.period_s:g} s must be within 0.01..60 s")

    @property
    def total_samples(self) -> int:
        return len(self.offered_pps) * len(self.caps_percent) * (self.samples_per_cap + self.settle_samples)


class OfferedRate(Protocol):
    def set_offered_pps(self, vr: str, offered_pps: float) -> None: ...


class RecordOnlyOffered:
    """The traffic comes from outside the tool: the offered rate is only written into the CSV."""

    def set_offered_pps(self, vr: str, offered_pps: float) -> None:
        return None


def _parse_number_list(text: str, what: str) -> list[float]:
    out: list[float] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if ":" in part:
                bits = [float(x) for x in part.split(":")]
                if len(bits) != 3 or bits[2] <= 0:
                    raise ValueError
                start, stop, step = bits
                n = int(math.floor((stop - start) / step + 1e-9)) + 1
                out.extend(round(start + i * step, 9) for i in range(max(n, 0)))
            else:
                out.append(float(part))
        except ValueError:
            raise TrainingError(
                f"bad {what} '{part}': give numbers separated by commas and/or ranges START:STOP:STEP (e.g. 5:100:5)"
            ) from None
    if not out:
        raise TrainingError(f"no {what} given")
    return out


def parse_caps(text: str) -> tuple[float, ...]:
    """Caps from ``"5,10,20"`` or ``"5:100:5"`` (inclusive), percent of one CPU, checked within 1..100."""
    caps = _parse_number_list(text, "caps")
    for c in caps:
        if not math.isfinite(c) or not (1.0 <= c <= 100.0):
            raise TrainingError(f"cap {c:g} is outside 1..100 percent of one CPU")
    return tuple(caps)


def parse_rates(text: str) -> tuple[float, ...]:
    """Offered rates in packets/s from a list or range (``"50000,100000"``)."""
    rates = _parse_number_list(text, "offered rates")
    for r in rates:
        if not math.isfinite(r) or r <= 0:
            raise TrainingError(f"offered rate {r:g} must be > 0 packets/s")
    return tuple(rates)


class ProgressBar:
    """A one-line progress bar on a text stream (stderr by default)."""

    def __init__(self, total: int, stream: IO[str] | None = None, width: int = 30) -> None:
        self.total = max(total, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.width = width

    def __call__(self, done: int, label: str) -> None:
        frac = min(done / self.total, 1.0)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r[{bar}] {done}/{self.total} {label:<40}")
        if done >= self.total:
            self.stream.write("\n")
        self.stream.flush()



def _cap_in_force(asked: float, applied: float) -> float:
    """The cap to record: the one the host reports in force after the write, rounded to 1e-6 percent."""
    if not isinstance(applied, (int, float)) or not math.isfinite(applied) or not (0 < applied <= 100.0 + 1e-9):
        raise TrainingError(f"the host reports cap {applied!r} % after setting {asked:g} %; the cap was not applied")
    return round(float(applied), 6)


def _wait_until(t_s: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
    while (d := t_s - clock()) > 0:
        sleep(d)


def run_sweep(
    plan: SweepPlan,
    host: Host,
    vr: str,
    offered: OfferedRate | None = None,
    progress: Callable[[int, str], None] | None = None,
    min_offered_fraction: float = 0.0,
    *,
    interfaces: Sequence[str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[SweepSample]:
    """Sweep the caps of one VR and return the samples in the order they were taken.

    Parameters
    ----------
    plan : SweepPlan
    host : xtc.host.base.Host
        The host (real or simulated) with the VR.
    vr : str
        Name of the VR as ``host.list_vrs()`` reports it.
    offered : OfferedRate, optional
        Sets the offered rate; default :class:`RecordOnlyOffered`.
    progress : callable, optional
        Called as ``progress(samples_done, label)`` after each sample.
    min_offered_fraction : float
        If > 0: stop with :class:`~xtc.training.sweep.TrainingError` (the setting given back) when
        the first sample at an offered rate measures less than this fraction of it handed to the
        VR (host-side TX of its interfaces).
    interfaces : sequence of str, optional
        The VR's host-side interfaces to count; default: those ``host.list_vrs()`` reports.
    clock : callable
        The host's time, seconds (default ``time.monotonic``; a simulated host's own clock).
    sleep : callable
        ``sleep(dt_s)`` lets ``dt_s`` seconds of the host's time pass (default ``time.sleep``;
        for a simulated host, advancing its clock).

    Returns
    -------
    list of SweepSample

    Raises
    ------
    TrainingError
        The VR is not on the host or has no interfaces, an interface's counters vanish or restart
        during the sweep, the host reports an impossible cap, or no traffic reaches the VR.
    xtc.host.errors.HostAdapterError
        The host failed (the setting is still given back if it can be).
    """
    if not (0.0 <= min_offered_fraction < 1.0):
        raise TrainingError(f"min_offered_fraction must be within 0..1, got {min_offered_fraction!r}")
    offered = offered or RecordOnlyOffered()
    vrs = host.list_vrs()
    if vr not in vrs:
        known = ", ".join(sorted(vrs)) or "none"
        raise TrainingError(f"VR '{vr}' not found on backend {host.name} (VRs: {known})")
    ifaces = tuple(interfaces) if interfaces else tuple(vrs[vr])
    if not ifaces:
        raise TrainingError(f"VR '{vr}' has no interfaces to measure")
    groups = {vr: ifaces}
    meter = PeriodMeter()

    def read() -> tuple[float, VrReading]:
        """One reading of the counters into the meter: its time (seconds) and the rates since the last."""
        t_s = clock()
        counters = host.read_counters()
        for name in ifaces:
            if name not in counters:
                raise TrainingError(f"interface {name} of VR '{vr}' is not in the counters; is the VR running?")
        reading = meter.update(t_s, counters, groups, host.counter_bits)[vr]
        if reading.counter_reset:
            raise TrainingError(f"the counters of VR '{vr}' ({', '.join(ifaces)}) went backwards or jumped during "
                                "a sample (did the VR restart?); its rates are unknown: sweep again")
        return t_s, reading

    original = host.snapshot(vr)
    original_cap = host.read_cap(vr)
    samples: list[SweepSample] = []
    t_start = clock()
    done = 0
    try:
        for rate in plan.offered_pps:
            offered.set_offered_pps(vr, rate)
            first_at_rate = True
            for cap in plan.caps_percent:
                in_force = _cap_in_force(cap, host.apply_cap(vr, cap))
                meter.reset()  # each cap's first sample starts right after the write
                t, _ = read()
                for i in range(plan.settle_samples + plan.samples_per_cap):
                    _wait_until(t + plan.period_s, clock, sleep)
                    t_end, r = read()
                    fwd, handed = r.forwarded_pps, r.offered_pps
                    if fwd is None or handed is None:
                        raise TrainingError("the clock did not advance during a sample")
                    if first_at_rate and min_offered_fraction > 0 and handed < min_offered_fraction * rate:
                        raise TrainingError(
                            f"only {handed:.0f} pps were handed to VR '{vr}' (host-side TX of "
                            f"{', '.join(ifaces)}) while {rate:g} pps are said to be offered: is the traffic "
                            "running through this VR? Start it before the sweep (the tool does not generate it)"
                        )
                    first_at_rate = False
                    samples.append(
                        SweepSample(rate, in_force, i, fwd, t_end - t, i < plan.settle_samples, t_end - t_start, handed)
                    )
                    t = t_end
                    done += 1
                    if progress is not None:
                        progress(done, f"{rate / 1e3:g} kp/s, cap {in_force:g} %, {fwd / 1e3:.1f} kp/s")
    finally:
        try:
            host.restore_cap(vr, original_cap, original)
        except HostAdapterError as e:  # the sweep's own error (if any) matters more; report this one
            print(f"warning: could not restore the cap of {vr}: {e}", file=sys.stderr)
    return samples
