"""The host daemon: the closed loop of every XTC instance on one host, its manager API and its metrics.

The loop (:mod:`~xtc.daemon.loop`) reads the VRs' counters and writes their caps through one
:class:`~xtc.host.base.Host`; its decisions are pure (:mod:`~xtc.daemon.core`, :mod:`~xtc.daemon.instances`,
:mod:`~xtc.daemon.meter`); :mod:`~xtc.daemon.service` runs it in real time behind the manager API
(:mod:`~xtc.daemon.api`).
"""
