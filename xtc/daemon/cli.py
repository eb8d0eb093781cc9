"""Subcommands ``xtc daemon``, ``xtc ctl`` and ``xtc check-config``."""

from __future__ import annotations

import argparse
import json
import sys

from xtc.service.cli import CHECK_INVALID, CHECK_USAGE, CHECK_VALID, load_or_report, parse_setpoint, readable_or_report
from xtc.service.curve import CurveError, check_server_files, load_public, load_secret, server_public_key, z85_key

__all__ = ["register"]

DEFAULT_ENDPOINT = "ipc:///run/xtc/manager.sock"  # config.DEFAULT_ENDPOINT (not imported: --help stays light)
DEFAULT_PUB_ENDPOINT = "ipc:///run/xtc/samples.sock"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("daemon", help="run the XTC daemon (foreground; systemd supervises it)")
    p.add_argument("--config", "-c", required=True, help="TOML configuration file")
    p.set_defaults(func=_cmd_daemon)

    p = subparsers.add_parser("check-config", help="validate a daemon configuration file without starting")
    p.add_argument("file", help="TOML configuration file")
    p.add_argument("--json", "--show", dest="json", action="store_true",
                   help="print the validated (effective) configuration as JSON (--show: the old name)")
    p.set_defaults(func=_cmd_check_config)

    p = subparsers.add_parser("ctl", help="talk to a running XTC daemon")
    p.add_argument("--endpoint", "-e", default=None,
                   help=f"manager endpoint (default: from --config, else {DEFAULT_ENDPOINT})")
    p.add_argument("--config", "-c", default=None,
                   help="read the endpoints (and the CURVE keys: manager.ctl_curve_secret_key_file, the daemon's "
                        "public key beside manager.curve_secret_key_file) from this daemon configuration")
    p.add_argument("--curve-key", default=None, metavar="FILE",
                   help="this client's CURVE key pair (a .key_secret file, mode 0600; its public .key must be in "
                        "the daemon's manager.curve_clients_dir)")
    p.add_argument("--server-key", default=None, metavar="KEY|FILE",
                   help="the daemon's CURVE public key: 40 Z85 characters or its .key file")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for an answer")
    p.add_argument("--json", action="store_true", help="print the raw JSON reply")
    sub = p.add_subparsers(dest="ctl_command", metavar="ACTION", required=True)
    s = sub.add_parser("status", help="table of VRs and instances (or one VR)")
    s.add_argument("vr", nargs="?")
    sub.add_parser("ping", help="is the daemon there?")
    s = sub.add_parser("activate", help="start controlling a VR at a setpoint")
    s.add_argument("vr")
    s.add_argument("setpoint", help="packets/s; suffix k for kp/s (e.g. 20k)")
    s.add_argument("--early-drop", action=argparse.BooleanOptionalAction, default=None,
                   help="drop the VR's excess at the host while it is capped below its offered load "
                        "(default: the daemon's daemon.early_drop); docs/guide/early-drop.md")
    for name, text in (("deactivate", "stop controlling a VR and restore its original cap"),
                       ("pause", "stop adjusting a VR's cap (it stays where it is)"),
                       ("resume", "adjust a paused VR's cap again")):
        s = sub.add_parser(name, help=text)
        s.add_argument("vr")
    s = sub.add_parser("setpoint", help="change an instance's setpoint on the fly")
    s.add_argument("vr")
    s.add_argument("setpoint", help="packets/s; suffix k for kp/s (e.g. 20k)")
    s = sub.add_parser("early-drop", help="switch a running instance's early drop on or off (docs/guide/early-drop.md)")
    s.add_argument("vr")
    s.add_argument("switch", choices=("on", "off", "default"), help="'default': the daemon's daemon.early_drop")
    s = sub.add_parser("vr-off", help="pause a VR's instance and turn the VR off (libvirt backend; "
                                      "the policer's last punishment, docs/guide/policer.md)")
    s.add_argument("vr")
    s.add_argument("--reason", default=None, help="why (kept in the daemon's log and state file)")
    s = sub.add_parser("vr-on", help="turn on a VR this daemon turned off (its instance stays paused: resume it)")
    s.add_argument("vr")
    s = sub.add_parser("watch", help="print the published samples (one line per VR and period)")
    s.add_argument("vr", nargs="?")
    s.add_argument("--pub-endpoint", default=None,
                   help=f"PUB endpoint (default: from --config, else {DEFAULT_PUB_ENDPOINT} unless --endpoint is given)")
    s.add_argument("--count", type=int, default=0, help="stop after this many samples (0 = never)")
    sub.add_parser("schema", help="print the manager API's JSON Schema")
    p.set_defaults(func=_cmd_ctl)


def _cmd_daemon(args: argparse.Namespace) -> int:
    from .service import run_daemon

    return run_daemon(args.config)


def _cmd_check_config(args: argparse.Namespace) -> int:

    from .config import ConfigError, load_config

    if not readable_or_report(args.file, "xtc check-config"):
        return CHECK_USAGE
    cfg = load_or_report(lambda: load_config(args.file), ConfigError, "xtc check-config")
    if cfg is None:
        return CHECK_INVALID
    if cfg.manager.curve_secret_key_file:
        try:
            check_server_files(cfg.manager.curve_secret_key_file, cfg.manager.curve_clients_dir or "")
        except CurveError as e:
            print(f"xtc check-config: {args.file}: manager.curve_secret_key_file/curve_clients_dir: {e}",
                  file=sys.stderr)
            return CHECK_INVALID
    if args.json:
        print(json.dumps(cfg.flat(), indent=1, default=_jsonable))
    else:
        print(f"{args.file}: OK (backend {cfg.daemon.backend}, period {cfg.daemon.control_period_s:g} s, "
              f"controller {cfg.controller.kind}, model {cfg.controller.model})")
    return CHECK_VALID


