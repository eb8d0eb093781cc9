"""The services' shared chassis: what every long-running XTC service (the daemon, the policer, the
XCo controller and agent) needs from its supervisor, in one place, below all of them (it imports no
service; the contracts in .importlinter say so).

- :mod:`xtc.service.notify`: systemd's readiness and watchdog protocol;
- :mod:`xtc.service.logs`: structured logs, with journald-aware levels;
- :mod:`xtc.service.state`: state files (atomic writes, the state directory's lock);
- :mod:`xtc.service.signals`: signal flags with faulthandler's stacks for a service that does not stop;
- :mod:`xtc.service.metrics`: the metrics every service exports (process, build info);
- :mod:`xtc.service.curve`: CURVE key files (ZeroMQ); :mod:`xtc.service.keys`: shared (HMAC) key files;
- :mod:`xtc.service.cli`: the command-line conventions (docs/reference/cli-conventions.md);
- :mod:`xtc.service.commands`: the registry of the `xtc` command's parts (extras, the testbed's commands);
- :mod:`xtc.service.asgi`: the ASGI server's glue.
"""
