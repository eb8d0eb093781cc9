"""The simulated host as a training target: ``xtc train collect --backend sim``.

The training tool (:mod:`xtc.training`) is part of the product and never imports the testbed; its
command line imports this module only when ``--backend sim`` is asked for.  Here the sweep runs on
:class:`~xtc_lab.sim.host.SimHost` (the plant behind the daemon's own host interface) with one VR,
on the host's own :class:`~xtc_lab.sim.host.SimClock`: the sweep's ``sleep`` advances that clock,
so a sweep of minutes of simulated time takes a fraction of a second.  Unlike on a real host the
offered rate is set, as the plant's source rate (:class:`SimOffered`).
"""

from __future__ import annotations

from xtc_lab.sim.host import SimVr
from xtc.training.hosts import SweepTarget
from xtc.training.sweep import TrainingError

from xtc_lab.sim.host import SimClock, SimHost

__all__ = ["SimOffered", "sweep_target"]


class SimOffered:
    """Sets the offered rate of a simulated VR's source (from the host's time now on)."""

    def __init__(self, host: SimHost) -> None:
        self.host = host

    def set_offered_pps(self, vr: str, offered_pps: float) -> None:
        self.host.advance()  # the time already passed ran at the previous rate
        self.host.plant.set_offered(self.host.vr_names.index(vr), offered_pps)


def sweep_target(vr: str = "vr1", seed: int = 1, traffic: str = "udp", offered_pps: float = 100_000.0) -> SweepTarget:
    """A simulated host with one VR on its own clock (no root needed).

    Parameters
    ----------
    vr : str
        The VR's name.
    seed : int
        Seed of the plant's noise.
    traffic : {"udp", "tcp"}
        Kind of the simulated traffic.
    offered_pps : float
        Offered rate at the start, packets/s (the sweep sets its own).

    Returns
    -------
    SweepTarget
        With the sweep's default ``hardware`` and ``traffic`` descriptions and the seed as metadata.
    """
    if traffic not in ("udp", "tcp"):
        raise TrainingError(f"--traffic must be udp or tcp, got {traffic!r}")
    clock = SimClock()
    host = SimHost((SimVr(name=vr, offered_pps=offered_pps, traffic=traffic),), seed=seed, hypervisor_path=None,
                   clock=clock)
    meta = {"hardware": "simulated plant (xtc_lab.sim.plant, calibrated to the XTC paper's Table 1)",
            "traffic": f"simulated {traffic.upper()}", "seed": str(seed)}
    return SweepTarget(host, vr, meta, offered=SimOffered(host), clock=clock, sleep=clock.advance)
