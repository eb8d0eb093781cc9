"""Early drop: the limit on what the host hands a capped VR (issue 48).  Pure: no I/O, no clock.

While XTC holds a VR's forwarding below what it is offered (a UDP source that does not back
off), the host still delivers every offered packet and the VR drops the excess at its socket
(xtc-paper.txt section 7.3).  A limiter on the host side of the VR's interfaces (direction into
the VR) drops that excess before the host delivers it.  This module decides its rate, from what
the daemon already knows; :mod:`xtc.daemon.limiter_state` applies it through a
:class:`xtc.host.limiter.Limiter` (docs/design/early-drop.md).

The rules (:func:`decide`):

- **Only while the VR is capped below what it is offered**: the host handed it more than
  ``1 + excess_fraction`` times what it forwarded (over the last period).  A TCP VR is not:
  its source backs off to what the VR forwards (the paper measured "almost zero packet drops"
  through a capped TCP VR), so no limiter is ever installed on it.  Nor is an uncapped VR that
  keeps up with its offered load.  While a limiter is in place the VR is handed at most the
  limit, so "offered" is then the packets that reached the limiter (handed + dropped by it).
- **Never below what the VR forwards at its cap, plus a margin**: the floor is the largest of
  the setpoint, the measured forwarded rate and, when the controller is about to raise the cap,
  the model's prediction at the new cap (so the limit is raised *before* the cap is), times
  ``1 + margin_fraction``: 0.05 for the queue-less eBPF bucket (its 0.3 s of credit takes the
  sender's bursts), 0.2 for the TBF (its 20 ms bucket cannot: one-second samples of a lab VR at a
  fixed cap, docs/results/2026-11-26-lab/capsweep.csv, reach at most 1.16 times their mean).
- **Removed** when the VR is no longer capped below its offered load, or when the floor reaches
  what it is offered (the limit would drop nothing the VR forwards anyway).  A limit in place
  stays while the VR is offered more than ``1 + keep_fraction`` (< ``1 + excess_fraction``)
  times what it forwarded and its floor is below ``1 + keep_fraction`` times that offered load
  (a limit a little above what the VR is offered binds nothing): a VR whose rate moves around the
  thresholds does not have its limiter put on and taken off every period (issue 48 item 4: each
  is a netlink operation per interface).
- **Hysteresis**: a limit in place is lowered only when the new one is more than
  ``step_fraction`` below it; it is raised as soon as the floor exceeds it (a raise is never held
  back, so the limit never binds below what the VR may forward), and then to the floor times
  ``1 + step_fraction``, so that noise does not raise it every period.

Rates are packets/s; the limiter is given bytes/s too, from the mean packet size the host
measured on the interface (TBF counts bytes).

Public API
----------
LimiterTuning, Limit, LimitInputs, decide, limit_bytes, tuning_for, BPF_TUNING, TBF_TUNING
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BPF_TUNING", "MIN_PACKET_BYTES", "TBF_TUNING", "Limit", "LimitInputs", "LimiterTuning", "decide",
           "limit_bytes", "tuning_for"]

#: The smallest mean packet size used (an Ethernet frame without FCS); a mean below it (no
#: packets seen) is replaced by it.
MIN_PACKET_BYTES = 60


@dataclass(frozen=True)
class LimiterTuning:
    """How early drop follows the controller.

    Attributes
    ----------
    margin_fraction : float
        The limit is at least ``1 + margin_fraction`` times what the VR forwards at its cap.
    step_fraction : float
        Hysteresis: a limit moves down only by more than this fraction; a raise goes this much above the floor.
    excess_fraction : float
        The VR counts as capped below its offered load when it was offered more than
        ``1 + excess_fraction`` times what it forwarded.
    burst_s : float
        The limiter's bucket: this many seconds of packets at the limit (the sender's bursts
        must fit, or the limiter cuts below its rate).
    keep_fraction : float
        A limit in place is kept while the VR is offered more than ``1 + keep_fraction`` times what
        it forwarded (hysteresis on removal; at most ``excess_fraction``).
    model_up_to_setpoint : bool
        The model's prediction at a raised cap counts only up to the setpoint.
    """

    margin_fraction: float = 0.2
    step_fraction: float = 0.1
    excess_fraction: float = 0.25
    burst_s: float = 0.02
    keep_fraction: float = 0.1
    #: The model's rate at a raised cap counts only up to the setpoint: the limit is then raised
    #: before the cap as far as the VR needs to reach its setpoint, not to where an overshooting
    #: prediction puts it (the eBPF bucket's tight limit would otherwise follow every raise).
    model_up_to_setpoint: bool = False

    def __post_init__(self) -> None:
        for name, lo, hi in (("margin_fraction", 0.0, 10.0), ("step_fraction", 0.0, 1.0),
                             ("excess_fraction", 0.0, 10.0), ("burst_s", 0.001, 1.0),
                             ("keep_fraction", 0.0, self.excess_fraction)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
                raise ValueError(f"early drop {name} must be within {lo:g}..{hi:g}, got {v!r}")


DEFAULT_TUNING = LimiterTuning()
#: The TBF's tuning (a short bucket: it has a queue of one bucket, so a deep one would delay).
TBF_TUNING = DEFAULT_TUNING
#: The eBPF bucket's tuning: queue-less, so a deep credit (0.3 s) costs no delay and absorbs the
#: sender's bursts; the limit sits 5-7% above what the VR forwards at its cap (margin 0.05, step
#: 0.02: a change is one map update, so small steps are cheap) rather than 32% (measured:
#: docs/design/early-drop.md).
BPF_TUNING = LimiterTuning(margin_fraction=0.05, step_fraction=0.02, burst_s=0.3, model_up_to_setpoint=True)


def tuning_for(limiter: str, margin_fraction: float | None = None, credit_s: float | None = None) -> LimiterTuning:
    """The tuning of early drop's ``limiter`` (``"bpf"`` or ``"tbf"``), with the configured margin and
    credit where given.  Raises ValueError naming a bad one."""
    base = {"bpf": BPF_TUNING, "tbf": TBF_TUNING}.get(limiter)
    if base is None:
        raise ValueError(f"early drop limiter must be 'bpf' or 'tbf', got {limiter!r}")
    return LimiterTuning(
        margin_fraction=base.margin_fraction if margin_fraction is None else margin_fraction,
        step_fraction=base.step_fraction, excess_fraction=base.excess_fraction,
        burst_s=base.burst_s if credit_s is None else credit_s, keep_fraction=base.keep_fraction,
        model_up_to_setpoint=base.model_up_to_setpoint)


@dataclass(frozen=True)
class Limit:
    """A limit on what the host hands a VR: packets/s, and bytes/s + bucket for a byte-counting qdisc."""

    rate_pps: float
    rate_bytes_per_s: int
    burst_bytes: int


@dataclass(frozen=True)
class LimitInputs:
    """What :func:`decide` looks at (one VR, one period).

    Attributes
    ----------
    setpoint_pps : float
        The instance's setpoint.
    forwarded_pps : float
        What the VR forwarded over the last period.
    offered_pps : float
        What reached the VR's host-side interfaces over the last period: handed to the VR plus
        dropped by the limiter in place (if any).
    model_forwarded_pps : float or None
        What the VR will forward at the cap about to be written when that is a raise: the
        measured rate plus the controller's model's gain between the two caps (its slope: an
        uncalibrated model's absolute level is wrong on another host; seen in the daemon on a
        real VR, where the paper's model put the floor above the offered load); None otherwise.
    mean_packet_bytes : float
        Mean size of the packets handed to the VR (host-side TX bytes / packets).
    """

    setpoint_pps: float
    forwarded_pps: float
    offered_pps: float
    model_forwarded_pps: float | None
    mean_packet_bytes: float


def limit_bytes(rate_pps: float, mean_packet_bytes: float, tuning: LimiterTuning) -> Limit:
    """The :class:`Limit` for a packet rate, in bytes at the mean packet size (bucket: ``burst_s``,
    at least 4 full-size frames so that one large packet always fits)."""
    size = max(float(mean_packet_bytes), MIN_PACKET_BYTES) if math.isfinite(mean_packet_bytes) else 1514.0
    rate_b = math.ceil(rate_pps * size)
    burst = max(math.ceil(rate_b * tuning.burst_s), 4 * 1514)
    return Limit(rate_pps=float(rate_pps), rate_bytes_per_s=rate_b, burst_bytes=burst)


def _finite(v: float | None) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def floor_pps(x: LimitInputs, tuning: LimiterTuning) -> float:
    """The lowest limit allowed: ``(1 + margin)`` times the largest of the setpoint, the measured
    forwarded rate and the model's rate at the cap."""
    model = x.model_forwarded_pps
    if tuning.model_up_to_setpoint and _finite(model) and _finite(x.setpoint_pps):
        model = min(model, x.setpoint_pps)  # type: ignore[type-var]
    base = max(v for v in (x.setpoint_pps, x.forwarded_pps, model, 0.0) if _finite(v))
    return base * (1.0 + tuning.margin_fraction)


def decide(x: LimitInputs, current: Limit | None, tuning: LimiterTuning | None = None) -> Limit | None:
    """The limit to have in place after this period (``current`` itself when it stays, None: no limiter).

    See the module's rules.  A measurement that is missing or not finite keeps ``current``
    raised to the floor if it is below it (never tighter), or removes nothing and installs
    nothing.
    """
    tuning = tuning or DEFAULT_TUNING
    if not (_finite(x.offered_pps) and _finite(x.forwarded_pps) and x.forwarded_pps >= 0 and x.offered_pps >= 0):
        if current is not None and _finite(x.setpoint_pps):
            floor = floor_pps(LimitInputs(x.setpoint_pps, 0.0, 0.0, x.model_forwarded_pps, x.mean_packet_bytes), tuning)
            if current.rate_pps < floor:
                return limit_bytes(floor * (1 + tuning.step_fraction), x.mean_packet_bytes, tuning)
        return current
    floor = floor_pps(x, tuning)
    if current is None:
        capped_below_offered = x.offered_pps > (1.0 + tuning.excess_fraction) * x.forwarded_pps
        if not capped_below_offered or floor >= x.offered_pps:
            return None
    else:  # hysteresis: kept down to the keep threshold (a limit a little above the offered load binds nothing)
        keep = 1.0 + tuning.keep_fraction
        if x.offered_pps <= keep * x.forwarded_pps or floor >= keep * x.offered_pps:
            return None
    if current is None:
        return limit_bytes(floor, x.mean_packet_bytes, tuning)
    if current.rate_pps < floor:  # raise now, with room: never binds below what the VR may forward
        return limit_bytes(floor * (1.0 + tuning.step_fraction), x.mean_packet_bytes, tuning)
    if floor < current.rate_pps * (1.0 - tuning.step_fraction):
        return limit_bytes(floor, x.mean_packet_bytes, tuning)
    return current