def _jsonable(value: object) -> object:
    """A configuration value json cannot write itself: a table of a list (``[[cgroup.vr]]``) as an
    object, a tuple or set as a list."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return list(value)  # type: ignore[call-overload]


def _ctl_curve(config: str | None, curve_key: str | None, server_key: str | None,
               daemon_secret: str | None) -> tuple[str | None, str | None]:
    """``xtc ctl``'s CURVE keys: (its .key_secret file, the daemon's Z85 public key), both None for
    a plain connection.  Every file is read and checked now (:class:`xtc.service.curve.CurveError`,
    a ValueError naming the file), so that a bad one stops the command before it connects."""
    if server_key is None and daemon_secret is not None:
        server_key = server_public_key(daemon_secret).decode()
    elif server_key is not None and len(server_key) != 40:
        server_key = load_public(server_key).decode()  # the name of a .key file
    elif server_key is not None and not z85_key(server_key.encode()):
        raise CurveError(f"--server-key {server_key!r} is not a CURVE public key (40 Z85 characters, as in the "
                         f"daemon's .key file)")
    if server_key is None and curve_key is None:
        return None, None
    if server_key is None:
        raise CurveError("--curve-key needs the daemon's public key: give --server-key, or --config with "
                         "manager.curve_secret_key_file")
    if curve_key is None:
        raise CurveError(f"the daemon uses CURVE{' (' + config + ': manager.curve_secret_key_file)' if config else ''}: "
                         f"give --curve-key FILE or set manager.ctl_curve_secret_key_file")
    load_secret(curve_key)
    return curve_key, server_key


def _cmd_ctl(args: argparse.Namespace) -> int:
    from .api import json_schema
    from .ctl import ManagerClient, ManagerError, format_table, watch_samples

    if args.ctl_command == "schema":
        print(json.dumps(json_schema(), indent=1))
        return 0
    endpoint, pub = args.endpoint, None
    curve_key, server_key, daemon_secret = args.curve_key, args.server_key, None
    if args.config:
        from .config import ConfigError, load_config

        try:
            cfg = load_config(args.config)
        except ConfigError as e:
            print(f"xtc ctl: {e}", file=sys.stderr)
            return 2
        endpoint = endpoint or cfg.manager.endpoint
        pub = cfg.manager.pub_endpoint
        curve_key = curve_key or cfg.manager.ctl_curve_secret_key_file
        daemon_secret = cfg.manager.curve_secret_key_file
    endpoint = endpoint or DEFAULT_ENDPOINT
    try:
        curve_key, server_key = _ctl_curve(args.config, curve_key, server_key, daemon_secret)
    except ValueError as e:  # CurveError
        print(f"xtc ctl: {e}", file=sys.stderr)
        return 2
    if args.ctl_command == "watch":
        pub = args.pub_endpoint or pub or (None if args.endpoint else DEFAULT_PUB_ENDPOINT)
        if not pub:
            print("xtc ctl watch: give --pub-endpoint or --config", file=sys.stderr)
            return 2
        n = 0
        try:
            for s in watch_samples(pub, args.vr, curve_secret_file=curve_key, server_key=server_key):
                print(json.dumps(s), flush=True)
                n += 1
                if args.count and n >= args.count:
                    break
        except ValueError as e:  # CurveError
            print(f"xtc ctl: {e}", file=sys.stderr)
            return 2
        return 0
    fields: dict = {}
    cmd = args.ctl_command
    if cmd == "status":
        cmd = "status" if args.vr else "list"
        if args.vr:
            fields["vr"] = args.vr
    elif cmd in ("activate", "deactivate", "pause", "resume", "setpoint"):
        fields["vr"] = args.vr
        if cmd in ("activate", "setpoint"):
            fields["setpoint_pps"] = parse_setpoint(args.setpoint)
        if cmd == "activate" and args.early_drop is not None:
            fields["early_drop"] = args.early_drop
    elif cmd in ("early-drop", "vr-off", "vr-on"):  # the policer's punishments, by hand (issue 48)
        fields["vr"] = args.vr
        if cmd == "early-drop" and args.switch != "default":
            fields["on"] = args.switch == "on"
        if cmd == "vr-off" and args.reason:
            fields["reason"] = args.reason
        cmd = cmd.replace("-", "_")
    with ManagerClient(endpoint, timeout_s=args.timeout, curve_secret_file=curve_key, server_key=server_key) as c:
        try:
            rep = c.request(cmd, **fields)
        except ManagerError as e:
            print(f"xtc ctl: {e}", file=sys.stderr)
            return 3
    if args.json:
        print(json.dumps(rep, indent=1))
    elif not rep.get("ok"):
        err = rep.get("error") or {}
        print(f"xtc ctl: refused ({err.get('code')}): {err.get('message')}", file=sys.stderr)
    elif cmd == "list":
        print(format_table(rep["result"]["vrs"]))
    elif cmd == "ping":
        print(f"daemon at {endpoint}: {rep['result']['instances']} instance(s)")
    else:
        print(format_table([rep["result"]]))
    return 0 if rep.get("ok") else 1
