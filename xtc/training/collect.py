"""Record a cap sweep on a host backend: set each cap, let the VR settle, sample its forwarded rate.

The sweep runs on the daemon's own host interface (:class:`xtc.host.base.Backend`):
the same actuator writes the caps and the same ``/proc/net/dev`` counters are read as
when XTC runs, so the model is fitted on what the controller will see.  The forwarded
rate of a VR is the sum, over its host-side interfaces, of the RX packet counters
(packets the VR sent out), differenced over each sample with the meter's
wrap/reset rule (:func:`xtc.daemon.meter.counter_delta`).

Time is injected (:class:`Clock`): :class:`VirtualClock` for the simulated plant (no
waiting; ``backend.tick`` advances the plant) and :class:`WallClock` for real hosts.
The offered rate is set through an :class:`OfferedRate` (the simulated traffic
source, a lab traffic generator) or only recorded (:class:`RecordOnlyOffered`) when
the traffic is generated outside the tool.  Either way the rate actually handed to
the VR is measured too (host-side TX packets of its interfaces) and kept beside the
nominal one (``measured_offered_pps``); with ``min_offered_fraction`` a sweep whose
first sample sees less than that fraction of the nominal rate offered stops at once
(no traffic: the sweep would only measure an idle VR).

The cap recorded with each sample is the cap in force as the host reads it back
after the write (a quota backend rounds to whole microseconds and to at least
1000 us per period, Xen to whole percent), not the one asked for.

For every cap, ``settle_samples`` samples are taken and flagged ``settling`` (the
transient after the cap step, kept because it is what identifies the plant's pole
``a``), then ``samples_per_cap`` settled samples.  The VR's cap before the sweep is
given back at the end, also on error or interruption.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import IO, Callable, Mapping, Protocol, Sequence

from xtc.training.sweep import Sample, TrainingError

__all__ = [
    "SweepPlan",
    "Clock",
    "VirtualClock",
    "WallClock",
    "OfferedRate",
    "RecordOnlyOffered",
    "parse_caps",
    "parse_rates",
    "run_sweep",
    "ProgressBar",
]


class _BackendLike(Protocol):  # the parts of xtc.host.base.Backend used here
    name: str

    def counter_source(self): ...  # noqa: ANN201
    def discover(self) -> Mapping[str, tuple[str, ...]]: ...
    def read_cap(self, vr: str) -> float | None: ...
    def write_cap(self, vr: str, cap_percent: float) -> float | None: ...
    def restore_cap(self, vr: str, cap_percent: float | None) -> None: ...
    def tick(self, now_s: float) -> None: ...


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


class Clock(Protocol):
    def now(self) -> float: ...
    def sleep_until(self, t_s: float) -> None: ...


class VirtualClock:
    """Simulated time: ``sleep_until`` jumps there at once."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._t = start_s

    def now(self) -> float:
        return self._t

    def sleep_until(self, t_s: float) -> None:
        self._t = max(self._t, t_s)


class WallClock:
    """Real time (monotonic)."""

    def now(self) -> float:
        return time.monotonic()

    def sleep_until(self, t_s: float) -> None:
        while (d := t_s - time.monotonic()) > 0:
            time.sleep(min(d, 0.5))


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


def _packets(counters: Mapping[str, object], ifaces: Sequence[str]) -> dict[str, tuple[int, int]]:
    """``{interface: (rx packets, tx packets)}`` of the VR's host-side interfaces."""
    out = {}
    for name in ifaces:
        c = counters.get(name)
        if c is None:
            raise TrainingError(f"interface {name} of the VR is not in the counters; is the VR running?")
        out[name] = (int(c.rx_packets), int(c.tx_packets))  # type: ignore[attr-defined]
    return out


def _cap_in_force(asked: float, applied: float | None) -> float:
    """The cap to record: what the host read back after the write (rounded to 1e-6 %), else the one asked for."""
    if applied is None:
        return float(asked)
    if not math.isfinite(applied) or not (0 < applied <= 100.0 + 1e-9):
        raise TrainingError(f"the host reports cap {applied!r} % after setting {asked:g} %; the cap was not applied")
    return round(float(applied), 6)


