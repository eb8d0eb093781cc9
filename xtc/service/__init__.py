"""The services' shared chassis: what every long-running XTC service (the daemon, the policer, the
XCo controller and agent) needs from its supervisor, in one place.  :mod:`xtc.service.notify`:
systemd's readiness and watchdog protocol."""
