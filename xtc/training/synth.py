"""Sweeps generated from a log-cap model: known ground truth for tests and notebooks.

:func:`model_sweep` runs the model's own dynamics through a cap sweep::

    y(k+1) = ybar + a (y(k) - ybar) + b (log10(cap_k) - ubar) + e(k),   e ~ N(0, noise_kpps^2)

with the forwarded rate clipped to ``0..offered`` (a VR cannot forward more than it
is offered, which produces the plateau above the cap threshold).  The noise enters
the equation (an ARX model), which is the case where least squares is unbiased.
Everything is seeded; no clock is read.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from xtc.models import LogCapModel
from xtc.training.sweep import SweepSample

__all__ = ["model_sweep"]


def model_sweep(
    model: LogCapModel,
    caps_percent: Sequence[float],
    offered_pps: float = 100_000.0,
    samples_per_cap: int = 10,
    settle_samples: int = 2,
    noise_kpps: float = 0.5,
    seed: int = 0,
    start_time_s: float = 0.0,
) -> list[SweepSample]:
    """Samples of a sweep of a plant that follows ``model`` exactly (plus seeded noise).

    Parameters
    ----------
    model : LogCapModel
        The plant: ``a``, ``b`` (kp/s per decade of cap), ``ybar`` (kp/s), ``ubar`` and the period (s).
    caps_percent : sequence of float
        Caps to visit, in order, percent of one CPU.
    offered_pps : float
        Offered rate, packets/s; the forwarded rate is clipped to it.
    samples_per_cap : int
        Settled samples per cap.
    settle_samples : int
        Samples flagged ``settling`` taken right after each cap change.
    noise_kpps : float
        Standard deviation of the equation noise, kp/s.
    seed : int
        Seed of the noise generator.
    start_time_s : float
        ``time_s`` origin.

    Returns
    -------
    list of SweepSample
    """
    if samples_per_cap < 1 or settle_samples < 0:
        raise ValueError("samples_per_cap must be >= 1 and settle_samples >= 0")
    rng = np.random.default_rng(seed)
    offered_kpps = offered_pps / 1e3
    period = model.period_s
    # Start settled at the first cap.
    y = min(max(model.steady_state_kpps(caps_percent[0]), 0.0), offered_kpps)
    out: list[SweepSample] = []
    t = start_time_s
    for cap in caps_percent:
        u = math.log10(cap) - model.ubar_log10_cap
        for i in range(settle_samples + samples_per_cap):
            y = model.ybar_kpps + model.a * (y - model.ybar_kpps) + model.b_kpps_per_decade * u
            y += float(rng.normal(0.0, noise_kpps)) if noise_kpps > 0 else 0.0
            y = min(max(y, 0.0), offered_kpps)
            t += period
            out.append(SweepSample(offered_pps, float(cap), i, y * 1e3, period, i < settle_samples, t))
    return out
