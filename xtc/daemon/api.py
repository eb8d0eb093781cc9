"""The manager API's message schema (version 1): requests, replies and published samples.

Transport (see docs/manager-api.md): a ZeroMQ REP socket takes one JSON object per request and
answers with one JSON object; a PUB socket publishes one two-frame message per VR and control
period, ``[b"sample.<vr>", <json>]``.  Everything here is pure: bytes in, dataclasses or bytes out.

Request::

    {"v": 1, "cmd": "activate", "vr": "vr1", "setpoint_pps": 20000.0, "id": "optional echo"}

Reply::

    {"v": 1, "id": ..., "ok": true, "result": {...}}
    {"v": 1, "id": ..., "ok": false, "error": {"code": "unknown_vr", "message": "..."}}

:func:`parse_request` validates a request completely or raises :class:`ApiError` (with an error
``code`` from :data:`ERROR_CODES` and a message naming the problem).  :data:`COMMANDS` is the
machine-readable table of commands and their fields; :func:`json_schema` turns it into a JSON
Schema (draft 2020-12), committed as docs/manager-api.schema.json.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = [
    "API_VERSION",
    "COMMANDS",
    "ERROR_CODES",
    "ApiError",
    "Request",
    "parse_request",
    "ok_reply",
    "error_reply",
    "encode",
    "sample_message",
    "json_schema",
    "SAMPLE_TOPIC_PREFIX",
]

API_VERSION = 1
SAMPLE_TOPIC_PREFIX = "sample."
MAX_VR_NAME = 64
MAX_ID_CHARS = 128

#: Commands and their fields: name -> {field: (json type, required, description)}.
COMMANDS: dict[str, dict[str, tuple[str, bool, str]]] = {
    "ping": {},
    "list": {},
    "status": {"vr": ("vr", True, "the VR to describe")},
    "activate": {
        "vr": ("vr", True, "the VR to control"),
        "setpoint_pps": ("setpoint", True, "packets/s the VR should forward, summed over its interfaces"),
    },
    "pause": {"vr": ("vr", True, "stop adjusting the cap; the cap stays where it is")},
    "resume": {"vr": ("vr", True, "start adjusting again, bumpless from the current cap")},
    "deactivate": {"vr": ("vr", True, "stop controlling and restore the VR's original cap")},
    "setpoint": {
        "vr": ("vr", True, "an active or paused VR"),
        "setpoint_pps": ("setpoint", True, "the new setpoint, packets/s"),
    },
}

#: Error codes a reply may carry.
ERROR_CODES = {
    "too_large": "the message exceeds the maximum size",
    "bad_json": "the message is not a UTF-8 JSON object",
    "bad_version": "the 'v' field is missing or not a supported version",
    "unknown_command": "the 'cmd' field names no command",
    "bad_field": "a field is missing, unknown, of the wrong type or out of range",
    "unknown_vr": "no VR of that name",
    "bad_state": "the command does not apply to the instance's state",
    "backend": "the backend (hypervisor, cgroups, simulator) failed; nothing was changed",
    "internal": "an unexpected error; nothing was changed",
}


class ApiError(Exception):
    """A request is refused.  ``code`` is one of :data:`ERROR_CODES`."""

    def __init__(self, code: str, message: str):
        assert code in ERROR_CODES, code
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True)
class Request:
    """A validated request.  ``setpoint_pps`` is set only for commands that take it."""

    cmd: str
    vr: str | None = None
    setpoint_pps: float | None = None
    id: str | int | None = None


def _check_id(v: Any) -> str | int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise ApiError("bad_field", f"'id' must be a string or an integer, got {type(v).__name__}")
    if isinstance(v, str) and len(v) > MAX_ID_CHARS:
        raise ApiError("bad_field", f"'id' must be at most {MAX_ID_CHARS} characters")
    if isinstance(v, int) and not (-(2**63) <= v < 2**63):
        raise ApiError("bad_field", "'id' integer out of the 64-bit range")
    return v


def _check_vr(v: Any) -> str:
    if not isinstance(v, str):
        raise ApiError("bad_field", f"'vr' must be a string, got {type(v).__name__}")
    if not v or len(v) > MAX_VR_NAME:
        raise ApiError("bad_field", f"'vr' must be 1..{MAX_VR_NAME} characters")
    return v


def _check_setpoint(v: Any, max_setpoint_pps: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ApiError("bad_field", f"'setpoint_pps' must be a number (packets/s), got {type(v).__name__}")
    try:
        f = float(v)
    except OverflowError:
        raise ApiError("bad_field", f"'setpoint_pps' must be at most {max_setpoint_pps:g} packets/s") from None
    if not math.isfinite(f):
        raise ApiError("bad_field", f"'setpoint_pps' must be finite, got {f}")
    if f <= 0:
        raise ApiError("bad_field", f"'setpoint_pps' must be > 0 packets/s, got {f:g}")
    if f > max_setpoint_pps:
        raise ApiError("bad_field", f"'setpoint_pps' must be at most {max_setpoint_pps:g} packets/s, got {f:g}")
    return f


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_request(raw: bytes, max_bytes: int, max_setpoint_pps: float) -> Request:
    """Validate one request message.

    Parameters
    ----------
    raw : bytes
        The message as received.
    max_bytes : int
        Largest accepted message, bytes.
    max_setpoint_pps : float
        Largest accepted setpoint, packets/s.

    Returns
    -------
    Request

    Raises
    ------
    ApiError
        With a code from :data:`ERROR_CODES` and a message naming the problem.
    """
    if len(raw) > max_bytes:
        raise ApiError("too_large", f"message of {len(raw)} bytes exceeds the maximum of {max_bytes}")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ApiError("bad_json", f"not valid UTF-8 JSON: {str(e)[:200]}") from None
    if not isinstance(doc, dict):
        raise ApiError("bad_json", f"must be a JSON object, got {type(doc).__name__}")
    rid = _check_id(doc.get("id"))
    try:
        if "v" not in doc:
            raise ApiError("bad_version", f"missing 'v' (the API version, {API_VERSION})")
        v = doc["v"]
        if isinstance(v, bool) or v != API_VERSION:
            raise ApiError("bad_version", f"'v' must be {API_VERSION}, got {v!r}"[:200])
        if "cmd" not in doc:
            raise ApiError("unknown_command", "missing 'cmd'")
        cmd = doc["cmd"]
        if not isinstance(cmd, str) or cmd not in COMMANDS:
            shown = repr(cmd)[:64]
            raise ApiError("unknown_command", f"unknown command {shown} (known: {', '.join(COMMANDS)})")
        spec = COMMANDS[cmd]
        extra = sorted(set(doc) - {"v", "cmd", "id"} - set(spec))
        if extra:
            raise ApiError("bad_field", f"unknown field {extra[0][:64]!r} for command '{cmd}'")
        for name, (_, required, _) in spec.items():
            if required and name not in doc:
                raise ApiError("bad_field", f"missing field '{name}' for command '{cmd}'")
        vr = _check_vr(doc["vr"]) if "vr" in spec else None
        sp = _check_setpoint(doc["setpoint_pps"], max_setpoint_pps) if "setpoint_pps" in spec else None
    except ApiError as e:
        e.request_id = rid  # type: ignore[attr-defined]
        raise
    return Request(cmd=cmd, vr=vr, setpoint_pps=sp, id=rid)


def encode(doc: Mapping[str, Any]) -> bytes:
    """Serialise a reply or sample (NaN and infinities are written as null)."""
    try:
        # Almost every document is finite: encode it as it is (the same bytes as below).
        return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except ValueError:
        return json.dumps(_finite(doc), separators=(",", ":"), allow_nan=False).encode("utf-8")


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def ok_reply(result: Mapping[str, Any], request_id: str | int | None = None) -> bytes:
    """A success reply."""
    return encode({"v": API_VERSION, "id": request_id, "ok": True, "result": dict(result)})


def error_reply(err: ApiError, request_id: str | int | None = None) -> bytes:
    """An error reply."""
    rid = request_id if request_id is not None else getattr(err, "request_id", None)
    return encode({"v": API_VERSION, "id": rid, "ok": False, "error": {"code": err.code, "message": err.message}})


def sample_message(sample: Mapping[str, Any]) -> list[bytes]:
    """The two frames of a published per-VR sample: topic ``sample.<vr>`` and the JSON body."""
    return [f"{SAMPLE_TOPIC_PREFIX}{sample['vr']}".encode(), encode({"v": API_VERSION, **sample})]


# ------------------------------------------------------------------------------ machine-readable

_INSTANCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One VR and its XTC instance. Rates in packets/s, caps in percent of one CPU.",
    "required": ["vr", "state", "setpoint_pps", "measured_pps", "offered_pps", "cap_percent", "original_cap_percent"],
    "properties": {
        "vr": {"type": "string"},
        "state": {"enum": ["inactive", "active", "paused"]},
        "present": {"type": "boolean", "description": "the backend currently sees the VR"},
        "setpoint_pps": {"type": ["number", "null"]},
        "measured_pps": {"type": ["number", "null"], "description": "forwarded packets/s over the last period"},
        "offered_pps": {"type": ["number", "null"], "description": "packets/s offered to the VR over the last period"},
        "cap_percent": {"type": ["number", "null"], "description": "current cap; null = unlimited or unknown"},
        "original_cap_percent": {"type": ["number", "null"], "description": "cap to restore; null = unlimited"},
        "original_record": {
            "type": ["object", "null"],
            "description": "the backend's exact record of the setting to restore (e.g. raw vcpu_quota and vcpu_period); null = none kept",
        },
        "actuation_error": {"type": ["string", "null"]},
    },
}


def json_schema() -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of requests, replies and samples, built from :data:`COMMANDS`."""
    field_types = {
        "vr": {"type": "string", "minLength": 1, "maxLength": MAX_VR_NAME},
        "setpoint": {"type": "number", "exclusiveMinimum": 0, "description": "packets/s"},
    }
    variants = []
    for cmd, spec in COMMANDS.items():
        props: dict[str, Any] = {
            "v": {"const": API_VERSION},
            "cmd": {"const": cmd},
            "id": {"type": ["string", "integer"]},
        }
        for name, (typ, _, desc) in spec.items():
            props[name] = {**field_types[typ], "description": desc}
        variants.append(
            {
                "type": "object",
                "title": cmd,
                "required": ["v", "cmd", *[n for n, (_, req, _) in spec.items() if req]],
                "properties": props,
                "additionalProperties": False,
            }
        )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://xtc.example/manager-api/v1.json",
        "title": f"XTC daemon manager API, version {API_VERSION}",
        "$defs": {
            "request": {"oneOf": variants},
            "reply": {
                "type": "object",
                "required": ["v", "id", "ok"],
                "properties": {
                    "v": {"const": API_VERSION},
                    "id": {"type": ["string", "integer", "null"]},
                    "ok": {"type": "boolean"},
                    "result": {"type": "object"},
                    "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {"code": {"enum": list(ERROR_CODES)}, "message": {"type": "string"}},
                    },
                },
            },
            "instance": _INSTANCE_SCHEMA,
            "sample": {
                **_INSTANCE_SCHEMA,
                "description": "Published on the PUB socket under topic 'sample.<vr>' once per control period.",
                "required": [*_INSTANCE_SCHEMA["required"], "v", "t_unix_s", "period_s"],
                "properties": {
                    **_INSTANCE_SCHEMA["properties"],
                    "v": {"const": API_VERSION},
                    "t_unix_s": {"type": "number", "description": "wall-clock time of the sample, seconds"},
                    "period_s": {"type": "number", "description": "length of the period measured, seconds"},
                },
            },
        },
    }