def run_sweep(
    plan: SweepPlan,
    backend: _BackendLike,
    vr: str,
    clock: Clock,
    offered: OfferedRate | None = None,
    progress: Callable[[int, str], None] | None = None,
    min_offered_fraction: float = 0.0,
) -> list[Sample]:
    """Sweep the caps of one VR and return the samples in the order they were taken.

    Parameters
    ----------
    plan : SweepPlan
    backend : xtc.host.base.Backend
        The host (simulated or real) with the VR.
    vr : str
        Name of the VR as the backend's ``discover()`` reports it.
    clock : Clock
        Time source; the backend is ``tick``-ed to each sample boundary.
    offered : OfferedRate, optional
        Sets the offered rate; default :class:`RecordOnlyOffered`.
    progress : callable, optional
        Called as ``progress(samples_done, label)`` after each sample.
    min_offered_fraction : float
        If > 0: stop with :class:`~xtc.training.sweep.TrainingError` (the cap given back) when
        the first sample at an offered rate measures less than this fraction of it handed
        to the VR (host-side TX of its interfaces).

    Returns
    -------
    list of Sample
    """
    from xtc.host.errors import HostAdapterError
    from xtc.daemon.meter import counter_delta

    if not (0.0 <= min_offered_fraction < 1.0):
        raise TrainingError(f"min_offered_fraction must be within 0..1, got {min_offered_fraction!r}")
    offered = offered or RecordOnlyOffered()
    vrs = backend.discover()
    if vr not in vrs:
        known = ", ".join(sorted(vrs)) or "none"
        raise TrainingError(f"VR '{vr}' not found on backend {backend.name} (VRs: {known})")
    ifaces = tuple(vrs[vr])
    if not ifaces:
        raise TrainingError(f"VR '{vr}' has no interfaces to measure")
    source = backend.counter_source()
    original_cap = backend.read_cap(vr)
    samples: list[Sample] = []
    t_start = clock.now()
    done = 0
    try:
        for rate in plan.offered_pps:
            offered.set_offered_pps(vr, rate)
            first_at_rate = True
            for cap in plan.caps_percent:
                in_force = _cap_in_force(cap, backend.write_cap(vr, cap))
                t = clock.now()
                backend.tick(t)
                prev = _packets(source.read(), ifaces)
                for i in range(plan.settle_samples + plan.samples_per_cap):
                    clock.sleep_until(t + plan.period_s)
                    t_end = clock.now()
                    backend.tick(t_end)
                    cur = _packets(source.read(), ifaces)
                    dt = t_end - t
                    if dt <= 0:
                        raise TrainingError("the clock did not advance during a sample")
                    rx = sum(counter_delta(prev[n][0], cur[n][0], dt, 150e6)[0] for n in ifaces)
                    tx = sum(counter_delta(prev[n][1], cur[n][1], dt, 150e6)[0] for n in ifaces)
                    if first_at_rate and min_offered_fraction > 0 and tx / dt < min_offered_fraction * rate:
                        raise TrainingError(
                            f"only {tx / dt:.0f} pps were handed to VR '{vr}' (host-side TX of "
                            f"{', '.join(ifaces)}) while {rate:g} pps are said to be offered: is the traffic "
                            "running through this VR? Start it before the sweep (the tool does not generate it)"
                        )
                    first_at_rate = False
                    samples.append(
                        Sample(rate, in_force, i, rx / dt, dt, i < plan.settle_samples, t_end - t_start, tx / dt)
                    )
                    prev, t = cur, t_end
                    done += 1
                    if progress is not None:
                        progress(done, f"{rate / 1e3:g} kp/s, cap {in_force:g} %, {rx / dt / 1e3:.1f} kp/s")
    finally:
        try:
            backend.restore_cap(vr, original_cap)
        except HostAdapterError as e:  # the sweep's own error (if any) matters more; report this one
            print(f"warning: could not restore the cap of {vr}: {e}", file=sys.stderr)
    return samples
