"""``xtc policer``: serve the REST API, print its OpenAPI document, a small client, a load test.

Client commands talk to a running policer (``--url``, default http://127.0.0.1:8080) with the
token from ``--token-file`` or ``$XTC_POLICER_TOKEN``; they print the JSON answer.  An ``https://``
URL is verified against the system's CA certificates, or against ``--ca-file`` (``$XTC_POLICER_CA_FILE``)
for a policer with a certificate of a private CA (or a self-signed one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from xtc.service import commands
from xtc.service.cli import CHECK_INVALID, CHECK_USAGE, CHECK_VALID, load_or_report, parse_setpoint, readable_or_report
from xtc.service.curve import generate_keypair

__all__ = ["register"]

DEFAULT_URL = "http://127.0.0.1:8080"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("policer", help="the policing service (REST API over many hosts' daemons)")
    sub = p.add_subparsers(dest="policer_command", metavar="ACTION", required=True)

    s = sub.add_parser("serve", help="run the service (foreground)")
    s.add_argument("--config", "-c", help="TOML configuration (see policer/config.py)")
    s.add_argument("--host", help="override server.host")
    s.add_argument("--port", type=int, help="override server.port (0 = ephemeral)")
    s.add_argument("--db", help="override database.url (sqlite:///path or postgresql://user@/db?host=/socket/dir)")
    s.add_argument("--workers", type=int, help="override server.workers: API worker processes (1..64; the engine "
                   "stays one process)")
    s.add_argument("--access-log", action="store_true", help="log every request (never the headers)")
    s.set_defaults(func=_cmd_serve)

    s = sub.add_parser("check-config", help="validate a configuration file without starting")
    s.add_argument("file")
    s.add_argument("--json", action="store_true", help="print the validated configuration as JSON")
    s.set_defaults(func=_cmd_check)

    s = sub.add_parser("openapi", help="print the OpenAPI document (docs/policer-openapi.json)")
    s.set_defaults(func=_cmd_openapi)

    s = sub.add_parser("keygen", help="write a CURVE key pair (<name>.key, <name>.key_secret)")
    s.add_argument("directory")
    s.add_argument("name")
    s.add_argument("--force", action="store_true", help="replace an existing key pair of that name")
    s.set_defaults(func=_cmd_keygen)

    _register_entry_points(sub)

    def client(name: str, help_: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help_)
        c.add_argument("--url", default=os.environ.get("XTC_POLICER_URL", DEFAULT_URL))
        c.add_argument("--token-file", help="file holding the bearer token (else $XTC_POLICER_TOKEN)")
        c.add_argument("--ca-file", default=os.environ.get("XTC_POLICER_CA_FILE") or None,
                       help="PEM CA certificate(s) to verify an https:// policer with, instead of the system's "
                            "(else $XTC_POLICER_CA_FILE)")
        c.set_defaults(func=_cmd_client, op=name)
        return c

    c = client("routers", "list routers")
    c = client("router-add", "register a router")
    c.add_argument("name")
    c.add_argument("endpoint", help="the daemon's manager endpoint, tcp://host:port")
    c.add_argument("capacity_pps", type=float, help="the host's forwarding capacity, packets/s")
    c.add_argument("--mode", choices=("auto", "on", "off"), default="auto")
    c.add_argument("--curve-server-key", help="the daemon's CURVE public key (Z85, 40 characters)")
    c = client("router-rm", "mark a router removed")
    c.add_argument("name")
    c = client("router-mode", "set a router's control mode")
    c.add_argument("name")
    c.add_argument("mode", choices=("auto", "on", "off"))
    c = client("vrs", "list VRs")
    c.add_argument("--router")
    c.add_argument("--network")
    c = client("network-add", "create a virtual network")
    c.add_argument("name")
    c.add_argument("--description", default="")
    c = client("networks", "list networks")
    c = client("sla", "set a network's SLA")
    c.add_argument("network")
    c.add_argument("--min", type=float, default=0.0, dest="min_pps", help="guaranteed minimum, packets/s")
    c.add_argument("--max", type=float, default=1e10, dest="max_pps", help="maximum, packets/s")
    c.add_argument("--weight", type=float, default=1.0)
    c = client("vr-off", "enable or disable turning a network's misbehaving VRs off (the ladder's last resort)")
    c.add_argument("network")
    c.add_argument("switch", choices=("on", "off"))
    c = client("assign", "put a VR in a network")
    c.add_argument("router")
    c.add_argument("vr")
    c.add_argument("network", help="network name, or '-' for none")
    c = client("setpoint", "set (or with '-' clear) a VR's manual setpoint")
    c.add_argument("router")
    c.add_argument("vr")
    c.add_argument("setpoint", help="packets/s (suffix k for kp/s), or '-' to clear")
    c = client("setpoints", "list setpoints")
    c = client("policies", "show the policies")
    c = client("policy", "change one policy: NAME key=value ...")
    c.add_argument("name", choices=("activation", "allocation", "misbehaviour"))
    c.add_argument("values", nargs="*", help="key=value (JSON values), e.g. enabled=false hold_s=5")
    c = client("actions", "the audit log")
    c.add_argument("--router")
    c.add_argument("--vr")
    c.add_argument("--kind")
    c.add_argument("--after-id", type=int, default=0)
    c.add_argument("--limit", type=int, default=100)


ENTRY_POINT_GROUP = "xtc.policer_commands"


def _register_entry_points(sub: argparse._SubParsersAction) -> None:
    """Actions that other distributions add under ``xtc policer`` (group ``xtc.policer_commands``: the
    testbed's ``bench``), loaded as :mod:`xtc.cli` loads ``xtc.commands``, only when one may run."""
    argv = commands.ARGV or []
    if argv[:1] == ["policer"] and len(argv) > 1 and not argv[1].startswith("-") \
            and argv[1] not in commands.LAB_COMMANDS[ENTRY_POINT_GROUP]:
        return  # a built-in action runs: the testbed's are not loaded
    commands.register_entry_points(sub, ENTRY_POINT_GROUP, ("policer",))


def _cmd_serve(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .config import PolicerConfigError, PolicerConfig, load_config, loads_config
    from .service import run_server
    from .store import StoreError, parse_db_url

    try:
        cfg = load_config(args.config) if args.config else loads_config("")
        if args.db:
            parse_db_url(args.db)
            cfg = replace(cfg, db_url=args.db)
    except (PolicerConfigError, StoreError) as e:
        print(f"xtc policer: {e}", file=sys.stderr)
        return 2
    if args.host:
        cfg = replace(cfg, host=args.host)
    if args.port is not None:
        cfg = replace(cfg, port=args.port)
    if args.workers is not None:
        from .config import MAX_WORKERS

        if not 1 <= args.workers <= MAX_WORKERS:
            print(f"xtc policer: --workers must be 1..{MAX_WORKERS}, not {args.workers}", file=sys.stderr)
            return 2
        cfg = replace(cfg, workers=args.workers)
    assert isinstance(cfg, PolicerConfig)
    return run_server(cfg, access_log=args.access_log)


def _cmd_check(args: argparse.Namespace) -> int:

    from .config import PolicerConfigError, load_config

    prog = "xtc policer check-config"
    if not readable_or_report(args.file, prog):
        return CHECK_USAGE
    cfg = load_or_report(lambda: load_config(args.file), PolicerConfigError, prog)
    if cfg is None:
        return CHECK_INVALID
    if args.json:
        print(json.dumps(cfg.describe()))
    else:
        print(f"{args.file}: OK")
    return CHECK_VALID


def _cmd_openapi(_args: argparse.Namespace) -> int:
    from .api import openapi_document

    print(json.dumps(openapi_document(), indent=1, sort_keys=True))
    return 0


def _cmd_keygen(args: argparse.Namespace) -> int:
    from pathlib import Path

    d = Path(args.directory)
    pair = [d / f"{args.name}.key", d / f"{args.name}.key_secret"]
    existing = [str(p) for p in pair if p.exists() or p.is_symlink()]
    if existing and not args.force:
        print(f"xtc policer keygen: {', '.join(existing)} already exist(s); --force replaces the key pair",
              file=sys.stderr)
        return 1
    for p in pair:  # never write a secret into an old file (its mode, its other links)
        p.unlink(missing_ok=True)
    old = os.umask(0o077)  # the secret file is private from its creation
    try:
        pub, sec = generate_keypair(d, args.name)
    finally:
        os.umask(old)
    pub.chmod(0o644)
    print(json.dumps({"public": str(pub), "secret": str(sec), "public_key": pub.read_text().split('public-key = "')[1][:40]}))
    return 0


def _request(op: str, a: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]:
    """(method, path, query, body) of a client command."""
    if op == "routers":
        return "GET", "/routers", None, None
    if op == "router-add":
        body = {"name": a.name, "endpoint": a.endpoint, "capacity_pps": a.capacity_pps, "control_mode": a.mode}
        if a.curve_server_key:
            body["curve_server_key"] = a.curve_server_key
        return "POST", "/routers", None, body
    if op == "router-rm":
        return "DELETE", f"/routers/{a.name}", None, None
    if op == "router-mode":
        return "PATCH", f"/routers/{a.name}", None, {"control_mode": a.mode}
    if op == "vrs":
        return "GET", "/vrs", {k: v for k, v in (("router", a.router), ("network", a.network)) if v}, None
    if op == "network-add":
        return "POST", "/networks", None, {"name": a.name, "description": a.description}
    if op == "networks":
        return "GET", "/networks", None, None
    if op == "vr-off":
        return "PUT", f"/networks/{a.network}/vr-off", None, {"enabled": a.switch == "on"}
    if op == "sla":
        return "PUT", f"/networks/{a.network}/sla", None, {"min_pps": a.min_pps, "max_pps": a.max_pps, "weight": a.weight}
    if op == "assign":
        return "PUT", f"/vrs/{a.router}/{a.vr}/network", None, {"network": None if a.network == "-" else a.network}
    if op == "setpoint":
        if a.setpoint == "-":
            return "DELETE", f"/vrs/{a.router}/{a.vr}/setpoint", None, None
        return "PUT", f"/vrs/{a.router}/{a.vr}/setpoint", None, {"setpoint_pps": parse_setpoint(a.setpoint, "xtc policer")}
    if op == "setpoints":
        return "GET", "/setpoints", None, None
    if op == "policies":
        return "GET", "/policies", None, None
    if op == "policy":
        return "PUT", f"/policies/{a.name}", None, None  # body filled in by _cmd_client
    if op == "actions":
        q = {k: v for k, v in (("router", a.router), ("vr", a.vr), ("kind", a.kind)) if v}
        return "GET", "/actions", {**q, "after_id": a.after_id, "limit": a.limit}, None
    raise SystemExit(f"unknown operation {op}")  # pragma: no cover


def _cmd_client(args: argparse.Namespace) -> int:
    import httpx

    token = os.environ.get("XTC_POLICER_TOKEN")
    if args.token_file:
        try:
            token = open(args.token_file, encoding="utf-8").read().strip()
        except OSError as e:
            print(f"xtc policer: cannot read {args.token_file}: {e.strerror}", file=sys.stderr)
            return 2
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    verify: Any = True
    if args.ca_file:
        import ssl

        try:
            verify = ssl.create_default_context(cafile=args.ca_file)
        except OSError as e:
            print(f"xtc policer: --ca-file: cannot read {args.ca_file}: {e.strerror}", file=sys.stderr)
            return 2
        except ssl.SSLError as e:
            print(f"xtc policer: --ca-file: {args.ca_file} holds no valid PEM certificate ({e})", file=sys.stderr)
            return 2
    method, path, query, body = _request(args.op, args)
    with httpx.Client(base_url=args.url, headers=headers, timeout=10.0, verify=verify) as c:
        try:
            if args.op == "policy":
                body = c.get("/policies").raise_for_status().json()[args.name]
                for kv in args.values:
                    k, _, v = kv.partition("=")
                    try:
                        body[k] = json.loads(v)
                    except ValueError:
                        body[k] = v
            r = c.request(method, path, params=query, json=body)
        except httpx.HTTPError as e:
            print(f"xtc policer: {args.url}: {e}", file=sys.stderr)
            return 3
    if r.status_code == 204:
        return 0
    try:
        print(json.dumps(r.json(), indent=1))
    except ValueError:
        print(r.text)
    return 0 if r.is_success else 1
