"""Simulated plant: virtual routers (VRs) behind a shared Dom0.

A pure, seeded, stepped simulation.  No clock and no I/O: the plant keeps its
own simulated time and advances by ``dt_s`` (0.1 s by default, so a 10 Hz
meter can sample it) on every :meth:`Plant.step`, ``x[k+1] = f(x[k], u[k])``
where the state ``x`` is the VRs' achieved rates, the TCP sources' sending rates
and the packet counters, and the input ``u`` is the VRs' caps (plus the
disturbances: CPU hogs and offered rates).  All randomness comes from one
:class:`numpy.random.Generator` seeded at construction.

What is modelled, per sub-step of ``dt_s`` seconds:

1. **Sources.**  A UDP source sends at its configured rate whatever happens (it
   never backs off).  A TCP-like source runs AIMD: it adds
   ``tcp_increase_pps_per_s * dt_s`` to its rate while none of its packets are
   lost, multiplies it by ``tcp_decrease_factor`` on a loss, and never exceeds
   ``rate_pps`` (the flow's own maximum, e.g. the network's TCP capacity).
2. **VR forwarding capacity** (:class:`CapacityCurve`).  A VR with cap ``C``
   percent has a packet budget ``c = k * speed_factor * C * (1 - hog_fraction)``
   pps, ``k`` about 3.27 kp/s per percent (Table 1 of the XTC paper).  A UDP
   flow offered at ``lam`` pps is forwarded at the soft minimum
   ``lam * (1 + (lam / c)**n) ** (-1/n)``: near-linear in the cap at low caps,
   saturating at the offered rate (the knee's sharpness ``n`` about 4.7 is
   fitted to Table 1, cap threshold about 60 at 100 kp/s).  A TCP flow paces to
   its bottleneck, so its packets queue instead of being dropped at the knee:
   it is forwarded at ``min(lam, c)`` and loses only what exceeds ``c``.
3. **Dom0**, one per group of VRs, moves every packet into a VR and every packet
   out of it.  Its capacity ``capacity_pps`` counts full traversals (one packet
   in *and* out); a packet delivered to a VR costs ``rx_work_fraction`` of a
   traversal even when the VR then drops it (the waste of section 7.3 of the
   paper), a packet the VR forwards costs the rest, and a TCP flow's ACKs add
   ``tcp_ack_work`` traversals per data packet.  When the work asked of a Dom0
   exceeds its capacity, the packets it cannot move are dropped before the VRs.
   **Early drop** (issue 48): a VR may have a limiter (:meth:`Plant.set_limit`, packets/s) on
   the host side of its interfaces; what its source sends beyond the limit is dropped by the
   host *before* delivery, at ``limiter_work_fraction`` of a traversal per packet (the lab's
   limiter on the vif still costs the packet's way across the bridge; one on the host's input
   port costs less), instead of ``rx_work_fraction`` for a packet delivered and dropped by the VR.
   Who loses is the Dom0's ``sharing``: ``"fair"`` (the default) is Xen's
   round-robin between the VRs' backends, a max-min fair split of Dom0's work
   (a VR that asks for less than an equal share gets all it asks, the others
   share the rest equally); ``"proportional"`` delivers the same fraction of
   every source's packets (the heavier sender keeps the larger share).  Either
   way a UDP source keeps sending what Dom0 drops while a TCP source backs off,
   so UDP takes more than TCP (section 7.3).
4. **Dynamics.**  The achieved forwarding rate follows the rate the VR can
   forward with a first-order lag of time constant ``tau_s``; the nominal
   ``tau_s`` (about 0.09 s, :func:`tau_for_pole`) makes one-second averages of
   the rate show the paper's model pole ``a = 0.0915``.
5. **Noise.**  The packets forwarded in each sub-step carry multiplicative
   Gaussian noise whose standard deviation, expressed for a 1 s average, is
   ``noise_rel + noise_drop_rel * drop_fraction`` (scheduling jitter grows with
   the share of packets a capped VR drops: the paper's Fixed Cap oscillates more
   far below the offered rate, Figure 6(a)).
6. **Counters.**  Cumulative packets per VR: sent by its source, delivered by
   Dom0 to the VR (host-side TX toward the VR) and forwarded by the VR
   (host-side RX of the VR's interfaces, what the meter reads).  ACKs are not
   counted as packets; their cost is folded into Dom0's work.
7. **CPU use.**  The plant has no CPU model of its own beyond the capacity
   curve, so a VR's CPU use is derived from it: every packet delivered to the
   VR costs ``1 / (k * speed_factor)`` percent-seconds of one CPU (the inverse
   of the packet budget per percent: a packet the VR drops at its socket was
   still received and costs the same), and a hog burns ``hog_fraction`` of
   the cap.  A VR uses ``min(cap, hog_fraction * cap + lam / (k *
   speed_factor))`` percent of one CPU, ``lam`` the rate delivered to it in the
   sub-step: the whole cap when its cap binds (it is offered at least its
   packet budget), less when it is offered less.  Integrated over the
   sub-steps in :meth:`Plant.cpu_seconds` (what a hypervisor's or the kernel's
   CPU accounting reports).  Note the soft knee: a UDP VR offered a little less
   than its budget already drops some packets (scheduling jitter) while its
   CPU use stays below the cap.

Caps are applied with an optional resolution (``cap_resolution_percent``):
Xen's credit scheduler takes integer percents (use 1.0), libvirt LXC/QEMU
quotas in microseconds are practically continuous (0.0, the default).

Why one file: one model, ``x[k+1] = f(x[k], u[k])``: the configurations (:class:`VRConfig`,
:class:`Dom0Config`, :class:`PlantConfig`) are its parameters, the capacity curve and the traffic
its laws, and :class:`Plant` the step that applies them; each is read only with the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

__all__ = [
    "TABLE1_CAP_PERCENT",
    "TABLE1_KPPS",
    "TABLE1_OFFERED_PPS",
    "PAPER_MODEL_POLE",
    "NOMINAL_TAU_S",
    "tau_for_pole",
    "averaged_pole",
    "CapacityCurve",
    "PAPER_CURVE",
    "fit_capacity_curve",
    "Traffic",
    "udp",
    "tcp",
    "VRConfig",
    "Dom0Config",
    "PlantConfig",
    "Counters",
    "Measurement",
    "Plant",
    "PlantError",
    "tau_for_pole",
]

# Table 1 of the XTC paper: cap (percent of one CPU) -> achieved throughput (kp/s)
# of one VR offered 100 kp/s of 64-byte UDP packets.
TABLE1_CAP_PERCENT: tuple[float, ...] = (5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0)
TABLE1_KPPS: tuple[float, ...] = (16.0, 32.0, 50.0, 65.0, 77.0, 85.0, 91.0, 94.0, 96.0, 98.0)
TABLE1_OFFERED_PPS = 100_000.0

PAPER_MODEL_POLE = 0.0915


def tau_for_pole(a: float, period_s: float = 1.0) -> float:
    """Time constant (s) of a first-order lag whose *period-averaged* pole is ``a``.

    The model's pole is fitted on rates averaged over each period (the paper's
    one-second iperf reports; the daemon's meter likewise averages over the
    control period).  After a step of the target rate at the start of a period,
    the average over that period covers ``1 - (tau/T)(1 - exp(-T/tau))`` of
    the step, so the lag whose averages show the model's ``a`` solves
    ``(tau/T)(1 - exp(-T/tau)) = a`` (for a = 0.0915 at T = 1 s, tau is about
    0.0915 s).  Using ``tau = -T / ln(a)`` instead, the pole of the point
    samples, would make the averaged plant about four times slower than the
    model (an averaged pole near 0.38).  ``0 < a < 1``.
    """
    if not (0.0 < a < 1.0) or not math.isfinite(a):
        raise ValueError(f"pole a must be within (0, 1), got {a}")
    T = float(period_s)

    def seen_fraction_missing(tau: float) -> float:
        return (tau / T) * (1.0 - math.exp(-T / tau)) - a

    lo, hi = 1e-9 * T, 1e6 * T
    for _ in range(200):  # bisection: the function increases with tau
        mid = math.sqrt(lo * hi)
        if seen_fraction_missing(mid) > 0:
            hi = mid
        else:
            lo = mid
    return math.sqrt(lo * hi)


def averaged_pole(tau_s: float, period_s: float = 1.0) -> float:
    """The pole a period-averaged measurement shows for a lag ``tau_s`` (inverse of :func:`tau_for_pole`)."""
    if tau_s <= 0:
        return 0.0
    return (tau_s / period_s) * (1.0 - math.exp(-period_s / tau_s))


NOMINAL_TAU_S = tau_for_pole(PAPER_MODEL_POLE)


class PlantError(ValueError):
    """Bad configuration or input to the simulated plant (nothing was changed)."""


def _finite(name: str, v: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise PlantError(f"{name} must be a number, got {type(v).__name__} {v!r}")
    fv = float(v)
    if not math.isfinite(fv):
        raise PlantError(f"{name} must be finite, got {fv}")
    return fv


@dataclass(frozen=True)
class CapacityCurve:
    """Cap -> forwarding capacity of a VR, and the soft-minimum saturation at the offered rate.

    Parameters
    ----------
    pps_per_cap_percent : float
        Packets/s a VR forwards per percent of one CPU, well below saturation,
        on the reference hardware (``speed_factor = 1``).
    knee_sharpness : float
        Exponent ``n`` of the soft minimum ``lam * (1 + (lam/c)**n) ** (-1/n)``;
        larger is a sharper knee.
    """

    pps_per_cap_percent: float = 3267.47
    knee_sharpness: float = 4.7344

    def __post_init__(self) -> None:
        if _finite("pps_per_cap_percent", self.pps_per_cap_percent) <= 0:
            raise PlantError(f"pps_per_cap_percent must be > 0, got {self.pps_per_cap_percent}")
        if _finite("knee_sharpness", self.knee_sharpness) < 1:
            raise PlantError(f"knee_sharpness must be >= 1, got {self.knee_sharpness}")

    def capacity_pps(
        self, cap_percent: np.ndarray | float, speed_factor: np.ndarray | float = 1.0, hog_fraction: np.ndarray | float = 0.0
    ) -> np.ndarray:
        """Packet budget (pps) of a VR at a cap: ``k * speed_factor * cap * (1 - hog_fraction)``."""
        return self.pps_per_cap_percent * np.asarray(speed_factor) * np.asarray(cap_percent) * (1.0 - np.asarray(hog_fraction))

    def forwarded_pps(
        self,
        cap_percent: np.ndarray | float,
        offered_pps: np.ndarray | float,
        speed_factor: np.ndarray | float = 1.0,
        hog_fraction: np.ndarray | float = 0.0,
    ) -> np.ndarray:
        """Steady-state rate (pps) a VR forwards of a UDP flow offered at ``offered_pps``.

        Parameters
        ----------
        cap_percent : array_like
            Cap, percent of one CPU (> 0).
        offered_pps : array_like
            Rate delivered to the VR, packets/s (>= 0).
        speed_factor : array_like
            Hardware speed relative to the reference (2 = twice as many packets per percent).
        hog_fraction : array_like
            Share of the VR's CPU taken by another task, 0..1.

        Returns
        -------
        numpy.ndarray
            Forwarded rate, packets/s, ``<= offered_pps``.
        """
        c = self.capacity_pps(cap_percent, speed_factor, hog_fraction)
        lam = np.asarray(offered_pps, dtype=float)
        return _soft_min(lam, c, self.knee_sharpness)

    def cap_for_pps(self, target_pps: float, offered_pps: float, speed_factor: float = 1.0, hog_fraction: float = 0.0) -> float:
        """Cap (percent, unbounded) at which :meth:`forwarded_pps` equals ``target_pps``.

        Raises :class:`PlantError` unless ``0 < target_pps < offered_pps``.
        """
        if not (0 < target_pps < offered_pps):
            raise PlantError(f"target_pps must be within (0, offered_pps={offered_pps}), got {target_pps}")
        n = self.knee_sharpness
        # target = lam (1 + (lam/c)^n)^(-1/n)  <=>  (lam/c)^n = (lam/target)^n - 1
        c = offered_pps / ((offered_pps / target_pps) ** n - 1.0) ** (1.0 / n)
        return float(c / (self.pps_per_cap_percent * speed_factor * (1.0 - hog_fraction)))


def _soft_min(lam: np.ndarray, c: np.ndarray, n: float) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        ratio = np.where(lam > 0, lam / np.maximum(c, 1e-300), 0.0)
        out = lam * (1.0 + ratio**n) ** (-1.0 / n)
    return np.where(np.isfinite(out), out, 0.0)


PAPER_CURVE = CapacityCurve()


def fit_capacity_curve(
    cap_percent: Sequence[float] = TABLE1_CAP_PERCENT,
    kpps: Sequence[float] = TABLE1_KPPS,
    offered_pps: float = TABLE1_OFFERED_PPS,
) -> CapacityCurve:
    """Fit a :class:`CapacityCurve` to measured (cap, rate) pairs by least squares on the relative error.

    Parameters
    ----------
    cap_percent : sequence of float
        Caps, percent of one CPU.
    kpps : sequence of float
        Achieved rates at those caps, kp/s, for a UDP flow offered at ``offered_pps``.
    offered_pps : float
        Offered rate of the measurements, packets/s.
    """
    from scipy.optimize import least_squares

    caps = np.asarray(cap_percent, dtype=float)
    y = np.asarray(kpps, dtype=float) * 1000.0
    if caps.shape != y.shape or caps.size < 2:
        raise PlantError("cap_percent and kpps must be sequences of equal length >= 2")
    if np.any(caps <= 0) or np.any(y <= 0) or np.any(y >= offered_pps):
        raise PlantError("caps and rates must be > 0 and rates below offered_pps")

    def resid(p: np.ndarray) -> np.ndarray:
        return _soft_min(np.full_like(caps, offered_pps), p[0] * caps, p[1]) / y - 1.0

    k0 = float(np.min(y / caps))
    r = least_squares(resid, x0=[k0, 4.0], bounds=([1e-9, 1.0], [np.inf, 50.0]))
    return CapacityCurve(float(r.x[0]), float(r.x[1]))


@dataclass(frozen=True)
class Traffic:
    """The traffic source of one VR.

    Parameters
    ----------
    kind : {"udp", "tcp"}
        UDP never backs off; TCP-like sources run AIMD on loss.
    rate_pps : float
        UDP: the constant offered rate.  TCP: the flow's maximum rate (packets/s).
    tcp_increase_pps_per_s : float
        TCP additive increase, packets/s gained per second without loss.
    tcp_decrease_factor : float
        TCP multiplicative decrease on a loss (0 < factor < 1; 0.7 is CUBIC's beta).
    tcp_initial_pps : float
        TCP sending rate at time 0.
    tcp_ack_work : float
        Dom0 work of the ACKs, in packet traversals per data packet forwarded
        (0.5: delayed ACKs, one per two data packets).
    tcp_loss_tolerance : float
        Fraction of a sub-step's packets that may be lost without the source backing off.
    """

    kind: Literal["udp", "tcp"] = "udp"
    rate_pps: float = TABLE1_OFFERED_PPS
    tcp_increase_pps_per_s: float = 10_000.0
    tcp_decrease_factor: float = 0.7
    tcp_initial_pps: float = 1_000.0
    tcp_ack_work: float = 0.5
    tcp_loss_tolerance: float = 0.002

    def __post_init__(self) -> None:
        if self.kind not in ("udp", "tcp"):
            raise PlantError(f"traffic kind must be 'udp' or 'tcp', got {self.kind!r}")
        if _finite("rate_pps", self.rate_pps) < 0:
            raise PlantError(f"rate_pps must be >= 0, got {self.rate_pps}")
        if _finite("tcp_increase_pps_per_s", self.tcp_increase_pps_per_s) <= 0:
            raise PlantError("tcp_increase_pps_per_s must be > 0")
        if not (0 < _finite("tcp_decrease_factor", self.tcp_decrease_factor) < 1):
            raise PlantError(f"tcp_decrease_factor must be within (0, 1), got {self.tcp_decrease_factor}")
        if _finite("tcp_initial_pps", self.tcp_initial_pps) < 0:
            raise PlantError("tcp_initial_pps must be >= 0")
        if _finite("tcp_ack_work", self.tcp_ack_work) < 0:
            raise PlantError("tcp_ack_work must be >= 0")
        if not (0 <= _finite("tcp_loss_tolerance", self.tcp_loss_tolerance) < 1):
            raise PlantError("tcp_loss_tolerance must be within [0, 1)")


def udp(rate_pps: float = TABLE1_OFFERED_PPS) -> Traffic:
    """A UDP source at a constant ``rate_pps`` (packets/s)."""
    return Traffic("udp", rate_pps)


def tcp(max_pps: float = 60_000.0, **kw: float) -> Traffic:
    """A TCP-like AIMD source whose rate never exceeds ``max_pps`` (packets/s)."""
    return Traffic("tcp", max_pps, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class VRConfig:
    """One virtual router.

    Parameters
    ----------
    traffic : Traffic
        Its source.
    speed_factor : float
        Hardware speed relative to the reference: scales packets/s per percent of CPU.
    hog_fraction : float
        Share of the VR's CPU taken by a CPU hog inside it, 0..1 (0.15 = section 7.1).
    tau_s : float
        Time constant of the achieved rate, seconds (0 = no lag).
    noise_rel : float
        Relative standard deviation of the forwarded rate averaged over 1 s.
    noise_drop_rel : float
        Extra relative standard deviation per unit of drop fraction (UDP packets the VR drops).
    initial_cap_percent : float
        Cap at time 0, percent of one CPU.
    dom0 : int
        Index of the Dom0 (in :attr:`PlantConfig.dom0s`) the VR sits behind.
    curve : CapacityCurve
        Cap -> capacity relation on the reference hardware.
    """

    traffic: Traffic = field(default_factory=Traffic)
    speed_factor: float = 1.0
    hog_fraction: float = 0.0
    tau_s: float = NOMINAL_TAU_S
    noise_rel: float = 0.01
    noise_drop_rel: float = 0.08
    initial_cap_percent: float = 100.0
    dom0: int = 0
    curve: CapacityCurve = PAPER_CURVE

    def __post_init__(self) -> None:
        if _finite("speed_factor", self.speed_factor) <= 0:
            raise PlantError(f"speed_factor must be > 0, got {self.speed_factor}")
        if not (0 <= _finite("hog_fraction", self.hog_fraction) < 1):
            raise PlantError(f"hog_fraction must be within [0, 1), got {self.hog_fraction}")
        if _finite("tau_s", self.tau_s) < 0:
            raise PlantError(f"tau_s must be >= 0 s, got {self.tau_s}")
        if _finite("noise_rel", self.noise_rel) < 0 or _finite("noise_drop_rel", self.noise_drop_rel) < 0:
            raise PlantError("noise_rel and noise_drop_rel must be >= 0")
        _check_cap_range("initial_cap_percent", self.initial_cap_percent)
        if isinstance(self.dom0, bool) or not isinstance(self.dom0, int) or self.dom0 < 0:
            raise PlantError(f"dom0 must be an index >= 0, got {self.dom0!r}")


@dataclass(frozen=True)
class Dom0Config:
    """One Dom0 (host privileged domain) shared by a group of VRs.

    Parameters
    ----------
    capacity_pps : float
        Packet traversals per second (a packet in and out of a VR) Dom0 can do.
    rx_work_fraction : float
        Share of a traversal spent delivering a packet to a VR (spent even if the VR drops it).
    sharing : {"fair", "proportional"}
        How an overloaded Dom0 splits its work: "fair" is round-robin between
        the VRs (max-min fair split of the work; what a VR does not use goes to
        the others), "proportional" delivers the same fraction of every
        source's packets (so the heavier sender keeps the larger share).
    limiter_work_fraction : float
        Share of a traversal spent on a packet an early-drop limiter drops before delivery
        (:meth:`Plant.set_limit`); at most ``rx_work_fraction`` (a limiter that cost more than
        delivering would be pointless).  The default, a third of the delivery's work, stands for
        a limiter on the vif: the packet still crosses the bridge, it skips the transmit into
        the VR and the VR's receive.
    """

    capacity_pps: float = 120_000.0
    rx_work_fraction: float = 0.3
    sharing: Literal["fair", "proportional"] = "fair"
    limiter_work_fraction: float = 0.1

    def __post_init__(self) -> None:
        if _finite("capacity_pps", self.capacity_pps) <= 0:
            raise PlantError(f"capacity_pps must be > 0, got {self.capacity_pps}")
        if not (0 < _finite("rx_work_fraction", self.rx_work_fraction) < 1):
            raise PlantError(f"rx_work_fraction must be within (0, 1), got {self.rx_work_fraction}")
        if self.sharing not in ("fair", "proportional"):
            raise PlantError(f"sharing must be 'fair' or 'proportional', got {self.sharing!r}")
        if not (0 <= _finite("limiter_work_fraction", self.limiter_work_fraction) <= self.rx_work_fraction):
            raise PlantError(f"limiter_work_fraction must be within [0, rx_work_fraction = {self.rx_work_fraction}], "
                             f"got {self.limiter_work_fraction}")


@dataclass(frozen=True)
class PlantConfig:
    """The whole plant: VRs, the Dom0s they sit behind, the sub-step and the seed.

    Parameters
    ----------
    vrs : tuple of VRConfig
    dom0s : tuple of Dom0Config
        Independent Dom0s; each VR names one by index.  Several Dom0s with one VR
        each simulate independent hosts side by side (vectorised experiments).
    dt_s : float
        Sub-step, seconds.
    cap_resolution_percent : float
        Applied caps are rounded to this step (1.0 = Xen's integer percents); 0 = exact.
    cap_max_percent : float
        Largest cap accepted (100 = one CPU).
    seed : int
        Seed of the noise generator.
    """

    vrs: tuple[VRConfig, ...]
    dom0s: tuple[Dom0Config, ...] = (Dom0Config(),)
    dt_s: float = 0.1
    cap_resolution_percent: float = 0.0
    cap_max_percent: float = 100.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.vrs:
            raise PlantError("a plant needs at least one VR")
        if not self.dom0s:
            raise PlantError("a plant needs at least one Dom0")
        for i, v in enumerate(self.vrs):
            if not isinstance(v, VRConfig):
                raise PlantError(f"vrs[{i}] must be a VRConfig")
            if v.dom0 >= len(self.dom0s):
                raise PlantError(f"vrs[{i}].dom0 = {v.dom0} but there are only {len(self.dom0s)} Dom0s")
        if not (0 < _finite("dt_s", self.dt_s) <= 1.0):
            raise PlantError(f"dt_s must be within (0, 1] s, got {self.dt_s}")
        if not (0 <= _finite("cap_resolution_percent", self.cap_resolution_percent) <= 10):
            raise PlantError("cap_resolution_percent must be within 0..10")
        if not (1 <= _finite("cap_max_percent", self.cap_max_percent) <= 6400):
            raise PlantError("cap_max_percent must be within 1..6400")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise PlantError(f"seed must be an int, got {self.seed!r}")


def _check_cap_range(name: str, cap: float, cap_max: float = 6400.0) -> float:
    c = _finite(name, cap)
    if c < 1.0 or c > cap_max:
        # In Xen a cap of 0 means UNLIMITED: a cap below 1 is always a mistake here.
        raise PlantError(f"{name} must be within 1..{cap_max:g} percent of one CPU, got {c}")
    return c


@dataclass(frozen=True)
class Counters:
    """Cumulative packet counters per VR (float packets; floor them for integer counters).

    Attributes
    ----------
    t_s : float
        Simulated time, seconds.
    source_packets : numpy.ndarray
        Packets sent by each VR's source.
    to_vr_packets : numpy.ndarray
        Packets Dom0 delivered to each VR (host-side TX toward the VR).
    forwarded_packets : numpy.ndarray
        Packets each VR forwarded (host-side RX of the VR's interfaces).
    forwarded_clean_packets : numpy.ndarray
        The same without the noise: what the VR's achieved rate would have
        forwarded (for metrics that judge the controller, not the jitter).
    dom0_work : numpy.ndarray
        Work done by each Dom0, packet traversals.
    limiter_dropped_packets : numpy.ndarray
        Packets each VR's early-drop limiter dropped before delivery (0 without a limiter).
    """

    t_s: float
    source_packets: np.ndarray
    to_vr_packets: np.ndarray
    forwarded_packets: np.ndarray
    forwarded_clean_packets: np.ndarray
    dom0_work: np.ndarray
    limiter_dropped_packets: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True)
class Measurement:
    """Mean rates per VR over a period (packets/s)."""

    t_s: float
    period_s: float
    forwarded_pps: np.ndarray
    forwarded_clean_pps: np.ndarray
    to_vr_pps: np.ndarray
    source_pps: np.ndarray
    dom0_utilisation: np.ndarray


class Plant:
    """The stepped simulation of :class:`PlantConfig` (see the module docstring).

    Inputs between steps: :meth:`set_cap`, :meth:`set_caps`, :meth:`set_hog`,
    :meth:`set_offered`.  Outputs: :meth:`counters`, :attr:`rate_pps`, and
    :meth:`measure` (advance and return mean rates).
    """

    def __init__(self, config: PlantConfig):
        self.config = config
        vrs = config.vrs
        self.n = len(vrs)
        self.dt_s = config.dt_s
        self._rng = np.random.Generator(np.random.PCG64(config.seed))
        f = lambda attr: np.array([getattr(v, attr) for v in vrs], dtype=float)  # noqa: E731
        self._k = np.array([v.curve.pps_per_cap_percent for v in vrs], dtype=float)
        self._knee = np.array([v.curve.knee_sharpness for v in vrs], dtype=float)
        self._speed = f("speed_factor")
        self._hog = f("hog_fraction")
        tau = f("tau_s")
        self._alpha = np.where(tau > 0, 1.0 - np.exp(-self.dt_s / np.where(tau > 0, tau, 1.0)), 1.0)
        # Share of the starting distance still missing on average over a sub-step (exact integral
        # of the first-order response), so counters do not depend on the sub-step's length.
        self._avg_missing = np.where(tau > 0, np.where(tau > 0, tau, 1.0) / self.dt_s * self._alpha, 0.0)
        self._noise = f("noise_rel")
        self._noise_drop = f("noise_drop_rel")
        self._is_tcp = np.array([v.traffic.kind == "tcp" for v in vrs])
        self._rate_cfg = np.array([v.traffic.rate_pps for v in vrs], dtype=float)
        self._tcp_inc = np.array([v.traffic.tcp_increase_pps_per_s for v in vrs], dtype=float)
        self._tcp_dec = np.array([v.traffic.tcp_decrease_factor for v in vrs], dtype=float)
        self._tcp_tol = np.array([v.traffic.tcp_loss_tolerance for v in vrs], dtype=float)
        self._ack = np.where(self._is_tcp, [v.traffic.tcp_ack_work for v in vrs], 0.0)
        self._group = np.array([v.dom0 for v in vrs], dtype=int)
        self._n_groups = len(config.dom0s)
        self._dom0_cap = np.array([d.capacity_pps for d in config.dom0s], dtype=float)
        rxw = np.array([d.rx_work_fraction for d in config.dom0s], dtype=float)
        self._fair_group = np.array([d.sharing == "fair" for d in config.dom0s])
        self._rxw = rxw[self._group]
        self._txw = 1.0 - self._rxw
        self._limw = np.array([d.limiter_work_fraction for d in config.dom0s], dtype=float)[self._group]
        self._limit = np.full(self.n, np.inf)  # early drop: packets/s a VR's limiter lets through
        # State.
        self.t_s = 0.0
        self.steps = 0
        self._cap = np.array([self._quantise(v.initial_cap_percent) for v in vrs], dtype=float)
        self._send = np.where(self._is_tcp, [min(v.traffic.tcp_initial_pps, v.traffic.rate_pps) for v in vrs], self._rate_cfg)
        self._y = np.zeros(self.n)
        self._src_pkts = np.zeros(self.n)
        self._to_vr_pkts = np.zeros(self.n)
        self._fwd_pkts = np.zeros(self.n)
        self._fwd_clean = np.zeros(self.n)
        self._dom0_work = np.zeros(self._n_groups)
        self._lim_drop_pkts = np.zeros(self.n)
        self._cpu_s = np.zeros(self.n)
        self._last_util = np.zeros(self._n_groups)
        self._last_share = np.ones(self._n_groups)

    # ----- inputs -------------------------------------------------------------------------
    def _quantise(self, cap: float) -> float:
        r = self.config.cap_resolution_percent
        if r > 0:
            cap = round(cap / r) * r
        return min(self.config.cap_max_percent, max(1.0, cap))

    def _index(self, vr: int) -> int:
        if isinstance(vr, bool) or not isinstance(vr, (int, np.integer)) or not (0 <= vr < self.n):
            raise PlantError(f"VR index must be within 0..{self.n - 1}, got {vr!r}")
        return int(vr)

    def set_cap(self, vr: int, cap_percent: float) -> float:
        """Set a VR's cap (percent of one CPU, 1..cap_max); returns the cap applied after rounding."""
        i = self._index(vr)
        c = _check_cap_range(f"cap_percent of VR {i}", cap_percent, self.config.cap_max_percent)
        self._cap[i] = self._quantise(c)
        return float(self._cap[i])

    def set_caps(self, caps_percent: Sequence[float] | np.ndarray) -> np.ndarray:
        """Set every VR's cap at once (all are checked before any is changed)."""
        caps = np.asarray(caps_percent, dtype=float)
        if caps.shape != (self.n,):
            raise PlantError(f"need {self.n} caps, got shape {caps.shape}")
        bad = ~np.isfinite(caps) | (caps < 1.0) | (caps > self.config.cap_max_percent)
        if np.any(bad):
            i = int(np.argmax(bad))
            raise PlantError(
                f"cap_percent of VR {i} must be within 1..{self.config.cap_max_percent:g} percent of one CPU, got {caps[i]}"
            )
        r = self.config.cap_resolution_percent
        if r > 0:
            caps = np.round(caps / r) * r
        self._cap = np.clip(caps, 1.0, self.config.cap_max_percent)
        return self._cap.copy()

    def set_hog(self, vr: int, hog_fraction: float) -> None:
        """Start, change or stop (0) a CPU hog taking ``hog_fraction`` of a VR's CPU."""
        i = self._index(vr)
        h = _finite("hog_fraction", hog_fraction)
        if not (0 <= h < 1):
            raise PlantError(f"hog_fraction must be within [0, 1), got {h}")
        self._hog[i] = h

    def set_offered(self, vr: int, rate_pps: float) -> None:
        """Change a UDP source's rate, or a TCP source's maximum rate (packets/s)."""
        i = self._index(vr)
        r = _finite("rate_pps", rate_pps)
        if r < 0:
            raise PlantError(f"rate_pps must be >= 0, got {r}")
        self._rate_cfg[i] = r
        if not self._is_tcp[i]:
            self._send[i] = r
        else:
            self._send[i] = min(self._send[i], r)

    def set_limit(self, vr: int, rate_pps: float | None) -> None:
        """Put an early-drop limiter on a VR (what the host hands it at most, packets/s), change it,
        or take it away (None)."""
        i = self._index(vr)
        if rate_pps is None:
            self._limit[i] = np.inf
            return
        r = _finite("rate_pps", rate_pps)
        if r <= 0:
            raise PlantError(f"limit rate_pps must be > 0, got {r}")
        self._limit[i] = r

    @property
    def limits_pps(self) -> np.ndarray:
        """Each VR's limit now, packets/s (inf: no limiter)."""
        return self._limit.copy()

    # ----- outputs ------------------------------------------------------------------------
    @property
    def caps_percent(self) -> np.ndarray:
        """Caps applied now, percent of one CPU."""
        return self._cap.copy()

    @property
    def hog_fractions(self) -> np.ndarray:
        return self._hog.copy()

    @property
    def rate_pps(self) -> np.ndarray:
        """Achieved forwarding rate of each VR now (noise-free), packets/s."""
        return self._y.copy()

    @property
    def sending_pps(self) -> np.ndarray:
        """Rate each source sends at now, packets/s."""
        return self._send.copy()

    def counters(self) -> Counters:
        """Cumulative packet counters (copies)."""
        return Counters(
            self.t_s, self._src_pkts.copy(), self._to_vr_pkts.copy(), self._fwd_pkts.copy(), self._fwd_clean.copy(),
            self._dom0_work.copy(), self._lim_drop_pkts.copy()
        )

    def capacity_pps(self) -> np.ndarray:
        """Each VR's packet budget at its current cap, speed and hog (pps)."""
        return self._k * self._speed * self._cap * (1.0 - self._hog)

    def cpu_seconds(self) -> np.ndarray:
        """Cumulative CPU time each VR has used, CPU-seconds (one CPU busy for 1 s = 1.0; a copy).

        Derived from the capacity curve (item 7 of the module docstring): per sub-step a VR uses
        ``min(cap, hog_fraction * cap + lam / (k * speed_factor))`` percent of one CPU, ``lam``
        the packets/s delivered to it.  Never more than its cap, so over a period the mean CPU
        share is at most ``cap / 100``; it equals that when the cap binds.
        """
        return self._cpu_s.copy()

    # ----- dynamics -----------------------------------------------------------------------
    def _forward_target(self, lam: np.ndarray, c: np.ndarray) -> np.ndarray:
        soft = _soft_min(lam, c, self._knee)
        return np.where(self._is_tcp, np.minimum(lam, c), soft)

    def _work(self, share_vr: np.ndarray, lam_src: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-VR Dom0 work (traversals/s), delivered rate and forwarding target for a delivered share
        (of what passes the VR's early-drop limiter; what it drops costs ``limiter_work_fraction``)."""
        passed = np.minimum(lam_src, self._limit)
        lam = passed * share_vr
        y = self._forward_target(lam, c)
        w = self._rxw * lam + (self._txw + self._ack) * y + self._limw * (lam_src - passed)
        return w, lam, y

    def _group_sum(self, w: np.ndarray) -> np.ndarray:
        return np.bincount(self._group, weights=w, minlength=self._n_groups)

    def _dom0_shares(self, lam_src: np.ndarray, c: np.ndarray, demand: np.ndarray, over: np.ndarray) -> np.ndarray:
        """Share of each source's packets Dom0 delivers, for the overloaded groups ``over``."""
        cap = self._dom0_cap
        ones = np.ones(self.n)
        prop = over & ~self._fair_group
        if np.any(prop):
            # Proportional: one delivered fraction f per group, the largest whose work fits.
            lo, hi = np.zeros(self._n_groups), np.ones(self._n_groups)
            for _ in range(30):
                mid = 0.5 * (lo + hi)
                w, _, _ = self._work(mid[self._group], lam_src, c)
                fits = self._group_sum(w) <= cap
                lo, hi = np.where(fits, mid, lo), np.where(fits, hi, mid)
            f_vr = np.where(prop[self._group], lo[self._group], 1.0)
        else:
            f_vr = ones
        fair = over & self._fair_group
        if not np.any(fair):
            return f_vr
        # Fair (round-robin) sharing: max-min fair split of Dom0's work between the VRs of a group
        # (water-filling level L: sum(min(demand, L)) = capacity), then each VR gets the largest
        # share of its source's packets whose work fits its budget.
        lo = np.zeros(self._n_groups)
        hi = self._group_sum(demand)
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            fits = self._group_sum(np.minimum(demand, mid[self._group])) <= cap
            lo, hi = np.where(fits, mid, lo), np.where(fits, hi, mid)
        in_fair = fair[self._group]
        budget = np.where(in_fair, np.minimum(demand, lo[self._group]), np.inf)
        slo, shi = np.zeros(self.n), np.ones(self.n)
        for _ in range(30):
            mid = 0.5 * (slo + shi)
            w, _, _ = self._work(mid, lam_src, c)
            fits = w <= budget
            slo, shi = np.where(fits, mid, slo), np.where(fits, shi, mid)
        return np.where(in_fair, np.where(demand <= budget, 1.0, slo), f_vr)

    def step(self) -> None:
        """Advance the plant by one sub-step of ``dt_s`` seconds."""
        dt = self.dt_s
        c = self.capacity_pps()
        lam_src = self._send.copy()
        w, lam, y_tgt = self._work(np.ones(self.n), lam_src, c)
        work = self._group_sum(w)
        share = np.ones(self._n_groups)
        over = work > self._dom0_cap
        if np.any(over):
            share_vr = self._dom0_shares(lam_src, c, w, over)
            w, lam, y_tgt = self._work(share_vr, lam_src, c)
            work = self._group_sum(w)
            share = np.where(over, self._group_sum(lam) / np.maximum(self._group_sum(lam_src), 1e-300), 1.0)
        # First-order lag of the achieved rate: exact over the sub-step.
        y_start = self._y
        y_mean = y_tgt + self._avg_missing * (y_start - y_tgt)
        self._y = y_start + self._alpha * (y_tgt - y_start)
        # Noise (std for a 1 s average -> per sub-step), grows with the drop fraction.
        with np.errstate(divide="ignore", invalid="ignore"):
            drop = np.where(lam > 0, np.clip(1.0 - y_tgt / lam, 0.0, 1.0), 0.0)
        sigma = (self._noise + self._noise_drop * drop) * math.sqrt(1.0 / dt)
        eps = self._rng.standard_normal(self.n)
        fwd = np.clip(y_mean * dt * (1.0 + sigma * eps), 0.0, lam * dt)
        # TCP AIMD on loss (Dom0 cut or VR overflow).
        if np.any(self._is_tcp):
            with np.errstate(divide="ignore", invalid="ignore"):
                loss = np.where(lam_src > 0, 1.0 - y_tgt / lam_src, 0.0)
            lost = loss > self._tcp_tol
            new_send = np.where(lost, self._send * self._tcp_dec, self._send + self._tcp_inc * dt)
            new_send = np.clip(new_send, 1.0, self._rate_cfg)
            self._send = np.where(self._is_tcp, new_send, self._send)
        # Counters.
        self._src_pkts += lam_src * dt
        self._to_vr_pkts += lam * dt
        self._fwd_pkts += fwd
        self._fwd_clean += np.minimum(y_mean, lam) * dt
        self._dom0_work += work * dt
        self._lim_drop_pkts += (lam_src - np.minimum(lam_src, self._limit)) * dt
        # CPU use (item 7): the delivered packets' work plus the hog's share, at most the cap.
        cpu_pct = np.minimum(self._cap, self._hog * self._cap + lam / (self._k * self._speed))
        self._cpu_s += cpu_pct * (dt / 100.0)
        self._last_util = work / self._dom0_cap
        self._last_share = share
        self.steps += 1
        self.t_s = self.steps * dt

    def advance(self, duration_s: float) -> None:
        """Advance by ``duration_s`` (rounded to whole sub-steps)."""
        d = _finite("duration_s", duration_s)
        if d < 0:
            raise PlantError(f"duration_s must be >= 0, got {d}")
        for _ in range(int(round(d / self.dt_s))):
            self.step()

    def measure(self, period_s: float = 1.0) -> Measurement:
        """Advance by ``period_s`` and return the mean rates over it (what a meter would report)."""
        p = _finite("period_s", period_s)
        k = int(round(p / self.dt_s))
        if k < 1:
            raise PlantError(f"period_s must be at least one sub-step ({self.dt_s} s), got {p}")
        c0 = self.counters()
        util = np.zeros(self._n_groups)
        for _ in range(k):
            self.step()
            util += self._last_util
        c1 = self.counters()
        span = k * self.dt_s
        return Measurement(
            t_s=self.t_s,
            period_s=span,
            forwarded_pps=(c1.forwarded_packets - c0.forwarded_packets) / span,
            forwarded_clean_pps=(c1.forwarded_clean_packets - c0.forwarded_clean_packets) / span,
            to_vr_pps=(c1.to_vr_packets - c0.to_vr_packets) / span,
            source_pps=(c1.source_packets - c0.source_packets) / span,
            dom0_utilisation=util / k,
        )
