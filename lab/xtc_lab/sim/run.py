"""The product's closed loop on the simulated plant: the one driver of the simulator, the demo and the benchmark.

:func:`run_loop` builds :class:`xtc.daemon.loop.ControlLoop` over a
:class:`~xtc.daemon.core.DaemonCore` and a :class:`~xtc_lab.sim.host.SimHost` with a
:class:`~xtc_lab.sim.host.SimClock`, and steps it once per control period::

    clock.advance(period_s); report = loop.period(clock())

Setpoints reach the loop as manager requests (:meth:`ControlLoop.handle`): ``activate`` when a VR
gets a setpoint, ``setpoint`` when it changes, ``deactivate`` when it loses it and at the end.
So the simulated runs exercise what the daemon runs: the meter reading the host's counters once
per period, the core, the controllers, the cap in force reported back to them (with
``cap_step_percent=1`` the caps are Xen's whole percents and the controllers dither).

The trace holds what the meter measured (``forwarded_pps``, ``offered_pps``) and, from the plant
itself, the noise-free rate (``clean_pps``, for metrics that judge the loop rather than the
jitter), the sources' rates and the Dom0 utilisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from xtc.control import Controller
from xtc.daemon.api import Request
from xtc.daemon.core import DaemonCore
from xtc.daemon.limiter_state import EarlyDrop
from xtc.daemon.loop import ControlLoop

from .host import SimClock, SimHost
from .plant import Plant, PlantConfig, PlantError

__all__ = ["LoopTrace", "run_loop", "SetpointSchedule"]

#: Time (s since control began) at the end of a period -> setpoint per VR, packets/s (NaN: not controlled).
SetpointSchedule = Callable[[float], Sequence[float] | np.ndarray]


@dataclass(frozen=True)
class LoopTrace:
    """What happened, one row per control period (``K`` periods, ``N`` VRs, ``G`` Dom0s).

    Attributes
    ----------
    vrs : tuple of str
        The VRs' names (columns).
    t_s : numpy.ndarray, shape (K,)
        End of each period, seconds since control began.
    setpoint_pps : numpy.ndarray, shape (K, N)
        Setpoint the controller was stepped with at the end of the period, packets/s (NaN: the
        VR had no XTC instance).
    forwarded_pps : numpy.ndarray, shape (K, N)
        Rate the VR forwarded over the period as the daemon's meter read it, packets/s.
    offered_pps : numpy.ndarray, shape (K, N)
        Rate offered to the VR over the period as the meter read it, packets/s.
    clean_pps : numpy.ndarray, shape (K, N)
        The forwarded rate without the plant's noise (the VR's achieved rate), packets/s.
    source_pps : numpy.ndarray, shape (K, N)
        Rate each VR's source sent over the period, packets/s.
    commanded_cap_percent : numpy.ndarray, shape (K, N)
        The command last written for the VR before the period, percent of one CPU (NaN: none).
    cap_percent : numpy.ndarray, shape (K, N)
        Cap in force during the period, percent of one CPU.
    dom0_utilisation : numpy.ndarray, shape (K, G)
        Work asked of each Dom0 over the period over its capacity (can exceed 1: the excess is cut).
    cap_writes : int
        Caps the host wrote (a cap equal to the one in force is not written).
    delivered_pps : numpy.ndarray, shape (K, N)
        Rate the host delivered to each VR over the period (from the plant), packets/s.
    limiter_dropped_pps : numpy.ndarray, shape (K, N)
        Rate each VR's early-drop limiter dropped before delivery over the period, packets/s.
    """

    vrs: tuple[str, ...]
    t_s: np.ndarray
    setpoint_pps: np.ndarray
    forwarded_pps: np.ndarray
    offered_pps: np.ndarray
    clean_pps: np.ndarray
    source_pps: np.ndarray
    commanded_cap_percent: np.ndarray
    cap_percent: np.ndarray
    dom0_utilisation: np.ndarray
    cap_writes: int
    delivered_pps: np.ndarray | None = None
    limiter_dropped_pps: np.ndarray | None = None


def _schedule(setpoints: SetpointSchedule | Sequence[float | None] | np.ndarray, n: int) -> SetpointSchedule:
    if callable(setpoints):
        return setpoints
    fixed = np.array([np.nan if s is None else s for s in setpoints], dtype=float)
    if fixed.shape != (n,):
        raise PlantError(f"need one setpoint (or None) per VR ({n}), got {len(fixed)}")
    return lambda _t: fixed


def run_loop(
    plant: PlantConfig,
    controller: Callable[[], Controller],
    setpoints: SetpointSchedule | Sequence[float | None] | np.ndarray,
    duration_s: float,
    *,
    period_s: float = 1.0,
    cap_step_percent: float | None = None,
    warmup_s: float = 0.0,
    names: tuple[str, ...] | None = None,
    events: Callable[[Plant, float], None] | None = None,
    progress: Callable[[float], None] | None = None,
    early_drop: Sequence[bool] | None = None,
) -> LoopTrace:
    """Run the daemon's control loop on a simulated plant for ``duration_s`` seconds.

    Parameters
    ----------
    plant : PlantConfig
        The plant (its VRs start at their configured caps; ``cap_resolution_percent`` should be
        0: the host quantises, see ``cap_step_percent``).
    controller : callable
        Returns a fresh controller for one VR (the daemon core's controller factory).
    setpoints : callable or sequence
        Setpoint per VR in packets/s (None or NaN: no XTC instance), fixed or a function of the
        time at the end of each period (seconds since control began).  A VR is activated when it
        first gets a setpoint, given the new setpoint when it changes, deactivated when it loses
        it; every instance is deactivated at the end (its original cap restored).
    duration_s : float
        Simulated time under control, seconds (whole control periods).
    period_s : float
        Control period, seconds (a whole number of the plant's sub-steps).
    cap_step_percent : float, optional
        Quantum of the caps the host puts in force (1 = Xen's whole percents); None = exact.
    warmup_s : float
        Simulated seconds the plant runs uncontrolled before control begins.
    names : tuple of str, optional
        The VRs' names (default ``vr1``, ``vr2``, ...).
    events : callable, optional
        ``events(plant, t_s)`` at the start of every period, ``t_s`` seconds since control
        began (disturbances: hogs, offered rates).
    progress : callable, optional
        Called with the fraction done after every period.
    early_drop : sequence of bool, optional
        Per VR: its activation asks for early drop (issue 48), the daemon's own
        :class:`~xtc.daemon.limiter_state.EarlyDrop` on the plant's limiter
        (:class:`~xtc_lab.sim.host.SimLimiter`).  None: no early drop.

    Returns
    -------
    LoopTrace
    """
    if not (period_s > 0) or not np.isfinite(period_s):
        raise PlantError(f"period_s must be > 0, got {period_s}")
    periods = int(round(duration_s / period_s))
    if periods < 1:
        raise PlantError(f"duration_s must cover at least one control period, got {duration_s}")
    if not (warmup_s >= 0):
        raise PlantError(f"warmup_s must be >= 0, got {warmup_s}")
    n, g = len(plant.vrs), len(plant.dom0s)
    schedule = _schedule(setpoints, n)
    clock = SimClock()
    host = SimHost.for_plant(plant, names=names, clock=clock, cap_step_percent=cap_step_percent)
    core = DaemonCore(controller, max_setpoint_pps=1e9)
    loop = ControlLoop(core, host)
    if early_drop is not None:
        if len(early_drop) != n:
            raise PlantError(f"need one early_drop flag per VR ({n}), got {len(early_drop)}")
        loop.early_drop = EarlyDrop(host.limiter())
    vrs = tuple(host.vr_names)
    sim = host.plant
    dom0_capacity = np.array([d.capacity_pps for d in plant.dom0s], dtype=float)

    host.advance()  # the host's clock starts now
    clock.advance(warmup_s)
    t0_s = clock()
    loop.period(t0_s)  # discovery and the meter's first reading
    current = np.full(n, np.nan)

    def request(now_s: float, wanted: np.ndarray) -> None:
        for i, vr in enumerate(vrs):
            new, old = wanted[i], current[i]
            if np.isnan(new) and np.isnan(old):
                continue
            if np.isnan(old):
                loop.handle(Request("activate", vr, float(new),
                                    early_drop=None if early_drop is None else bool(early_drop[i])), now_s)
            elif np.isnan(new):
                loop.handle(Request("deactivate", vr), now_s)
            elif new != old:
                loop.handle(Request("setpoint", vr, float(new)), now_s)
            current[i] = new

    shape = (periods, n)
    t = np.zeros(periods)
    sp, fwd, off = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    clean, src = np.zeros(shape), np.zeros(shape)
    cmd, caps = np.full(shape, np.nan), np.zeros(shape)
    util = np.zeros((periods, g))
    delivered, lim_drop = np.zeros(shape), np.zeros(shape)
    for k in range(periods):
        start_s = clock()
        if events is not None:
            events(sim, start_s - t0_s)
        wanted = np.asarray(schedule((k + 1) * period_s), dtype=float)
        if wanted.shape != (n,):
            raise PlantError(f"the schedule must give one setpoint per VR ({n}), got shape {wanted.shape}")
        request(start_s, wanted)
        for i, vr in enumerate(vrs):
            c = host.caps[vr]
            caps[k, i] = 100.0 if c is None else c
            inst = core.instances.get(vr)
            if inst is not None and inst.applied_cap_percent is not None:
                cmd[k, i] = inst.applied_cap_percent
        c0 = sim.counters()
        report = loop.period(clock.advance(period_s))
        c1 = sim.counters()
        t[k] = report.now_s - t0_s
        sp[k] = current
        for i, vr in enumerate(vrs):
            r = report.readings.get(vr)
            if r is not None and r.forwarded_pps is not None:
                fwd[k, i] = r.forwarded_pps
                off[k, i] = r.offered_pps
        span = c1.t_s - c0.t_s
        clean[k] = (c1.forwarded_clean_packets - c0.forwarded_clean_packets) / span
        src[k] = (c1.source_packets - c0.source_packets) / span
        util[k] = (c1.dom0_work - c0.dom0_work) / span / dom0_capacity
        delivered[k] = (c1.to_vr_packets - c0.to_vr_packets) / span
        lim_drop[k] = (c1.limiter_dropped_packets - c0.limiter_dropped_packets) / span
        if progress is not None:
            progress((k + 1) / periods)
    request(clock(), np.full(n, np.nan))
    return LoopTrace(vrs, t, sp, fwd, off, clean, src, cmd, caps, util, host.cap_writes(), delivered, lim_drop)

